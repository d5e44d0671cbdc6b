//! The world every pipeline test runs on: the pipeline over in-memory ports, a template
//! PostgreSQL connection `pg` of tenant `acme`, and helpers to submit, age, claim and read
//! jobs.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use fetcher_crypto::{KeyPurpose, KeyRing, MessageSigner, Opener};
use fetcher_engine::memory::*;
use fetcher_engine::*;
use fetcher_host::memory::*;
use fetcher_host::message;
use fetcher_host::model::*;
use fetcher_host::pipeline::*;
use fetcher_host::ports::*;
use fetcher_host::sink::SealedResultSink;

pub const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

pub struct World {
    pub pipeline: Pipeline,
    pub jobs: Arc<MemoryJobStore>,
    pub events: Arc<MemoryEventPublisher>,
    pub objects: Arc<MemoryObjectStore>,
    pub ring: Arc<KeyRing>,
    pub factory: Arc<TemplateFactory>,
}

pub fn row(id: i64, name: &str) -> Row {
    Row::from_pairs([("id", Value::Int(id)), ("name", Value::from(name))])
}

pub async fn world() -> World {
    let ring = Arc::new(KeyRing::from_base64(KEY, "1").unwrap());
    let keys: Arc<dyn KeyProvider> = Arc::new(StaticKeyProvider(ring.clone()));
    let objects = MemoryObjectStore::new();
    let registry = MemoryRegistry::new();
    let factory = TemplateFactory::new(TemplateBehaviour {
        rows: [(
            "public.accounts".to_string(),
            vec![row(1, "ada"), row(2, "grace <&>")],
        )]
        .into(),
        schema: SchemaSnapshot {
            config_name: String::new(),
            tables: vec![TableSnapshot {
                name: "public.accounts".into(),
                fields: vec!["id".into(), "name".into()],
                ..Default::default()
            }],
            captured_at: None,
        },
        ..Default::default()
    });
    registry.register(fetcher_engine::DatasourceType::Postgresql, factory.clone());
    let store = MemoryConnectionStore::new();
    let engine = Engine::builder()
        .connector_registry(registry)
        .connection_store(store.clone())
        .result_sink(Arc::new(SealedResultSink::new(
            objects.clone(),
            keys.clone(),
        )))
        .build()
        .unwrap();
    let tenant = TenantContext::new("acme").unwrap();
    let input = ConnectionInput {
        config_name: "pg".into(),
        datasource_type: fetcher_engine::DatasourceType::Postgresql,
        ..Default::default()
    };
    engine
        .create_connection(&Context::background(), &tenant, &input)
        .await
        .unwrap();
    let jobs = MemoryJobStore::new();
    let events = MemoryEventPublisher::new();
    let pipeline = Pipeline {
        engine,
        jobs: jobs.clone(),
        events: events.clone(),
        objects: objects.clone(),
        keys,
        config: PipelineConfig {
            lease: Duration::from_secs(60),
            ..Default::default()
        },
        table_format: Some(Arc::new(fetcher_parquet::ParquetFormat::new())),
        queue: None,
        tenant_share: None,
    };
    World {
        pipeline,
        jobs,
        events,
        objects,
        ring,
        factory,
    }
}

pub async fn submit(w: &World, format: Option<ResultFormat>) -> (Job, QueueMessage) {
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        "pg".into(),
        [(
            "public.accounts".to_string(),
            vec!["id".to_string(), "name".to_string()],
        )]
        .into(),
    );
    req.metadata.insert("source".into(), "crm".into());
    req.result_format = format;
    let job = Job::new("acme", req, format!("hash-{}", uuid::Uuid::now_v7()));
    assert_eq!(w.jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let msg = message::encode(&job, &signer, "req-1", message::unix_now());
    (job, msg)
}

/// The stored result of a completed job of tenant `acme`.
pub async fn result_of(w: &World, id: JobId) -> JobResult {
    let job = w.jobs.get("acme", id).await.unwrap().expect("job stored");
    job.result.expect("a completed job has a result")
}

pub async fn open_v2(w: &World, path: &str, job_id: &str, hmac: &str) -> Vec<u8> {
    let sealed = read_all(w.objects.as_ref(), path)
        .await
        .unwrap()
        .expect("object stored");
    let mut opener = Opener::new(&w.ring, job_id).expect_hmac(hmac);
    let mut plain = Vec::new();
    opener.update_into(&sealed, &mut plain).unwrap();
    opener.finish().unwrap();
    plain
}

/// Claims `job` with a lease that expires at once: a worker that died.
pub async fn claim_and_die(w: &World, job: &Job) {
    let now = fetcher_engine::Timestamp::now();
    let ClaimOutcome::Claimed { .. } = w
        .jobs
        .claim("acme", job.id, now, Duration::from_millis(1))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// A pending job created `ago` in the past (its message sent then).
pub async fn submit_aged(w: &World, ago: Duration) -> (Job, QueueMessage) {
    let (mut job, _) = submit(w, None).await;
    job.id = JobId::new();
    job.request_hash = format!("hash-{}", job.id);
    job.created_at = fetcher_engine::Timestamp::from_unix_nanos(
        fetcher_engine::Timestamp::now().unix_nanos() - ago.as_nanos() as i128,
    );
    assert_eq!(w.jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let signed_at = message::unix_now() - ago.as_secs() as i64;
    (job.clone(), message::encode(&job, &signer, "", signed_at))
}

pub fn canceled_world_config(w: &mut World) {
    w.pipeline.config.progress_interval = Duration::from_millis(40);
}

pub async fn wait_for_status(w: &World, id: JobId, status: JobStatus) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while w.jobs.get("acme", id).await.unwrap().unwrap().status != status {
        assert!(std::time::Instant::now() < deadline, "never {status:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
