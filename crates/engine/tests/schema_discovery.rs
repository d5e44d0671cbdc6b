//! Schema discovery and its cache: cache-first, write-through, expiry, tenant scoping,
//! fixed errors (validation and planning: `schema_and_plan.rs`).

mod common;

use std::sync::atomic::Ordering;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::ports::*;
use fetcher_engine::*;

#[tokio::test]
async fn discovery_is_cache_first_and_writes_through() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    let s = h.engine.discover_schema(&ctx(), &t, "crm").await.unwrap();
    assert_eq!(
        s.config_name, "crm",
        "config name overwritten with the descriptor's"
    );
    assert_eq!(s.tables, crm_schema().tables);
    assert_eq!(
        h.factory.last_built().unwrap().calls(),
        ["discover", "close"],
        "no test step on the schema path"
    );
    assert_eq!(h.cache.entry(&t, "crm"), Some(s.clone()));
    // Hit: no connector touched.
    assert_eq!(
        h.engine.discover_schema(&ctx(), &t, "crm").await.unwrap(),
        s
    );
    assert_eq!(h.factory.build_count(), 1);
    // Fresh: ignores and preserves the cache, discovers every time.
    h.factory.behaviour.lock().unwrap().schema = schema(&[("public.new", &["x"])]);
    let fresh = h
        .engine
        .discover_schema_fresh(&ctx(), &t, "crm")
        .await
        .unwrap();
    assert_eq!(fresh.tables[0].name, "public.new");
    h.engine
        .discover_schema_fresh(&ctx(), &t, "crm")
        .await
        .unwrap();
    assert_eq!(h.factory.build_count(), 3);
    assert_eq!(
        h.cache.entry(&t, "crm").map(|c| c.tables),
        Some(fresh.tables),
        "fresh writes through: the jobs that follow see what it saw"
    );
    assert!(fresh.captured_at.is_some());
    assert!(
        h.spans
            .spans()
            .iter()
            .any(|(n, _)| *n == "engine.schema.discover_fresh")
    );
}

/// #28: a cached schema expires (older than the TTL, or with no capture time), and a
/// plan naming a table or column the cached schema lacks discovers once more before
/// calling it unknown.
#[tokio::test]
async fn a_stale_cache_expires_and_a_plan_naming_what_it_lacks_discovers_again() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    let old = Timestamp::now().unix_nanos() - (DEFAULT_SCHEMA_TTL.as_nanos() as i128 + 1);
    for captured_at in [None, Some(Timestamp::from_unix_nanos(old))] {
        let mut stale = schema(&[("public.gone", &["x"])]);
        stale.config_name = "crm".into();
        stale.captured_at = captured_at;
        h.cache.put(&ctx(), &t, &stale).await.unwrap();
        let s = h.engine.discover_schema(&ctx(), &t, "crm").await.unwrap();
        assert_eq!(s.tables, crm_schema().tables, "{captured_at:?} is a miss");
        assert!(h.engine.cached_schema(&ctx(), &t, "crm").await.is_some());
    }
    // The database gains a table and a column; the young cached snapshot has neither.
    h.factory.behaviour.lock().unwrap().schema = schema(&[
        ("public.accounts", &["id", "name", "email", "created"]),
        ("public.invoices", &["id"]),
    ]);
    let builds = h.factory.build_count();
    let req = request(&[
        ("crm", "public.invoices", &["id"]),
        ("crm", "public.accounts", &["created"]),
    ]);
    let plan = h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
    assert_eq!(plan.steps[0].tables.len(), 2);
    assert_eq!(h.factory.build_count(), builds + 1, "one discovery more");
    let cached = h.cache.entry(&t, "crm").unwrap();
    assert!(cached.table("public.invoices").is_some(), "written through");
    // The next plan is served from the refreshed cache.
    h.engine.plan_extraction(&ctx(), &t, &req).await.unwrap();
    assert_eq!(h.factory.build_count(), builds + 1);
    // What the live schema lacks too is unknown, after that one discovery.
    let err = h
        .engine
        .plan_extraction(&ctx(), &t, &request(&[("crm", "public.nope", &["id"])]))
        .await
        .unwrap_err();
    assert_eq!(err.category(), Category::Validation);
    assert!(
        err.message().contains("unknown table 'crm.public.nope'"),
        "{err}"
    );
    assert_eq!(h.factory.build_count(), builds + 2);
}

#[tokio::test]
async fn the_cache_is_tenant_scoped_and_only_an_accelerator() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let (a, b) = (tenant("alpha"), tenant("beta"));
    crm(&h, &a).await;
    h.engine
        .create_connection(&ctx(), &b, &input("crm"))
        .await
        .unwrap();
    h.engine.discover_schema(&ctx(), &a, "crm").await.unwrap();
    h.engine.discover_schema(&ctx(), &b, "crm").await.unwrap();
    assert_eq!(
        h.factory.build_count(),
        2,
        "tenant b does not read tenant a's entry"
    );

    h.cache.fail_get.store(true, Ordering::SeqCst);
    h.cache.fail_put.store(true, Ordering::SeqCst);
    let s = h.engine.discover_schema(&ctx(), &a, "crm").await.unwrap();
    assert_eq!(
        s.tables,
        crm_schema().tables,
        "a failing cache degrades to live discovery"
    );
    assert_eq!(h.factory.build_count(), 3);

    let none = harness(
        Wiring {
            cache: false,
            ..Wiring::default()
        },
        TemplateBehaviour::default(),
        None,
    );
    crm(&none, &a).await;
    none.engine
        .discover_schema(&ctx(), &a, "crm")
        .await
        .unwrap();
    none.engine
        .discover_schema(&ctx(), &a, "crm")
        .await
        .unwrap();
    assert_eq!(none.factory.build_count(), 2);
}

#[tokio::test]
async fn discovery_errors_are_fixed_except_connect() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    h.factory.behaviour.lock().unwrap().fail_discover = Some(Category::Unavailable);
    let err = h
        .engine
        .discover_schema(&ctx(), &t, "crm")
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to discover datasource schema",
    );
    assert_eq!(
        h.factory.last_built().unwrap().calls(),
        ["discover", "close"]
    );
    h.factory.behaviour.lock().unwrap().fail_discover = Some(Category::Connect);
    let err = h
        .engine
        .discover_schema(&ctx(), &t, "crm")
        .await
        .unwrap_err();
    assert_err(&err, Category::Connect, "could not connect to datasource");
    assert!(
        h.cache.entry(&t, "crm").is_none(),
        "failures are not cached"
    );
    let err = h
        .engine
        .discover_schema(&ctx(), &t, "missing")
        .await
        .unwrap_err();
    assert_err(&err, Category::NotFound, "connection not found");
    assert_eq!(
        h.cache.gets.load(Ordering::SeqCst),
        2,
        "not-found is decided before any cache access"
    );
}
