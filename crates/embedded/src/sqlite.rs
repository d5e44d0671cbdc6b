//! (One file, like the DynamoDB adapter it mirrors: one schema and one transition helper
//! serve every store; it splits by record type with the narrowed ports of the rebuild.)
//!
//! One SQLite database for everything `fetcher serve` persists: connections (with their
//! protected secrets), jobs, the schema cache, execution states and rate-limit counters.
//!
//! Each record is a JSON document plus the indexed columns its queries need. Writes go
//! through a single-connection pool (SQLite has one writer; serialising writes in the
//! pool avoids lock-upgrade failures), reads through a small pool, in WAL mode. Job
//! transitions are read-check-write inside one write transaction, which is what makes
//! them conditional; the dedup rule is a partial unique index on (tenant, request hash)
//! over active jobs.

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

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS connections (
    tenant TEXT NOT NULL,
    config_name TEXT NOT NULL,
    id TEXT NOT NULL,
    doc TEXT NOT NULL,
    host_attributes TEXT NOT NULL,
    ciphertext BLOB,
    cred_version TEXT,
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
-- Token buckets (GCRA): the theoretical arrival time per key, in Unix nanoseconds.
CREATE TABLE IF NOT EXISTS rate_buckets (
    key TEXT PRIMARY KEY,
    tat INTEGER NOT NULL
);
"#;

/// The embedded store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    read: SqlitePool,
    write: SqlitePool,
}

fn db_error(e: sqlx::Error) -> ServiceError {
    ServiceError::unavailable("embedded database unavailable").with_cause(e)
}

fn engine_db_error(e: sqlx::Error) -> EngineError {
    EngineError::wrap(Category::Unavailable, "connection store unavailable", e)
}

fn nanos(t: Timestamp) -> i64 {
    t.unix_nanos() as i64
}

fn corrupt() -> ServiceError {
    ServiceError::internal("stored record is corrupt")
}

/// Readers at once (WAL lets them run beside the one writer).
const READ_CONNECTIONS: u32 = 8;

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

// ---------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------

fn descriptor_from(doc: &str, attrs: &str) -> fetcher_engine::Result<ConnectionDescriptor> {
    let corrupt = || EngineError::new(Category::Internal, "stored connection is corrupt");
    let mut d: ConnectionDescriptor = serde_json::from_str(doc).map_err(|_| corrupt())?;
    d.host_attributes = serde_json::from_str::<HostAttributes>(attrs).map_err(|_| corrupt())?;
    Ok(d)
}

fn not_found() -> EngineError {
    EngineError::new(Category::NotFound, "connection not found")
}

