//! Schedule routes (docs/api.md, "Schedules"): a sync's schedule set, read, paused, resumed
//! and removed; and [`ApiRunner`], which creates a due run's job through the same path as
//! `POST /v1/fetcher`. Tenant- and product-scoped like the other sync routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use fetcher_engine::{BoxFuture, TenantContext, Timestamp};
use fetcher_host::jobs::Created;
use fetcher_host::model::{
    Cadence, CadenceSpec, JobId, MAX_CONSECUTIVE_FAILURES, Schedule, ScheduleRun, ScheduleState,
};
use fetcher_host::schedules::{RunFailure, RunJob, ScheduleError, TickReport};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, code};
use super::extract::{RawBody, caller_product, parse_body, parse_json};
use super::fetcher::{FetcherRequest, create_request, error_of};
use super::{AppState, Scope};

/// Body of `PUT /v1/syncs/{id}/schedule`: the job request the sync runs, and either a rate
/// or a cron expression.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleRequest {
    /// The job request each run creates, as `POST /v1/fetcher` takes it; it must read
    /// incrementally, and its `syncId` is the path's (set when absent).
    #[schema(value_type = Object)]
    pub request: Value,
    /// An ISO 8601 duration of at least a minute (`PT15M`, `PT1H`, `P1D`).
    #[schema(example = "PT1H")]
    pub rate: Option<String>,
    /// A five-field cron expression (minute hour day-of-month month day-of-week).
    #[schema(example = "0 6 * * 1-5")]
    pub cron: Option<String>,
    /// The IANA time zone of `cron` (default `UTC`).
    #[schema(example = "Europe/Paris")]
    pub time_zone: Option<String>,
}

/// A schedule as the schedule routes return it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleResponse {
    pub sync_id: String,
    /// `active`, `paused`, or `pausedAfterFailures` (after
    /// three failed runs in a row; resume to run again).
    #[schema(value_type = String)]
    pub state: ScheduleState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The next run (its fixed per-sync jitter included); absent while paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<String>,
    /// When the last run ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<String>,
    /// `{dueAt, ranAt, outcome: created|skipped|failed, jobId, code, message}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub last_run: Option<ScheduleRun>,
    pub consecutive_failures: u32,
    /// The job request each run creates.
    #[schema(value_type = Object)]
    pub request: Value,
}

fn response(s: &Schedule) -> ScheduleResponse {
    let spec = s.cadence.spec();
    ScheduleResponse {
        sync_id: s.sync_id.clone(),
        state: s.state,
        rate: spec.rate,
        cron: spec.cron,
        time_zone: spec.time_zone,
        next_run_at: s
            .next_run_at
            .filter(|_| s.state == ScheduleState::Active)
            .map(|t| t.to_string()),
        last_run_at: s.last_run.as_ref().map(|r| r.ran_at.to_string()),
        last_run: s.last_run.clone(),
        consecutive_failures: s.consecutive_failures,
        request: s.request.clone(),
    }
}

fn schedule_error(e: ScheduleError) -> ApiError {
    match e {
        ScheduleError::NotFound => ApiError::not_found("schedule"),
        ScheduleError::OtherProduct => ApiError::business(
            StatusCode::CONFLICT,
            code::SYNC_OF_ANOTHER_PRODUCT,
            "Sync Of Another Product",
            "the sync runs another product's jobs: schedule a sync of your own",
        ),
        ScheduleError::Conflict => ApiError::store_conflict(),
        ScheduleError::Store(e) => ApiError::internal_with(&e),
    }
}

fn invalid_schedule(message: String) -> ApiError {
    ApiError::business(
        StatusCode::BAD_REQUEST,
        code::INVALID_SCHEDULE,
        "Invalid Schedule",
        message,
    )
}

const ID_PARAM: &str = "The syncId the schedule runs";

