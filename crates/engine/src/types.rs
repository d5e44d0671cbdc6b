//! Value types of the engine's contract. JSON names are camelCase.
//!
//! One file on purpose: these are plain data types with their serde shapes, read side by
//! side; about a third of it is their tests.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::filter::{DatasourceFilters, Filters};
use crate::limits::Limits;
use crate::secret::Secret;
use crate::time::Timestamp;

/// Opaque host data carried input → descriptor → store → back; never read, never
/// serialized by the engine.
pub type HostAttributes = BTreeMap<String, serde_json::Value>;

// ---------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------

/// A connection definition with its secret. Every rendering redacts the password.
#[derive(Clone, Default)]
pub struct ConnectionInput {
    pub config_name: String,
    pub datasource_type: String,
    pub host: String,
    pub port: u16,
    pub database_name: String,
    pub schema: String,
    pub username: String,
    pub ssl_mode: String,
    pub host_attributes: HostAttributes,
    /// The host's identity for the new record (opaque to the engine; empty for none):
    /// copied to the created descriptor's `id`.
    pub id: String,
    /// The secret. [`Secret`] is redacted in every rendering and readable only through
    /// [`Secret::expose`].
    pub password: Secret,
}

impl ConnectionInput {
    pub fn with_password(mut self, password: impl Into<Secret>) -> Self {
        self.password = password.into();
        self
    }

    pub fn password(&self) -> &Secret {
        &self.password
    }

    pub fn has_password(&self) -> bool {
        !self.password.is_empty()
    }

    fn redacted(&self) -> &'static str {
        if self.has_password() {
            "[REDACTED]"
        } else {
            ""
        }
    }
}

impl fmt::Display for ConnectionInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConnectionInput{{configName:{:?} type:{:?} host:{:?} port:{} database:{:?} schema:{:?} username:{:?} sslMode:{:?} password:{}}}",
            self.config_name,
            self.datasource_type,
            self.host,
            self.port,
            self.database_name,
            self.schema,
            self.username,
            self.ssl_mode,
            self.redacted()
        )
    }
}

impl fmt::Debug for ConnectionInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for ConnectionInput {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Redacted<'a> {
            config_name: &'a str,
            #[serde(rename = "type")]
            datasource_type: &'a str,
            host: &'a str,
            port: u16,
            database_name: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            schema: &'a str,
            user_name: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            ssl_mode: &'a str,
            password: &'a str,
        }
        Redacted {
            config_name: &self.config_name,
            datasource_type: &self.datasource_type,
            host: &self.host,
            port: self.port,
            database_name: &self.database_name,
            schema: &self.schema,
            user_name: &self.username,
            ssl_mode: &self.ssl_mode,
            password: self.redacted(),
        }
        .serialize(s)
    }
}

/// A connection without any secret: what the engine returns and stores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionDescriptor {
    /// Opaque host identity; the engine never parses it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub config_name: String,
    #[serde(rename = "type")]
    pub datasource_type: String,
    pub host: String,
    pub port: u16,
    pub database_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schema: String,
    #[serde(rename = "userName")]
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ssl_mode: String,
    /// Label of the key that protected the stored secret. The reference types this as an
    /// integer; the product records a free-form label, so it is text here. Empty means no
    /// protected secret (an internal datasource, or one without a password).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_version: String,
    #[serde(skip)]
    pub host_attributes: HostAttributes,
}

impl ConnectionDescriptor {
    /// Every non-secret field plus host attributes and identity; `key_version` stays
    /// empty.
    pub fn from_input(input: &ConnectionInput) -> Self {
        ConnectionDescriptor {
            id: input.id.clone(),
            config_name: input.config_name.clone(),
            datasource_type: input.datasource_type.clone(),
            host: input.host.clone(),
            port: input.port,
            database_name: input.database_name.clone(),
            schema: input.schema.clone(),
            username: input.username.clone(),
            ssl_mode: input.ssl_mode.clone(),
            key_version: String::new(),
            host_attributes: input.host_attributes.clone(),
        }
    }
}

