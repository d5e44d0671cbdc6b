//! Incremental jobs and syncs on the API (docs/api.md, "Incremental extraction",
//! "Syncs"): what creation checks and refuses, one active job per sync, the sync routes,
//! tenants apart.

mod http_support;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use fetcher_engine::{Timestamp, Watermark};
use fetcher_host::model::{JobResult, JobStatus, PendingEvent, WatermarkSpan};
use fetcher_host::ports::{ClaimOutcome, JobStore};
use fetcher_http::JwtAuthenticator;
use http_support::*;
use serde_json::{Value, json};

fn incremental_job(read: Value, sync: Option<&str>) -> Value {
    let mut body = job("core-pg", "reporter");
    body["dataRequest"]["mappedFields"]["core-pg"]["users"] = json!(["name"]);
    body["incremental"] = json!({"core-pg": {"users": read}});
    if let Some(s) = sync {
        body["syncId"] = json!(s);
    }
    body
}

async fn create(h: &Harness, body: Value) -> Reply {
    h.call(Method::POST, "/v1/fetcher", &[], Some(body)).await
}

/// Completes `id` in the store with the watermark `values` on `(cursor, key)` of
/// `core-pg.users`.
async fn complete(h: &Harness, id: &str, cursor: &str, key: &[&str], values: Value) {
    let id = fetcher_host::model::JobId::parse(id).expect("a job id");
    let now = Timestamp::now();
    let ClaimOutcome::Claimed { token, .. } = h
        .jobs
        .claim("default", id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    let to = Watermark {
        cursor: cursor.into(),
        key: key.iter().map(|k| k.to_string()).collect(),
        values: values.as_array().unwrap().clone(),
        log: None,
    };
    let result = JobResult {
        path: "x".into(),
        watermarks: [(
            "core-pg".to_string(),
            [(
                "users".to_string(),
                WatermarkSpan {
                    from_watermark: None,
                    to_watermark: Some(to),
                },
            )]
            .into(),
        )]
        .into(),
        ..Default::default()
    };
    let event = PendingEvent {
        status: JobStatus::Completed,
        payload: "{}".into(),
        failures: 0,
    };
    h.jobs
        .complete("default", id, token, &result, &event, now)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_incremental_job_names_its_sync_and_its_resolved_key() {
    let h = setup().await;
    let r = create(&h, incremental_job(json!({"cursor": "id"}), None)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.json()["jobId"].as_str().unwrap().to_owned();
    let on_name = create(
        &h,
        incremental_job(json!({"cursor": "name"}), Some("by-name")),
    )
    .await;
    let on_name = h
        .get(&format!(
            "/v1/fetcher/{}",
            on_name.json()["jobId"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(
        on_name["incremental"]["core-pg"]["users"]["key"],
        json!(["id"]),
        "the primary key breaks ties"
    );
    let got = h.get(&format!("/v1/fetcher/{id}")).await.json();
    let sync = got["syncId"].as_str().unwrap().to_owned();
    assert!(sync.starts_with("auto-") && sync.len() == 37, "{got}");
    // The key defaulted to the primary key; the cursor is read beside the mapped fields.
    assert_eq!(
        got["incremental"],
        json!({"core-pg": {"users": {"cursor": "id", "key": []}}}),
        "the cursor is the key"
    );
    // The same request again is its duplicate (dedup as for any job).
    let again = create(&h, incremental_job(json!({"cursor": "id"}), None)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.json()["jobId"], id.as_str());
    // The sync route shows it active.
    let s = h.get(&format!("/v1/syncs/{sync}")).await;
    assert_eq!(s.status, StatusCode::OK, "{}", s.text);
    assert_eq!(s.json()["activeJob"], id.as_str());
    assert_eq!(s.json()["tables"], json!({}));
    // Once it completed, the same request within the dedup window is still that job
    // (dedup as for any job); varied metadata makes the sync's next job.
    complete(&h, &id, "id", &[], json!([7])).await;
    let again = create(&h, incremental_job(json!({"cursor": "id"}), None)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.json()["jobId"], id.as_str());
    let mut varied = incremental_job(json!({"cursor": "id"}), None);
    varied["metadata"]["run"] = json!(2);
    let next = create(&h, varied).await;
    assert_eq!(next.status, StatusCode::ACCEPTED, "{}", next.text);
    let next = h
        .get(&format!(
            "/v1/fetcher/{}",
            next.json()["jobId"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(next["syncId"], sync.as_str(), "the same sync continues");
}

#[tokio::test]
async fn a_second_job_of_a_busy_sync_is_refused_and_a_reset_waits_for_it() {
    let h = setup().await;
    let first = create(
        &h,
        incremental_job(json!({"cursor": "id"}), Some("users-hourly")),
    )
    .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let id = first.json()["jobId"].as_str().unwrap().to_owned();
    // Another request of the same sync (another lookback) while the first is pending.
    let second = create(
        &h,
        incremental_job(
            json!({"cursor": "id", "lookback": 10}),
            Some("users-hourly"),
        ),
    )
    .await;
    assert_eq!(
        (second.status, second.code()),
        (StatusCode::CONFLICT, json!("FET-1024")),
        "{}",
        second.text
    );
    assert!(second.json()["message"].as_str().unwrap().contains(&id));
    let reset = h
        .call(Method::POST, "/v1/syncs/users-hourly/reset", &[], None)
        .await;
    assert_eq!(
        (reset.status, reset.code()),
        (StatusCode::CONFLICT, json!("FET-1024"))
    );
    // Once the first completed, its watermark is the sync's; the next job is accepted.
    complete(&h, &id, "id", &[], json!([42])).await;
    let s = h.get("/v1/syncs/users-hourly").await.json();
    assert_eq!(
        s["tables"]["core-pg"]["users"]["watermark"]["values"],
        json!([42]),
        "{s}"
    );
    assert_eq!(s["tables"]["core-pg"]["users"]["jobId"], id.as_str());
    assert!(s.get("activeJob").is_none(), "{s}");
    let next = create(
        &h,
        incremental_job(
            json!({"cursor": "id", "lookback": 10}),
            Some("users-hourly"),
        ),
    )
    .await;
    assert_eq!(next.status, StatusCode::ACCEPTED, "{}", next.text);
    let next_id = next.json()["jobId"].as_str().unwrap().to_owned();
    // A job on another cursor than the stored watermark's is refused, naming both.
    h.jobs
        .fail(
            "default",
            fetcher_host::model::JobId::parse(&next_id).unwrap(),
            None,
            "x",
            &PendingEvent {
                status: JobStatus::Failed,
                payload: "{}".into(),
                failures: 0,
            },
            Timestamp::now(),
        )
        .await
        .unwrap();
    let other = create(
        &h,
        incremental_job(json!({"cursor": "name"}), Some("users-hourly")),
    )
    .await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::CONFLICT, json!("FET-1025")),
        "{}",
        other.text
    );
    // A reset (of the one table) starts over; the other cursor is then accepted.
    let reset = h
        .call(
            Method::POST,
            "/v1/syncs/users-hourly/reset",
            &[],
            Some(json!({"tables": {"core-pg": ["users"]}})),
        )
        .await;
    assert_eq!(reset.status, StatusCode::OK, "{}", reset.text);
    assert_eq!(reset.json()["tables"], json!({}));
    let other = create(
        &h,
        incremental_job(json!({"cursor": "name"}), Some("users-hourly")),
    )
    .await;
    assert_eq!(other.status, StatusCode::ACCEPTED, "{}", other.text);
}

#[tokio::test]
async fn bad_incremental_reads_are_400s_that_name_the_column() {
    let h = setup().await;
    let cases: Vec<(Value, Option<&str>, &str)> = vec![
        (json!({"cursor": "address.city"}), None, "jsonb"),
        (json!({"cursor": "nope"}), None, "'nope' is not a column"),
        (
            json!({"cursor": "id", "key": ["ghost"]}),
            None,
            "'ghost' is not a column",
        ),
        (json!({"cursor": "id", "key": ["id"]}), None, "twice"),
        (
            json!({"cursor": "id", "lookback": "PT5M"}),
            None,
            "must be a whole number",
        ),
        (
            json!({"cursor": "name", "lookback": 5}),
            None,
            "a text cursor takes no lookback",
        ),
        (json!({"cursor": "  "}), None, "names no cursor"),
        (json!({}), None, "names no cursor"),
        (
            json!({"mode": "log", "cursor": "id"}),
            None,
            "takes no cursor",
        ),
        (
            json!({"mode": "log", "lookback": "PT5M"}),
            None,
            "drop \"lookback\"",
        ),
        (json!({"cursor": "id"}), Some("a b"), "syncId"),
    ];
    for (read, sync, says) in cases {
        let r = create(&h, incremental_job(read.clone(), sync)).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!("FET-0401")),
            "{read}: {}",
            r.text
        );
        assert_eq!(r.json()["title"], "Invalid Incremental Read", "{}", r.text);
        assert!(
            r.json()["message"].as_str().unwrap().contains(says),
            "{read}: {}",
            r.text
        );
    }
    // An incremental read of a table the job does not map.
    let mut body = incremental_job(json!({"cursor": "id"}), None);
    body["incremental"] = json!({"core-pg": {"accounting.invoices": {"cursor": "id"}}});
    let r = create(&h, body).await;
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("does not select"),
        "{}",
        r.text
    );
    // A table whose key the schema does not give must name one.
    let mut body = job("core-pg", "reporter");
    body["dataRequest"]["mappedFields"]["core-pg"] = json!({"accounting.invoices": ["total"]});
    body["incremental"] = json!({"core-pg": {"accounting.invoices": {"cursor": "id"}}});
    let r = create(&h, body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("incremental.key"),
        "{}",
        r.text
    );
    // A syncId without an incremental read; a lookback that is no duration; an unknown key.
    let mut body = job("core-pg", "reporter");
    body["syncId"] = json!("s1");
    assert_eq!(create(&h, body).await.status, StatusCode::BAD_REQUEST);
    for (read, says) in [
        (json!({"cursor": "id", "lookback": "5 minutes"}), "ISO 8601"),
        (json!({"cursor": "id", "lookback": -1}), "whole number"),
        (
            json!({"cursor": "id", "cursr": "x"}),
            "unknown field `cursr`",
        ),
        (json!({"key": ["id"]}), "names no cursor"),
        (json!({"mode": "logs"}), "unknown variant `logs`"),
        (json!("id"), "expected struct"),
    ] {
        let r = create(&h, incremental_job(read.clone(), None)).await;
        assert_eq!(
            (r.status, r.code(), r.json()["title"].clone()),
            (
                StatusCode::BAD_REQUEST,
                json!("FET-0401"),
                json!("Invalid Incremental Read")
            ),
            "{read}: {}",
            r.text
        );
        assert!(
            r.json()["message"].as_str().unwrap().contains(says),
            "{read}: {}",
            r.text
        );
    }
    assert!(
        h.jobs
            .list_pending(Timestamp::now(), 100)
            .await
            .unwrap()
            .is_empty(),
        "nothing stored"
    );
}

#[tokio::test]
async fn another_tenants_sync_is_a_404() {
    let h = multi_tenant(Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()));
    let token = |tenant: &str| {
        format!(
            "Bearer {}",
            hs(json!({"tenantId": tenant, "exp": now() + 600}))
        )
    };
    let (t1, t2) = (token("t1"), token("t2"));
    for t in [&t1, &t2] {
        let r = h
            .call(
                Method::POST,
                "/v1/management/connections",
                &[("authorization", t), ("x-product-name", "reporter")],
                Some(connection("core-pg")),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[("authorization", &t1)],
            Some(incremental_job(
                json!({"cursor": "id"}),
                Some("shared-name"),
            )),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let mine = h
        .call(
            Method::GET,
            "/v1/syncs/shared-name",
            &[("authorization", &t1)],
            None,
        )
        .await;
    assert_eq!(mine.status, StatusCode::OK);
    for (method, path) in [
        (Method::GET, "/v1/syncs/shared-name"),
        (Method::POST, "/v1/syncs/shared-name/reset"),
    ] {
        let theirs = h.call(method, path, &[("authorization", &t2)], None).await;
        assert_eq!(
            (theirs.status, theirs.code()),
            (StatusCode::NOT_FOUND, json!("FET-1001")),
            "{path}: {}",
            theirs.text
        );
    }
    // The same syncId is another sync in another tenant.
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[("authorization", &t2)],
            Some(incremental_job(
                json!({"cursor": "id"}),
                Some("shared-name"),
            )),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

/// Products within a tenant (docs/api.md, "Products"): a sync is the product's whose job
/// started it. Another product neither sees nor resets it, and its jobs naming the sync
/// are refused without learning the owner's job.
#[tokio::test]
async fn a_sync_answers_only_to_its_product() {
    let h = setup().await;
    h.create("other", connection("other-pg")).await;
    let other = [("x-product-name", "other")];
    let reporter = [("x-product-name", "reporter")];
    let mut theirs = job("other-pg", "other");
    theirs["incremental"] = json!({"other-pg": {"users": {"cursor": "id"}}});
    theirs["syncId"] = json!("shared-name");
    let first = create(
        &h,
        incremental_job(json!({"cursor": "id"}), Some("shared-name")),
    )
    .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let id = first.json()["jobId"].as_str().unwrap().to_string();
    // While the owner's job runs, and after it completed: 409 FET-1026, never its job.
    for round in ["active", "completed"] {
        let r = h
            .call(Method::POST, "/v1/fetcher", &other, Some(theirs.clone()))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::CONFLICT, json!("FET-1026")),
            "{round}: {}",
            r.text
        );
        assert!(!r.text.contains(&id), "{round}: {}", r.text);
        if round == "active" {
            complete(&h, &id, "id", &[], json!([7])).await;
        }
    }
    for (method, route) in [
        (Method::GET, "/v1/syncs/shared-name"),
        (Method::POST, "/v1/syncs/shared-name/reset"),
    ] {
        let r = h.call(method.clone(), route, &other, None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, json!("FET-1001")),
            "{method} {route}: {}",
            r.text
        );
    }
    // The reset of the other product changed nothing.
    let s = h
        .call(Method::GET, "/v1/syncs/shared-name", &reporter, None)
        .await;
    assert_eq!(s.status, StatusCode::OK, "{}", s.text);
    assert_eq!(
        s.json()["tables"]["core-pg"]["users"]["watermark"]["values"],
        json!([7])
    );
    // The other product's own sync of another name is its own.
    theirs["syncId"] = json!("theirs");
    let r = h
        .call(Method::POST, "/v1/fetcher", &other, Some(theirs))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let r = h
        .call(Method::GET, "/v1/syncs/theirs", &reporter, None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

/// #53 item 5: `GET /v1/syncs` lists the caller's syncs in order of id, paged with
/// `after`, each product seeing its own; bad paging parameters are named.
#[tokio::test]
async fn syncs_are_listed_in_pages_by_product() {
    let h = setup().await;
    h.create("other", connection("other-pg")).await;
    let other = [("x-product-name", "other")];
    let reporter = [("x-product-name", "reporter")];
    for sync in ["b-sync", "a-sync", "c-sync"] {
        let mut body = incremental_job(json!({"cursor": "id"}), Some(sync));
        body["metadata"]["n"] = json!(sync);
        let r = create(&h, body).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    }
    let mut theirs = job("other-pg", "other");
    theirs["incremental"] = json!({"other-pg": {"users": {"cursor": "id"}}});
    theirs["syncId"] = json!("b-theirs");
    let r = h
        .call(Method::POST, "/v1/fetcher", &other, Some(theirs))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);

    let ids = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["syncId"].as_str().unwrap().to_owned())
            .collect()
    };
    // Naming no product: every product's, in order of id; the active job is shown.
    let all = h.get("/v1/syncs").await.json();
    assert_eq!(ids(&all), ["a-sync", "b-sync", "b-theirs", "c-sync"]);
    assert!(all["items"][0]["activeJob"].is_string(), "{all}");
    assert_eq!(all.get("nextAfter"), None, "one page");
    // Pages of two, as the reporter: another product's syncs are read past, not shown.
    let p1 = h
        .call(Method::GET, "/v1/syncs?limit=2", &reporter, None)
        .await
        .json();
    assert_eq!(
        (ids(&p1), p1["nextAfter"].clone()),
        (
            vec!["a-sync".to_owned(), "b-sync".to_owned()],
            json!("b-sync")
        )
    );
    let p2 = h
        .call(
            Method::GET,
            "/v1/syncs?limit=2&after=b-sync",
            &reporter,
            None,
        )
        .await
        .json();
    assert_eq!(
        (ids(&p2), p2["nextAfter"].clone()),
        (vec!["c-sync".to_owned()], json!("c-sync"))
    );
    let p3 = h
        .call(
            Method::GET,
            "/v1/syncs?limit=2&after=c-sync",
            &reporter,
            None,
        )
        .await
        .json();
    assert_eq!(
        (ids(&p3), p3.get("nextAfter")),
        (Vec::<String>::new(), None)
    );
    let mine = h.call(Method::GET, "/v1/syncs", &other, None).await.json();
    assert_eq!(ids(&mine), ["b-theirs"]);
    for (query, code) in [
        ("limit=0", "FET-0405"),
        ("limit=x", "FET-0405"),
        ("limit=101", "FET-0406"),
        ("after=no%20spaces", "FET-0405"),
    ] {
        let r = h.get(&format!("/v1/syncs?{query}")).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, json!(code)),
            "{query}: {}",
            r.text
        );
    }
}
