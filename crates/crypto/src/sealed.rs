//! Either sealed format, told apart by its first bytes (docs/results.md, "Opening a
//! result"): a v2 object starts with [`crate::v2::MAGIC`]; anything else is read as
//! v1 (Base64 text, which can never start with those bytes).

use crate::error::{Error, ErrorKind, Result};
use crate::keys::KeyRing;
use crate::v2::{MAGIC, Opener};
use zeroize::Zeroizing;

/// Which format a sealed object is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealedFormat {
    /// The reference's whole-document format (`open_v1`).
    V1,
    /// Fetcher's streaming frames ([`Opener`]).
    V2,
}

impl SealedFormat {
    /// The format announced by an object's first bytes (at least four for v2).
    pub fn detect(head: &[u8]) -> SealedFormat {
        if head.starts_with(&MAGIC) {
            SealedFormat::V2
        } else {
            SealedFormat::V1
        }
    }
}

/// Opens a whole sealed object of either format and returns its plaintext, verified.
///
/// `job_id` binds a v2 object to its job (`None` accepts any job); `hmac` is the
/// result's `resultHmac`, required for v1 (its only integrity check) and checked for v2
/// when given. Large v2 results should be streamed with [`Opener`] instead.
pub fn open_sealed(
    ring: &KeyRing,
    object: &[u8],
    job_id: Option<&str>,
    hmac: Option<&str>,
) -> Result<Zeroizing<Vec<u8>>> {
    match SealedFormat::detect(object) {
        SealedFormat::V2 => {
            let mut opener = match job_id {
                Some(id) => Opener::new(ring, id),
                None => Opener::new_any_job(ring),
            };
            if let Some(h) = hmac {
                opener = opener.expect_hmac(h);
            }
            let mut out = Zeroizing::new(Vec::with_capacity(object.len()));
            opener.update_into(object, &mut out)?;
            opener.finish()?;
            Ok(out)
        }
        SealedFormat::V1 => {
            let hmac = hmac.ok_or_else(|| {
                Error::new(
                    ErrorKind::MissingSignatureHeaders,
                    "a v1 result opens only with its HMAC",
                )
            })?;
            crate::open_v1(ring.current(), object, hmac)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

    #[test]
    fn both_formats_open_through_one_call() {
        let ring = KeyRing::from_base64(KEY, "1").unwrap();
        let doc = b"{\n  \"a\": 1\n}";
        let v1 = crate::seal_v1(ring.current(), doc).unwrap();
        assert_eq!(SealedFormat::detect(v1.object.as_bytes()), SealedFormat::V1);
        let plain = open_sealed(&ring, v1.object.as_bytes(), None, Some(&v1.hmac)).unwrap();
        assert_eq!(plain.as_slice(), doc);
        let e = open_sealed(&ring, v1.object.as_bytes(), None, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingSignatureHeaders);

        let mut sealer = crate::Sealer::new(&ring, "job-1").unwrap();
        let mut v2 = Vec::new();
        sealer.update_into(b"{\"row\":1}\n", &mut v2).unwrap();
        let summary = sealer.finish_into(&mut v2).unwrap();
        assert_eq!(SealedFormat::detect(&v2), SealedFormat::V2);
        let plain = open_sealed(&ring, &v2, Some("job-1"), Some(&summary.hmac)).unwrap();
        assert_eq!(plain.as_slice(), b"{\"row\":1}\n");
        assert!(
            open_sealed(&ring, &v2, Some("job-2"), None).is_err(),
            "bound to its job"
        );
        assert!(open_sealed(&ring, &v2, None, Some(&"0".repeat(64))).is_err());
    }
}
