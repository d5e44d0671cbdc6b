//! Incremental reads on the real databases (docs/api.md, "Incremental extraction"):
//! twenty rounds of inserts and updates (cursor bumped), rows sharing cursor values
//! across batch boundaries, and a writer committing while each job runs. Every version of
//! every row is read exactly once across the jobs, on PostgreSQL, MariaDB and SQLite; a
//! lookback reads again, NULL cursors are never read, and PostgreSQL serves the read from
//! an index on the cursor.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::*;
use fetcher_engine::{Context, ExtractionRequest, Watermark};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

/// A tiny deterministic generator (the rounds are the same every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// The three databases, each with `t (id, v, updated_at)` whose cursor is a timestamp
/// type of its own (PostgreSQL `timestamptz`, MariaDB `DATETIME(6)`, SQLite text in a
/// `DATETIME` column), and a connection to write with.
enum Db {
    Pg(PgDb),
    My(MyDb),
    Lite(LiteDb),
}

const PG_T: &str = "CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, updated_at timestamptz); CREATE INDEX t_cursor ON t (updated_at, id);";
const MY_T: &str = "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64) NOT NULL, updated_at DATETIME(6) NULL, KEY t_cursor (updated_at, id))";
const LITE_T: &str = "PRAGMA journal_mode=WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL, updated_at DATETIME); CREATE INDEX t_cursor ON t (updated_at, id);";

/// Milliseconds after 2026-01-01 as each database writes a timestamp literal.
fn ts(ms: u64) -> String {
    let base = 1_767_225_600_000u64; // 2026-01-01T00:00:00Z
    let t = base + ms;
    let secs = (t / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}000",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        t % 1000
    )
}

impl Db {
    async fn create(kind: &str) -> Db {
        match kind {
            "pg" => Db::Pg(PgDb::create(PG_T).await),
            "my" => Db::My(MyDb::create(&[MY_T]).await),
            _ => Db::Lite(LiteDb::create(LITE_T).await),
        }
    }

    fn descriptor(&self) -> fetcher_engine::ConnectionDescriptor {
        match self {
            Db::Pg(d) => d.descriptor("src"),
            Db::My(d) => d.descriptor("src"),
            Db::Lite(d) => d.descriptor("src"),
        }
    }

    fn literal(&self, ms: Option<u64>) -> String {
        match (self, ms) {
            (_, None) => "NULL".into(),
            (Db::Pg(_), Some(ms)) => format!("'{}+00'", ts(ms)),
            (_, Some(ms)) => format!("'{}'", ts(ms)),
        }
    }

    async fn writer(&self) -> Writer {
        match self {
            Db::Pg(d) => Writer::Pg(pg_admin(&d.name).await),
            Db::My(d) => Writer::My(my_admin(Some(&d.name)).await),
            Db::Lite(d) => Writer::Lite(
                sqlx::SqliteConnection::connect_with(
                    &sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(&d.path)
                        .busy_timeout(std::time::Duration::from_secs(30)),
                )
                .await
                .unwrap(),
            ),
        }
    }

    async fn drop_db(self) {
        match self {
            Db::Pg(d) => d.drop_db().await,
            Db::My(d) => d.drop_db().await,
            Db::Lite(d) => d.remove(),
        }
    }
}

enum Writer {
    Pg(sqlx::PgConnection),
    My(sqlx::MySqlConnection),
    Lite(sqlx::SqliteConnection),
}

