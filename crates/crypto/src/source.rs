//! Where master keys come from.
//!
//! [`MasterKeySource`] is object-safe and returns a boxed `Send` future so that an async
//! implementation (AWS Secrets Manager + KMS, in another crate) fits without this crate
//! depending on an async runtime. Two implementations live here:
//!
//! * [`EnvMasterKeySource`]: environment variables (local runs, `serve`, tests).
//! * [`StaticMasterKeySource`]: fixed keys (tests, tools).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{DEFAULT_KEY_VERSION, MasterKey, MasterKeys, VersionedMasterKey};

/// A boxed, `Send` future (what [`MasterKeySource::load`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that yields the master keys: the current version and older readable ones.
///
/// Implementations report a missing or malformed configuration as a non-retryable error
/// ([`ErrorKind::Config`] / [`ErrorKind::InvalidKey`]) and backend outages as retryable
/// ones (see [`Error::source_failure`]). They must never put key material in errors.
pub trait MasterKeySource: Send + Sync {
    /// Loads the keys. Called once per process (cold start); callers cache the
    /// resulting [`KeyRing`](crate::KeyRing).
    fn load(&self) -> BoxFuture<'_, Result<MasterKeys>>;
}

impl<T: MasterKeySource + ?Sized> MasterKeySource for Arc<T> {
    fn load(&self) -> BoxFuture<'_, Result<MasterKeys>> {
        (**self).load()
    }
}

/// Fixed keys, for tests and tools.
#[derive(Clone, Debug)]
pub struct StaticMasterKeySource(MasterKeys);

impl StaticMasterKeySource {
    /// Wraps already-parsed keys.
    pub fn new(keys: MasterKeys) -> Self {
        StaticMasterKeySource(keys)
    }

    /// One version from Base64 text (version label validated).
    pub fn from_base64(version: &str, master_key_b64: &str) -> Result<Self> {
        Ok(StaticMasterKeySource(MasterKeys {
            current: VersionedMasterKey::new(version, MasterKey::from_base64(master_key_b64)?)?,
            previous: Vec::new(),
        }))
    }
}

impl MasterKeySource for StaticMasterKeySource {
    fn load(&self) -> BoxFuture<'_, Result<MasterKeys>> {
        let keys = self.0.clone();
        Box::pin(async move { Ok(keys) })
    }
}

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Reads master keys from environment variables.
///
/// | variable | meaning |
/// |---|---|
/// | `FETCHER_MASTER_KEY` (fallback `APP_ENC_KEY`) | current master key, standard Base64, ≥ 32 bytes; required |
/// | `FETCHER_MASTER_KEY_VERSION` (fallback `APP_ENC_KEY_VERSION`) | its version label; unset or empty → `"1"` |
/// | `FETCHER_MASTER_KEY_PREVIOUS` | optional older keys: `version:base64[,version:base64…]`, newest first |
///
/// Surrounding whitespace of each value and entry is trimmed. The `APP_ENC_KEY*` fallbacks
/// let a reference deployment's configuration work unchanged; a `FETCHER_*` variable,
/// when set, always wins. Each entry of `FETCHER_MASTER_KEY_PREVIOUS` is split at its
/// *last* `:` (Base64 has none), so labels may contain `:` but not `,`.
pub struct EnvMasterKeySource {
    lookup: Box<Lookup>,
}

impl EnvMasterKeySource {
    /// Variable names of the table above.
    pub const KEY: &'static str = "FETCHER_MASTER_KEY";
    /// See the table above.
    pub const VERSION: &'static str = "FETCHER_MASTER_KEY_VERSION";
    /// See the table above.
    pub const PREVIOUS: &'static str = "FETCHER_MASTER_KEY_PREVIOUS";
    /// Reference-compatible fallback for [`Self::KEY`].
    pub const LEGACY_KEY: &'static str = "APP_ENC_KEY";
    /// Reference-compatible fallback for [`Self::VERSION`].
    pub const LEGACY_VERSION: &'static str = "APP_ENC_KEY_VERSION";

