//! The engine's one error type and its eleven stable categories.
//!
//! Error policy (docs/engine.md, "Errors"):
//! * every failure the engine produces is an [`EngineError`] with a [`Category`] and a
//!   fixed, pre-written message; driver, factory, protector, checker and sink text is
//!   dropped and replaced by that message, so it can never carry a password or a DSN;
//! * a host may attach a *cause* with [`EngineError::wrap`]: it stays reachable through
//!   [`std::error::Error::source`] (so a host can recognise its own typed error) but is
//!   never rendered by `Display` or `Debug`;
//! * whether a retry can help is a field of the error ([`Retry`]): set from the category
//!   when the error is made, made [`Retry::Futile`] by [`EngineError::final_answer`], and
//!   kept when the engine rewrites a connector's error into its fixed text.

use std::borrow::Cow;
use std::fmt;

/// Result alias used by the engine and by every port.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// The eleven error categories. Their strings are part of the public contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    Validation,
    NotFound,
    Unauthorized,
    Forbidden,
    LimitExceeded,
    Conflict,
    Unavailable,
    Connect,
    Timeout,
    Canceled,
    Internal,
}

impl Category {
    /// All categories, in catalogue order.
    pub const ALL: [Category; 11] = [
        Category::Validation,
        Category::NotFound,
        Category::Unauthorized,
        Category::Forbidden,
        Category::LimitExceeded,
        Category::Conflict,
        Category::Unavailable,
        Category::Connect,
        Category::Timeout,
        Category::Canceled,
        Category::Internal,
    ];

