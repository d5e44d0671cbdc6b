//! # fetcher-connectors
//!
//! DOCS_PLACEHOLDER

pub mod catalog;
pub mod connector;
pub mod env;
pub mod error;
pub mod filter;
pub mod host;
mod mysql;
mod pg;
pub mod pgbin;
pub mod query;
mod sqlite;
pub mod ssl;
pub mod values;

pub use connector::{
    CONNECT_TIMEOUT, CredentialSource, DISCOVER_TIMEOUT, SqlConnector, SqlConnectorFactory,
    SqlRegistry, StaticCredentials,
};
pub use env::{EnvLoad, InternalDatasource, parse_env};
pub use error::{ForbiddenHost, InvalidSslMode};
pub use host::{DialTarget, HostPolicy, Resolver, SystemResolver, is_blocked_hostname, is_blocked_ip, validate_host_input};
pub use ssl::{SSL_ROOT_CERT_KEY, validate_ssl_mode};

/// Type strings.
pub const POSTGRESQL: &str = "POSTGRESQL";
pub const MYSQL: &str = "MYSQL";
pub const SQLITE: &str = "SQLITE";

/// The SQL dialects this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    Postgres,
    MySql,
    Sqlite,
}

impl Dialect {
    pub fn type_string(self) -> &'static str {
        match self {
            Dialect::Postgres => POSTGRESQL,
            Dialect::MySql => MYSQL,
            Dialect::Sqlite => SQLITE,
        }
    }

    pub fn from_type(t: &str) -> Option<Dialect> {
        match t {
            POSTGRESQL => Some(Dialect::Postgres),
            MYSQL => Some(Dialect::MySql),
            SQLITE => Some(Dialect::Sqlite),
            _ => None,
        }
    }
}
