//! Tables read from the PostgreSQL log through the engine (docs/api.md, "Changes from the
//! log"), on the private `wal_level=logical` cluster of `scripts/pg-logical`: values as an
//! ordinary read renders them, refusals, a lost slot and a reset, users who may not
//! publish the table, a column added mid-sync, and the churn test through the engine.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::logical::*;
use fetcher_connectors::pglog;
use fetcher_engine::LogSlot;
use sqlx::Executor;

fn descriptor(db: &LogDb) -> fetcher_engine::ConnectionDescriptor {
    fetcher_engine::ConnectionDescriptor {
        config_name: "src".into(),
        datasource_type: fetcher_engine::DatasourceType::Postgresql,
        host: "127.0.0.1".into(),
        port: db.port,
        database_name: db.name.clone(),
        username: "postgres".into(),
        ..Default::default()
    }
}

/// One job of a log sync through the engine: the rows it wrote and the watermark it
/// reached (the sync's next position).
async fn log_job(
    h: &common::Harness,
    slot: &LogSlot,
    fields: &[&str],
    after: Option<&fetcher_engine::Watermark>,
) -> (Vec<serde_json::Value>, fetcher_engine::Watermark) {
    let mut read = serde_json::json!({"mode": "log", "key": ["id"], "slot": slot});
    if let Some(w) = after {
        read["after"] = serde_json::to_value(w).unwrap();
    }
    let request = serde_json::json!({
        "mappedFields": {"src": {"t": fields}},
        "incremental": {"src": {"t": read}},
    });
    let (out, rows) = run(h, request).await;
    (rows, out.watermarks["src"]["t"].clone())
}

/// Runs `request` in store mode: the engine's result and the rows of `t` it stored.
async fn run(
    h: &common::Harness,
    request: serde_json::Value,
) -> (fetcher_engine::ExtractionResult, Vec<serde_json::Value>) {
    let plan = common::store_plan(h, request).await;
    let out = h
        .engine
        .execute_extraction(&fetcher_engine::Context::background(), &plan)
        .await
        .unwrap();
    let path = out.reference.clone().expect("store mode").path;
    let rows = common::rows_of(&h.sink.get(&path).expect("stored object"), "t");
    (out, rows)
}

/// The ordinary read of `t` (every column), by id.
async fn ordinary(h: &common::Harness) -> BTreeMap<i64, serde_json::Value> {
    let request = serde_json::json!({"mappedFields": {"src": {"t": []}}});
    run(h, request)
        .await
        .1
        .into_iter()
        .map(|r| (r["id"].as_i64().unwrap(), r))
        .collect()
}

fn without_marker(row: &serde_json::Value) -> serde_json::Value {
    let mut r = row.clone();
    r.as_object_mut()
        .unwrap()
        .retain(|k, _| !k.starts_with(pglog::MARKER_PREFIX));
    r
}

