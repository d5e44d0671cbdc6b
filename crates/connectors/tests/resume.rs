//! Continued reads on the real databases (docs/engine.md, "Continued runs"): a run cut
//! into segments after every batch, each resuming after the last row the previous one
//! wrote, holds exactly the bytes of one uninterrupted run, on PostgreSQL (COPY, query
//! and partitioned reads), MariaDB and SQLite. Keys: an integer, a composite key with
//! its leading column not selected (read only for the position), a text and a UUID key,
//! a timestamp key; a table without a key is read whole; an incremental table resumes on
//! its (cursor, key).

mod common;

use std::sync::Arc;

use common::*;
use fetcher_connectors::{Dialect, HostPolicy, SqlConnectorFactory, StaticCredentials};
use fetcher_engine::{Context, ExtractionPlan, ExtractionProgress, Segment};
use serde_json::{Value, json};

/// Runs `plan` whole, then in segments each asked to stop at once; returns both results'
/// bytes (the segments' parts joined in manifest order) and the number of segments.
async fn whole_and_segmented(h: &Harness, plan: &ExtractionPlan) -> (Vec<u8>, Vec<u8>, usize) {
    let whole = h
        .engine
        .execute_segment(
            &Context::background(),
            plan,
            None,
            &Segment::default(),
            &ExtractionProgress::default(),
        )
        .await
        .unwrap();
    let whole = h.sink.get(&whole.reference.unwrap().path).unwrap();
    let (joined, segments) = run_in_segments(h, plan, async || {}).await;
    (whole, joined, segments)
}

/// The tables every dialect gets (`{ts}`: the dialect's timestamp type, `{uuid}` its UUID
/// or text type).
const TABLES: &str = "
CREATE TABLE k_int (id BIGINT PRIMARY KEY, v VARCHAR(40) NOT NULL);
CREATE TABLE k_comp (a VARCHAR(10) NOT NULL, b INT NOT NULL, v VARCHAR(40), PRIMARY KEY (a, b));
CREATE TABLE k_text (k VARCHAR(40) PRIMARY KEY, v INT);
CREATE TABLE k_ts (ts {ts} PRIMARY KEY, v INT);
CREATE TABLE nokey (v VARCHAR(40), n INT);
";

/// Rows, as `INSERT` statements of plain literals every dialect takes; `text_key` and
/// `ts` write the dialect's text (or UUID) key and timestamp literals.
fn rows_sql(text_key: impl Fn(u32) -> String, ts: impl Fn(u32) -> String) -> Vec<String> {
    let mut out = Vec::new();
    let chunk = |table: &str, rows: Vec<String>| -> Vec<String> {
        rows.chunks(500)
            .map(|c| format!("INSERT INTO {table} VALUES {}", c.join(", ")))
            .collect()
    };
    out.extend(chunk(
        "k_int",
        (1..=2600)
            .map(|i| format!("({}, 'int-{i}')", i * 7 - 3000))
            .collect(),
    ));
    out.extend(chunk(
        "k_comp",
        (1..=2300)
            .map(|i| format!("('g{}', {i}, 'comp-{i}')", i % 7))
            .collect(),
    ));
    out.extend(chunk(
        "k_text",
        (1..=2100)
            .map(|i| format!("('{}', {i})", text_key(i)))
            .collect(),
    ));
    out.extend(chunk(
        "k_ts",
        (1..=2050).map(|i| format!("('{}', {i})", ts(i))).collect(),
    ));
    out.extend(chunk(
        "nokey",
        (1..=1500)
            .map(|i| format!("('n-{i}', {})", i % 13))
            .collect(),
    ));
    out
}

fn request() -> Value {
    json!({"mappedFields": {"src": {
        "k_int": ["v"],
        "k_comp": ["b", "v"],
        "k_text": [],
        "k_ts": ["v", "ts"],
        "nokey": []
    }}})
}

/// Every table of [`request`] in one step: at least one segment per 1024-row batch of a
/// keyed table.
const MIN_SEGMENTS: usize = 3 + 3 + 3 + 3;

