//! Connection operations (docs/api.md): DTOs, the two validation layers, listing and
//! paging, and the handlers, over the typed `fetcher_host::connection::ConnectionRecord`.
//!
//! Long, and one file, because the routes share the DTOs and both validation layers, and
//! listing filters and pages here over the tenant's records: every store is bounded per
//! tenant by the connection cap, and product and metadata live inside each record, so a
//! store-side page would read the same records (docs/api.md, "Lists").
//!
//! The engine stores a secret-free [`ConnectionDescriptor`]; the API's richer record
//! (UUID identity, product, metadata, SSL CA / client certificate, timestamps) travels in
//! its host attributes, encoded and decoded only by `ConnectionRecord`'s codec. The password goes through the
//! engine's encrypted persistence (the credential protector) and is never returned.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use fetcher_connectors::{validate_host_input, validate_host_input_admitting, validate_ssl_mode};
use fetcher_engine::{
    Category, ConnectionDescriptor, ConnectionInput, ConnectionPatch, Context, EngineError, Reason,
    Secret, TenantContext, Timestamp,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, is_forbidden_host};
use super::extract::{RawBody, parse_id, parse_json, product_name};
use super::paging::{self, Page};
use super::{ApiConfig, AppState, Scope};
use fetcher_host::connection::{ConnectionRecord, SslSettings};
use fetcher_host::jobs::check_host;

/// The five connection types of the API.
/// The reference's five types plus `SQLITE` (a local file: single-tenant only, rejected as
/// a forbidden host in multi-tenant mode).
pub const TYPES: [&str; 6] = [
    "ORACLE",
    "SQL_SERVER",
    "POSTGRESQL",
    "MONGODB",
    "MYSQL",
    "SQLITE",
];
const TYPE_ENUM_MESSAGE: &str =
    "type must be one of [ORACLE SQL_SERVER POSTGRESQL MONGODB MYSQL SQLITE]";
const HOST_FORMAT_MESSAGE: &str = "host must be a valid hostname or IP address";
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";
const BAD_ID: &str = "invalid connection id";

// ---------------------------------------------------------------------------------------
// DTOs
// ---------------------------------------------------------------------------------------

/// `ssl` input: PEM text for `ca` / `cert` / `key`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct SslInput {
    pub mode: Option<String>,
    pub ca: Option<String>,
    pub cert: Option<String>,
    /// Accepted for compatibility but not stored: no connector here uses client keys, and a
    /// private key must not sit in plain host attributes.
    pub key: Option<String>,
}

impl SslInput {
    fn is_blank(&self) -> bool {
        self.mode.as_deref().unwrap_or("").is_empty()
            && self.ca.as_deref().unwrap_or("").is_empty()
            && self.cert.is_none()
            && self.key.is_none()
    }
}

/// Body of create (`ConnectionInput`) and PATCH (`ConnectionUpdateInput`). Every key is
/// optional on the wire; `null` is the same as absent; unknown keys are ignored.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionBody {
    /// Required on create.
    #[schema(min_length = 3, max_length = 100)]
    pub config_name: Option<String>,
    /// Required on create.
    #[serde(rename = "type")]
    #[schema(value_type = Option<DatasourceType>)]
    pub datasource_type: Option<String>,
    /// Required on create: a host name (RFC 952) or an IP literal.
    #[schema(max_length = 255)]
    pub host: Option<String>,
    /// Required on create.
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<i64>,
    pub database_name: Option<String>,
    pub schema: Option<String>,
    pub user_name: Option<String>,
    /// Write-only.
    pub password: Option<String>,
    pub ssl: Option<SslInput>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

/// A connection's database type.
#[derive(ToSchema)]
#[allow(dead_code, clippy::upper_case_acronyms, non_camel_case_types)]
pub enum DatasourceType {
    POSTGRESQL,
    MYSQL,
    SQLITE,
    ORACLE,
    SQL_SERVER,
    MONGODB,
}

/// `ssl` in responses: only the mode.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SslOutput {
    pub mode: String,
}

/// A connection as returned by create, get, PATCH, assign and lists. Never carries the
/// password, the key version, the SSL CA / certificate / key.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionResponse {
    #[schema(format = Uuid)]
    pub id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub product_name: String,
    pub config_name: String,
    #[serde(rename = "type")]
    #[schema(value_type = DatasourceType)]
    pub datasource_type: String,
    pub host: String,
    pub port: u16,
    pub database_name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub schema: String,
    pub user_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl: Option<SslOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// Result of a successful connection test.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTestResponse {
    pub status: &'static str,
    pub message: &'static str,
    pub latency_ms: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TableSchema {
    pub name: String,
    pub fields: Vec<String>,
}

/// A connection's discovered schema.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSchemaResponse {
    pub id: String,
    pub config_name: String,
    pub database_name: String,
    #[serde(rename = "type")]
    pub datasource_type: String,
    pub tables: Vec<TableSchema>,
}

/// `{ "mappedFields": { configName: { table: [field] } } }`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaValidationRequest {
    #[schema(value_type = Option<Object>)]
    pub mapped_fields: Option<BTreeMap<String, BTreeMap<String, Vec<String>>>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SchemaValidationResponse {
    pub status: &'static str,
    pub message: &'static str,
}

/// One inconsistency of a schema mapping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaValidationError {
    #[serde(rename = "type")]
    pub error_type: &'static str,
    pub data_source_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// 422 body of validate-schema.
