//! Connection routes (docs/api.md), one test per behaviour of the routes; one file so the
//! routes' cases read together (it follows `http/connections.rs` when that splits).

mod http_support;

use axum::http::{Method, StatusCode};
use fetcher_http::ApiConfig;
use http_support::*;
use serde_json::{Value, json};

const BASE: &str = "/v1/management/connections";

#[tokio::test]
async fn create_echoes_fields_and_never_returns_secrets() {
    let h = harness();
    let mut body = connection("core-ledger-pg");
    body["schema"] = "accounting".into();
    body["ssl"] = json!({"mode": "verify-full", "ca": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n", "key": "PRIVATE"});
    body["metadata"] = json!({"environment": "prod", "owner": {"team": "data"}});
    body["unknownField"] = json!(1);
    let c = h.create(" Reporter ", body).await;
    assert!(uuid::Uuid::parse_str(c["id"].as_str().unwrap()).is_ok());
    assert_eq!(c["productName"], "reporter");
    assert_eq!(c["ssl"], json!({"mode": "verify-full"}));
    for k in [
        "configName",
        "type",
        "host",
        "port",
        "databaseName",
        "schema",
        "userName",
        "createdAt",
        "updatedAt",
        "metadata",
    ] {
        assert!(c.get(k).is_some(), "{k}");
    }
    for k in ["password", "keyVersion", "ca", "key", "cert"] {
        assert!(
            !c.to_string().contains(&format!("\"{k}\"")),
            "{k} leaked: {c}"
        );
    }
    assert!(!c.to_string().contains("PRIVATE") && !c.to_string().contains("CERTIFICATE"));
    // Round trip through GET, nested metadata preserved.
    let got = h
        .get(&format!("{BASE}/{}", c["id"].as_str().unwrap()))
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json(), c);
    // Stored encrypted: the store holds ciphertext, not the password.
    let tenant = fetcher_engine::TenantContext::new("default").unwrap();
    let stored = h
        .connections
        .protected_credential(&tenant, "core-ledger-pg")
        .unwrap();
    assert!(!String::from_utf8_lossy(&stored.ciphertext).contains(PASSWORD));
}

#[tokio::test]
async fn product_header_rules_on_create() {
    let h = harness();
    let r = h
        .call(Method::POST, BASE, &[], Some(connection("abc")))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0403"))
    );
    assert_eq!(
        r.json()["message"],
        "X-Product-Name header is required and must not be empty"
    );
    let long = "a".repeat(101);
    for bad in ["   ", "product@name!", long.as_str()] {
        let r = h
            .call(
                Method::POST,
                BASE,
                &[("x-product-name", bad)],
                Some(connection("abc")),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0403")),
            "{bad}"
        );
    }
    h.create(&"a".repeat(100), connection("abc")).await;
}

