//! Execution: golden bytes, ordering, concurrency, modes, records, progress. Failures,
//! cancellation and size limits are in `execution_failures.rs`; both run on the golden
//! harness and plans of `common`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::*;

const GOLDEN_DIRECT: &str = "{\n  \"mongo-b\": {\n    \"coll.b\": [\n      {\n        \"id\": 10\n      },\n      {\n        \"id\": 11\n      },\n      {\n        \"id\": 12\n      }\n    ]\n  },\n  \"pg-a\": {\n    \"public.a\": [\n      {\n        \"id\": 1,\n        \"name\": \"alice\"\n      },\n      {\n        \"id\": 2,\n        \"name\": \"bob\"\n      }\n    ]\n  }\n}";
const GOLDEN_DIRECT_SHA: &str = "9bcdd3844dcd23fb3f37700e6e6369550483c3d0372d636131a84c28243ff77c";
const GOLDEN_NDJSON: &str = "{\"config\":\"mongo-b\",\"table\":\"coll.b\",\"row\":{\"id\":10}}\n{\"config\":\"mongo-b\",\"table\":\"coll.b\",\"row\":{\"id\":11}}\n{\"config\":\"mongo-b\",\"table\":\"coll.b\",\"row\":{\"id\":12}}\n{\"config\":\"pg-a\",\"table\":\"public.a\",\"row\":{\"id\":1,\"name\":\"alice\"}}\n{\"config\":\"pg-a\",\"table\":\"public.a\",\"row\":{\"id\":2,\"name\":\"bob\"}}\n";
const GOLDEN_NDJSON_SHA: &str = "d8c3b01347a83f0ac223574108009da9064458fcc9c40960af709027c86d83bf";
const EMPTY_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn direct_mode_matches_the_golden_bytes_every_time() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-1");
    let (a, b) = golden_sources(&h, &t).await;
    a.behaviour.lock().unwrap().on_query = Some(jitter(1));
    b.behaviour.lock().unwrap().on_query = Some(jitter(2));
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();
    for _ in 0..20 {
        let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
        let d = r.direct.as_ref().unwrap();
        assert_eq!(std::str::from_utf8(&d.data).unwrap(), GOLDEN_DIRECT);
        assert_eq!(d.data.len(), 299);
        assert_eq!(d.integrity.as_ref().unwrap().digest, GOLDEN_DIRECT_SHA);
        assert_eq!(d.integrity.as_ref().unwrap().algorithm, "SHA-256");
        assert_eq!(
            (d.format, d.row_count, d.plaintext_size),
            (StoredFormat::Json, 5, 299)
        );
        assert_eq!(
            d.protection,
            Some(ResultProtection {
                encrypted: false,
                key_version: String::new(),
                mode: String::new(),
                applied_by: AppliedBy::Engine,
            })
        );
        assert!(r.reference.is_none());
        assert_eq!(
            r.row_counts,
            [("mongo-b".to_string(), 3), ("pg-a".to_string(), 2)].into()
        );
        assert_eq!(r.state.status, Some(ExecutionStatus::Completed));
        assert_eq!(r.state.job_id, "job-1");
        assert_eq!(r.state.completed_at, d.completed_at);
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"direct\"") && !json.contains("\"reference\""));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_mode_matches_the_golden_ndjson_across_25_jittered_runs() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-1");
    let (a, b) = golden_sources(&h, &t).await;
    a.behaviour.lock().unwrap().on_query = Some(jitter(3));
    b.behaviour.lock().unwrap().on_query = Some(jitter(4));
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();
    for run in 0..25 {
        let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
        let reference = r
            .reference
            .as_ref()
            .expect("store mode returns a reference");
        assert!(r.direct.is_none());
        let bytes = h.sink.get(&reference.path).unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            GOLDEN_NDJSON,
            "run {run}"
        );
        assert_eq!(bytes.len(), 294);
        assert_eq!(sha256_hex(&bytes), GOLDEN_NDJSON_SHA);
        assert_eq!((reference.row_count, reference.size_bytes), (5, 294));
        assert_eq!(reference.format, StoredFormat::Ndjson);
        assert_eq!(reference.completed_at, r.state.completed_at);
    }
    assert_eq!(h.sink.closes.load(Ordering::SeqCst), 25);
    assert_eq!(h.sink.aborts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_engine_stamps_its_digest_and_size_when_the_sink_reports_none() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    *h.sink.switches.lock().unwrap() = SinkSwitches {
        omit_integrity: true,
        omit_size: true,
        ..Default::default()
    };
    let t = tenant("acme");
    let plan = golden_plan(&h, &t).await;
    let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    let reference = r.reference.unwrap();
    assert_eq!(
        reference.integrity,
        Some(ResultIntegrity::sha256(GOLDEN_NDJSON_SHA.into()))
    );
    assert_eq!(reference.size_bytes, 294);
}

