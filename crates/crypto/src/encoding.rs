//! Base64 and hex helpers shared by the modules.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// Standard alphabet, `=` padding written and required, non-canonical trailing bits
/// accepted on decode: the behaviour of the reference's standard decoder.
const STD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

pub(crate) fn b64_encode(bytes: &[u8]) -> String {
    STD.encode(bytes)
}

/// Decodes standard Base64, ignoring embedded CR and LF (as the reference's decoder does);
/// anything else outside the alphabet is an error. The result is zeroized on drop because
/// it may be key material or plaintext-bearing.
pub(crate) fn b64_decode(text: &[u8], what: &'static str) -> Result<Zeroizing<Vec<u8>>> {
    let decoded = if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        let cleaned: Zeroizing<Vec<u8>> = Zeroizing::new(
            text.iter()
                .copied()
                .filter(|&b| b != b'\r' && b != b'\n')
                .collect(),
        );
        STD.decode(&*cleaned)
    } else {
        STD.decode(text)
    };
    decoded
        .map(Zeroizing::new)
        .map_err(|_| Error::malformed(what))
}

/// Lowercase hex, the rendering of every HMAC in the reference.
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    out
}

/// Constant-time equality of two byte strings (length is not secret).
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_rules() {
        assert_eq!(&*b64_decode(b"YWJj", "x").unwrap(), b"abc");
        assert_eq!(&*b64_decode(b"YW\r\nJj", "x").unwrap(), b"abc");
        assert!(b64_decode(b"YWJ", "x").is_err()); // padding required
        assert!(b64_decode(b"YW Jj", "x").is_err());
        assert!(b64_decode(b"YW-j", "x").is_err()); // URL alphabet rejected
        assert_eq!(&*b64_decode(b"YR==", "x").unwrap(), b"a"); // trailing bits tolerated
        assert_eq!(b64_encode(b"a"), "YQ==");
    }

    #[test]
    fn hex() {
        assert_eq!(hex_lower(&[0x00, 0xab, 0xff]), "00abff");
    }
}
