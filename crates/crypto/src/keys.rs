//! Master keys, HKDF derivation of the four purpose keys, and the versioned key ring.
//!
//! Derivation (docs/results.md, "Keys"): HKDF-SHA256, IKM = decoded master key, **no salt**
//! (RFC 5869: HashLen zero bytes), info = the ASCII label of [`KeyPurpose::label`], L = 32.
//!
//! Versions: every master key carries a free-form *version label* (the reference's
//! `APP_ENC_KEY_VERSION`, default `"1"`; on AWS the secret's version id). The ring holds the
//! *current* version, used for everything new, plus older versions that stay readable
//! (credentials revealed with their stored label, v2 results whose header names a version).
//! Rotation is "add a new current version", never a migration.
//!
//! The **empty** version label is reserved: in stored connection records it marks an
//! internal datasource whose credential is not encrypted (docs/results.md, "Key versions").
//! A ring therefore refuses an empty label, and
//! [`CredentialCipher::reveal`](crate::CredentialCipher::reveal) refuses to "decrypt" under
//! it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use aws_lc_rs::hkdf;
use zeroize::Zeroizing;

use crate::encoding::{b64_decode, hex_lower};
use crate::error::{Error, ErrorKind, Result};

/// Minimum decoded master-key length in bytes (docs/results.md, "Keys").
pub const MIN_MASTER_KEY_LEN: usize = 32;

/// Maximum length of a key-version label in bytes (it must fit the v2 header).
pub const MAX_KEY_VERSION_LEN: usize = 128;

/// The version label the reference uses when none is configured (docs/results.md,
/// "Key versions").
pub const DEFAULT_KEY_VERSION: &str = "1";

/// The stored key version that marks an internal (unencrypted) datasource credential.
pub const INTERNAL_KEY_VERSION: &str = "";

/// Whether a stored key-version label denotes an internal datasource (docs/results.md,
/// "Key versions"). Callers
/// should prefer an explicit flag on the connection record; see the crate docs.
pub fn is_internal_key_version(label: &str) -> bool {
    label.is_empty()
}

/// Checks a key-version label: 1..=128 bytes of visible ASCII other than `,`.
pub fn validate_key_version(label: &str) -> Result<()> {
    if label.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidKey,
            "key version label must not be empty (the empty label marks internal datasources)",
        ));
    }
    if label.len() > MAX_KEY_VERSION_LEN
        || !label.bytes().all(|b| b.is_ascii_graphic() && b != b',')
    {
        return Err(Error::new(
            ErrorKind::InvalidKey,
            "key version label must be 1-128 visible ASCII characters without ','",
        ));
    }
    Ok(())
}

/// A raw master key (≥ 32 bytes). Zeroized on drop; `Debug` is redacted.
#[derive(Clone)]
pub struct MasterKey(Zeroizing<Vec<u8>>);

impl MasterKey {
    /// Parses standard Base64 (RFC 4648 alphabet, `=` padding required, embedded CR/LF
    /// ignored, anything else rejected) and requires ≥ 32 decoded bytes (docs/results.md, "Keys").
    /// Surrounding whitespace is *not* trimmed here; sources that read text trim it.
    pub fn from_base64(text: &str) -> Result<Self> {
        let bytes = b64_decode(text.as_bytes(), "invalid master key (base64)")
            .map_err(|_| Error::new(ErrorKind::InvalidKey, "invalid master key (base64)"))?;
        Self::from_bytes(bytes)
    }

    /// Takes raw key bytes; requires ≥ 32 bytes.
    pub fn from_bytes(bytes: impl Into<Zeroizing<Vec<u8>>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.len() < MIN_MASTER_KEY_LEN {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                "master key too short: at least 32 bytes are required",
            ));
        }
        Ok(MasterKey(bytes))
    }

    /// Decoded length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false (a master key has at least 32 bytes); present for API hygiene.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Derives the four purpose keys.
    pub fn derive(&self, version: &str) -> Result<DerivedKeys> {
        validate_key_version(version)?;
        Ok(DerivedKeys {
            version: version.to_owned(),
            credentials: SecretKey(hkdf_no_salt(&self.0, KeyPurpose::Credentials.label())?),
            internal_hmac: SecretKey(hkdf_no_salt(&self.0, KeyPurpose::InternalHmac.label())?),
            external_hmac: SecretKey(hkdf_no_salt(&self.0, KeyPurpose::ExternalHmac.label())?),
            storage: SecretKey(hkdf_no_salt(&self.0, KeyPurpose::Storage.label())?),
        })
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MasterKey([REDACTED; {} bytes])", self.0.len())
    }
}

