//! The embedded adapters pass the same conformance suites as the in-memory ports.

use std::sync::Arc;

use fetcher_crypto::KeyRing;
use fetcher_embedded::{EventLog, InProcessQueue, LocalDirObjectStore, SqliteStore, event_line};
use fetcher_engine::ports::{ConnectionStore, ExecutionStore, ResultSink, SchemaCache};
use fetcher_engine::testing as engine_suites;
use fetcher_host::memory::StaticKeyProvider;
use fetcher_host::model::{JobId, JobStatus, TerminalEvent};
use fetcher_host::ports::*;
use fetcher_host::sink::SealedResultSink;
use fetcher_host::testing::{self as service_suites, DeliveredEvent};

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[tokio::test]
async fn sqlite_connection_store_conforms() {
    let s = SqliteStore::temporary().await.unwrap();
    engine_suites::connection_store(&(Arc::new(s) as Arc<dyn ConnectionStore>)).await;
}

#[tokio::test]
async fn sqlite_execution_store_conforms() {
    let s = SqliteStore::temporary().await.unwrap();
    engine_suites::execution_store(&(Arc::new(s) as Arc<dyn ExecutionStore>)).await;
}

#[tokio::test]
async fn sqlite_schema_cache_conforms() {
    let s = SqliteStore::temporary().await.unwrap();
    engine_suites::schema_cache(&(Arc::new(s) as Arc<dyn SchemaCache>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_job_store_conforms() {
    let s = SqliteStore::temporary().await.unwrap();
    service_suites::job_store(&(Arc::new(s) as Arc<dyn JobStore>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_takeover_loses_no_part() {
    let s = SqliteStore::temporary().await.unwrap();
    service_suites::takeover_loses_no_part(Arc::new(s) as Arc<dyn JobStore>).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schedule_store_conforms() {
    let s = SqliteStore::temporary().await.unwrap();
    service_suites::schedule_store(&(Arc::new(s) as Arc<dyn ScheduleStore>)).await;
}

#[tokio::test]
async fn sqlite_rate_limiter_conforms() {
    let s = SqliteStore::temporary().await.unwrap();
    service_suites::rate_limiter(&(Arc::new(s) as Arc<dyn RateLimiter>)).await;
}

#[tokio::test]
async fn sqlite_store_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let job = {
        let s = SqliteStore::open(&path).await.unwrap();
        let mut req = fetcher_host::model::JobRequest::default();
        req.mapped_fields.insert(
            "pg".into(),
            [("t".to_string(), vec!["id".to_string()])].into(),
        );
        let job = fetcher_host::model::Job::new("acme", req, "h".into());
        s.insert(&job).await.unwrap();
        job
    };
    let s = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        JobStore::get(&s, "acme", job.id).await.unwrap(),
        Some(job.clone())
    );
    let pending = s
        .list_pending(fetcher_engine::Timestamp::now(), 10)
        .await
        .unwrap();
    assert_eq!(pending.iter().map(|j| j.id).collect::<Vec<_>>(), [job.id]);
}

#[tokio::test]
async fn local_dir_object_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirObjectStore::new(dir.path());
    service_suites::object_store(&(Arc::new(store) as Arc<dyn ObjectStore>)).await;
    // No temporary files are left behind by aborted or finished writes.
    let mut leftovers = Vec::new();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(".tmp-") {
                leftovers.push(e.path());
            }
        }
    }
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// The `.tmp-*` files under `dir`.
fn tmp_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(".tmp-") {
                found.push(e.path());
            }
        }
    }
    found
}

#[tokio::test]
async fn unfinished_writes_are_swept_and_finished_objects_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirObjectStore::new(dir.path());
    let mut done = store.put("external-data/done.ndjson").await.unwrap();
    done.write(b"kept").await.unwrap();
    done.finish().await.unwrap();
    // A crash mid-write: the writer is dropped, neither finished nor aborted.
    for path in ["external-data/a.ndjson", "external-data/nested/b.ndjson"] {
        let mut w = store.put(path).await.unwrap();
        w.write(&[7u8; 4096]).await.unwrap();
        std::mem::forget(w);
    }
    assert_eq!(tmp_files(dir.path()).len(), 2);
    // Young files survive a sweep that asks for old ones (a live writer's file).
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(store.sweep_incomplete(hour).await.unwrap(), 0);
    assert_eq!(
        store
            .sweep_incomplete(std::time::Duration::ZERO)
            .await
            .unwrap(),
        2
    );
    assert!(tmp_files(dir.path()).is_empty());
    assert!(
        !dir.path().join("external-data/nested").exists(),
        "the crashed write's empty directory is swept"
    );
    assert_eq!(
        store.head("external-data/done.ndjson").await.unwrap(),
        Some(4)
    );
    // Readiness: writable, then not (the directory replaced by a file).
    store.check_writable().await.unwrap();
    assert!(tmp_files(dir.path()).is_empty(), "the probe leaves nothing");
    let broken = LocalDirObjectStore::new(dir.path().join("external-data/done.ndjson"));
    assert!(broken.check_writable().await.is_err());
}

