//! The extraction pipeline on in-memory ports: results, events, redelivery, failures,
//! leases, progress and cancellation. One file: every case runs on the same `world()`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fetcher_crypto::{KeyPurpose, KeyRing, MessageSigner, Opener};
use fetcher_engine::memory::*;
use fetcher_engine::*;
use fetcher_host::memory::*;
use fetcher_host::message;
use fetcher_host::model::*;
use fetcher_host::pipeline::*;
use fetcher_host::ports::*;
use fetcher_host::sink::SealedResultSink;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

struct World {
    pipeline: Pipeline,
    jobs: Arc<MemoryJobStore>,
    events: Arc<MemoryEventPublisher>,
    objects: Arc<MemoryObjectStore>,
    ring: Arc<KeyRing>,
    factory: Arc<TemplateFactory>,
}

fn row(id: i64, name: &str) -> Row {
    Row::from_pairs([("id", Value::Int(id)), ("name", Value::from(name))])
}

async fn world() -> World {
    let ring = Arc::new(KeyRing::from_base64(KEY, "1").unwrap());
    let keys: Arc<dyn KeyProvider> = Arc::new(StaticKeyProvider(ring.clone()));
    let objects = MemoryObjectStore::new();
    let registry = MemoryRegistry::new();
    let factory = TemplateFactory::new(TemplateBehaviour {
        rows: [(
            "public.accounts".to_string(),
            vec![row(1, "ada"), row(2, "grace <&>")],
        )]
        .into(),
        schema: SchemaSnapshot {
            config_name: String::new(),
            tables: vec![TableSnapshot {
                name: "public.accounts".into(),
                fields: vec!["id".into(), "name".into()],
            }],
            captured_at: None,
        },
        ..Default::default()
    });
    registry.register("POSTGRESQL", factory.clone());
    let store = MemoryConnectionStore::new();
    let engine = Engine::builder()
        .connector_registry(registry)
        .connection_store(store.clone())
        .result_sink(Arc::new(SealedResultSink::new(
            objects.clone(),
            keys.clone(),
        )))
        .build()
        .unwrap();
    let tenant = TenantContext::new("acme").unwrap();
    let input = ConnectionInput {
        config_name: "pg".into(),
        datasource_type: "POSTGRESQL".into(),
        ..Default::default()
    };
    engine
        .create_connection(&Context::background(), &tenant, &input)
        .await
        .unwrap();
    let jobs = MemoryJobStore::new();
    let events = MemoryEventPublisher::new();
    let pipeline = Pipeline {
        engine,
        jobs: jobs.clone(),
        events: events.clone(),
        objects: objects.clone(),
        keys,
        config: PipelineConfig {
            lease: Duration::from_secs(60),
            ..Default::default()
        },
        table_format: Some(Arc::new(fetcher_parquet::ParquetFormat::new())),
    };
    World {
        pipeline,
        jobs,
        events,
        objects,
        ring,
        factory,
    }
}

async fn submit(w: &World, format: Option<ResultFormat>) -> (Job, QueueMessage) {
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        "pg".into(),
        [(
            "public.accounts".to_string(),
            vec!["id".to_string(), "name".to_string()],
        )]
        .into(),
    );
    req.metadata.insert("source".into(), "crm".into());
    req.result_format = format;
    let job = Job::new("acme", req, format!("hash-{}", uuid::Uuid::now_v7()));
    assert_eq!(w.jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let msg = message::encode(&job, &signer, "req-1", message::unix_now());
    (job, msg)
}

/// The stored result of a completed job of tenant `acme`.
async fn result_of(w: &World, id: &str) -> JobResult {
    let job = w.jobs.get("acme", id).await.unwrap().expect("job stored");
    job.result.expect("a completed job has a result")
}

async fn open_v2(w: &World, path: &str, job_id: &str, hmac: &str) -> Vec<u8> {
    let sealed = read_all(w.objects.as_ref(), path)
        .await
        .unwrap()
        .expect("object stored");
    let mut opener = Opener::new(&w.ring, job_id).expect_hmac(hmac);
    let mut plain = Vec::new();
    opener.update_into(&sealed, &mut plain).unwrap();
    opener.finish().unwrap();
    plain
}

