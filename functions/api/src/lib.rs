//! The API Lambda's logic, runtime-free so it is tested in-process: the service router
//! over the AWS adapters, and the bridge from API Gateway events to it.
//!
//! Authentication: API Gateway's JWT authorizer verifies the token; its claims (request
//! context `authorizer.jwt.claims`) are handed to the router as
//! [`VerifiedClaims`](fetcher_http::VerifiedClaims), read by
//! [`ClaimsAuthenticator`](fetcher_http::ClaimsAuthenticator). In multi-tenant
//! mode the tenant is the `tenantId` claim. Nothing is parsed from headers. A call without
//! verified claims is 401 unless the deployment opts out (`FETCHER_ALLOW_UNAUTHENTICATED`),
//! and every API-supplied host passes host safety unless it opts out
//! (`FETCHER_ALLOW_PRIVATE_HOSTS`); the template sets neither.

use std::sync::Arc;

pub use axum::Router;
use fetcher_aws::SqsJobQueue;
use fetcher_aws::host::{Host, HostConfig, Probe};
pub use fetcher_http::AppState;
use fetcher_http::{self as http, ApiConfig, AppDeps, VerifiedClaims};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Map, Value};
use tower::ServiceExt;

/// Builds the router (clients once per cold start). Loads the key ring (KMS decrypt):
/// the API signs job messages.
pub async fn router_from_config(
    config: HostConfig,
    sdk: &fetcher_aws::SdkConfig,
) -> Result<Router, String> {
    Ok(router_of(state_from_config(config, sdk).await?))
}

/// The router over a built state.
pub fn router_of(state: AppState) -> Router {
    http::router(state)
}

/// One scheduler tick (the `tick` function, invoked every minute by EventBridge
/// Scheduler): the schedules due at `now` run through the API's own job creation
/// (docs/api.md, "Schedules"). Answers what it did; a failure of the stores is an error
/// (the invocation fails, the scheduler's retry and the next minute come anyway).
///
/// Then the freshness of every scheduled sync: one EMF line (namespace `Fetcher`, the
/// stack's dimension) with `ScheduledSyncs`, `StaleSyncs` and `MaxSyncAgePeriods` (the
/// worst sync's age in periods of its schedule), and the worst five by name in a log line
/// (`stalest syncs`), never as metric dimensions.
pub async fn tick(
    state: &AppState,
    stack: &str,
    now: fetcher_engine::Timestamp,
) -> Result<Value, String> {
    let report = http::schedules::run_due(state, now)
        .await
        .map_err(|e| e.log_detail())?;
    let mut fresh = http::schedules::record_freshness(state, now)
        .await
        .map_err(|e| e.log_detail())?;
    let periods = |f: &fetcher_host::schedules::SyncFreshness| {
        f.age_seconds as f64 / f.period_seconds.max(1) as f64
    };
    fresh.sort_by(|a, b| periods(b).total_cmp(&periods(a)));
    let stale = fresh.iter().filter(|f| f.stale).count();
    println!(
        "{}",
        fetcher_aws::host::emf_line(
            stack,
            "tick",
            &[
                ("ScheduledSyncs", "Count", fresh.len() as f64),
                ("StaleSyncs", "Count", stale as f64),
                (
                    "MaxSyncAgePeriods",
                    "None",
                    fresh.first().map_or(0.0, periods)
                ),
            ],
        )
    );
    let worst: Vec<Value> = fresh
        .iter()
        .take(5)
        .map(|f| {
            serde_json::json!({"tenantId": f.tenant_id, "syncId": f.sync_id, "ageSeconds": f.age_seconds,
                "periodSeconds": f.period_seconds, "stale": f.stale})
        })
        .collect();
    if stale > 0 {
        let worst = Value::Array(worst).to_string();
        tracing::warn!(stale, worst = %worst, "stalest syncs");
    }
    tracing::info!(
        created = report.created,
        skipped = report.skipped,
        failed = report.failed,
        lost = report.lost,
        paused = report.paused.len(),
        "scheduler tick"
    );
    Ok(serde_json::json!({
        "created": report.created,
        "skipped": report.skipped,
        "failed": report.failed,
        "lost": report.lost,
        "paused": report.paused.len(),
        "stale": stale,
    }))
}