/// A sync read from the log through the engine: the first job is the snapshot (rows as an
/// ordinary read gives them, marked `snapshot`), the next the changes, each row's values
/// exactly as an ordinary read renders them (every type the log decodes), deletes with
/// their key, an update that moves the key as a delete and an insert, and a job with
/// nothing to read still moves the position on.
#[tokio::test]
async fn a_log_sync_through_the_engine_renders_values_as_an_ordinary_read() {
    let db = LogDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, flag boolean, small smallint, n numeric(12,3), \
           f double precision, name varchar(20), body text, at timestamptz, day date, \
           tod time, u uuid, doc jsonb, j json, raw bytea, tags text[], nums int[], span interval); \
         INSERT INTO t VALUES (1, true, 7, 12.5, 1.25, 'one', 'a', '2026-01-02 03:04:05.678+00', \
           '2026-01-02', '10:11:12', '11111111-1111-1111-1111-111111111111', '{\"b\": [1, 2.50]}', \
           '{\"x\" : 1}', '\\x00ff', '{a,\"b c\"}', '{1,NULL,3}', '1 day 2 hours'), \
           (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);",
    )
    .await;
    let h = common::harness(&[descriptor(&db)]).await;
    let slot = LogSlot::for_sync("t1", &common::unique("engine"), "src", "t");

    let (snapshot, at) = log_job(&h, &slot, &[], None).await;
    let base = ordinary(&h).await;
    assert_eq!(snapshot.len(), 2);
    for r in &snapshot {
        assert_eq!(r["_fetcher_op"], "snapshot");
        assert_eq!(without_marker(r), base[&r["id"].as_i64().unwrap()]);
    }
    let log = at.log.clone().expect("a log position");
    assert!(log.snapshot.is_some(), "kept for the first change read");
    assert_eq!(snapshot[0]["_fetcher_lsn"], log.lsn.as_str());

    let mut c = db.conn().await;
    c.execute(
        "INSERT INTO t (id, flag, n, body, tags) VALUES (3, false, -0.001, 'three', '{}'); \
         UPDATE t SET n = 99999.999, doc = '[]', span = '-3 mons' WHERE id = 1; \
         DELETE FROM t WHERE id = 2; \
         UPDATE t SET id = 4 WHERE id = 3;",
    )
    .await
    .unwrap();
    let (changes, at2) = log_job(&h, &slot, &[], Some(&at)).await;
    let now = ordinary(&h).await;
    let ops: Vec<(&str, i64)> = changes
        .iter()
        .map(|r| {
            (
                r["_fetcher_op"].as_str().unwrap(),
                r["id"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("insert", 3),
            ("update", 1),
            ("delete", 2),
            ("delete", 3),
            ("insert", 4)
        ]
    );
    assert_eq!(
        without_marker(&changes[1]),
        now[&1],
        "an update: the new row"
    );
    assert_eq!(without_marker(&changes[4]), now[&4]);
    assert!(changes[2]["flag"].is_null() && changes[2]["_fetcher_unchanged"].is_null());
    assert!(
        changes
            .iter()
            .all(|r| r["_fetcher_commit_time"].as_str().unwrap().ends_with('Z'))
    );
    let lsn2 = at2.log.clone().unwrap();
    assert!(lsn2.value() > log.value());
    assert_eq!(lsn2.snapshot, None, "dropped once a read passed it");

    // Nothing new: no rows, and the position still moves on with the server's log (an
    // idle sync does not hold the log back).
    let (none, at3) = log_job(&h, &slot, &["id", "name"], Some(&at2)).await;
    assert!(none.is_empty());
    assert!(at3.log.as_ref().unwrap().value() >= lsn2.value());
    // An unchanged TOASTed value is named, not reported as a value.
    c.execute(
        "UPDATE t SET body = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 2000) g) WHERE id = 1",
    )
    .await
    .unwrap();
    let (_, at4) = log_job(&h, &slot, &["id", "body"], Some(&at3)).await;
    c.execute("UPDATE t SET flag = false WHERE id = 1")
        .await
        .unwrap();
    let (rows, _) = log_job(&h, &slot, &["id", "body", "flag"], Some(&at4)).await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0]["body"].is_null());
    assert_eq!(rows[0]["_fetcher_unchanged"], serde_json::json!(["body"]));
    assert_eq!(rows[0]["flag"], false);
    drop(c);
    db.drop().await;
}

/// What a log read refuses, at planning, with a message saying what to change.
#[tokio::test]
async fn a_log_read_refuses_what_it_cannot_read() {
    let db = LogDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, addr inet); \
         CREATE TABLE nokey (v text); CREATE TABLE odd (id int PRIMARY KEY, _fetcher_op text);",
    )
    .await;
    let h = common::harness(&[descriptor(&db)]).await;
    let slot = LogSlot::for_sync("t1", &common::unique("refuse"), "src", "t");
    let run = async |table: &str, fields: serde_json::Value, filters: Option<serde_json::Value>| {
        let mut request = serde_json::json!({
            "mappedFields": {"src": {table: fields}},
            "incremental": {"src": {table: {"mode": "log", "key": ["id"], "slot": slot}}},
        });
        if let Some(f) = filters {
            request["filters"] = serde_json::json!({"src": {table: f}});
        }
        let plan = common::store_plan(&h, request).await;
        h.engine
            .execute_extraction(&fetcher_engine::Context::background(), &plan)
            .await
            .unwrap_err()
            .to_string()
    };
    let e = run("t", serde_json::json!([]), None).await;
    assert!(e.contains("column 'addr'") && e.contains("inet"), "{e}");
    let e = run(
        "t",
        serde_json::json!(["id"]),
        Some(serde_json::json!({"id": {"eq": [1]}})),
    )
    .await;
    assert!(e.contains("filter"), "{e}");
    let e = run("nokey", serde_json::json!([]), None).await;
    assert!(e.contains("no primary key"), "{e}");
    let e = run("odd", serde_json::json!([]), None).await;
    assert!(e.contains("_fetcher_op"), "{e}");
    db.drop().await;
}

