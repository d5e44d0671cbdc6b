//! The in-memory host ports pass the conformance suites every adapter runs
//! (`fetcher_host::testing`), so tests written against them stand for the real ones.

use std::sync::Arc;

use fetcher_host::memory::*;
use fetcher_host::ports::*;
use fetcher_host::testing::{self as suites, DeliveredEvent};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_job_store_conforms() {
    suites::job_store(&(MemoryJobStore::new() as Arc<dyn JobStore>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_takeover_loses_no_part() {
    suites::takeover_loses_no_part(MemoryJobStore::new() as Arc<dyn JobStore>).await;
}

#[tokio::test]
async fn memory_object_store_conforms() {
    suites::object_store(&(MemoryObjectStore::new() as Arc<dyn ObjectStore>)).await;
}

#[tokio::test]
async fn memory_rate_limiter_conforms() {
    suites::rate_limiter(&(MemoryRateLimiter::new() as Arc<dyn RateLimiter>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tenant_slots_conform() {
    suites::tenant_slots(&(MemoryTenantSlots::new() as Arc<dyn TenantSlots>)).await;
}

#[tokio::test]
async fn memory_job_queue_conforms() {
    let queue = MemoryJobQueue::new();
    let read = queue.clone();
    suites::job_queue(&(queue as Arc<dyn JobQueue>), move |_| {
        let sent = read.sent();
        Box::pin(async move { sent })
    })
    .await;
}

#[tokio::test]
async fn memory_event_publisher_conforms() {
    let publisher = MemoryEventPublisher::new();
    let read = publisher.clone();
    suites::event_publisher(&(publisher as Arc<dyn EventPublisher>), move |_| {
        let events = read
            .events()
            .into_iter()
            .map(|e| DeliveredEvent {
                detail: serde_json::from_str(&e.payload).unwrap(),
                id: e.id,
                detail_type: e.detail_type.as_str().to_owned(),
                tenant_id: e.tenant_id,
            })
            .collect();
        Box::pin(async move { events })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_schedule_store_conforms() {
    suites::schedule_store(&(MemoryScheduleStore::new() as Arc<dyn ScheduleStore>)).await;
}