const NDJSON: &str = "{\"config\":\"pg\",\"table\":\"public.accounts\",\"row\":{\"id\":1,\"name\":\"ada\"}}\n{\"config\":\"pg\",\"table\":\"public.accounts\",\"row\":{\"id\":2,\"name\":\"grace \\u003c\\u0026\\u003e\"}}\n";

#[tokio::test]
async fn a_job_completes_with_a_sealed_result_and_one_event() {
    let w = world().await;
    let (job, msg) = submit(&w, None).await;
    let outcome = w.pipeline.handle(&msg).await;
    let Outcome::Completed { rows, bytes, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!((rows, bytes), (2, NDJSON.len() as u64));

    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Completed);
    assert!(
        stored.pending_event.is_none(),
        "marker cleared after publishing"
    );
    let result = stored.result.unwrap();
    assert_eq!(
        result.path,
        format!("acme/external-data/{}.ndjson.v2", job.id)
    );
    assert_eq!(
        (result.format, result.row_count, result.size_bytes),
        (ResultFormat::V2, 2, NDJSON.len() as u64)
    );
    let plain = open_v2(&w, &result.path, &job.id, &result.hmac).await;
    assert_eq!(std::str::from_utf8(&plain).unwrap(), NDJSON);
    let sha: String = {
        use sha2::Digest;
        sha2::Sha256::digest(NDJSON.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    assert_eq!(result.digest, sha);
    // The sealed object (header, frames, trailer) is larger than its plaintext.
    assert!(result.stored_bytes > result.size_bytes, "{result:?}");
    assert_eq!(result.key_version, "1");

    let events = w.events.events();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e.id, format!("fetcher.job.completed.{}", job.id));
    assert_eq!(
        (e.detail_type.as_str(), e.tenant_id.as_str()),
        ("job.completed", "acme")
    );
    let payload: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
    assert_eq!(payload["jobId"], job.id.as_str());
    assert_eq!(payload["status"], "completed");
    assert_eq!(payload["metadata"], serde_json::json!({"source": "crm"}));
    assert_eq!(payload["result"]["path"], result.path.as_str());
    assert_eq!(payload["result"]["hmac"], result.hmac.as_str());
    assert_eq!(
        payload["result"]["integrity"],
        serde_json::json!({"algorithm": "HMAC-SHA256", "signature": result.hmac})
    );
    assert_eq!(
        payload["result"]["protection"],
        serde_json::json!({"encrypted": true, "mode": "adapter-managed", "appliedBy": "adapter"})
    );
    assert_eq!(payload["result"]["rowCount"], 2);
    assert_eq!(payload["result"]["format"], "json");
    assert!(payload["completedAt"].as_str().unwrap().ends_with('Z'));
    // Field order as the reference emits it.
    let prefix = format!(
        "{{\"jobId\":\"{}\",\"metadata\":{{\"source\":\"crm\"}},\"status\":\"completed\",\"result\":{{\"path\":",
        job.id
    );
    assert!(e.payload.starts_with(&prefix), "{}", e.payload);
    assert!(e.payload.contains("\"executionTimeMs\":") || e.payload.contains("},\"completedAt\":"));

    // Redelivery: no second result, no second event.
    let again = w.pipeline.handle(&msg).await;
    assert!(matches!(again, Outcome::Skipped(_)), "{again:?}");
    assert_eq!(w.events.events().len(), 1);
    assert_eq!(
        w.factory.build_count(),
        2,
        "planning + one run; the redelivery built nothing"
    );
}

#[tokio::test]
async fn v1_results_open_with_the_reference_procedure() {
    let w = world().await;
    let (job, msg) = submit(&w, Some(ResultFormat::V1)).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Completed { .. }
    ));
    let result = result_of(&w, &job.id).await;
    assert_eq!(result.path, format!("acme/external-data/{}.json", job.id));
    let object = read_all(w.objects.as_ref(), &result.path)
        .await
        .unwrap()
        .unwrap();
    let plain = fetcher_crypto::open_v1(w.ring.current(), &object, &result.hmac).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&plain).unwrap();
    assert_eq!(doc["pg"]["public.accounts"][1]["name"], "grace <&>");
    assert!(
        std::str::from_utf8(&plain)
            .unwrap()
            .starts_with("{\n  \"pg\": {")
    );
}

