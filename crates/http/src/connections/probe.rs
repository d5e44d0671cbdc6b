//! What reaches the database: connection tests (rate limited), live schema discovery,
//! validate-schema, and the schema problems the job routes share.

use super::*;

/// Test connectivity (rate limited per connection).
#[utoipa::path(post, path = "/v1/management/connections/{id}/test", tag = "connections", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's connection answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionTestResponse), (status = 400, body = ErrorBody, description = "FET-0403, FET-0404, FET-0414"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 422, body = ErrorBody, description = "FET-0415 host not resolved"),
        (status = 429, body = ErrorBody, description = "Rate Limit Exceeded (integer code), with Retry-After"), (status = 500, body = ErrorBody, description = "Database Connection Error (integer code)")))]
pub async fn test_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
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
    let d = load_owned(&st, &scope, &headers, &id).await?;
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
        Ok(Err(e)) if e.reason() == Some(Reason::NoConnector) => Err(ApiError::type_not_readable(
            &d.config_name,
            d.datasource_type,
            &st.engine().readable_types(),
        )),
        Ok(Err(e)) => {
            tracing::info!(error = %e, cause = %cause_chain(&e), "connection test failed");
            Err(ApiError::connection_reason(e.reason(), &d)
                .unwrap_or_else(ApiError::connect_failed))
        }
        Err(_) => Err(
            ApiError::connection_reason(Some(Reason::ConnectTimedOut), &d)
                .unwrap_or_else(ApiError::connect_failed),
        ),
    }
}

/// Discover a connection's schema (always live).
#[utoipa::path(get, path = "/v1/management/connections/{id}/schema", tag = "connections", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's connection answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionSchemaResponse), (status = 400, body = ErrorBody, description = "FET-0403, FET-0404, FET-0414"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 422, body = ErrorBody, description = "FET-0415 host not resolved"),
        (status = 500, body = ErrorBody, description = "Database Connection Error / Schema Retrieval Error (integer code)")))]
pub async fn get_schema(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let d = load_owned(&st, &scope, &headers, &id).await?;
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
        Ok(Err(e)) if e.reason() == Some(Reason::NoConnector) => {
            return Err(ApiError::type_not_readable(
                &d.config_name,
                d.datasource_type,
                &st.engine().readable_types(),
            ));
        }
        Ok(Err(e)) => return Err(schema_error(&e, &d)),
        Err(_) => return Err(ApiError::schema_failed()),
    };
    let mut tables: Vec<TableSchema> = snapshot
        .tables
        .into_iter()
        .map(|t| {
            let columns = t
                .fields
                .iter()
                .map(|f| {
                    let ty = t.types.get(f);
                    ColumnSchema {
                        name: f.clone(),
                        type_name: ty.map(|ty| ty.name.clone()),
                        nullable: ty.and_then(|ty| ty.nullable),
                        primary_key: t.primary_key.iter().position(|k| k == f).map(|i| i + 1),
                        cursor: ty.is_some_and(|ty| ty.cursor),
                    }
                })
                .collect();
            let mut fields = t.fields;
            fields.sort();
            TableSchema {
                name: t.name,
                fields,
                columns,
                row_estimate: t.row_estimate,
                view: t.view,
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

pub(super) fn schema_error(e: &EngineError, d: &ConnectionDescriptor) -> ApiError {
    if is_forbidden_host(e) {
        return ApiError::forbidden_host();
    }
    tracing::info!(error = %e, cause = %cause_chain(e), "schema discovery failed");
    match e.category() {
        Category::NotFound if e.reason() == Some(Reason::ConnectionNotFound) => {
            ApiError::not_found("connection")
        }
        Category::Connect => {
            ApiError::connection_reason(e.reason(), d).unwrap_or_else(ApiError::connect_failed)
        }
        _ => ApiError::schema_failed(),
    }
}

/// The hidden causes of `e`, for the log: the driver's own words (never credentials: the
/// drivers do not print passwords), which no HTTP body carries.
fn cause_chain(e: &EngineError) -> String {
    let mut out = String::new();
    let mut next = std::error::Error::source(e);
    while let Some(c) = next {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&c.to_string());
        next = c.source();
    }
    out
}

/// Check that tables and fields of a mapping exist.
#[utoipa::path(post, path = "/v1/management/connections/validate-schema", tag = "connections", request_body = SchemaValidationRequest,
    params(("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's connection answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = SchemaValidationResponse), (status = 400, body = ErrorBody, description = "FET-0403, FET-0001, FET-0401, FET-0402, FET-0414, FET-1061, FET-1062"),
        (status = 422, body = SchemaValidationErrorResponse)))]
pub async fn validate_schema(
    State(st): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let product = caller_product(&st, &headers)?;
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
            // Another product's connection is one this caller does not have.
            Ok(d) if answers_to(&d, product.as_deref()) => {
                resolved.insert(name.clone(), d);
            }
            Ok(_) => {}
            Err(e) if e.category() == Category::NotFound => {}
            Err(e) => return Err(ApiError::from_engine(&e)),
        }
    }
    if resolved.is_empty() {
        return Err(ApiError::business(
            StatusCode::BAD_REQUEST,
            crate::error::code::NO_SCHEMA_CONNECTIONS,
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
            &snapshot.missing(d.datasource_type, tables),
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
        code: crate::error::code::SCHEMA_INVALID,
        message: "Schema validation found inconsistencies.",
        errors,
    };
    ApiError {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        body: serde_json::to_value(body).unwrap_or(Value::Null),
        retry_after: None,
    }
}

pub(super) fn validation_limits(
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
