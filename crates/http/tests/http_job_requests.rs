//! What a job request may name and how a bad one is answered (docs/api.md, "Creating a
//! job", "Products", "Errors"): products, body errors that say where and why, filters
//! checked at creation. The job routes themselves are in `http_jobs.rs`.

mod http_support;

use axum::http::{Method, StatusCode};
use http_support::*;
use serde_json::{Value, json};

/// #29: filters that differ only in integers beyond 2^53 are two jobs, not one; a number
/// with more digits than a double holds is refused (it would be read, and de-duplicated,
/// as another number), and given as a string it is exact.
#[tokio::test]
async fn filter_numbers_are_exact_or_refused() {
    let h = setup().await;
    let body = |v: Value| {
        json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}},
            "filters": {"core-pg": {"users": {"id": {"eq": [v]}}}}},
            "metadata": {"source": "reporter"}})
    };
    let create = |v: Value| {
        let h = &h;
        let b = body(v);
        async move { h.call(Method::POST, "/v1/fetcher", &[], Some(b)).await }
    };
    let a = create(json!(9007199254740993u64)).await;
    let b = create(json!(9007199254740994u64)).await;
    assert_eq!(
        (a.status, b.status),
        (StatusCode::ACCEPTED, StatusCode::ACCEPTED),
        "{}",
        b.text
    );
    assert_ne!(a.json()["jobId"], b.json()["jobId"]);
    // The same one again is the duplicate it always was.
    let again = create(json!(9007199254740993u64)).await;
    assert_eq!(
        (again.status, again.json()["jobId"].clone()),
        (StatusCode::OK, a.json()["jobId"].clone())
    );
    // Decimals beyond a double, and integers beyond 64 bits, as JSON numbers: refused.
    for raw in [
        "0.1000000000000000000001",
        "18446744073709551617",
        "-9.999999999999999999e5",
    ] {
        let text = format!(
            r#"{{"dataRequest":{{"mappedFields":{{"core-pg":{{"users":["id"]}}}},"filters":{{"core-pg":{{"users":{{"id":{{"gt":[{raw}]}}}}}}}}}},"metadata":{{"source":"reporter"}}}}"#
        );
        let r = h
            .raw(
                Method::POST,
                "/v1/fetcher",
                &[("content-type", "application/json")],
                text,
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0401")),
            "{raw}: {}",
            r.text
        );
    }
    // As strings they are exact: two jobs.
    let s1 = create(json!("0.1000000000000000000001")).await;
    let s2 = create(json!("0.1000000000000000000002")).await;
    assert_eq!(
        (s1.status, s2.status),
        (StatusCode::ACCEPTED, StatusCode::ACCEPTED)
    );
    assert_ne!(s1.json()["jobId"], s2.json()["jobId"]);
}

/// Products within a tenant (docs/api.md, "Products"): a job is its `metadata.source`'s;
/// another product reading or canceling it is answered as if it did not exist, and a
/// caller naming a product cannot create a job of another.
#[tokio::test]
async fn a_product_reads_and_cancels_only_its_own_jobs() {
    let h = setup().await;
    let reporter = [("x-product-name", "reporter")];
    let other = [("x-product-name", "other")];
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &other,
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-1016")),
        "{}",
        r.text
    );
    assert_eq!(
        r.json()["message"],
        "metadata.source 'reporter' is not the product named by X-Product-Name ('other')"
    );
    // A caller naming a product is not told another product's name.
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &other,
            Some(job("core-pg", "other")),
        )
        .await;
    assert_eq!(
        r.json()["message"],
        "Connection 'core-pg' does not belong to the product identified by source 'other': metadata.source must be the product the connection was created or assigned under (its X-Product-Name)"
    );
    assert!(h.queue.sent().is_empty(), "a refused job is not queued");
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &reporter,
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = job_id(&r.json());
    let path = format!("/v1/fetcher/{id}");
    let cancel = format!("{path}/cancel");
    for (method, route) in [(Method::GET, &path), (Method::POST, &cancel)] {
        let r = h.call(method.clone(), route, &other, None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, json!("FET-1001")),
            "{method} {route}: {}",
            r.text
        );
        assert!(!r.text.contains(&id.to_string()), "{}", r.text);
    }
    // The other product's cancel changed nothing; its own product and a caller naming
    // none (the reference's clients) are answered.
    let r = h.call(Method::GET, &path, &reporter, None).await;
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (StatusCode::OK, Some("pending"))
    );
    assert_eq!(h.get(&path).await.status, StatusCode::OK);
    // A deployment that requires the header refuses a caller naming none.
    let strict = h.reconfigured(fetcher_http::ApiConfig {
        require_product: true,
        ..Default::default()
    });
    for (method, route) in [(Method::GET, &path), (Method::POST, &cancel)] {
        let r = strict.call(method.clone(), route, &[], None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0403")),
            "{method} {route}"
        );
    }
    let r = strict
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(job("core-pg", "reporter")),
        )
        .await;
    assert_eq!(r.code(), json!("FET-0403"), "{}", r.text);
    let r = strict.call(Method::POST, &cancel, &reporter, None).await;
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (StatusCode::ACCEPTED, Some("canceled")),
        "{}",
        r.text
    );
}

