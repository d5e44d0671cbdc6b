//! The extraction pipeline, one implementation for every host (docs/results.md, docs/events.md).
//! Each step has a room of its own; the job lifecycle rules they apply live in
//! `crate::model` ([`Job::apply`]):
//!
//! | step | module |
//! |---|---|
//! | 1. verify the signed envelope and parse the job message (a forged or stale one is dropped) | `receive` |
//! | 2. claim the job: a conditional `pending → processing` with a lease (a crashed run's expired lease is taken over; a terminal job makes the delivery a no-op) | `claim` |
//! | 3. run the engine under the claim (store mode streams NDJSON through the v2 sealing writer into the object store in constant memory; Parquet parts; v1 when the job asks) and decide the outcome | `run`, with the lease `heartbeat` |
//! | 4. record `completed` (path, sizes, rows, HMAC, digest) or `failed` (sanitised error) in the same write as the pending terminal event (the outbox marker); 5. publish `job.completed` / `job.failed` with the deterministic id `fetcher.job.<status>.<jobId>`, then clear the marker | `finish`, the payloads in `payload` |
//! | a long job's segment that ran out of time: its checkpoint in the transition that returns the claim, then a signed continuation; the next message resumes only from that checkpoint (docs/operations.md, "Long jobs") | `segment` |
//! | a big table cut into key ranges, each range a worker's, the last one to finish writing the manifest (docs/operations.md, "Fan-out") | `fanout` |
//! | the repair pass: [`Pipeline::repair_events`] republishes markers a crash left behind, [`Pipeline::requeue_stranded`] re-sends lost messages | `repair` |
//!
//! Redelivered messages never produce a second result or event: terminal jobs are
//! skipped, a pending marker is republished verbatim, and every transition is
//! conditional on the claim token. Errors are classified: retryable failures (a database
//! or dependency that may come back) release the claim and return
//! [`Outcome::Retry`] while the job is inside its retry budget (and under
//! `max_attempts`); everything else fails the job now.

use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::ports::TableFormat;
use fetcher_engine::{Context, Engine};

use crate::error::ServiceError;
use crate::message;
use crate::model::*;
use crate::ports::*;

mod claim;
mod fanout;
mod finish;
mod heartbeat;
mod payload;
mod receive;
mod repair;
mod run;
mod segment;
mod share;

pub use share::TenantShare;

pub use payload::{canceled_event, completed_payload, failed_payload};
pub use segment::CHECKPOINT_MISMATCH;

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
    /// Test harness only (`FETCHER_TEST_CRASH_BEFORE_COMPLETE` on `serve`): abort the
    /// process after the result is stored and before the job is completed, as a kill -9
    /// there would. Never set in production.
    pub crash_before_complete: bool,
    /// How long before the host's deadline for a run (a Lambda invocation's end) a
    /// segment stops, seals its part and hands the job to the next one (at most half the
    /// time left).
    pub checkpoint_margin: std::time::Duration,
    /// Test harness only (`FETCHER_TEST_SEGMENT_SECS`): every segment stops this long
    /// after it starts (or earlier, ahead of the deadline), so tests see jobs continued
    /// many times.
    pub segment_after: Option<std::time::Duration>,
    /// Key ranges a job's big table is cut into at most, each read by its own worker
    /// (docs/operations.md, "Fan-out"): the most readers one job puts on a customer
    /// database. `1` never fans out.
    pub fanout_ranges: usize,
    /// Rows (by the catalog's estimate) each range gets at least: a table is fanned out
    /// only from twice this, into at most `fanout_ranges` ranges.
    pub fanout_range_rows: i64,
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
            crash_before_complete: false,
            checkpoint_margin: Duration::from_secs(60),
            segment_after: None,
            fanout_ranges: 1,
            fanout_range_rows: DEFAULT_FANOUT_RANGE_ROWS,
        }
    }
}

