//! The extraction pipeline, one implementation for every host (docs/results.md, docs/events.md):
//!
//! One file over 800 lines: the steps below share one claim (token, heartbeat, outcome)
//! and read as one sequence; the lifecycle rules themselves live in `model.rs`.
//!
//! 1. verify the signed envelope and parse the job message;
//! 2. claim the job: a conditional `pending → processing` with a lease (a crashed run's
//!    expired lease is taken over; a terminal job makes the delivery a no-op);
//! 3. run the engine: store mode streams NDJSON through the v2 sealing writer into the
//!    object store in constant memory (v1, the reference's format, when the job asks);
//! 4. record `completed` (path, sizes, rows, HMAC, digest) or `failed` (sanitised error),
//!    in the same write as the pending terminal event (the outbox marker);
//! 5. publish `job.completed` / `job.failed` with the deterministic id
//!    `fetcher.job.<status>.<jobId>`, then clear the marker; [`Pipeline::repair_events`]
//!    republishes markers a crash left behind.
//!
//! Redelivered messages never produce a second result or event: terminal jobs are
//! skipped, a pending marker is republished verbatim, and every transition is
//! conditional on the claim token. Errors are classified: retryable failures (a database
//! or dependency that may come back) release the claim and return
//! [`Outcome::Retry`] while the job is inside its retry budget (and under
//! `max_attempts`); everything else fails the job now.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fetcher_crypto::{KeyPurpose, MessageSigner, VerifyPolicy};
use fetcher_engine::ports::TableFormat;
use fetcher_engine::{
    Context, Engine, ExecutionMode, ExtractionProgress, ExtractionRequest, TenantContext, Timestamp,
};
use serde::Serialize;
use tracing::{info, warn};

use crate::error::{ErrorKind, Result, ServiceError};
use crate::message::{self, Received, Rejected};
use crate::model::*;
use crate::ports::*;
use crate::sanitize::sanitize;
use crate::sink::{result_path, store_v1};

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// How long a claim lasts without renewal; renewed every third of it while running.
    /// Must exceed the time a crashed worker takes to be noticed, and is the delay after
    /// which another worker may take the job over.
    pub lease: Duration,
    /// Claims after which a retryable failure fails the job instead of retrying (a cap;
    /// `retry_budget` usually ends the retries first).
    pub max_attempts: u32,
    /// How long after its creation a job's retryable failures (a datasource restarting,
    /// a failover) are retried; past it, the next one fails the job. Bounded by the
    /// message's maximum age.
    pub retry_budget: Duration,
    /// Result format when the job does not ask for one.
    pub default_format: ResultFormat,
    /// Envelope freshness. Queue redeliveries arrive later than the reference's 5
    /// minutes, so the pipeline accepts older messages (default 6 hours, still bounded).
    pub max_message_age: Duration,
    /// Ceiling on a v1 result, whatever the engine's `max_result_bytes` allows. v1 is
    /// built in memory (the reference's format) while v2 streams, so a deployment that
    /// lifts the ceiling for v2 must not let a v1 job run the host out of memory.
    /// Default: the reference's 256 MiB. A v1 result near it needs about 4× in memory.
    pub v1_max_result_bytes: i64,
    /// Failed publishes after which the repair pass quarantines a terminal event, so
    /// one that can never be published stops taking its slots.
    pub max_event_attempts: u32,
    /// How often a running job's heartbeat writes its progress and renews its lease
    /// (one conditional write each), and so how soon a cancel is seen. At most a third
    /// of the lease is used.
    pub progress_interval: Duration,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            lease: Duration::from_secs(15 * 60),
            max_attempts: 10,
            retry_budget: Duration::from_secs(60),
            default_format: ResultFormat::V2,
            max_message_age: Duration::from_secs(6 * 3600),
            v1_max_result_bytes: fetcher_engine::limits::DEFAULT_MAX_RESULT_BYTES,
            max_event_attempts: 50,
            progress_interval: Duration::from_secs(2),
        }
    }
}