/// A master key with its version label.
#[derive(Clone, Debug)]
pub struct VersionedMasterKey {
    version: String,
    key: MasterKey,
}

impl VersionedMasterKey {
    /// Pairs a key with a label; the label is validated ([`validate_key_version`]).
    pub fn new(version: impl Into<String>, key: MasterKey) -> Result<Self> {
        let version = version.into();
        validate_key_version(&version)?;
        Ok(VersionedMasterKey { version, key })
    }

    /// The version label.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The key.
    pub fn key(&self) -> &MasterKey {
        &self.key
    }
}

/// Current master key plus older ones kept for reading.
#[derive(Clone, Debug)]
pub struct MasterKeys {
    /// Used for every new protection, seal and signature.
    pub current: VersionedMasterKey,
    /// Kept readable (credentials, v2 results, envelope verification); newest first.
    pub previous: Vec<VersionedMasterKey>,
}

fn hkdf_no_salt(ikm: &[u8], info: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
    let mut out = Zeroizing::new([0u8; 32]);
    hkdf_sha256(&[], ikm, &[info], &mut out[..])?;
    Ok(out)
}

struct OkmLen(usize);

impl hkdf::KeyType for OkmLen {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-SHA256 (RFC 5869) filling `out`; an empty `salt` means "no salt".
pub(crate) fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[&[u8]], out: &mut [u8]) -> Result<()> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(ikm);
    prk.expand(info, OkmLen(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| Error::internal("key derivation failed"))
}

/// The four derived keys' purposes (docs/results.md, "Keys").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyPurpose {
    /// AES-256-GCM of datasource passwords.
    Credentials,
    /// HMAC-SHA256 of Manager → Worker job envelopes.
    InternalHmac,
    /// HMAC-SHA256 of result plaintext (document HMAC) and of terminal events.
    ExternalHmac,
    /// AES-256-GCM of stored results.
    Storage,
}

impl KeyPurpose {
    /// All purposes, in the order of docs/results.md, "Keys".
    pub const ALL: [KeyPurpose; 4] = [
        KeyPurpose::Credentials,
        KeyPurpose::InternalHmac,
        KeyPurpose::ExternalHmac,
        KeyPurpose::Storage,
    ];

    /// The exact HKDF info label of the reference.
    pub fn label(self) -> &'static [u8] {
        match self {
            KeyPurpose::Credentials => b"fetcher-credentials-v1",
            KeyPurpose::InternalHmac => b"fetcher-internal-hmac-v1",
            KeyPurpose::ExternalHmac => b"fetcher-external-hmac-v1",
            KeyPurpose::Storage => b"fetcher-storage-encryption-v1",
        }
    }
}

/// A 32-byte derived key. Zeroized on drop; `Debug` is redacted.
pub struct SecretKey(Zeroizing<[u8; 32]>);

impl SecretKey {
    /// The raw bytes. Needed only to hand a key to another system (e.g. printing the
    /// external HMAC key for a consumer, docs/results.md "Keys"); never log them.
    pub fn expose_secret(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex of the key, zeroized on drop (the form of docs/results.md, "Test vectors").
    pub fn to_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex_lower(&self.0[..]))
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey([REDACTED])")
    }
}

/// The four purpose keys derived from one master-key version.
pub struct DerivedKeys {
    version: String,
    credentials: SecretKey,
    internal_hmac: SecretKey,
    external_hmac: SecretKey,
    storage: SecretKey,
}

impl DerivedKeys {
    /// The version label of the master key these keys come from.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The key for one purpose.
    pub fn key(&self, purpose: KeyPurpose) -> &SecretKey {
        match purpose {
            KeyPurpose::Credentials => &self.credentials,
            KeyPurpose::InternalHmac => &self.internal_hmac,
            KeyPurpose::ExternalHmac => &self.external_hmac,
            KeyPurpose::Storage => &self.storage,
        }
    }
}

impl fmt::Debug for DerivedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DerivedKeys")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Derived keys for the current master-key version and older readable versions.
///
/// Cheap to clone (shared, immutable). Built once at start-up (cold start).
#[derive(Clone)]
pub struct KeyRing {
    inner: Arc<RingInner>,
}

