//! The payloads of the terminal events (docs/events.md, "Detail"): `job.completed` with
//! its result descriptor, `job.failed` with the error, a canceled job's `job.failed`.

use std::time::Duration;

use fetcher_engine::{StoredFormat, Timestamp};
use serde::Serialize;

use fetcher_telemetry::TraceParent;

use crate::model::*;

/// The `result` descriptor of `job.completed` (docs/events.md, "`result`"), plus our fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultDescriptor<'a> {
    path: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    size_bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    row_count: u64,
    format: StoredFormat,
    hmac: &'a str,
    integrity: Integrity<'a>,
    protection: Protection,
    /// Beyond the reference: how the object is sealed (`v1` or `v2`), with which key
    /// version, and the plaintext SHA-256.
    sealed_format: &'static str,
    key_version: &'a str,
    sha256: &'a str,
    /// Beyond the reference: a Parquet job's files (docs/events.md, "`result`").
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    parts: &'a [fetcher_engine::ResultPart],
    /// Beyond the reference: an incremental job's `configName → table → {fromWatermark,
    /// toWatermark}` (docs/events.md, "`result`").
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    watermarks:
        &'a std::collections::BTreeMap<String, std::collections::BTreeMap<String, WatermarkSpan>>,
}

#[derive(Serialize)]
struct Integrity<'a> {
    algorithm: &'static str,
    signature: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Protection {
    encrypted: bool,
    mode: &'static str,
    applied_by: fetcher_engine::AppliedBy,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The event payload (docs/events.md, "Detail"), fields in the emitted order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventPayload<'a> {
    job_id: JobId,
    metadata: &'a serde_json::Map<String, serde_json::Value>,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ResultDescriptor<'a>>,
    #[serde(skip_serializing_if = "is_zero")]
    execution_time_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
    /// Beyond the reference: the W3C trace context of the request that created the job,
    /// for a subscriber to continue (docs/events.md, "Detail").
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a TraceParent>,
}

/// The `job.completed` payload.
pub fn completed_payload(
    job_id: JobId,
    metadata: &serde_json::Map<String, serde_json::Value>,
    trace: Option<&TraceParent>,
    r: &JobResult,
    elapsed: Duration,
    at: Timestamp,
) -> String {
    let payload = EventPayload {
        job_id,
        metadata,
        status: "completed",
        result: Some(ResultDescriptor {
            path: &r.path,
            size_bytes: r.size_bytes,
            row_count: r.row_count,
            // The reference's `json` for its formats; a Parquet job says so.
            format: if r.format == ResultFormat::Parquet {
                StoredFormat::Parquet
            } else {
                StoredFormat::Json
            },
            hmac: &r.hmac,
            integrity: Integrity {
                algorithm: "HMAC-SHA256",
                signature: &r.hmac,
            },
            protection: Protection {
                encrypted: true,
                mode: "adapter-managed",
                applied_by: fetcher_engine::AppliedBy::Adapter,
            },
            sealed_format: r.format.sealed_format(),
            key_version: &r.key_version,
            sha256: &r.digest,
            parts: &r.parts,
            watermarks: &r.watermarks,
        }),
        execution_time_ms: elapsed.as_millis() as u64,
        completed_at: Some(at.to_string()),
        traceparent: trace,
    };
    serde_json::to_string(&payload).expect("payload is JSON")
}

/// The `job.failed` payload: the message metadata plus `error: {message}`.
pub fn failed_payload(
    job_id: JobId,
    metadata: &serde_json::Map<String, serde_json::Value>,
    trace: Option<&TraceParent>,
    error: &str,
) -> String {
    let mut metadata = metadata.clone();
    metadata.insert("error".into(), serde_json::json!({ "message": error }));
    let payload = EventPayload {
        job_id,
        metadata: &metadata,
        status: "failed",
        result: None,
        execution_time_ms: 0,
        completed_at: None,
        traceparent: trace,
    };
    serde_json::to_string(&payload).expect("payload is JSON")
}

/// The pending `job.failed` event of a canceled job (error category `canceled`).
pub fn canceled_event(job: &Job) -> PendingEvent {
    PendingEvent {
        status: JobStatus::Canceled,
        payload: failed_payload(
            job.id,
            &job.request.metadata,
            job.trace.as_ref(),
            CANCELED_ERROR,
        ),
        failures: 0,
    }
}
