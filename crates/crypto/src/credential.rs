//! Datasource credential protection (docs/results.md, "Stored credentials").
//!
//! Stored value: `Base64Std(nonce[12] ‖ ciphertext ‖ tag[16])`, AES-256-GCM under the
//! credentials key of the ring's current version, random nonce, no associated data,
//! stored next to the key-version label. Byte-compatible with the reference.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::encoding::{b64_decode, b64_encode};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{KeyPurpose, KeyRing, SecretKey, internal_version_error};

/// A protected credential: what a connection record stores.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protected {
    /// `Base64Std(nonce ‖ ciphertext ‖ tag)`.
    pub ciphertext: String,
    /// Version label of the master key used; never empty.
    pub key_version: String,
}

impl std::fmt::Debug for Protected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protected")
            .field(
                "ciphertext",
                &format_args!("[{} chars]", self.ciphertext.len()),
            )
            .field("key_version", &self.key_version)
            .finish()
    }
}

/// Encrypts and decrypts datasource passwords with the credentials key.
#[derive(Clone, Debug)]
pub struct CredentialCipher {
    ring: KeyRing,
}

pub(crate) fn aes_key(key: &SecretKey) -> Result<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, key.expose_secret())
        .map(LessSafeKey::new)
        .map_err(|_| Error::internal("cipher initialisation failed"))
}

pub(crate) fn random_nonce() -> Result<[u8; NONCE_LEN]> {
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).map_err(|_| Error::internal("random generator failed"))?;
    Ok(nonce)
}

/// AES-256-GCM, no AAD, returns `nonce ‖ ciphertext ‖ tag` (shared with result v1).
pub(crate) fn seal_nonce_prefixed(
    key: &SecretKey,
    nonce: [u8; NONCE_LEN],
    plaintext: &[u8],
) -> Result<Vec<u8>> {
    let cipher = aes_key(key)?;
    let mut out = Vec::with_capacity(NONCE_LEN + plaintext.len() + AES_256_GCM.tag_len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(plaintext);
    let tag = cipher
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::empty(),
            &mut out[NONCE_LEN..],
        )
        .map_err(|_| Error::internal("encryption failed"))?;
    out.extend_from_slice(tag.as_ref());
    Ok(out)
}

/// Reverse of [`seal_nonce_prefixed`]; `data` is decrypted in place and the plaintext
/// range returned. On failure the buffer content is unspecified and must be discarded.
pub(crate) fn open_nonce_prefixed<'a>(key: &SecretKey, data: &'a mut [u8]) -> Result<&'a mut [u8]> {
    if data.len() < NONCE_LEN {
        return Err(Error::malformed("ciphertext too short"));
    }
    if data.len() < NONCE_LEN + AES_256_GCM.tag_len() {
        return Err(Error::malformed("ciphertext too short"));
    }
    let cipher = aes_key(key)?;
    let (nonce, rest) = data.split_at_mut(NONCE_LEN);
    let nonce =
        Nonce::try_assume_unique_for_key(nonce).map_err(|_| Error::malformed("bad nonce"))?;
    cipher
        .open_in_place(nonce, Aad::empty(), rest)
        .map_err(|_| Error::auth("authentication failed: wrong key or tampered data"))
}

impl CredentialCipher {
    /// A cipher over the ring (current version protects; any version reveals).
    pub fn new(ring: KeyRing) -> Self {
        CredentialCipher { ring }
    }

    /// Encrypts with the current version. Always encrypts, even an empty password, and
    /// never returns the empty (internal) version label — see "Differences from the
    /// reference" in the crate docs.
    pub fn protect(&self, plaintext: &str) -> Result<Protected> {
        self.protect_with_nonce(plaintext, random_nonce()?)
    }

    fn protect_with_nonce(&self, plaintext: &str, nonce: [u8; NONCE_LEN]) -> Result<Protected> {
        let keys = self.ring.current();
        let sealed = seal_nonce_prefixed(
            keys.key(KeyPurpose::Credentials),
            nonce,
            plaintext.as_bytes(),
        )?;
        Ok(Protected {
            ciphertext: b64_encode(&sealed),
            key_version: keys.version().to_owned(),
        })
    }

