//! Signed message envelope (docs/results.md, "Signed queue messages"): HMAC-SHA256 over a
//! canonical payload that binds timestamp, version, tenant, job id, exchange (route),
//! routing key (destination) and body.
//!
//! Canonical payload (docs/results.md, "Canonical payload"), fields joined by single LF
//! bytes, body appended raw:
//!
//! ```text
//! <t>\n v1 \n<tenantId>\n<jobId>\n<exchange>\n<routingKey>\n<body bytes>
//! ```
//!
//! (shown with spaces around `v1` for readability only). `<t>` is Unix seconds in
//! decimal; `<tenantId>` is empty in single-tenant mode; `<jobId>` is the `jobId` string
//! property of the body's top-level JSON object, empty if the body is not a JSON object
//! or the property is missing or not a string. On SQS, `<exchange>` is empty and
//! `<routingKey>` a fixed logical queue name on both sides (docs/results.md,
//! "Canonical payload").
//!
//! Signature = lowercase hex of HMAC-SHA256(key, payload); internal HMAC key for
//! Manager → Worker jobs, external HMAC key for terminal events.

use std::time::Duration;

use aws_lc_rs::hmac;
use zeroize::Zeroizing;

use crate::encoding::{ct_eq, hex_lower};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{KeyPurpose, KeyRing};

/// The only signature version.
pub const SIGNATURE_VERSION: &str = "v1";
/// Header carrying the signature.
pub const HEADER_SIGNATURE: &str = "x-message-signature";
/// Header carrying the timestamp.
pub const HEADER_TIMESTAMP: &str = "t";
/// Header carrying the signature version.
pub const HEADER_SIGNATURE_VERSION: &str = "signature-version";
/// Header carrying the tenant id (absent in single-tenant mode).
pub const HEADER_TENANT_ID: &str = "X-Tenant-ID";
/// Minimum HMAC key length.
pub const MIN_KEY_LEN: usize = 32;
/// Default maximum message age (the reference's: 5 minutes).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);
/// Default maximum clock skew into the future (the reference's: 30 seconds).
pub const DEFAULT_MAX_FUTURE_SKEW: Duration = Duration::from_secs(30);

/// Where a message goes and what it carries: the signed fields other than `t` and the
/// version.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    /// `X-Tenant-ID`, empty in single-tenant mode.
    pub tenant_id: &'a str,
    /// Exchange (route); empty for the default exchange and on SQS.
    pub exchange: &'a str,
    /// Routing key (destination): the queue name for jobs.
    pub routing_key: &'a str,
    /// The raw message body.
    pub body: &'a [u8],
}

/// Headers a signer produces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `t`: Unix seconds, decimal.
    pub timestamp: String,
    /// `signature-version`: `v1`.
    pub signature_version: &'static str,
    /// `x-message-signature`: 64 lowercase hex characters.
    pub signature: String,
}

/// The `t` header as received: transports carry it as a string or an integer; anything
/// else should be passed as `None` (it is then a missing header, as in the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timestamp<'a> {
    /// Decimal text; unparseable text fails verification.
    Text(&'a str),
    /// A native integer.
    Int(i64),
}

/// The signature headers of a received message (`None` = absent or not a string).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReceivedHeaders<'a> {
    /// `x-message-signature`.
    pub signature: Option<&'a str>,
    /// `t`.
    pub timestamp: Option<Timestamp<'a>>,
    /// `signature-version`.
    pub signature_version: Option<&'a str>,
}

/// Verification settings.
#[derive(Clone, Copy, Debug)]
pub struct VerifyPolicy {
    /// Reject messages older than this (default 5 min). SQS redeliveries may need more,
    /// or a check against the first-receive time (docs/results.md, "Verification").
    pub max_age: Duration,
    /// Reject messages dated further in the future than this (default 30 s).
    pub max_future_skew: Duration,
    /// Accept the legacy body-only payload `<t>.<body>` after the current format fails
    /// (docs/results.md, "Verification"). Off by default; replay-prone across tenants and routes.
    pub allow_legacy_body_signature: bool,
}

impl Default for VerifyPolicy {
    fn default() -> Self {
        VerifyPolicy {
            max_age: DEFAULT_MAX_AGE,
            max_future_skew: DEFAULT_MAX_FUTURE_SKEW,
            allow_legacy_body_signature: false,
        }
    }
}