#[tokio::test]
async fn a_v1_result_stays_under_its_own_ceiling_when_v2_is_unbounded() {
    // v1 is built in memory; the deployment's ceiling (here the engine's 256 MiB, or
    // unbounded) does not lift it.
    let w = world().await;
    let w = World {
        pipeline: Pipeline {
            config: PipelineConfig {
                v1_max_result_bytes: 64,
                ..w.pipeline.config.clone()
            },
            ..w.pipeline
        },
        ..w
    };
    let (job, msg) = submit(&w, Some(ResultFormat::V1)).await;
    let outcome = w.pipeline.handle(&msg).await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    assert_eq!(w.events.events().last().unwrap().detail_type, "job.failed");
    // The same request as v2 streams and completes.
    let (_, msg) = submit(&w, Some(ResultFormat::V2)).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Completed { .. }
    ));
}

#[tokio::test]
async fn a_parquet_job_stores_one_sealed_file_per_table_and_a_sealed_manifest() {
    let w = world().await;
    let (job, msg) = submit(&w, Some(ResultFormat::Parquet)).await;
    let outcome = w.pipeline.handle(&msg).await;
    assert!(
        matches!(outcome, Outcome::Completed { rows: 2, .. }),
        "{outcome:?}"
    );
    let result = result_of(&w, &job.id).await;
    assert_eq!(result.format, ResultFormat::Parquet);
    assert_eq!(
        result.path,
        format!("acme/external-data/{}.manifest.json.v2", job.id)
    );
    assert_eq!(result.row_count, 2);
    assert_eq!(result.parts.len(), 1);
    let part = &result.parts[0];
    assert_eq!(
        (part.config.as_str(), part.table.as_str()),
        ("pg", "public.accounts")
    );
    assert_eq!(
        part.path,
        format!("acme/external-data/{}/part-00000.parquet.v2", job.id)
    );
    assert_eq!(part.row_count, 2);
    assert_eq!(result.size_bytes, part.size_bytes as u64);

    // The manifest opens with its HMAC and lists what the job record lists.
    let manifest = open_v2(&w, &result.path, &job.id, &result.hmac).await;
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest["format"], "parquet");
    assert_eq!(manifest["jobId"], job.id.as_str());
    assert_eq!(manifest["rowCount"], 2);
    assert_eq!(
        manifest["parts"],
        serde_json::to_value(&result.parts).unwrap()
    );
    // The part opens with its own HMAC, its SHA-256 is the plaintext's, and it is Parquet.
    let file = open_v2(&w, &part.path, &job.id, &part.hmac).await;
    assert_eq!(file.len() as i64, part.size_bytes);
    assert_eq!(
        (&file[..4], &file[file.len() - 4..]),
        (&b"PAR1"[..], &b"PAR1"[..])
    );
    let sha: String = {
        use sha2::Digest;
        sha2::Sha256::digest(&file)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    assert_eq!(part.sha256, sha);

    let events = w.events.events();
    let payload: serde_json::Value = serde_json::from_str(&events[0].payload).unwrap();
    assert_eq!(payload["result"]["format"], "parquet");
    assert_eq!(payload["result"]["sealedFormat"], "v2");
    assert_eq!(payload["result"]["parts"], manifest["parts"]);

    // The same data gives the same file, byte for byte.
    let (again, msg) = submit(&w, Some(ResultFormat::Parquet)).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Completed { .. }
    ));
    let second = result_of(&w, &again.id).await;
    assert_eq!(second.parts[0].sha256, part.sha256);
}

