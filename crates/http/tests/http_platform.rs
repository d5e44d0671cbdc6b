//! Cross-cutting behaviour: framework errors, body and head limits, probes, metrics,
//! version, the OpenAPI document and the documented responses. Authentication and tenancy
//! are in `http_auth.rs`, host safety and SQLite files in `http_host_safety.rs`.

mod http_support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use fetcher_engine::BoxFuture;
use fetcher_host::ServiceError;
use fetcher_http::{ApiConfig, ClaimsAuthenticator, ReadinessProbe};
use http_support::*;
use serde_json::json;

#[tokio::test]
async fn framework_errors() {
    let h = harness();
    let r = h.get("/v1/nope").await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::NOT_FOUND,
            json!({"code": 404, "title": "request_failed", "message": "Cannot GET /v1/nope"})
        )
    );
    let r = h.call(Method::PUT, "/v1/fetcher", &[], None).await;
    assert_eq!(
        (r.status, r.json()["title"].as_str(), r.code()),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            Some("request_failed"),
            json!(405)
        )
    );
    // The contract's limit is 4 MiB: a 2 MiB body is read (and judged on its content), a
    // body over 4 MiB is refused unread, on every route that takes one.
    let sized = |n: usize| format!(r#"{{"metadata":{{"source":"{}"}}}}"#, "x".repeat(n));
    for uri in ["/v1/fetcher", "/v1/management/connections/validate-schema"] {
        let r = h
            .raw(
                Method::POST,
                uri,
                &[
                    ("content-type", "application/json"),
                    ("x-product-name", "p"),
                ],
                sized(2 * 1024 * 1024),
            )
            .await;
        assert_ne!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{uri}");
    }
    let big = sized(4 * 1024 * 1024 + 10);
    for uri in ["/v1/fetcher", "/v1/management/connections/validate-schema"] {
        let r = h
            .raw(
                Method::POST,
                uri,
                &[
                    ("content-type", "application/json"),
                    ("x-product-name", "p"),
                ],
                big.clone(),
            )
            .await;
        assert_eq!(
            (r.status, r.json()),
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"code": 413, "title": "request_failed", "message": "Request Entity Too Large"})
            ),
            "{uri}"
        );
    }
    // Business routes echo a (sanitised) request id; no CORS unless origins are allowed.
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("x-request-id", "  abc-1  ")],
            None,
        )
        .await;
    assert_eq!(r.headers["x-request-id"], "abc-1");
    let r = h
        .raw(
            Method::OPTIONS,
            "/v1/fetcher",
            &[
                ("origin", "https://x.example"),
                ("access-control-request-method", "POST"),
            ],
            "",
        )
        .await;
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    let allowed = harness_with(Options {
        config: ApiConfig {
            cors_origins: vec![axum::http::HeaderValue::from_static("https://app.example")],
            ..Default::default()
        },
        ..Options::default()
    });
    for (origin, answered) in [("https://app.example", true), ("https://x.example", false)] {
        let r = allowed
            .raw(
                Method::OPTIONS,
                "/v1/fetcher",
                &[
                    ("origin", origin),
                    ("access-control-request-method", "POST"),
                ],
                "",
            )
            .await;
        assert_eq!(
            r.headers
                .get("access-control-allow-origin")
                .map(|v| v.to_str().unwrap()),
            answered.then_some(origin),
            "{origin}"
        );
    }
}

struct Probe(&'static str, Result<(), &'static str>, std::time::Duration);

impl ReadinessProbe for Probe {
    fn name(&self) -> &str {
        self.0
    }
    fn check(&self) -> BoxFuture<'_, Result<(), ServiceError>> {
        let out = self.1.map_err(ServiceError::unavailable);
        let wait = self.2;
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            out
        })
    }
    fn timeout(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_millis(200))
    }
    fn tls(&self) -> Option<bool> {
        Some(false)
    }
}

fn probes(list: Vec<Probe>) -> Vec<Arc<dyn ReadinessProbe>> {
    list.into_iter()
        .map(|p| Arc::new(p) as Arc<dyn ReadinessProbe>)
        .collect()
}