/// Set (or replace) a sync's schedule.
#[utoipa::path(put, path = "/v1/syncs/{id}/schedule", tag = "fetcher", params(("id" = String, Path, description = "The syncId the schedule runs"), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: the request's metadata.source must be it (docs/api.md, Products)")), request_body = ScheduleRequest,
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = ScheduleResponse, description = "The schedule as set"),
        (status = 400, body = ErrorBody, description = "FET-0001: a body that is not a schedule request; FET-1030: a rate or cron expression that is not one, or a time zone that is unknown; FET-1031: a request that does not read incrementally, or that runs another sync; and every 400 of POST /v1/fetcher for the request"),
        (status = 409, body = ErrorBody, description = "FET-1025, FET-1026: the sync runs another product's jobs"), (status = 422, body = ErrorBody, description = "FET-1060"), (status = 500, body = ErrorBody, description = "FET-0002"), (status = 504, body = ErrorBody, description = "The datasources' connection tests did not finish within the budget")))]
pub async fn put_schedule(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
    let req: ScheduleRequest = parse_json(&headers, &body)?;
    let cadence = Cadence::parse(&CadenceSpec {
        rate: req.rate,
        cron: req.cron,
        time_zone: req.time_zone,
    })
    .map_err(|e| invalid_schedule(e.to_string()))?;
    let mut request = req.request;
    let Some(object) = request.as_object_mut() else {
        return Err(ApiError::invalid_payload_because(
            "request: expected the job request object of POST /v1/fetcher",
        ));
    };
    match object.get("syncId") {
        None | Some(Value::Null) => {
            object.insert("syncId".into(), Value::String(id.clone()));
        }
        Some(Value::String(given)) if *given == id => {}
        Some(_) => {
            return Err(not_schedulable(format!(
                "request.syncId names another sync than the path's '{id}': leave it out or make it the same"
            )));
        }
    }
    let create = job_request(&request, product)?;
    if create.incremental.is_empty() {
        return Err(not_schedulable(
            "the request reads nothing incrementally: a schedule runs a sync, whose jobs name an `incremental` read".into(),
        ));
    }
    let checked = st
        .jobs()
        .validate(&scope.tenant, create)
        .await
        .map_err(error_of)?;
    let schedule = st
        .schedules()
        .set(
            &scope.tenant.tenant_id,
            &id,
            &checked.source,
            request,
            cadence,
            Timestamp::now(),
        )
        .await
        .map_err(schedule_error)?;
    Ok(Json(response(&schedule)).into_response())
}

fn not_schedulable(message: String) -> ApiError {
    ApiError::business(
        StatusCode::BAD_REQUEST,
        code::NOT_SCHEDULABLE,
        "Request Not Schedulable",
        message,
    )
}

/// The job request a stored (or just given) schedule request is, checked as
/// `POST /v1/fetcher` checks its body.
fn job_request(
    request: &Value,
    product: Option<String>,
) -> Result<fetcher_host::jobs::CreateJob, ApiError> {
    let bytes = serde_json::to_vec(request).map_err(|_| ApiError::invalid_payload())?;
    let typed: FetcherRequest = parse_body(&bytes)?;
    create_request(typed, &bytes, product)
}

/// Get a sync's schedule, with its next and last runs.
#[utoipa::path(get, path = "/v1/syncs/{id}/schedule", tag = "fetcher", params(("id" = String, Path, description = ID_PARAM), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's schedule answers 404")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = ScheduleResponse), (status = 404, body = ErrorBody, description = "FET-1001: no schedule for this sync"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn get_schedule(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
    let s = st
        .schedules()
        .get(&scope.tenant.tenant_id, &id, product.as_deref())
        .await
        .map_err(schedule_error)?;
    Ok(Json(response(&s)).into_response())
}

/// Remove a sync's schedule (the sync and its jobs stay).
#[utoipa::path(delete, path = "/v1/syncs/{id}/schedule", tag = "fetcher", params(("id" = String, Path, description = ID_PARAM), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's schedule answers 404")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 204, description = "Removed"), (status = 404, body = ErrorBody, description = "FET-1001: no schedule for this sync"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn delete_schedule(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
    st.schedules()
        .delete(&scope.tenant.tenant_id, &id, product.as_deref())
        .await
        .map_err(schedule_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Pause a sync's schedule: no run until it is resumed.
#[utoipa::path(post, path = "/v1/syncs/{id}/schedule/pause", tag = "fetcher", params(("id" = String, Path, description = ID_PARAM), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's schedule answers 404")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = ScheduleResponse), (status = 404, body = ErrorBody, description = "FET-1001: no schedule for this sync"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn pause_schedule(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    pause_or_resume(&st, &scope, &id, &headers, true).await
}

