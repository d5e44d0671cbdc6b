//! The API's connection record, typed: product, API id, metadata and timestamps next to
//! the engine's descriptor fields (type, TLS mode and material typed by the engine).
//! Stores keep the host part in the descriptor's `host_attributes` (the engine's opaque
//! extension of a record); this module is the one codec between the two, so no other
//! layer reads those keys.

use std::collections::BTreeMap;

use fetcher_engine::{ConnectionDescriptor, DatasourceType, Timestamp, TlsMaterial, TlsMode};
use serde_json::{Map, Value};

/// Host-attribute keys of the record: read and written only by [`ConnectionRecord`].
mod attr {
    pub const ID: &str = "id";
    pub const PRODUCT: &str = "productName";
    pub const METADATA: &str = "metadata";
    pub const CREATED_AT: &str = "createdAt";
    pub const UPDATED_AT: &str = "updatedAt";
}

/// A connection's TLS settings (docs/datasources.md, "TLS").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SslSettings {
    /// One of the type's modes (checked against it by the API before a store sees it).
    pub mode: TlsMode,
    /// The tenant CA (PEM); empty for none.
    pub ca: String,
    /// The client certificate (PEM), if any.
    pub cert: Option<String>,
}

/// The API's connection record (docs/api.md, "Connections").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionRecord {
    /// The API identity (`{id}` in the routes). Empty for an internal datasource.
    pub id: String,
    /// The owning product; empty for a legacy (unassigned) record.
    pub product: String,
    pub config_name: String,
    pub datasource_type: DatasourceType,
    pub host: String,
    pub port: u16,
    pub database_name: String,
    pub schema: String,
    pub username: String,
    pub ssl: Option<SslSettings>,
    pub metadata: Option<Map<String, Value>>,
    /// RFC 3339, as stored.
    pub created_at: String,
    pub updated_at: String,
    pub key_version: String,
    /// Host attributes this codec does not own (another host's), kept as they are.
    pub other: BTreeMap<String, Value>,
}

fn attr_str(d: &ConnectionDescriptor, key: &str) -> String {
    d.host_attributes
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

impl ConnectionRecord {
    /// Decodes a stored descriptor.
    pub fn from_descriptor(d: &ConnectionDescriptor) -> ConnectionRecord {
        let mut other = d.host_attributes.clone();
        for k in [
            attr::ID,
            attr::PRODUCT,
            attr::METADATA,
            attr::CREATED_AT,
            attr::UPDATED_AT,
        ] {
            other.remove(k);
        }
        let id = match attr_str(d, attr::ID) {
            s if s.is_empty() => d.id.clone(),
            s => s,
        };
        let ssl = (!d.ssl_mode.is_default()).then(|| SslSettings {
            mode: d.ssl_mode,
            ca: d.tls.root_cert.clone().unwrap_or_default(),
            cert: d.tls.client_cert.clone(),
        });
        ConnectionRecord {
            id,
            product: attr_str(d, attr::PRODUCT),
            config_name: d.config_name.clone(),
            datasource_type: d.datasource_type,
            host: d.host.clone(),
            port: d.port,
            database_name: d.database_name.clone(),
            schema: d.schema.clone(),
            username: d.username.clone(),
            ssl,
            metadata: d
                .host_attributes
                .get(attr::METADATA)
                .and_then(Value::as_object)
                .cloned(),
            created_at: attr_str(d, attr::CREATED_AT),
            updated_at: attr_str(d, attr::UPDATED_AT),
            key_version: d.key_version.clone(),
            other,
        }
    }

    /// Encodes the record for a store (and the engine's connectors).
    pub fn descriptor(&self) -> ConnectionDescriptor {
        ConnectionDescriptor {
            id: self.id.clone(),
            config_name: self.config_name.clone(),
            datasource_type: self.datasource_type,
            host: self.host.clone(),
            port: self.port,
            database_name: self.database_name.clone(),
            schema: self.schema.clone(),
            username: self.username.clone(),
            ssl_mode: self.ssl.as_ref().map(|s| s.mode).unwrap_or_default(),
            tls: self
                .ssl
                .as_ref()
                .map(|s| TlsMaterial {
                    root_cert: Some(s.ca.clone()).filter(|c| !c.is_empty()),
                    client_cert: s.cert.clone(),
                })
                .unwrap_or_default(),
            key_version: self.key_version.clone(),
            host_attributes: self.attributes(),
        }
    }

    fn attributes(&self) -> BTreeMap<String, Value> {
        let mut a = self.other.clone();
        a.insert(attr::ID.into(), Value::String(self.id.clone()));
        if !self.product.is_empty() {
            a.insert(attr::PRODUCT.into(), Value::String(self.product.clone()));
        }
        if let Some(m) = self.metadata.as_ref().filter(|m| !m.is_empty()) {
            a.insert(attr::METADATA.into(), Value::Object(m.clone()));
        }
        a.insert(
            attr::CREATED_AT.into(),
            Value::String(self.created_at.clone()),
        );
        a.insert(
            attr::UPDATED_AT.into(),
            Value::String(self.updated_at.clone()),
        );
        a
    }

    /// Whether the stored record carries an API identity (internal datasources, seeded
    /// by the platform, do not).
    pub fn has_api_identity(d: &ConnectionDescriptor) -> bool {
        d.host_attributes.contains_key(attr::ID)
    }

    /// The product owning a stored record, without decoding the rest.
    pub fn product_of(d: &ConnectionDescriptor) -> &str {
        d.host_attributes
            .get(attr::PRODUCT)
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `created_at` as Unix seconds (`i64::MIN` when unset or unreadable: it sorts
    /// first and falls outside every date window).
    pub fn created_unix(&self) -> i64 {
        Timestamp::parse(&self.created_at)
            .map(|t| t.unix_nanos().div_euclid(1_000_000_000) as i64)
            .unwrap_or(i64::MIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_descriptor() {
        let mut metadata = Map::new();
        metadata.insert("team".into(), "growth".into());
        let r = ConnectionRecord {
            id: "c-1".into(),
            product: "crm".into(),
            config_name: "ledger".into(),
            datasource_type: fetcher_engine::DatasourceType::Postgresql,
            host: "db".into(),
            port: 5432,
            database_name: "ledger".into(),
            username: "reader".into(),
            ssl: Some(SslSettings {
                mode: TlsMode::VerifyFull,
                ca: "PEM".into(),
                cert: Some("CERT".into()),
            }),
            metadata: Some(metadata),
            created_at: "2026-01-02T03:04:05Z".into(),
            updated_at: "2026-01-02T03:04:05Z".into(),
            ..Default::default()
        };
        let d = r.descriptor();
        assert_eq!(d.tls.root_cert.as_deref(), Some("PEM"));
        assert_eq!(d.tls.client_cert.as_deref(), Some("CERT"));
        assert!(!d.host_attributes.contains_key("sslRootCert"));
        assert_eq!(ConnectionRecord::from_descriptor(&d), r);
        assert_eq!(ConnectionRecord::product_of(&d), "crm");
        assert!(ConnectionRecord::has_api_identity(&d));
        assert_eq!(r.created_unix(), 1_767_323_045);
        // Attributes it does not own survive a round trip.
        let mut d2 = d.clone();
        d2.host_attributes.insert("other".into(), 1.into());
        let again = ConnectionRecord::from_descriptor(&d2).descriptor();
        assert_eq!(again.host_attributes["other"], 1);
    }
}