struct RingInner {
    current: Arc<DerivedKeys>,
    /// Every version including the current one.
    by_version: BTreeMap<String, Arc<DerivedKeys>>,
    /// Versions in preference order: current first, then `previous` in the given order.
    order: Vec<Arc<DerivedKeys>>,
}

impl KeyRing {
    /// Builds a ring from a current key and older keys; refuses duplicate versions.
    pub fn new(keys: MasterKeys) -> Result<Self> {
        let current = Arc::new(keys.current.key.derive(&keys.current.version)?);
        let mut by_version = BTreeMap::new();
        by_version.insert(current.version.clone(), current.clone());
        let mut order = vec![current.clone()];
        for old in &keys.previous {
            let derived = Arc::new(old.key.derive(&old.version)?);
            if by_version
                .insert(old.version.clone(), derived.clone())
                .is_some()
            {
                return Err(Error::new(
                    ErrorKind::InvalidKey,
                    "duplicate key version in key ring",
                ));
            }
            order.push(derived);
        }
        Ok(KeyRing {
            inner: Arc::new(RingInner {
                current,
                by_version,
                order,
            }),
        })
    }

    /// A ring with a single version.
    pub fn single(version: impl Into<String>, key: MasterKey) -> Result<Self> {
        Self::new(MasterKeys {
            current: VersionedMasterKey::new(version, key)?,
            previous: vec![],
        })
    }

    /// The reference's configuration: `APP_ENC_KEY` Base64 and `APP_ENC_KEY_VERSION`
    /// (empty → `"1"`).
    pub fn from_base64(master_key_b64: &str, version: &str) -> Result<Self> {
        let version = if version.is_empty() {
            DEFAULT_KEY_VERSION
        } else {
            version
        };
        Self::single(version, MasterKey::from_base64(master_key_b64)?)
    }

    /// Loads the master keys from a source and derives the ring.
    pub async fn load(source: &dyn crate::MasterKeySource) -> Result<Self> {
        Self::new(source.load().await?)
    }

    /// Keys of the current version (use for everything new).
    pub fn current(&self) -> &Arc<DerivedKeys> {
        &self.inner.current
    }

    /// The current version label.
    pub fn current_version(&self) -> &str {
        &self.inner.current.version
    }

    /// Keys of a given version; [`ErrorKind::UnknownKeyVersion`] if absent, or
    /// [`ErrorKind::InternalCredential`] for the empty label.
    pub fn get(&self, version: &str) -> Result<&Arc<DerivedKeys>> {
        if is_internal_key_version(version) {
            return Err(internal_version_error());
        }
        self.inner.by_version.get(version).ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownKeyVersion,
                format!("unsupported key version: {version}"),
            )
        })
    }

    /// All versions, current first.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<DerivedKeys>> {
        self.inner.order.iter()
    }

    /// The key check of `version` (lowercase hex): an HMAC of a fixed label under the
    /// version's internal HMAC key. A store records it beside what the version sealed,
    /// so a host started with another key for that version can tell and refuse to start
    /// (docs/operations.md, "Master key"). It says whether a key is the one, and nothing
    /// about the key.
    pub fn check_value(&self, version: &str) -> Result<String> {
        const LABEL: &[u8] = b"fetcher data directory key check v1";
        let keys = self.get(version)?;
        let key = aws_lc_rs::hmac::Key::new(
            aws_lc_rs::hmac::HMAC_SHA256,
            keys.key(KeyPurpose::InternalHmac).expose_secret(),
        );
        Ok(hex_lower(aws_lc_rs::hmac::sign(&key, LABEL).as_ref()))
    }
}