/// What to do with the message.
#[derive(Debug)]
pub enum Outcome {
    /// The job completed (delete the message).
    Completed {
        job_id: String,
        rows: u64,
        bytes: u64,
        duration: Duration,
    },
    /// The job failed for good (delete the message).
    Failed { job_id: String, error: String },
    /// Nothing to do: duplicate delivery, terminal job, unusable message (delete it).
    Skipped(&'static str),
    /// A message that does not verify (forged or corrupted), or an authentic one too old
    /// to trust: deleted unused, no job touched. Hosts count these (a metric) and log them;
    /// the job of a stale message is marked for the repair pass, which sends a fresh one.
    Dropped {
        reason: DropReason,
        /// The job an authentic message named.
        job_id: Option<String>,
    },
    /// Let the message come back later.
    Retry(ServiceError),
}

/// Why a message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The signature does not verify: forged, tampered with, or signed with a key this
    /// host does not hold.
    InvalidSignature,
    /// Authentic, but signed outside the freshness window (docs/results.md,
    /// "Verification").
    Expired,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::InvalidSignature => "invalid signature",
            DropReason::Expired => "expired",
        }
    }
}

/// How the repair pass tells a job whose message was lost from one whose message waits in
/// a backlog (docs/operations.md, "Repair schedule"). A job's age says nothing: a backlog
/// of an hour holds hour-old jobs whose messages are all on their way.
#[derive(Debug, Clone, Copy)]
pub struct StrandedRules {
    /// How long the queue keeps a message (the job queue's retention, which the template
    /// sets to the maximum message age): a pending job whose latest message was sent
    /// longer ago than this has none left in the queue.
    pub retention: Duration,
    /// How long after its latest message a pending job counts as lost when the queue holds
    /// no message at all (an enqueue that never happened: the API stopped between the
    /// insert and the send). Longer than the lag of the queue's approximate counts.
    pub empty_queue_grace: Duration,
}

impl StrandedRules {
    /// The rules for a queue whose messages live `retention`, with a 5-minute grace.
    pub fn with_retention(retention: Duration) -> Self {
        StrandedRules {
            retention,
            empty_queue_grace: Duration::from_secs(5 * 60),
        }
    }
}

impl Outcome {
    /// Whether the queue should redeliver the message.
    pub fn should_retry(&self) -> bool {
        matches!(self, Outcome::Retry(_))
    }
}

/// The pipeline and its dependencies.
pub struct Pipeline {
    pub engine: Engine,
    pub jobs: Arc<dyn JobStore>,
    pub events: Arc<dyn EventPublisher>,
    pub objects: Arc<dyn ObjectStore>,
    pub keys: Arc<dyn KeyProvider>,
    pub config: PipelineConfig,
    /// The writer of Parquet results; `None` on a host built without it, which fails
    /// Parquet jobs (`validation` / [`PARQUET_UNSUPPORTED`]).
    pub table_format: Option<Arc<dyn TableFormat>>,
}

/// The failure of a Parquet job on a host without the Parquet writer.
pub const PARQUET_UNSUPPORTED: &str = "this deployment does not write parquet results";

/// The `result` descriptor of `job.completed` (docs/events.md, "`result`"), plus our fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultDescriptor<'a> {
    path: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    size_bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    row_count: u64,
    format: &'static str,
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
    applied_by: &'static str,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The event payload (docs/events.md, "Detail"), fields in the emitted order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventPayload<'a> {
    job_id: &'a str,
    metadata: &'a serde_json::Map<String, serde_json::Value>,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ResultDescriptor<'a>>,
    #[serde(skip_serializing_if = "is_zero")]
    execution_time_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
}

/// The `job.completed` payload.
pub fn completed_payload(
    job_id: &str,
    metadata: &serde_json::Map<String, serde_json::Value>,
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
                "parquet"
            } else {
                "json"
            },
            hmac: &r.hmac,
            integrity: Integrity {
                algorithm: "HMAC-SHA256",
                signature: &r.hmac,
            },
            protection: Protection {
                encrypted: true,
                mode: "adapter-managed",
                applied_by: "adapter",
            },
            sealed_format: r.format.sealed_format(),
            key_version: &r.key_version,
            sha256: &r.digest,
            parts: &r.parts,
        }),
        execution_time_ms: elapsed.as_millis() as u64,
        completed_at: Some(at.to_string()),
    };
    serde_json::to_string(&payload).expect("payload is JSON")
}

/// The `job.failed` payload: the message metadata plus `error: {message}`.
pub fn failed_payload(
    job_id: &str,
    metadata: &serde_json::Map<String, serde_json::Value>,
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
    };
    serde_json::to_string(&payload).expect("payload is JSON")
}

