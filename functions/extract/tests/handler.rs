//! The extract handler in-process, on Lambda SQS / scheduled-event JSON fixtures, over
//! the AWS adapters on moto. Jobs against real datasources are in `handler_jobs.rs`.

mod common;

use std::sync::Arc;

use common::*;
use fetcher_aws::host::HostConfig;
use fetcher_aws::testing::{config, resources};
use fetcher_fn_extract::from_config;
use fetcher_host::message::{encode, unix_now};
use fetcher_host::model::JobStatus;
use serde_json::json;

#[tokio::test]
async fn the_function_refuses_to_start_without_an_event_bus() {
    let mut cfg = host_config().await;
    cfg.event_bus = None;
    let err = from_config(cfg, &config().await).err().expect("refused");
    assert!(err.contains("FETCHER_EVENT_BUS"), "{err}");
    let err = HostConfig::from_lookup(|_| None).unwrap_err();
    assert!(err.contains("FETCHER_TABLE"), "{err}");
}

#[tokio::test]
async fn limits_come_from_the_environment_and_bad_values_are_refused() {
    let r = resources().await;
    let base = HostConfig::for_resources(&r);
    assert_eq!(
        base.max_result_bytes,
        64 << 30,
        "the streamed formats' default (v1 keeps 256 MiB)"
    );
    assert_eq!(base.extraction_timeout.as_secs(), 300);
    let with = |k: &'static str, v: &'static str| {
        let base = base.clone();
        HostConfig::from_lookup(move |name| {
            if name == k {
                return Some(v.to_owned());
            }
            match name {
                "FETCHER_TABLE" => Some(base.table.clone()),
                "FETCHER_BUCKET" => Some(base.bucket.clone()),
                "FETCHER_MASTER_KEY_SECRET" => Some(base.master_key_secret.clone()),
                _ => None,
            }
        })
    };
    assert_eq!(
        with("FETCHER_MAX_RESULT_BYTES", "0")
            .unwrap()
            .max_result_bytes,
        0
    );
    assert_eq!(
        with("FETCHER_EXTRACTION_TIMEOUT_SECS", "870")
            .unwrap()
            .extraction_timeout
            .as_secs(),
        870
    );
    for (k, v) in [
        ("FETCHER_MAX_RESULT_BYTES", "-1"),
        ("FETCHER_MAX_RESULT_BYTES", "1GB"),
        ("FETCHER_EXTRACTION_TIMEOUT_SECS", "soon"),
        // A private-network list can never admit metadata or loopback addresses.
        ("FETCHER_PRIVATE_NETWORKS", "169.254.169.254/32"),
        ("FETCHER_PRIVATE_NETWORKS", "10.0.0.0/16,127.0.0.0/8"),
        ("FETCHER_KEY_REFRESH_SECS", "0"),
    ] {
        let err = with(k, v).unwrap_err();
        assert!(err.contains(k), "{err}");
    }
    let vpc = with("FETCHER_PRIVATE_NETWORKS", "10.0.0.0/16").unwrap();
    assert!(vpc.private_networks.admits("10.0.3.4".parse().unwrap()));
    assert!(!vpc.private_networks.admits("10.1.3.4".parse().unwrap()));
    assert!(base.private_networks.is_empty(), "none by default");
    // The engine the function builds carries them.
    let cfg = HostConfig {
        max_result_bytes: 1024,
        ..base
    };
    let ex = from_config(cfg, &config().await).expect("extractor");
    assert_eq!(ex.pipeline.engine.limits().max_result_bytes, 1024);
}

#[tokio::test]
async fn a_permanent_failure_is_not_retried_and_a_redelivery_is_a_no_op() {
    let ex = extractor().await;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    // The job reads a connection that does not exist: a permanent failure.
    let job = new_job(&tenant, "missing-connection");
    ex.pipeline.jobs.insert(&job).await.unwrap();
    let msg = encode(&job, &signer(&ex).await, "req-1", unix_now());
    let event = sqs_event(&[("m-1", &msg)]);
    let out = ex.handle(event.clone()).await;
    assert_eq!(out, json!({"batchItemFailures": []}));
    let stored = stored_job(&ex, &tenant, job.id).await;
    assert_eq!(stored.status, JobStatus::Failed);
    assert_eq!(stored.pending_event, None, "the event was published");
    // The same delivery again: nothing happens, nothing is retried.
    let again = ex.handle(event).await;
    assert_eq!(again, json!({"batchItemFailures": []}));
    let after = stored_job(&ex, &tenant, job.id).await;
    assert_eq!(after, stored);
}

#[tokio::test]
async fn an_invalid_signature_is_dropped_and_touches_no_job() {
    let ex = extractor().await;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    let job = new_job(&tenant, "pg");
    ex.pipeline.jobs.insert(&job).await.unwrap();
    let mut msg = encode(&job, &signer(&ex).await, "req-2", unix_now());
    msg.headers
        .insert("x-message-signature".into(), "00".repeat(32));
    let out = ex.handle(sqs_event(&[("m-2", &msg)])).await;
    assert_eq!(
        out,
        json!({"batchItemFailures": []}),
        "deleted, not retried"
    );
    let stored = stored_job(&ex, &tenant, job.id).await;
    assert_eq!(stored, job, "a forged message fails no job");
}