pub(crate) fn internal_version_error() -> Error {
    Error::new(
        ErrorKind::InternalCredential,
        "empty key version marks an internal datasource: nothing to decrypt",
    )
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("current", &self.inner.current.version)
            .field(
                "versions",
                &self
                    .inner
                    .order
                    .iter()
                    .map(|k| k.version())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// docs/results.md, "Test vectors": ASCII `this-is-a-32-byte-master-key1234`.
    pub(crate) const VECTOR_MASTER_B64: &str = "dGhpcy1pcy1hLTMyLWJ5dGUtbWFzdGVyLWtleTEyMzQ=";

    pub(crate) fn vector_ring() -> KeyRing {
        KeyRing::from_base64(VECTOR_MASTER_B64, "").unwrap()
    }

    #[test]
    fn reference_key_derivation_vectors() {
        let ring = vector_ring();
        assert_eq!(ring.current_version(), "1");
        let k = ring.current();
        let hex = |p| k.key(p).to_hex().to_string();
        assert_eq!(
            hex(KeyPurpose::Credentials),
            "bd3056f618430ff32efe50ada5f34f0fd23f3ca70c886b50ede9d10929720e68"
        );
        assert_eq!(
            hex(KeyPurpose::InternalHmac),
            "c8243bdbba029f9c119931f6491834be91c5467771a8b5d739e60ab3011744ce"
        );
        assert_eq!(
            hex(KeyPurpose::ExternalHmac),
            "f4ab532dc6dcf763bf8139e75e9bef6d8af5c329ce3e03ba05fd39ff729f6ffa"
        );
        assert_eq!(
            hex(KeyPurpose::Storage),
            "1847a803919696994e666f586f5375fb87d4ce2642f0664a5bdab7bc4d5ea269"
        );
    }

    #[test]
    fn rfc5869_case_3() {
        let mut out = [0u8; 42];
        hkdf_sha256(&[], &[0x0b; 22], &[], &mut out).unwrap();
        assert_eq!(
            hex_lower(&out),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        );
    }

    #[test]
    fn master_key_rules() {
        let short = crate::encoding::b64_encode(&[1u8; 31]);
        let e = MasterKey::from_base64(&short).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidKey);
        assert!(e.to_string().contains("too short"));
        let e = MasterKey::from_base64("not base64!").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidKey);
        assert!(e.to_string().contains("base64"));
        assert_eq!(
            MasterKey::from_base64("").unwrap_err().kind(),
            ErrorKind::InvalidKey
        );
        // Longer keys are used whole.
        let long = crate::encoding::b64_encode(&[7u8; 64]);
        let k = MasterKey::from_base64(&long).unwrap();
        assert_eq!(k.len(), 64);
        // CR/LF ignored.
        let wrapped = format!(
            "{}\r\n{}",
            &VECTOR_MASTER_B64[..20],
            &VECTOR_MASTER_B64[20..]
        );
        assert!(MasterKey::from_base64(&wrapped).is_ok());
    }

    #[test]
    fn debug_is_redacted() {
        let ring = vector_ring();
        let k = MasterKey::from_base64(VECTOR_MASTER_B64).unwrap();
        for s in [
            format!("{k:?}"),
            format!("{ring:?}"),
            format!("{:?}", ring.current()),
        ] {
            assert!(!s.contains("bd3056"), "{s}");
            assert!(!s.contains("116"), "{s}"); // no byte arrays printed
        }
        assert_eq!(
            format!("{:?}", ring.current().key(KeyPurpose::Storage)),
            "SecretKey([REDACTED])"
        );
    }

    #[test]
    fn versions() {
        let k1 = MasterKey::from_bytes(vec![1u8; 32]).unwrap();
        let k2 = MasterKey::from_bytes(vec![2u8; 32]).unwrap();
        let ring = KeyRing::new(MasterKeys {
            current: VersionedMasterKey::new("2", k2.clone()).unwrap(),
            previous: vec![VersionedMasterKey::new("1", k1.clone()).unwrap()],
        })
        .unwrap();
        assert_eq!(ring.current_version(), "2");
        assert_eq!(ring.get("1").unwrap().version(), "1");
        assert_eq!(
            ring.get("3").unwrap_err().kind(),
            ErrorKind::UnknownKeyVersion
        );
        assert_eq!(
            ring.get("").unwrap_err().kind(),
            ErrorKind::InternalCredential
        );
        assert_eq!(
            ring.iter().map(|k| k.version()).collect::<Vec<_>>(),
            ["2", "1"]
        );
        let dup = KeyRing::new(MasterKeys {
            current: VersionedMasterKey::new("1", k2).unwrap(),
            previous: vec![VersionedMasterKey::new("1", k1.clone()).unwrap()],
        });
        assert_eq!(dup.unwrap_err().kind(), ErrorKind::InvalidKey);
        assert_eq!(
            VersionedMasterKey::new("", k1.clone()).unwrap_err().kind(),
            ErrorKind::InvalidKey
        );
        assert!(VersionedMasterKey::new("a,b", k1.clone()).is_err());
        assert!(VersionedMasterKey::new("a b", k1.clone()).is_err());
        assert!(VersionedMasterKey::new("x".repeat(129), k1.clone()).is_err());
        assert!(VersionedMasterKey::new("2024-01:kms/abc", k1).is_ok());
    }
}
