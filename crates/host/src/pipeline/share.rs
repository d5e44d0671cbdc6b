//! Between steps 1 and 2 on a host with per-tenant shares (the Lambda host): an authentic
//! message runs only while its tenant holds fewer than its share of the workers; past it,
//! the message is sent again with a delay and this delivery ends (docs/operations.md,
//! "Fair workers"). Whole jobs, continuations and ranges all count, so one tenant's
//! backlog cannot take every concurrent invocation.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fetcher_engine::{Context, Timestamp};
use tracing::{info, warn};

use super::{Outcome, Pipeline};
use crate::error::ServiceError;
use crate::message::Received;
use crate::model::*;
use crate::ports::*;

/// A tenant's share of the workers and how a message past it waits.
#[derive(Clone)]
pub struct TenantShare {
    pub slots: Arc<dyn TenantSlots>,
    /// Messages of one tenant that run at once (at least 1).
    pub per_tenant: usize,
    /// How long a message past its tenant's share waits before it is delivered again.
    pub defer: Duration,
}

/// The longest a hold lasts without a deadline: Lambda's own maximum run.
const HOLD_WITHOUT_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// When a hold taken now for a run ending at `deadline` ends: the deadline (the
/// invocation's end, less a margin) plus a minute, so a worker killed at its end frees
/// its slot shortly after, and a live one never loses it.
fn hold_end(deadline: Option<tokio::time::Instant>) -> Timestamp {
    let run = deadline
        .map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
        .unwrap_or(HOLD_WITHOUT_DEADLINE);
    Timestamp::from_system_time(SystemTime::now() + run + Duration::from_secs(60))
}

impl Pipeline {
    /// The pipeline giving each tenant at most `share.per_tenant` concurrent runs.
    /// Deferred messages are sent again through the pipeline's queue ([`Pipeline::with_queue`]).
    pub fn with_tenant_share(mut self, share: TenantShare) -> Self {
        self.tenant_share = Some(share);
        self
    }

    /// Step 2 and on, within the tenant's share when the host has one.
    pub(super) async fn process_in_share(
        &self,
        r: Received,
        msg: &QueueMessage,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let Some(share) = &self.tenant_share else {
            return self.process(r, stop, deadline).await;
        };
        let tenant = r.tenant.clone();
        let hold = match share
            .slots
            .acquire(&tenant, share.per_tenant.max(1), hold_end(deadline))
            .await
        {
            Ok(Some(hold)) => hold,
            Ok(None) => return self.defer(r.job_id, msg, share.defer).await,
            Err(e) => return Outcome::Retry(e),
        };
        let outcome = self.process(r, stop, deadline).await;
        if let Err(e) = share.slots.release(&tenant, &hold).await {
            // The hold ends by itself at the invocation's end.
            warn!(error = %e.log_detail(), "could not release the tenant's slot; it frees itself when the invocation ends");
        }
        outcome
    }

    /// A message past its tenant's share: sent again, unchanged (same signature, same
    /// id), to arrive after `delay`; this delivery is done. Without a queue to send it on,
    /// it comes back as a retry instead.
    async fn defer(&self, job_id: JobId, msg: &QueueMessage, delay: Duration) -> Outcome {
        let Some(queue) = &self.queue else {
            return Outcome::Retry(ServiceError::conflict(
                "the tenant runs its share of jobs already",
            ));
        };
        match queue.enqueue_after(msg.clone(), delay).await {
            Ok(()) => {
                info!(%job_id, delay_s = delay.as_secs(), "tenant at its share of workers; message deferred");
                Outcome::Deferred { job_id, delay }
            }
            Err(e) => Outcome::Retry(e),
        }
    }
}
