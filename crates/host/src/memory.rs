//! In-memory host ports, for tests and as the reference behaviour of every adapter.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fetcher_crypto::KeyRing;
use fetcher_engine::{BoxFuture, Timestamp};
use tokio::sync::mpsc;

use crate::error::{Result, ServiceError};
use crate::model::*;
use crate::ports::*;

mod schedules;
pub use schedules::MemoryScheduleStore;

fn ready<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

fn job_not_found() -> ServiceError {
    ServiceError::not_found("job not found")
}

/// Jobs keyed by (tenant, id).
#[derive(Default)]
pub struct MemoryJobStore {
    /// Jobs and syncs under one lock, so a job's transition and its sync change together.
    state: Mutex<JobsAndSyncs>,
    pub fail: AtomicBool,
}

#[derive(Default)]
struct JobsAndSyncs {
    jobs: BTreeMap<(String, JobId), Job>,
    syncs: BTreeMap<(String, String), SyncState>,
}

impl MemoryJobStore {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn check(&self) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(ServiceError::unavailable("job store unavailable"));
        }
        Ok(())
    }

    fn with_job<T>(
        &self,
        tenant: &str,
        id: JobId,
        f: impl FnOnce(&mut Job) -> Result<T>,
    ) -> Result<T> {
        self.check()?;
        let mut state = self.state.lock().unwrap();
        let JobsAndSyncs { jobs, syncs } = &mut *state;
        let job = jobs
            .get_mut(&(tenant.to_owned(), id))
            .ok_or_else(job_not_found)?;
        let was_active = job.status.is_active();
        let out = f(job)?;
        if was_active
            && job.status.is_terminal()
            && let Some(sync) = &job.request.sync_id
            && let Some(s) = syncs.get_mut(&(tenant.to_owned(), sync.clone()))
        {
            s.job_ended(job);
        }
        Ok(out)
    }
}

impl JobStore for MemoryJobStore {
    fn insert<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<InsertOutcome>> {
        let out = self.check().map(|()| {
            let mut state = self.state.lock().unwrap();
            let JobsAndSyncs { jobs, syncs } = &mut *state;
            let active = jobs
                .values()
                .filter(|j| {
                    j.tenant_id == job.tenant_id
                        && j.request_hash == job.request_hash
                        && j.status.is_active()
                })
                .max_by_key(|j| j.created_at)
                .cloned();
            if let Some(existing) = active {
                return InsertOutcome::Duplicate(Box::new(existing));
            }
            if let Some(sync) = &job.request.sync_id {
                let s = syncs
                    .entry((job.tenant_id.clone(), sync.clone()))
                    .or_insert_with(|| SyncState::new(job, sync));
                if let Some(busy) = &s.active_job
                    && let Some(other) = jobs.get(&(job.tenant_id.clone(), *busy))
                {
                    return InsertOutcome::SyncBusy(Box::new(other.clone()));
                }
                if job.status.is_active() {
                    s.active_job = Some(job.id);
                }
            }
            jobs.insert((job.tenant_id.clone(), job.id), job.clone());
            InsertOutcome::Created
        });
        ready(out)
    }

    fn get<'a>(&'a self, tenant: &'a str, id: JobId) -> BoxFuture<'a, Result<Option<Job>>> {
        let out = self.check().map(|()| {
            self.state
                .lock()
                .unwrap()
                .jobs
                .get(&(tenant.to_owned(), id))
                .cloned()
        });
        ready(out)
    }

    fn find_recent_by_hash<'a>(
        &'a self,
        tenant: &'a str,
        hash: &'a str,
        since: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Job>>> {
        let out = self.check().map(|()| {
            self.state
                .lock()
                .unwrap()
                .jobs
                .values()
                .filter(|j| {
                    j.tenant_id == tenant && j.request_hash == hash && j.created_at >= since
                })
                .max_by_key(|j| j.created_at)
                .cloned()
        });
        ready(out)
    }