#[tokio::test]
async fn sealed_result_sink_over_a_local_dir_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let ring = Arc::new(KeyRing::from_base64(KEY, "1").unwrap());
    let objects: Arc<dyn ObjectStore> = Arc::new(LocalDirObjectStore::new(dir.path()));
    let sink = SealedResultSink::new(objects.clone(), Arc::new(StaticKeyProvider(ring.clone())));
    let reader: engine_suites::ResultReader = Arc::new(move |r| {
        let (objects, ring) = (objects.clone(), ring.clone());
        Box::pin(async move {
            let sealed = read_all(objects.as_ref(), &r.path).await.ok()??;
            let hmac = r.integrity.as_ref().map(|i| i.signature.clone());
            let plain = fetcher_crypto::open_sealed(&ring, &sealed, None, hmac.as_deref()).ok()?;
            Some(plain.to_vec())
        })
    });
    engine_suites::result_sink(&(Arc::new(sink) as Arc<dyn ResultSink>), reader).await;
}

#[tokio::test]
async fn the_event_log_appends_one_line_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::new(dir.path().join("events.ndjson"));
    let j1 = JobId::new();
    let e1 = TerminalEvent::new(
        "acme",
        j1,
        JobStatus::Completed,
        r#"{"jobId":"j1","status":"completed"}"#.into(),
    );
    let e2 = TerminalEvent::new(
        "acme",
        JobId::new(),
        JobStatus::Failed,
        r#"{"jobId":"j2","status":"failed"}"#.into(),
    );
    log.publish(&e1).await.unwrap();
    log.publish(&e2).await.unwrap();
    let text = std::fs::read_to_string(dir.path().join("events.ndjson")).unwrap();
    assert_eq!(
        text,
        format!("{}{}", event_line(&e1).unwrap(), event_line(&e2).unwrap())
    );
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["id"], format!("fetcher.job.completed.{j1}"));
    assert_eq!(first["detail-type"], "job.completed");
    assert_eq!(first["detail"]["status"], "completed");
    let bad = TerminalEvent::new("acme", JobId::new(), JobStatus::Failed, "not json".into());
    assert!(log.publish(&bad).await.is_err());
}

#[tokio::test]
async fn the_event_log_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.ndjson");
    let log = Arc::new(EventLog::new(&path));
    service_suites::event_publisher(&(log as Arc<dyn EventPublisher>), move |_| {
        // A subscriber tails the file: one envelope per line.
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let events = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                DeliveredEvent {
                    id: v["id"].as_str().unwrap().to_owned(),
                    detail_type: v["detail-type"].as_str().unwrap().to_owned(),
                    tenant_id: v["tenantId"].as_str().unwrap().to_owned(),
                    detail: v["detail"].clone(),
                }
            })
            .collect();
        Box::pin(async move { events })
    })
    .await;
}

#[tokio::test]
async fn the_in_process_queue_conforms() {
    let queue = InProcessQueue::new();
    let worker_side = queue.clone();
    service_suites::job_queue(&(queue as Arc<dyn JobQueue>), move |n| {
        let q = worker_side.clone();
        Box::pin(async move {
            let mut got = Vec::new();
            while got.len() < n {
                match tokio::time::timeout(std::time::Duration::from_secs(5), q.recv()).await {
                    Ok(Some(m)) => got.push(m),
                    _ => break,
                }
            }
            got
        })
    })
    .await;
}

/// #52 item 7: a job whose parts go to a directory of its own (Parquet, long jobs) and
/// that fails leaves no directory: an aborted write removes the directories it left
/// empty, and so does deleting a job's last part; directories still holding something,
/// and the root, stay.
#[tokio::test]
async fn an_aborted_or_deleted_job_leaves_no_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirObjectStore::new(dir.path());
    let job = "external-data/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b";
    let mut part = store
        .put(&format!("{job}/part-0.parquet.v2"))
        .await
        .unwrap();
    part.write(b"row group").await.unwrap();
    part.finish().await.unwrap();
    let mut next = store
        .put(&format!("{job}/part-1.parquet.v2"))
        .await
        .unwrap();
    next.write(b"half").await.unwrap();
    next.abort().await;
    assert!(dir.path().join(job).is_dir(), "the finished part keeps it");
    store
        .delete(&format!("{job}/part-0.parquet.v2"))
        .await
        .unwrap();
    assert!(
        !dir.path().join(job).exists(),
        "{:?}",
        std::fs::read_dir(dir.path()).unwrap().collect::<Vec<_>>()
    );
    assert!(dir.path().is_dir(), "the root stays");
    // A write that fails before anything is finished leaves nothing either.
    let mut only = store
        .put(&format!("{job}/part-0.parquet.v2"))
        .await
        .unwrap();
    only.write(b"x").await.unwrap();
    only.abort().await;
    assert!(!dir.path().join(job).exists());
    // And a writer racing the removal still writes.
    let mut w = store
        .put(&format!("{job}/part-2.parquet.v2"))
        .await
        .unwrap();
    w.write(b"ok").await.unwrap();
    assert_eq!(w.finish().await.unwrap(), 2);
}