#[tokio::test]
async fn create_validation_matrix() {
    let h = harness();
    for field in [
        "configName",
        "type",
        "host",
        "password",
        "databaseName",
        "userName",
        "port",
    ] {
        let mut b = connection("abc");
        b.as_object_mut().unwrap().remove(field);
        let r = h
            .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0402")),
            "{field}"
        );
        assert_eq!(
            r.json()["fields"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            vec![field]
        );
        assert!(r.json().get("entityType").is_none());
    }
    for (name, ok) in [
        ("ab", false),
        ("abc", true),
        (&"x".repeat(100)[..], true),
        (&"y".repeat(101)[..], false),
    ] {
        let r = h
            .call(
                Method::POST,
                BASE,
                &[("x-product-name", "p")],
                Some(connection(name)),
            )
            .await;
        assert_eq!(r.status == StatusCode::CREATED, ok, "{name}: {}", r.text);
    }
    for (i, (port, ok)) in [
        (1, true),
        (65535, true),
        (0, false),
        (-1, false),
        (65536, false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut b = connection(&format!("port-{i}"));
        b["port"] = json!(port);
        let r = h
            .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
            .await;
        assert_eq!(r.status == StatusCode::CREATED, ok, "{port}: {}", r.text);
    }
    let mut b = connection("typed");
    b["type"] = "UNSUPPORTED_DB".into();
    let r = h
        .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0001"))
    );
    assert_eq!(r.json()["title"], "Bad Request");
    // Model rules: bad characters in the name, SSL rules (entityType present).
    let r = h
        .call(
            Method::POST,
            BASE,
            &[("x-product-name", "p")],
            Some(connection("bad name!")),
        )
        .await;
    assert_eq!(
        (r.code(), r.json()["entityType"].clone()),
        (json!("FET-0402"), json!("connection"))
    );
    let mut b = connection("ssl-one");
    b["ssl"] = json!({"mode": "verify-full"});
    let r = h
        .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
        .await;
    assert_eq!(r.json()["fields"], json!({"ssl.ca": "SSL CA is required"}));
    let mut b = connection("ssl-two");
    b["ssl"] = json!({"mode": "skip-verify", "ca": "PEM"});
    let r = h
        .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
        .await;
    assert_eq!(r.code(), json!("FET-0001"));
    assert!(
        r.json()["fields"]["ssl.mode"]
            .as_str()
            .unwrap()
            .starts_with("FET-0413 - ")
    );
    let mut b = connection("ssl-three");
    b["ssl"] = json!({});
    h.create("p", b).await;
    // Bad host format.
    let mut b = connection("hosty");
    b["host"] = "not a host".into();
    let r = h
        .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
        .await;
    assert_eq!(r.code(), json!("FET-0001"));
}

#[tokio::test]
async fn body_errors_are_clean_400s() {
    let h = harness();
    let hdr = [
        ("x-product-name", "p"),
        ("content-type", "application/json"),
    ];
    for body in [
        "{",
        "",
        "[]",
        r#"{"port":"5432"}"#,
        r#"{"port":5432.0}"#,
        "null",
    ] {
        let r = h.raw(Method::POST, BASE, &hdr, body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0001")),
            "{body}"
        );
        assert_eq!(r.json()["message"], "unable to parse request body");
    }
    for body in ["{}", r#"{"nope":1}"#] {
        let r = h.raw(Method::POST, BASE, &hdr, body).await;
        assert_eq!(r.json()["message"], "empty request body", "{body}");
    }
    let r = h
        .raw(
            Method::POST,
            BASE,
            &[("x-product-name", "p"), ("content-type", "text/plain")],
            connection("abc").to_string(),
        )
        .await;
    assert_eq!(r.json()["message"], "unable to parse request body");
    let r = h
        .raw(
            Method::POST,
            BASE,
            &[("x-product-name", "p")],
            connection("abc").to_string(),
        )
        .await;
    assert_eq!(r.code(), json!("FET-0001"));
}

#[tokio::test]
async fn duplicate_names_conflict_even_concurrently() {
    let h = harness();
    h.create("a", connection("dup-name")).await;
    let r = h
        .call(
            Method::POST,
            BASE,
            &[("x-product-name", "b")],
            Some(connection("dup-name")),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1002"))
    );
    let futs = (0..8).map(|_| {
        h.call(
            Method::POST,
            BASE,
            &[("x-product-name", "p")],
            Some(connection("racer")),
        )
    });
    let replies = futures_util::future::join_all(futs).await;
    let created = replies
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .count();
    let conflicts = replies
        .iter()
        .filter(|r| r.status == StatusCode::CONFLICT && r.code() == json!("FET-1002"))
        .count();
    assert_eq!((created, conflicts), (1, 7));
}

