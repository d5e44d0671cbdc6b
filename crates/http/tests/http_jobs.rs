//! Job routes (docs/api.md, "Jobs"): create and read; cancel and progress are in
//! `http_job_cancel.rs`.

mod http_support;

use std::sync::atomic::Ordering;

use axum::http::{Method, StatusCode};
use fetcher_host::model::{JobResult, JobStatus, PendingEvent, ResultFormat};
use fetcher_host::ports::JobStore;
use http_support::*;
use serde_json::json;

#[tokio::test]
async fn new_then_duplicate_and_message_contents() {
    let h = setup().await;
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[("x-request-id", "req-42")],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.headers["x-request-id"], "req-42");
    let v = r.json();
    assert_eq!(
        (v["status"].as_str(), v["message"].as_str()),
        (
            Some("pending"),
            Some("Job created and queued for processing")
        )
    );
    let id = v["jobId"].as_str().unwrap().to_owned();
    // Same content, other key order and whitespace: the same job.
    let same = r#"{ "metadata": {"source":"reporter"}, "dataRequest": {"mappedFields": {"core-pg": {"users": ["id","name"]}}} }"#;
    let r2 = h
        .raw(
            Method::POST,
            "/v1/fetcher",
            &[("content-type", "application/json")],
            same,
        )
        .await;
    assert_eq!(r2.status, StatusCode::OK);
    assert_eq!(
        (r2.json()["jobId"].as_str(), r2.json()["message"].as_str()),
        (
            Some(id.as_str()),
            Some("Duplicate request detected - returning existing job")
        )
    );
    // One signed message, carrying the request id and the tenant.
    let sent = h.queue.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].headers["X-Request-Id"], "req-42");
    let got = fetcher_host::message::decode(&sent[0], &h.signer, fetcher_host::message::unix_now())
        .unwrap();
    assert_eq!(
        (got.tenant.as_str(), got.message.job_id.as_str()),
        ("default", id.as_str())
    );
    // A generated request id when none is sent.
    let r3 = h.call(Method::POST, "/v1/fetcher", &[], Some(json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}, "metadata": {"source": "reporter", "n": 2}}))).await;
    assert_eq!(r3.status, StatusCode::ACCEPTED);
    let rid = r3.headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&rid).is_ok());
    assert_eq!(h.queue.sent()[1].headers["X-Request-Id"], rid);
}

#[tokio::test]
async fn concurrent_identical_requests_create_one_job() {
    let h = setup().await;
    let futs = (0..20).map(|_| {
        h.call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
    });
    let replies = futures_util::future::join_all(futs).await;
    let created = replies
        .iter()
        .filter(|r| r.status == StatusCode::ACCEPTED)
        .count();
    let dups = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    assert_eq!((created, dups), (1, 19));
    let ids: std::collections::BTreeSet<String> = replies
        .iter()
        .map(|r| r.json()["jobId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(h.queue.sent().len(), 1);
}

#[test]
fn concurrent_identical_requests_on_a_multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = std::sync::Arc::new(setup().await);
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let h = h.clone();
            tasks.push(tokio::spawn(async move {
                h.call(
                    Method::POST,
                    "/v1/fetcher",
                    &[],
                    Some(job("core-pg", "reporter")),
                )
                .await
                .status
            }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap());
        }
        assert_eq!(
            statuses
                .iter()
                .filter(|s| **s == StatusCode::ACCEPTED)
                .count(),
            1
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == StatusCode::OK).count(),
            19
        );
    });
}

