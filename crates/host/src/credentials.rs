//! Credentials: the engine's [`CredentialProtector`] over the crypto crate's AES-256-GCM
//! cipher, and the connectors' [`CredentialSource`] that reveals a stored secret for a
//! connector about to connect.

use std::collections::BTreeMap;
use std::sync::Arc;

use fetcher_connectors::CredentialSource;
use fetcher_crypto::CredentialCipher;
use fetcher_engine::ports::{ConnectionStore, CredentialProtector};
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, EngineError, ProtectedCredential, Secret,
    TenantContext,
};

use crate::ports::KeyProvider;

fn unavailable(text: &'static str) -> EngineError {
    EngineError::new(Category::Unavailable, text)
}

/// Protects passwords with the key ring's current credentials key; reveals with the
/// version the secret was stored under. Stored bytes are the reference format (Base64 of
/// nonce ‖ ciphertext ‖ tag).
pub struct CipherProtector {
    keys: Arc<dyn KeyProvider>,
}

impl CipherProtector {
    pub fn new(keys: Arc<dyn KeyProvider>) -> Self {
        CipherProtector { keys }
    }

    async fn cipher(&self) -> Result<CredentialCipher, EngineError> {
        let ring = self
            .keys
            .key_ring()
            .await
            .map_err(|_| unavailable("key service unavailable"))?;
        Ok(CredentialCipher::new((*ring).clone()))
    }
}

impl CredentialProtector for CipherProtector {
    fn protect<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        plaintext: &'a [u8],
    ) -> BoxFuture<'a, fetcher_engine::Result<ProtectedCredential>> {
        Box::pin(async move {
            let cipher = self.cipher().await?;
            let text = std::str::from_utf8(plaintext).map_err(|_| {
                EngineError::new(Category::Validation, "password must be UTF-8 text")
            })?;
            let p = cipher.protect(text).map_err(|e| {
                EngineError::wrap(Category::Unavailable, "failed to protect credential", e)
            })?;
            Ok(ProtectedCredential {
                ciphertext: p.ciphertext.into_bytes(),
                key_version: p.key_version,
            })
        })
    }

    fn reveal<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        c: &'a ProtectedCredential,
    ) -> BoxFuture<'a, fetcher_engine::Result<Secret>> {
        Box::pin(async move {
            let text = std::str::from_utf8(&c.ciphertext)
                .map_err(|_| unavailable("stored credential is corrupt"))?;
            let revealed = self.cipher().await?.reveal(text, &c.key_version);
            let plain = match revealed {
                Ok(plain) => plain,
                // Sealed under a key version this ring may lack (rotated since it was
                // loaded): once more with the ring loaded afresh.
                Err(_) => {
                    let fresh = self
                        .keys
                        .reload()
                        .await
                        .map_err(|_| unavailable("key service unavailable"))?;
                    CredentialCipher::new((*fresh).clone())
                        .reveal(text, &c.key_version)
                        .map_err(|e| {
                            EngineError::wrap(
                                Category::Unavailable,
                                "failed to reveal credential",
                                e,
                            )
                        })?
                }
            };
            Ok(Secret::from(plain.as_str()))
        })
    }
}

/// Where a connector's password comes from: internal (env-declared) datasources carry
/// theirs in memory; stored connections are revealed from the connection store. A stored
/// connection is never treated as internal because its password is empty (a reference
/// bug); internal-ness is decided by name, from the operator's configuration.
pub struct StoredCredentials {
    store: Arc<dyn ConnectionStore>,
    protector: Arc<dyn CredentialProtector>,
    internal: BTreeMap<String, Secret>,
}

impl StoredCredentials {
    pub fn new(store: Arc<dyn ConnectionStore>, protector: Arc<dyn CredentialProtector>) -> Self {
        StoredCredentials {
            store,
            protector,
            internal: BTreeMap::new(),
        }
    }

    /// Registers an internal datasource's password by config name.
    pub fn with_internal(mut self, config_name: &str, password: Secret) -> Self {
        self.internal.insert(config_name.to_owned(), password);
        self
    }
}

impl CredentialSource for StoredCredentials {
    fn password<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        d: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, fetcher_engine::Result<Secret>> {
        Box::pin(async move {
            if let Some(p) = self.internal.get(&d.config_name)
                && d.key_version.is_empty()
            {
                return Ok(p.clone());
            }
            match self.store.credential(ctx, tenant, &d.config_name).await? {
                Some(c) => self.protector.reveal(ctx, tenant, &c).await,
                None => Ok(Secret::default()),
            }
        })
    }
}
