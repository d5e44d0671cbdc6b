//! Host safety on the API (docs/datasources.md, "Host safety"): the SSRF guard in
//! multi-tenant mode, operator-admitted private networks, and which SQLite files a host
//! lets a connection name.

mod http_support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use fetcher_http::{ApiConfig, JwtAuthenticator};
use http_support::*;
use serde_json::json;

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
            Some(json!({"host": "10.20.9.9", "password": PASSWORD})),
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