/// The pending `job.failed` event of a canceled job (error category `canceled`).
pub fn canceled_event(job: &Job) -> PendingEvent {
    PendingEvent {
        status: JobStatus::Canceled,
        payload: failed_payload(&job.id, &job.request.metadata, CANCELED_ERROR),
        failures: 0,
    }
}

impl Pipeline {
    /// The pipeline writing Parquet results with `format` (the hosts pass
    /// `fetcher_parquet::ParquetFormat`; the host crate does not link Arrow itself).
    pub fn with_table_format(mut self, format: Arc<dyn TableFormat>) -> Self {
        self.table_format = Some(format);
        self
    }

    /// Handles one queue message. Every log line of it carries the job id and the
    /// request id of the API call that created the job (`X-Request-Id`).
    pub async fn handle(&self, msg: &QueueMessage) -> Outcome {
        self.handle_until(msg, &Context::background()).await
    }

    /// [`Pipeline::handle`], abandoned when `stop` is cancelled (a host's shutdown
    /// grace has run out): the extraction stops, its claim is released explicitly (the
    /// job is `pending` again, for the next start or another worker) and nothing is
    /// stored.
    pub async fn handle_until(&self, msg: &QueueMessage, stop: &Context) -> Outcome {
        self.handle_within(msg, stop, None).await
    }

    /// [`Pipeline::handle_until`] with the host's deadline for the extraction (a Lambda
    /// invocation's end, less a margin): past it the job fails with `timeout` and its
    /// event goes out while the host still runs, instead of the host being killed
    /// mid-run. `stop` is different: a stopped run is handed back, not failed.
    pub async fn handle_within(
        &self,
        msg: &QueueMessage,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let header = |k: &str| msg.headers.get(k).map(String::as_str).unwrap_or("");
        let span = tracing::info_span!(
            "job",
            job_id = header(message::HEADER_JOB_ID),
            request_id = header(message::HEADER_REQUEST_ID),
        );
        tracing::Instrument::instrument(self.handle_in_span(msg, stop, deadline), span).await
    }

