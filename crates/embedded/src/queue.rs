//! The in-process work queue of `fetcher serve`, and the worker that drains it.
//!
//! The queue itself is a channel; durability comes from the jobs table: on start the
//! worker re-enqueues every job that needs a worker (pending, or processing with an
//! expired lease), so jobs accepted before a crash or restart run after it. Messages are
//! the same signed envelopes the SQS path carries, verified by the same pipeline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::{BoxFuture, Timestamp};
use tokio::sync::{Mutex, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tracing::{info, warn};

use fetcher_host::error::{Result, ServiceError};
use fetcher_host::message;
use fetcher_host::model::Transition;
use fetcher_host::model::{JobStatus, QueueMessage};
use fetcher_host::pipeline::{Outcome, Pipeline, StrandedRules};
use fetcher_host::ports::JobQueue;

/// A channel-backed queue.
pub struct InProcessQueue {
    /// Each message with the number of times it was retried before.
    tx: mpsc::UnboundedSender<(QueueMessage, u32)>,
    rx: Mutex<mpsc::UnboundedReceiver<(QueueMessage, u32)>>,
    accepting: watch::Sender<bool>,
    /// Messages enqueued and not yet finished (waiting, being handled, or waiting out a
    /// retry's delay): the queue's depth, as SQS counts its own.
    held: AtomicU64,
}

impl Default for InProcessQueue {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        InProcessQueue {
            tx,
            rx: Mutex::new(rx),
            accepting: watch::channel(true).0,
            held: AtomicU64::new(0),
        }
    }
}

impl InProcessQueue {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Stops accepting new jobs (graceful shutdown): `enqueue` then fails with a
    /// retryable error, so the API answers 503 instead of losing the job.
    pub fn close(&self) {
        self.accepting.send_replace(false);
    }

    /// The next message, as the worker takes it (`None` once every sender is gone).
    pub async fn recv(&self) -> Option<QueueMessage> {
        self.rx.lock().await.recv().await.map(|(m, _)| m)
    }

    /// Sends `msg` back after `delay`, as retry `attempt`, without holding a worker while
    /// it waits (the message stays in the queue's depth meanwhile). When the queue closed
    /// in between, the message is dropped: the jobs table brings the job back on the next
    /// start.
    fn retry_later(self: &Arc<Self>, msg: QueueMessage, attempt: u32, delay: Duration) {
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if !*queue.accepting.borrow() || queue.tx.send((msg, attempt)).is_err() {
                queue.finished();
            }
        });
    }

    /// A message's handling ended (not retried): it leaves the queue's depth.
    pub fn finished(&self) {
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

impl JobQueue for InProcessQueue {
    fn is_accepting(&self) -> bool {
        *self.accepting.borrow()
    }

    fn enqueue<'a>(&'a self, message: QueueMessage) -> BoxFuture<'a, Result<()>> {
        let out = if !*self.accepting.borrow() {
            Err(ServiceError::unavailable(
                "shutting down; not accepting jobs",
            ))
        } else {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.tx.send((message, 0)).map_err(|_| {
                self.finished();
                ServiceError::unavailable("job queue closed")
            })
        };
        Box::pin(std::future::ready(out))
    }

    fn depth(&self) -> BoxFuture<'_, Result<Option<u64>>> {
        Box::pin(std::future::ready(Ok(Some(
            self.held.load(Ordering::SeqCst),
        ))))
    }
}

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Jobs processed at once.
    pub concurrency: usize,
    /// First delay before a retried message comes back; doubles up to `max_retry_delay`,
    /// each delay jittered down by up to half (so retries of many jobs spread out).
    pub retry_delay: Duration,
    pub max_retry_delay: Duration,
    /// How often the repair pass republishes pending terminal events and re-enqueues
    /// jobs whose message was dropped.
    pub repair_interval: Duration,
    /// How long shutdown waits for in-flight jobs before abandoning them (their leases
    /// then expire and the next start re-runs them).
    pub shutdown_grace: Duration,
    /// Whether no other process can hold a lease in this store (`serve` holds its data
    /// directory's lock): then startup recovery takes every processing job back at once
    /// instead of waiting out the dead process's leases.
    pub reclaim_leases: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 2,
            retry_delay: Duration::from_secs(1),
            max_retry_delay: Duration::from_secs(15),
            repair_interval: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(60),
            reclaim_leases: false,
        }
    }
}

