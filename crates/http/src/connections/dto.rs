//! Request and response bodies of the connection routes, and the record → response mapping.

use super::*;

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
    pub(super) fn is_blank(&self) -> bool {
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
    #[schema(value_type = Option<DatasourceTypeSchema>)]
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
    /// Beyond the reference, on create: the connection as a URL, as other tools take it
    /// (`postgresql://user:password@host:5432/db?sslmode=require`, `mysql://…`,
    /// `mariadb://…`). It fills the fields not given; a field given both ways must agree.
    /// Write-only: it holds the password.
    #[schema(example = "postgresql://reader:secret@db.example.com:5432/app?sslmode=require")]
    pub url: Option<String>,
}

/// A connection's database type: the OpenAPI picture of [`DatasourceType`] (the engine
/// has no schema derive; its dependency boundary keeps utoipa out).
#[derive(ToSchema)]
#[schema(as = DatasourceType)]
#[allow(dead_code, clippy::upper_case_acronyms, non_camel_case_types)]
pub enum DatasourceTypeSchema {
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
    #[schema(value_type = String)]
    pub mode: TlsMode,
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
    #[schema(value_type = DatasourceTypeSchema)]
    pub datasource_type: DatasourceType,
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
#[serde(rename_all = "camelCase")]
pub struct TableSchema {
    pub name: String,
    /// The column names, sorted (the reference's list).
    pub fields: Vec<String>,
    /// Beyond the reference: each column in the table's order, with its type,
    /// nullability and key membership, for planning a job.
    pub columns: Vec<ColumnSchema>,
    /// Beyond the reference: the catalog's row estimate, when it keeps one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_estimate: Option<i64>,
    /// Beyond the reference (which listed base tables only): `true` for a view or
    /// materialised view, read like a table but without key ranges or log reads.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub view: bool,
}

/// A discovered column.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ColumnSchema {
    pub name: String,
    /// The database's type name (`bigint`, `numeric(18,4)`, `timestamp with time zone`).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nullable: Option<bool>,
    /// Its place in the primary key (1-based), if it is part of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_key: Option<usize>,
    /// Whether it can be an incremental cursor (integers, decimals, dates, timestamps,
    /// text).
    pub cursor: bool,
}

/// A connection's discovered schema.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSchemaResponse {
    pub id: String,
    pub config_name: String,
    pub database_name: String,
    #[serde(rename = "type")]
    #[schema(value_type = DatasourceTypeSchema)]
    pub datasource_type: DatasourceType,
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

pub(super) fn response(r: &ConnectionRecord) -> ConnectionResponse {
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
        datasource_type: r.datasource_type,
        host: r.host.clone(),
        port: r.port,
        database_name: r.database_name.clone(),
        schema: r.schema.clone(),
        user_name: r.username.clone(),
        ssl: r.ssl.as_ref().map(|s| SslOutput { mode: s.mode }),
        metadata: r.metadata.clone().filter(|m| !m.is_empty()),
        created_at: time(&r.created_at),
        updated_at: time(&r.updated_at),
    }
}

/// The TLS settings of a request; the mode's text is parsed by `model_rules` (against
/// the record's type), so it starts as the default here.
pub(super) fn ssl_settings(s: &SslInput) -> SslSettings {
    SslSettings {
        mode: TlsMode::Default,
        ca: s.ca.clone().unwrap_or_default(),
        cert: s.cert.clone().filter(|c| !c.is_empty()),
    }
}

/// The response body for a descriptor (also used by tests and other hosts).
pub fn connection_response(d: &ConnectionDescriptor) -> ConnectionResponse {
    response(&ConnectionRecord::from_descriptor(d))
}