    fn claim<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        now: Timestamp,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ClaimOutcome>> {
        let out = self.check().map(|()| {
            let mut state = self.state.lock().unwrap();
            let Some(job) = state.jobs.get_mut(&(tenant.to_owned(), id)) else {
                return ClaimOutcome::NotFound;
            };
            match job.claim(now, lease) {
                Some(token) => ClaimOutcome::Claimed {
                    job: Box::new(job.clone()),
                    token,
                },
                None => ClaimOutcome::NotClaimable(Box::new(job.clone())),
            }
        });
        ready(out)
    }

    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        change: Transition<'a>,
    ) -> BoxFuture<'a, Result<bool>> {
        ready(self.with_job(tenant, id, |job| job.apply(&change)))
    }

    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        let out = self.check().map(|()| {
            let mut v: Vec<Job> = self
                .state
                .lock()
                .unwrap()
                .jobs
                .values()
                .filter(|j| j.status.is_terminal() && j.pending_event.is_some())
                .cloned()
                .collect();
            v.sort_by_key(|j| (j.completed_at, j.created_at));
            v.truncate(limit);
            v
        });
        ready(out)
    }

    fn list_created<'a>(
        &'a self,
        tenant: &'a str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Job>>> {
        let out = self.check().map(|()| {
            let mut v: Vec<Job> = self
                .state
                .lock()
                .unwrap()
                .jobs
                .values()
                .filter(|j| j.tenant_id == tenant && j.created_at >= from && j.created_at < to)
                .cloned()
                .collect();
            v.sort_by_key(|j| std::cmp::Reverse((j.created_at, j.id)));
            v.truncate(limit);
            v
        });
        ready(out)
    }

    fn has_active_jobs<'a>(
        &'a self,
        tenant: &'a str,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        let out = self.check().map(|()| {
            self.state.lock().unwrap().jobs.values().any(|j| {
                j.tenant_id == tenant
                    && j.status.is_active()
                    && j.request.mapped_fields.contains_key(config_name)
            })
        });
        ready(out)
    }

    fn list_pending<'a>(&'a self, now: Timestamp, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        let out = self.check().map(|()| {
            let mut v: Vec<Job> = self
                .state
                .lock()
                .unwrap()
                .jobs
                .values()
                .filter(|j| {
                    j.status == JobStatus::Pending
                        || (j.status == JobStatus::Processing
                            && j.lease_expires_at.is_none_or(|l| l <= now))
                })
                .cloned()
                .collect();
            v.sort_by_key(|j| j.created_at);
            v.truncate(limit);
            v
        });
        ready(out)
    }

    fn sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SyncState>>> {
        let out = self.check().map(|()| {
            let state = self.state.lock().unwrap();
            state
                .syncs
                .get(&(tenant.to_owned(), id.to_owned()))
                .cloned()
        });
        ready(out)
    }

    fn list_syncs<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SyncState>>> {
        let out = self.check().map(|()| {
            let state = self.state.lock().unwrap();
            state
                .syncs
                .range((tenant.to_owned(), after.unwrap_or_default().to_owned())..)
                .take_while(|((t, _), _)| t == tenant)
                .filter(|((_, id), _)| Some(id.as_str()) != after)
                .take(limit)
                .map(|(_, s)| s.clone())
                .collect()
        });
        ready(out)
    }

    fn reset_sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        tables: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<SyncState>> {
        let out = self.check().and_then(|()| {
            let mut state = self.state.lock().unwrap();
            let s = state
                .syncs
                .get_mut(&(tenant.to_owned(), id.to_owned()))
                .ok_or_else(|| ServiceError::not_found("sync not found"))?;
            if s.active_job.is_some() {
                return Err(ServiceError::conflict("a job of the sync is active"));
            }
            s.reset(tables);
            Ok(s.clone())
        });
        ready(out)
    }

    fn delete_sync<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<()>> {
        let out = self.check().and_then(|()| {
            let mut state = self.state.lock().unwrap();
            let key = (tenant.to_owned(), id.to_owned());
            match state.syncs.get(&key) {
                None => Err(ServiceError::not_found("sync not found")),
                Some(s) if s.active_job.is_some() => {
                    Err(ServiceError::conflict("a job of the sync is active"))
                }
                Some(_) => {
                    state.syncs.remove(&key);
                    Ok(())
                }
            }
        });
        ready(out)
    }
}

