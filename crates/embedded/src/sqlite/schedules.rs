//! `ScheduleStore`: one row per sync's schedule, its version the condition of every write,
//! and `due_at` (the next run time of an active schedule, else NULL) indexed for the tick.

use super::*;

fn due_at(s: &Schedule) -> Option<i64> {
    match s.state {
        ScheduleState::Active => s.next_run_at.map(nanos),
        ScheduleState::Paused | ScheduleState::PausedAfterFailures => None,
    }
}

fn decode(doc: &str) -> Result<Schedule> {
    serde_json::from_str(doc).map_err(|_| corrupt())
}

impl ScheduleStore for SqliteStore {
    fn schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Schedule>>> {
        Box::pin(async move {
            let doc: Option<String> =
                sqlx::query_scalar("SELECT doc FROM schedules WHERE tenant = ?1 AND sync_id = ?2")
                    .bind(tenant)
                    .bind(sync_id)
                    .fetch_optional(&self.read)
                    .await
                    .map_err(db_error)?;
            doc.as_deref().map(decode).transpose()
        })
    }

    fn save_schedule<'a>(&'a self, schedule: &'a Schedule) -> BoxFuture<'a, Result<SaveOutcome>> {
        Box::pin(async move {
            let doc = serde_json::to_string(schedule)
                .map_err(|_| ServiceError::internal("schedule not encodable"))?;
            let version = i64::try_from(schedule.version)
                .map_err(|_| ServiceError::internal("schedule version out of range"))?;
            // One statement each way: an insert that does nothing over an existing row,
            // or an update conditional on the version before this one.
            let written = if version == 1 {
                sqlx::query(
                    "INSERT INTO schedules (tenant, sync_id, version, due_at, doc) \
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(tenant, sync_id) DO NOTHING",
                )
            } else {
                sqlx::query(
                    "UPDATE schedules SET version = ?3, due_at = ?4, doc = ?5 \
                     WHERE tenant = ?1 AND sync_id = ?2 AND version = ?3 - 1",
                )
            }
            .bind(&schedule.tenant_id)
            .bind(&schedule.sync_id)
            .bind(version)
            .bind(due_at(schedule))
            .bind(doc)
            .execute(&self.write)
            .await
            .map_err(db_error)?
            .rows_affected();
            Ok(if written == 1 && version >= 1 {
                SaveOutcome::Saved
            } else {
                SaveOutcome::Stale
            })
        })
    }

    fn delete_schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let n = sqlx::query("DELETE FROM schedules WHERE tenant = ?1 AND sync_id = ?2")
                .bind(tenant)
                .bind(sync_id)
                .execute(&self.write)
                .await
                .map_err(db_error)?
                .rows_affected();
            Ok(n > 0)
        })
    }

    fn due_schedules<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Schedule>>> {
        Box::pin(async move {
            let docs: Vec<String> = sqlx::query_scalar(
                "SELECT doc FROM schedules WHERE due_at IS NOT NULL AND due_at <= ?1 \
                 ORDER BY due_at LIMIT ?2",
            )
            .bind(nanos(now))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.read)
            .await
            .map_err(db_error)?;
            docs.iter().map(|d| decode(d)).collect()
        })
    }
}
