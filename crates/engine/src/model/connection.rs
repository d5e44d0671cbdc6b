//! Connections as the engine sees them: the input with its secret, the stored descriptor
//! (no secret), the protected credential, patches, lists and test results (docs/engine.md,
//! "Connections"). JSON names are camelCase.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::datasource::{DatasourceType, TlsMode};
use crate::secret::Secret;

/// Opaque host data carried input → descriptor → store → back; never read, never
/// serialized by the engine.
pub type HostAttributes = BTreeMap<String, serde_json::Value>;

/// A connection's TLS material beside its mode (docs/datasources.md, "TLS modes"): PEM
/// text, public by nature (a private key is never stored). Stored with the descriptor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsMaterial {
    /// The tenant's CA bundle: certificate chains are verified against it instead of the
    /// bundled Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_cert: Option<String>,
    /// A client certificate, kept as given; no connector here presents one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<String>,
}

impl TlsMaterial {
    pub fn is_empty(&self) -> bool {
        self.root_cert.is_none() && self.client_cert.is_none()
    }

    /// The CA bundle, when it holds anything but white space.
    pub fn root_cert_pem(&self) -> Option<&[u8]> {
        self.root_cert
            .as_deref()
            .filter(|p| !p.trim().is_empty())
            .map(str::as_bytes)
    }
}

/// Host-attribute keys under which records written before [`TlsMaterial`] existed keep
/// their TLS material; [`ConnectionDescriptor::lift_legacy_tls`] moves it.
const LEGACY_ROOT_CERT: &str = "sslRootCert";
const LEGACY_CLIENT_CERT: &str = "sslCert";

/// A connection definition with its secret. Every rendering redacts the password.
#[derive(Clone, Default)]
pub struct ConnectionInput {
    pub config_name: String,
    pub datasource_type: DatasourceType,
    pub host: String,
    pub port: u16,
    pub database_name: String,
    pub schema: String,
    pub username: String,
    pub ssl_mode: TlsMode,
    pub tls: TlsMaterial,
    pub host_attributes: HostAttributes,
    /// The host's identity for the new record (opaque to the engine; empty for none):
    /// copied to the created descriptor's `id`.
    pub id: String,
    /// The secret. [`Secret`] is redacted in every rendering and readable only through
    /// [`Secret::expose`].
    pub password: Secret,
}

impl ConnectionInput {
    pub fn with_password(mut self, password: impl Into<Secret>) -> Self {
        self.password = password.into();
        self
    }

    pub fn password(&self) -> &Secret {
        &self.password
    }

    pub fn has_password(&self) -> bool {
        !self.password.is_empty()
    }

    fn redacted(&self) -> &'static str {
        if self.has_password() {
            "[REDACTED]"
        } else {
            ""
        }
    }
}

impl fmt::Display for ConnectionInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConnectionInput{{configName:{:?} type:{:?} host:{:?} port:{} database:{:?} schema:{:?} username:{:?} sslMode:{:?} password:{}}}",
            self.config_name,
            self.datasource_type.as_str(),
            self.host,
            self.port,
            self.database_name,
            self.schema,
            self.username,
            self.ssl_mode.as_str(),
            self.redacted()
        )
    }
}

impl fmt::Debug for ConnectionInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for ConnectionInput {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Redacted<'a> {
            config_name: &'a str,
            #[serde(rename = "type")]
            datasource_type: DatasourceType,
            host: &'a str,
            port: u16,
            database_name: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            schema: &'a str,
            user_name: &'a str,
            #[serde(skip_serializing_if = "TlsMode::is_default")]
            ssl_mode: TlsMode,
            password: &'a str,
        }
        Redacted {
            config_name: &self.config_name,
            datasource_type: self.datasource_type,
            host: &self.host,
            port: self.port,
            database_name: &self.database_name,
            schema: &self.schema,
            user_name: &self.username,
            ssl_mode: self.ssl_mode,
            password: self.redacted(),
        }
        .serialize(s)
    }
}

/// A connection without any secret: what the engine returns and stores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionDescriptor {
    /// Opaque host identity; the engine never parses it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub config_name: String,
    #[serde(rename = "type")]
    pub datasource_type: DatasourceType,
    pub host: String,
    pub port: u16,
    pub database_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schema: String,
    #[serde(rename = "userName")]
    pub username: String,
    #[serde(default, skip_serializing_if = "TlsMode::is_default")]
    pub ssl_mode: TlsMode,
    #[serde(default, skip_serializing_if = "TlsMaterial::is_empty")]
    pub tls: TlsMaterial,
    /// Label of the key that protected the stored secret. The reference types this as an
    /// integer; the product records a free-form label, so it is text here. Empty means no
    /// protected secret (an internal datasource, or one without a password).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_version: String,
    #[serde(skip)]
    pub host_attributes: HostAttributes,
}

