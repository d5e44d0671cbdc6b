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

/// The `by-tenant` index partition of a tenant's syncs (sorted by id in `tsk`), beside
/// its jobs' (`T#…`): what the sync list reads. A sync stored before the index existed
/// is listed once it is next written (its next job).
fn syncs_tpk(tenant: &str) -> String {
    tk("Y", tenant, "")
}

/// The insert's claim on the sync: `active` set to `job_id` only if absent (the item is
/// created with no watermark when it does not exist).
pub(super) fn claim_sync(table: &str, job: &Job, id: &str) -> TransactWriteItem {
    let fresh = serde_json::to_string(&SyncState::new(job, id)).expect("a sync is JSON");
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(sync_pk(&job.tenant_id, id), SYNC_SK)))
        .update_expression(
            "SET active = :job, doc = if_not_exists(doc, :fresh), tpk = :tpk, tsk = :tsk",
        )
        .condition_expression("attribute_not_exists(active)")
        .expression_attribute_values(":job", s(job.id.to_string()))
        .expression_attribute_values(":fresh", s(fresh))
        .expression_attribute_values(":tpk", s(syncs_tpk(&job.tenant_id)))
        .expression_attribute_values(":tsk", s(id))
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
    item.insert("tpk".into(), s(syncs_tpk(&sync.tenant_id)));
    item.insert("tsk".into(), s(sync.id.clone()));
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

    /// The tenant's syncs after `after` in id order, at most `limit` (the `by-tenant`
    /// index, paged until the limit or the end).
    pub(super) async fn syncs_after(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SyncState>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let mut q = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(GSI_TENANT)
                .expression_attribute_values(":t", s(syncs_tpk(tenant)))
                .set_exclusive_start_key(start.take())
                .limit((limit - out.len()).clamp(1, 500) as i32);
            q = match after {
                Some(a) => q
                    .key_condition_expression("tpk = :t AND tsk > :after")
                    .expression_attribute_values(":after", s(a)),
                None => q.key_condition_expression("tpk = :t"),
            };
            let page = q.send().await.map_err(unavailable)?;
            for item in page.items() {
                out.push(sync_from(item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        out.truncate(limit);
        self.fill_active_jobs(&mut out).await?;
        Ok(out)
    }

    /// The index projects `doc` only (its projection is fixed once deployed): each listed
    /// sync's active job is read from the table, in batch reads of its key and `active`.
    async fn fill_active_jobs(&self, syncs: &mut [SyncState]) -> Result<()> {
        for chunk in syncs.chunks_mut(100) {
            let mut keys: Vec<Item> = chunk
                .iter()
                .map(|s| key(sync_pk(&s.tenant_id, &s.id), SYNC_SK))
                .collect();
            let mut active = HashMap::new();
            // Unprocessed keys (throttling) are asked again, a bounded number of times.
            for _ in 0..8 {
                if keys.is_empty() {
                    break;
                }
                let request = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut keys)))
                    .projection_expression("pk, active")
                    .consistent_read(true)
                    .build()
                    .expect("keys are set");
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(unavailable)?;
                for item in out
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .into_iter()
                    .flatten()
                {
                    if let (Some(pk), Some(job)) = (get_s(item, "pk"), get_s(item, "active")) {
                        active.insert(pk.to_owned(), JobId::parse(job));
                    }
                }
                keys = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.table))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
            }
            if !keys.is_empty() {
                return Err(ServiceError::unavailable(
                    "the store did not answer every read",
                ));
            }
            for s in chunk.iter_mut() {
                s.active_job = active.get(&sync_pk(&s.tenant_id, &s.id)).copied().flatten();
            }
        }
        Ok(())
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

    /// Deletes the sync's item where it exists and has no `active` job.
    pub(super) async fn delete(&self, tenant: &str, id: &str) -> Result<()> {
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(sync_pk(tenant, id), SYNC_SK)))
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(active)")
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) if is_conditional(&e) => match self.load_sync(tenant, id).await? {
                None => Err(ServiceError::not_found("sync not found")),
                Some(_) => Err(ServiceError::conflict("a job of the sync is active")),
            },
            Err(e) => Err(unavailable(e)),
        }
    }
}
