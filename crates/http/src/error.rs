//! Error bodies and the FET-xxxx catalogue (docs/api.md, "Errors").
//!
//! | shape | keys | used for |
//! |---|---|---|
//! | A | `code` (string `FET-nnnn`), `title`, `message` | almost every 4xx/5xx |
//! | B | A + `fields` (+ `entityType: "connection"` for model rules) | field validation |
//! | C | `code` (HTTP status as a number), `title`, `message` | connection test, schema discovery, rate limit |
//! | D | `code` (number), `title: "request_failed"`, `message` | unknown route, wrong method, body too large |
//! | E | `code` (non-FET string), `title`, `message` | tenancy / authentication perimeter |
//!
//! The 422 of validate-schema has its own body (`title`, `code`, `message`, `errors`).
//! Every constructor here writes a fixed text; engine, driver and adapter text never
//! reaches a body (only logs, through [`ApiError::internal_with`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fetcher_engine::{Category, EngineError, Reason};
use serde_json::{Value, json};

use fetcher_host::error::{ErrorKind, ServiceError};

/// Codes of the catalogue.
pub mod code {
    pub const BAD_REQUEST: &str = "FET-0001";
    pub const INTERNAL: &str = "FET-0002";
    pub const UNAVAILABLE: &str = "FET-0003";
    pub const CONFLICT: &str = "FET-0004";
    pub const NOT_FOUND: &str = "FET-0005";
    pub const UNEXPECTED_FIELDS: &str = "FET-0400";
    pub const INVALID_DATA_REQUEST: &str = "FET-0401";
    pub const MISSING_FIELDS: &str = "FET-0402";
    pub const INVALID_HEADER: &str = "FET-0403";
    pub const INVALID_PATH: &str = "FET-0404";
    pub const INVALID_QUERY: &str = "FET-0405";
    pub const PAGE_LIMIT: &str = "FET-0406";
    pub const SORT_ORDER: &str = "FET-0407";
    pub const DATE_FORMAT: &str = "FET-0408";
    pub const FINAL_DATE: &str = "FET-0409";
    pub const METADATA_TOO_LARGE: &str = "FET-0411";
    pub const SSL_MODE: &str = "FET-0413";
    pub const FORBIDDEN_HOST: &str = "FET-0414";
    /// Ours: the connection's host name has no address (docs/api.md, "Errors").
    pub const HOST_NOT_RESOLVED: &str = "FET-0415";
    /// Why a connection test or discovery failed, where the caller must fix it.
    pub const LOGIN_REFUSED: &str = "FET-0416";
    pub const DATABASE_UNKNOWN: &str = "FET-0417";
    pub const NOT_LISTENING: &str = "FET-0418";
    pub const CONNECT_TIMED_OUT: &str = "FET-0419";
    pub const TLS_REFUSED: &str = "FET-0420";
    pub const TYPE_NOT_READABLE: &str = "FET-0421";
    pub const ENTITY_NOT_FOUND: &str = "FET-1001";
    pub const DUPLICATE: &str = "FET-1002";
    pub const NOT_ASSIGNED: &str = "FET-1014";
    pub const ALREADY_ASSIGNED: &str = "FET-1015";
    pub const PRODUCT_MISMATCH: &str = "FET-1016";
    pub const NO_CONNECTIONS: &str = "FET-1020";
    pub const JOB_IN_PROGRESS: &str = "FET-1021";
    /// Beyond the reference: the tenant holds its maximum number of connections.
    pub const CONNECTION_QUOTA: &str = "FET-1022";
    /// A cancel of a job that already ended.
    pub const JOB_FINISHED: &str = "FET-1023";
    /// Another job of the sync is pending or processing (a create or a reset).
    pub const SYNC_BUSY: &str = "FET-1024";
    /// The sync's stored watermark is on other columns than the job names.
    pub const SYNC_MISMATCH: &str = "FET-1025";
    /// The sync belongs to another product of the tenant.
    pub const SYNC_OF_ANOTHER_PRODUCT: &str = "FET-1026";
    /// The tenant has its maximum number of jobs waiting for a worker.
    pub const TOO_MANY_WAITING: &str = "FET-1027";
    /// A sync's deletion could not drop the replication slots its log reads hold.
    pub const LOG_NOT_RELEASED: &str = "FET-1028";
    /// A schedule's rate, cron expression or time zone is not one.
    pub const INVALID_SCHEDULE: &str = "FET-1030";
    /// A schedule's request reads nothing incrementally, or runs another sync.
    pub const NOT_SCHEDULABLE: &str = "FET-1031";
    pub const CONNECTION_DOWN: &str = "FET-1040";
    pub const SCHEMA_INVALID: &str = "FET-1060";
    pub const VALIDATION_LIMIT: &str = "FET-1061";
    pub const NO_SCHEMA_CONNECTIONS: &str = "FET-1062";
}

