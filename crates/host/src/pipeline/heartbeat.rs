//! The lease heartbeat of a running job: renews the claim and writes progress every
//! interval, and stops the run when the lease is lost or a cancel is asked for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fetcher_engine::{Context, ExtractionProgress, Timestamp};
use tracing::{info, warn};

use super::Pipeline;
use crate::error::ErrorKind;
use crate::model::*;

impl Pipeline {
    /// Renews the claim and writes the run's progress every `progress_interval` (at
    /// most a third of the lease) while the run goes on. A renewal the store refuses as
    /// a conflict means the lease was lost (another worker took the job over); one that
    /// answers "cancel asked for" is a client's cancel. Either way the run's context is
    /// cancelled, so the extraction stops and stores nothing. Other renewal errors are
    /// retried at the next tick.
    pub(super) fn heartbeat(
        &self,
        job: &Job,
        token: u32,
        run: &Context,
        progress: Arc<ExtractionProgress>,
    ) -> Heartbeat {
        let (jobs, tenant, id, lease, run) = (
            self.jobs.clone(),
            job.tenant_id.clone(),
            job.id,
            self.config.lease,
            run.clone(),
        );
        let every = self.config.progress_interval.min(lease / 3);
        // A continued job's figures count its earlier segments too.
        let base = job
            .checkpoint
            .as_ref()
            .map(|c| (c.rows, c.bytes, c.tables_done));
        let total = super::segment::total_tables(job);
        // A fanned-out job's range holds its claim in the job record: its heartbeat is
        // that record's transition (a store's lease-item shortcut could never match it).
        let range = job.range.is_some();
        let state = Arc::new(HeartbeatState::default());
        let seen = state.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let until = Timestamp::from_unix_nanos(
                    Timestamp::now().unix_nanos() + lease.as_nanos() as i128,
                );
                let mut now = Progress::read(progress.snapshot(), Timestamp::now());
                if let Some((rows, bytes, tables)) = base {
                    now.rows += rows;
                    now.bytes += bytes;
                    now.tables_done += tables;
                    now.tables_total = total;
                }
                let renewed = if range {
                    let change = Transition::Renew {
                        token,
                        until,
                        progress: Some(now),
                    };
                    jobs.transition(&tenant, id, change).await
                } else {
                    jobs.renew(&tenant, id, token, until, Some(now)).await
                };
                match renewed {
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
}

/// The lease heartbeat of one run, as a value: dropping it (the run returned, panicked
/// or was aborted with its task) stops the renewals, so a dead run never keeps a job
/// `processing`.
pub(super) struct Heartbeat {
    pub(super) task: tokio::task::JoinHandle<()>,
    pub(super) state: Arc<HeartbeatState>,
}

/// What the heartbeat saw.
#[derive(Default)]
pub(super) struct HeartbeatState {
    pub(super) lost: AtomicBool,
    pub(super) cancel_requested: AtomicBool,
}

pub(super) struct HeartbeatEnd {
    pub(super) lost: bool,
    pub(super) cancel_requested: bool,
}

impl Heartbeat {
    /// Stops renewing; what it saw meanwhile.
    pub(super) fn stop(self) -> HeartbeatEnd {
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
