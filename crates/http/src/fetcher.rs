//! Job routes (docs/api.md, "Jobs"): thin handlers over [`fetcher_host::jobs::JobService`].

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, code};
use super::extract::{RawBody, caller_product, parse_json};
use super::{AppState, Scope};
use fetcher_host::dedup::{Filters, MappedFields};
use fetcher_host::jobs::{CreateJob, Created, JobError};
use fetcher_host::model::{Job, JobStatus, ResultFormat};

/// One filter condition as the API accepts it: each operator takes an array of values;
/// unknown operators are dropped (the reference's wire rule). It exists for that leniency
/// and for the OpenAPI schema, and becomes a [`fetcher_engine::Condition`] at once.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct Condition {
    #[schema(value_type = Option<Vec<Object>>)]
    pub eq: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub gt: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub gte: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub lt: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub lte: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub between: Option<Vec<Value>>,
    #[serde(rename = "in")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub in_: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub nin: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub ne: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub like: Option<Vec<Value>>,
}

impl Condition {
    /// The engine's typed condition (the one every later layer uses), with the
    /// reference's leniency applied once here: unknown operators were already dropped by
    /// decoding, and an empty value list counts as absent.
    fn into_condition(self) -> fetcher_engine::Condition {
        use fetcher_engine::Operator as Op;
        [
            (Op::Eq, self.eq),
            (Op::Gt, self.gt),
            (Op::Gte, self.gte),
            (Op::Lt, self.lt),
            (Op::Lte, self.lte),
            (Op::Between, self.between),
            (Op::In, self.in_),
            (Op::Nin, self.nin),
            (Op::Ne, self.ne),
            (Op::Like, self.like),
        ]
        .into_iter()
        .filter_map(|(op, v)| v.filter(|v| !v.is_empty()).map(|v| (op, v)))
        .collect()
    }
}

/// `configName → table → field → condition`, as sent.
pub type FilterInput = BTreeMap<String, BTreeMap<String, BTreeMap<String, Condition>>>;

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataRequest {
    /// `configName → table → [field]`: at most 10 datasources, each table with at least
    /// one field.
    #[schema(value_type = std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<String>>>, required = true)]
    pub mapped_fields: Option<MappedFields>,
    /// `configName → table → field → condition`.
    #[schema(value_type = Option<Object>)]
    pub filters: Option<FilterInput>,
}

/// The keys of a job request at its top level and in `dataRequest`: a misspelling of one
/// is refused naming it.
fn check_known_keys(v: &Value) -> Result<(), ApiError> {
    super::extract::known_keys(
        v,
        &[
            "dataRequest",
            "metadata",
            "resultFormat",
            "incremental",
            "syncId",
        ],
    )?;
    super::extract::known_keys(&v["dataRequest"], &["mappedFields", "filters"])
}

/// What a `FET-1020` adds: `mappedFields` keys are connection config names, and the
/// product's are these (docs/api.md, "Creating a job").
fn known_connections(known: &[String]) -> String {
    if known.is_empty() {
        "; mappedFields keys are connection configNames, and this product has none yet (POST /v1/management/connections)".to_owned()
    } else {
        let names: Vec<String> = known.iter().map(|n| format!("'{n}'")).collect();
        format!(
            "; mappedFields keys are connection configNames: this product's are {}",
            names.join(", ")
        )
    }
}

/// The operators a filter condition may use, as docs/filters.md lists them.
const OPERATORS: [&str; 10] = [
    "eq", "ne", "gt", "gte", "lt", "lte", "between", "in", "nin", "like",
];