#[tokio::test]
async fn a_parquet_job_fails_cleanly_on_a_host_without_the_writer() {
    let w = world().await;
    let w = World {
        pipeline: Pipeline {
            table_format: None,
            config: PipelineConfig {
                max_attempts: 1,
                ..Default::default()
            },
            ..w.pipeline
        },
        ..w
    };
    let (job, msg) = submit(&w, Some(ResultFormat::Parquet)).await;
    let outcome = w.pipeline.handle(&msg).await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    assert!(
        stored
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("parquet"),
        "{:?}",
        stored.error
    );
}

#[tokio::test]
async fn a_failing_extraction_fails_the_job_with_a_sanitised_error() {
    let w = world().await;
    w.factory.behaviour.lock().unwrap().fail_query = true;
    let w = World {
        pipeline: Pipeline {
            config: PipelineConfig {
                max_attempts: 1,
                ..Default::default()
            },
            ..w.pipeline
        },
        ..w
    };
    let (job, msg2) = submit(&w, None).await;
    let outcome = w.pipeline.handle(&msg2).await;
    let Outcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(error, "engine: [unavailable] failed to query datasource");
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    assert_eq!(stored.error.as_deref(), Some(error.as_str()));
    let events = w.events.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, format!("fetcher.job.failed.{}", job.id));
    let payload: serde_json::Value = serde_json::from_str(&events[0].payload).unwrap();
    assert_eq!(payload["metadata"]["error"]["message"], error.as_str());
    assert_eq!(payload["metadata"]["source"], "crm");
    assert!(payload.get("result").is_none() && payload.get("completedAt").is_none());
    assert!(!events[0].payload.contains("hunter2") && !events[0].payload.contains("10.1.2.3"));
    assert!(
        w.objects.paths().is_empty(),
        "nothing stored for a failed run"
    );
}

#[tokio::test]
async fn retryable_failures_release_the_claim_then_fail_after_max_attempts() {
    let mut w = world().await;
    w.pipeline.config.max_attempts = 3;
    w.factory.behaviour.lock().unwrap().fail_query = true;
    let (job, msg) = submit(&w, None).await;
    for attempt in 1..=2 {
        let outcome = w.pipeline.handle(&msg).await;
        assert!(outcome.should_retry(), "attempt {attempt}: {outcome:?}");
        let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
        assert_eq!((j.status, j.attempts), (JobStatus::Pending, attempt));
    }
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Failed { .. }
    ));
    assert_eq!(w.events.events().len(), 1);
    // A non-retryable failure fails at once.
    let (bad, msg) = {
        let mut req = JobRequest::default();
        req.mapped_fields.insert(
            "pg".into(),
            [("public.nope".to_string(), vec!["id".to_string()])].into(),
        );
        let job = Job::new("acme", req, "h2".into());
        w.jobs.insert(&job).await.unwrap();
        let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
        let m = message::encode(&job, &signer, "", message::unix_now());
        (job, m)
    };
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!()
    };
    assert_eq!(
        error,
        "engine: [validation] extraction request failed schema validation: unknown table 'pg.public.nope'"
    );
    assert_eq!(
        w.jobs.get("acme", &bad.id).await.unwrap().unwrap().attempts,
        1
    );
}

