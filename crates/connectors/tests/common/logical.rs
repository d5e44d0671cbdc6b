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

/// Writers that insert, update and delete rows of `t (id bigint PRIMARY KEY, version
/// bigint, pad text)` at random, three statements a transaction, every fifth transaction
/// held open a while before it commits (a lost race aborts it: nothing commits). Updates
/// bump `version` by one, so a consumer can check that each change applies exactly once.
pub struct Churn {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Churn {
    /// `writers` writers on `db`, updating and deleting among ids `1..=keys` (and the
    /// rows they insert, ids from 1,000,000 per writer).
    pub async fn start(db: &LogDb, writers: i64, keys: u64) -> Churn {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut handles = Vec::new();
        for w in 0..writers {
            let mut conn = db.conn().await;
            let stop = stop.clone();
            handles.push(tokio::spawn(async move {
                let mut next_id = 1_000_000 * (w + 1);
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let mut tx = conn.begin().await.unwrap();
                    for k in 0..3u64 {
                        let pick = (n * 7 + k * 13 + w as u64 * 31) % 10;
                        let target = ((n * 37 + k * 11) % keys + 1) as i64;
                        let r = match pick {
                            0..=3 => {
                                next_id += 1;
                                sqlx::query("INSERT INTO t VALUES ($1, 1, 'new')")
                                    .bind(next_id)
                                    .execute(&mut *tx)
                                    .await
                            }
                            4..=7 => {
                                sqlx::query("UPDATE t SET version = version + 1 WHERE id = $1")
                                    .bind(target)
                                    .execute(&mut *tx)
                                    .await
                            }
                            _ => {
                                sqlx::query("DELETE FROM t WHERE id = $1")
                                    .bind(target)
                                    .execute(&mut *tx)
                                    .await
                            }
                        };
                        if r.is_err() {
                            break;
                        }
                    }
                    if n.is_multiple_of(5) {
                        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                    }
                    let _ = tx.commit().await;
                }
            }));
        }
        Churn {
            stop,
            writers: handles,
        }
    }

    /// Stops the writers and waits for their last transactions.
    pub async fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in self.writers.drain(..) {
            w.await.unwrap();
        }
    }
}