/// A protected secret on its way to the connection store. Never returned, never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct ProtectedCredential {
    pub ciphertext: Vec<u8>,
    pub key_version: String,
}

impl fmt::Debug for ProtectedCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ProtectedCredential{{ciphertext:[{} bytes] keyVersion:{:?}}}",
            self.ciphertext.len(),
            self.key_version
        )
    }
}

/// A partial update. The config name cannot be patched.
#[derive(Clone, Default)]
pub struct ConnectionPatch {
    pub datasource_type: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub database_name: Option<String>,
    pub schema: Option<String>,
    pub username: Option<String>,
    pub ssl_mode: Option<String>,
    /// Present: replaces the whole map.
    pub host_attributes: Option<HostAttributes>,
    /// A new password; `Some("")` still counts as a password change.
    pub password: Option<Secret>,
}

impl ConnectionPatch {
    /// A copy carrying a new password. Even an empty one counts as "has a password".
    pub fn with_password(mut self, password: impl Into<Secret>) -> Self {
        self.password = Some(password.into());
        self
    }

    pub fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Applies present fields to a copy of `current` (config name, id and key version kept).
    pub fn apply(&self, current: &ConnectionDescriptor) -> ConnectionDescriptor {
        let mut d = current.clone();
        let set = |dst: &mut String, src: &Option<String>| {
            if let Some(v) = src {
                dst.clone_from(v);
            }
        };
        set(&mut d.datasource_type, &self.datasource_type);
        set(&mut d.host, &self.host);
        if let Some(p) = self.port {
            d.port = p;
        }
        set(&mut d.database_name, &self.database_name);
        set(&mut d.schema, &self.schema);
        set(&mut d.username, &self.username);
        set(&mut d.ssl_mode, &self.ssl_mode);
        if let Some(h) = &self.host_attributes {
            d.host_attributes = h.clone();
        }
        d
    }
}

impl fmt::Debug for ConnectionPatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionPatch")
            .field("type", &self.datasource_type)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("databaseName", &self.database_name)
            .field("schema", &self.schema)
            .field("username", &self.username)
            .field("sslMode", &self.ssl_mode)
            .field("password", &self.password.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

/// Opaque list parameters forwarded to the store untouched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionListParams {
    pub filter: serde_json::Value,
}

/// A page of connections, returned verbatim from the store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionPage {
    pub items: Vec<ConnectionDescriptor>,
    pub total: i64,
}

impl ConnectionPage {
    /// Offset paging over an ordered list: `params.filter` may carry
    /// `{"page": n, "limit": m}` (page from 1; no limit means everything).
    pub fn offset(all: Vec<ConnectionDescriptor>, params: &ConnectionListParams) -> Self {
        let total = all.len() as i64;
        let number = |k: &str| params.filter.get(k).and_then(|v| v.as_u64());
        let limit = number("limit").unwrap_or(u64::MAX) as usize;
        let page = number("page").unwrap_or(1).max(1) as usize;
        let items = all
            .into_iter()
            .skip((page - 1).saturating_mul(limit))
            .take(limit)
            .collect();
        ConnectionPage { items, total }
    }
}

/// The outcome of a successful connection test.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTestResult {
    pub success: bool,
    pub config_name: String,
    /// Wall time of connect + ping + close (beyond the reference).
    #[serde(rename = "latencyMs", serialize_with = "ser_millis")]
    pub latency: Duration,
}

fn ser_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

// ---------------------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot {
    /// Qualified name, e.g. `schema.table`.
    pub name: String,
    /// Field names; nested document fields are dotted (`address.city`).
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaSnapshot {
    pub config_name: String,
    pub tables: Vec<TableSnapshot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_at: Option<Timestamp>,
}

impl SchemaSnapshot {
    pub fn has_table(&self, name: &str) -> bool {
        self.tables.iter().any(|t| t.name == name)
    }

