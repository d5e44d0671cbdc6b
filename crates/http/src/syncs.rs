//! Sync routes (docs/api.md, "Syncs"): a sync's watermarks, and a reset that makes its
//! next job read from the start. Tenant-scoped like jobs: another tenant's sync is a 404.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use fetcher_engine::Timestamp;
use fetcher_host::incremental::valid_sync_id;
use fetcher_host::jobs::JobError;
use fetcher_host::model::{Schedule, ScheduleState, SyncState};
use fetcher_host::pipeline::SlotRetained;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::extract::{RawBody, caller_product, parse_json};
use super::fetcher::error_of;
use super::{AppState, Scope};

/// A sync as `GET /v1/syncs/{id}` returns it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncResponse {
    pub sync_id: String,
    /// The pending or processing job of the sync, if any (at most one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Uuid)]
    pub active_job: Option<String>,
    /// `configName → table → {watermark: {cursor, key, values}, jobId, updatedAt,
    /// watermarkAgeSeconds}`: what the sync's last completed job of each table reached;
    /// the next job reads past it. `watermarkAgeSeconds` (a date or time cursor only):
    /// how old the newest row read is.
    #[schema(value_type = Object)]
    pub tables: Value,
    /// The sync's last completed job.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Uuid)]
    pub last_completed_job: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub last_completed_at: Option<String>,
    /// Seconds since the last completed job: the sync's age.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<u64>,
    /// For a scheduled sync: whether it is stale (its age is past three periods of its
    /// schedule; docs/api.md, "Freshness").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<bool>,
}

fn response(s: &SyncState, schedule: Option<&Schedule>) -> SyncResponse {
    let now = Timestamp::now();
    let mut tables = serde_json::to_value(&s.tables).unwrap_or(Value::Null);
    for (config, by_table) in &s.tables {
        for (table, synced) in by_table {
            let newest = synced
                .watermark
                .values
                .first()
                .and_then(Value::as_str)
                .and_then(Timestamp::parse);
            if let Some(t) = newest {
                tables[config][table]["watermarkAgeSeconds"] = Value::from(now.seconds_since(t));
            }
        }
    }
    SyncResponse {
        sync_id: s.id.clone(),
        active_job: s.active_job.map(|j| j.to_string()),
        tables,
        last_completed_job: s.last_completed.map(|(j, _)| j.to_string()),
        last_completed_at: s.last_completed.map(|(_, at)| at.to_string()),
        age_seconds: s.age_seconds(now),
        // As the scheduler last found it (its episode), or as it is now by the clock (a
        // scheduler that stopped running cannot say so itself).
        stale: schedule
            .filter(|sch| sch.state == ScheduleState::Active)
            .map(|sch| sch.stale_since.is_some() || sch.stale_by(Some(s), now).is_some()),
    }
}

/// Most syncs one page of `GET /v1/syncs` holds, and the default.
const MAX_SYNCS_PAGE: usize = 100;
const DEFAULT_SYNCS_PAGE: usize = 20;

/// A page of `GET /v1/syncs`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPage {
    /// The syncs in order of id (each as `GET /v1/syncs/{id}` shows it, without `stale`,
    /// which needs the schedule: read the sync for it).
    pub items: Vec<SyncResponse>,
    pub limit: usize,
    /// The `after` of the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// List the caller's syncs, in order of id.
#[utoipa::path(get, path = "/v1/syncs", tag = "fetcher",
    params(("X-Product-Name" = Option<String>, Header, description = "The caller's product: only its syncs are listed; required where the deployment requires it (docs/api.md, Products)"),
        ("limit" = Option<usize>, Query, description = "1-100, default 20"), ("after" = Option<String>, Query, description = "the nextAfter of the previous page")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = SyncPage), (status = 400, body = ErrorBody, description = "FET-0403, FET-0405 (after or limit malformed), FET-0406 (limit over 100)"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn list_syncs(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
    let mut limit = DEFAULT_SYNCS_PAGE;
    let mut after = None;
    for (k, v) in &q {
        match k.as_str() {
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| ApiError::invalid_query("limit"))?;
                if limit > MAX_SYNCS_PAGE {
                    return Err(ApiError::page_limit(MAX_SYNCS_PAGE as u32));
                }
            }
            "after" if !valid_sync_id(v) => return Err(ApiError::invalid_query("after")),
            "after" => after = Some(v.as_str()),
            _ => {}
        }
    }
    let syncs = st
        .jobs()
        .list_syncs(&scope.tenant, after, limit)
        .await
        .map_err(error_of)?;
    // A full page may have more after it; another product's syncs are read past, not
    // shown, so a page may hold fewer than `limit` and still have a next.
    let next_after = (syncs.len() == limit)
        .then(|| syncs.last().map(|s| s.id.clone()))
        .flatten();
    let items = syncs
        .iter()
        .filter(|s| s.answers_to(product.as_deref()))
        .map(|s| response(s, None))
        .collect();
    Ok(Json(SyncPage {
        items,
        limit,
        next_after,
    })
    .into_response())
}

/// Body of `POST /v1/syncs/{id}/reset` (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResetRequest {
    /// `configName → [table]` to reset; absent or empty: every table of the sync.
    pub tables: Option<BTreeMap<String, Vec<String>>>,
}

