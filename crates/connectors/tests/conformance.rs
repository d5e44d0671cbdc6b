//! The connector conformance suite (`fetcher_engine::testing::connector`) on the real
//! databases: PostgreSQL, MariaDB and SQLite each load the suite's fixture in their own
//! types and run the whole read contract. What differs is declared, not skipped: SQLite
//! splits no key (fan-out is PostgreSQL's and MariaDB's) and keeps no decimal scale
//! (`NUMERIC` values are stored as integers or binary floating point).

mod common;

use std::sync::Arc;

use common::*;
use fetcher_connectors::{Dialect, HostPolicy, SqlConnectorFactory, StaticCredentials};
use fetcher_engine::testing::connector::{
    Capabilities, FixtureTable, FixtureType, Subject, connector, fixture,
};
use serde_json::Value as J;

/// The fixture as `CREATE TABLE` and `INSERT` statements, in `dialect`'s types.
fn fixture_sql(dialect: Dialect) -> Vec<String> {
    let ty = |t: FixtureType| match (dialect, t) {
        (Dialect::Postgres, FixtureType::Int) => "bigint",
        (Dialect::Postgres, FixtureType::Text) => "varchar(40)",
        (Dialect::Postgres, FixtureType::Decimal) => "numeric(10,2)",
        (Dialect::MySql, FixtureType::Int) => "BIGINT",
        (Dialect::MySql, FixtureType::Text) => "VARCHAR(40)",
        (Dialect::MySql, FixtureType::Decimal) => "DECIMAL(10,2)",
        (Dialect::Sqlite, FixtureType::Int) => "INTEGER",
        (Dialect::Sqlite, FixtureType::Text) => "TEXT",
        (Dialect::Sqlite, FixtureType::Decimal) => "NUMERIC(10,2)",
    };
    let literal = |v: &J, t: FixtureType| match v {
        J::Null => "NULL".to_owned(),
        J::Number(n) => n.to_string(),
        J::String(s) if t == FixtureType::Decimal => s.clone(),
        J::String(s) => format!("'{}'", s.replace('\'', "''")),
        other => panic!("no fixture value {other}"),
    };
    let mut out = Vec::new();
    for FixtureTable {
        name,
        columns,
        primary_key,
        rows,
    } in fixture()
    {
        let mut defs: Vec<String> = columns
            .iter()
            .map(|c| {
                let null = if c.nullable { "" } else { " NOT NULL" };
                format!("{} {}{null}", c.name, ty(c.kind))
            })
            .collect();
        if !primary_key.is_empty() {
            defs.push(format!("PRIMARY KEY ({})", primary_key.join(", ")));
        }
        out.push(format!("CREATE TABLE {name} ({})", defs.join(", ")));
        for chunk in rows.chunks(500) {
            let values: Vec<String> = chunk
                .iter()
                .map(|r| {
                    let vs: Vec<String> = r
                        .iter()
                        .zip(&columns)
                        .map(|(v, c)| literal(v, c.kind))
                        .collect();
                    format!("({})", vs.join(", "))
                })
                .collect();
            out.push(format!("INSERT INTO {name} VALUES {}", values.join(", ")));
        }
    }
    out
}

fn subject(
    dialect: Dialect,
    descriptor: fetcher_engine::ConnectionDescriptor,
    capabilities: Capabilities,
) -> Subject {
    Subject {
        factory: Arc::new(SqlConnectorFactory::new(
            dialect,
            Arc::new(StaticCredentials::new()),
            HostPolicy::single_tenant(),
        )),
        descriptor,
        tenant: tenant(),
        capabilities,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_conforms() {
    let mut sql = fixture_sql(Dialect::Postgres);
    sql.push("ANALYZE".into());
    let db = PgDb::create(&sql.join(";\n")).await;
    let capabilities = Capabilities {
        key_ranges: true,
        exact_decimals: true,
        documents: false,
    };
    connector(&subject(
        Dialect::Postgres,
        db.descriptor("src"),
        capabilities,
    ))
    .await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_conforms() {
    let mut sql = fixture_sql(Dialect::MySql);
    sql.push("ANALYZE TABLE items, events, nokey, empty".into());
    let statements: Vec<&str> = sql.iter().map(String::as_str).collect();
    let db = MyDb::create(&statements).await;
    let capabilities = Capabilities {
        key_ranges: true,
        exact_decimals: true,
        documents: false,
    };
    connector(&subject(Dialect::MySql, db.descriptor("src"), capabilities)).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_conforms() {
    let db = LiteDb::create(&fixture_sql(Dialect::Sqlite).join(";\n")).await;
    let capabilities = Capabilities {
        key_ranges: false,
        exact_decimals: false,
        documents: false,
    };
    connector(&subject(
        Dialect::Sqlite,
        db.descriptor("src"),
        capabilities,
    ))
    .await;
    db.remove();
}
