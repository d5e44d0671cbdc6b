//! The AWS adapters pass the same conformance suites as the in-memory and embedded
//! adapters, against moto server (or whatever `AWS_ENDPOINT_URL` names).

use std::sync::Arc;
use std::time::Duration;

use fetcher_aws::bootstrap::rotate_master_key;
use fetcher_aws::testing::{self, clients, resources};
use fetcher_aws::*;
use fetcher_crypto::{KeyRing, MasterKeySource};
use fetcher_engine::ports::{ConnectionStore, ExecutionStore, ResultSink, SchemaCache};
use fetcher_engine::testing as engine_suites;
use fetcher_host::model::{JobStatus, QueueMessage, TerminalEvent};
use fetcher_host::ports::*;
use fetcher_host::sink::SealedResultSink;
use fetcher_host::testing::{self as service_suites, DeliveredEvent};

async fn store() -> DynamoStore {
    let r = resources().await;
    DynamoStore::new(clients().await.dynamodb, r.table)
}

async fn objects() -> S3ObjectStore {
    let r = resources().await;
    S3ObjectStore::new(clients().await.s3, r.bucket)
}

#[tokio::test]
async fn dynamodb_connection_store_conforms() {
    engine_suites::connection_store(&(Arc::new(store().await) as Arc<dyn ConnectionStore>)).await;
}

#[tokio::test]
async fn dynamodb_execution_store_conforms() {
    engine_suites::execution_store(&(Arc::new(store().await) as Arc<dyn ExecutionStore>)).await;
}

#[tokio::test]
async fn dynamodb_schema_cache_conforms() {
    let cache = DynamoSchemaCache::new(store().await, Duration::from_secs(300));
    engine_suites::schema_cache(&(Arc::new(cache) as Arc<dyn SchemaCache>)).await;
}