#[tokio::test]
async fn failed_jobs_do_not_block_a_retry_and_completed_ones_do() {
    let h = setup().await;
    let first = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await
        .json();
    let id = job_id(&first);
    let event = PendingEvent {
        status: JobStatus::Failed,
        payload: "{}".into(),
        failures: 0,
    };
    h.jobs
        .fail(
            "default",
            id,
            None,
            "boom",
            &event,
            fetcher_engine::Timestamp::now(),
        )
        .await
        .unwrap();
    let retry = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(retry.status, StatusCode::ACCEPTED);
    let id2 = job_id(&retry.json());
    assert_ne!(id, id2);
    // Completed within the window: duplicate, with the current status.
    let claim = h
        .jobs
        .claim(
            "default",
            id2,
            fetcher_engine::Timestamp::now(),
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    let fetcher_host::ports::ClaimOutcome::Claimed { token, .. } = claim else {
        panic!()
    };
    let result = JobResult {
        path: format!("external-data/{id2}.json"),
        hmac: "ab".repeat(32),
        format: ResultFormat::V1,
        ..Default::default()
    };
    h.jobs
        .complete(
            "default",
            id2,
            token,
            &result,
            &PendingEvent {
                status: JobStatus::Completed,
                payload: "{}".into(),
                failures: 0,
            },
            fetcher_engine::Timestamp::now(),
        )
        .await
        .unwrap();
    let dup = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(
        (
            dup.status,
            dup.json()["status"].as_str(),
            dup.json()["jobId"].as_str()
        ),
        (
            StatusCode::OK,
            Some("completed"),
            Some(id2.to_string().as_str())
        )
    );
    // GET of the completed and the failed job.
    let got = h.get(&format!("/v1/fetcher/{id2}")).await.json();
    assert_eq!(got["resultPath"], format!("external-data/{id2}.json"));
    assert_eq!(
        (got["status"].as_str(), got["resultFormat"].as_str()),
        (Some("completed"), Some("v1"))
    );
    assert!(got["completedAt"].is_string() && got["requestHash"].as_str().unwrap().len() == 64);
    let failed = h.get(&format!("/v1/fetcher/{id}")).await.json();
    assert_eq!(
        failed["metadata"],
        json!({"source": "reporter", "error": "boom"})
    );
    assert!(failed.get("resultPath").is_none());
}

#[tokio::test]
async fn get_job_strips_internal_keys_and_scopes_errors() {
    let h = setup().await;
    let mut body = job("core-pg", "reporter");
    body["metadata"]["terminalEventPending"] = json!(true);
    body["dataRequest"]["filters"] =
        // An empty value list counts as absent (the reference's leniency, kept); an
        // unknown operator is refused (filters_are_checked_at_creation).
        json!({"core-pg": {"users": {"id": {"gte": [1], "eq": []}}}});
    body["resultFormat"] = json!("v2");
    let r = h.call(Method::POST, "/v1/fetcher", &[], Some(body)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = job_id(&r.json());
    let got = h.get(&format!("/v1/fetcher/{id}")).await;
    assert_eq!(got.status, StatusCode::OK);
    let v = got.json();
    assert_eq!(v["metadata"], json!({"source": "reporter"}));
    assert_eq!(
        v["filters"],
        json!({"core-pg": {"users": {"id": {"gte": [1]}}}})
    );
    assert_eq!(
        (v["status"].as_str(), v["mappedFields"].clone()),
        (
            Some("pending"),
            json!({"core-pg": {"users": ["id", "name"]}})
        )
    );
    assert!(v.get("completedAt").is_none() && v.get("resultPath").is_none());
    let stored = h.jobs.get("default", id).await.unwrap().unwrap();
    assert_eq!(stored.request.result_format, Some(ResultFormat::V2));
    let r = h
        .get("/v1/fetcher/0193a1c0-0d6e-7b11-9f2a-5c4d3e2f1a0b")
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_FOUND, json!("FET-1001"))
    );
    assert!(r.json()["message"].as_str().unwrap().contains("job entity"));
    let r = h.get("/v1/fetcher/nope").await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid job id"))
    );
    h.jobs.fail.store(true, Ordering::SeqCst);
    let r = h.get(&format!("/v1/fetcher/{id}")).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, json!("FET-0002"))
    );
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.code(), json!("FET-0002"));
}

