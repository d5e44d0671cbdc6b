//! Incremental jobs through `fetcher serve` on PostgreSQL (docs/api.md, "Incremental
//! extraction"): each job of a sync continues from the watermark of the last completed
//! one, in every result format; a kill -9 between storing a result and completing its
//! job leaves the watermark at the last completed job, and the job rerun after the
//! restart continues exactly from there; a reset reads everything again.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn setup(db: &PgDb) {
    psql(
        &db.0,
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, updated_at timestamptz); \
         CREATE INDEX orders_cursor ON orders (updated_at, id); \
         INSERT INTO orders SELECT g, 'new', timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 10) g;",
    );
}

fn register(server: &Server, db: &PgDb) {
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
}

/// Job `run` of the sync (its metadata differs per run, so no two are duplicates).
fn job(run: u32, format: Option<&str>) -> Value {
    let mut body = json!({
        "dataRequest": {"mappedFields": {"ledger": {"orders": ["id", "status"]}}},
        "incremental": {"ledger": {"orders": {"cursor": "updated_at"}}},
        "syncId": "orders-sync",
        "metadata": {"source": "reporter", "run": run}
    });
    if let Some(f) = format {
        body["resultFormat"] = json!(f);
    }
    body
}

fn submit(server: &Server, body: &Value) -> String {
    let (status, accepted) = server.request("POST", "/v1/fetcher", Some(body), &[]);
    assert_eq!(status, 202, "{accepted}");
    accepted["jobId"].as_str().unwrap().to_owned()
}

/// The `(id, status)` rows of a completed NDJSON job.
fn rows(dir: &std::path::Path, id: &str) -> Vec<(i64, String)> {
    let (ok, out, err) = open_result(dir, id);
    assert!(ok, "{err}");
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["row"]["id"].as_i64().unwrap(),
                v["row"]["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn sync_watermark(server: &Server) -> Value {
    let (status, sync) = server.request("GET", "/v1/syncs/orders-sync", None, &[]);
    assert_eq!(status, 200, "{sync}");
    sync["tables"]["ledger"]["orders"]["watermark"].clone()
}

/// The sync's watermark as `serve`'s store holds it, read while no serve runs (Python's
/// sqlite3 module on `fetcher.db`'s `syncs` table, whose `doc` is the sync's JSON).
fn stored_watermark(data_dir: &std::path::Path) -> Value {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT doc FROM syncs WHERE sync_id = 'orders-sync'\").fetchone()[0])",
        ])
        .arg(data_dir.join("fetcher.db"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["tables"]["ledger"]["orders"]["watermark"].clone()
}

#[test]
fn a_sync_continues_across_jobs_formats_a_crash_and_a_reset() {
    let db = PgDb::create("fetcher_inc");
    setup(&db);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    register(&server, &db);

    // The first job reads everything, in (cursor, key) order.
    let first = submit(&server, &job(1, None));
    let done = server.wait_job(&first, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(rows(dir.path(), &first).len(), 10);
    let span = &done["watermarks"]["ledger"]["orders"];
    assert_eq!(span["fromWatermark"], Value::Null, "{done}");
    assert_eq!(
        span["toWatermark"],
        json!({"cursor": "updated_at", "key": ["id"], "values": ["2026-01-01T00:10:00Z", 10]})
    );
    assert_eq!(sync_watermark(&server), span["toWatermark"]);

    // New rows and updated ones (cursor bumped): the next job reads exactly those.
    psql(
        &db.0,
        "INSERT INTO orders SELECT g, 'new', timestamptz '2026-01-02' + g * interval '1 minute' FROM generate_series(11, 15) g; \
         UPDATE orders SET status = 'paid', updated_at = timestamptz '2026-01-03' WHERE id IN (2, 4);",
    );
    let second = submit(&server, &job(2, None));
    let done = server.wait_job(&second, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    let got = rows(dir.path(), &second);
    assert_eq!(
        got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [11, 12, 13, 14, 15, 2, 4],
        "new rows, then the updated ones at their new cursor"
    );
    assert_eq!(got[5].1, "paid");
    assert_eq!(
        done["watermarks"]["ledger"]["orders"]["fromWatermark"],
        span["toWatermark"]
    );
    let after_second = sync_watermark(&server);
    assert_eq!(after_second["values"], json!(["2026-01-03T00:00:00Z", 4]));
    drop(server);

    // kill -9 after the third job's result is stored, before it is completed.
    psql(
        &db.0,
        "INSERT INTO orders SELECT g, 'late', timestamptz '2026-01-04' + g * interval '1 second' FROM generate_series(16, 18) g;",
    );
    let mut crashing = Server::start_with(
        dir.path(),
        &[],
        None,
        &[("FETCHER_TEST_CRASH_BEFORE_COMPLETE", "1")],
    );
    let third = submit(&crashing, &job(3, None));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = crashing.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not reach the crash point"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "aborted: {status:?}");
    crashing.kill();

    // After the crash the stored watermark is the last completed job's; the restart
    // takes the third job back at once, and it reads exactly the three rows after it.
    assert_eq!(
        stored_watermark(dir.path()),
        after_second,
        "not advanced by the crashed run"
    );
    let server = Server::start(dir.path(), &[]);
    let done = server.wait_job(&third, Duration::from_secs(90));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        rows(dir.path(), &third),
        [
            (16, "late".into()),
            (17, "late".into()),
            (18, "late".into())
        ]
    );
    assert_eq!(
        done["watermarks"]["ledger"]["orders"]["fromWatermark"],
        after_second
    );
    assert_eq!(
        sync_watermark(&server)["values"],
        json!(["2026-01-04T00:00:18Z", 18])
    );

    // Parquet continues the same sync; a job with nothing new keeps the watermark.
    psql(
        &db.0,
        "UPDATE orders SET updated_at = timestamptz '2026-01-05', status = 'shipped' WHERE id = 1;",
    );
    let fourth = submit(&server, &job(4, Some("parquet")));
    let done = server.wait_job(&fourth, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultParts"][0]["rowCount"], 1, "{done}");
    let fifth = submit(&server, &job(5, None));
    let done = server.wait_job(&fifth, Duration::from_secs(30));
    assert!(rows(dir.path(), &fifth).is_empty());
    let span = &done["watermarks"]["ledger"]["orders"];
    assert_eq!(span["fromWatermark"], span["toWatermark"], "{done}");

    // A reset: the next job (v1) reads every row again, each at its current version.
    let (status, reset) = server.request("POST", "/v1/syncs/orders-sync/reset", None, &[]);
    assert_eq!(status, 200, "{reset}");
    let sixth = submit(&server, &job(6, Some("v1")));
    let done = server.wait_job(&sixth, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["watermarks"]["ledger"]["orders"]["fromWatermark"],
        Value::Null
    );
    assert_eq!(
        done["watermarks"]["ledger"]["orders"]["toWatermark"]["values"],
        json!(["2026-01-05T00:00:00Z", 1])
    );
}
