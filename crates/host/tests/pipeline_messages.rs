//! The pipeline's messages (docs/results.md, "Verification"): forged, unusable and
//! expired ones dropped without touching a job, a rotation's new key version, and the
//! repair pass re-sending lost messages (never a backlog's).

mod pipeline_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fetcher_crypto::{KeyPurpose, KeyRing, MessageSigner};
use fetcher_engine::*;
use fetcher_host::message;
use fetcher_host::model::*;
use fetcher_host::pipeline::*;
use fetcher_host::ports::*;
use pipeline_support::*;

#[tokio::test]
async fn a_bad_signature_is_dropped_without_a_retry_loop() {
    let w = world().await;
    let (job, mut msg) = submit(&w, None).await;
    msg.headers
        .insert("x-message-signature".into(), "00".repeat(32));
    let outcome = w.pipeline.handle(&msg).await;
    assert!(matches!(outcome, Outcome::Dropped { .. }), "{outcome:?}");
    assert!(!outcome.should_retry());
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(
        stored.status,
        JobStatus::Pending,
        "a forged message fails no job"
    );
    assert_eq!(w.factory.build_count(), 0, "nothing extracted");
    // The same forged message again: dropped again, no event.
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Dropped { .. }
    ));
    assert!(w.events.events().is_empty());
}

#[tokio::test]
async fn unusable_messages() {
    let w = world().await;
    // Signed, but the body names a datasource with no tables: the job fails.
    let mut req = JobRequest::default();
    req.mapped_fields.insert("pg".into(), Default::default());
    let job = Job::new("acme", req, "h".into());
    w.jobs.insert(&job).await.unwrap();
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let msg = message::encode(&job, &signer, "", message::unix_now());
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!()
    };
    assert!(error.contains("FET-0053"));
    // A message for an unknown job, and garbage: skipped.
    let ghost = Job::new(
        "acme",
        JobRequest {
            mapped_fields: job.request.mapped_fields.clone(),
            ..Default::default()
        },
        "g".into(),
    );
    let mut ghost_req = ghost.clone();
    ghost_req.request.mapped_fields.insert(
        "pg".into(),
        [("t".to_string(), vec!["id".to_string()])].into(),
    );
    let msg = message::encode(&ghost_req, &signer, "", message::unix_now());
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Skipped("job not found")
    ));
    let garbage = QueueMessage {
        headers: Default::default(),
        body: b"not json".to_vec(),
    };
    assert!(matches!(
        w.pipeline.handle(&garbage).await,
        Outcome::Dropped {
            reason: DropReason::InvalidSignature,
            ..
        }
    ));
}

#[tokio::test]
async fn stranded_work_is_requeued() {
    let w = world().await;
    let queue = fetcher_host::memory::MemoryJobQueue::new();
    // A pending job whose message is older than the queue keeps any, and a fresh one whose
    // message is in flight.
    let (lost, _) = submit(&w, None).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (fresh, _) = submit(&w, Some(ResultFormat::V1)).await;
    let rules = StrandedRules {
        retention: Duration::from_millis(20),
        empty_queue_grace: Duration::from_secs(300),
    };
    let n = w
        .pipeline
        .requeue_stranded(queue.as_ref(), rules, 100)
        .await
        .unwrap();
    assert_eq!(n, 1, "only the job whose message is gone");
    let sent = queue.sent();
    assert_eq!(sent[0].headers["jobId"], lost.id.to_string());
    // Recorded: the next pass does not send it again.
    assert_eq!(
        w.pipeline
            .requeue_stranded(queue.as_ref(), rules, 100)
            .await
            .unwrap(),
        0
    );
    // The re-enqueued message is a valid one: the job completes from it.
    assert!(matches!(
        w.pipeline.handle(&sent[0]).await,
        Outcome::Completed { .. }
    ));
    let _ = fresh;
}

