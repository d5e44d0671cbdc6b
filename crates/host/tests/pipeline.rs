//! The extraction pipeline on in-memory ports: results (v2, v1, Parquet), events and their
//! repair, failures, progress. Messages and repair of lost ones are in
//! `pipeline_messages.rs`, claims, retries, leases and cancellation in `pipeline_claims.rs`;
//! all run on `pipeline_support::world()`.

mod pipeline_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fetcher_engine::memory::*;
use fetcher_host::model::*;
use fetcher_host::pipeline::*;
use fetcher_host::ports::*;
use pipeline_support::*;

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

    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
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
    let plain = open_v2(&w, &result.path, &job.id.to_string(), &result.hmac).await;
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
    assert_eq!(payload["jobId"], job.id.to_string());
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
    let result = result_of(&w, job.id).await;
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
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    assert_eq!(
        w.events.events().last().unwrap().detail_type,
        fetcher_host::model::EventType::Failed
    );
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
    let result = result_of(&w, job.id).await;
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
    let manifest = open_v2(&w, &result.path, &job.id.to_string(), &result.hmac).await;
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest["format"], "parquet");
    assert_eq!(manifest["jobId"], job.id.to_string());
    assert_eq!(manifest["rowCount"], 2);
    assert_eq!(
        manifest["parts"],
        serde_json::to_value(&result.parts).unwrap()
    );
    // The part opens with its own HMAC, its SHA-256 is the plaintext's, and it is Parquet.
    let file = open_v2(&w, &part.path, &job.id.to_string(), &part.hmac).await;
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
    let second = result_of(&w, again.id).await;
    assert_eq!(second.parts[0].sha256, part.sha256);
}

#[tokio::test]
async fn a_parquet_job_fails_cleanly_on_a_host_without_the_writer() {
    let w = world().await;
    let w = World {
        pipeline: Pipeline {
            table_format: None,
            queue: None,
            tenant_share: None,
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
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
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
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
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
async fn an_unpublished_event_is_republished_by_redelivery_or_repair() {
    let w = world().await;
    w.events.fail.store(true, Ordering::SeqCst);
    let (job, msg) = submit(&w, None).await;
    assert!(w.pipeline.handle(&msg).await.should_retry());
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
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
            .get("acme", job.id)
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
    w.events.fail_jobs.lock().unwrap().push(jobs[1]);
    assert_eq!(w.pipeline.repair_events(25).await.unwrap(), 2);
    let marker = |id: &JobId| {
        let jobs = w.jobs.clone();
        let id = *id;
        async move {
            jobs.get("acme", id)
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
    let ids: Vec<JobId> = w.events.events().iter().map(|e| e.job_id).collect();
    assert_eq!(ids.len(), 3, "each event published once: {ids:?}");
    assert_eq!(ids.last(), Some(&jobs[1]));
}

#[tokio::test]
async fn an_event_that_never_publishes_is_quarantined_not_retried_forever() {
    let mut w = world().await;
    w.pipeline.config.max_event_attempts = 3;
    let (job, msg) = submit(&w, None).await;
    w.events.fail.store(true, Ordering::SeqCst);
    let _ = w.pipeline.handle(&msg).await; // completes; its event cannot go out
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert!(j.pending_event.is_some(), "left in the outbox");
    // Each repair pass fails to publish it; the third sets it aside.
    for pass in 1..=3 {
        assert_eq!(
            w.pipeline.repair_events(10).await.unwrap(),
            0,
            "pass {pass}"
        );
    }
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
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
        let j = jobs.get("acme", job.id).await.unwrap().unwrap();
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
    let done = jobs.get("acme", job.id).await.unwrap().unwrap();
    let p = done.progress.expect("final figures");
    let result = done.result.unwrap();
    assert_eq!((p.rows, p.bytes), (result.row_count, result.size_bytes));
    assert_eq!((p.rows, p.bytes), (rows, bytes));
    assert_eq!((p.tables_done, p.tables_total), (1, 1));
}