#[tokio::test]
async fn get_errors() {
    let h = harness();
    let r = h
        .get(&format!("{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_FOUND, json!("FET-1001"))
    );
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("connection entity")
    );
    let r = h.get(&format!("{BASE}/not-a-uuid")).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0404"))
    );
    assert_eq!(r.json()["message"], "invalid connection id");
    // The literal route wins over `{id}`: GET on it is a wrong method (the reference
    // answered 400 through `{id}`; docs/api.md, "Routes").
    let r = h.get(&format!("{BASE}/validate-schema")).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn patch_flow() {
    let h = harness();
    let c = h.create("p", connection("patchme")).await;
    let id = c["id"].as_str().unwrap().to_owned();
    let url = format!("{BASE}/{id}");
    let r = h
        .call(
            Method::PATCH,
            &url,
            &[],
            Some(json!({"configName": "patched-v2", "port": 5433, "productName": "ignored"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let p = r.json();
    assert_eq!(
        (
            p["configName"].as_str(),
            p["port"].as_i64(),
            p["productName"].as_str()
        ),
        (Some("patched-v2"), Some(5433), Some("p"))
    );
    for k in [
        "id",
        "host",
        "databaseName",
        "userName",
        "type",
        "createdAt",
    ] {
        assert_eq!(p[k], c[k], "{k}");
    }
    let r = h
        .call(
            Method::PATCH,
            &url,
            &[],
            Some(json!({"databaseName": "other", "metadata": {"v": "2"}})),
        )
        .await;
    assert_eq!(r.json()["databaseName"], "other");
    let got = h.get(&url).await.json();
    assert_eq!(
        (
            got["configName"].as_str(),
            got["port"].as_i64(),
            got["metadata"].clone()
        ),
        (Some("patched-v2"), Some(5433), json!({"v": "2"}))
    );
    // The old name is free again, the new one is taken.
    h.create("p", connection("patchme")).await;
    let r = h
        .call(
            Method::PATCH,
            &url,
            &[],
            Some(json!({"configName": "patchme"})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1002"))
    );
    // Password change is accepted and never echoed; empty is rejected.
    let r = h
        .call(
            Method::PATCH,
            &url,
            &[],
            Some(json!({"password": PASSWORD})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h
        .call(Method::PATCH, &url, &[], Some(json!({"password": ""})))
        .await;
    assert_eq!(r.code(), json!("FET-0402"));
    // Bad input.
    for (body, code) in [
        (json!({}), "FET-0001"),
        (json!({"ssl": {}}), "FET-0001"),
        (json!({"host": ""}), "FET-0001"),
        (json!({"port": 0}), "FET-0001"),
        (json!({"port": 99999}), "FET-0001"),
        (json!({"databaseName": ""}), "FET-0402"),
        (json!({"configName": "ab"}), "FET-0001"),
        (json!({"type": "NOPE"}), "FET-0001"),
        (json!({"ssl": {"mode": "verify-full"}}), "FET-0402"),
    ] {
        let r = h.call(Method::PATCH, &url, &[], Some(body.clone())).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!(code)),
            "{body}: {}",
            r.text
        );
    }
    let r = h.call(Method::PATCH, &url, &[], Some(json!({}))).await;
    assert!(r.text.contains("empty request body"));
    let r = h
        .call(Method::PATCH, &url, &[], Some(json!({"databaseName": ""})))
        .await;
    assert_eq!(r.json()["entityType"], "connection");
    let r = h
        .call(
            Method::PATCH,
            &format!("{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"),
            &[],
            Some(json!({"port": 1})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_FOUND, json!("FET-1001"))
    );
    let r = h
        .call(Method::PATCH, &format!("{BASE}/zzz"), &[], Some(json!({})))
        .await;
    assert_eq!(r.code(), json!("FET-0404"));
}

#[tokio::test]
async fn delete_flow() {
    let h = harness();
    let c = h.create("p", connection("deleteme")).await;
    let url = format!("{BASE}/{}", c["id"].as_str().unwrap());
    let r = h.call(Method::DELETE, &url, &[], None).await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::NO_CONTENT, ""));
    assert_eq!(h.get(&url).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        h.call(Method::DELETE, &url, &[], None).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.call(Method::DELETE, &format!("{BASE}/nope"), &[], None)
            .await
            .code(),
        json!("FET-0404")
    );
    // The name is reusable.
    h.create("p", connection("deleteme")).await;
}

#[tokio::test]
async fn active_jobs_block_update_and_delete() {
    let h = harness();
    let c = h.create("reporter", connection("busy")).await;
    let url = format!("{BASE}/{}", c["id"].as_str().unwrap());
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("busy", "reporter")),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let r = h
        .call(Method::PATCH, &url, &[], Some(json!({"port": 1})))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1021"))
    );
    assert_eq!(
        r.json()["message"],
        "cannot update connection with active jobs"
    );
    let r = h.call(Method::DELETE, &url, &[], None).await;
    assert_eq!(
        r.json()["message"],
        "cannot delete connection with active jobs"
    );
    // A job-store outage during the gate is a 500.
    h.jobs.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = h.call(Method::DELETE, &url, &[], None).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, json!("FET-0002"))
    );
}

