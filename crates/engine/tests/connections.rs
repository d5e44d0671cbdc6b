//! Construction and the connection lifecycle: create, patch, delete and their gates, connection
//! tests, store errors. Tenancy is in `tenancy.rs`.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::ports::*;
use fetcher_engine::*;

#[test]
fn construction_requires_registry_and_protector() {
    let err = Engine::builder().build().unwrap_err();
    assert_err(&err, Category::Validation, "connector registry is required");
    let err = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .encrypted_persistence(true)
        .build()
        .unwrap_err();
    assert_err(
        &err,
        Category::Validation,
        "credential protector is required when encrypted persistence is enabled",
    );
    // A protector while encryption is off is accepted; every optional port is optional.
    Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .credential_protector(MemoryCredentialProtector::new())
        .build()
        .unwrap();
}

#[test]
fn zero_limits_mean_defaults_and_others_are_kept_as_is() {
    let e = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .build()
        .unwrap();
    assert_eq!(e.limits(), &Limits::defaults());
    let e = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .limits(Limits::default())
        .build()
        .unwrap();
    assert_eq!(e.limits(), &Limits::defaults());
    let custom = Limits {
        max_datasources: 3,
        ..Limits::defaults()
    };
    let e = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .limits(custom.clone())
        .build()
        .unwrap();
    assert_eq!(e.limits(), &custom);
    // Hard limits only: not zero, so used as-is (numeric bounds unbounded, concurrency 1).
    let hard = Limits {
        connector_hard_limits: [("maxRows".to_string(), 10)].into(),
        ..Limits::default()
    };
    let e = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .limits(hard.clone())
        .build()
        .unwrap();
    assert_eq!(e.limits(), &hard);
    assert_eq!(e.limits().concurrency(), 1);
}

