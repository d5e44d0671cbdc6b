//! Cross-cutting behaviour: framework errors, body limit, authentication and tenancy, SSRF
//! in multi-tenant mode, probes, metrics, version, the OpenAPI document. One file: these
//! concerns share the harness setups below (tokens, tenancy, SQLite directories).

mod http_support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use fetcher_engine::BoxFuture;
use fetcher_host::ServiceError;
use fetcher_http::{
    ApiConfig, ClaimsAuthenticator, JwtAuthenticator, JwtConfigError, ReadinessProbe,
    VerifiedClaims,
};
use http_support::*;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

const SECRET: &[u8] = b"test-hs256-secret-of-enough-length!!";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hs(claims: serde_json::Value) -> String {
    jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

fn multi_tenant(auth: Arc<dyn fetcher_http::Authenticator>) -> Harness {
    harness_with(Options {
        config: ApiConfig {
            multi_tenant: true,
            ..Default::default()
        },
        authenticator: auth,
        probes: Vec::new(),
    })
}

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
    // Business routes echo a (sanitised) request id; CORS preflight is answered.
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
    assert!(r.status.is_success());
    assert!(r.headers.contains_key("access-control-allow-origin"));
}

#[tokio::test]
async fn hs256_tenancy_and_isolation() {
    let h = multi_tenant(Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()));
    let exp = now() + 600;
    let a = format!(
        "Bearer {}",
        hs(json!({"tenantId": "tenant-a", "sub": "u1", "exp": exp}))
    );
    let b = hs(json!({"tenantId": "tenant-b", "exp": exp})); // bare token accepted
    let create = |auth: String, name: &'static str| {
        let h = &h;
        async move {
            h.call(
                Method::POST,
                "/v1/management/connections",
                &[("authorization", auth.as_str()), ("x-product-name", "p")],
                Some(connection(name)),
            )
            .await
        }
    };
    let ca = create(a.clone(), "shared-name").await;
    assert_eq!(ca.status, StatusCode::CREATED, "{}", ca.text);
    // The same name in another tenant is fine; ids are invisible across tenants.
    assert_eq!(
        create(b.clone(), "shared-name").await.status,
        StatusCode::CREATED
    );
    let id = ca.json()["id"].as_str().unwrap().to_owned();
    let url = format!("/v1/management/connections/{id}");
    assert_eq!(
        h.call(Method::GET, &url, &[("authorization", a.as_str())], None)
            .await
            .status,
        StatusCode::OK
    );
    for (m, u) in [
        (Method::GET, url.clone()),
        (Method::DELETE, url.clone()),
        (Method::POST, format!("{url}/test")),
        (Method::GET, format!("{url}/schema")),
    ] {
        let r = h
            .call(m.clone(), &u, &[("authorization", b.as_str())], None)
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, json!("FET-1001")),
            "{m} {u}"
        );
    }
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", b.as_str())],
            None,
        )
        .await;
    assert_eq!(r.json()["total"], 1);
    // A job of tenant A is invisible to tenant B.
    let j = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[("authorization", a.as_str())],
            Some(job("shared-name", "p")),
        )
        .await;
    assert_eq!(j.status, StatusCode::ACCEPTED, "{}", j.text);
    let job_url = format!("/v1/fetcher/{}", j.json()["jobId"].as_str().unwrap());
    assert_eq!(
        h.call(
            Method::GET,
            &job_url,
            &[("authorization", a.as_str())],
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        h.call(
            Method::GET,
            &job_url,
            &[("authorization", b.as_str())],
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(h.queue.sent()[0].headers["X-Tenant-ID"], "tenant-a");

    // Perimeter errors (shape E).
    let forged = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"tenantId": "tenant-a", "exp": exp}),
        &EncodingKey::from_secret(b"another-secret-entirely-0123456789"),
    )
    .unwrap();
    let cases = [
        (None, "MISSING_TOKEN", "Authorization token is required"),
        (
            Some("Bearer not.a.jwt".to_owned()),
            "INVALID_TOKEN",
            "Failed to parse authorization token",
        ),
        (
            Some(forged),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(json!({"tenantId": "tenant-a", "exp": now() - 3600}))),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(
                json!({"tenantId": "tenant-a", "exp": exp, "nbf": now() + 3600}),
            )),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(json!({"tenantId": "tenant-a"}))),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(json!({"exp": exp}))),
            "MISSING_TENANT",
            "tenantId is required in JWT token",
        ),
        (
            Some(hs(json!({"tenantId": "", "exp": exp}))),
            "MISSING_TENANT",
            "tenantId is required in JWT token",
        ),
        (
            Some(hs(json!({"tenantId": 7, "exp": exp}))),
            "MISSING_TENANT",
            "tenantId is required in JWT token",
        ),
        (
            Some(hs(json!({"tenantId": "-bad", "exp": exp}))),
            "INVALID_TENANT",
            "tenantId has invalid format",
        ),
        (
            Some(hs(json!({"tenantId": "a".repeat(257), "exp": exp}))),
            "INVALID_TENANT",
            "tenantId has invalid format",
        ),
    ];
    for (token, code, message) in cases {
        let hdrs: Vec<(&str, &str)> = token
            .as_deref()
            .map(|t| vec![("authorization", t)])
            .unwrap_or_default();
        let r = h
            .call(Method::GET, "/v1/management/connections", &hdrs, None)
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{code}");
        assert_eq!(
            r.json(),
            json!({"code": code, "title": "Unauthorized", "message": message})
        );
        assert!(r.headers.contains_key("x-request-id"));
    }
    // Probes need no token.
    assert_eq!(h.get("/health").await.status, StatusCode::OK);
    assert_eq!(h.get("/metrics").await.status, StatusCode::OK);
}

