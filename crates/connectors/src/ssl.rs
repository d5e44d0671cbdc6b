//! TLS modes per datasource type (docs/datasources.md, "TLS modes"): validation and the
//! mapping onto sqlx.
//!
//! | type | mode | effect here |
//! |---|---|---|
//! | POSTGRESQL | `""`, `disable` | plain TCP (the effective default) |
//! | POSTGRESQL | `allow` | plain TCP (sqlx never upgrades; libpq would retry with TLS if the server demands it) |
//! | POSTGRESQL | `prefer` | TLS if the server offers it, no verification; else plain |
//! | POSTGRESQL | `require` | TLS required, no verification; **with a tenant CA it verifies the chain** (libpq: "require with a root CA behaves like verify-ca") |
//! | POSTGRESQL | `verify-ca` | TLS, chain verified against the tenant CA or the Mozilla roots, host name not checked |
//! | POSTGRESQL | `verify-full` | TLS, chain and host name verified |
//! | MYSQL | `""`, `false` | `MySqlSslMode::Disabled` |
//! | MYSQL | `true` | `VerifyIdentity` (chain and host name) |
//! | MYSQL | `skip-verify` | `Required` (TLS, no verification) |
//! | MYSQL | `preferred` | `Preferred` (TLS if offered, no verification) |
//! | SQLITE | `""` only | no network |
//! | SQL_SERVER, ORACLE, MONGODB | validated only (allowlists as in docs/datasources.md) | no connector in this crate |
//!
//! The tenant CA is PEM text in `descriptor.host_attributes["sslRootCert"]`
//! ([`SSL_ROOT_CERT_KEY`]); without it, verification uses the bundled Mozilla roots
//! (webpki-roots). Matching of modes is exact and case-sensitive; an invalid mode is a
//! `validation` error with reason `InvalidTlsMode` (the API's `FET-0413`).

use fetcher_engine::{Category, ConnectionDescriptor, EngineError, Result};
use sqlx::mysql::MySqlSslMode;
use sqlx::postgres::PgSslMode;

use crate::error::{InvalidSslMode, msg};

/// Host attribute holding the tenant CA bundle (PEM).
pub const SSL_ROOT_CERT_KEY: &str = "sslRootCert";

/// Allowed modes per type (the empty string means "default").
pub fn allowed_modes(datasource_type: &str) -> Option<&'static [&'static str]> {
    Some(match datasource_type {
        crate::POSTGRESQL => &[
            "",
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ],
        crate::MYSQL => &["", "false", "true", "skip-verify", "preferred"],
        "SQL_SERVER" => &["", "disable", "false", "true", "strict"],
        "ORACLE" => &[
            "",
            "disable",
            "false",
            "true",
            "enable",
            "verify",
            "skip-verify",
        ],
        "MONGODB" => &["", "disable", "false", "true", "enable", "insecure"],
        crate::SQLITE => &[""],
        _ => return None,
    })
}

/// Exact, case-sensitive check of `mode` against the type's allowlist. For the API layer.
///
/// Errors: `validation` / `the TLS mode is not one of the connection type's` (reason
/// [`fetcher_engine::Reason::InvalidTlsMode`]), cause [`InvalidSslMode`] holding the mode
/// as given (control characters replaced, cut to 64 characters) for a host's own wording;
/// an unknown type is `validation` / `unsupported database type`.
pub fn validate_ssl_mode(datasource_type: &str, mode: &str) -> Result<()> {
    let allowed = allowed_modes(datasource_type)
        .ok_or_else(|| EngineError::new(Category::Validation, msg::UNSUPPORTED_TYPE))?;
    if allowed.contains(&mode) {
        return Ok(());
    }
    let shown: String = mode
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    Err(EngineError::wrap(
        Category::Validation,
        fetcher_engine::error::msg::TLS_MODE_INVALID,
        InvalidSslMode { shown },
    ))
}

