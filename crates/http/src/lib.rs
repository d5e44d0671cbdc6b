//! # fetcher-http
//!
//! The HTTP API (docs/api.md): the 12 business operations, the probes, the OpenAPI
//! document, over `fetcher-host`'s job service. `fetcher serve` and the API Lambda mount
//! the same [`router`].
//!
//! ```text
//! let router = fetcher_http::router(AppState::new(deps, ApiConfig::default()));
//! ```
//!
//! ## Module map
//!
//! | module | what it holds |
//! |---|---|
//! | this module | [`AppState`], [`AppDeps`], [`ApiConfig`], [`router`], the request pipeline, [`Scope`], [`openapi`] |
//! | [`error`] | [`ApiError`]: the five body shapes and the FET-xxxx catalogue |
//! | [`auth`] | [`Authenticator`], [`JwtAuthenticator`], [`ClaimsAuthenticator`], [`VerifiedClaims`], tenant resolution |
//! | [`extract`] | JSON bodies (content type, 413), `{id}`, `X-Product-Name`, `X-Request-Id` |
//! | [`paging`] | page/limit/sort/date-window query parameters and the list envelope |
//! | [`connections`] | routes 3–12: DTOs, request and model validation, the connection record |
//! | [`fetcher`] | routes 1–2 (create, get and cancel jobs) over [`fetcher_host::jobs`] |
//! | [`syncs`] | the sync list, a sync's watermarks and its reset, over [`fetcher_host::incremental`] |
//! | [`probes`] | `/health`, `/readyz`, `/readyz/tenant/{id}`, `/metrics`, `/version`, `/openapi.json`, [`ReadinessProbe`], [`probes::Metrics`] |
//!
//! ## Request pipeline
//!
//! Every route: panic → 500 `FET-0002`; CORS (permissive); metrics (count by method,
//! matched route and status; latency histogram); body limit (default 1 MiB → 413 shape D).
//! Business routes (1–12) then: `X-Request-Id` (reused when sent, else a UUID v4; echoed
//! on the response, carried in the job message) → authentication ([`Authenticator`]) →
//! tenant (single-tenant: `default`; multi-tenant: the `tenantId` claim of the verified
//! principal) → handler (`{id}` → headers → body → validation → use case). Probes,
//! `/openapi.json` and the API page (`/swagger/`, and `/` redirecting to it) are mounted
//! outside authentication. Unknown path → 404, wrong method → 405, both shape D.
//!
//! ## Error bodies
//!
//! See [`error`]: A `{code:"FET-nnnn",title,message}`; B = A + `fields` (+ `entityType`);
//! C `{code:<status>,title,message}` (test, schema, 429); D `{code:<status>,
//! title:"request_failed",message}`; E perimeter `{code:"MISSING_TOKEN"|…,title,message}`;
//! and the 422 of validate-schema `{title,code:"FET-1060",message,errors:[…]}`.
//!
//! ## Differences from the reference
//!
//! * **Verified tokens only.** The tenant comes from a JWT whose signature, `exp` and
//!   `nbf` were verified ([`JwtAuthenticator`], HS256 or RS256) or from claims the host
//!   verified ([`ClaimsAuthenticator`]). The reference read `tenantId` from an unverified
//!   token. A token that fails verification is 401 `INVALID_TOKEN` `Authorization token
//!   is invalid or expired`.
//! * **`Retry-After`** accompanies the 429 of connection tests.
//! * **`resultFormat`** (`"v1"` | `"v2"` | `"parquet"`) may be sent in the create-job body; it is
//!   stored in the job and the message, and is part of the dedup hash when present.
//!   `GET /v1/fetcher/{id}` adds `resultFormat` to completed jobs.
//! * **Body limit** 1 MiB by default (configurable; the reference's framework used 4 MiB).
//! * **Empty PATCH password** is rejected (400 `FET-0402`; docs/api.md, "Differences from the reference").
//! * **Date/sort error messages** name `startDate`/`endDate`/`sortOrder` (codes unchanged).
//! * **`FET-0405`** names the offending parameter instead of `%!v(MISSING)`.
//! * **`metadata: {}`** is omitted from every response (never echoed).
//! * **`ssl.key`** is accepted but not stored (no connector uses client keys, and a
//!   private key must not sit unencrypted in the record).
//! * **`/readyz/tenant/{id}`** in multi-tenant mode runs the shared checks (tenants share
//!   the deployment's stores here) and adds `tenant_id`; an invalid id is 400.
//! * **The SSRF dial-layer check** (multi-tenant) runs before every test, discovery and
//!   job connectivity check through [`fetcher_connectors::HostPolicy::target`], so a
//!   blocked host is 400 `FET-0414` even though the engine hides the connector's reason.
//! * **Soft delete** is the connection store's concern; the in-memory store deletes.
//! * **Internal datasources** are whatever the connection store returns under the reserved
//!   names (`midaz_onboarding`, `midaz_transaction`, `plugin_crm`, `demo_sqlite`) without
//!   an API identity; they skip ownership/connectivity checks and cannot be patched,
//!   deleted or assigned. Not yet done: listing them (they carry no `createdAt`, so the
//!   date window hides them; the reference prepends them on page 1) and the
//!   deterministic UUID v5 ids (docs/datasources.md, "Internal datasources") (the store's concern).

