//! `/health`, `/readyz`, `/readyz/tenant/{id}`, `/metrics`, `/version` (docs/api.md, "Probes"), and the
//! metrics behind `/metrics` (the `metrics` facade, rendered by its Prometheus exporter).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use fetcher_engine::Timestamp;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use super::AppState;

pub use fetcher_host::ports::ReadinessProbe;

/// One check's outcome.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CheckResult {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The git revision this binary was built from (`unknown` without one).
pub const REVISION: &str = fetcher_telemetry::build::REVISION;

/// When this revision was built (RFC 3339).
pub fn built_at() -> String {
    let secs = i128::from(fetcher_telemetry::build::built_at_unix());
    Timestamp::from_unix_nanos(secs * 1_000_000_000).to_string()
}

/// `/readyz` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessResponse {
    pub status: &'static str,
    pub checks: BTreeMap<String, CheckResult>,
    pub version: String,
    /// The git revision the build came from (`unknown` when it had none).
    pub revision: &'static str,
    /// When the build was made (RFC 3339).
    #[serde(rename = "builtAt")]
    pub built_at: String,
    pub deployment_mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

const DURATION_BUCKETS_MS: [f64; 11] = [
    1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0,
];
const REQUEST_BUCKETS_S: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

const REQUESTS: &str = "http_requests_total";
const REQUEST_DURATION: &str = "http_request_duration_seconds";
const CHECK_DURATION: &str = "readyz_check_duration_ms";
const CHECK_STATUS: &str = "readyz_check_status";
const SELFPROBE: &str = "selfprobe_result";
const SYNC_AGE: &str = "fetcher_sync_age_seconds";
const SYNC_STALE: &str = "fetcher_sync_stale";
const SYNCS_SCHEDULED: &str = "fetcher_syncs_scheduled";
const SYNCS_STALE: &str = "fetcher_syncs_stale";
const SYNC_LOG_RETAINED: &str = "fetcher_sync_log_retained_bytes";

/// This router's metrics: the `metrics` facade over a Prometheus recorder. The recorder
/// belongs to the router (not installed process-wide), so several routers in one process
/// (tests, or a host serving two) never mix their series; recording goes through
/// [`metrics::with_local_recorder`].
pub struct Metrics {
    recorder: metrics_exporter_prometheus::PrometheusRecorder,
}

impl Default for Metrics {
    fn default() -> Self {
        use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(REQUEST_DURATION.into()), &REQUEST_BUCKETS_S)
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(CHECK_DURATION.into()), &DURATION_BUCKETS_MS)
            })
            .expect("bucket lists are non-empty")
            .build_recorder();
        metrics::with_local_recorder(&recorder, || {
            metrics::describe_counter!(REQUESTS, "HTTP requests by method, route and status.");
            metrics::describe_histogram!(
                REQUEST_DURATION,
                "HTTP request latency by method and route."
            );
            metrics::describe_histogram!(
                CHECK_DURATION,
                "Duration of each readiness check in milliseconds."
            );
            metrics::describe_counter!(CHECK_STATUS, "Count of readiness check outcomes.");
            metrics::describe_gauge!(
                SELFPROBE,
                "Start-up self-probe result per dependency (1 up, 0 down)."
            );
        });
        Metrics { recorder }
    }
}

/// The metrics label of a request method: a standard method's name, else `other`.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method as M;
    match *method {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::PATCH => "PATCH",
        M::DELETE => "DELETE",
        M::OPTIONS => "OPTIONS",
        M::TRACE => "TRACE",
        M::CONNECT => "CONNECT",
        _ => "other",
    }
}

impl Metrics {
    fn record(&self, f: impl FnOnce()) {
        metrics::with_local_recorder(&self.recorder, f);
    }

    /// One finished HTTP request (`route` is the matched template, never the raw path).
    /// Labels come from closed sets, so no client can grow the series: the method is one
    /// of the standard ones or `other`.
    pub fn record_request(
        &self,
        method: &axum::http::Method,
        route: &str,
        status: u16,
        elapsed: Duration,
    ) {
        let method = method_label(method);
        let route = route.to_owned();
        self.record(|| {
            metrics::counter!(REQUESTS, "method" => method, "route" => route.clone(), "status" => status.to_string())
                .increment(1);
            metrics::histogram!(REQUEST_DURATION, "method" => method, "route" => route)
                .record(elapsed.as_secs_f64());
        });
    }

