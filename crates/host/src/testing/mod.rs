//! Conformance suites for the host ports (feature `testing`): the in-memory ports, the
//! embedded SQLite/local-directory adapters and the DynamoDB/SQS/S3 adapters all run
//! these. Each suite panics on the first broken obligation; tenants and paths are unique
//! per run, so suites can share a real backend.
//!
//! The job-store suite, the longest, has a file of its own with its fixtures
//! ([`job_store`]); the others are here. An adapter crate runs them all through one
//! `testing` feature.

use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::Timestamp;
use fetcher_engine::testing::unique_tenant;

use crate::model::*;
use crate::ports::*;

mod job_store;
mod schedules;
mod takeover;
pub use job_store::job_store;
pub use schedules::{schedule_fixture, schedule_store};
pub use takeover::{CutOff, takeover_loses_no_part};

/// The [`ObjectStore`] obligations: streamed writes visible only after `finish`, abort
/// leaves nothing, reads return the bytes, delete, head, path validation.
pub async fn object_store(store: &Arc<dyn ObjectStore>) {
    let prefix = unique_tenant("obj").tenant_id;
    let path = format!("{prefix}/external-data/a.bin");
    assert!(store.get(&path).await.unwrap().is_none());
    assert_eq!(store.head(&path).await.unwrap(), None);

    let mut w = store.put(&path).await.unwrap();
    let mut expected = Vec::new();
    for (i, len) in [0usize, 1, 4096, 5 * 1024 * 1024 + 3, 17]
        .into_iter()
        .enumerate()
    {
        let chunk: Vec<u8> = (0..len).map(|j| (i * 13 + j) as u8).collect();
        w.write(&chunk).await.unwrap();
        expected.extend_from_slice(&chunk);
    }
    assert!(
        store.head(&path).await.unwrap().is_none(),
        "not visible before finish"
    );
    assert_eq!(w.finish().await.unwrap(), expected.len() as u64);
    assert_eq!(
        store.head(&path).await.unwrap(),
        Some(expected.len() as u64)
    );
    let got = read_all(store.as_ref(), &path).await.unwrap().unwrap();
    assert!(got == expected, "read back differs");

    // Overwrite replaces.
    let mut w = store.put(&path).await.unwrap();
    w.write(b"second").await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(
        read_all(store.as_ref(), &path).await.unwrap().unwrap(),
        b"second"
    );

    // Abort: nothing becomes visible.
    let aborted = format!("{prefix}/external-data/aborted.bin");
    let mut w = store.put(&aborted).await.unwrap();
    w.write(&vec![7u8; 1024 * 1024]).await.unwrap();
    w.abort().await;
    assert!(store.get(&aborted).await.unwrap().is_none());

    // Empty object.
    let empty = format!("{prefix}/empty");
    store.put(&empty).await.unwrap().finish().await.unwrap();
    assert_eq!(
        read_all(store.as_ref(), &empty).await.unwrap().unwrap(),
        Vec::<u8>::new()
    );

    // Delete (idempotent).
    store.delete(&path).await.unwrap();
    assert!(store.get(&path).await.unwrap().is_none());
    store.delete(&path).await.unwrap();

    // Path validation.
    for bad in ["", "/abs", "a/../b", "..", "a//b", "a/./b", "a\\b", "a\nb"] {
        assert!(store.put(bad).await.is_err(), "{bad:?} accepted");
        assert!(store.get(bad).await.is_err(), "{bad:?} accepted");
    }
}

