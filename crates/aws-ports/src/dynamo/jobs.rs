//! Jobs: the job item (its document and the sparse index keys), dedup locks,
//! active-config markers, and transitions as read-modify-write transactions that carry the
//! lease item along.

use super::job_lease::*;
use super::syncs::{claim_sync, end_sync};
use super::*;

pub(super) fn job_pk(tenant: &str, id: &str) -> String {
    tk("JOB", tenant, id)
}

pub(super) fn lock_pk(tenant: &str, hash: &str) -> String {
    tk("DEDUP", tenant, hash)
}

pub(super) fn active_pk(tenant: &str, config: &str) -> String {
    tk("ACTIVE", tenant, config)
}

pub(super) fn job_not_found() -> ServiceError {
    ServiceError::not_found("job not found")
}

pub(super) fn corrupt() -> ServiceError {
    ServiceError::internal("stored job is corrupt")
}

/// The job item: the JSON document, an optimistic-concurrency version and the sparse
/// index attributes its listings need.
pub(super) fn job_item(job: &Job, ver: i128) -> Item {
    let mut item = key(job_pk(&job.tenant_id, &job.id.to_string()), "J");
    item.insert(
        "doc".into(),
        s(serde_json::to_string(job).expect("job is JSON")),
    );
    item.insert("ver".into(), n(ver));
    item.insert("hpk".into(), s(tk("H", &job.tenant_id, &job.request_hash)));
    item.insert("tpk".into(), s(tk("T", &job.tenant_id, "")));
    item.insert(
        "tsk".into(),
        s(format!("{}#{}", pad(job.created_at), job.id)),
    );
    item.insert(
        "hsk".into(),
        s(format!("{}#{}", pad(job.created_at), job.id)),
    );
    if job.status.is_active() {
        item.insert("wpk".into(), s(WORK_PK));
        item.insert(
            "wsk".into(),
            s(format!("{}#{}", pad(job.created_at), job.id)),
        );
    }
    if job.status.is_terminal() && job.pending_event.is_some() {
        let done = job.completed_at.unwrap_or(job.created_at);
        item.insert("opk".into(), s(OUTBOX_PK));
        item.insert(
            "osk".into(),
            s(format!("{}#{}#{}", pad(done), pad(job.created_at), job.id)),
        );
    }
    item
}