#[tokio::test]
async fn rs256_tokens() {
    let public = include_bytes!("http_support/test_rsa_public.pem");
    let private = include_bytes!("http_support/test_rsa_private.pem");
    let h = multi_tenant(Arc::new(JwtAuthenticator::rs256_pem(public).unwrap()));
    let token = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::RS256),
        &json!({"tenantId": "t1", "exp": now() + 60}),
        &EncodingKey::from_rsa_pem(private).unwrap(),
    )
    .unwrap();
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", &format!("bearer {token}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // An HS256 token signed with the public key text (algorithm confusion) is rejected.
    let confused = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"tenantId": "t1", "exp": now() + 60}),
        &EncodingKey::from_secret(public),
    )
    .unwrap();
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", &format!("Bearer {confused}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(JwtAuthenticator::rs256_pem(b"not a pem").is_err());
}

#[tokio::test]
async fn host_verified_claims() {
    let h = multi_tenant(Arc::new(ClaimsAuthenticator));
    let mut req = axum::http::Request::builder()
        .uri("/v1/management/connections")
        .body(axum::body::Body::empty())
        .unwrap();
    req.extensions_mut().insert(VerifiedClaims(
        json!({"tenantId": "acme"}).as_object().unwrap().clone(),
    ));
    assert_eq!(h.send(req).await.status, StatusCode::OK);
    // A header token is never trusted by this authenticator.
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[(
                "authorization",
                &format!(
                    "Bearer {}",
                    hs(json!({"tenantId": "acme", "exp": now() + 60}))
                ),
            )],
            None,
        )
        .await;
    assert_eq!(r.code(), json!("MISSING_TOKEN"));
}

