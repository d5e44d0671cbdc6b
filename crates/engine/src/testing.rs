//! Conformance suites for the storage ports (feature `testing`).
//!
//! Every adapter — the in-memory ports here, the embedded SQLite/local-directory adapters
//! and the DynamoDB/S3 adapters — runs the same suite, in the style of `object_store`'s
//! shared tests. Each suite is an async function that panics on the first broken
//! obligation. Tenants are made unique per run, so suites can share a real backend and
//! run in parallel.
//!
//! ```text
//! #[tokio::test]
//! async fn sqlite_connection_store_conforms() {
//!     fetcher_engine::testing::connection_store(&my_store()).await;
//! }
//! ```

pub mod connector;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::context::Context;
use crate::error::Category;
use crate::model::*;
use crate::ports::*;
use crate::tenant::TenantContext;
use crate::time::Timestamp;

/// A tenant id unique to this process and run.
pub fn unique_tenant(label: &str) -> TenantContext {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    TenantContext::new(&format!("{label}-{random:x}-{n}")).expect("valid tenant")
}

fn descriptor(name: &str, id: &str) -> ConnectionDescriptor {
    ConnectionDescriptor {
        id: id.into(),
        config_name: name.into(),
        datasource_type: DatasourceType::Postgresql,
        host: "db.internal".into(),
        port: 5432,
        database_name: "app".into(),
        schema: "public".into(),
        username: "reader".into(),
        ssl_mode: TlsMode::Require,
        tls: TlsMaterial::default(),
        key_version: "1".into(),
        host_attributes: [("productName".to_string(), serde_json::json!("crm"))].into(),
    }
}

fn credential(tag: &str) -> ProtectedCredential {
    ProtectedCredential {
        ciphertext: format!("cipher-{tag}").into_bytes(),
        key_version: "1".into(),
    }
}

/// Compares what a store returns with what was written, ignoring an id the store assigned.
fn assert_same(got: &ConnectionDescriptor, want: &ConnectionDescriptor) {
    let mut got = got.clone();
    if want.id.is_empty() {
        got.id.clear();
    }
    assert_eq!(&got, want);
}

