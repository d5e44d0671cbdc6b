//! The SQL connectors' errors: the shared catalogue ([`fetcher_connect::error`]) and the
//! classification of sqlx's errors (what a refused login, an outage or a refused query
//! is). Driver errors are kept only as the hidden cause ([`EngineError::wrap`]); no
//! message ever carries driver text, a DSN, a password, a host or a row value.

pub use fetcher_connect::error::*;

use fetcher_engine::{Category, EngineError, Reason};

/// A failed connection: `connect`, retryable unless the server answered with a refusal
/// (a wrong password, a locked or login-less user, an unknown database: [`answer`] says
/// the login was refused, not that the server was unreachable).
pub fn connect_failed(cause: sqlx::Error) -> EngineError {
    let reason = connect_reason(&cause);
    let refused = answer(&cause) != Answer::Transient
        || matches!(
            reason,
            Some(Reason::LoginRefused | Reason::DatabaseUnknown | Reason::TlsRefused)
        );
    let e = match reason {
        Some(r) => EngineError::wrap_of(r, cause),
        None => EngineError::wrap(Category::Connect, msg::CONNECT_FAILED, cause),
    };
    if refused { e.final_answer() } else { e }
}

/// Why a connection failed, where the answer tells the caller what to fix: the engine's
/// reason, or `None`.
fn connect_reason(e: &sqlx::Error) -> Option<Reason> {
    match e {
        sqlx::Error::Database(d) => {
            if let Some(my) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                return match my.number() {
                    // Access denied (to the server, to the database), a plugin or an
                    // expired password the server refuses.
                    1044 | 1045 | 1251 | 1698 | 1862 | 4151 => Some(Reason::LoginRefused),
                    1049 => Some(Reason::DatabaseUnknown),
                    _ => None,
                };
            }
            let code = d.code().unwrap_or_default();
            match code.get(..2) {
                Some("28") => Some(Reason::LoginRefused),
                _ if code == "3D000" => Some(Reason::DatabaseUnknown),
                // No privilege to connect to the database.
                _ if code == "42501" => Some(Reason::LoginRefused),
                _ => None,
            }
        }
        // A handshake rustls refused (a certificate that does not verify, no common
        // protocol) reaches here as an I/O error carrying rustls' own error.
        sqlx::Error::Io(io)
            if io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
        {
            Some(Reason::TlsRefused)
        }
        sqlx::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => Some(Reason::NotListening),
            std::io::ErrorKind::TimedOut => Some(Reason::ConnectTimedOut),
            _ => None,
        },
        sqlx::Error::Tls(_) => Some(Reason::TlsRefused),
        _ => None,
    }
}

/// What the database's own answer to a statement says about retrying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Not an answer from the database (the connection broke, a pool or TLS failure), or
    /// one that reports a connection or resource failure: a retry may help.
    Transient,
    /// A data exception (SQLSTATE class 22): the query's values are refused.
    ValueRefused,
    /// Any other error the database raised for the statement (a permission, a policy that
    /// raises, a missing object): an answer, not an outage.
    Refused,
}