/// A slot the server invalidated (`max_slot_wal_keep_size`, on a cluster of its own so no
/// other test's slot is invalidated with it) fails the next change job with its own
/// reason, not a retryable outage; the job after a reset (a new snapshot) drops it and
/// starts over on a new slot.
#[tokio::test]
async fn an_invalidated_slot_fails_with_its_reason_and_a_reset_starts_over() {
    let port = port() + 1;
    pg_logical("start", port);
    let db = LogDb::create_on(port, "CREATE TABLE t (id bigint PRIMARY KEY, v text);").await;
    let mut c = db.conn().await;
    c.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        .await
        .unwrap();
    c.execute("SELECT pg_reload_conf()").await.unwrap();
    let h = common::harness(&[descriptor(&db)]).await;
    let slot = LogSlot::for_sync("t1", &common::unique("lost"), "src", "t");
    let (_, at) = log_job(&h, &slot, &["id", "v"], None).await;
    // Write past the limit, in new segments, then checkpoint: the server removes the log
    // the slot still needs.
    for _ in 0..4 {
        c.execute(
            "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g \
             ON CONFLICT (id) DO UPDATE SET v = excluded.v",
        )
        .await
        .unwrap();
        c.execute("SELECT pg_switch_wal()").await.unwrap();
        c.execute("CHECKPOINT").await.unwrap();
    }
    let status: String =
        sqlx::query_scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&slot.slot)
            .fetch_one(&mut c)
            .await
            .unwrap();
    assert_eq!(status, "lost", "the server invalidated the slot");
    let request = serde_json::json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "incremental": {"src": {"t": {"mode": "log", "key": ["id"], "slot": slot, "after": at}}},
    });
    let plan = common::store_plan(&h, request).await;
    let err = h
        .engine
        .execute_extraction(&fetcher_engine::Context::background(), &plan)
        .await
        .unwrap_err();
    assert_eq!(
        err.reason(),
        Some(fetcher_engine::Reason::LogSlotLost),
        "{err}"
    );
    assert_eq!(err.retry(), fetcher_engine::Retry::Futile);
    // The reset: the next job has no position, takes a new snapshot on a new slot.
    let (rows, again) = log_job(&h, &slot, &["id", "v"], None).await;
    assert_eq!(rows.len(), 20_000);
    let status: String =
        sqlx::query_scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&slot.slot)
            .fetch_one(&mut c)
            .await
            .unwrap();
    assert_ne!(status, "lost");
    c.execute("INSERT INTO t VALUES (0, 'after the reset')")
        .await
        .unwrap();
    let (changes, _) = log_job(&h, &slot, &["id", "v"], Some(&again)).await;
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["v"], "after the reset");
    drop(c);
    db.drop().await;
    pg_logical("stop", port);
}

