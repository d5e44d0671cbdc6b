//! Connection routes that reach the database (docs/api.md): connection tests and their
//! rate limit, schema discovery, validate-schema (`connections/probe.rs`).

mod http_support;

use axum::http::{Method, StatusCode};
use http_support::*;
use serde_json::{Value, json};

#[tokio::test]
async fn test_connection_and_rate_limit() {
    let h = harness();
    let c = h.create("p", connection("testme")).await;
    let url = format!("{BASE}/{}/test", c["id"].as_str().unwrap());
    let r = h.call(Method::POST, &url, &P, None).await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(
        (v["status"].as_str(), v["message"].as_str()),
        (Some("success"), Some("Connection successful"))
    );
    assert!(v["latencyMs"].as_u64().unwrap() >= 1);
    h.factory.behaviour.lock().unwrap().fail_test = true;
    let r = h.call(Method::POST, &url, &P, None).await;
    assert_eq!(
        (r.status, r.code(), r.json()["title"].clone()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!(500),
            json!("Database Connection Error")
        )
    );
    for _ in 0..8 {
        h.call(Method::POST, &url, &P, None).await;
    }
    let r = h.call(Method::POST, &url, &P, None).await;
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
    let r = h.get_as("p", &url).await;
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
    // The reference's sorted `fields`, and beside them (#53 item 9) each column in the
    // table's order with its type, nullability, key place and cursor use, and the row
    // estimate, as far as the connector says.
    assert_eq!(
        v["tables"],
        json!([
            {"name": "accounting.invoices", "fields": ["id", "total"],
             "columns": [{"name": "total", "cursor": false}, {"name": "id", "cursor": false}]},
            {"name": "users", "fields": ["address.city", "id", "name"], "rowEstimate": 42,
             "columns": [
                {"name": "name", "type": "text", "nullable": true, "cursor": true},
                {"name": "id", "type": "bigint", "nullable": false, "primaryKey": 1, "cursor": true},
                {"name": "address.city", "type": "jsonb", "nullable": true, "cursor": false}]}
        ])
    );
    h.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Connect);
    let r = h.get_as("p", &url).await;
    assert_eq!(
        (r.status, r.json()["title"].clone()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!("Database Connection Error")
        )
    );
    h.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Internal);
    let r = h.get_as("p", &url).await;
    assert_eq!(
        (r.code(), r.json()["title"].clone()),
        (json!(500), json!("Schema Retrieval Error"))
    );
    assert_eq!(
        h.get_as(
            "p",
            &format!("{BASE}/0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b/schema")
        )
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
    let ok = h.call(Method::POST, &url, &P, Some(json!({"mappedFields": {"pg-main": {"public.users": ["id", "address"], "accounting.invoices": ["total"]}}}))).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    assert_eq!(ok.json()["status"], "success");
    assert!(ok.json().get("errors").is_none());
    let r = h
        .call(Method::POST, &url, &P, Some(json!({"mappedFields": {"pg-main": {"nonexistent_table": ["id"], "users": ["nonexistent_field"]}, "unknown_ds": {"t": ["f"]}}})))
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
        let r = h.call(Method::POST, &url, &P, Some(body.clone())).await;
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
            &P,
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
            &P,
            Some(json!({"mappedFields": {"pg-down": {"users": ["id"]}}})),
        )
        .await;
    assert_eq!(
        r.json()["errors"],
        json!([{"type": "DATA_SOURCE_DOWN", "dataSourceId": "pg-down"}])
    );
}