pub mod auth;
pub mod connections;
pub mod error;
pub mod extract;
pub mod fetcher;
pub mod jobs_list;
pub mod paging;
pub mod probes;
pub mod schedules;
pub mod syncs;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fetcher_connectors::HostPolicy;
use fetcher_engine::{Engine, TenantContext};
use tokio::sync::OnceCell;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{
    AuthError, Authenticator, ClaimsAuthenticator, JwtAuthenticator, JwtConfigError,
    MIN_HS256_SECRET_BYTES, NoAuthentication, Principal, VerifiedClaims,
};
pub use error::ApiError;
pub use extract::RequestId;
pub use probes::ReadinessProbe;

use fetcher_host::jobs::{JobService, JobSettings};
use fetcher_host::ports::{JobQueue, JobStore, RateLimiter};

/// Settings of the API.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `MULTI_TENANT_ENABLED`: tenant from the verified `tenantId` claim, SSRF guard on.
    pub multi_tenant: bool,
    /// Which files `SQLITE` datasources may name (single-tenant only; anything else is
    /// `FET-0414` at create and patch). `fetcher serve` confines them to its
    /// `--sqlite-dir`; Lambda refuses them: its functions share no disk, and a path would
    /// name the function's own files. Default: none.
    pub sqlite_files: fetcher_connectors::SqliteFiles,
    /// Host safety on API-supplied hosts also in single-tenant mode (the Lambda's
    /// default); multi-tenant mode always has it.
    pub guard_hosts: bool,
    /// Private networks host safety admits (docs/operations.md, "Private networks"): the
    /// same list the dial-layer policy holds.
    pub private_networks: fetcher_connectors::PrivateNetworks,
    /// Require a verified principal on business routes even in single-tenant mode.
    /// Multi-tenant mode always requires one.
    pub require_auth: bool,
    /// Require `X-Product-Name` on every business route (docs/api.md, "Products"); off,
    /// a caller naming no product is answered as the reference answers it.
    pub require_product: bool,
    /// Maximum request body (bytes).
    pub body_limit: usize,
    /// Largest connection `metadata`, JSON-encoded (bytes): 400 `FET-0411` above it.
    pub max_metadata_bytes: usize,
    /// Connections one tenant may hold: 409 `FET-1022` at create beyond it (0 = no cap).
    pub max_connections_per_tenant: usize,
    /// `/version` and `/readyz` `version`.
    pub version: String,
    /// `local` | `saas` | `byoc`.
    pub deployment_mode: String,
    pub paging: paging::PagingConfig,
    /// Connection tests allowed per connection per window (10 per 60 s).
    pub test_rate_limit: u32,
    pub test_rate_window: Duration,
    /// Overall timeout of a connection test (10 s).
    pub test_timeout: Duration,
    /// Schema discovery timeout (30 s).
    pub schema_timeout: Duration,
    /// Default per-probe timeout of `/readyz` (2 s).
    pub readiness_timeout: Duration,
    pub jobs: JobSettings,
    /// Browser origins allowed to call the API cross-origin (CORS), exact
    /// `scheme://host[:port]` values. Empty (the default): no CORS headers at all, so no
    /// web page of another origin can read an answer (docs/operations.md, "serve
    /// settings").
    pub cors_origins: Vec<axum::http::HeaderValue>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            cors_origins: Vec::new(),
            multi_tenant: false,
            sqlite_files: fetcher_connectors::SqliteFiles::Nowhere,
            require_auth: false,
            require_product: false,
            guard_hosts: false,
            private_networks: fetcher_connectors::PrivateNetworks::none(),
            // docs/api.md "Limits": request bodies up to 4 MiB.
            body_limit: 4 * 1024 * 1024,
            max_metadata_bytes: 16 * 1024,
            max_connections_per_tenant: 1000,
            version: "0.0.0".into(),
            deployment_mode: "local".into(),
            paging: paging::PagingConfig::default(),
            test_rate_limit: 10,
            test_rate_window: connections::TEST_RATE_WINDOW,
            test_timeout: Duration::from_secs(10),
            // Inside API Gateway's 30 s integration limit, with room for the rest.
            schema_timeout: Duration::from_secs(20),
            readiness_timeout: Duration::from_secs(2),
            jobs: JobSettings::default(),
        }
    }
}

