//! Step 1: verify the signed envelope and parse the job message; a forged or stale
//! message is dropped, touching no job (docs/results.md, "Verification").

use std::sync::Arc;

use fetcher_crypto::{KeyPurpose, MessageSigner, VerifyPolicy};
use fetcher_engine::{Context, Timestamp};
use tracing::{info, warn};

use super::{DropReason, Outcome, Pipeline};
use crate::error::ErrorKind;
use crate::message::{self, Rejected};
use crate::model::*;

impl Pipeline {
    /// Checks the envelope and parses the body; `Err` when the key ring cannot be read.
    pub(super) async fn verify(
        &self,
        msg: &QueueMessage,
    ) -> crate::Result<Result<message::Received, Rejected>> {
        let ring = self.keys.key_ring().await?;
        let policy = VerifyPolicy {
            max_age: self.config.max_message_age,
            ..VerifyPolicy::default()
        };
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac).with_policy(policy);
        let mut decoded = message::decode(msg, &signer, message::unix_now());
        if matches!(decoded, Err(Rejected::BadSignature(_))) {
            // Signed under a key version this ring may lack (a rotation since it was
            // loaded): verify once more against the ring loaded afresh.
            if let Ok(fresh) = self.keys.reload().await
                && !Arc::ptr_eq(&fresh, &ring)
            {
                let signer =
                    MessageSigner::from_ring(&fresh, KeyPurpose::InternalHmac).with_policy(policy);
                decoded = message::decode(msg, &signer, message::unix_now());
            }
        }
        Ok(decoded)
    }

    /// Runs a verified message's job, or drops a rejected one.
    pub(super) async fn handle_verified(
        &self,
        verified: crate::Result<Result<message::Received, Rejected>>,
        msg: &QueueMessage,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let decoded = match verified {
            Ok(decoded) => decoded,
            Err(e) => return Outcome::Retry(e),
        };
        match decoded {
            Ok(received) => self.process_in_share(received, msg, stop, deadline).await,
            Err(Rejected::BadSignature(e)) => {
                // Never retried, and no job is touched: a forged message must not be able
                // to fail someone's job. The job's genuine message is still on its way.
                warn!(error = %e, "job message dropped: invalid signature");
                Outcome::Dropped {
                    reason: DropReason::InvalidSignature,
                    job_id: None,
                }
            }
            Err(Rejected::Stale {
                tenant,
                job_id,
                signed_at,
            }) => {
                warn!(%job_id, signed_at = %signed_at, "job message dropped: authentic but older than the maximum message age; the repair pass sends its job a fresh one");
                self.note_dropped(&tenant, job_id, signed_at).await;
                Outcome::Dropped {
                    reason: DropReason::Expired,
                    job_id: Some(job_id),
                }
            }
            Err(Rejected::BadBody {
                tenant,
                job_id: Some(job_id),
                error,
            }) => {
                self.fail_unclaimed(&tenant, job_id, &serde_json::Map::new(), error.message())
                    .await
            }
            Err(Rejected::BadBody { job_id: None, .. }) => {
                Outcome::Skipped("unparseable job message")
            }
        }
    }

    /// Marks the job of an authentic message dropped unused, so the repair pass sends it a
    /// fresh one at its next run. Best effort: without the mark the repair pass still finds
    /// the job once its message is older than the queue's retention.
    pub(super) async fn note_dropped(&self, tenant: &str, job_id: JobId, signed_at: Timestamp) {
        let change = Transition::MessageDropped {
            signed_at,
            at: Timestamp::now(),
        };
        match self.jobs.transition(tenant, job_id, change).await {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict) => {}
            Err(e) => {
                warn!(%job_id, error = %e.log_detail(), "could not mark the job of a dropped message")
            }
        }
    }

    /// The queue gives up on `msg` (its last receive before the dead-letter queue): if it
    /// is authentic, its job is marked like a dropped message's, so the repair pass sends
    /// a fresh one instead of the job waiting for the retention to run out.
    pub async fn note_undelivered(&self, msg: &QueueMessage) {
        let Ok(ring) = self.keys.key_ring().await else {
            return;
        };
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        if let Some(a) = message::authentic(msg, &signer) {
            info!(job_id = %a.job_id, "job message leaves for the dead-letter queue; its job is marked for the repair pass");
            self.note_dropped(&a.tenant, a.job_id, a.signed_at).await;
        }
    }
}