fn pg_factory(copy: bool, partitions: usize) -> SqlConnectorFactory {
    SqlConnectorFactory::new(
        Dialect::Postgres,
        Arc::new(StaticCredentials::new()),
        HostPolicy::single_tenant(),
    )
    .with_copy_fast_path(copy)
    .with_read_partitions(partitions)
    .with_chunk_rows(300)
}

fn pg_ts(i: u32) -> String {
    format!("2026-01-01 00:00:{:02}.{:06}+00", i % 60, i * 37)
}

#[tokio::test]
async fn postgres_segments_join_to_one_run_on_copy_query_and_partitioned_reads() {
    let mut sql = TABLES
        .replace("{ts}", "timestamptz")
        .replace("k_text (k VARCHAR(40)", "k_text (k uuid");
    for s in rows_sql(|i| format!("00000000-0000-4000-8000-{i:012}"), pg_ts) {
        sql.push_str(&s);
        sql.push_str(";\n");
    }
    let db = PgDb::create(&sql).await;
    for (copy, partitions) in [(true, 1), (false, 1), (true, 3)] {
        let h = pg_harness(pg_factory(copy, partitions), &db.descriptor("src")).await;
        let plan = store_plan(&h, request()).await;
        let (whole, joined, segments) = whole_and_segmented(&h, &plan).await;
        assert!(
            segments >= MIN_SEGMENTS,
            "copy {copy}, partitions {partitions}: {segments} segments"
        );
        assert_eq!(
            String::from_utf8(joined).unwrap(),
            String::from_utf8(whole).unwrap(),
            "copy {copy}, partitions {partitions}"
        );
    }
    db.drop_db().await;
}

#[tokio::test]
async fn mariadb_segments_join_to_one_run() {
    let tables = TABLES.replace("{ts}", "DATETIME(6)");
    let mut statements: Vec<String> = tables
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    statements.extend(rows_sql(
        |i| format!("k-{i}"),
        |i| format!("2026-01-01 00:00:{:02}.{:06}", i % 60, i * 37),
    ));
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    let db = MyDb::create(&refs).await;
    let h = harness(&[db.descriptor("src")]).await;
    let plan = store_plan(&h, request()).await;
    let (whole, joined, segments) = whole_and_segmented(&h, &plan).await;
    assert!(segments >= MIN_SEGMENTS, "{segments} segments");
    assert_eq!(
        String::from_utf8(joined).unwrap(),
        String::from_utf8(whole).unwrap()
    );
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_segments_join_to_one_run() {
    let mut sql = TABLES.replace("{ts}", "DATETIME");
    for s in rows_sql(
        |i| format!("k-{i}"),
        |i| format!("2026-01-01T00:00:{:02}.{:06}Z", i % 60, i * 37),
    ) {
        sql.push_str(&s);
        sql.push_str(";\n");
    }
    let db = LiteDb::create(&sql).await;
    let h = harness(&[db.descriptor("src")]).await;
    let plan = store_plan(&h, request()).await;
    let (whole, joined, segments) = whole_and_segmented(&h, &plan).await;
    assert!(segments >= MIN_SEGMENTS, "{segments} segments");
    assert_eq!(
        String::from_utf8(joined).unwrap(),
        String::from_utf8(whole).unwrap()
    );
    db.remove();
}

#[tokio::test]
async fn an_incremental_table_resumes_on_its_cursor_and_key() {
    let db = PgDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, v text, updated_at timestamptz);
         INSERT INTO t SELECT g, 'v' || g, timestamptz '2026-01-01' + (g % 50) * interval '1 second'
           FROM generate_series(1, 3500) g;",
    )
    .await;
    let h = pg_harness(pg_factory(true, 1), &db.descriptor("src")).await;
    let plan = store_plan(
        &h,
        json!({"mappedFields": {"src": {"t": ["v"]}},
               "incremental": {"src": {"t": {"cursor": "updated_at", "key": ["id"]}}}}),
    )
    .await;
    let (whole, joined, segments) = whole_and_segmented(&h, &plan).await;
    assert!(segments >= 4, "{segments} segments");
    assert_eq!(
        String::from_utf8(joined).unwrap(),
        String::from_utf8(whole).unwrap()
    );
    db.drop_db().await;
}