#[tokio::test]
async fn an_expired_genuine_message_is_dropped_and_its_job_sent_again_by_the_repair_pass() {
    let ex = extractor().await;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    // Created, and its message signed, seven hours ago: it waited in a backlog past the
    // maximum message age (6 hours by default).
    let job = aged_job(&tenant, 7 * 3600);
    ex.pipeline.jobs.insert(&job).await.unwrap();
    let old = encode(&job, &signer(&ex).await, "req-6", unix_now() - 7 * 3600);
    let out = ex.handle(sqs_event(&[("m-6", &old)])).await;
    assert_eq!(
        out,
        json!({"batchItemFailures": []}),
        "deleted, not retried"
    );
    let stored = stored_job(&ex, &tenant, job.id).await;
    assert_eq!(stored.status, JobStatus::Pending, "not failed");
    assert!(
        stored.message_dropped_at.is_some(),
        "marked for the repair pass"
    );
    let out = ex.handle(json!({"action": "repair"})).await;
    assert!(out["requeued"].as_u64().unwrap() >= 1, "{out}");
    assert_on_queue(&resources().await.queue_url, &job.id.to_string()).await;
    let after = stored_job(&ex, &tenant, job.id).await;
    assert_eq!(after.message_dropped_at, None, "the re-enqueue is recorded");
}

/// Waits (20 s at most) for a message of job `id` on the queue.
async fn assert_on_queue(queue_url: &str, id: &str) {
    let sqs = fetcher_aws::testing::clients().await.sqs;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        if got.messages().iter().any(|m| format!("{m:?}").contains(id)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} was not re-enqueued"
        );
    }
}

#[tokio::test]
async fn retryable_errors_are_reported_per_message() {
    // A store that cannot be reached: every message must come back, and only those.
    let mut cfg = host_config().await;
    cfg.table = "no-such-table".into();
    let broken = from_config(cfg, &config().await).unwrap();
    let ok = extractor().await;
    let job = new_job("acme", "pg");
    let msg = encode(&job, &signer(&ok).await, "req-3", unix_now());
    let out = broken
        .handle(sqs_event(&[("m-3", &msg), ("m-4", &msg)]))
        .await;
    assert_eq!(
        out,
        json!({"batchItemFailures": [{"itemIdentifier": "m-3"}, {"itemIdentifier": "m-4"}]})
    );
}

#[tokio::test]
async fn a_scheduled_event_runs_the_repair_pass() {
    let ex = Arc::new(extractor().await);
    let fixture = json!({
        "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/fetcher-repair"], "detail": {}
    });
    let out = ex.handle(fixture).await;
    assert!(out["republished"].is_u64(), "{out}");
    assert!(fetcher_fn_extract::is_repair(&json!({"action": "repair"})));
    assert_eq!(ex.handle(json!({"unrelated": true})).await, json!({}));
}