/// The [`ConnectionStore`] obligations.
pub async fn connection_store(store: &Arc<dyn ConnectionStore>) {
    let ctx = Context::background();
    let a = unique_tenant("conf-a");
    let b = unique_tenant("conf-b");
    let id = |n: &str| format!("{}-{n}", a.tenant_id);

    // create / find round trip, including host attributes and key version.
    let pg = descriptor("pg", &id("pg"));
    store
        .create(&ctx, &a, &pg, Some(&credential("pg")))
        .await
        .expect("create");
    let found = store
        .find(&ctx, &a, "pg")
        .await
        .expect("find")
        .expect("found");
    assert_same(&found, &pg);
    assert_eq!(
        store.credential(&ctx, &a, "pg").await.unwrap(),
        Some(credential("pg"))
    );

    // A duplicate config name within a tenant is a conflict and changes nothing.
    let dup = ConnectionDescriptor {
        host: "other".into(),
        ..descriptor("pg", &id("dup"))
    };
    let err = store
        .create(&ctx, &a, &dup, Some(&credential("dup")))
        .await
        .expect_err("duplicate create must fail");
    assert_eq!(
        (err.category(), err.message(), err.reason()),
        (
            Category::Conflict,
            crate::error::msg::CONNECTION_EXISTS,
            Some(crate::Reason::ConnectionExists)
        ),
        "duplicate: {err}"
    );
    assert_same(&store.find(&ctx, &a, "pg").await.unwrap().unwrap(), &pg);
    assert_eq!(
        store.credential(&ctx, &a, "pg").await.unwrap(),
        Some(credential("pg"))
    );

    // Tenant isolation: the same name under another tenant is a separate record, and one
    // tenant never sees or touches another's.
    assert_eq!(store.find(&ctx, &b, "pg").await.unwrap(), None);
    assert_eq!(store.find_by_id(&ctx, &b, &pg.id).await.unwrap(), None);
    assert_eq!(store.credential(&ctx, &b, "pg").await.unwrap(), None);
    assert!(store.list(&ctx, &b).await.unwrap().is_empty());
    let err = store
        .delete(&ctx, &b, "pg")
        .await
        .expect_err("cross-tenant delete");
    assert_eq!(
        (err.category(), err.reason()),
        (Category::NotFound, Some(crate::Reason::ConnectionNotFound))
    );
    let err = store
        .update(&ctx, &b, &pg, None)
        .await
        .expect_err("cross-tenant update");
    assert_eq!(
        (err.category(), err.reason()),
        (Category::NotFound, Some(crate::Reason::ConnectionNotFound))
    );
    let err = store
        .delete_by_id(&ctx, &b, &pg.id)
        .await
        .expect_err("cross-tenant delete by id");
    assert_eq!(
        (err.category(), err.reason()),
        (Category::NotFound, Some(crate::Reason::ConnectionNotFound))
    );
    let b_pg = descriptor("pg", &format!("{}-pg", b.tenant_id));
    store
        .create(&ctx, &b, &b_pg, None)
        .await
        .expect("same name, other tenant");
    assert_eq!(store.credential(&ctx, &b, "pg").await.unwrap(), None);
    assert_same(&store.find(&ctx, &a, "pg").await.unwrap().unwrap(), &pg);

    // list: deterministic, ascending config name; list_paged reports a total.
    for name in ["zeta", "alpha", "Mid"] {
        store
            .create(&ctx, &a, &descriptor(name, &id(name)), None)
            .await
            .expect("create");
    }
    let names: Vec<String> = store
        .list(&ctx, &a)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.config_name)
        .collect();
    assert_eq!(names, ["Mid", "alpha", "pg", "zeta"]);
    let page = store
        .list_paged(&ctx, &a, &ConnectionListParams::default())
        .await
        .unwrap();
    assert_eq!(page.total, 4);
    let paged_pg = page
        .items
        .iter()
        .find(|d| d.config_name == "pg")
        .expect("pg in page");
    assert_eq!(
        paged_pg.host_attributes, pg.host_attributes,
        "host attributes round-trip"
    );

    // update: no credential keeps the stored one; a credential replaces it.
    let moved = ConnectionDescriptor {
        host: "db2.internal".into(),
        port: 6543,
        ..pg.clone()
    };
    store.update(&ctx, &a, &moved, None).await.expect("update");
    assert_same(&store.find(&ctx, &a, "pg").await.unwrap().unwrap(), &moved);
    assert_eq!(
        store.credential(&ctx, &a, "pg").await.unwrap(),
        Some(credential("pg")),
        "absent credential keeps the secret"
    );
    store
        .update(&ctx, &a, &moved, Some(&credential("rotated")))
        .await
        .expect("update");
    assert_eq!(
        store.credential(&ctx, &a, "pg").await.unwrap(),
        Some(credential("rotated"))
    );
    let err = store
        .update(&ctx, &a, &descriptor("missing", "x"), None)
        .await
        .expect_err("update missing");
    assert_eq!(
        (err.category(), err.reason()),
        (Category::NotFound, Some(crate::Reason::ConnectionNotFound))
    );

    // by id
    let by_id = store
        .find_by_id(&ctx, &a, &pg.id)
        .await
        .unwrap()
        .expect("find by id");
    assert_same(&by_id, &moved);
    assert_eq!(
        store.find_by_id(&ctx, &a, "no-such-id").await.unwrap(),
        None
    );
    let renamed = ConnectionDescriptor {
        database_name: "app2".into(),
        ..moved.clone()
    };
    store
        .update_by_id(&ctx, &a, &pg.id, &renamed, None)
        .await
        .expect("update by id");
    assert_same(
        &store.find(&ctx, &a, "pg").await.unwrap().unwrap(),
        &renamed,
    );
    assert_eq!(
        store.credential(&ctx, &a, "pg").await.unwrap(),
        Some(credential("rotated"))
    );
    let err = store
        .update_by_id(&ctx, &a, "no-such-id", &renamed, None)
        .await
        .expect_err("update missing id");
    assert_eq!(
        (err.category(), err.reason()),
        (Category::NotFound, Some(crate::Reason::ConnectionNotFound))
    );

    // delete: invisible to every read afterwards; deleting again is not_found.
    store.delete(&ctx, &a, "zeta").await.expect("delete");
    assert_eq!(store.find(&ctx, &a, "zeta").await.unwrap(), None);
    assert_eq!(store.find_by_id(&ctx, &a, &id("zeta")).await.unwrap(), None);
    assert_eq!(
        store.delete(&ctx, &a, "zeta").await.unwrap_err().category(),
        Category::NotFound
    );
    store
        .delete_by_id(&ctx, &a, &id("alpha"))
        .await
        .expect("delete by id");
    assert_eq!(store.find(&ctx, &a, "alpha").await.unwrap(), None);
    assert_eq!(
        store.find_by_id(&ctx, &a, &id("alpha")).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .delete_by_id(&ctx, &a, &id("alpha"))
            .await
            .unwrap_err()
            .category(),
        Category::NotFound
    );
    let names: Vec<String> = store
        .list(&ctx, &a)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.config_name)
        .collect();
    assert_eq!(names, ["Mid", "pg"]);
    assert_eq!(
        store
            .list_paged(&ctx, &a, &ConnectionListParams::default())
            .await
            .unwrap()
            .total,
        2
    );
    // Retention (#29): nothing of a deleted connection is kept, whichever way it was
    // deleted: a new connection takes its name and its id, and holds no credential of it.
    for name in ["zeta", "alpha"] {
        let again = descriptor(name, &id(name));
        store
            .create(&ctx, &a, &again, None)
            .await
            .unwrap_or_else(|e| panic!("{name}'s name and id are free after delete: {e}"));
        assert_eq!(store.credential(&ctx, &a, name).await.unwrap(), None);
        assert_same(
            &store
                .find_by_id(&ctx, &a, &id(name))
                .await
                .unwrap()
                .unwrap(),
            &again,
        );
        store.delete_by_id(&ctx, &a, &id(name)).await.unwrap();
    }
    // The other tenant's record is untouched by all of this.
    assert_same(&store.find(&ctx, &b, "pg").await.unwrap().unwrap(), &b_pg);
}