#[tokio::test]
async fn validation_errors_in_order() {
    let h = setup().await;
    let many: serde_json::Map<String, serde_json::Value> = (0..12)
        .map(|i| (format!("d{i}"), json!({"t": ["f"]})))
        .collect();
    let mut many_with_empty = many.clone();
    many_with_empty.insert("empty".into(), json!({}));
    let fifty_one: Vec<String> = (0..51).map(|i| format!("f{i}")).collect();
    let tables: serde_json::Map<String, serde_json::Value> =
        (0..21).map(|i| (format!("t{i}"), json!(["id"]))).collect();
    let filtered: serde_json::Map<String, serde_json::Value> = (0..51)
        .map(|i| (format!("f{i}"), json!({"eq": [1]})))
        .collect();
    let cases = [
        (json!({}), "FET-0402", None),
        (json!({"dataRequest": {}}), "FET-0402", None),
        (
            json!({"dataRequest": {"mappedFields": {}}, "metadata": {"source": "x"}}),
            "FET-0401",
            Some("mappedFields cannot be empty"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"ds": {"t": []}}}}),
            "FET-0401",
            Some("datasource must have at least one table with fields"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"ds": {}}}}),
            "FET-0401",
            Some("datasource must have at least one table with fields"),
        ),
        // A table with `[]` beside one with fields is refused, not read whole.
        (
            json!({"dataRequest": {"mappedFields": {"ds": {"t1": ["id"], "t2": []}}}}),
            "FET-0401",
            Some("table 't2' of datasource 'ds' has no fields: name at least one"),
        ),
        (
            json!({"dataRequest": {"mappedFields": many}}),
            "FET-0401",
            Some("Maximum 10 datasources allowed per job, got 12"),
        ),
        (
            json!({"dataRequest": {"mappedFields": many_with_empty}}),
            "FET-0401",
            Some("datasource must have at least one table with fields"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}}),
            "FET-0402",
            Some("metadata is required and must contain 'source' field"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}, "metadata": {}}),
            "FET-0402",
            Some("metadata.source is required for job notification routing"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}, "metadata": {"source": "  "}}),
            "FET-0402",
            Some("metadata.source must be a non-empty string"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}, "metadata": {"source": 5}}),
            "FET-0402",
            Some("metadata.source must be a non-empty string"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}, "filters": {"ghost": {"t": {"f": {"eq": [1]}}}}}, "metadata": {"source": "reporter"}}),
            "FET-0401",
            Some("filter references unknown datasource 'ghost' not found in mappedFields"),
        ),
        // #52 item 7: the engine's per-table limits, as validate-schema answers them.
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": fifty_one.clone()}}}, "metadata": {"source": "reporter"}}),
            "FET-1061",
            Some("maximum 50 fields allowed per table, got 51 for 'core-pg.users'"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": tables.clone()}}, "metadata": {"source": "reporter"}}),
            "FET-1061",
            Some("maximum 20 tables allowed per datasource, got 21 for 'core-pg'"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}, "filters": {"core-pg": {"users": filtered.clone()}}}, "metadata": {"source": "reporter"}}),
            "FET-1061",
            Some("maximum 50 filtered fields allowed per table, got 51 for 'core-pg.users'"),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"nobody": {"t": ["f"]}}}, "metadata": {"source": "reporter"}}),
            "FET-1020",
            // The reference's text, then what the keys may be (#53 item 8).
            Some(
                "No connections configured for the requested datasources; mappedFields keys are connection configNames: this product's are 'core-pg'",
            ),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"t": ["f"]}, "zz-missing": {"t": ["f"]}}}, "metadata": {"source": "reporter"}}),
            "FET-1020",
            Some(
                "No connection configured for datasource 'zz-missing'; mappedFields keys are connection configNames: this product's are 'core-pg'",
            ),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"nobody": {"t": ["f"]}}}, "metadata": {"source": "newcomer"}}),
            "FET-1020",
            Some(
                "No connections configured for the requested datasources; mappedFields keys are connection configNames, and this product has none yet (POST /v1/management/connections)",
            ),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"t": ["f"]}}}, "metadata": {"source": "billing"}}),
            "FET-1016",
            Some(
                "Connection 'core-pg' does not belong to the product identified by source 'billing': metadata.source must be the product the connection was created or assigned under, here 'reporter'",
            ),
        ),
        (
            // Said what to send (#53 item 8): products compare as stored.
            json!({"dataRequest": {"mappedFields": {"core-pg": {"t": ["f"]}}}, "metadata": {"source": "Reporter"}}),
            "FET-1016",
            Some(
                "Connection 'core-pg' does not belong to the product identified by source 'Reporter': product names are stored trimmed and lower-cased and compared exactly; send 'reporter'",
            ),
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": "nope"}}, "metadata": {"source": "reporter"}}),
            "FET-0001",
            None,
        ),
        (
            json!({"dataRequest": {"mappedFields": {"core-pg": {"t": ["f"]}}}, "metadata": {"source": "reporter"}, "resultFormat": "v9"}),
            "FET-0001",
            None,
        ),
    ];
    for (body, code, message) in cases {
        let r = h
            .call(Method::POST, "/v1/fetcher", &[], Some(body.clone()))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!(code)),
            "{body}: {}",
            r.text
        );
        if let Some(m) = message {
            assert_eq!(r.json()["message"], m, "{body}");
        }
    }
    let r = h.call(Method::POST, "/v1/fetcher", &[], Some(json!({"dataRequest": {"mappedFields": {"core-pg": {"t": ["f"]}}}, "metadata": {"source": "billing"}}))).await;
    assert_eq!(r.json()["title"], "Product Mismatch");
    let r = h
        .call(Method::POST, "/v1/fetcher", &[], Some(json!({})))
        .await;
    assert_eq!(
        r.json()["fields"],
        json!({"mappedFields": "dataRequest.mappedFields is a required field"})
    );
    assert!(h.queue.sent().is_empty());
}

