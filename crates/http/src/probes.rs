//! `/health`, `/readyz`, `/readyz/tenant/{id}`, `/metrics`, `/version` (docs/api.md, "Probes"), and the
//! small Prometheus registry behind `/metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;
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

/// `/readyz` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessResponse {
    pub status: &'static str,
    pub checks: BTreeMap<String, CheckResult>,
    pub version: String,
    pub deployment_mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

const DURATION_BUCKETS_MS: [f64; 11] = [
    1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0,
];
const REQUEST_BUCKETS_S: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

#[derive(Default)]
struct Histogram {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len()];
        }
        for (i, b) in bounds.iter().enumerate() {
            if v <= *b {
                self.buckets[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in bounds.iter().enumerate() {
            out.push_str(&format!(
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}\n",
                self.buckets.get(i).copied().unwrap_or(0)
            ));
        }
        out.push_str(&format!(
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}\n",
            self.count
        ));
        out.push_str(&format!("{name}_sum{{{labels}}} {}\n", self.sum));
        out.push_str(&format!("{name}_count{{{labels}}} {}\n", self.count));
    }
}

#[derive(Default)]
struct MetricsInner {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<(String, String), Histogram>,
    check_duration: BTreeMap<(String, &'static str), Histogram>,
    check_status: BTreeMap<(String, &'static str), u64>,
    selfprobe: BTreeMap<String, u8>,
}

/// In-process metrics, rendered as Prometheus text.
#[derive(Default)]
pub struct Metrics(Mutex<MetricsInner>);

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

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
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
        let mut m = self.0.lock().unwrap();
        *m.requests
            .entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
        m.latency
            .entry((method.to_owned(), route.to_owned()))
            .or_default()
            .observe(&REQUEST_BUCKETS_S, elapsed.as_secs_f64());
    }

    fn record_check(&self, dep: &str, status: &'static str, elapsed: Duration) {
        let mut m = self.0.lock().unwrap();
        m.check_duration
            .entry((dep.to_owned(), status))
            .or_default()
            .observe(&DURATION_BUCKETS_MS, elapsed.as_secs_f64() * 1000.0);
        *m.check_status.entry((dep.to_owned(), status)).or_default() += 1;
    }

    fn record_selfprobe(&self, dep: &str, up: bool) {
        self.0
            .lock()
            .unwrap()
            .selfprobe
            .insert(dep.to_owned(), u8::from(up));
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let m = self.0.lock().unwrap();
        let mut out = String::new();
        out.push_str("# HELP http_requests_total HTTP requests by method, route and status.\n# TYPE http_requests_total counter\n");
        for ((method, route, status), n) in &m.requests {
            out.push_str(&format!(
                "http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}\n",
                esc(method),
                esc(route)
            ));
        }
        out.push_str("# HELP http_request_duration_seconds HTTP request latency by method and route.\n# TYPE http_request_duration_seconds histogram\n");
        for ((method, route), h) in &m.latency {
            h.render(
                &mut out,
                "http_request_duration_seconds",
                &format!("method=\"{}\",route=\"{}\"", esc(method), esc(route)),
                &REQUEST_BUCKETS_S,
            );
        }
        out.push_str("# HELP readyz_check_duration_ms Duration of each readiness check in milliseconds.\n# TYPE readyz_check_duration_ms histogram\n");
        for ((dep, status), h) in &m.check_duration {
            h.render(
                &mut out,
                "readyz_check_duration_ms",
                &format!("dep=\"{}\",status=\"{status}\"", esc(dep)),
                &DURATION_BUCKETS_MS,
            );
        }
        out.push_str("# HELP readyz_check_status Count of readiness check outcomes.\n# TYPE readyz_check_status counter\n");
        for ((dep, status), n) in &m.check_status {
            out.push_str(&format!(
                "readyz_check_status{{dep=\"{}\",status=\"{status}\"}} {n}\n",
                esc(dep)
            ));
        }
        out.push_str("# HELP selfprobe_result Start-up self-probe result per dependency (1 up, 0 down).\n# TYPE selfprobe_result gauge\n");
        for (dep, v) in &m.selfprobe {
            out.push_str(&format!("selfprobe_result{{dep=\"{}\"}} {v}\n", esc(dep)));
        }
        out
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
#[utoipa::path(get, path = "/version", tag = "probes", responses((status = 200, description = "{version, requestDate}")))]
pub async fn version(State(st): State<AppState>) -> Response {
    Json(json!({"version": st.config().version, "requestDate": Timestamp::now().to_string()}))
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