#[tokio::test]
async fn an_expired_genuine_message_is_dropped_and_its_job_completes_later() {
    let w = world().await;
    let queue = fetcher_host::memory::MemoryJobQueue::new();
    // Waited in a backlog longer than the maximum message age (6 hours).
    let (job, old) = submit_aged(&w, Duration::from_secs(7 * 3600)).await;
    let out = w.pipeline.handle(&old).await;
    let Outcome::Dropped { reason, job_id } = out else {
        panic!("{out:?}")
    };
    assert_eq!(reason, DropReason::Expired);
    assert_eq!(job_id, Some(job.id));
    assert!(!out_retries(&w, &old).await, "never retried");
    // Not failed: still pending, marked for the repair pass, no event.
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Pending);
    assert!(j.message_dropped_at.is_some());
    assert!(w.events.events().is_empty());
    // The next repair pass sends a fresh message (the queue is busy: the mark decides),
    // and the job completes from it.
    let rules = StrandedRules::with_retention(Duration::from_secs(24 * 3600));
    assert_eq!(
        w.pipeline
            .requeue_stranded(queue.as_ref(), rules, 100)
            .await
            .unwrap(),
        1
    );
    let fresh = queue.sent().pop().unwrap();
    assert!(matches!(
        w.pipeline.handle(&fresh).await,
        Outcome::Completed { .. }
    ));
    assert_eq!(w.events.events().len(), 1, "one job.completed");
}

async fn out_retries(w: &World, msg: &QueueMessage) -> bool {
    w.pipeline.handle(msg).await.should_retry()
}

#[tokio::test]
async fn a_forged_message_for_an_existing_job_touches_nothing() {
    let w = world().await;
    let (job, genuine) = submit(&w, None).await;
    let mut forged = genuine.clone();
    forged
        .headers
        .insert("x-message-signature".into(), "00".repeat(32));
    let out = w.pipeline.handle(&forged).await;
    assert!(
        matches!(
            out,
            Outcome::Dropped {
                reason: DropReason::InvalidSignature,
                job_id: None
            }
        ),
        "{out:?}"
    );
    // The job is untouched: pending, unmarked, no event.
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(j, job);
    assert!(w.events.events().is_empty());
    // A forged message signed with another key: the same.
    let other = KeyRing::from_base64("ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=", "9").unwrap();
    let signer = MessageSigner::from_ring(&other, KeyPurpose::InternalHmac);
    let foreign = message::encode(&job, &signer, "", message::unix_now());
    assert!(matches!(
        w.pipeline.handle(&foreign).await,
        Outcome::Dropped {
            reason: DropReason::InvalidSignature,
            ..
        }
    ));
    assert_eq!(w.jobs.get("acme", job.id).await.unwrap().unwrap(), job);
    // The genuine message still completes it.
    assert!(matches!(
        w.pipeline.handle(&genuine).await,
        Outcome::Completed { .. }
    ));
}

#[tokio::test]
async fn a_backlog_is_not_mistaken_for_lost_messages() {
    let w = world().await;
    let queue = fetcher_host::memory::MemoryJobQueue::new();
    // 100 jobs pending for 20 minutes to an hour, their messages waiting in the queue.
    let mut backlog = Vec::new();
    for i in 0..100u64 {
        let (job, msg) = submit_aged(&w, Duration::from_secs(20 * 60 + i * 24)).await;
        backlog.push(job);
        queue.enqueue(msg).await.unwrap();
    }
    let rules = StrandedRules::with_retention(Duration::from_secs(6 * 3600));
    let before = queue.sent().len();
    for _ in 0..3 {
        let n = w
            .pipeline
            .requeue_stranded(queue.as_ref(), rules, 100)
            .await
            .unwrap();
        assert_eq!(n, 0, "a waiting message is not a lost one");
    }
    assert_eq!(queue.sent().len(), before, "no duplicate enqueued");
    // Were the queue empty, every one of them would be lost: each is sent once, once.
    *queue.depth.lock().unwrap() = Some(0);
    assert_eq!(
        w.pipeline
            .requeue_stranded(queue.as_ref(), rules, 100)
            .await
            .unwrap(),
        100
    );
    assert_eq!(
        w.pipeline
            .requeue_stranded(queue.as_ref(), rules, 100)
            .await
            .unwrap(),
        0,
        "each re-enqueue is recorded"
    );
    assert_eq!(queue.sent().len(), before + 100);
}