    /// Reads the process environment at [`load`](MasterKeySource::load) time.
    pub fn new() -> Self {
        Self::with_lookup(|name| std::env::var(name).ok())
    }

    /// Uses `lookup` instead of the process environment (tests; avoids `set_var`).
    pub fn with_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        EnvMasterKeySource {
            lookup: Box::new(lookup),
        }
    }

    fn var(&self, name: &str, fallback: Option<&str>) -> Option<String> {
        let get = |n: &str| {
            (self.lookup)(n)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        get(name).or_else(|| fallback.and_then(get))
    }

    /// The synchronous work behind [`load`](MasterKeySource::load).
    pub fn read(&self) -> Result<MasterKeys> {
        let key = self.var(Self::KEY, Some(Self::LEGACY_KEY)).ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                "master key not configured (FETCHER_MASTER_KEY)",
            )
        })?;
        let version = self
            .var(Self::VERSION, Some(Self::LEGACY_VERSION))
            .unwrap_or_else(|| DEFAULT_KEY_VERSION.to_owned());
        let current = VersionedMasterKey::new(version, MasterKey::from_base64(&key)?)?;
        let mut previous = Vec::new();
        if let Some(list) = self.var(Self::PREVIOUS, None) {
            for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let (version, b64) = entry.rsplit_once(':').ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidKey,
                        "FETCHER_MASTER_KEY_PREVIOUS entries must be version:base64",
                    )
                })?;
                previous.push(VersionedMasterKey::new(
                    version.trim(),
                    MasterKey::from_base64(b64.trim())?,
                )?);
            }
        }
        Ok(MasterKeys { current, previous })
    }
}

impl Default for EnvMasterKeySource {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EnvMasterKeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EnvMasterKeySource")
    }
}

impl MasterKeySource for EnvMasterKeySource {
    fn load(&self) -> BoxFuture<'_, Result<MasterKeys>> {
        let result = self.read();
        Box::pin(async move { result })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::KeyRing;
    use std::collections::HashMap;
    use std::task::{Context, Poll, Waker};

    /// Polls a future that is ready immediately (the sources here never pend).
    pub(crate) fn now<F: Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("future not ready"),
        }
    }

    fn env(vars: &[(&str, &str)]) -> EnvMasterKeySource {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EnvMasterKeySource::with_lookup(move |n| map.get(n).cloned())
    }

    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

    #[test]
    fn env_source() {
        let src = env(&[
            ("FETCHER_MASTER_KEY", &format!(" {K2}\n")),
            ("FETCHER_MASTER_KEY_VERSION", "v2"),
            (
                "FETCHER_MASTER_KEY_PREVIOUS",
                &format!("v1:{K1}, old:x:{K1}"),
            ),
        ]);
        let ring = now(KeyRing::load(&src)).unwrap();
        assert_eq!(
            ring.iter().map(|k| k.version()).collect::<Vec<_>>(),
            ["v2", "v1", "old:x"]
        );
    }

    #[test]
    fn env_defaults_and_errors() {
        let ring = now(KeyRing::load(&env(&[("APP_ENC_KEY", K1)]))).unwrap();
        assert_eq!(ring.current_version(), "1");
        let e = now(KeyRing::load(&env(&[]))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(!e.is_retryable());
        let e = now(KeyRing::load(&env(&[("FETCHER_MASTER_KEY", "AQID")]))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidKey);
        let e = now(KeyRing::load(&env(&[
            ("FETCHER_MASTER_KEY", K1),
            ("FETCHER_MASTER_KEY_PREVIOUS", K2),
        ])))
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidKey);
        assert!(!e.to_string().contains(K2));
    }

    #[test]
    fn static_source() {
        let src: Arc<dyn MasterKeySource> =
            Arc::new(StaticMasterKeySource::from_base64("7", K1).unwrap());
        let ring = now(KeyRing::load(&src)).unwrap();
        assert_eq!(ring.current_version(), "7");
    }
}