#[tokio::test]
async fn every_store_operation_needs_a_store_first() {
    let e = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .build()
        .unwrap();
    let bad = TenantContext {
        tenant_id: "has spaces".into(),
        request_id: String::new(),
    };
    let c = ctx();
    let errs = vec![
        e.create_connection(&c, &bad, &input("x"))
            .await
            .unwrap_err(),
        e.get_connection(&c, &bad, "x").await.unwrap_err(),
        e.list_connections(&c, &bad).await.unwrap_err(),
        e.get_connection_by_id(&c, &bad, "x").await.unwrap_err(),
        e.list_connections_paged(&c, &bad, &ConnectionListParams::default())
            .await
            .unwrap_err(),
        e.update_connection(&c, &bad, "x", &ConnectionPatch::default())
            .await
            .unwrap_err(),
        e.update_connection_by_id(
            &c,
            &bad,
            "x",
            &ConnectionDescriptor::default(),
            &ConnectionPatch::default(),
        )
        .await
        .unwrap_err(),
        e.delete_connection(&c, &bad, "x").await.unwrap_err(),
        e.delete_connection_by_id(&c, &bad, "x").await.unwrap_err(),
        e.test_connection(&c, &bad, "x").await.unwrap_err(),
        e.discover_schema(&c, &bad, "x").await.unwrap_err(),
        e.discover_schema_fresh(&c, &bad, "x").await.unwrap_err(),
        e.validate_schema(&c, &bad, &ValidationRequest::default())
            .await
            .unwrap_err(),
        e.plan_extraction(&c, &bad, &ExtractionRequest::default())
            .await
            .unwrap_err(),
        e.execute_extraction(
            &c,
            &ExtractionPlan {
                tenant_id: "has spaces".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err(),
    ];
    for err in errs {
        assert_err(
            &err,
            Category::Validation,
            "connection store is not configured",
        );
    }
    // These work without a store.
    e.check_active_executions(&c, &tenant("t"), "x")
        .await
        .unwrap();
    e.authorize_connection_access(&tenant("t")).unwrap();
}

#[tokio::test]
async fn create_protects_then_stores_and_returns_a_secret_free_descriptor() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    *h.protector.key_version.lock().unwrap() = "7".into();
    let d = h
        .engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap();
    assert_eq!(d.key_version, "7");
    assert_eq!(h.protector.protect_calls.load(Ordering::SeqCst), 1);
    let stored = h.store.protected_credential(&t, "pg").unwrap();
    assert_eq!(stored.key_version, "7");
    assert!(!String::from_utf8_lossy(&stored.ciphertext).contains("s3cr3t-Pa55w0rd"));
    assert!(!serde_json::to_string(&d).unwrap().contains("s3cr3t"));
    assert_eq!(
        h.spans.spans().last().unwrap(),
        &("engine.connection.create", None)
    );

    // Duplicate: conflict, before the protector runs; nothing changes.
    let err = h
        .engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap_err();
    assert_err(&err, Category::Conflict, "connection already exists");
    assert_eq!(h.protector.protect_calls.load(Ordering::SeqCst), 1);
    assert_eq!(h.store.protected_credential(&t, "pg").unwrap(), stored);
    assert_eq!(h.store.len(), 1);

    // No password: no protection, no credential.
    let no_pw = ConnectionInput {
        config_name: "nopw".into(),
        ..ConnectionInput::default()
    };
    let d = h
        .engine
        .create_connection(&ctx(), &t, &no_pw)
        .await
        .unwrap();
    assert_eq!(d.key_version, "");
    assert_eq!(h.protector.protect_calls.load(Ordering::SeqCst), 1);
    assert!(h.store.protected_credential(&t, "nopw").is_none());
}

#[tokio::test]
async fn unencrypted_mode_never_forwards_the_secret() {
    let h = harness(
        Wiring {
            encrypted: false,
            ..Wiring::default()
        },
        TemplateBehaviour::default(),
        None,
    );
    let t = tenant("acme");
    h.engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap();
    assert_eq!(h.protector.protect_calls.load(Ordering::SeqCst), 0);
    assert!(h.store.protected_credential(&t, "pg").is_none());
    let patch = ConnectionPatch::default().with_password("new");
    h.engine
        .update_connection(&ctx(), &t, "pg", &patch)
        .await
        .unwrap();
    assert!(h.store.protected_credential(&t, "pg").is_none());
}

#[tokio::test]
async fn protector_failure_leaves_the_store_untouched_and_leaks_nothing() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    h.protector.fail.store(true, Ordering::SeqCst);
    let err = h
        .engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to protect connection credential",
    );
    assert!(h.store.is_empty());
    h.protector.fail.store(false, Ordering::SeqCst);
    h.engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap();
    let before = h.store.protected_credential(&t, "pg");
    h.protector.fail.store(true, Ordering::SeqCst);
    let patch = ConnectionPatch {
        host: Some("moved".into()),
        ..Default::default()
    }
    .with_password("x");
    let err = h
        .engine
        .update_connection(&ctx(), &t, "pg", &patch)
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to protect connection credential",
    );
    assert_eq!(
        h.engine
            .get_connection(&ctx(), &t, "pg")
            .await
            .unwrap()
            .host,
        "db.internal"
    );
    assert_eq!(h.store.protected_credential(&t, "pg"), before);
}