#[tokio::test]
async fn sink_protection_is_preserved_and_applied_by_is_checked() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let protection = ResultProtection {
        encrypted: true,
        key_version: "7".into(),
        mode: "AES-256-GCM".into(),
        applied_by: AppliedBy::Adapter,
    };
    *h.sink.switches.lock().unwrap() = SinkSwitches {
        protection: Some(protection.clone()),
        ..Default::default()
    };
    let t = tenant("acme");
    let plan = golden_plan(&h, &t).await;
    let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    assert_eq!(
        r.reference.as_ref().unwrap().protection,
        Some(protection.clone())
    );
    // The sink's own integrity (here a digest) is kept as reported.
    assert_eq!(r.reference.unwrap().integrity.unwrap().algorithm, "SHA-256");

    // `appliedBy` is a closed set: a sink cannot report another (it does not parse).
    for bad in ["", "ENGINE", "sink"] {
        let json = serde_json::json!({"encrypted": true, "appliedBy": bad});
        assert!(
            serde_json::from_value::<ResultProtection>(json).is_err(),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn empty_plans_succeed_in_both_modes() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let plan = ExtractionPlan {
        tenant_id: "acme".into(),
        limits: Limits::defaults(),
        ..Default::default()
    };
    let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    let reference = r.reference.unwrap();
    assert_eq!(reference.integrity.unwrap().digest, EMPTY_SHA);
    assert_eq!(h.sink.get(&reference.path).unwrap(), b"");
    let direct = ExtractionPlan {
        mode: ExecutionMode::Direct,
        ..plan
    };
    let r = h.engine.execute_extraction(&ctx(), &direct).await.unwrap();
    assert_eq!(r.direct.unwrap().data, b"{}");
}

#[tokio::test]
async fn mode_resolution() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let plan = golden_plan(&h, &t).await;
    let store = ExtractionPlan {
        mode: ExecutionMode::Store,
        ..plan.clone()
    };
    let err = h
        .engine
        .execute_extraction(&ctx(), &store)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "store mode requires a configured result sink",
    );
    assert!(
        h.executions.saved().is_empty(),
        "gate failures record nothing"
    );
    assert!(
        h.engine
            .execute_extraction(&ctx(), &plan)
            .await
            .unwrap()
            .direct
            .is_some(),
        "auto without sink is direct"
    );

    let hs = harness(store_wiring(), TemplateBehaviour::default(), None);
    let plan = golden_plan(&hs, &t).await;
    let direct = ExtractionPlan {
        mode: ExecutionMode::Direct,
        ..plan.clone()
    };
    assert!(
        hs.engine
            .execute_extraction(&ctx(), &direct)
            .await
            .unwrap()
            .direct
            .is_some(),
        "explicit direct wins over a sink"
    );
    assert!(
        hs.engine
            .execute_extraction(&ctx(), &plan)
            .await
            .unwrap()
            .reference
            .is_some(),
        "auto with sink is store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_step_multi_batch_streams_complete_identically_at_any_window() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let mut digests = Vec::new();
    for (i, w) in [4i64, 2, 1].into_iter().enumerate() {
        let plan = multi_plan(&h, &tenant(&format!("t{i}")), 5, 5000, w).await;
        let _ = &t;
        let writes_before = h.sink.write_sizes().len();
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            h.engine.execute_extraction(&ctx(), &plan),
        )
        .await
        .expect("no deadlock")
        .unwrap();
        let reference = r.reference.unwrap();
        assert_eq!(reference.row_count, 25000);
        assert_eq!(
            r.row_counts.values().copied().collect::<Vec<_>>(),
            [5000; 5]
        );
        let writes = h.sink.write_sizes()[writes_before..].to_vec();
        assert!(
            writes.len() >= 5 * 4,
            "at least steps × batches writes, got {}",
            writes.len()
        );
        assert!(
            writes.iter().all(|w| (*w as i64) < reference.size_bytes),
            "no single write covers the whole result"
        );
        let bytes = h.sink.get(&reference.path).unwrap();
        // Lines are in plan order: src0's rows, then src1's, ...
        let configs: Vec<String> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<serde_json::Value>(l).unwrap()["config"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let mut sorted = configs.clone();
        sorted.sort();
        assert_eq!(configs, sorted);
        digests.push(sha256_hex(&bytes));
    }
    assert!(
        digests.windows(2).all(|w| w[0] == w[1]),
        "same bytes at W=4, 2, 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_overlap_equals_the_window() {
    for (mode, w) in [
        (ExecutionMode::Direct, 2usize),
        (ExecutionMode::Store, 2),
        (ExecutionMode::Direct, 1),
        (ExecutionMode::Store, 1),
    ] {
        let h = harness(store_wiring(), TemplateBehaviour::default(), None);
        let t = tenant("acme");
        let active = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(tokio::sync::Barrier::new(w));
        let mut req = ExtractionRequest::default();
        for s in 0..4 {
            let name = format!("src{s}");
            let f = add_source(&h, &t, &name, multi_source(3)).await;
            let (active, peak, barrier) = (active.clone(), peak.clone(), barrier.clone());
            f.behaviour.lock().unwrap().on_query = Some(Arc::new(move |_| {
                let (active, peak, barrier) = (active.clone(), peak.clone(), barrier.clone());
                Box::pin(async move {
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    // Everyone in the window must arrive before anyone leaves: proves overlap.
                    barrier.wait().await;
                    active.fetch_sub(1, Ordering::SeqCst);
                })
            }));
            req.mapped_fields
                .insert(name, [("t".to_string(), vec!["id".to_string()])].into());
        }
        req.overrides = Some(Limits {
            max_concurrency: w as i64,
            ..Limits::default()
        });
        let plan = ExtractionPlan {
            mode,
            ..h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap()
        };
        tokio::time::timeout(
            Duration::from_secs(10),
            h.engine.execute_extraction(&ctx(), &plan),
        )
        .await
        .expect("no hang")
        .unwrap();
        assert_eq!(peak.load(Ordering::SeqCst), w, "{mode:?} W={w}");
    }
}

#[tokio::test]
async fn filters_reach_the_connector_and_nothing_else_does() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let (a, _) = golden_sources(&h, &t).await;
    let mut req = golden_request();
    req.filters.insert(
        "pg-a".into(),
        serde_json::from_value(serde_json::json!({"public.a": {"id": {"gte": [2]}}})).unwrap(),
    );
    req.metadata.insert("source".into(), "crm".into());
    let plan = h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
    h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    let sent = a
        .last_built()
        .unwrap()
        .last_step
        .lock()
        .unwrap()
        .clone()
        .unwrap();
    // The connector gets the plan's own step (#29): its datasource, fields and filters,
    // nothing of the request's metadata or overrides.
    let own = plan.steps.iter().find(|s| s.config_name == "pg-a").unwrap();
    assert_eq!(&sent, own);
    assert_eq!(sent.config_name, "pg-a");
    assert_eq!(sent.fields_of("public.a"), ["id", "name"]);
    assert_eq!(
        serde_json::to_value(&sent.filters).unwrap(),
        serde_json::json!({"public.a": {"id": {"gte": [2]}}})
    );
    // Each step ran on its own freshly built connector (planning built one more).
    assert_eq!(a.build_count(), 2);
    assert_eq!(a.last_built().unwrap().calls(), ["test", "query", "close"]);
}