pub(super) fn job_from(item: &Item) -> Result<(Job, i128)> {
    let job: Job =
        serde_json::from_str(get_s(item, "doc").ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    Ok((job, get_n(item, "ver").unwrap_or(0)))
}

/// A job as read: the document's version and the lease item's heartbeat count (`None`
/// without one), which its next transition is conditional on.
pub(super) struct Loaded {
    job: Job,
    ver: i128,
    beats: Option<i128>,
}

impl DynamoStore {
    /// The job item and its lease item, in one consistent query of the job's partition.
    async fn load(&self, tenant: &str, id: &str) -> Result<Option<Loaded>> {
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(job_pk(tenant, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let (mut doc, mut lease) = (None, None);
        for item in page.items() {
            match get_s(item, "sk") {
                Some("J") => doc = Some(job_from(item)?),
                Some(LEASE_SK) => lease = Some(Lease::from_item(item)?),
                _ => {}
            }
        }
        let Some((mut job, ver)) = doc else {
            return Ok(None);
        };
        if let Some(l) = &lease {
            l.overlay(&mut job);
        }
        Ok(Some(Loaded {
            job,
            ver,
            beats: lease.map(|l| l.beats),
        }))
    }

    async fn load_job(&self, tenant: &str, id: &str) -> Result<Option<(Job, i128)>> {
        Ok(self.load(tenant, id).await?.map(|l| (l.job, l.ver)))
    }

    /// The live lease end of a processing job (its lease item), if it has one.
    async fn lease_until(&self, tenant: &str, id: &str) -> Result<Option<Timestamp>> {
        Ok(
            match self.get_item(key(job_pk(tenant, id), LEASE_SK)).await? {
                Some(item) => Some(Lease::from_item(&item)?.until),
                None => None,
            },
        )
    }

    /// Read, decide with `change` (the in-memory store's rules), write back conditional
    /// on the version read; on a lost race, read again. A job leaving the active states
    /// releases its dedup lock and its active-config markers in the same transaction.
    async fn read_modify_write<T>(
        &self,
        tenant: &str,
        id: &str,
        mut change: impl FnMut(&mut Job) -> Result<(T, bool)>,
    ) -> Result<Option<T>> {
        for _ in 0..MAX_RETRIES {
            let Some(Loaded {
                mut job,
                ver,
                beats,
            }) = self.load(tenant, id).await?
            else {
                return Ok(None);
            };
            let was_active = job.status.is_active();
            let (out, write) = change(&mut job)?;
            if !write {
                return Ok(Some(out));
            }
            let cond = "ver = :v";
            let vals = [(":v", n(ver))];
            let mut items = vec![put(&self.table, job_item(&job, ver + 1), Some(cond), &vals)];
            // The lease item follows the job, conditional on the heartbeat read: a
            // heartbeat in between makes this transition read again.
            let (lease_cond, lease_vals) = match beats {
                Some(b) => ("hb = :hb", vec![(":hb", n(b))]),
                None => ("attribute_not_exists(pk)", vec![]),
            };
            match (Lease::of(&job), beats) {
                (Some(lease), _) => {
                    let lease = Lease {
                        beats: beats.unwrap_or(0) + 1,
                        ..lease
                    };
                    items.push(put(
                        &self.table,
                        lease.item(tenant, id),
                        Some(lease_cond),
                        &lease_vals,
                    ));
                }
                (None, Some(_)) => items.push(delete(
                    &self.table,
                    key(job_pk(tenant, id), LEASE_SK),
                    Some(lease_cond),
                    &lease_vals,
                )),
                (None, None) => {}
            }
            if was_active
                && job.status.is_terminal()
                && let Some(sync_id) = &job.request.sync_id
                && let Some(mut sync) = self.load_sync(tenant, sync_id).await?
            {
                sync.job_ended(&job);
                items.push(end_sync(&self.table, &sync, &job.id.to_string()));
            }
            if was_active && job.status.is_terminal() {
                items.push(delete(
                    &self.table,
                    key(lock_pk(tenant, &job.request_hash), "D"),
                    Some("attribute_not_exists(pk) OR jobId = :id"),
                    &[(":id", s(job.id.to_string()))],
                ));
                for config in job.config_names() {
                    items.push(delete(
                        &self.table,
                        key(active_pk(tenant, config), &job.id.to_string()),
                        None,
                        &[],
                    ));
                }
            }
            match self.transact(items).await {
                Ok(()) => return Ok(Some(out)),
                Err(e) if cancellation(&e).is_some() => {
                    // Lost a race (or a transaction conflict): read again and re-decide.
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(unavailable(e)),
            }
        }
        Err(ServiceError::unavailable("job store contention"))
    }

    /// The jobs of an index query `base` (table, index, key condition, order), page by
    /// page, kept by `keep`, at most `limit`.
    async fn query_jobs(
        &self,
        base: impl Fn() -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        mut keep: impl FnMut(&Job) -> bool,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let page = base()
                .set_exclusive_start_key(start.take())
                .limit((limit - out.len()).clamp(1, 500) as i32)
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                let (job, _) = job_from(item)?;
                if keep(&job) && out.len() < limit {
                    out.push(job);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }

    /// [`DynamoStore::query_jobs`] over the whole partition `pk` of `index`.
    async fn query_index(
        &self,
        index: &str,
        pk_attr: &str,
        pk: &str,
        keep: impl FnMut(&Job) -> bool,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let base = || {
            self.client
                .query()
                .table_name(&self.table)
                .index_name(index)
                .key_condition_expression("#p = :p")
                .expression_attribute_names("#p", pk_attr)
                .expression_attribute_values(":p", s(pk))
        };
        self.query_jobs(base, keep, limit).await
    }
}

impl JobStore for DynamoStore {
    fn insert<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<InsertOutcome>> {
        Box::pin(async move {
            let tenant = &job.tenant_id;
            let lock_key = key(lock_pk(tenant, &job.request_hash), "D");
            for _ in 0..MAX_RETRIES {
                let mut lock = lock_key.clone();
                lock.insert("jobId".into(), s(job.id.to_string()));
                let mut items = vec![
                    put(
                        &self.table,
                        job_item(job, 1),
                        Some("attribute_not_exists(pk)"),
                        &[],
                    ),
                    put(&self.table, lock, Some("attribute_not_exists(pk)"), &[]),
                ];
                let in_sync = job
                    .request
                    .sync_id
                    .as_deref()
                    .filter(|_| job.status.is_active());
                if let Some(sync) = in_sync {
                    // Index 2: the sync's one active job.
                    items.push(claim_sync(&self.table, job, sync));
                }
                if job.status.is_active() {
                    for config in job.config_names() {
                        let mut marker = key(active_pk(tenant, config), &job.id.to_string());
                        marker.insert("createdAt".into(), s(pad(job.created_at)));
                        items.push(put(&self.table, marker, None, &[]));
                    }
                } else {
                    items.truncate(1);
                }
                let reasons = match self.transact(items).await {
                    Ok(()) => return Ok(InsertOutcome::Created),
                    Err(e) => match cancellation(&e) {
                        Some(r) => r,
                        None => return Err(unavailable(e)),
                    },
                };
                if reasons
                    .first()
                    .is_some_and(|c| c == "ConditionalCheckFailed")
                {
                    return Err(ServiceError::conflict("job id already exists"));
                }
                if let Some(sync) = in_sync
                    && reasons.get(1).is_none_or(|c| c != "ConditionalCheckFailed")
                    && reasons
                        .get(2)
                        .is_some_and(|c| c == "ConditionalCheckFailed")
                {
                    let holder = self
                        .load_sync(tenant, sync)
                        .await?
                        .and_then(|s| s.active_job);
                    match holder {
                        Some(h) => match self.load_job(tenant, &h.to_string()).await? {
                            Some((other, _)) => {
                                return Ok(InsertOutcome::SyncBusy(Box::new(other)));
                            }
                            None => {
                                return Err(ServiceError::unavailable(
                                    "sync lock held by a vanished job",
                                ));
                            }
                        },
                        None => continue, // released meanwhile
                    }
                }
                if reasons.get(1).is_none_or(|c| c != "ConditionalCheckFailed") {
                    // A transaction conflict with a concurrent insert: try again.
                    tokio::task::yield_now().await;
                    continue;
                }
                // The hash is locked: report the active job holding it.
                let Some(held) = self.get_item(lock_key.clone()).await? else {
                    continue; // released meanwhile
                };
                let holder = get_s(&held, "jobId").unwrap_or_default().to_owned();
                match self.load_job(tenant, &holder).await? {
                    Some((existing, _)) if existing.status.is_active() => {
                        return Ok(InsertOutcome::Duplicate(Box::new(existing)));
                    }
                    _ => {
                        // A stale lock (its job is gone or terminal): drop it and retry.
                        let _ = self
                            .client
                            .delete_item()
                            .table_name(&self.table)
                            .set_key(Some(lock_key.clone()))
                            .condition_expression("jobId = :id")
                            .expression_attribute_values(":id", s(&holder))
                            .send()
                            .await;
                    }
                }
            }
            Err(ServiceError::unavailable("job store contention"))
        })
    }

    fn get<'a>(&'a self, tenant: &'a str, id: JobId) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move {
            Ok(self
                .load_job(tenant, &id.to_string())
                .await?
                .map(|(j, _)| j))
        })
    }

    fn find_recent_by_hash<'a>(
        &'a self,
        tenant: &'a str,
        hash: &'a str,
        since: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(GSI_HASH)
                .key_condition_expression("hpk = :h AND hsk >= :since")
                .expression_attribute_values(":h", s(tk("H", tenant, hash)))
                .expression_attribute_values(":since", s(pad(since)))
                .scan_index_forward(false)
                .limit(1)
                .send()
                .await
                .map_err(unavailable)?;
            match page.items().first() {
                Some(item) => Ok(Some(job_from(item)?.0)),
                None => Ok(None),
            }
        })
    }

    fn list_created<'a>(
        &'a self,
        tenant: &'a str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            // `tsk` is `created#id`: every job created in [from, to) sorts between the two
            // padded instants.
            let base = || {
                self.client
                    .query()
                    .table_name(&self.table)
                    .index_name(GSI_TENANT)
                    .key_condition_expression("tpk = :t AND tsk BETWEEN :from AND :to")
                    .expression_attribute_values(":t", s(tk("T", tenant, "")))
                    .expression_attribute_values(":from", s(pad(from)))
                    .expression_attribute_values(":to", s(pad(to)))
                    .scan_index_forward(false)
            };
            self.query_jobs(base, |_| true, limit).await
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
            let id = &id.to_string();
            let out = self
                .read_modify_write(tenant, id, |job| match job.claim(now, lease) {
                    Some(token) => Ok((
                        ClaimOutcome::Claimed {
                            job: Box::new(job.clone()),
                            token,
                        },
                        true,
                    )),
                    None => Ok((ClaimOutcome::NotClaimable(Box::new(job.clone())), false)),
                })
                .await?;
            Ok(out.unwrap_or(ClaimOutcome::NotFound))
        })
    }

    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        change: Transition<'a>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let id = &id.to_string();
            self.read_modify_write(tenant, id, |job| job.apply(&change).map(|q| (q, true)))
                .await?
                .ok_or_else(job_not_found)
        })
    }

    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            self.query_index(
                GSI_OUTBOX,
                "opk",
                OUTBOX_PK,
                |j| j.status.is_terminal() && j.pending_event.is_some(),
                limit,
            )
            .await
        })
    }

    fn has_active_jobs<'a>(
        &'a self,
        tenant: &'a str,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(active_pk(tenant, config_name)))
                .consistent_read(true)
                .limit(1)
                .send()
                .await
                .map_err(unavailable)?;
            Ok(!page.items().is_empty())
        })
    }

    fn list_pending<'a>(&'a self, now: Timestamp, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            // The index holds the documents; a processing job's live lease is in its
            // lease item (its heartbeats move it), read for those the index calls expired.
            let listed = self
                .query_index(GSI_WORK, "wpk", WORK_PK, |j| j.claimable_at(now), limit)
                .await?;
            let mut out = Vec::with_capacity(listed.len());
            for mut job in listed {
                if job.status == JobStatus::Processing {
                    match self
                        .lease_until(&job.tenant_id, &job.id.to_string())
                        .await?
                    {
                        Some(until) if until > now => continue,
                        Some(until) => job.lease_expires_at = Some(until),
                        None => {}
                    }
                }
                out.push(job);
            }
            Ok(out)
        })
    }

    /// The heartbeat: one conditional update of the lease item alone (its token must
    /// still be the claim's), answering whether a cancel was asked. The job document and
    /// the indexes are not written.
    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        token: u32,
        until: Timestamp,
        progress: Option<Progress>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let id = &id.to_string();
            let mut update = "SET #u = :u ADD hb :one".to_owned();
            let mut req = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(job_pk(tenant, id), LEASE_SK)))
                .condition_expression("tok = :t")
                .expression_attribute_names("#u", "until")
                .expression_attribute_values(":u", n(until.unix_nanos()))
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":t", n(token))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
            if let Some(p) = &progress {
                update = "SET #u = :u, prog = :p ADD hb :one".to_owned();
                req = req.expression_attribute_values(
                    ":p",
                    s(serde_json::to_string(p).expect("progress is JSON")),
                );
            }
            match req.update_expression(update).send().await {
                Ok(out) => Ok(out
                    .attributes()
                    .and_then(|a| a.get("cancel"))
                    .and_then(|v| v.as_bool().ok())
                    .copied()
                    .unwrap_or(false)),
                // Not this claim's lease item: a lost claim, or a fanned-out job's range,
                // whose claim the job document holds (the transition decides which).
                Err(e) if is_conditional(&e) => {
                    let change = Transition::Renew {
                        token,
                        until,
                        progress,
                    };
                    self.read_modify_write(tenant, id, |job| job.apply(&change).map(|q| (q, true)))
                        .await?
                        .ok_or_else(job_not_found)
                }
                Err(e) => Err(unavailable(e)),
            }
        })
    }

    fn sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SyncState>>> {
        Box::pin(self.load_sync(tenant, id))
    }

    fn list_syncs<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SyncState>>> {
        Box::pin(self.syncs_after(tenant, after, limit))
    }

    fn reset_sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        tables: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<SyncState>> {
        Box::pin(self.reset(tenant, id, tables))
    }

    fn delete_sync<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.delete(tenant, id))
    }
}
