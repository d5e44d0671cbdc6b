//! Fuzzes the v2 `Opener`: arbitrary input in arbitrary chunkings, and mutations of a
//! valid object (small frames so there are many). Nothing may panic; released plaintext
//! is always an authentic prefix; a mutated object never opens successfully.
#![no_main]

use std::sync::OnceLock;

use fetcher_crypto::{KeyRing, MasterKey, Opener, Sealer};
use libfuzzer_sys::fuzz_target;

const JOB: &str = "job-1";

fn fixture() -> &'static (KeyRing, Vec<u8>, Vec<u8>) {
    static F: OnceLock<(KeyRing, Vec<u8>, Vec<u8>)> = OnceLock::new();
    F.get_or_init(|| {
        let ring = KeyRing::single("1", MasterKey::from_bytes(vec![7u8; 32]).unwrap()).unwrap();
        let plain: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        let mut s = Sealer::with_frame_size(&ring, JOB, 16).unwrap();
        let mut sealed = s.update(&plain).unwrap();
        sealed.extend(s.finish().unwrap().0);
        (ring, plain, sealed)
    })
}

fn open(ring: &KeyRing, input: &[u8], chunk: usize) -> (Vec<u8>, bool) {
    let mut o = Opener::new(ring, JOB);
    let mut out = Vec::new();
    for c in input.chunks(chunk.max(1)) {
        if o.update_into(c, &mut out).is_err() {
            return (out, false);
        }
    }
    let ok = o.finish().is_ok();
    (out, ok)
}

fuzz_target!(|data: &[u8]| {
    let (ring, plain, sealed) = fixture();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let chunk = (mode >> 1) as usize + 1;
    if mode & 1 == 0 {
        let _ = open(ring, rest, chunk);
        return;
    }
    let mut obj = sealed.clone();
    for pair in rest.chunks_exact(3) {
        let pos = u16::from_le_bytes([pair[0], pair[1]]) as usize % obj.len();
        obj[pos] ^= pair[2];
    }
    if rest.len() % 3 == 1 {
        obj.truncate(rest[rest.len() - 1] as usize * 3 % obj.len());
    }
    let mutated = obj != *sealed;
    let (out, ok) = open(ring, &obj, chunk);
    assert!(
        out.len() <= plain.len() && out[..] == plain[..out.len()],
        "non-authentic plaintext released"
    );
    assert_eq!(ok, !mutated, "mutated object opened (or valid one failed)");
});
