//! The consistency a continued job promises (docs/engine.md, "Continued runs"), under
//! writers that commit while it runs, on PostgreSQL and MariaDB: a run cut into segments
//! after every batch, while a writer updates rows ahead of and behind the resume point,
//! deletes some and inserts new ones, holds every key at most once, in key order; every
//! row that existed throughout is there; every row is one committed version of itself
//! (never a torn mix), no newer than the last the writer committed. The same holds for a
//! fanned-out job (docs/engine.md, "Fan-out"): the table's key span, read from the
//! database, cut into 4 key ranges, each read in segments under the same writes.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use fetcher_engine::ExtractionPlan;
use serde_json::json;

/// Initial rows: even ids 2..=2·ROWS, version 0. The writer inserts odd ids.
const ROWS: i64 = 12_000;

/// What the writer did, as committed.
#[derive(Default)]
struct Written {
    /// The last committed version of every row the writer updated.
    versions: HashMap<i64, i64>,
    deleted: HashSet<i64>,
    inserted: HashSet<i64>,
    updates: usize,
}

/// A writer on its own connection: one autocommitted statement at a time.
enum Writer {
    Pg(sqlx::PgConnection),
    My(sqlx::MySqlConnection),
}

impl Writer {
    async fn exec(&mut self, sql: &str) -> u64 {
        match self {
            Writer::Pg(c) => sqlx::query(sql).execute(c).await.unwrap().rows_affected(),
            Writer::My(c) => sqlx::query(sql).execute(c).await.unwrap().rows_affected(),
        }
    }

    /// One random write, recorded in `written` only once committed. The assignment order
    /// (`note` before `v`) gives the same row on both dialects: MariaDB assigns left to
    /// right with the new values, PostgreSQL from the old row.
    async fn step(&mut self, rng: &mut u64, written: &Mutex<Written>) {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let id = 2 * (1 + (*rng % ROWS as u64) as i64);
        match (*rng >> 40) % 10 {
            0 if id % 10 == 0 => {
                if self.exec(&format!("DELETE FROM cw WHERE id = {id}")).await == 1 {
                    written.lock().unwrap().deleted.insert(id);
                }
            }
            1 => {
                let new = id - 1;
                let fresh = !written.lock().unwrap().inserted.contains(&new);
                if fresh {
                    self.exec(&format!("INSERT INTO cw VALUES ({new}, 0, 'n0')"))
                        .await;
                    written.lock().unwrap().inserted.insert(new);
                }
            }
            _ => {
                let sql =
                    format!("UPDATE cw SET note = CONCAT('n', v + 1), v = v + 1 WHERE id = {id}");
                if self.exec(&sql).await == 1 {
                    let mut w = written.lock().unwrap();
                    *w.versions.entry(id).or_insert(0) += 1;
                    w.updates += 1;
                }
            }
        }
    }
}