    async fn handle_in_span(
        &self,
        msg: &QueueMessage,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let ring = match self.keys.key_ring().await {
            Ok(r) => r,
            Err(e) => return Outcome::Retry(e),
        };
        let policy = VerifyPolicy {
            max_age: self.config.max_message_age,
            ..VerifyPolicy::default()
        };
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac).with_policy(policy);
        let mut decoded = message::decode(msg, &signer, message::unix_now());
        if matches!(decoded, Err(Rejected::BadSignature(_))) {
            // Signed under a key version this ring may lack (a rotation since it was
            // loaded): verify once more against the ring loaded afresh.
            if let Ok(fresh) = self.keys.reload().await
                && !Arc::ptr_eq(&fresh, &ring)
            {
                let signer =
                    MessageSigner::from_ring(&fresh, KeyPurpose::InternalHmac).with_policy(policy);
                decoded = message::decode(msg, &signer, message::unix_now());
            }
        }
        match decoded {
            Ok(received) => self.process(received, stop, deadline).await,
            Err(Rejected::BadSignature(e)) => {
                // Never retried, and no job is touched: a forged message must not be able
                // to fail someone's job. The job's genuine message is still on its way.
                warn!(error = %e, "job message dropped: invalid signature");
                Outcome::Dropped {
                    reason: DropReason::InvalidSignature,
                    job_id: None,
                }
            }
            Err(Rejected::Stale {
                tenant,
                job_id,
                signed_at,
            }) => {
                warn!(%job_id, signed_at = %signed_at, "job message dropped: authentic but older than the maximum message age; the repair pass sends its job a fresh one");
                self.note_dropped(&tenant, &job_id, signed_at).await;
                Outcome::Dropped {
                    reason: DropReason::Expired,
                    job_id: Some(job_id),
                }
            }
            Err(Rejected::BadBody {
                tenant,
                job_id: Some(job_id),
                error,
            }) => {
                self.fail_unclaimed(&tenant, &job_id, &serde_json::Map::new(), error.message())
                    .await
            }
            Err(Rejected::BadBody { job_id: None, .. }) => {
                Outcome::Skipped("unparseable job message")
            }
        }
    }

    /// Marks the job of an authentic message dropped unused, so the repair pass sends it a
    /// fresh one at its next run. Best effort: without the mark the repair pass still finds
    /// the job once its message is older than the queue's retention.
    async fn note_dropped(&self, tenant: &str, job_id: &str, signed_at: Timestamp) {
        let change = Transition::MessageDropped {
            signed_at,
            at: Timestamp::now(),
        };
        match self.jobs.transition(tenant, job_id, change).await {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict) => {}
            Err(e) => {
                warn!(job_id, error = %e.log_detail(), "could not mark the job of a dropped message")
            }
        }
    }

    /// The queue gives up on `msg` (its last receive before the dead-letter queue): if it
    /// is authentic, its job is marked like a dropped message's, so the repair pass sends
    /// a fresh one instead of the job waiting for the retention to run out.
    pub async fn note_undelivered(&self, msg: &QueueMessage) {
        let Ok(ring) = self.keys.key_ring().await else {
            return;
        };
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        if let Some(a) = message::authentic(msg, &signer) {
            info!(job_id = %a.job_id, "job message leaves for the dead-letter queue; its job is marked for the repair pass");
            self.note_dropped(&a.tenant, &a.job_id, a.signed_at).await;
        }
    }

    async fn process(
        &self,
        r: Received,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let Received {
            tenant, message: m, ..
        } = r;
        let job = match self.jobs.get(&tenant, &m.job_id).await {
            Ok(Some(j)) => j,
            Ok(None) => return Outcome::Skipped("job not found"),
            Err(e) => return Outcome::Retry(e),
        };
        if job.pending_event.is_some() {
            return match self.republish(&job).await {
                Ok(()) => Outcome::Skipped("terminal event republished"),
                Err(e) => Outcome::Retry(e),
            };
        }
        if job.status.is_terminal() {
            return Outcome::Skipped("job already terminal");
        }
        let (job, token) = match self
            .jobs
            .claim(&tenant, &job.id, Timestamp::now(), self.config.lease)
            .await
        {
            Ok(ClaimOutcome::Claimed { job, token }) => (*job, token),
            Ok(ClaimOutcome::NotClaimable(j)) if j.status == JobStatus::Processing => {
                // Someone holds a live lease. Come back later: if that worker died, its
                // lease will have expired and this delivery takes the job over.
                return Outcome::Retry(ServiceError::conflict("job is being processed elsewhere"));
            }
            Ok(_) => return Outcome::Skipped("job not claimable"),
            Err(e) => return Outcome::Retry(e),
        };
        // Claims are capped: a job whose workers keep dying (a crash, a kill at the
        // function's timeout) fails, with its event, instead of coming back forever.
        if job.attempts > self.config.max_attempts {
            let error = format!(
                "job abandoned: no attempt of {} finished",
                self.config.max_attempts
            );
            warn!(job_id = %job.id, attempts = job.attempts, "claim cap reached; failing the job");
            return self.fail_claimed(&job, token, &error).await;
        }
        self.run_claimed(job, token, stop, deadline).await
    }

    async fn run_claimed(
        &self,
        job: Job,
        token: u32,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let started = Instant::now();
        // The run's own context: the heartbeat cancels it when the lease is lost, and
        // the guard stops renewing however this function ends (a panic included).
        if job.cancel_requested_at.is_some() {
            // Asked to stop while no worker ran it (its last one died): nothing to run.
            return self.cancel_claimed(&job, token).await;
        }
        let run = match deadline {
            Some(d) => stop.with_deadline(d),
            None => stop.child(),
        };
        let progress = Arc::new(ExtractionProgress::default());
        let heartbeat = self.heartbeat(&job, token, &run, progress.clone());
        let extracted = self.extract(&job, &run, &progress).await;
        let end = heartbeat.stop();
        if end.lost && extracted.is_err() {
            // Another worker holds the job now (this one stalled past its lease): what
            // this run did is void, and the job is theirs to finish.
            warn!(job_id = %job.id, "lease lost during the extraction; run abandoned");
            return Outcome::Skipped("lease lost");
        }
        if end.cancel_requested && extracted.is_err() {
            // The heartbeat stopped the run on request; the engine aborted the result
            // writer, so nothing is left in the object store.
            return self.cancel_claimed(&job, token).await;
        }
        if extracted.is_err() && stop.is_done() {
            // Abandoned at shutdown: hand the job back now rather than leave its lease to
            // expire.
            return match self
                .jobs
                .release(&job.tenant_id, &job.id, token, None)
                .await
            {
                Ok(()) => {
                    info!(job_id = %job.id, "abandoned at shutdown; released for the next run");
                    Outcome::Skipped("abandoned at shutdown")
                }
                Err(e) => {
                    warn!(job_id = %job.id, error = %e.log_detail(), "could not release an abandoned job; its lease will expire");
                    Outcome::Skipped("abandoned at shutdown")
                }
            };
        }
        match extracted {
            Ok(result) => self.complete(&job, token, result, started.elapsed()).await,
            Err(e) if e.is_retryable() && self.may_retry(&job) => {
                warn!(job_id = %job.id, attempt = job.attempts, error = %e.log_detail(), "extraction failed, will retry");
                let text = sanitize(e.message());
                match self
                    .jobs
                    .release(&job.tenant_id, &job.id, token, Some(&text))
                    .await
                {
                    Ok(()) => Outcome::Retry(e),
                    // A cancel asked for since the last heartbeat: it wins over a retry.
                    Err(c) if c.kind() == ErrorKind::Conflict => {
                        self.cancel_claimed(&job, token).await
                    }
                    Err(release) => {
                        warn!(job_id = %job.id, error = %release.log_detail(), "could not release the claim; the lease will expire");
                        Outcome::Retry(e)
                    }
                }
            }
            Err(e) => {
                // Out of retries: the first retryable failure says what went wrong.
                let text = match (&job.first_error, e.is_retryable()) {
                    (Some(first), true) => first.clone(),
                    _ => sanitize(e.message()),
                };
                self.fail_claimed(&job, token, &text).await
            }
        }
    }

    /// Whether a retryable failure of `job` may be retried: attempts left and the job
    /// still inside its retry budget.
    fn may_retry(&self, job: &Job) -> bool {
        let age_nanos = Timestamp::now().unix_nanos() - job.created_at.unix_nanos();
        job.attempts < self.config.max_attempts
            && age_nanos < self.config.retry_budget.as_nanos() as i128
    }

    /// Renews the claim and writes the run's progress every `progress_interval` (at
    /// most a third of the lease) while the run goes on. A renewal the store refuses as
    /// a conflict means the lease was lost (another worker took the job over); one that
    /// answers "cancel asked for" is a client's cancel. Either way the run's context is
    /// cancelled, so the extraction stops and stores nothing. Other renewal errors are
    /// retried at the next tick.
    fn heartbeat(
        &self,
        job: &Job,
        token: u32,
        run: &Context,
        progress: Arc<ExtractionProgress>,
    ) -> Heartbeat {
        let (jobs, tenant, id, lease, run) = (
            self.jobs.clone(),
            job.tenant_id.clone(),
            job.id.clone(),
            self.config.lease,
            run.clone(),
        );
        let every = self.config.progress_interval.min(lease / 3);
        let state = Arc::new(HeartbeatState::default());
        let seen = state.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let until = Timestamp::from_unix_nanos(
                    Timestamp::now().unix_nanos() + lease.as_nanos() as i128,
                );
                let now = Progress::read(progress.snapshot(), Timestamp::now());
                match jobs.renew(&tenant, &id, token, until, Some(now)).await {
                    Ok(false) => {}
                    Ok(true) => {
                        if !seen.cancel_requested.swap(true, Ordering::SeqCst) {
                            info!(job_id = %id, "cancel asked for; stopping the run");
                            run.cancel();
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Conflict => {
                        warn!(job_id = %id, "lease lost; cancelling the run");
                        seen.lost.store(true, Ordering::SeqCst);
                        run.cancel();
                        return;
                    }
                    Err(e) => {
                        warn!(job_id = %id, error = %e.log_detail(), "lease renewal failed");
                    }
                }
            }
        });
        Heartbeat { task, state }
    }

    /// Plans and executes the job; returns where the sealed result is.
    async fn extract(
        &self,
        job: &Job,
        stop: &Context,
        progress: &ExtractionProgress,
    ) -> Result<JobResult> {
        let ctx = stop.child();
        let tenant = TenantContext::new(&job.tenant_id)?.with_request_id(&job.id);
        let request = ExtractionRequest {
            mapped_fields: job.request.mapped_fields.clone(),
            filters: job.request.filters.clone(),
            metadata: job
                .request
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            overrides: None,
        };
        let mut plan = self.engine.plan_extraction(&ctx, &tenant, &request).await?;
        plan.request_id.clone_from(&job.id);
        match job
            .request
            .result_format
            .unwrap_or(self.config.default_format)
        {
            ResultFormat::V2 => {
                plan.mode = ExecutionMode::Store;
                let out = self
                    .engine
                    .execute_extraction_observed(&ctx, &plan, progress)
                    .await?;
                let r = out
                    .reference
                    .ok_or_else(|| ServiceError::internal("store mode returned no reference"))?;
                Ok(JobResult::sealed(&r, ResultFormat::V2))
            }
            ResultFormat::Parquet => {
                let format = self
                    .table_format
                    .clone()
                    .ok_or_else(|| ServiceError::validation(PARQUET_UNSUPPORTED))?;
                let out = self
                    .engine
                    .execute_extraction_parts(&ctx, &plan, format, progress)
                    .await?;
                let r = out
                    .reference
                    .ok_or_else(|| ServiceError::internal("store mode returned no reference"))?;
                Ok(JobResult::sealed(&r, ResultFormat::Parquet))
            }
            ResultFormat::V1 => {
                plan.mode = ExecutionMode::Direct;
                let cap = self.config.v1_max_result_bytes;
                if cap > 0
                    && (plan.limits.max_result_bytes <= 0 || plan.limits.max_result_bytes > cap)
                {
                    plan.limits.max_result_bytes = cap;
                }
                let out = self.engine.execute_extraction(&ctx, &plan).await?;
                let d = out
                    .direct
                    .ok_or_else(|| ServiceError::internal("direct mode returned no payload"))?;
                let ring = self.keys.key_ring().await?;
                let path = result_path(&job.tenant_id, &job.id, ResultFormat::V1);
                let mut r = store_v1(self.objects.as_ref(), &ring, &path, &d.data).await?;
                // The engine hashed the document already.
                if let (Some(i), Some(direct)) = (r.integrity.as_mut(), d.integrity) {
                    i.digest = direct.digest;
                }
                r.row_count = d.row_count;
                Ok(JobResult::sealed(&r, ResultFormat::V1))
            }
        }
    }

    async fn complete(
        &self,
        job: &Job,
        token: u32,
        result: JobResult,
        elapsed: Duration,
    ) -> Outcome {
        let at = Timestamp::now();
        let payload = completed_payload(&job.id, &job.request.metadata, &result, elapsed, at);
        let event = PendingEvent {
            status: JobStatus::Completed,
            payload,
            failures: 0,
        };
        match self
            .jobs
            .complete(&job.tenant_id, &job.id, token, &result, &event, at)
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                return Outcome::Skipped("claim lost before completion");
            }
            Err(e) => return Outcome::Retry(e),
        }
        info!(job_id = %job.id, rows = result.row_count, bytes = result.size_bytes, ms = elapsed.as_millis() as u64, "job completed");
        if let Err(e) = self
            .publish_and_clear(
                &job.tenant_id,
                &job.id,
                JobStatus::Completed,
                &event.payload,
            )
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Completed {
            job_id: job.id.clone(),
            rows: result.row_count,
            bytes: result.size_bytes,
            duration: elapsed,
        }
    }

    async fn fail_claimed(&self, job: &Job, token: u32, error: &str) -> Outcome {
        let event = PendingEvent {
            status: JobStatus::Failed,
            payload: failed_payload(&job.id, &job.request.metadata, error),
            failures: 0,
        };
        match self
            .jobs
            .fail(
                &job.tenant_id,
                &job.id,
                Some(token),
                error,
                &event,
                Timestamp::now(),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                // A cancel asked for meanwhile wins over the failure; otherwise the
                // claim was lost and the job is another worker's.
                return match self.cancel_claimed(job, token).await {
                    Outcome::Skipped(_) => Outcome::Skipped("claim lost before failing"),
                    canceled => canceled,
                };
            }
            Err(e) => return Outcome::Retry(e),
        }
        warn!(job_id = %job.id, error, "job failed");
        if let Err(e) = self
            .publish_and_clear(&job.tenant_id, &job.id, JobStatus::Failed, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Failed {
            job_id: job.id.clone(),
            error: error.to_owned(),
        }
    }

    /// Ends a claimed job whose cancel was asked for: `canceled`, with its `job.failed`
    /// event (error category `canceled`) through the outbox.
    async fn cancel_claimed(&self, job: &Job, token: u32) -> Outcome {
        let event = canceled_event(job);
        let change = Transition::FinishCanceled {
            token,
            event: &event,
            at: Timestamp::now(),
        };
        match self.jobs.transition(&job.tenant_id, &job.id, change).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Conflict => {
                return Outcome::Skipped("claim lost before canceling");
            }
            Err(e) => return Outcome::Retry(e),
        }
        info!(job_id = %job.id, "job canceled");
        if let Err(e) = self
            .publish_and_clear(&job.tenant_id, &job.id, JobStatus::Canceled, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Failed {
            job_id: job.id.clone(),
            error: CANCELED_ERROR.to_owned(),
        }
    }

    /// Fails a job that was never claimed (bad message); only a pending job changes.
    async fn fail_unclaimed(
        &self,
        tenant: &str,
        job_id: &str,
        metadata: &serde_json::Map<String, serde_json::Value>,
        error: &str,
    ) -> Outcome {
        let error = sanitize(error);
        let event = PendingEvent {
            status: JobStatus::Failed,
            payload: failed_payload(job_id, metadata, &error),
            failures: 0,
        };
        match self
            .jobs
            .fail(tenant, job_id, None, &error, &event, Timestamp::now())
            .await
        {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    crate::ErrorKind::Conflict | crate::ErrorKind::NotFound
                ) =>
            {
                return Outcome::Skipped("message rejected; job not pending");
            }
            Err(e) => return Outcome::Retry(e),
        }
        if let Err(e) = self
            .publish_and_clear(tenant, job_id, JobStatus::Failed, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Failed {
            job_id: job_id.to_owned(),
            error,
        }
    }

    async fn publish_and_clear(
        &self,
        tenant: &str,
        job_id: &str,
        status: JobStatus,
        payload: &str,
    ) -> Result<()> {
        self.publish_then_clear(&TerminalEvent::new(
            tenant,
            job_id,
            status,
            payload.to_owned(),
        ))
        .await
    }

    async fn publish_then_clear(&self, event: &TerminalEvent) -> Result<()> {
        self.events.publish(event).await?;
        self.clear_marker(&event.tenant_id, &event.job_id).await;
        Ok(())
    }

    async fn clear_marker(&self, tenant: &str, job_id: &str) {
        if let Err(e) = self.jobs.clear_pending_event(tenant, job_id).await {
            // The event is out; a later repair pass would publish it again with the same
            // id, which subscribers deduplicate.
            warn!(job_id, error = %e.log_detail(), "could not clear the pending-event marker");
        }
    }

    /// The stored terminal event of `job`, republished verbatim (under the
    /// rules of docs/events.md, "Delivery"): only once the terminal state is committed, and only if they agree.
    fn stored_event(job: &Job) -> Result<Option<TerminalEvent>> {
        let Some(event) = &job.pending_event else {
            return Ok(None);
        };
        if !job.status.is_terminal() {
            return Err(ServiceError::conflict(
                "refusing to publish a terminal event without a committed terminal state",
            )
            .retryable(false));
        }
        if event.status != job.status {
            return Err(
                ServiceError::conflict("pending event does not match the job status")
                    .retryable(false),
            );
        }
        Ok(Some(TerminalEvent::new(
            &job.tenant_id,
            &job.id,
            event.status,
            event.payload.clone(),
        )))
    }

    async fn republish(&self, job: &Job) -> Result<()> {
        match Self::stored_event(job)? {
            Some(event) => self.publish_then_clear(&event).await,
            None => Ok(()),
        }
    }

    /// Puts stranded work back on `queue`, judged by each job's latest message, not its
    /// age ([`StrandedRules`]): a pending job whose message was dropped unused, is older
    /// than the queue's retention, or (the queue holding nothing at all) older than the
    /// grace; a processing job whose lease expired with no message sent since (its worker
    /// died; the claim cap ends a crash loop). Each re-enqueue is recorded on the job, so
    /// the next pass does not send it again. Messages are signed like the API's; a
    /// duplicate delivery is a no-op. Looks at up to `limit` jobs, oldest first; returns how
    /// many were re-enqueued.
    pub async fn requeue_stranded(
        &self,
        queue: &dyn crate::ports::JobQueue,
        rules: StrandedRules,
        limit: usize,
    ) -> Result<usize> {
        let now = Timestamp::now();
        let older =
            |t: Timestamp, d: Duration| now.unix_nanos() - t.unix_nanos() > d.as_nanos() as i128;
        let ring = self.keys.key_ring().await?;
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        // Asked once per pass, and only when a job could be judged by it.
        let mut depth: Option<Option<u64>> = None;
        let mut requeued = 0;
        for job in self.jobs.list_pending(now, limit).await? {
            let last = job.last_enqueued_at();
            let lost = match job.status {
                JobStatus::Pending if job.message_dropped_at.is_some() => true,
                JobStatus::Pending if older(last, rules.retention) => true,
                JobStatus::Pending if older(last, rules.empty_queue_grace) => {
                    if depth.is_none() {
                        depth = Some(queue.depth().await?);
                    }
                    depth == Some(Some(0))
                }
                // Listed only once its lease expired: lost unless a message went out after.
                JobStatus::Processing => job.lease_expires_at.is_none_or(|l| last <= l),
                _ => false,
            };
            if !lost {
                continue;
            }
            queue
                .enqueue(message::encode(&job, &signer, "", message::unix_now()))
                .await?;
            let change = Transition::Requeued {
                at: Timestamp::now(),
            };
            if let Err(e) = self.jobs.transition(&job.tenant_id, &job.id, change).await
                && e.kind() != ErrorKind::Conflict
            {
                warn!(job_id = %job.id, error = %e.log_detail(), "re-enqueued, but the enqueue could not be recorded; the next pass may send it again");
            }
            info!(job_id = %job.id, status = job.status.as_str(), "stranded job re-enqueued");
            requeued += 1;
        }
        Ok(requeued)
    }

    /// One repair pass: republishes up to `limit` pending terminal events in one
    /// [`EventPublisher::publish_batch`] call. Returns how many were published; failures
    /// are logged and left for the next pass.
    pub async fn repair_events(&self, limit: usize) -> Result<usize> {
        let mut events = Vec::new();
        for job in self.jobs.list_pending_events(limit).await? {
            match Self::stored_event(&job) {
                Ok(Some(event)) => events.push(event),
                Ok(None) => {}
                Err(e) => {
                    warn!(job_id = %job.id, error = %e.log_detail(), "terminal event repair refused")
                }
            }
        }
        let mut published = 0;
        let results = self.events.publish_batch(&events).await;
        if results.len() != events.len() {
            // The markers of the unanswered events stay for the next pass.
            warn!(
                events = events.len(),
                results = results.len(),
                "event publisher answered a batch partially"
            );
        }
        for (event, result) in events.iter().zip(results) {
            match result {
                Ok(()) => {
                    published += 1;
                    self.clear_marker(&event.tenant_id, &event.job_id).await;
                }
                Err(e) => {
                    warn!(job_id = %event.job_id, error = %e.log_detail(), "terminal event repair failed");
                    match self
                        .jobs
                        .note_event_failure(
                            &event.tenant_id,
                            &event.job_id,
                            self.config.max_event_attempts,
                        )
                        .await
                    {
                        Ok(true) => tracing::error!(
                            job_id = %event.job_id,
                            attempts = self.config.max_event_attempts,
                            "terminal event quarantined after repeated publish failures; it stays on the job (quarantinedEvent) for an operator"
                        ),
                        Ok(false) => {}
                        Err(e) => {
                            warn!(job_id = %event.job_id, error = %e.log_detail(), "could not count the failed publish")
                        }
                    }
                }
            }
        }
        Ok(published)
    }
}

/// The lease heartbeat of one run, as a value: dropping it (the run returned, panicked
/// or was aborted with its task) stops the renewals, so a dead run never keeps a job
/// `processing`.
struct Heartbeat {
    task: tokio::task::JoinHandle<()>,
    state: Arc<HeartbeatState>,
}

/// What the heartbeat saw.
#[derive(Default)]
struct HeartbeatState {
    lost: AtomicBool,
    cancel_requested: AtomicBool,
}

struct HeartbeatEnd {
    lost: bool,
    cancel_requested: bool,
}

impl Heartbeat {
    /// Stops renewing; what it saw meanwhile.
    fn stop(self) -> HeartbeatEnd {
        HeartbeatEnd {
            lost: self.state.lost.load(Ordering::SeqCst),
            cancel_requested: self.state.cancel_requested.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}
