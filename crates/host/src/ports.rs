//! Host ports: what the API and the pipeline need from infrastructure. Each has an
//! in-memory implementation ([`crate::memory`]), embedded ones for `fetcher serve`, AWS
//! ones in `fetcher-aws`, and a shared conformance suite ([`crate::testing`]).
//!
//! All methods are tenant-scoped where they take a tenant: one tenant's records are
//! invisible to every other tenant. Errors are [`ServiceError`]s with safe messages.

use std::sync::Arc;
use std::time::Duration;

use fetcher_crypto::KeyRing;
use fetcher_engine::{BoxFuture, Timestamp};

use crate::error::Result;
use crate::model::*;

/// Outcome of [`JobStore::insert`].
#[derive(Debug, Clone, PartialEq)]
pub enum InsertOutcome {
    Created,
    /// Another job with the same request hash is active (pending or processing); it is
    /// returned instead. Atomic: concurrent identical inserts create exactly one job.
    Duplicate(Box<Job>),
    /// The job belongs to a sync whose other job is active: nothing was stored; that job
    /// is returned. Atomic: of concurrent inserts for one sync exactly one is created.
    SyncBusy(Box<Job>),
}

/// Outcome of [`JobStore::claim`].
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The job is now `processing` under a lease; `token` must accompany the terminal
    /// write, so a worker whose lease was taken over cannot complete the job.
    Claimed {
        job: Box<Job>,
        token: u32,
    },
    /// Someone else holds a live lease, or the job is terminal: nothing to do.
    NotClaimable(Box<Job>),
    NotFound,
}

/// Jobs and their lifecycle. Every transition is conditional, so redelivered or
/// concurrent messages cannot produce a second result or a second event.
pub trait JobStore: Send + Sync {
    /// Inserts a pending job unless an active job has the same request hash.
    fn insert<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<InsertOutcome>>;

    fn get<'a>(&'a self, tenant: &'a str, id: JobId) -> BoxFuture<'a, Result<Option<Job>>>;

    /// The most recent job (by creation time) with this hash created at or after `since`.
    fn find_recent_by_hash<'a>(
        &'a self,
        tenant: &'a str,
        hash: &'a str,
        since: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Job>>>;

    /// `pending → processing` (or takes over a `processing` job whose lease expired at
    /// `now`), with a lease until `now + lease`.
    fn claim<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        now: Timestamp,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ClaimOutcome>>;