async fn ids(h: &Harness, uri: &str, product: Option<&str>) -> (Vec<String>, Value) {
    let hdrs: Vec<(&str, &str)> = product
        .map(|p| vec![("x-product-name", p)])
        .unwrap_or_default();
    let r = h.call(Method::GET, uri, &hdrs, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    let ids = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["configName"].as_str().unwrap().to_owned())
        .collect();
    (ids, v)
}

#[tokio::test]
async fn listing_paging_and_filters() {
    let h = harness();
    for i in 0..5 {
        h.create("alpha", connection(&format!("alpha-{i}"))).await;
    }
    let mut my = connection("beta-0");
    my["type"] = "MYSQL".into();
    my["metadata"] = json!({"env": "prod"});
    h.create("beta", my).await;
    let (all, v) = ids(&h, BASE, None).await;
    assert_eq!(
        (
            all.len(),
            v["page"].clone(),
            v["limit"].clone(),
            v["total"].clone()
        ),
        (6, json!(1), json!(10), json!(6))
    );
    assert_eq!(all[0], "beta-0", "newest first by default");
    let (alpha, _) = ids(&h, BASE, Some("ALPHA")).await;
    assert_eq!(alpha.len(), 5);
    let (none, v) = ids(&h, BASE, Some("nobody")).await;
    assert!(none.is_empty() && v["items"].is_array());
    let mut seen = Vec::new();
    for (page, n) in [(1, 2), (2, 2), (3, 1), (4, 0)] {
        let (p, v) = ids(
            &h,
            &format!("{BASE}?limit=2&page={page}&sortOrder=asc"),
            Some("alpha"),
        )
        .await;
        assert_eq!((p.len(), v["total"].clone()), (n, json!(5)));
        seen.extend(p);
    }
    assert_eq!(
        seen,
        (0..5).map(|i| format!("alpha-{i}")).collect::<Vec<_>>()
    );
    assert_eq!(
        ids(&h, &format!("{BASE}?type=mysql"), None).await.0,
        vec!["beta-0"]
    );
    assert_eq!(
        ids(&h, &format!("{BASE}?metadata.env=prod"), None).await.0,
        vec!["beta-0"]
    );
    assert!(
        ids(
            &h,
            &format!("{BASE}?startDate=2020-01-01&endDate=2020-01-02"),
            None
        )
        .await
        .0
        .is_empty()
    );
    for (q, code) in [
        ("sortOrder=invalid", "FET-0407"),
        ("limit=101", "FET-0406"),
        ("limit=0", "FET-0405"),
        ("page=x", "FET-0405"),
        ("startDate=2025-1-1", "FET-0408"),
        ("startDate=2025-02-01&endDate=2025-01-01", "FET-0409"),
        ("_x=1", "FET-0405"),
    ] {
        let r = h.get(&format!("{BASE}?{q}")).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!(code)),
            "{q}"
        );
    }
    let r = h
        .call(Method::GET, BASE, &[("x-product-name", "  ")], None)
        .await;
    assert_eq!(
        r.json()["message"],
        "X-Product-Name header must not be empty or whitespace-only"
    );
    let r = h
        .call(Method::GET, BASE, &[("x-product-name", "a b")], None)
        .await;
    assert_eq!(r.code(), json!("FET-0403"));
}

