//! The driver's errors, classified by what happened (the SQL connectors' rules, in
//! MongoDB's terms): a login the server refused is final; a server that cannot be reached
//! or that steps down is an outage (retried); a command the server refuses (a permission,
//! a bad value) is final. The driver's error is only ever the hidden cause.

use fetcher_connect::error::msg;
use fetcher_engine::{Category, EngineError, Reason};
use mongodb::error::{Error, ErrorKind};

/// Server error codes that say "try again": the node is going away, electing, or the
/// network failed (MongoDB's own retryable-read codes).
const TRANSIENT_CODES: &[i32] = &[
    6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13388, 13435, 13436, 63, 150, 134,
];

fn io_kind(e: &Error) -> Option<std::io::ErrorKind> {
    match e.kind.as_ref() {
        ErrorKind::Io(io) => Some(io.kind()),
        _ => None,
    }
}

/// Why a connection (the first command of a client) failed.
pub fn connect_failed(e: Error) -> EngineError {
    let (reason, refused) = match e.kind.as_ref() {
        ErrorKind::Authentication { .. } => (Some(Reason::LoginRefused), true),
        ErrorKind::ServerSelection { message, .. } if message.contains("onnection refused") => {
            (Some(Reason::NotListening), false)
        }
        ErrorKind::ServerSelection { message, .. }
            if message.contains("ertificate")
                || message.contains("TLS")
                || message.contains("tls") =>
        {
            (Some(Reason::TlsRefused), true)
        }
        _ => match io_kind(&e) {
            Some(std::io::ErrorKind::ConnectionRefused) => (Some(Reason::NotListening), false),
            Some(std::io::ErrorKind::TimedOut) => (Some(Reason::ConnectTimedOut), false),
            _ => (None, false),
        },
    };
    let err = match reason {
        Some(r) => EngineError::wrap_of(r, e),
        None => EngineError::wrap(Category::Connect, msg::CONNECT_FAILED, e),
    };
    if refused { err.final_answer() } else { err }
}

fn transient(e: &Error) -> bool {
    e.contains_label("RetryableReadError")
        || matches!(
            e.kind.as_ref(),
            ErrorKind::Io(_)
                | ErrorKind::ServerSelection { .. }
                | ErrorKind::ConnectionPoolCleared { .. }
        )
        || matches!(e.kind.as_ref(), ErrorKind::Command(c) if TRANSIENT_CODES.contains(&c.code))
}

/// A read or a discovery command that failed.
pub fn query_failed(e: Error, what: &'static str) -> EngineError {
    if matches!(e.kind.as_ref(), ErrorKind::Authentication { .. }) {
        return EngineError::wrap_of(Reason::LoginRefused, e).final_answer();
    }
    if transient(&e) {
        EngineError::wrap(Category::Unavailable, what, e)
    } else {
        EngineError::wrap(Category::Validation, msg::QUERY_REFUSED, e)
    }
}