#[tokio::test]
async fn connection_down_and_publish_failure() {
    let h = setup().await;
    h.factory.behaviour.lock().unwrap().fail_test = true;
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-1040"))
    );
    assert_eq!(r.json()["message"], "Connection 'core-pg' is not available");
    h.factory.behaviour.lock().unwrap().fail_test = false;
    h.queue.fail.store(true, Ordering::SeqCst);
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, json!("FET-0002"))
    );
    let failed = h
        .jobs
        .list_pending(fetcher_engine::Timestamp::now(), 10)
        .await
        .unwrap();
    assert!(failed.is_empty(), "the job is no longer pending");
    assert!(
        h.jobs.list_pending_events(10).await.unwrap().is_empty(),
        "no terminal event for a publish failure"
    );
    h.queue.fail.store(false, Ordering::SeqCst);
    // The failed job does not block a retry.
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_host_shutting_down_refuses_new_jobs_and_keeps_those_that_raced_it() {
    let h = setup().await;
    let post = || {
        h.call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
    };
    let pending = || h.jobs.list_pending(fetcher_engine::Timestamp::now(), 10);
    // Closed: 503 with the documented body, nothing stored, nothing enqueued.
    h.queue.closed.store(true, Ordering::SeqCst);
    let r = post().await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("FET-0003"))
    );
    assert!(pending().await.unwrap().is_empty(), "nothing stored");
    assert!(h.queue.sent().is_empty());
    // The queue closes between the check and the enqueue: the job is kept pending (it
    // runs on the next start), never failed without an event.
    h.queue.closed.store(false, Ordering::SeqCst);
    h.queue.close_on_enqueue.store(true, Ordering::SeqCst);
    let r = post().await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.json()["jobId"].as_str().unwrap().to_owned();
    let kept = pending().await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].id.to_string(), id);
    let r = h.get(&format!("/v1/fetcher/{id}")).await;
    assert_eq!(r.json()["status"], "pending");
    assert!(h.jobs.list_pending_events(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn unassigned_connection_cannot_serve_a_job() {
    let h = harness();
    let tenant = fetcher_engine::TenantContext::new("default").unwrap();
    let d = fetcher_engine::ConnectionDescriptor {
        id: "legacy".into(),
        config_name: "legacy-pg".into(),
        datasource_type: fetcher_engine::DatasourceType::Postgresql,
        host: "h".into(),
        port: 1,
        database_name: "d".into(),
        username: "u".into(),
        host_attributes: [("id".to_string(), json!("legacy"))].into(),
        ..Default::default()
    };
    use fetcher_engine::ports::ConnectionStore;
    h.connections
        .create(&fetcher_engine::Context::background(), &tenant, &d, None)
        .await
        .unwrap();
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("legacy-pg", "reporter")),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-1014"))
    );
    assert_eq!(
        r.json()["message"],
        "Connection 'legacy-pg' has no product assigned. Use the migration endpoint to assign it first."
    );
}

