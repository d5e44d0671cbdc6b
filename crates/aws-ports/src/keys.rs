//! Master keys from Secrets Manager + KMS.
//!
//! The secret's value is the KMS `CiphertextBlob` of the master key, standard Base64
//! (either the whole `SecretString`, or `{"CiphertextBlob": "…"}`; a `SecretBinary` holds
//! the raw blob). Each secret version is one key version, labelled with its
//! `VersionId`: `AWSCURRENT` is the current key; every other listed version (e.g.
//! `AWSPREVIOUS`) stays readable, newest first, so a rotation never strands data sealed
//! with the old key. Loading happens once per cold start ([`CachedKeyProvider`]).

use std::sync::Arc;

use aws_sdk_kms::primitives::Blob;
use base64::Engine;
use fetcher_crypto::{
    KeyRing, MasterKey, MasterKeySource, MasterKeys, VersionedMasterKey,
    source::BoxFuture as CryptoFuture,
};
use fetcher_engine::BoxFuture;
use fetcher_host::error::{Result, ServiceError};
use fetcher_host::ports::KeyProvider;
use std::time::{Duration, Instant};

use tokio::sync::RwLock;

/// The KMS encryption context of a master key: bound to its purpose, so a blob made for
/// something else cannot be decrypted as a master key (and CloudTrail says what each
/// decrypt was for).
pub const ENCRYPTION_CONTEXT: (&str, &str) = ("fetcher:purpose", "master-key");

/// Master keys held as a KMS-encrypted secret.
#[derive(Clone, Debug)]
pub struct SecretsManagerKeySource {
    secrets: aws_sdk_secretsmanager::Client,
    kms: aws_sdk_kms::Client,
    secret_id: String,
    /// How many older versions to keep readable.
    max_previous: usize,
}

fn source_err<E>(what: &'static str) -> impl FnOnce(E) -> fetcher_crypto::Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| fetcher_crypto::Error::source_failure(what, true, Some(Box::new(e)))
}

fn config_err(what: &'static str) -> fetcher_crypto::Error {
    fetcher_crypto::Error::source_failure(what, false, None)
}

impl SecretsManagerKeySource {
    pub fn new(
        secrets: aws_sdk_secretsmanager::Client,
        kms: aws_sdk_kms::Client,
        secret_id: impl Into<String>,
    ) -> Self {
        SecretsManagerKeySource {
            secrets,
            kms,
            secret_id: secret_id.into(),
            max_previous: 8,
        }
    }

    /// Reads one version (by stage or id) and decrypts it: `(version id, key)`.
    async fn version(
        &self,
        stage: Option<&str>,
        id: Option<&str>,
    ) -> fetcher_crypto::Result<VersionedMasterKey> {
        let out = self
            .secrets
            .get_secret_value()
            .secret_id(&self.secret_id)
            .set_version_stage(stage.map(str::to_owned))
            .set_version_id(id.map(str::to_owned))
            .send()
            .await
            .map_err(source_err("master key secret unavailable"))?;
        let blob = if let Some(text) = out.secret_string() {
            let text = text.trim();
            let b64 = if text.starts_with('{') {
                let v: serde_json::Value = serde_json::from_str(text)
                    .map_err(|_| config_err("master key secret is not valid JSON"))?;
                v.get("CiphertextBlob")
                    .or_else(|| v.get("ciphertextBlob"))
                    .and_then(|b| b.as_str())
                    .ok_or_else(|| config_err("master key secret has no CiphertextBlob"))?
                    .to_owned()
            } else {
                text.to_owned()
            };
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|_| config_err("master key secret is not Base64"))?
        } else if let Some(b) = out.secret_binary() {
            b.as_ref().to_vec()
        } else {
            return Err(config_err("master key secret is empty"));
        };
        let version = out
            .version_id()
            .ok_or_else(|| config_err("master key secret has no version id"))?
            .to_owned();
        let decrypt = |context: bool| {
            let req = self.kms.decrypt().ciphertext_blob(Blob::new(blob.clone()));
            let req = if context {
                req.encryption_context(ENCRYPTION_CONTEXT.0, ENCRYPTION_CONTEXT.1)
            } else {
                req
            };
            req.send()
        };
        // Keys made before the context was used decrypt without it.
        let plain = match decrypt(true).await {
            Ok(out) => out,
            Err(_) => decrypt(false)
                .await
                .map_err(source_err("KMS decrypt of the master key failed"))?,
        };
        let bytes = plain
            .plaintext
            .ok_or_else(|| config_err("KMS returned no plaintext"))?
            .into_inner();
        VersionedMasterKey::new(version, MasterKey::from_bytes(bytes)?)
    }
}