#[tokio::test]
async fn unassigned_and_assign() {
    let h = harness();
    // A legacy record: no product (written straight to the store, as a migration would).
    let tenant = fetcher_engine::TenantContext::new("default").unwrap();
    let ctx = fetcher_engine::Context::background();
    let legacy_id = uuid::Uuid::now_v7().to_string();
    let now = fetcher_engine::Timestamp::now().to_string();
    let d = fetcher_engine::ConnectionDescriptor {
        id: legacy_id.clone(),
        config_name: "legacy-mysql".into(),
        datasource_type: "MYSQL".into(),
        host: "mysql.example.com".into(),
        port: 3306,
        database_name: "app".into(),
        username: "ro".into(),
        key_version: "1".into(),
        host_attributes: [
            ("id".to_string(), json!(legacy_id)),
            ("createdAt".to_string(), json!(now)),
            ("updatedAt".to_string(), json!(now)),
        ]
        .into(),
        ..Default::default()
    };
    use fetcher_engine::ports::ConnectionStore;
    h.connections.create(&ctx, &tenant, &d, None).await.unwrap();
    h.create("p", connection("owned")).await;
    let (items, v) = ids(&h, &format!("{BASE}/unassigned"), Some("ignored")).await;
    assert_eq!(items, vec!["legacy-mysql"]);
    assert!(v["items"][0].get("productName").is_none());
    // PATCH on an unassigned record fails until assigned.
    let url = format!("{BASE}/{legacy_id}");
    let r = h
        .call(Method::PATCH, &url, &[], Some(json!({"port": 3307})))
        .await;
    assert_eq!(
        r.json()["fields"],
        json!({"product_name": "product name is required"})
    );
    let assign = format!("{url}/assign");
    for bad in ["", "   ", "product@name!"] {
        let r = h
            .call(Method::POST, &assign, &[("x-product-name", bad)], None)
            .await;
        assert_eq!(r.code(), json!("FET-0403"), "{bad:?}");
    }
    let r = h.call(Method::POST, &assign, &[], None).await;
    assert_eq!(r.code(), json!("FET-0403"));
    let r = h
        .call(Method::POST, &format!("{BASE}/bad/assign"), &[], None)
        .await;
    assert_eq!(r.code(), json!("FET-0404"), "id before header");
    let r = h
        .call(
            Method::POST,
            &format!("{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b/assign"),
            &[("x-product-name", "p")],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = h
        .call(
            Method::POST,
            &assign,
            &[("x-product-name", "Reporter")],
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.json()["productName"].clone()),
        (StatusCode::OK, json!("reporter"))
    );
    let r = h
        .call(
            Method::POST,
            &assign,
            &[("x-product-name", "reporter")],
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1015"))
    );
    assert!(
        ids(&h, &format!("{BASE}/unassigned"), None)
            .await
            .0
            .is_empty()
    );
    assert_eq!(
        h.call(Method::PATCH, &url, &[], Some(json!({"port": 3307})))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn test_connection_and_rate_limit() {
    let h = harness();
    let c = h.create("p", connection("testme")).await;
    let url = format!("{BASE}/{}/test", c["id"].as_str().unwrap());
    let r = h.call(Method::POST, &url, &[], None).await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(
        (v["status"].as_str(), v["message"].as_str()),
        (Some("success"), Some("Connection successful"))
    );
    assert!(v["latencyMs"].as_u64().unwrap() >= 1);
    h.factory.behaviour.lock().unwrap().fail_test = true;
    let r = h.call(Method::POST, &url, &[], None).await;
    assert_eq!(
        (r.status, r.code(), r.json()["title"].clone()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!(500),
            json!("Database Connection Error")
        )
    );
    for _ in 0..8 {
        h.call(Method::POST, &url, &[], None).await;
    }
    let r = h.call(Method::POST, &url, &[], None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        (r.code(), r.json()["title"].clone()),
        (json!(429), json!("Rate Limit Exceeded"))
    );
    let secs: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    // A token bucket of 10, one back every 6 s: the wait is until the next token, not
    // the end of a minute.
    assert!((1..=6).contains(&secs), "Retry-After {secs}");
    assert_eq!(
        r.json()["message"],
        format!("Connection test limit reached. Try again in {secs} seconds.")
    );
    let unknown = h
        .call(
            Method::POST,
            &format!("{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b/test"),
            &[],
            None,
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, json!("FET-1001"))
    );
    assert_eq!(
        h.call(Method::POST, &format!("{BASE}/x/test"), &[], None)
            .await
            .code(),
        json!("FET-0404")
    );
}

#[tokio::test]
async fn schema_discovery() {
    let h = harness();
    let c = h.create("p", connection("schemame")).await;
    let url = format!("{BASE}/{}/schema", c["id"].as_str().unwrap());
    let r = h.get(&url).await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(
        (
            v["configName"].as_str(),
            v["type"].as_str(),
            v["databaseName"].as_str()
        ),
        (Some("schemame"), Some("POSTGRESQL"), Some("ledger"))
    );
    assert_eq!(
        v["tables"],
        json!([{"name": "accounting.invoices", "fields": ["id", "total"]}, {"name": "users", "fields": ["address.city", "id", "name"]}])
    );
    h.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Connect);
    let r = h.get(&url).await;
    assert_eq!(
        (r.status, r.json()["title"].clone()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!("Database Connection Error")
        )
    );
    h.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Internal);
    let r = h.get(&url).await;
    assert_eq!(
        (r.code(), r.json()["title"].clone()),
        (json!(500), json!("Schema Retrieval Error"))
    );
    assert_eq!(
        h.get(&format!(
            "{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b/schema"
        ))
        .await
        .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn validate_schema() {
    let h = harness();
    h.create("p", connection("pg-main")).await;
    let url = format!("{BASE}/validate-schema");
    let ok = h.call(Method::POST, &url, &[], Some(json!({"mappedFields": {"pg-main": {"public.users": ["id", "address"], "accounting.invoices": ["total"]}}}))).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    assert_eq!(ok.json()["status"], "success");
    assert!(ok.json().get("errors").is_none());
    let r = h
        .call(Method::POST, &url, &[], Some(json!({"mappedFields": {"pg-main": {"nonexistent_table": ["id"], "users": ["nonexistent_field"]}, "unknown_ds": {"t": ["f"]}}})))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let v = r.json();
    assert_eq!(
        (v["code"].as_str(), v["title"].as_str()),
        (Some("FET-1060"), Some("Schema validation failed"))
    );
    let mut errors: Vec<Value> = v["errors"].as_array().unwrap().clone();
    errors.sort_by_key(|e| e["type"].to_string());
    assert_eq!(
        errors,
        vec![
            json!({"type": "DATA_SOURCE_NOT_FOUND", "dataSourceId": "unknown_ds"}),
            json!({"type": "FIELD_NOT_FOUND", "dataSourceId": "pg-main", "table": "users", "field": "nonexistent_field"}),
            json!({"type": "TABLE_NOT_FOUND", "dataSourceId": "pg-main", "table": "nonexistent_table"}),
        ]
    );
    let r = h
        .call(
            Method::POST,
            &url,
            &[],
            Some(json!({"mappedFields": {"nobody": {"t": ["f"]}}})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-1062"))
    );
    let many: serde_json::Map<String, Value> =
        (0..11).map(|i| (format!("d{i}"), json!({}))).collect();
    let tables: serde_json::Map<String, Value> =
        (0..21).map(|i| (format!("t{i}"), json!([]))).collect();
    let twenty: serde_json::Map<String, Value> =
        (0..20).map(|i| (format!("t{i}"), json!([]))).collect();
    let fields: Vec<String> = (0..51).map(|i| format!("f{i}")).collect();
    for (body, code) in [
        (json!({}), "FET-0402"),
        (json!({"mappedFields": {}}), "FET-0401"),
        (json!({"mappedFields": many}), "FET-1061"),
        (json!({"mappedFields": {" ": {}}}), "FET-0401"),
        (json!({"mappedFields": {"pg-main": tables}}), "FET-1061"),
        (json!({"mappedFields": {"pg-main": {" ": []}}}), "FET-0401"),
        (
            json!({"mappedFields": {"pg-main": {"users": fields}}}),
            "FET-1061",
        ),
        (
            json!({"mappedFields": {"pg-main": {"users": [" "]}}}),
            "FET-0401",
        ),
    ] {
        let r = h.call(Method::POST, &url, &[], Some(body.clone())).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!(code)),
            "{body}"
        );
    }
    // Exactly 20 tables pass the limits (then fail as unknown tables: 422).
    let r = h
        .call(
            Method::POST,
            &url,
            &[],
            Some(json!({"mappedFields": {"pg-main": twenty}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    // A down datasource is an entry, not an error.
    h.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Unavailable);
    h.create("p", connection("pg-down")).await;
    let r = h
        .call(
            Method::POST,
            &url,
            &[],
            Some(json!({"mappedFields": {"pg-down": {"users": ["id"]}}})),
        )
        .await;
    assert_eq!(
        r.json()["errors"],
        json!([{"type": "DATA_SOURCE_DOWN", "dataSourceId": "pg-down"}])
    );
}

#[tokio::test]
async fn metadata_and_connection_count_are_capped() {
    let h = harness_with(Options {
        config: ApiConfig {
            max_connections_per_tenant: 3,
            ..Default::default()
        },
        ..Default::default()
    });
    let headers = [("x-product-name", "p")];
    let body = |name: &str, meta: serde_json::Value| {
        json!({"configName": name, "type": "POSTGRESQL", "host": "db.example.com", "port": 5432,
            "databaseName": "d", "userName": "u", "password": "p", "metadata": meta})
    };
    // 16 KiB of metadata is fine; one byte more is a clear 400, on create and on patch.
    let at_cap = "m".repeat(16 * 1024 - r#"{"k":""}"#.len());
    let r = h
        .call(
            Method::POST,
            BASE,
            &headers,
            Some(body("at-cap", json!({"k": at_cap}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let over = json!({"k": format!("{at_cap}m")});
    let r = h
        .call(
            Method::POST,
            BASE,
            &headers,
            Some(body("over", over.clone())),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0411")),
        "{}",
        r.text
    );
    let r = h
        .call(
            Method::PATCH,
            &format!("{BASE}/{id}"),
            &headers,
            Some(json!({"metadata": over})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0411"))
    );
    // Three connections per tenant here: the fourth is refused until one is deleted.
    for name in ["second", "third"] {
        let r = h
            .call(Method::POST, BASE, &headers, Some(body(name, json!({}))))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let r = h
        .call(
            Method::POST,
            BASE,
            &headers,
            Some(body("fourth", json!({}))),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1022")),
        "{}",
        r.text
    );
    let r = h
        .call(Method::DELETE, &format!("{BASE}/{id}"), &headers, None)
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    let r = h
        .call(
            Method::POST,
            BASE,
            &headers,
            Some(body("fourth", json!({}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}