impl ConnectionDescriptor {
    /// A record stored before TLS material was typed kept it in host attributes
    /// (`sslRootCert`, `sslCert`): moved into [`ConnectionDescriptor::tls`], so a store
    /// decoding old records hands out the typed form only.
    pub fn lift_legacy_tls(&mut self) {
        let mut take = |key: &str| match self.host_attributes.remove(key) {
            Some(serde_json::Value::String(pem)) if !pem.is_empty() => Some(pem),
            _ => None,
        };
        let (root, client) = (take(LEGACY_ROOT_CERT), take(LEGACY_CLIENT_CERT));
        if self.tls.root_cert.is_none() {
            self.tls.root_cert = root;
        }
        if self.tls.client_cert.is_none() {
            self.tls.client_cert = client;
        }
    }

    /// Every non-secret field plus host attributes and identity; `key_version` stays
    /// empty.
    pub fn from_input(input: &ConnectionInput) -> Self {
        ConnectionDescriptor {
            id: input.id.clone(),
            config_name: input.config_name.clone(),
            datasource_type: input.datasource_type,
            host: input.host.clone(),
            port: input.port,
            database_name: input.database_name.clone(),
            schema: input.schema.clone(),
            username: input.username.clone(),
            ssl_mode: input.ssl_mode,
            tls: input.tls.clone(),
            key_version: String::new(),
            host_attributes: input.host_attributes.clone(),
        }
    }
}

/// A protected secret on its way to the connection store. Never returned, never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct ProtectedCredential {
    pub ciphertext: Vec<u8>,
    pub key_version: String,
}

impl fmt::Debug for ProtectedCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ProtectedCredential{{ciphertext:[{} bytes] keyVersion:{:?}}}",
            self.ciphertext.len(),
            self.key_version
        )
    }
}

/// A partial update. The config name cannot be patched.
#[derive(Clone, Default)]
pub struct ConnectionPatch {
    pub datasource_type: Option<DatasourceType>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub database_name: Option<String>,
    pub schema: Option<String>,
    pub username: Option<String>,
    pub ssl_mode: Option<TlsMode>,
    /// Present: replaces the TLS material.
    pub tls: Option<TlsMaterial>,
    /// Present: replaces the whole map.
    pub host_attributes: Option<HostAttributes>,
    /// A new password; `Some("")` still counts as a password change.
    pub password: Option<Secret>,
}

impl ConnectionPatch {
    /// A copy carrying a new password. Even an empty one counts as "has a password".
    pub fn with_password(mut self, password: impl Into<Secret>) -> Self {
        self.password = Some(password.into());
        self
    }

    pub fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Applies present fields to a copy of `current` (config name, id and key version kept).
    pub fn apply(&self, current: &ConnectionDescriptor) -> ConnectionDescriptor {
        let mut d = current.clone();
        let set = |dst: &mut String, src: &Option<String>| {
            if let Some(v) = src {
                dst.clone_from(v);
            }
        };
        if let Some(t) = self.datasource_type {
            d.datasource_type = t;
        }
        set(&mut d.host, &self.host);
        if let Some(p) = self.port {
            d.port = p;
        }
        set(&mut d.database_name, &self.database_name);
        set(&mut d.schema, &self.schema);
        set(&mut d.username, &self.username);
        if let Some(m) = self.ssl_mode {
            d.ssl_mode = m;
        }
        if let Some(t) = &self.tls {
            d.tls = t.clone();
        }
        if let Some(h) = &self.host_attributes {
            d.host_attributes = h.clone();
        }
        d
    }
}

impl fmt::Debug for ConnectionPatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionPatch")
            .field("type", &self.datasource_type)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("databaseName", &self.database_name)
            .field("schema", &self.schema)
            .field("username", &self.username)
            .field("sslMode", &self.ssl_mode)
            .field("password", &self.password.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

/// Opaque list parameters forwarded to the store untouched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionListParams {
    pub filter: serde_json::Value,
}

/// A page of connections, returned verbatim from the store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionPage {
    pub items: Vec<ConnectionDescriptor>,
    pub total: i64,
}

impl ConnectionPage {
    /// Offset paging over an ordered list: `params.filter` may carry
    /// `{"page": n, "limit": m}` (page from 1; no limit means everything).
    pub fn offset(all: Vec<ConnectionDescriptor>, params: &ConnectionListParams) -> Self {
        let total = all.len() as i64;
        let number = |k: &str| params.filter.get(k).and_then(|v| v.as_u64());
        let limit = number("limit").unwrap_or(u64::MAX) as usize;
        let page = number("page").unwrap_or(1).max(1) as usize;
        let items = all
            .into_iter()
            .skip((page - 1).saturating_mul(limit))
            .take(limit)
            .collect();
        ConnectionPage { items, total }
    }
}