    /// Applies one [`Transition`] ([`Job::apply`]) in one conditional write: read,
    /// decide, write only if the job did not change meanwhile. `Err(Conflict)` when the
    /// transition is not allowed, `Err(NotFound)` without the job. The methods below
    /// are this call with their transition.
    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        change: Transition<'a>,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Extends a live claim and records progress (heartbeat); answers whether a cancel
    /// was asked for. Fails with `Conflict` if the claim was lost.
    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        token: u32,
        until: Timestamp,
        progress: Option<Progress>,
    ) -> BoxFuture<'a, Result<bool>> {
        let change = Transition::Renew {
            token,
            until,
            progress,
        };
        self.transition(tenant, id, change)
    }

    /// `processing → completed` with the result and the pending event, in one write,
    /// only while `token` still holds the claim (`Conflict` otherwise).
    fn complete<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        token: u32,
        result: &'a JobResult,
        event: &'a PendingEvent,
        at: Timestamp,
    ) -> BoxFuture<'a, Result<()>> {
        let change = Transition::Complete {
            token,
            result,
            event,
            at,
        };
        unit(self.transition(tenant, id, change))
    }

    /// `pending|processing → failed` with the sanitised error and the pending event, in
    /// one write. With `token`, only while that claim holds; without, only from `pending`
    /// (a message that failed before it could claim). `Conflict` when the condition fails.
    fn fail<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        token: Option<u32>,
        error: &'a str,
        event: &'a PendingEvent,
        at: Timestamp,
    ) -> BoxFuture<'a, Result<()>> {
        let change = Transition::Fail {
            token,
            error,
            event,
            at,
        };
        unit(self.transition(tenant, id, change))
    }

    /// `processing → pending`, giving a claim back (a retryable failure, whose
    /// sanitised `error` the job keeps if it is its first; graceful shutdown: `None`).
    fn release<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        token: u32,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        unit(self.transition(tenant, id, Transition::Release { token, error }))
    }

    /// Counts a failed publish of the job's pending event; at `max` failures the event
    /// is quarantined ([`Job::note_event_failure`]). Returns whether it was.
    fn note_event_failure<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        max: u32,
    ) -> BoxFuture<'a, Result<bool>> {
        self.transition(tenant, id, Transition::NoteEventFailure { max })
    }

    /// Removes the pending-event marker once the event is published.
    fn clear_pending_event<'a>(&'a self, tenant: &'a str, id: JobId) -> BoxFuture<'a, Result<()>> {
        unit(self.transition(tenant, id, Transition::ClearPendingEvent))
    }

    /// Terminal jobs whose event is still pending, oldest first, across tenants.
    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>>;

    /// The tenant's jobs created in `[from, to)`, newest first, at most `limit`: what a
    /// job list pages through (docs/api.md, "Listing jobs").
    fn list_created<'a>(
        &'a self,
        tenant: &'a str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Job>>>;

    /// Pending or processing jobs of this tenant that read `config_name`.
    fn has_active_jobs<'a>(
        &'a self,
        tenant: &'a str,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Jobs that need a worker, oldest first, across tenants: pending ones, and
    /// processing ones whose lease expired at `now` (their worker died). The in-process
    /// queue re-enqueues these after a restart.
    fn list_pending<'a>(&'a self, now: Timestamp, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>>;

    /// A sync of the tenant (its watermarks and active job), `None` when no job of it was
    /// ever stored. Syncs live beside their jobs: inserting a job of a sync makes it the
    /// sync's active job (or answers [`InsertOutcome::SyncBusy`]), and the write that ends
    /// the job ends that, recording a completed job's watermarks in the same write
    /// ([`SyncState::job_ended`]).
    fn sync<'a>(&'a self, tenant: &'a str, id: &'a str)
    -> BoxFuture<'a, Result<Option<SyncState>>>;

    /// The tenant's syncs in order of id, those after `after` (all when `None`), at most
    /// `limit`: what a sync list pages through (docs/api.md, "Syncs").
    fn list_syncs<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SyncState>>>;

    /// Forgets watermarks of a sync ([`SyncState::reset`]; `tables` empty: all) and
    /// returns it. `NotFound` without the sync; `Conflict` while a job of it is active (a
    /// running job would write its watermark back).
    fn reset_sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        tables: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<SyncState>>;

    /// Removes a sync's record (its jobs stay; a later job of the same id starts a new
    /// sync). `NotFound` without the sync; `Conflict` while a job of it is active, decided
    /// in the write that removes it.
    fn delete_sync<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<()>>;
}

/// Outcome of [`ScheduleStore::save_schedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveOutcome {
    Saved,
    /// The stored version was not the one before this write (another writer won): nothing
    /// was written; read again and decide again.
    Stale,
}

/// Schedules of syncs (docs/api.md, "Schedules"), one per `(tenant, syncId)`.
pub trait ScheduleStore: Send + Sync {
    /// The schedule of a sync of the tenant, if any.
    fn schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Schedule>>>;

    /// Writes `schedule` if the stored one's version is `schedule.version - 1` (none
    /// stored when `schedule.version` is 1); otherwise [`SaveOutcome::Stale`] and nothing
    /// written. Of concurrent writers from one version exactly one saves.
    fn save_schedule<'a>(&'a self, schedule: &'a Schedule) -> BoxFuture<'a, Result<SaveOutcome>>;

    /// Removes a sync's schedule; whether there was one.
    fn delete_schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Active schedules due at `now` (`nextRunAt <= now`), across tenants, earliest
    /// first, at most `limit`.
    fn due_schedules<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Schedule>>>;
}

