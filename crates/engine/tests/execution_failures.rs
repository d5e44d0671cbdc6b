//! Execution that fails or stops (docs/engine.md, "Execution"): connector failures and
//! panics, unserialisable values, cancellation checkpoints and timeouts, back-pressure,
//! the size limits of both modes, and connector validation rejections.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::*;

#[tokio::test]
async fn connector_failures_are_safe_and_close_everything() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let (a, b) = golden_sources(&h, &t).await;
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();

    a.behaviour.lock().unwrap().fail_query = true;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(&err, Category::Unavailable, "failed to query datasource");
    assert_eq!(
        h.executions.statuses().last(),
        Some(&ExecutionStatus::Failed)
    );
    for f in [&a, &b] {
        for s in f.built() {
            assert_eq!(
                s.closes.load(Ordering::SeqCst),
                1,
                "every built connector closed exactly once"
            );
        }
    }
    a.behaviour.lock().unwrap().fail_query = false;

    a.behaviour.lock().unwrap().fail_test = true;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to connect to datasource",
    );
    assert_eq!(a.last_built().unwrap().calls(), ["test", "close"]);
    a.behaviour.lock().unwrap().fail_test = false;

    a.behaviour.lock().unwrap().fail_stream_after = Some(1);
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(&err, Category::Unavailable, "failed to query datasource");
    a.behaviour.lock().unwrap().fail_stream_after = None;

    a.fail_build.store(true, Ordering::SeqCst);
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to build connector for connection",
    );
    a.fail_build.store(false, Ordering::SeqCst);
    a.build_nothing.store(true, Ordering::SeqCst);
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to build connector for connection",
    );
    a.build_nothing.store(false, Ordering::SeqCst);

    // A connection deleted since planning.
    h.engine
        .delete_connection(&ctx(), &t, "pg-a")
        .await
        .unwrap();
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::NotFound,
        "extraction references an unknown datasource connection",
    );
    for f in [&a, &b] {
        for s in f.built() {
            assert_eq!(s.closes.load(Ordering::SeqCst), 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_step_is_internal_and_leaks_no_connector() {
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        let (a, b) = golden_sources(&h, &t).await;
        let plan = h
            .engine
            .plan_extraction(&ctx(), &t, &golden_request())
            .await
            .unwrap();
        a.behaviour.lock().unwrap().panic_on_query = true;
        let err = h
            .engine
            .execute_extraction(&ctx(), &plan)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "engine: [internal] extraction step panicked: template connector panicked on purpose"
        );
        for f in [&a, &b] {
            for s in f.built() {
                assert_eq!(s.closes.load(Ordering::SeqCst), 1);
            }
        }
        assert_eq!(h.sink.stored_count(), 0);
    }
}

#[tokio::test]
async fn unserialisable_values_fail_safely_in_both_modes() {
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        let f = add_source(
            &h,
            &t,
            "nan",
            TemplateBehaviour {
                rows: [("t".to_string(), vec![row(&[("x", Value::Float(f64::NAN))])])].into(),
                schema: schema(&[("t", &["x"])]),
                ..Default::default()
            },
        )
        .await;
        let plan = h
            .engine
            .plan_extraction(&ctx(), &t, &request(&[("nan", "t", &["x"])]))
            .await
            .unwrap();
        let err = h
            .engine
            .execute_extraction(&ctx(), &plan)
            .await
            .unwrap_err();
        assert_err(
            &err,
            Category::Internal,
            "failed to serialize extraction result",
        );
        assert_eq!(f.last_built().unwrap().closes.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn cancellation_checkpoints() {
    // 1. Pre-cancelled: canceled, nothing built or queried.
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let (a, _) = golden_sources(&h, &t).await;
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();
    let builds = a.build_count();
    let c = ctx().child();
    c.cancel();
    let err = h.engine.execute_extraction(&c, &plan).await.unwrap_err();
    assert_err(&err, Category::Canceled, "execution canceled");
    assert_eq!(a.build_count(), builds);
    assert_eq!(h.sink.opens.load(Ordering::SeqCst), 0);
    assert_eq!(
        h.executions.statuses(),
        [ExecutionStatus::Running, ExecutionStatus::Canceled]
    );
    assert_eq!(
        h.executions.saved()[1].failure_message,
        "execution canceled"
    );

    // 2. During the query: the connector blocks on the context; a host cancel 20 ms in.
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let (a, _) = golden_sources(&h, &t).await;
        let plan = h
            .engine
            .plan_extraction(&ctx(), &t, &golden_request())
            .await
            .unwrap();
        a.behaviour.lock().unwrap().block_on_context = true;
        let c = ctx().child();
        let canceller = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            canceller.cancel();
        });
        let err = h.engine.execute_extraction(&c, &plan).await.unwrap_err();
        assert_err(&err, Category::Canceled, "execution canceled");
        assert_eq!(a.last_built().unwrap().closes.load(Ordering::SeqCst), 1);
        assert_eq!(h.sink.stored_count(), 0);
    }
}

