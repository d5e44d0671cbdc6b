//! Syncs: a row per `(tenant, sync)` with its watermarks and its active job, which an
//! insert sets only while it is empty.

use super::jobs::*;
use super::*;

/// A job of a sync left the active states: it is no longer the sync's active job, and a
/// completed one's watermarks become the sync's, in the transaction that ended the job.
pub(super) async fn end_sync_job(tx: &mut Transaction<'static, Sqlite>, job: &Job) -> Result<()> {
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
        .bind(job.id.to_string())
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

pub(super) async fn load_sync(
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

pub(super) fn sync_from(doc: &str, active: Option<String>) -> Result<SyncState> {
    let mut s: SyncState = serde_json::from_str(doc).map_err(|_| corrupt())?;
    s.active_job = active.as_deref().and_then(JobId::parse);
    Ok(s)
}

impl SqliteStore {
    /// Inserts a job of a sync, making it the sync's active job, in one transaction; a
    /// sync whose active job is another answers [`InsertOutcome::SyncBusy`] and stores
    /// nothing.
    pub(super) async fn insert_in_sync(&self, job: &Job, sync_id: &str) -> Result<InsertOutcome> {
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
        let fresh = SyncState::new(job, sync_id);
        let taken = sqlx::query("INSERT INTO syncs (tenant, sync_id, doc, active_job) VALUES (?, ?, ?, ?) ON CONFLICT(tenant, sync_id) DO UPDATE SET active_job = excluded.active_job WHERE syncs.active_job IS NULL")
            .bind(&job.tenant_id)
            .bind(sync_id)
            .bind(serde_json::to_string(&fresh).expect("a sync is JSON"))
            .bind(job.id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        if taken == 0 {
            let active = load_sync(&mut tx, &job.tenant_id, sync_id)
                .await?
                .and_then(|s| s.active_job)
                .map(|j| j.to_string())
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
    pub(super) async fn duplicate_of(&self, job: &Job) -> Result<InsertOutcome> {
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
