//! Syncs read from the PostgreSQL log through `fetcher serve` (docs/api.md, "Changes from
//! the log"), against the private `wal_level=logical` cluster of `scripts/pg-logical`:
//! the first job is a snapshot, every later one the changes committed since the previous
//! completed job, in commit order, deletes included; a kill -9 before a job completes
//! leaves the sync where it was, and the rerun delivers exactly the same changes; v1 and
//! non-PostgreSQL datasources are refused at creation.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn port() -> u16 {
    std::env::var("PG_LOGICAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(55432)
}

fn cluster() {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/pg-logical"
    ))
    .arg("start")
    .env("PG_LOGICAL_PORT", port().to_string())
    .output()
    .expect("scripts/pg-logical");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sql` in `db` on the private cluster; the output of the last statement.
fn lpsql(db: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
        .arg(port().to_string())
        .args(["-d", db, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A database on the private cluster; its slots and the database dropped on drop.
struct LogDb(String);

impl LogDb {
    fn create() -> LogDb {
        cluster();
        let name = format!("fetcher_log_{}_{}", std::process::id(), free_port());
        lpsql("postgres", &format!("CREATE DATABASE {name}"));
        LogDb(name)
    }
}

impl Drop for LogDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(port().to_string())
            .args(["-d", "postgres", "-q", "-c"])
            .arg(format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{0}'; DROP DATABASE IF EXISTS {0} WITH (FORCE)",
                self.0
            ))
            .output();
    }
}

fn job(run: u32, format: Option<&str>) -> Value {
    let mut body = json!({
        "dataRequest": {"mappedFields": {"ledger": {"orders": ["id", "status"]}}},
        "incremental": {"ledger": {"orders": {"mode": "log"}}},
        "syncId": "orders-log",
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

/// `(op, id, status)` of each row of a completed NDJSON job, in order.
fn changes(dir: &std::path::Path, id: &str) -> Vec<(String, i64, Value)> {
    let (ok, out, err) = open_result(dir, id);
    assert!(ok, "{err}");
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let row = &v["row"];
            (
                row["_fetcher_op"].as_str().unwrap().to_owned(),
                row["id"].as_i64().unwrap(),
                row["status"].clone(),
            )
        })
        .collect()
}

fn ops(rows: &[(String, i64, Value)]) -> Vec<(&str, i64)> {
    rows.iter().map(|(op, id, _)| (op.as_str(), *id)).collect()
}

#[test]
fn a_log_sync_snapshots_then_delivers_each_change_once_across_a_crash() {
    let db = LogDb::create();
    lpsql(
        &db.0,
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); \
         INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 10) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    create_ledger(&server, &db.0);

    // Refused at creation: v1, a cursor beside the log mode.
    let mut v1 = job(0, Some("v1"));
    v1["metadata"]["run"] = json!("v1");
    let (status, body) = server.request("POST", "/v1/fetcher", Some(&v1), &[]);
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("v2 or parquet"), "{body}");
    let mut both = job(0, None);
    both["incremental"]["ledger"]["orders"]["cursor"] = json!("id");
    let (status, body) = server.request("POST", "/v1/fetcher", Some(&both), &[]);
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("no cursor"), "{body}");

    // The first job: the snapshot, and the sync's slot on the server.
    let first = submit(&server, &job(1, None));
    let done = server.wait_job(&first, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    let snap = changes(dir.path(), &first);
    assert_eq!(snap.len(), 10);
    assert!(snap.iter().all(|(op, _, _)| op == "snapshot"));
    let slots = lpsql(
        &db.0,
        "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()",
    );
    assert!(
        slots.starts_with("fetcher_") && !slots.contains('\n'),
        "{slots}"
    );
    let (status, sync) = server.request("GET", "/v1/syncs/orders-log", None, &[]);
    assert_eq!(status, 200, "{sync}");
    let position = &sync["tables"]["ledger"]["orders"]["watermark"]["log"];
    assert!(position["lsn"].as_str().unwrap().contains('/'), "{sync}");

    // Changes, in commit order, deletes included.
    lpsql(
        &db.0,
        "INSERT INTO orders VALUES (11, 'new'); UPDATE orders SET status = 'paid' WHERE id = 2; \
         DELETE FROM orders WHERE id = 3; UPDATE orders SET status = 'shipped' WHERE id = 2;",
    );
    let second = submit(&server, &job(2, None));
    let done = server.wait_job(&second, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    let got = changes(dir.path(), &second);
    assert_eq!(
        ops(&got),
        [("insert", 11), ("update", 2), ("delete", 3), ("update", 2)]
    );
    assert_eq!(got[3].2, "shipped");

    // The sync shows its slot and what it retained; scheduled, it is a metric.
    let (_, sync) = server.request("GET", "/v1/syncs/orders-log", None, &[]);
    let log = &sync["tables"]["ledger"]["orders"]["watermark"]["log"];
    assert_eq!(log["slot"].as_str(), Some(slots.as_str()), "{sync}");
    assert!(log["retainedBytes"].as_u64().is_some(), "{sync}");
    assert!(
        log.get("snapshot").is_none(),
        "passed by the second job: {sync}"
    );
    let mut scheduled = job(0, None);
    scheduled.as_object_mut().unwrap().remove("syncId");
    let (status, body) = server.request(
        "PUT",
        "/v1/syncs/orders-log/schedule",
        Some(&json!({"request": scheduled, "rate": "PT1H"})),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = server.request("GET", "/metrics", None, &[]);
        let text = metrics.as_str().unwrap_or_default().to_owned();
        if text.lines().any(|l| {
            l.starts_with("fetcher_sync_log_retained_bytes{")
                && l.contains("sync=\"orders-log\"")
                && l.contains("table=\"orders\"")
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "no retained-log gauge: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, _) = server.request("DELETE", "/v1/syncs/orders-log/schedule", None, &[]);
    assert_eq!(status, 204);
    drop(server);

    // kill -9 after the third job's result is stored, before it completes: the sync
    // stays at the second job's position, and the rerun delivers the same changes.
    lpsql(
        &db.0,
        "DELETE FROM orders WHERE id = 11; INSERT INTO orders VALUES (12, 'late');",
    );
    let mut crashing = Server::start_with(
        dir.path(),
        &[],
        None,
        &[("FETCHER_TEST_CRASH_BEFORE_COMPLETE", "1")],
    );
    let third = submit(&crashing, &job(3, None));
    let deadline = Instant::now() + Duration::from_secs(30);
    while crashing.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "serve did not reach the crash point"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    crashing.kill();
    // Written after the crashed run read its changes: the next job's, not the rerun's.
    lpsql(&db.0, "UPDATE orders SET status = 'after' WHERE id = 12;");
    let server = Server::start(dir.path(), &[]);
    let done = server.wait_job(&third, Duration::from_secs(90));
    assert_eq!(done["status"], "completed", "{done}");
    let rerun = changes(dir.path(), &third);
    assert_eq!(
        ops(&rerun[..2]),
        [("delete", 11), ("insert", 12)],
        "the crashed run's changes, once"
    );
    // The rerun may also see the update that committed after the crash (its bound is
    // taken when it starts): either way the next job continues after it, never twice.
    let fourth = submit(&server, &job(4, Some("parquet")));
    let done = server.wait_job(&fourth, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    let in_fourth = done["resultParts"][0]["rowCount"].as_i64().unwrap();
    assert_eq!(
        rerun.len() as i64 - 2 + in_fourth,
        1,
        "the update after the crash is in exactly one job"
    );
}

#[test]
fn a_log_read_of_another_database_type_is_refused_naming_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let name = format!("fetcher_log_my_{}", free_port());
    mysql(None, &format!("CREATE DATABASE {name}"));
    mysql(
        Some(&name),
        &format!(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT); \
             CREATE USER IF NOT EXISTS 'fetcher_logtest'@'%' IDENTIFIED BY 'log-sync-test-only'; \
             GRANT SELECT ON {name}.* TO 'fetcher_logtest'@'%';"
        ),
    );
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(
            &json!({"configName": "ledger", "type": "MYSQL", "host": "127.0.0.1",
            "port": 3306, "databaseName": name, "userName": "fetcher_logtest",
            "password": "log-sync-test-only"}),
        ),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    let (status, body) = server.request("POST", "/v1/fetcher", Some(&job(1, None)), &[]);
    mysql(None, &format!("DROP DATABASE {name}"));
    assert_eq!(status, 400, "{body}");
    let text = body.to_string();
    assert!(
        text.contains("ledger.orders") && text.contains("POSTGRESQL"),
        "{text}"
    );
}

fn create_ledger(server: &Server, db: &str) -> String {
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(
            &json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1",
            "port": port(), "databaseName": db, "userName": "postgres", "password": "unused"}),
        ),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

/// `(slots, publications)` named `fetcher_…` in `db`.
fn held(db: &str) -> (String, String) {
    (
        lpsql(
            db,
            "SELECT string_agg(slot_name, ',') FROM pg_replication_slots WHERE database = current_database()",
        ),
        lpsql(
            db,
            "SELECT string_agg(pubname, ',') FROM pg_publication WHERE pubname LIKE 'fetcher\\_%'",
        ),
    )
}

/// A job of sync `orders-gone` (slot names are the cluster's: not the other test's sync).
fn gone_job(run: u32) -> Value {
    let mut body = job(run, None);
    body["syncId"] = json!("orders-gone");
    body
}

/// Deleting a log sync drops its slot and publication (kept through a reset), with its
/// schedule; while its connection is gone the sync is kept and the answer names the
/// slot; `keepLog=true` deletes the record alone; a job of the id then starts over.
#[test]
fn deleting_a_log_sync_drops_its_slot_and_publication() {
    let db = LogDb::create();
    lpsql(
        &db.0,
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); \
         INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 5) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let connection = create_ledger(&server, &db.0);
    let first = submit(&server, &gone_job(1));
    let done = server.wait_job(&first, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    let (slot, publication) = held(&db.0);
    assert!(
        slot.starts_with("fetcher_") && !slot.contains(','),
        "{slot}"
    );
    assert_eq!(publication, slot);

    // A reset keeps the slot (the next job reuses it); a schedule is deleted with the sync.
    let (status, body) = server.request("POST", "/v1/syncs/orders-gone/reset", None, &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(held(&db.0).0, slot, "a reset keeps the slot");
    let mut scheduled = gone_job(0);
    scheduled.as_object_mut().unwrap().remove("syncId");
    let (status, body) = server.request(
        "PUT",
        "/v1/syncs/orders-gone/schedule",
        Some(&json!({"request": scheduled, "rate": "PT1H"})),
        &[],
    );
    assert_eq!(status, 200, "{body}");

    let (status, body) = server.request("DELETE", "/v1/syncs/orders-gone?keepLog=yes", None, &[]);
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("FET-0405")),
        "{body}"
    );
    let (status, body) = server.request("DELETE", "/v1/syncs/no-such-sync", None, &[]);
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("FET-1001")),
        "{body}"
    );

    // Without its connection the slot cannot be dropped: the sync stays, the answer
    // names the slot and how to drop it.
    let (status, body) = server.request(
        "DELETE",
        &format!("/v1/management/connections/{connection}"),
        None,
        &[("X-Product-Name", "reporter")],
    );
    assert!(status == 200 || status == 204, "{status} {body}");
    let (status, body) = server.request("DELETE", "/v1/syncs/orders-gone", None, &[]);
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("FET-1028")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&slot) && message.contains("keepLog=true"),
        "{message}"
    );
    let (status, _) = server.request("GET", "/v1/syncs/orders-gone", None, &[]);
    assert_eq!(status, 200, "the sync is kept");
    assert_eq!(held(&db.0).0, slot);

    // With the connection back, the delete drops both and the record.
    create_ledger(&server, &db.0);
    let (status, body) = server.request("DELETE", "/v1/syncs/orders-gone", None, &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["scheduleDeleted"], true, "{body}");
    assert_eq!(
        body["droppedLog"][0]["slot"].as_str(),
        Some(slot.as_str()),
        "{body}"
    );
    assert_eq!(
        held(&db.0),
        (String::new(), String::new()),
        "slot and publication dropped"
    );
    let (status, _) = server.request("GET", "/v1/syncs/orders-gone", None, &[]);
    assert_eq!(status, 404);
    let (status, _) = server.request("GET", "/v1/syncs/orders-gone/schedule", None, &[]);
    assert_eq!(status, 404, "the schedule went with the sync");
    let (status, _) = server.request("DELETE", "/v1/syncs/orders-gone", None, &[]);
    assert_eq!(status, 404);

    // A job of the same id starts over: a snapshot, and a new slot; keepLog=true then
    // deletes the record and leaves the slot (the drop guard removes it).
    let again = submit(&server, &gone_job(2));
    let done = server.wait_job(&again, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    let rows = changes(dir.path(), &again);
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|(op, _, _)| op == "snapshot"), "{rows:?}");
    let (status, body) = server.request("DELETE", "/v1/syncs/orders-gone?keepLog=true", None, &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["droppedLog"], json!([]), "{body}");
    assert_eq!(held(&db.0).0, slot, "kept, as asked");
}

/// A backlog longer than a segment (`FETCHER_TEST_SEGMENT_SECS`, segments of a second):
/// the job continues across segments, each stopping where a transaction ends, and
/// delivers every change once; a job canceled midway moves nothing; the next job starts
/// after the last of them.
#[test]
fn a_log_backlog_longer_than_a_segment_continues_and_delivers_each_change_once() {
    let db = LogDb::create();
    lpsql(
        &db.0,
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); \
         INSERT INTO orders VALUES (0, 'seed');",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--workers", "1"],
        None,
        &[("FETCHER_TEST_SEGMENT_SECS", "1")],
    );
    create_ledger(&server, &db.0);
    let mut backlog = job(1, None);
    backlog["syncId"] = json!("orders-backlog");
    let first = submit(&server, &backlog);
    let done = server.wait_job(&first, Duration::from_secs(60));
    assert_eq!(done["status"], "completed", "{done}");
    // 120 transactions of 1,500 inserts each: 180,000 changes.
    lpsql(
        &db.0,
        "DO $$ BEGIN FOR i IN 0..119 LOOP \
           INSERT INTO orders SELECT i * 1500 + g, 'tx ' || i FROM generate_series(1, 1500) g; \
           COMMIT; END LOOP; END $$;",
    );
    // A job canceled once it has read part of the backlog leaves the sync where it was.
    backlog["metadata"]["run"] = json!("canceled");
    let canceled = submit(&server, &backlog);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = server.request("GET", &format!("/v1/fetcher/{canceled}"), None, &[]);
        if v["progress"]["rows"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            v["status"] == "pending" || v["status"] == "processing",
            "ended before the cancel: {v}"
        );
        assert!(Instant::now() < deadline, "no progress: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) =
        server.request("POST", &format!("/v1/fetcher/{canceled}/cancel"), None, &[]);
    assert_eq!(status, 202, "{body}");
    let done = server.wait_job(&canceled, Duration::from_secs(60));
    assert_eq!(done["status"], "canceled", "{done}");
    backlog["metadata"]["run"] = json!(2);
    let second = submit(&server, &backlog);
    let done = server.wait_job(&second, Duration::from_secs(300));
    assert_eq!(done["status"], "completed", "{done}");
    let parts = done["resultParts"].as_array().expect("parts").len();
    assert!(parts >= 2, "one segment only ({parts} parts): {done}");
    let got = changes(dir.path(), &second);
    assert_eq!(got.len(), 180_000, "each change once");
    let ids: std::collections::BTreeSet<i64> = got.iter().map(|(_, id, _)| *id).collect();
    assert_eq!(ids.len(), 180_000);
    assert!(got.iter().all(|(op, _, _)| op == "insert"));
    // Commit order: transaction i's rows before transaction i + 1's.
    assert!(
        got.windows(2)
            .all(|w| (w[0].1 - 1) / 1500 <= (w[1].1 - 1) / 1500)
    );
    // Unscheduled, the sync still has its retained-log gauge, from its completed jobs.
    let (_, metrics) = server.request("GET", "/metrics", None, &[]);
    let text = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("fetcher_sync_log_retained_bytes{")
                && l.contains("sync=\"orders-backlog\"")
                && l.contains("config=\"ledger\"")),
        "no retained-log gauge: {text}"
    );
    lpsql(&db.0, "DELETE FROM orders WHERE id = 0");
    backlog["metadata"]["run"] = json!(3);
    let third = submit(&server, &backlog);
    let done = server.wait_job(&third, Duration::from_secs(60));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(ops(&changes(dir.path(), &third)), [("delete", 0)]);
    // Deleted, the sync's slot retains nothing: its gauge says 0.
    let (status, body) = server.request("DELETE", "/v1/syncs/orders-backlog", None, &[]);
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = server.request("GET", "/metrics", None, &[]);
    let text = metrics.as_str().unwrap_or_default().to_owned();
    let gauge = text
        .lines()
        .find(|l| {
            l.starts_with("fetcher_sync_log_retained_bytes{")
                && l.contains("sync=\"orders-backlog\"")
        })
        .expect("the gauge");
    assert!(gauge.ends_with(" 0"), "{gauge}");
}