/// Classifies by what the database said: the SQLSTATE class on PostgreSQL, the error
/// number on MySQL/MariaDB (their SQLSTATE is mostly the catch-all `HY000`), the primary
/// result code on SQLite. Only connection, resource, lock and shutdown failures are
/// transient; a tenant can raise any other error at will, so none of them may hold a
/// worker through retries.
fn answer(e: &sqlx::Error) -> Answer {
    let sqlx::Error::Database(d) = e else {
        return Answer::Transient;
    };
    if let Some(my) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return match my.number() {
            // Connection, shutdown, too many connections, out of memory or disk, lock
            // wait and deadlock, interrupted and timed-out statements, lost connections.
            // Also: a node not ready (1047, Galera), a per-user resource limit (1226), a
            // table changed under the transaction (1412), the server in offline mode
            // (3032), a session it ended for inactivity (4031).
            1021 | 1037 | 1038 | 1040 | 1041 | 1047 | 1053 | 1152 | 1153 | 1158 | 1159 | 1160
            | 1161 | 1203 | 1205 | 1213 | 1226 | 1317 | 1412 | 1927 | 1969 | 2002 | 2003 | 2006
            | 2013 | 3024 | 3032 | 4031 => Answer::Transient,
            _ if d.code().is_some_and(|c| c.starts_with("22")) => Answer::ValueRefused,
            _ => Answer::Refused,
        };
    }
    #[cfg(feature = "sqlite")]
    if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        let primary = d
            .code()
            .and_then(|c| c.parse::<i64>().ok())
            .map(|c| c & 0xff);
        // SQLITE_BUSY, _LOCKED, _NOMEM, _IOERR, _FULL, _CANTOPEN.
        return match primary {
            Some(5 | 6 | 7 | 10 | 13 | 14) => Answer::Transient,
            _ => Answer::Refused,
        };
    }
    let code = d.code().unwrap_or_default();
    // The server ended the session (FATAL or PANIC: an idle-in-transaction timeout, a
    // terminated backend, a shutdown): an outage of this session, not an answer to the
    // statement. A login the server refuses is FATAL too, and stays its answer: invalid
    // authorization (28), an unknown database (3D), a denied privilege (42).
    let ended = d
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some_and(|pg| {
            matches!(
                pg.severity(),
                sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
            )
        });
    if ended && !matches!(code.get(..2), Some("28" | "3D" | "42")) {
        return Answer::Transient;
    }
    match code.get(..2) {
        Some("22") => Answer::ValueRefused,
        // Connection exception, transaction rollback (serialization, deadlock),
        // insufficient resources, operator intervention (shutdown, statement timeout),
        // system error.
        Some("08" | "40" | "53" | "57" | "58") => Answer::Transient,
        // Lock not available, object in use, an idle-in-transaction session ended,
        // snapshot too old.
        _ if matches!(code.as_ref(), "55P03" | "55006" | "25P03" | "72000") => Answer::Transient,
        _ => Answer::Refused,
    }
}

/// A failed query: `unavailable` when a retry may help ([`answer`]); a data exception is
/// `validation` (`VALUE_REFUSED`); any other error the database answered fails the job at
/// once (`QUERY_REFUSED`), instead of holding a worker through retries.
pub fn query_failed(cause: sqlx::Error) -> EngineError {
    match answer(&cause) {
        Answer::Transient => EngineError::wrap(Category::Unavailable, msg::QUERY_FAILED, cause),
        Answer::ValueRefused => EngineError::wrap(Category::Validation, msg::VALUE_REFUSED, cause),
        Answer::Refused => EngineError::wrap(Category::Validation, msg::QUERY_REFUSED, cause),
    }
}

/// A failed discovery, classified as [`query_failed`] is.
pub fn discover_failed(cause: sqlx::Error) -> EngineError {
    match answer(&cause) {
        Answer::Transient => EngineError::wrap(Category::Unavailable, msg::DISCOVER_FAILED, cause),
        _ => EngineError::wrap(Category::Validation, msg::QUERY_REFUSED, cause),
    }
}

/// A failed read through rusqlite (SQLite's rows, `sqlite::produce`), classified as
/// [`query_failed`] classifies sqlx's SQLite errors: busy, locked, out of memory, I/O,
/// full or unopenable is `unavailable`; anything else the statement's own.
#[cfg(feature = "sqlite")]
pub fn sqlite_read_failed(cause: rusqlite::Error) -> EngineError {
    // SQLITE_BUSY, _LOCKED, _NOMEM, _IOERR, _FULL, _CANTOPEN.
    let transient = match &cause {
        rusqlite::Error::SqliteFailure(e, _) => {
            matches!(e.extended_code & 0xff, 5 | 6 | 7 | 10 | 13 | 14)
        }
        _ => false,
    };
    if transient {
        EngineError::wrap(Category::Unavailable, msg::QUERY_FAILED, cause)
    } else {
        EngineError::wrap(Category::Validation, msg::QUERY_REFUSED, cause)
    }
}

pub fn decode_failed() -> EngineError {
    EngineError::new(Category::Internal, msg::DECODE_FAILED)
}