#[tokio::test]
async fn probes_health_readiness_draining() {
    let fast = std::time::Duration::ZERO;
    let h = harness_with(Options {
        probes: probes(vec![
            Probe("sqlite", Ok(()), fast),
            Probe("queue", Ok(()), fast),
        ]),
        ..Default::default()
    });
    assert_eq!(h.get("/health").await.json(), json!({"status": "healthy"}));
    let r = h.get("/readyz").await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "builtAt",
            "checks",
            "deployment_mode",
            "revision",
            "status",
            "version"
        ]
    );
    // The build's identity: this checkout's revision (or `unknown` without git) and when.
    let revision = v["revision"].as_str().unwrap();
    assert!(
        revision == "unknown"
            || (revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())),
        "{revision}"
    );
    assert!(fetcher_engine::Timestamp::parse(v["builtAt"].as_str().unwrap()).is_some());
    assert_eq!(
        (v["status"].as_str(), v["deployment_mode"].as_str()),
        (Some("healthy"), Some("local"))
    );
    assert_eq!(v["checks"]["sqlite"]["status"], "up");
    assert_eq!(v["checks"]["sqlite"]["tls"], false);
    assert!(v["checks"]["sqlite"]["latency_ms"].is_u64());
    let r = h.get("/readyz/tenant/acme").await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "multi-tenant mode is disabled"})
        )
    );
    h.state.start_draining();
    let r = h.get("/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.json()["checks"],
        json!({"draining": {"status": "down", "reason": "graceful drain in progress"}})
    );
    // Metrics carry the readiness families, the self-probe and the request counters.
    let m = h.get("/metrics").await;
    assert!(
        m.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    for needle in [
        "# HELP readyz_check_duration_ms",
        "# HELP readyz_check_status",
        "# HELP selfprobe_result",
        "selfprobe_result{dep=\"sqlite\"} 1",
        "http_requests_total{method=\"GET\",route=\"/readyz\",status=\"200\"} 1",
        "http_request_duration_seconds_bucket",
    ] {
        assert!(m.text.contains(needle), "{needle}\n{}", m.text);
    }
    let v = h.get("/version").await.json();
    assert_eq!(v["version"], "0.0.0");
    assert_eq!(v["revision"], revision);
    assert!(fetcher_engine::Timestamp::parse(v["builtAt"].as_str().unwrap()).is_some());
    assert!(fetcher_engine::Timestamp::parse(v["requestDate"].as_str().unwrap()).is_some());
}

#[tokio::test]
async fn failing_and_slow_probes() {
    let h = harness_with(Options {
        config: ApiConfig {
            multi_tenant: true,
            ..Default::default()
        },
        authenticator: Arc::new(ClaimsAuthenticator),
        probes: probes(vec![
            Probe(
                "store",
                Err("store unreachable at postgres://u:pw@h/db"),
                std::time::Duration::ZERO,
            ),
            Probe("slow", Ok(()), std::time::Duration::from_secs(5)),
            Probe("ok", Ok(()), std::time::Duration::ZERO),
        ]),
    });
    let started = std::time::Instant::now();
    let r = h.get("/readyz").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "checks run in parallel with timeouts"
    );
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let v = r.json();
    assert_eq!(v["status"], "unhealthy");
    assert_eq!(
        v["checks"]["store"]["error"],
        "store unreachable at postgres://***@h/db"
    );
    assert!(
        v["checks"]["slow"]["error"]
            .as_str()
            .unwrap()
            .starts_with("check timeout")
    );
    assert_eq!(v["checks"]["ok"]["status"], "up");
    let r = h.get("/health").await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "unhealthy", "reason": "self-probe failed"})
        )
    );
    let r = h.get("/readyz/tenant/acme").await;
    assert_eq!(
        (r.status, r.json()["tenant_id"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("acme"))
    );
    assert_eq!(
        h.get("/readyz/tenant/-x").await.status,
        StatusCode::BAD_REQUEST
    );
    h.state.start_draining();
    let r = h.get("/readyz/tenant/acme").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.json().get("tenant_id").is_none());
}