/// The [`RateLimiter`] obligations: `limit` hits per window per key, then refusals with a
/// positive `retry_after`; keys are independent; the window resets.
pub async fn rate_limiter(limiter: &Arc<dyn RateLimiter>) {
    // A bucket of 4 tokens, one back every 2 s: wide enough that a slow store round
    // trip (an emulator on a busy machine) between two hits never returns a second one.
    let key = format!("test:{}", unique_tenant("rl").tenant_id);
    let (limit, window) = (4, Duration::from_secs(8));
    let interval = window / limit;
    for i in 0..limit {
        let d = limiter.hit(&key, limit, window).await.unwrap();
        assert!(d.allowed, "hit {i} allowed");
    }
    let d = limiter.hit(&key, limit, window).await.unwrap();
    assert!(!d.allowed, "the bucket is empty");
    // The next token is back within one interval, not at the end of a window.
    assert!(
        d.retry_after > Duration::ZERO && d.retry_after <= interval,
        "{:?}",
        d.retry_after
    );
    assert!(
        limiter
            .hit(&format!("{key}-other"), limit, window)
            .await
            .unwrap()
            .allowed,
        "keys are independent"
    );
    tokio::time::sleep(d.retry_after + Duration::from_millis(50)).await;
    assert!(
        limiter.hit(&key, limit, window).await.unwrap().allowed,
        "one token came back"
    );
    let d = limiter.hit(&key, limit, window).await.unwrap();
    assert!(!d.allowed, "only one");
    // Concurrent hits on a fresh key: exactly `limit` are allowed.
    let fresh = format!("{key}-race");
    let hits = (0..limit * 2).map(|_| {
        let (limiter, fresh) = (limiter.clone(), fresh.clone());
        tokio::spawn(async move { limiter.hit(&fresh, limit, window).await.unwrap().allowed })
    });
    let mut allowed = 0;
    for h in hits {
        allowed += u32::from(h.await.unwrap());
    }
    assert_eq!(allowed, limit, "atomic: no token handed out twice");
    // A zero limit refuses everything.
    assert!(
        !limiter
            .hit(&format!("{key}-zero"), 0, window)
            .await
            .unwrap()
            .allowed
    );
}

fn in_(d: Duration) -> Timestamp {
    Timestamp::from_system_time(std::time::SystemTime::now() + d)
}

/// The [`TenantSlots`] obligations: at most `cap` live holds per tenant, also when
/// taken concurrently; a release frees its slot (twice is harmless); a hold past its end
/// frees itself; tenants are independent.
pub async fn tenant_slots(slots: &Arc<dyn TenantSlots>) {
    let tenant = unique_tenant("slots").tenant_id;
    let later = move || in_(Duration::from_secs(600));
    let a = slots
        .acquire(&tenant, 2, later())
        .await
        .unwrap()
        .expect("first slot");
    let b = slots
        .acquire(&tenant, 2, later())
        .await
        .unwrap()
        .expect("second slot");
    assert_ne!(a, b, "each hold is its own");
    assert!(
        slots.acquire(&tenant, 2, later()).await.unwrap().is_none(),
        "the tenant holds its share"
    );
    let other = unique_tenant("slots").tenant_id;
    assert!(
        slots.acquire(&other, 2, later()).await.unwrap().is_some(),
        "another tenant has a share of its own"
    );
    slots.release(&tenant, &a).await.unwrap();
    slots.release(&tenant, &a).await.unwrap();
    let c = slots
        .acquire(&tenant, 2, later())
        .await
        .unwrap()
        .expect("a released slot is free");
    assert!(
        slots.acquire(&tenant, 2, later()).await.unwrap().is_none(),
        "one release frees one slot"
    );
    // A cap lowered since (a redeploy): nothing more until holds end.
    assert!(slots.acquire(&tenant, 1, later()).await.unwrap().is_none());
    slots.release(&tenant, &b).await.unwrap();
    slots.release(&tenant, &c).await.unwrap();

    // A hold whose holder died ends by itself.
    let brief = unique_tenant("slots").tenant_id;
    let soon = in_(Duration::from_millis(1500));
    slots.acquire(&brief, 1, soon).await.unwrap().expect("slot");
    assert!(slots.acquire(&brief, 1, later()).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(
        slots.acquire(&brief, 1, later()).await.unwrap().is_some(),
        "an ended hold frees its slot"
    );

    // Concurrent takers: exactly `cap` win.
    let race = unique_tenant("slots").tenant_id;
    let takers = (0..8).map(|_| {
        let (slots, race) = (slots.clone(), race.clone());
        tokio::spawn(async move { slots.acquire(&race, 3, later()).await.unwrap().is_some() })
    });
    let mut won = 0;
    for t in takers {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 3, "atomic: no slot handed out twice");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::*;

    #[tokio::test]
    async fn memory_job_store_conforms() {
        job_store(&(MemoryJobStore::new() as Arc<dyn JobStore>)).await;
    }

    #[tokio::test]
    async fn memory_object_store_conforms() {
        object_store(&(MemoryObjectStore::new() as Arc<dyn ObjectStore>)).await;
    }

    #[tokio::test]
    async fn memory_rate_limiter_conforms() {
        rate_limiter(&(MemoryRateLimiter::new() as Arc<dyn RateLimiter>)).await;
    }
}

/// How a subscriber sees one delivered event, whatever the transport: the event's own id
/// (`fetcher.job.<status>.<jobId>`), its detail-type, tenant and detail document.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveredEvent {
    pub id: String,
    pub detail_type: String,
    pub tenant_id: String,
    pub detail: serde_json::Value,
}