#[tokio::test]
async fn a_bad_signature_is_dropped_without_a_retry_loop() {
    let w = world().await;
    let (job, mut msg) = submit(&w, None).await;
    msg.headers
        .insert("x-message-signature".into(), "00".repeat(32));
    let outcome = w.pipeline.handle(&msg).await;
    assert!(matches!(outcome, Outcome::Dropped { .. }), "{outcome:?}");
    assert!(!outcome.should_retry());
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
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
async fn an_unpublished_event_is_republished_by_redelivery_or_repair() {
    let w = world().await;
    w.events.fail.store(true, Ordering::SeqCst);
    let (job, msg) = submit(&w, None).await;
    assert!(w.pipeline.handle(&msg).await.should_retry());
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(
        stored.status,
        JobStatus::Completed,
        "the result is recorded"
    );
    let marker = stored.pending_event.clone().expect("marker kept");
    w.events.fail.store(false, Ordering::SeqCst);
    // Redelivery republishes the stored payload verbatim; extraction is not repeated.
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Skipped("terminal event republished")
    ));
    assert_eq!(w.events.events()[0].payload, marker.payload);
    assert_eq!(w.factory.build_count(), 2);
    assert!(
        w.jobs
            .get("acme", &job.id)
            .await
            .unwrap()
            .unwrap()
            .pending_event
            .is_none()
    );

    // The repair pass does the same for markers nobody redelivers.
    w.events.fail.store(true, Ordering::SeqCst);
    let (job2, msg2) = submit(&w, None).await;
    assert!(w.pipeline.handle(&msg2).await.should_retry());
    w.events.fail.store(false, Ordering::SeqCst);
    assert_eq!(w.pipeline.repair_events(25).await.unwrap(), 1);
    assert_eq!(w.pipeline.repair_events(25).await.unwrap(), 0);
    assert_eq!(
        w.events.events().last().unwrap().id,
        format!("fetcher.job.completed.{}", job2.id)
    );
}

#[tokio::test]
async fn a_repair_pass_clears_only_the_markers_of_published_events() {
    let w = world().await;
    w.events.fail.store(true, Ordering::SeqCst);
    let mut jobs = Vec::new();
    for _ in 0..3 {
        let (job, msg) = submit(&w, None).await;
        assert!(w.pipeline.handle(&msg).await.should_retry());
        jobs.push(job.id);
    }
    w.events.fail.store(false, Ordering::SeqCst);
    w.events.fail_jobs.lock().unwrap().push(jobs[1].clone());
    assert_eq!(w.pipeline.repair_events(25).await.unwrap(), 2);
    let marker = |id: &str| {
        let jobs = w.jobs.clone();
        let id = id.to_owned();
        async move {
            jobs.get("acme", &id)
                .await
                .unwrap()
                .unwrap()
                .pending_event
                .is_some()
        }
    };
    assert!(!marker(&jobs[0]).await);
    assert!(marker(&jobs[1]).await, "the failed event keeps its marker");
    assert!(!marker(&jobs[2]).await);
    w.events.fail_jobs.lock().unwrap().clear();
    assert_eq!(w.pipeline.repair_events(25).await.unwrap(), 1);
    assert!(!marker(&jobs[1]).await);
    let ids: Vec<String> = w.events.events().iter().map(|e| e.job_id.clone()).collect();
    assert_eq!(ids.len(), 3, "each event published once: {ids:?}");
    assert_eq!(ids.last(), Some(&jobs[1]));
}

