//! Shared harness for the engine's black-box tests: the engine wired to in-memory ports.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fetcher_engine::memory::*;
use fetcher_engine::*;

pub const PG: DatasourceType = DatasourceType::Postgresql;

/// The harness's one factory: connections added by [`add_source`] get their own
/// behaviour, by config name; every other connection the default.
pub struct Sources {
    default: Arc<TemplateFactory>,
    named: std::sync::Mutex<BTreeMap<String, Arc<TemplateFactory>>>,
}

impl ports::ConnectorFactory for Sources {
    fn build<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Option<Box<dyn ports::Connector>>>> {
        let factory = self
            .named
            .lock()
            .unwrap()
            .get(&descriptor.config_name)
            .cloned()
            .unwrap_or_else(|| self.default.clone());
        Box::pin(async move { factory.build(ctx, tenant, descriptor).await })
    }
}

pub struct Harness {
    pub engine: Engine,
    pub store: Arc<MemoryConnectionStore>,
    pub sources: Arc<Sources>,
    pub factory: Arc<TemplateFactory>,
    pub protector: Arc<MemoryCredentialProtector>,
    pub cache: Arc<MemorySchemaCache>,
    pub sink: Arc<MemoryResultSink>,
    pub executions: Arc<RecordingExecutionStore>,
    pub checker: Arc<MemoryActiveChecker>,
    pub spans: Arc<RecordingObservability>,
}

/// Which optional ports to wire.
#[derive(Clone, Copy)]
pub struct Wiring {
    pub encrypted: bool,
    pub cache: bool,
    pub sink: bool,
    pub checker: bool,
}

impl Default for Wiring {
    fn default() -> Self {
        Wiring {
            encrypted: true,
            cache: true,
            sink: false,
            checker: true,
        }
    }
}

pub fn harness(wiring: Wiring, behaviour: TemplateBehaviour, limits: Option<Limits>) -> Harness {
    let store = MemoryConnectionStore::new();
    let registry = MemoryRegistry::new();
    let factory = TemplateFactory::new(behaviour);
    let sources = Arc::new(Sources {
        default: factory.clone(),
        named: Default::default(),
    });
    registry.register(PG, sources.clone());
    let protector = MemoryCredentialProtector::new();
    let cache = MemorySchemaCache::new();
    let sink = MemoryResultSink::new();
    let executions = RecordingExecutionStore::new();
    let checker = MemoryActiveChecker::new();
    let spans = RecordingObservability::new();
    let mut b = Engine::builder()
        .connector_registry(registry.clone())
        .connection_store(store.clone())
        .execution_store(executions.clone())
        .observability(spans.clone())
        .credential_protector(protector.clone())
        .encrypted_persistence(wiring.encrypted);
    if wiring.cache {
        b = b.schema_cache(cache.clone());
    }
    if wiring.sink {
        b = b.result_sink(sink.clone());
    }
    if wiring.checker {
        b = b.active_execution_checker(checker.clone());
    }
    if let Some(l) = limits {
        b = b.limits(l);
    }
    Harness {
        engine: b.build().unwrap(),
        store,
        sources,
        factory,
        protector,
        cache,
        sink,
        executions,
        checker,
        spans,
    }
}

pub fn tenant(id: &str) -> TenantContext {
    TenantContext::new(id).unwrap()
}

pub fn ctx() -> Context {
    Context::background()
}

pub fn input(name: &str) -> ConnectionInput {
    ConnectionInput {
        config_name: name.into(),
        datasource_type: PG,
        host: "db.internal".into(),
        port: 5432,
        database_name: "app".into(),
        username: "reader".into(),
        ..Default::default()
    }
    .with_password("s3cr3t-Pa55w0rd")
}

pub fn row(pairs: &[(&str, Value)]) -> Row {
    Row::from_pairs(pairs.iter().map(|(k, v)| (*k, v.clone())))
}

pub fn ids(ids: &[i64]) -> Vec<Row> {
    ids.iter().map(|i| row(&[("id", Value::Int(*i))])).collect()
}

pub fn schema(tables: &[(&str, &[&str])]) -> SchemaSnapshot {
    SchemaSnapshot {
        config_name: String::new(),
        tables: tables
            .iter()
            .map(|(t, f)| TableSnapshot {
                name: (*t).into(),
                fields: f.iter().map(|s| (*s).into()).collect(),
                ..Default::default()
            })
            .collect(),
        captured_at: None,
    }
}

pub fn request(selection: &[(&str, &str, &[&str])]) -> ExtractionRequest {
    let mut mapped: BTreeMap<String, FieldSelection> = BTreeMap::new();
    for (config, table, fields) in selection {
        mapped.entry((*config).into()).or_default().insert(
            (*table).into(),
            fields.iter().map(|f| (*f).into()).collect(),
        );
    }
    ExtractionRequest {
        mapped_fields: mapped,
        ..Default::default()
    }
}