#[derive(Debug, Serialize, ToSchema)]
pub struct SchemaValidationErrorResponse {
    pub title: &'static str,
    pub code: &'static str,
    pub message: &'static str,
    pub errors: Vec<SchemaValidationError>,
}

// ---------------------------------------------------------------------------------------
// The record
// ---------------------------------------------------------------------------------------

fn response(r: &ConnectionRecord) -> ConnectionResponse {
    let time = |s: &str| {
        if s.is_empty() {
            ZERO_TIME.to_owned()
        } else {
            s.to_owned()
        }
    };
    ConnectionResponse {
        id: r.id.clone(),
        product_name: r.product.clone(),
        config_name: r.config_name.clone(),
        datasource_type: r.datasource_type.clone(),
        host: r.host.clone(),
        port: r.port,
        database_name: r.database_name.clone(),
        schema: r.schema.clone(),
        user_name: r.username.clone(),
        ssl: r.ssl.as_ref().map(|s| SslOutput {
            mode: s.mode.clone(),
        }),
        metadata: r.metadata.clone().filter(|m| !m.is_empty()),
        created_at: time(&r.created_at),
        updated_at: time(&r.updated_at),
    }
}

fn ssl_settings(s: &SslInput) -> SslSettings {
    SslSettings {
        mode: s.mode.clone().unwrap_or_default(),
        ca: s.ca.clone().unwrap_or_default(),
        cert: s.cert.clone().filter(|c| !c.is_empty()),
    }
}

/// The response body for a descriptor (also used by tests and other hosts).
pub fn connection_response(d: &ConnectionDescriptor) -> ConnectionResponse {
    response(&ConnectionRecord::from_descriptor(d))
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

type Fields = BTreeMap<String, String>;

fn blank(v: &Option<String>) -> bool {
    v.as_deref().is_none_or(str::is_empty)
}

/// Layer 1 on create (docs/api.md, "Connections": the request). The SSRF literal check wins.
fn request_rules_create(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    ssrf_literal(b, cfg)?;
    let (mut missing, mut invalid) = (Fields::new(), Fields::new());
    let mut require = |key: &str, absent: bool| {
        if absent {
            missing.insert(key.into(), format!("{key} is a required field"));
        }
    };
    require("configName", blank(&b.config_name));
    require("type", blank(&b.datasource_type));
    require("host", blank(&b.host));
    require("port", b.port.unwrap_or(0) == 0);
    require("databaseName", blank(&b.database_name));
    require("userName", blank(&b.user_name));
    require("password", blank(&b.password));
    shape_rules(b, &mut invalid);
    ApiError::field_buckets(missing, invalid, false).map_or(Ok(()), Err)
}

/// Layer 1 on PATCH: only present keys are checked.
fn request_rules_patch(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    ssrf_literal(b, cfg)?;
    let (mut missing, mut invalid) = (Fields::new(), Fields::new());
    if let Some(n) = &b.config_name {
        let len = n.chars().count();
        if len < 3 {
            invalid.insert(
                "configName".into(),
                "configName must be at least 3 characters in length".into(),
            );
        } else if len > 100 {
            invalid.insert(
                "configName".into(),
                "configName must be a maximum of 100 characters in length".into(),
            );
        }
    }
    if b.host.as_deref() == Some("") {
        invalid.insert("host".into(), HOST_FORMAT_MESSAGE.into());
    }
    if b.port == Some(0) {
        invalid.insert("port".into(), "port must be 1 or greater".into());
    }
    // Beyond the reference (docs/api.md, "Differences from the reference"): an empty new password is rejected.
    if b.password.as_deref() == Some("") {
        missing.insert("password".into(), "password is a required field".into());
    }
    shape_rules(b, &mut invalid);
    ApiError::field_buckets(missing, invalid, false).map_or(Ok(()), Err)
}

/// Connection metadata is stored and echoed: capped, JSON-encoded (docs/api.md "Limits").
fn metadata_size(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    let size = b
        .metadata
        .as_ref()
        .map_or(0, |m| serde_json::to_vec(m).map_or(usize::MAX, |v| v.len()));
    if size > cfg.max_metadata_bytes {
        return Err(ApiError::metadata_too_large(cfg.max_metadata_bytes));
    }
    Ok(())
}

/// A tenant may not point the service at a file on its own disk, nor may anyone on a
/// host without local files (Lambda).
fn local_file_refused(cfg: &ApiConfig, datasource_type: &str) -> bool {
    datasource_type == fetcher_connectors::SQLITE
        && (cfg.multi_tenant
            || matches!(cfg.sqlite_files, fetcher_connectors::SqliteFiles::Nowhere))
}

/// The complete record (created, or patched and merged): a SQLite file must be one the
/// host allows (under `--sqlite-dir`, no `..`, no symlink, not the service's own data).
fn sqlite_file_refused(cfg: &ApiConfig, r: &ConnectionRecord) -> bool {
    r.datasource_type == fetcher_connectors::SQLITE
        && (local_file_refused(cfg, &r.datasource_type)
            || cfg.sqlite_files.resolve(&r.database_name).is_err())
}

fn ssrf_literal(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    let guard = cfg.multi_tenant || cfg.guard_hosts;
    if b.datasource_type
        .as_deref()
        .is_some_and(|t| local_file_refused(cfg, t))
    {
        return Err(ApiError::forbidden_host());
    }
    if guard
        && let Some(h) = b.host.as_deref()
        && let Err(e) = validate_host_input_admitting(h, true, &cfg.private_networks)
        && is_forbidden_host(&e)
    {
        return Err(ApiError::forbidden_host());
    }
    Ok(())
}

/// Enum, host format and port range of present, non-empty values.
fn shape_rules(b: &ConnectionBody, invalid: &mut Fields) {
    if let Some(t) = b.datasource_type.as_deref().filter(|t| !t.is_empty())
        && !TYPES.contains(&t)
    {
        invalid.insert("type".into(), TYPE_ENUM_MESSAGE.into());
    }
    if let Some(h) = b.host.as_deref().filter(|h| !h.is_empty())
        && validate_host_input(h, false).is_err()
    {
        invalid.insert("host".into(), HOST_FORMAT_MESSAGE.into());
    }
    match b.port {
        Some(p) if p < 0 => {
            invalid.insert("port".into(), "port must be 1 or greater".into());
        }
        Some(p) if p > 65_535 => {
            invalid.insert("port".into(), "port must be 65,535 or less".into());
        }
        _ => {}
    }
}

/// Layer 2 (docs/api.md, "Connections": the record) on the trimmed / patched record.
fn model_rules(r: &ConnectionRecord) -> Result<(), ApiError> {
    let (mut missing, mut invalid) = (Fields::new(), Fields::new());
    if r.product.is_empty() {
        missing.insert("product_name".into(), "product name is required".into());
    }
    let name_len = r.config_name.chars().count();
    if r.config_name.is_empty() {
        missing.insert("config_name".into(), "config name is required".into());
    } else if !r
        .config_name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        missing.insert(
            "config_name".into(),
            "config name can only contain alphanumeric characters, underscores, and hyphens".into(),
        );
    } else if !(3..=100).contains(&name_len) {
        invalid.insert(
            "config_name".into(),
            "config name must be between 3 and 100 characters".into(),
        );
    }
    if r.port == 0 {
        missing.insert("port".into(), "port must be a positive integer".into());
    }
    if r.host.is_empty() {
        missing.insert("host".into(), "host is required".into());
    }
    if r.database_name.is_empty() {
        missing.insert("database_name".into(), "database name is required".into());
    }
    if r.username.is_empty() {
        missing.insert("username".into(), "username is required".into());
    }
    let type_ok = TYPES.contains(&r.datasource_type.as_str());
    if !type_ok {
        invalid.insert("type".into(), "invalid connection type".into());
    }
    if let Some(SslSettings { mode, ca, .. }) = &r.ssl {
        if mode.is_empty() {
            missing.insert("ssl.mode".into(), "SSL mode is required".into());
        } else if type_ok && let Err(e) = validate_ssl_mode(&r.datasource_type, mode) {
            invalid.insert("ssl.mode".into(), e.message().to_owned());
        }
        if ca.is_empty() {
            missing.insert("ssl.ca".into(), "SSL CA is required".into());
        }
    }
    if !missing.is_empty() {
        // The invalid SSL mode stays visible next to the missing fields (docs/api.md, "Connections").
        if let Some(m) = invalid.remove("ssl.mode") {
            missing.insert("ssl.mode".into(), m);
        }
    }
    ApiError::field_buckets(missing, invalid, true).map_or(Ok(()), Err)
}