impl SqliteStore {
    async fn find_live(
        &self,
        tenant: &str,
        name: &str,
    ) -> fetcher_engine::Result<Option<ConnectionDescriptor>> {
        let row = sqlx::query("SELECT doc, host_attributes FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
            .bind(tenant)
            .bind(name)
            .fetch_optional(&self.read)
            .await
            .map_err(engine_db_error)?;
        row.map(|r| descriptor_from(r.get(0), r.get(1))).transpose()
    }

    async fn write_connection(
        &self,
        tenant: &str,
        key: (&str, &str),
        d: &ConnectionDescriptor,
        credential: Option<&ProtectedCredential>,
    ) -> fetcher_engine::Result<()> {
        let doc = serde_json::to_string(d).expect("descriptor is JSON");
        let attrs = serde_json::to_string(&d.host_attributes).expect("attributes are JSON");
        let mut q =
            String::from("UPDATE connections SET config_name = ?, doc = ?, host_attributes = ?");
        if credential.is_some() {
            q.push_str(", ciphertext = ?, cred_version = ?");
        }
        q.push_str(" WHERE tenant = ? AND config_name = ? AND id = ? AND deleted_at IS NULL");
        let mut query = sqlx::query(&q).bind(&d.config_name).bind(doc).bind(attrs);
        if let Some(c) = credential {
            query = query.bind(c.ciphertext.clone()).bind(c.key_version.clone());
        }
        let done = query
            .bind(tenant)
            .bind(key.0)
            .bind(key.1)
            .execute(&self.write)
            .await
            .map_err(engine_db_error)?;
        if done.rows_affected() == 0 {
            Err(not_found())
        } else {
            Ok(())
        }
    }

    async fn live_key_by_id(
        &self,
        tenant: &str,
        id: &str,
    ) -> fetcher_engine::Result<Option<(String, String)>> {
        if id.is_empty() {
            return Ok(None);
        }
        let row = sqlx::query("SELECT config_name, id FROM connections WHERE tenant = ? AND id = ? AND deleted_at IS NULL")
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.read)
            .await
            .map_err(engine_db_error)?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    async fn live_id(&self, tenant: &str, name: &str) -> fetcher_engine::Result<Option<String>> {
        let row = sqlx::query("SELECT id FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
            .bind(tenant)
            .bind(name)
            .fetch_optional(&self.read)
            .await
            .map_err(engine_db_error)?;
        Ok(row.map(|r| r.get(0)))
    }
}

impl ConnectionStore for SqliteStore {
    fn find<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(self.find_live(&t.tenant_id, name))
    }

    fn create<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut d = d.clone();
            if d.id.is_empty() {
                d.id = uuid::Uuid::now_v7().to_string();
            }
            let doc = serde_json::to_string(&d).expect("descriptor is JSON");
            let attrs = serde_json::to_string(&d.host_attributes).expect("attributes are JSON");
            let res = sqlx::query("INSERT INTO connections (tenant, config_name, id, doc, host_attributes, ciphertext, cred_version) VALUES (?, ?, ?, ?, ?, ?, ?)")
                .bind(&t.tenant_id)
                .bind(&d.config_name)
                .bind(&d.id)
                .bind(doc)
                .bind(attrs)
                .bind(c.map(|c| c.ciphertext.clone()))
                .bind(c.map(|c| c.key_version.clone()))
                .execute(&self.write)
                .await;
            match res {
                Ok(_) => Ok(()),
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(EngineError::new(
                    Category::Conflict,
                    fetcher_engine::error::msg::CONNECTION_EXISTS,
                )),
                Err(e) => Err(engine_db_error(e)),
            }
        })
    }

    fn update<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let id = self
                .live_id(&t.tenant_id, &d.config_name)
                .await?
                .ok_or_else(not_found)?;
            let mut d = d.clone();
            d.id.clone_from(&id);
            self.write_connection(&t.tenant_id, (&d.config_name.clone(), &id), &d, c)
                .await
        })
    }

    fn delete<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let done = sqlx::query("DELETE FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
                .bind(&t.tenant_id)
                .bind(name)
                .execute(&self.write)
                .await
                .map_err(engine_db_error)?;
            if done.rows_affected() == 0 {
                Err(not_found())
            } else {
                Ok(())
            }
        })
    }

    fn list<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
    ) -> BoxFuture<'a, fetcher_engine::Result<Vec<ConnectionDescriptor>>> {
        Box::pin(async move {
            let rows = sqlx::query("SELECT doc, host_attributes FROM connections WHERE tenant = ? AND deleted_at IS NULL ORDER BY config_name")
                .bind(&t.tenant_id)
                .fetch_all(&self.read)
                .await
                .map_err(engine_db_error)?;
            rows.iter()
                .map(|r| descriptor_from(r.get(0), r.get(1)))
                .collect()
        })
    }

    fn find_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(async move {
            match self.live_key_by_id(&t.tenant_id, id).await? {
                Some((name, _)) => self.find_live(&t.tenant_id, &name).await,
                None => Ok(None),
            }
        })
    }

    fn update_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let (name, id) = self
                .live_key_by_id(&t.tenant_id, id)
                .await?
                .ok_or_else(not_found)?;
            let mut d = d.clone();
            d.id.clone_from(&id);
            self.write_connection(&t.tenant_id, (&name, &id), &d, c)
                .await
        })
    }

    /// Soft delete: the record stays for audit but is invisible to every read.
    fn delete_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let done = sqlx::query("UPDATE connections SET deleted_at = ? WHERE tenant = ? AND id = ? AND deleted_at IS NULL")
                .bind(nanos(Timestamp::now()))
                .bind(&t.tenant_id)
                .bind(id)
                .execute(&self.write)
                .await
                .map_err(engine_db_error)?;
            if done.rows_affected() == 0 {
                Err(not_found())
            } else {
                Ok(())
            }
        })
    }

    fn credential<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ProtectedCredential>>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT ciphertext, cred_version FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
                .bind(&t.tenant_id)
                .bind(name)
                .fetch_optional(&self.read)
                .await
                .map_err(engine_db_error)?;
            Ok(row.and_then(|r| {
                let ciphertext: Option<Vec<u8>> = r.get(0);
                let key_version: Option<String> = r.get(1);
                ciphertext.map(|ciphertext| ProtectedCredential {
                    ciphertext,
                    key_version: key_version.unwrap_or_default(),
                })
            }))
        })
    }
}