/// Creates a connection `name` for `tenant` whose connectors serve `behaviour`.
pub async fn add_source(
    h: &Harness,
    tenant: &TenantContext,
    name: &str,
    behaviour: TemplateBehaviour,
) -> Arc<TemplateFactory> {
    let factory = TemplateFactory::new(behaviour);
    h.sources
        .named
        .lock()
        .unwrap()
        .insert(name.to_owned(), factory.clone());
    let i = input(name);
    h.engine
        .create_connection(&ctx(), tenant, &i)
        .await
        .unwrap();
    factory
}

/// The two golden sources (docs/engine.md, "Worked example"): `pg-a` (`public.a`: alice, bob) and
/// `mongo-b` (`coll.b`: ids 10, 11, 12).
pub async fn golden_sources(
    h: &Harness,
    t: &TenantContext,
) -> (Arc<TemplateFactory>, Arc<TemplateFactory>) {
    let a = TemplateBehaviour {
        rows: [(
            "public.a".to_string(),
            vec![
                row(&[("id", 1.into()), ("name", "alice".into())]),
                row(&[("id", 2.into()), ("name", "bob".into())]),
            ],
        )]
        .into(),
        schema: schema(&[("public.a", &["id", "name"])]),
        ..Default::default()
    };
    let b = TemplateBehaviour {
        rows: [("coll.b".to_string(), ids(&[10, 11, 12]))].into(),
        schema: schema(&[("coll.b", &["id"])]),
        ..Default::default()
    };
    (
        add_source(h, t, "pg-a", a).await,
        add_source(h, t, "mongo-b", b).await,
    )
}

pub fn golden_request() -> ExtractionRequest {
    request(&[
        ("pg-a", "public.a", &["id", "name"]),
        ("mongo-b", "coll.b", &["id"]),
    ])
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Asserts an error's full rendering, and that no injected secret text leaked.
#[track_caller]
pub fn assert_err(err: &EngineError, category: Category, message: &str) {
    assert_err_prefix(err, category, message);
    assert_eq!(err.to_string(), format!("engine: [{category}] {message}"));
}

/// Like [`assert_err`], for a message that starts with `prefix`.
pub fn assert_err_prefix(err: &EngineError, category: Category, prefix: &str) {
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("engine: [{category}] {prefix}")),
        "{text} does not start with [{category}] {prefix}"
    );
    for secret in [
        "hunter2",
        "10.1.2.3",
        "s3cr3t",
        "password=",
        "AKIA",
        "/var/secret",
    ] {
        assert!(!err.to_string().contains(secret), "{err} leaks {secret}");
    }
}

pub fn store_wiring() -> Wiring {
    Wiring {
        sink: true,
        ..Wiring::default()
    }
}

pub async fn golden_plan(h: &Harness, t: &TenantContext) -> ExtractionPlan {
    golden_sources(h, t).await;
    h.engine
        .plan_extraction(&ctx(), t, &golden_request())
        .await
        .unwrap()
}

/// A hook that sleeps a pseudo-random few milliseconds, to shuffle completion order.
pub fn jitter(seed: u64) -> QueryHook {
    let n = Arc::new(AtomicUsize::new(seed as usize));
    Arc::new(move |_ctx| {
        let k = n.fetch_add(7919, Ordering::SeqCst);
        let ms = (k.wrapping_mul(2654435761) >> 7) % 6;
        Box::pin(tokio::time::sleep(Duration::from_millis(ms as u64)))
    })
}

pub fn multi_source(rows_per_step: i64) -> TemplateBehaviour {
    TemplateBehaviour {
        rows: [(
            "t".to_string(),
            (0..rows_per_step)
                .map(|i| row(&[("id", i.into()), ("v", format!("value-{i}").into())]))
                .collect(),
        )]
        .into(),
        schema: schema(&[("t", &["id", "v"])]),
        ..Default::default()
    }
}

pub async fn multi_plan(
    h: &Harness,
    t: &TenantContext,
    steps: usize,
    rows: i64,
    concurrency: i64,
) -> ExtractionPlan {
    let mut req = ExtractionRequest::default();
    for s in 0..steps {
        let name = format!("src{s}");
        let f = add_source(h, t, &name, multi_source(rows)).await;
        f.behaviour.lock().unwrap().on_query = Some(jitter(s as u64));
        req.mapped_fields.insert(
            name,
            [("t".to_string(), vec!["id".to_string(), "v".to_string()])].into(),
        );
    }
    req.overrides = Some(Limits {
        max_concurrency: concurrency,
        ..Limits::default()
    });
    h.engine.plan_extraction(&ctx(), t, &req).await.unwrap()
}

/// The `crm` datasource's tables.
pub fn crm_schema() -> SchemaSnapshot {
    schema(&[
        ("public.accounts", &["id", "name", "email"]),
        (
            "public.people",
            &["id", "natural_person.mother_name", "address.city"],
        ),
    ])
}

/// Registers the `crm` connection for `t`, serving [`crm_schema`].
pub async fn crm(h: &Harness, t: &TenantContext) {
    h.factory.behaviour.lock().unwrap().schema = crm_schema();
    h.engine
        .create_connection(&ctx(), t, &input("crm"))
        .await
        .unwrap();
}