#[tokio::test]
async fn the_schema_cache_falls_back_to_memory_when_dynamodb_is_unreachable() {
    // A table that does not exist stands in for an unreachable DynamoDB.
    let broken = DynamoStore::new(clients().await.dynamodb, "no-such-table");
    let cache = DynamoSchemaCache::new(broken, Duration::from_secs(300));
    engine_suites::schema_cache(&(Arc::new(cache) as Arc<dyn SchemaCache>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_job_store_conforms() {
    service_suites::job_store(&(Arc::new(store().await) as Arc<dyn JobStore>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_takeover_loses_no_part() {
    service_suites::takeover_loses_no_part(Arc::new(store().await) as Arc<dyn JobStore>).await;
}

#[tokio::test]
async fn dynamodb_rate_limiter_conforms() {
    service_suites::rate_limiter(&(Arc::new(store().await) as Arc<dyn RateLimiter>)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_tenant_slots_conform() {
    service_suites::tenant_slots(&(Arc::new(store().await) as Arc<dyn TenantSlots>)).await;
}

#[tokio::test]
async fn s3_object_store_conforms() {
    service_suites::object_store(&(Arc::new(objects().await) as Arc<dyn ObjectStore>)).await;
}

#[tokio::test]
async fn s3_multipart_uploads_and_aborts() {
    let store = objects().await.with_parts(5 * 1024 * 1024, 2);
    let path = format!("mp-{}/big.bin", uuid::Uuid::new_v4());
    let mut w = store.put(&path).await.unwrap();
    let chunk: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
    let mut expected = Vec::new();
    for _ in 0..17 {
        w.write(&chunk).await.unwrap();
        expected.extend_from_slice(&chunk);
    }
    assert_eq!(w.finish().await.unwrap(), expected.len() as u64);
    assert_eq!(
        store.head(&path).await.unwrap(),
        Some(expected.len() as u64)
    );
    assert!(read_all(&store, &path).await.unwrap().unwrap() == expected);

    let aborted = format!("mp-{}/aborted.bin", uuid::Uuid::new_v4());
    let mut w = store.put(&aborted).await.unwrap();
    for _ in 0..12 {
        w.write(&chunk).await.unwrap();
    }
    w.abort().await;
    assert_eq!(store.head(&aborted).await.unwrap(), None);
    let r = resources().await;
    let uploads = clients()
        .await
        .s3
        .list_multipart_uploads()
        .bucket(&r.bucket)
        .prefix(aborted.clone())
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty(), "the aborted upload is gone");
}

#[tokio::test]
async fn sealed_result_sink_over_s3_conforms() {
    let r = resources().await;
    let c = clients().await;
    let source = SecretsManagerKeySource::new(c.secrets.clone(), c.kms.clone(), &r.secret_id);
    let keys = Arc::new(CachedKeyProvider::new(Arc::new(source)));
    let ring = keys.key_ring().await.unwrap();
    let objects: Arc<dyn ObjectStore> = Arc::new(objects().await);
    let sink = SealedResultSink::new(objects.clone(), keys);
    let reader: engine_suites::ResultReader = Arc::new(move |r| {
        let (objects, ring) = (objects.clone(), ring.clone());
        Box::pin(async move {
            let sealed = read_all(objects.as_ref(), &r.path).await.ok()??;
            let hmac = r.integrity.as_ref().map(|i| i.signature.clone());
            let plain = fetcher_crypto::open_sealed(&ring, &sealed, None, hmac.as_deref()).ok()?;
            Some(plain.to_vec())
        })
    });
    engine_suites::result_sink(&(Arc::new(sink) as Arc<dyn ResultSink>), reader).await;
}

#[tokio::test]
async fn master_keys_come_from_the_secret_and_survive_a_rotation() {
    let r = resources().await;
    let c = clients().await;
    let source = SecretsManagerKeySource::new(c.secrets.clone(), c.kms.clone(), &r.secret_id);
    let before = KeyRing::load(&source).await.unwrap();
    let old_version = before.current_version().to_owned();
    // Rotation is process-wide state in the emulator; do it on a separate secret copy.
    let mut rotated = r.clone();
    rotated.secret_id = format!("{}-rotation", r.secret_id);
    let blob = fetcher_aws::bootstrap::new_encrypted_master_key(&c, &r.kms_key_id)
        .await
        .unwrap();
    c.secrets
        .create_secret()
        .name(&rotated.secret_id)
        .secret_string(blob)
        .send()
        .await
        .unwrap();
    let src = SecretsManagerKeySource::new(c.secrets.clone(), c.kms.clone(), &rotated.secret_id);
    let first = src.load().await.unwrap();
    let v1 = first.current.version().to_owned();
    fetcher_aws::bootstrap::keep_version(&c, &rotated.secret_id, &v1)
        .await
        .unwrap();
    let v2 = rotate_master_key(&c, &rotated).await.unwrap();
    let second = src.load().await.unwrap();
    assert_eq!(second.current.version(), v2);
    assert!(
        second.previous.iter().any(|k| k.version() == v1),
        "the previous version stays readable"
    );
    let ring = KeyRing::new(second).unwrap();
    assert!(ring.get(&v1).is_ok() && ring.get(&v2).is_ok());
    assert!(!old_version.is_empty());

    // A second rotation: v1 is now neither AWSCURRENT nor AWSPREVIOUS. Real Secrets
    // Manager deprecates such a version (it is no longer listed by default, and may be
    // deleted), so every version carries a label of ours and is listed with the
    // deprecated ones: data sealed two rotations back stays readable.
    let v3 = rotate_master_key(&c, &rotated).await.unwrap();
    let third = KeyRing::new(src.load().await.unwrap()).unwrap();
    assert_eq!(third.current_version(), v3);
    for v in [&v1, &v2, &v3] {
        assert!(
            third.get(v).is_ok(),
            "version {v} readable after two rotations"
        );
    }
    let stages = c
        .secrets
        .describe_secret()
        .secret_id(&rotated.secret_id)
        .send()
        .await
        .unwrap();
    let labels = stages.version_ids_to_stages().cloned().unwrap_or_default();
    for v in [&v1, &v2, &v3] {
        assert!(
            labels
                .get(v.as_str())
                .is_some_and(|l| l.contains(&format!("fetcher-key-{v}"))),
            "{v} labelled: {labels:?}"
        );
    }

    // A warm container's cached ring learns the rotation when asked to reload.
    let cached = CachedKeyProvider::new(Arc::new(SecretsManagerKeySource::new(
        c.secrets.clone(),
        c.kms.clone(),
        &rotated.secret_id,
    )))
    .with_min_reload(Duration::from_millis(200));
    use fetcher_host::ports::KeyProvider as _;
    let warm = cached.key_ring().await.unwrap();
    assert_eq!(warm.current_version(), v3);
    let v4 = rotate_master_key(&c, &rotated).await.unwrap();
    assert_eq!(
        cached.key_ring().await.unwrap().current_version(),
        v3,
        "cached"
    );
    assert_eq!(
        cached.reload().await.unwrap().current_version(),
        v3,
        "not more often than allowed"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let reloaded = cached.reload().await.unwrap();
    assert_eq!(reloaded.current_version(), v4);
    assert!(reloaded.get(&v1).is_ok());
}

/// One receive of up to 10 messages with their attributes, waiting at most a second.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .message_attribute_names("All")
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
}

#[tokio::test]
async fn sqs_job_queue_conforms() {
    // A queue of its own, so no other test's reader hides these messages.
    let c = clients().await;
    let name = format!("fetcher-conformance-{}", uuid::Uuid::new_v4());
    let url = c
        .sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let queue = SqsJobQueue::new(c.sqs.clone(), &url);
    let (sqs, read_url) = (c.sqs.clone(), url.clone());
    service_suites::job_queue(&(Arc::new(queue) as Arc<dyn JobQueue>), move |n| {
        let (sqs, url) = (sqs.clone(), read_url.clone());
        Box::pin(async move {
            let mut got = Vec::new();
            for _ in 0..10 {
                got.extend(
                    receive(&sqs, &url)
                        .await
                        .iter()
                        .map(fetcher_aws::sqs::queue_message_from_sdk),
                );
                if got.len() >= n {
                    break;
                }
            }
            got
        })
    })
    .await;
    c.sqs.delete_queue().queue_url(&url).send().await.unwrap();
}

#[tokio::test]
async fn sqs_carries_the_envelope_headers_and_body() {
    let r = resources().await;
    let c = clients().await;
    let queue = SqsJobQueue::new(c.sqs.clone(), &r.queue_url);
    let msg = QueueMessage {
        headers: [
            ("jobId".to_string(), "j-1".to_string()),
            ("X-Tenant-ID".to_string(), "acme".to_string()),
            ("x-message-signature".to_string(), "ab".repeat(32)),
            ("t".to_string(), "1700000000".to_string()),
            ("signature-version".to_string(), "v1".to_string()),
            ("X-Request-Id".to_string(), String::new()),
        ]
        .into(),
        body: br#"{"jobId":"j-1","mappedFields":{}}"#.to_vec(),
    };
    queue.enqueue(msg.clone()).await.unwrap();
    let got = receive(&c.sqs, &r.queue_url).await;
    let m = got
        .iter()
        .find(|m| m.body().is_some_and(|b| b.contains("j-1")))
        .expect("message received");
    let back = fetcher_aws::sqs::queue_message_from_sdk(m);
    let mut want = msg.clone();
    want.headers.remove("X-Request-Id");
    assert_eq!(back, want);
    c.sqs
        .delete_message()
        .queue_url(&r.queue_url)
        .receipt_handle(m.receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
}

/// Reads the subscriber queue until an event for every job in `jobs` arrived (bounded).
async fn delivered(
    c: &Clients,
    queue_url: &str,
    jobs: &[String],
) -> std::collections::HashMap<String, serde_json::Value> {
    let mut found = std::collections::HashMap::new();
    for _ in 0..20 {
        let got = c
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for m in got.messages() {
            let v: serde_json::Value = serde_json::from_str(m.body().unwrap_or("{}")).unwrap();
            if let Some(job) = v["detail"]["jobId"]
                .as_str()
                .filter(|j| jobs.iter().any(|x| x == j))
            {
                found.insert(job.to_owned(), v.clone());
                c.sqs
                    .delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
        if found.len() == jobs.len() {
            break;
        }
    }
    found
}

fn completed(job_id: &str) -> TerminalEvent {
    TerminalEvent::new(
        "acme",
        fetcher_host::model::JobId::parse(job_id).expect("a UUID"),
        JobStatus::Completed,
        format!(r#"{{"jobId":"{job_id}","metadata":{{"source":"t"}},"status":"completed"}}"#),
    )
}

#[tokio::test]
async fn eventbridge_events_reach_the_subscriber_queue() {
    let r = resources().await;
    let c = clients().await;
    let publisher = EventBridgePublisher::new(c.events.clone(), &r.bus_name, &r.event_source);
    // The suite every publisher runs, read back through the rule's subscriber queue (in
    // this test, the only reader of that queue).
    let (reader, queue) = (clients().await, r.subscriber_queue_url.clone());
    service_suites::event_publisher(
        &(Arc::new(publisher.clone()) as Arc<dyn EventPublisher>),
        move |ids| {
            let (reader, queue) = (reader.clone(), queue.clone());
            Box::pin(async move {
                // EventBridge's own envelope id is its own; ours is detail.eventId.
                let jobs: Vec<String> = ids
                    .iter()
                    .map(|id| id.rsplit('.').next().unwrap().to_owned())
                    .collect();
                delivered(&reader, &queue, &jobs)
                    .await
                    .into_values()
                    .map(|v| DeliveredEvent {
                        id: v["detail"]["eventId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        detail_type: v["detail-type"].as_str().unwrap_or_default().to_owned(),
                        tenant_id: v["detail"]["tenantId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        detail: v["detail"].clone(),
                    })
                    .collect()
            })
        },
    )
    .await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let event = completed(&job_id);
    publisher.publish(&event).await.unwrap();
    let got = delivered(&c, &r.subscriber_queue_url, std::slice::from_ref(&job_id)).await;
    let v = got.get(&job_id).expect("event delivered through the rule");
    assert_eq!(v["detail-type"], "job.completed");
    assert_eq!(v["source"], r.event_source.as_str());
    assert_eq!(v["detail"]["eventId"], event.id.as_str());
    assert_eq!(v["detail"]["tenantId"], "acme");
    assert_eq!(v["detail"]["status"], "completed");

    // A batch larger than one PutEvents request (10 entries): every event arrives once.
    let jobs: Vec<String> = (0..23).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let events: Vec<TerminalEvent> = jobs.iter().map(|j| completed(j)).collect();
    let results = publisher.publish_batch(&events).await;
    assert_eq!(results.len(), 23);
    assert!(results.iter().all(Result::is_ok));
    let got = delivered(&c, &r.subscriber_queue_url, &jobs).await;
    assert_eq!(got.len(), 23, "every batched event delivered");
    for (job, v) in &got {
        assert_eq!(
            v["detail"]["eventId"],
            format!("fetcher.job.completed.{job}")
        );
    }

    // As the template: the rule's target has a DLQ and a retry policy, and the subscriber
    // queue lets EventBridge send on behalf of the rule.
    let targets = c
        .events
        .list_targets_by_rule()
        .rule(&r.rule_name)
        .event_bus_name(&r.bus_name)
        .send()
        .await
        .unwrap();
    let target = targets.targets().first().expect("rule target");
    assert!(
        target
            .dead_letter_config()
            .and_then(|d| d.arn())
            .is_some_and(|a| a.ends_with("-events-dlq"))
    );
    assert_eq!(
        target
            .retry_policy()
            .and_then(|p| p.maximum_retry_attempts()),
        Some(185)
    );
    let attrs = c
        .sqs
        .get_queue_attributes()
        .queue_url(&r.subscriber_queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::Policy)
        .send()
        .await
        .unwrap();
    let policy = attrs
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::Policy))
        .expect("queue policy");
    let policy: serde_json::Value = serde_json::from_str(policy).unwrap();
    let statement = &policy["Statement"][0];
    assert_eq!(statement["Principal"]["Service"], "events.amazonaws.com");
    let source = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        .as_str()
        .unwrap();
    assert!(
        source.starts_with("arn:")
            && source.ends_with(&format!("rule/{}/{}", r.bus_name, r.rule_name)),
        "{source}"
    );

    // Bootstrap is idempotent: a second run over the same prefix reuses everything.
    let again = fetcher_aws::bootstrap::bootstrap(
        &c,
        &fetcher_aws::bootstrap::Options::new(r.table.trim_end_matches("-store")),
    )
    .await
    .expect("bootstrap twice");
    assert_eq!(again.queue_url, r.queue_url);
    assert_eq!(again.events_dlq_url, r.events_dlq_url);

    // A bus that does not exist. Real EventBridge accepts PutEvents to a missing custom
    // bus and drops the events (LocalStack does the same; moto fails the entries), so a
    // publish cannot detect it; the readiness probe (DescribeEventBus) does, on AWS and
    // on both emulators.
    let missing = EventBridgePublisher::new(c.events.clone(), "no-such-bus", "x");
    assert!(missing.ping().await.is_err());
    assert!(publisher.ping().await.is_ok());

    // Failures are reported, not swallowed: with the bus unreachable every publish fails,
    // and so does every entry of a batch spanning several requests.
    let unreachable = aws_sdk_eventbridge::config::Builder::from(&testing::config().await)
        .endpoint_url(format!("http://127.0.0.1:{}", closed_port()))
        .retry_config(aws_sdk_eventbridge::config::retry::RetryConfig::disabled())
        .build();
    let broken = EventBridgePublisher::new(
        aws_sdk_eventbridge::Client::from_conf(unreachable),
        &r.bus_name,
        &r.event_source,
    )
    .with_attempts(2);
    assert!(broken.publish(&event).await.is_err());
    let results = broken.publish_batch(&events[..12]).await;
    assert_eq!(results.len(), 12);
    assert!(results.iter().all(Result::is_err));
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[tokio::test]
async fn master_keys_are_bound_to_their_kms_encryption_context() {
    use base64::Engine as _;
    let r = resources().await;
    let c = clients().await;
    let blob = |context: Option<(&'static str, &'static str)>| {
        let c = c.clone();
        let key = r.kms_key_id.clone();
        async move {
            let req = c
                .kms
                .generate_data_key()
                .key_id(key)
                .key_spec(aws_sdk_kms::types::DataKeySpec::Aes256);
            let req = match context {
                Some((k, v)) => req.encryption_context(k, v),
                None => req,
            };
            let out = req.send().await.unwrap();
            base64::engine::general_purpose::STANDARD.encode(out.ciphertext_blob.unwrap().as_ref())
        }
    };
    let load = |name: String, secret: String| {
        let c = c.clone();
        async move {
            c.secrets
                .create_secret()
                .name(&name)
                .secret_string(secret)
                .send()
                .await
                .unwrap();
            SecretsManagerKeySource::new(c.secrets.clone(), c.kms.clone(), &name)
                .load()
                .await
        }
    };
    let base = format!("{}-context", r.secret_id);
    // Made by bootstrap or the README's command: the master-key context.
    let ours = fetcher_aws::bootstrap::new_encrypted_master_key(&c, &r.kms_key_id)
        .await
        .unwrap();
    assert!(load(format!("{base}-ours"), ours).await.is_ok());
    // Made before the context was used: still readable.
    assert!(
        load(format!("{base}-legacy"), blob(None).await)
            .await
            .is_ok()
    );
    // A data key made for another purpose is not a master key.
    let other = blob(Some(("fetcher:purpose", "something-else"))).await;
    assert!(load(format!("{base}-other"), other).await.is_err());
}

/// An item's size by DynamoDB's rule (attribute names plus values; numbers about one
/// byte per two digits plus one), which write units are counted from: one unit per
/// started KiB of the item, twice that in a transaction.
fn item_size(
    item: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
) -> usize {
    use aws_sdk_dynamodb::types::AttributeValue as V;
    fn value(v: &V) -> usize {
        match v {
            V::S(s) => s.len(),
            V::N(n) => n.trim_start_matches('-').len().div_ceil(2) + 1,
            V::B(b) => b.as_ref().len(),
            V::Bool(_) | V::Null(_) => 1,
            V::M(m) => 3 + m.iter().map(|(k, v)| k.len() + value(v)).sum::<usize>(),
            V::L(l) => 3 + l.iter().map(|v| 1 + value(v)).sum::<usize>(),
            _ => 0,
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

/// A heartbeat writes the job's small lease item alone: not the job document (up to the
/// 192 KiB request cap) and not the `work` index that projects it. Prints the write
/// units of a heartbeat before (the whole document rewritten in a transaction, and the
/// index) and after, from the items as stored.
#[tokio::test]
async fn a_heartbeat_writes_only_the_lease_item() {
    use fetcher_host::model::{Job, JobRequest, Progress};
    let store = store().await;
    let table = resources().await.table;
    let ddb = clients().await.dynamodb;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    // A request near the cap: 180 KiB of metadata.
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        "pg".into(),
        [("public.t".to_string(), vec!["id".to_string()])].into(),
    );
    req.metadata.insert("source".into(), "wcu".into());
    req.metadata
        .insert("blob".into(), "x".repeat(180 * 1024).into());
    let job = Job::new(&tenant, req, format!("hash-{}", uuid::Uuid::now_v7()));
    store.insert(&job).await.unwrap();
    let now = fetcher_engine::Timestamp::now();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(&tenant, job.id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    let raw = |sk: &'static str| {
        let (ddb, table, pk) = (
            ddb.clone(),
            table.clone(),
            format!("JOB#{}:{tenant}#{}", tenant.len(), job.id),
        );
        async move {
            ddb.get_item()
                .table_name(table)
                .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk))
                .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(sk.into()))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .expect("item")
        }
    };
    let doc_before = raw("J").await;
    let lease_before = raw("L").await;
    for beat in 1..=3u64 {
        let until = fetcher_engine::Timestamp::from_unix_nanos(
            fetcher_engine::Timestamp::now().unix_nanos() + 60_000_000_000,
        );
        let progress = Progress {
            rows: beat * 1000,
            bytes: beat * 100_000,
            tables_done: 0,
            tables_total: 1,
            updated_at: fetcher_engine::Timestamp::now(),
        };
        assert!(
            !store
                .renew(&tenant, job.id, token, until, Some(progress))
                .await
                .unwrap()
        );
    }
    let doc_after = raw("J").await;
    let lease_after = raw("L").await;
    assert_eq!(doc_after, doc_before, "the job document is not rewritten");
    assert_ne!(lease_after, lease_before, "the lease item is");
    // The job reads with its live progress and lease.
    let read = store.get(&tenant, job.id).await.unwrap().unwrap();
    assert_eq!(read.progress.unwrap().rows, 3000);
    // A cancel is seen by the next heartbeat; a lost claim fails it.
    let canceled = fetcher_host::model::PendingEvent {
        status: JobStatus::Canceled,
        payload: "{}".into(),
        failures: 0,
    };
    let cancel = fetcher_host::model::Transition::Cancel {
        event: &canceled,
        at: now,
    };
    assert!(!store.transition(&tenant, job.id, cancel).await.unwrap());
    assert!(
        store
            .renew(&tenant, job.id, token, now, None)
            .await
            .unwrap()
    );
    let err = store
        .renew(&tenant, job.id, token + 1, now, None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), fetcher_host::ErrorKind::Conflict);

    let kib = |b: usize| b.div_ceil(1024);
    let doc = item_size(&doc_after);
    let projected: usize = ["pk", "sk", "wpk", "wsk", "doc", "ver"]
        .iter()
        .filter_map(|k| doc_after.get_key_value(*k))
        .map(|(k, v)| item_size(&std::collections::HashMap::from([(k.clone(), v.clone())])))
        .sum();
    let before = 2 * kib(doc) + kib(projected);
    let after = kib(item_size(&lease_after));
    println!(
        "heartbeat write units: before {before} (document {doc} B rewritten in a transaction: {} units, plus the work index {} units); after {after} (lease item {} B, no index)",
        2 * kib(doc),
        kib(projected),
        item_size(&lease_after)
    );
    assert_eq!(after, 1, "one write unit per heartbeat");
    assert!(before > 500, "{before}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_schedule_store_conforms() {
    service_suites::schedule_store(&(Arc::new(store().await) as Arc<dyn ScheduleStore>)).await;
}

/// #53 item 2: the key check a Lambda verifies at its cold start. The first start
/// records its key; the same key starts again; another key for the recorded version is
/// refused with what to do; a rotation (a new current version beside the old) is
/// recorded; a retired version is only logged. A table of its own, so the deployment's
/// table (and the Lambdas the other tests start on it) keep their key.
#[tokio::test]
async fn the_key_check_refuses_another_master_key() {
    let table = format!("fetcher-keycheck-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(clients().await.dynamodb, &table);
    store.create_table().await.unwrap();
    let ring = |b64: &str, version: &str| KeyRing::from_base64(b64, version).unwrap();
    let a = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let b = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    store.verify_key_check(&ring(a, "1")).await.unwrap();
    store.verify_key_check(&ring(a, "1")).await.unwrap();
    let err = store.verify_key_check(&ring(b, "1")).await.unwrap_err();
    assert!(
        matches!(&err, fetcher_aws::dynamo::KeyCheckError::AnotherKey(v) if v == "1"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("sealed with another master key (version 1 differs)")
    );
    // A rotation: version 2 current, version 1 kept as the previous key.
    let versioned = |b64: &str, version: &str| {
        let key = fetcher_crypto::MasterKey::from_base64(b64).unwrap();
        fetcher_crypto::VersionedMasterKey::new(version, key).unwrap()
    };
    let rotated = KeyRing::new(fetcher_crypto::MasterKeys {
        current: versioned(b, "2"),
        previous: vec![versioned(a, "1")],
    })
    .unwrap();
    store.verify_key_check(&rotated).await.unwrap();
    // Version 2 is now recorded: another key for it is refused; version 1 retired is not.
    let err = store.verify_key_check(&ring(a, "2")).await.unwrap_err();
    assert!(err.to_string().contains("version 2 differs"), "{err}");
    store.verify_key_check(&ring(b, "2")).await.unwrap();
}