    fn record_check(&self, dep: &str, status: &'static str, elapsed: Duration) {
        let dep = dep.to_owned();
        self.record(|| {
            metrics::histogram!(CHECK_DURATION, "dep" => dep.clone(), "status" => status)
                .record(elapsed.as_secs_f64() * 1000.0);
            metrics::counter!(CHECK_STATUS, "dep" => dep, "status" => status).increment(1);
        });
    }

    fn record_selfprobe(&self, dep: &str, up: bool) {
        let dep = dep.to_owned();
        self.record(|| metrics::gauge!(SELFPROBE, "dep" => dep).set(f64::from(u8::from(up))));
    }

    /// The freshness of the scheduled syncs (docs/api.md, "Freshness"): per sync its age
    /// and whether it is stale (labels `tenant`, `sync`: one series per scheduled sync, at
    /// most [`fetcher_host::schedules::FRESHNESS_LIMIT`]), and the totals; per table read
    /// from the log, the log its slot retained when the sync's last job began.
    pub fn record_sync_freshness(&self, syncs: &[fetcher_host::schedules::SyncFreshness]) {
        self.record(|| {
            for f in syncs {
                let labels = [("tenant", f.tenant_id.clone()), ("sync", f.sync_id.clone())];
                metrics::gauge!(SYNC_AGE, &labels).set(f.age_seconds as f64);
                metrics::gauge!(SYNC_STALE, &labels).set(f64::from(u8::from(f.stale)));
                for (config, table, bytes) in &f.log_retained {
                    let labels = [
                        ("tenant", f.tenant_id.clone()),
                        ("sync", f.sync_id.clone()),
                        ("config", config.clone()),
                        ("table", table.clone()),
                    ];
                    metrics::gauge!(SYNC_LOG_RETAINED, &labels).set(*bytes as f64);
                }
            }
            metrics::gauge!(SYNCS_SCHEDULED).set(syncs.len() as f64);
            metrics::gauge!(SYNCS_STALE).set(syncs.iter().filter(|f| f.stale).count() as f64);
        });
    }

    /// What the replication slots of a completed job's log reads retained when it began:
    /// the same per-table series as [`Metrics::record_sync_freshness`] sets for scheduled
    /// syncs, so every log sync has one from its first completed job on.
    pub fn record_log_retained(&self, slots: &[fetcher_host::pipeline::SlotRetained]) {
        self.record(|| {
            for s in slots {
                let labels = [
                    ("tenant", s.tenant_id.clone()),
                    ("sync", s.sync_id.clone()),
                    ("config", s.config.clone()),
                    ("table", s.table.clone()),
                ];
                metrics::gauge!(SYNC_LOG_RETAINED, &labels).set(s.bytes as f64);
            }
        });
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }
}

fn sanitise(message: &str) -> String {
    // Messages are service-written already; still mask `password=` pairs and URI
    // credentials defensively, and bound the length.
    let mut out = String::with_capacity(message.len());
    for word in message.split(' ') {
        if !out.is_empty() {
            out.push(' ');
        }
        if let Some(i) = word.to_ascii_lowercase().find("password=") {
            out.push_str(&word[..i + 9]);
            out.push_str("***");
        } else if let (Some(s), Some(a)) = (word.find("://"), word.find('@'))
            && a > s
        {
            out.push_str(&word[..s + 3]);
            out.push_str("***");
            out.push_str(&word[a..]);
        } else {
            out.push_str(word);
        }
    }
    out.chars().take(512).collect()
}

/// Runs every probe in parallel, each under its own timeout.
pub(crate) async fn run_checks(st: &AppState) -> BTreeMap<String, CheckResult> {
    let default_timeout = st.config().readiness_timeout;
    let futures = st.probes().iter().map(|p| async move {
        let started = Instant::now();
        let timeout = p.timeout().unwrap_or(default_timeout);
        let outcome = tokio::time::timeout(timeout, p.check()).await;
        let elapsed = started.elapsed();
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let result = match outcome {
            Ok(Ok(())) => CheckResult {
                status: "up",
                latency_ms: Some(ms),
                tls: p.tls(),
                error: None,
                reason: None,
            },
            Ok(Err(e)) => CheckResult {
                status: "down",
                latency_ms: None,
                tls: p.tls(),
                error: Some(sanitise(e.message())),
                reason: None,
            },
            Err(_) => CheckResult {
                status: "down",
                latency_ms: None,
                tls: p.tls(),
                error: Some(format!(
                    "check timeout: exceeded {} ms",
                    timeout.as_millis()
                )),
                reason: None,
            },
        };
        st.metrics().record_check(p.name(), result.status, elapsed);
        (p.name().to_owned(), result)
    });
    futures_util::future::join_all(futures)
        .await
        .into_iter()
        .collect()
}