/// Resume a paused schedule (paused by its caller, or by itself after failures): the next
/// run is the first due time from now; paused time is not caught up.
#[utoipa::path(post, path = "/v1/syncs/{id}/schedule/resume", tag = "fetcher", params(("id" = String, Path, description = ID_PARAM), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's schedule answers 404")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT"), (status = 200, body = ScheduleResponse), (status = 404, body = ErrorBody, description = "FET-1001: no schedule for this sync"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn resume_schedule(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    pause_or_resume(&st, &scope, &id, &headers, false).await
}

async fn pause_or_resume(
    st: &AppState,
    scope: &Scope,
    id: &str,
    headers: &HeaderMap,
    pause: bool,
) -> Result<Response, ApiError> {
    let product = caller_product(st, headers)?;
    let (tenant, product, now) = (
        &scope.tenant.tenant_id,
        product.as_deref(),
        Timestamp::now(),
    );
    let schedules = st.schedules();
    let changed = if pause {
        schedules.pause(tenant, id, product, now).await
    } else {
        schedules.resume(tenant, id, product, now).await
    };
    Ok(Json(response(&changed.map_err(schedule_error)?)).into_response())
}

/// Creates a due run's job as `POST /v1/fetcher` would for the schedule's tenant and
/// product, with the due time in the request hash.
pub struct ApiRunner<'a>(pub &'a AppState);

impl RunJob for ApiRunner<'_> {
    fn create<'a>(
        &'a self,
        schedule: &'a Schedule,
        due: Timestamp,
    ) -> BoxFuture<'a, Result<JobId, RunFailure>> {
        Box::pin(async move {
            let refused = |e: ApiError| {
                let text = |k: &str| match &e.body[k] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                RunFailure::Refused {
                    code: text("code"),
                    message: text("message"),
                    caller: e.status.is_client_error(),
                }
            };
            let request_id = format!("schedule-{}", JobId::new());
            let tenant = TenantContext::new(&schedule.tenant_id)
                .map_err(|_| refused(ApiError::internal()))?
                .with_request_id(&request_id);
            let mut create =
                job_request(&schedule.request, Some(schedule.product.clone())).map_err(refused)?;
            create.scheduled_for = Some(due);
            match self.0.jobs().create(&tenant, &request_id, create).await {
                Ok(Created::New(job)) | Ok(Created::Duplicate(job)) => Ok(job.id),
                Err(fetcher_host::jobs::JobError::SyncBusy { job_id, .. }) => {
                    Err(RunFailure::Busy(job_id))
                }
                Err(e) => Err(refused(error_of(e))),
            }
        })
    }
}

/// The freshness of every scheduled sync at `now`, also recorded in the router's metrics
/// (`serve`'s `/metrics`; the Lambda tick reports it as EMF).
pub async fn record_freshness(
    state: &AppState,
    now: Timestamp,
) -> fetcher_host::error::Result<Vec<fetcher_host::schedules::SyncFreshness>> {
    let syncs = state.schedules().freshness(now).await?;
    state.metrics().record_sync_freshness(&syncs);
    Ok(syncs)
}

/// Runs the schedules due at `now` (`serve`'s scheduler and the Lambda tick call this).
pub async fn run_due(state: &AppState, now: Timestamp) -> fetcher_host::error::Result<TickReport> {
    let report = state.schedules().tick(now, &ApiRunner(state)).await?;
    for (tenant, sync) in &report.paused {
        tracing::warn!(tenant_id = %tenant, sync_id = %sync, failures = MAX_CONSECUTIVE_FAILURES, "schedule paused itself after failed runs");
    }
    Ok(report)
}
