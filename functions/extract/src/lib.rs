//! The extraction Lambda's logic, runtime-free so it is tested in-process.
//!
//! * **SQS batches** (`Records` with `eventSource = aws:sqs`): every record is one job
//!   message, run through [`Pipeline::handle`] in its own task, so a panic fails only
//!   that record. `Retry` outcomes (and panics) are reported in `batchItemFailures`
//!   (the event source mapping has `ReportBatchItemFailures`), so only those messages
//!   come back; completed, failed, skipped and dropped ones are deleted. A message whose
//!   signature does not verify, or an authentic one older than the maximum message age, is
//!   dropped (`MessagesDropped`, a log line) and touches no job: the repair pass sends a
//!   stale message's job a fresh one. A message on its last receive before the
//!   dead-letter queue marks its job the same way. A redelivered message whose job is
//!   terminal is a no-op (or republishes a pending event).
//! * **Scheduled events** (`source = aws.events`, `detail-type = Scheduled Event`, or any
//!   event with `"action": "repair"`): one repair pass ([`Extractor::repair`]).
//!
//! Metrics are CloudWatch Embedded Metric Format lines on stdout, namespace `Fetcher`,
//! dimensions `Stack` (the stack name, so stages never share an alarm) and `Function`.

use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use fetcher_aws::EventBridgePublisher;
use fetcher_aws::host::{Host, HostConfig, emf_line};
use fetcher_aws::sqs::queue_message_from_record;
use fetcher_host::pipeline::{Outcome, Pipeline, PipelineConfig, StrandedRules, TenantShare};
use serde_json::{Value, json};
use tracing::{error, info, warn};

/// Events republished per repair pass.
pub const REPAIR_BATCH: usize = 25;

/// Receives of a job message before SQS moves it to the dead-letter queue (the
/// template's `maxReceiveCount`).
pub const MAX_RECEIVES: u32 = 5;

