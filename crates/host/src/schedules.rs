//! Schedule use cases (docs/api.md, "Schedules"): set, read, pause, resume and remove a
//! sync's schedule, and the tick that runs the due ones.
//!
//! A due run, in order:
//!
//! 1. **Claim.** One conditional write ([`ScheduleStore::save_schedule`]) moves the schedule's next
//!    run past `now`: of two schedulers (or two Lambda invocations) that see the same due
//!    run, one wins and the other moves on. Missed runs collapse: the next run is the first
//!    due time after `now`, whatever was missed before it.
//! 2. **Skip or create.** A sync whose previous job is still pending or processing gets no
//!    job (the run is recorded `skipped`, naming that job). Otherwise the job is created
//!    through the same path as `POST /v1/fetcher` ([`RunJob`], which the HTTP layer
//!    implements), its request hash carrying the due time, so that runs are not taken for
//!    duplicates of each other and one due time can never make two jobs.
//! 3. **Record.** The outcome is written on the schedule (conditional on the claim). A
//!    failure the caller must fix (a deleted connection, a request that no longer
//!    validates) counts; after [`MAX_CONSECUTIVE_FAILURES`] in a row the schedule pauses
//!    itself. A failure of ours (a store that did not answer) is recorded, not counted.
//!
//! A scheduler that dies between the claim and the job loses that due time's run (at most
//! one job per due time, never two); the next due time runs as usual.

use std::sync::Arc;

use fetcher_engine::{BoxFuture, Timestamp};

use crate::error::{ErrorKind, ServiceError};
use crate::model::{
    Cadence, EventType, JobId, MAX_CONSECUTIVE_FAILURES, RunOutcome, Schedule, ScheduleRun,
    ScheduleState, TerminalEvent,
};
use crate::ports::{EventPublisher, JobStore, SaveOutcome, ScheduleStore};

/// Most schedules one tick runs (the rest are due at the next tick, earliest first).
pub const TICK_BATCH: usize = 100;
/// Most scheduled syncs one freshness pass looks at (earliest next run first).
pub const FRESHNESS_LIMIT: usize = 1000;

/// How fresh one scheduled sync is ([`ScheduleService::freshness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFreshness {
    pub tenant_id: String,
    pub sync_id: String,
    /// Seconds since the sync's last completed job (since the schedule's start when none
    /// completed since).
    pub age_seconds: u64,
    /// The schedule's period.
    pub period_seconds: u64,
    pub stale: bool,
    /// `(config, table, bytes)` of each table read from the log: the log its slot
    /// retained when the sync's last job began.
    pub log_retained: Vec<(String, String, u64)>,
}

/// `(config, table, bytes)` of each of `sync`'s tables read from the log.
fn log_retained(sync: &crate::model::SyncState) -> Vec<(String, String, u64)> {
    sync.tables
        .iter()
        .flat_map(|(config, tables)| {
            tables.iter().filter_map(move |(table, t)| {
                let bytes = t.watermark.log.as_ref()?.retained_bytes?;
                Some((config.clone(), table.clone(), bytes))
            })
        })
        .collect()
}

/// Why a run created no job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunFailure {
    /// The sync's previous job is still pending or processing.
    Busy(JobId),
    /// The job could not be created: the API's code and safe message; `caller`: whether
    /// it is the caller's to fix (a 4xx), which is what counts toward self-pausing.
    Refused {
        code: String,
        message: String,
        caller: bool,
    },
}

/// Creates a schedule's job for the due time `due`, through the API's job creation.
pub trait RunJob: Send + Sync {
    fn create<'a>(
        &'a self,
        schedule: &'a Schedule,
        due: Timestamp,
    ) -> BoxFuture<'a, Result<JobId, RunFailure>>;
}

/// Why a schedule operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// No schedule of the sync (or one of another product: not the caller's to see).
    #[error("no schedule for this sync")]
    NotFound,
    /// The sync, or its schedule, runs another product's jobs.
    #[error("the sync runs another product's jobs")]
    OtherProduct,
    /// Another writer changed the schedule meanwhile, twice.
    #[error("the schedule changed meanwhile")]
    Conflict,
    #[error(transparent)]
    Store(#[from] ServiceError),
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    pub created: usize,
    pub skipped: usize,
    pub failed: usize,
    /// Due runs another scheduler claimed first.
    pub lost: usize,
    /// Schedules that paused themselves in this tick.
    pub paused: Vec<(String, String)>,
    /// Syncs found stale in this tick (their episode's `sync.stale` sent now).
    pub stale: Vec<(String, String)>,
}

/// The schedule use cases over a schedule store and the job store (for a sync's active job).
#[derive(Clone)]
pub struct ScheduleService {
    pub store: Arc<dyn ScheduleStore>,
    pub jobs: Arc<dyn JobStore>,
    /// Where `schedule.paused` and `sync.stale` go (docs/events.md, "Sync events"); `None`
    /// sends none. Best effort: a failed publish is logged, the run stands.
    pub events: Option<Arc<dyn EventPublisher>>,
}