/// A verified message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The signed timestamp (Unix seconds).
    pub timestamp: i64,
    /// The job id bound by the signature (from the body).
    pub job_id: String,
    /// Whether the legacy body-only payload matched.
    pub legacy: bool,
    /// Version label of the key that verified (when built from a ring).
    pub key_version: Option<String>,
}

struct SigningKey {
    key: hmac::Key,
    version: Option<String>,
}

/// Signs and verifies envelopes. Holds one signing key and one or more verification keys
/// (current first), so a master-key rotation does not reject in-flight messages.
pub struct MessageSigner {
    keys: Vec<SigningKey>,
    policy: VerifyPolicy,
}

impl std::fmt::Debug for MessageSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageSigner")
            .field("keys", &self.keys.len())
            .field("policy", &self.policy)
            .finish()
    }
}

impl MessageSigner {
    /// A signer with a raw key; refuses keys shorter than 32 bytes.
    pub fn new(key: &[u8]) -> Result<Self> {
        if key.len() < MIN_KEY_LEN {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                "signing key too short: at least 32 bytes are required",
            ));
        }
        Ok(MessageSigner {
            keys: vec![SigningKey {
                key: hmac::Key::new(hmac::HMAC_SHA256, key),
                version: None,
            }],
            policy: VerifyPolicy::default(),
        })
    }

    /// A signer over one derived key of every version of the ring: signs with the current
    /// version, verifies with any (current first). Use [`KeyPurpose::InternalHmac`] for
    /// job messages, [`KeyPurpose::ExternalHmac`] for terminal events.
    pub fn from_ring(ring: &KeyRing, purpose: KeyPurpose) -> Self {
        let keys = ring
            .iter()
            .map(|d| SigningKey {
                key: hmac::Key::new(hmac::HMAC_SHA256, d.key(purpose).expose_secret()),
                version: Some(d.version().to_owned()),
            })
            .collect();
        MessageSigner {
            keys,
            policy: VerifyPolicy::default(),
        }
    }

    /// Replaces the verification policy.
    pub fn with_policy(mut self, policy: VerifyPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The verification policy.
    pub fn policy(&self) -> &VerifyPolicy {
        &self.policy
    }

    /// Signs `envelope` at Unix time `timestamp` with the current key.
    pub fn sign(&self, envelope: &Envelope<'_>, timestamp: i64) -> SignatureHeaders {
        let t = timestamp.to_string();
        let payload = canonical_payload(&t, envelope);
        SignatureHeaders {
            signature: hex_lower(hmac::sign(&self.keys[0].key, &payload).as_ref()),
            timestamp: t,
            signature_version: SIGNATURE_VERSION,
        }
    }

    /// Verifies a received message at Unix time `now`, in the reference's order (docs/results.md,
    /// "Verification"):
    /// signature present → `t` present and parseable → freshness → version → HMAC
    /// (constant time, as lowercase hex text) → legacy fallback if enabled.
    pub fn verify(
        &self,
        headers: &ReceivedHeaders<'_>,
        envelope: &Envelope<'_>,
        now: i64,
    ) -> Result<Verified> {
        self.verify_under(&self.policy, headers, envelope, now)
    }

    /// Whether the message is authentic, however old or early it is: [`Self::verify`]
    /// without the freshness window. For telling a genuine message that waited too long
    /// (`Stale` from [`Self::verify`]) from a forged one; never a reason to use it.
    pub fn verify_ignoring_age(
        &self,
        headers: &ReceivedHeaders<'_>,
        envelope: &Envelope<'_>,
    ) -> Result<Verified> {
        let any_time = VerifyPolicy {
            max_age: Duration::from_secs(i64::MAX as u64),
            max_future_skew: Duration::from_secs(i64::MAX as u64),
            ..self.policy
        };
        self.verify_under(&any_time, headers, envelope, 0)
    }

    fn verify_under(
        &self,
        policy: &VerifyPolicy,
        headers: &ReceivedHeaders<'_>,
        envelope: &Envelope<'_>,
        now: i64,
    ) -> Result<Verified> {
        let missing = || {
            Error::new(
                ErrorKind::MissingSignatureHeaders,
                "missing required signature headers",
            )
        };
        let signature = headers.signature.ok_or_else(missing)?;
        let timestamp = match headers.timestamp.ok_or_else(missing)? {
            Timestamp::Int(t) => t,
            Timestamp::Text(s) => s
                .parse::<i64>()
                .map_err(|_| Error::auth("signature verification failed: bad timestamp"))?,
        };
        let future = i128::from(timestamp) - i128::from(now);
        if future > i128::from(policy.max_future_skew.as_secs()) {
            return Err(Error::new(ErrorKind::Stale, "timestamp is in the future"));
        }
        if -future > i128::from(policy.max_age.as_secs()) {
            return Err(Error::new(ErrorKind::Stale, "signature has expired"));
        }
        let version = headers.signature_version.ok_or_else(missing)?;
        if version != SIGNATURE_VERSION {
            return Err(Error::new(
                ErrorKind::UnsupportedSignatureVersion,
                "unsupported signature version",
            ));
        }
        // The signed text of `t` is its decimal rendering (what the signer put in the header).
        let t = timestamp.to_string();
        let payload = canonical_payload(&t, envelope);
        let job_id = job_id_from_body(envelope.body);
        if let Some(k) = self.matching_key(&payload, signature) {
            return Ok(Verified {
                timestamp,
                job_id,
                legacy: false,
                key_version: k.version.clone(),
            });
        }
        if policy.allow_legacy_body_signature {
            let legacy = legacy_payload(&t, envelope.body);
            if let Some(k) = self.matching_key(&legacy, signature) {
                return Ok(Verified {
                    timestamp,
                    job_id,
                    legacy: true,
                    key_version: k.version.clone(),
                });
            }
        }
        Err(Error::auth("signature verification failed"))
    }

    fn matching_key(&self, payload: &[u8], signature: &str) -> Option<&SigningKey> {
        // Every key is tried so timing does not depend on which one matched.
        let mut found = None;
        for k in &self.keys {
            let expected = Zeroizing::new(hex_lower(hmac::sign(&k.key, payload).as_ref()));
            if ct_eq(expected.as_bytes(), signature.as_bytes()) && found.is_none() {
                found = Some(k);
            }
        }
        found
    }
}