/// Runs `plan` in segments, each asked to stop at once, while `writer` writes both in a
/// task of its own and in a burst between segments; checks the promise and returns the
/// number of segments. With `ranges` above 1 the table is first cut into that many key
/// ranges from its span, each read (in segments) after the other.
async fn segmented_under_writes(
    h: &Harness,
    plan: &ExtractionPlan,
    writer: Writer,
    ranges: usize,
) -> usize {
    let plans: Vec<ExtractionPlan> = if ranges > 1 {
        let ctx = fetcher_engine::Context::background();
        let spans = h.engine.key_spans(&ctx, plan, "src").await.unwrap();
        let span = spans[0].clone().expect("an integer key has a span");
        assert_eq!((&span.min, &span.max), (&2.into(), &(2 * ROWS).into()));
        let keys = span.ranges(ranges);
        assert_eq!(keys.len(), ranges);
        keys.iter()
            .enumerate()
            .map(|(i, k)| {
                let mut p = plan.clone();
                p.request_id = format!("{}-range{i}", p.request_id);
                p.steps[0].key_ranges.insert("cw".into(), k.clone());
                p
            })
            .collect()
    } else {
        vec![plan.clone()]
    };
    let written = Arc::new(Mutex::new(Written::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let burst = Arc::new(tokio::sync::Mutex::new(writer));
    let background = {
        let (written, stop, burst) = (written.clone(), stop.clone(), burst.clone());
        tokio::spawn(async move {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            while !stop.load(Ordering::Relaxed) {
                burst.lock().await.step(&mut rng, &written).await;
                tokio::task::yield_now().await;
            }
        })
    };

    let mut rng = 0xD1B5_4A32_D192_ED03u64;
    let (mut joined, mut segments) = (Vec::new(), 0);
    for plan in &plans {
        let (bytes, n) = run_in_segments(h, plan, async || {
            let mut w = burst.lock().await;
            for _ in 0..40 {
                w.step(&mut rng, &written).await;
            }
        })
        .await;
        joined.extend(bytes);
        segments += n;
    }
    stop.store(true, Ordering::Relaxed);
    background.await.unwrap();

    let written = written.lock().unwrap();
    let rows = rows_of(&joined, "cw");
    let mut last = i64::MIN;
    let mut seen = HashSet::new();
    let mut newer = 0;
    for row in &rows {
        let id = row["id"].as_i64().unwrap();
        let v = row["v"].as_i64().unwrap();
        assert!(
            id > last,
            "id {id} after {last}: a key twice or out of order"
        );
        last = id;
        seen.insert(id);
        assert_eq!(row["note"], format!("n{v}"), "row {id} is not one version");
        let max = written.versions.get(&id).copied().unwrap_or(0);
        assert!(
            (0..=max).contains(&v),
            "row {id} at v{v}, writer reached v{max}"
        );
        if v > 0 {
            newer += 1;
        }
        assert!(
            id % 2 == 0 || written.inserted.contains(&id),
            "row {id} never existed"
        );
    }
    for id in (1..=ROWS).map(|i| 2 * i) {
        if !written.deleted.contains(&id) {
            assert!(
                seen.contains(&id),
                "row {id} existed throughout but is missing"
            );
        }
    }
    eprintln!(
        "{} rows, {} updates ({newer} rows read newer than v0), {} deleted, {} inserted",
        rows.len(),
        written.updates,
        written.deleted.len(),
        written.inserted.len()
    );
    assert!(written.updates > 100, "{} updates", written.updates);
    assert!(
        newer > 0,
        "no update reached the result: the writer ran too late"
    );
    assert!(!written.deleted.is_empty() && !written.inserted.is_empty());
    segments
}

fn request() -> serde_json::Value {
    json!({"mappedFields": {"src": {"cw": ["id", "v", "note"]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_continued_run_under_concurrent_writes() {
    postgres_under_writes(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fanned_out_run_under_concurrent_writes() {
    postgres_under_writes(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_continued_run_under_concurrent_writes() {
    mariadb_under_writes(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_fanned_out_run_under_concurrent_writes() {
    mariadb_under_writes(4).await;
}

async fn postgres_under_writes(ranges: usize) {
    let db = PgDb::create(&format!(
        "CREATE TABLE cw (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);
         INSERT INTO cw SELECT 2 * g, 0, 'n0' FROM generate_series(1, {ROWS}) g;
         ANALYZE cw;"
    ))
    .await;
    let h = pg_harness(
        fetcher_connectors::SqlConnectorFactory::new(
            fetcher_connectors::Dialect::Postgres,
            Arc::new(fetcher_connectors::StaticCredentials::new()),
            fetcher_connectors::HostPolicy::single_tenant(),
        )
        .with_chunk_rows(300),
        &db.descriptor("src"),
    )
    .await;
    let plan = store_plan(&h, request()).await;
    let writer = Writer::Pg(pg_admin(&db.name).await);
    let segments = segmented_under_writes(&h, &plan, writer, ranges).await;
    assert!(segments >= 10, "{segments} segments");
    db.drop_db().await;
}

async fn mariadb_under_writes(ranges: usize) {
    let rows: Vec<String> = (1..=ROWS)
        .map(|i| format!("({}, 0, 'n0')", 2 * i))
        .collect();
    let mut statements = vec![
        "CREATE TABLE cw (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(20) NOT NULL)"
            .to_owned(),
    ];
    statements.extend(
        rows.chunks(2000)
            .map(|c| format!("INSERT INTO cw VALUES {}", c.join(", "))),
    );
    // The row estimate a fan-out's span needs.
    statements.push("ANALYZE TABLE cw".to_owned());
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    let db = MyDb::create(&refs).await;
    let h = harness(&[db.descriptor("src")]).await;
    let plan = store_plan(&h, request()).await;
    let writer = Writer::My(my_admin(Some(&db.name)).await);
    let segments = segmented_under_writes(&h, &plan, writer, ranges).await;
    assert!(segments >= 10, "{segments} segments");
    db.drop_db().await;
}
