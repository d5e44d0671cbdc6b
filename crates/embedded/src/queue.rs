//! The in-process work queue of `fetcher serve`, and the worker that drains it.
//!
//! The queue keeps its messages in memory; durability comes from the jobs table: on start
//! the worker re-enqueues every job that needs a worker (pending, or processing with an
//! expired lease), so jobs accepted before a crash or restart run after it. Messages are
//! the same signed envelopes the SQS path carries, verified by the same pipeline.
//!
//! **Fair workers** (docs/operations.md, "Fair workers"): the queue is not one FIFO. Each
//! tenant's messages wait in a line of their own, tenants are served in turn, and a
//! message is taken only while its tenant runs fewer than [`Shares::per_tenant`] jobs and
//! each connection it reads runs fewer than [`Shares::per_connection`]: a tenant whose
//! queries run slow (a policy that sleeps, a lock it waits on) holds its share of the
//! workers, never all of them, and another tenant's job starts at once. Continuations and
//! the ranges of a fanned-out job are messages too, under the same shares.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fetcher_crypto::envelope::HEADER_TENANT_ID;
use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::{BoxFuture, Timestamp};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tracing::{info, warn};

use fetcher_host::error::{Result, ServiceError};
use fetcher_host::message;
use fetcher_host::model::Transition;
use fetcher_host::model::{JobStatus, QueueMessage};
use fetcher_host::pipeline::{Outcome, Pipeline, StrandedRules};
use fetcher_host::ports::JobQueue;

/// How much of the workers one tenant, one connection of a tenant, and the follow-up
/// work of started jobs may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    /// Jobs of one tenant running at once.
    pub per_tenant: usize,
    /// Jobs reading one connection (of one tenant) running at once.
    pub per_connection: usize,
    /// Ranges of fanned-out jobs and continuations of long ones running at once, over
    /// all tenants: what they leave of the workers is for new jobs, so a small job never
    /// waits behind a big job's ranges (#39).
    pub follow_ups: usize,
}

impl Shares {
    /// No limits: every message is taken in turn.
    pub const UNLIMITED: Shares = Shares {
        per_tenant: usize::MAX,
        per_connection: usize::MAX,
        follow_ups: usize::MAX,
    };

    /// The defaults for `workers` workers: one worker stays free of any one connection
    /// and (multi-tenant) of any one tenant, so another's job starts at once; a
    /// single-tenant deployment's one tenant may use every worker. Ranges and
    /// continuations leave one more: a new job on the connection a big job's ranges read
    /// still finds a worker under that connection's share.
    pub fn defaults(workers: usize, multi_tenant: bool) -> Shares {
        let below = workers.saturating_sub(1).max(1);
        Shares {
            per_tenant: if multi_tenant { below } else { workers.max(1) },
            per_connection: below,
            follow_ups: workers.saturating_sub(2).max(1),
        }
    }
}

/// Whom a message's job is for: its tenant and the connections (config names) it reads.
/// Read from the message before its signature is checked: a forged one can only wait in
/// a line; the pipeline refuses it when it is taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Owner {
    tenant: String,
    connections: Vec<String>,
    /// A range of a fanned-out job or a continuation: work of a job already started.
    follow_up: bool,
}