#[tokio::test]
async fn update_applies_the_patch_and_keeps_or_replaces_the_secret() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    let mut i = input("pg");
    i.host_attributes.insert("productName".into(), "crm".into());
    h.engine.create_connection(&ctx(), &t, &i).await.unwrap();
    let original = h.store.protected_credential(&t, "pg").unwrap();

    let patch = ConnectionPatch {
        port: Some(6543),
        ..Default::default()
    };
    let d = h
        .engine
        .update_connection(&ctx(), &t, "pg", &patch)
        .await
        .unwrap();
    assert_eq!(
        (d.port, d.host.as_str(), d.key_version.as_str()),
        (6543, "db.internal", "1")
    );
    assert_eq!(d.host_attributes.get("productName"), Some(&"crm".into()));
    assert_eq!(
        h.store.protected_credential(&t, "pg").unwrap(),
        original,
        "no password: secret kept"
    );
    assert_eq!(h.protector.protect_calls.load(Ordering::SeqCst), 1);

    *h.protector.key_version.lock().unwrap() = "2".into();
    let d = h
        .engine
        .update_connection(
            &ctx(),
            &t,
            "pg",
            &ConnectionPatch::default().with_password("rotated"),
        )
        .await
        .unwrap();
    assert_eq!(d.key_version, "2");
    assert_ne!(h.store.protected_credential(&t, "pg").unwrap(), original);

    let err = h
        .engine
        .update_connection(&ctx(), &t, "missing", &patch)
        .await
        .unwrap_err();
    assert_err(&err, Category::NotFound, "connection not found");
    assert_eq!(
        h.checker.calls.load(Ordering::SeqCst),
        2,
        "checker not consulted for a missing connection"
    );
}