    pub fn table(&self, name: &str) -> Option<&TableSnapshot> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// A table as a caller names it: the exact name first, then the name as the
    /// datasource type's naming rules normalise it ([`normalize_table_name`]). Schema
    /// validation, job planning and the connectors all find tables through these rules,
    /// so a mapping validate-schema accepts is one a job runs.
    pub fn find_table(&self, datasource_type: &str, requested: &str) -> Option<&TableSnapshot> {
        self.table(requested)
            .or_else(|| self.table(&normalize_table_name(datasource_type, requested)))
    }

    /// What of `selection` (table → fields, as a caller names them) this schema lacks:
    /// `(table, None)` for an unknown table, `(table, Some(field))` for an unknown field
    /// of a known one. A field matches a column exactly or as the parent object of a
    /// dotted one; Oracle names compare upper-cased. The one rule validate-schema, job
    /// creation and planning share.
    pub fn missing<'a>(
        &self,
        datasource_type: &str,
        selection: impl IntoIterator<Item = (&'a String, &'a Vec<String>)>,
    ) -> Vec<(String, Option<String>)> {
        let oracle = datasource_type == "ORACLE";
        let mut out = Vec::new();
        for (table, fields) in selection {
            let Some(found) = self.find_table(datasource_type, table) else {
                out.push((table.clone(), None));
                continue;
            };
            for f in fields {
                let name = if oracle { f.to_uppercase() } else { f.clone() };
                if !found.has_field(&name) {
                    out.push((table.clone(), Some(f.clone())));
                }
            }
        }
        out
    }
}

impl TableSnapshot {
    /// `name` is a column, or the parent object of a dotted one (`address` of
    /// `address.city`).
    pub fn has_field(&self, name: &str) -> bool {
        self.fields.iter().any(|f| {
            f == name
                || (f.len() > name.len() && f.starts_with(name) && f.as_bytes()[name.len()] == b'.')
        })
    }
}

/// Table naming (docs/api.md, the job's `mappedFields`): a name has one, two or three dot-separated parts
/// (`table`, `schema.table`, `database.schema.table`); the database part is dropped, and
/// so is the default schema: PostgreSQL `public` (matched case-insensitively), SQL Server
/// `dbo`; Oracle names are upper-cased. MySQL and SQLite tables are keyed bare, so a
/// qualified name matches nothing (a prefix may name another database: it is never
/// dropped). A name of more parts is returned unchanged (it matches nothing).
pub fn normalize_table_name(datasource_type: &str, name: &str) -> String {
    let trimmed = name.trim();
    let parts: Vec<&str> = trimmed.split('.').collect();
    let (schema, table) = match parts.as_slice() {
        [t] => ("", *t),
        [s, t] | [_, s, t] => (*s, *t),
        _ => return name.to_owned(),
    };
    let qualified = |default: &str| {
        if schema.is_empty() || schema.eq_ignore_ascii_case(default) {
            table.to_owned()
        } else {
            format!("{schema}.{table}")
        }
    };
    match datasource_type {
        "POSTGRESQL" => qualified("public"),
        "SQL_SERVER" => qualified("dbo"),
        "ORACLE" => qualified("").to_uppercase(),
        _ => qualified(""),
    }
}