#[tokio::test]
async fn status_transitions_are_recorded_best_effort() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-9");
    let plan = golden_plan(&h, &t).await;
    h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    let saved = h.executions.saved();
    assert_eq!(
        h.executions.statuses(),
        [ExecutionStatus::Running, ExecutionStatus::Completed]
    );
    assert!(saved.iter().all(|s| s.job_id == "job-9"));
    assert!(
        saved[0].started_at.is_some()
            && saved[1].started_at.is_none()
            && saved[1].completed_at.is_some()
    );

    // A failing execution store changes nothing.
    h.executions.fail.store(true, Ordering::SeqCst);
    let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    assert_eq!(r.reference.unwrap().row_count, 5);
    h.executions.fail.store(false, Ordering::SeqCst);

    // Sink write failure: failed with the fixed text; aborted, never closed.
    let closes = h.sink.closes.load(Ordering::SeqCst);
    *h.sink.switches.lock().unwrap() = SinkSwitches {
        fail_write_at: Some(1),
        ..Default::default()
    };
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to persist extraction result",
    );
    let last = h.executions.saved().last().cloned().unwrap();
    assert_eq!(
        (last.status, last.failure_message.as_str()),
        (
            Some(ExecutionStatus::Failed),
            "failed to persist extraction result"
        )
    );
    assert_eq!(h.sink.closes.load(Ordering::SeqCst), closes);
    assert_eq!(h.sink.aborts.load(Ordering::SeqCst), 1);

    // Open and close failures.
    *h.sink.switches.lock().unwrap() = SinkSwitches {
        fail_open: true,
        ..Default::default()
    };
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to persist extraction result",
    );
    *h.sink.switches.lock().unwrap() = SinkSwitches {
        fail_close: true,
        ..Default::default()
    };
    let stored = h.sink.stored_count();
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to persist extraction result",
    );
    assert_eq!(h.sink.stored_count(), stored);
}