fn readiness(
    st: &AppState,
    checks: BTreeMap<String, CheckResult>,
    tenant_id: Option<String>,
) -> Response {
    let healthy = checks
        .values()
        .all(|c| !matches!(c.status, "down" | "degraded"));
    let cfg = st.config();
    let body = ReadinessResponse {
        status: if healthy { "healthy" } else { "unhealthy" },
        checks,
        version: cfg.version.clone(),
        revision: REVISION,
        built_at: built_at(),
        deployment_mode: cfg.deployment_mode.clone(),
        tenant_id,
    };
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

fn draining(st: &AppState) -> Response {
    let checks = BTreeMap::from([(
        "draining".to_owned(),
        CheckResult {
            status: "down",
            latency_ms: None,
            tls: None,
            error: None,
            reason: Some("graceful drain in progress".into()),
        },
    )]);
    readiness(st, checks, None)
}

/// Liveness: the start-up self-probe (run once, on the first call if the host did not run
/// it with [`AppState::self_probe`]).
/// `/health`'s body.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct HealthBody {
    /// `healthy` or `unhealthy`.
    status: String,
    /// Why, when unhealthy.
    reason: Option<String>,
}

/// `/readyz/tenant/{id}`'s 400 body.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ProbeErrorBody {
    error: String,
    tenant_id: Option<String>,
}

#[utoipa::path(get, path = "/health", tag = "probes", responses((status = 200, body = HealthBody, description = "healthy"), (status = 503, body = HealthBody, description = "self-probe failed")))]
pub async fn health(State(st): State<AppState>) -> Response {
    if st.self_probe().await {
        Json(json!({"status": "healthy"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unhealthy", "reason": "self-probe failed"})),
        )
            .into_response()
    }
}

pub(crate) async fn self_probe_checks(st: &AppState) -> bool {
    let checks = run_checks(st).await;
    for (dep, c) in &checks {
        st.metrics().record_selfprobe(dep, c.status == "up");
    }
    checks
        .values()
        .all(|c| matches!(c.status, "up" | "skipped" | "n/a"))
}

/// Readiness: every dependency, in parallel; 503 while draining.
#[utoipa::path(get, path = "/readyz", tag = "probes", responses((status = 200, body = ReadinessResponse), (status = 503, body = ReadinessResponse)))]
pub async fn readyz(State(st): State<AppState>) -> Response {
    if st.is_draining() {
        return draining(&st);
    }
    let checks = run_checks(&st).await;
    readiness(&st, checks, None)
}

/// Per-tenant readiness (multi-tenant only). Tenants share the deployment's dependencies
/// here, so the tenant's body is the global checks plus `tenant_id`.
#[utoipa::path(get, path = "/readyz/tenant/{id}", tag = "probes", params(("id" = String, Path, description = "Tenant id")),
    responses((status = 200, body = ReadinessResponse), (status = 400, body = ProbeErrorBody, description = "single-tenant mode or invalid id"), (status = 503, body = ReadinessResponse)))]
pub async fn readyz_tenant(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    if !st.config().multi_tenant {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "multi-tenant mode is disabled"})),
        )
            .into_response();
    }
    if st.is_draining() {
        return draining(&st);
    }
    if !fetcher_engine::tenant::is_valid_tenant_id(&id) {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid tenant id", "tenant_id": id})),
        )
            .into_response();
    }
    let checks = run_checks(&st).await;
    readiness(&st, checks, Some(id))
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "probes", responses((status = 200, description = "Prometheus text", content_type = "text/plain")))]
pub async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics().render(),
    )
        .into_response()
}

/// Build version.
#[utoipa::path(get, path = "/version", tag = "probes", responses((status = 200, description = "{version, revision, builtAt, requestDate}")))]
pub async fn version(State(st): State<AppState>) -> Response {
    Json(
        json!({"version": st.config().version, "revision": REVISION, "builtAt": built_at(),
        "requestDate": Timestamp::now().to_string()}),
    )
    .into_response()
}

/// The OpenAPI document.
#[utoipa::path(get, path = "/openapi.json", tag = "probes", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi(State(st): State<AppState>) -> Response {
    Json(st.openapi_json().clone()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitising() {
        assert_eq!(
            sanitise("dial postgres://u:pw@h/db failed password=x"),
            "dial postgres://***@h/db failed password=***"
        );
        assert_eq!(sanitise(&"x".repeat(600)).len(), 512);
    }
}
