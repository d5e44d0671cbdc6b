//! Fuzzes `open_v1`: arbitrary text, arbitrary raw bytes (Base64-encoded first), and
//! mutations of a valid object. Nothing may panic; a mutated object must never open to a
//! different plaintext.
#![no_main]

use std::sync::OnceLock;

use fetcher_crypto::{KeyRing, MasterKey, SealedV1, open_v1, seal_v1};
use libfuzzer_sys::fuzz_target;

const PLAIN: &[u8] =
    b"{\n  \"pg\": {\n    \"users\": [\n      {\n        \"id\": 1\n      }\n    ]\n  }\n}";

fn fixture() -> &'static (KeyRing, SealedV1) {
    static F: OnceLock<(KeyRing, SealedV1)> = OnceLock::new();
    F.get_or_init(|| {
        let ring = KeyRing::single("1", MasterKey::from_bytes(vec![7u8; 32]).unwrap()).unwrap();
        let sealed = seal_v1(ring.current(), PLAIN).unwrap();
        (ring, sealed)
    })
}

fuzz_target!(|data: &[u8]| {
    let (ring, sealed) = fixture();
    let keys = ring.current();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            let _ = open_v1(keys, rest, &sealed.hmac);
        }
        1 => {
            use base64::Engine as _;
            let text = base64::engine::general_purpose::STANDARD.encode(rest);
            let _ = open_v1(keys, text.as_bytes(), &sealed.hmac);
        }
        _ => {
            // (position, xor) pairs applied to the valid object's text, then a cut.
            let mut obj = sealed.object.clone().into_bytes();
            for pair in rest.chunks_exact(3) {
                let pos = u16::from_le_bytes([pair[0], pair[1]]) as usize % obj.len();
                obj[pos] ^= pair[2];
            }
            if rest.len() % 3 == 1 {
                obj.truncate(rest[rest.len() - 1] as usize % obj.len());
            }
            if let Ok(plain) = open_v1(keys, &obj, &sealed.hmac) {
                assert_eq!(
                    &plain[..],
                    PLAIN,
                    "tampered object opened to other plaintext"
                );
            }
        }
    }
});