#[tokio::test]
async fn a_crashed_runs_lease_is_taken_over() {
    let w = world().await;
    let (job, msg) = submit(&w, None).await;
    // Simulate a worker that claimed the job and died.
    let long_ago = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() - 3_600_000_000_000);
    assert!(matches!(
        w.jobs
            .claim("acme", &job.id, long_ago, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    let outcome = w.pipeline.handle(&msg).await;
    assert!(matches!(outcome, Outcome::Completed { .. }), "{outcome:?}");
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (JobStatus::Completed, 2));

    // A live lease held by someone else: come back later.
    let (job2, msg2) = submit(&w, None).await;
    assert!(matches!(
        w.jobs
            .claim("acme", &job2.id, Timestamp::now(), Duration::from_secs(600))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    assert!(w.pipeline.handle(&msg2).await.should_retry());
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
async fn retryable_failures_are_retried_within_the_budget_only() {
    let mut w = world().await;
    w.factory.behaviour.lock().unwrap().fail_query = true;
    // Inside the budget: retried, far beyond the reference's three attempts.
    let (job, msg) = submit(&w, None).await;
    for attempt in 1..=6 {
        let outcome = w.pipeline.handle(&msg).await;
        assert!(outcome.should_retry(), "attempt {attempt}: {outcome:?}");
        let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
        assert_eq!((j.status, j.attempts), (JobStatus::Pending, attempt));
    }
    // Past the budget: the next retryable failure fails the job, with its event.
    w.pipeline.config.retry_budget = Duration::ZERO;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Failed { .. }
    ));
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(w.events.events().len(), 1);
}

#[tokio::test]
async fn a_job_out_of_retries_fails_with_its_first_error() {
    let mut w = world().await;
    let (job, msg) = submit(&w, None).await;
    // First the datasource cannot be reached, then it answers but queries fail.
    w.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Connect);
    assert!(w.pipeline.handle(&msg).await.should_retry());
    let first = w
        .jobs
        .get("acme", &job.id)
        .await
        .unwrap()
        .unwrap()
        .first_error;
    let first = first.expect("the first error is kept");
    {
        let mut b = w.factory.behaviour.lock().unwrap();
        b.fail_discover = None;
        b.fail_query = true;
    }
    assert!(w.pipeline.handle(&msg).await.should_retry());
    w.pipeline.config.retry_budget = Duration::ZERO;
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!("out of retries")
    };
    assert_eq!(
        error, first,
        "the first meaningful category, not the last attempt's"
    );
    assert!(error.contains("[connect]"), "{error}");
}

/// Claims `job` with a lease that expires at once: a worker that died.
async fn claim_and_die(w: &World, job: &Job) {
    let now = fetcher_engine::Timestamp::now();
    let ClaimOutcome::Claimed { .. } = w
        .jobs
        .claim("acme", &job.id, now, Duration::from_millis(1))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
}

#[tokio::test]
async fn a_job_whose_workers_keep_dying_fails_at_the_claim_cap() {
    let mut w = world().await;
    w.pipeline.config.max_attempts = 2;
    w.pipeline.config.lease = Duration::from_millis(1);
    let (job, msg) = submit(&w, None).await;
    // Two claims whose workers "died": the lease just expires.
    for _ in 0..2 {
        claim_and_die(&w, &job).await;
    }
    // The next delivery would be the third claim: over the cap, the job fails, once, with
    // its event; a later delivery is a no-op.
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!("over the claim cap")
    };
    assert!(error.contains("abandoned"), "{error}");
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(w.events.events().len(), 1);
    assert!(!w.pipeline.handle(&msg).await.should_retry());
    assert_eq!(w.events.events().len(), 1);
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
    assert_eq!(sent[0].headers["jobId"], lost.id);
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