#[tokio::test]
async fn a_plan_timeout_is_timeout_and_failed() {
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        let (a, _) = golden_sources(&h, &t).await;
        let mut plan = h
            .engine
            .plan_extraction(&ctx(), &t, &golden_request())
            .await
            .unwrap();
        plan.limits.timeout = Duration::from_millis(30);
        a.behaviour.lock().unwrap().block_on_context = true;
        let err = h
            .engine
            .execute_extraction(&ctx(), &plan)
            .await
            .unwrap_err();
        assert_err(&err, Category::Timeout, "execution exceeded its deadline");
        assert_eq!(
            h.executions.statuses(),
            [ExecutionStatus::Running, ExecutionStatus::Failed]
        );
        assert_eq!(
            h.executions.saved()[1].failure_message,
            "execution exceeded its deadline"
        );
        assert_eq!(a.last_built().unwrap().closes.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn a_cancel_between_steps_stops_later_steps_before_they_build() {
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        let (a, b) = golden_sources(&h, &t).await;
        let mut req = golden_request();
        req.overrides = Some(Limits {
            max_concurrency: 1,
            ..Limits::default()
        });
        let plan = h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
        // Steps run in config order: mongo-b first. It cancels the host context as it finishes.
        let c = ctx().child();
        let canceller = c.clone();
        b.behaviour.lock().unwrap().after_query = Some(Arc::new(move || canceller.cancel()));
        let a_builds = a.build_count();
        let err = h.engine.execute_extraction(&c, &plan).await.unwrap_err();
        assert_err(&err, Category::Canceled, "execution canceled");
        assert_eq!(a.build_count(), a_builds, "pg-a never built");
    }
}

#[tokio::test]
async fn a_cursor_that_swallows_the_cancel_yields_no_result() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let (a, _) = golden_sources(&h, &t).await;
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();
    let c = ctx().child();
    let canceller = c.clone();
    {
        let mut behaviour = a.behaviour.lock().unwrap();
        behaviour.cursor_ignores_cancel = true;
        behaviour.after_query = Some(Arc::new(move || canceller.cancel()));
    }
    let err = h.engine.execute_extraction(&c, &plan).await.unwrap_err();
    assert_err(&err, Category::Canceled, "execution canceled");
}

