//! Filter semantics on every dialect, differentially: each filter's rows are the rows the
//! database itself returns for the SQL docs/filters.md gives the operator (`IN`, `NOT IN`, `<>`,
//! `IS NULL`), so `null` in a list means what SQL means by it; booleans filter
//! boolean-like columns (PG `boolean`, SQLite `BOOLEAN`, MySQL/MariaDB `TINYINT(1)`).

mod common;

use common::*;
use serde_json::{Value, json};
use sqlx::Connection;

/// `(filter, the WHERE clause the database evaluates for it)`.
fn cases() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"label": {"in": ["alpha", null]}}),
            "label IN ('alpha', NULL)",
        ),
        (
            json!({"label": {"nin": ["alpha", null]}}),
            "label NOT IN ('alpha', NULL)",
        ),
        (
            json!({"label": {"nin": ["alpha"]}}),
            "label NOT IN ('alpha')",
        ),
        (json!({"label": {"in": [null]}}), "label IN (NULL)"),
        (json!({"label": {"nin": [null]}}), "label NOT IN (NULL)"),
        (json!({"label": {"eq": [null]}}), "label IS NULL"),
        (json!({"label": {"ne": [null]}}), "label IS NOT NULL"),
        (
            json!({"label": {"eq": ["alpha", null]}}),
            "label IN ('alpha', NULL)",
        ),
        (
            json!({"label": {"ne": ["alpha", null]}}),
            "label <> 'alpha' AND label <> NULL",
        ),
        (json!({"label": {"ne": ["alpha"]}}), "label <> 'alpha'"),
        (json!({"flag": {"eq": [true]}}), "flag = TRUE"),
        (json!({"flag": {"eq": [false]}}), "flag = FALSE"),
        (json!({"flag": {"ne": [true]}}), "flag <> TRUE"),
        (
            json!({"flag": {"in": [true, false]}}),
            "flag IN (TRUE, FALSE)",
        ),
    ]
}

const ROWS: &str = "(1, 'alpha', TRUE), (2, 'beta', FALSE), (3, NULL, TRUE), (4, 'gamma', NULL), (5, 'alpha', FALSE)";

async fn run(h: &Harness, config: &str, filter: &Value) -> Vec<i64> {
    let out = h
        .store_ndjson(json!({
            "mappedFields": {config: {"labels": ["id"]}},
            "filters": {config: {"labels": filter}},
        }))
        .await
        .unwrap_or_else(|e| panic!("{config} {filter}: {e}"));
    let mut ids: Vec<i64> = rows_of(&out, "labels")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    ids
}

/// Every case's rows through the engine equal the rows the database returns for the
/// case's SQL, over `$admin` (a connection of the dialect's own driver).
macro_rules! assert_cases_match_sql {
    ($h:expr, $ds:expr, $admin:expr) => {
        for (filter, sql) in cases() {
            let want: Vec<i64> =
                sqlx::query_scalar(&format!("SELECT id FROM labels WHERE {sql} ORDER BY id"))
                    .fetch_all(&mut $admin)
                    .await
                    .unwrap();
            assert_eq!(run(&$h, $ds, &filter).await, want, "{filter} vs {sql}");
        }
    };
}

#[tokio::test]
async fn postgres_null_and_boolean_filters_mean_what_sql_means() {
    let db = PgDb::create(&format!(
        "CREATE TABLE labels (id bigint PRIMARY KEY, label text, flag boolean); INSERT INTO labels VALUES {ROWS};"
    ))
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let mut admin = pg_admin(&db.name).await;
    assert_cases_match_sql!(h, "pg", admin);
    drop(admin);
    db.drop_db().await;
}

#[tokio::test]
async fn mysql_null_and_boolean_filters_mean_what_sql_means() {
    let create = "CREATE TABLE labels (id bigint PRIMARY KEY, label text, flag BOOL)".to_owned();
    let insert = format!("INSERT INTO labels VALUES {ROWS}");
    let db = MyDb::create(&[&create, &insert]).await;
    let h = harness(&[db.descriptor("my")]).await;
    let mut admin = my_admin(Some(&db.name)).await;
    assert_cases_match_sql!(h, "my", admin);
    drop(admin);
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_null_and_boolean_filters_mean_what_sql_means() {
    let db = LiteDb::create(&format!(
        "CREATE TABLE labels (id INTEGER PRIMARY KEY, label TEXT, flag BOOLEAN); INSERT INTO labels VALUES {ROWS};"
    ))
    .await;
    let h = harness(&[db.descriptor("lite")]).await;
    let mut admin = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.path.display()))
        .await
        .unwrap();
    assert_cases_match_sql!(h, "lite", admin);
    drop(admin);
    db.remove();
}

