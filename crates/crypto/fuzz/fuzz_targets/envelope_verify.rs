//! Fuzzes envelope verification: arbitrary headers and body, and mutations of a validly
//! signed message. Nothing may panic; a mutated message never verifies.
#![no_main]

use std::sync::OnceLock;

use fetcher_crypto::envelope::{Envelope, MessageSigner, ReceivedHeaders, Timestamp, VerifyPolicy};
use fetcher_crypto::{KeyPurpose, KeyRing, MasterKey};
use libfuzzer_sys::fuzz_target;

const T: i64 = 1_700_000_000;
const BODY: &[u8] =
    br#"{"jobId":"0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90","mappedFields":{"pg":{"users":["id"]}}}"#;

fn signer() -> &'static MessageSigner {
    static S: OnceLock<MessageSigner> = OnceLock::new();
    S.get_or_init(|| {
        let ring = KeyRing::single("1", MasterKey::from_bytes(vec![7u8; 32]).unwrap()).unwrap();
        MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac).with_policy(VerifyPolicy {
            allow_legacy_body_signature: true,
            ..Default::default()
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let s = signer();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        // Arbitrary message: fields separated by 0xff.
        let mut parts = rest.split(|&b| b == 0xff);
        let mut field = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let (sig, t, ver, tenant, route) = (field(), field(), field(), field(), field());
        let body = parts.next().unwrap_or_default();
        let ts = if mode & 2 == 0 {
            Timestamp::Text(&t)
        } else {
            Timestamp::Int(t.len() as i64 * 1_000_003)
        };
        let headers = ReceivedHeaders {
            signature: (mode & 4 == 0).then_some(sig.as_str()),
            timestamp: (mode & 8 == 0).then_some(ts),
            signature_version: (mode & 16 == 0).then_some(ver.as_str()),
        };
        let env = Envelope {
            tenant_id: &tenant,
            exchange: "",
            routing_key: &route,
            body,
        };
        let _ = s.verify(&headers, &env, T);
        return;
    }
    // Valid message, then mutate the body.
    let env = Envelope {
        tenant_id: "tenant-1",
        exchange: "",
        routing_key: "queue",
        body: BODY,
    };
    let h = s.sign(&env, T);
    let mut body = BODY.to_vec();
    for pair in rest.chunks_exact(2) {
        let pos = pair[0] as usize % body.len();
        body[pos] ^= pair[1];
    }
    if rest.len() % 2 == 1 {
        body.truncate(rest[rest.len() - 1] as usize % body.len());
    }
    let mutated = body != BODY;
    let headers = ReceivedHeaders {
        signature: Some(&h.signature),
        timestamp: Some(Timestamp::Text(&h.timestamp)),
        signature_version: Some("v1"),
    };
    let env2 = Envelope { body: &body, ..env };
    assert_eq!(s.verify(&headers, &env2, T).is_ok(), !mutated);
});