/// The work queue's producer side. Consumers are host-specific (SQS event source,
/// in-process worker).
pub trait JobQueue: Send + Sync {
    fn enqueue<'a>(&'a self, message: QueueMessage) -> BoxFuture<'a, Result<()>>;

    /// Enqueues `message` for delivery no sooner than `delay` from now (SQS's
    /// `DelaySeconds`, at most 15 minutes): a message deferred while its tenant is at its
    /// share ([`TenantSlots`]). A queue that cannot delay delivers it at once.
    fn enqueue_after<'a>(
        &'a self,
        message: QueueMessage,
        delay: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        let _ = delay;
        self.enqueue(message)
    }

    /// `false` once the host is shutting down and takes no new work (`serve`'s
    /// in-process queue after its drain). A job submitted then is refused (503, nothing
    /// stored); one whose enqueue loses that race stays `pending`, durable in the jobs
    /// table, and runs on the next start. Queues that never close (SQS) keep the default.
    fn is_accepting(&self) -> bool {
        true
    }

    /// Whether `tenant` may queue another job: a queue that bounds each tenant's waiting
    /// jobs (`serve`'s, docs/operations.md "Fair workers") says no at that bound, and the
    /// job is refused before anything is stored. Queues without such a bound (SQS) keep
    /// the default.
    fn admits(&self, _tenant: &str) -> bool {
        true
    }

    /// How many messages the queue holds (waiting, in flight or delayed), if it can tell
    /// (approximately, as SQS counts). The repair pass asks whether it holds none at all
    /// ([`crate::pipeline::StrandedRules`]). `None`: the queue cannot tell.
    fn depth(&self) -> BoxFuture<'_, Result<Option<u64>>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// Publishes terminal events. Must fail (not drop) when the event cannot be delivered,
/// so the outbox marker stays for the repair pass.
pub trait EventPublisher: Send + Sync {
    fn publish<'a>(&'a self, event: &'a TerminalEvent) -> BoxFuture<'a, Result<()>>;

    /// Publishes several events (the repair pass); one result per event, in order. The
    /// default publishes them one at a time; a host with a batch API (EventBridge's
    /// `PutEvents` takes 10 entries) overrides it.
    fn publish_batch<'a>(&'a self, events: &'a [TerminalEvent]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(async move {
            let mut results = Vec::with_capacity(events.len());
            for event in events {
                results.push(self.publish(event).await);
            }
            results
        })
    }
}

/// Result of one rate-limit hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    /// How long until a token is back (when not allowed).
    pub retry_after: Duration,
}

/// One hit on a token bucket of `limit` tokens refilled at `limit` per `window`, in
/// nanoseconds: `tat` is the key's stored theoretical arrival time (`None`: a new key).
/// Returns the decision and, when allowed, the new `tat` to store (a refusal stores
/// nothing).
pub fn gcra(
    tat: Option<i128>,
    now: i128,
    limit: u32,
    window: Duration,
) -> (RateDecision, Option<i128>) {
    let window = window.as_nanos() as i128;
    if limit == 0 {
        let refused = RateDecision {
            allowed: false,
            retry_after: Duration::from_nanos(window.max(1) as u64),
        };
        return (refused, None);
    }
    let interval = (window / i128::from(limit)).max(1);
    let next = tat.unwrap_or(now).max(now) + interval;
    if next - now <= window {
        let allowed = RateDecision {
            allowed: true,
            retry_after: Duration::ZERO,
        };
        (allowed, Some(next))
    } else {
        let wait = (next - now - window).max(1);
        let refused = RateDecision {
            allowed: false,
            retry_after: Duration::from_nanos(wait as u64),
        };
        (refused, None)
    }
}

/// A tenant's share of the workers across processes: the Lambda host's per-tenant bound
/// (docs/operations.md, "Fair workers"), where every invocation is its own process and
/// SQS has no notion of tenant. `serve` keeps its shares in its own queue instead.
///
/// A hold lasts until its `until` (the invocation's end), so a worker that dies without
/// releasing frees its slot then, never later.
pub trait TenantSlots: Send + Sync {
    /// Takes one of `tenant`'s `cap` slots until `until`; `None` while `cap` live holds
    /// exist. Atomic: concurrent callers never hold more than `cap` together.
    fn acquire<'a>(
        &'a self,
        tenant: &'a str,
        cap: usize,
        until: Timestamp,
    ) -> BoxFuture<'a, Result<Option<SlotHold>>>;

    /// Gives a hold back before its time; releasing one already gone (expired, released)
    /// is not an error.
    fn release<'a>(&'a self, tenant: &'a str, hold: &'a SlotHold) -> BoxFuture<'a, Result<()>>;
}

/// One held slot of a tenant: a random token naming the hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotHold(String);

impl SlotHold {
    /// A fresh, unguessable hold.
    pub fn new() -> SlotHold {
        SlotHold(uuid::Uuid::new_v4().simple().to_string())
    }