fn owner_of(msg: &QueueMessage) -> Owner {
    let body: serde_json::Value = serde_json::from_slice(&msg.body).unwrap_or_default();
    Owner {
        tenant: msg
            .headers
            .get(HEADER_TENANT_ID)
            .cloned()
            .unwrap_or_default(),
        connections: body["mappedFields"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default(),
        follow_up: !body["range"].is_null() || !body["segment"].is_null(),
    }
}

/// A message waiting for a worker, with the number of times it was retried before.
struct Waiting {
    msg: QueueMessage,
    attempt: u32,
    owner: Owner,
}

/// The lines of waiting messages and what runs, by tenant and connection.
#[derive(Default)]
struct Lines {
    /// Tenants with waiting messages, in the order they are served next.
    turn: VecDeque<String>,
    waiting: HashMap<String, VecDeque<Waiting>>,
    running_tenant: HashMap<String, usize>,
    running_connection: HashMap<(String, String), usize>,
    running_follow_ups: usize,
}

impl Lines {
    fn push(&mut self, w: Waiting) {
        let line = self.waiting.entry(w.owner.tenant.clone()).or_default();
        if line.is_empty() {
            self.turn.push_back(w.owner.tenant.clone());
        }
        line.push_back(w);
    }

    fn waiting_of(&self, tenant: &str) -> usize {
        self.waiting.get(tenant).map_or(0, VecDeque::len)
    }

    /// The next message a worker may take: tenants in turn, each its oldest message whose
    /// tenant and connections are under their shares. The tenant served goes to the back.
    fn take(&mut self, shares: Shares) -> Option<Waiting> {
        for i in 0..self.turn.len() {
            let tenant = &self.turn[i];
            if self.running_tenant.get(tenant).copied().unwrap_or(0) >= shares.per_tenant {
                continue;
            }
            let line = self.waiting.get_mut(tenant)?;
            let free = |c: &String| {
                let key = (tenant.clone(), c.clone());
                self.running_connection.get(&key).copied().unwrap_or(0) < shares.per_connection
            };
            let follow_ups_full = self.running_follow_ups >= shares.follow_ups;
            let Some(at) = line.iter().position(|w| {
                w.owner.connections.iter().all(free) && !(w.owner.follow_up && follow_ups_full)
            }) else {
                continue;
            };
            let w = line.remove(at).expect("found above");
            let tenant = self.turn.remove(i).expect("in turn");
            if line.is_empty() {
                self.waiting.remove(&tenant);
            } else {
                self.turn.push_back(tenant);
            }
            self.started(&w.owner);
            return Some(w);
        }
        None
    }

    fn started(&mut self, owner: &Owner) {
        if owner.follow_up {
            self.running_follow_ups += 1;
        }
        *self.running_tenant.entry(owner.tenant.clone()).or_default() += 1;
        for c in &owner.connections {
            *self
                .running_connection
                .entry((owner.tenant.clone(), c.clone()))
                .or_default() += 1;
        }
    }

    fn ended(&mut self, owner: &Owner) {
        fn down<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K) {
            if let Some(n) = map.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
        if owner.follow_up {
            self.running_follow_ups = self.running_follow_ups.saturating_sub(1);
        }
        down(&mut self.running_tenant, owner.tenant.clone());
        for c in &owner.connections {
            down(
                &mut self.running_connection,
                (owner.tenant.clone(), c.clone()),
            );
        }
    }
}

/// The in-process queue: fair lines per tenant ([`Shares`]).
pub struct InProcessQueue {
    lines: std::sync::Mutex<Lines>,
    /// Signalled when a message arrives or a job ends (a share frees).
    changed: Notify,
    accepting: watch::Sender<bool>,
    /// Messages enqueued and not yet finished (waiting, being handled, or waiting out a
    /// retry's delay): the queue's depth, as SQS counts its own.
    held: AtomicU64,
    /// Messages one tenant may have waiting; past it, its new jobs are refused.
    max_waiting_per_tenant: usize,
}

impl Default for InProcessQueue {
    fn default() -> Self {
        InProcessQueue {
            lines: Default::default(),
            changed: Notify::new(),
            accepting: watch::channel(true).0,
            held: AtomicU64::new(0),
            max_waiting_per_tenant: DEFAULT_MAX_WAITING_PER_TENANT,
        }
    }
}

/// Messages one tenant may have waiting by default.
pub const DEFAULT_MAX_WAITING_PER_TENANT: usize = 1000;

impl InProcessQueue {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A queue that holds at most `max` waiting messages of one tenant.
    pub fn with_max_waiting_per_tenant(max: usize) -> Arc<Self> {
        Arc::new(InProcessQueue {
            max_waiting_per_tenant: max.max(1),
            ..Default::default()
        })
    }

    /// Stops accepting new jobs (graceful shutdown): `enqueue` then fails with a
    /// retryable error, so the API answers 503 instead of losing the job.
    pub fn close(&self) {
        self.accepting.send_replace(false);
        self.changed.notify_waiters();
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.lines.lock().expect("queue lines")
    }

    /// The next message in fair order, as a consumer without shares takes it (tests);
    /// `None` when none comes within the wait.
    pub async fn recv(&self) -> Option<QueueMessage> {
        let w = self.take(Shares::UNLIMITED).await;
        self.lines().ended(&w.owner);
        Some(w.msg)
    }

    /// Waits for the next message a worker may take under `shares`. Cancel-safe: a
    /// message is only ever taken when it is returned.
    async fn take(&self, shares: Shares) -> Waiting {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(w) = self.lines().take(shares) {
                return w;
            }
            changed.await;
        }
    }

    /// A job taken with [`InProcessQueue::take`] stopped running: its shares free.
    fn ended(&self, owner: &Owner) {
        self.lines().ended(owner);
        self.changed.notify_waiters();
    }

    fn push(&self, msg: QueueMessage, attempt: u32) {
        let owner = owner_of(&msg);
        self.lines().push(Waiting {
            msg,
            attempt,
            owner,
        });
        self.changed.notify_waiters();
    }

    /// Sends `msg` back after `delay`, as retry `attempt`, without holding a worker while
    /// it waits (the message stays in the queue's depth meanwhile). When the queue closed
    /// in between, the message is dropped: the jobs table brings the job back on the next
    /// start.
    fn retry_later(self: &Arc<Self>, msg: QueueMessage, attempt: u32, delay: Duration) {
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if *queue.accepting.borrow() {
                queue.push(msg, attempt);
            } else {
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
            let tenant = owner_of(&message).tenant;
            if self.lines().waiting_of(&tenant) >= self.max_waiting_per_tenant {
                Err(ServiceError::new(
                    fetcher_host::error::ErrorKind::RateLimited,
                    "the tenant has its maximum number of jobs waiting for a worker",
                ))
            } else {
                self.held.fetch_add(1, Ordering::SeqCst);
                self.push(message, 0);
                Ok(())
            }
        };
        Box::pin(std::future::ready(out))
    }

    fn admits(&self, tenant: &str) -> bool {
        self.lines().waiting_of(tenant) < self.max_waiting_per_tenant
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
    /// What one tenant and one connection may hold of the workers.
    pub shares: Shares,
    /// Told what each completed job's replication slots retained (`serve`'s gauge).
    pub slots_observed: Option<SlotObserver>,
}

/// What a [`SlotObserver`] calls.
pub type ObserveSlots = dyn Fn(&[fetcher_host::pipeline::SlotRetained]) + Send + Sync;

/// Called with the slots of each completed job that read from the log.
#[derive(Clone)]
pub struct SlotObserver(pub Arc<ObserveSlots>);

impl std::fmt::Debug for SlotObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SlotObserver")
    }
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
            shares: Shares::defaults(2, false),
            slots_observed: None,
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
                w = self.queue.take(self.config.shares), if permits.available_permits() > 0 => {
                    let permit = permits.clone().try_acquire_owned().expect("a free slot");
                    let (pipeline, queue, config, abandon) = (self.pipeline.clone(), self.queue.clone(), self.config.clone(), abandon.clone());
                    tasks.spawn(async move {
                        let _permit = permit;
                        handle(&pipeline, &queue, &config, &abandon, w.msg, w.attempt).await;
                        queue.ended(&w.owner);
                    });
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
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
        Outcome::Completed { log_retained, .. } => {
            if let Some(observe) = config
                .slots_observed
                .as_ref()
                .filter(|_| !log_retained.is_empty())
            {
                (observe.0)(&log_retained);
            }
        }
        // The pipeline logs completions, failures and dropped messages itself.
        Outcome::Failed { .. }
        | Outcome::Dropped { .. }
        | Outcome::Continued { .. }
        | Outcome::FannedOut { .. }
        | Outcome::RangeDone { .. }
        | Outcome::Deferred { .. } => {}
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
    use std::collections::BTreeMap;

    fn msg(tenant: &str, connections: &[&str], n: u32) -> Waiting {
        let owner = Owner {
            tenant: tenant.into(),
            connections: connections.iter().map(|c| c.to_string()).collect(),
            follow_up: false,
        };
        Waiting {
            msg: QueueMessage {
                headers: BTreeMap::from([("n".to_owned(), n.to_string())]),
                body: Vec::new(),
            },
            attempt: 0,
            owner,
        }
    }

    fn n(w: &Waiting) -> u32 {
        w.msg.headers["n"].parse().unwrap()
    }

    #[test]
    fn tenants_take_turns_and_none_holds_more_than_its_share() {
        let mut lines = Lines::default();
        for i in 0..3 {
            lines.push(msg("slow", &["a"], i));
        }
        lines.push(msg("other", &["b"], 10));
        lines.push(msg("other", &["b"], 11));
        let shares = Shares {
            per_tenant: 1,
            per_connection: 1,
            follow_ups: usize::MAX,
        };
        // The first in line, then the other tenant's, though the slow one queued first.
        let first = lines.take(shares).unwrap();
        assert_eq!(n(&first), 0);
        let second = lines.take(shares).unwrap();
        assert_eq!(n(&second), 10);
        // Both tenants hold their share: nothing more until one ends.
        assert!(lines.take(shares).is_none());
        lines.ended(&first.owner);
        assert_eq!(n(&lines.take(shares).unwrap()), 1);
        assert!(lines.take(shares).is_none());
        lines.ended(&second.owner);
        assert_eq!(n(&lines.take(shares).unwrap()), 11);
        assert_eq!(lines.waiting_of("slow"), 1);
        assert_eq!(lines.waiting_of("other"), 0);
    }

    #[test]
    fn a_busy_connection_lets_the_same_tenants_other_connection_pass() {
        let mut lines = Lines::default();
        lines.push(msg("t", &["slow"], 0));
        lines.push(msg("t", &["slow"], 1));
        lines.push(msg("t", &["slow", "fast"], 2));
        lines.push(msg("t", &["fast"], 3));
        let shares = Shares::defaults(2, false);
        assert_eq!(
            shares,
            Shares {
                per_tenant: 2,
                per_connection: 1,
                follow_ups: 1,
            }
        );
        let held = lines.take(shares).unwrap();
        assert_eq!(n(&held), 0);
        // Messages 1 and 2 read the busy connection: 3 goes first.
        assert_eq!(n(&lines.take(shares).unwrap()), 3);
        assert!(
            lines.take(shares).is_none(),
            "the tenant holds both workers"
        );
        lines.ended(&held.owner);
        assert_eq!(lines.running_tenant["t"], 1);
    }

    #[test]
    fn the_default_shares_keep_a_worker_free_of_any_one() {
        assert_eq!(
            Shares::defaults(1, true),
            Shares {
                per_tenant: 1,
                per_connection: 1,
                follow_ups: 1,
            }
        );
        assert_eq!(
            Shares::defaults(2, true),
            Shares {
                per_tenant: 1,
                per_connection: 1,
                follow_ups: 1,
            }
        );
        assert_eq!(
            Shares::defaults(8, true),
            Shares {
                per_tenant: 7,
                per_connection: 7,
                follow_ups: 6,
            }
        );
        assert_eq!(
            Shares::defaults(8, false),
            Shares {
                per_tenant: 8,
                per_connection: 7,
                follow_ups: 6,
            }
        );
    }

    #[test]
    fn ranges_and_continuations_leave_a_worker_to_new_jobs() {
        let mut lines = Lines::default();
        let follow = |n: u32| {
            let mut w = msg("big", &["pg"], n);
            w.owner.follow_up = true;
            w
        };
        for i in 0..4 {
            lines.push(follow(i));
        }
        lines.push(msg("big", &["pg"], 10));
        let shares = Shares::defaults(4, false);
        assert_eq!((shares.follow_ups, shares.per_connection), (2, 3));
        let mut running = Vec::new();
        for _ in 0..2 {
            running.push(lines.take(shares).unwrap());
        }
        assert!(running.iter().all(|w| w.owner.follow_up));
        // The next worker goes to the new job queued behind the other ranges, on the
        // same connection.
        let fresh = lines.take(shares).unwrap();
        assert_eq!(n(&fresh), 10);
        assert!(lines.take(shares).is_none(), "the ranges hold their share");
        lines.ended(&running[0].owner);
        assert_eq!(n(&lines.take(shares).unwrap()), 2);
        // A message is a follow-up by its body: a range or a segment.
        let of = |body: &str| {
            owner_of(&QueueMessage {
                headers: BTreeMap::new(),
                body: body.as_bytes().to_vec(),
            })
        };
        assert!(of(r#"{"jobId":"x","range":2}"#).follow_up);
        assert!(of(r#"{"jobId":"x","segment":1}"#).follow_up);
        assert!(!of(r#"{"jobId":"x"}"#).follow_up);
    }

    #[tokio::test]
    async fn a_tenant_with_its_maximum_waiting_is_refused_and_others_are_not() {
        let queue = InProcessQueue::with_max_waiting_per_tenant(2);
        let of = |tenant: &str| QueueMessage {
            headers: BTreeMap::from([(HEADER_TENANT_ID.to_owned(), tenant.to_owned())]),
            body: br#"{"jobId":"x","mappedFields":{"pg":{"t":["id"]}}}"#.to_vec(),
        };
        queue.enqueue(of("a")).await.unwrap();
        queue.enqueue(of("a")).await.unwrap();
        let refused = queue.enqueue(of("a")).await.unwrap_err();
        assert_eq!(refused.kind(), fetcher_host::error::ErrorKind::RateLimited);
        queue.enqueue(of("b")).await.unwrap();
        assert_eq!(queue.depth().await.unwrap(), Some(3));
        // Taking one makes room again.
        let w = queue.take(Shares::UNLIMITED).await;
        assert_eq!(w.owner.tenant, "a");
        assert_eq!(w.owner.connections, ["pg"]);
        queue.enqueue(of("a")).await.unwrap();
    }

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
