//! The API handler in-process, on API Gateway HTTP API (v2) JSON fixtures, over the AWS
//! adapters on moto: claims from the JWT authorizer become the tenant.

use fetcher_aws::host::HostConfig;
use fetcher_aws::testing::{config, resources};
use fetcher_fn_api::{authorizer_claims, handle, router_from_config};
use lambda_http::Body;
use serde_json::{Value, json};

async fn router(multi_tenant: bool) -> axum::Router {
    let cfg = HostConfig {
        event_bus: None,
        multi_tenant,
        schema_cache_ttl: std::time::Duration::from_secs(60),
        lease: std::time::Duration::from_secs(60),
        ..HostConfig::for_resources(&resources().await)
    };
    router_from_config(cfg, &config().await)
        .await
        .expect("router")
}

/// An API Gateway HTTP API (payload 2.0) event.
fn event(
    method: &str,
    path: &str,
    body: Option<Value>,
    tenant: Option<&str>,
) -> lambda_http::Request {
    let mut ctx = json!({
        "accountId": "123456789012", "apiId": "api-id", "domainName": "id.execute-api.us-east-1.amazonaws.com",
        "domainPrefix": "id", "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "test"},
        "requestId": "id", "routeKey": "ANY /{proxy+}", "stage": "$default", "time": "01/Jan/2026:00:00:00 +0000", "timeEpoch": 1767225600000u64
    });
    if let Some(t) = tenant {
        ctx["authorizer"] =
            json!({"jwt": {"claims": {"sub": "user-1", "tenantId": t}, "scopes": null}});
    }
    let e = json!({
        "version": "2.0", "routeKey": "ANY /{proxy+}", "rawPath": path, "rawQueryString": "",
        "headers": {"content-type": "application/json", "x-product-name": "crm", "host": "id.execute-api.us-east-1.amazonaws.com"},
        "requestContext": ctx,
        "body": body.map(|b| b.to_string()),
        "isBase64Encoded": false
    });
    lambda_http::request::from_str(&e.to_string()).expect("fixture parses")
}

async fn call(router: &axum::Router, req: lambda_http::Request) -> (u16, Value) {
    let res = handle(router.clone(), req).await.unwrap();
    let status = res.status().as_u16();
    let body = match res.into_body() {
        Body::Text(t) => serde_json::from_str(&t).unwrap_or(Value::String(t)),
        Body::Binary(b) => Value::String(String::from_utf8_lossy(&b).into_owned()),
        _ => Value::Null,
    };
    (status, body)
}

#[tokio::test]
async fn health_answers_through_the_lambda_bridge() {
    let r = router(false).await;
    let (status, _) = call(&r, event("GET", "/health", None, None)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_tenant_comes_from_the_authorizer_claims() {
    let r = router(true).await;
    let a = format!("a{}", uuid_like());
    let b = format!("b{}", uuid_like());
    let req = event("GET", "/health", None, Some(&a));
    assert_eq!(
        authorizer_claims(&req).unwrap()["tenantId"],
        Value::String(a.clone())
    );
    let body = json!({"configName": "crm-db", "type": "POSTGRESQL", "host": "db.example.com", "port": 5432,
        "databaseName": "crm", "userName": "reader", "password": "s3cret"});
    let (status, v) = call(
        &r,
        event("POST", "/v1/management/connections", Some(body), Some(&a)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = call(
        &r,
        event("GET", "/v1/management/connections", None, Some(&a)),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v.to_string().contains("crm-db"), "{v}");
    assert!(
        !v.to_string().contains("s3cret"),
        "credentials never come back"
    );
    let (status, v) = call(
        &r,
        event("GET", "/v1/management/connections", None, Some(&b)),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!v.to_string().contains("crm-db"), "tenant isolation: {v}");
    let (status, _) = call(&r, event("GET", "/v1/management/connections", None, None)).await;
    assert_eq!(status, 401, "multi-tenant mode needs verified claims");
}

fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test]
async fn a_sqlite_file_is_not_a_datasource_on_lambda() {
    // The functions share no disk, and a path would name the function's own files: the
    // API refuses it up front, as multi-tenant `serve` does, and the registry has no
    // SQLite connector either.
    let r = router(false).await;
    let name = format!("lite-{}", uuid_like());
    let body = json!({"configName": name, "type": "SQLITE", "databaseName": "/tmp/x.db",
        "host": "localhost", "port": 1, "userName": "u", "password": "p"});
    let (status, v) = call(
        &r,
        event("POST", "/v1/management/connections", Some(body), None),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["title"], "Forbidden Host", "{v}");
    assert_eq!(v["code"], "FET-0414", "{v}");
    let (_, v) = call(&r, event("GET", "/v1/management/connections", None, None)).await;
    assert!(!v.to_string().contains(&name), "nothing stored: {v}");
}

#[tokio::test]
async fn the_deployed_defaults_require_claims_and_guard_every_host() {
    // What the template's environment says: neither opt-out set.
    let for_tests = HostConfig::for_resources(&resources().await);
    let defaults = HostConfig::from_lookup(|k| match k {
        "FETCHER_TABLE" => Some(for_tests.table.clone()),
        "FETCHER_BUCKET" => Some(for_tests.bucket.clone()),
        "FETCHER_QUEUE_URL" => for_tests.queue_url.clone(),
        "FETCHER_MASTER_KEY_SECRET" => Some(for_tests.master_key_secret.clone()),
        _ => None,
    })
    .unwrap();
    assert!(defaults.require_auth && defaults.guard_hosts);
    let router = router_from_config(defaults, &config().await).await.unwrap();
    // Single-tenant, and still no service without verified claims.
    let (status, v) = call(
        &router,
        event("GET", "/v1/management/connections", None, None),
    )
    .await;
    assert_eq!(
        (status, v["code"].clone()),
        (401, json!("MISSING_TOKEN")),
        "{v}"
    );
    let (status, _) = call(&router, event("GET", "/health", None, None)).await;
    assert_eq!(status, 200, "probes stay open");
    // With claims: private, loopback and metadata hosts are refused.
    let tenant = format!("t{}", uuid_like());
    for host in [
        "127.0.0.1",
        "10.0.0.5",
        "169.254.169.254",
        "::ffff:0:7f00:1",
    ] {
        let body = json!({"configName": format!("db-{}", uuid_like()), "type": "POSTGRESQL", "host": host,
            "port": 5432, "databaseName": "d", "userName": "u", "password": "p"});
        let (status, v) = call(
            &router,
            event(
                "POST",
                "/v1/management/connections",
                Some(body),
                Some(&tenant),
            ),
        )
        .await;
        assert_eq!(
            (status, v["code"].clone()),
            (400, json!("FET-0414")),
            "{host}: {v}"
        );
    }
    // A setting that is neither true nor false stops the cold start.
    let bad = HostConfig::from_lookup(|k| match k {
        "FETCHER_ALLOW_PRIVATE_HOSTS" => Some("yes".into()),
        "FETCHER_TABLE" | "FETCHER_BUCKET" | "FETCHER_MASTER_KEY_SECRET" => Some("x".into()),
        _ => None,
    });
    assert_eq!(
        bad.unwrap_err(),
        "FETCHER_ALLOW_PRIVATE_HOSTS must be true or false"
    );
}