#[tokio::test]
async fn openapi_matches_the_router() {
    let h = harness();
    let r = h.get("/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    let doc = r.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| ["get", "post", "patch", "delete", "put"].contains(&k.as_str()))
        {
            documented.push((method.to_uppercase(), path.clone()));
        }
    }
    documented.sort();
    let mut expected: Vec<(String, String)> = [
        ("POST", "/v1/fetcher"),
        ("GET", "/v1/fetcher"),
        ("GET", "/v1/fetcher/{id}"),
        ("POST", "/v1/fetcher/{id}/cancel"),
        ("GET", "/v1/syncs"),
        ("GET", "/v1/syncs/{id}"),
        ("POST", "/v1/syncs/{id}/reset"),
        ("DELETE", "/v1/syncs/{id}"),
        ("PUT", "/v1/syncs/{id}/schedule"),
        ("GET", "/v1/syncs/{id}/schedule"),
        ("DELETE", "/v1/syncs/{id}/schedule"),
        ("POST", "/v1/syncs/{id}/schedule/pause"),
        ("POST", "/v1/syncs/{id}/schedule/resume"),
        ("GET", "/v1/management/connections"),
        ("POST", "/v1/management/connections"),
        ("POST", "/v1/management/connections/validate-schema"),
        ("GET", "/v1/management/connections/{id}"),
        ("PATCH", "/v1/management/connections/{id}"),
        ("DELETE", "/v1/management/connections/{id}"),
        ("POST", "/v1/management/connections/{id}/test"),
        ("GET", "/v1/management/connections/{id}/schema"),
        ("GET", "/v1/management/connections/unassigned"),
        ("POST", "/v1/management/connections/{id}/assign"),
        ("GET", "/health"),
        ("GET", "/readyz"),
        ("GET", "/readyz/tenant/{id}"),
        ("GET", "/metrics"),
        ("GET", "/version"),
        ("GET", "/openapi.json"),
    ]
    .iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    expected.sort();
    assert_eq!(documented, expected);
    // Every documented operation is routed (never the framework's 404/405), and an
    // undocumented method on a documented path is 405.
    let uuid = "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b";
    for (method, path) in &documented {
        let uri = path.replace("{id}", uuid);
        let r = h
            .call(
                method.parse().unwrap(),
                &uri,
                &[("x-product-name", "p")],
                None,
            )
            .await;
        assert!(
            !(r.status == StatusCode::METHOD_NOT_ALLOWED
                || (r.status == StatusCode::NOT_FOUND && r.json()["title"] == "request_failed")),
            "{method} {path}: {}",
            r.text
        );
        let undocumented = if documented.contains(&("PUT".into(), path.clone())) {
            Method::PATCH
        } else {
            Method::PUT
        };
        if documented.contains(&(undocumented.to_string(), path.clone())) {
            continue;
        }
        let r = h.call(undocumented.clone(), &uri, &[], None).await;
        assert_eq!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{undocumented} {path}"
        );
    }
    assert_eq!(doc, serde_json::to_value(fetcher_http::openapi()).unwrap());
}

#[tokio::test]
async fn metrics_labels_come_from_closed_sets() {
    let h = harness();
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    h.get("/metrics").await;
    let before = series(&h.get("/metrics").await.text);
    let long = "X".repeat(4000);
    for i in 0..30 {
        let odd =
            Method::from_bytes(format!("ODD{i}{}", if i < 3 { &long } else { "" }).as_bytes())
                .unwrap();
        h.call(odd.clone(), "/v1/fetcher", &[], None).await;
        h.call(odd, &format!("/raw/path/{i}"), &[], None).await;
        h.get(&format!("/raw/path/{i}")).await;
    }
    let text = h.get("/metrics").await.text;
    assert!(!text.contains("ODD"), "a raw method became a label");
    assert!(!text.contains("/raw/path"), "a raw path became a label");
    assert!(text.contains(r#"method="other""#), "{text}");
    // other × {route template, unmatched} × their statuses, and GET unmatched 404, each
    // with a counter and a histogram: a handful of series, not one per request.
    let added = series(&text) - before;
    assert!(added <= 60, "{added} series added by 90 requests");
    assert!(text.len() < 100_000, "{} bytes of metrics", text.len());
}

#[tokio::test]
async fn oversized_heads_are_431_with_the_error_shape() {
    let h = harness();
    let big = "y".repeat(fetcher_http::MAX_HEADER_BYTES + 1);
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("x-big", big.as_str())],
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            json!({"code": 431, "title": "request_failed", "message": "Request Header Fields Too Large"})
        )
    );
    let fine = "y".repeat(8 * 1024);
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("x-big", fine.as_str())],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

