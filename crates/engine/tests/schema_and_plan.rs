//! Schema validation and planning (discovery and its cache: `schema_discovery.rs`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::ports::*;
use fetcher_engine::*;

/// `(table, fields, filter fields)`.
type TableSpec<'a> = (&'a str, &'a [&'a str], &'a [&'a str]);

fn vreq(ds: &[(&str, &[TableSpec])]) -> ValidationRequest {
    ValidationRequest {
        datasources: ds
            .iter()
            .map(|(c, tables)| DatasourceValidation {
                config_name: (*c).into(),
                tables: tables
                    .iter()
                    .map(|(n, f, ff)| TableValidation {
                        name: (*n).into(),
                        fields: f.iter().map(|s| (*s).into()).collect(),
                        filter_fields: ff.iter().map(|s| (*s).into()).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[tokio::test]
async fn validation_reports_every_failure_sorted() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    let ok = vreq(&[(
        "crm",
        &[(
            "public.people",
            &["natural_person", "address.city", "id"],
            &["address"],
        )],
    )]);
    let r = h.engine.validate_schema(&ctx(), &t, &ok).await.unwrap();
    assert!(r.valid && r.failures.is_empty());
    assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"valid":true}"#);

    let bad = vreq(&[
        ("zzz", &[("t", &["a"], &[])]),
        (
            "crm",
            &[
                ("public.accounts", &["zip", "name", "natural"], &["nope"]),
                ("public.gone", &["x"], &["y"]),
            ],
        ),
    ]);
    let r = h.engine.validate_schema(&ctx(), &t, &bad).await.unwrap();
    assert!(!r.valid);
    let got: Vec<_> = r
        .failures
        .iter()
        .map(|f| {
            (
                f.failure_type.as_str(),
                f.config_name.as_str(),
                f.table.as_str(),
                f.field.as_str(),
                f.detail.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "field_not_found",
                "crm",
                "public.accounts",
                "natural",
                "field not found in table schema"
            ),
            (
                "field_not_found",
                "crm",
                "public.accounts",
                "zip",
                "field not found in table schema"
            ),
            (
                "invalid_filter",
                "crm",
                "public.accounts",
                "nope",
                "filter references a field not found in table schema"
            ),
            (
                "table_not_found",
                "crm",
                "public.gone",
                "",
                "table not found in datasource schema"
            ),
            (
                "datasource_not_found",
                "zzz",
                "",
                "",
                "no connection configured for the requested datasource"
            ),
        ]
    );
}

#[tokio::test]
async fn validation_rejects_malformed_requests_before_any_lookup() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let cases: Vec<(ValidationRequest, &str)> = vec![
        (
            ValidationRequest::default(),
            "schema validation request has no datasources",
        ),
        (
            vreq(&[(" ", &[])]),
            "schema validation request has a blank datasource config name",
        ),
        (
            vreq(&[("crm", &[("\t", &[], &[])])]),
            "schema validation request has a blank table name",
        ),
        (
            vreq(&[("crm", &[("t", &["a", " "], &[])])]),
            "schema validation request has a blank field name",
        ),
        (
            vreq(&[("crm", &[("t", &["a"], &[""])])]),
            "schema validation request has a blank filter field name",
        ),
    ];
    for (req, text) in cases {
        let err = h
            .engine
            .validate_schema(&ctx(), &t, &req)
            .await
            .unwrap_err();
        assert_err(&err, Category::Validation, text);
    }
    assert_eq!(h.factory.build_count(), 0);
}

#[tokio::test]
async fn count_limits_list_every_breach_without_touching_sources() {
    let limits = Limits {
        max_datasources: 1,
        max_tables_per_datasource: 1,
        max_fields_per_table: 1,
        ..Limits::defaults()
    };
    let h = harness(
        Wiring::default(),
        TemplateBehaviour::default(),
        Some(limits),
    );
    let t = tenant("acme");
    crm(&h, &t).await;
    let req = vreq(&[
        ("crm", &[("a", &["x", "y"], &["p", "q"]), ("b", &[], &[])]),
        ("other", &[]),
    ]);
    let r = h.engine.validate_schema(&ctx(), &t, &req).await.unwrap();
    let got: Vec<_> = r
        .failures
        .iter()
        .map(|f| (f.config_name.as_str(), f.table.as_str(), f.detail.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("", "", "datasource count exceeds the configured limit"),
            ("crm", "", "table count exceeds the configured limit"),
            ("crm", "a", "field count exceeds the configured limit"),
            ("crm", "a", "filter count exceeds the configured limit"),
        ]
    );
    assert!(
        r.failures
            .iter()
            .all(|f| f.failure_type == "limit_exceeded")
    );
    assert_eq!(h.factory.build_count(), 0);
    // At the boundary it passes.
    let ok = vreq(&[("crm", &[("public.accounts", &["id"], &["name"])])]);
    assert!(
        h.engine
            .validate_schema(&ctx(), &t, &ok)
            .await
            .unwrap()
            .valid
    );
}

#[tokio::test]
async fn source_failures_during_validation_are_errors_not_report_entries() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    h.factory.fail_build.store(true, Ordering::SeqCst);
    let err = h
        .engine
        .validate_schema(
            &ctx(),
            &t,
            &vreq(&[("crm", &[("public.accounts", &["id"], &[])])]),
        )
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to build connector for connection",
    );
}

#[tokio::test]
async fn plans_are_deterministic_sorted_copies() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("req-1");
    crm(&h, &t).await;
    h.engine
        .create_connection(&ctx(), &t, &input("aaa"))
        .await
        .unwrap();
    let mut r1 = request(&[
        ("crm", "public.people", &["id", "address.city"]),
        ("crm", "public.accounts", &["name", "id"]),
        ("aaa", "public.accounts", &["email"]),
    ]);
    r1.filters.insert(
        "crm".into(),
        serde_json::from_value(serde_json::json!({"public.accounts": {"name": {"eq": ["x"]}, "email": {"like": ["%@x"]}}}))
            .unwrap(),
    );
    r1.metadata.insert("source".into(), "plugin_crm".into());
    let mut r2 = request(&[
        ("aaa", "public.accounts", &["email"]),
        ("crm", "public.accounts", &["id", "name"]),
        ("crm", "public.people", &["address.city", "id"]),
    ]);
    r2.filters = r1.filters.clone();
    r2.metadata = r1.metadata.clone();
    let p1 = h.engine.plan_extraction(&ctx(), &t, &r1).await.unwrap();
    let p2 = h.engine.plan_extraction(&ctx(), &t, &r2).await.unwrap();
    assert_eq!(p1, p2);
    assert_eq!(
        (p1.tenant_id.as_str(), p1.request_id.as_str()),
        ("acme", "req-1")
    );
    assert_eq!(p1.mode, ExecutionMode::Auto);
    assert_eq!(p1.limits, Limits::defaults());
    assert_eq!(p1.metadata["source"], "plugin_crm");
    let steps: Vec<_> = p1
        .steps
        .iter()
        .map(|s| (s.ordinal, s.config_name.as_str()))
        .collect();
    assert_eq!(steps, [(0, "aaa"), (1, "crm")]);
    let crm_step = &p1.steps[1];
    assert_eq!(crm_step.tables, ["public.accounts", "public.people"]);
    assert_eq!(crm_step.fields["public.accounts"], ["id", "name"]);
    assert_eq!(crm_step.fields["public.people"], ["address.city", "id"]);
    assert_eq!(
        crm_step.filters["public.accounts"]
            .keys()
            .collect::<Vec<_>>(),
        ["email", "name"]
    );
    assert!(
        p1.steps[0].filters.is_empty(),
        "filters only on the matching config"
    );
    let json = serde_json::to_string(&p1).unwrap();
    assert!(!json.contains("s3cr3t"), "plans never carry credentials");
    // Cached schemas: planning twice discovered once per connection.
    assert_eq!(h.factory.build_count(), 2);
}

