//! Fan-out key spans (docs/datasources.md, "Fan-out key spans") on PostgreSQL, MariaDB and
//! SQLite: a table whose primary key leads with a signed integer has a span (min, max and
//! the catalog's estimate); a text, UUID, unsigned or missing key, an empty table, a table
//! never analysed (no estimate) and SQLite have none; a key range reads
//! exactly `lo <= key < hi`, and one on a table without such a key is refused.

mod common;

use common::*;
use fetcher_engine::{Category, Context, KeyRange, KeySpan};
use serde_json::json;

fn request(tables: &[&str]) -> serde_json::Value {
    let tables: serde_json::Map<String, serde_json::Value> =
        tables.iter().map(|t| (t.to_string(), json!([]))).collect();
    json!({"mappedFields": {"src": tables}})
}

async fn spans(h: &Harness, tables: &[&str]) -> Vec<Option<KeySpan>> {
    let plan = store_plan(h, request(tables)).await;
    h.engine
        .key_spans(&Context::background(), &plan, "src")
        .await
        .unwrap()
}

/// The ids a read of `table` restricted to `range` returns, in order.
async fn ids_in(h: &Harness, table: &str, range: KeyRange) -> Result<Vec<i64>, Category> {
    let mut plan = store_plan(h, request(&[table])).await;
    plan.request_id = format!("range-{:?}-{:?}", range.lo, range.hi);
    plan.steps[0].key_ranges.insert(table.into(), range);
    let r = h
        .engine
        .execute_extraction(&Context::background(), &plan)
        .await
        .map_err(|e| e.category())?;
    let bytes = h.sink.get(&r.reference.unwrap().path).unwrap();
    Ok(rows_of(&bytes, table)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect())
}

#[tokio::test]
async fn postgres_spans_and_ranges() {
    let db = PgDb::create(
        "CREATE TABLE ints (id integer PRIMARY KEY, v text);
         INSERT INTO ints SELECT g * 3, 'v' || g FROM generate_series(1, 1000) g;
         ANALYZE ints;
         CREATE TABLE fresh (id bigint, k int, PRIMARY KEY (id, k));
         INSERT INTO fresh SELECT g, 1 FROM generate_series(-5, 94) g;
         CREATE TABLE texts (id text PRIMARY KEY); INSERT INTO texts VALUES ('a');
         CREATE TABLE uuids (id uuid PRIMARY KEY);
         CREATE TABLE nokey (id int); INSERT INTO nokey VALUES (1);
         CREATE TABLE empty (id int PRIMARY KEY);
         CREATE TABLE \"Mixed\" (id int PRIMARY KEY); INSERT INTO \"Mixed\" VALUES (7), (9);
         ANALYZE \"Mixed\";
         CREATE TABLE mixed (id text PRIMARY KEY); INSERT INTO mixed VALUES ('x');",
    )
    .await;
    let h = harness(&[db.descriptor("src")]).await;
    let got = spans(
        &h,
        &["empty", "fresh", "ints", "nokey", "public.texts", "uuids"],
    )
    .await;
    assert_eq!(
        got,
        [
            None,
            // Never analysed: no estimate, no span (keys far apart would make empty ranges).
            None,
            Some(KeySpan {
                min: 3.into(),
                max: 3000.into(),
                rows: 1000
            }),
            None,
            None,
            None
        ]
    );
    // A name is the catalog's, case included: `Mixed` is not its lowercase twin.
    assert_eq!(
        spans(&h, &["Mixed", "mixed"]).await,
        [
            Some(KeySpan {
                min: 7.into(),
                max: 9.into(),
                rows: 2
            }),
            None
        ]
    );
    let range = KeyRange {
        lo: Some(300.into()),
        hi: Some(600.into()),
    };
    let ids = ids_in(&h, "ints", range.clone()).await.unwrap();
    assert_eq!(ids, (100..200).map(|i| i * 3).collect::<Vec<_>>());
    let open = ids_in(
        &h,
        "ints",
        KeyRange {
            lo: Some(2990.into()),
            hi: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(open, [2991, 2994, 2997, 3000]);
    let first = ids_in(
        &h,
        "ints",
        KeyRange {
            lo: None,
            hi: Some(7.into()),
        },
    )
    .await
    .unwrap();
    assert_eq!(first, [3, 6]);
    assert_eq!(
        ids_in(&h, "texts", range).await.unwrap_err(),
        Category::Validation
    );
    db.drop_db().await;
}

#[tokio::test]
async fn mariadb_spans_and_ranges() {
    let db = MyDb::create(&[
        "CREATE TABLE ints (id BIGINT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO ints SELECT seq * 2, CONCAT('v', seq) FROM seq_1_to_500",
        "ANALYZE TABLE ints",
        "CREATE TABLE unsigned_ids (id INT UNSIGNED PRIMARY KEY)",
        "INSERT INTO unsigned_ids VALUES (1)",
        "CREATE TABLE texts (id VARCHAR(10) PRIMARY KEY)",
        "INSERT INTO texts VALUES ('a')",
        "CREATE TABLE nokey (id INT)",
        "CREATE TABLE empty (id INT PRIMARY KEY)",
    ])
    .await;
    let h = harness(&[db.descriptor("src")]).await;
    let got = spans(&h, &["empty", "ints", "nokey", "texts", "unsigned_ids"]).await;
    assert_eq!(got[0], None);
    let ints = got[1].clone().expect("a signed integer key");
    assert_eq!((&ints.min, &ints.max), (&2.into(), &1000.into()));
    // InnoDB's estimate is a sample; near 500.
    assert!((400..=600).contains(&ints.rows), "{ints:?}");
    assert_eq!(&got[2..], [None, None, None]);
    let ids = ids_in(
        &h,
        "ints",
        KeyRange {
            lo: Some(11.into()),
            hi: Some(21.into()),
        },
    )
    .await
    .unwrap();
    assert_eq!(ids, [12, 14, 16, 18, 20]);
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_tables_never_fan_out() {
    let db = LiteDb::create(
        "CREATE TABLE ints (id INTEGER PRIMARY KEY); INSERT INTO ints VALUES (1), (2);",
    )
    .await;
    let h = harness(&[db.descriptor("src")]).await;
    assert_eq!(spans(&h, &["ints"]).await, [None]);
}
