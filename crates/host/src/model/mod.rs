//! The job record and the terminal event, as the host ports store and move them; the
//! transitions and rules of a job's lifecycle in [`lifecycle`], a sync's watermarks in
//! [`sync`], a continued job's checkpoint in [`checkpoint`], a fanned-out job's ranges in
//! [`fanout`].

use std::collections::BTreeMap;

use fetcher_engine::{FieldSelection, IncrementalSpec, Timestamp};
use serde::{Deserialize, Serialize};

mod checkpoint;
mod fanout;
mod lifecycle;
mod schedule;
mod sync;

pub use checkpoint::Checkpoint;
pub use fanout::{Fanout, FanoutRange, RangeState};
pub use lifecycle::{ENQUEUE_SLACK, Transition};
pub use schedule::{
    Cadence, CadenceError, CadenceSpec, MAX_CONSECUTIVE_FAILURES, MAX_JITTER_SECONDS,
    MIN_RATE_SECONDS, RunOutcome, STALE_AFTER_PERIODS, Schedule, ScheduleRun, ScheduleState,
    jitter_seconds,
};
pub use sync::{SyncState, SyncedTable, WatermarkSpan};

/// A job's id: a UUID (v7 for the jobs this service creates), lowercase canonical text on
/// the wire and in every store (docs/api.md, "Jobs"). Parsed where text arrives (a route's
/// path, a queue message), so a store or a worker never meets a malformed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(uuid::Uuid);

impl JobId {
    /// A new, time-ordered id.
    pub fn new() -> JobId {
        JobId(uuid::Uuid::now_v7())
    }

    /// The id `s` spells (any of the UUID text forms; shown canonical from then on),
    /// `None` when it is no UUID.
    pub fn parse(s: &str) -> Option<JobId> {
        uuid::Uuid::try_parse(s).ok().map(JobId)
    }

    pub fn is_nil(&self) -> bool {
        self.0.is_nil()
    }

    pub fn as_uuid(&self) -> &uuid::Uuid {
        &self.0
    }
}

impl Default for JobId {
    /// The nil id: only for struct-update syntax in builders; never a stored job's.
    fn default() -> JobId {
        JobId(uuid::Uuid::nil())
    }
}

impl From<uuid::Uuid> for JobId {
    fn from(u: uuid::Uuid) -> JobId {
        JobId(u)
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl std::str::FromStr for JobId {
    type Err = fetcher_engine::UnknownSpelling;
    fn from_str(s: &str) -> Result<JobId, Self::Err> {
        JobId::parse(s).ok_or(fetcher_engine::UnknownSpelling)
    }
}

/// Job status (docs/api.md, "Job status"). Terminal states are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Pending,
    Processing,
    Completed,
    Failed,
    /// Stopped on request (`POST /v1/fetcher/{id}/cancel`); its event is a `job.failed`
    /// with the error category `canceled` (docs/api.md, "Canceling a job").
    Canceled,
}

/// The error text of a canceled job (its `metadata.error`, and the event's).
pub const CANCELED_ERROR: &str = "engine: [canceled] job canceled by request";

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Processing => "processing",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Canceled => "canceled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Processing,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Canceled
        )
    }

    /// Pending and processing jobs hold the dedup slot of their request hash.
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }
}

/// How a result is sealed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultFormat {
    /// Streaming, framed AES-256-GCM over NDJSON (ours; any size). The default.
    #[default]
    V2,
    /// The reference's format: indented JSON, HMAC then AES-256-GCM, Base64 text.
    V1,
    /// One Parquet file per `(config, table)`, each sealed like v2, listed by a sealed v2
    /// JSON manifest, which is the job's result (docs/results.md, "Parquet results").
    Parquet,
}

impl ResultFormat {
    /// The wire name (`v2`, `v1`, `parquet`).
    pub fn as_str(self) -> &'static str {
        match self {
            ResultFormat::V2 => "v2",
            ResultFormat::V1 => "v1",
            ResultFormat::Parquet => "parquet",
        }
    }

    /// How the result object itself is sealed: a Parquet job's manifest is v2.
    pub fn sealed_format(self) -> &'static str {
        match self {
            ResultFormat::V1 => "v1",
            ResultFormat::V2 | ResultFormat::Parquet => "v2",
        }
    }
}

/// What the client asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRequest {
    /// `configName → table → [field]`.
    pub mapped_fields: BTreeMap<String, FieldSelection>,
    /// `configName → table → field → condition`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filters: fetcher_engine::Filters,
    /// Client metadata, verbatim (contains `source`).
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The result format asked for; `None` means the deployment's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_format: Option<ResultFormat>,
    /// `configName → table → incremental read` (docs/api.md, "Incremental extraction"),
    /// keys resolved when the job was created.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub incremental: BTreeMap<String, BTreeMap<String, IncrementalSpec>>,
    /// The sync an incremental job belongs to (its watermarks'); `None` for a full job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_id: Option<String>,
    /// The due time of the schedule run that created the job (docs/api.md, "Schedules").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<Timestamp>,
}