pub(crate) const MISSING_FIELDS_MESSAGE: &str = "Your request is missing one or more required fields. Please refer to the documentation to ensure all necessary fields are included in your request.";
pub(crate) const INVALID_FIELDS_MESSAGE: &str = "The server could not understand the request due to malformed syntax. Please check the listed fields and try again.";
pub(crate) const CONNECT_ERROR_MESSAGE: &str = "The adapter failed to connect to the target data source. Check credentials and network access.";

/// An HTTP error: status, JSON body, extra headers.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Value,
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Shape A.
    pub fn business(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        let message: Cow<'static, str> = message.into();
        ApiError {
            status,
            body: json!({"code": code, "title": title, "message": message}),
            retry_after: None,
        }
    }

    /// Shape B. `model` adds `entityType: "connection"`.
    pub fn fields(
        code: &'static str,
        title: &'static str,
        message: &'static str,
        fields: BTreeMap<String, String>,
        model: bool,
    ) -> Self {
        let mut body = json!({"code": code, "title": title, "message": message});
        if model {
            body["entityType"] = json!("connection");
        }
        if !fields.is_empty() {
            body["fields"] = json!(fields);
        }
        ApiError {
            status: StatusCode::BAD_REQUEST,
            body,
            retry_after: None,
        }
    }

    /// Shape B from the two buckets: any required failure wins (`FET-0402` with only the
    /// missing fields), else the invalid ones (`FET-0001`).
    pub fn field_buckets(
        missing: BTreeMap<String, String>,
        invalid: BTreeMap<String, String>,
        model: bool,
    ) -> Option<Self> {
        if !missing.is_empty() {
            Some(Self::fields(
                code::MISSING_FIELDS,
                "Missing Fields in Request",
                MISSING_FIELDS_MESSAGE,
                missing,
                model,
            ))
        } else if !invalid.is_empty() {
            Some(Self::fields(
                code::BAD_REQUEST,
                "Bad Request",
                INVALID_FIELDS_MESSAGE,
                invalid,
                model,
            ))
        } else {
            None
        }
    }

    /// Shape C.
    pub fn int_code(
        status: StatusCode,
        title: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        let message: Cow<'static, str> = message.into();
        ApiError {
            status,
            body: json!({"code": status.as_u16(), "title": title, "message": message}),
            retry_after: None,
        }
    }

    /// Shape D.
    pub fn framework(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        let message: Cow<'static, str> = message.into();
        ApiError {
            status,
            body: json!({"code": status.as_u16(), "title": "request_failed", "message": message}),
            retry_after: None,
        }
    }

    /// Shape E (perimeter: tenancy and authentication).
    pub fn perimeter(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        let message: Cow<'static, str> = message.into();
        ApiError {
            status,
            body: json!({"code": code, "title": title, "message": message}),
            retry_after: None,
        }
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn code(&self) -> Option<&str> {
        self.body.get("code").and_then(Value::as_str)
    }

    // --- the catalogue -------------------------------------------------------------------

    pub fn invalid_payload() -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::BAD_REQUEST,
            "Invalid payload",
            "unable to parse request body",
        )
    }

    /// 400 `FET-0001` saying what is wrong with the body (where and why).
    pub fn invalid_payload_because(why: impl std::fmt::Display) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::BAD_REQUEST,
            "Invalid payload",
            format!("unable to parse request body: {why}"),
        )
    }

    pub fn empty_body() -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::BAD_REQUEST,
            "Invalid payload",
            "empty request body",
        )
    }

    pub fn internal() -> Self {
        Self::business(
            StatusCode::INTERNAL_SERVER_ERROR,
            code::INTERNAL,
            "Internal Server Error",
            "The server encountered an unexpected error. Please try again later or contact support.",
        )
    }

    /// 500 `FET-0002`, logging the hidden cause.
    pub fn internal_with(cause: &dyn std::fmt::Debug) -> Self {
        tracing::error!(error = ?cause, "internal error");
        Self::internal()
    }

    /// 400 `FET-0411`: connection metadata over the size cap.
    pub fn metadata_too_large(max: usize) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::METADATA_TOO_LARGE,
            "Metadata Value Length Exceeded",
            format!("metadata must be at most {max} bytes when JSON-encoded"),
        )
    }

    /// 409 `FET-1022`: the tenant's connection quota is used up.
    pub fn connection_quota(max: usize) -> Self {
        Self::business(
            StatusCode::CONFLICT,
            code::CONNECTION_QUOTA,
            "Connection Limit Reached",
            format!("a tenant may hold at most {max} connections; delete one first"),
        )
    }

    pub fn unavailable() -> Self {
        Self::business(
            StatusCode::SERVICE_UNAVAILABLE,
            code::UNAVAILABLE,
            "Service Unavailable",
            "The server is currently unable to handle the request due to temporary overloading or maintenance of the server. Please try again later.",
        )
    }

    pub fn store_conflict() -> Self {
        Self::business(
            StatusCode::CONFLICT,
            code::CONFLICT,
            "Conflict",
            "The request could not be completed due to a conflict with the current state of the resource. Please resolve the conflict and try again.",
        )
    }

    pub fn invalid_header(message: &'static str) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::INVALID_HEADER,
            "Invalid header",
            message,
        )
    }

    pub fn invalid_path(message: &'static str) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::INVALID_PATH,
            "Invalid Path Parameter",
            message,
        )
    }

    pub fn invalid_query(detail: &str) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::INVALID_QUERY,
            "Invalid Query Parameter",
            format!(
                "One or more query parameters are in an incorrect format. Please check the following parameters '{detail}' and ensure they meet the required format before trying again."
            ),
        )
    }

    pub fn page_limit(max: u32) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::PAGE_LIMIT,
            "Pagination Limit Exceeded",
            format!(
                "The pagination limit exceeds the maximum allowed of {max} items per page. Please verify the limit and try again."
            ),
        )
    }

    pub fn sort_order() -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::SORT_ORDER,
            "Invalid Sort Order",
            "The 'sortOrder' field must be 'asc' or 'desc'. Please provide a valid sort order and try again.",
        )
    }

    pub fn date_format() -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::DATE_FORMAT,
            "Invalid Date Format Error",
            "The 'startDate', 'endDate', or both are in the incorrect format. Please use the 'yyyy-mm-dd' format and try again.",
        )
    }

    pub fn final_date() -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::FINAL_DATE,
            "Invalid Final Date Error",
            "The 'endDate' cannot be earlier than the 'startDate'. Please verify the dates and try again.",
        )
    }

    pub fn forbidden_host() -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::FORBIDDEN_HOST,
            "Forbidden Host",
            "Host is not a valid external database endpoint",
        )
    }

    /// 404 `FET-1001`; `entity` is `connection` or `job`.
    pub fn not_found(entity: &'static str) -> Self {
        Self::business(
            StatusCode::NOT_FOUND,
            code::ENTITY_NOT_FOUND,
            "Entity Not Found",
            format!(
                "It was not possible to find the {entity} entity during the requested flow. Please review the data provided in the request."
            ),
        )
    }

    pub fn duplicate_connection() -> Self {
        Self::business(
            StatusCode::CONFLICT,
            code::DUPLICATE,
            "Conflict",
            "An entity of type connection with the same unique attributes already exists. Please use different values to avoid conflicts and review the data provided in the request.",
        )
    }

    /// FET-1002 naming the connection that holds `config_name` (#53 item 8): the
    /// reference's text, then which connection to rename or delete. Both connections are
    /// the same tenant's.
    pub fn config_name_taken(config_name: &str, holder_id: &str) -> Self {
        let mut e = Self::duplicate_connection();
        if let Some(m) = e.body.get_mut("message") {
            *m = json!(format!(
                "{} configName '{config_name}' is taken by connection {holder_id}: choose another name, or rename or delete that connection.",
                m.as_str().unwrap_or_default()
            ));
        }
        e
    }

    pub fn already_assigned() -> Self {
        Self::business(
            StatusCode::CONFLICT,
            code::ALREADY_ASSIGNED,
            "Connection Already Assigned",
            "The connection is already assigned to a product and cannot be reassigned.",
        )
    }

    /// 409 `FET-1021`; `action` is `update` or `delete`.
    pub fn job_in_progress(action: &'static str) -> Self {
        Self::business(
            StatusCode::CONFLICT,
            code::JOB_IN_PROGRESS,
            "Job In Progress",
            format!("cannot {action} connection with active jobs"),
        )
    }

    pub fn invalid_data_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::INVALID_DATA_REQUEST,
            "Invalid Data Request",
            message,
        )
    }

    pub fn validation_limit(message: String) -> Self {
        Self::business(
            StatusCode::BAD_REQUEST,
            code::VALIDATION_LIMIT,
            "Validation Limit Exceeded",
            message,
        )
    }

    pub fn rate_limited(seconds: u64) -> Self {
        Self::int_code(
            StatusCode::TOO_MANY_REQUESTS,
            "Rate Limit Exceeded",
            format!("Connection test limit reached. Try again in {seconds} seconds."),
        )
        .with_retry_after(seconds)
    }

    /// 422 `FET-0415`: a test or discovery whose host name does not resolve; the caller
    /// fixes the connection's host (a 500 would say the server failed).
    pub fn host_not_resolved() -> Self {
        Self::business(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::HOST_NOT_RESOLVED,
            "Host Not Resolved",
            "The connection's host name could not be resolved. Check the host and try again.",
        )
    }

    /// The nested `ssl.mode` text of an invalid TLS mode (docs/api.md, "Connections"):
    /// `FET-0413 - Invalid SSL mode. The provided SSL mode '<mode>' is not supported. …`,
    /// the mode from the connectors' typed cause.
    pub fn invalid_ssl_mode_text(e: &fetcher_engine::EngineError) -> String {
        let shown = e
            .cause_as::<fetcher_connectors::InvalidSslMode>()
            .map_or("", |c| c.shown.as_str());
        format!(
            "{} - Invalid SSL mode. The provided SSL mode '{shown}' is not supported. Please use a valid SSL mode for this database type.",
            code::SSL_MODE
        )
    }

    /// Why a connection test or discovery of `d` failed, when the engine says
    /// (docs/api.md, "Why a connection failed"): what to fix, in our words, naming only
    /// what the caller gave (host, port, database, user, TLS mode). `None`: no reason.
    /// 422 `FET-0421`: a stored connection of a type this deployment has no connector
    /// for (#53 item 7): which types it reads instead.
    pub fn type_not_readable(
        config_name: &str,
        datasource_type: fetcher_engine::DatasourceType,
        readable: &[fetcher_engine::DatasourceType],
    ) -> Self {
        let readable: Vec<&str> = readable.iter().map(|t| t.as_str()).collect();
        Self::business(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::TYPE_NOT_READABLE,
            "Type Not Readable",
            format!(
                "Connection '{config_name}' is of type {datasource_type}, which this deployment stores but cannot read: tests, discovery and jobs work on {}.",
                readable.join(", ")
            ),
        )
    }

    pub fn connection_reason(
        reason: Option<fetcher_engine::Reason>,
        d: &fetcher_engine::ConnectionDescriptor,
    ) -> Option<Self> {
        use fetcher_engine::Reason;
        let at = format!("{}:{}", d.host, d.port);
        let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
        let (status, code, title, message) = match reason? {
            Reason::HostNotResolved => return Some(Self::host_not_resolved()),
            Reason::LoginRefused => (
                unprocessable,
                code::LOGIN_REFUSED,
                "Login Refused",
                format!(
                    "The database at {at} refused the login of user '{}': check the user name and password, and that the user may connect to database '{}'.",
                    d.username, d.database_name
                ),
            ),
            Reason::DatabaseUnknown => (
                unprocessable,
                code::DATABASE_UNKNOWN,
                "Database Unknown",
                format!(
                    "The server at {at} has no database '{}': check databaseName.",
                    d.database_name
                ),
            ),
            Reason::NotListening => (
                unprocessable,
                code::NOT_LISTENING,
                "Nothing Listening",
                format!(
                    "Nothing is listening at {at}: check the host and port, and that the database is running."
                ),
            ),
            Reason::ConnectTimedOut => (
                StatusCode::GATEWAY_TIMEOUT,
                code::CONNECT_TIMED_OUT,
                "Connection Timed Out",
                format!(
                    "The database at {at} did not answer in time: check the host and port, and that the network lets this service reach it (firewalls, security groups)."
                ),
            ),
            Reason::TlsRefused => (
                unprocessable,
                code::TLS_REFUSED,
                "TLS Handshake Failed",
                format!(
                    "The TLS handshake with {at} failed with ssl.mode '{}': the server may not offer TLS, or its certificate does not verify for this host; check ssl.mode and the server's certificate.",
                    if d.ssl_mode.as_str().is_empty() {
                        "default"
                    } else {
                        d.ssl_mode.as_str()
                    }
                ),
            ),
            _ => return None,
        };
        Some(Self::business(status, code, title, message))
    }

    pub fn connect_failed() -> Self {
        Self::int_code(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Database Connection Error",
            CONNECT_ERROR_MESSAGE,
        )
    }

    pub fn schema_failed() -> Self {
        Self::int_code(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Schema Retrieval Error",
            "Failed to retrieve database schema information.",
        )
    }

    pub fn body_too_large() -> Self {
        Self::framework(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large")
    }

    /// A connection-store (or other engine) error on a connection route: not found → 404,
    /// duplicates → 409 `FET-1002`, dependency failures → 503, the SSRF guard → 400
    /// `FET-0414`, anything else → 500. The engine's text is only logged.
    pub fn from_engine(e: &EngineError) -> Self {
        if is_forbidden_host(e) {
            return Self::forbidden_host();
        }
        match e.category() {
            Category::NotFound => Self::not_found("connection"),
            Category::Conflict if e.reason() == Some(Reason::ActiveExecutions) => {
                Self::job_in_progress("update")
            }
            Category::Conflict => Self::duplicate_connection(),
            Category::Unavailable | Category::Timeout | Category::Canceled => {
                tracing::warn!(error = %e, "connection store unavailable");
                Self::unavailable()
            }
            _ => Self::internal_with(e),
        }
    }

    /// Job-store failures are never mapped (docs/api.md, "Errors"): always 500 `FET-0002`.
    pub fn from_job_store(e: &ServiceError) -> Self {
        tracing::error!(error = %e.log_detail(), "job store failure");
        Self::internal()
    }

    /// A host-port failure other than the job store (rate limiter, queue, keys).
    pub fn from_service(e: &ServiceError) -> Self {
        match e.kind() {
            ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Connect => {
                tracing::warn!(error = %e.log_detail(), "dependency unavailable");
                Self::unavailable()
            }
            _ => {
                tracing::error!(error = %e.log_detail(), "service failure");
                Self::internal()
            }
        }
    }
}

pub use fetcher_connectors::is_forbidden_host;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        res
    }
}

impl From<std::convert::Infallible> for ApiError {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

/// The body of every error the API answers (docs/api.md "Errors"), for the OpenAPI
/// document: never built, [`ApiError`] renders it.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ErrorBody {
    /// A business code (`FET-0414`), a perimeter code (`MISSING_TOKEN`), or, for the
    /// framework's own rejections, the HTTP status (`431`).
    #[schema(schema_with = error_code_schema)]
    code: String,
    title: String,
    message: String,
    /// Shape B (field validation): each offending field and why.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    fields: Option<()>,
    /// Model-rule validation failures: the entity (`connection`).
    #[schema(value_type = Option<String>)]
    entity_type: Option<()>,
}

fn error_code_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Integer))
            .build(),
    )
}
