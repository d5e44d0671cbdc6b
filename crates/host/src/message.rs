//! The job message: what the API enqueues and the pipeline consumes (docs/results.md,
//! "Signed queue messages"). The body is compact JSON `{"createdAt","filters"?,"jobId","mappedFields","metadata"}`
//! (keys sorted); the headers carry the signed envelope, keyed with the internal HMAC key.
//!
//! Differences from the reference: the tenant header is always present and signed (the
//! reference omits it in single-tenant mode; here single-tenant jobs belong to the tenant
//! `default`), and the route is a fixed logical name so the same signature verifies on
//! SQS and on the in-process queue.

use std::collections::BTreeMap;

use fetcher_crypto::envelope::{
    HEADER_SIGNATURE, HEADER_SIGNATURE_VERSION, HEADER_TENANT_ID, HEADER_TIMESTAMP,
    ReceivedHeaders, Timestamp as SignedAt,
};
use fetcher_crypto::{Envelope, MessageSigner};
use fetcher_engine::FieldSelection;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, ServiceError};
use crate::model::{Job, JobId, QueueMessage, ResultFormat};

/// The logical route both sides sign (the reference's work-queue name).
pub const JOB_ROUTE: &str = "fetcher.extract-external-data.queue";
/// Header with the job id, to recover it from an unparseable body.
pub const HEADER_JOB_ID: &str = "jobId";
pub const HEADER_REQUEST_ID: &str = "X-Request-Id";
pub const HEADER_RETRY_COUNT: &str = "x-retry-count";

/// The body of a job message. Its request fields are the reference's (its workers run
/// from them); ours check their shape and run the job record, the one copy of the
/// request (docs/results.md, "Verification").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobMessage {
    /// Text as the wire has it: a missing or malformed id is the reference's `FET-0051`,
    /// not an unparseable body; [`Received::job_id`] is the parsed one.
    pub job_id: String,
    pub mapped_fields: BTreeMap<String, FieldSelection>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filters: fetcher_engine::Filters,
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_format: Option<ResultFormat>,
    /// A continued job's message: the segment it runs (the job's checkpoint's number)…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    /// …and that checkpoint's digest ([`crate::model::Checkpoint::digest`]), so a worker
    /// resumes only from the checkpoint this message was signed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// A fanned-out job's message for one of its ranges (docs/operations.md,
    /// "Fan-out"); `segment` and `checkpoint` are then that range's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<usize>,
    /// The job's trace context ([`Job::trace`]), inside what the signature covers, so a
    /// worker continues the creating request's trace and no one else can place it in
    /// another.
    #[serde(
        default,
        rename = "traceparent",
        skip_serializing_if = "Option::is_none"
    )]
    pub trace_parent: Option<fetcher_telemetry::TraceParent>,
}

/// Builds the signed message for `job`.
pub fn encode(job: &Job, signer: &MessageSigner, request_id: &str, now_unix: i64) -> QueueMessage {
    let msg = JobMessage {
        job_id: job.id.to_string(),
        mapped_fields: job.request.mapped_fields.clone(),
        filters: job.request.filters.clone(),
        metadata: job.request.metadata.clone(),
        created_at: Some(job.created_at.to_string()),
        result_format: job.request.result_format,
        segment: job.checkpoint.as_ref().map(|c| c.segment),
        checkpoint: job.checkpoint.as_ref().map(|c| c.digest()),
        range: job.range,
        trace_parent: job.trace.clone(),
    };
    // serde_json's map is sorted, and the struct's fields serialize in a fixed order.
    let value = serde_json::to_value(&msg).expect("job message is JSON");
    let body = serde_json::to_vec(&value).expect("job message is JSON");
    let sig = signer.sign(
        &Envelope {
            tenant_id: &job.tenant_id,
            exchange: "",
            routing_key: JOB_ROUTE,
            body: &body,
        },
        now_unix,
    );
    let headers = BTreeMap::from([
        (HEADER_JOB_ID.to_owned(), job.id.to_string()),
        (HEADER_TENANT_ID.to_owned(), job.tenant_id.clone()),
        (HEADER_REQUEST_ID.to_owned(), request_id.to_owned()),
        (HEADER_RETRY_COUNT.to_owned(), "0".to_owned()),
        (HEADER_TIMESTAMP.to_owned(), sig.timestamp),
        (
            HEADER_SIGNATURE_VERSION.to_owned(),
            sig.signature_version.to_owned(),
        ),
        (HEADER_SIGNATURE.to_owned(), sig.signature),
    ]);
    QueueMessage { headers, body }
}