fn now_text() -> String {
    Timestamp::now().to_string()
}

fn ctx() -> Context {
    Context::background()
}

// ---------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------

/// List connections (optionally of one product).
#[utoipa::path(get, path = "/v1/management/connections", tag = "connections",
    params(("X-Product-Name" = Option<String>, Header, description = "Product filter"),
        ("page" = Option<u64>, Query), ("limit" = Option<u64>, Query), ("sortOrder" = Option<String>, Query),
        ("startDate" = Option<String>, Query), ("endDate" = Option<String>, Query), ("type" = Option<String>, Query)),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = Page<ConnectionResponse>), (status = 400, body = ErrorBody, description = "FET-0403, FET-0405..FET-0409")))]
pub async fn list_connections(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let product = product_name(&headers, false)?;
    let query = paging::parse(&q, &st.config().paging, paging::today_utc())?;
    let all = st
        .engine()
        .list_connections(&ctx(), &scope.tenant)
        .await
        .map_err(|e| ApiError::from_engine(&e))?;
    let records = all
        .iter()
        .map(ConnectionRecord::from_descriptor)
        .filter(|r| {
            product.as_ref().is_none_or(|p| &r.product == p)
                && query
                    .datasource_type
                    .as_ref()
                    .is_none_or(|t| &r.datasource_type == t)
                && query.metadata.iter().all(|(k, v)| {
                    r.metadata
                        .as_ref()
                        .and_then(|m| m.get(k))
                        .and_then(Value::as_str)
                        == Some(v.as_str())
                })
        });
    Ok(Json(page_of(records, &query)).into_response())
}

/// List connections without a product (legacy records).
#[utoipa::path(get, path = "/v1/management/connections/unassigned", tag = "connections",
    params(("page" = Option<u64>, Query), ("limit" = Option<u64>, Query), ("sortOrder" = Option<String>, Query),
        ("startDate" = Option<String>, Query), ("endDate" = Option<String>, Query)),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = Page<ConnectionResponse>), (status = 400, body = ErrorBody, description = "FET-0405..FET-0409")))]