/// The schema a documented response names: `paths[path][method].responses[status]`'s
/// JSON content, with a `$ref` resolved. `None` when the status is not documented.
fn documented_schema(
    doc: &serde_json::Value,
    method: &str,
    path: &str,
    status: u16,
) -> Option<serde_json::Value> {
    let response = doc["paths"][path][method]["responses"].get(status.to_string())?;
    let schema = &response["content"]["application/json"]["schema"];
    Some(match schema["$ref"].as_str() {
        Some(r) => doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone(),
        None => schema.clone(),
    })
}

/// A shallow check of `body` against an object schema: required properties present,
/// present properties of the declared JSON type (a `oneOf` accepts any of its types).
fn conforms(schema: &serde_json::Value, body: &serde_json::Value) -> Result<(), String> {
    if schema.is_null() {
        return Ok(()); // no JSON content documented (e.g. 204)
    }
    let obj = body
        .as_object()
        .ok_or_else(|| format!("not an object: {body}"))?;
    for key in schema["required"].as_array().into_iter().flatten() {
        let key = key.as_str().unwrap();
        if !obj.contains_key(key) {
            return Err(format!("missing required `{key}` in {body}"));
        }
    }
    for (key, value) in obj {
        let Some(prop) = schema["properties"].get(key) else {
            continue;
        };
        let types: Vec<String> = match (&prop["type"], &prop["oneOf"]) {
            (serde_json::Value::String(t), _) => vec![t.clone()],
            (serde_json::Value::Array(ts), _) => {
                ts.iter().map(|t| t.as_str().unwrap().to_owned()).collect()
            }
            (_, serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(|i| i["type"].as_str().map(str::to_owned))
                .collect(),
            _ => continue, // a $ref or free-form
        };
        let actual = match value {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "boolean",
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            serde_json::Value::Number(_) => "number",
            serde_json::Value::String(_) => "string",
            serde_json::Value::Array(_) => "array",
            serde_json::Value::Object(_) => "object",
        };
        let ok = types
            .iter()
            .any(|t| t == actual || (t == "number" && actual == "integer"));
        if !ok {
            return Err(format!("`{key}` is {actual}, documented {types:?}"));
        }
    }
    Ok(())
}

#[tokio::test]
async fn documented_responses_match_what_the_routes_return() {
    let h = harness();
    let doc = h.get("/openapi.json").await.json();
    // Every documented error response has a schema: a generated client can decode it.
    let mut responses = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                responses += 1;
                if status.starts_with('4') || status.starts_with('5') {
                    assert!(
                        response["content"]["application/json"]["schema"].is_object(),
                        "{method} {path} {status} has no schema"
                    );
                }
            }
        }
    }
    assert!(responses > 60, "{responses} documented responses");
    // Real calls, each answer checked against what is documented for it.
    let product = [("x-product-name", "reporter")];
    let created = h.create("reporter", connection("core-pg")).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let conn = format!("/v1/management/connections/{id}");
    let unknown = "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b";
    type Call = (
        &'static str,
        &'static str,
        String,
        Option<serde_json::Value>,
    );
    let calls: Vec<Call> = vec![
        (
            "post",
            "/v1/management/connections",
            "/v1/management/connections".into(),
            Some(connection("second")),
        ),
        (
            "post",
            "/v1/management/connections",
            "/v1/management/connections".into(),
            Some(connection("second")),
        ),
        (
            "post",
            "/v1/management/connections",
            "/v1/management/connections".into(),
            Some(json!({"configName": "x"})),
        ),
        (
            "get",
            "/v1/management/connections",
            "/v1/management/connections".into(),
            None,
        ),
        (
            "get",
            "/v1/management/connections",
            "/v1/management/connections?limit=abc".into(),
            None,
        ),
        (
            "get",
            "/v1/management/connections/unassigned",
            "/v1/management/connections/unassigned".into(),
            None,
        ),
        ("get", "/v1/management/connections/{id}", conn.clone(), None),
        (
            "get",
            "/v1/management/connections/{id}",
            "/v1/management/connections/not-a-uuid".into(),
            None,
        ),
        (
            "get",
            "/v1/management/connections/{id}",
            format!("/v1/management/connections/{unknown}"),
            None,
        ),
        (
            "patch",
            "/v1/management/connections/{id}",
            conn.clone(),
            Some(json!({"port": 5433})),
        ),
        (
            "patch",
            "/v1/management/connections/{id}",
            conn.clone(),
            Some(json!({"port": 0})),
        ),
        (
            "post",
            "/v1/management/connections/{id}/test",
            format!("{conn}/test"),
            None,
        ),
        (
            "get",
            "/v1/management/connections/{id}/schema",
            format!("{conn}/schema"),
            None,
        ),
        (
            "post",
            "/v1/management/connections/{id}/assign",
            format!("{conn}/assign"),
            None,
        ),
        (
            "post",
            "/v1/management/connections/validate-schema",
            "/v1/management/connections/validate-schema".into(),
            Some(json!({"mappedFields": {"core-pg": {"users": ["id"]}}})),
        ),
        (
            "post",
            "/v1/management/connections/validate-schema",
            "/v1/management/connections/validate-schema".into(),
            Some(json!({"mappedFields": {"core-pg": {"users": ["nope"]}}})),
        ),
        (
            "post",
            "/v1/fetcher",
            "/v1/fetcher".into(),
            Some(job("core-pg", "reporter")),
        ),
        (
            "post",
            "/v1/fetcher",
            "/v1/fetcher".into(),
            Some(job("core-pg", "reporter")),
        ),
        ("post", "/v1/fetcher", "/v1/fetcher".into(), Some(json!({}))),
        (
            "get",
            "/v1/fetcher/{id}",
            "/v1/fetcher/not-a-uuid".into(),
            None,
        ),
        (
            "get",
            "/v1/fetcher/{id}",
            format!("/v1/fetcher/{unknown}"),
            None,
        ),
        (
            "delete",
            "/v1/management/connections/{id}",
            format!("/v1/management/connections/{unknown}"),
            None,
        ),
        ("get", "/health", "/health".into(), None),
        ("get", "/readyz", "/readyz".into(), None),
        (
            "get",
            "/readyz/tenant/{id}",
            "/readyz/tenant/t1".into(),
            None,
        ),
        ("get", "/version", "/version".into(), None),
    ];
    let mut statuses = std::collections::BTreeSet::new();
    for (method, template, uri, body) in calls {
        let r = h
            .call(method.to_uppercase().parse().unwrap(), &uri, &product, body)
            .await;
        let status = r.status.as_u16();
        statuses.insert(status);
        let schema = documented_schema(&doc, method, template, status)
            .unwrap_or_else(|| panic!("{method} {uri}: {status} is not documented: {}", r.text));
        let body = if r.text.is_empty() {
            serde_json::Value::Null
        } else {
            r.json()
        };
        if !schema.is_null() {
            conforms(&schema, &body).unwrap_or_else(|e| panic!("{method} {uri} {status}: {e}"));
        }
    }
    // The calls reached successes and failures alike.
    for s in [200, 201, 202, 400, 404, 409, 422] {
        assert!(statuses.contains(&s), "no call answered {s}: {statuses:?}");
    }
}