/// What the API needs from its host.
pub struct AppDeps {
    /// Built with encrypted persistence and [`fetcher_host::jobs::JobStoreActiveChecker`]
    /// as its active-execution checker.
    pub engine: Engine,
    pub job_store: Arc<dyn JobStore>,
    pub job_queue: Arc<dyn JobQueue>,
    pub rate_limiter: Arc<dyn RateLimiter>,
    /// The master keys job messages are signed with (the internal HMAC key), read per
    /// job: a rotation reaches new messages within the provider's refresh.
    pub keys: Arc<dyn fetcher_host::ports::KeyProvider>,
    pub authenticator: Arc<dyn Authenticator>,
    pub probes: Vec<Arc<dyn ReadinessProbe>>,
    /// The dial-layer SSRF guard; `None` means `HostPolicy::multi_tenant()` in
    /// multi-tenant mode and no guard otherwise.
    pub host_policy: Option<HostPolicy>,
    /// Schedules of syncs (docs/api.md, "Schedules").
    pub schedule_store: Arc<dyn fetcher_host::ports::ScheduleStore>,
    /// Where the scheduler's `schedule.paused` and `sync.stale` events go; `None`: nowhere
    /// (a host that runs no scheduler).
    pub sync_events: Option<Arc<dyn fetcher_host::ports::EventPublisher>>,
}

struct Inner {
    engine: Engine,
    jobs: JobService,
    schedules: fetcher_host::schedules::ScheduleService,
    rate_limiter: Arc<dyn RateLimiter>,
    authenticator: Arc<dyn Authenticator>,
    probes: Vec<Arc<dyn ReadinessProbe>>,
    host_policy: Option<HostPolicy>,
    config: ApiConfig,
    metrics: probes::Metrics,
    draining: AtomicBool,
    self_probe: OnceCell<bool>,
}

/// Shared state of the router. Cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

impl AppState {
    pub fn new(deps: AppDeps, config: ApiConfig) -> AppState {
        let host_policy = deps.host_policy.or_else(|| {
            config.multi_tenant.then(|| {
                HostPolicy::multi_tenant().with_private_networks(config.private_networks.clone())
            })
        });
        let schedules = fetcher_host::schedules::ScheduleService {
            store: deps.schedule_store,
            jobs: deps.job_store.clone(),
            events: deps.sync_events,
        };
        let jobs = JobService {
            engine: deps.engine.clone(),
            store: deps.job_store,
            queue: deps.job_queue,
            keys: deps.keys,
            host_policy: host_policy.clone(),
            settings: config.jobs.clone(),
        };
        AppState(Arc::new(Inner {
            engine: deps.engine,
            jobs,
            schedules,
            rate_limiter: deps.rate_limiter,
            authenticator: deps.authenticator,
            probes: deps.probes,
            host_policy,
            config,
            metrics: probes::Metrics::default(),
            draining: AtomicBool::new(false),
            self_probe: OnceCell::new(),
        }))
    }