/// Why a message could not be used.
#[derive(Debug)]
pub enum Rejected {
    /// The envelope does not verify: drop it, touch no job (a forged message must not be
    /// able to fail someone's job).
    BadSignature(ServiceError),
    /// Authentic, but signed outside the freshness window (it waited in a backlog longer
    /// than the maximum message age, or a clock is off): drop it unused. The job it names
    /// is not failed; the repair pass sends it a fresh message.
    Stale {
        tenant: String,
        job_id: JobId,
        /// When it was signed.
        signed_at: fetcher_engine::Timestamp,
    },
    /// Signed, but the body is unusable. If a job id can be recovered the job fails.
    BadBody {
        tenant: String,
        job_id: Option<JobId>,
        error: ServiceError,
    },
}

/// A verified, parsed message.
#[derive(Debug, Clone)]
pub struct Received {
    pub tenant: String,
    /// The message's job, parsed.
    pub job_id: JobId,
    pub request_id: String,
    pub message: JobMessage,
}

/// Verifies the envelope at `now_unix`, then parses and validates the body (docs/results.md, "Verification").
pub fn decode(
    msg: &QueueMessage,
    signer: &MessageSigner,
    now_unix: i64,
) -> std::result::Result<Received, Rejected> {
    let tenant = header(msg, HEADER_TENANT_ID).unwrap_or("").to_owned();
    let received = signature_headers(msg);
    let envelope = envelope(&tenant, msg);
    if let Err(e) = signer.verify(&received, &envelope, now_unix) {
        if e.kind() == fetcher_crypto::ErrorKind::Stale
            && let Ok(v) = signer.verify_ignoring_age(&received, &envelope)
            && let Some(job_id) = JobId::parse(&v.job_id)
        {
            return Err(Rejected::Stale {
                tenant,
                job_id,
                signed_at: signed_at(v.timestamp),
            });
        }
        return Err(Rejected::BadSignature(
            ServiceError::from(e).retryable(false),
        ));
    }
    let request_id = header(msg, HEADER_REQUEST_ID).unwrap_or("").to_owned();
    let bad = |error: ServiceError| {
        let job_id = header(msg, HEADER_JOB_ID)
            .and_then(JobId::parse)
            .or_else(|| JobId::parse(&fetcher_crypto::envelope::job_id_from_body(&msg.body)));
        Rejected::BadBody {
            tenant: tenant.clone(),
            job_id,
            error: error.retryable(false),
        }
    };
    let message: JobMessage = match serde_json::from_slice(&msg.body) {
        Ok(m) => m,
        Err(_) => {
            return Err(bad(ServiceError::validation(
                "FET-0050: message payload is not a valid job message",
            )));
        }
    };
    let Some(job_id) = JobId::parse(&message.job_id).filter(|id| !id.is_nil()) else {
        return Err(bad(ServiceError::validation("FET-0051: jobId is required")));
    };
    if message.mapped_fields.is_empty() {
        return Err(bad(ServiceError::validation(
            "FET-0052: mappedFields is required",
        )));
    }
    if let Some((name, _)) = message.mapped_fields.iter().find(|(_, t)| t.is_empty()) {
        return Err(bad(ServiceError::new(
            ErrorKind::Validation,
            format!("FET-0053: mappedFields[\"{name}\"] has no tables"),
        )));
    }
    if tenant.is_empty() {
        return Err(bad(ServiceError::validation(
            "job message carries no tenant",
        )));
    }
    Ok(Received {
        tenant,
        job_id,
        request_id,
        message,
    })
}

/// What an authentic message says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentic {
    pub tenant: String,
    pub job_id: JobId,
    pub signed_at: fetcher_engine::Timestamp,
    /// The master key version whose internal HMAC key signed it.
    pub key_version: String,
}

/// Whether `msg` is authentic, whatever its age (for marking the job of a message the
/// queue gives up on, and for telling which key signed it).
pub fn authentic(msg: &QueueMessage, signer: &MessageSigner) -> Option<Authentic> {
    let tenant = header(msg, HEADER_TENANT_ID).unwrap_or("").to_owned();
    let v = signer
        .verify_ignoring_age(&signature_headers(msg), &envelope(&tenant, msg))
        .ok()?;
    Some(Authentic {
        tenant,
        job_id: JobId::parse(&v.job_id)?,
        signed_at: signed_at(v.timestamp),
        key_version: v.key_version.unwrap_or_default(),
    })
}

