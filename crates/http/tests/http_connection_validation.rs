//! Connection request validation (docs/api.md, "Connections"): the product header, the
//! validation matrix of create, and clean 400s for broken bodies (`connections/validate.rs`).

mod http_support;

use axum::http::{Method, StatusCode};
use http_support::*;
use serde_json::json;

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
    // Model rules: bad characters in the name, SSL rules (entityType present). A name
    // that breaks its rule is invalid and says the rule (#53 item 3; the reference filed
    // it under missing fields).
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
        (json!("FET-0001"), json!("connection"))
    );
    assert_eq!(
        r.json()["fields"]["config_name"],
        "config name must be 3 to 100 characters of letters, digits, '_' and '-'; it contains ' '"
    );
    // A TLS mode needs no CA of its own (#53 item 7): verification uses the bundled
    // Mozilla roots, `require` encrypts without verifying.
    for (name, mode) in [("ssl-one", "verify-full"), ("ssl-req", "require")] {
        let mut b = connection(name);
        b["ssl"] = json!({"mode": mode});
        let r = h
            .call(Method::POST, BASE, &[("x-product-name", "p")], Some(b))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{mode}: {}", r.text);
    }
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
    // #53 item 3: where and why, never the value.
    for (body, why) in [
        (
            "{",
            "malformed JSON at line 1, column 1: EOF while parsing an object",
        ),
        ("", "the body is empty: send a JSON object"),
        ("[]", "expected an object, got an array"),
        (
            r#"{"port":"5432"}"#,
            "port: expected a whole number, got a string",
        ),
        (
            r#"{"port":5432.0}"#,
            "port: expected a whole number, got a number with a fraction",
        ),
        ("null", "expected an object, got null"),
        (
            r#"{"port":5432,}"#,
            "malformed JSON at line 1, column 14: trailing comma",
        ),
        (
            r#"{"ssl":"require"}"#,
            "ssl: expected an object, got a string",
        ),
        (
            r#"{"password":12345}"#,
            "password: expected a string, got a whole number",
        ),
        (
            r#"{"database_name":"app"}"#,
            "unknown key 'database_name': did you mean 'databaseName'?",
        ),
    ] {
        let r = h.raw(Method::POST, BASE, &hdr, body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0001")),
            "{body}"
        );
        assert_eq!(
            r.json()["message"],
            format!("unable to parse request body: {why}"),
            "{body}"
        );
        assert!(
            !r.text.contains("12345") && !r.text.contains("5432.0"),
            "{}",
            r.text
        );
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
    assert_eq!(
        r.json()["message"],
        "unable to parse request body: Content-Type must be application/json"
    );
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

/// A NUL in the user, database, schema or password is 400 `FET-0001` naming the field, on
/// create and on PATCH, before anything is stored (#30): no driver gets to refuse it later.
#[tokio::test]
async fn a_nul_in_a_login_field_is_a_400() {
    let h = harness();
    for (key, field) in [
        ("userName", "username"),
        ("databaseName", "database_name"),
        ("schema", "schema"),
        ("password", "password"),
    ] {
        let mut body = connection("nul-check");
        body[key] = json!("ro\u{0}x");
        let r = h.call(Method::POST, BASE, &P, Some(body)).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0001")),
            "{key}: {}",
            r.text
        );
        assert!(r.json()["fields"][field].is_string(), "{key}: {}", r.text);
    }
    let c = h.create("p", connection("nul-check")).await;
    let url = format!("{BASE}/{}", c["id"].as_str().unwrap());
    let r = h
        .call(Method::PATCH, &url, &P, Some(json!({"userName": "a\u{0}"})))
        .await;
    assert_eq!(r.code(), json!("FET-0001"), "{}", r.text);
    assert_eq!(h.get_as("p", &url).await.json()["userName"], "reporter_ro");
}

/// A MongoDB connection's options in `metadata` are typed (docs/datasources.md,
/// "MongoDB"): a bad `authSource` or `directConnection` is a 400 naming the key and what
/// it must be, on create and on PATCH; other metadata keys stay the caller's.
#[tokio::test]
async fn mongodb_options_in_metadata_are_checked() {
    let h = harness();
    let mongo = |name: &str, metadata: serde_json::Value| {
        json!({"configName": name, "type": "MONGODB", "host": "db.example.com", "port": 27017,
               "databaseName": "app", "metadata": metadata})
    };
    for (i, (metadata, key)) in [
        (json!({"authSource": 7}), "authSource"),
        (json!({"authSource": "a/b"}), "authSource"),
        (json!({"directConnection": "yes"}), "directConnection"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = h
            .call(
                Method::POST,
                BASE,
                &[("x-product-name", "p")],
                Some(mongo(&format!("bad-{i}"), metadata.clone())),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{metadata}: {}", r.text);
        let said = r.json()["fields"][format!("metadata.{key}")].clone();
        assert!(
            said.as_str()
                .is_some_and(|m| m.starts_with(&format!("metadata.{key} must be"))),
            "{metadata}: {}",
            r.text
        );
    }
    let created = h
        .create(
            "p",
            mongo(
                "good",
                json!({"authSource": "users", "directConnection": "true", "team": 1}),
            ),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let r = h
        .call(
            Method::PATCH,
            &format!("{BASE}/{id}"),
            &[("x-product-name", "p")],
            Some(json!({"metadata": {"authSource": false}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("metadata.authSource"), "{}", r.text);
    // A PostgreSQL connection's metadata is the caller's own.
    let mut pg = connection("pg-meta");
    pg["metadata"] = json!({"authSource": 7});
    h.create("p", pg).await;
}