/// Each filter condition's operators are known and given the number of values they take
/// (docs/filters.md): refused at creation (400 `FET-0401`, naming the table, the column
/// and what is allowed) rather than dropped (the reference ignored an unknown operator,
/// widening the job) or failing when the job runs. An empty value list still counts as
/// absent, as the reference has it.
fn check_filter_operators(v: &Value) -> Result<(), ApiError> {
    let Some(filters) = v["dataRequest"]["filters"].as_object() else {
        return Ok(());
    };
    for (ds, tables) in filters {
        for (table, fields) in tables.as_object().into_iter().flatten() {
            for (field, condition) in fields.as_object().into_iter().flatten() {
                let at = format!("filter on '{ds}.{table}.{field}'");
                for (op, values) in condition.as_object().into_iter().flatten() {
                    if !OPERATORS.contains(&op.as_str()) {
                        return Err(ApiError::invalid_data_request(format!(
                            "{at}: unknown operator '{op}'; the operators are {}",
                            OPERATORS.join(", ")
                        )));
                    }
                    let n = values.as_array().map_or(0, Vec::len);
                    let want = match op.as_str() {
                        "gt" | "gte" | "lt" | "lte" | "like" => Some(1),
                        "between" => Some(2),
                        _ => None,
                    };
                    if let Some(want) = want.filter(|w| n != 0 && n != *w) {
                        return Err(ApiError::invalid_data_request(format!(
                            "{at}: '{op}' takes {want} value{}, got {n}",
                            if want == 1 { "" } else { "s" }
                        )));
                    }
                    if op == "like" && n == 1 && !values[0].is_string() {
                        return Err(ApiError::invalid_data_request(format!(
                            "{at}: 'like' takes a string pattern"
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Body of `POST /v1/fetcher`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetcherRequest {
    #[schema(required = true)]
    pub data_request: Option<DataRequest>,
    /// Must contain a non-empty string `source`.
    #[schema(value_type = Object, required = true)]
    pub metadata: Option<Map<String, Value>>,
    /// Beyond the reference: the result format (`v1` = the reference's sealed JSON, `v2` =
    /// framed NDJSON, `parquet` = one sealed Parquet file per table and a manifest).
    /// Absent: the deployment's default. Part of the dedup hash when set.
    #[schema(value_type = Option<String>, example = "v2")]
    pub result_format: Option<ResultFormat>,
    /// Beyond the reference: tables read incrementally, `configName → table → {cursor,
    /// key, lookback}` or `{"mode": "log"}` (docs/api.md, "Incremental extraction",
    /// "Changes from the log"). `key` defaults to the table's primary key; `lookback` is
    /// an ISO 8601 duration (`PT5M`) for date and time cursors, a number for numeric
    /// ones. Part of the dedup hash.
    /// Decoded by the handler, so a malformed read is `Invalid Incremental Read` naming
    /// what is wrong rather than an unparseable body.
    #[schema(value_type = Option<std::collections::BTreeMap<String, std::collections::BTreeMap<String, IncrementalInput>>>)]
    pub incremental: Option<Value>,
    /// Beyond the reference: the sync an incremental job continues (1–128 letters,
    /// digits, `.`, `_`, `-`). Absent: derived from the product, the mapping, the
    /// filters and the incremental reads.
    #[schema(example = "orders-hourly")]
    pub sync_id: Option<String>,
}

/// One table's incremental read, as the API takes it (the OpenAPI shape of
/// `fetcher_engine::IncrementalSpec`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct IncrementalInput {
    /// `cursor` (the default): rows past a watermark on `cursor`; `log` (PostgreSQL): a
    /// snapshot first, then every committed change, deletes included, from the
    /// write-ahead log (no cursor, no lookback).
    #[schema(example = "cursor")]
    mode: Option<String>,
    /// The column whose growth marks new and changed rows (cursor mode).
    #[schema(example = "updated_at")]
    cursor: Option<String>,
    /// Columns that make the cursor unique, in order; default: the primary key (without
    /// the cursor).
    key: Option<Vec<String>>,
    /// `PT5M` (dates, timestamps) or a number (numeric cursors): rows that far behind the
    /// watermark are read again.
    #[schema(value_type = Option<Object>, example = "PT5M")]
    lookback: Option<String>,
}

/// Answer of job creation (202 new, 200 duplicate).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetcherResponse {
    #[schema(format = Uuid)]
    pub job_id: String,
    #[schema(value_type = JobState)]
    pub status: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub message: &'static str,
}

/// A job's status.
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum JobState {
    Pending,
    Processing,
    Completed,
    Failed,
    /// Stopped on request (its event is a `job.failed` with category `canceled`).
    Canceled,
}

/// How far a job is (beyond the reference): while `processing`, updated every couple of
/// seconds; on `completed`, the result's figures; on `canceled`, where it stopped.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressBody {
    /// Rows of the plaintext NDJSON written so far.
    pub rows: u64,
    /// Bytes of the plaintext NDJSON written so far.
    pub bytes: u64,
    /// The rows the job reads, as its datasources' catalogs estimated them when it was
    /// created: present when every table is read whole and its schema was known (an
    /// estimate, not a count: `rows` may end above or below it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_estimate: Option<u64>,
    pub tables: TablesProgress,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// Tables finished of the job's.
#[derive(Debug, Serialize, ToSchema)]
pub struct TablesProgress {
    pub done: u64,
    pub total: u64,
}

/// A job as returned by `GET /v1/fetcher/{id}`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobResponse {
    #[schema(format = Uuid)]
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    #[schema(value_type = Object)]
    pub mapped_fields: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub filters: Option<Value>,
    #[schema(value_type = JobState)]
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_hmac: Option<String>,
    /// Beyond the reference: the format of the stored result (`v1` / `v2` / `parquet`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_format: Option<String>,
    /// Beyond the reference: a Parquet job's files (`config`, `table`, `path`,
    /// `rowCount`, `sizeBytes`, `hmac`, `sha256`; docs/results.md, "Parquet results").
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub result_parts: Option<Vec<fetcher_engine::ResultPart>>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub request_hash: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub completed_at: Option<String>,
    /// Beyond the reference: live progress (docs/api.md, "Progress").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressBody>,
    /// Beyond the reference: when a cancel was asked for a `processing` job.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub cancel_requested_at: Option<String>,
    /// Beyond the reference: an incremental job's sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_id: Option<String>,
    /// Beyond the reference: the due time of the schedule run that created the job
    /// (docs/api.md, "Schedules").
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub scheduled_for: Option<String>,
    /// Beyond the reference: an incremental job's reads, `configName → table → {cursor,
    /// key, lookback}` (keys resolved).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub incremental: Option<Value>,
    /// Beyond the reference: a completed incremental job's watermarks, `configName →
    /// table → {fromWatermark, toWatermark}`, each `{cursor, key, values}` or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub watermarks: Option<Value>,
}

/// The API view of a job: internal `terminalEvent*` keys stripped from `metadata`,
/// `metadata.error` from the job's sanitised error, empty parts omitted.
pub fn job_response(job: &Job) -> JobResponse {
    let mut metadata: Map<String, Value> = job
        .request
        .metadata
        .iter()
        .filter(|(k, _)| !k.starts_with("terminalEvent"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(e) = &job.error {
        metadata.insert("error".into(), Value::String(e.clone()));
    }
    let result = job.result.as_ref();
    JobResponse {
        id: job.id.to_string(),
        metadata: (!metadata.is_empty()).then_some(metadata),
        mapped_fields: serde_json::to_value(&job.request.mapped_fields).unwrap_or(Value::Null),
        filters: (!job.request.filters.is_empty())
            .then(|| serde_json::to_value(&job.request.filters).unwrap_or(Value::Null)),
        status: job.status.as_str().to_owned(),
        result_path: result.map(|r| r.path.clone()).filter(|p| !p.is_empty()),
        result_hmac: result.map(|r| r.hmac.clone()).filter(|h| !h.is_empty()),
        result_format: result.map(|r| r.format.as_str().to_owned()),
        result_parts: result
            .filter(|r| !r.parts.is_empty())
            .map(|r| r.parts.clone()),
        request_hash: job.request_hash.clone(),
        created_at: job.created_at.to_string(),
        completed_at: job.completed_at.map(|t| t.to_string()),
        progress: job
            .progress
            .filter(|_| job.status != JobStatus::Pending)
            .map(|p| ProgressBody {
                rows: p.rows,
                bytes: p.bytes,
                rows_estimate: job.rows_estimate,
                tables: TablesProgress {
                    done: p.tables_done,
                    total: p.tables_total,
                },
                updated_at: p.updated_at.to_string(),
            }),
        cancel_requested_at: job
            .cancel_requested_at
            .filter(|_| job.status == JobStatus::Processing)
            .map(|t| t.to_string()),
        sync_id: job.request.sync_id.clone(),
        scheduled_for: job.request.scheduled_for.map(|t| t.to_string()),
        incremental: (!job.request.incremental.is_empty())
            .then(|| serde_json::to_value(&job.request.incremental).unwrap_or(Value::Null)),
        watermarks: result
            .filter(|r| !r.watermarks.is_empty())
            .map(|r| serde_json::to_value(&r.watermarks).unwrap_or(Value::Null)),
    }
}

/// What `metadata.source` must be, after a product mismatch (#53 item 8): the product
/// the job's connections belong to, compared exactly as stored (trimmed, lower-cased,
/// as `X-Product-Name` is stored), so a source differing only in case is told the stored
/// form.
fn source_hint(source: &str, owner: Option<&str>) -> String {
    match owner {
        Some(owner) if source.trim().eq_ignore_ascii_case(owner) => format!(
            ": product names are stored trimmed and lower-cased and compared exactly; send '{owner}'"
        ),
        Some(owner) => format!(
            ": metadata.source must be the product the connection was created or assigned under, here '{owner}'"
        ),
        None => ": metadata.source must be the product the connection was created or assigned under (its X-Product-Name)".to_owned(),
    }
}

pub(crate) fn error_of(e: JobError) -> ApiError {
    let bad = StatusCode::BAD_REQUEST;
    match e {
        JobError::MappedFieldsRequired => {
            let fields = BTreeMap::from([(
                "mappedFields".to_owned(),
                "dataRequest.mappedFields is a required field".to_owned(),
            )]);
            ApiError::field_buckets(fields, BTreeMap::new(), false).expect("non-empty")
        }
        JobError::InvalidDataRequest(m) => ApiError::invalid_data_request(m),
        JobError::ValidationLimit(m) => ApiError::validation_limit(m),
        JobError::TooManyWaiting => ApiError::business(
            StatusCode::TOO_MANY_REQUESTS,
            code::TOO_MANY_WAITING,
            "Too Many Jobs Waiting",
            "the tenant has its maximum number of jobs waiting for a worker: submit more once some have started",
        ),
        JobError::Metadata(title, message) => {
            ApiError::business(bad, code::MISSING_FIELDS, title, message)
        }
        JobError::FilterReferences(m) => ApiError::business(
            bad,
            code::INVALID_DATA_REQUEST,
            "Invalid Filter References",
            m,
        ),
        JobError::NoConnections(known) => ApiError::business(
            bad,
            code::NO_CONNECTIONS,
            "No Connections Found",
            format!(
                "No connections configured for the requested datasources{}",
                known_connections(&known)
            ),
        ),
        JobError::MissingDataSource(n, known) => ApiError::business(
            bad,
            code::NO_CONNECTIONS,
            "Missing Data Source",
            format!(
                "No connection configured for datasource '{n}'{}",
                known_connections(&known)
            ),
        ),
        JobError::NotAssigned(n) => ApiError::business(
            bad,
            code::NOT_ASSIGNED,
            "Connection Not Assigned",
            format!(
                "Connection '{n}' has no product assigned. Use the migration endpoint to assign it first."
            ),
        ),
        JobError::ProductMismatch {
            config_name,
            source,
            owner,
        } => ApiError::business(
            bad,
            code::PRODUCT_MISMATCH,
            "Product Mismatch",
            format!(
                "Connection '{config_name}' does not belong to the product identified by source '{source}'{}",
                source_hint(&source, owner.as_deref())
            ),
        ),
        JobError::ForbiddenHost => ApiError::forbidden_host(),
        JobError::TypeNotReadable {
            config_name,
            datasource_type,
            readable,
        } => ApiError::type_not_readable(&config_name, datasource_type, &readable),
        JobError::ConnectionDown(n, why) => ApiError::business(
            bad,
            code::CONNECTION_DOWN,
            "Connection Down",
            match why {
                Some(why) => format!("Connection '{n}' is not available: {why}"),
                None => format!("Connection '{n}' is not available"),
            },
        ),
        JobError::ConnectionStore(e) => ApiError::from_engine(&e),
        JobError::JobStore(e) => ApiError::from_job_store(&e),
        JobError::Publish(e) => {
            tracing::error!(error = %e.log_detail(), "job message could not be enqueued");
            ApiError::internal()
        }
        JobError::NotFound => ApiError::not_found("job"),
        JobError::Finished(status) => ApiError::business(
            StatusCode::CONFLICT,
            code::JOB_FINISHED,
            "Job Finished",
            format!(
                "job is already {}; there is nothing to cancel",
                status.as_str()
            ),
        ),
        JobError::ShuttingDown => ApiError::unavailable(),
        JobError::Timeout => ApiError::framework(
            axum::http::StatusCode::GATEWAY_TIMEOUT,
            "the datasources did not answer in time; try again",
        ),
        JobError::TooLarge(size) => ApiError::framework(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "job request is {size} bytes; at most {} (mapped fields, filters and metadata)",
                fetcher_host::jobs::MAX_JOB_REQUEST_BYTES
            ),
        ),
        JobError::InvalidIncremental(m) => ApiError::business(
            bad,
            code::INVALID_DATA_REQUEST,
            "Invalid Incremental Read",
            m,
        ),
        JobError::SyncMismatch(m) => ApiError::business(
            StatusCode::CONFLICT,
            code::SYNC_MISMATCH,
            "Sync Mismatch",
            m,
        ),
        JobError::SyncOfAnotherProduct(sync_id) => ApiError::business(
            StatusCode::CONFLICT,
            code::SYNC_OF_ANOTHER_PRODUCT,
            "Sync Of Another Product",
            format!(
                "sync '{sync_id}' runs the jobs of another product of the tenant: give this job another syncId"
            ),
        ),
        JobError::SourceNotNamedProduct { source, product } => ApiError::business(
            bad,
            code::PRODUCT_MISMATCH,
            "Product Mismatch",
            format!(
                "metadata.source '{source}' is not the product named by X-Product-Name ('{product}'){}",
                if source.trim().eq_ignore_ascii_case(&product) {
                    source_hint(&source, Some(&product))
                } else {
                    String::new()
                }
            ),
        ),
        JobError::LogNotReleased {
            config_name,
            slots,
            why,
        } => {
            let names: Vec<&str> = slots.iter().map(|s| s.slot.as_str()).collect();
            let drops: Vec<String> = slots
                .iter()
                .map(|s| {
                    format!(
                        "SELECT pg_drop_replication_slot('{}'); DROP PUBLICATION {};",
                        s.slot, s.publication
                    )
                })
                .collect();
            ApiError::business(
                StatusCode::CONFLICT,
                code::LOG_NOT_RELEASED,
                "Log Not Released",
                format!(
                    "the sync's replication slots on connection '{config_name}' could not be dropped ({why}); nothing was deleted, and {} still hold the log on the database: make the connection work and delete again, or delete with ?keepLog=true and drop them there yourself: {}",
                    names.join(", "),
                    drops.join(" ")
                ),
            )
        }
        JobError::SyncBusy { sync_id, job_id } => ApiError::business(
            StatusCode::CONFLICT,
            code::SYNC_BUSY,
            "Sync Busy",
            format!(
                "job {job_id} of sync '{sync_id}' is still pending or processing; a sync runs one job at a time: wait for it (GET /v1/fetcher/{job_id}) or cancel it"
            ),
        ),
        JobError::SchemaInvalid(unknown) => {
            let mut errors = Vec::new();
            for (datasource, table, field) in unknown {
                errors.extend(super::connections::schema_problems(
                    &datasource,
                    &[(table, field)],
                ));
            }
            super::connections::schema_invalid(errors)
        }
    }
}

/// Filter values are numbers the job holds exactly as written (docs/filters.md, "Types"):
/// a JSON number with more digits than a double or a 64-bit integer holds would be
/// compared, and de-duplicated, as a rounded one, so it is refused (give it as a string).
fn exact_filter_numbers(body: &[u8]) -> Result<(), ApiError> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(rename = "dataRequest", borrow)]
        data_request: Option<Data<'a>>,
    }
    #[derive(Deserialize)]
    struct Data<'a> {
        #[serde(borrow)]
        filters: Option<&'a serde_json::value::RawValue>,
    }
    let filters = serde_json::from_slice::<Body<'_>>(body)
        .ok()
        .and_then(|b| b.data_request)
        .and_then(|d| d.filters);
    match filters {
        Some(raw) if !fetcher_engine::json::numbers_exact(raw.get()) => {
            Err(ApiError::invalid_data_request(
                "a filter number has more digits than a double or a 64-bit integer holds: give it as a string",
            ))
        }
        _ => Ok(()),
    }
}

/// Create an extraction job (de-duplicated by content).
#[utoipa::path(post, path = "/v1/fetcher", tag = "fetcher", request_body = FetcherRequest, params(("X-Product-Name" = Option<String>, Header, description = "The caller's product: metadata.source must be it (400 FET-1016); required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 202, body = FetcherResponse, description = "New job"), (status = 200, body = FetcherResponse, description = "Duplicate of an existing job"),
        (status = 400, body = ErrorBody, description = "FET-0001, FET-0401 (also Invalid Incremental Read), FET-0402, FET-0414, FET-1014, FET-1016, FET-1020, FET-1040, FET-1061"), (status = 409, body = ErrorBody, description = "FET-1024: another job of the sync is pending or processing; FET-1025: the sync's watermark is on other columns; FET-1026: the sync belongs to another product"), (status = 429, body = ErrorBody, description = "FET-1027: the tenant has its maximum number of jobs waiting for a worker (serve)"), (status = 413, body = ErrorBody, description = "Body over 4 MiB, or the job request (mapped fields, filters, metadata) over 192 KiB"),
        (status = 422, body = super::connections::SchemaValidationErrorResponse, description = "FET-1060: the cached schema lacks a mapped table or field (validate-schema's body)"), (status = 500, body = ErrorBody, description = "FET-0002"), (status = 503, body = ErrorBody, description = "FET-0003: shutting down, nothing stored"), (status = 504, body = ErrorBody, description = "The datasources' connection tests did not finish within the budget (20 s)")))]
