//! A sync that runs itself on `fetcher serve` (docs/api.md, "Schedules"): a schedule every
//! minute, on a scheduler clock sixty times faster than real time
//! (`FETCHER_TEST_CLOCK_SPEED`, a test harness setting; never a sleep of minutes), creates
//! one job per due time, each continuing the last; after a kill -9 and a restart on the
//! same data directory it goes on, never running a due time twice; every row inserted
//! meanwhile is delivered exactly once.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const SYNC: &str = "orders-every-minute";

fn start(dir: &std::path::Path) -> Server {
    Server::start_with(
        dir,
        &["--schedule-tick", "1"],
        None,
        &[("FETCHER_TEST_CLOCK_SPEED", "60")],
    )
}

/// The sync's jobs, oldest first.
fn jobs(server: &Server) -> Vec<Value> {
    let (status, page) = server.request(
        "GET",
        &format!("/v1/fetcher?syncId={SYNC}&limit=100&sortOrder=asc"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{page}");
    page["items"].as_array().unwrap().clone()
}

/// Waits (bounded) until the sync has `n` completed jobs.
fn until_completed(server: &Server, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let all = jobs(server);
        let done = all.iter().filter(|j| j["status"] == "completed").count();
        if done >= n {
            return all;
        }
        for j in &all {
            assert_ne!(j["status"], "failed", "{j}");
        }
        assert!(
            Instant::now() < deadline,
            "{n} completed jobs in time: {all:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The ids a completed job delivered.
fn ids(dir: &std::path::Path, job: &Value) -> Vec<i64> {
    let (ok, out, err) = open_result(dir, job["id"].as_str().unwrap());
    assert!(ok, "{err}");
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["row"]["id"].as_i64().unwrap()
        })
        .collect()
}

#[test]
fn a_schedule_runs_one_job_per_due_time_across_a_restart() {
    let db = PgDb::create("fetcher_sched");
    psql(
        &db.0,
        "CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL); \
         INSERT INTO orders SELECT g, timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 10) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path());
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(
            &json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
                     "databaseName": db.0, "userName": "postgres", "password": "unused"}),
        ),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    let request = json!({
        "dataRequest": {"mappedFields": {"ledger": {"orders": ["id"]}}},
        "incremental": {"ledger": {"orders": {"cursor": "updated_at"}}},
        "metadata": {"source": "reporter"}
    });
    let (status, schedule) = server.request(
        "PUT",
        &format!("/v1/syncs/{SYNC}/schedule"),
        Some(&json!({"request": request, "rate": "PT1M"})),
        &[],
    );
    assert_eq!(status, 200, "{schedule}");

    until_completed(&server, 2);
    psql(
        &db.0,
        "INSERT INTO orders SELECT g, timestamptz '2026-02-01' + g * interval '1 minute' FROM generate_series(11, 15) g;",
    );
    until_completed(&server, 4);

    // kill -9, then the same data directory again.
    server.kill();
    let server = start(dir.path());
    psql(
        &db.0,
        "INSERT INTO orders SELECT g, timestamptz '2026-03-01' + g * interval '1 minute' FROM generate_series(16, 20) g;",
    );
    let before = jobs(&server).len();
    let all = until_completed(&server, before + 2);

    // One job per due time: every job names a distinct one, a minute apart at least.
    let due: Vec<String> = all
        .iter()
        .map(|j| {
            j["scheduledFor"]
                .as_str()
                .expect("a scheduled job")
                .to_owned()
        })
        .collect();
    let distinct: BTreeSet<&String> = due.iter().collect();
    assert_eq!(distinct.len(), due.len(), "a due time ran twice: {due:?}");
    // Every row exactly once, across the restart.
    let mut delivered: Vec<i64> = all
        .iter()
        .filter(|j| j["status"] == "completed")
        .flat_map(|j| ids(dir.path(), j))
        .collect();
    delivered.sort_unstable();
    let expected: Vec<i64> = (1..=20).collect();
    assert_eq!(delivered, expected);

    // Its freshness is a metric of its own (its value is not asserted: the accelerated
    // scheduler clock runs ahead of the real time jobs complete at, so ages read large).
    let (status, metrics) = server.request("GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    let text = metrics.as_str().unwrap_or_default();
    assert!(text.contains("fetcher_syncs_scheduled 1"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("fetcher_sync_stale{") && l.contains(SYNC)),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("fetcher_sync_age_seconds{") && l.contains(SYNC)),
        "{text}"
    );
    let (_, schedule) = server.request("GET", &format!("/v1/syncs/{SYNC}/schedule"), None, &[]);
    assert_eq!(schedule["state"], "active", "{schedule}");
    assert!(
        matches!(
            schedule["lastRun"]["outcome"].as_str(),
            Some("created" | "skipped")
        ),
        "{schedule}"
    );
}
