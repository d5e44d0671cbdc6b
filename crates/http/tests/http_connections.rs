//! Connection routes (docs/api.md), one test per behaviour: create, read, patch, delete,
//! list and assign (`connections/manage.rs`). Request validation is in
//! `http_connection_validation.rs`, tests and schema routes in `http_connection_probes.rs`.

mod http_support;

use axum::http::{Method, StatusCode};
use fetcher_http::ApiConfig;
use http_support::*;
use serde_json::{Value, json};

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
        .get_as("reporter", &format!("{BASE}/{}", c["id"].as_str().unwrap()))
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
async fn duplicate_names_conflict_even_concurrently() {
    let h = harness();
    let holder = h.create("a", connection("dup-name")).await;
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
    // The answer names the connection holding the name (#53 item 8).
    let holder_id = holder["id"].as_str().unwrap();
    assert!(
        r.json()["message"].as_str().unwrap().ends_with(&format!(
            "configName 'dup-name' is taken by connection {holder_id}: choose another name, or rename or delete that connection."
        )),
        "{}",
        r.text
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
            &P,
            Some(
                json!({"configName": "patched-v2", "port": 5433, "productName": "ignored", "password": PASSWORD}),
            ),
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
            &P,
            Some(json!({"databaseName": "other", "metadata": {"v": "2"}})),
        )
        .await;
    assert_eq!(r.json()["databaseName"], "other");
    let got = h.get_as("p", &url).await.json();
    assert_eq!(
        (
            got["configName"].as_str(),
            got["port"].as_i64(),
            got["metadata"].clone()
        ),
        (Some("patched-v2"), Some(5433), json!({"v": "2"}))
    );
    // The old name is free again, the new one is taken.
    let holder = h.create("p", connection("patchme")).await;
    let r = h
        .call(
            Method::PATCH,
            &url,
            &P,
            Some(json!({"configName": "patchme"})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1002"))
    );
    let by = format!("is taken by connection {}", holder["id"].as_str().unwrap());
    assert!(r.text.contains(&by), "{}", r.text);
    // Password change is accepted and never echoed; an empty one says the server asks
    // for none (trust authentication, #53 item 7).
    let r = h
        .call(Method::PATCH, &url, &P, Some(json!({"password": PASSWORD})))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h
        .call(Method::PATCH, &url, &P, Some(json!({"password": ""})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
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
        let r = h.call(Method::PATCH, &url, &P, Some(body.clone())).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!(code)),
            "{body}: {}",
            r.text
        );
    }
    let r = h.call(Method::PATCH, &url, &P, Some(json!({}))).await;
    assert!(r.text.contains("empty request body"));
    let r = h
        .call(Method::PATCH, &url, &P, Some(json!({"databaseName": ""})))
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
    let r = h.call(Method::DELETE, &url, &P, None).await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::NO_CONTENT, ""));
    assert_eq!(h.get_as("p", &url).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        h.call(Method::DELETE, &url, &P, None).await.status,
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

/// The `X-Product-Name` of product `reporter`.
const REPORTER: [(&str, &str); 1] = [("x-product-name", "reporter")];

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
        .call(Method::PATCH, &url, &REPORTER, Some(json!({"port": 1})))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1021"))
    );
    assert_eq!(
        r.json()["message"],
        "cannot update connection with active jobs"
    );
    let r = h.call(Method::DELETE, &url, &REPORTER, None).await;
    assert_eq!(
        r.json()["message"],
        "cannot delete connection with active jobs"
    );
    // A job-store outage during the gate is a 500.
    h.jobs.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = h.call(Method::DELETE, &url, &REPORTER, None).await;
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
        datasource_type: fetcher_engine::DatasourceType::Mysql,
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
    let r = h.call(Method::POST, &assign, &REPORTER, None).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, json!("FET-1015"))
    );
    // Another product cannot learn the connection exists: its answer is the unknown id's.
    let unknown = h
        .call(
            Method::POST,
            &format!("{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b/assign"),
            &P,
            None,
        )
        .await;
    let other = h.call(Method::POST, &assign, &P, None).await;
    assert_eq!(
        (other.status, other.code()),
        (unknown.status, unknown.code()),
        "{}",
        other.text
    );
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert!(
        ids(&h, &format!("{BASE}/unassigned"), None)
            .await
            .0
            .is_empty()
    );
    assert_eq!(
        h.call(
            Method::PATCH,
            &url,
            &REPORTER,
            Some(json!({"port": 3307, "password": PASSWORD}))
        )
        .await
        .status,
        StatusCode::OK
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

/// The stored password goes only to the server it was given for: a PATCH that moves the
/// connection (host or port) or changes its TLS settings without the password is a 400
/// naming the password, and changes nothing; with the password, or without a move, it
/// goes through.
#[tokio::test]
async fn moving_a_connection_requires_its_password_again() {
    let h = harness();
    let c = h.create("p", connection("movable")).await;
    let url = format!("{BASE}/{}", c["id"].as_str().unwrap());
    for body in [
        json!({"host": "db2.example.com"}),
        json!({"port": 6543}),
        json!({"host": "db2.example.com", "userName": "other"}),
        json!({"ssl": {"mode": "verify-full", "ca": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"}}),
    ] {
        let r = h.call(Method::PATCH, &url, &P, Some(body.clone())).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0402")),
            "{body}: {}",
            r.text
        );
        assert!(
            r.text
                .contains("password is required when host, port or TLS settings change"),
            "{}",
            r.text
        );
    }
    let got = h.get_as("p", &url).await.json();
    assert_eq!(
        (&got["host"], &got["port"]),
        (&c["host"], &c["port"]),
        "nothing changed"
    );
    // The same host and port again, or other fields, need no password.
    let same = json!({"host": c["host"], "port": c["port"], "databaseName": "elsewhere"});
    let r = h.call(Method::PATCH, &url, &P, Some(same)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let moved = json!({"host": "db2.example.com", "port": 6543, "password": PASSWORD});
    let r = h.call(Method::PATCH, &url, &P, Some(moved)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        (r.json()["host"].as_str(), r.json()["port"].as_i64()),
        (Some("db2.example.com"), Some(6543))
    );
}

/// #30: a connection that belongs to a product answers only to that product, on every
/// by-id route and in validate-schema: another product's header is not found (404
/// `FET-1001`, as if the connection did not exist), no header is 400 `FET-0403`, the
/// owner's header is served. Nothing is changed by a refused call.
#[tokio::test]
async fn every_connection_route_answers_only_to_its_product() {
    let h = harness();
    let c = h.create("billing", connection("billing-pg")).await;
    let id = c["id"].as_str().unwrap().to_owned();
    let url = format!("{BASE}/{id}");
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, url.clone(), None),
        (
            Method::PATCH,
            url.clone(),
            Some(json!({"databaseName": "other"})),
        ),
        (Method::POST, format!("{url}/test"), None),
        (Method::GET, format!("{url}/schema"), None),
        (Method::DELETE, url.clone(), None),
    ];
    for (method, uri, body) in &routes {
        let other = h
            .call(
                method.clone(),
                uri,
                &[("x-product-name", "Reporter")],
                body.clone(),
            )
            .await;
        assert_eq!(
            (other.status, other.code()),
            (StatusCode::NOT_FOUND, json!("FET-1001")),
            "{method} {uri} by another product: {}",
            other.text
        );
        // Strict mode: the header is required on every route.
        let strict = h.reconfigured(ApiConfig {
            require_product: true,
            ..Default::default()
        });
        let none = strict.call(method.clone(), uri, &[], body.clone()).await;
        assert_eq!(
            (none.status, none.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0403")),
            "{method} {uri} without a product, strict: {}",
            none.text
        );
        let bad = h
            .call(
                method.clone(),
                uri,
                &[("x-product-name", "   ")],
                body.clone(),
            )
            .await;
        assert_eq!(bad.code(), json!("FET-0403"), "{method} {uri} blank header");
    }
    // validate-schema: another product's connection is one the caller does not have.
    let vs = format!("{BASE}/validate-schema");
    let mapping = json!({"mappedFields": {"billing-pg": {"users": ["id"]}}});
    let other = h
        .call(Method::POST, &vs, &REPORTER, Some(mapping.clone()))
        .await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::BAD_REQUEST, json!("FET-1062")),
        "{}",
        other.text
    );
    let strict = h.reconfigured(ApiConfig {
        require_product: true,
        ..Default::default()
    });
    let none = strict
        .call(Method::POST, &vs, &[], Some(mapping.clone()))
        .await;
    assert_eq!(none.code(), json!("FET-0403"), "{}", none.text);
    let own = h
        .call(
            Method::POST,
            &vs,
            &[("x-product-name", "billing")],
            Some(mapping),
        )
        .await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.text);
    // Nothing the refused calls tried happened; the owner is served on every route.
    let got = h
        .call(Method::GET, &url, &[("x-product-name", " BILLING ")], None)
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["databaseName"], "ledger");
    for (method, uri, body) in routes {
        let r = h
            .call(method.clone(), &uri, &[("x-product-name", "billing")], body)
            .await;
        assert!(r.status.is_success(), "{method} {uri}: {}", r.text);
    }
    let gone = h
        .call(Method::GET, &url, &[("x-product-name", "billing")], None)
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}