impl Writer {
    /// One statement in its own (auto-committed) transaction.
    async fn exec(&mut self, sql: &str) {
        match self {
            Writer::Pg(c) => c.execute(sql).await.map(|_| ()),
            Writer::My(c) => c.execute(sql).await.map(|_| ()),
            Writer::Lite(c) => c.execute(sql).await.map(|_| ()),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// What the writers wrote: every version of every row, by its unique `v`.
#[derive(Default)]
struct Log {
    /// `v → id` of every version ever committed.
    versions: BTreeMap<String, i64>,
    /// The ids whose current version some job has read (only those are updated, so no
    /// version is overwritten before a job could see it).
    readable: Vec<i64>,
    next_id: i64,
    next_version: u64,
    /// The cursor's clock, in milliseconds: writes in commit order never go back.
    clock: u64,
}

impl Log {
    fn version(&mut self, id: i64) -> String {
        self.next_version += 1;
        let v = format!("{id}-{}", self.next_version);
        self.versions.insert(v.clone(), id);
        v
    }
}

async fn insert(w: &mut Writer, db: &Db, log: &Mutex<Log>, same_cursor: bool) {
    let (id, v, ms) = {
        let mut l = log.lock().unwrap();
        l.next_id += 1;
        if !same_cursor {
            l.clock += 1;
        }
        let id = l.next_id;
        (id, l.version(id), l.clock)
    };
    let at = db.literal(Some(ms));
    w.exec(&format!(
        "INSERT INTO t (id, v, updated_at) VALUES ({id}, '{v}', {at})"
    ))
    .await;
}

async fn update(w: &mut Writer, db: &Db, log: &Mutex<Log>, id: i64) {
    let (v, ms) = {
        let mut l = log.lock().unwrap();
        l.clock += 1;
        (l.version(id), l.clock)
    };
    let at = db.literal(Some(ms));
    w.exec(&format!(
        "UPDATE t SET v = '{v}', updated_at = {at} WHERE id = {id}"
    ))
    .await;
}

/// One incremental job after `after`: the rows it read and the watermark it reached.
async fn job(
    h: &Harness,
    after: Option<&Watermark>,
    lookback: Option<&str>,
) -> (Vec<Value>, Option<Watermark>) {
    filtered_job(h, after, lookback, None).await
}

/// [`job`] with the job's `filters` for `t`.
async fn filtered_job(
    h: &Harness,
    after: Option<&Watermark>,
    lookback: Option<&str>,
    filters: Option<Value>,
) -> (Vec<Value>, Option<Watermark>) {
    let mut read = json!({"cursor": "updated_at", "key": ["id"]});
    if let Some(w) = after {
        read["after"] = serde_json::to_value(w).unwrap();
    }
    if let Some(l) = lookback {
        read["lookback"] = json!(l);
    }
    let mut request = json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "incremental": {"src": {"t": read}},
    });
    if let Some(f) = filters {
        request["filters"] = json!({"src": {"t": f}});
    }
    let plan = store_plan(h, request).await;
    let out = h
        .engine
        .execute_extraction(&Context::background(), &plan)
        .await
        .unwrap();
    let path = out.reference.expect("store mode").path;
    let rows = rows_of(&h.sink.get(&path).expect("stored object"), "t");
    let reached = out
        .watermarks
        .get("src")
        .and_then(|t| t.get("t"))
        .cloned()
        .or_else(|| after.cloned());
    (rows, reached)
}

async fn rounds_on(kind: &str) {
    let db = Db::create(kind).await;
    let h = harness(&[db.descriptor()]).await;
    let log = Arc::new(Mutex::new(Log::default()));
    let mut w = db.writer().await;
    let mut rng = Lcg(7);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut watermark: Option<Watermark> = None;
    for round in 0..21 {
        // Before the job: inserts (some sharing one cursor value, once past a batch of
        // 1,024) and updates of rows a job has read, each bumping the cursor.
        let inserts = match round {
            0 => 10,
            7 => 1_500,
            20 => 0,
            _ => 1 + rng.next(60),
        };
        for i in 0..inserts {
            let same = round == 7 || (i > 0 && rng.next(4) == 0);
            insert(&mut w, &db, &log, same).await;
        }
        let candidates = log.lock().unwrap().readable.clone();
        let mut updated = Vec::new();
        for _ in 0..(rng.next(6).min(candidates.len() as u64)) {
            let id = candidates[rng.next(candidates.len() as u64) as usize];
            if !updated.contains(&id) {
                updated.push(id);
                update(&mut w, &db, &log, id).await;
            }
        }
        // The job, with a writer committing new rows (some tied on the cursor) meanwhile.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let background = (round != 20).then(|| {
            let (log, stop) = (log.clone(), stop.clone());
            let db_writer = db.writer();
            let db_ref = &db;
            async move {
                let mut w = db_writer.await;
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) && n < 200 {
                    insert(&mut w, db_ref, &log, n % 3 == 2).await;
                    n += 1;
                }
            }
        });
        let ((rows, reached), ()) = tokio::join!(
            async {
                let out = job(&h, watermark.as_ref(), None).await;
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                out
            },
            async {
                if let Some(b) = background {
                    b.await
                }
            }
        );
        let mut l = log.lock().unwrap();
        for r in &rows {
            let v = r["v"].as_str().unwrap().to_owned();
            *seen.entry(v).or_default() += 1;
            let id = r["id"].as_i64().unwrap();
            if !l.readable.contains(&id) {
                l.readable.push(id);
            }
        }
        drop(l);
        watermark = reached;
    }
    // One last job after every writer stopped picks up the last of them.
    let (rows, _) = job(&h, watermark.as_ref(), None).await;
    for r in &rows {
        *seen.entry(r["v"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    let written = log.lock().unwrap().versions.clone();
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{kind}: versions read twice: {twice:?}");
    let lost: Vec<_> = written.keys().filter(|v| !seen.contains_key(*v)).collect();
    assert!(
        lost.is_empty(),
        "{kind}: versions never read: {} of {}",
        lost.len(),
        written.len()
    );
    assert_eq!(
        seen.len(),
        written.len(),
        "{kind}: only written versions are read"
    );
    assert!(written.len() > 2_000, "{kind}: {} versions", written.len());
    eprintln!(
        "incremental {kind}: {} versions over 22 jobs, each read once",
        written.len()
    );
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_version_is_read_exactly_once() {
    rounds_on("pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_every_version_is_read_exactly_once() {
    rounds_on("my").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_version_is_read_exactly_once() {
    rounds_on("lite").await;
}

/// NULL cursors are never read by an incremental job (the first included); a lookback
/// reads the rows within it again.
#[tokio::test]
async fn null_cursors_are_never_read_and_a_lookback_reads_again() {
    for kind in ["pg", "my", "lite"] {
        let db = Db::create(kind).await;
        let h = harness(&[db.descriptor()]).await;
        let mut w = db.writer().await;
        for (id, ms) in [
            (1, Some(1_000u64)),
            (2, None),
            (3, Some(2_000)),
            (4, Some(60_000)),
        ] {
            let at = db.literal(ms);
            w.exec(&format!(
                "INSERT INTO t (id, v, updated_at) VALUES ({id}, 'v{id}', {at})"
            ))
            .await;
        }
        let (rows, mark) = job(&h, None, None).await;
        let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        assert_eq!(ids, [1, 3, 4], "{kind}: NULL cursor skipped, cursor order");
        assert!(
            rows[0]["updated_at"].is_string(),
            "{kind}: the cursor is read too"
        );
        let mark = mark.unwrap();
        assert_eq!(mark.values[1], json!(4), "{kind}: {mark:?}");
        // Nothing new: an empty read, the watermark unchanged.
        let (rows, same) = job(&h, Some(&mark), None).await;
        assert!(rows.is_empty(), "{kind}: {rows:?}");
        assert_eq!(same.as_ref(), Some(&mark));
        // A lookback of 58 s reaches back to row 3 (58 s before row 4), not to row 1.
        let (rows, _) = job(&h, Some(&mark), Some("PT58S")).await;
        let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        assert_eq!(ids, [3, 4], "{kind}: re-read within the lookback");
        db.drop_db().await;
    }
}

/// A watermark never moves back (#38): with the row it points at hard-deleted and nothing
/// new, the next job ends where it began, with a lookback (which re-reads rows below the
/// watermark, so its last row is below it) and without.
#[tokio::test]
async fn a_watermark_never_moves_back_after_a_hard_delete() {
    for kind in ["pg", "my", "lite"] {
        for lookback in [None, Some("PT10S"), Some("P1D")] {
            let db = Db::create(kind).await;
            let h = harness(&[db.descriptor()]).await;
            let mut w = db.writer().await;
            for (id, ms) in [(1, 1_000u64), (2, 2_000), (3, 2_000), (4, 3_000)] {
                let at = db.literal(Some(ms));
                w.exec(&format!(
                    "INSERT INTO t (id, v, updated_at) VALUES ({id}, 'v{id}', {at})"
                ))
                .await;
            }
            let (_, mark) = job(&h, None, lookback).await;
            let mark = mark.unwrap();
            assert_eq!(mark.values[1], json!(4), "{kind} {lookback:?}");
            // The watermark's row is gone, and nothing new was written.
            w.exec("DELETE FROM t WHERE id = 4").await;
            let (rows, reached) = job(&h, Some(&mark), lookback).await;
            assert_eq!(
                reached.as_ref(),
                Some(&mark),
                "{kind} {lookback:?}: toWatermark equals fromWatermark ({rows:?})"
            );
            // A tie on the cursor below it, deleted too: still where it was.
            w.exec("DELETE FROM t WHERE id = 3").await;
            let (_, reached) = job(&h, Some(&mark), lookback).await;
            assert_eq!(reached.as_ref(), Some(&mark), "{kind} {lookback:?}");
            // A new row moves it forward as usual.
            let at = db.literal(Some(4_000));
            w.exec(&format!(
                "INSERT INTO t (id, v, updated_at) VALUES (5, 'v5', {at})"
            ))
            .await;
            let (_, reached) = job(&h, Some(&mark), lookback).await;
            assert_eq!(reached.unwrap().values[1], json!(5), "{kind} {lookback:?}");
            db.drop_db().await;
        }
    }
}

/// The rule docs/api.md gives a consumer of lookback jobs (#38): the rows at or below a
/// job's `fromWatermark` are re-reads *or* late arrivals (a transaction that took its
/// cursor value early and committed after the previous job), so a consumer keeps each
/// `(key, cursor)` it has not seen; dropping every row at or below `fromWatermark` would
/// drop exactly the late row.
#[tokio::test]
async fn rows_at_or_below_the_from_watermark_are_re_reads_or_late_arrivals() {
    for kind in ["pg", "my", "lite"] {
        let db = Db::create(kind).await;
        let h = harness(&[db.descriptor()]).await;
        let mut w = db.writer().await;
        for (id, ms) in [(1, 1_000u64), (2, 5_000)] {
            let at = db.literal(Some(ms));
            w.exec(&format!(
                "INSERT INTO t (id, v, updated_at) VALUES ({id}, 'v{id}', {at})"
            ))
            .await;
        }
        let mut seen = std::collections::BTreeSet::new();
        let key = |r: &Value| (r["id"].as_i64().unwrap(), r["updated_at"].to_string());
        let (rows, mark) = job(&h, None, Some("PT10S")).await;
        seen.extend(rows.iter().map(key));
        let mark = mark.unwrap();
        // A late commit whose cursor is below the watermark, and a new row above it.
        for (id, ms) in [(3, 4_000u64), (4, 6_000)] {
            let at = db.literal(Some(ms));
            w.exec(&format!(
                "INSERT INTO t (id, v, updated_at) VALUES ({id}, 'v{id}', {at})"
            ))
            .await;
        }
        let (rows, _) = job(&h, Some(&mark), Some("PT10S")).await;
        let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        assert_eq!(
            ids,
            [1, 3, 2, 4],
            "{kind}: the window re-read, the late row inside it"
        );
        let new: Vec<i64> = rows
            .iter()
            .filter(|r| seen.insert(key(r)))
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        assert_eq!(
            new,
            [3, 4],
            "{kind}: deduplicating on (key, cursor) keeps the late row"
        );
        db.drop_db().await;
    }
}

/// PostgreSQL serves an incremental read from an index on the cursor.
#[tokio::test]
async fn postgres_reads_past_the_watermark_through_the_cursor_index() {
    let db = PgDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, updated_at timestamptz); \
         INSERT INTO t SELECT g, 'v' || g, timestamptz '2026-01-01' + g * interval '1 second' FROM generate_series(1, 200000) g; \
         CREATE INDEX t_cursor ON t (updated_at); ANALYZE t;",
    )
    .await;
    let catalog_request: ExtractionRequest = serde_json::from_value(json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "incremental": {"src": {"t": {"cursor": "updated_at", "key": ["id"],
            "after": {"cursor": "updated_at", "key": ["id"], "values": ["2026-01-03T07:00:00Z", 198000]}}}},
    }))
    .unwrap();
    let factory = fetcher_connectors::SqlConnectorFactory::new(
        fetcher_connectors::Dialect::Postgres,
        Arc::new(fetcher_connectors::StaticCredentials::new()),
        fetcher_connectors::HostPolicy::single_tenant(),
    );
    let ctx = Context::background();
    let mut connector = factory
        .build_connector(&ctx, &tenant(), &db.descriptor("src"))
        .await
        .unwrap();
    let step = fetcher_engine::PlanStep::for_datasource(&catalog_request, "src");
    let plans = connector.plan(&ctx, &step).await.unwrap();
    let plan = &plans[0];
    let mut c = pg_admin(&db.name).await;
    let explain = format!("EXPLAIN {}", plan.sql());
    let mut q = sqlx::query_scalar::<_, String>(&explain);
    for b in &plan.binds {
        q = match b {
            fetcher_connectors::filter::Bind::Text(s) => q.bind(s.clone()),
            fetcher_connectors::filter::Bind::I64(i) => q.bind(*i),
            other => panic!("{other:?}"),
        };
    }
    let lines: Vec<String> = q.fetch_all(&mut c).await.unwrap();
    let text = lines.join("\n");
    assert!(
        text.contains("Index") && text.contains("t_cursor"),
        "{text}"
    );
    eprintln!("{}\n{text}", plan.sql());
    c.close().await.unwrap();
    db.drop_db().await;
}

/// MariaDB: what its optimizer does with `plan`'s statement (EXPLAIN with the binds):
/// the index it reads and its `Extra` column, one pair per row.
async fn my_explain(
    db: &MyDb,
    plan: &fetcher_connectors::query::TablePlan,
) -> Vec<(Option<String>, String)> {
    use sqlx::Row;
    let mut c = my_admin(Some(&db.name)).await;
    let explain = format!("EXPLAIN {}", plan.sql());
    let mut q = sqlx::query(&explain);
    for b in &plan.binds {
        q = match b {
            fetcher_connectors::filter::Bind::Text(s) => q.bind(s.clone()),
            fetcher_connectors::filter::Bind::I64(i) => q.bind(*i),
            other => panic!("{other:?}"),
        };
    }
    let rows = q.fetch_all(&mut c).await.unwrap();
    c.close().await.unwrap();
    rows.iter()
        .map(|r| {
            let key: Option<String> = r.try_get("key").unwrap();
            let extra: Option<String> = r.try_get("Extra").unwrap();
            (key, extra.unwrap_or_default())
        })
        .collect()
}

/// #38 item 4: MariaDB plans a read past a watermark where most rows remain as a full
/// scan and a sort of all of them (a continued job's part then spends its time sorting
/// before its first row). Given an index on the cursor (InnoDB appends the key), the read
/// is told to use it for its order: rows stream in index order, with no sort; a
/// selective filter still uses its own index. Also a resumed read on a composite key.
#[tokio::test]
async fn mariadb_reads_past_the_watermark_in_index_order_without_a_sort() {
    let db = MyDb::create(&[
        "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL, updated_at DATETIME(6) NOT NULL, \
         KEY t_cursor (updated_at), KEY t_v (v))",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_100000",
        "CREATE TABLE c (a VARCHAR(10) NOT NULL, b INT NOT NULL, v INT, PRIMARY KEY (a, b))",
        "INSERT INTO c SELECT CONCAT('k', seq % 50), seq, seq FROM seq_1_to_50000",
        "ANALYZE TABLE t, c",
    ])
    .await;
    let factory = fetcher_connectors::SqlConnectorFactory::new(
        fetcher_connectors::Dialect::MySql,
        Arc::new(fetcher_connectors::StaticCredentials::new()),
        fetcher_connectors::HostPolicy::single_tenant(),
    );
    let ctx = Context::background();
    let mut connector = factory
        .build_connector(&ctx, &tenant(), &db.descriptor("src"))
        .await
        .unwrap();
    let plan_of = |request: serde_json::Value| {
        let request: ExtractionRequest = serde_json::from_value(request).unwrap();
        fetcher_engine::PlanStep::for_datasource(&request, "src")
    };
    let after =
        json!({"cursor": "updated_at", "key": ["id"], "values": ["2026-01-01T00:00:10Z", 10]});
    // Past a watermark near the start: most rows remain.
    let step = plan_of(json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "incremental": {"src": {"t": {"cursor": "updated_at", "key": ["id"], "after": after}}},
    }));
    let plans = connector.plan(&ctx, &step).await.unwrap();
    assert!(
        plans[0]
            .sql()
            .contains("FORCE INDEX FOR ORDER BY (`t_cursor`)"),
        "{}",
        plans[0].sql()
    );
    let explained = my_explain(&db, &plans[0]).await;
    assert_eq!(explained.len(), 1, "{explained:?}");
    assert_eq!(explained[0].0.as_deref(), Some("t_cursor"), "{explained:?}");
    assert!(!explained[0].1.contains("filesort"), "{explained:?}");
    // A sync's first read (no watermark yet) too.
    let step = plan_of(json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "incremental": {"src": {"t": {"cursor": "updated_at"}}},
    }));
    let plans = connector.plan(&ctx, &step).await.unwrap();
    let explained = my_explain(&db, &plans[0]).await;
    assert!(!explained[0].1.contains("filesort"), "{explained:?}");
    // A selective filter keeps its own index (and sorts its one row).
    let step = plan_of(json!({
        "mappedFields": {"src": {"t": ["id", "v"]}},
        "filters": {"src": {"t": {"v": {"eq": ["v77"]}}}},
        "incremental": {"src": {"t": {"cursor": "updated_at", "key": ["id"], "after": after}}},
    }));
    let plans = connector.plan(&ctx, &step).await.unwrap();
    let explained = my_explain(&db, &plans[0]).await;
    assert_eq!(explained[0].0.as_deref(), Some("t_v"), "{explained:?}");
    // A read resumed on a composite primary key goes on in the key's order.
    let mut step = plan_of(json!({"mappedFields": {"src": {"c": ["b", "v"]}}}));
    step.resume_after
        .insert("c".into(), vec![json!("k1"), json!(1)]);
    let plans = connector.plan(&ctx, &step).await.unwrap();
    assert!(
        plans[0]
            .sql()
            .contains("FORCE INDEX FOR ORDER BY (`PRIMARY`)"),
        "{}",
        plans[0].sql()
    );
    let explained = my_explain(&db, &plans[0]).await;
    assert!(!explained[0].1.contains("filesort"), "{explained:?}");
    drop(connector);
    db.drop_db().await;
}

