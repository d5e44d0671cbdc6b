//! The demo datasource of `serve --demo`: a SQLite file with two small, deterministic
//! tables, registered as the connection `demo` so a newcomer can submit a job at once.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use sqlx::Connection as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

/// Name of the demo connection.
pub const CONFIG_NAME: &str = "demo";
/// The product owning it (jobs name it as `metadata.source`).
pub const PRODUCT: &str = "demo";
/// Its tenant in multi-tenant mode (tokens with `"tenantId": "demo"` see it).
pub const MULTI_TENANT_TENANT: &str = "demo";
/// Its file, relative to the SQLite directory.
pub const FILE: &str = "demo.sqlite";

const COUNTRIES: [&str; 5] = ["BR", "US", "PT", "DE", "JP"];
const STATUSES: [&str; 3] = ["paid", "shipped", "refunded"];

/// Creates `<sqlite_dir>/demo.sqlite` if missing; returns its path.
pub async fn ensure_database(sqlite_dir: &Path) -> Result<PathBuf> {
    let path = sqlite_dir.join(FILE);
    if path.exists() {
        return Ok(path);
    }
    let opts = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&opts)
        .await
        .context("creating the demo database")?;
    let mut tx = conn.begin().await?;
    sqlx::raw_sql(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, country TEXT NOT NULL, created_at TEXT NOT NULL);
         CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), total NUMERIC NOT NULL, status TEXT NOT NULL, ordered_at TEXT NOT NULL);",
    )
    .execute(&mut *tx)
    .await?;
    for i in 1..=50i64 {
        sqlx::query(
            "INSERT INTO customers (id, name, email, country, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(i)
        .bind(format!("Customer {i:02}"))
        .bind(if i % 7 == 0 {
            None
        } else {
            Some(format!("customer{i:02}@example.com"))
        })
        .bind(COUNTRIES[(i as usize) % COUNTRIES.len()])
        .bind(format!("2024-01-{:02}T09:00:00Z", (i % 28) + 1))
        .execute(&mut *tx)
        .await?;
    }
    for i in 1..=200i64 {
        sqlx::query("INSERT INTO orders (id, customer_id, total, status, ordered_at) VALUES (?, ?, ?, ?, ?)")
            .bind(i)
            .bind((i * 7) % 50 + 1)
            .bind(format!("{}.{:02}", 10 + (i * 37) % 990, (i * 13) % 100))
            .bind(STATUSES[(i as usize) % STATUSES.len()])
            .bind(format!("2024-{:02}-{:02}T12:30:00Z", (i % 12) + 1, (i % 28) + 1))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    conn.close().await?;
    Ok(path)
}

/// The create-connection body for the demo datasource (its file named relative to the
/// SQLite directory).
pub fn connection_body() -> serde_json::Value {
    serde_json::json!({
        "configName": CONFIG_NAME,
        "type": "SQLITE",
        "host": "localhost",
        "port": 1,
        "databaseName": FILE,
        "userName": "demo",
        "password": "demo",
        "metadata": {"demo": true}
    })
}
