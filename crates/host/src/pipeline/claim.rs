//! Step 2: claim the job, a conditional `pending → processing` with a lease (a crashed
//! run's expired lease is taken over; a terminal job makes the delivery a no-op; the claim
//! cap ends a job whose workers keep dying).

use fetcher_engine::{Context, Timestamp};
use tracing::warn;

use super::segment::{CHECKPOINT_MISMATCH, Continuation, continuation};
use super::{Outcome, Pipeline};
use crate::error::ServiceError;
use crate::message::Received;
use crate::model::*;
use crate::ports::*;

impl Pipeline {
    pub(super) async fn process(
        &self,
        r: Received,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let Received {
            tenant,
            job_id,
            message: m,
            request_id,
        } = r;
        let job = match self.jobs.get(&tenant, job_id).await {
            Ok(Some(j)) => j,
            Ok(None) => return Outcome::Skipped("job not found"),
            Err(e) => return Outcome::Retry(e),
        };
        if matches!(job.status, JobStatus::Failed | JobStatus::Canceled) {
            // A continued job that ended between segments (a cancel): its parts go.
            self.discard_checkpoint(&job).await;
        }
        if job.pending_event.is_some() {
            return match self.republish(&job).await {
                Ok(()) => Outcome::Skipped("terminal event republished"),
                Err(e) => Outcome::Retry(e),
            };
        }
        if job.status.is_terminal() {
            return Outcome::Skipped("job already terminal");
        }
        if job.fanout.is_some() {
            return self
                .process_range(job, &m, &request_id, stop, deadline)
                .await;
        }
        if m.range.is_some() {
            return Outcome::Skipped("range message of a job that is not split");
        }
        match continuation(&job, &m) {
            Continuation::Current => {}
            Continuation::Superseded => {
                return Outcome::Skipped("message of an earlier segment");
            }
            Continuation::Mismatch => {
                warn!(job_id = %job.id, "checkpoint does not match the continuation message; failing the job");
                let outcome = self
                    .fail_unclaimed(&tenant, job.id, &job.request.metadata, CHECKPOINT_MISMATCH)
                    .await;
                // Only a job this message failed loses its parts (a running one keeps
                // them: its worker holds the checkpoint they belong to).
                if matches!(outcome, Outcome::Failed { .. }) {
                    self.discard_checkpoint(&job).await;
                }
                return outcome;
            }
        }
        let claimed = tracing::Instrument::instrument(
            self.jobs
                .claim(&tenant, job.id, Timestamp::now(), self.config.lease),
            tracing::info_span!("claim"),
        )
        .await;
        let (job, token) = match claimed {
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
        if job.segment_claims() > self.config.max_attempts {
            let error = format!(
                "job abandoned: no attempt of {} finished",
                self.config.max_attempts
            );
            warn!(job_id = %job.id, attempts = job.attempts, "claim cap reached; failing the job");
            return self.fail_claimed(&job, token, &error).await;
        }
        self.run_claimed(job, token, &request_id, stop, deadline)
            .await
    }
}