#[tokio::test]
async fn planning_gates_and_their_texts() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    let e = &h.engine;
    let err = e
        .plan_extraction(&ctx(), &t, &ExtractionRequest::default())
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "extraction request has no mapped fields",
    );
    let mut empty = ExtractionRequest::default();
    empty.mapped_fields.insert("crm".into(), Default::default());
    let err = e.plan_extraction(&ctx(), &t, &empty).await.unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "extraction datasource selects no tables",
    );
    let mut over = request(&[("crm", "public.accounts", &["id"])]);
    over.overrides = Some(Limits {
        max_concurrency: 99,
        ..Limits::default()
    });
    let err = e.plan_extraction(&ctx(), &t, &over).await.unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "limit override exceeds the configured maximum: limits.maxConcurrency",
    );
    let err = e
        .plan_extraction(&ctx(), &t, &request(&[(" ", "t", &["a"])]))
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "extraction request has a blank datasource config name",
    );
    let err = e
        .plan_extraction(&ctx(), &t, &request(&[("ghost", "t", &["a"])]))
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::NotFound,
        "extraction references an unknown datasource connection: unknown datasource 'ghost'",
    );
    // The failure names what is unknown (the caller's own input).
    for (bad, what) in [
        (
            request(&[("crm", "public.accounts", &["nope"])]),
            "unknown field 'crm.public.accounts.nope'",
        ),
        (
            request(&[("crm", "public.nope", &["id"])]),
            "unknown table 'crm.public.nope'",
        ),
        (
            request(&[
                ("crm", "public.accounts", &["id"]),
                ("crm", "public.people", &["natural"]),
            ]),
            "unknown field 'crm.public.people.natural'",
        ),
        (
            request(&[("crm", "public.accounts", &["nope", "id", "zap"])]),
            "unknown field 'crm.public.accounts.nope'; unknown field 'crm.public.accounts.zap'",
        ),
    ] {
        let err = e.plan_extraction(&ctx(), &t, &bad).await.unwrap_err();
        assert_err(
            &err,
            Category::Validation,
            &format!("extraction request failed schema validation: {what}"),
        );
    }
    // Boundary: exactly at each limit succeeds; a tightened override applies.
    let mut tight = request(&[("crm", "public.accounts", &["id", "name"])]);
    tight.overrides = Some(Limits {
        max_fields_per_table: 1,
        ..Limits::default()
    });
    let err = e.plan_extraction(&ctx(), &t, &tight).await.unwrap_err();
    assert_err_prefix(
        &err,
        Category::Validation,
        "extraction request failed schema validation: over a limit:",
    );
    tight.overrides = Some(Limits {
        max_fields_per_table: 2,
        max_concurrency: 1,
        ..Limits::default()
    });
    let plan = e.plan_extraction(&ctx(), &t, &tight).await.unwrap();
    assert_eq!(
        (
            plan.limits.max_fields_per_table,
            plan.limits.max_concurrency
        ),
        (2, 1)
    );
    // Source down during planning: the safe error.
    h.factory.behaviour.lock().unwrap().fail_discover = Some(Category::Unavailable);
    h.cache.fail_get.store(true, Ordering::SeqCst);
    let err = e
        .plan_extraction(&ctx(), &t, &request(&[("crm", "public.accounts", &["id"])]))
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to discover datasource schema",
    );
}

