//! List, create, read, patch, delete and assign connections.

use super::*;

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
    let product = caller_product(&st, &headers)?;
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
                    .is_none_or(|t| r.datasource_type.as_str() == t)
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
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    // Unassigned connections belong to no product: the header only has to be there
    // where the deployment requires it.
    caller_product(&st, &headers)?;
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

pub(super) fn page_of(
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
    Page::of(&v, q, response)
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
    let mut b: ConnectionBody = parse_json(&headers, &body)?;
    connection_keys(&body)?;
    if let Some(url) = b.url.take() {
        from_url(&mut b, &url)?;
    }
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

pub(super) async fn create(
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
    let mut record = ConnectionRecord {
        id: uuid::Uuid::now_v7().to_string(),
        product,
        config_name: b.config_name.as_deref().unwrap_or("").trim().to_owned(),
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
    model_rules(&mut record, TypedText::of(b))?;
    if sqlite_file_refused(cfg, &record) {
        return Err(ApiError::forbidden_host());
    }
    let d = record.descriptor();
    let input = ConnectionInput {
        config_name: d.config_name.clone(),
        datasource_type: d.datasource_type,
        host: d.host.clone(),
        port: d.port,
        database_name: d.database_name.clone(),
        schema: d.schema.clone(),
        username: d.username.clone(),
        ssl_mode: d.ssl_mode,
        tls: d.tls.clone(),
        host_attributes: d.host_attributes.clone(),
        id: d.id.clone(),
        password: Secret::from(b.password.clone().unwrap_or_default().into_bytes()),
    };
    let created = st.engine().create_connection(&ctx(), tenant, &input).await;
    let created = match created {
        Err(e) if e.category() == Category::Conflict => {
            return Err(taken(st, tenant, &d.config_name).await);
        }
        other => other.map_err(|e| ApiError::from_engine(&e))?,
    };
    Ok(response(&ConnectionRecord::from_descriptor(&created)))
}

/// The 409 for a taken config name, naming the connection that holds it when it can be
/// read (a name taken by a create racing this one may be gone again).
async fn taken(st: &AppState, tenant: &TenantContext, config_name: &str) -> ApiError {
    match st
        .engine()
        .get_connection(&ctx(), tenant, config_name)
        .await
    {
        Ok(holder) => {
            ApiError::config_name_taken(config_name, &ConnectionRecord::from_descriptor(&holder).id)
        }
        Err(_) => ApiError::duplicate_connection(),
    }
}

pub(super) async fn load(
    st: &AppState,
    scope: &Scope,
    id: &str,
) -> Result<ConnectionDescriptor, ApiError> {
    st.engine()
        .get_connection_by_id(&ctx(), &scope.tenant, id)
        .await
        .map_err(|e| ApiError::from_engine(&e))
}

/// A by-id route's connection, if it answers to the caller's product (docs/api.md,
/// "Calling it"): a connection that belongs to a product needs `X-Product-Name` (400
/// `FET-0403` without it) and is not found (404 `FET-1001`) for any other product, as a
/// job naming another product's connection is refused. Unassigned and internal
/// connections belong to no product and answer to every caller.
pub(super) async fn load_owned(
    st: &AppState,
    scope: &Scope,
    headers: &HeaderMap,
    id: &str,
) -> Result<ConnectionDescriptor, ApiError> {
    let product = caller_product(st, headers)?;
    let d = load(st, scope, id).await?;
    if answers_to(&d, product.as_deref()) {
        Ok(d)
    } else {
        Err(ApiError::not_found("connection"))
    }
}

/// Whether `d` answers to `product` (the caller's normalised `X-Product-Name`, `None`
/// when it names none): the rule jobs and syncs follow too.
pub(super) fn answers_to(d: &ConnectionDescriptor, product: Option<&str>) -> bool {
    fetcher_host::model::answers_to(ConnectionRecord::product_of(d), product)
}

/// Get one connection.
#[utoipa::path(get, path = "/v1/management/connections/{id}", tag = "connections", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's connection answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionResponse), (status = 400, body = ErrorBody, description = "FET-0403, FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001")))]
pub async fn get_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let d = load_owned(&st, &scope, &headers, &id).await?;
    Ok(Json(connection_response(&d)).into_response())
}

/// The active-job gate: 409 while a pending/processing job reads the connection; a
/// job-store failure is 500.
pub(super) async fn gate(
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
#[utoipa::path(patch, path = "/v1/management/connections/{id}", tag = "connections", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's connection answers 404; required where the deployment requires it (docs/api.md, Products)")), request_body = ConnectionBody,
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 200, body = ConnectionResponse), (status = 400, body = ErrorBody, description = "FET-0403, FET-0001, FET-0402, FET-0404, FET-0414"),
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
    connection_keys(&body)?;
    if b.url.is_some() {
        return Err(ApiError::invalid_payload_because(
            "url: a connection URL is taken when a connection is created; patch its fields",
        ));
    }
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
    let current = load_owned(&st, &scope, &headers, &id).await?;
    gate(&st, &scope, &current.config_name, "update").await?;
    let mut r = ConnectionRecord::from_descriptor(&current);
    if let Some(v) = &b.config_name {
        r.config_name = v.trim().to_owned();
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
    // An unknown type stays for `model_rules` to answer; a known one counts already for
    // the SQLite check below.
    if let Some(t) = b.datasource_type.as_deref().and_then(DatasourceType::parse) {
        r.datasource_type = t;
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
    model_rules(&mut r, TypedText::of(&b))?;
    credentials_follow_the_server(&b, &current.host, current.port)?;
    if r.config_name != current.config_name {
        match st
            .engine()
            .get_connection(&ctx(), &scope.tenant, &r.config_name)
            .await
        {
            Ok(other) if ConnectionRecord::from_descriptor(&other).id != id => {
                let holder = ConnectionRecord::from_descriptor(&other).id;
                return Err(ApiError::config_name_taken(&r.config_name, &holder));
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

/// Delete a connection: the record and its credential are removed (nothing is kept).
#[utoipa::path(delete, path = "/v1/management/connections/{id}", tag = "connections", params(("id" = uuid::Uuid, Path), ("X-Product-Name" = Option<String>, Header, description = "The caller's product: another product's connection answers 404; required where the deployment requires it (docs/api.md, Products)")),
    responses((status = 401, body = ErrorBody, description = "MISSING_TOKEN, INVALID_TOKEN, MISSING_TENANT, INVALID_TENANT (multi-tenant mode, or single-tenant with auth required)"), (status = 204, description = "Deleted"), (status = 400, body = ErrorBody, description = "FET-0403, FET-0404"), (status = 404, body = ErrorBody, description = "FET-1001"), (status = 409, body = ErrorBody, description = "FET-1021")))]
pub async fn delete_connection(
    State(st): State<AppState>,
    scope: Scope,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, BAD_ID)?;
    let current = load_owned(&st, &scope, &headers, &id).await?;
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
    // Another product's connection is one this caller does not know: the same 404 as an
    // unknown id, so /assign tells nothing of other products' connections.
    if !answers_to(&current, Some(&product)) {
        return Err(ApiError::not_found("connection"));
    }
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

/// The keys of a connection body (and of its `ssl`): a misspelling of one is refused
/// naming it (`database_name` → `databaseName`).
fn connection_keys(body: &[u8]) -> Result<(), ApiError> {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    crate::extract::known_keys(
        &v,
        &[
            "configName",
            "type",
            "host",
            "port",
            "databaseName",
            "schema",
            "userName",
            "password",
            "ssl",
            "metadata",
            "url",
        ],
    )?;
    crate::extract::known_keys(&v["ssl"], &["mode", "ca", "cert", "key"])
}

/// Fills `b` from a connection URL (`postgresql://user:password@host:5432/db?sslmode=…`,
/// `postgres://`, `mysql://`, `mariadb://`): the fields not given, percent-decoded; a
/// field given both ways must agree. No answer ever echoes the URL (it holds the
/// password): the messages name the part that is wrong.
fn from_url(b: &mut ConnectionBody, text: &str) -> Result<(), ApiError> {
    let bad = |why: String| ApiError::invalid_payload_because(format!("url: {why}"));
    let u = url::Url::parse(text.trim()).map_err(|_| {
        bad("expected a URL such as postgresql://user:password@host:5432/database".into())
    })?;
    let (ty, default_port) = match u.scheme() {
        "postgresql" | "postgres" => ("POSTGRESQL", 5432),
        "mysql" | "mariadb" => ("MYSQL", 3306),
        // Not echoed: text before a colon may be a user name or worse.
        _ => {
            return Err(bad(
                "it must start with postgresql://, postgres://, mysql:// or mariadb://".into(),
            ));
        }
    };
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad("a part of it is not UTF-8 once percent-decoded".into()))
    };
    fn agree(
        field: &mut Option<String>,
        value: String,
        name: &str,
        bad: &dyn Fn(String) -> ApiError,
    ) -> Result<(), ApiError> {
        match field {
            Some(given) if *given != value => Err(bad(format!(
                "its {name} differs from the {name} given beside it"
            ))),
            Some(_) => Ok(()),
            None => {
                *field = Some(value);
                Ok(())
            }
        }
    }
    agree(&mut b.datasource_type, ty.to_owned(), "type", &bad)?;
    let host = u
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("it names no host".into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    agree(&mut b.host, host.to_owned(), "host", &bad)?;
    let port = i64::from(u.port().unwrap_or(default_port));
    match b.port {
        Some(given) if given != port => {
            return Err(bad("its port differs from the port given beside it".into()));
        }
        _ => b.port = Some(port),
    }
    let database = decode(u.path().trim_start_matches('/'))?;
    if !database.is_empty() {
        agree(&mut b.database_name, database, "database", &bad)?;
    }
    if !u.username().is_empty() {
        agree(&mut b.user_name, decode(u.username())?, "user", &bad)?;
    }
    if let Some(password) = u.password() {
        agree(&mut b.password, decode(password)?, "password", &bad)?;
    }
    for (key, value) in u.query_pairs() {
        if matches!(
            key.as_ref(),
            "sslmode" | "ssl-mode" | "sslMode" | "ssl_mode"
        ) {
            let ssl = b.ssl.get_or_insert_with(Default::default);
            agree(&mut ssl.mode, value.to_ascii_lowercase(), "ssl mode", &bad)?;
        }
    }
    Ok(())
}