impl MasterKeySource for SecretsManagerKeySource {
    fn load(&self) -> CryptoFuture<'_, fetcher_crypto::Result<MasterKeys>> {
        Box::pin(async move {
            let current = self.version(Some("AWSCURRENT"), None).await?;
            // Deprecated (unlabelled) versions too: data sealed two rotations back still
            // needs its key. `rotate_master_key` labels every version so none is deleted.
            let listed = self
                .secrets
                .list_secret_version_ids()
                .secret_id(&self.secret_id)
                .include_deprecated(true)
                .send()
                .await
                .map_err(source_err("master key secret unavailable"))?;
            let mut others: Vec<_> = listed
                .versions()
                .iter()
                .filter(|v| v.version_id().is_some_and(|id| id != current.version()))
                .collect();
            // Newest first.
            others.sort_by_key(|v| std::cmp::Reverse(v.created_date().map(|d| d.as_nanos())));
            let mut previous = Vec::new();
            for v in others.into_iter().take(self.max_previous) {
                match self.version(None, v.version_id()).await {
                    Ok(k) => previous.push(k),
                    // An unreadable old version only costs access to data it sealed.
                    Err(e) => {
                        tracing::warn!(error = %e, "skipping an unreadable master key version")
                    }
                }
            }
            Ok(MasterKeys { current, previous })
        })
    }
}

/// A [`KeyProvider`] that loads the key ring on first use (the cold start), serves the
/// cached ring, and loads it afresh once it is older than the refresh interval
/// ([`DEFAULT_REFRESH`]), so a warm container seals and signs under a rotated key within
/// that interval rather than until it is recycled. A refresh that fails keeps serving the
/// ring it has (every version in it is still valid) and is tried again after
/// [`RELOAD_INTERVAL`]. [`KeyProvider::reload`] replaces the ring at once (data names a
/// version the ring lacks), at most once per [`RELOAD_INTERVAL`], so a flood of forged
/// messages cannot turn into a flood of KMS calls. A failed first load is retried on the
/// next call.
pub struct CachedKeyProvider {
    source: Arc<dyn MasterKeySource>,
    ring: RwLock<Option<(Arc<KeyRing>, Instant)>>,
    min_reload: Duration,
    refresh: Duration,
}

/// The least time between two loads of the ring.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// How old a cached ring may get before it is loaded afresh (`FETCHER_KEY_REFRESH_SECS`).
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5 * 60);

impl CachedKeyProvider {
    pub fn new(source: Arc<dyn MasterKeySource>) -> Self {
        CachedKeyProvider {
            source,
            ring: RwLock::new(None),
            min_reload: RELOAD_INTERVAL,
            refresh: DEFAULT_REFRESH,
        }
    }

    /// Another least time between loads (tests).
    pub fn with_min_reload(mut self, interval: Duration) -> Self {
        self.min_reload = interval;
        self
    }

    /// Another refresh interval (at least the least time between loads).
    pub fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    async fn load(&self) -> Result<Arc<KeyRing>> {
        let ring = KeyRing::load(self.source.as_ref()).await.map_err(|e| {
            let retryable = e.is_retryable();
            ServiceError::unavailable("master key unavailable")
                .retryable(retryable)
                .with_cause(e)
        })?;
        Ok(Arc::new(ring))
    }
}

impl KeyProvider for CachedKeyProvider {
    fn key_ring(&self) -> BoxFuture<'_, Result<Arc<KeyRing>>> {
        Box::pin(async move {
            if let Some((ring, at)) = self.ring.read().await.as_ref()
                && at.elapsed() < self.refresh
            {
                return Ok(ring.clone());
            }
            let mut slot = self.ring.write().await;
            let cached = match slot.as_ref() {
                Some((ring, at)) if at.elapsed() < self.refresh => return Ok(ring.clone()),
                Some((ring, _)) => Some(ring.clone()),
                None => None,
            };
            match (self.load().await, cached) {
                (Ok(ring), _) => {
                    *slot = Some((ring.clone(), Instant::now()));
                    Ok(ring)
                }
                (Err(e), Some(ring)) => {
                    tracing::warn!(error = %e.log_detail(), "refreshing the master keys failed; the cached ones stay in use");
                    // Tried again once the least time between loads has passed.
                    let retry_at = Instant::now()
                        .checked_sub(self.refresh.saturating_sub(self.min_reload))
                        .unwrap_or_else(Instant::now);
                    *slot = Some((ring.clone(), retry_at));
                    Ok(ring)
                }
                (Err(e), None) => Err(e),
            }
        })
    }

    fn reload(&self) -> BoxFuture<'_, Result<Arc<KeyRing>>> {
        Box::pin(async move {
            let mut slot = self.ring.write().await;
            if let Some((ring, at)) = slot.as_ref()
                && at.elapsed() < self.min_reload
            {
                return Ok(ring.clone());
            }
            let ring = self.load().await?;
            *slot = Some((ring.clone(), Instant::now()));
            Ok(ring)
        })
    }
}
