//! Tenancy (docs/engine.md, "Tenancy"): every operation refuses an invalid scope, tenants
//! never see each other, and a missing record looks like another tenant's.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::ports::*;
use fetcher_engine::*;

#[tokio::test]
async fn every_operation_rejects_an_invalid_tenant_scope() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let c = ctx();
    for raw in ["", "has spaces", "-lead", "a/b"] {
        let bad = TenantContext {
            tenant_id: raw.into(),
            request_id: String::new(),
        };
        let e = &h.engine;
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
            e.check_active_executions(&c, &bad, "x").await.unwrap_err(),
            e.authorize_connection_access(&bad).unwrap_err(),
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
                    tenant_id: raw.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err(),
        ];
        for err in errs {
            assert_err(&err, Category::Validation, "tenant scope is required");
        }
    }
    assert!(h.store.is_empty());
    assert_eq!(h.factory.build_count(), 0);
}

#[tokio::test]
async fn tenants_are_isolated_and_not_found_is_an_oracle_guard() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let (a, b) = (tenant("alpha"), tenant("beta"));
    h.engine
        .create_connection(&ctx(), &a, &input("pg"))
        .await
        .unwrap();
    h.engine
        .create_connection(
            &ctx(),
            &b,
            &ConnectionInput {
                host: "b-host".into(),
                ..input("pg")
            },
        )
        .await
        .unwrap();
    assert_eq!(
        h.engine
            .get_connection(&ctx(), &a, "pg")
            .await
            .unwrap()
            .host,
        "db.internal"
    );
    assert_eq!(
        h.engine
            .get_connection(&ctx(), &b, "pg")
            .await
            .unwrap()
            .host,
        "b-host"
    );
    h.engine
        .create_connection(&ctx(), &a, &input("only-a"))
        .await
        .unwrap();
    let cross = h
        .engine
        .get_connection(&ctx(), &b, "only-a")
        .await
        .unwrap_err()
        .to_string();
    let missing = h
        .engine
        .get_connection(&ctx(), &b, "never-existed")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(cross, missing);
    assert_eq!(cross, "engine: [not_found] connection not found");
    let names: Vec<_> = h
        .engine
        .list_connections(&ctx(), &a)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.config_name)
        .collect();
    assert_eq!(names, ["only-a", "pg"]);
    assert_eq!(
        h.engine.list_connections(&ctx(), &b).await.unwrap().len(),
        1
    );
    let page = h
        .engine
        .list_connections_paged(&ctx(), &a, &ConnectionListParams::default())
        .await
        .unwrap();
    assert_eq!(page.total, 2);
    // Another tenant cannot test, discover, update or delete it either.
    for err in [
        h.engine
            .test_connection(&ctx(), &b, "only-a")
            .await
            .unwrap_err(),
        h.engine
            .discover_schema(&ctx(), &b, "only-a")
            .await
            .unwrap_err(),
        h.engine
            .update_connection(&ctx(), &b, "only-a", &ConnectionPatch::default())
            .await
            .unwrap_err(),
        h.engine
            .delete_connection(&ctx(), &b, "only-a")
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.to_string(), missing);
    }
    assert_eq!(h.factory.build_count(), 0);
}

#[tokio::test]
async fn by_id_operations_are_tenant_scoped() {
    let h = harness(Wiring::default(), TemplateBehaviour::default(), None);
    let (a, b) = (tenant("alpha"), tenant("beta"));
    let d = ConnectionDescriptor {
        id: "id-1".into(),
        ..ConnectionDescriptor::from_input(&input("pg"))
    };
    h.store.create(&ctx(), &a, &d, None).await.unwrap();
    assert_eq!(
        h.engine
            .get_connection_by_id(&ctx(), &a, "id-1")
            .await
            .unwrap()
            .config_name,
        "pg"
    );
    let cross = h
        .engine
        .get_connection_by_id(&ctx(), &b, "id-1")
        .await
        .unwrap_err()
        .to_string();
    let missing = h
        .engine
        .get_connection_by_id(&ctx(), &a, "nope")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(cross, missing);
    assert_eq!(cross, "engine: [not_found] connection not found");
    assert!(
        h.engine
            .update_connection_by_id(&ctx(), &b, "id-1", &d, &ConnectionPatch::default())
            .await
            .is_err()
    );
    assert!(
        h.engine
            .delete_connection_by_id(&ctx(), &b, "id-1")
            .await
            .is_err()
    );

    // update by id: only the patch password is read, and it is protected.
    let moved = ConnectionDescriptor {
        host: "moved".into(),
        ..d.clone()
    };
    let out = h
        .engine
        .update_connection_by_id(&ctx(), &a, "id-1", &moved, &ConnectionPatch::default())
        .await
        .unwrap();
    assert_eq!(out.host, "moved");
    assert_eq!(h.protector.protect_calls.load(Ordering::SeqCst), 0);
    assert!(h.store.protected_credential(&a, "pg").is_none());
    let out = h
        .engine
        .update_connection_by_id(
            &ctx(),
            &a,
            "id-1",
            &moved,
            &ConnectionPatch::default().with_password("pw"),
        )
        .await
        .unwrap();
    assert_eq!(out.key_version, "1");
    assert!(h.store.protected_credential(&a, "pg").is_some());

    h.engine
        .delete_connection_by_id(&ctx(), &a, "id-1")
        .await
        .unwrap();
    assert!(
        h.engine
            .get_connection_by_id(&ctx(), &a, "id-1")
            .await
            .is_err()
    );
    assert!(h.engine.get_connection(&ctx(), &a, "pg").await.is_err());
}