#[tokio::test]
async fn filters_are_validated_and_never_dropped() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    let with = |filters: serde_json::Value| {
        let mut r = request(&[("crm", "public.accounts", &["id"])]);
        r.filters = serde_json::from_value(filters).expect("a well-shaped filter");
        r
    };
    let ok = with(serde_json::json!({"crm": {"public.accounts": {"email": {"eq": ["a@b"]}}}}));
    let plan = h.engine.plan_extraction(&ctx(), &t, &ok).await.unwrap();
    assert_eq!(
        plan.steps[0].filters["public.accounts"]["email"],
        Condition::new().with(Operator::Eq, vec!["a@b".into()])
    );
    for bad in [
        serde_json::json!({"crm": {"public.accounts": {"missing_col": {"eq": [1]}}}}), // unknown field
        serde_json::json!({"crm": {"public.people": {"id": {"eq": [1]}}}}), // unselected table
        serde_json::json!({"other": {"t": {"id": {"eq": [1]}}}}),           // unselected datasource
    ] {
        let err = h
            .engine
            .plan_extraction(&ctx(), &t, &with(bad.clone()))
            .await
            .unwrap_err();
        assert_err_prefix(
            &err,
            Category::Validation,
            "extraction request failed schema validation",
        );
    }
    // Shapes that are not `table → field → condition` never become a request at all.
    for bad in [
        serde_json::json!({"crm": {"public.accounts": "id = 1"}}),
        serde_json::json!({"crm": ["id"]}),
        serde_json::json!({"crm": {"public.accounts": {"id": {"eq": 1}}}}),
        serde_json::json!({"crm": {"public.accounts": {"id": {"matches": ["x"]}}}}),
    ] {
        let raw = serde_json::json!({"mappedFields": {"crm": {"public.accounts": ["id"]}}, "filters": bad});
        assert!(
            serde_json::from_value::<ExtractionRequest>(raw).is_err(),
            "{bad} decoded"
        );
    }
}