    pub fn token(&self) -> &str {
        &self.0
    }
}

impl Default for SlotHold {
    fn default() -> Self {
        Self::new()
    }
}

/// Token buckets (the test-connection limit, docs/api.md "Limits"): per key, a bucket of `limit` tokens
/// that refills one token every `window / limit`; a hit takes a token or is refused with
/// the time until the next one. Kept as one "theoretical arrival time" per key (GCRA),
/// updated atomically by each store. The arithmetic is [`gcra`], shared by them all.
pub trait RateLimiter: Send + Sync {
    fn hit<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision>>;
}

/// The key ring, loaded once and cached (env key on `serve`, KMS + Secrets Manager on AWS).
pub trait KeyProvider: Send + Sync {
    fn key_ring(&self) -> BoxFuture<'_, Result<Arc<KeyRing>>>;

    /// The ring loaded again from its source, for when a message or a record names a key
    /// version the cached ring lacks (the master key was rotated since it was loaded).
    /// Default: the same ring (static keys never change).
    fn reload(&self) -> BoxFuture<'_, Result<Arc<KeyRing>>> {
        self.key_ring()
    }
}

/// A small object store (the `object_store` pattern): streamed writes that become visible
/// only on `finish`, streamed reads, delete. Paths are `/`-separated keys without a
/// leading `/`; adapters reject `..` segments.
pub trait ObjectStore: Send + Sync {
    fn put<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Box<dyn ObjectWriter>>>;

    /// `None` when absent.
    fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Box<dyn ObjectReader>>>>;

    fn delete<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<()>>;

    /// Size in bytes, `None` when absent.
    fn head<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<u64>>>;

    /// Removes what unfinished writes left behind (a crash, an abandoned job) that is
    /// older than `age`; returns how many. The store owns its temporary objects: hosts
    /// call this at start, when no writer of theirs exists. Default: nothing to sweep
    /// (S3 leaves the job to the bucket's lifecycle rule for incomplete multipart
    /// uploads).
    fn sweep_incomplete(&self, age: std::time::Duration) -> BoxFuture<'_, Result<u64>> {
        let _ = age;
        Box::pin(async { Ok(0) })
    }

    /// Whether a write would succeed now (readiness): default, a zero-byte write that is
    /// aborted.
    fn check_writable(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let w = self.put(".readiness-probe").await?;
            w.abort().await;
            Ok(())
        })
    }
}

/// An object being written. Memory stays bounded whatever the object's size.
pub trait ObjectWriter: Send {
    fn write<'a>(&'a mut self, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>>;

    /// Makes the object visible; returns its size.
    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<u64>>;

    /// Discards everything written; nothing becomes visible.
    fn abort(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// An object being read, in chunks.
pub trait ObjectReader: Send {
    /// The next chunk, or `None` at the end.
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>>>;
}

/// Reads a whole object (small objects and tests only).
pub async fn read_all(store: &dyn ObjectStore, path: &str) -> Result<Option<Vec<u8>>> {
    let Some(mut r) = store.get(path).await? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    while let Some(chunk) = r.next_chunk().await? {
        out.extend_from_slice(&chunk);
    }
    Ok(Some(out))
}

/// Checks an object path: non-empty, relative, no empty, `.` or `..` segments, no
/// backslashes or control characters.
pub fn validate_path(path: &str) -> Result<()> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.chars().any(char::is_control)
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(crate::error::ServiceError::validation(
            "invalid object path",
        ));
    }
    Ok(())
}

/// A dependency the host wants `/readyz` to check (store, queue, object store, keys…).
pub trait ReadinessProbe: Send + Sync {
    /// The check's key in the body (`dynamodb`, `sqs`, `sqlite`…).
    fn name(&self) -> &str;
    /// One health check; the error's (safe) message becomes the check's `error`.
    fn check(&self) -> BoxFuture<'_, Result<()>>;
    /// Per-dependency timeout; `None` uses the configured default (2 s).
    fn timeout(&self) -> Option<Duration> {
        None
    }
    /// Whether the configured connection uses TLS; `None` omits `tls`.
    fn tls(&self) -> Option<bool> {
        None
    }
}

fn unit<'a>(f: BoxFuture<'a, Result<bool>>) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move { f.await.map(|_| ()) })
}