/// Whether a record of product `owner` answers to a caller naming `caller` (docs/api.md,
/// "Products"): a caller naming none sees every product's (as the reference answers it;
/// a strict deployment refuses such a caller before this is asked), a caller naming one
/// sees only that product's, and a record of no product answers to everyone.
pub fn answers_to(owner: &str, caller: Option<&str>) -> bool {
    owner.is_empty() || caller.is_none_or(|c| c == owner)
}

/// Where a completed job's result is and how to verify it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobResult {
    /// Object-store key (no bucket).
    pub path: String,
    pub format: ResultFormat,
    /// Lowercase hex HMAC-SHA256 of the plaintext (external HMAC key).
    pub hmac: String,
    /// Lowercase hex SHA-256 of the plaintext.
    pub digest: String,
    /// Plaintext bytes.
    pub size_bytes: u64,
    /// Stored (sealed) bytes.
    pub stored_bytes: u64,
    pub row_count: u64,
    /// The key version that sealed the object.
    pub key_version: String,
    /// A Parquet job's files, in the manifest's order (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<fetcher_engine::ResultPart>,
    /// An incremental job's watermarks, `configName → table → span`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub watermarks: BTreeMap<String, BTreeMap<String, WatermarkSpan>>,
}

impl JobResult {
    /// The job's result from the sink's typed reference: HMAC from the integrity's
    /// signature, plaintext digest from its digest, key version from the protection.
    pub fn sealed(r: &fetcher_engine::ResultReference, format: ResultFormat) -> JobResult {
        let integrity = r.integrity.clone().unwrap_or_default();
        JobResult {
            path: r.path.clone(),
            format,
            hmac: integrity.signature,
            digest: integrity.digest,
            size_bytes: r.size_bytes.max(0) as u64,
            stored_bytes: r.stored_bytes.max(0) as u64,
            row_count: r.row_count.max(0) as u64,
            key_version: r
                .protection
                .as_ref()
                .map(|p| p.key_version.clone())
                .unwrap_or_default(),
            parts: r.parts.clone(),
            watermarks: BTreeMap::new(),
        }
    }
}

/// A terminal event persisted with the terminal status, published, then cleared (the
/// outbox marker of docs/events.md, "Delivery").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingEvent {
    pub status: JobStatus,
    /// The event payload (docs/events.md, "Detail"), compact JSON, published verbatim.
    pub payload: String,
    /// Failed publish attempts so far (the repair pass counts them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One extraction job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: JobId,
    pub tenant_id: String,
    pub status: JobStatus,
    pub request: JobRequest,
    /// Lowercase hex SHA-256 of the canonical request (docs/api.md, "Duplicates").
    pub request_hash: String,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<JobResult>,
    /// Sanitised failure text (`metadata.error` in the API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// While `processing`: when the current claim expires and may be taken over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<Timestamp>,
    /// How many times the job was claimed; a claim's token is this number.
    #[serde(default)]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_event: Option<PendingEvent>,
    /// The sanitised error of the first attempt that failed retryably, kept across
    /// attempts: when the retries run out, the job fails with it (the first meaningful
    /// category: "could not connect", not what a later attempt met on the way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// A terminal event set aside after too many failed publishes: out of the outbox, so
    /// it no longer takes the repair pass's slots; kept for an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_event: Option<PendingEvent>,
    /// Live figures of the running extraction, written with the lease heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// The rows the job reads, as its datasources' catalogs estimate them, when known at
    /// creation ([`crate::jobs::CheckedRequest::rows_estimate`]): what `progress` is a
    /// share of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_estimate: Option<u64>,
    /// When a cancel was asked for while the job was `processing`: its worker sees it at
    /// the next heartbeat and stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested_at: Option<Timestamp>,
    /// When the job's latest queue message was sent: its creation (the API enqueues right
    /// after the insert, and fails the job if it cannot), or the repair pass's last
    /// re-enqueue. The repair pass judges a message lost by it, not by the job's age
    /// (docs/operations.md, "Repair schedule"). Absent on records written before it
    /// existed: their creation time counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued_at: Option<Timestamp>,
    /// When a worker dropped the job's latest message unused (authentic, but too old to
    /// trust, or bound for the dead-letter queue): no message of the job is left in the
    /// queue, so the repair pass re-enqueues it at its next run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_dropped_at: Option<Timestamp>,
    /// A job that needs more than one run: where its next segment resumes and what the
    /// earlier ones wrote (docs/engine.md, "Continued runs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    /// A job whose big table is read in key ranges by several workers at once
    /// (docs/operations.md, "Fan-out").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<Fanout>,
    /// Claims of the job that were taken over (their lease ran out), kept for the job's
    /// life: once there is one, every later run names its parts by its own claim (a
    /// replaced run may have written further than the run that took over, at plain
    /// names a later segment would otherwise reuse), and removes what these may have
    /// left at its parts' numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<u32>,
    /// The W3C trace context of the request that created the job (docs/operations.md,
    /// "Traces"): every message of the job carries it, its worker's spans continue it and
    /// its event names it. Absent when traces are not exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<fetcher_telemetry::TraceParent>,
    /// On a worker's copy only ([`Job::range_view`]): the range of the fanned-out job it
    /// runs. Never stored.
    #[serde(skip)]
    pub range: Option<usize>,
}