/// docs/api.md ("Jobs") names tables `public.<table>`: a job runs it exactly as validate-schema
/// accepts it (one lookup rule), filters included.
#[tokio::test]
async fn postgres_jobs_accept_public_qualified_tables() {
    let db = PgDb::create(&format!(
        "CREATE TABLE labels (id bigint PRIMARY KEY, label text, flag boolean); INSERT INTO labels VALUES {ROWS};"
    ))
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    for table in ["public.labels", "PUBLIC.labels", "labels"] {
        let out = h
            .store_ndjson(json!({
                "mappedFields": {"pg": {table: ["id"]}},
                "filters": {"pg": {table: {"label": {"eq": ["alpha"]}}}},
            }))
            .await
            .unwrap_or_else(|e| panic!("{table}: {e}"));
        assert_eq!(rows_of(&out, table).len(), 2, "{table}");
    }
    let err = h
        .store_ndjson(json!({"mappedFields": {"pg": {"other.labels": ["id"]}}}))
        .await
        .unwrap_err();
    assert_eq!(err.category(), fetcher_engine::Category::Validation);
    db.drop_db().await;
}

/// Filter values PostgreSQL cannot take are bad input, refused as `validation` (a job
/// fails at once, no retry holds a worker): a NUL in a string, an offset past ±15:59.
/// An integer beyond 2^63 is no error: it is compared as the number it is, so a bigint
/// column matches it with `lt` and never with `eq`. A data exception the database raises
/// anyway (SQLSTATE class 22) is `validation` too, on PostgreSQL and MariaDB.
#[tokio::test]
async fn values_the_database_cannot_take_are_validation_not_unavailable() {
    let db = PgDb::create(
        "CREATE TABLE labels (id bigint PRIMARY KEY, label text, at timestamptz);
         INSERT INTO labels VALUES (1, 'a', '2026-01-01T00:00:00Z'), (2, 'b', '2026-01-02T00:00:00Z');",
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let job = |filter: Value| {
        h.store_ndjson(json!({
            "mappedFields": {"pg": {"labels": ["id"]}},
            "filters": {"pg": {"labels": filter}},
        }))
    };
    for filter in [
        json!({"label": {"eq": ["a\u{0}b"]}}),
        json!({"label": {"like": ["%\u{0}%"]}}),
        json!({"at": {"gt": ["2026-01-01T00:00:00+99:00"]}}),
        json!({"at": {"gt": ["2026-01-01T00:00:00-16:00"]}}),
    ] {
        let err = job(filter.clone()).await.expect_err(&filter.to_string());
        assert_eq!(
            err.category(),
            fetcher_engine::Category::Validation,
            "{filter}: {err}"
        );
    }
    let ids = |out: Vec<u8>| -> Vec<i64> {
        rows_of(&out, "labels")
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    let big = json!(9_223_372_036_854_775_808u64);
    assert_eq!(
        ids(job(json!({"id": {"lt": [big]}})).await.unwrap()),
        [1, 2]
    );
    assert!(ids(job(json!({"id": {"eq": [big]}})).await.unwrap()).is_empty());
    // The offset at the edge of the range is a value like any other.
    let edge = json!({"at": {"gt": ["2026-01-01T00:00:00+15:59"]}});
    assert_eq!(ids(job(edge).await.unwrap()), [1, 2]);

    // The database's own data exceptions, and its other answers (query_refusals.rs).
    let category = |e: sqlx::Error| fetcher_connectors::error::query_failed(e).category();
    let mut pg = pg_admin(&db.name).await;
    for (sql, want) in [
        ("SELECT 1 / 0", fetcher_engine::Category::Validation),
        ("SELECT 'x'::int", fetcher_engine::Category::Validation),
    ] {
        let e = sqlx::query(sql).execute(&mut pg).await.unwrap_err();
        assert_eq!(category(e), want, "{sql}");
    }
    drop(pg);
    let mut my = my_admin(None).await;
    for (sql, want) in [
        (
            "SELECT 18446744073709551615 + 1",
            fetcher_engine::Category::Validation,
        ),
        (
            "SELECT * FROM no_such_table",
            fetcher_engine::Category::Validation,
        ),
    ] {
        let e = sqlx::query(sql).execute(&mut my).await.unwrap_err();
        assert_eq!(category(e), want, "{sql}");
    }
    drop(my);
    db.drop_db().await;
}