/// The [`ExecutionStore`] obligations: upsert by (tenant, job id), tenant-scoped reads.
pub async fn execution_store(store: &Arc<dyn ExecutionStore>) {
    let ctx = Context::background();
    let a = unique_tenant("exec-a");
    let b = unique_tenant("exec-b");
    assert_eq!(store.find(&ctx, &a, "job-1").await.unwrap(), None);
    let running = ExecutionState {
        job_id: "job-1".into(),
        status: Some(ExecutionStatus::Running),
        started_at: Some(Timestamp::from_unix_nanos(1_700_000_000_000_000_000)),
        ..Default::default()
    };
    store.save(&ctx, &a, &running).await.expect("save running");
    assert_eq!(
        store.find(&ctx, &a, "job-1").await.unwrap(),
        Some(running.clone())
    );
    assert_eq!(
        store.find(&ctx, &b, "job-1").await.unwrap(),
        None,
        "tenant-scoped"
    );
    let failed = ExecutionState {
        job_id: "job-1".into(),
        status: Some(ExecutionStatus::Failed),
        completed_at: Some(Timestamp::from_unix_nanos(1_700_000_001_000_000_000)),
        failure_message: "failed to query datasource".into(),
        ..Default::default()
    };
    store.save(&ctx, &a, &failed).await.expect("upsert");
    let got = store.find(&ctx, &a, "job-1").await.unwrap().expect("found");
    assert_eq!(got.status, Some(ExecutionStatus::Failed));
    assert_eq!(got.failure_message, "failed to query datasource");
    assert_eq!(got.completed_at, failed.completed_at);
    let other = ExecutionState {
        job_id: "job-1".into(),
        status: Some(ExecutionStatus::Completed),
        ..Default::default()
    };
    store
        .save(&ctx, &b, &other)
        .await
        .expect("save other tenant");
    assert_eq!(
        store.find(&ctx, &a, "job-1").await.unwrap().unwrap().status,
        Some(ExecutionStatus::Failed)
    );
}

/// Reads back the plaintext of a stored result, for [`result_sink`].
pub type ResultReader =
    Arc<dyn Fn(ResultReference) -> BoxFuture<'static, Option<Vec<u8>>> + Send + Sync>;

