//! Shared harness of the HTTP tests: the router over in-memory ports, driven with
//! `tower::ServiceExt::oneshot` (no network).
#![allow(dead_code)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use fetcher_crypto::{KeyPurpose, KeyRing, MessageSigner};
use fetcher_engine::memory::{
    MemoryConnectionStore, MemoryCredentialProtector, MemoryRegistry, MemorySchemaCache,
    TemplateBehaviour, TemplateFactory,
};
use fetcher_engine::{Engine, SchemaSnapshot, TableSnapshot};
use fetcher_host::jobs::JobStoreActiveChecker;
use fetcher_host::memory::{
    MemoryEventPublisher, MemoryJobQueue, MemoryJobStore, MemoryRateLimiter,
};
use fetcher_http::{
    self as http, ApiConfig, AppDeps, AppState, Authenticator, NoAuthentication, ReadinessProbe,
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

pub const PASSWORD: &str = "s3cr3t-Pa55w0rd";
pub const MASTER_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

pub struct Harness {
    pub router: Router,
    pub state: AppState,
    pub jobs: Arc<MemoryJobStore>,
    pub queue: Arc<MemoryJobQueue>,
    pub factory: Arc<TemplateFactory>,
    pub connections: Arc<MemoryConnectionStore>,
    pub signer: Arc<MessageSigner>,
    /// The scheduler's `schedule.paused` and `sync.stale` events.
    pub sync_events: Arc<MemoryEventPublisher>,
}

pub struct Options {
    pub config: ApiConfig,
    pub authenticator: Arc<dyn Authenticator>,
    pub probes: Vec<Arc<dyn ReadinessProbe>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: ApiConfig::default(),
            authenticator: Arc::new(NoAuthentication),
            probes: Vec::new(),
        }
    }
}

pub fn schema() -> SchemaSnapshot {
    SchemaSnapshot {
        config_name: String::new(),
        tables: vec![
            TableSnapshot {
                name: "users".into(),
                fields: vec!["name".into(), "id".into(), "address.city".into()],
                // What a SQL connector reports: the key, and which columns can order an
                // incremental read.
                primary_key: vec!["id".into()],
                types: [
                    ("id", "bigint", true),
                    ("name", "text", true),
                    ("address.city", "jsonb", false),
                ]
                .into_iter()
                .map(|(n, t, ok)| {
                    let ty = fetcher_engine::FieldType {
                        name: t.into(),
                        cursor: ok,
                        key: ok,
                        lookback: (t == "bigint").then_some(fetcher_engine::LookbackKind::Amount),
                        nullable: Some(n != "id"),
                        filter: Some(match t {
                            "bigint" => fetcher_engine::FilterKind::Number,
                            "text" => fetcher_engine::FilterKind::Text,
                            _ => fetcher_engine::FilterKind::None,
                        }),
                    };
                    (n.to_string(), ty)
                })
                .collect(),
                row_estimate: Some(42),
                view: false,
            },
            TableSnapshot {
                name: "accounting.invoices".into(),
                fields: vec!["total".into(), "id".into()],
                ..Default::default()
            },
        ],
        captured_at: None,
    }
}

pub fn harness() -> Harness {
    harness_with(Options::default())
}

pub fn harness_with(opts: Options) -> Harness {
    let factory = TemplateFactory::new(TemplateBehaviour {
        schema: schema(),
        ..Default::default()
    });
    let registry = MemoryRegistry::new();
    for t in fetcher_engine::DatasourceType::ALL {
        if t != fetcher_engine::DatasourceType::Sqlite {
            registry.register(t, factory.clone());
        }
    }
    let connections = MemoryConnectionStore::new();
    let jobs = MemoryJobStore::new();
    let queue = MemoryJobQueue::new();
    let engine = Engine::builder()
        .connector_registry(registry)
        .credential_protector(MemoryCredentialProtector::new())
        .encrypted_persistence(true)
        .connection_store(connections.clone())
        .schema_cache(MemorySchemaCache::new())
        .active_execution_checker(Arc::new(JobStoreActiveChecker(jobs.clone())))
        .build()
        .unwrap();
    let ring = KeyRing::from_base64(MASTER_KEY, "1").unwrap();
    let signer = Arc::new(MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac));
    let sync_events = MemoryEventPublisher::new();
    let deps = AppDeps {
        engine,
        job_store: jobs.clone(),
        job_queue: queue.clone(),
        rate_limiter: MemoryRateLimiter::new(),
        keys: Arc::new(fetcher_host::memory::StaticKeyProvider(Arc::new(ring))),
        authenticator: opts.authenticator,
        probes: opts.probes,
        host_policy: None,
        schedule_store: fetcher_host::memory::MemoryScheduleStore::new(),
        sync_events: Some(sync_events.clone()),
    };
    let state = AppState::new(deps, opts.config);
    Harness {
        router: http::router(state.clone()),
        state,
        jobs,
        queue,
        factory,
        connections,
        signer,
        sync_events,
    }
}

