//! Steps 4 and 5: record the terminal state (completed, failed, canceled) in the same
//! conditional write as its pending event (the outbox marker), publish the event, clear the
//! marker.

use std::time::Duration;

use fetcher_engine::Timestamp;
use tracing::{info, warn};

use super::payload::{canceled_event, completed_payload, failed_payload};
use super::{Outcome, Pipeline};
use crate::error::{ErrorKind, Result};
use crate::model::*;
use crate::sanitize::sanitize;

impl Pipeline {
    pub(super) async fn complete(
        &self,
        job: &Job,
        token: u32,
        result: JobResult,
        elapsed: Duration,
    ) -> Outcome {
        if self.config.crash_before_complete {
            tracing::error!(job_id = %job.id, "FETCHER_TEST_CRASH_BEFORE_COMPLETE: aborting with the result stored and the job not completed");
            std::process::abort();
        }
        let at = Timestamp::now();
        let payload = completed_payload(
            job.id,
            &job.request.metadata,
            job.trace.as_ref(),
            &result,
            elapsed,
            at,
        );
        let event = PendingEvent {
            status: JobStatus::Completed,
            payload,
            failures: 0,
        };
        let completed = tracing::Instrument::instrument(
            self.jobs
                .complete(&job.tenant_id, job.id, token, &result, &event, at),
            tracing::info_span!("complete", rows = result.row_count),
        )
        .await;
        match completed {
            Ok(()) => {}
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                // The claim was lost: what this run wrote is its own (a takeover names its
                // parts and manifest by its claim), the manifest included when the job
                // records another.
                let mut own = result.parts.clone();
                if !result.parts.is_empty() {
                    own.push(fetcher_engine::ResultPart {
                        path: result.path.clone(),
                        ..Default::default()
                    });
                }
                self.discard_own(job, &own).await;
                return Outcome::Skipped("claim lost before completion");
            }
            Err(e) => return Outcome::Retry(e),
        }
        info!(job_id = %job.id, rows = result.row_count, bytes = result.size_bytes, ms = elapsed.as_millis() as u64, "job completed");
        if let Err(e) = self
            .publish_and_clear(&job.tenant_id, job.id, JobStatus::Completed, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Completed {
            job_id: job.id,
            rows: result.row_count,
            bytes: result.size_bytes,
            duration: elapsed,
            log_retained: result
                .watermarks
                .iter()
                .flat_map(|(config, tables)| tables.iter().map(move |(t, span)| (config, t, span)))
                .filter_map(|(config, table, span)| {
                    Some(super::SlotRetained {
                        tenant_id: job.tenant_id.clone(),
                        sync_id: job.request.sync_id.clone()?,
                        config: config.clone(),
                        table: table.clone(),
                        bytes: span.to_watermark.as_ref()?.log.as_ref()?.retained_bytes?,
                    })
                })
                .collect(),
        }
    }

    pub(super) async fn fail_claimed(&self, job: &Job, token: u32, error: &str) -> Outcome {
        let event = PendingEvent {
            status: JobStatus::Failed,
            payload: failed_payload(job.id, &job.request.metadata, job.trace.as_ref(), error),
            failures: 0,
        };
        match self
            .jobs
            .fail(
                &job.tenant_id,
                job.id,
                Some(token),
                error,
                &event,
                Timestamp::now(),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                // A cancel asked for meanwhile wins over the failure; otherwise the
                // claim was lost and the job is another worker's.
                return match self.cancel_claimed(job, token).await {
                    Outcome::Skipped(_) => Outcome::Skipped("claim lost before failing"),
                    canceled => canceled,
                };
            }
            Err(e) => return Outcome::Retry(e),
        }
        warn!(job_id = %job.id, error, "job failed");
        self.discard_checkpoint(job).await;
        if let Err(e) = self
            .publish_and_clear(&job.tenant_id, job.id, JobStatus::Failed, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Failed {
            job_id: job.id,
            error: error.to_owned(),
        }
    }

    /// Ends a claimed job whose cancel was asked for: `canceled`, with its `job.failed`
    /// event (error category `canceled`) through the outbox.
    pub(super) async fn cancel_claimed(&self, job: &Job, token: u32) -> Outcome {
        let event = canceled_event(job);
        let change = Transition::FinishCanceled {
            token,
            event: &event,
            at: Timestamp::now(),
        };
        match self.jobs.transition(&job.tenant_id, job.id, change).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Conflict => {
                return Outcome::Skipped("claim lost before canceling");
            }
            Err(e) => return Outcome::Retry(e),
        }
        info!(job_id = %job.id, "job canceled");
        self.discard_checkpoint(job).await;
        if let Err(e) = self
            .publish_and_clear(&job.tenant_id, job.id, JobStatus::Canceled, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Failed {
            job_id: job.id,
            error: CANCELED_ERROR.to_owned(),
        }
    }

    /// Fails a job that was never claimed (bad message); only a pending job changes.
    pub(super) async fn fail_unclaimed(
        &self,
        tenant: &str,
        job_id: JobId,
        metadata: &serde_json::Map<String, serde_json::Value>,
        error: &str,
    ) -> Outcome {
        let error = sanitize(error);
        let event = PendingEvent {
            status: JobStatus::Failed,
            payload: failed_payload(job_id, metadata, None, &error),
            failures: 0,
        };
        match self
            .jobs
            .fail(tenant, job_id, None, &error, &event, Timestamp::now())
            .await
        {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    crate::ErrorKind::Conflict | crate::ErrorKind::NotFound
                ) =>
            {
                return Outcome::Skipped("message rejected; job not pending");
            }
            Err(e) => return Outcome::Retry(e),
        }
        if let Err(e) = self
            .publish_and_clear(tenant, job_id, JobStatus::Failed, &event.payload)
            .await
        {
            return Outcome::Retry(e);
        }
        Outcome::Failed {
            job_id: job_id.to_owned(),
            error,
        }
    }

    pub(super) async fn publish_and_clear(
        &self,
        tenant: &str,
        job_id: JobId,
        status: JobStatus,
        payload: &str,
    ) -> Result<()> {
        self.publish_then_clear(&TerminalEvent::new(
            tenant,
            job_id,
            status,
            payload.to_owned(),
        ))
        .await
    }

    pub(super) async fn publish_then_clear(&self, event: &TerminalEvent) -> Result<()> {
        let span = tracing::info_span!("publish", event = event.detail_type.as_str());
        tracing::Instrument::instrument(self.events.publish(event), span).await?;
        self.clear_marker(&event.tenant_id, event.job_id).await;
        Ok(())
    }

    pub(super) async fn clear_marker(&self, tenant: &str, job_id: JobId) {
        if let Err(e) = self.jobs.clear_pending_event(tenant, job_id).await {
            // The event is out; a later repair pass would publish it again with the same
            // id, which subscribers deduplicate.
            warn!(%job_id, error = %e.log_detail(), "could not clear the pending-event marker");
        }
    }
}