/// A queue backed by a channel; [`MemoryJobQueue::receiver`] hands out the consumer side.
pub struct MemoryJobQueue {
    tx: mpsc::UnboundedSender<QueueMessage>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<QueueMessage>>>,
    pub fail: AtomicBool,
    /// Closed for shutdown: takes nothing, says so.
    pub closed: AtomicBool,
    /// Closes on the next enqueue, refusing it (a job that loses the race with shutdown).
    pub close_on_enqueue: AtomicBool,
    sent: Mutex<Vec<QueueMessage>>,
    /// What [`JobQueue::depth`] answers; `None` (the default) counts every message sent
    /// (an in-memory queue does not see what its consumer took; a test says).
    pub depth: Mutex<Option<u64>>,
}

impl Default for MemoryJobQueue {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        MemoryJobQueue {
            tx,
            rx: Mutex::new(Some(rx)),
            fail: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            close_on_enqueue: AtomicBool::new(false),
            sent: Mutex::default(),
            depth: Mutex::default(),
        }
    }
}

impl MemoryJobQueue {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The consumer side (once).
    pub fn receiver(&self) -> Option<mpsc::UnboundedReceiver<QueueMessage>> {
        self.rx.lock().unwrap().take()
    }

    /// Every message enqueued so far.
    pub fn sent(&self) -> Vec<QueueMessage> {
        self.sent.lock().unwrap().clone()
    }
}

impl JobQueue for MemoryJobQueue {
    fn is_accepting(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }

    fn enqueue<'a>(&'a self, message: QueueMessage) -> BoxFuture<'a, Result<()>> {
        if self.close_on_enqueue.swap(false, Ordering::SeqCst) {
            self.closed.store(true, Ordering::SeqCst);
        }
        if self.fail.load(Ordering::SeqCst) || self.closed.load(Ordering::SeqCst) {
            return ready(Err(ServiceError::unavailable("job queue unavailable")));
        }
        self.sent.lock().unwrap().push(message.clone());
        let _ = self.tx.send(message);
        ready(Ok(()))
    }

    fn depth(&self) -> BoxFuture<'_, Result<Option<u64>>> {
        let held = self
            .depth
            .lock()
            .unwrap()
            .unwrap_or(self.sent.lock().unwrap().len() as u64);
        ready(Ok(Some(held)))
    }
}

/// Records published events; can be made to fail.
#[derive(Default)]
pub struct MemoryEventPublisher {
    events: Mutex<Vec<TerminalEvent>>,
    pub fail: AtomicBool,
    /// Jobs whose events fail (a partially failing batch).
    pub fail_jobs: Mutex<Vec<JobId>>,
}

impl MemoryEventPublisher {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn events(&self) -> Vec<TerminalEvent> {
        self.events.lock().unwrap().clone()
    }
}

impl EventPublisher for MemoryEventPublisher {
    fn publish<'a>(&'a self, event: &'a TerminalEvent) -> BoxFuture<'a, Result<()>> {
        if self.fail.load(Ordering::SeqCst)
            || self.fail_jobs.lock().unwrap().contains(&event.job_id)
        {
            return ready(Err(ServiceError::unavailable("event bus unavailable")));
        }
        self.events.lock().unwrap().push(event.clone());
        ready(Ok(()))
    }
}

/// Token buckets in a map.
#[derive(Default)]
pub struct MemoryRateLimiter {
    /// Theoretical arrival time per key, in nanoseconds since this limiter's epoch.
    buckets: Mutex<HashMap<String, i128>>,
    epoch: std::sync::OnceLock<Instant>,
}

impl MemoryRateLimiter {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }
}

impl RateLimiter for MemoryRateLimiter {
    fn hit<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision>> {
        let epoch = *self.epoch.get_or_init(Instant::now);
        let now = epoch.elapsed().as_nanos() as i128;
        let mut buckets = self.buckets.lock().unwrap();
        let (decision, tat) = gcra(buckets.get(key).copied(), now, limit, window);
        if let Some(tat) = tat {
            buckets.insert(key.to_owned(), tat);
        }
        ready(Ok(decision))
    }
}

