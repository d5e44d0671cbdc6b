//! Incremental jobs and their syncs (docs/api.md, "Incremental extraction", "Syncs"): what
//! job creation checks of an incremental read, how a sync is named, and the sync use cases
//! (read one, reset it).
//!
//! At creation every incremental read must target a mapped table and name a cursor; its
//! cursor and key columns are checked against the datasource's schema (the cached one,
//! else a fresh discovery): they exist, the cursor has a type that can order a read, and a
//! key left empty becomes the table's primary key. A sync whose stored watermark is on
//! other columns refuses the job (a reset, or another `syncId`, starts over).

use std::collections::BTreeMap;

use fetcher_engine::{Context, IncrementalSpec, LogSlot, SchemaSnapshot, TenantContext};
use sha2::{Digest, Sha256};

use crate::dedup::{Filters, MappedFields};
use crate::jobs::{JobError, JobService};
use crate::model::SyncState;

/// `configName → table → incremental read`, as a job asks for it.
pub type Incremental = BTreeMap<String, BTreeMap<String, IncrementalSpec>>;

/// The longest `syncId`.
pub const MAX_SYNC_ID: usize = 128;

fn invalid(text: impl Into<String>) -> JobError {
    JobError::InvalidIncremental(text.into())
}

/// Whether `id` is a valid `syncId`: 1–128 of letters, digits, `.`, `_`, `-`, and not
/// `.` or `..` (path segments to every file system and URL resolver).
pub fn valid_sync_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SYNC_ID
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether a caller may name a sync `id`: a valid one that does not take the derived
/// form's `auto-` prefix (in any case), so a given sync never collides with, or passes for,
/// the sync of a request that names none.
pub fn valid_given_sync_id(id: &str) -> bool {
    valid_sync_id(id) && !id.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("auto-"))
}

/// The shape rules of an incremental request, before anything is looked up: every read
/// targets a mapped table and names a cursor, no column twice; a `syncId` is well formed
/// and comes with an incremental read.
pub fn check_shape(
    mapped: &MappedFields,
    incremental: &Incremental,
    sync_id: Option<&str>,
) -> Result<(), JobError> {
    if let Some(id) = sync_id {
        if !valid_given_sync_id(id) {
            return Err(invalid(format!(
                "syncId must be 1 to {MAX_SYNC_ID} letters, digits, '.', '_' or '-', neither '.' nor '..', and not start with 'auto-' (the derived form)"
            )));
        }
        if incremental.is_empty() {
            return Err(invalid(
                "syncId names the sync of an incremental read; this job has none",
            ));
        }
    }
    for (config, tables) in incremental {
        for (table, spec) in tables {
            if !mapped.get(config).is_some_and(|t| t.contains_key(table)) {
                return Err(invalid(format!(
                    "incremental read of '{config}.{table}', which mappedFields does not select"
                )));
            }
            if spec.is_log() {
                if !spec.cursor.is_empty() {
                    return Err(invalid(format!(
                        "incremental read of '{config}.{table}' is from the log (\"mode\": \"log\"), which takes no cursor: drop \"cursor\""
                    )));
                }
                if spec.lookback.is_some() {
                    return Err(invalid(format!(
                        "incremental read of '{config}.{table}' is from the log, which reads every change once: drop \"lookback\""
                    )));
                }
            } else if spec.cursor.trim().is_empty() {
                return Err(invalid(format!(
                    "incremental read of '{config}.{table}' names no cursor: give \"cursor\" (a column), or \"mode\": \"log\" on a PostgreSQL table"
                )));
            }
            let mut seen = Vec::new();
            for c in spec.columns() {
                if c.trim().is_empty() {
                    return Err(invalid(format!(
                        "incremental read of '{config}.{table}' names a blank column"
                    )));
                }
                if seen.contains(&c) {
                    return Err(invalid(format!(
                        "incremental read of '{config}.{table}' names column '{c}' twice"
                    )));
                }
                seen.push(c);
            }
        }
    }
    Ok(())
}

/// The first table a request reads from the log, if any.
pub fn first_log_read(incremental: &Incremental) -> Option<(&str, &str)> {
    incremental.iter().find_map(|(config, tables)| {
        tables
            .iter()
            .find(|(_, s)| s.is_log())
            .map(|(t, _)| (config.as_str(), t.as_str()))
    })
}