#[tokio::test]
async fn the_conflict_gate_blocks_mutations_of_busy_connections() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    h.engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap();
    h.checker.set_active(&t, "pg", true);
    let patch = ConnectionPatch {
        host: Some("moved".into()),
        ..Default::default()
    }
    .with_password("x");
    let err = h
        .engine
        .update_connection(&ctx(), &t, "pg", &patch)
        .await
        .unwrap_err();
    assert_err(&err, Category::Conflict, "connection has active executions");
    let err = h
        .engine
        .delete_connection(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert_err(&err, Category::Conflict, "connection has active executions");
    assert_eq!(
        h.protector.protect_calls.load(Ordering::SeqCst),
        1,
        "gate runs before protect"
    );
    assert_eq!(
        h.engine
            .get_connection(&ctx(), &t, "pg")
            .await
            .unwrap()
            .host,
        "db.internal"
    );
    let err = h
        .engine
        .check_active_executions(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert_err(&err, Category::Conflict, "connection has active executions");
    // Another tenant's busy connection of the same name does not block this one.
    assert!(
        h.engine
            .check_active_executions(&ctx(), &tenant("other"), "pg")
            .await
            .is_ok()
    );

    // Checker failure: redacted on the gate path, raw on the standalone path.
    h.checker.set_active(&t, "pg", false);
    h.checker.fail.store(true, Ordering::SeqCst);
    let err = h
        .engine
        .delete_connection(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to check for active executions",
    );
    assert!(
        h.engine.get_connection(&ctx(), &t, "pg").await.is_ok(),
        "not deleted"
    );
    let raw = h
        .engine
        .check_active_executions(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert!(
        raw.to_string().contains(CHECKER_FAILURE_TEXT),
        "standalone gate returns the checker's own error"
    );

    // Without a checker, mutations proceed.
    let free = harness(
        Wiring {
            checker: false,
            ..Wiring::default()
        },
        TemplateBehaviour::default(),
        None,
    );
    free.engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap();
    free.engine
        .delete_connection(&ctx(), &t, "pg")
        .await
        .unwrap();
    assert!(free.engine.get_connection(&ctx(), &t, "pg").await.is_err());
}

#[tokio::test]
async fn test_connection_runs_build_test_close_and_reports_latency() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let t = tenant("acme");
    h.engine
        .create_connection(&ctx(), &t, &input("pg"))
        .await
        .unwrap();
    let r = h.engine.test_connection(&ctx(), &t, "pg").await.unwrap();
    assert!(r.success);
    assert_eq!(r.config_name, "pg");
    assert!(r.latency < std::time::Duration::from_secs(5));
    assert_eq!(h.factory.last_built().unwrap().calls(), ["test", "close"]);
    assert_eq!(h.spans.spans().last().unwrap().0, "engine.connection.test");

    // Unknown connection: nothing built.
    let err = h
        .engine
        .test_connection(&ctx(), &t, "nope")
        .await
        .unwrap_err();
    assert_err(&err, Category::NotFound, "connection not found");
    assert_eq!(h.factory.build_count(), 1);

    // Connect failure: `connect`, safe, still closed.
    h.factory.behaviour.lock().unwrap().fail_test = true;
    let err = h
        .engine
        .test_connection(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert_err(&err, Category::Connect, "failed to connect to datasource");
    assert_eq!(h.factory.last_built().unwrap().calls(), ["test", "close"]);
    assert_eq!(
        h.spans.spans().last().unwrap(),
        &("engine.connection.test", Some(Category::Connect))
    );

    // Build failure and "built nothing": unavailable; nothing tested or closed.
    h.factory.fail_build.store(true, Ordering::SeqCst);
    let before = h.factory.built().len();
    let err = h
        .engine
        .test_connection(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to build connector for connection",
    );
    h.factory.fail_build.store(false, Ordering::SeqCst);
    h.factory.build_nothing.store(true, Ordering::SeqCst);
    let err = h
        .engine
        .test_connection(&ctx(), &t, "pg")
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::Unavailable,
        "failed to build connector for connection",
    );
    assert_eq!(h.factory.built().len(), before);

    // Unregistered type: the shared unknown-type text, type appended verbatim.
    let odd = ConnectionInput {
        datasource_type: DatasourceType::Oracle,
        ..input("ora")
    };
    h.engine.create_connection(&ctx(), &t, &odd).await.unwrap();
    let err = h
        .engine
        .test_connection(&ctx(), &t, "ora")
        .await
        .unwrap_err();
    assert_err(
        &err,
        Category::NotFound,
        "no connector registered for datasource type ORACLE",
    );
}

#[tokio::test]
async fn store_errors_pass_through_unchanged() {
    struct Broken;
    fn fail<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T>> {
        Box::pin(async {
            Err(EngineError::new(
                Category::Unavailable,
                "connection store is down",
            ))
        })
    }
    impl ConnectionStore for Broken {
        fn find<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>> {
            fail()
        }
        fn create<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a ConnectionDescriptor,
            _: Option<&'a ProtectedCredential>,
        ) -> BoxFuture<'a, Result<()>> {
            fail()
        }
        fn update<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a ConnectionDescriptor,
            _: Option<&'a ProtectedCredential>,
        ) -> BoxFuture<'a, Result<()>> {
            fail()
        }
        fn delete<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a str,
        ) -> BoxFuture<'a, Result<()>> {
            fail()
        }
        fn list<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
        ) -> BoxFuture<'a, Result<Vec<ConnectionDescriptor>>> {
            fail()
        }
        fn find_by_id<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>> {
            fail()
        }
        fn update_by_id<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a str,
            _: &'a ConnectionDescriptor,
            _: Option<&'a ProtectedCredential>,
        ) -> BoxFuture<'a, Result<()>> {
            fail()
        }
        fn delete_by_id<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a str,
        ) -> BoxFuture<'a, Result<()>> {
            fail()
        }
        fn list_paged<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a ConnectionListParams,
        ) -> BoxFuture<'a, Result<ConnectionPage>> {
            fail()
        }
        fn credential<'a>(
            &'a self,
            _: &'a Context,
            _: &'a TenantContext,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<ProtectedCredential>>> {
            fail()
        }
    }
    let e = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .connection_store(Arc::new(Broken))
        .build()
        .unwrap();
    let t = tenant("acme");
    let c = ctx();
    for err in [
        e.create_connection(&c, &t, &input("x")).await.unwrap_err(),
        e.get_connection(&c, &t, "x").await.unwrap_err(),
        e.list_connections(&c, &t).await.unwrap_err(),
        e.delete_connection(&c, &t, "x").await.unwrap_err(),
        e.test_connection(&c, &t, "x").await.unwrap_err(),
        e.discover_schema(&c, &t, "x").await.unwrap_err(),
        e.plan_extraction(&c, &t, &request(&[("x", "t", &["a"])]))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(
            err.to_string(),
            "engine: [unavailable] connection store is down"
        );
    }
}
