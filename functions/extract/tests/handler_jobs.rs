//! The extract handler running jobs against real datasources, over the AWS adapters on
//! moto (or LocalStack's lane): each tenant's share of the invocations (#52), a MongoDB
//! collection read to a sealed result (#41), and a sync read from the PostgreSQL log
//! (#42). The other handler tests are in `handler.rs`.

mod common;

use std::sync::Arc;

use common::*;
use fetcher_aws::testing::config;
use fetcher_fn_extract::from_config;
use fetcher_host::message::{encode, unix_now};
use fetcher_host::model::{Job, JobRequest, JobStatus};
use serde_json::{Value, json};

/// #52 item 1 on Lambda: a tenant whose jobs fill its share of the invocations (here 1;
/// its read waits on a lock another session holds, as a slow policy or a locked table
/// would) has its next message sent back for later, not run; another tenant's small job
/// runs at once. The deferred message arrives again after the delay and then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_at_its_share_waits_while_another_tenants_job_runs() {
    let sqs = fetcher_aws::testing::clients().await.sqs;
    let queue_url = sqs
        .create_queue()
        .queue_name(format!("fetcher-share-{}", uuid::Uuid::new_v4().simple()))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let mut cfg = host_config().await;
    cfg.queue_url = Some(queue_url.clone());
    cfg.max_jobs_per_tenant = 1;
    cfg.tenant_defer = std::time::Duration::from_secs(2);
    let ex = Arc::new(from_config(cfg, &config().await).unwrap());

    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (held, free) = (
        format!("share_held_{suffix}"),
        format!("share_free_{suffix}"),
    );
    psql(&format!(
        "create table {held} (id int primary key); insert into {held} values (1), (2), (3);
         create table {free} (id int primary key); insert into {free} values (1);"
    ));
    // Another session holds the table for 6 s: a read of it waits that long.
    let mut locker = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c"])
        .arg(format!(
            "begin; lock table {held} in access exclusive mode; select pg_sleep(6); commit;"
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let granted = format!(
        "select count(*) from pg_locks l join pg_class c on c.oid = l.relation \
         where c.relname = '{held}' and l.mode = 'AccessExclusiveLock' and l.granted"
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while psql(&granted) != "1" {
        assert!(
            std::time::Instant::now() < until,
            "the lock was never taken"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let (busy, quiet) = (
        format!("t{}", uuid::Uuid::new_v4().simple()),
        format!("t{}", uuid::Uuid::new_v4().simple()),
    );
    local_connection(&ex, &busy, "held-db").await;
    local_connection(&ex, &quiet, "free-db").await;
    let (first, second, small) = (
        job_reading(&busy, "held-db", &held),
        job_reading(&busy, "held-db", &held),
        job_reading(&quiet, "free-db", &free),
    );
    let signer = signer(&ex).await;
    let mut messages = Vec::new();
    for job in [&first, &second, &small] {
        ex.pipeline.jobs.insert(job).await.unwrap();
        messages.push(encode(job, &signer, "req-share", unix_now()));
    }

    // The busy tenant's first job takes its one slot and waits on the lock.
    let running = tokio::spawn({
        let (ex, event) = (ex.clone(), sqs_event(&[("share-1", &messages[0])]));
        async move { ex.handle(event).await }
    });
    wait_for(&ex, &busy, first.id, |j| j.status == JobStatus::Processing).await;

    // Its second job is sent back for later at once: no invocation waits for it.
    let t = std::time::Instant::now();
    let out = ex.handle(sqs_event(&[("share-2", &messages[1])])).await;
    assert_eq!(
        out,
        json!({"batchItemFailures": []}),
        "deferred, not retried"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        stored_job(&ex, &busy, second.id).await.status,
        JobStatus::Pending
    );

    // The quiet tenant's job runs to its end while the busy one still waits.
    let t = std::time::Instant::now();
    let out = ex.handle(sqs_event(&[("share-3", &messages[2])])).await;
    let waited = t.elapsed();
    assert_eq!(out, json!({"batchItemFailures": []}));
    assert_eq!(
        stored_job(&ex, &quiet, small.id).await.status,
        JobStatus::Completed
    );
    assert!(
        waited < std::time::Duration::from_secs(3),
        "the small job took {waited:?}"
    );
    assert!(
        !running.is_finished(),
        "the busy tenant's first job still holds its slot"
    );
    eprintln!("the other tenant's small job completed in {waited:?}");

    // The deferred message comes back after its delay, unchanged.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let again = loop {
        let got = sqs
            .receive_message()
            .queue_url(&queue_url)
            .message_attribute_names("All")
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        if let Some(m) = got.messages().first() {
            break m.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the deferred message never came back"
        );
    };
    assert_eq!(
        again.body(),
        Some(String::from_utf8_lossy(&messages[1].body).as_ref())
    );

    // The lock ends, the first job completes and frees the slot; the second then runs.
    assert!(locker.wait().unwrap().success());
    let out = running.await.unwrap();
    assert_eq!(out, json!({"batchItemFailures": []}));
    assert_eq!(
        stored_job(&ex, &busy, first.id).await.status,
        JobStatus::Completed
    );
    let out = ex.handle(sqs_event(&[("share-2b", &messages[1])])).await;
    assert_eq!(out, json!({"batchItemFailures": []}));
    assert_eq!(
        stored_job(&ex, &busy, second.id).await.status,
        JobStatus::Completed
    );

    psql(&format!("drop table {held}; drop table {free};"));
    let _ = sqs.delete_queue().queue_url(&queue_url).send().await;
}

/// #41 on Lambda: a MongoDB collection read by the extract function, its sealed result in
/// the bucket holding every document in `_id` order (SecantusDB's server on
/// `MONGO_PORT`, started by `./scripts/test-aws`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mongodb_collection_is_read_in_id_order() {
    use mongodb::bson::{Document, doc};
    let port: u16 = std::env::var("MONGO_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(27117);
    let client =
        mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{port}/?directConnection=true"))
            .await
            .unwrap();
    let database = format!("lambda_{}", uuid::Uuid::new_v4().simple());
    let db = client.database(&database);
    let docs: Vec<Document> = (0..2500i64)
        .rev()
        .map(|i| doc! {"_id": i, "n": i * 2, "who": {"name": format!("c{}", i % 5)}})
        .collect();
    db.collection::<Document>("events")
        .insert_many(docs)
        .await
        .unwrap();

    let ex = extractor().await;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    create_connection(
        &ex,
        &tenant,
        fetcher_engine::ConnectionInput {
            config_name: "docs".into(),
            datasource_type: fetcher_engine::DatasourceType::MongoDb,
            host: "127.0.0.1".into(),
            port,
            database_name: database.clone(),
            ..Default::default()
        },
    )
    .await;
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        "docs".into(),
        [(
            "events".to_owned(),
            vec!["_id".to_owned(), "n".to_owned(), "who.name".to_owned()],
        )]
        .into(),
    );
    let job = Job::new(&tenant, req, uuid::Uuid::now_v7().to_string());
    ex.pipeline.jobs.insert(&job).await.unwrap();
    let msg = encode(&job, &signer(&ex).await, "req-mongo", unix_now());
    let out = ex.handle(sqs_event(&[("mongo-1", &msg)])).await;
    assert_eq!(out, json!({"batchItemFailures": []}));
    let done = stored_job(&ex, &tenant, job.id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);
    let result = done.result.expect("a result");
    assert_eq!(result.row_count, 2500);

    // The sealed object, opened: every document once, in `_id` order.
    let rows = sealed_rows(&ex, job.id, &result).await;
    let ids: Vec<i64> = rows.iter().map(|r| r["_id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (0..2500).collect::<Vec<_>>());
    assert_eq!(rows[7], json!({"_id": 7, "n": 14, "who.name": "c2"}));
    db.drop().await.ok();
}

/// The rows of a completed job's sealed NDJSON object, opened with the store's keys.
async fn sealed_rows(
    ex: &fetcher_fn_extract::Extractor,
    job: fetcher_host::model::JobId,
    result: &fetcher_host::model::JobResult,
) -> Vec<Value> {
    let mut reader = ex
        .pipeline
        .objects
        .get(&result.path)
        .await
        .unwrap()
        .expect("stored");
    let mut sealed = Vec::new();
    while let Some(chunk) = reader.next_chunk().await.unwrap() {
        sealed.extend(chunk);
    }
    let ring = ex.pipeline.keys.key_ring().await.unwrap();
    let plain =
        fetcher_crypto::open_sealed(&ring, &sealed, Some(&job.to_string()), Some(&result.hmac))
            .unwrap();
    std::str::from_utf8(&plain)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["row"].clone())
        .collect()
}

/// #42 on Lambda: a sync read from the PostgreSQL log by the extract function, its
/// position kept in DynamoDB: the first job a snapshot, the next exactly the changes
/// since, deletes included, in commit order; a job with nothing new reads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_sync_delivers_a_snapshot_then_each_change_once() {
    let port: u16 = std::env::var("PG_LOGICAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(55432);
    let started = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/pg-logical"
    ))
    .arg("start")
    .env("PG_LOGICAL_PORT", port.to_string())
    .output()
    .expect("scripts/pg-logical");
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let database = format!("lambda_log_{}", uuid::Uuid::new_v4().simple());
    psql_at(port, "postgres", &format!("CREATE DATABASE {database}"));
    psql_at(
        port,
        &database,
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); \
         INSERT INTO orders VALUES (1, 'new'), (2, 'new'), (3, 'new');",
    );

    let ex = extractor().await;
    let tenant = format!("t{}", uuid::Uuid::new_v4().simple());
    create_connection(
        &ex,
        &tenant,
        fetcher_engine::ConnectionInput {
            config_name: "ledger".into(),
            datasource_type: fetcher_engine::DatasourceType::Postgresql,
            host: "127.0.0.1".into(),
            port,
            database_name: database.clone(),
            username: "postgres".into(),
            password: fetcher_engine::Secret::from(b"trust-auth-ignores-it".to_vec()),
            ..Default::default()
        },
    )
    .await;
    let run = |n: u32| {
        let ex = &ex;
        let tenant = tenant.clone();
        async move {
            let mut req: JobRequest = serde_json::from_value(json!({
                "mappedFields": {"ledger": {"orders": ["id", "status"]}},
                "incremental": {"ledger": {"orders": {"mode": "log", "key": ["id"]}}},
                "syncId": "orders-log",
                "resultFormat": "v2",
            }))
            .unwrap();
            req.metadata.insert("run".into(), n.into());
            let job = Job::new(&tenant, req, uuid::Uuid::now_v7().to_string());
            ex.pipeline.jobs.insert(&job).await.unwrap();
            let msg = encode(&job, &signer(ex).await, "req-log", unix_now());
            let out = ex.handle(sqs_event(&[("log-1", &msg)])).await;
            assert_eq!(out, json!({"batchItemFailures": []}));
            let done = stored_job(ex, &tenant, job.id).await;
            assert_eq!(done.status, JobStatus::Completed, "{:?}", done.error);
            let rows = sealed_rows(ex, job.id, done.result.as_ref().unwrap()).await;
            rows.iter()
                .map(|r| {
                    (
                        r["_fetcher_op"].as_str().unwrap().to_owned(),
                        r["id"].as_i64().unwrap(),
                        r["status"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let snapshot = run(1).await;
    assert_eq!(snapshot.len(), 3);
    assert!(
        snapshot.iter().all(|(op, _, _)| op == "snapshot"),
        "{snapshot:?}"
    );
    psql_at(
        port,
        &database,
        "INSERT INTO orders VALUES (4, 'new'); UPDATE orders SET status = 'paid' WHERE id = 1; \
         DELETE FROM orders WHERE id = 2;",
    );
    let changes = run(2).await;
    let ops: Vec<(&str, i64)> = changes
        .iter()
        .map(|(op, id, _)| (op.as_str(), *id))
        .collect();
    assert_eq!(ops, [("insert", 4), ("update", 1), ("delete", 2)]);
    assert_eq!(changes[1].2, "paid");
    assert!(run(3).await.is_empty(), "nothing new, nothing read");
    let sync = ex
        .pipeline
        .jobs
        .sync(&tenant, "orders-log")
        .await
        .unwrap()
        .expect("the sync");
    assert!(sync.tables["ledger"]["orders"].watermark.log.is_some());
    psql_at(
        port,
        "postgres",
        &format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{database}'"
        ),
    );
    psql_at(
        port,
        "postgres",
        &format!("DROP DATABASE {database} WITH (FORCE)"),
    );
}