#[tokio::test]
async fn the_repair_pass_requeues_stranded_jobs() {
    let ex = extractor().await;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    // Inserted seven hours ago, its message gone: longer ago than the queue keeps any
    // (the maximum message age, 6 hours by default).
    let job = aged_job(&tenant, 7 * 3600);
    ex.pipeline.jobs.insert(&job).await.unwrap();
    let out = ex.handle(json!({"action": "repair"})).await;
    assert!(out["requeued"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(out["failures"], 0, "{out}");
    assert_on_queue(&resources().await.queue_url, &job.id.to_string()).await;
}

#[tokio::test]
async fn a_backlog_of_100_pending_jobs_is_left_alone_by_the_repair_pass() {
    // Resources of its own: the pass looks at the oldest pending jobs of the whole table.
    let c = fetcher_aws::testing::clients().await;
    let prefix = format!("fetcher-t{}-backlog", std::process::id());
    let r = fetcher_aws::bootstrap::bootstrap(&c, &fetcher_aws::bootstrap::Options::new(prefix))
        .await
        .unwrap();
    let ex = from_config(HostConfig::for_resources(&r), &config().await).unwrap();
    let signer = signer(&ex).await;
    // Pending for 20 minutes to an hour (the old rule called such jobs lost after 15),
    // their messages waiting in the queue: a backlog, not a loss.
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    for i in 0..100i128 {
        let job = aged_job(&tenant, 20 * 60 + i * 24);
        ex.pipeline.jobs.insert(&job).await.unwrap();
        let msg = encode(&job, &signer, "", unix_now());
        fetcher_host::ports::JobQueue::enqueue(&ex.queue, msg)
            .await
            .unwrap();
    }
    for _ in 0..3 {
        let out = ex.handle(json!({"action": "repair"})).await;
        assert_eq!(out["requeued"], 0, "no duplicate enqueued: {out}");
        assert_eq!(out["failures"], 0, "{out}");
    }
    let depth = fetcher_host::ports::JobQueue::depth(&ex.queue)
        .await
        .unwrap();
    assert_eq!(
        depth,
        Some(100),
        "the queue holds the 100 messages, nothing more"
    );
}

#[tokio::test]
async fn a_retried_message_backs_off_instead_of_waiting_out_the_visibility_timeout() {
    assert_eq!(
        fetcher_fn_extract::retry_delay(std::time::Duration::from_secs(30), 1).as_secs(),
        30
    );
    assert_eq!(
        fetcher_fn_extract::retry_delay(std::time::Duration::from_secs(30), 3).as_secs(),
        120
    );
    assert_eq!(
        fetcher_fn_extract::retry_delay(std::time::Duration::from_secs(30), 40).as_secs(),
        900
    );
    // A queue of its own with a long visibility timeout, like the deployed one.
    let sqs = fetcher_aws::testing::clients().await.sqs;
    let name = format!("fetcher-backoff-{}", std::process::id());
    let queue_url = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "120",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let mut cfg = host_config().await;
    cfg.table = "no-such-table".into(); // every job fails retryably
    cfg.queue_url = Some(queue_url.clone());
    cfg.retry_backoff = std::time::Duration::from_secs(1);
    let broken = from_config(cfg, &config().await).unwrap();
    let ok = extractor().await;
    let msg = encode(
        &new_job("acme", "pg"),
        &signer(&ok).await,
        "req-5",
        unix_now(),
    );
    fetcher_host::ports::JobQueue::enqueue(&broken.queue, msg.clone())
        .await
        .unwrap();
    let receive = || {
        sqs.receive_message()
            .queue_url(&queue_url)
            .message_attribute_names("All")
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
            )
            .wait_time_seconds(1)
            .send()
    };
    let got = receive().await.unwrap();
    let m = &got.messages()[0];
    let mut event = sqs_event(&[("m-5", &msg)]);
    event["Records"][0]["receiptHandle"] = json!(m.receipt_handle().unwrap());
    let out = broken.handle(event).await;
    assert_eq!(
        out,
        json!({"batchItemFailures": [{"itemIdentifier": "m-5"}]})
    );
    // Back within seconds, not the queue's 120 s.
    let started = std::time::Instant::now();
    loop {
        if !receive().await.unwrap().messages().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "the message did not come back early"
        );
    }
    let _ = sqs.delete_queue().queue_url(&queue_url).send().await;
}

#[tokio::test]
async fn a_reencryption_pass_moves_stored_credentials_to_the_current_key() {
    use fetcher_engine::ports::ConnectionStore as _;
    let r = resources().await;
    let c = fetcher_aws::testing::clients().await;
    // A master key secret of its own: rotating it touches no other test.
    let mut copy = r.clone();
    copy.secret_id = format!("{}-reencrypt", r.secret_id);
    let blob = fetcher_aws::bootstrap::new_encrypted_master_key(&c, &r.kms_key_id)
        .await
        .unwrap();
    c.secrets
        .create_secret()
        .name(&copy.secret_id)
        .secret_string(blob)
        .send()
        .await
        .unwrap();
    let mut cfg = host_config().await;
    cfg.master_key_secret = copy.secret_id.clone();
    let ex = from_config(cfg, &config().await).unwrap();
    let tenant =
        fetcher_engine::TenantContext::new(&format!("t{}", uuid::Uuid::new_v4().simple())).unwrap();
    let ctx = fetcher_engine::Context::background();
    let input = fetcher_engine::ConnectionInput {
        config_name: "rotated-db".into(),
        datasource_type: fetcher_engine::DatasourceType::Postgresql,
        host: "db.example.com".into(),
        port: 5432,
        database_name: "d".into(),
        username: "u".into(),
        password: fetcher_engine::Secret::from(b"the-password".to_vec()),
        ..Default::default()
    };
    ex.pipeline
        .engine
        .create_connection(&ctx, &tenant, &input)
        .await
        .unwrap();
    let before = ex
        .store
        .credential(&ctx, &tenant, "rotated-db")
        .await
        .unwrap()
        .unwrap();
    let v2 = fetcher_aws::bootstrap::rotate_master_key(&c, &copy)
        .await
        .unwrap();
    assert_ne!(before.key_version, v2);
    let out = ex.handle(json!({"action": "reencrypt"})).await;
    assert!(out["reencrypted"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(out["keyVersion"], v2.as_str());
    let after = ex
        .store
        .credential(&ctx, &tenant, "rotated-db")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.key_version, v2, "now under the current key");
    // Still the same password, read under the new version.
    let ring = fetcher_crypto::KeyRing::load(&ex.key_source).await.unwrap();
    let plain = fetcher_crypto::CredentialCipher::new(ring)
        .reveal(
            std::str::from_utf8(&after.ciphertext).unwrap(),
            &after.key_version,
        )
        .unwrap();
    assert_eq!(plain.as_str(), "the-password");
}