    /// `/readyz` answers 503 from now on (graceful shutdown).
    pub fn start_draining(&self) {
        self.0.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::SeqCst)
    }

    /// Runs the start-up self-probe once (later calls return the first result); `/health`
    /// reports it. Hosts call this at start-up; otherwise the first `/health` runs it.
    pub async fn self_probe(&self) -> bool {
        *self
            .0
            .self_probe
            .get_or_init(|| probes::self_probe_checks(self))
            .await
    }

    /// The key provider job messages are signed with.
    pub fn keys(&self) -> Arc<dyn fetcher_host::ports::KeyProvider> {
        self.0.jobs.keys.clone()
    }

    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    pub fn jobs(&self) -> &JobService {
        &self.0.jobs
    }

    pub fn schedules(&self) -> &fetcher_host::schedules::ScheduleService {
        &self.0.schedules
    }

    pub fn config(&self) -> &ApiConfig {
        &self.0.config
    }

    pub fn metrics(&self) -> &probes::Metrics {
        &self.0.metrics
    }

    pub(crate) fn rate_limiter(&self) -> &Arc<dyn RateLimiter> {
        &self.0.rate_limiter
    }

    pub(crate) fn host_policy(&self) -> Option<&HostPolicy> {
        self.0.host_policy.as_ref()
    }

    pub(crate) fn probes(&self) -> &[Arc<dyn ReadinessProbe>] {
        &self.0.probes
    }

    pub(crate) fn openapi_json(&self) -> &'static serde_json::Value {
        static DOC: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        DOC.get_or_init(|| serde_json::to_value(openapi()).expect("OpenAPI document is JSON"))
    }
}

/// The caller's tenant and request id, resolved by the business pipeline.
#[derive(Debug, Clone)]
pub struct Scope {
    pub tenant: TenantContext,
    pub request_id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Scope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Scope>()
            .cloned()
            .ok_or_else(ApiError::internal)
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Fetcher API", description = "Connections, schema discovery and extraction jobs (api.md)."),
    tags((name = "fetcher", description = "Extraction jobs"), (name = "connections", description = "Connections"), (name = "probes", description = "Health, readiness, metrics, version"))
)]
struct ApiDoc;

fn business_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(fetcher::create_job, jobs_list::list_jobs))
        .routes(routes!(fetcher::get_job))
        .routes(routes!(fetcher::cancel_job))
        .routes(routes!(syncs::list_syncs))
        .routes(routes!(syncs::get_sync, syncs::delete_sync))
        .routes(routes!(syncs::reset_sync))
        .routes(routes!(
            schedules::put_schedule,
            schedules::get_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(schedules::pause_schedule))
        .routes(routes!(schedules::resume_schedule))
        .routes(routes!(
            connections::list_connections,
            connections::create_connection
        ))
        .routes(routes!(connections::validate_schema))
        .routes(routes!(connections::list_unassigned))
        .routes(routes!(
            connections::get_connection,
            connections::update_connection,
            connections::delete_connection
        ))
        .routes(routes!(connections::test_connection))
        .routes(routes!(connections::get_schema))
        .routes(routes!(connections::assign_connection))
}

fn probe_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(probes::health))
        .routes(routes!(probes::readyz))
        .routes(routes!(probes::readyz_tenant))
        .routes(routes!(probes::metrics))
        .routes(routes!(probes::version))
        .routes(routes!(probes::openapi))
}

/// The OpenAPI 3.1 document of every route (generated from the handlers).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = business_routes().split_for_parts();
    let (_, probes_doc) = probe_routes().split_for_parts();
    doc.merge(probes_doc);
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc
}

/// The whole API as an axum router.
pub fn router(state: AppState) -> Router {
    let (business, _) = business_routes().split_for_parts();
    let business = business.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        business_pipeline,
    ));
    let (probe, _) = probe_routes().split_for_parts();
    let limit = state.config().body_limit;
    let cors = cors(&state.config().cors_origins);
    business
        .merge(probe)
        .merge(api_page())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            record_metrics,
        ))
        .layer(axum::middleware::from_fn(request_span))
        .layer(axum::middleware::from_fn(header_limit))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(DefaultBodyLimit::max(limit))
        .layer(cors)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::internal().into_response()
        }))
        .with_state(state)
}

/// The API page: Swagger UI at `/swagger/` from assets built into the binary, reading
/// `/openapi.json`; `/` leads to it. Outside authentication, as `/openapi.json` is.
fn api_page() -> Router<AppState> {
    let ui = utoipa_swagger_ui::SwaggerUi::new("/swagger")
        .config(utoipa_swagger_ui::Config::new(["/openapi.json"]).try_it_out_enabled(true));
    Router::from(ui).route(
        "/",
        axum::routing::get(|| async { axum::response::Redirect::to("/swagger/") }),
    )
}