/// How long before the invocation's end an extraction is stopped, so the job's failure
/// (`timeout`) and its event are written while the function still runs.
pub const DEADLINE_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The extraction deadline of an invocation whose end is `deadline_ms` (the runtime's
/// `Lambda-Runtime-Deadline-Ms`, milliseconds since the Unix epoch): that end less
/// [`DEADLINE_MARGIN`], at least a second from now. `None` without a deadline, and for
/// one already past when the invocation arrives: Lambda's is always ahead, so that is an
/// emulator's placeholder (`cargo lambda watch` sends a fixed 600000, in 1970), and the
/// platform's own timeout still ends the invocation.
/// Makes glibc keep one malloc arena for the whole process; call it first in `main`,
/// before any thread starts. glibc gives each allocating thread an arena of its own, and
/// the extraction's stages (read, encode, seal) hand buffers between threads, so freed
/// memory piles up in arenas the next allocation does not look in: the 5M-row
/// `bench-lambda-extract` peaked at 100 MiB with per-thread arenas and 66 MiB with one,
/// and was no slower (README, "Benchmarks").
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

pub fn run_deadline(deadline_ms: u64) -> Option<tokio::time::Instant> {
    if deadline_ms == 0 {
        return None;
    }
    let end = std::time::UNIX_EPOCH + std::time::Duration::from_millis(deadline_ms);
    let left = end
        .duration_since(std::time::SystemTime::now())
        .ok()?
        .saturating_sub(DEADLINE_MARGIN)
        .max(std::time::Duration::from_secs(1));
    Some(tokio::time::Instant::now() + left)
}

/// The handler and its pipeline.
pub struct Extractor {
    pub pipeline: Arc<Pipeline>,
    /// The job queue: the repair pass puts stranded jobs back, retried messages are
    /// delayed on it.
    pub queue: fetcher_aws::SqsJobQueue,
    /// First back-off of a retried message (doubles per receive, at most 15 minutes).
    pub retry_backoff: std::time::Duration,
    /// The store, for the credential re-encryption pass.
    pub store: fetcher_aws::DynamoStore,
    /// The master keys as the secret holds them now (the pass loads them afresh).
    pub key_source: fetcher_aws::SecretsManagerKeySource,
    /// How the repair pass tells a lost message from one waiting in a backlog: the
    /// queue's retention is the maximum message age.
    pub stranded: StrandedRules,
    /// The `Stack` dimension of the metrics.
    pub stack: String,
    /// The pipeline's master keys, for the cold start's key check.
    pub keys: Arc<dyn fetcher_host::ports::KeyProvider>,
}

impl Extractor {
    /// The cold start's key check ([`fetcher_aws::host::verify_master_key`]): a worker
    /// whose master key cannot be read or is not the data's fails its cold start (the
    /// errors alarm fires) instead of failing every job on credentials it cannot open.
    pub async fn verify_master_key(&self) -> Result<(), String> {
        fetcher_aws::host::verify_master_key(&self.store, self.keys.as_ref()).await
    }
}

/// The back-off of a message received `receives` times: `base · 2^(receives-1)`, at most
/// 15 minutes.
pub fn retry_delay(base: std::time::Duration, receives: u32) -> std::time::Duration {
    base.saturating_mul(1 << receives.saturating_sub(1).min(16))
        .min(std::time::Duration::from_secs(15 * 60))
}

/// How many times SQS has delivered `record` (1 on the first delivery).
fn receives(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Builds the extractor from the environment ([`HostConfig`]). Refuses to start without
/// an event bus: terminal events are mandatory (docs/events.md, "Where they go").
pub fn from_config(config: HostConfig, sdk: &fetcher_aws::SdkConfig) -> Result<Extractor, String> {
    let bus = config.event_bus.clone().ok_or_else(|| {
        "FETCHER_EVENT_BUS is not set: the extract function refuses to start without an event bus (job events are mandatory)".to_owned()
    })?;
    let queue_url = config.queue_url.clone().ok_or_else(|| {
        "FETCHER_QUEUE_URL is not set: the extract function's repair pass re-enqueues stranded jobs".to_owned()
    })?;
    let source = config.event_source.clone();
    let lease = config.lease;
    let max_message_age = config.max_message_age;
    let retry_backoff = config.retry_backoff;
    let progress_interval = config.progress_interval;
    let (fanout_ranges, fanout_range_rows) = (config.fanout_ranges, config.fanout_range_rows);
    let stack = config.stack_name.clone();
    let secret = config.master_key_secret.clone();
    let (per_tenant, tenant_defer) = (config.max_jobs_per_tenant, config.tenant_defer);
    let host = Host::build(config, sdk)?;
    let keys = host.ports.keys.clone();
    let key_source = fetcher_aws::SecretsManagerKeySource::new(
        host.clients.secrets.clone(),
        host.clients.kms.clone(),
        secret,
    );
    let queue = fetcher_aws::SqsJobQueue::new(host.clients.sqs.clone(), queue_url);
    let store = host.store.clone();
    let events = Arc::new(EventBridgePublisher::new(
        host.clients.events.clone(),
        bus,
        source,
    ));
    let pipeline = host.ports.pipeline(
        host.engine,
        events,
        PipelineConfig {
            lease,
            // SQS redelivers a retried message after the queue's visibility timeout
            // (minutes), so here the attempt cap bounds retries, not a time budget; the
            // message's maximum age bounds the whole.
            max_attempts: 3,
            retry_budget: max_message_age,
            max_message_age,
            progress_interval,
            segment_after: fetcher_host::settings::test_segment_after()?,
            fanout_ranges,
            fanout_range_rows,
            ..Default::default()
        },
    );
    // Long jobs continue in another invocation (docs/operations.md, "Long jobs").
    let pipeline = pipeline.with_queue(Arc::new(queue.clone()));
    // Each tenant's share of the concurrent invocations (docs/operations.md, "Fair
    // workers"): SQS knows no tenants, so the shares live in the table.
    let pipeline = pipeline.with_tenant_share(TenantShare {
        slots: Arc::new(store.clone()),
        per_tenant,
        defer: tenant_defer,
    });
    #[cfg(feature = "parquet")]
    let pipeline = pipeline.with_table_format(Arc::new(fetcher_parquet::ParquetFormat::new()));
    Ok(Extractor {
        pipeline: Arc::new(pipeline),
        queue,
        retry_backoff,
        store,
        key_source,
        stranded: StrandedRules::with_retention(max_message_age),
        stack,
        keys,
    })
}

/// Whether `event` asks for a re-encryption of the stored credentials (after a master
/// key rotation; README "Rotating the master key").
pub fn is_reencrypt(event: &Value) -> bool {
    event.get("action").and_then(Value::as_str) == Some("reencrypt")
}

/// Whether `event` asks for an event-repair pass.
pub fn is_repair(event: &Value) -> bool {
    event.get("source").and_then(Value::as_str) == Some("aws.events")
        || event.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event")
        || event.get("action").and_then(Value::as_str) == Some("repair")
}

impl Extractor {
    /// Prints one metrics line (Embedded Metric Format) with this stack's dimensions.
    fn metrics(&self, metrics: &[(&str, &str, f64)]) {
        println!("{}", emf_line(&self.stack, "extract", metrics));
    }

    /// Handles one invocation: an SQS batch, or a scheduled repair.
    pub async fn handle(&self, event: Value) -> Value {
        self.invoke(event, None).await
    }

    /// [`Extractor::handle`] within the invocation's deadline ([`run_deadline`]): an
    /// extraction still running then ends with `timeout` while the function lives.
    pub async fn invoke(&self, event: Value, deadline: Option<tokio::time::Instant>) -> Value {
        if event.get("Records").is_some() {
            let response = match <SqsEvent as serde::Deserialize>::deserialize(&event) {
                Ok(batch) => self.handle_batch(&batch, deadline).await,
                Err(_) => {
                    // Not an SQS batch after all: every record we can name comes back.
                    error!("malformed SQS event; every record will be retried");
                    let mut r = SqsBatchResponse::default();
                    for id in event["Records"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|m| m.get("messageId")?.as_str())
                    {
                        r.add_failure(id);
                    }
                    r
                }
            };
            return serde_json::to_value(response).expect("a batch response is JSON");
        }
        if is_reencrypt(&event) {
            return self.reencrypt().await;
        }
        if is_repair(&event) {
            return self.repair().await;
        }
        warn!("unrecognised event ignored");
        json!({})
    }

    /// An SQS batch: the messages to retry are its `batchItemFailures`.
    pub async fn handle_batch(
        &self,
        batch: &SqsEvent,
        deadline: Option<tokio::time::Instant>,
    ) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        for record in &batch.records {
            if !self.handle_record(record, deadline).await {
                response.add_failure(record.message_id.clone().unwrap_or_default());
            }
        }
        response
    }

    /// One record, isolated in its own task; `false` when it must come back.
    async fn handle_record(
        &self,
        record: &SqsMessage,
        deadline: Option<tokio::time::Instant>,
    ) -> bool {
        let msg = queue_message_from_record(record);
        let message_id = record.message_id.clone().unwrap_or_default();
        let pipeline = self.pipeline.clone();
        let started = Instant::now();
        let outcome = tokio::spawn(async move {
            let stop = fetcher_engine::Context::background();
            pipeline.handle_within(&msg, &stop, deadline).await
        })
        .await;
        match outcome {
            Ok(Outcome::Completed {
                job_id,
                rows,
                bytes,
                duration,
                log_retained,
            }) => {
                info!(%message_id, %job_id, rows, bytes, ms = duration.as_millis() as u64, "job completed");
                self.metrics(&[
                    ("JobsCompleted", "Count", 1.0),
                    ("Rows", "Count", rows as f64),
                    ("Bytes", "Bytes", bytes as f64),
                    ("DurationMs", "Milliseconds", duration.as_millis() as f64),
                ]);
                if let Some(retained) = log_retained.iter().map(|s| s.bytes).max() {
                    // What the job's replication slots kept of the log when it began: the
                    // LogRetainedBytes alarm's metric (docs/operations.md).
                    self.metrics(&[("LogRetainedBytes", "Bytes", retained as f64)]);
                }
                true
            }
            Ok(Outcome::Failed { job_id, error }) => {
                warn!(%message_id, %job_id, %error, "job failed");
                self.metrics(&[
                    ("JobsFailed", "Count", 1.0),
                    (
                        "DurationMs",
                        "Milliseconds",
                        started.elapsed().as_millis() as f64,
                    ),
                ]);
                true
            }
            Ok(Outcome::Skipped(why)) => {
                info!(%message_id, reason = why, "message skipped");
                true
            }
            Ok(Outcome::Continued { job_id, segment }) => {
                info!(%message_id, %job_id, segment, "job continues in another invocation");
                self.metrics(&[
                    ("SegmentsContinued", "Count", 1.0),
                    (
                        "DurationMs",
                        "Milliseconds",
                        started.elapsed().as_millis() as f64,
                    ),
                ]);
                true
            }
            Ok(Outcome::FannedOut { job_id, ranges }) => {
                info!(%message_id, %job_id, ranges, "job fanned out over key ranges");
                self.metrics(&[("JobsFannedOut", "Count", 1.0)]);
                true
            }
            Ok(Outcome::RangeDone { job_id, range }) => {
                info!(%message_id, %job_id, range, "range done; other ranges still running");
                self.metrics(&[
                    ("RangesDone", "Count", 1.0),
                    (
                        "DurationMs",
                        "Milliseconds",
                        started.elapsed().as_millis() as f64,
                    ),
                ]);
                true
            }
            Ok(Outcome::Dropped { reason, job_id }) => {
                warn!(%message_id, reason = reason.as_str(), job_id = job_id.map(|j| j.to_string()).unwrap_or_default(), "message dropped");
                self.metrics(&[("MessagesDropped", "Count", 1.0)]);
                true
            }
            Ok(Outcome::Deferred { job_id, delay }) => {
                info!(%message_id, %job_id, delay_s = delay.as_secs(), "tenant at its share of workers; message sent again for later");
                self.metrics(&[("MessagesDeferred", "Count", 1.0)]);
                true
            }
            Ok(Outcome::Retry(e)) => {
                warn!(%message_id, error = %e.log_detail(), "message will be retried");
                self.retry_later(record).await;
                false
            }
            Err(e) => {
                error!(%message_id, panic = e.is_panic(), "message handler crashed; it will be retried");
                self.retry_later(record).await;
                false
            }
        }
    }

    /// A message that comes back: delayed by its back-off, or, on its last receive before
    /// the dead-letter queue, its job marked so the repair pass sends it a fresh one.
    async fn retry_later(&self, record: &SqsMessage) {
        if receives(record) >= MAX_RECEIVES {
            self.pipeline
                .note_undelivered(&queue_message_from_record(record))
                .await;
        }
        self.back_off(record).await;
    }

    /// Re-encrypts every stored credential under the current master key version.
    pub async fn reencrypt(&self) -> Value {
        // Loaded afresh: the operator just rotated, and asks now.
        let ring = match fetcher_crypto::KeyRing::load(&self.key_source).await {
            Ok(ring) => ring,
            Err(e) => {
                warn!(error = %e, "credential re-encryption: the master keys could not be loaded");
                return json!({"error": "master key unavailable"});
            }
        };
        let cipher = fetcher_crypto::CredentialCipher::new(ring.clone());
        match self
            .store
            .reencrypt_credentials(&cipher, ring.current_version())
            .await
        {
            Ok(r) => {
                info!(
                    credentials = r.credentials,
                    reencrypted = r.reencrypted,
                    unreadable = r.unreadable,
                    "credential re-encryption"
                );
                json!({"credentials": r.credentials, "reencrypted": r.reencrypted, "unreadable": r.unreadable, "keyVersion": ring.current_version()})
            }
            Err(e) => {
                warn!(error = %e.log_detail(), "credential re-encryption failed");
                json!({"error": e.message()})
            }
        }
    }

    /// A retried message comes back after [`retry_delay`], not the queue's visibility
    /// timeout. If that fails the timeout applies: slower, never lost.
    async fn back_off(&self, record: &SqsMessage) {
        let Some(receipt) = record.receipt_handle.as_deref() else {
            return;
        };
        let delay = retry_delay(self.retry_backoff, receives(record));
        if let Err(e) = self.queue.delay_redelivery(receipt, delay).await {
            warn!(error = %e.log_detail(), "could not delay the retried message; the queue's visibility timeout applies");
        }
    }

    /// One repair pass: pending terminal events are republished, and stranded jobs
    /// (a lost message, a dead worker; [`StrandedRules`]) go back on the queue.
    pub async fn repair(&self) -> Value {
        let mut failures = 0;
        let republished = match self.pipeline.repair_events(REPAIR_BATCH).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e.log_detail(), "event repair pass failed");
                failures += 1;
                0
            }
        };
        let requeued = match self
            .pipeline
            .requeue_stranded(&self.queue, self.stranded, REPAIR_BATCH)
            .await
        {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e.log_detail(), "stranded-job sweep failed");
                failures += 1;
                0
            }
        };
        info!(republished, requeued, failures, "repair pass");
        // The stuck-work gauge: stranded jobs found by this pass (the template alarms
        // when it stays above zero); every pass counts itself, so passes that stop
        // coming (or keep failing) alarm too.
        self.metrics(&[
            ("StrandedJobs", "Count", requeued as f64),
            ("EventsRepublished", "Count", republished as f64),
            ("RepairPasses", "Count", 1.0),
            ("RepairFailures", "Count", failures as f64),
        ]);
        json!({ "republished": republished, "requeued": requeued, "failures": failures })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    fn ms_from_now(d: Duration) -> u64 {
        (SystemTime::now() + d)
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    #[tokio::test]
    async fn the_run_deadline_is_the_invocations_end_less_the_margin() {
        assert!(run_deadline(0).is_none(), "no deadline, no bound");
        assert!(
            run_deadline(600_000).is_none(),
            "an emulator's placeholder, long past"
        );
        let left = run_deadline(ms_from_now(Duration::from_secs(900)))
            .unwrap()
            .duration_since(tokio::time::Instant::now());
        let want = Duration::from_secs(900) - DEADLINE_MARGIN;
        assert!(
            left <= want && left > want - Duration::from_secs(2),
            "{left:?}"
        );
        // An invocation already inside its margin still gets a second, not zero.
        let short = run_deadline(ms_from_now(Duration::from_secs(5)))
            .unwrap()
            .duration_since(tokio::time::Instant::now());
        assert!(short <= Duration::from_secs(1) && short > Duration::from_millis(500));
    }
}
