//! Progress and cancellation through the Lambda handlers on the DynamoDB store: the
//! `api` handler takes the calls, the `extract` handler runs the job and writes its
//! progress with its heartbeat, a cancel asked through `api` stops it; events travel
//! through the EventBridge rule to the subscriber queue (moto, or LocalStack with
//! DynamoDB on moto).

use std::time::{Duration, Instant};

use fetcher_aws::Clients;
use fetcher_aws::bootstrap::Resources;
use fetcher_aws::host::HostConfig;
use fetcher_e2e::*;
use serde_json::{Value, json};

const DB: &str = "fetcher_lambda_progress";
const ROWS: u64 = 300_000;

/// Nothing of `job_id` in the bucket: no object, no multipart upload left open.
async fn nothing_stored(c: &Clients, r: &Resources, job_id: &str) {
    let objects =
        c.s3.list_objects_v2()
            .bucket(&r.bucket)
            .send()
            .await
            .expect("list");
    assert!(
        !objects
            .contents()
            .iter()
            .any(|o| o.key().unwrap_or_default().contains(job_id)),
        "an object of {job_id} is left"
    );
    let uploads =
        c.s3.list_multipart_uploads()
            .bucket(&r.bucket)
            .send()
            .await
            .expect("list uploads");
    assert!(
        !uploads
            .uploads()
            .iter()
            .any(|u| u.key().unwrap_or_default().contains(job_id)),
        "a multipart upload of {job_id} is left open"
    );
}

fn assert_canceled_event(events: &[Value]) {
    assert_eq!(events.len(), 1, "one event: {events:?}");
    assert_eq!(events[0]["detail-type"], "job.failed", "{:?}", events[0]);
    assert_eq!(
        events[0]["detail"]["metadata"]["error"]["message"],
        "engine: [canceled] job canceled by request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_rises_and_cancel_stops_jobs_through_the_handlers() {
    create_database(DB);
    psql(
        DB,
        &format!(
            "DROP TABLE IF EXISTS big; CREATE TABLE big (id bigint PRIMARY KEY, payload text NOT NULL); \
             INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(1, {ROWS}) g;"
        ),
    );
    let h = Handlers::start("fetcher-progress", |cfg| HostConfig {
        progress_interval: Duration::from_millis(200),
        ..cfg
    })
    .await;
    let (c, r, extractor) = (&h.clients, &h.resources, h.extractor.clone());
    let (status, created) = h.call(
        "POST",
        "/v1/management/connections",
        Some(json!({"configName": "big", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432, "databaseName": DB, "userName": "postgres", "password": "x"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let job = |from: i64| {
        json!({"dataRequest": {"mappedFields": {"big": {"big": ["id", "payload"]}},
            "filters": {"big": {"big": {"id": {"gte": [from]}}}}},
            "metadata": {"source": "lambda"}})
    };
    let queue_arn = "arn:aws:sqs:us-east-1:123456789012:jobs";

    // A running job: its progress rises (written by the extract handler), then a cancel
    // through the api handler stops it within a heartbeat.
    let (status, accepted) = h.call("POST", "/v1/fetcher", Some(job(1))).await;
    assert_eq!(status, 202, "{accepted}");
    let running = accepted["jobId"].as_str().unwrap().to_owned();
    let m = job_message(c, r, &running).await;
    let run = tokio::spawn({
        let (extractor, event) = (extractor.clone(), sqs_event(&m, queue_arn));
        async move { extractor.handle(event).await }
    });
    let mut seen: Vec<u64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < 2 {
        let (_, got) = h.call("GET", &format!("/v1/fetcher/{running}"), None).await;
        assert!(
            got["status"] == "pending" || got["status"] == "processing",
            "{got}"
        );
        if let Some(rows) = got["progress"]["rows"].as_u64()
            && seen.last() != Some(&rows)
        {
            seen.push(rows);
        }
        assert!(Instant::now() < deadline, "no progress: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen[0] < seen[1] && seen[1] < ROWS, "{seen:?}");
    let asked = Instant::now();
    let (status, answer) = h
        .call("POST", &format!("/v1/fetcher/{running}/cancel"), None)
        .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status"], "processing", "{answer}");
    let batch = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the run stops")
        .unwrap();
    assert_eq!(batch["batchItemFailures"], json!([]), "{batch}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    let (_, got) = h.call("GET", &format!("/v1/fetcher/{running}"), None).await;
    assert_eq!(got["status"], "canceled", "{got}");
    nothing_stored(c, r, &running).await;
    assert_canceled_event(&events_for(c, r, &running, Duration::from_secs(20)).await);

    // A pending job: canceled at once; its queued message then publishes the event.
    let (status, accepted) = h.call("POST", "/v1/fetcher", Some(job(2))).await;
    assert_eq!(status, 202, "{accepted}");
    let pending = accepted["jobId"].as_str().unwrap().to_owned();
    let (status, answer) = h
        .call("POST", &format!("/v1/fetcher/{pending}/cancel"), None)
        .await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (202, Some("canceled")),
        "{answer}"
    );
    let m = job_message(c, r, &pending).await;
    let batch = extractor.handle(sqs_event(&m, queue_arn)).await;
    assert_eq!(batch["batchItemFailures"], json!([]), "{batch}");
    nothing_stored(c, r, &pending).await;
    assert_canceled_event(&events_for(c, r, &pending, Duration::from_secs(20)).await);
    // Terminal: a second cancel is 409.
    let (status, again) = h
        .call("POST", &format!("/v1/fetcher/{pending}/cancel"), None)
        .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (409, Some("FET-1023")),
        "{again}"
    );
}
