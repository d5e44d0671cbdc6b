//! One SQLite database for everything `fetcher serve` persists: connections (with their
//! protected secrets), jobs, the schema cache, execution states and rate-limit counters.
//!
//! Each record is a JSON document plus the indexed columns its queries need. Writes go
//! through a single-connection pool (SQLite has one writer; serialising writes in the
//! pool avoids lock-upgrade failures), reads through a small pool, in WAL mode. Job
//! transitions are read-check-write inside one write transaction, which is what makes
//! them conditional; the dedup rule is a partial unique index on (tenant, request hash)
//! over active jobs.
//!
//! | module | what it holds |
//! |---|---|
//! | this module | the schema, [`SqliteStore`] (pools, transactions), shared helpers |
//! | `connections` | `ConnectionStore` |
//! | `caches` | `SchemaCache`, `ExecutionStore` |
//! | `jobs` | `JobStore`: inserts (dedup by a partial unique index), read-check-write transitions |
//! | `syncs` | a sync's row: its watermarks and its one active job, written in its jobs' transactions |
//! | `schedules` | `ScheduleStore`: a version-conditional row per sync's schedule, due times indexed |
//! | `rate_limit` | `RateLimiter` (GCRA token buckets) |

use std::path::Path;
use std::time::Duration;

use fetcher_engine::ports::{ConnectionStore, ExecutionStore, SchemaCache};
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, EngineError, ExecutionState,
    HostAttributes, ProtectedCredential, SchemaSnapshot, TenantContext, Timestamp,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};

use fetcher_host::error::{Result, ServiceError};
use fetcher_host::model::*;
use fetcher_host::ports::*;

mod caches;
mod connections;
mod jobs;
mod rate_limit;
mod schedules;
mod syncs;

pub(super) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS connections (
    tenant TEXT NOT NULL,
    config_name TEXT NOT NULL,
    id TEXT NOT NULL,
    doc TEXT NOT NULL,
    host_attributes TEXT NOT NULL,
    ciphertext BLOB,
    cred_version TEXT,
    -- Always NULL now (a delete removes the row; older tombstones are purged below);
    -- kept so data directories of earlier versions open unchanged.
    deleted_at INTEGER,
    PRIMARY KEY (tenant, config_name, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS connections_live_name ON connections(tenant, config_name) WHERE deleted_at IS NULL;
CREATE INDEX IF NOT EXISTS connections_id ON connections(tenant, id);
CREATE TABLE IF NOT EXISTS jobs (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    status TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    completed_at INTEGER,
    lease_expires_at INTEGER,
    event_pending INTEGER NOT NULL DEFAULT 0,
    doc TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_active_hash ON jobs(tenant, request_hash) WHERE status IN ('pending', 'processing');
CREATE INDEX IF NOT EXISTS jobs_hash_created ON jobs(tenant, request_hash, created_at);
CREATE INDEX IF NOT EXISTS jobs_event_pending ON jobs(event_pending, completed_at, created_at) WHERE event_pending = 1;
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created_at);
CREATE INDEX IF NOT EXISTS jobs_tenant_created ON jobs(tenant, created_at);
CREATE TABLE IF NOT EXISTS job_configs (
    tenant TEXT NOT NULL,
    job_id TEXT NOT NULL,
    config_name TEXT NOT NULL,
    PRIMARY KEY (tenant, job_id, config_name)
);
CREATE INDEX IF NOT EXISTS job_configs_name ON job_configs(tenant, config_name);
-- A job's datasources are recorded with the job itself, by the one INSERT that creates
-- it (one statement instead of a four-statement transaction on the single writer).
CREATE TRIGGER IF NOT EXISTS jobs_record_configs AFTER INSERT ON jobs BEGIN
    INSERT OR IGNORE INTO job_configs (tenant, job_id, config_name)
    SELECT NEW.tenant, NEW.id, key FROM json_each(NEW.doc, '$.request.mappedFields');
END;
CREATE TABLE IF NOT EXISTS schema_cache (
    tenant TEXT NOT NULL,
    config_name TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (tenant, config_name)
);
CREATE TABLE IF NOT EXISTS executions (
    tenant TEXT NOT NULL,
    job_id TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (tenant, job_id)
);
CREATE TABLE IF NOT EXISTS rate_limits (
    key TEXT PRIMARY KEY,
    window_start INTEGER NOT NULL,
    hits INTEGER NOT NULL
);
-- Syncs of incremental jobs: the watermarks (doc, a SyncState) and the active job, which
-- an insert sets only while it is NULL (one active job per sync).
CREATE TABLE IF NOT EXISTS syncs (
    tenant TEXT NOT NULL,
    sync_id TEXT NOT NULL,
    doc TEXT NOT NULL,
    active_job TEXT,
    PRIMARY KEY (tenant, sync_id)
);
-- Schedules of syncs (doc, a Schedule): every write is conditional on `version`;
-- `due_at` is the next run of an active schedule (NULL when paused or never again).
CREATE TABLE IF NOT EXISTS schedules (
    tenant TEXT NOT NULL,
    sync_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    due_at INTEGER,
    doc TEXT NOT NULL,
    PRIMARY KEY (tenant, sync_id)
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules(due_at) WHERE due_at IS NOT NULL;
-- Token buckets (GCRA): the theoretical arrival time per key, in Unix nanoseconds.
CREATE TABLE IF NOT EXISTS rate_buckets (
    key TEXT PRIMARY KEY,
    tat INTEGER NOT NULL
);
-- Connections an earlier version soft-deleted (credential included): a deleted
-- connection keeps nothing (the connection store's retention rule).
DELETE FROM connections WHERE deleted_at IS NOT NULL;
"#;

/// The embedded store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    read: SqlitePool,
    write: SqlitePool,
}

pub(super) fn db_error(e: sqlx::Error) -> ServiceError {
    ServiceError::unavailable("embedded database unavailable").with_cause(e)
}

pub(super) fn engine_db_error(e: sqlx::Error) -> EngineError {
    EngineError::wrap(Category::Unavailable, "connection store unavailable", e)
}

pub(super) fn nanos(t: Timestamp) -> i64 {
    t.unix_nanos() as i64
}

pub(super) fn corrupt() -> ServiceError {
    ServiceError::internal("stored record is corrupt")
}

/// Readers at once (WAL lets them run beside the one writer).
pub(super) const READ_CONNECTIONS: u32 = 8;

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the schema.
    pub async fn open(path: &Path) -> Result<SqliteStore> {
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10));
        Self::with_options(opts).await
    }

    /// A fresh database in a unique temporary file (tests). The file is left for the OS
    /// to clean up with its temporary directory.
    pub async fn temporary() -> Result<SqliteStore> {
        let path = std::env::temp_dir().join(format!("fetcher-test-{}.db", uuid::Uuid::new_v4()));
        Self::open(&path).await
    }

    async fn with_options(opts: SqliteConnectOptions) -> Result<SqliteStore> {
        // No ping before each use: a local file's connection does not go stale, and each
        // statement is a round trip to the connection's own thread (sqlx still pings once
        // on release, which also flushes a rollback left by a dropped future).
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(opts.clone())
            .await
            .map_err(db_error)?;
        sqlx::raw_sql(SCHEMA)
            .execute(&write)
            .await
            .map_err(db_error)?;
        let read = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS)
            .min_connections(1)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(opts)
            .await
            .map_err(db_error)?;
        Ok(SqliteStore { read, write })
    }

    /// A liveness probe for readiness checks.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.read)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn tx(&self) -> Result<Transaction<'static, Sqlite>> {
        self.write.begin().await.map_err(db_error)
    }
}