impl SchemaSnapshot {
    /// Names sorted ascending.
    pub fn table_names(&self) -> Vec<String> {
        let mut names: Vec<_> = self.tables.iter().map(|t| t.name.clone()).collect();
        names.sort();
        names
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableValidation {
    pub name: String,
    #[serde(default)]
    pub fields: Vec<String>,
    #[serde(default)]
    pub filter_fields: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatasourceValidation {
    pub config_name: String,
    #[serde(default)]
    pub tables: Vec<TableValidation>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationRequest {
    pub datasources: Vec<DatasourceValidation>,
}

/// Stable failure type strings of a validation report.
pub mod failure_type {
    pub const DATASOURCE_NOT_FOUND: &str = "datasource_not_found";
    pub const TABLE_NOT_FOUND: &str = "table_not_found";
    pub const FIELD_NOT_FOUND: &str = "field_not_found";
    pub const INVALID_FILTER: &str = "invalid_filter";
    pub const LIMIT_EXCEEDED: &str = "limit_exceeded";
}

/// Fixed details of validation failures.
pub mod detail {
    pub const NO_CONNECTION: &str = "no connection configured for the requested datasource";
    pub const TABLE_NOT_FOUND: &str = "table not found in datasource schema";
    pub const FIELD_NOT_FOUND: &str = "field not found in table schema";
    pub const FILTER_NOT_FOUND: &str = "filter references a field not found in table schema";
    pub const DATASOURCE_COUNT: &str = "datasource count exceeds the configured limit";
    pub const TABLE_COUNT: &str = "table count exceeds the configured limit";
    pub const FIELD_COUNT: &str = "field count exceeds the configured limit";
    pub const FILTER_COUNT: &str = "filter count exceeds the configured limit";
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationFailure {
    #[serde(rename = "type")]
    pub failure_type: String,
    pub config_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub table: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationReport {
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ValidationFailure>,
}

// ---------------------------------------------------------------------------------------
// Extraction
// ---------------------------------------------------------------------------------------

/// `qualifiedTable → [field]`.
pub type FieldSelection = BTreeMap<String, Vec<String>>;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractionRequest {
    /// `configName → (table → [field])`.
    #[serde(default)]
    pub mapped_fields: BTreeMap<String, FieldSelection>,
    /// `configName → (table → (field → condition))`; the engine checks the targets, the
    /// connector the values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filters: Filters,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Limits>,
}

/// Where the result goes. Unknown strings behave as `Auto`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExecutionMode {
    #[default]
    Auto,
    Direct,
    Store,
}

impl ExecutionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Auto => "",
            ExecutionMode::Direct => "direct",
            ExecutionMode::Store => "store",
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "direct" => ExecutionMode::Direct,
            "store" => ExecutionMode::Store,
            _ => ExecutionMode::Auto,
        }
    }

    fn is_auto(&self) -> bool {
        *self == ExecutionMode::Auto
    }
}

impl Serialize for ExecutionMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ExecutionMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ExecutionMode::parse(&String::deserialize(d)?))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub ordinal: usize,
    pub config_name: String,
    pub tables: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: FieldSelection,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filters: DatasourceFilters,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractionPlan {
    pub tenant_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    pub steps: Vec<PlanStep>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    pub limits: Limits,
    #[serde(default, skip_serializing_if = "ExecutionMode::is_auto")]
    pub mode: ExecutionMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionStatus {
    Pending,
    Running,
    Completed,
    Failed,
    Canceled,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Pending => "pending",
            ExecutionStatus::Running => "running",
            ExecutionStatus::Completed => "completed",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Canceled => "canceled",
        }
    }

    /// Exact, case-sensitive.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionState {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_id: String,
    /// `None` means "not initialised".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ExecutionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_message: String,
}

/// Who applied a result's protection: the closed set `engine`, `adapter`, `host`.
pub mod applied_by {
    pub const ENGINE: &str = "engine";
    pub const ADAPTER: &str = "adapter";
    pub const HOST: &str = "host";