/// The sync of a request that names none: `auto-` and 32 hex digits of the SHA-256 of the
/// product (`metadata.source`), the mapping, the filters and the incremental reads, so
/// the same recurring job always continues the same sync and any change starts another.
pub fn derived_sync_id(
    source: &str,
    mapped: &MappedFields,
    filters: &Filters,
    incremental: &Incremental,
) -> String {
    let canonical = serde_json::to_vec(&serde_json::json!({
        "source": source,
        "mappedFields": mapped,
        "filters": filters,
        "incremental": incremental,
    }))
    .expect("a request is JSON");
    let digest = crate::dedup::hex(&Sha256::digest(&canonical));
    format!("auto-{}", &digest[..32])
}

/// Checks one datasource's incremental reads against its schema and resolves empty keys
/// to the primary key. A schema whose connector gave no types or keys cannot refuse a
/// type, and cannot resolve a key: then a key must be named.
pub fn resolve(
    config: &str,
    datasource_type: fetcher_engine::DatasourceType,
    schema: Option<&SchemaSnapshot>,
    tables: &BTreeMap<String, IncrementalSpec>,
) -> Result<BTreeMap<String, IncrementalSpec>, JobError> {
    let mut out = BTreeMap::new();
    for (table, spec) in tables {
        let mut spec = spec.clone();
        let found = schema.and_then(|s| s.find_table(datasource_type, table));
        if spec.is_log() {
            out.insert(
                table.clone(),
                resolve_log(config, table, datasource_type, found, spec)?,
            );
            continue;
        }
        if let Some(t) = found {
            if spec.key.is_empty() {
                if t.primary_key.is_empty() {
                    let what = if t.view {
                        "is a view, which has no primary key"
                    } else {
                        "has no primary key"
                    };
                    return Err(invalid(format!(
                        "table '{config}.{table}' {what}: name the columns that make the cursor unique in incremental.key"
                    )));
                }
                // The primary key without the cursor: unique together with it (a
                // cursor that is the key needs no other column).
                spec.key = t
                    .primary_key
                    .iter()
                    .filter(|c| **c != spec.cursor)
                    .cloned()
                    .collect();
            }
            for (i, c) in spec.columns().enumerate() {
                let role = if i == 0 { "cursor" } else { "key" };
                if !t.fields.iter().any(|f| f == c) {
                    return Err(invalid(format!(
                        "incremental {role} '{c}' is not a column of '{config}.{table}'"
                    )));
                }
                if let Some(ty) = t.types.get(c)
                    && !(if i == 0 { ty.cursor } else { ty.key })
                {
                    let allowed = if i == 0 {
                        "integers, numeric, timestamps, dates or text"
                    } else {
                        "integers, numeric, timestamps, dates, text, UUIDs or times"
                    };
                    return Err(invalid(format!(
                        "incremental {role} '{config}.{table}.{c}' has type {}; a {role} must be one of {allowed}",
                        ty.name
                    )));
                }
            }
            if let (Some(lookback), Some(ty)) = (spec.lookback, t.types.get(&spec.cursor))
                && ty.lookback != Some(lookback.kind())
            {
                return Err(invalid(format!(
                    "a lookback on cursor '{config}.{table}.{}' ({}) must be {}",
                    spec.cursor,
                    ty.name,
                    match ty.lookback {
                        Some(fetcher_engine::LookbackKind::Duration) =>
                            "an ISO 8601 duration such as PT5M",
                        Some(fetcher_engine::LookbackKind::Amount) => "a whole number",
                        None => "absent: a text cursor takes no lookback",
                    }
                )));
            }
        } else if spec.key.is_empty() {
            return Err(invalid(format!(
                "the primary key of '{config}.{table}' is not known: name the key columns in incremental.key"
            )));
        }
        out.insert(table.clone(), spec);
    }
    Ok(out)
}