#[tokio::test]
async fn a_producer_blocked_on_back_pressure_is_cancelled_and_nothing_is_finalised() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let plan = multi_plan(&h, &t, 2, 2000, 2).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.sink.gate.lock().unwrap() = Some(gate.clone());
    let c = ctx().child();
    let canceller = c.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        canceller.cancel();
    });
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        h.engine.execute_extraction(&c, &plan),
    )
    .await
    .expect("no hang")
    .unwrap_err();
    assert_err(&err, Category::Canceled, "execution canceled");
    assert_eq!(h.sink.stored_count(), 0);
    assert_eq!(h.sink.closes.load(Ordering::SeqCst), 0);
    assert_eq!(h.sink.aborts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn direct_size_limit_is_checked_on_the_indented_payload() {
    // Compact golden size is 131 bytes ({"mongo-b":{"coll.b":[...]}} per step summed); the
    // indented payload is 299. A limit between the two passes layer 1 and fails layer 2.
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let mut plan = golden_plan(&h, &t).await;
    plan.limits.max_result_bytes = 200;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::LimitExceeded,
        "extraction result exceeds the configured size limit",
    );
    assert_eq!(
        h.executions.statuses().last(),
        Some(&ExecutionStatus::Failed)
    );
    plan.limits.max_result_bytes = 299;
    assert_eq!(
        h.engine
            .execute_extraction(&ctx(), &plan)
            .await
            .unwrap()
            .direct
            .unwrap()
            .data
            .len(),
        299,
        "equal is allowed"
    );
    plan.limits.max_result_bytes = 298;
    assert!(h.engine.execute_extraction(&ctx(), &plan).await.is_err());
    // Layer 1 (fail fast): a limit below the compact size fails on the step itself.
    plan.limits.max_result_bytes = 20;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::LimitExceeded,
        "extraction result exceeds the configured size limit",
    );
}

#[tokio::test]
async fn store_size_limit_stops_mid_stream_before_the_breaching_write() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let mut plan = multi_plan(&h, &t, 2, 4000, 2).await;
    // A budget of two and a half batches: the third write would breach it.
    let unbounded = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    let batch = h.sink.write_sizes()[0];
    assert!((batch as i64) < unbounded.reference.unwrap().size_bytes / 3);
    let budget = batch * 5 / 2;
    let before = h.sink.write_sizes().len();
    let aborts_before = h.sink.aborts.load(Ordering::SeqCst);
    let closes_before = h.sink.closes.load(Ordering::SeqCst);
    plan.limits.max_result_bytes = budget as i64;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::LimitExceeded,
        "extraction result exceeds the configured size limit",
    );
    let writes = h.sink.write_sizes()[before..].to_vec();
    let written: usize = writes.iter().sum();
    assert!(
        written <= budget,
        "nothing past the budget was written ({written} > {budget})"
    );
    assert_eq!(writes.len(), 2, "writes were incremental, up to the budget");
    assert_eq!(h.sink.closes.load(Ordering::SeqCst), closes_before);
    assert_eq!(h.sink.aborts.load(Ordering::SeqCst), aborts_before + 1);
    assert_eq!(
        h.executions.statuses()[2..],
        [ExecutionStatus::Running, ExecutionStatus::Failed]
    );
}

#[tokio::test]
async fn connector_validation_rejections_keep_their_category_and_text() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let (a, _) = golden_sources(&h, &t).await;
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();
    a.behaviour.lock().unwrap().reject_query = true;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "filter operator is not supported",
    );
    assert!(!err.is_retryable(), "the caller's fault: no retry");
    assert_eq!(h.sink.stored_count(), 0);
    assert_eq!(a.last_built().unwrap().closes.load(Ordering::SeqCst), 1);
}

/// #52: whether a retry helps is the connector's answer, kept when the engine rewrites its
/// error into the reference's category and text. A refused login fails for good; an
/// outage of the same step stays retryable. Also on the fan-out planner's key spans.
#[tokio::test]
async fn a_refusal_stays_final_through_the_engines_rewrite() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let (a, _) = golden_sources(&h, &t).await;
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &golden_request())
        .await
        .unwrap();
    a.behaviour.lock().unwrap().refuse = true;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to connect to datasource",
    );
    assert_eq!(err.retry(), Retry::Futile, "a refused login is final");
    assert!(!err.is_retryable());
    let spans = h.engine.key_spans(&ctx(), &plan, "pg-a").await;
    let err = spans.unwrap_err();
    assert_err(&err, Category::Unavailable, "failed to query datasource");
    assert!(!err.is_retryable(), "the planner's refusal is final too");

    a.behaviour.lock().unwrap().refuse = false;
    a.behaviour.lock().unwrap().fail_test = true;
    let err = h
        .engine
        .execute_extraction(&ctx(), &plan)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to connect to datasource",
    );
    assert_eq!(err.retry(), Retry::Helps, "an outage may pass");
}