    /// The stable wire string (`validation`, `not_found`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Category::Validation => "validation",
            Category::NotFound => "not_found",
            Category::Unauthorized => "unauthorized",
            Category::Forbidden => "forbidden",
            Category::LimitExceeded => "limit_exceeded",
            Category::Conflict => "conflict",
            Category::Unavailable => "unavailable",
            Category::Connect => "connect",
            Category::Timeout => "timeout",
            Category::Canceled => "canceled",
            Category::Internal => "internal",
        }
    }

    /// Parses a wire string; exact, case-sensitive match (the reference's `isValid`).
    pub fn parse(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether retrying the same operation later can succeed: dependency failures,
    /// connectivity and deadlines are transient; bad input, missing resources, limits,
    /// conflicts, cancellation and internal failures are not.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Category::Unavailable | Category::Connect | Category::Timeout
        )
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Failures a host tells apart within a category ([`EngineError::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// `not_found`: no connection of that name or id in the tenant.
    ConnectionNotFound,
    /// `conflict`: a connection of that name exists already.
    ConnectionExists,
    /// `conflict`: jobs that read the connection are running.
    ActiveExecutions,
    /// `connect`: the connection's host name has no address (the resolver answered, with
    /// nothing); a mistyped host, not an outage.
    HostNotResolved,
    /// `validation`: host safety refuses the connection's host (a blocked address or name,
    /// a SQLite file outside the allowed directory); hosts answer it as their own code
    /// (the API: 400 `FET-0414`).
    ForbiddenHost,
    /// `validation`: the TLS mode is not one of the connection type's (the API: `FET-0413`).
    InvalidTlsMode,
    /// `not_found`: the host registered no connector for the connection's datasource type.
    NoConnector,
    /// `connect`: the datasource refused the login (user, password, a locked or
    /// login-less user, no access to the database): the caller must fix the connection.
    LoginRefused,
    /// `connect`: the server has no database of the connection's name.
    DatabaseUnknown,
    /// `connect`: nothing listens at the connection's host and port (refused at once).
    NotListening,
    /// `connect`: the datasource did not answer the connection within its bound.
    ConnectTimedOut,
    /// `connect`: the TLS handshake failed (the server offers no TLS where the mode needs
    /// it, or its certificate does not verify).
    TlsRefused,
    /// `validation`: a sync read from the log lost its replication slot (the server
    /// invalidated it past `max_slot_wal_keep_size`, or it was dropped): the changes since
    /// its last job are gone from the log, and only a reset (a new snapshot) continues.
    LogSlotLost,
}

impl Reason {
    /// The category of an error of this reason.
    pub const fn category(self) -> Category {
        match self {
            Reason::ConnectionNotFound | Reason::NoConnector => Category::NotFound,
            Reason::ConnectionExists | Reason::ActiveExecutions => Category::Conflict,
            Reason::ForbiddenHost | Reason::InvalidTlsMode | Reason::LogSlotLost => {
                Category::Validation
            }
            Reason::HostNotResolved
            | Reason::LoginRefused
            | Reason::DatabaseUnknown
            | Reason::NotListening
            | Reason::ConnectTimedOut
            | Reason::TlsRefused => Category::Connect,
        }
    }

    /// Its fixed message (for [`Reason::NoConnector`], the start of it: the type follows).
    pub const fn message(self) -> &'static str {
        match self {
            Reason::ConnectionNotFound => msg::CONNECTION_NOT_FOUND,
            Reason::ConnectionExists => msg::CONNECTION_EXISTS,
            Reason::ActiveExecutions => msg::ACTIVE_EXECUTIONS,
            Reason::HostNotResolved => msg::HOST_NOT_RESOLVED,
            Reason::ForbiddenHost => msg::HOST_FORBIDDEN,
            Reason::InvalidTlsMode => msg::TLS_MODE_INVALID,
            Reason::NoConnector => msg::NO_CONNECTOR_PREFIX,
            Reason::LoginRefused => msg::LOGIN_REFUSED,
            Reason::DatabaseUnknown => msg::DATABASE_UNKNOWN,
            Reason::NotListening => msg::NOT_LISTENING,
            Reason::ConnectTimedOut => msg::CONNECT_TIMED_OUT,
            Reason::TlsRefused => msg::TLS_REFUSED,
            Reason::LogSlotLost => msg::LOG_SLOT_LOST,
        }
    }
}

/// Whether retrying the same operation later can help: the one answer every host acts on
/// (requeue with a delay, or fail the job now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A dependency failed or was slow: the same operation may succeed later.
    Helps,
    /// The failure is an answer (bad input, a refused login, a query the database
    /// rejected) or a bug: retrying cannot help.
    Futile,
}

impl Retry {
    /// What a category says when nothing more is known ([`Category::is_retryable`]).
    pub const fn of(category: Category) -> Retry {
        if category.is_retryable() {
            Retry::Helps
        } else {
            Retry::Futile
        }
    }
}

/// An engine failure: category + fixed message, with an optional hidden cause.
pub struct EngineError {
    category: Category,
    message: Cow<'static, str>,
    cause: Option<Cause>,
    /// Whether a retry can help: from the category when made, [`Retry::Futile`] for a
    /// final answer, and carried over when the engine rewrites the error.
    retry: Retry,
    /// The specific failure, set by whoever made the error ([`EngineError::of`]).
    reason: Option<Reason>,
}

impl EngineError {
    /// A new error with a fixed message and no cause.
    pub fn new(category: Category, message: impl Into<Cow<'static, str>>) -> Self {
        EngineError {
            category,
            message: message.into(),
            cause: None,
            retry: Retry::of(category),
            reason: None,
        }
    }

    /// A new error that keeps `cause` reachable through `source()` but never renders it.
    pub fn wrap(
        category: Category,
        message: impl Into<Cow<'static, str>>,
        cause: impl Into<Cause>,
    ) -> Self {
        EngineError {
            category,
            message: message.into(),
            cause: Some(cause.into()),
            retry: Retry::of(category),
            reason: None,
        }
    }

    /// The error of `reason`: its category and fixed message.
    pub fn of(reason: Reason) -> Self {
        Self::new(reason.category(), reason.message()).with_reason(reason)
    }

    /// [`EngineError::of`], keeping `cause` reachable through `source()` but never
    /// rendered.
    pub fn wrap_of(reason: Reason, cause: impl Into<Cause>) -> Self {
        Self::wrap(reason.category(), reason.message(), cause).with_reason(reason)
    }

    /// Gives the error a reason (an error whose message has more than the reason's
    /// fixed text, as [`Reason::NoConnector`]'s).
    pub(crate) fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = Some(reason);
        self
    }

    pub fn category(&self) -> Category {
        self.category
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The specific failure, where a caller acts on more than the category: a field set
    /// where the error was made, so hosts match a variant, never message text.
    pub fn reason(&self) -> Option<Reason> {
        self.reason
    }

    /// Marks the failure as final: the other side answered (a refused login, a query the
    /// database rejected), so retrying cannot help whatever the category says.
    pub fn final_answer(mut self) -> Self {
        self.retry = Retry::Futile;
        self
    }

    /// Whether a retry can help (the field: set from the category, kept through rewrites).
    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// The same error, with whether a retry helps taken from what is known of its origin
    /// (a rewritten connector error keeps its connector's answer).
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Whether a retry can help: [`Retry::Helps`]; never for a
    /// [final answer](Self::final_answer).
    pub fn is_retryable(&self) -> bool {
        self.retry == Retry::Helps
    }

    /// The hidden cause, if any, downcast to a host's own error type.
    pub fn cause_as<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.cause.as_deref().and_then(|c| c.downcast_ref::<E>())
    }

    pub(crate) fn validation(message: &'static str) -> Self {
        Self::new(Category::Validation, message)
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine: [{}] {}", self.category, self.message)
    }
}

impl fmt::Debug for EngineError {
    // Debug is the same as Display: the cause may hold driver text and stays hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// The fixed message catalogue (docs/engine.md, "Errors"). Tests pin every text.
pub mod msg {
    pub const REGISTRY_REQUIRED: &str = "connector registry is required";
    pub const PROTECTOR_REQUIRED: &str =
        "credential protector is required when encrypted persistence is enabled";
    pub const TENANT_INVALID: &str = "tenant id is invalid";
    pub const TENANT_SCOPE_REQUIRED: &str = "tenant scope is required";
    pub const STORE_NOT_CONFIGURED: &str = "connection store is not configured";
    pub const PROTECTOR_NOT_CONFIGURED: &str = "credential protector is not configured";
    pub const CONNECTION_EXISTS: &str = "connection already exists";
    pub const CONNECTION_NOT_FOUND: &str = "connection not found";
    pub const ACTIVE_EXECUTIONS: &str = "connection has active executions";
    pub const CHECK_ACTIVE_FAILED: &str = "failed to check for active executions";
    pub const PROTECT_FAILED: &str = "failed to protect connection credential";
    pub const NO_CONNECTOR_PREFIX: &str = "no connector registered for datasource type ";
    pub const BUILD_FAILED: &str = "failed to build connector for connection";
    pub const CONNECT_FAILED: &str = "failed to connect to datasource";
    pub const HOST_NOT_RESOLVED: &str = "datasource host could not be resolved";
    /// Why a connection failed, where the caller must fix it (`connect`, a reason each).
    pub const LOGIN_REFUSED: &str = "the datasource refused the login";
    pub const DATABASE_UNKNOWN: &str = "the datasource has no database of that name";
    pub const NOT_LISTENING: &str = "nothing listens at the datasource's host and port";
    pub const CONNECT_TIMED_OUT: &str = "the datasource did not answer the connection in time";
    pub const TLS_REFUSED: &str = "the TLS handshake with the datasource failed";
    pub const HOST_FORBIDDEN: &str = "host is not a valid external database endpoint";
    pub const LOG_SLOT_LOST: &str = "the sync's replication slot was invalidated or dropped: the changes since its last job are gone from the log; reset the sync (POST /v1/syncs/{id}/reset) to start over with a new snapshot";
    pub const LOG_RELEASE_FAILED: &str =
        "failed to drop the sync's replication slot and publication on the datasource";
    pub const TLS_MODE_INVALID: &str = "the TLS mode is not one of the connection type's";
    pub const DISCOVER_FAILED: &str = "failed to discover datasource schema";
    pub const VALIDATE_NO_DATASOURCES: &str = "schema validation request has no datasources";
    pub const VALIDATE_BLANK_CONFIG: &str =
        "schema validation request has a blank datasource config name";
    pub const VALIDATE_BLANK_TABLE: &str = "schema validation request has a blank table name";
    pub const VALIDATE_BLANK_FIELD: &str = "schema validation request has a blank field name";
    pub const VALIDATE_BLANK_FILTER: &str =
        "schema validation request has a blank filter field name";
    pub const PLAN_NO_FIELDS: &str = "extraction request has no mapped fields";
    pub const PLAN_NO_TABLES: &str = "extraction datasource selects no tables";
    pub const OVERRIDE_PREFIX: &str = "limit override exceeds the configured maximum: ";
    pub const PLAN_BLANK_CONFIG: &str = "extraction request has a blank datasource config name";
    pub const UNKNOWN_DATASOURCE: &str = "extraction references an unknown datasource connection";
    pub const DATASOURCE_COUNT: &str =
        "datasource count exceeds the configured maximum: limits.maxDatasources";
    pub const PLAN_SCHEMA_INVALID: &str = "extraction request failed schema validation";
    /// An incremental read of a table not selected, with a blank cursor or key column,
    /// or starting after a watermark on other columns.
    pub const PLAN_INCREMENTAL_INVALID: &str = "extraction request has an invalid incremental read";
    pub const STORE_NEEDS_SINK: &str = "store mode requires a configured result sink";
    pub const QUERY_FAILED: &str = "failed to query datasource";
    pub const DEADLINE: &str = "execution exceeded its deadline";
    pub const CANCELED: &str = "execution canceled";
    pub const SERIALIZE_FAILED: &str = "failed to serialize extraction result";
    pub const PANIC_PREFIX: &str = "extraction step panicked: ";
    pub const RESULT_TOO_LARGE: &str = "extraction result exceeds the configured size limit";
    pub const PERSIST_FAILED: &str = "failed to persist extraction result";
    /// A typed format (Parquet) met a value its column's type cannot hold (a MySQL zero
    /// date in a `DATE` column, SQLite text in an `INTEGER` column, …). Deterministic:
    /// retrying cannot help; NDJSON carries every value.
    pub const VALUE_NOT_REPRESENTABLE: &str =
        "a value cannot be represented in the requested result format";
    /// The configured sink stores single-stream results only.
    pub const PARTS_UNSUPPORTED: &str = "result sink cannot store multi-part results";
    /// Written to the execution store when a failure is not an `EngineError`.
    pub const EXECUTION_FAILED: &str = "execution failed";
    pub const SINK_UNAVAILABLE: &str = "result sink unavailable";
    pub const EXECUTION_STORE_UNAVAILABLE: &str = "execution store unavailable";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_category_and_message_but_never_the_cause() {
        let cause = std::io::Error::other("password=hunter2 host=10.0.0.1");
        let err = EngineError::wrap(Category::Connect, msg::CONNECT_FAILED, cause);
        assert_eq!(
            err.to_string(),
            "engine: [connect] failed to connect to datasource"
        );
        assert_eq!(format!("{err:?}"), err.to_string());
        assert_eq!(format!("{err:#?}"), err.to_string());
        let source = std::error::Error::source(&err).expect("cause reachable");
        assert!(source.to_string().contains("hunter2"));
        assert!(err.cause_as::<std::io::Error>().is_some());
    }

    #[test]
    fn category_strings_are_stable_and_parse_exactly() {
        let strings: Vec<_> = Category::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            strings,
            [
                "validation",
                "not_found",
                "unauthorized",
                "forbidden",
                "limit_exceeded",
                "conflict",
                "unavailable",
                "connect",
                "timeout",
                "canceled",
                "internal"
            ]
        );
        for c in Category::ALL {
            assert_eq!(Category::parse(c.as_str()), Some(c));
        }
        for bad in ["", "Validation", "cancelled", "NOT_FOUND", "internal "] {
            assert_eq!(Category::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn retryability_follows_category() {
        let retryable: Vec<_> = Category::ALL
            .into_iter()
            .filter(|c| c.is_retryable())
            .collect();
        assert_eq!(
            retryable,
            [Category::Unavailable, Category::Connect, Category::Timeout]
        );
    }
}

#[cfg(test)]
mod reason_tests {
    use super::*;

    #[test]
    fn a_reason_is_what_made_the_error_not_its_text() {
        for reason in [
            Reason::ConnectionNotFound,
            Reason::ConnectionExists,
            Reason::ActiveExecutions,
            Reason::HostNotResolved,
            Reason::ForbiddenHost,
            Reason::InvalidTlsMode,
            Reason::NoConnector,
            Reason::LoginRefused,
            Reason::DatabaseUnknown,
            Reason::NotListening,
            Reason::ConnectTimedOut,
            Reason::TlsRefused,
            Reason::LogSlotLost,
        ] {
            let e = EngineError::of(reason);
            assert_eq!(
                (e.reason(), e.category(), e.message()),
                (Some(reason), reason.category(), reason.message())
            );
            let wrapped = EngineError::wrap_of(reason, std::io::Error::other("driver text"));
            assert_eq!(wrapped.reason(), Some(reason));
            assert!(!wrapped.to_string().contains("driver text"));
        }
        // The same text made without the reason is not that failure.
        let e = EngineError::new(Category::Conflict, msg::CONNECTION_EXISTS);
        assert_eq!(e.reason(), None);
        assert_eq!(EngineError::new(Category::Internal, "x").reason(), None);
    }
}