/// Filters and the cursor condition together: a job reads the rows past its watermark
/// that also match its filters, and the watermark it reaches is the last such row's.
#[tokio::test]
async fn filters_combine_with_the_cursor_condition() {
    for kind in ["pg", "my", "lite"] {
        let db = Db::create(kind).await;
        let h = harness(&[db.descriptor()]).await;
        let mut w = db.writer().await;
        // Rows 1-50, cursor id seconds; every third row is 'keep'.
        let put = |id: i64| {
            let v = if id % 3 == 0 { "keep" } else { "skip" };
            let at = db.literal(Some(id as u64 * 1000));
            format!("INSERT INTO t (id, v, updated_at) VALUES ({id}, '{v}', {at})")
        };
        for id in 1..=40 {
            w.exec(&put(id)).await;
        }
        let keep = json!({"v": {"eq": ["keep"]}});
        let run = async |after: Option<Watermark>| {
            let (rows, mark) = filtered_job(&h, after.as_ref(), None, Some(keep.clone())).await;
            let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
            (ids, mark.unwrap())
        };
        let (ids, mark) = run(None).await;
        assert_eq!(ids, (1..=13).map(|i| i * 3).collect::<Vec<_>>(), "{kind}");
        assert_eq!(mark.values[1], json!(39), "{kind}: the last matching row");
        // New rows, and two old ones moved past the watermark: one still 'skip', one now
        // 'keep'. Only the matching ones are read, in cursor order.
        for id in 41..=50 {
            w.exec(&put(id)).await;
        }
        for (id, v, ms) in [(5, "skip", 60_000), (7, "keep", 61_000)] {
            let at = db.literal(Some(ms));
            w.exec(&format!(
                "UPDATE t SET v = '{v}', updated_at = {at} WHERE id = {id}"
            ))
            .await;
        }
        let (ids, mark) = run(Some(mark)).await;
        assert_eq!(ids, [42, 45, 48, 7], "{kind}");
        assert_eq!(mark.values[1], json!(7), "{kind}");
        db.drop_db().await;
    }
}
