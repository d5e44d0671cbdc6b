//! The job list, `GET /v1/fetcher` (docs/api.md, "Listing jobs").

mod http_support;

use axum::http::{Method, StatusCode};
use http_support::*;
use serde_json::json;

/// `GET /v1/fetcher` (docs/api.md, "Listing jobs"): the tenant's jobs newest first, paged
/// like connections, scoped to the caller's product, filtered by status, source, sync and
/// metadata; a bad status names the parameter.
#[tokio::test]
async fn jobs_are_listed_newest_first_paged_and_filtered() {
    let h = setup().await;
    h.create("other", connection("other-pg")).await;
    let submit = |ds: &'static str, source: &'static str, run: u32| {
        let mut body = job(ds, source);
        body["metadata"]["run"] = json!(run.to_string());
        body
    };
    let mut ids = Vec::new();
    for run in 1..=3 {
        let r = h
            .call(
                Method::POST,
                "/v1/fetcher",
                &[],
                Some(submit("core-pg", "reporter", run)),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        ids.push(r.json()["jobId"].as_str().unwrap().to_owned());
    }
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some(submit("other-pg", "other", 9)),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let canceled = h
        .call(
            Method::POST,
            &format!("/v1/fetcher/{}/cancel", ids[0]),
            &[],
            None,
        )
        .await;
    assert_eq!(canceled.status, StatusCode::ACCEPTED, "{}", canceled.text);

    let list = |query: &'static str, product: Option<&'static str>| {
        let h = &h;
        async move {
            let headers: Vec<(&str, &str)> =
                product.map(|p| ("x-product-name", p)).into_iter().collect();
            h.call(Method::GET, &format!("/v1/fetcher{query}"), &headers, None)
                .await
        }
    };
    let ids_of = |v: &serde_json::Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();

    let r = list("", Some("reporter")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(ids_of(&v), newest_first, "the product's jobs, newest first");
    assert_eq!(
        (v["total"].as_u64(), v["page"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(v["items"][2]["status"], "canceled");
    assert_eq!(
        v["items"][0]["mappedFields"],
        json!({"core-pg": {"users": ["id", "name"]}})
    );
    assert_eq!(
        list("", None).await.json()["total"],
        4,
        "no product named: every product's"
    );

    let v = list("?limit=2&page=2", Some("reporter")).await.json();
    assert_eq!(ids_of(&v), [ids[0].clone()]);
    assert_eq!(v["total"], 3);
    let v = list("?sortOrder=asc&limit=1", Some("reporter"))
        .await
        .json();
    assert_eq!(ids_of(&v), [ids[0].clone()], "oldest first");

    let v = list("?status=canceled", None).await.json();
    assert_eq!(ids_of(&v), [ids[0].clone()]);
    let v = list("?status=pending,processing&source=reporter", None)
        .await
        .json();
    assert_eq!(ids_of(&v), newest_first[..2].to_vec());
    assert_eq!(list("?source=other", None).await.json()["total"], 1);
    assert_eq!(
        list("?metadata.run=2", None).await.json()["items"][0]["id"],
        json!(ids[1])
    );
    assert_eq!(list("?syncId=nightly", None).await.json()["total"], 0);
    let v = list("?startDate=2001-01-01&endDate=2001-01-02", None)
        .await
        .json();
    assert_eq!(v["total"], 0, "a window before every job");

    let r = list("?status=done", None).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, json!("FET-0405"))
    );
    assert!(r.text.contains("status"), "{}", r.text);
    let r = list("?limit=101", None).await;
    assert_eq!(r.code(), json!("FET-0406"));
}