/// The [`EventPublisher`] obligations: every published event reaches the subscriber once
/// with its id, detail-type and tenant, its detail carrying every field of the payload; a
/// batch larger than one request of any transport (EventBridge takes 10) gives one
/// result per event, all delivered. `delivered(ids)` reads back what arrived for those
/// event ids (waiting, bounded, where delivery is asynchronous).
pub async fn event_publisher<F>(publisher: &Arc<dyn EventPublisher>, delivered: F)
where
    F: Fn(Vec<String>) -> fetcher_engine::BoxFuture<'static, Vec<DeliveredEvent>>,
{
    let tenant = unique_tenant("events").tenant_id;
    let make = |_: usize, status: JobStatus| {
        let id = JobId::new();
        let job = id.to_string();
        let payload = serde_json::json!({
            "jobId": job,
            "status": status.as_str(),
            "metadata": {"source": "conformance", "note": "ünïcödé <&>"},
        });
        TerminalEvent::new(&tenant, id, status, payload.to_string())
    };
    let one = make(0, JobStatus::Completed);
    publisher.publish(&one).await.expect("publish");
    let batch: Vec<TerminalEvent> = (1..=12)
        .map(|i| {
            make(
                i,
                if i % 3 == 0 {
                    JobStatus::Failed
                } else {
                    JobStatus::Completed
                },
            )
        })
        .collect();
    let results = publisher.publish_batch(&batch).await;
    assert_eq!(results.len(), batch.len(), "one result per event");
    assert!(
        results.iter().all(Result::is_ok),
        "every batched event published"
    );

    let all: Vec<&TerminalEvent> = std::iter::once(&one).chain(batch.iter()).collect();
    let got = delivered(all.iter().map(|e| e.id.clone()).collect()).await;
    for e in &all {
        let copies: Vec<&DeliveredEvent> = got.iter().filter(|d| d.id == e.id).collect();
        assert_eq!(copies.len(), 1, "{} delivered once", e.id);
        let d = copies[0];
        assert_eq!(d.detail_type, e.detail_type.as_str());
        assert_eq!(d.tenant_id, tenant);
        let payload: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
        for (k, v) in payload.as_object().unwrap() {
            assert_eq!(&d.detail[k], v, "detail.{k} of {}", e.id);
        }
    }
}

/// The [`JobQueue`] obligations: an accepting queue takes messages and hands each one to
/// the worker side with its headers (non-empty values) and body unchanged.
/// `received(n)` reads back at least `n` of the messages enqueued so far (waiting,
/// bounded, where delivery is asynchronous).
pub async fn job_queue<F>(queue: &Arc<dyn JobQueue>, received: F)
where
    F: Fn(usize) -> fetcher_engine::BoxFuture<'static, Vec<QueueMessage>>,
{
    assert!(queue.is_accepting(), "a new queue accepts work");
    let sent: Vec<QueueMessage> = (0..3)
        .map(|i| {
            let job = format!("{}-{i}", uuid::Uuid::new_v4());
            QueueMessage {
                headers: [
                    ("jobId".to_string(), job.clone()),
                    ("x-message-signature".to_string(), "ab".repeat(32)),
                    ("t".to_string(), "1700000000".to_string()),
                ]
                .into(),
                body: serde_json::json!({"jobId": job, "note": "ünïcödé \"quoted\""})
                    .to_string()
                    .into_bytes(),
            }
        })
        .collect();
    for m in &sent {
        queue.enqueue(m.clone()).await.expect("enqueue");
    }
    let got = received(sent.len()).await;
    for m in &sent {
        let job = &m.headers["jobId"];
        let copy = got
            .iter()
            .find(|g| g.headers.get("jobId") == Some(job))
            .unwrap_or_else(|| panic!("message for {job} received"));
        assert_eq!(copy, m, "headers and body unchanged");
    }
}