    pub fn is_valid(s: &str) -> bool {
        matches!(s, ENGINE | ADAPTER | HOST)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultIntegrity {
    /// e.g. `SHA-256` or `HMAC-SHA-256`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub algorithm: String,
    /// Lowercase hex of an unkeyed hash.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// Lowercase hex of a keyed MAC.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
}

impl ResultIntegrity {
    pub fn sha256(digest_hex: String) -> Self {
        ResultIntegrity {
            algorithm: "SHA-256".into(),
            digest: digest_hex,
            signature: String::new(),
        }
    }

    pub fn is_present(&self) -> bool {
        !self.digest.is_empty() || !self.signature.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultProtection {
    pub encrypted: bool,
    /// Result-key version label; unrelated to credential key versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_version: String,
    /// e.g. `AES-256-GCM`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// One of [`applied_by`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub applied_by: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectResult {
    /// Indented, sorted JSON (Base64 in JSON renderings).
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
    pub format: String,
    pub row_count: i64,
    pub plaintext_size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<ResultIntegrity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ResultProtection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
}

/// Where a stored result lives; never carries payload bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultReference {
    pub path: String,
    pub format: String,
    pub row_count: i64,
    pub size_bytes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<ResultIntegrity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ResultProtection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    /// Bytes the stored object occupies (sealed), when the sink knows; `size_bytes` is
    /// the plaintext. Beyond the reference.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub stored_bytes: i64,
    /// Adapter-defined facts about the stored object; never secret. Beyond the
    /// reference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
    /// A multi-object result (Parquet): one object per `(config, table)`, listed by the
    /// manifest at `path`. Empty for single-stream results. Beyond the reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<ResultPart>,
}

/// One object of a multi-object result: a table's file (docs/results.md, "Parquet
/// results").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultPart {
    pub config: String,
    pub table: String,
    pub path: String,
    pub row_count: i64,
    /// Plaintext bytes (the file as opened).
    pub size_bytes: i64,
    /// Stored (sealed) bytes, when the sink knows.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub stored_bytes: i64,
    /// The sink's keyed signature of the plaintext (HMAC-SHA256 for sealed sinks).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hmac: String,
    /// SHA-256 of the plaintext, computed by the engine as it wrote.
    pub sha256: String,
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractionResult {
    pub state: ExecutionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<DirectResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ResultReference>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub row_counts: BTreeMap<String, i64>,
}

mod base64_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::json::base64(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).ok_or_else(|| serde::de::Error::custom("invalid base64"))
    }

    fn decode(s: &str) -> Option<Vec<u8>> {
        let val = |c: u8| -> Option<u32> {
            Some(match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                _ => return None,
            } as u32)
        };
        let b = s.trim_end_matches('=').as_bytes();
        let mut out = Vec::with_capacity(b.len() * 3 / 4);
        for chunk in b.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= val(c)? << (18 - 6 * i);
            }
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            match chunk.len() {
                4 => out.extend_from_slice(&bytes),
                3 => out.extend_from_slice(&bytes[..2]),
                2 => out.push(bytes[0]),
                _ => return None,
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn table_names_normalise_by_datasource_type() {
        let n = normalize_table_name;
        assert_eq!(n("POSTGRESQL", "public.users"), "users");
        assert_eq!(n("POSTGRESQL", "PUBLIC.users"), "users");
        assert_eq!(n("POSTGRESQL", "public.Users"), "Users");
        assert_eq!(n("POSTGRESQL", "acc.inv"), "acc.inv");
        assert_eq!(n("POSTGRESQL", "mydb.sales.orders"), "sales.orders");
        assert_eq!(n("POSTGRESQL", "mydb.public.orders"), "orders");
        assert_eq!(n("POSTGRESQL", "a.b.c.d"), "a.b.c.d");
        assert_eq!(n("SQL_SERVER", "dbo.t"), "t");
        assert_eq!(n("ORACLE", "hr.emp"), "HR.EMP");
        assert_eq!(n("MYSQL", "db.s.t"), "s.t");
        assert_eq!(n("MYSQL", "otherdb.users"), "otherdb.users");
        let snap = SchemaSnapshot {
            config_name: "c".into(),
            tables: vec![TableSnapshot {
                name: "orders".into(),
                fields: vec!["id".into()],
            }],
            captured_at: None,
        };
        assert!(snap.find_table("POSTGRESQL", "public.orders").is_some());
        assert!(snap.find_table("POSTGRESQL", "orders").is_some());
        assert!(snap.find_table("POSTGRESQL", "other.orders").is_none());
        assert!(snap.find_table("MYSQL", "otherdb.orders").is_none());
    }

    use super::*;

    fn input() -> ConnectionInput {
        ConnectionInput {
            config_name: "pg".into(),
            datasource_type: "POSTGRESQL".into(),
            host: "db".into(),
            port: 5432,
            database_name: "app".into(),
            username: "u".into(),
            ..Default::default()
        }
        .with_password("s3cr3t-Pa55")
    }

    #[test]
    fn secrets_never_render() {
        let i = input();
        let renderings = [
            format!("{i}"),
            format!("{i:?}"),
            format!("{i:#?}"),
            serde_json::to_string(&i).unwrap(),
            serde_json::to_string(&&i).unwrap(),
            format!(
                "{:?}",
                ConnectionPatch::default().with_password("s3cr3t-Pa55")
            ),
            serde_json::to_string(&ConnectionDescriptor::from_input(&i)).unwrap(),
        ];
        for r in renderings {
            assert!(!r.contains("s3cr3t"), "{r}");
        }
        assert_eq!(
            format!("{i}"),
            r#"ConnectionInput{configName:"pg" type:"POSTGRESQL" host:"db" port:5432 database:"app" schema:"" username:"u" sslMode:"" password:[REDACTED]}"#
        );
        let json: serde_json::Value = serde_json::to_value(&i).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"configName":"pg","type":"POSTGRESQL","host":"db","port":5432,
                "databaseName":"app","userName":"u","password":"[REDACTED]"})
        );
        let no_pw = ConnectionInput {
            password: Secret::default(),
            ..input()
        };
        assert!(!no_pw.has_password());
        assert!(format!("{no_pw}").ends_with("password:}"));
    }

    #[test]
    fn descriptor_json_omits_empty_and_host_attributes() {
        let mut d = ConnectionDescriptor::from_input(&input());
        d.host_attributes.insert("secretish".into(), "x".into());
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"configName":"pg","type":"POSTGRESQL","host":"db","port":5432,
                "databaseName":"app","userName":"u"})
        );
        d.key_version = "2".into();
        d.id = "abc".into();
        assert_eq!(serde_json::to_value(&d).unwrap()["keyVersion"], "2");
    }

    #[test]
    fn patch_applies_only_present_fields() {
        let mut cur = ConnectionDescriptor::from_input(&input());
        cur.id = "id-1".into();
        cur.key_version = "1".into();
        cur.host_attributes.insert("k".into(), 1.into());
        let p = ConnectionPatch {
            host: Some("db2".into()),
            port: Some(6543),
            ..Default::default()
        };
        let d = p.apply(&cur);
        assert_eq!((d.host.as_str(), d.port), ("db2", 6543));
        assert_eq!(
            (
                d.id.as_str(),
                d.key_version.as_str(),
                d.config_name.as_str()
            ),
            ("id-1", "1", "pg")
        );
        assert_eq!(d.host_attributes, cur.host_attributes);
        let replaced = ConnectionPatch {
            host_attributes: Some(HostAttributes::new()),
            ..Default::default()
        }
        .apply(&cur);
        assert!(replaced.host_attributes.is_empty());
        assert!(ConnectionPatch::default().with_password("").has_password());
    }

    #[test]
    fn enums_have_stable_strings() {
        assert_eq!(ExecutionMode::parse("store"), ExecutionMode::Store);
        assert_eq!(ExecutionMode::parse("STORE"), ExecutionMode::Auto);
        assert_eq!(serde_json::to_string(&ExecutionMode::Auto).unwrap(), "\"\"");
        for s in ["pending", "running", "completed", "failed", "canceled"] {
            assert_eq!(ExecutionStatus::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(ExecutionStatus::parse("cancelled"), None);
        assert_eq!(ExecutionStatus::parse("Completed"), None);
        assert!(ExecutionStatus::Canceled.is_terminal() && !ExecutionStatus::Running.is_terminal());
        for s in ["engine", "adapter", "host"] {
            assert!(applied_by::is_valid(s));
        }
        for s in ["", "ENGINE", "sink"] {
            assert!(!applied_by::is_valid(s));
        }
    }

    #[test]
    fn direct_result_json_omits_the_unused_arm() {
        let r = ExtractionResult {
            direct: Some(DirectResult {
                data: b"{}".to_vec(),
                format: "json".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"direct\"") && !json.contains("\"reference\""));
        assert!(json.contains("\"data\":\"e30=\""));
        let back: ExtractionResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back.direct.unwrap().data, b"{}");
    }
}