#[tokio::test]
async fn a_mapping_the_cached_schema_refutes_is_refused_at_creation() {
    let h = harness();
    h.create("reporter", connection("core-pg")).await;
    let bad = json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id", "amount"], "ghost": ["x"]}}},
        "metadata": {"source": "reporter"}});
    // Nothing cached yet: the job is queued (and will fail naming what is unknown).
    let r = h
        .call(Method::POST, "/v1/fetcher", &[], Some(bad.clone()))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let sent = h.queue.sent().len();
    // A cache-first discovery (validate-schema; a job's planning does the same) caches
    // the schema; now the same mapping is refused at once, with validate-schema's body,
    // and nothing is stored or queued.
    h.cache_schema().await;
    let mut bad2 = bad.clone();
    bad2["metadata"]["n"] = json!(2); // not a duplicate of the first
    let r = h.call(Method::POST, "/v1/fetcher", &[], Some(bad2)).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let v = r.json();
    assert_eq!(v["code"], "FET-1060");
    assert_eq!(
        v["errors"],
        json!([
            {"type": "TABLE_NOT_FOUND", "dataSourceId": "core-pg", "table": "ghost"},
            {"type": "FIELD_NOT_FOUND", "dataSourceId": "core-pg", "table": "users", "field": "amount"}
        ])
    );
    assert_eq!(h.queue.sent().len(), sent, "nothing queued");
    // The same body as validate-schema's for that mapping.
    let vs = h
        .call(
            Method::POST,
            "/v1/management/connections/validate-schema",
            &[("x-product-name", "reporter")],
            Some(json!({"mappedFields": bad["dataRequest"]["mappedFields"]})),
        )
        .await;
    assert_eq!(
        (vs.status, vs.json()),
        (StatusCode::UNPROCESSABLE_ENTITY, v)
    );
    // A mapping the schema has is accepted.
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    // A table named with spaces around it or a leading dot is not trimmed into `users`
    // (#30): it is an unknown table, refused at once.
    for odd in [" users", "users ", ".users"] {
        let body = json!({"dataRequest": {"mappedFields": {"core-pg": {odd: ["id"]}}},
            "metadata": {"source": "reporter"}});
        let r = h.call(Method::POST, "/v1/fetcher", &[], Some(body)).await;
        assert_eq!(
            (
                r.status,
                r.json()["errors"][0]["type"].clone(),
                r.json()["errors"][0]["table"].clone()
            ),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!("TABLE_NOT_FOUND"),
                json!(odd)
            ),
            "{odd:?}: {}",
            r.text
        );
    }
}

#[tokio::test]
async fn a_job_too_large_for_the_queue_or_its_event_is_refused_unstored() {
    let h = setup().await;
    let mut big = job("core-pg", "reporter");
    big["metadata"]["note"] = json!("n".repeat(200 * 1024));
    let r = h.call(Method::POST, "/v1/fetcher", &[], Some(big)).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text);
    assert_eq!(r.json()["code"], 413);
    assert!(
        r.json()["message"].as_str().unwrap().contains("196608"),
        "{}",
        r.text
    );
    assert!(h.queue.sent().is_empty(), "nothing queued");
    assert!(
        h.jobs
            .list_pending(fetcher_engine::Timestamp::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut fits = job("core-pg", "reporter");
    fits["metadata"]["note"] = json!("n".repeat(150 * 1024));
    let r = h.call(Method::POST, "/v1/fetcher", &[], Some(fits)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

#[tokio::test]
async fn connection_tests_run_at_once_within_the_budget() {
    let config = |budget_ms: u64| fetcher_http::ApiConfig {
        jobs: fetcher_host::jobs::JobSettings {
            test_timeout: std::time::Duration::from_millis(2000),
            test_budget: std::time::Duration::from_millis(budget_ms),
            ..Default::default()
        },
        ..Default::default()
    };
    let h = harness_with(Options {
        config: config(3000),
        ..Default::default()
    });
    for name in ["ds-a", "ds-b", "ds-c", "ds-d"] {
        h.create("reporter", connection(name)).await;
    }
    h.factory.behaviour.lock().unwrap().test_delay = Some(std::time::Duration::from_millis(400));
    let body = json!({"dataRequest": {"mappedFields": {
        "ds-a": {"users": ["id"]}, "ds-b": {"users": ["id"]}, "ds-c": {"users": ["id"]}, "ds-d": {"users": ["id"]}}},
        "metadata": {"source": "reporter"}});
    let started = std::time::Instant::now();
    let r = h
        .call(Method::POST, "/v1/fetcher", &[], Some(body.clone()))
        .await;
    let took = started.elapsed();
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    // Four tests of 400 ms: together, not one after another (1.6 s).
    assert!(took < std::time::Duration::from_millis(1200), "{took:?}");
    // A budget the tests cannot meet: 504 with the documented body, nothing stored.
    let tight = h.reconfigured(config(100));
    let mut other = body;
    other["metadata"]["n"] = json!(2);
    let before = h.queue.sent().len();
    let r = tight
        .call(Method::POST, "/v1/fetcher", &[], Some(other))
        .await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (StatusCode::GATEWAY_TIMEOUT, json!(504)),
        "{}",
        r.text
    );
    assert_eq!(h.queue.sent().len(), before);
}
