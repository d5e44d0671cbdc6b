//! The schema cache and execution states, one document row each.

use super::*;

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