/// #53 item 3: a job body that cannot be used says where and why (the JSON path, what was
/// expected and what kind came, or the line and column of malformed JSON), and a
/// misspelled known key is refused naming the right one instead of ignored.
#[tokio::test]
async fn job_bodies_say_where_and_why() {
    let h = setup().await;
    let ok = json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}, "metadata": {"source": "reporter"}});
    let with = |path: &[&str], v: serde_json::Value| {
        let mut b = ok.clone();
        let mut at = &mut b;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = v;
        b.to_string()
    };
    for (body, why) in [
        (
            with(
                &["dataRequest", "filters"],
                json!({"core-pg": {"users": {"country": {"eq": "BR"}}}}),
            ),
            "dataRequest.filters.core-pg.users.country.eq: expected an array, got a string",
        ),
        (
            with(
                &["dataRequest", "filters"],
                json!({"core-pg": {"users": {"country": "BR"}}}),
            ),
            "dataRequest.filters.core-pg.users.country: expected an object, got a string",
        ),
        (
            with(&["resultFormat"], json!("csv")),
            "resultFormat: unknown variant 'csv', expected one of 'v2', 'v1', 'parquet'",
        ),
        (
            with(&["resultformat"], json!("parquet")),
            "unknown key 'resultformat': did you mean 'resultFormat'?",
        ),
        (
            with(&["dataRequest", "mapped_fields"], json!({})),
            "unknown key 'mapped_fields': did you mean 'mappedFields'?",
        ),
        (
            format!("{},", ok),
            // The comma is the character after the object.
            &*format!(
                "malformed JSON at line 1, column {}: trailing characters",
                ok.to_string().len() + 1
            )
            .leak(),
        ),
    ] {
        let r = h
            .raw(
                Method::POST,
                "/v1/fetcher",
                &[("content-type", "application/json")],
                body.clone(),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0001")),
            "{body}: {}",
            r.text
        );
        assert_eq!(
            r.json()["message"],
            format!("unable to parse request body: {why}"),
            "{body}"
        );
    }
}

/// #53 item 4: filters are checked when the job is created: an unknown operator or the
/// wrong number of values is 400 `FET-0401` naming the table, the column and what is
/// allowed (the reference ignored an unknown operator, widening the job), and a filter on
/// a column the cached schema lacks is refused like a mapped one (422 `FET-1060`).
#[tokio::test]
async fn filters_are_checked_at_creation() {
    let h = harness();
    h.create("reporter", connection("core-pg")).await;
    let with_filter = |f: serde_json::Value, n: u32| {
        json!({"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}},
            "filters": {"core-pg": {"users": f}}}, "metadata": {"source": "reporter", "n": n}})
    };
    for (n, (filter, message)) in [
        (
            json!({"country": {"equals": ["BR"]}}),
            "filter on 'core-pg.users.country': unknown operator 'equals'; the operators are eq, ne, gt, gte, lt, lte, between, in, nin, like",
        ),
        (
            json!({"id": {"between": [1]}}),
            "filter on 'core-pg.users.id': 'between' takes 2 values, got 1",
        ),
        (
            json!({"id": {"gt": [1, 2]}}),
            "filter on 'core-pg.users.id': 'gt' takes 1 value, got 2",
        ),
        (
            json!({"name": {"like": [5]}}),
            "filter on 'core-pg.users.name': 'like' takes a string pattern",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let r = h
            .call(Method::POST, "/v1/fetcher", &[], Some(with_filter(filter.clone(), n as u32)))
            .await;
        assert_eq!(
            (r.status, r.code(), r.json()["message"].clone()),
            (StatusCode::BAD_REQUEST, json!("FET-0401"), json!(message)),
            "{filter}"
        );
    }
    assert!(h.queue.sent().is_empty(), "nothing queued");
    // With the schema cached, a filter on a column the table lacks is refused too.
    h.cache_schema().await;
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(with_filter(json!({"ghost_column": {"eq": [1]}}), 99)),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(
        r.json()["errors"],
        json!([{"type": "FIELD_NOT_FOUND", "dataSourceId": "core-pg", "table": "users", "field": "ghost_column"}])
    );
    // With the schema cached, a value of the wrong kind for its column is refused, named
    // with the column's type and what it takes (the value itself is not repeated).
    for (n, (filter, message)) in [
        (
            json!({"id": {"eq": ["abc"]}}),
            "filter on 'core-pg.users.id' (bigint): 'eq' takes a number (or a decimal string), got a string that is not a number",
        ),
        (
            json!({"name": {"in": ["a", 2]}}),
            "filter on 'core-pg.users.name' (text): 'in' takes a string, got a number",
        ),
        (
            json!({"id": {"like": ["1%"]}}),
            "filter on 'core-pg.users.id' (bigint): 'like' applies to text columns; use eq, in, gt, lt or between",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let r = h
            .call(Method::POST, "/v1/fetcher", &[], Some(with_filter(filter.clone(), 200 + n as u32)))
            .await;
        assert_eq!(
            (r.status, r.code(), r.json()["message"].clone()),
            (StatusCode::BAD_REQUEST, json!("FET-0401"), json!(message)),
            "{filter}"
        );
    }
    // A known column with a good filter is accepted.
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(with_filter(json!({"id": {"between": [1, 9]}}), 100)),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}