/// Drains an [`InProcessQueue`] through a [`Pipeline`].
pub struct Worker {
    pub pipeline: Arc<Pipeline>,
    pub queue: Arc<InProcessQueue>,
    pub config: WorkerConfig,
}

impl Worker {
    /// Re-enqueues the jobs that need a worker (startup recovery). Returns how many.
    pub async fn recover(&self) -> Result<usize> {
        let ring = self.pipeline.keys.key_ring().await?;
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        // Processing jobs of a previous run are orphans; their leases expire within one
        // lease period, after which the pipeline takes them over.
        let horizon = Timestamp::from_unix_nanos(
            Timestamp::now().unix_nanos() + self.pipeline.config.lease.as_nanos() as i128,
        );
        let jobs = self.pipeline.jobs.list_pending(horizon, 10_000).await?;
        for job in &jobs {
            if self.config.reclaim_leases && job.status == JobStatus::Processing {
                // Its workers were this store's previous process: the claims go back
                // (every range's of a fanned-out job; a canceled job's are refused, and
                // the cancel ends it when it is taken).
                for token in job.claims_held() {
                    let back = Transition::Release { token, error: None };
                    match self
                        .pipeline
                        .jobs
                        .transition(&job.tenant_id, job.id, back)
                        .await
                    {
                        Ok(_) => {
                            info!(job_id = %job.id, "took back the claim of a previous process")
                        }
                        Err(e) => {
                            warn!(job_id = %job.id, error = %e.log_detail(), "could not take back a previous process's claim")
                        }
                    }
                }
            }
            self.queue
                .enqueue(message::encode(job, &signer, "", message::unix_now()))
                .await?;
            // Recorded, so the repair pass does not judge the job by a message that
            // vanished with the previous process.
            let sent = Transition::Requeued {
                at: Timestamp::now(),
            };
            if let Err(e) = self
                .pipeline
                .jobs
                .transition(&job.tenant_id, job.id, sent)
                .await
            {
                warn!(job_id = %job.id, error = %e.log_detail(), "could not record a re-enqueue");
            }
        }
        Ok(jobs.len())
    }

    /// Runs until `shutdown` turns true, then finishes (or, after the grace period,
    /// abandons) in-flight jobs and returns.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        match self.recover().await {
            Ok(0) => {}
            Ok(n) => info!(jobs = n, "re-enqueued jobs from a previous run"),
            Err(e) => warn!(error = %e.log_detail(), "startup recovery failed"),
        }
        let permits = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        // Cancelled when the shutdown grace runs out: in-flight jobs stop and release
        // their claims.
        let abandon = fetcher_engine::Context::background();
        let mut tasks = JoinSet::new();
        let mut repair = tokio::time::interval(self.config.repair_interval);
        let mut rx = self.queue.rx.lock().await;
        let stop = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        tokio::pin!(stop);
        loop {
            // A message is taken only when a slot is free, so waiting for a slot never
            // keeps the loop from seeing the stop signal.
            tokio::select! {
                _ = &mut stop => break,
                _ = repair.tick() => {
                    if let Err(e) = self.pipeline.repair_events(25).await {
                        warn!(error = %e.log_detail(), "event repair pass failed");
                    }
                    let rules = StrandedRules::with_retention(self.pipeline.config.max_message_age);
                    match self.pipeline.requeue_stranded(self.queue.as_ref(), rules, 25).await {
                        Ok(0) => {}
                        Ok(n) => info!(jobs = n, "stranded jobs re-enqueued"),
                        Err(e) => warn!(error = %e.log_detail(), "stranded-job sweep failed"),
                    }
                }
                Some((msg, attempt)) = rx.recv(), if permits.available_permits() > 0 => {
                    let permit = permits.clone().try_acquire_owned().expect("a free slot");
                    let (pipeline, queue, config, abandon) = (self.pipeline.clone(), self.queue.clone(), self.config.clone(), abandon.clone());
                    tasks.spawn(async move {
                        let _permit = permit;
                        handle(&pipeline, &queue, &config, &abandon, msg, attempt).await;
                    });
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(rx);
        self.queue.close();
        info!(in_flight = tasks.len(), "worker draining");
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                abandoned = tasks.len(),
                "shutdown grace elapsed; abandoning in-flight jobs"
            );
            abandon.cancel();
            // They release their claims; bounded, then whatever is left is dropped.
            let released = tokio::time::timeout(Duration::from_secs(5), async {
                while tasks.join_next().await.is_some() {}
            })
            .await;
            if released.is_err() {
                warn!(
                    left = tasks.len(),
                    "jobs did not stop; their leases will expire"
                );
                tasks.abort_all();
            }
        }
    }
}