/// Tenant slots in a map: per tenant, each live hold's end.
#[derive(Default)]
pub struct MemoryTenantSlots {
    holds: Mutex<HashMap<String, HashMap<String, Timestamp>>>,
}

impl MemoryTenantSlots {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }
}

impl TenantSlots for MemoryTenantSlots {
    fn acquire<'a>(
        &'a self,
        tenant: &'a str,
        cap: usize,
        until: Timestamp,
    ) -> BoxFuture<'a, Result<Option<SlotHold>>> {
        let now = Timestamp::now();
        let mut all = self.holds.lock().unwrap();
        let holds = all.entry(tenant.to_owned()).or_default();
        holds.retain(|_, end| *end > now);
        if holds.len() >= cap {
            return ready(Ok(None));
        }
        let hold = SlotHold::new();
        holds.insert(hold.token().to_owned(), until);
        ready(Ok(Some(hold)))
    }

    fn release<'a>(&'a self, tenant: &'a str, hold: &'a SlotHold) -> BoxFuture<'a, Result<()>> {
        if let Some(holds) = self.holds.lock().unwrap().get_mut(tenant) {
            holds.remove(hold.token());
        }
        ready(Ok(()))
    }
}

/// A fixed key ring.
pub struct StaticKeyProvider(pub Arc<KeyRing>);

impl KeyProvider for StaticKeyProvider {
    fn key_ring(&self) -> BoxFuture<'_, Result<Arc<KeyRing>>> {
        ready(Ok(self.0.clone()))
    }
}

/// Objects in a map; writes become visible on `finish`.
#[derive(Default)]
pub struct MemoryObjectStore {
    objects: Arc<Mutex<BTreeMap<String, Arc<Vec<u8>>>>>,
}

impl MemoryObjectStore {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn paths(&self) -> Vec<String> {
        self.objects.lock().unwrap().keys().cloned().collect()
    }
}

struct MemoryObjectWriter {
    path: String,
    buf: Vec<u8>,
    objects: Arc<Mutex<BTreeMap<String, Arc<Vec<u8>>>>>,
}

impl ObjectWriter for MemoryObjectWriter {
    fn write<'a>(&'a mut self, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.buf.extend_from_slice(bytes);
        ready(Ok(()))
    }

    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<u64>> {
        let len = self.buf.len() as u64;
        self.objects
            .lock()
            .unwrap()
            .insert(self.path, Arc::new(self.buf));
        ready(Ok(len))
    }

    fn abort(self: Box<Self>) -> BoxFuture<'static, ()> {
        ready(())
    }
}

struct MemoryObjectReader {
    data: Arc<Vec<u8>>,
    offset: usize,
}

const READ_CHUNK: usize = 64 * 1024;

impl ObjectReader for MemoryObjectReader {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>>> {
        if self.offset >= self.data.len() {
            return ready(Ok(None));
        }
        let end = (self.offset + READ_CHUNK).min(self.data.len());
        let chunk = self.data[self.offset..end].to_vec();
        self.offset = end;
        ready(Ok(Some(chunk)))
    }
}

impl ObjectStore for MemoryObjectStore {
    fn put<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Box<dyn ObjectWriter>>> {
        let out = validate_path(path).map(|()| {
            Box::new(MemoryObjectWriter {
                path: path.to_owned(),
                buf: Vec::new(),
                objects: self.objects.clone(),
            }) as Box<dyn ObjectWriter>
        });
        ready(out)
    }

    fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Box<dyn ObjectReader>>>> {
        let out = validate_path(path).map(|()| {
            self.objects.lock().unwrap().get(path).cloned().map(|data| {
                Box::new(MemoryObjectReader { data, offset: 0 }) as Box<dyn ObjectReader>
            })
        });
        ready(out)
    }

    fn delete<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<()>> {
        let out = validate_path(path).map(|()| {
            self.objects.lock().unwrap().remove(path);
        });
        ready(out)
    }

    fn head<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<u64>>> {
        let out = validate_path(path).map(|()| {
            self.objects
                .lock()
                .unwrap()
                .get(path)
                .map(|d| d.len() as u64)
        });
        ready(out)
    }
}