    /// Decrypts a stored credential with the key of `key_version`.
    ///
    /// Errors: empty `key_version` → [`ErrorKind::InternalCredential`] (internal
    /// datasources are not encrypted; carry an explicit flag instead); unknown version →
    /// [`ErrorKind::UnknownKeyVersion`]; bad Base64 or too short →
    /// [`ErrorKind::Malformed`]; wrong key or tampering → [`ErrorKind::Authentication`];
    /// plaintext that is not UTF-8 → [`ErrorKind::Malformed`].
    pub fn reveal(&self, ciphertext: &str, key_version: &str) -> Result<Zeroizing<String>> {
        if key_version.is_empty() {
            return Err(internal_version_error());
        }
        let keys = self.ring.get(key_version)?;
        let mut data = b64_decode(
            ciphertext.as_bytes(),
            "invalid credential ciphertext (base64)",
        )?;
        let plain = open_nonce_prefixed(keys.key(KeyPurpose::Credentials), &mut data)?;
        match std::str::from_utf8(plain) {
            Ok(s) => Ok(Zeroizing::new(s.to_owned())),
            Err(_) => Err(Error::new(
                ErrorKind::Malformed,
                "credential is not valid UTF-8",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::vector_ring;

    fn nonce_a0() -> [u8; 12] {
        core::array::from_fn(|i| 0xa0 + i as u8)
    }

    #[test]
    fn reference_credential_vector() {
        let c = CredentialCipher::new(vector_ring());
        let p = c.protect_with_nonce("s3cr3t-p@ss", nonce_a0()).unwrap();
        assert_eq!(
            p.ciphertext,
            "oKGio6SlpqeoqaqrAzWG97zI1T+3S9CD+OtnYrtURCneukVNtaUU"
        );
        assert_eq!(p.key_version, "1");
        assert_eq!(&*c.reveal(&p.ciphertext, "1").unwrap(), "s3cr3t-p@ss");
    }

    #[test]
    fn round_trip_random_nonce() {
        let c = CredentialCipher::new(vector_ring());
        let a = c.protect("pw").unwrap();
        let b = c.protect("pw").unwrap();
        assert_ne!(a.ciphertext, b.ciphertext);
        assert_eq!(&*c.reveal(&a.ciphertext, &a.key_version).unwrap(), "pw");
        let empty = c.protect("").unwrap();
        assert_eq!(empty.key_version, "1");
        assert_eq!(&*c.reveal(&empty.ciphertext, "1").unwrap(), "");
    }

    #[test]
    fn bad_inputs() {
        let c = CredentialCipher::new(vector_ring());
        let good = c.protect("secret").unwrap().ciphertext;
        let kind = |ct: &str, v: &str| c.reveal(ct, v).unwrap_err().kind();
        assert_eq!(kind(&good, ""), ErrorKind::InternalCredential);
        assert_eq!(kind(&good, "2"), ErrorKind::UnknownKeyVersion);
        assert_eq!(kind("", "1"), ErrorKind::Malformed);
        assert_eq!(kind("AAECAwQFBgcICQ==", "1"), ErrorKind::Malformed); // 10 bytes
        assert_eq!(kind("AAECAwQFBgcICQoLDA==", "1"), ErrorKind::Malformed); // 13 bytes
        assert_eq!(kind("%%%", "1"), ErrorKind::Malformed);
        let mut raw = crate::encoding::b64_decode(good.as_bytes(), "x").unwrap();
        raw[15] ^= 1;
        assert_eq!(kind(&b64_encode(&raw), "1"), ErrorKind::Authentication);
        let other = KeyRing::from_base64(&b64_encode(&[9u8; 32]), "1").unwrap();
        let e = CredentialCipher::new(other).reveal(&good, "1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Authentication);
        assert!(!e.to_string().contains("secret"));
    }

    #[test]
    fn rotation_reads_old_versions() {
        use crate::keys::{MasterKey, MasterKeys, VersionedMasterKey};
        let k1 = MasterKey::from_bytes(vec![1u8; 32]).unwrap();
        let k2 = MasterKey::from_bytes(vec![2u8; 32]).unwrap();
        let old = CredentialCipher::new(KeyRing::single("1", k1.clone()).unwrap());
        let p = old.protect("pw").unwrap();
        let new = CredentialCipher::new(
            KeyRing::new(MasterKeys {
                current: VersionedMasterKey::new("2", k2).unwrap(),
                previous: vec![VersionedMasterKey::new("1", k1).unwrap()],
            })
            .unwrap(),
        );
        assert_eq!(&*new.reveal(&p.ciphertext, "1").unwrap(), "pw");
        assert_eq!(new.protect("pw").unwrap().key_version, "2");
        assert_eq!(
            new.reveal(&p.ciphertext, "2").unwrap_err().kind(),
            ErrorKind::Authentication
        );
    }
}