/// The canonical signed payload (docs/results.md, "Canonical payload") for the decimal
/// timestamp text `t`.
pub fn canonical_payload(t: &str, envelope: &Envelope<'_>) -> Vec<u8> {
    let job_id = job_id_from_body(envelope.body);
    let mut p = Vec::with_capacity(
        t.len()
            + SIGNATURE_VERSION.len()
            + envelope.tenant_id.len()
            + job_id.len()
            + envelope.exchange.len()
            + envelope.routing_key.len()
            + envelope.body.len()
            + 6,
    );
    for field in [
        t,
        SIGNATURE_VERSION,
        envelope.tenant_id,
        &job_id,
        envelope.exchange,
        envelope.routing_key,
    ] {
        p.extend_from_slice(field.as_bytes());
        p.push(b'\n');
    }
    p.extend_from_slice(envelope.body);
    p
}

/// The legacy payload (docs/results.md, "Verification"): `<t>.<body>`.
pub fn legacy_payload(t: &str, body: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(t.len() + 1 + body.len());
    p.extend_from_slice(t.as_bytes());
    p.push(b'.');
    p.extend_from_slice(body);
    p
}

/// The `jobId` string property of the body's top-level JSON object; empty if the body is
/// not a JSON object or the property is missing or not a string. With duplicate keys the
/// last one wins (as in the reference's map decoding).
pub fn job_id_from_body(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body) {
        Ok(mut map) => match map.remove("jobId") {
            Some(serde_json::Value::String(s)) => s,
            _ => String::new(),
        },
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::vector_ring;

    const BODY: &str = r#"{"jobId":"0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90","mappedFields":{"pg":{"users":["id"]}},"metadata":{"source":"reporter"}}"#;
    const QUEUE: &str = "fetcher.extract-external-data.queue";
    const MT: &str = "8f19c2b05fc680a572483fe5f927367e1d062df945da8ab932b28da9a6de2afa";
    const ST: &str = "5ec9141e2adb548d16d1804ffd0186fc45ff5ade380be193e2d74289ae14a18f";
    const LEGACY: &str = "b18e9a12ba0a8429b3817fa599a56a02f30a3cbc998c768a16a161b885bc6747";
    const T: i64 = 1_700_000_000;

    fn signer() -> MessageSigner {
        MessageSigner::from_ring(&vector_ring(), KeyPurpose::InternalHmac)
    }

    fn env(tenant: &str) -> Envelope<'_> {
        Envelope {
            tenant_id: tenant,
            exchange: "",
            routing_key: QUEUE,
            body: BODY.as_bytes(),
        }
    }

    fn headers<'a>(sig: &'a str, t: &'a str) -> ReceivedHeaders<'a> {
        ReceivedHeaders {
            signature: Some(sig),
            timestamp: Some(Timestamp::Text(t)),
            signature_version: Some("v1"),
        }
    }

    #[test]
    fn reference_envelope_vectors() {
        let s = signer();
        let mt = s.sign(&env("tenant-123"), T);
        assert_eq!(mt.signature, MT);
        assert_eq!(mt.timestamp, "1700000000");
        assert_eq!(mt.signature_version, "v1");
        assert_eq!(s.sign(&env(""), T).signature, ST);
        let v = s
            .verify(&headers(MT, "1700000000"), &env("tenant-123"), T + 10)
            .unwrap();
        assert_eq!(v.job_id, "0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90");
        assert!(!v.legacy);
        assert_eq!(v.key_version.as_deref(), Some("1"));
        s.verify(&headers(ST, "1700000000"), &env(""), T).unwrap();
        // Legacy only when enabled.
        assert_eq!(
            s.verify(&headers(LEGACY, "1700000000"), &env(""), T)
                .unwrap_err()
                .kind(),
            ErrorKind::Authentication
        );
        let lenient = signer().with_policy(VerifyPolicy {
            allow_legacy_body_signature: true,
            ..Default::default()
        });
        assert!(
            lenient
                .verify(&headers(LEGACY, "1700000000"), &env("tenant-123"), T)
                .unwrap()
                .legacy
        );
        // Raw key constructor gives the same result.
        let raw = MessageSigner::new(
            vector_ring()
                .current()
                .key(KeyPurpose::InternalHmac)
                .expose_secret(),
        )
        .unwrap();
        assert_eq!(raw.sign(&env(""), T).signature, ST);
    }

    #[test]
    fn rejections() {
        let s = signer();
        let kind = |h: ReceivedHeaders<'_>, e: Envelope<'_>, now: i64| {
            s.verify(&h, &e, now).unwrap_err().kind()
        };
        // Bindings.
        assert_eq!(
            kind(headers(MT, "1700000000"), env("tenant-999"), T),
            ErrorKind::Authentication
        );
        assert_eq!(
            kind(headers(ST, "1700000000"), env("tenant-123"), T),
            ErrorKind::Authentication
        );
        let other_route = Envelope {
            routing_key: "other",
            ..env("")
        };
        assert_eq!(
            kind(headers(ST, "1700000000"), other_route, T),
            ErrorKind::Authentication
        );
        let other_exchange = Envelope {
            exchange: "x",
            ..env("")
        };
        assert_eq!(
            kind(headers(ST, "1700000000"), other_exchange, T),
            ErrorKind::Authentication
        );
        assert_eq!(
            kind(headers(ST, "1700000001"), env(""), T),
            ErrorKind::Authentication
        );
        assert_eq!(
            kind(headers(&ST.to_uppercase(), "1700000000"), env(""), T),
            ErrorKind::Authentication
        );
        assert_eq!(
            kind(headers("", "1700000000"), env(""), T),
            ErrorKind::Authentication
        );
        // Freshness window: age 300 ok, 301 expired; +30 ok, +31 future.
        assert!(
            s.verify(&headers(ST, "1700000000"), &env(""), T + 300)
                .is_ok()
        );
        assert_eq!(
            kind(headers(ST, "1700000000"), env(""), T + 301),
            ErrorKind::Stale
        );
        assert!(
            s.verify(&headers(ST, "1700000000"), &env(""), T - 30)
                .is_ok()
        );
        assert_eq!(
            kind(headers(ST, "1700000000"), env(""), T - 31),
            ErrorKind::Stale
        );
        assert!(
            s.verify(&headers(ST, "1700000000"), &env(""), T + 301)
                .unwrap_err()
                .to_string()
                .contains("expired")
        );
        // Outside the window, a genuine message is still told from a forged one.
        let old = s
            .verify_ignoring_age(&headers(ST, "1700000000"), &env(""))
            .unwrap();
        assert_eq!(old.timestamp, T);
        assert_eq!(
            s.verify_ignoring_age(&headers(ST, "1700000000"), &env("tenant-123"))
                .unwrap_err()
                .kind(),
            ErrorKind::Authentication
        );
        // Header problems.
        let mut h = headers(ST, "1700000000");
        h.signature = None;
        assert_eq!(kind(h, env(""), T), ErrorKind::MissingSignatureHeaders);
        let mut h = headers(ST, "1700000000");
        h.timestamp = None;
        assert_eq!(kind(h, env(""), T), ErrorKind::MissingSignatureHeaders);
        assert_eq!(
            kind(headers(ST, "17e8"), env(""), T),
            ErrorKind::Authentication
        );
        let mut h = headers(ST, "1700000000");
        h.signature_version = None;
        assert_eq!(kind(h, env(""), T), ErrorKind::MissingSignatureHeaders);
        h.signature_version = Some("v2");
        assert_eq!(kind(h, env(""), T), ErrorKind::UnsupportedSignatureVersion);
        // Integer timestamp accepted.
        h.signature_version = Some("v1");
        h.timestamp = Some(Timestamp::Int(T));
        assert!(s.verify(&h, &env(""), T).is_ok());
        // Extreme timestamps do not overflow.
        h.timestamp = Some(Timestamp::Int(i64::MIN));
        assert_eq!(kind(h, env(""), i64::MAX), ErrorKind::Stale);
    }

    #[test]
    fn key_rules_and_rotation() {
        assert_eq!(
            MessageSigner::new(&[0u8; 31]).unwrap_err().kind(),
            ErrorKind::InvalidKey
        );
        assert!(MessageSigner::new(&[0u8; 32]).is_ok());
        use crate::keys::{MasterKey, MasterKeys, VersionedMasterKey};
        let k1 = MasterKey::from_bytes(vec![1u8; 32]).unwrap();
        let k2 = MasterKey::from_bytes(vec![2u8; 32]).unwrap();
        let old = MessageSigner::from_ring(
            &KeyRing::single("1", k1.clone()).unwrap(),
            KeyPurpose::InternalHmac,
        );
        let ring = KeyRing::new(MasterKeys {
            current: VersionedMasterKey::new("2", k2).unwrap(),
            previous: vec![VersionedMasterKey::new("1", k1).unwrap()],
        })
        .unwrap();
        let new = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        let h = old.sign(&env(""), T);
        let rh = headers(&h.signature, &h.timestamp);
        assert_eq!(
            new.verify(&rh, &env(""), T).unwrap().key_version.as_deref(),
            Some("1")
        );
        let h2 = new.sign(&env(""), T);
        assert_eq!(
            old.verify(&headers(&h2.signature, "1700000000"), &env(""), T)
                .unwrap_err()
                .kind(),
            ErrorKind::Authentication
        );
        // External key does not verify internal signatures.
        let ext = MessageSigner::from_ring(&ring, KeyPurpose::ExternalHmac);
        assert!(
            ext.verify(&headers(&h2.signature, "1700000000"), &env(""), T)
                .is_err()
        );
    }

    #[test]
    fn job_id_extraction() {
        assert_eq!(
            job_id_from_body(BODY.as_bytes()),
            "0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90"
        );
        assert_eq!(job_id_from_body(b"{\"jobId\":5}"), "");
        assert_eq!(job_id_from_body(b"[1]"), "");
        assert_eq!(job_id_from_body(b"null"), "");
        assert_eq!(job_id_from_body(b"not json"), "");
        assert_eq!(job_id_from_body(b""), "");
        assert_eq!(job_id_from_body(b" {\"a\":{\"jobId\":\"x\"}} "), "");
        assert_eq!(job_id_from_body(b"{\"jobId\":\"a\",\"jobId\":\"b\"}"), "b");
        // The body's job id, not a header, is bound: changing it breaks the signature.
        let s = signer();
        let sig = s.sign(&env(""), T);
        let body2 = BODY.replace("0192f6a0", "0192f6a1");
        let e2 = Envelope {
            body: body2.as_bytes(),
            ..env("")
        };
        assert!(
            s.verify(&headers(&sig.signature, &sig.timestamp), &e2, T)
                .is_err()
        );
    }
}