/// A log read (docs/api.md, "Changes from the log"): PostgreSQL only; its key is the
/// table's primary key (a table without one cannot say which row a delete removed).
fn resolve_log(
    config: &str,
    table: &str,
    datasource_type: fetcher_engine::DatasourceType,
    found: Option<&fetcher_engine::TableSnapshot>,
    mut spec: IncrementalSpec,
) -> Result<IncrementalSpec, JobError> {
    if datasource_type != fetcher_engine::DatasourceType::Postgresql {
        return Err(invalid(format!(
            "table '{config}.{table}' asks for \"mode\": \"log\", which only POSTGRESQL datasources offer ('{config}' is {}): read it with a cursor",
            datasource_type.as_str()
        )));
    }
    match found {
        Some(t) if t.view => Err(invalid(format!(
            "'{config}.{table}' is a view: the log holds the changes of tables, not of views (read the view with a cursor, or read its tables from the log)"
        ))),
        Some(t) if t.primary_key.is_empty() => Err(invalid(format!(
            "table '{config}.{table}' has no primary key: a log read needs one to identify deleted rows (add a primary key, or read the table with a cursor)"
        ))),
        Some(t) if !spec.key.is_empty() && spec.key != t.primary_key => Err(invalid(format!(
            "a log read's key is the primary key of '{config}.{table}' [{}]: leave incremental.key out",
            t.primary_key.join(", ")
        ))),
        Some(t) => {
            spec.key = t.primary_key.clone();
            Ok(spec)
        }
        None if spec.key.is_empty() => Err(invalid(format!(
            "the primary key of '{config}.{table}' is not known: name it in incremental.key"
        ))),
        None => Ok(spec),
    }
}

/// A stored watermark on other columns than the job names refuses the job (409).
pub fn check_against(sync: &SyncState, incremental: &Incremental) -> Result<(), JobError> {
    for (config, tables) in incremental {
        for (table, spec) in tables {
            if let Some(w) = sync.watermark(config, table)
                && !w.matches(spec)
            {
                return Err(JobError::SyncMismatch(format!(
                    "sync '{}' reads '{config}.{table}' on cursor '{}' and key [{}]; this job names cursor '{}' and key [{}]: reset the sync's table, or use another syncId",
                    sync.id,
                    w.cursor,
                    w.key.join(", "),
                    spec.cursor,
                    spec.key.join(", ")
                )));
            }
        }
    }
    Ok(())
}

impl JobService {
    /// The schema the checks use: cached, else discovered now (bounded by the
    /// connection-test timeout); `None` when neither is to be had (the run checks).
    pub(crate) async fn schema_for(
        &self,
        tenant: &TenantContext,
        config: &str,
    ) -> Option<SchemaSnapshot> {
        let ctx = Context::background();
        if let Some(s) = self.engine.cached_schema(&ctx, tenant, config).await
            && s.tables.iter().any(|t| !t.types.is_empty())
        {
            return Some(s);
        }
        let ctx = Context::background().with_timeout(self.settings.test_timeout);
        self.engine
            .discover_schema_fresh(&ctx, tenant, config)
            .await
            .ok()
    }

    /// A sync of the tenant (404 when no job of it was ever created).
    pub async fn sync(&self, tenant: &TenantContext, id: &str) -> Result<SyncState, JobError> {
        if !valid_sync_id(id) {
            return Err(JobError::NotFound);
        }
        self.store
            .sync(&tenant.tenant_id, id)
            .await
            .map_err(JobError::JobStore)?
            .ok_or(JobError::NotFound)
    }

    /// The tenant's syncs in id order after `after`, at most `limit` (docs/api.md,
    /// "Syncs"). An `after` that is no sync id is refused as not found would be: 400 by
    /// the caller.
    pub async fn list_syncs(
        &self,
        tenant: &TenantContext,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SyncState>, JobError> {
        self.store
            .list_syncs(&tenant.tenant_id, after, limit)
            .await
            .map_err(JobError::JobStore)
    }

    /// Forgets watermarks of a sync (`tables` empty: all), so its next job reads them
    /// from the start. Refused (409) while a job of the sync is pending or processing.
    pub async fn reset_sync(
        &self,
        tenant: &TenantContext,
        id: &str,
        tables: &[(String, String)],
    ) -> Result<SyncState, JobError> {
        let current = self.sync(tenant, id).await?;
        if let Some(job) = &current.active_job {
            return Err(JobError::SyncBusy {
                sync_id: id.to_owned(),
                job_id: *job,
            });
        }
        match self.store.reset_sync(&tenant.tenant_id, id, tables).await {
            Ok(s) => Ok(s),
            Err(e) if e.kind() == crate::ErrorKind::NotFound => Err(JobError::NotFound),
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                let busy = self
                    .store
                    .sync(&tenant.tenant_id, id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.active_job)
                    .unwrap_or_default();
                Err(JobError::SyncBusy {
                    sync_id: id.to_owned(),
                    job_id: busy,
                })
            }
            Err(e) => Err(JobError::JobStore(e)),
        }
    }