// ---------------------------------------------------------------------------------------
// Schema cache and execution states
// ---------------------------------------------------------------------------------------

impl SchemaCache for SqliteStore {
    fn get<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<SchemaSnapshot>>> {
        Box::pin(async move {
            let row =
                sqlx::query("SELECT doc FROM schema_cache WHERE tenant = ? AND config_name = ?")
                    .bind(&t.tenant_id)
                    .bind(name)
                    .fetch_optional(&self.read)
                    .await
                    .map_err(engine_db_error)?;
            Ok(row.and_then(|r| serde_json::from_str(r.get::<&str, _>(0)).ok()))
        })
    }

    fn put<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        s: &'a SchemaSnapshot,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO schema_cache (tenant, config_name, doc) VALUES (?, ?, ?) ON CONFLICT(tenant, config_name) DO UPDATE SET doc = excluded.doc")
                .bind(&t.tenant_id)
                .bind(&s.config_name)
                .bind(serde_json::to_string(s).expect("snapshot is JSON"))
                .execute(&self.write)
                .await
                .map_err(engine_db_error)?;
            Ok(())
        })
    }
}

impl ExecutionStore for SqliteStore {
    fn save<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        s: &'a ExecutionState,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO executions (tenant, job_id, doc) VALUES (?, ?, ?) ON CONFLICT(tenant, job_id) DO UPDATE SET doc = excluded.doc")
                .bind(&t.tenant_id)
                .bind(&s.job_id)
                .bind(serde_json::to_string(s).expect("state is JSON"))
                .execute(&self.write)
                .await
                .map_err(engine_db_error)?;
            Ok(())
        })
    }

    fn find<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ExecutionState>>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT doc FROM executions WHERE tenant = ? AND job_id = ?")
                .bind(&t.tenant_id)
                .bind(job_id)
                .fetch_optional(&self.read)
                .await
                .map_err(engine_db_error)?;
            row.map(|r| {
                serde_json::from_str(r.get::<&str, _>(0))
                    .map_err(|_| EngineError::new(Category::Internal, "stored state is corrupt"))
            })
            .transpose()
        })
    }
}

// ---------------------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------------------

fn job_from(doc: &str) -> Result<Job> {
    serde_json::from_str(doc).map_err(|_| corrupt())
}

async fn load_job(
    tx: &mut Transaction<'static, Sqlite>,
    tenant: &str,
    id: &str,
) -> Result<Option<Job>> {
    let row = sqlx::query("SELECT doc FROM jobs WHERE tenant = ? AND id = ?")
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
    row.map(|r| job_from(r.get(0))).transpose()
}

