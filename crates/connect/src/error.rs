//! Connectors' errors are [`EngineError`]s with fixed texts: the message catalogue every
//! connector shares, the typed hidden causes hosts match (a forbidden host, an invalid
//! TLS mode) and the constructors that need no driver. Driver errors are kept only as the
//! hidden cause ([`EngineError::wrap`]); no message ever carries driver text, a DSN, a
//! password, a host or a row value.

use fetcher_engine::{Category, Done, EngineError};

/// Fixed messages.
pub mod msg {
    pub const CONNECT_FAILED: &str = "failed to connect to datasource";
    pub const DNS_FAILED: &str = "failed to resolve datasource host";
    pub const QUERY_FAILED: &str = "failed to query datasource";
    pub const DISCOVER_FAILED: &str = "failed to discover datasource schema";
    pub const DECODE_FAILED: &str = "failed to decode a datasource value";
    pub const CREDENTIAL_FAILED: &str = "failed to resolve datasource credential";
    pub const PASSWORD_NOT_UTF8: &str = "datasource password is not valid UTF-8";
    pub const TYPE_MISMATCH: &str = "connection type does not match the connector";
    pub const UNSUPPORTED_TYPE: &str = "unsupported database type";
    pub const HOST_FORMAT: &str = "host must be a valid hostname or IP address";
    /// Deliberately generic, never echoes the host or the rule; the engine's text, so its
    /// reason is [`fetcher_engine::Reason::ForbiddenHost`] (the API answers 400 `FET-0414`).
    pub const HOST_FORBIDDEN: &str = fetcher_engine::error::msg::HOST_FORBIDDEN;
    pub const TABLE_NOT_FOUND: &str = "table not found in datasource schema";
    pub const FIELD_NOT_FOUND: &str = "field not found in table schema";
    pub const FILTER_TABLE: &str = "filter targets a table that is not selected";
    pub const FILTER_UNKNOWN_COLUMN: &str = "filter references an unknown column";
    pub const FILTER_EMPTY: &str = "filter condition has no values";
    pub const FILTER_ARITY: &str = "filter operator has the wrong number of values";
    pub const FILTER_VALUE_TYPE: &str = "filter value has the wrong type for its column";
    pub const FILTER_COLUMN_TYPE: &str = "filters are not supported on this column type";
    pub const FILTER_VALUE_NUL: &str =
        "filter value contains a NUL character, which this datasource cannot hold";
    /// A data exception (SQLSTATE class 22) the database raised for a value of the query:
    /// bad input, so no retry can help.
    pub const VALUE_REFUSED: &str = "the datasource refused a value of the query";
    /// Any other error the database raised for the statement (a permission it denies, a
    /// row-level-security policy that raises, an object it lacks): its answer, so no
    /// retry can help.
    pub const QUERY_REFUSED: &str = "the datasource refused the query";
    pub const SQLITE_PATH: &str = "sqlite datasource needs a database file path";
}

/// Typed hidden cause of a host-safety rejection, so a host can map it to HTTP 400
/// (`err.cause_as::<ForbiddenHost>()`).
#[derive(Debug)]
pub struct ForbiddenHost;

impl std::fmt::Display for ForbiddenHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(msg::HOST_FORBIDDEN)
    }
}
impl std::error::Error for ForbiddenHost {}

/// Typed hidden cause of an invalid TLS mode: the mode as given (control characters
/// replaced, at most 64 characters), for a host's own wording (the API's `FET-0413`).
#[derive(Debug)]
pub struct InvalidSslMode {
    pub shown: String,
}

impl std::fmt::Display for InvalidSslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(fetcher_engine::error::msg::TLS_MODE_INVALID)
    }
}
impl std::error::Error for InvalidSslMode {}

pub fn forbidden_host() -> EngineError {
    EngineError::wrap_of(fetcher_engine::Reason::ForbiddenHost, ForbiddenHost)
}

/// Whether an error is host safety's rejection (its reason: a variant, never text).
pub fn is_forbidden_host(e: &EngineError) -> bool {
    e.reason() == Some(fetcher_engine::Reason::ForbiddenHost)
}

pub fn validation(m: &'static str) -> EngineError {
    EngineError::new(Category::Validation, m)
}

pub fn from_done(d: Done) -> EngineError {
    match d {
        Done::DeadlineExceeded => {
            EngineError::new(Category::Timeout, "execution exceeded its deadline")
        }
        Done::Canceled => EngineError::new(Category::Canceled, "execution canceled"),
    }
}

/// The descriptor's TLS mode, checked against its type: a mode of another type's (a
/// record patched to a new type, or written by another host) is refused, not guessed.
pub fn checked_tls_mode(
    d: &fetcher_engine::ConnectionDescriptor,
) -> fetcher_engine::Result<fetcher_engine::TlsMode> {
    if d.ssl_mode.is_valid_for(d.datasource_type) {
        return Ok(d.ssl_mode);
    }
    let shown: String = d
        .ssl_mode
        .as_str()
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    Err(EngineError::wrap_of(
        fetcher_engine::Reason::InvalidTlsMode,
        InvalidSslMode { shown },
    ))
}