/// A header of `msg`, by case-insensitive name.
fn header<'m>(msg: &'m QueueMessage, name: &str) -> Option<&'m str> {
    msg.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn signature_headers(msg: &QueueMessage) -> ReceivedHeaders<'_> {
    ReceivedHeaders {
        signature: header(msg, HEADER_SIGNATURE),
        timestamp: header(msg, HEADER_TIMESTAMP).map(SignedAt::Text),
        signature_version: header(msg, HEADER_SIGNATURE_VERSION),
    }
}

/// What the signature covers: the tenant, the fixed route and the body.
fn envelope<'a>(tenant: &'a str, msg: &'a QueueMessage) -> Envelope<'a> {
    Envelope {
        tenant_id: tenant,
        exchange: "",
        routing_key: JOB_ROUTE,
        body: &msg.body,
    }
}

fn signed_at(unix_secs: i64) -> fetcher_engine::Timestamp {
    fetcher_engine::Timestamp::from_unix_nanos(i128::from(unix_secs) * 1_000_000_000)
}

/// Whether an error text marks a message as poison (never worth a retry).
pub fn is_permanent(err: &ServiceError) -> bool {
    !err.is_retryable()
}

/// Current Unix time in seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobRequest;
    use fetcher_crypto::{KeyPurpose, KeyRing};

    fn signer() -> MessageSigner {
        let ring =
            KeyRing::from_base64("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "1").unwrap();
        MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac)
    }

    fn job() -> Job {
        let mut req = JobRequest::default();
        req.mapped_fields.insert(
            "pg".into(),
            [("public.t".to_string(), vec!["id".to_string()])].into(),
        );
        req.metadata.insert("source".into(), "crm".into());
        Job::new("acme", req, "h".into())
    }

    #[test]
    fn round_trips_and_binds_the_tenant() {
        let s = signer();
        let j = job();
        let msg = encode(&j, &s, "req-1", 1_700_000_000);
        let got = decode(&msg, &s, 1_700_000_010).unwrap();
        assert_eq!(
            (got.tenant.as_str(), got.request_id.as_str()),
            ("acme", "req-1")
        );
        assert_eq!(
            (got.job_id, got.message.job_id.as_str()),
            (j.id, j.id.to_string().as_str())
        );
        assert_eq!(got.message.metadata["source"], "crm");

        // Another tenant's header: the signature no longer verifies.
        let mut forged = msg.clone();
        forged
            .headers
            .insert(HEADER_TENANT_ID.into(), "evil".into());
        assert!(matches!(
            decode(&forged, &s, 1_700_000_010),
            Err(Rejected::BadSignature(_))
        ));
        // A flipped body byte, an old message, a message from the future.
        let mut tampered = msg.clone();
        tampered.body[5] ^= 1;
        assert!(matches!(
            decode(&tampered, &s, 1_700_000_010),
            Err(Rejected::BadSignature(_))
        ));
        // Old and early messages are authentic: told apart from forged ones.
        for now in [1_700_000_000 + 301, 1_700_000_000 - 31] {
            match decode(&msg, &s, now) {
                Err(Rejected::Stale {
                    tenant,
                    job_id,
                    signed_at,
                }) => {
                    assert_eq!((tenant.as_str(), job_id), ("acme", j.id));
                    assert_eq!(signed_at.unix_nanos(), 1_700_000_000 * 1_000_000_000);
                }
                other => panic!("{other:?}"),
            }
        }
        let mut forged_old = msg.clone();
        forged_old.body[5] ^= 1;
        assert!(matches!(
            decode(&forged_old, &s, 1_700_000_000 + 301),
            Err(Rejected::BadSignature(_))
        ));
        let mut unsigned = msg.clone();
        unsigned.headers.remove(HEADER_SIGNATURE);
        assert!(matches!(
            decode(&unsigned, &s, 1_700_000_010),
            Err(Rejected::BadSignature(_))
        ));
    }

    #[test]
    fn signed_but_invalid_bodies_recover_the_job_id() {
        let s = signer();
        let mut j = job();
        j.request
            .mapped_fields
            .insert("empty".into(), Default::default());
        let msg = encode(&j, &s, "", 1_700_000_000);
        match decode(&msg, &s, 1_700_000_000) {
            Err(Rejected::BadBody {
                tenant,
                job_id,
                error,
            }) => {
                assert_eq!(tenant, "acme");
                assert_eq!(job_id, Some(j.id));
                assert!(error.message().contains("FET-0053"));
                assert!(!error.is_retryable());
            }
            other => panic!("{other:?}"),
        }
    }
}