pub async fn list_unassigned(
    State(st): State<AppState>,
    scope: Scope,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let query = paging::parse(&q, &st.config().paging, paging::today_utc())?;
    let all = st
        .engine()
        .list_connections(&ctx(), &scope.tenant)
        .await
        .map_err(|e| ApiError::from_engine(&e))?;
    let records = all
        .iter()
        .filter(|d| !fetcher_host::jobs::is_internal(d))
        .map(ConnectionRecord::from_descriptor)
        .filter(|r| r.product.is_empty());
    Ok(Json(page_of(records, &query)).into_response())
}

fn page_of(
    records: impl Iterator<Item = ConnectionRecord>,
    q: &paging::ListQuery,
) -> Page<ConnectionResponse> {
    let mut v: Vec<ConnectionRecord> = records
        .filter(|r| (q.start..=q.end).contains(&r.created_unix()))
        .collect();
    v.sort_by(|a, b| {
        let o = a
            .created_at
            .cmp(&b.created_at)
            .then_with(|| a.id.cmp(&b.id));
        if q.ascending { o } else { o.reverse() }
    });
    let total = v.len() as u64;
    let skip = (q.page - 1).saturating_mul(q.limit) as usize;
    let items = v
        .iter()
        .skip(skip)
        .take(q.limit as usize)
        .map(response)
        .collect();
    Page {
        items,
        page: q.page,
        limit: q.limit,
        total,
    }
}

/// Create a connection for the product of `X-Product-Name`.
#[utoipa::path(post, path = "/v1/management/connections", tag = "connections", request_body = ConnectionBody,
    params(("X-Product-Name" = String, Header, description = "Owning product (required)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 201, body = ConnectionResponse), (status = 400, body = ErrorBody, description = "FET-0001, FET-0402, FET-0403, FET-0411 metadata over 16 KiB, FET-0414"),
        (status = 409, body = ErrorBody, description = "FET-1002 duplicate configName, FET-1022 connection quota reached"), (status = 413, body = ErrorBody, description = "Body too large")))]
pub async fn create_connection(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let product = product_name(&headers, true)?.unwrap_or_default();
    let b: ConnectionBody = parse_json(&headers, &body)?;
    let created = create(&st, st.config(), &scope.tenant, product, &b).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// Registers a connection the operator provides (`serve --demo`): the create use case
/// with its validation, without the HTTP perimeter (no token is involved). Unlike a
/// tenant, the operator may register a SQLite file in multi-tenant mode, still only one
/// under the host's SQLite directory.
pub async fn register_operator_connection(
    st: &AppState,
    tenant: &TenantContext,
    product: &str,
    body: Value,
) -> Result<ConnectionResponse, ApiError> {
    let b: ConnectionBody = serde_json::from_value(body).map_err(|_| ApiError::empty_body())?;
    let cfg = ApiConfig {
        multi_tenant: false,
        ..st.config().clone()
    };
    create(st, &cfg, tenant, product.to_owned(), &b).await
}

async fn create(
    st: &AppState,
    cfg: &ApiConfig,
    tenant: &TenantContext,
    product: String,
    b: &ConnectionBody,
) -> Result<ConnectionResponse, ApiError> {
    let has_ssl = b.ssl.as_ref().is_some_and(|s| !s.is_blank());
    let any = b.config_name.is_some()
        || b.datasource_type.is_some()
        || b.host.is_some()
        || b.port.is_some()
        || b.database_name.is_some()
        || b.schema.is_some()
        || b.user_name.is_some()
        || b.password.is_some()
        || has_ssl
        || b.metadata.is_some();
    if !any {
        return Err(ApiError::empty_body());
    }
    request_rules_create(b, cfg)?;
    metadata_size(b, cfg)?;
    if cfg.max_connections_per_tenant > 0 {
        // A soft cap: two creates racing at the limit may both pass.
        let held = st
            .engine()
            .list_connections(&ctx(), tenant)
            .await
            .map_err(|e| ApiError::from_engine(&e))?
            .len();
        if held >= cfg.max_connections_per_tenant {
            return Err(ApiError::connection_quota(cfg.max_connections_per_tenant));
        }
    }
    let now = now_text();
    let record = ConnectionRecord {
        id: uuid::Uuid::now_v7().to_string(),
        product,
        config_name: b.config_name.as_deref().unwrap_or("").trim().to_owned(),
        datasource_type: b.datasource_type.clone().unwrap_or_default(),
        host: b.host.as_deref().unwrap_or("").trim().to_owned(),
        port: u16::try_from(b.port.unwrap_or(0)).unwrap_or(0),
        database_name: b.database_name.as_deref().unwrap_or("").trim().to_owned(),
        schema: b.schema.as_deref().unwrap_or("").trim().to_owned(),
        username: b.user_name.as_deref().unwrap_or("").trim().to_owned(),
        ssl: b.ssl.as_ref().filter(|_| has_ssl).map(ssl_settings),
        metadata: b.metadata.clone(),
        created_at: now.clone(),
        updated_at: now,
        ..Default::default()
    };
    model_rules(&record)?;
    if sqlite_file_refused(cfg, &record) {
        return Err(ApiError::forbidden_host());
    }
    let d = record.descriptor();
    let input = ConnectionInput {
        config_name: d.config_name.clone(),
        datasource_type: d.datasource_type.clone(),
        host: d.host.clone(),
        port: d.port,
        database_name: d.database_name.clone(),
        schema: d.schema.clone(),
        username: d.username.clone(),
        ssl_mode: d.ssl_mode.clone(),
        host_attributes: d.host_attributes.clone(),
        id: d.id.clone(),
        password: Secret::from(b.password.clone().unwrap_or_default().into_bytes()),
    };
    let created = st
        .engine()
        .create_connection(&ctx(), tenant, &input)
        .await
        .map_err(|e| ApiError::from_engine(&e))?;
    Ok(response(&ConnectionRecord::from_descriptor(&created)))
}

async fn load(st: &AppState, scope: &Scope, id: &str) -> Result<ConnectionDescriptor, ApiError> {
    st.engine()
        .get_connection_by_id(&ctx(), &scope.tenant, id)
        .await
        .map_err(|e| ApiError::from_engine(&e))
}

/// Get one connection.
#[utoipa::path(get, path = "/v1/management/connections/{id}", tag = "connections", params(("id" = uuid::Uuid, Path)),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionResponse), (status = 400, body = ErrorBody, description = "FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001")))]
pub async fn get_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let d = load(&st, &scope, &id).await?;
    Ok(Json(connection_response(&d)).into_response())
}