#[tokio::test]
async fn single_tenant_with_required_auth() {
    let h = harness_with(Options {
        config: ApiConfig {
            require_auth: true,
            ..Default::default()
        },
        authenticator: Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()),
        probes: Vec::new(),
    });
    assert_eq!(
        h.get("/v1/management/connections").await.code(),
        json!("MISSING_TOKEN")
    );
    let t = hs(json!({"sub": "x", "exp": now() + 60}));
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", &format!("Bearer {t}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn admitted_private_networks_reach_the_guard_in_multi_tenant_mode() {
    let h = harness_with(Options {
        config: ApiConfig {
            multi_tenant: true,
            private_networks: fetcher_connectors::PrivateNetworks::parse("10.20.0.0/16").unwrap(),
            ..Default::default()
        },
        authenticator: Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()),
        probes: Vec::new(),
    });
    let auth = format!(
        "Bearer {}",
        hs(json!({"tenantId": "t1", "exp": now() + 600}))
    );
    let hdr = [("authorization", auth.as_str()), ("x-product-name", "p")];
    let mut b = connection("vpc-db");
    b["host"] = "10.20.0.5".into();
    let c = h
        .call(Method::POST, "/v1/management/connections", &hdr, Some(b))
        .await;
    assert_eq!(c.status, StatusCode::CREATED, "{}", c.text);
    let url = format!(
        "/v1/management/connections/{}",
        c.json()["id"].as_str().unwrap()
    );
    let moved = h
        .call(
            Method::PATCH,
            &url,
            &hdr,
            Some(json!({"host": "10.20.9.9"})),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    for host in ["10.21.0.5", "169.254.169.254", "127.0.0.1"] {
        let r = h
            .call(Method::PATCH, &url, &hdr, Some(json!({"host": host})))
            .await;
        assert_eq!(r.code(), json!("FET-0414"), "{host}");
    }
}

#[tokio::test]
async fn ssrf_guard_in_multi_tenant_mode() {
    let h = multi_tenant(Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()));
    let auth = format!(
        "Bearer {}",
        hs(json!({"tenantId": "t1", "exp": now() + 600}))
    );
    let hdr = [("authorization", auth.as_str()), ("x-product-name", "p")];
    for host in ["127.0.0.1", "169.254.169.254", "10.0.0.1", "::1"] {
        let mut b = connection("blocked");
        b["host"] = host.into();
        b["port"] = 0.into(); // the SSRF check wins over other failures
        let r = h
            .call(Method::POST, "/v1/management/connections", &hdr, Some(b))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0414")),
            "{host}"
        );
        assert_eq!(
            r.json()["message"],
            "Host is not a valid external database endpoint"
        );
        assert!(!r.text.contains(host));
    }
    // Names pass the request layer and are stopped before the dial.
    let mut b = connection("local-name");
    b["host"] = "localhost".into();
    let c = h
        .call(Method::POST, "/v1/management/connections", &hdr, Some(b))
        .await;
    assert_eq!(c.status, StatusCode::CREATED);
    let url = format!(
        "/v1/management/connections/{}",
        c.json()["id"].as_str().unwrap()
    );
    let r = h
        .call(
            Method::PATCH,
            &url,
            &hdr,
            Some(json!({"host": "192.168.1.1"})),
        )
        .await;
    assert_eq!(r.code(), json!("FET-0414"));
    let r = h
        .call(Method::POST, &format!("{url}/test"), &hdr, None)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0414"))
    );
    let r = h
        .call(Method::GET, &format!("{url}/schema"), &hdr, None)
        .await;
    assert_eq!(r.code(), json!("FET-0414"));
    let r = h
        .call(
            Method::POST,
            "/v1/management/connections/validate-schema",
            &hdr,
            Some(json!({"mappedFields": {"local-name": {"users": ["id"]}}})),
        )
        .await;
    assert_eq!(r.code(), json!("FET-0414"));
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &hdr,
            Some(job("local-name", "p")),
        )
        .await;
    assert_eq!(r.code(), json!("FET-0414"));
    // Single-tenant mode accepts loopback.
    let st = harness();
    let mut b = connection("loop");
    b["host"] = "127.0.0.1".into();
    st.create("p", b).await;
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
    assert_eq!(keys, ["checks", "deployment_mode", "status", "version"]);
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
        ("GET", "/v1/fetcher/{id}"),
        ("POST", "/v1/fetcher/{id}/cancel"),
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
        let r = h.call(Method::PUT, &uri, &[], None).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "PUT {path}");
    }
    assert_eq!(doc, serde_json::to_value(fetcher_http::openapi()).unwrap());
}