fn sync_error(e: JobError) -> ApiError {
    match e {
        JobError::NotFound => ApiError::not_found("sync"),
        e => error_of(e),
    }
}

/// Get a sync's watermarks.
#[utoipa::path(get, path = "/v1/syncs/{id}", tag = "fetcher", params(("id" = String, Path, description = "The syncId (given, or derived: `auto-…`, in the job)"), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's record answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = SyncResponse), (status = 404, body = ErrorBody, description = "FET-1001: no such sync (of this tenant)"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn get_sync(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let sync = owned_sync(&st, &scope, &headers, &id).await?;
    let schedule = st
        .schedules()
        .store
        .schedule(&scope.tenant.tenant_id, &id)
        .await
        .map_err(|e| ApiError::internal_with(&e))?;
    Ok(Json(response(&sync, schedule.as_ref())).into_response())
}

/// What `DELETE /v1/syncs/{id}` did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletedSync {
    pub sync_id: String,
    /// Whether the sync had a schedule (deleted with it).
    pub schedule_deleted: bool,
    /// The replication slots and publications (PostgreSQL, log reads) dropped on the
    /// sync's databases: each `{slot, publication}`.
    #[schema(value_type = Vec<Object>)]
    pub dropped_log: Vec<fetcher_engine::LogSlot>,
}

/// Delete a sync: its schedule, its log reads' replication slots and publications, and
/// its record (its jobs and results stay; a later job of the same syncId starts over).
#[utoipa::path(delete, path = "/v1/syncs/{id}", tag = "fetcher", params(("id" = String, Path), ("keepLog" = Option<bool>, Query, description = "true: keep the replication slots (drop them yourself)"), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's record answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = DeletedSync), (status = 400, body = ErrorBody, description = "FET-0405: a query that is not keepLog=true|false"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1024: a job of the sync is pending or processing; FET-1028: a replication slot could not be dropped (nothing deleted)"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn delete_sync(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let mut keep_log = false;
    for (k, v) in &q {
        match (k.as_str(), v.as_str()) {
            ("keepLog", "true") => keep_log = true,
            ("keepLog", "false") => keep_log = false,
            (other, _) => return Err(ApiError::invalid_query(other)),
        }
    }
    let sync = owned_sync(&st, &scope, &headers, &id).await?;
    let dropped_log = if keep_log {
        Vec::new()
    } else {
        st.jobs()
            .release_sync_log(&scope.tenant, &sync)
            .await
            .map_err(sync_error)?
    };
    // The schedule before the record: a run it started in between makes the sync busy
    // (409), and a retried delete finds the rest to do.
    let schedule_deleted = st
        .schedules()
        .store
        .delete_schedule(&scope.tenant.tenant_id, &id)
        .await
        .map_err(|e| ApiError::internal_with(&e))?;
    st.jobs()
        .delete_sync(&scope.tenant, &id)
        .await
        .map_err(sync_error)?;
    // The dropped slots retain nothing: their gauges say so (a series cannot be removed).
    let released: Vec<SlotRetained> = sync
        .log_tables
        .iter()
        .filter(|_| !keep_log)
        .flat_map(|(config, tables)| {
            tables.iter().map(|table| SlotRetained {
                tenant_id: scope.tenant.tenant_id.clone(),
                sync_id: id.clone(),
                config: config.clone(),
                table: table.clone(),
                bytes: 0,
            })
        })
        .collect();
    st.metrics().record_log_retained(&released);
    Ok(Json(DeletedSync {
        sync_id: id,
        schedule_deleted,
        dropped_log,
    })
    .into_response())
}

/// A sync of the tenant that answers to the caller's product (docs/api.md, "Products"):
/// another product's sync is 404, as if it did not exist.
async fn owned_sync(
    st: &AppState,
    scope: &Scope,
    headers: &HeaderMap,
    id: &str,
) -> Result<SyncState, ApiError> {
    let product = caller_product(st, headers)?;
    let sync = st
        .jobs()
        .sync(&scope.tenant, id)
        .await
        .map_err(sync_error)?;
    if sync.answers_to(product.as_deref()) {
        Ok(sync)
    } else {
        Err(ApiError::not_found("sync"))
    }
}

/// Reset a sync (all tables, or those named): its next job reads them from the start.
#[utoipa::path(post, path = "/v1/syncs/{id}/reset", tag = "fetcher", params(("id" = String, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's record answers 404; required where the deployment requires it (docs/api.md, Products)")), request_body(content = Option<ResetRequest>),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = SyncResponse, description = "The sync after the reset"), (status = 400, body = ErrorBody, description = "FET-0001: a body that is not the reset request"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1024: a job of the sync is pending or processing"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn reset_sync(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    owned_sync(&st, &scope, &headers, &id).await?;
    let req: ResetRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ResetRequest::default()
    } else {
        parse_json(&headers, &body)?
    };
    let tables: Vec<(String, String)> = req
        .tables
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(config, tables)| tables.into_iter().map(move |t| (config.clone(), t)))
        .collect();
    let sync = st
        .jobs()
        .reset_sync(&scope.tenant, &id, &tables)
        .await
        .map_err(sync_error)?;
    Ok((StatusCode::OK, Json(response(&sync, None))).into_response())
}
