//! Property tests: tampering of any kind never yields different plaintext, and always
//! yields a typed error for v2 and envelopes.

use base64::Engine as _;
use fetcher_crypto::envelope::{Envelope, MessageSigner, ReceivedHeaders, Timestamp};
use fetcher_crypto::{ErrorKind, KeyPurpose, KeyRing, MasterKey, Opener, Sealer, open_v1, seal_v1};
use proptest::prelude::*;

const JOB: &str = "0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90";
const T: i64 = 1_700_000_000;

fn ring() -> KeyRing {
    KeyRing::single("1", MasterKey::from_bytes(vec![42u8; 32]).unwrap()).unwrap()
}

fn seal_v2(ring: &KeyRing, plain: &[u8], fs: u32) -> Vec<u8> {
    let mut s = Sealer::with_frame_size(ring, JOB, fs).unwrap();
    let mut out = s.update(plain).unwrap();
    out.extend(s.finish().unwrap().0);
    out
}

/// Opens in chunks; returns the plaintext released (even on failure) and the result.
fn open_v2(ring: &KeyRing, sealed: &[u8], chunk: usize) -> (Vec<u8>, fetcher_crypto::Result<()>) {
    let mut o = Opener::new(ring, JOB);
    let mut out = Vec::new();
    for c in sealed.chunks(chunk.max(1)) {
        if let Err(e) = o.update_into(c, &mut out) {
            return (out, Err(e));
        }
    }
    (out, o.finish().map(|_| ()))
}

/// (start, end) of each frame record in a v2 object with frame size `fs`.
fn frame_bounds(sealed: &[u8]) -> Vec<(usize, usize)> {
    let v = sealed[10] as usize;
    let j = sealed[11 + v] as usize;
    let mut at = 76 + v + j;
    let mut out = Vec::new();
    while at < sealed.len() {
        let len = u32::from_be_bytes(sealed[at + 1..at + 5].try_into().unwrap()) as usize;
        let end = at + 5 + len + 16 + if sealed[at] == 1 { 32 } else { 0 };
        out.push((at, end));
        at = end;
    }
    out
}

fn headers(sig: &str) -> ReceivedHeaders<'_> {
    ReceivedHeaders {
        signature: Some(sig),
        timestamp: Some(Timestamp::Text("1700000000")),
        signature_version: Some("v1"),
    }
}