/// The outcome of a successful connection test.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTestResult {
    pub success: bool,
    pub config_name: String,
    /// Wall time of connect + ping + close (beyond the reference).
    #[serde(rename = "latencyMs", serialize_with = "ser_millis")]
    pub latency: Duration,
}

fn ser_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> ConnectionInput {
        ConnectionInput {
            config_name: "pg".into(),
            datasource_type: DatasourceType::Postgresql,
            host: "db".into(),
            port: 5432,
            database_name: "app".into(),
            username: "u".into(),
            ..Default::default()
        }
        .with_password("s3cr3t-Pa55")
    }

    #[test]
    fn secrets_never_render() {
        let i = input();
        let renderings = [
            format!("{i}"),
            format!("{i:?}"),
            format!("{i:#?}"),
            serde_json::to_string(&i).unwrap(),
            serde_json::to_string(&&i).unwrap(),
            format!(
                "{:?}",
                ConnectionPatch::default().with_password("s3cr3t-Pa55")
            ),
            serde_json::to_string(&ConnectionDescriptor::from_input(&i)).unwrap(),
        ];
        for r in renderings {
            assert!(!r.contains("s3cr3t"), "{r}");
        }
        assert_eq!(
            format!("{i}"),
            r#"ConnectionInput{configName:"pg" type:"POSTGRESQL" host:"db" port:5432 database:"app" schema:"" username:"u" sslMode:"" password:[REDACTED]}"#
        );
        let json: serde_json::Value = serde_json::to_value(&i).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"configName":"pg","type":"POSTGRESQL","host":"db","port":5432,
                "databaseName":"app","userName":"u","password":"[REDACTED]"})
        );
        let no_pw = ConnectionInput {
            password: Secret::default(),
            ..input()
        };
        assert!(!no_pw.has_password());
        assert!(format!("{no_pw}").ends_with("password:}"));
    }

    #[test]
    fn descriptor_json_omits_empty_and_host_attributes() {
        let mut d = ConnectionDescriptor::from_input(&input());
        d.host_attributes.insert("secretish".into(), "x".into());
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"configName":"pg","type":"POSTGRESQL","host":"db","port":5432,
                "databaseName":"app","userName":"u"})
        );
        d.key_version = "2".into();
        d.id = "abc".into();
        assert_eq!(serde_json::to_value(&d).unwrap()["keyVersion"], "2");
    }

    #[test]
    fn legacy_tls_attributes_become_typed_material() {
        let mut d = ConnectionDescriptor::from_input(&input());
        d.host_attributes
            .insert("sslRootCert".into(), "CA PEM".into());
        d.host_attributes.insert("sslCert".into(), "".into());
        d.host_attributes.insert("other".into(), 1.into());
        d.lift_legacy_tls();
        assert_eq!(d.tls.root_cert.as_deref(), Some("CA PEM"));
        assert_eq!(d.tls.client_cert, None);
        assert_eq!(d.host_attributes.keys().collect::<Vec<_>>(), ["other"]);
        // Typed material already there wins; the legacy keys still go.
        d.host_attributes.insert("sslRootCert".into(), "OLD".into());
        d.lift_legacy_tls();
        assert_eq!(d.tls.root_cert.as_deref(), Some("CA PEM"));
        assert!(!d.host_attributes.contains_key("sslRootCert"));
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["tls"], serde_json::json!({"rootCert": "CA PEM"}));
        assert_eq!(
            serde_json::from_value::<ConnectionDescriptor>(json)
                .unwrap()
                .tls,
            d.tls
        );
    }

    #[test]
    fn patch_applies_only_present_fields() {
        let mut cur = ConnectionDescriptor::from_input(&input());
        cur.id = "id-1".into();
        cur.key_version = "1".into();
        cur.host_attributes.insert("k".into(), 1.into());
        let p = ConnectionPatch {
            host: Some("db2".into()),
            port: Some(6543),
            ..Default::default()
        };
        let d = p.apply(&cur);
        assert_eq!((d.host.as_str(), d.port), ("db2", 6543));
        assert_eq!(
            (
                d.id.as_str(),
                d.key_version.as_str(),
                d.config_name.as_str()
            ),
            ("id-1", "1", "pg")
        );
        assert_eq!(d.host_attributes, cur.host_attributes);
        let replaced = ConnectionPatch {
            host_attributes: Some(HostAttributes::new()),
            ..Default::default()
        }
        .apply(&cur);
        assert!(replaced.host_attributes.is_empty());
        assert!(ConnectionPatch::default().with_password("").has_password());
    }
}
