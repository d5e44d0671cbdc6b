//! What the extract handler's tests share: the extractor over the AWS adapters on moto
//! (or LocalStack's lane), Lambda SQS event fixtures, jobs and their signed messages, and
//! the local databases the job tests read.

#![allow(dead_code)]

use fetcher_aws::host::HostConfig;
use fetcher_aws::testing::{config, resources};
use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_fn_extract::{Extractor, from_config};
use fetcher_host::model::{Job, JobRequest, QueueMessage};
use serde_json::{Value, json};

pub async fn host_config() -> HostConfig {
    HostConfig {
        schema_cache_ttl: std::time::Duration::from_secs(60),
        lease: std::time::Duration::from_secs(60),
        ..HostConfig::for_resources(&resources().await)
    }
}

pub async fn extractor() -> Extractor {
    from_config(host_config().await, &config().await).expect("extractor")
}

/// A Lambda SQS event of `messages` (fixture shape of the SQS event source).
pub fn sqs_event(messages: &[(&str, &QueueMessage)]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, m)| {
            let attrs: serde_json::Map<String, Value> = m
                .headers
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| {
                    (
                        k.clone(),
                        json!({"stringValue": v, "stringListValues": [], "binaryListValues": [], "dataType": "String"}),
                    )
                })
                .collect();
            json!({
                "messageId": id,
                "receiptHandle": format!("rh-{id}"),
                "body": String::from_utf8_lossy(&m.body),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000", "SenderId": "AIDA", "ApproximateFirstReceiveTimestamp": "1700000000000"},
                "messageAttributes": attrs,
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:fetcher-jobs",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

pub fn new_job(tenant: &str, config_name: &str) -> Job {
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        config_name.into(),
        [("accounts".to_string(), vec!["id".to_string()])].into(),
    );
    req.metadata.insert("source".into(), "handler-test".into());
    Job::new(tenant, req, uuid::Uuid::now_v7().to_string())
}

/// A job of `tenant` created `secs` seconds ago.
pub fn aged_job(tenant: &str, secs: i128) -> Job {
    let mut job = new_job(tenant, "missing-connection");
    job.created_at = fetcher_engine::Timestamp::from_unix_nanos(
        fetcher_engine::Timestamp::now().unix_nanos() - secs * 1_000_000_000,
    );
    job
}

pub async fn signer(ex: &Extractor) -> MessageSigner {
    let ring = ex.pipeline.keys.key_ring().await.unwrap();
    MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac)
}

pub async fn stored_job(ex: &Extractor, tenant: &str, id: fetcher_host::model::JobId) -> Job {
    ex.pipeline
        .jobs
        .get(tenant, id)
        .await
        .unwrap()
        .expect("job stored")
}

/// `psql` on the local PostgreSQL's `test` database as `postgres`; panics on failure.
pub fn psql(sql: &str) -> String {
    psql_at(5432, "test", sql)
}

/// `psql` as `postgres` on the server at `port` (a private cluster's), in `db`.
pub fn psql_at(port: u16, db: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
        .arg(port.to_string())
        .args(["-d", db, "-v", "ON_ERROR_STOP=1", "-tAc", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A PostgreSQL connection of `tenant` named `name`, on the local server.
pub async fn local_connection(ex: &Extractor, tenant: &str, name: &str) {
    create_connection(
        ex,
        tenant,
        fetcher_engine::ConnectionInput {
            config_name: name.into(),
            datasource_type: fetcher_engine::DatasourceType::Postgresql,
            host: "127.0.0.1".into(),
            port: 5432,
            database_name: "test".into(),
            username: "postgres".into(),
            password: fetcher_engine::Secret::from(b"trust-auth-ignores-it".to_vec()),
            ..Default::default()
        },
    )
    .await;
}

/// Stores `input` as a connection of `tenant` through the extractor's engine.
pub async fn create_connection(
    ex: &Extractor,
    tenant: &str,
    input: fetcher_engine::ConnectionInput,
) {
    ex.pipeline
        .engine
        .create_connection(
            &fetcher_engine::Context::background(),
            &fetcher_engine::TenantContext::new(tenant).unwrap(),
            &input,
        )
        .await
        .unwrap();
}

/// A job of `tenant` reading `table`'s `id` through connection `name`.
pub fn job_reading(tenant: &str, name: &str, table: &str) -> Job {
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        name.into(),
        [(table.to_owned(), vec!["id".to_owned()])].into(),
    );
    Job::new(tenant, req, uuid::Uuid::now_v7().to_string())
}

/// Polls the job until `done` holds (15 s at most).
pub async fn wait_for(
    ex: &Extractor,
    tenant: &str,
    id: fetcher_host::model::JobId,
    done: impl Fn(&Job) -> bool,
) -> Job {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let job = stored_job(ex, tenant, id).await;
        if done(&job) {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} stayed {:?}",
            job.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
