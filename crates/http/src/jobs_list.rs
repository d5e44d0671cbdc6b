//! `GET /v1/fetcher`: the caller's jobs, paged like connections (docs/api.md, "Listing
//! jobs"), filtered by status, source, sync and metadata, scoped to the tenant and the
//! caller's product.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use fetcher_engine::Timestamp;
use fetcher_host::model::{Job, JobStatus};

use super::error::{ApiError, ErrorBody};
use super::extract::caller_product;
use super::fetcher::{JobResponse, error_of, job_response};
use super::paging::{self, Page};
use super::{AppState, Scope};

/// Most jobs one creation window may hold for a list: past it, the caller narrows the
/// window (a list never reads without bound).
pub const WINDOW_MAX_JOBS: usize = 10_000;

/// What a job list keeps beyond the paging parameters.
#[derive(Debug, Default)]
struct JobFilters {
    statuses: Vec<JobStatus>,
    source: Option<String>,
    sync_id: Option<String>,
}

impl JobFilters {
    fn parse(pairs: &[(String, String)]) -> Result<Self, ApiError> {
        let mut f = JobFilters::default();
        for (k, v) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
            match k.as_str() {
                "status" => {
                    for s in v.split(',').map(str::trim) {
                        let status = JobStatus::parse(s).ok_or_else(|| {
                            ApiError::invalid_query(
                                "status (one or more of pending, processing, completed, failed, canceled, comma-separated)",
                            )
                        })?;
                        f.statuses.push(status);
                    }
                }
                "source" => f.source = Some(v.clone()),
                "syncId" => f.sync_id = Some(v.clone()),
                _ => {}
            }
        }
        Ok(f)
    }

    fn keeps(&self, job: &Job, metadata: &[(String, String)]) -> bool {
        let meta = |k: &str| job.request.metadata.get(k).and_then(|v| v.as_str());
        (self.statuses.is_empty() || self.statuses.contains(&job.status))
            && self
                .source
                .as_deref()
                .is_none_or(|s| meta("source") == Some(s))
            && self
                .sync_id
                .as_deref()
                .is_none_or(|s| job.request.sync_id.as_deref() == Some(s))
            && metadata.iter().all(|(k, v)| meta(k) == Some(v.as_str()))
    }
}

/// List jobs, newest first (`sortOrder=asc`: oldest first).
#[utoipa::path(get, path = "/v1/fetcher", tag = "fetcher",
    params(("X-Product-Name" = Option<String>, Header, description = "The caller's product: only its jobs are listed; required where the deployment requires it (docs/api.md, Products)"),
        ("page" = Option<u64>, Query), ("limit" = Option<u64>, Query), ("sortOrder" = Option<String>, Query, description = "desc (default) or asc, by creation time"),
        ("startDate" = Option<String>, Query, description = "YYYY-MM-DD, inclusive (default: a month before today)"), ("endDate" = Option<String>, Query, description = "YYYY-MM-DD, inclusive"),
        ("status" = Option<String>, Query, description = "pending, processing, completed, failed or canceled; several comma-separated"),
        ("source" = Option<String>, Query, description = "metadata.source"), ("syncId" = Option<String>, Query, description = "the jobs of one sync")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = Page<JobResponse>), (status = 400, body = ErrorBody, description = "FET-0403, FET-0405 (also a window of more than 10,000 jobs), FET-0406..FET-0409"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn list_jobs(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
    let query = paging::parse(&q, &st.config().paging, paging::today_utc())?;
    let filters = JobFilters::parse(&q)?;
    let secs = |s: i64| Timestamp::from_unix_nanos(i128::from(s) * 1_000_000_000);
    // The window as connections read it: both ends included, to the second.
    let (from, to) = (secs(query.start), secs(query.end + 1));
    let mut jobs = st
        .jobs()
        .list_created(&scope.tenant, from, to, WINDOW_MAX_JOBS + 1)
        .await
        .map_err(error_of)?;
    if jobs.len() > WINDOW_MAX_JOBS {
        return Err(ApiError::invalid_query(
            "startDate, endDate (more than 10000 jobs were created in this window: narrow it)",
        ));
    }
    jobs.retain(|j| j.answers_to(product.as_deref()) && filters.keeps(j, &query.metadata));
    if query.ascending {
        jobs.reverse();
    }
    Ok(Json(Page::of(&jobs, &query, job_response)).into_response())
}