/// The API's state over the AWS adapters: what the router serves and the scheduler tick
/// runs on.
pub async fn state_from_config(
    config: HostConfig,
    sdk: &fetcher_aws::SdkConfig,
) -> Result<AppState, String> {
    let queue_url = config
        .queue_url
        .clone()
        .ok_or_else(|| "FETCHER_QUEUE_URL is not set".to_owned())?;
    let multi_tenant = config.multi_tenant;
    let require_auth = config.require_auth;
    let require_product = config.require_product;
    let guard_hosts = config.guard_hosts;
    let private_networks = config.private_networks.clone();
    let bus = config
        .event_bus
        .clone()
        .map(|bus| (bus, config.event_source.clone()));
    let host = Host::build(config, sdk)?;
    // The tick's `schedule.paused` and `sync.stale` go to the bus when the function has one
    // (the tick does; the API creates no event).
    let sync_events = bus.map(|(bus, source)| {
        Arc::new(fetcher_aws::EventBridgePublisher::new(
            host.clients.events.clone(),
            bus,
            source,
        )) as Arc<dyn fetcher_host::ports::EventPublisher>
    });
    // Checked now: a function whose master key cannot be read, or is not the one the
    // table's data was sealed with, must fail its cold start.
    host.verify_master_key().await?;
    let queue = SqsJobQueue::new(host.clients.sqs.clone(), queue_url);
    let mut probes = host.probes.clone();
    probes.push(Arc::new(Probe::Sqs(queue.clone())));
    probes.push(Arc::new(Probe::Keys(host.ports.keys.clone())));
    let state = AppState::new(
        AppDeps {
            engine: host.engine.clone(),
            job_store: host.ports.jobs.clone(),
            job_queue: Arc::new(queue),
            rate_limiter: Arc::new(host.store.clone()),
            keys: host.ports.keys.clone(),
            authenticator: Arc::new(http::ClaimsAuthenticator),
            probes,
            host_policy: Some(host.policy.clone()),
            schedule_store: Arc::new(host.store.clone()),
            sync_events,
        },
        ApiConfig {
            multi_tenant,
            // Secure by default: no verified claims, no service (docs/api.md).
            require_auth,
            require_product,
            guard_hosts,
            private_networks,
            // `sqlite_files` stays at its default, none: the functions share no disk.
            version: env!("CARGO_PKG_VERSION").into(),
            deployment_mode: "saas".into(),
            ..ApiConfig::default()
        },
    );
    Ok(state)
}

/// The JWT authorizer's claims of an API Gateway request, if any.
pub fn authorizer_claims(req: &Request) -> Option<Map<String, Value>> {
    let claims = match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx.authorizer.as_ref()?.jwt.as_ref()?.claims.clone(),
        RequestContext::ApiGatewayV1(ctx) => ctx
            .authorizer
            .fields
            .get("claims")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| v.to_string()),
                        )
                    })
                    .collect()
            })?,
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    Some(
        claims
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

/// Handles one API Gateway request with the router.
pub async fn handle(
    router: Router,
    req: Request,
) -> Result<Response<Body>, std::convert::Infallible> {
    let claims = authorizer_claims(&req);
    let (mut parts, body) = req.into_parts();
    if let Some(claims) = claims {
        parts.extensions.insert(VerifiedClaims(claims));
    }
    let bytes: Vec<u8> = match body {
        Body::Empty => Vec::new(),
        Body::Text(t) => t.into_bytes(),
        Body::Binary(b) => b,
        #[allow(unreachable_patterns)]
        _ => Vec::new(),
    };
    let req = axum::http::Request::from_parts(parts, axum::body::Body::from(bytes));
    let res = router.oneshot(req).await.unwrap_or_else(|e| match e {});
    let (parts, body) = res.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let body = if bytes.is_empty() {
        Body::Empty
    } else {
        match String::from_utf8(bytes.to_vec()) {
            Ok(text) => Body::Text(text),
            Err(_) => Body::Binary(bytes.to_vec()),
        }
    };
    Ok(Response::from_parts(parts, body))
}
