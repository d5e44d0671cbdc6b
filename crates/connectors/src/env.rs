//! Internal datasources declared by `DATASOURCE_{NAME}_*` variables, for single-tenant
//! mode (docs/datasources.md, "Internal datasources"). The parser takes `(key, value)`
//! pairs, so it is testable without touching the process environment:
//! `parse_env(std::env::vars(), REGISTRY)`.
//!
//! | suffix | field | rule |
//! |---|---|---|
//! | `_CONFIG_NAME` | config name | the trigger; skipped if empty or not in the registry (exact match) |
//! | `_TYPE` | type | trimmed, case-insensitive; unknown → skipped |
//! | `_HOST` | host | empty → skipped (not trimmed) |
//! | `_PORT` | port | unparsable, 0, negative or > 65535 → port 0, kept, warning |
//! | `_DATABASE` | database | empty → skipped (SQLite: the file path) |
//! | `_USER` | user name | optional |
//! | `_PASSWORD` | password | optional, plaintext, memory only |
//! | `_OPTIONS` | `k=v&k2=v2` | host attributes (strings); pairs without `=` ignored |
//! | `_SSLMODE` | TLS mode | optional; invalid for the type → skipped |
//! | `_SSL_CA` | tenant CA (PEM) | read only with `_SSLMODE`; **used** (the descriptor's `tls.root_cert`) |
//! | `_SSL_CERT`, `_SSL_KEY` | client certificate | read only with `_SSLMODE`; kept, not used |
//!
//! Check order: TYPE, then HOST/DATABASE, then SSLMODE. Duplicated config names: the
//! first in ascending `{NAME}` order wins (the reference used environment order, which is
//! arbitrary). SQLite needs no host. Resulting descriptors have an empty key version
//! (internal: exempt from host safety). Warnings never contain values.

use std::collections::BTreeMap;

use fetcher_engine::{ConnectionDescriptor, DatasourceType, Secret, TlsMaterial, TlsMode};

use crate::ssl;

/// The fixed internal registry of the reference plus the SQLite demo source
/// (docs/datasources.md, "Internal datasources").
pub const REGISTRY: [&str; 4] = [
    "midaz_onboarding",
    "midaz_transaction",
    "plugin_crm",
    "demo_sqlite",
];

/// One internal datasource.
#[derive(Debug, Clone)]
pub struct InternalDatasource {
    pub descriptor: ConnectionDescriptor,
    pub password: Secret,
    pub ssl_key: Option<Secret>,
}

#[derive(Debug, Default)]
pub struct EnvLoad {
    /// By config name.
    pub datasources: BTreeMap<String, InternalDatasource>,
    /// Value-free warnings (`DATASOURCE_X: invalid type, skipped`).
    pub warnings: Vec<String>,
}