/// A pending job created `ago` in the past (its message sent then).
async fn submit_aged(w: &World, ago: Duration) -> (Job, QueueMessage) {
    let (mut job, _) = submit(w, None).await;
    job.id = uuid::Uuid::now_v7().to_string();
    job.request_hash = format!("hash-{}", job.id);
    job.created_at = fetcher_engine::Timestamp::from_unix_nanos(
        fetcher_engine::Timestamp::now().unix_nanos() - ago.as_nanos() as i128,
    );
    assert_eq!(w.jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let signed_at = message::unix_now() - ago.as_secs() as i64;
    (job.clone(), message::encode(&job, &signer, "", signed_at))
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
    assert_eq!(job_id.as_deref(), Some(job.id.as_str()));
    assert!(!out_retries(&w, &old).await, "never retried");
    // Not failed: still pending, marked for the repair pass, no event.
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
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
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
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
    assert_eq!(w.jobs.get("acme", &job.id).await.unwrap().unwrap(), job);
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
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
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

#[tokio::test]
async fn an_event_that_never_publishes_is_quarantined_not_retried_forever() {
    let mut w = world().await;
    w.pipeline.config.max_event_attempts = 3;
    let (job, msg) = submit(&w, None).await;
    w.events.fail.store(true, Ordering::SeqCst);
    let _ = w.pipeline.handle(&msg).await; // completes; its event cannot go out
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert!(j.pending_event.is_some(), "left in the outbox");
    // Each repair pass fails to publish it; the third sets it aside.
    for pass in 1..=3 {
        assert_eq!(
            w.pipeline.repair_events(10).await.unwrap(),
            0,
            "pass {pass}"
        );
    }
    let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(j.pending_event, None);
    assert_eq!(j.quarantined_event.as_ref().map(|e| e.failures), Some(3));
    assert!(
        w.jobs.list_pending_events(10).await.unwrap().is_empty(),
        "its slot is free"
    );
    assert_eq!(
        j.status,
        JobStatus::Completed,
        "the job itself stays completed"
    );
}

#[tokio::test]
async fn a_lost_lease_cancels_the_run_and_stores_nothing() {
    let mut w = world().await;
    w.pipeline.config.lease = Duration::from_millis(300);
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    // Wait for the claim, then let another worker take the job over, as it would once
    // this run's lease had expired (a stalled process).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while w.jobs.get("acme", &job.id).await.unwrap().unwrap().status != JobStatus::Processing {
        assert!(std::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let later = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() + 3_600_000_000_000);
    assert!(matches!(
        w.jobs
            .claim("acme", &job.id, later, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    // The next renewal (a third of the lease) finds the claim gone and cancels the run.
    let outcome = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the run stops once its lease is lost")
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Skipped("lease lost")),
        "{outcome:?}"
    );
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (JobStatus::Processing, 2));
    assert!(w.objects.paths().is_empty(), "nothing stored");
    assert!(w.events.events().is_empty());
}

#[tokio::test]
async fn an_aborted_run_stops_renewing_its_lease() {
    let mut w = world().await;
    w.pipeline.config.lease = Duration::from_millis(300);
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    let lease = |j: Job| j.lease_expires_at.map(|t| t.unix_nanos());
    // Renewed while the run lives…
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let first = loop {
        let j = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
        if j.status == JobStatus::Processing {
            break lease(j);
        }
        assert!(std::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::sleep(Duration::from_millis(250)).await;
    let renewed = lease(w.jobs.get("acme", &job.id).await.unwrap().unwrap());
    assert!(renewed > first, "the heartbeat renews");
    // …and not after its task is aborted (a host's `abort_all`, a panic).
    run.abort();
    let _ = run.await;
    let at_abort = lease(w.jobs.get("acme", &job.id).await.unwrap().unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let after = lease(w.jobs.get("acme", &job.id).await.unwrap().unwrap());
    assert_eq!(after, at_abort, "no renewal once the run is gone");
}

#[tokio::test]
async fn a_run_past_the_hosts_deadline_fails_with_timeout_and_its_event() {
    // A Lambda invocation's end (less a margin) bounds the extraction: the run ends
    // with `timeout` while the function still runs, rather than the function being
    // killed mid-run. Like any timeout it is retried while attempts last, then fails.
    let mut w = world().await;
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    async fn run(w: &World, msg: &QueueMessage) -> Outcome {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(150);
        let stop = Context::background();
        let fut = w.pipeline.handle_within(msg, &stop, Some(deadline));
        tokio::time::timeout(Duration::from_secs(5), fut)
            .await
            .expect("the deadline ends the run")
    }
    let first = run(&w, &msg).await;
    assert!(first.should_retry(), "{first:?}");
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Pending, "the claim is released");
    w.pipeline.config.max_attempts = 2;
    let outcome = run(&w, &msg).await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let stored = w.jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    let events = w.events.events();
    assert_eq!(events.len(), 1);
    assert!(
        events[0].payload.contains("timeout") || events[0].payload.contains("timed out"),
        "{}",
        events[0].payload
    );
    assert!(w.objects.paths().is_empty());
}

fn canceled_world_config(w: &mut World) {
    w.pipeline.config.progress_interval = Duration::from_millis(40);
}

async fn wait_for_status(w: &World, id: &str, status: JobStatus) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while w.jobs.get("acme", id).await.unwrap().unwrap().status != status {
        assert!(std::time::Instant::now() < deadline, "never {status:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_running_job_canceled_stops_within_a_heartbeat_and_leaves_nothing() {
    let mut w = world().await;
    canceled_world_config(&mut w);
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    let (jobs, events, objects) = (w.jobs.clone(), w.events.clone(), w.objects.clone());
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while jobs.get("acme", &job.id).await.unwrap().unwrap().status != JobStatus::Processing {
        assert!(std::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let asked = std::time::Instant::now();
    let event = canceled_event(&job);
    let change = Transition::Cancel {
        event: &event,
        at: Timestamp::now(),
    };
    assert!(!jobs.transition("acme", &job.id, change).await.unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the run stops")
        .unwrap();
    assert!(asked.elapsed() < Duration::from_secs(5), "seen within 5 s");
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let stored = jobs.get("acme", &job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Canceled);
    assert!(stored.pending_event.is_none(), "published");
    assert!(objects.paths().is_empty(), "no object left");
    let sent = events.events();
    assert_eq!(sent.len(), 1, "one event");
    assert_eq!(sent[0].detail_type, "job.failed");
    assert_eq!(sent[0].id, format!("fetcher.job.failed.{}", job.id));
    let payload: serde_json::Value = serde_json::from_str(&sent[0].payload).unwrap();
    assert_eq!(payload["status"], "failed");
    assert_eq!(
        payload["metadata"]["error"]["message"],
        "engine: [canceled] job canceled by request"
    );
}

#[tokio::test]
async fn a_pending_cancel_makes_the_queued_message_publish_its_event_once() {
    let w = world().await;
    let (job, msg) = submit(&w, None).await;
    let event = canceled_event(&job);
    let change = Transition::Cancel {
        event: &event,
        at: Timestamp::now(),
    };
    assert!(w.jobs.transition("acme", &job.id, change).await.unwrap());
    // The message arrives: nothing runs, the outbox's event goes out.
    let first = w.pipeline.handle(&msg).await;
    assert!(
        matches!(first, Outcome::Skipped("terminal event republished")),
        "{first:?}"
    );
    // Redelivered: a no-op.
    let again = w.pipeline.handle(&msg).await;
    assert!(matches!(again, Outcome::Skipped(_)), "{again:?}");
    assert_eq!(w.events.events().len(), 1);
    assert_eq!(w.events.events()[0].detail_type, "job.failed");
    assert!(w.objects.paths().is_empty());
    wait_for_status(&w, &job.id, JobStatus::Canceled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_rises_while_rows_flow_and_ends_at_the_results_figures() {
    let mut w = world().await;
    canceled_world_config(&mut w);
    w.factory.behaviour.lock().unwrap().generator = Some(RowGenerator {
        table: "public.accounts".into(),
        count: 3000,
        make: Arc::new(|i| {
            // Slow rows, so the run spans several heartbeats.
            std::thread::sleep(Duration::from_micros(400));
            row(i as i64 + 10, "generated")
        }),
    });
    let (job, msg) = submit(&w, None).await;
    let jobs = w.jobs.clone();
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    let mut seen = Vec::new();
    while !run.is_finished() {
        let j = jobs.get("acme", &job.id).await.unwrap().unwrap();
        if j.status == JobStatus::Processing
            && let Some(p) = j.progress
            && seen.last() != Some(&p.rows)
        {
            seen.push(p.rows);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let outcome = run.await.unwrap();
    let Outcome::Completed { rows, bytes, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(seen.len() >= 2, "progress rose while running: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(*seen.last().unwrap() <= rows);
    let done = jobs.get("acme", &job.id).await.unwrap().unwrap();
    let p = done.progress.expect("final figures");
    let result = done.result.unwrap();
    assert_eq!((p.rows, p.bytes), (result.row_count, result.size_bytes));
    assert_eq!((p.rows, p.bytes), (rows, bytes));
    assert_eq!((p.tables_done, p.tables_total), (1, 1));
}