/// The active-job gate: 409 while a pending/processing job reads the connection; a
/// job-store failure is 500.
async fn gate(
    st: &AppState,
    scope: &Scope,
    config_name: &str,
    action: &'static str,
) -> Result<(), ApiError> {
    match st
        .engine()
        .check_active_executions(&ctx(), &scope.tenant, config_name)
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.category() == Category::Conflict => Err(ApiError::job_in_progress(action)),
        Err(e) => Err(ApiError::internal_with(&e)),
    }
}

/// Partially update a connection.
#[utoipa::path(patch, path = "/v1/management/connections/{id}", tag = "connections", params(("id" = uuid::Uuid, Path)), request_body = ConnectionBody,
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionResponse), (status = 400, body = ErrorBody, description = "FET-0001, FET-0402, FET-0404, FET-0414"),
        (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1002, FET-1021")))]
pub async fn update_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let b: ConnectionBody = parse_json(&headers, &body)?;
    let ssl_mode_set = b.ssl.as_ref().is_some_and(|s| s.mode.is_some());
    let any = b.config_name.is_some()
        || b.datasource_type.is_some()
        || b.host.is_some()
        || b.port.is_some()
        || b.database_name.is_some()
        || b.schema.is_some()
        || b.user_name.is_some()
        || b.password.is_some()
        || ssl_mode_set
        || b.metadata.is_some();
    if !any {
        return Err(ApiError::empty_body());
    }
    request_rules_patch(&b, st.config())?;
    metadata_size(&b, st.config())?;
    let current = load(&st, &scope, &id).await?;
    gate(&st, &scope, &current.config_name, "update").await?;
    let mut r = ConnectionRecord::from_descriptor(&current);
    if let Some(v) = &b.config_name {
        r.config_name = v.trim().to_owned();
    }
    if let Some(v) = &b.datasource_type {
        r.datasource_type.clone_from(v);
    }
    if let Some(v) = &b.host {
        r.host = v.trim().to_owned();
    }
    if let Some(p) = b.port {
        r.port = u16::try_from(p).unwrap_or(0);
    }
    if let Some(v) = &b.database_name {
        r.database_name = v.trim().to_owned();
    }
    if let Some(v) = &b.schema {
        r.schema = v.trim().to_owned();
    }
    if let Some(v) = &b.user_name {
        r.username = v.trim().to_owned();
    }
    if let Some(s) = b.ssl.as_ref().filter(|s| s.mode.is_some()) {
        r.ssl = Some(ssl_settings(s));
    }
    if let Some(m) = &b.metadata {
        r.metadata = Some(m.clone());
    }
    r.updated_at = now_text();
    // The merged record too: a SQLite connection stored before the host refused them
    // cannot be edited into use.
    if sqlite_file_refused(st.config(), &r) {
        return Err(ApiError::forbidden_host());
    }
    model_rules(&r)?;
    if r.config_name != current.config_name {
        match st
            .engine()
            .get_connection(&ctx(), &scope.tenant, &r.config_name)
            .await
        {
            Ok(other) if ConnectionRecord::from_descriptor(&other).id != id => {
                return Err(ApiError::duplicate_connection());
            }
            Ok(_) => {}
            Err(e) if e.category() == Category::NotFound => {}
            Err(e) => return Err(ApiError::from_engine(&e)),
        }
    }
    let mut patch = ConnectionPatch::default();
    if let Some(p) = &b.password {
        patch = patch.with_password(Secret::from(p.clone().into_bytes()));
    }
    let stored_id = if current.id.is_empty() {
        id.clone()
    } else {
        current.id.clone()
    };
    let updated = st
        .engine()
        .update_connection_by_id(&ctx(), &scope.tenant, &stored_id, &r.descriptor(), &patch)
        .await
        .map_err(|e| ApiError::from_engine(&e))?;
    Ok(Json(response(&ConnectionRecord::from_descriptor(&updated))).into_response())
}