/// The [`ResultSink`] obligations: streamed writes come back byte for byte, empty results
/// finalise, abort never yields a reference, tenants get distinct objects. `read` fetches
/// a stored object's plaintext (the suite cannot know how an adapter seals it).
pub async fn result_sink(sink: &Arc<dyn ResultSink>, read: ResultReader) {
    let ctx = Context::background();
    let a = unique_tenant("sink-a");
    let b = unique_tenant("sink-b");

    // Several writes of uneven sizes, including one larger than common part sizes.
    let mut expected = Vec::new();
    let mut w = sink.open_stream(&ctx, &a, "job-1").await.expect("open");
    for (i, len) in [1usize, 255, 65_536, 3 * 1024 * 1024 + 7, 0, 10]
        .into_iter()
        .enumerate()
    {
        let chunk: Vec<u8> = (0..len).map(|j| (i * 31 + j * 7) as u8).collect();
        w.write(&ctx, &chunk).await.expect("write");
        expected.extend_from_slice(&chunk);
    }
    let reference = w.close(&ctx).await.expect("close");
    assert!(!reference.path.is_empty(), "a reference has a path");
    assert!(
        reference.size_bytes >= 0,
        "size is reported or left to the engine"
    );
    let stored = read(reference.clone())
        .await
        .expect("stored object readable");
    assert!(
        stored == expected,
        "stored bytes differ from the written bytes ({} vs {})",
        stored.len(),
        expected.len()
    );

    // An empty result finalises too.
    let w = sink.open_stream(&ctx, &a, "job-empty").await.expect("open");
    let empty = w.close(&ctx).await.expect("close empty");
    assert_eq!(
        read(empty.clone()).await.expect("empty readable"),
        Vec::<u8>::new()
    );
    assert_ne!(
        empty.path, reference.path,
        "distinct objects get distinct paths"
    );

    // Abort: nothing is returned, and the sink keeps working.
    let mut w = sink
        .open_stream(&ctx, &a, "job-aborted")
        .await
        .expect("open");
    w.write(&ctx, b"partial").await.expect("write");
    w.abort(&ctx).await;

    // Tenants: the same job id under two tenants gives two objects.
    let mut wa = sink.open_stream(&ctx, &a, "job-shared").await.unwrap();
    wa.write(&ctx, b"tenant a").await.unwrap();
    let ra = wa.close(&ctx).await.unwrap();
    let mut wb = sink.open_stream(&ctx, &b, "job-shared").await.unwrap();
    wb.write(&ctx, b"tenant b").await.unwrap();
    let rb = wb.close(&ctx).await.unwrap();
    assert_ne!(ra.path, rb.path);
    assert_eq!(read(ra).await.unwrap(), b"tenant a");
    assert_eq!(read(rb).await.unwrap(), b"tenant b");

    // Whole-payload persistence.
    let r = sink
        .persist(&ctx, &a, b"{\"whole\":true}")
        .await
        .expect("persist");
    assert_eq!(read(r).await.unwrap(), b"{\"whole\":true}");
}

/// The [`SchemaCache`] obligations: keyed by (tenant, snapshot config name), overwrite.
pub async fn schema_cache(cache: &Arc<dyn SchemaCache>) {
    let ctx = Context::background();
    let a = unique_tenant("cache-a");
    let b = unique_tenant("cache-b");
    assert_eq!(cache.get(&ctx, &a, "pg").await.unwrap(), None);
    let snap = SchemaSnapshot {
        config_name: "pg".into(),
        tables: vec![
            TableSnapshot {
                name: "public.accounts".into(),
                fields: vec!["id".into(), "name".into()],
                ..Default::default()
            },
            TableSnapshot {
                name: "public.Mixed Case".into(),
                fields: vec!["order".into(), "ünï".into()],
                ..Default::default()
            },
        ],
        captured_at: Some(Timestamp::from_unix_nanos(1_700_000_000_000_000_000)),
    };
    cache.put(&ctx, &a, &snap).await.expect("put");
    assert_eq!(cache.get(&ctx, &a, "pg").await.unwrap(), Some(snap.clone()));
    assert_eq!(
        cache.get(&ctx, &b, "pg").await.unwrap(),
        None,
        "tenant-scoped"
    );
    assert_eq!(cache.get(&ctx, &a, "other").await.unwrap(), None);
    let newer = SchemaSnapshot {
        tables: vec![],
        ..snap.clone()
    };
    cache.put(&ctx, &a, &newer).await.expect("overwrite");
    assert_eq!(cache.get(&ctx, &a, "pg").await.unwrap(), Some(newer));
    cache.put(&ctx, &b, &snap).await.expect("put b");
    assert_eq!(cache.get(&ctx, &b, "pg").await.unwrap(), Some(snap));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::*;

    #[tokio::test]
    async fn memory_connection_store_conforms() {
        connection_store(&(MemoryConnectionStore::new() as Arc<dyn ConnectionStore>)).await;
    }

    #[tokio::test]
    async fn memory_execution_store_conforms() {
        execution_store(&(MemoryExecutionStore::new() as Arc<dyn ExecutionStore>)).await;
    }

    #[tokio::test]
    async fn memory_result_sink_conforms() {
        let sink = MemoryResultSink::new();
        let reader = sink.clone();
        let read: ResultReader = Arc::new(move |r| {
            let got = reader.get(&r.path);
            Box::pin(async move { got })
        });
        result_sink(&(sink as Arc<dyn ResultSink>), read).await;
    }

    #[tokio::test]
    async fn memory_schema_cache_conforms() {
        schema_cache(&(MemorySchemaCache::new() as Arc<dyn SchemaCache>)).await;
    }
}
