//! TLS modes per datasource type (docs/datasources.md, "TLS modes"): parsing text into
//! the engine's [`TlsMode`] and the mapping onto sqlx.
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
//! | SQL_SERVER, ORACLE, MONGODB | validated only ([`DatasourceType::tls_modes`]) | no connector in this crate |
//!
//! The tenant CA is PEM text in the descriptor's [`fetcher_engine::TlsMaterial`]; without
//! it, verification uses the bundled Mozilla roots (webpki-roots). Matching of modes is
//! exact and case-sensitive; an invalid mode is a `validation` error with reason
//! `InvalidTlsMode` (the API's `FET-0413`).

use fetcher_engine::{ConnectionDescriptor, DatasourceType, EngineError, Result, TlsMode};
use sqlx::mysql::MySqlSslMode;
use sqlx::postgres::PgSslMode;

use crate::error::InvalidSslMode;

/// Parses `mode` as one of `ty`'s TLS modes: exact, case-sensitive. For hosts reading
/// text (the API, the environment).
///
/// Errors: `validation` / `the TLS mode is not one of the connection type's` (reason
/// [`fetcher_engine::Reason::InvalidTlsMode`]), cause [`InvalidSslMode`] holding the mode
/// as given (control characters replaced, cut to 64 characters) for a host's own wording.
pub fn validate_ssl_mode(ty: DatasourceType, mode: &str) -> Result<TlsMode> {
    TlsMode::parse(ty, mode).ok_or_else(|| invalid(mode))
}

fn invalid(mode: &str) -> EngineError {
    let shown: String = mode
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    EngineError::wrap_of(
        fetcher_engine::Reason::InvalidTlsMode,
        InvalidSslMode { shown },
    )
}

/// The descriptor's mode, checked against its type: a typed mode of another type's (a
/// record patched to a new type, or written by another host) is refused, not guessed.
pub fn checked_mode(d: &ConnectionDescriptor) -> Result<TlsMode> {
    fetcher_connect::error::checked_tls_mode(d)
}

/// The tenant CA, if any.
pub fn root_cert(d: &ConnectionDescriptor) -> Option<Vec<u8>> {
    d.tls.root_cert_pem().map(<[u8]>::to_vec)
}

/// PostgreSQL mode (checked against the type first).
pub fn pg_mode(d: &ConnectionDescriptor, has_ca: bool) -> Result<PgSslMode> {
    Ok(match checked_mode(d)? {
        TlsMode::Allow => PgSslMode::Allow,
        TlsMode::Prefer => PgSslMode::Prefer,
        TlsMode::Require if has_ca => PgSslMode::VerifyCa,
        TlsMode::Require => PgSslMode::Require,
        TlsMode::VerifyCa => PgSslMode::VerifyCa,
        TlsMode::VerifyFull => PgSslMode::VerifyFull,
        _ => PgSslMode::Disable,
    })
}

/// MySQL mode (checked against the type first). sqlx's own default is `Preferred`; the
/// default maps to `Disabled` explicitly, as the reference's `tls=false` default.
pub fn mysql_mode(d: &ConnectionDescriptor) -> Result<MySqlSslMode> {
    Ok(match checked_mode(d)? {
        TlsMode::True => MySqlSslMode::VerifyIdentity,
        TlsMode::SkipVerify => MySqlSslMode::Required,
        TlsMode::Preferred => MySqlSslMode::Preferred,
        _ => MySqlSslMode::Disabled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use DatasourceType as T;

    #[test]
    fn parsing_is_exact() {
        for m in [
            "",
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            assert_eq!(validate_ssl_mode(T::Postgresql, m).unwrap().as_str(), m);
        }
        for m in ["", "false", "true", "skip-verify", "preferred"] {
            assert_eq!(validate_ssl_mode(T::Mysql, m).unwrap().as_str(), m);
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
        for ty in T::ALL {
            for v in vectors {
                let e = validate_ssl_mode(ty, v).unwrap_err();
                assert_eq!(e.category(), fetcher_engine::Category::Validation);
                assert_eq!(
                    e.reason(),
                    Some(fetcher_engine::Reason::InvalidTlsMode),
                    "{ty} {v:?}"
                );
                assert!(e.cause_as::<InvalidSslMode>().is_some());
            }
        }
        assert!(validate_ssl_mode(T::Mysql, "require").is_err());
        assert!(validate_ssl_mode(T::Postgresql, "true").is_err());
        assert!(validate_ssl_mode(T::Sqlite, "disable").is_err());
        // The mode as given, for the host's wording; no code in the engine's text.
        let e = validate_ssl_mode(T::Mysql, "bad\nmode").unwrap_err();
        assert_eq!(e.cause_as::<InvalidSslMode>().unwrap().shown, "bad?mode");
        assert!(!e.message().contains("FET-"));
    }

    fn descriptor(ty: DatasourceType, mode: TlsMode) -> ConnectionDescriptor {
        ConnectionDescriptor {
            datasource_type: ty,
            ssl_mode: mode,
            ..Default::default()
        }
    }

    #[test]
    fn mappings() {
        let pg = |m| pg_mode(&descriptor(T::Postgresql, m), false).unwrap();
        assert!(matches!(pg(TlsMode::Default), PgSslMode::Disable));
        assert!(matches!(pg(TlsMode::Require), PgSslMode::Require));
        assert!(matches!(pg(TlsMode::VerifyFull), PgSslMode::VerifyFull));
        assert!(matches!(
            pg_mode(&descriptor(T::Postgresql, TlsMode::Require), true).unwrap(),
            PgSslMode::VerifyCa
        ));
        let my = |m| mysql_mode(&descriptor(T::Mysql, m)).unwrap();
        assert!(matches!(my(TlsMode::Default), MySqlSslMode::Disabled));
        assert!(matches!(my(TlsMode::True), MySqlSslMode::VerifyIdentity));
        assert!(matches!(my(TlsMode::SkipVerify), MySqlSslMode::Required));
        assert!(matches!(my(TlsMode::Preferred), MySqlSslMode::Preferred));
    }

    #[test]
    fn a_mode_of_another_type_is_refused_not_guessed() {
        // PostgreSQL's `require` on a record patched to MySQL: no MySQL meaning.
        let e = mysql_mode(&descriptor(T::Mysql, TlsMode::Require)).unwrap_err();
        assert_eq!(e.reason(), Some(fetcher_engine::Reason::InvalidTlsMode));
        assert!(pg_mode(&descriptor(T::Postgresql, TlsMode::True), false).is_err());
        assert!(checked_mode(&descriptor(T::Sqlite, TlsMode::Disable)).is_err());
    }
}