/// Soft-delete a connection.
#[utoipa::path(delete, path = "/v1/management/connections/{id}", tag = "connections", params(("id" = uuid::Uuid, Path)),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 204, description = "Deleted"), (status = 400, body = ErrorBody, description = "FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1021")))]
pub async fn delete_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let current = load(&st, &scope, &id).await?;
    if fetcher_host::jobs::is_internal(&current) {
        return Err(ApiError::not_found("connection"));
    }
    gate(&st, &scope, &current.config_name, "delete").await?;
    let stored_id = if current.id.is_empty() {
        id
    } else {
        current.id.clone()
    };
    st.engine()
        .delete_connection_by_id(&ctx(), &scope.tenant, &stored_id)
        .await
        .map_err(|e| ApiError::from_engine(&e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Assign a product to a legacy connection (once).
#[utoipa::path(post, path = "/v1/management/connections/{id}/assign", tag = "connections",
    params(("id" = uuid::Uuid, Path), ("X-Product-Name" = String, Header, description = "Product to assign (required)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionResponse), (status = 400, body = ErrorBody, description = "FET-0403, FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1015")))]
pub async fn assign_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let product = product_name(&headers, true)?.unwrap_or_default();
    let current = load(&st, &scope, &id).await?;
    if fetcher_host::jobs::is_internal(&current) {
        return Err(ApiError::not_found("connection"));
    }
    let mut r = ConnectionRecord::from_descriptor(&current);
    if !r.product.is_empty() {
        return Err(ApiError::already_assigned());
    }
    r.product = product;
    r.updated_at = now_text();
    let stored_id = if current.id.is_empty() {
        id
    } else {
        current.id.clone()
    };
    let updated = st
        .engine()
        .update_connection_by_id(
            &ctx(),
            &scope.tenant,
            &stored_id,
            &r.descriptor(),
            &ConnectionPatch::default(),
        )
        .await
        .map_err(|e| ApiError::from_engine(&e))?;
    Ok(Json(response(&ConnectionRecord::from_descriptor(&updated))).into_response())
}

/// Test connectivity (rate limited per connection).
#[utoipa::path(post, path = "/v1/management/connections/{id}/test", tag = "connections", params(("id" = uuid::Uuid, Path)),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionTestResponse), (status = 400, body = ErrorBody, description = "FET-0404, FET-0414"), (status = 404, body = ErrorBody, description = "FET-1001"),
        (status = 429, body = ErrorBody, description = "Rate Limit Exceeded (integer code), with Retry-After"), (status = 500, body = ErrorBody, description = "Database Connection Error (integer code)")))]
pub async fn test_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let cfg = st.config();
    let key = if cfg.multi_tenant {
        format!("tenant:{}:{id}", scope.tenant.tenant_id)
    } else {
        id.clone()
    };
    let decision = st
        .rate_limiter()
        .hit(&key, cfg.test_rate_limit, cfg.test_rate_window)
        .await
        .map_err(|e| ApiError::internal_with(&e))?;
    if !decision.allowed {
        let secs =
            decision.retry_after.as_secs() + u64::from(decision.retry_after.subsec_nanos() > 0);
        return Err(ApiError::rate_limited(secs.max(1)));
    }
    let d = load(&st, &scope, &id).await?;
    let c = Context::background().with_timeout(cfg.test_timeout);
    if check_host(st.host_policy(), &c, &d).await.is_err() {
        return Err(ApiError::forbidden_host());
    }
    match tokio::time::timeout(
        cfg.test_timeout,
        st.engine()
            .test_connection(&c, &scope.tenant, &d.config_name),
    )
    .await
    {
        Ok(Ok(result)) => {
            let ms = u64::try_from(result.latency.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            Ok(Json(ConnectionTestResponse {
                status: "success",
                message: "Connection successful",
                latency_ms: ms,
            })
            .into_response())
        }
        Ok(Err(e)) if is_forbidden_host(&e) => Err(ApiError::forbidden_host()),
        Ok(Err(e)) if e.reason() == Some(Reason::ConnectionNotFound) => {
            Err(ApiError::not_found("connection"))
        }
        Ok(Err(e)) => {
            tracing::info!(error = %e, "connection test failed");
            Err(ApiError::connect_failed())
        }
        Err(_) => Err(ApiError::connect_failed()),
    }
}

/// Discover a connection's schema (always live).
#[utoipa::path(get, path = "/v1/management/connections/{id}/schema", tag = "connections", params(("id" = uuid::Uuid, Path)),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionSchemaResponse), (status = 400, body = ErrorBody, description = "FET-0404, FET-0414"), (status = 404, body = ErrorBody, description = "FET-1001"),
        (status = 500, body = ErrorBody, description = "Database Connection Error / Schema Retrieval Error (integer code)")))]
pub async fn get_schema(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let d = load(&st, &scope, &id).await?;
    let timeout = st.config().schema_timeout;
    let c = Context::background().with_timeout(timeout);
    if check_host(st.host_policy(), &c, &d).await.is_err() {
        return Err(ApiError::forbidden_host());
    }
    let snapshot = match tokio::time::timeout(
        timeout,
        st.engine()
            .discover_schema_fresh(&c, &scope.tenant, &d.config_name),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(schema_error(&e)),
        Err(_) => return Err(ApiError::schema_failed()),
    };
    let mut tables: Vec<TableSchema> = snapshot
        .tables
        .into_iter()
        .map(|t| {
            let mut fields = t.fields;
            fields.sort();
            TableSchema {
                name: t.name,
                fields,
            }
        })
        .collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    let r = ConnectionRecord::from_descriptor(&d);
    Ok(Json(ConnectionSchemaResponse {
        id: r.id,
        config_name: r.config_name,
        database_name: r.database_name,
        datasource_type: r.datasource_type,
        tables,
    })
    .into_response())
}