/// CORS for exactly `origins` (none: no CORS headers, the browser's same-origin rule
/// stands), with the methods and headers the API takes.
fn cors(
    origins: &[axum::http::HeaderValue],
) -> tower::util::Either<tower_http::cors::CorsLayer, tower::layer::util::Identity> {
    use axum::http::{Method, header};
    if origins.is_empty() {
        return tower::util::Either::Right(tower::layer::util::Identity::new());
    }
    tower::util::Either::Left(
        tower_http::cors::CorsLayer::new()
            .allow_origin(origins.to_vec())
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::HeaderName::from_static("x-product-name"),
                header::HeaderName::from_static("x-request-id"),
            ]),
    )
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::framework(
        axum::http::StatusCode::NOT_FOUND,
        format!("Cannot {method} {}", uri.path()),
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::framework(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "Method Not Allowed",
    )
}

async fn record_metrics(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let res = next.run(req).await;
    st.metrics()
        .record_request(&method, &route, res.status().as_u16(), started.elapsed());
    res
}

/// The largest request head (header names and values) the API reads: 64 KiB.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Oversized request heads get the documented error shape (431), like every other
/// rejection the server makes itself. Hosts give their HTTP server a larger buffer than
/// this (`fetcher serve`: 4 MiB), so such heads reach the router instead of getting the
/// server's own body-less 431.
async fn header_limit(req: Request, next: Next) -> Response {
    let size: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if size > MAX_HEADER_BYTES {
        return ApiError::framework(
            axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "Request Header Fields Too Large",
        )
        .into_response();
    }
    next.run(req).await
}

/// Every error answers a JSON body: a rejection the framework writes as text (a path
/// parameter that is not UTF-8, say) becomes the framework shape (D) with its status,
/// keeping the response's other headers.
async fn json_errors(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    let is_json = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
    if status.as_u16() < 400 || is_json {
        return res;
    }
    let (mut parts, _) = res.into_parts();
    let mut fixed =
        ApiError::framework(status, status.canonical_reason().unwrap_or("Error")).into_response();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.remove(axum::http::header::CONTENT_TYPE);
    for (k, v) in parts.headers.iter() {
        fixed.headers_mut().entry(k).or_insert(v.clone());
    }
    fixed
}

/// Every log line of a request carries its (sanitised) `X-Request-Id`. The span is the
/// request's in a trace (docs/operations.md, "Traces"): named by its route, never its
/// path's values; it continues a caller's valid `traceparent`.
async fn request_span(mut req: Request, next: Next) -> Response {
    let id = extract::request_id(req.headers());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str());
    let span = tracing::info_span!(
        "request",
        otel.name = %format!("{} {route}", req.method()),
        otel.kind = "server",
        request_id = %id,
        http.request.method = %req.method(),
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(parent) = req
        .headers()
        .get(fetcher_telemetry::context::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(fetcher_telemetry::TraceParent::parse)
    {
        parent.adopt(&span);
    }
    req.extensions_mut().insert(RequestId(id));
    let res = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    span.record("http.response.status_code", res.status().as_u16());
    res
}

/// Request id → authentication → tenant, then the handler; the request id is echoed.
async fn business_pipeline(State(st): State<AppState>, req: Request, next: Next) -> Response {
    // The id the request span chose (one id per request, also when the client sent none).
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_else(|| extract::request_id(req.headers()));
    let (mut parts, body) = req.into_parts();
    let mut res = match resolve_tenant(&st, &parts) {
        Ok(tenant_id) => {
            let tenant = TenantContext {
                tenant_id,
                request_id: request_id.clone(),
            };
            parts.extensions.insert(Scope {
                tenant,
                request_id: request_id.clone(),
            });
            parts.extensions.insert(RequestId(request_id.clone()));
            next.run(Request::from_parts(parts, body)).await
        }
        Err(e) => e.into_response(),
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        res.headers_mut().insert("x-request-id", v);
    }
    res
}

fn resolve_tenant(st: &AppState, parts: &Parts) -> Result<String, ApiError> {
    let principal =
        st.0.authenticator
            .authenticate(parts)
            .map_err(|e| e.to_api_error())?;
    let cfg = st.config();
    if cfg.multi_tenant {
        return auth::tenant_of(principal.as_ref());
    }
    if cfg.require_auth && principal.is_none() {
        return Err(ApiError::perimeter(
            axum::http::StatusCode::UNAUTHORIZED,
            "MISSING_TOKEN",
            "Unauthorized",
            "Authorization token is required",
        ));
    }
    Ok(fetcher_engine::tenant::DEFAULT_TENANT.to_owned())
}
