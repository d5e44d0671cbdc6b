//! Job routes (docs/api.md, "Canceling a job", "Progress"): cancel and progress.

mod http_support;

use axum::http::{Method, StatusCode};
use fetcher_host::model::{JobResult, JobStatus, PendingEvent, ResultFormat};
use fetcher_host::ports::JobStore;
use http_support::*;
use serde_json::json;

async fn submit(h: &Harness) -> fetcher_host::model::JobId {
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    job_id(&r.json())
}

#[tokio::test]
async fn a_pending_job_is_canceled_at_once_and_frees_its_slots() {
    let h = setup().await;
    let id = submit(&h).await;
    let r = h
        .call(Method::POST, &format!("/v1/fetcher/{id}/cancel"), &[], None)
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let v = r.json();
    assert_eq!(v["status"], "canceled");
    assert_eq!(
        v["metadata"]["error"],
        "engine: [canceled] job canceled by request"
    );
    let stored = h.jobs.get("default", id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Canceled);
    // Its job.failed event waits in the outbox for the worker that takes its message.
    let event = stored.pending_event.expect("in the outbox");
    assert!(
        event.payload.contains("\"status\":\"failed\""),
        "{}",
        event.payload
    );
    assert!(event.payload.contains("[canceled]"), "{}", event.payload);

    // Terminal now: a second cancel is 409 with its code; GET says canceled.
    let again = h
        .call(Method::POST, &format!("/v1/fetcher/{id}/cancel"), &[], None)
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    assert_eq!(again.code(), "FET-1023");
    assert_eq!(
        h.get(&format!("/v1/fetcher/{id}")).await.json()["status"],
        "canceled"
    );

    // The same request again is a new job (the dedup slot is free), and the connection
    // is no longer locked by a running job.
    let second = submit(&h).await;
    assert_ne!(second, id);
    let patch = h
        .call(
            Method::PATCH,
            &format!(
                "/v1/management/connections/{}",
                connection_id(&h, "core-pg").await
            ),
            &[("x-product-name", "reporter")],
            Some(json!({"host": "other.example.com"})),
        )
        .await;
    assert_eq!(
        patch.status,
        StatusCode::CONFLICT,
        "the second (pending) job holds it: {}",
        patch.text
    );
}

#[tokio::test]
async fn cancel_of_unknown_or_malformed_ids() {
    let h = setup().await;
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher/00000000-0000-7000-8000-000000000000/cancel",
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(r.code(), "FET-1001");
    let r = h
        .call(Method::POST, "/v1/fetcher/not-a-uuid/cancel", &[], None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.code(), "FET-0404");
    let r = h
        .call(
            Method::GET,
            "/v1/fetcher/00000000-0000-7000-8000-000000000000/cancel",
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_processing_job_shows_progress_and_is_asked_to_stop() {
    let h = setup().await;
    let id = submit(&h).await;
    // A worker claims it and reports progress with its heartbeat.
    let now = fetcher_engine::Timestamp::now();
    let until = fetcher_engine::Timestamp::from_unix_nanos(now.unix_nanos() + 60_000_000_000);
    let progress = fetcher_host::model::Progress {
        rows: 512,
        bytes: 40_960,
        tables_done: 1,
        tables_total: 3,
        updated_at: now,
    };
    let (token, stop) = h.report_progress(id, progress).await;
    assert!(!stop);
    let v = h.get(&format!("/v1/fetcher/{id}")).await.json();
    assert_eq!(v["status"], "processing");
    assert_eq!(
        v["progress"],
        json!({"rows": 512, "bytes": 40960, "tables": {"done": 1, "total": 3}, "updatedAt": now.to_string()})
    );

    let r = h
        .call(Method::POST, &format!("/v1/fetcher/{id}/cancel"), &[], None)
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let v = r.json();
    assert_eq!(v["status"], "processing", "the worker stops it");
    assert!(v["cancelRequestedAt"].is_string(), "{v}");
    assert!(
        h.jobs
            .renew("default", id, token, until, None)
            .await
            .unwrap(),
        "the worker's next heartbeat sees the request"
    );
    // A completion that lands first wins: the job is completed, and a later cancel is 409.
    let result = JobResult {
        path: "external-data/x.ndjson.v2".into(),
        format: ResultFormat::V2,
        row_count: 600,
        size_bytes: 48_000,
        ..Default::default()
    };
    let event = PendingEvent {
        status: JobStatus::Completed,
        payload: "{}".into(),
        failures: 0,
    };
    h.jobs
        .complete("default", id, token, &result, &event, now)
        .await
        .unwrap();
    let v = h.get(&format!("/v1/fetcher/{id}")).await.json();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["progress"]["rows"], 600, "the final figures: {v}");
    assert_eq!(v["progress"]["bytes"], 48000);
    assert_eq!(v["progress"]["tables"], json!({"done": 1, "total": 1}));
    let late = h
        .call(Method::POST, &format!("/v1/fetcher/{id}/cancel"), &[], None)
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT);
    assert_eq!(late.code(), "FET-1023");
}

async fn connection_id(h: &Harness, name: &str) -> String {
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("x-product-name", "reporter")],
            None,
        )
        .await;
    let v = r.json();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["configName"] == name)
        .expect("listed")["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// #53 item 5: with the schema known at creation, `progress` carries the catalogs' row
/// estimate of a job that reads whole tables (what `jobs watch` shows a share of); a
/// filtered job has none.
#[tokio::test]
async fn progress_carries_the_row_estimate_of_whole_tables() {
    let h = setup().await;
    // validate-schema caches the schema (users: 42 rows by its catalog).
    h.cache_schema().await;
    let whole = submit(&h).await;
    assert_eq!(
        h.jobs
            .get("default", whole)
            .await
            .unwrap()
            .unwrap()
            .rows_estimate,
        Some(42)
    );
    let progress = fetcher_host::model::Progress {
        rows: 21,
        bytes: 400,
        tables_done: 0,
        tables_total: 1,
        updated_at: fetcher_engine::Timestamp::now(),
    };
    h.report_progress(whole, progress).await;
    let v = h.get(&format!("/v1/fetcher/{whole}")).await.json();
    assert_eq!(
        (
            v["progress"]["rows"].clone(),
            v["progress"]["rowsEstimate"].clone()
        ),
        (json!(21), json!(42)),
        "{v}"
    );
    let mut filtered = job("core-pg", "reporter");
    filtered["dataRequest"]["filters"] = json!({"core-pg": {"users": {"id": {"gt": [1]}}}});
    let r = h
        .call(Method::POST, "/v1/fetcher", &[], Some(filtered))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = job_id(&r.json());
    assert_eq!(
        h.jobs
            .get("default", id)
            .await
            .unwrap()
            .unwrap()
            .rows_estimate,
        None
    );
}