/// Counts `find` calls; delegates everything to an in-memory store.
struct CountingStore {
    inner: Arc<MemoryConnectionStore>,
    finds: AtomicUsize,
}

impl ConnectionStore for CountingStore {
    fn find<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        n: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>> {
        self.finds.fetch_add(1, Ordering::SeqCst);
        self.inner.find(c, t, n)
    }
    fn create<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        p: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>> {
        self.inner.create(c, t, d, p)
    }
    fn update<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        p: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>> {
        self.inner.update(c, t, d, p)
    }
    fn delete<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        n: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        self.inner.delete(c, t, n)
    }
    fn list<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
    ) -> BoxFuture<'a, Result<Vec<ConnectionDescriptor>>> {
        self.inner.list(c, t)
    }
    fn find_by_id<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        i: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>> {
        self.inner.find_by_id(c, t, i)
    }
    fn update_by_id<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        i: &'a str,
        d: &'a ConnectionDescriptor,
        p: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>> {
        self.inner.update_by_id(c, t, i, d, p)
    }
    fn delete_by_id<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        i: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        self.inner.delete_by_id(c, t, i)
    }
    fn list_paged<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        p: &'a ConnectionListParams,
    ) -> BoxFuture<'a, Result<ConnectionPage>> {
        self.inner.list_paged(c, t, p)
    }
    fn credential<'a>(
        &'a self,
        c: &'a Context,
        t: &'a TenantContext,
        n: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProtectedCredential>>> {
        self.inner.credential(c, t, n)
    }
}

#[tokio::test]
async fn scope_is_decided_before_limits_with_a_bounded_probe() {
    let store = Arc::new(CountingStore {
        inner: MemoryConnectionStore::new(),
        finds: AtomicUsize::new(0),
    });
    let registry = MemoryRegistry::new();
    let factory = TemplateFactory::new(TemplateBehaviour {
        schema: crm_schema(),
        ..Default::default()
    });
    registry.register(PG, factory.clone());
    let engine = Engine::builder()
        .connector_registry(registry)
        .connection_store(store.clone())
        .limits(Limits {
            max_datasources: 2,
            ..Limits::defaults()
        })
        .build()
        .unwrap();
    let (owner, intruder) = (tenant("owner"), tenant("intruder"));
    for i in 0..50 {
        engine
            .create_connection(&ctx(), &owner, &input(&format!("ds{i:02}")))
            .await
            .unwrap();
    }
    let names: Vec<String> = (0..50).map(|i| format!("ds{i:02}")).collect();
    let mut big = ExtractionRequest::default();
    for n in &names {
        big.mapped_fields.insert(
            n.clone(),
            [("public.accounts".to_string(), vec!["id".to_string()])].into(),
        );
    }
    store.finds.store(0, Ordering::SeqCst);
    let err = engine
        .plan_extraction(&ctx(), &owner, &big)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "datasource count exceeds the configured maximum: limits.maxDatasources",
    );
    assert!(
        store.finds.load(Ordering::SeqCst) <= 3,
        "probe bounded to ceiling + 1"
    );

    // An intruder gets the scoped not-found, byte-identical to a clean cross-tenant request.
    let over_limit = engine
        .plan_extraction(&ctx(), &intruder, &big)
        .await
        .unwrap_err()
        .to_string();
    let clean = engine
        .plan_extraction(
            &ctx(),
            &intruder,
            &request(&[("ds00", "public.accounts", &["id"])]),
        )
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(over_limit, clean);
    assert_eq!(
        clean,
        "engine: [not_found] extraction references an unknown datasource connection: unknown datasource 'ds00'"
    );
    assert_eq!(factory.build_count(), 0);
}

#[tokio::test]
async fn a_discovery_validation_rejection_passes_through() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    crm(&h, &t).await;
    h.factory.behaviour.lock().unwrap().fail_discover = Some(Category::Validation);
    let err = h
        .engine
        .discover_schema(&ctx(), &t, "crm")
        .await
        .unwrap_err();
    assert_err(&err, Category::Validation, "datasource host is not allowed");
}