#[tokio::test]
async fn a_host_without_local_files_refuses_sqlite_on_create_and_patch() {
    // `serve` (a SQLite directory) accepts a file in it; the same data served by a host
    // without local files (Lambda) refuses new ones and edits to stored ones.
    let dir = tempfile::tempdir().unwrap();
    let (serve, file) = sqlite_harness(dir.path());
    let lite = json!({"configName": "lite", "type": "SQLITE", "host": "localhost", "port": 1,
        "databaseName": file, "userName": "u", "password": "p"});
    let created = serve.create("p", lite.clone()).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let lambda = serve.reconfigured(ApiConfig::default());
    let headers = [("x-product-name", "p")];
    let mut again = lite;
    again["configName"] = "lite2".into();
    let r = lambda
        .call(
            Method::POST,
            "/v1/management/connections",
            &headers,
            Some(again),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0414"))
    );
    let r = lambda
        .call(
            Method::PATCH,
            &format!("/v1/management/connections/{id}"),
            &headers,
            Some(json!({"databaseName": "/etc/other.db"})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0414"))
    );
    let r = lambda
        .call(
            Method::GET,
            &format!("/v1/management/connections/{id}"),
            &headers,
            None,
        )
        .await;
    assert_eq!(r.json()["databaseName"], file, "nothing changed");
    // A PostgreSQL connection is unaffected.
    let r = lambda
        .call(
            Method::POST,
            "/v1/management/connections",
            &headers,
            Some(
                json!({"configName": "pg-core", "type": "POSTGRESQL", "host": "db.example.com",
                "port": 5432, "databaseName": "d", "userName": "u", "password": "p"}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

/// Signs `header` and `claims` as given (raw JSON text, so names can repeat).
fn hs_raw(header: &str, claims: &str) -> String {
    use base64::Engine as _;
    let b64 = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let input = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
    let signature = jsonwebtoken::crypto::sign(
        input.as_bytes(),
        &EncodingKey::from_secret(SECRET),
        jsonwebtoken::Algorithm::HS256,
    )
    .unwrap();
    format!("{input}.{signature}")
}

#[test]
fn weak_hs256_secrets_are_refused() {
    for secret in [&b""[..], b"short", &[b'x'; 31]] {
        assert!(
            matches!(
                JwtAuthenticator::hs256(secret),
                Err(JwtConfigError::WeakSecret(n)) if n == secret.len()
            ),
            "{} bytes accepted",
            secret.len()
        );
    }
    assert!(JwtAuthenticator::hs256(&[b'x'; 32]).is_ok());
}

#[tokio::test]
async fn tokens_with_crit_or_repeated_names_are_rejected() {
    let h = multi_tenant(Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()));
    let exp = now() + 600;
    let call = |token: String| {
        let h = &h;
        async move {
            h.call(
                Method::GET,
                "/v1/management/connections",
                &[("authorization", &format!("Bearer {token}"))],
                None,
            )
            .await
        }
    };
    let claims = format!(r#"{{"tenantId":"tenant-a","exp":{exp}}}"#);
    // The same signing path accepts a plain token: the refusals below are for cause.
    let ok = call(hs_raw(r#"{"alg":"HS256","typ":"JWT"}"#, &claims)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    for (header, claims) in [
        (
            r#"{"alg":"HS256","crit":["exp"]}"#.to_owned(),
            claims.clone(),
        ),
        (r#"{"alg":"HS256","crit":[]}"#.to_owned(), claims.clone()),
        (
            r#"{"alg":"HS256","alg":"HS256"}"#.to_owned(),
            claims.clone(),
        ),
        (
            r#"{"alg":"HS256"}"#.to_owned(),
            format!(r#"{{"tenantId":"tenant-b","tenantId":"tenant-a","exp":{exp}}}"#),
        ),
    ] {
        let r = call(hs_raw(&header, &claims)).await;
        assert_eq!(
            (r.status, r.json()["code"].clone()),
            (StatusCode::UNAUTHORIZED, json!("INVALID_TOKEN")),
            "{header} {claims}"
        );
    }
}

#[tokio::test]
async fn issuer_and_audience_are_checked_when_set() {
    let jwt = JwtAuthenticator::hs256(SECRET)
        .unwrap()
        .with_issuer(&["https://idp.example"])
        .with_audience(&["fetcher"]);
    let h = multi_tenant(Arc::new(jwt));
    let exp = now() + 600;
    let status = |claims: serde_json::Value| {
        let h = &h;
        async move {
            h.call(
                Method::GET,
                "/v1/management/connections",
                &[("authorization", &hs(claims))],
                None,
            )
            .await
            .status
        }
    };
    let good = json!({"tenantId": "t", "exp": exp, "iss": "https://idp.example", "aud": "fetcher"});
    assert_eq!(status(good).await, StatusCode::OK);
    for bad in [
        json!({"tenantId": "t", "exp": exp, "aud": "fetcher"}),
        json!({"tenantId": "t", "exp": exp, "iss": "https://other.example", "aud": "fetcher"}),
        json!({"tenantId": "t", "exp": exp, "iss": "https://idp.example"}),
        json!({"tenantId": "t", "exp": exp, "iss": "https://idp.example", "aud": "other"}),
    ] {
        assert_eq!(status(bad.clone()).await, StatusCode::UNAUTHORIZED, "{bad}");
    }
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

/// A single-tenant harness whose SQLite directory is `<dir>/sqlite` (holding `x.db`), with
/// `<dir>/data` as the service's own data directory; returns it and the file's path.
fn sqlite_harness(dir: &std::path::Path) -> (Harness, String) {
    use fetcher_connectors::{SqliteFiles, SqliteRoot};
    let root = dir.join("sqlite");
    let data = dir.join("data");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(root.join("x.db"), b"").unwrap();
    let root = SqliteRoot::new(&root, &[&data]).unwrap();
    let file = root.path().join("x.db").display().to_string();
    let h = harness_with(Options {
        config: ApiConfig {
            sqlite_files: SqliteFiles::Under(Arc::new(root)),
            ..Default::default()
        },
        authenticator: Arc::new(fetcher_http::NoAuthentication),
        probes: Vec::new(),
    });
    (h, file)
}

#[tokio::test]
async fn sqlite_datasources_stay_inside_the_sqlite_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (h, file) = sqlite_harness(dir.path());
    let root = std::path::Path::new(&file).parent().unwrap().to_path_buf();
    let data = root.parent().unwrap().join("data");
    std::fs::write(data.join("fetcher.db"), b"secret").unwrap();
    std::fs::write(dir.path().join("outside.db"), b"").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/y.db"), b"").unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(data.join("fetcher.db"), root.join("link.db")).unwrap();
        std::os::unix::fs::symlink(&data, root.join("data-link")).unwrap();
    }
    let body = |name: &str, db: &str| {
        json!({"configName": name, "type": "SQLITE", "host": "localhost", "port": 1,
            "databaseName": db, "userName": "u", "password": "p"})
    };
    let headers = [("x-product-name", "p")];
    let post = |b: serde_json::Value| {
        let h = &h;
        async move {
            h.call(
                Method::POST,
                "/v1/management/connections",
                &headers,
                Some(b),
            )
            .await
        }
    };
    for (i, ok) in [
        file.clone(),
        "x.db".into(),
        "sub/y.db".into(),
        "./sub/y.db".into(),
    ]
    .iter()
    .enumerate()
    {
        let r = post(body(&format!("ok{i}"), ok)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{ok}: {}", r.text);
    }
    let outside = dir.path().join("outside.db").display().to_string();
    let own = data.join("fetcher.db").display().to_string();
    let dotdot = root.join("../data/fetcher.db").display().to_string();
    for bad in [
        own.as_str(),
        outside.as_str(),
        dotdot.as_str(),
        "../outside.db",
        "sub/../x.db",
        "link.db",
        "data-link/fetcher.db",
        "missing.db",
        "sub",
        "/etc/passwd",
    ] {
        let r = post(body("bad-one", bad)).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0414")),
            "{bad}: {}",
            r.text
        );
    }
    // PATCH cannot move a stored connection outside either.
    let created = post(body("movable", "x.db")).await;
    let id = created.json()["id"].as_str().unwrap().to_owned();
    for bad in [own.as_str(), "../outside.db", "link.db"] {
        let r = h
            .call(
                Method::PATCH,
                &format!("/v1/management/connections/{id}"),
                &headers,
                Some(json!({"databaseName": bad})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0414")),
            "PATCH {bad}"
        );
    }
    let r = h
        .call(
            Method::PATCH,
            &format!("/v1/management/connections/{id}"),
            &headers,
            Some(json!({"databaseName": "sub/y.db"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
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
