//! #53 item 8: views are listed by discovery (marked `view`) and read like tables, on
//! PostgreSQL (views and materialised views), MariaDB and SQLite; a view has no primary
//! key, so it is read in the order of its columns' values.

mod common;

use common::*;
use fetcher_engine::Context;
use fetcher_engine::ports::Connector as _;
use serde_json::json;

const ROWS: &str =
    "INSERT INTO orders VALUES (3, 'BR', 30), (1, 'US', 10), (2, 'BR', 20), (4, 'DE', 40)";

/// Discovers `d` and checks which of `tables` are views; then reads `view` with a
/// filter through the engine and returns its rows.
async fn discover_and_read(
    d: &fetcher_engine::ConnectionDescriptor,
    tables: &[(&str, bool)],
    view: &str,
) -> Vec<serde_json::Value> {
    let h = harness(std::slice::from_ref(d)).await;
    let ctx = Context::background();
    let snapshot = h
        .engine
        .discover_schema_fresh(&ctx, &tenant(), &d.config_name)
        .await
        .unwrap();
    for (name, is_view) in tables {
        let t = snapshot
            .tables
            .iter()
            .find(|t| t.name == *name)
            .unwrap_or_else(|| panic!("{name} listed: {:?}", snapshot.table_names()));
        assert_eq!(t.view, *is_view, "{name}");
        if *is_view {
            assert!(t.primary_key.is_empty(), "{name}: a view has no key");
            assert_eq!(t.row_estimate, None, "{name}: a view keeps no estimate");
        }
    }
    let config = d.config_name.as_str();
    let ndjson = h
        .store_ndjson(json!({
            "mappedFields": {config: {view: ["id", "country", "total"]}},
            "filters": {config: {view: {"country": {"eq": ["BR"]}}}},
        }))
        .await
        .unwrap();
    rows_of(&ndjson, view)
}

fn ids(rows: &[serde_json::Value]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn postgres_views_and_materialised_views_are_listed_and_read() {
    let db = PgDb::create(&format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, country text NOT NULL, total int);
         {ROWS};
         CREATE VIEW big_orders AS SELECT id, country, total FROM orders WHERE total >= 20;
         CREATE MATERIALIZED VIEW order_snapshot AS SELECT id, country, total FROM orders;"
    ))
    .await;
    let d = db.descriptor("pgv");
    let tables = [
        ("orders", false),
        ("big_orders", true),
        ("order_snapshot", true),
    ];
    let rows = discover_and_read(&d, &tables, "big_orders").await;
    assert_eq!(ids(&rows), [2, 3]);
    let rows = discover_and_read(&d, &tables, "order_snapshot").await;
    assert_eq!(ids(&rows), [2, 3]);
    db.drop_db().await;
}

#[tokio::test]
async fn mariadb_views_are_listed_and_read() {
    let db = MyDb::create(&[
        "CREATE TABLE orders (id bigint PRIMARY KEY, country varchar(2) NOT NULL, total int)",
        ROWS,
        "CREATE VIEW big_orders AS SELECT id, country, total FROM orders WHERE total >= 20",
    ])
    .await;
    let d = db.descriptor("myv");
    let rows =
        discover_and_read(&d, &[("orders", false), ("big_orders", true)], "big_orders").await;
    assert_eq!(ids(&rows), [2, 3]);
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_views_are_listed_and_read() {
    let db = LiteDb::create(&format!(
        "CREATE TABLE orders (id integer PRIMARY KEY, country text NOT NULL, total int);
         {ROWS};
         CREATE VIEW big_orders AS SELECT id, country, total FROM orders WHERE total >= 20;"
    ))
    .await;
    let d = db.descriptor("litev");
    // The discovery a connector gives straight, too: the view is there, marked.
    let f = fetcher_connectors::SqlConnectorFactory::new(
        fetcher_connectors::Dialect::Sqlite,
        std::sync::Arc::new(fetcher_connectors::StaticCredentials::new()),
        fetcher_connectors::HostPolicy::single_tenant(),
    );
    let ctx = Context::background();
    let mut c = f.build_connector(&ctx, &tenant(), &d).await.unwrap();
    let snap = c.discover_schema(&ctx).await.unwrap();
    c.close(&ctx).await.unwrap();
    assert_eq!(snap.table_names(), ["big_orders", "orders"]);
    let rows =
        discover_and_read(&d, &[("orders", false), ("big_orders", true)], "big_orders").await;
    assert_eq!(ids(&rows), [2, 3]);
    db.remove();
}
