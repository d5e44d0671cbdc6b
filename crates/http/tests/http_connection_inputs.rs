//! How a connection may be given and who may use it without naming a product (docs/api.md,
//! "Connections", "Products"): a connection URL, and a caller that names no product. The
//! connection routes themselves are in `http_connections.rs`.

mod http_support;

use axum::http::{Method, StatusCode};
use http_support::*;
use serde_json::json;

/// The reference's clients send `X-Product-Name` only on create, assign and list: by
/// default a caller that names no product is answered on every other route, as the
/// reference answers it (a product is a label inside a tenant, not a credential).
#[tokio::test]
async fn a_caller_naming_no_product_is_answered_by_default() {
    let h = harness();
    let c = h.create("billing", connection("billing-pg")).await;
    let url = format!("{BASE}/{}", c["id"].as_str().unwrap());
    let got = h.call(Method::GET, &url, &[], None).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.json()["productName"], "billing");
    let patched = h
        .call(
            Method::PATCH,
            &url,
            &[],
            Some(json!({"databaseName": "d2"})),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let schema = h
        .call(Method::GET, &format!("{url}/schema"), &[], None)
        .await;
    assert_ne!(schema.code(), json!("FET-0403"), "{}", schema.text);
    let vs = h
        .call(
            Method::POST,
            &format!("{BASE}/validate-schema"),
            &[],
            Some(json!({"mappedFields": {"billing-pg": {"users": ["id"]}}})),
        )
        .await;
    assert_eq!(vs.status, StatusCode::OK, "{}", vs.text);
    let deleted = h.call(Method::DELETE, &url, &[], None).await;
    assert!(deleted.status.is_success(), "{}", deleted.text);
}

/// #53 item 7: a connection given as a URL, as other tools take it; the password is never
/// echoed, a field given both ways must agree, and a PATCH takes fields only.
#[tokio::test]
async fn a_connection_url_fills_the_fields() {
    let h = harness();
    let secret = "s3cr%40t-pass";
    let body = json!({"configName": "from-url",
        "url": format!("postgresql://reader:{secret}@db.example.com:6543/app%20db?sslmode=require")});
    let r = h.call(Method::POST, BASE, &P, Some(body)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let c = r.json();
    assert_eq!(
        (
            &c["type"],
            &c["host"],
            &c["port"],
            &c["databaseName"],
            &c["userName"],
            &c["ssl"]["mode"]
        ),
        (
            &json!("POSTGRESQL"),
            &json!("db.example.com"),
            &json!(6543),
            &json!("app db"),
            &json!("reader"),
            &json!("require")
        ),
        "{c}"
    );
    assert!(
        !r.text.contains("s3cr") && !r.text.contains("postgresql://"),
        "{}",
        r.text
    );
    // MariaDB's scheme, the default port.
    let r = h
        .call(
            Method::POST,
            BASE,
            &P,
            Some(json!({"configName": "maria-url", "url": "mariadb://app:pw@maria.example.com/shop"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        (r.json()["type"].clone(), r.json()["port"].clone()),
        (json!("MYSQL"), json!(3306))
    );
    for (body, why) in [
        (
            json!({"configName": "bad-scheme", "url": "oracle://u:p@h/db"}),
            "url: it must start with postgresql://, postgres://, mysql:// or mariadb://",
        ),
        (
            json!({"configName": "disagree", "host": "other.example.com", "url": "postgresql://u:p@db.example.com/db"}),
            "url: its host differs from the host given beside it",
        ),
        (
            json!({"configName": "not-a-url", "url": "somewhere, with a pass"}),
            "url: expected a URL such as postgresql://user:password@host:5432/database",
        ),
    ] {
        let r = h.call(Method::POST, BASE, &P, Some(body.clone())).await;
        assert_eq!(
            (r.status, r.json()["message"].clone()),
            (
                StatusCode::BAD_REQUEST,
                json!(format!("unable to parse request body: {why}"))
            ),
            "{body}"
        );
        assert!(
            !r.text.contains(":p@") && !r.text.contains("with a pass"),
            "{}",
            r.text
        );
    }
    let id = c["id"].as_str().unwrap();
    let r = h
        .call(
            Method::PATCH,
            &format!("{BASE}/{id}"),
            &P,
            Some(json!({"url": "postgresql://u:p@h/db"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
}