fn kind_ok(k: ErrorKind) -> bool {
    matches!(
        k,
        ErrorKind::Authentication
            | ErrorKind::Malformed
            | ErrorKind::Truncated
            | ErrorKind::UnknownKeyVersion
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn v2_round_trip_any_chunking(plain in proptest::collection::vec(any::<u8>(), 0..600), fs in 1u32..80, chunk in 1usize..200) {
        let ring = ring();
        let sealed = seal_v2(&ring, &plain, fs);
        let (out, r) = open_v2(&ring, &sealed, chunk);
        prop_assert!(r.is_ok());
        prop_assert_eq!(out, plain);
    }

    #[test]
    fn v2_flip_any_bit(plain in proptest::collection::vec(any::<u8>(), 0..300), fs in 1u32..64, pos in any::<prop::sample::Index>(), bit in 0u8..8, chunk in 1usize..500) {
        let ring = ring();
        let mut sealed = seal_v2(&ring, &plain, fs);
        let i = pos.index(sealed.len());
        sealed[i] ^= 1 << bit;
        let (out, r) = open_v2(&ring, &sealed, chunk);
        let e = r.unwrap_err();
        prop_assert!(kind_ok(e.kind()), "{:?}", e);
        // Whatever was released before the error is an authentic prefix.
        prop_assert!(out.len() <= plain.len() && out[..] == plain[..out.len()]);
    }

    #[test]
    fn v2_cut_anywhere(plain in proptest::collection::vec(any::<u8>(), 0..300), fs in 1u32..64, pos in any::<prop::sample::Index>()) {
        let ring = ring();
        let sealed = seal_v2(&ring, &plain, fs);
        let cut = pos.index(sealed.len()); // strictly shorter than the object
        let (out, r) = open_v2(&ring, &sealed[..cut], 17);
        prop_assert_eq!(r.unwrap_err().kind(), ErrorKind::Truncated);
        prop_assert!(out[..] == plain[..out.len()]);
        // The final frame's bytes are never released from a cut stream.
        let last_regular = (plain.len() / fs as usize) * fs as usize;
        prop_assert!(out.len() <= last_regular);
    }

    #[test]
    fn v2_swap_two_frames(plain in proptest::collection::vec(any::<u8>(), 2..400), fs in 1u32..40, a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        let ring = ring();
        let sealed = seal_v2(&ring, &plain, fs);
        let frames = frame_bounds(&sealed);
        prop_assume!(frames.len() >= 2);
        let (i, j) = (a.index(frames.len()), b.index(frames.len()));
        prop_assume!(i != j);
        let mut order: Vec<usize> = (0..frames.len()).collect();
        order.swap(i, j);
        let mut bad = sealed[..frames[0].0].to_vec();
        for k in order {
            bad.extend_from_slice(&sealed[frames[k].0..frames[k].1]);
        }
        let (out, r) = open_v2(&ring, &bad, 1 << 16);
        prop_assert!(kind_ok(r.unwrap_err().kind()));
        prop_assert!(out[..] == plain[..out.len()]);
    }

    #[test]
    fn v1_flip_any_bit_of_the_decoded_object(plain in proptest::collection::vec(any::<u8>(), 0..300), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let ring = ring();
        let s = seal_v1(ring.current(), &plain).unwrap();
        let mut raw = base64::engine::general_purpose::STANDARD.decode(&s.object).unwrap();
        let i = pos.index(raw.len());
        raw[i] ^= 1 << bit;
        let text = base64::engine::general_purpose::STANDARD.encode(&raw);
        let e = open_v1(ring.current(), text.as_bytes(), &s.hmac).unwrap_err();
        prop_assert_eq!(e.kind(), ErrorKind::Authentication);
    }

    #[test]
    fn v1_flip_any_bit_of_the_text_never_changes_plaintext(plain in proptest::collection::vec(any::<u8>(), 0..300), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let ring = ring();
        let s = seal_v1(ring.current(), &plain).unwrap();
        let mut text = s.object.clone().into_bytes();
        let i = pos.index(text.len());
        text[i] ^= 1 << bit;
        // Either a typed error, or (a flip in ignored trailing bits of the Base64) the
        // very same plaintext: never a different one.
        match open_v1(ring.current(), &text, &s.hmac) {
            Ok(p) => prop_assert_eq!(&p[..], &plain[..]),
            Err(e) => prop_assert!(matches!(e.kind(), ErrorKind::Authentication | ErrorKind::Malformed)),
        }
    }

    #[test]
    fn v1_cut_anywhere(plain in proptest::collection::vec(any::<u8>(), 0..300), pos in any::<prop::sample::Index>()) {
        let ring = ring();
        let s = seal_v1(ring.current(), &plain).unwrap();
        let cut = pos.index(s.object.len());
        let e = open_v1(ring.current(), &s.object.as_bytes()[..cut], &s.hmac).unwrap_err();
        prop_assert!(matches!(e.kind(), ErrorKind::Authentication | ErrorKind::Malformed));
    }

    #[test]
    fn envelope_tampering_fails(
        tenant in "[a-z0-9-]{0,12}",
        route in "[a-z.]{1,20}",
        job in "[0-9a-f-]{0,36}",
        extra in proptest::collection::vec(any::<u8>(), 0..40),
        target in 0usize..4,
        pos in any::<prop::sample::Index>(),
        bit in 0u8..7,
        cut in any::<bool>(),
    ) {
        let signer = MessageSigner::from_ring(&ring(), KeyPurpose::InternalHmac);
        let mut body = format!("{{\"jobId\":\"{job}\",\"x\":1}}").into_bytes();
        body.extend_from_slice(&extra);
        let env = Envelope { tenant_id: &tenant, exchange: "", routing_key: &route, body: &body };
        let h = signer.sign(&env, T);
        prop_assert!(signer.verify(&headers(&h.signature), &env, T).is_ok());

        let flip = |s: &[u8]| -> Vec<u8> {
            let mut v = s.to_vec();
            if v.is_empty() { v.push(b'a'); return v; }
            let i = pos.index(v.len());
            if cut { v.truncate(i); } else { v[i] ^= 1 << bit; }
            v
        };
        let (mut t2, mut r2, mut b2, mut s2) = (tenant.clone().into_bytes(), route.clone().into_bytes(), body.clone(), h.signature.clone().into_bytes());
        match target {
            0 => t2 = flip(&t2),
            1 => r2 = flip(&r2),
            2 => b2 = flip(&b2),
            _ => s2 = flip(&s2),
        }
        let (t2, r2) = (String::from_utf8(t2).unwrap(), String::from_utf8(r2).unwrap());
        let s2 = String::from_utf8(s2).unwrap();
        let env2 = Envelope { tenant_id: &t2, exchange: "", routing_key: &r2, body: &b2 };
        let e = signer.verify(&headers(&s2), &env2, T).unwrap_err();
        prop_assert_eq!(e.kind(), ErrorKind::Authentication);
    }
}
