//! The repair pass: republishes terminal events a crash left in the outbox, and puts jobs
//! whose message was lost back on the queue ([`super::StrandedRules`]).

use std::time::Duration;

use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::Timestamp;
use tracing::{info, warn};

use super::{Pipeline, StrandedRules};
use crate::error::{ErrorKind, Result, ServiceError};
use crate::message;
use crate::model::*;

impl Pipeline {
    /// The stored terminal event of `job`, republished verbatim (under the
    /// rules of docs/events.md, "Delivery"): only once the terminal state is committed, and only if they agree.
    pub(super) fn stored_event(job: &Job) -> Result<Option<TerminalEvent>> {
        let Some(event) = &job.pending_event else {
            return Ok(None);
        };
        if !job.status.is_terminal() {
            return Err(ServiceError::conflict(
                "refusing to publish a terminal event without a committed terminal state",
            )
            .retryable(false));
        }
        if event.status != job.status {
            return Err(
                ServiceError::conflict("pending event does not match the job status")
                    .retryable(false),
            );
        }
        Ok(Some(TerminalEvent::new(
            &job.tenant_id,
            job.id,
            event.status,
            event.payload.clone(),
        )))
    }

    pub(super) async fn republish(&self, job: &Job) -> Result<()> {
        match Self::stored_event(job)? {
            Some(event) => self.publish_then_clear(&event).await,
            None => Ok(()),
        }
    }

    /// Puts stranded work back on `queue`, judged by each job's latest message, not its
    /// age ([`StrandedRules`]): a pending job whose message was dropped unused, is older
    /// than the queue's retention, or (the queue holding nothing at all) older than the
    /// grace; a processing job whose lease expired with no message sent since (its worker
    /// died; the claim cap ends a crash loop). Each re-enqueue is recorded on the job, so
    /// the next pass does not send it again. Messages are signed like the API's; a
    /// duplicate delivery is a no-op. Looks at up to `limit` jobs, oldest first; returns how
    /// many were re-enqueued.
    pub async fn requeue_stranded(
        &self,
        queue: &dyn crate::ports::JobQueue,
        rules: StrandedRules,
        limit: usize,
    ) -> Result<usize> {
        let now = Timestamp::now();
        let older =
            |t: Timestamp, d: Duration| now.unix_nanos() - t.unix_nanos() > d.as_nanos() as i128;
        let ring = self.keys.key_ring().await?;
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        // Asked once per pass, and only when a job could be judged by it.
        let mut depth: Option<Option<u64>> = None;
        let mut requeued = 0;
        for job in self.jobs.list_pending(now, limit).await? {
            let last = job.last_enqueued_at();
            let lost = match job.status {
                JobStatus::Pending if job.message_dropped_at.is_some() => true,
                JobStatus::Pending if older(last, rules.retention) => true,
                JobStatus::Pending if older(last, rules.empty_queue_grace) => {
                    if depth.is_none() {
                        depth = Some(queue.depth().await?);
                    }
                    depth == Some(Some(0))
                }
                // A fanned-out job is listed once no range (nor its finisher) holds a live
                // lease: its ranges wait for messages, so it is judged like a pending job,
                // and also lost when no message went out since its leases ended.
                JobStatus::Processing if job.fanout.is_some() => {
                    job.message_dropped_at.is_some()
                        || older(last, rules.retention)
                        || job.lease_expires_at.is_none_or(|l| last <= l)
                        || (older(last, rules.empty_queue_grace) && {
                            if depth.is_none() {
                                depth = Some(queue.depth().await?);
                            }
                            depth == Some(Some(0))
                        })
                }
                // Listed only once its lease expired: lost unless a message went out after.
                JobStatus::Processing => job.lease_expires_at.is_none_or(|l| last <= l),
                _ => false,
            };
            if !lost {
                continue;
            }
            queue
                .enqueue(message::encode(&job, &signer, "", message::unix_now()))
                .await?;
            let change = Transition::Requeued {
                at: Timestamp::now(),
            };
            if let Err(e) = self.jobs.transition(&job.tenant_id, job.id, change).await
                && e.kind() != ErrorKind::Conflict
            {
                warn!(job_id = %job.id, error = %e.log_detail(), "re-enqueued, but the enqueue could not be recorded; the next pass may send it again");
            }
            info!(job_id = %job.id, status = job.status.as_str(), "stranded job re-enqueued");
            requeued += 1;
        }
        Ok(requeued)
    }

    /// One repair pass: republishes up to `limit` pending terminal events in one
    /// [`EventPublisher::publish_batch`] call. Returns how many were published; failures
    /// are logged and left for the next pass.
    pub async fn repair_events(&self, limit: usize) -> Result<usize> {
        let mut events = Vec::new();
        for job in self.jobs.list_pending_events(limit).await? {
            match Self::stored_event(&job) {
                Ok(Some(event)) => events.push(event),
                Ok(None) => {}
                Err(e) => {
                    warn!(job_id = %job.id, error = %e.log_detail(), "terminal event repair refused")
                }
            }
        }
        let mut published = 0;
        let results = self.events.publish_batch(&events).await;
        if results.len() != events.len() {
            // The markers of the unanswered events stay for the next pass.
            warn!(
                events = events.len(),
                results = results.len(),
                "event publisher answered a batch partially"
            );
        }
        for (event, result) in events.iter().zip(results) {
            match result {
                Ok(()) => {
                    published += 1;
                    self.clear_marker(&event.tenant_id, event.job_id).await;
                }
                Err(e) => {
                    warn!(job_id = %event.job_id, error = %e.log_detail(), "terminal event repair failed");
                    match self
                        .jobs
                        .note_event_failure(
                            &event.tenant_id,
                            event.job_id,
                            self.config.max_event_attempts,
                        )
                        .await
                    {
                        Ok(true) => tracing::error!(
                            job_id = %event.job_id,
                            attempts = self.config.max_event_attempts,
                            "terminal event quarantined after repeated publish failures; it stays on the job (quarantinedEvent) for an operator"
                        ),
                        Ok(false) => {}
                        Err(e) => {
                            warn!(job_id = %event.job_id, error = %e.log_detail(), "could not count the failed publish")
                        }
                    }
                }
            }
        }
        Ok(published)
    }
}
