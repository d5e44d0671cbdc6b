//! The service's error type: a kind, a safe message, and whether a retry can help.
//!
//! Messages are written by this crate and safe to show; adapter and SDK text is kept only
//! as a hidden cause (reachable through `source()`, never rendered), so it can reach a
//! log line (without credentials) but never an HTTP body or an event.

use std::borrow::Cow;
use std::fmt;

use fetcher_engine::{Category, EngineError};

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

/// What went wrong, coarsely: decides HTTP status and retry behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Malformed or invalid input.
    Validation,
    NotFound,
    /// A uniqueness or state conflict (duplicate name, active jobs, lost a claim race).
    Conflict,
    Unauthorized,
    Forbidden,
    RateLimited,
    /// A dependency (store, queue, object store, key service, event bus) failed.
    Unavailable,
    /// A datasource or dependency did not answer in time (the engine's `timeout`).
    Timeout,
    /// The datasource could not be reached (the engine's `connect`).
    Connect,
    /// A configured limit (result size, tables, a job that cannot be continued).
    LimitExceeded,
    /// Stopped on request.
    Canceled,
    /// A sealed object or signature did not authenticate.
    Integrity,
    Internal,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Validation => "validation",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::LimitExceeded => "limit_exceeded",
            ErrorKind::Canceled => "canceled",
            ErrorKind::Integrity => "integrity",
            ErrorKind::Internal => "internal",
        }
    }
}

type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

pub struct ServiceError {
    kind: ErrorKind,
    retryable: bool,
    message: Cow<'static, str>,
    cause: Option<Cause>,
}

impl ServiceError {
    /// A new error; retryable iff the kind is `Unavailable`.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        ServiceError {
            kind,
            retryable: kind == ErrorKind::Unavailable,
            message: message.into(),
            cause: None,
        }
    }

    /// Keeps `cause` reachable (for logs) but never renders it.
    pub fn with_cause(mut self, cause: impl Into<Cause>) -> Self {
        self.cause = Some(cause.into());
        self
    }

    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    pub fn unavailable(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub fn validation(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Validation, message)
    }

    pub fn conflict(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the same operation may succeed later (a queue message should come back).
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The full cause chain, for logs (may hold adapter text; never send it to clients).
    pub fn log_detail(&self) -> String {
        let mut out = self.to_string();
        let mut next = self
            .cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static));
        while let Some(c) = next {
            out.push_str(": ");
            out.push_str(&c.to_string());
            next = c.source();
        }
        out
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ServiceError({}, retryable={}, {:?})",
            self.kind.as_str(),
            self.retryable,
            self.message
        )
    }
}

impl std::error::Error for ServiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

impl From<EngineError> for ServiceError {
    /// Engine errors keep their rendered text (`engine: [<category>] <message>`, already
    /// fixed and credential-free), their retryability and their category: every engine
    /// category has its own kind, so a timeout stays a timeout.
    fn from(e: EngineError) -> Self {
        let kind = match e.category() {
            Category::Validation => ErrorKind::Validation,
            Category::NotFound => ErrorKind::NotFound,
            Category::Unauthorized => ErrorKind::Unauthorized,
            Category::Forbidden => ErrorKind::Forbidden,
            Category::Conflict => ErrorKind::Conflict,
            Category::LimitExceeded => ErrorKind::LimitExceeded,
            Category::Unavailable => ErrorKind::Unavailable,
            Category::Connect => ErrorKind::Connect,
            Category::Timeout => ErrorKind::Timeout,
            Category::Canceled => ErrorKind::Canceled,
            Category::Internal => ErrorKind::Internal,
        };
        let retryable = e.is_retryable();
        ServiceError {
            kind,
            retryable,
            message: e.to_string().into(),
            cause: Some(Box::new(e)),
        }
    }
}

impl From<fetcher_crypto::Error> for ServiceError {
    fn from(e: fetcher_crypto::Error) -> Self {
        let retryable = e.is_retryable();
        let kind = if retryable {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Integrity
        };
        ServiceError {
            kind,
            retryable,
            message: e.to_string().into(),
            cause: Some(Box::new(e)),
        }
    }
}

impl From<ServiceError> for EngineError {
    /// For adapters that implement engine ports: the service message is already safe.
    fn from(e: ServiceError) -> Self {
        let category = match e.kind {
            ErrorKind::Validation => Category::Validation,
            ErrorKind::NotFound => Category::NotFound,
            ErrorKind::Conflict => Category::Conflict,
            ErrorKind::Unauthorized => Category::Unauthorized,
            ErrorKind::Forbidden => Category::Forbidden,
            ErrorKind::RateLimited | ErrorKind::Unavailable => Category::Unavailable,
            ErrorKind::Timeout => Category::Timeout,
            ErrorKind::Connect => Category::Connect,
            ErrorKind::LimitExceeded => Category::LimitExceeded,
            ErrorKind::Canceled => Category::Canceled,
            ErrorKind::Integrity | ErrorKind::Internal => Category::Internal,
        };
        let message = e.message.clone();
        EngineError::wrap(category, message, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #29: no engine category is lost on the way through the host and back (a timeout
    /// stays a timeout, a limit stays a limit), and retryability travels with it.
    #[test]
    fn every_engine_category_survives_the_host() {
        for category in Category::ALL {
            let e = EngineError::new(category, "x");
            let retryable = e.is_retryable();
            let service = ServiceError::from(e);
            assert_eq!(service.kind().as_str(), category.as_str(), "{category:?}");
            assert_eq!(service.is_retryable(), retryable, "{category:?}");
            assert_eq!(EngineError::from(service).category(), category);
        }
    }
}