impl ScheduleService {
    /// The schedule of a sync, if the caller's product may see it.
    pub async fn get(
        &self,
        tenant: &str,
        sync_id: &str,
        product: Option<&str>,
    ) -> Result<Schedule, ScheduleError> {
        match self.store.schedule(tenant, sync_id).await? {
            Some(s) if s.answers_to(product) => Ok(s),
            _ => Err(ScheduleError::NotFound),
        }
    }

    /// Sets (or replaces) a sync's schedule: `request` was validated by the caller as a
    /// job creation would be, and runs `product`'s jobs. A replaced schedule keeps its last
    /// run; it is active again, its failures forgotten, its rate counted from `now`.
    pub async fn set(
        &self,
        tenant: &str,
        sync_id: &str,
        product: &str,
        request: serde_json::Value,
        cadence: Cadence,
        now: Timestamp,
    ) -> Result<Schedule, ScheduleError> {
        if let Some(sync) = self.jobs.sync(tenant, sync_id).await?
            && !sync.answers_to(Some(product))
        {
            return Err(ScheduleError::OtherProduct);
        }
        for _ in 0..2 {
            let existing = self.store.schedule(tenant, sync_id).await?;
            if existing
                .as_ref()
                .is_some_and(|s| !s.answers_to(Some(product)))
            {
                return Err(ScheduleError::OtherProduct);
            }
            let mut schedule = Schedule {
                tenant_id: tenant.to_owned(),
                sync_id: sync_id.to_owned(),
                product: product.to_owned(),
                request: request.clone(),
                cadence: cadence.clone(),
                state: ScheduleState::Active,
                anchor: now,
                next_run_at: None,
                last_run: existing.as_ref().and_then(|s| s.last_run.clone()),
                consecutive_failures: 0,
                stale_since: existing.as_ref().and_then(|s| s.stale_since),
                version: existing.as_ref().map_or(1, |s| s.version + 1),
                updated_at: now,
            };
            schedule.next_run_at = schedule.due_after(now);
            if self.store.save_schedule(&schedule).await? == SaveOutcome::Saved {
                return Ok(schedule);
            }
        }
        Err(ScheduleError::Conflict)
    }

    /// Removes a sync's schedule (jobs it created are untouched).
    pub async fn delete(
        &self,
        tenant: &str,
        sync_id: &str,
        product: Option<&str>,
    ) -> Result<(), ScheduleError> {
        self.get(tenant, sync_id, product).await?;
        if self.store.delete_schedule(tenant, sync_id).await? {
            Ok(())
        } else {
            Err(ScheduleError::NotFound)
        }
    }

    /// Pauses a schedule: no run until it is resumed.
    pub async fn pause(
        &self,
        tenant: &str,
        sync_id: &str,
        product: Option<&str>,
        now: Timestamp,
    ) -> Result<Schedule, ScheduleError> {
        self.change(tenant, sync_id, product, |s| {
            s.state = ScheduleState::Paused;
            s.updated_at = now;
        })
        .await
    }

    /// Resumes a paused schedule (by its caller or by itself): its next run is the first
    /// due time after `now` (paused time is not caught up), its failures forgotten.
    pub async fn resume(
        &self,
        tenant: &str,
        sync_id: &str,
        product: Option<&str>,
        now: Timestamp,
    ) -> Result<Schedule, ScheduleError> {
        self.change(tenant, sync_id, product, |s| {
            if s.state != ScheduleState::Active {
                s.state = ScheduleState::Active;
                s.consecutive_failures = 0;
                s.next_run_at = s.due_after(now);
            }
            s.updated_at = now;
        })
        .await
    }

    async fn change(
        &self,
        tenant: &str,
        sync_id: &str,
        product: Option<&str>,
        f: impl Fn(&mut Schedule),
    ) -> Result<Schedule, ScheduleError> {
        for _ in 0..2 {
            let mut s = self.get(tenant, sync_id, product).await?;
            f(&mut s);
            s.version += 1;
            if self.store.save_schedule(&s).await? == SaveOutcome::Saved {
                return Ok(s);
            }
        }
        Err(ScheduleError::Conflict)
    }

    /// How fresh every actively scheduled sync is at `now` (at most [`FRESHNESS_LIMIT`]):
    /// what the hosts' freshness metrics report. One read of each sync.
    pub async fn freshness(&self, now: Timestamp) -> Result<Vec<SyncFreshness>, ServiceError> {
        // Every active schedule is in the due set of a time past all of them.
        let end_of_time = Timestamp::from_unix_nanos(i128::from(i64::MAX));
        let mut out = Vec::new();
        for s in self
            .store
            .due_schedules(end_of_time, FRESHNESS_LIMIT)
            .await?
        {
            let sync = self.jobs.sync(&s.tenant_id, &s.sync_id).await?;
            out.push(SyncFreshness {
                age_seconds: s.age_seconds(sync.as_ref(), now),
                period_seconds: s.cadence.period_seconds(now),
                stale: s.stale_since.is_some() || s.stale_by(sync.as_ref(), now).is_some(),
                log_retained: sync.as_ref().map(log_retained).unwrap_or_default(),
                tenant_id: s.tenant_id,
                sync_id: s.sync_id,
            });
        }
        Ok(out)
    }

