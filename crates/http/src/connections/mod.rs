//! Connection operations (docs/api.md), over the typed
//! `fetcher_host::connection::ConnectionRecord`:
//!
//! | module | what it holds |
//! |---|---|
//! | `dto` | the request and response bodies, and the record → response mapping |
//! | `validate` | the two validation layers: the request (buckets, shapes, host safety of literals, SQLite files) and the merged record |
//! | `manage` | list (filtered and paged here over the tenant's records: every store is bounded per tenant by the connection cap, and product and metadata live inside each record, so a store-side page would read the same records; docs/api.md, "Lists"), create, read, patch, delete, assign |
//! | `probe` | test, schema discovery, validate-schema, and the schema problems the job routes share |
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
    Category, ConnectionDescriptor, ConnectionInput, ConnectionPatch, Context, DatasourceType,
    EngineError, Reason, Secret, TenantContext, Timestamp, TlsMode,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, is_forbidden_host};
use super::extract::{RawBody, caller_product, parse_id, parse_json, product_name};
use super::paging::{self, Page};
use super::{ApiConfig, AppState, Scope};
use fetcher_host::connection::{ConnectionRecord, SslSettings};
use fetcher_host::jobs::check_host;

mod dto;
mod manage;
mod probe;
mod validate;

pub use dto::*;
pub use manage::*;
pub use probe::*;
use validate::*;

/// The answer to a type outside [`DatasourceType::ALL`]: the reference's five types plus
/// `SQLITE` (a local file: single-tenant only, rejected as a forbidden host in
/// multi-tenant mode).
const TYPE_ENUM_MESSAGE: &str =
    "type must be one of [ORACLE SQL_SERVER POSTGRESQL MONGODB MYSQL SQLITE]";
const HOST_FORMAT_MESSAGE: &str = "host must be a valid hostname or IP address";
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";
const BAD_ID: &str = "invalid connection id";
