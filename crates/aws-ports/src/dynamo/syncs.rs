//! Syncs of incremental jobs: one item per `(tenant, sync)` holding its watermarks (`doc`,
//! a `SyncState` without its active job) and its active job (`active`). Inserting a job
//! of a sync sets `active` only where it is absent, in the insert's transaction; the
//! transaction that ends the job removes it and, for a completed job, writes the
//! watermarks it reached.

use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use super::*;

pub(super) const SYNC_SK: &str = "S";

pub(super) fn sync_pk(tenant: &str, id: &str) -> String {
    tk("SYNC", tenant, id)
}

/// The insert's claim on the sync: `active` set to `job_id` only if absent (the item is
/// created with no watermark when it does not exist).
pub(super) fn claim_sync(table: &str, job: &Job, id: &str) -> TransactWriteItem {
    let fresh = serde_json::to_string(&SyncState::new(job, id)).expect("a sync is JSON");
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(sync_pk(&job.tenant_id, id), SYNC_SK)))
        .update_expression("SET active = :job, doc = if_not_exists(doc, :fresh)")
        .condition_expression("attribute_not_exists(active)")
        .expression_attribute_values(":job", s(job.id.to_string()))
        .expression_attribute_values(":fresh", s(fresh))
        .build()
        .expect("an update has table, key and expression");
    TransactWriteItem::builder().update(update).build()
}

/// The write that ends a job of the sync (in the job's transaction): the sync as
/// [`SyncState::job_ended`] leaves it, no longer held by the job.
pub(super) fn end_sync(table: &str, sync: &SyncState, job_id: &str) -> TransactWriteItem {
    put(
        table,
        sync_item(sync),
        Some("attribute_not_exists(active) OR active = :job"),
        &[(":job", s(job_id))],
    )
}

fn sync_item(sync: &SyncState) -> Item {
    let mut item = key(sync_pk(&sync.tenant_id, &sync.id), SYNC_SK);
    let doc = SyncState {
        active_job: None,
        ..sync.clone()
    };
    item.insert(
        "doc".into(),
        s(serde_json::to_string(&doc).expect("a sync is JSON")),
    );
    if let Some(job) = &sync.active_job {
        item.insert("active".into(), s(job.to_string()));
    }
    item
}

fn sync_from(item: &Item) -> Result<SyncState> {
    let mut sync: SyncState = serde_json::from_str(get_s(item, "doc").unwrap_or("{}"))
        .map_err(|_| ServiceError::internal("stored sync is corrupt"))?;
    sync.active_job = get_s(item, "active").and_then(JobId::parse);
    Ok(sync)
}

impl DynamoStore {
    pub(super) async fn load_sync(&self, tenant: &str, id: &str) -> Result<Option<SyncState>> {
        self.get_item(key(sync_pk(tenant, id), SYNC_SK))
            .await?
            .map(|i| sync_from(&i))
            .transpose()
    }

    pub(super) async fn reset(
        &self,
        tenant: &str,
        id: &str,
        tables: &[(String, String)],
    ) -> Result<SyncState> {
        let mut sync = self
            .load_sync(tenant, id)
            .await?
            .ok_or_else(|| ServiceError::not_found("sync not found"))?;
        if sync.active_job.is_some() {
            return Err(ServiceError::conflict("a job of the sync is active"));
        }
        sync.reset(tables);
        let out = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(sync_item(&sync)))
            .condition_expression("attribute_not_exists(active)")
            .send()
            .await;
        match out {
            Ok(_) => Ok(sync),
            Err(e) if is_conditional(&e) => {
                Err(ServiceError::conflict("a job of the sync is active"))
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}
