//! The closed vocabularies of a connection: its datasource type and its TLS mode
//! (docs/datasources.md, "Types" and "TLS modes"). Each is parsed once, where text
//! arrives (the API, the environment, a stored record), and passed typed from there; a
//! spelling outside the set does not parse, so no layer below re-checks strings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A connection's database type, spelled on the wire as the reference does.
///
/// `Default` (PostgreSQL) exists only so records can be built with struct-update syntax;
/// every record that reaches a store names its type explicitly.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum DatasourceType {
    #[default]
    #[serde(rename = "POSTGRESQL")]
    Postgresql,
    #[serde(rename = "MYSQL")]
    Mysql,
    /// A local file: single-tenant hosts only.
    #[serde(rename = "SQLITE")]
    Sqlite,
    #[serde(rename = "ORACLE")]
    Oracle,
    #[serde(rename = "SQL_SERVER")]
    SqlServer,
    #[serde(rename = "MONGODB")]
    MongoDb,
}

impl DatasourceType {
    /// Every type, in the order the API lists them.
    pub const ALL: [DatasourceType; 6] = [
        DatasourceType::Oracle,
        DatasourceType::SqlServer,
        DatasourceType::Postgresql,
        DatasourceType::MongoDb,
        DatasourceType::Mysql,
        DatasourceType::Sqlite,
    ];

    /// The wire spelling (`POSTGRESQL`, `SQL_SERVER`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            DatasourceType::Postgresql => "POSTGRESQL",
            DatasourceType::Mysql => "MYSQL",
            DatasourceType::Sqlite => "SQLITE",
            DatasourceType::Oracle => "ORACLE",
            DatasourceType::SqlServer => "SQL_SERVER",
            DatasourceType::MongoDb => "MONGODB",
        }
    }

    /// The type of an exact wire spelling (case-sensitive, as the API requires).
    pub fn parse(s: &str) -> Option<DatasourceType> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The TLS modes this type accepts, [`TlsMode::Default`] first.
    pub const fn tls_modes(self) -> &'static [TlsMode] {
        use TlsMode::*;
        match self {
            DatasourceType::Postgresql => &[
                Default, Disable, Allow, Prefer, Require, VerifyCa, VerifyFull,
            ],
            DatasourceType::Mysql => &[Default, False, True, SkipVerify, Preferred],
            DatasourceType::SqlServer => &[Default, Disable, False, True, Strict],
            DatasourceType::Oracle => &[Default, Disable, False, True, Enable, Verify, SkipVerify],
            DatasourceType::MongoDb => &[Default, Disable, False, True, Enable, Insecure],
            DatasourceType::Sqlite => &[Default],
        }
    }
}

impl fmt::Display for DatasourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DatasourceType {
    type Err = UnknownSpelling;
    fn from_str(s: &str) -> Result<Self, UnknownSpelling> {
        DatasourceType::parse(s).ok_or(UnknownSpelling)
    }
}

/// A text that is not one of a vocabulary's spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownSpelling;

impl fmt::Display for UnknownSpelling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not one of the accepted spellings")
    }
}

impl std::error::Error for UnknownSpelling {}

/// A TLS mode as the connection types spell them: the union of every type's spellings,
/// each one variant. What a spelling means is the type's (MySQL `true` verifies the chain
/// and host name; Oracle `true` is validated but not applied): the connectors map a
/// `(type, mode)` pair onto their driver (docs/datasources.md, "TLS modes"), and
/// [`DatasourceType::tls_modes`] says which pairs exist. Serialized as its spelling;
/// [`TlsMode::Default`] is the empty string (the type's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// No mode given: the type's default (PostgreSQL `disable`, MySQL `false`).
    #[default]
    #[serde(rename = "")]
    Default,
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
    False,
    True,
    SkipVerify,
    Preferred,
    Strict,
    Enable,
    Verify,
    Insecure,
}

impl TlsMode {
    const ALL: [TlsMode; 15] = [
        TlsMode::Default,
        TlsMode::Disable,
        TlsMode::Allow,
        TlsMode::Prefer,
        TlsMode::Require,
        TlsMode::VerifyCa,
        TlsMode::VerifyFull,
        TlsMode::False,
        TlsMode::True,
        TlsMode::SkipVerify,
        TlsMode::Preferred,
        TlsMode::Strict,
        TlsMode::Enable,
        TlsMode::Verify,
        TlsMode::Insecure,
    ];

    /// The wire spelling (`""` for the default).
    pub const fn as_str(self) -> &'static str {
        match self {
            TlsMode::Default => "",
            TlsMode::Disable => "disable",
            TlsMode::Allow => "allow",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
            TlsMode::False => "false",
            TlsMode::True => "true",
            TlsMode::SkipVerify => "skip-verify",
            TlsMode::Preferred => "preferred",
            TlsMode::Strict => "strict",
            TlsMode::Enable => "enable",
            TlsMode::Verify => "verify",
            TlsMode::Insecure => "insecure",
        }
    }

    /// The mode `s` spells for type `ty`: exact and case-sensitive; `None` when `s` is
    /// no spelling of `ty`'s (even one another type accepts).
    pub fn parse(ty: DatasourceType, s: &str) -> Option<TlsMode> {
        ty.tls_modes().iter().copied().find(|m| m.as_str() == s)
    }

    /// Whether `ty` accepts this mode.
    pub fn is_valid_for(self, ty: DatasourceType) -> bool {
        ty.tls_modes().contains(&self)
    }

    pub fn is_default(&self) -> bool {
        *self == TlsMode::Default
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TlsMode {
    type Err = UnknownSpelling;
    /// Any type's spelling; [`TlsMode::parse`] checks one type's.
    fn from_str(s: &str) -> Result<Self, UnknownSpelling> {
        TlsMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or(UnknownSpelling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip_and_nothing_else_parses() {
        for t in DatasourceType::ALL {
            assert_eq!(DatasourceType::parse(t.as_str()), Some(t));
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<DatasourceType>(&json).unwrap(), t);
        }
        for bad in ["postgresql", " MYSQL", "SQLSERVER", "", "BENCH"] {
            assert_eq!(DatasourceType::parse(bad), None, "{bad:?}");
            assert!(serde_json::from_value::<DatasourceType>(bad.into()).is_err());
        }
        for m in TlsMode::ALL {
            assert_eq!(m.as_str().parse::<TlsMode>(), Ok(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
            assert_eq!(
                serde_json::from_value::<TlsMode>(m.as_str().into()).unwrap(),
                m
            );
        }
    }

    #[test]
    fn a_mode_belongs_to_its_types_only() {
        use DatasourceType as T;
        assert_eq!(
            TlsMode::parse(T::Postgresql, "verify-full"),
            Some(TlsMode::VerifyFull)
        );
        assert_eq!(TlsMode::parse(T::Postgresql, "true"), None);
        assert_eq!(TlsMode::parse(T::Mysql, "true"), Some(TlsMode::True));
        assert_eq!(TlsMode::parse(T::Mysql, "require"), None);
        assert_eq!(
            TlsMode::parse(T::SqlServer, "strict"),
            Some(TlsMode::Strict)
        );
        assert_eq!(TlsMode::parse(T::Sqlite, ""), Some(TlsMode::Default));
        assert_eq!(TlsMode::parse(T::Sqlite, "disable"), None);
        for t in T::ALL {
            assert_eq!(t.tls_modes()[0], TlsMode::Default);
            for bad in ["TRUE", "Require", " true", "true\n", "ｔrue", "verify_full"] {
                assert_eq!(TlsMode::parse(t, bad), None, "{t} {bad:?}");
            }
        }
    }
}