/// Handles one message (retry `attempt`). A retry goes back to the queue after an
/// exponential delay and the worker is free at once: a job that keeps failing (its
/// database down, or made to fail by its tenant) never holds a worker while it waits.
async fn handle(
    pipeline: &Pipeline,
    queue: &Arc<InProcessQueue>,
    config: &WorkerConfig,
    abandon: &fetcher_engine::Context,
    msg: QueueMessage,
    attempt: u32,
) {
    match pipeline.handle_until(&msg, abandon).await {
        Outcome::Retry(e) => {
            let delay = retry_delay(config, attempt, jitter());
            warn!(error = %e.log_detail(), ?delay, "job will be retried");
            queue.retry_later(msg, attempt + 1, delay);
            return;
        }
        // The pipeline logs completions, failures and dropped messages itself.
        Outcome::Completed { .. }
        | Outcome::Failed { .. }
        | Outcome::Dropped { .. }
        | Outcome::Continued { .. }
        | Outcome::FannedOut { .. }
        | Outcome::RangeDone { .. } => {}
        Outcome::Skipped(why) => info!(why, "message skipped"),
    }
    queue.finished();
}

/// The delay before retry `attempt` (0-based): `retry_delay · 2^attempt`, capped at
/// `max_retry_delay`, scaled by `jitter` in `[0.5, 1]`.
pub fn retry_delay(config: &WorkerConfig, attempt: u32, jitter: f64) -> Duration {
    config
        .retry_delay
        .saturating_mul(1 << attempt.min(16))
        .min(config.max_retry_delay)
        .mul_f64(jitter.clamp(0.5, 1.0))
}

/// A factor in `[0.5, 1]` from the OS's randomness (a v4 UUID's random bits).
fn jitter() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11; // 53 random bits
    0.5 + 0.5 * (bits as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_grow_to_a_cap_and_cover_a_minute_of_outage() {
        let c = WorkerConfig::default();
        let full: Vec<u64> = (0..8).map(|a| retry_delay(&c, a, 1.0).as_secs()).collect();
        assert_eq!(full, [1, 2, 4, 8, 15, 15, 15, 15]);
        assert_eq!(retry_delay(&c, 3, 0.5), Duration::from_secs(4));
        assert_eq!(retry_delay(&c, 40, 1.0), Duration::from_secs(15));
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.5..=1.0).contains(&j), "{j}");
        }
        // Even with the smallest jitter, the retries a 60 s budget allows (10 attempts)
        // span well over the reference's 3 s: a PostgreSQL restart is ridden out.
        let least: Duration = (0..9).map(|a| retry_delay(&c, a, 0.5)).sum();
        assert!(least >= Duration::from_secs(30), "{least:?}");
    }
}