fn schema_error(e: &EngineError) -> ApiError {
    if is_forbidden_host(e) {
        return ApiError::forbidden_host();
    }
    tracing::info!(error = %e, "schema discovery failed");
    match e.category() {
        Category::NotFound if e.reason() == Some(Reason::ConnectionNotFound) => {
            ApiError::not_found("connection")
        }
        Category::Connect => ApiError::connect_failed(),
        _ => ApiError::schema_failed(),
    }
}

/// Check that tables and fields of a mapping exist.
#[utoipa::path(post, path = "/v1/management/connections/validate-schema", tag = "connections", request_body = SchemaValidationRequest,
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = SchemaValidationResponse), (status = 400, body = ErrorBody, description = "FET-0001, FET-0401, FET-0402, FET-0414, FET-1061, FET-1062"),
        (status = 422, body = SchemaValidationErrorResponse)))]
pub async fn validate_schema(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: SchemaValidationRequest = parse_json(&headers, &body)?;
    let Some(mapped) = req.mapped_fields else {
        let fields = BTreeMap::from([(
            "mappedFields".to_owned(),
            "mappedFields is a required field".to_owned(),
        )]);
        return Err(ApiError::field_buckets(fields, Fields::new(), false).expect("non-empty"));
    };
    validation_limits(&mapped)?;
    let c = ctx();
    let mut resolved = BTreeMap::new();
    for name in mapped.keys() {
        match st.engine().get_connection(&c, &scope.tenant, name).await {
            Ok(d) => {
                resolved.insert(name.clone(), d);
            }
            Err(e) if e.category() == Category::NotFound => {}
            Err(e) => return Err(ApiError::from_engine(&e)),
        }
    }
    if resolved.is_empty() {
        return Err(ApiError::business(
            StatusCode::BAD_REQUEST,
            super::error::code::NO_SCHEMA_CONNECTIONS,
            "No Connections Found",
            "No connections configured for the requested datasources",
        ));
    }
    let timeout = st.config().schema_timeout;
    let mut errors = Vec::new();
    for (name, tables) in &mapped {
        let entry =
            |t: &'static str, table: Option<&str>, field: Option<&str>| SchemaValidationError {
                error_type: t,
                data_source_id: name.clone(),
                table: table.map(str::to_owned),
                field: field.map(str::to_owned),
            };
        let Some(d) = resolved.get(name) else {
            errors.push(entry("DATA_SOURCE_NOT_FOUND", None, None));
            continue;
        };
        let c = Context::background().with_timeout(timeout);
        if check_host(st.host_policy(), &c, d).await.is_err() {
            return Err(ApiError::forbidden_host());
        }
        let snapshot = match tokio::time::timeout(
            timeout,
            st.engine().discover_schema(&c, &scope.tenant, name),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) if is_forbidden_host(&e) => return Err(ApiError::forbidden_host()),
            _ => {
                errors.push(entry("DATA_SOURCE_DOWN", None, None));
                continue;
            }
        };
        errors.extend(schema_problems(
            name,
            &snapshot.missing(&d.datasource_type, tables),
        ));
    }
    if errors.is_empty() {
        return Ok(Json(SchemaValidationResponse {
            status: "success",
            message: "Schema validated successfully. All datasources, tables, and fields exist.",
        })
        .into_response());
    }
    Err(schema_invalid(errors))
}

/// validate-schema's entries for what one datasource's schema lacks.
pub(crate) fn schema_problems(
    datasource: &str,
    missing: &[(String, Option<String>)],
) -> Vec<SchemaValidationError> {
    missing
        .iter()
        .map(|(table, field)| SchemaValidationError {
            error_type: if field.is_some() {
                "FIELD_NOT_FOUND"
            } else {
                "TABLE_NOT_FOUND"
            },
            data_source_id: datasource.to_owned(),
            table: Some(table.clone()),
            field: field.clone(),
        })
        .collect()
}

/// The 422 `FET-1060` body (validate-schema, and job creation over a cached schema).
pub(crate) fn schema_invalid(errors: Vec<SchemaValidationError>) -> ApiError {
    let body = SchemaValidationErrorResponse {
        title: "Schema validation failed",
        code: super::error::code::SCHEMA_INVALID,
        message: "Schema validation found inconsistencies.",
        errors,
    };
    ApiError {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        body: serde_json::to_value(body).unwrap_or(Value::Null),
        retry_after: None,
    }
}