/// A user with `REPLICATION` who does not own the table is told what it needs (the
/// publication), not given a retryable failure; a column added between jobs appears in
/// the rows after it, and a column dropped is no longer read (and refused when named).
#[tokio::test]
async fn a_non_owner_is_told_and_an_added_column_appears_in_later_jobs() {
    let db = LogDb::create("CREATE TABLE t (id bigint PRIMARY KEY, v text);").await;
    let mut c = db.conn().await;
    let user = common::unique("repl");
    c.execute(format!("CREATE ROLE {user} LOGIN REPLICATION").as_str())
        .await
        .unwrap();
    c.execute(format!("GRANT SELECT ON t TO {user}").as_str())
        .await
        .unwrap();
    let mut d = descriptor(&db);
    d.username = user.clone();
    let h = common::harness(&[d]).await;
    let slot = LogSlot::for_sync("t1", &common::unique("owner"), "src", "t");
    let request = serde_json::json!({
        "mappedFields": {"src": {"t": []}},
        "incremental": {"src": {"t": {"mode": "log", "key": ["id"], "slot": slot}}},
    });
    let plan = common::store_plan(&h, request).await;
    let err = h
        .engine
        .execute_extraction(&fetcher_engine::Context::background(), &plan)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must own the table"), "{err}");
    assert_eq!(err.retry(), fetcher_engine::Retry::Futile);

    // The owner's sync: a column added after the snapshot is in the next job's rows.
    let h = common::harness(&[descriptor(&db)]).await;
    let (_, at) = log_job(&h, &slot, &[], None).await;
    c.execute("INSERT INTO t VALUES (1, 'before')")
        .await
        .unwrap();
    c.execute("ALTER TABLE t ADD COLUMN extra int")
        .await
        .unwrap();
    c.execute("INSERT INTO t VALUES (2, 'after', 7)")
        .await
        .unwrap();
    let (rows, at) = log_job(&h, &slot, &[], Some(&at)).await;
    assert_eq!(rows.len(), 2);
    assert!(rows[0]["extra"].is_null() && rows[0]["v"] == "before");
    assert_eq!(rows[1]["extra"], 7);
    // A column dropped: once the schema is discovered again, a job of every column
    // reads the rest, and one naming the dropped column is refused, saying which.
    c.execute("ALTER TABLE t DROP COLUMN v").await.unwrap();
    c.execute("INSERT INTO t VALUES (3, 8)").await.unwrap();
    h.engine
        .discover_schema_fresh(
            &fetcher_engine::Context::background(),
            &common::tenant(),
            "src",
        )
        .await
        .unwrap();
    let request = serde_json::json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "incremental": {"src": {"t": {"mode": "log", "key": ["id"], "slot": slot, "after": at}}},
    });
    let request: fetcher_engine::ExtractionRequest = serde_json::from_value(request).unwrap();
    let err = h
        .engine
        .plan_extraction(
            &fetcher_engine::Context::background(),
            &common::tenant(),
            &request,
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.category(),
        fetcher_engine::Category::Validation,
        "{err}"
    );
    let (rows, _) = log_job(&h, &slot, &[], Some(&at)).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["id"].as_i64(), &rows[0]["extra"]),
        (Some(3), &serde_json::json!(8))
    );
    assert!(
        rows[0].get("v").is_none(),
        "the dropped column is not read: {}",
        rows[0]
    );
    c.execute(format!("DROP OWNED BY {user}; DROP ROLE {user}").as_str())
        .await
        .unwrap();
    drop(c);
    db.drop().await;
}

/// The churn test through the engine: writers insert, update and delete at random (some
/// transactions holding their writes a while before committing) while a sync reads a
/// snapshot and then 20 jobs of changes, every fourth job failing once (its rows thrown
/// away, its position not stored) before its retry. Applying every completed job's rows
/// in order to the snapshot gives the table's final state, and each change applies
/// exactly once (versions step by one; no insert of a known key, no delete of an unknown
/// one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_log_jobs_under_churn_through_the_engine_apply_to_the_final_state() {
    let db = LogDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, version bigint NOT NULL, pad text); \
         INSERT INTO t SELECT g, 1, 'seed' FROM generate_series(1, 300) g;",
    )
    .await;
    let h = common::harness(&[descriptor(&db)]).await;
    let slot = LogSlot::for_sync("t1", &common::unique("churn_engine"), "src", "t");
    let mut churn = Churn::start(&db, 3, 360).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (snapshot, mut at) = log_job(&h, &slot, &["id", "version"], None).await;
    let mut model: BTreeMap<i64, i64> = snapshot
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r["version"].as_i64().unwrap()))
        .collect();
    let mut applied = 0;
    for job in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if job == 19 {
            churn.stop().await;
        }
        if job % 4 == 1 {
            // A run that fails after reading: nothing of it is kept.
            let _ = log_job(&h, &slot, &["id", "version"], Some(&at)).await;
        }
        let (rows, reached) = log_job(&h, &slot, &["id", "version"], Some(&at)).await;
        for r in &rows {
            let id = r["id"].as_i64().unwrap();
            match r["_fetcher_op"].as_str().unwrap() {
                "insert" => {
                    let v = r["version"].as_i64().unwrap();
                    assert!(model.insert(id, v).is_none(), "insert of known {id}");
                }
                "update" => {
                    let v = r["version"].as_i64().unwrap();
                    assert_eq!(model.insert(id, v), Some(v - 1), "update of {id}");
                }
                "delete" => assert!(model.remove(&id).is_some(), "delete of unknown {id}"),
                other => panic!("unexpected {other}"),
            }
            applied += 1;
        }
        at = reached;
    }
    let (last, _) = log_job(&h, &slot, &["id", "version"], Some(&at)).await;
    assert!(last.is_empty(), "nothing after the writers stopped");
    assert!(applied > 100, "the writers changed the table: {applied}");
    let mut c = db.conn().await;
    let table: BTreeMap<i64, i64> = sqlx::query_as::<_, (i64, i64)>("SELECT id, version FROM t")
        .fetch_all(&mut c)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(model, table);
    drop(c);
    db.drop().await;
}