async fn save_job(tx: &mut Transaction<'static, Sqlite>, job: &Job) -> Result<()> {
    sqlx::query("UPDATE jobs SET status = ?, completed_at = ?, lease_expires_at = ?, event_pending = ?, doc = ? WHERE tenant = ? AND id = ?")
        .bind(job.status.as_str())
        .bind(job.completed_at.map(nanos))
        .bind(job.lease_expires_at.map(nanos))
        .bind(i64::from(job.pending_event.is_some()))
        .bind(serde_json::to_string(job).expect("job is JSON"))
        .bind(&job.tenant_id)
        .bind(&job.id)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

impl SqliteStore {
    /// Runs `change` on the job inside one write transaction; `change` decides whether the
    /// transition is allowed.
    async fn read_modify_write<T>(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Job) -> Result<T>,
    ) -> Result<T> {
        let mut tx = self.tx().await?;
        let mut job = load_job(&mut tx, tenant, id)
            .await?
            .ok_or_else(|| ServiceError::not_found("job not found"))?;
        let was_active = job.status.is_active();
        let out = change(&mut job)?;
        save_job(&mut tx, &job).await?;
        if was_active && job.status.is_terminal() {
            end_sync_job(&mut tx, &job).await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(out)
    }

    async fn jobs_where(&self, sql: &'static str, limit: usize) -> Result<Vec<Job>> {
        let rows = sqlx::query(sql)
            .bind(limit as i64)
            .fetch_all(&self.read)
            .await
            .map_err(db_error)?;
        rows.iter().map(|r| job_from(r.get(0))).collect()
    }
}

/// A job of a sync left the active states: it is no longer the sync's active job, and a
/// completed one's watermarks become the sync's, in the transaction that ended the job.
async fn end_sync_job(tx: &mut Transaction<'static, Sqlite>, job: &Job) -> Result<()> {
    let Some(id) = &job.request.sync_id else {
        return Ok(());
    };
    let Some(mut sync) = load_sync(tx, &job.tenant_id, id).await? else {
        return Ok(());
    };
    sync.job_ended(job);
    sqlx::query("UPDATE syncs SET doc = ?, active_job = NULL WHERE tenant = ? AND sync_id = ? AND (active_job IS NULL OR active_job = ?)")
        .bind(serde_json::to_string(&sync).expect("a sync is JSON"))
        .bind(&job.tenant_id)
        .bind(id)
        .bind(&job.id)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

async fn load_sync(
    tx: &mut Transaction<'static, Sqlite>,
    tenant: &str,
    id: &str,
) -> Result<Option<SyncState>> {
    let row = sqlx::query("SELECT doc, active_job FROM syncs WHERE tenant = ? AND sync_id = ?")
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
    row.map(|r| sync_from(r.get(0), r.get(1))).transpose()
}

fn sync_from(doc: &str, active: Option<String>) -> Result<SyncState> {
    let mut s: SyncState = serde_json::from_str(doc).map_err(|_| corrupt())?;
    s.active_job = active;
    Ok(s)
}

impl SqliteStore {
    /// Inserts a job of a sync, making it the sync's active job, in one transaction; a
    /// sync whose active job is another answers [`InsertOutcome::SyncBusy`] and stores
    /// nothing.
    async fn insert_in_sync(&self, job: &Job, sync_id: &str) -> Result<InsertOutcome> {
        let mut tx = self.tx().await?;
        if let Err(e) = insert_job(&mut *tx, job).await {
            return match e {
                sqlx::Error::Database(d) if d.is_unique_violation() => {
                    drop(tx);
                    self.duplicate_of(job).await
                }
                e => Err(db_error(e)),
            };
        }
        let fresh = SyncState::new(&job.tenant_id, sync_id);
        let taken = sqlx::query("INSERT INTO syncs (tenant, sync_id, doc, active_job) VALUES (?, ?, ?, ?) ON CONFLICT(tenant, sync_id) DO UPDATE SET active_job = excluded.active_job WHERE syncs.active_job IS NULL")
            .bind(&job.tenant_id)
            .bind(sync_id)
            .bind(serde_json::to_string(&fresh).expect("a sync is JSON"))
            .bind(&job.id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        if taken == 0 {
            let active = load_sync(&mut tx, &job.tenant_id, sync_id)
                .await?
                .and_then(|s| s.active_job)
                .unwrap_or_default();
            let other = load_job(&mut tx, &job.tenant_id, &active).await?;
            drop(tx); // rolls back the insert
            return match other {
                Some(other) => Ok(InsertOutcome::SyncBusy(Box::new(other))),
                None => Err(ServiceError::unavailable(
                    "sync lock held by a vanished job",
                )),
            };
        }
        tx.commit().await.map_err(db_error)?;
        Ok(InsertOutcome::Created)
    }

    /// The active job holding `job`'s request hash.
    async fn duplicate_of(&self, job: &Job) -> Result<InsertOutcome> {
        let row = sqlx::query("SELECT doc FROM jobs WHERE tenant = ? AND request_hash = ? AND status IN ('pending', 'processing') ORDER BY created_at DESC LIMIT 1")
            .bind(&job.tenant_id)
            .bind(&job.request_hash)
            .fetch_optional(&self.write)
            .await
            .map_err(db_error)?;
        let existing =
            row.ok_or_else(|| ServiceError::unavailable("duplicate job vanished; retry"))?;
        Ok(InsertOutcome::Duplicate(Box::new(job_from(
            existing.get(0),
        )?)))
    }
}

/// The one `INSERT` of a job (the trigger `jobs_record_configs` records its datasources).
async fn insert_job<'e>(
    exec: impl sqlx::Executor<'e, Database = Sqlite>,
    job: &Job,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO jobs (tenant, id, status, request_hash, created_at, completed_at, event_pending, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(&job.tenant_id)
        .bind(&job.id)
        .bind(job.status.as_str())
        .bind(&job.request_hash)
        .bind(nanos(job.created_at))
        .bind(job.completed_at.map(nanos))
        .bind(i64::from(job.pending_event.is_some()))
        .bind(serde_json::to_string(job).expect("job is JSON"))
        .execute(exec)
        .await
        .map(|_| ())
}

impl JobStore for SqliteStore {
    fn insert<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<InsertOutcome>> {
        Box::pin(async move {
            if let Some(sync) = &job.request.sync_id
                && job.status.is_active()
            {
                return self.insert_in_sync(job, sync).await;
            }
            // One statement: the trigger `jobs_record_configs` records the job's
            // datasources in the same implicit transaction.
            match insert_job(&self.write, job).await {
                Ok(()) => Ok(InsertOutcome::Created),
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                    self.duplicate_of(job).await
                }
                Err(e) => Err(db_error(e)),
            }
        })
    }

    fn get<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT doc FROM jobs WHERE tenant = ? AND id = ?")
                .bind(tenant)
                .bind(id)
                .fetch_optional(&self.read)
                .await
                .map_err(db_error)?;
            row.map(|r| job_from(r.get(0))).transpose()
        })
    }

    fn find_recent_by_hash<'a>(
        &'a self,
        tenant: &'a str,
        hash: &'a str,
        since: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT doc FROM jobs WHERE tenant = ? AND request_hash = ? AND created_at >= ? ORDER BY created_at DESC LIMIT 1")
                .bind(tenant)
                .bind(hash)
                .bind(nanos(since))
                .fetch_optional(&self.read)
                .await
                .map_err(db_error)?;
            row.map(|r| job_from(r.get(0))).transpose()
        })
    }

    fn claim<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        now: Timestamp,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ClaimOutcome>> {
        Box::pin(async move {
            let mut tx = self.tx().await?;
            let Some(mut job) = load_job(&mut tx, tenant, id).await? else {
                return Ok(ClaimOutcome::NotFound);
            };
            let Some(token) = job.claim(now, lease) else {
                return Ok(ClaimOutcome::NotClaimable(Box::new(job)));
            };
            save_job(&mut tx, &job).await?;
            tx.commit().await.map_err(db_error)?;
            Ok(ClaimOutcome::Claimed {
                job: Box::new(job),
                token,
            })
        })
    }

    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        change: Transition<'a>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.read_modify_write(tenant, id, move |job| job.apply(&change)))
    }

    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(self.jobs_where(
            "SELECT doc FROM jobs WHERE event_pending = 1 AND status IN ('completed', 'failed', 'canceled') ORDER BY completed_at, created_at LIMIT ?",
            limit,
        ))
    }

    fn has_active_jobs<'a>(
        &'a self,
        tenant: &'a str,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT 1 FROM job_configs c JOIN jobs j ON j.tenant = c.tenant AND j.id = c.job_id \
                 WHERE c.tenant = ? AND c.config_name = ? AND j.status IN ('pending', 'processing') LIMIT 1",
            )
            .bind(tenant)
            .bind(config_name)
            .fetch_optional(&self.read)
            .await
            .map_err(db_error)?;
            Ok(row.is_some())
        })
    }

    fn list_pending<'a>(&'a self, now: Timestamp, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT doc FROM jobs WHERE status = 'pending' \
                 OR (status = 'processing' AND (lease_expires_at IS NULL OR lease_expires_at <= ?)) \
                 ORDER BY created_at LIMIT ?",
            )
            .bind(nanos(now))
            .bind(limit as i64)
            .fetch_all(&self.read)
            .await
            .map_err(db_error)?;
            rows.iter().map(|r| job_from(r.get(0))).collect()
        })
    }

    fn sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SyncState>>> {
        Box::pin(async move {
            let row =
                sqlx::query("SELECT doc, active_job FROM syncs WHERE tenant = ? AND sync_id = ?")
                    .bind(tenant)
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await
                    .map_err(db_error)?;
            row.map(|r| sync_from(r.get(0), r.get(1))).transpose()
        })
    }

    fn reset_sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        tables: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<SyncState>> {
        Box::pin(async move {
            let mut tx = self.tx().await?;
            let mut sync = load_sync(&mut tx, tenant, id)
                .await?
                .ok_or_else(|| ServiceError::not_found("sync not found"))?;
            if sync.active_job.is_some() {
                return Err(ServiceError::conflict("a job of the sync is active"));
            }
            sync.reset(tables);
            sqlx::query(
                "UPDATE syncs SET doc = ? WHERE tenant = ? AND sync_id = ? AND active_job IS NULL",
            )
            .bind(serde_json::to_string(&sync).expect("a sync is JSON"))
            .bind(tenant)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            Ok(sync)
        })
    }
}

// ---------------------------------------------------------------------------------------
// Rate limits
// ---------------------------------------------------------------------------------------

impl RateLimiter for SqliteStore {
    fn hit<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision>> {
        Box::pin(async move {
            // Read and write in one immediate transaction: hits on one key serialise.
            let mut tx = self
                .write
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(db_error)?;
            let tat: Option<i64> =
                sqlx::query_scalar("SELECT tat FROM rate_buckets WHERE key = ?1")
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
            let now = i128::from(nanos(Timestamp::now()));
            let (decision, next) = gcra(tat.map(i128::from), now, limit, window);
            if let Some(next) = next {
                sqlx::query(
                    "INSERT INTO rate_buckets (key, tat) VALUES (?1, ?2) \
                     ON CONFLICT(key) DO UPDATE SET tat = excluded.tat",
                )
                .bind(key)
                .bind(next as i64)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            Ok(decision)
        })
    }
}