fn validation_limits(
    mapped: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
) -> Result<(), ApiError> {
    if mapped.is_empty() {
        return Err(ApiError::invalid_data_request(
            "mappedFields cannot be empty",
        ));
    }
    if mapped.len() > 10 {
        return Err(ApiError::validation_limit(
            "maximum 10 datasources allowed per validation request".into(),
        ));
    }
    for (ds, tables) in mapped {
        if ds.trim().is_empty() {
            return Err(ApiError::invalid_data_request(
                "config name cannot be empty or whitespace-only",
            ));
        }
        if tables.len() > 20 {
            return Err(ApiError::validation_limit(format!(
                "maximum 20 tables allowed per datasource, got {} for '{ds}'",
                tables.len()
            )));
        }
        for (table, fields) in tables {
            if table.trim().is_empty() {
                return Err(ApiError::invalid_data_request(format!(
                    "table name cannot be empty or whitespace-only in datasource '{ds}'"
                )));
            }
            if fields.len() > 50 {
                return Err(ApiError::validation_limit(format!(
                    "maximum 50 fields allowed per table, got {} for '{ds}.{table}'",
                    fields.len()
                )));
            }
            if fields.iter().any(|f| f.trim().is_empty()) {
                return Err(ApiError::invalid_data_request(format!(
                    "field name cannot be empty or whitespace-only in '{ds}.{table}'"
                )));
            }
        }
    }
    Ok(())
}

/// Rate-limit window of connection tests.
pub const TEST_RATE_WINDOW: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> ConnectionBody {
        serde_json::from_value(v).unwrap()
    }

    fn valid() -> Value {
        serde_json::json!({"configName":"core-pg","type":"POSTGRESQL","host":"db.example.com","port":5432,"databaseName":"ledger","userName":"ro","password":"pw"})
    }

    #[test]
    fn create_buckets() {
        let single = ApiConfig::default();
        let multi = ApiConfig {
            multi_tenant: true,
            ..ApiConfig::default()
        };
        assert!(request_rules_create(&body(valid()), &single).is_ok());
        let mut v = valid();
        v["host"] = Value::Null;
        v["type"] = "NOPE".into();
        let e = request_rules_create(&body(v), &single).unwrap_err();
        assert_eq!(e.body["code"], "FET-0402");
        assert_eq!(
            e.body["fields"],
            serde_json::json!({"host": "host is a required field"})
        );
        assert!(e.body.get("entityType").is_none());
        let mut v = valid();
        v["type"] = "NOPE".into();
        v["port"] = 65536.into();
        let e = request_rules_create(&body(v), &single).unwrap_err();
        assert_eq!(e.body["code"], "FET-0001");
        assert_eq!(e.body["fields"]["type"], TYPE_ENUM_MESSAGE);
        let mut v = valid();
        v["host"] = "169.254.169.254".into();
        v["port"] = 0.into();
        assert_eq!(
            request_rules_create(&body(v.clone()), &multi)
                .unwrap_err()
                .body["code"],
            "FET-0414"
        );
        assert_eq!(
            request_rules_create(&body(v), &single).unwrap_err().body["code"],
            "FET-0402"
        );

        // A SQLite file: single-tenant `serve` with a SQLite directory only; never in
        // multi-tenant mode nor on a host without local files (Lambda). (Which files the
        // directory allows is checked on the complete record.)
        let mut v = valid();
        v["type"] = "SQLITE".into();
        v["databaseName"] = "/tmp/x.db".into();
        let serve = ApiConfig {
            sqlite_files: fetcher_connectors::SqliteFiles::Anywhere,
            ..ApiConfig::default()
        };
        assert!(request_rules_create(&body(v.clone()), &serve).is_ok());
        let lambda = ApiConfig {
            sqlite_files: fetcher_connectors::SqliteFiles::Nowhere,
            ..ApiConfig::default()
        };
        for cfg in [&multi, &lambda] {
            let e = request_rules_create(&body(v.clone()), cfg).unwrap_err();
            assert_eq!(e.body["code"], "FET-0414");
            let e =
                request_rules_patch(&body(serde_json::json!({"type": "SQLITE"})), cfg).unwrap_err();
            assert_eq!(e.body["code"], "FET-0414");
        }
    }

    #[test]
    fn model_rules_ssl() {
        let mut r = ConnectionRecord {
            product: "p".into(),
            config_name: "core".into(),
            datasource_type: "POSTGRESQL".into(),
            host: "h".into(),
            port: 1,
            database_name: "d".into(),
            username: "u".into(),
            ..Default::default()
        };
        assert!(model_rules(&r).is_ok());
        r.ssl = Some(SslSettings {
            mode: "skip-verify".into(),
            ca: "PEM".into(),
            cert: None,
        });
        let e = model_rules(&r).unwrap_err();
        assert_eq!(
            (e.body["code"].as_str(), e.body["entityType"].as_str()),
            (Some("FET-0001"), Some("connection"))
        );
        assert!(
            e.body["fields"]["ssl.mode"]
                .as_str()
                .unwrap()
                .starts_with("FET-0413 - Invalid SSL mode. The provided SSL mode 'skip-verify'")
        );
        r.ssl = Some(SslSettings {
            mode: "skip-verify".into(),
            ca: String::new(),
            cert: None,
        });
        let e = model_rules(&r).unwrap_err();
        assert_eq!(e.body["code"], "FET-0402");
        assert_eq!(e.body["fields"]["ssl.ca"], "SSL CA is required");
        r.ssl = None;
        r.config_name = "ab".into();
        assert_eq!(
            model_rules(&r).unwrap_err().body["fields"]["config_name"],
            "config name must be between 3 and 100 characters"
        );
        r.product.clear();
        assert_eq!(
            model_rules(&r).unwrap_err().body["fields"],
            serde_json::json!({"product_name": "product name is required"})
        );
    }
}
