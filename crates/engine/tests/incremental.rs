//! Incremental reads in the engine (docs/engine.md, "Incremental reads"): what planning
//! refuses, the columns it always reads, and the watermark every run reports. Which rows
//! a connector returns past a watermark is the connectors' part, proved on the real
//! databases in `crates/connectors/tests/incremental.rs`; the template connector here
//! serves its canned rows.

mod common;

use std::collections::BTreeMap;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::*;
use serde_json::json;

fn read(cursor: &str, key: &[&str], after: Option<Watermark>) -> IncrementalRead {
    IncrementalRead {
        spec: IncrementalSpec {
            mode: Default::default(),
            cursor: cursor.into(),
            key: key.iter().map(|k| k.to_string()).collect(),
            lookback: None,
        },
        after,
        slot: None,
    }
}

/// The golden request with `public.a` of `pg-a` read incrementally by `r`.
fn incremental(fields: &[&str], r: IncrementalRead) -> ExtractionRequest {
    let mut req = request(&[("pg-a", "public.a", fields), ("mongo-b", "coll.b", &["id"])]);
    req.incremental = [(
        "pg-a".to_string(),
        [("public.a".to_string(), r)].into_iter().collect(),
    )]
    .into();
    req
}

fn watermark(cursor: &str, key: &[&str], values: serde_json::Value) -> Watermark {
    Watermark {
        cursor: cursor.into(),
        key: key.iter().map(|k| k.to_string()).collect(),
        values: values.as_array().unwrap().clone(),
        log: None,
    }
}

#[tokio::test]
async fn planning_refuses_reads_it_cannot_honour() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    golden_sources(&h, &t).await;
    let other_cols = Some(watermark("name", &[], json!(["bob"])));
    let short = Some(watermark("name", &["id"], json!(["bob"])));
    let cases: Vec<(&str, ExtractionRequest)> = vec![
        ("a blank cursor", incremental(&["id"], read(" ", &[], None))),
        (
            "a blank key column",
            incremental(&["id"], read("id", &[""], None)),
        ),
        (
            "a watermark on other columns",
            incremental(&["id"], read("id", &[], other_cols)),
        ),
        (
            "a watermark missing a key value",
            incremental(&["id"], read("name", &["id"], short)),
        ),
        ("a table the request does not select", {
            let mut r = incremental(&["id"], read("id", &[], None));
            let reads = r.incremental.remove("pg-a").unwrap();
            r.incremental.insert("mongo-b".into(), reads);
            r
        }),
    ];
    for (what, req) in cases {
        let err = h
            .engine
            .plan_extraction(&ctx(), &t, &req)
            .await
            .unwrap_err();
        assert_err(
            &err,
            Category::Validation,
            "extraction request has an invalid incremental read",
        );
        assert!(!err.is_retryable(), "{what}");
    }
    // A cursor the schema does not know fails schema validation, naming it.
    let req = incremental(&["id"], read("updated_at", &[], None));
    let err = h
        .engine
        .plan_extraction(&ctx(), &t, &req)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown field 'pg-a.public.a.updated_at'"),
        "{err}"
    );
}

#[tokio::test]
async fn the_cursor_and_key_are_always_read_and_travel_in_the_step() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    golden_sources(&h, &t).await;
    let after = watermark("name", &["id"], json!(["alice", 1]));
    let req = incremental(&["id"], read("name", &["id"], Some(after.clone())));
    let plan = h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
    let step = plan.steps.iter().find(|s| s.config_name == "pg-a").unwrap();
    assert_eq!(
        step.fields["public.a"],
        vec!["id", "name"],
        "the cursor added"
    );
    assert_eq!(step.incremental["public.a"].after, Some(after));
    let other = plan
        .steps
        .iter()
        .find(|s| s.config_name == "mongo-b")
        .unwrap();
    assert!(other.incremental.is_empty(), "only the tables asked for");
}

#[tokio::test]
async fn every_run_reports_the_last_row_of_each_incremental_table() {
    for wiring in [Wiring::default(), store_wiring()] {
        let h = harness(wiring, TemplateBehaviour::default(), None);
        let t = tenant("acme");
        golden_sources(&h, &t).await;
        let req = incremental(&["id", "name"], read("name", &["id"], None));
        let plan = h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
        let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
        // `(cursor, key)` of the last row read, in result encoding; none for `coll.b`.
        let expected: BTreeMap<String, BTreeMap<String, Watermark>> = [(
            "pg-a".to_string(),
            [(
                "public.a".to_string(),
                watermark("name", &["id"], json!(["bob", 2])),
            )]
            .into(),
        )]
        .into();
        assert_eq!(r.watermarks, expected);
    }
    // A table that returned no row reports no watermark (the host keeps the previous one).
    let empty = TemplateBehaviour {
        rows: [("public.a".to_string(), vec![])].into(),
        schema: schema(&[("public.a", &["id", "name"])]),
        ..Default::default()
    };
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    add_source(&h, &t, "pg-a", empty).await;
    let mut req = incremental(&["id"], read("id", &[], None));
    req.mapped_fields.remove("mongo-b");
    let plan = h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
    let r = h.engine.execute_extraction(&ctx(), &plan).await.unwrap();
    assert!(r.watermarks.is_empty(), "{:?}", r.watermarks);
}