/// [`PipelineConfig::fanout_range_rows`]'s default: a range of 5 million rows reads in
/// about 5 s at the measured speed, long enough that a worker's start-up is noise.
pub const DEFAULT_FANOUT_RANGE_ROWS: i64 = 5_000_000;

/// The log one replication slot of a sync retained when a job of the sync began: the
/// retained-log metric's sample (a gauge per table on `serve`, EMF on Lambda).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRetained {
    pub tenant_id: String,
    pub sync_id: String,
    pub config: String,
    pub table: String,
    pub bytes: u64,
}

/// What to do with the message.
#[derive(Debug)]
pub enum Outcome {
    /// The job completed (delete the message).
    Completed {
        job_id: JobId,
        rows: u64,
        bytes: u64,
        duration: Duration,
        /// What each replication slot of the job's log reads retained of the log when it
        /// began (docs/operations.md, "Logical decoding"); empty without log reads.
        log_retained: Vec<SlotRetained>,
    },
    /// The job failed for good (delete the message).
    Failed { job_id: JobId, error: String },
    /// A segment of a long job ended at a checkpoint and the job's next segment was
    /// sent (delete the message).
    Continued { job_id: JobId, segment: u32 },
    /// The job's big table was cut into `ranges` key ranges and a message sent for each
    /// (delete the message).
    FannedOut { job_id: JobId, ranges: usize },
    /// A range of a fanned-out job was read to its end; other ranges are still running
    /// (delete the message).
    RangeDone { job_id: JobId, range: usize },
    /// Nothing to do: duplicate delivery, terminal job, unusable message (delete it).
    Skipped(&'static str),
    /// A message that does not verify (forged or corrupted), or an authentic one too old
    /// to trust: deleted unused, no job touched. Hosts count these (a metric) and log them;
    /// the job of a stale message is marked for the repair pass, which sends a fresh one.
    Dropped {
        reason: DropReason,
        /// The job an authentic message named.
        job_id: Option<JobId>,
    },
    /// The tenant runs its share of jobs already ([`TenantShare`]): the message was sent
    /// again to arrive after `delay` (delete this delivery).
    Deferred { job_id: JobId, delay: Duration },
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
    /// Where a long job's next segment is sent; `None`: jobs run in one go (a host
    /// without a queue cannot continue them).
    pub queue: Option<Arc<dyn JobQueue>>,
    /// Each tenant's share of the workers across processes; `None`: the host shares
    /// its workers itself (`serve`'s queue) or not at all.
    pub tenant_share: Option<TenantShare>,
}

/// The failure of a job reading from the log when the deployment's default format is v1.
pub const LOG_READ_NEEDS_V2: &str =
    "a table read from the log needs resultFormat v2 or parquet, not v1";

/// The failure of a Parquet job on a host without the Parquet writer.
pub const PARQUET_UNSUPPORTED: &str = "this deployment does not write parquet results";

impl Pipeline {
    /// The pipeline writing Parquet results with `format` (the hosts pass
    /// `fetcher_parquet::ParquetFormat`; the host crate does not link Arrow itself).
    pub fn with_table_format(mut self, format: Arc<dyn TableFormat>) -> Self {
        self.table_format = Some(format);
        self
    }

    /// The pipeline continuing long jobs in segments through `queue` (docs/engine.md,
    /// "Continued runs").
    pub fn with_queue(mut self, queue: Arc<dyn JobQueue>) -> Self {
        self.queue = Some(queue);
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
            tenant_id = header(fetcher_crypto::envelope::HEADER_TENANT_ID),
            job_id = header(message::HEADER_JOB_ID),
            request_id = header(message::HEADER_REQUEST_ID),
        );
        // Verified before the span starts, so that it can continue the trace the signed
        // body names (a span's parent is fixed once it starts).
        let verified = self.verify(msg).await;
        if let Ok(Ok(received)) = &verified
            && let Some(trace) = &received.message.trace_parent
        {
            trace.adopt(&span);
        }
        tracing::Instrument::instrument(self.handle_verified(verified, msg, stop, deadline), span)
            .await
    }
}
