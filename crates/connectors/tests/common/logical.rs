//! The private `wal_level=logical` cluster of `scripts/pg-logical` (the machine's own
//! server runs `wal_level=replica`), and fresh databases on it, for the log-read tests.

use sqlx::{Connection, Executor, PgConnection};

pub fn port() -> u16 {
    std::env::var("PG_LOGICAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(55432)
}

/// `scripts/pg-logical <action>` for the cluster on `port`.
pub fn pg_logical(action: &str, port: u16) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-logical");
    let out = std::process::Command::new(script)
        .arg(action)
        .env("PG_LOGICAL_PORT", port.to_string())
        .output()
        .expect("scripts/pg-logical runs");
    assert!(
        out.status.success(),
        "scripts/pg-logical {action} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the private cluster unless it is up (the script is idempotent).
pub fn cluster() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| pg_logical("start", port()));
}

pub async fn connect_at(port: u16, db: &str) -> PgConnection {
    fetcher_connectors::tls_provider();
    PgConnection::connect(&format!("postgres://postgres@127.0.0.1:{port}/{db}"))
        .await
        .unwrap()
}

/// A fresh database on the private cluster with `sql` run in it; its slots are dropped
/// with it (`drop`).
pub struct LogDb {
    pub name: String,
    pub port: u16,
}

impl LogDb {
    pub async fn create(sql: &str) -> LogDb {
        cluster();
        Self::create_on(port(), sql).await
    }

    pub async fn create_on(port: u16, sql: &str) -> LogDb {
        let name = super::unique("fx_log");
        let mut admin = connect_at(port, "postgres").await;
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        let mut c = connect_at(port, &name).await;
        c.execute(sql).await.unwrap();
        LogDb { name, port }
    }

    pub async fn conn(&self) -> PgConnection {
        connect_at(self.port, &self.name).await
    }

    pub async fn drop(self) {
        let mut admin = connect_at(self.port, "postgres").await;
        admin
            .execute(
                format!(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                     WHERE database = '{}'",
                    self.name
                )
                .as_str(),
            )
            .await
            .unwrap();
        admin
            .execute(format!("DROP DATABASE {} WITH (FORCE)", self.name).as_str())
            .await
            .unwrap();
    }
}