    /// Drops the replication slot and publication of each table `sync` reads from the
    /// log (docs/api.md, "Deleting a sync"), before its record is deleted. Refused (409)
    /// while a job of the sync is pending or processing. When a slot cannot be dropped
    /// (its connection is gone or does not answer) the error names every slot still
    /// held, so nothing is left holding the log unseen. Returns the slots dropped.
    pub async fn release_sync_log(
        &self,
        tenant: &TenantContext,
        sync: &SyncState,
    ) -> Result<Vec<LogSlot>, JobError> {
        if let Some(job) = sync.active_job {
            return Err(JobError::SyncBusy {
                sync_id: sync.id.clone(),
                job_id: job,
            });
        }
        let by_config: Vec<(&String, Vec<LogSlot>)> = sync
            .log_tables
            .iter()
            .map(|(config, tables)| {
                let slots = tables
                    .iter()
                    .map(|table| LogSlot::for_sync(&tenant.tenant_id, &sync.id, config, table))
                    .collect();
                (config, slots)
            })
            .collect();
        for (i, (config, slots)) in by_config.iter().enumerate() {
            let ctx = Context::background().with_timeout(self.settings.test_timeout);
            if let Err(e) = self.engine.release_log(&ctx, tenant, config, slots).await {
                return Err(JobError::LogNotReleased {
                    config_name: (*config).clone(),
                    // This connection's and those not tried yet: still on their servers.
                    slots: by_config[i..]
                        .iter()
                        .flat_map(|(_, s)| s.iter().cloned())
                        .collect(),
                    why: e.message().to_owned(),
                });
            }
        }
        Ok(by_config.into_iter().flat_map(|(_, s)| s).collect())
    }

    /// Deletes a sync's record (its jobs stay; a later job of the id starts a new sync).
    /// Refused (409) while a job of the sync is pending or processing.
    pub async fn delete_sync(&self, tenant: &TenantContext, id: &str) -> Result<(), JobError> {
        match self.store.delete_sync(&tenant.tenant_id, id).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == crate::ErrorKind::NotFound => Err(JobError::NotFound),
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                let busy = self.sync(tenant, id).await.ok().and_then(|s| s.active_job);
                Err(JobError::SyncBusy {
                    sync_id: id.to_owned(),
                    job_id: busy.unwrap_or_default(),
                })
            }
            Err(e) => Err(JobError::JobStore(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cursor: &str, key: &[&str]) -> IncrementalSpec {
        IncrementalSpec {
            mode: Default::default(),
            cursor: cursor.into(),
            key: key.iter().map(|k| k.to_string()).collect(),
            lookback: None,
        }
    }

    #[test]
    fn sync_ids_and_shapes() {
        assert!(valid_sync_id("orders-hourly.v2_1"));
        for bad in ["", "a b", "ä", ".", "..", &"x".repeat(129)] {
            assert!(!valid_sync_id(bad), "{bad}");
        }
        for derived_form in ["auto-0123", "AUTO-x", "Auto-"] {
            assert!(valid_sync_id(derived_form) && !valid_given_sync_id(derived_form));
        }
        assert!(valid_given_sync_id("autosync") && valid_given_sync_id("..."));
        let mapped: MappedFields =
            serde_json::from_value(serde_json::json!({"pg": {"orders": ["id"]}})).unwrap();
        let ok: Incremental = [(
            "pg".to_string(),
            [("orders".to_string(), spec("updated_at", &["id"]))].into(),
        )]
        .into();
        check_shape(&mapped, &ok, Some("s1")).unwrap();
        check_shape(&mapped, &ok, None).unwrap();
        assert!(check_shape(&mapped, &Incremental::new(), Some("s1")).is_err());
        let elsewhere: Incremental = [(
            "pg".to_string(),
            [("other".to_string(), spec("c", &[]))].into(),
        )]
        .into();
        assert!(check_shape(&mapped, &elsewhere, None).is_err());
        let twice: Incremental = [(
            "pg".to_string(),
            [("orders".to_string(), spec("id", &["id"]))].into(),
        )]
        .into();
        assert!(check_shape(&mapped, &twice, None).is_err());
        // The derived id follows the request, not its metadata beyond the source.
        let a = derived_sync_id("crm", &mapped, &Filters::new(), &ok);
        assert!(a.starts_with("auto-") && a.len() == 37 && valid_sync_id(&a));
        assert_eq!(a, derived_sync_id("crm", &mapped, &Filters::new(), &ok));
        assert_ne!(a, derived_sync_id("billing", &mapped, &Filters::new(), &ok));
    }
}