impl Harness {
    /// The same stores and engine served under another configuration (a host that
    /// changed its settings over existing data).
    pub fn reconfigured(&self, config: ApiConfig) -> Harness {
        let deps = AppDeps {
            engine: self.state.engine().clone(),
            job_store: self.jobs.clone(),
            job_queue: self.queue.clone(),
            rate_limiter: MemoryRateLimiter::new(),
            keys: self.state.keys(),
            authenticator: Arc::new(NoAuthentication),
            probes: Vec::new(),
            host_policy: None,
            schedule_store: self.state.schedules().store.clone(),
            sync_events: self.state.schedules().events.clone(),
        };
        let state = AppState::new(deps, config);
        Harness {
            router: http::router(state.clone()),
            state,
            jobs: self.jobs.clone(),
            queue: self.queue.clone(),
            factory: self.factory.clone(),
            connections: self.connections.clone(),
            signer: self.signer.clone(),
            sync_events: self.sync_events.clone(),
        }
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|_| panic!("not JSON ({}): {}", self.status, self.text))
    }

    pub fn code(&self) -> Value {
        self.json()["code"].clone()
    }
}

impl Harness {
    pub async fn send(&self, req: Request<Body>) -> Reply {
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(
            !text.contains(PASSWORD),
            "a body carried the password: {text}"
        );
        assert!(
            !text.contains("hunter2") && !text.contains("10.1.2.3"),
            "driver text reached a body: {text}"
        );
        Reply {
            status,
            headers,
            text,
        }
    }

    /// A JSON request with extra headers.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let mut b = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = match body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(v.to_string()))
                .unwrap(),
            None => b.body(Body::empty()).unwrap(),
        };
        self.send(req).await
    }

    pub async fn raw(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> Reply {
        let mut b = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        self.send(b.body(body.into()).unwrap()).await
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.call(Method::GET, uri, &[], None).await
    }

    /// A GET as `product` (`X-Product-Name`): a connection answers only to its own.
    pub async fn get_as(&self, product: &str, uri: &str) -> Reply {
        self.call(Method::GET, uri, &[("x-product-name", product)], None)
            .await
    }

    /// Caches the schema of `core-pg` (as product `reporter`) through validate-schema, as
    /// a caller's discovery would: job creation then checks against it.
    pub async fn cache_schema(&self) {
        let r = self
            .call(
                Method::POST,
                "/v1/management/connections/validate-schema",
                &[("x-product-name", "reporter")],
                Some(json!({"mappedFields": {"core-pg": {"users": ["id"]}}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }

    /// Claims job `id` as a worker would and reports `progress` with its heartbeat;
    /// returns the claim's token and whether the heartbeat was asked to stop.
    pub async fn report_progress(
        &self,
        id: fetcher_host::model::JobId,
        progress: fetcher_host::model::Progress,
    ) -> (u32, bool) {
        use fetcher_host::ports::{ClaimOutcome, JobStore as _};
        let now = progress.updated_at;
        let ClaimOutcome::Claimed { token, .. } = self
            .jobs
            .claim("default", id, now, std::time::Duration::from_secs(60))
            .await
            .unwrap()
        else {
            panic!("claimed")
        };
        let until = fetcher_engine::Timestamp::from_unix_nanos(now.unix_nanos() + 60_000_000_000);
        let stop = self
            .jobs
            .renew("default", id, token, until, Some(progress))
            .await
            .unwrap();
        (token, stop)
    }

    /// Creates a connection for `product`; asserts 201; returns the body.
    pub async fn create(&self, product: &str, body: Value) -> Value {
        let r = self
            .call(
                Method::POST,
                "/v1/management/connections",
                &[("x-product-name", product)],
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.json()
    }
}

pub fn connection(name: &str) -> Value {
    json!({
        "configName": name, "type": "POSTGRESQL", "host": "db.example.com", "port": 5432,
        "databaseName": "ledger", "userName": "reporter_ro", "password": PASSWORD,
    })
}

/// The `jobId` of a job response, parsed: the job store's key.
pub fn job_id(v: &Value) -> fetcher_host::model::JobId {
    fetcher_host::model::JobId::parse(v["jobId"].as_str().expect("a jobId")).expect("a UUID")
}

pub fn job(ds: &str, source: &str) -> Value {
    json!({"dataRequest": {"mappedFields": {ds: {"users": ["id", "name"]}}}, "metadata": {"source": source}})
}

/// The default harness with the `core-pg` connection of product `reporter`.
pub async fn setup() -> Harness {
    let h = harness();
    h.create("reporter", connection("core-pg")).await;
    h
}

/// The `X-Product-Name` of product `p`, the one most tests create connections for.
pub const P: [(&str, &str); 1] = [("x-product-name", "p")];

/// The connection routes' base path.
pub const BASE: &str = "/v1/management/connections";

/// The HS256 secret of the token tests.
pub const SECRET: &[u8] = b"test-hs256-secret-of-enough-length!!";

/// Unix time in seconds.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 token for `claims`, signed with [`SECRET`].
pub fn hs(claims: serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

/// A multi-tenant harness with `auth`.
pub fn multi_tenant(auth: Arc<dyn fetcher_http::Authenticator>) -> Harness {
    harness_with(Options {
        config: ApiConfig {
            multi_tenant: true,
            ..Default::default()
        },
        authenticator: auth,
        probes: Vec::new(),
    })
}