/// The tenant CA, if any.
pub fn root_cert(d: &ConnectionDescriptor) -> Option<Vec<u8>> {
    match d.host_attributes.get(SSL_ROOT_CERT_KEY) {
        Some(serde_json::Value::String(pem)) if !pem.trim().is_empty() => {
            Some(pem.as_bytes().to_vec())
        }
        _ => None,
    }
}

/// PostgreSQL mode (validated first).
pub fn pg_mode(mode: &str, has_ca: bool) -> Result<PgSslMode> {
    validate_ssl_mode(crate::POSTGRESQL, mode)?;
    Ok(match mode {
        "allow" => PgSslMode::Allow,
        "prefer" => PgSslMode::Prefer,
        "require" if has_ca => PgSslMode::VerifyCa,
        "require" => PgSslMode::Require,
        "verify-ca" => PgSslMode::VerifyCa,
        "verify-full" => PgSslMode::VerifyFull,
        _ => PgSslMode::Disable,
    })
}

/// MySQL mode (validated first). sqlx's own default is `Preferred`; `""` maps to
/// `Disabled` explicitly, as the reference's `tls=false` default.
pub fn mysql_mode(mode: &str) -> Result<MySqlSslMode> {
    validate_ssl_mode(crate::MYSQL, mode)?;
    Ok(match mode {
        "true" => MySqlSslMode::VerifyIdentity,
        "skip-verify" => MySqlSslMode::Required,
        "preferred" => MySqlSslMode::Preferred,
        _ => MySqlSslMode::Disabled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlists_are_exact() {
        for m in [
            "",
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            validate_ssl_mode("POSTGRESQL", m).unwrap();
        }
        for m in ["", "false", "true", "skip-verify", "preferred"] {
            validate_ssl_mode("MYSQL", m).unwrap();
        }
        let vectors = [
            "TRUE",
            "Require",
            " true",
            "true\n",
            "true;",
            "true&x=1",
            "tru%65",
            "ｔrue",
            "verify_full",
            "VERIFY-FULL",
            "disabled",
            "required",
            "0",
            "1",
            "yes",
            "null",
        ];
        for ty in ["POSTGRESQL", "MYSQL", "SQLITE"] {
            for v in vectors {
                let e = validate_ssl_mode(ty, v).unwrap_err();
                assert_eq!(e.category(), Category::Validation);
                assert_eq!(
                    e.reason(),
                    Some(fetcher_engine::Reason::InvalidTlsMode),
                    "{ty} {v:?}"
                );
                assert!(e.cause_as::<InvalidSslMode>().is_some());
            }
        }
        assert!(validate_ssl_mode("MYSQL", "require").is_err());
        assert!(validate_ssl_mode("POSTGRESQL", "true").is_err());
        assert!(validate_ssl_mode("SQLITE", "disable").is_err());
        assert_eq!(
            validate_ssl_mode("NOPE", "").unwrap_err().message(),
            "unsupported database type"
        );
        // The mode as given, for the host's wording; no code in the engine's text.
        let e = validate_ssl_mode("MYSQL", "bad\nmode").unwrap_err();
        assert_eq!(e.cause_as::<InvalidSslMode>().unwrap().shown, "bad?mode");
        assert!(!e.message().contains("FET-"));
    }

    #[test]
    fn mappings() {
        assert!(matches!(pg_mode("", false).unwrap(), PgSslMode::Disable));
        assert!(matches!(
            pg_mode("require", false).unwrap(),
            PgSslMode::Require
        ));
        assert!(matches!(
            pg_mode("require", true).unwrap(),
            PgSslMode::VerifyCa
        ));
        assert!(matches!(
            pg_mode("verify-full", false).unwrap(),
            PgSslMode::VerifyFull
        ));
        assert!(matches!(mysql_mode("").unwrap(), MySqlSslMode::Disabled));
        assert!(matches!(
            mysql_mode("true").unwrap(),
            MySqlSslMode::VerifyIdentity
        ));
        assert!(matches!(
            mysql_mode("skip-verify").unwrap(),
            MySqlSslMode::Required
        ));
        assert!(matches!(
            mysql_mode("preferred").unwrap(),
            MySqlSslMode::Preferred
        ));
    }
}
