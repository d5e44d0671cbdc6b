//! The crate's single error type.
//!
//! Policy (see also the crate docs):
//!
//! * One type, [`Error`], with a coarse [`ErrorKind`] that callers branch on and
//!   [`Error::is_retryable`] that tells whether trying the same operation again can help.
//! * Messages are fixed, human-readable texts. They never contain key bytes, derived keys,
//!   plaintext, ciphertext, signatures or Base64 input. They may contain a key *version
//!   label* (labels are not secret, and the reference prints them too).
//! * Authentication failures are deliberately vague ("authentication failed"): they do not
//!   say which byte or which check failed beyond what the caller needs to act.

use std::borrow::Cow;
use std::fmt;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely. Stable for matching; new variants may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Key material is unusable: master key not Base64, master key shorter than 32 bytes,
    /// HMAC key shorter than 32 bytes, empty or ill-formed key-version label, duplicate
    /// version in a ring.
    InvalidKey,
    /// The key version named by stored data is not in the key ring.
    UnknownKeyVersion,
    /// `reveal` was called with the empty key version, which marks an *internal* datasource
    /// whose credential is not encrypted at all (docs/results.md, "Key versions"). The
    /// caller must carry an explicit "internal" flag instead of asking this crate to
    /// decrypt.
    InternalCredential,
    /// Input is not in the expected format: bad Base64, too short, bad magic, bad header,
    /// bad frame flag or length, trailing bytes after the end of a sealed stream.
    Malformed,
    /// A sealed stream ended before its final frame and trailer.
    Truncated,
    /// A cryptographic check failed: AEAD tag, key commitment, document HMAC, job binding,
    /// or envelope signature. Wrong key and tampering both land here.
    Authentication,
    /// Envelope: a required signature header (`x-message-signature`, `t`,
    /// `signature-version`) is missing or has the wrong type.
    MissingSignatureHeaders,
    /// Envelope: `signature-version` is not `v1`.
    UnsupportedSignatureVersion,
    /// Envelope: the timestamp is older than the allowed age or too far in the future.
    Stale,
    /// A [`MasterKeySource`](crate::MasterKeySource) lacks configuration (e.g. the
    /// environment variable is unset). Not retryable.
    Config,
    /// A [`MasterKeySource`](crate::MasterKeySource) could not reach its backend
    /// (network, throttling). Retryable.
    SourceUnavailable,
    /// The underlying reader or writer failed (stream adapters only).
    Io,
    /// The operation was misused (e.g. a sealer used after an error) or the crypto backend
    /// failed unexpectedly (random generator).
    Internal,
}

impl ErrorKind {
    /// A short stable name, e.g. for metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidKey => "invalid_key",
            ErrorKind::UnknownKeyVersion => "unknown_key_version",
            ErrorKind::InternalCredential => "internal_credential",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Authentication => "authentication",
            ErrorKind::MissingSignatureHeaders => "missing_signature_headers",
            ErrorKind::UnsupportedSignatureVersion => "unsupported_signature_version",
            ErrorKind::Stale => "stale",
            ErrorKind::Config => "config",
            ErrorKind::SourceUnavailable => "source_unavailable",
            ErrorKind::Io => "io",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The crate's error. See the module docs for the message policy.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    retryable: bool,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` with a fixed message. The message must not contain secrets.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        let retryable = matches!(kind, ErrorKind::SourceUnavailable);
        Error {
            kind,
            message: message.into(),
            retryable,
            source: None,
        }
    }

    /// For [`MasterKeySource`](crate::MasterKeySource) implementations: a backend failure
    /// with an explicit retry decision and an optional cause (the cause's text must not
    /// contain key material either).
    pub fn source_failure(
        message: impl Into<Cow<'static, str>>,
        retryable: bool,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        let kind = if retryable {
            ErrorKind::SourceUnavailable
        } else {
            ErrorKind::Config
        };
        Error {
            kind,
            message: message.into(),
            retryable,
            source,
        }
    }

    /// The category.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether repeating the same operation may succeed (transient backend or I/O
    /// failure). Cryptographic and format failures are never retryable.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    pub(crate) fn malformed(message: &'static str) -> Self {
        Error::new(ErrorKind::Malformed, message)
    }

    pub(crate) fn auth(message: &'static str) -> Self {
        Error::new(ErrorKind::Authentication, message)
    }

    pub(crate) fn internal(message: &'static str) -> Self {
        Error::new(ErrorKind::Internal, message)
    }

    pub(crate) fn io(err: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let retryable = matches!(
            err.kind(),
            K::Interrupted
                | K::TimedOut
                | K::WouldBlock
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
        );
        Error {
            kind: ErrorKind::Io,
            message: Cow::Borrowed("i/o error in the underlying stream"),
            retryable,
            source: Some(Box::new(err)),
        }
    }

    /// Recovers an [`Error`] that was wrapped into an [`std::io::Error`] by the stream
    /// adapters; any other I/O error becomes an [`ErrorKind::Io`] error.
    pub fn from_io(err: std::io::Error) -> Self {
        if !err.get_ref().is_some_and(|e| e.is::<Error>()) {
            return Error::io(err);
        }
        let kind = err.kind();
        match err.into_inner().map(|e| e.downcast::<Error>()) {
            Some(Ok(e)) => *e,
            // Unreachable after the check above; stay total anyway.
            _ => Error::io(std::io::Error::from(kind)),
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(err: Error) -> Self {
        let kind = match err.kind {
            ErrorKind::Truncated => std::io::ErrorKind::UnexpectedEof,
            ErrorKind::Io => std::io::ErrorKind::Other,
            _ => std::io::ErrorKind::InvalidData,
        };
        std::io::Error::new(kind, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_round_trip_keeps_kind() {
        let e = Error::auth("authentication failed");
        let io: std::io::Error = e.into();
        assert_eq!(io.kind(), std::io::ErrorKind::InvalidData);
        let back = Error::from_io(io);
        assert_eq!(back.kind(), ErrorKind::Authentication);
        let plain = Error::from_io(std::io::Error::new(std::io::ErrorKind::TimedOut, "x"));
        assert_eq!(plain.kind(), ErrorKind::Io);
        assert!(plain.is_retryable());
    }

    #[test]
    fn retryability() {
        assert!(!Error::malformed("x").is_retryable());
        assert!(Error::new(ErrorKind::SourceUnavailable, "x").is_retryable());
        assert!(!Error::source_failure("x", false, None).is_retryable());
        assert_eq!(
            Error::source_failure("x", false, None).kind(),
            ErrorKind::Config
        );
    }
}