    /// Runs every schedule due at `now` (at most [`TICK_BATCH`]).
    pub async fn tick(
        &self,
        now: Timestamp,
        runner: &dyn RunJob,
    ) -> Result<TickReport, ServiceError> {
        let mut report = TickReport::default();
        for schedule in self.store.due_schedules(now, TICK_BATCH).await? {
            self.run(schedule, now, runner, &mut report).await?;
        }
        Ok(report)
    }

    async fn run(
        &self,
        schedule: Schedule,
        now: Timestamp,
        runner: &dyn RunJob,
        report: &mut TickReport,
    ) -> Result<(), ServiceError> {
        let Some(due) = schedule.next_run_at.filter(|_| schedule.is_due(now)) else {
            return Ok(());
        };
        // 1. Claim the due time.
        let mut s = schedule;
        s.version += 1;
        s.next_run_at = s.due_after(now);
        s.updated_at = now;
        if self.store.save_schedule(&s).await? == SaveOutcome::Stale {
            report.lost += 1;
            return Ok(());
        }
        // 2. Skip or create; note whether the sync is behind.
        let sync = self.jobs.sync(&s.tenant_id, &s.sync_id).await?;
        let stale_by = s.stale_by(sync.as_ref(), now);
        let new_episode = stale_by.is_some() && s.stale_since.is_none();
        s.stale_since = stale_by.map(|_| s.stale_since.unwrap_or(now));
        let active = sync.and_then(|sync| sync.active_job);
        let outcome = match active {
            Some(job) => Err(RunFailure::Busy(job)),
            None => runner.create(&s, due).await,
        };
        // 3. Record.
        let mut run = ScheduleRun {
            due_at: due,
            ran_at: now,
            outcome: RunOutcome::Created,
            job_id: None,
            code: None,
            message: None,
        };
        match outcome {
            Ok(job) => {
                report.created += 1;
                run.job_id = Some(job);
                s.consecutive_failures = 0;
            }
            Err(RunFailure::Busy(job)) => {
                report.skipped += 1;
                run.outcome = RunOutcome::Skipped;
                run.job_id = Some(job);
            }
            Err(RunFailure::Refused {
                code,
                message,
                caller,
            }) => {
                report.failed += 1;
                run.outcome = RunOutcome::Failed;
                run.code = Some(code);
                run.message = Some(message);
                if caller {
                    s.consecutive_failures += 1;
                }
                if s.consecutive_failures >= MAX_CONSECUTIVE_FAILURES {
                    s.state = ScheduleState::PausedAfterFailures;
                    report.paused.push((s.tenant_id.clone(), s.sync_id.clone()));
                }
            }
        }
        tracing::info!(
            tenant_id = %s.tenant_id,
            sync_id = %s.sync_id,
            outcome = ?run.outcome,
            job_id = ?run.job_id,
            code = ?run.code,
            "schedule run"
        );
        let paused_now = s.state == ScheduleState::PausedAfterFailures;
        s.last_run = Some(run);
        s.version += 1;
        if self.store.save_schedule(&s).await? == SaveOutcome::Stale {
            // The schedule was replaced, paused or removed meanwhile: that write stands.
            tracing::info!(tenant_id = %s.tenant_id, sync_id = %s.sync_id, "schedule changed during its run; its outcome is not recorded");
            return Ok(());
        }
        if paused_now {
            self.announce(&s, EventType::SchedulePaused, now, stale_by)
                .await;
        }
        if new_episode {
            report.stale.push((s.tenant_id.clone(), s.sync_id.clone()));
            self.announce(&s, EventType::SyncStale, now, stale_by).await;
        }
        Ok(())
    }

    /// Sends a sync's event (best effort: a failure is logged, never fails the run).
    async fn announce(&self, s: &Schedule, kind: EventType, at: Timestamp, stale_by: Option<u64>) {
        let Some(events) = &self.events else { return };
        let period = s.cadence.period_seconds(at);
        let mut payload = serde_json::json!({
            "tenantId": s.tenant_id,
            "syncId": s.sync_id,
            "product": s.product,
            "state": s.state,
            "schedule": s.cadence,
            "periodSeconds": period,
            "lastRun": s.last_run,
            "consecutiveFailures": s.consecutive_failures,
            "at": at,
        });
        if let Some(age) = stale_by {
            payload["ageSeconds"] = age.into();
        }
        let episode = match kind {
            EventType::SyncStale => s.stale_since.unwrap_or(at),
            _ => at,
        };
        let event =
            TerminalEvent::about_sync(&s.tenant_id, &s.sync_id, kind, episode, payload.to_string());
        if let Err(e) = events.publish(&event).await {
            tracing::warn!(tenant_id = %s.tenant_id, sync_id = %s.sync_id, event = kind.as_str(), error = %e.log_detail(), "a sync event could not be published");
        }
    }
}

impl ScheduleError {
    /// The service error kind, for callers that map errors by kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ScheduleError::NotFound => ErrorKind::NotFound,
            ScheduleError::OtherProduct | ScheduleError::Conflict => ErrorKind::Conflict,
            ScheduleError::Store(e) => e.kind(),
        }
    }
}