/// How far a running extraction is (docs/api.md, "Progress"): rows and bytes of the
/// plaintext NDJSON so far, tables finished of the job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub rows: u64,
    pub bytes: u64,
    pub tables_done: u64,
    pub tables_total: u64,
    pub updated_at: Timestamp,
}

impl Progress {
    /// The record of the engine's counters as read at `at`.
    pub fn read(s: fetcher_engine::ProgressSnapshot, at: Timestamp) -> Progress {
        Progress {
            rows: s.rows,
            bytes: s.bytes,
            tables_done: s.tables_done,
            tables_total: s.tables_total,
            updated_at: at,
        }
    }
}

impl Job {
    /// A new pending job.
    pub fn new(tenant_id: &str, request: JobRequest, request_hash: String) -> Job {
        Job {
            id: JobId::new(),
            tenant_id: tenant_id.to_owned(),
            status: JobStatus::Pending,
            request,
            request_hash,
            created_at: Timestamp::now(),
            completed_at: None,
            result: None,
            error: None,
            lease_expires_at: None,
            attempts: 0,
            pending_event: None,
            first_error: None,
            quarantined_event: None,
            progress: None,
            rows_estimate: None,
            cancel_requested_at: None,
            enqueued_at: None,
            message_dropped_at: None,
            checkpoint: None,
            fanout: None,
            superseded: Vec::new(),
            trace: None,
            range: None,
        }
    }

    /// The product the job was created for: its `metadata.source` (every job has one;
    /// docs/api.md, "Products").
    pub fn product(&self) -> &str {
        self.request
            .metadata
            .get("source")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
    }

    /// Whether a caller naming `product` (`None`: naming none) may see and change the job.
    pub fn answers_to(&self, product: Option<&str>) -> bool {
        answers_to(self.product(), product)
    }

    /// When the job's latest message was sent ([`Job::enqueued_at`], else its creation).
    pub fn last_enqueued_at(&self) -> Timestamp {
        self.enqueued_at.unwrap_or(self.created_at)
    }

    /// Config names this job reads (for the active-execution gate).
    pub fn config_names(&self) -> impl Iterator<Item = &str> {
        self.request.mapped_fields.keys().map(String::as_str)
    }
}

/// The two event types subscribers route on (docs/events.md): a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "job.completed")]
    Completed,
    /// Also a canceled job's (its error says `canceled`).
    #[serde(rename = "job.failed")]
    Failed,
    /// A schedule paused itself after failed runs (docs/events.md, "Sync events").
    #[serde(rename = "schedule.paused")]
    SchedulePaused,
    /// A scheduled sync fell behind (docs/events.md, "Sync events"), once per episode.
    #[serde(rename = "sync.stale")]
    SyncStale,
}

impl EventType {
    /// The detail type on the wire: `job.completed`, `job.failed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::Completed => "job.completed",
            EventType::Failed => "job.failed",
            EventType::SchedulePaused => "schedule.paused",
            EventType::SyncStale => "sync.stale",
        }
    }
}

/// A terminal event on its way to subscribers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalEvent {
    /// `fetcher.job.<status>.<jobId>`: deterministic, the subscribers' dedup key.
    pub id: String,
    /// `job.completed` or `job.failed` (or a sync's `schedule.paused`, `sync.stale`).
    pub detail_type: EventType,
    pub tenant_id: String,
    /// The job the event is about; nil for a sync's events.
    pub job_id: JobId,
    /// The event payload (docs/events.md, "Detail"; compact JSON).
    pub payload: String,
}

impl TerminalEvent {
    /// The event of a job that ended in `status`. Subscribers know two routes: a
    /// canceled job's event is a `job.failed` (its error says `canceled`), with that
    /// route's id.
    pub fn new(
        tenant_id: &str,
        job_id: JobId,
        status: JobStatus,
        payload: String,
    ) -> TerminalEvent {
        let detail_type = match status {
            JobStatus::Completed => EventType::Completed,
            _ => EventType::Failed,
        };
        TerminalEvent {
            id: format!("fetcher.{}.{job_id}", detail_type.as_str()),
            detail_type,
            tenant_id: tenant_id.to_owned(),
            job_id,
            payload,
        }
    }

    /// A sync's event (`schedule.paused`, `sync.stale`); `episode` makes its id unique per
    /// occurrence and the same for a retried publish of it.
    pub fn about_sync(
        tenant_id: &str,
        sync_id: &str,
        detail_type: EventType,
        episode: Timestamp,
        payload: String,
    ) -> TerminalEvent {
        TerminalEvent {
            id: format!(
                "fetcher.{}.{}.{tenant_id}.{sync_id}",
                detail_type.as_str(),
                episode.unix_nanos()
            ),
            detail_type,
            tenant_id: tenant_id.to_owned(),
            job_id: JobId::default(),
            payload,
        }
    }
}

/// A message on the work queue: the signed envelope's headers plus the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueMessage {
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}