#[tokio::test]
async fn large_results_are_written_incrementally() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let plan = multi_plan(&h, &t, 1, 5000, 1).await;
    let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    let sizes = h.sink.write_sizes();
    assert_eq!(STORE_BATCH_ROWS, 1024);
    assert_eq!(
        sizes.len(),
        5,
        "5000 rows = 4 full 1024-row batches + 1 partial"
    );
    assert!(
        sizes
            .iter()
            .all(|s| (*s as i64) < r.reference.as_ref().unwrap().size_bytes)
    );
}

#[tokio::test]
async fn zero_row_steps_contribute_keys_but_no_lines() {
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        add_source(
            &h,
            &t,
            "empty",
            TemplateBehaviour {
                schema: schema(&[("t", &["id"])]),
                ..Default::default()
            },
        )
        .await;
        let plan = h
            .engine
            .plan_extraction(&ctx(), &t, &request(&[("empty", "t", &["id"])]))
            .await
            .unwrap();
        let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
        assert_eq!(r.row_counts, [("empty".to_string(), 0)].into());
        match (r.direct, r.reference) {
            (Some(d), None) => assert_eq!(
                std::str::from_utf8(&d.data).unwrap(),
                "{\n  \"empty\": {}\n}"
            ),
            (None, Some(reference)) => assert_eq!(h.sink.get(&reference.path).unwrap(), b""),
            _ => panic!("exactly one arm"),
        }
    }
}

#[tokio::test]
async fn store_mode_counts_its_progress_to_the_results_figures() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let plan = ExtractionPlan {
        mode: ExecutionMode::Store,
        ..golden_plan(&h, &t).await
    };
    let progress = ExtractionProgress::default();
    let r = h
        .engine
        .execute_extraction_observed(&ctx(), &plan, &progress)
        .await
        .unwrap();
    let reference = r.reference.unwrap();
    let tables: usize = plan.steps.iter().map(|s| s.tables.len()).sum();
    assert!(tables > 1, "the golden plan reads several tables");
    assert_eq!(
        progress.snapshot(),
        ProgressSnapshot {
            rows: reference.row_count as u64,
            bytes: reference.size_bytes as u64,
            tables_done: tables as u64,
            tables_total: tables as u64,
        }
    );
    assert!(reference.row_count > 0);
}

/// The spans of an extraction nest as its work does (docs/operations.md, "Traces"): the
/// run's `engine.extraction.execute`, one `engine.step` per datasource inside it (across
/// the step's task), one `engine.table.read` per table inside its step, each naming its
/// datasource and table; in store and direct mode alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extractions_spans_nest_steps_and_tables_inside_the_run() {
    for wiring in [store_wiring(), Wiring::default()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        let plan = golden_plan(&h, &t).await;
        h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
        let tree = h.spans.tree();
        let run: Vec<_> = tree
            .iter()
            .filter(|s| s.name == "engine.extraction.execute")
            .collect();
        assert_eq!(run.len(), 1, "{tree:?}");
        assert_eq!(run[0].parent, None);
        let mut steps: Vec<&str> = tree
            .iter()
            .filter(|s| s.name == "engine.step")
            .map(|s| {
                assert_eq!(s.parent, Some("engine.extraction.execute"), "{s:?}");
                assert_eq!((s.table.as_deref(), s.outcome), (None, None), "{s:?}");
                s.config.as_deref().unwrap()
            })
            .collect();
        steps.sort();
        let planned: Vec<&str> = plan.steps.iter().map(|s| s.config_name.as_str()).collect();
        assert_eq!(steps, planned);
        let mut tables: Vec<(String, String)> = tree
            .iter()
            .filter(|s| s.name == "engine.table.read")
            .map(|s| {
                assert_eq!((s.parent, s.outcome), (Some("engine.step"), None), "{s:?}");
                (s.config.clone().unwrap(), s.table.clone().unwrap())
            })
            .collect();
        tables.sort();
        let mut read: Vec<(String, String)> = plan
            .steps
            .iter()
            .flat_map(|s| s.tables.iter().map(|t| (s.config_name.clone(), t.clone())))
            .collect();
        read.sort();
        assert_eq!(tables, read);
    }
}
