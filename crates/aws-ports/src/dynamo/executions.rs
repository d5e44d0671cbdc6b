//! Execution states, one item per job.

use super::*;

impl ExecutionStore for DynamoStore {
    fn save<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        state: &'a ExecutionState,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut item = key(tk("EXEC", &t.tenant_id, &state.job_id), "E");
            item.insert(
                "doc".into(),
                s(serde_json::to_string(state).expect("state is JSON")),
            );
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(engine_unavailable("execution store unavailable"))?;
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
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(key(tk("EXEC", &t.tenant_id, job_id), "E")))
                .consistent_read(true)
                .send()
                .await
                .map_err(engine_unavailable("execution store unavailable"))?;
            out.item
                .map(|i| {
                    get_s(&i, "doc")
                        .and_then(|d| serde_json::from_str(d).ok())
                        .ok_or_else(|| {
                            EngineError::new(Category::Internal, "stored state is corrupt")
                        })
                })
                .transpose()
        })
    }
}
