//! Sealed result, format v1: the reference's format (docs/results.md, "Format v1").
//!
//! * Document HMAC = lowercase hex of HMAC-SHA256(external HMAC key, plaintext).
//! * Stored object = ASCII `Base64Std(nonce[12] ‖ AES-256-GCM(storage key, nonce,
//!   plaintext, no AAD) ‖ tag[16])`. No header, no version, no key id.
//!
//! The whole object is held in memory: v1 exists for consumers built for the reference
//! and is bounded by the engine's result-size limit. Use [`v2`](crate::v2) for streams.

use aws_lc_rs::aead::NONCE_LEN;
use aws_lc_rs::hmac;
use zeroize::Zeroizing;

use crate::credential::{open_nonce_prefixed, random_nonce, seal_nonce_prefixed};
use crate::encoding::{b64_decode, b64_encode, ct_eq, hex_lower};
use crate::error::{Error, Result};
use crate::keys::{DerivedKeys, KeyPurpose};

/// A v1 sealed result.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedV1 {
    /// The object body to store: Base64 text (ASCII).
    pub object: String,
    /// Document HMAC, 64 lowercase hex characters.
    pub hmac: String,
    /// Version label of the keys used (not part of the v1 format; record it next to the
    /// object so a reader can pick the right keys after a rotation).
    pub key_version: String,
}

impl std::fmt::Debug for SealedV1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedV1")
            .field("object", &format_args!("[{} chars]", self.object.len()))
            .field("hmac", &self.hmac)
            .field("key_version", &self.key_version)
            .finish()
    }
}

/// Document HMAC (docs/results.md, "HMAC and digest"): lowercase hex HMAC-SHA256 of the
/// plaintext under the external HMAC key. Also the value the v2 trailer carries (in raw
/// form).
pub fn document_hmac(keys: &DerivedKeys, plaintext: &[u8]) -> String {
    let key = hmac::Key::new(
        hmac::HMAC_SHA256,
        keys.key(KeyPurpose::ExternalHmac).expose_secret(),
    );
    hex_lower(hmac::sign(&key, plaintext).as_ref())
}

/// Seals `plaintext` in the reference format with a fresh random nonce.
pub fn seal_v1(keys: &DerivedKeys, plaintext: &[u8]) -> Result<SealedV1> {
    seal_v1_with_nonce(keys, plaintext, random_nonce()?)
}

/// Deterministic-nonce variant for test vectors only. Never reuse a nonce under a key.
#[cfg(test)]
pub(crate) fn seal_v1_fixed_nonce(
    keys: &DerivedKeys,
    plaintext: &[u8],
    nonce: [u8; NONCE_LEN],
) -> Result<SealedV1> {
    seal_v1_with_nonce(keys, plaintext, nonce)
}

fn seal_v1_with_nonce(
    keys: &DerivedKeys,
    plaintext: &[u8],
    nonce: [u8; NONCE_LEN],
) -> Result<SealedV1> {
    let hmac = document_hmac(keys, plaintext);
    let sealed = seal_nonce_prefixed(keys.key(KeyPurpose::Storage), nonce, plaintext)?;
    Ok(SealedV1 {
        object: b64_encode(&sealed),
        hmac,
        key_version: keys.version().to_owned(),
    })
}

/// Opens a v1 object: Base64-decode, AES-256-GCM open with the storage key, then compare
/// the document HMAC with `expected_hmac` (lowercase hex, constant time, as text — an
/// upper-case HMAC is rejected like in the reference). Returns the plaintext only if
/// every check passes.
///
/// Errors: [`Malformed`](crate::ErrorKind::Malformed) for bad Base64 / too short input,
/// [`Authentication`](crate::ErrorKind::Authentication) for a wrong key, tampering, or an
/// HMAC mismatch.
pub fn open_v1(
    keys: &DerivedKeys,
    object: &[u8],
    expected_hmac: &str,
) -> Result<Zeroizing<Vec<u8>>> {
    let mut data = b64_decode(object, "invalid sealed result (base64)")?;
    if data.len() <= NONCE_LEN {
        return Err(Error::malformed("sealed result too short"));
    }
    let len = open_nonce_prefixed(keys.key(KeyPurpose::Storage), &mut data)?.len();
    let actual = document_hmac(keys, &data[NONCE_LEN..NONCE_LEN + len]);
    if !ct_eq(actual.as_bytes(), expected_hmac.as_bytes()) {
        return Err(Error::auth("document HMAC mismatch"));
    }
    // Move the plaintext to the front and drop the rest; `data` stays zeroizing.
    data.copy_within(NONCE_LEN..NONCE_LEN + len, 0);
    data.truncate(len);
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::keys::tests::vector_ring;

    const PLAIN: &str =
        "{\n  \"pg\": {\n    \"users\": [\n      {\n        \"id\": 1\n      }\n    ]\n  }\n}";
    const HMAC: &str = "ea590feb69d12eff0fa5dd9e515050fcf05d9ef7dffea164313e173139ecb53c";
    const OBJECT: &str = "AAECAwQFBgcICQoLwg34qyr23gLIxy3JbukcT3PKTlcwDPwhDp9P+f2xdKXAxtahTWCp6LPej94FgI0kAbNGhU4SQhLvWMClOVNr3MVfvSu8FRmDx/ENTIBUW48yUlfGQmc=";

    #[test]
    fn reference_v1_vector() {
        let ring = vector_ring();
        assert_eq!(PLAIN.len(), 70);
        let nonce = core::array::from_fn(|i| i as u8);
        let sealed = seal_v1_fixed_nonce(ring.current(), PLAIN.as_bytes(), nonce).unwrap();
        assert_eq!(sealed.hmac, HMAC);
        assert_eq!(sealed.object, OBJECT);
        let plain = open_v1(ring.current(), OBJECT.as_bytes(), HMAC).unwrap();
        assert_eq!(&plain[..], PLAIN.as_bytes());
    }

    #[test]
    fn random_round_trip_and_empty() {
        let ring = vector_ring();
        for p in [&b""[..], b"x", &[0u8; 5000]] {
            let s = seal_v1(ring.current(), p).unwrap();
            assert_eq!(
                &open_v1(ring.current(), s.object.as_bytes(), &s.hmac).unwrap()[..],
                p
            );
        }
    }

    #[test]
    fn bad_inputs() {
        let ring = vector_ring();
        let k = ring.current();
        let kind = |o: &[u8], h: &str| open_v1(k, o, h).unwrap_err().kind();
        assert_eq!(kind(b"", HMAC), ErrorKind::Malformed);
        assert_eq!(kind(b"AAECAwQFBgcICQoL", HMAC), ErrorKind::Malformed); // nonce only
        assert_eq!(kind(b"AAECAwQFBgcICQoLDA==", HMAC), ErrorKind::Malformed); // no full tag
        assert_eq!(kind(b"!!!!", HMAC), ErrorKind::Malformed);
        assert_eq!(
            kind(OBJECT.as_bytes(), &HMAC.to_uppercase()),
            ErrorKind::Authentication
        );
        assert_eq!(kind(OBJECT.as_bytes(), ""), ErrorKind::Authentication);
        let mut o = OBJECT.as_bytes().to_vec();
        o[20] = if o[20] == b'A' { b'B' } else { b'A' };
        assert_eq!(kind(&o, HMAC), ErrorKind::Authentication);
        let other = crate::KeyRing::from_base64(&b64_encode(&[3u8; 32]), "1").unwrap();
        assert_eq!(
            open_v1(other.current(), OBJECT.as_bytes(), HMAC)
                .unwrap_err()
                .kind(),
            ErrorKind::Authentication
        );
    }
}
