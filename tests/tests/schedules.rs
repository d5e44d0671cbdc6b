//! #43 on the Lambda handlers (DynamoDB on moto, SQS on moto or LocalStack): a sync's
//! schedule set through the `api` handler runs from the `tick` function's handler, called
//! at chosen times (the scheduler's invocations, without waiting for them): one job per due
//! time even under two concurrent ticks, a run skipped while the previous job has not
//! ended, missed runs collapsed into one, each job continuing the last through the
//! `extract` handler, and a schedule that pauses itself after three failed runs.

use fetcher_e2e::*;
use fetcher_engine::Timestamp;
use fetcher_host::model::{JobId, JobStatus};
use serde_json::{Value, json};

const DB: &str = "fetcher_lambda_schedules";
const SYNC: &str = "accounts-every-minute";

fn plus(t: Timestamp, secs: i64) -> Timestamp {
    Timestamp::from_unix_nanos(t.unix_nanos() + i128::from(secs) * 1_000_000_000)
}

async fn schedule(h: &Handlers) -> Value {
    let (status, s) = h
        .call("GET", &format!("/v1/syncs/{SYNC}/schedule"), None)
        .await;
    assert_eq!(status, 200, "{s}");
    s
}

/// Hands the created job's message to `extract`; asserts it completed and returns the
/// rows it read.
async fn run_created(h: &Handlers, job_id: &str) -> u64 {
    let m = job_message(&h.clients, &h.resources, job_id).await;
    let batch = h
        .extractor
        .handle(sqs_event(&m, "arn:aws:sqs:us-east-1:123456789012:jobs"))
        .await;
    assert_eq!(batch["batchItemFailures"], json!([]), "{batch}");
    let (status, job) = h.call("GET", &format!("/v1/fetcher/{job_id}"), None).await;
    assert_eq!(status, 200);
    assert_eq!(job["status"], "completed", "{job}");
    let stored = h
        .extractor
        .pipeline
        .jobs
        .get("default", JobId::parse(job_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, JobStatus::Completed);
    stored.result.map_or(0, |r| r.row_count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_runs_from_the_tick_function() {
    create_database(DB);
    psql(
        DB,
        "DROP TABLE IF EXISTS accounts; \
         CREATE TABLE accounts (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL); \
         INSERT INTO accounts SELECT g, timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 3) g;",
    );
    let h = Handlers::start("fetcher-schedules", |cfg| cfg).await;
    let (status, conn) = h
        .call(
            "POST",
            "/v1/management/connections",
            Some(json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432, "databaseName": DB, "userName": "postgres", "password": "x"})),
        )
        .await;
    assert_eq!(status, 201, "{conn}");
    let request = json!({
        "dataRequest": {"mappedFields": {"ledger": {"accounts": ["id"]}}},
        "incremental": {"ledger": {"accounts": {"cursor": "updated_at"}}},
        "metadata": {"source": "lambda"}
    });
    let (status, set) = h
        .call(
            "PUT",
            &format!("/v1/syncs/{SYNC}/schedule"),
            Some(json!({"request": request, "rate": "PT1M"})),
        )
        .await;
    assert_eq!(status, 200, "{set}");
    let due = Timestamp::parse(set["nextRunAt"].as_str().unwrap()).unwrap();

    // Two invocations at once: one job.
    let (a, b) = tokio::join!(
        fetcher_fn_api::tick(&h.state, "test", due),
        fetcher_fn_api::tick(&h.state, "test", due)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        a["created"].as_u64().unwrap() + b["created"].as_u64().unwrap(),
        1,
        "{a} {b}"
    );
    assert_eq!(a["lost"].as_u64().unwrap() + b["lost"].as_u64().unwrap(), 1);
    let s = schedule(&h).await;
    let first = s["lastRun"]["jobId"].as_str().unwrap().to_owned();
    assert_eq!(s["lastRun"]["outcome"], "created", "{s}");

    // Not run yet: the next due time is skipped, nothing queued behind it.
    let skipped = fetcher_fn_api::tick(&h.state, "test", plus(due, 60))
        .await
        .unwrap();
    assert_eq!(skipped["skipped"], 1, "{skipped}");
    assert_eq!(schedule(&h).await["lastRun"]["jobId"], first.as_str());

    assert_eq!(run_created(&h, &first).await, 3, "the snapshot");
    psql(
        DB,
        "INSERT INTO accounts VALUES (4, timestamptz '2026-02-01'), (5, timestamptz '2026-02-02');",
    );

    // Ten minutes without a tick: one run, not ten.
    let late = fetcher_fn_api::tick(&h.state, "test", plus(due, 12 * 60))
        .await
        .unwrap();
    assert_eq!(late["created"], 1, "{late}");
    assert_eq!(
        late["stale"], 1,
        "twelve minutes behind a minutely schedule: {late}"
    );
    let s = schedule(&h).await;
    let second = s["lastRun"]["jobId"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(
        Timestamp::parse(s["nextRunAt"].as_str().unwrap()).unwrap(),
        plus(due, 13 * 60)
    );
    assert_eq!(run_created(&h, &second).await, 2, "only the new rows");
    let (_, job) = h.call("GET", &format!("/v1/fetcher/{second}"), None).await;
    assert_eq!(job["syncId"], SYNC);
    assert!(job["scheduledFor"].is_string(), "{job}");

    // The connection is deleted: three failed runs, and the schedule pauses itself.
    let conn_id = conn["id"].as_str().unwrap();
    let (status, gone) = h
        .call(
            "DELETE",
            &format!("/v1/management/connections/{conn_id}"),
            None,
        )
        .await;
    assert!((200..300).contains(&status), "{gone}");
    for (i, minute) in [13, 14, 15].into_iter().enumerate() {
        let r = fetcher_fn_api::tick(&h.state, "test", plus(due, minute * 60))
            .await
            .unwrap();
        assert_eq!(r["failed"], 1, "{r}");
        assert_eq!(r["paused"], u64::from(i == 2), "{r}");
    }
    let s = schedule(&h).await;
    assert_eq!(s["state"], "pausedAfterFailures", "{s}");
    assert_eq!(s["lastRun"]["code"], "FET-1020", "{s}");
    let r = fetcher_fn_api::tick(&h.state, "test", plus(due, 3600))
        .await
        .unwrap();
    assert_eq!(
        (r["created"].as_u64(), r["failed"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
}