#[tokio::test]
async fn a_dead_workers_job_is_requeued_once() {
    let w = world().await;
    let queue = fetcher_host::memory::MemoryJobQueue::new();
    let (job, _) = submit(&w, None).await;
    claim_and_die(&w, &job).await;
    let rules = StrandedRules::with_retention(Duration::from_secs(6 * 3600));
    for expected in [1, 0, 0] {
        assert_eq!(
            w.pipeline
                .requeue_stranded(queue.as_ref(), rules, 100)
                .await
                .unwrap(),
            expected
        );
    }
}

/// Keys rotated since the cold start: the cached ring is the old one until reloaded.
struct RotatedKeys {
    cached: Arc<KeyRing>,
    fresh: Arc<KeyRing>,
    reloads: std::sync::atomic::AtomicUsize,
}

impl fetcher_host::ports::KeyProvider for RotatedKeys {
    fn key_ring(&self) -> BoxFuture<'_, fetcher_host::Result<Arc<KeyRing>>> {
        let ring = if self.reloads.load(Ordering::SeqCst) > 0 {
            &self.fresh
        } else {
            &self.cached
        };
        let ring = ring.clone();
        Box::pin(async move { Ok(ring) })
    }
    fn reload(&self) -> BoxFuture<'_, fetcher_host::Result<Arc<KeyRing>>> {
        self.reloads.fetch_add(1, Ordering::SeqCst);
        let ring = self.fresh.clone();
        Box::pin(async move { Ok(ring) })
    }
}

#[tokio::test]
async fn a_message_signed_after_a_rotation_reloads_the_ring_instead_of_failing() {
    use fetcher_crypto::{MasterKey, MasterKeys, VersionedMasterKey};
    let mut w = world().await;
    let key = |b: u8| MasterKey::from_bytes(vec![b; 32]).unwrap();
    let old = Arc::new(
        KeyRing::new(MasterKeys {
            current: VersionedMasterKey::new("1", key(1)).unwrap(),
            previous: vec![],
        })
        .unwrap(),
    );
    let fresh = Arc::new(
        KeyRing::new(MasterKeys {
            current: VersionedMasterKey::new("2", key(2)).unwrap(),
            previous: vec![VersionedMasterKey::new("1", key(1)).unwrap()],
        })
        .unwrap(),
    );
    let keys = Arc::new(RotatedKeys {
        cached: old,
        fresh: fresh.clone(),
        reloads: Default::default(),
    });
    w.pipeline.keys = keys.clone();
    let (job, _) = submit(&w, None).await;
    // The API, already on the new key, signs with version 2.
    let msg = message::encode(
        &job,
        &MessageSigner::from_ring(&fresh, KeyPurpose::InternalHmac),
        "",
        message::unix_now(),
    );
    let outcome = w.pipeline.handle(&msg).await;
    assert!(
        !matches!(outcome, Outcome::Failed { ref error, .. } if error.contains("signature")),
        "{outcome:?}"
    );
    assert_eq!(keys.reloads.load(Ordering::SeqCst), 1, "one reload");
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_ne!(j.error.as_deref(), Some("invalid message signature"));
    // A forged message is still dropped (the reload is bounded to one per message).
    let mut forged = message::encode(
        &job,
        &MessageSigner::from_ring(&fresh, KeyPurpose::InternalHmac),
        "",
        message::unix_now(),
    );
    forged.body.push(b' ');
    assert!(matches!(
        w.pipeline.handle(&forged).await,
        Outcome::Dropped { .. }
    ));
}
