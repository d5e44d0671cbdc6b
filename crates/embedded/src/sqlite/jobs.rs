//! Jobs: a row per job (the document plus indexed columns); every transition is a
//! read-check-write inside one write transaction, which also ends a sync's job.

use super::syncs::*;
use super::*;

pub(super) fn job_from(doc: &str) -> Result<Job> {
    serde_json::from_str(doc).map_err(|_| corrupt())
}

pub(super) async fn load_job(
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

pub(super) async fn save_job(tx: &mut Transaction<'static, Sqlite>, job: &Job) -> Result<()> {
    sqlx::query("UPDATE jobs SET status = ?, completed_at = ?, lease_expires_at = ?, event_pending = ?, doc = ? WHERE tenant = ? AND id = ?")
        .bind(job.status.as_str())
        .bind(job.completed_at.map(nanos))
        .bind(job.lease_expires_at.map(nanos))
        .bind(i64::from(job.pending_event.is_some()))
        .bind(serde_json::to_string(job).expect("job is JSON"))
        .bind(&job.tenant_id)
        .bind(job.id.to_string())
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

/// The one `INSERT` of a job (the trigger `jobs_record_configs` records its datasources).
pub(super) async fn insert_job<'e>(
    exec: impl sqlx::Executor<'e, Database = Sqlite>,
    job: &Job,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO jobs (tenant, id, status, request_hash, created_at, completed_at, event_pending, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(&job.tenant_id)
        .bind(job.id.to_string())
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

    fn get<'a>(&'a self, tenant: &'a str, id: JobId) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move {
            let id = id.to_string();
            let row = sqlx::query("SELECT doc FROM jobs WHERE tenant = ? AND id = ?")
                .bind(tenant)
                .bind(&id)
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
        id: JobId,
        now: Timestamp,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ClaimOutcome>> {
        Box::pin(async move {
            let mut tx = self.tx().await?;
            let Some(mut job) = load_job(&mut tx, tenant, &id.to_string()).await? else {
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
        id: JobId,
        change: Transition<'a>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let id = id.to_string();
            self.read_modify_write(tenant, &id, move |job| job.apply(&change))
                .await
        })
    }

    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(self.jobs_where(
            "SELECT doc FROM jobs WHERE event_pending = 1 AND status IN ('completed', 'failed', 'canceled') ORDER BY completed_at, created_at LIMIT ?",
            limit,
        ))
    }

    fn list_created<'a>(
        &'a self,
        tenant: &'a str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT doc FROM jobs WHERE tenant = ? AND created_at >= ? AND created_at < ? \
                 ORDER BY created_at DESC, id DESC LIMIT ?",
            )
            .bind(tenant)
            .bind(nanos(from))
            .bind(nanos(to))
            .bind(limit as i64)
            .fetch_all(&self.read)
            .await
            .map_err(db_error)?;
            rows.iter().map(|r| job_from(r.get(0))).collect()
        })
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

    fn list_syncs<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SyncState>>> {
        Box::pin(async move {
            // The primary key (tenant, sync_id) orders and bounds the scan.
            let rows = sqlx::query(
                "SELECT doc, active_job FROM syncs WHERE tenant = ? AND sync_id > ? ORDER BY sync_id LIMIT ?",
            )
            .bind(tenant)
            .bind(after.unwrap_or_default())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.read)
            .await
            .map_err(db_error)?;
            rows.iter().map(|r| sync_from(r.get(0), r.get(1))).collect()
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

    fn delete_sync<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut tx = self.tx().await?;
            let sync = load_sync(&mut tx, tenant, id)
                .await?
                .ok_or_else(|| ServiceError::not_found("sync not found"))?;
            if sync.active_job.is_some() {
                return Err(ServiceError::conflict("a job of the sync is active"));
            }
            sqlx::query(
                "DELETE FROM syncs WHERE tenant = ? AND sync_id = ? AND active_job IS NULL",
            )
            .bind(tenant)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)
        })
    }
}