/// Parses `DATASOURCE_{NAME}_*` pairs.
pub fn parse_env<K, V>(vars: impl IntoIterator<Item = (K, V)>, registry: &[&str]) -> EnvLoad
where
    K: Into<String>,
    V: Into<String>,
{
    let vars: BTreeMap<String, String> = vars
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .filter(|(k, _)| k.starts_with("DATASOURCE_"))
        .collect();
    let mut out = EnvLoad::default();
    let prefixes: Vec<String> = vars
        .keys()
        .filter_map(|k| k.strip_suffix("_CONFIG_NAME").map(str::to_owned))
        .filter(|p| p.len() > "DATASOURCE".len())
        .collect();
    for prefix in prefixes {
        let get = |suffix: &str| {
            vars.get(&format!("{prefix}_{suffix}"))
                .cloned()
                .unwrap_or_default()
        };
        let mut warn = |what: &str| out.warnings.push(format!("{prefix}: {what}"));
        let config = get("CONFIG_NAME");
        if config.is_empty() || !registry.contains(&config.as_str()) {
            warn("config name empty or not registered, skipped");
            continue;
        }
        // The reference's five plus `SQLITE`, spelled in any case.
        let Some(ty) = DatasourceType::parse(&get("TYPE").trim().to_ascii_uppercase()) else {
            warn("invalid type, skipped");
            continue;
        };
        let sqlite = ty == DatasourceType::Sqlite;
        let host = get("HOST");
        let database = get("DATABASE");
        if (host.is_empty() && !sqlite) || database.is_empty() {
            warn("host or database empty, skipped");
            continue;
        }
        let port_text = get("PORT");
        let port = match port_text.trim().parse::<i64>() {
            Ok(p) if (1..=65535).contains(&p) => p as u16,
            _ => {
                if !sqlite {
                    warn("port invalid, using 0");
                }
                0
            }
        };
        let mut attrs = BTreeMap::new();
        for pair in get("OPTIONS").split('&') {
            if let Some((k, v)) = pair.split_once('=')
                && !k.is_empty()
            {
                attrs.insert(k.to_owned(), serde_json::Value::String(v.to_owned()));
            }
        }
        let ssl_text = get("SSLMODE");
        let (mut ssl_mode, mut tls) = (TlsMode::Default, TlsMaterial::default());
        let mut ssl_key = None;
        if !ssl_text.is_empty() {
            let Ok(mode) = ssl::validate_ssl_mode(ty, &ssl_text) else {
                warn("invalid SSL mode, skipped");
                continue;
            };
            ssl_mode = mode;
            tls.root_cert = Some(get("SSL_CA")).filter(|s| !s.is_empty());
            tls.client_cert = Some(get("SSL_CERT")).filter(|s| !s.is_empty());
            ssl_key = Some(get("SSL_KEY"))
                .filter(|s| !s.is_empty())
                .map(Secret::from);
        }
        if out.datasources.contains_key(&config) {
            warn("duplicate config name, skipped");
            continue;
        }
        let descriptor = ConnectionDescriptor {
            config_name: config.clone(),
            datasource_type: ty,
            host,
            port,
            database_name: database,
            username: get("USER"),
            ssl_mode,
            tls,
            host_attributes: attrs,
            ..Default::default()
        };
        out.datasources.insert(
            config,
            InternalDatasource {
                descriptor,
                password: Secret::from(get("PASSWORD")),
                ssl_key,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> EnvLoad {
        parse_env(pairs.iter().map(|(k, v)| (*k, *v)), &REGISTRY)
    }

    #[test]
    fn full_declaration() {
        let l = load(&[
            ("DATASOURCE_ONB_CONFIG_NAME", "midaz_onboarding"),
            ("DATASOURCE_ONB_TYPE", " postgresql "),
            ("DATASOURCE_ONB_HOST", "db.internal"),
            ("DATASOURCE_ONB_PORT", "5432"),
            ("DATASOURCE_ONB_DATABASE", "onboarding"),
            ("DATASOURCE_ONB_USER", "app"),
            ("DATASOURCE_ONB_PASSWORD", "pw"),
            ("DATASOURCE_ONB_OPTIONS", "a=1&b=x=y&novalue"),
            ("DATASOURCE_ONB_SSLMODE", "verify-full"),
            ("DATASOURCE_ONB_SSL_CA", "PEM"),
            ("OTHER", "x"),
        ]);
        let d = &l.datasources["midaz_onboarding"];
        assert_eq!(d.descriptor.datasource_type, DatasourceType::Postgresql);
        assert_eq!(d.descriptor.port, 5432);
        assert_eq!(d.descriptor.ssl_mode, TlsMode::VerifyFull);
        assert_eq!(d.descriptor.key_version, "");
        assert_eq!(d.password.expose_str(), Some("pw"));
        assert_eq!(d.descriptor.host_attributes["a"], "1");
        assert_eq!(d.descriptor.host_attributes["b"], "x=y");
        assert_eq!(d.descriptor.tls.root_cert.as_deref(), Some("PEM"));
        assert!(!d.descriptor.host_attributes.contains_key("sslRootCert"));
        assert!(!d.descriptor.host_attributes.contains_key("novalue"));
        assert!(l.warnings.is_empty());
    }

    #[test]
    fn skips_and_warnings() {
        let l = load(&[
            // not registered
            ("DATASOURCE_A_CONFIG_NAME", "unknown"),
            // bad type is checked before the bad SSL mode
            ("DATASOURCE_B_CONFIG_NAME", "midaz_transaction"),
            ("DATASOURCE_B_TYPE", "postgres"),
            ("DATASOURCE_B_SSLMODE", "bogus"),
            // bad SSL mode for the type
            ("DATASOURCE_C_CONFIG_NAME", "midaz_transaction"),
            ("DATASOURCE_C_TYPE", "MYSQL"),
            ("DATASOURCE_C_HOST", "h"),
            ("DATASOURCE_C_DATABASE", "d"),
            ("DATASOURCE_C_SSLMODE", "require"),
            // bad port kept; SSL_CA without SSLMODE ignored
            ("DATASOURCE_D_CONFIG_NAME", "midaz_transaction"),
            ("DATASOURCE_D_TYPE", "mysql"),
            ("DATASOURCE_D_HOST", "h"),
            ("DATASOURCE_D_DATABASE", "d"),
            ("DATASOURCE_D_PORT", "abc"),
            ("DATASOURCE_D_SSL_CA", "PEM"),
            // duplicate of D
            ("DATASOURCE_E_CONFIG_NAME", "midaz_transaction"),
            ("DATASOURCE_E_TYPE", "mysql"),
            ("DATASOURCE_E_HOST", "h2"),
            ("DATASOURCE_E_DATABASE", "d"),
            // missing host
            ("DATASOURCE_F_CONFIG_NAME", "plugin_crm"),
            ("DATASOURCE_F_TYPE", "MONGODB"),
            ("DATASOURCE_F_DATABASE", "d"),
            // SQLite needs no host
            ("DATASOURCE_G_CONFIG_NAME", "demo_sqlite"),
            ("DATASOURCE_G_TYPE", "sqlite"),
            ("DATASOURCE_G_DATABASE", "/tmp/demo.db"),
        ]);
        assert_eq!(
            l.datasources.keys().collect::<Vec<_>>(),
            ["demo_sqlite", "midaz_transaction"]
        );
        let d = &l.datasources["midaz_transaction"].descriptor;
        assert_eq!((d.host.as_str(), d.port), ("h", 0));
        assert!(d.host_attributes.is_empty() && d.ssl_mode.is_default() && d.tls.is_empty());
        assert_eq!(l.warnings.len(), 8, "{:?}", l.warnings);
        for w in &l.warnings {
            assert!(!w.contains("bogus") && !w.contains("PEM"), "{w}");
        }
    }

    #[test]
    fn pinned_ssl_modes_per_type() {
        for (ty, mode, ok) in [
            ("POSTGRESQL", "require", true),
            ("POSTGRESQL", "verify-ca", true),
            ("POSTGRESQL", "verify-full", true),
            ("MYSQL", "true", true),
            ("ORACLE", "verify", true),
            ("SQL_SERVER", "strict", true),
            ("MONGODB", "true", true),
            ("MONGODB", "skip-verify", false),
            ("SQLITE", "require", false),
        ] {
            let l = load(&[
                ("DATASOURCE_X_CONFIG_NAME", "plugin_crm"),
                ("DATASOURCE_X_TYPE", ty),
                ("DATASOURCE_X_HOST", "h"),
                ("DATASOURCE_X_DATABASE", "d"),
                ("DATASOURCE_X_SSLMODE", mode),
            ]);
            assert_eq!(l.datasources.len() == 1, ok, "{ty} {mode}");
        }
    }
}