pub async fn create_job(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
    let req: FetcherRequest = parse_json(&headers, &body)?;
    let create = create_request(req, &body, product)?;
    let (status, job, message) = match st
        .jobs()
        .create(&scope.tenant, &scope.request_id, create)
        .await
        .map_err(error_of)?
    {
        Created::New(job) => (
            StatusCode::ACCEPTED,
            job,
            "Job created and queued for processing",
        ),
        Created::Duplicate(job) => (
            StatusCode::OK,
            job,
            "Duplicate request detected - returning existing job",
        ),
    };
    let body = FetcherResponse {
        job_id: job.id.to_string(),
        status: job.status.as_str().to_owned(),
        created_at: job.created_at.to_string(),
        message,
    };
    Ok((status, Json(body)).into_response())
}

/// A job request as the job service takes it, from the typed body and its raw bytes:
/// the checks only the raw tree can make (unknown keys, unknown operators, numbers past
/// a double), the filters typed, the incremental reads decoded. `POST /v1/fetcher` and a
/// schedule's runs share it.
pub(crate) fn create_request(
    req: FetcherRequest,
    body: &[u8],
    product: Option<String>,
) -> Result<CreateJob, ApiError> {
    // The typed request ignores unknown keys and operators: the raw tree, read once,
    // is what tells a misspelling or an unknown operator apart.
    let raw: Value = serde_json::from_slice(body).unwrap_or_default();
    check_known_keys(&raw)?;
    check_filter_operators(&raw)?;
    exact_filter_numbers(body)?;
    let data = req.data_request.unwrap_or_default();
    let filters: Filters = data
        .filters
        .unwrap_or_default()
        .into_iter()
        .map(|(ds, tables)| {
            (
                ds,
                tables
                    .into_iter()
                    .map(|(t, fields)| {
                        (
                            t,
                            fields
                                .into_iter()
                                .map(|(f, c)| (f, c.into_condition()))
                                .collect(),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    let incremental = match req.incremental {
        None | Some(Value::Null) => Default::default(),
        Some(v) => serde_json::from_value(v).map_err(|e| {
            error_of(JobError::InvalidIncremental(format!(
                "incremental must be {{configName: {{table: {{cursor, key, lookback}} or {{\"mode\": \"log\"}}}}}}: {e}"
            )))
        })?,
    };
    Ok(CreateJob {
        mapped_fields: data.mapped_fields,
        filters,
        metadata: req.metadata,
        result_format: req.result_format,
        incremental,
        sync_id: req.sync_id,
        product,
        scheduled_for: None,
    })
}

/// Cancel a job: a pending one ends `canceled` at once, a processing one is stopped by
/// its worker within a few seconds (no result is left); 202 with the job as it is now.
#[utoipa::path(post, path = "/v1/fetcher/{id}/cancel", tag = "fetcher", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's record answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 202, body = JobResponse, description = "Canceled (was pending) or asked to stop (processing)"), (status = 400, body = ErrorBody, description = "FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1023: the job already ended"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn cancel_job(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    owned_job(&st, &scope, &headers, id).await?;
    let job = st
        .jobs()
        .cancel(&scope.tenant, id)
        .await
        .map_err(error_of)?;
    Ok((StatusCode::ACCEPTED, Json(job_response(&job))).into_response())
}

/// Get a job.
#[utoipa::path(get, path = "/v1/fetcher/{id}", tag = "fetcher", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's record answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = JobResponse), (status = 400, body = ErrorBody, description = "FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 500, body = ErrorBody, description = "FET-0002")))]
pub async fn get_job(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let job = owned_job(&st, &scope, &headers, id).await?;
    Ok(Json(job_response(&job)).into_response())
}

/// A job of the tenant that answers to the caller's product (docs/api.md, "Products"):
/// another product's job is 404, as if it did not exist.
async fn owned_job(
    st: &AppState,
    scope: &Scope,
    headers: &HeaderMap,
    id: fetcher_host::model::JobId,
) -> Result<Job, ApiError> {
    let product = caller_product(st, headers)?;
    let job = st.jobs().get(&scope.tenant, id).await.map_err(error_of)?;
    if job.answers_to(product.as_deref()) {
        Ok(job)
    } else {
        Err(error_of(JobError::NotFound))
    }
}

/// A job id from a route's path: any UUID text form, trimmed; 400 `FET-0404` otherwise.
fn job_id(raw: &str) -> Result<fetcher_host::model::JobId, ApiError> {
    fetcher_host::model::JobId::parse(raw.trim())
        .ok_or_else(|| ApiError::invalid_path("invalid job id"))
}