/// A backlog past one run (a continued job, docs/operations.md "Long jobs"): the change
/// read run in segments, each asked to stop at once, stops only where a transaction
/// ends (a transaction bigger than a batch is never cut) and, resumed after it, gives
/// exactly the bytes of one uninterrupted run; a snapshot is never cut.
#[tokio::test]
async fn a_backlog_read_in_segments_stops_between_transactions_with_one_runs_bytes() {
    let db = LogDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, v text); \
         INSERT INTO t SELECT g, 'first' FROM generate_series(1, 1500) g;",
    )
    .await;
    let h = common::harness(&[descriptor(&db)]).await;
    let slot = LogSlot::for_sync("t1", &common::unique("backlog"), "src", "t");
    let read = |after: Option<&fetcher_engine::Watermark>| {
        let mut read = serde_json::json!({"mode": "log", "key": ["id"], "slot": slot});
        if let Some(w) = after {
            read["after"] = serde_json::to_value(w).unwrap();
        }
        serde_json::json!({
            "mappedFields": {"src": {"t": ["id", "v"]}},
            "incremental": {"src": {"t": read}},
        })
    };
    // The snapshot (1,500 rows, more than a batch) is one segment: it cannot resume.
    let plan = common::store_plan(&h, read(None)).await;
    let (_, segments) = common::run_in_segments(&h, &plan, async || {}).await;
    assert_eq!(segments, 1, "a snapshot is read in one run");
    let (_, at) = log_job(&h, &slot, &["id", "v"], None).await;

    // The backlog: three transactions under a batch, one of 2,500 rows, then small ones.
    let mut c = db.conn().await;
    for n in 0..3 {
        c.execute(format!("UPDATE t SET v = 'pass {n}' WHERE id <= 700").as_str())
            .await
            .unwrap();
    }
    c.execute("INSERT INTO t SELECT g, 'big' FROM generate_series(2001, 4500) g")
        .await
        .unwrap();
    for id in 1..=5 {
        c.execute(format!("DELETE FROM t WHERE id = {id}").as_str())
            .await
            .unwrap();
    }
    let plan = common::store_plan(&h, read(Some(&at))).await;
    let whole = h
        .engine
        .execute_extraction(&fetcher_engine::Context::background(), &plan)
        .await
        .unwrap();
    let whole = h.sink.get(&whole.reference.unwrap().path).unwrap();
    let (joined, segments) = common::run_in_segments(&h, &plan, async || {}).await;
    let rows = common::rows_of(&whole, "t");
    assert_eq!(rows.len(), 3 * 700 + 2500 + 5);
    assert!(
        segments >= 4,
        "stops between the transactions: {segments} segments"
    );
    assert_eq!(
        String::from_utf8(joined).unwrap(),
        String::from_utf8(whole).unwrap(),
        "the segments' parts hold one run's bytes"
    );
    // The 2,500-row transaction is whole in one segment's parts: a stop inside it would
    // have lost the rest of it on resume, which the equality above rules out.
    drop(c);
    db.drop().await;
}
