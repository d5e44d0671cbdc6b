//! Extraction through the extract handler into (moto) S3: wall time and peak RSS.
//!
//! ```text
//! ./scripts/moto >/dev/null   # or AWS_ENDPOINT_URL=… for LocalStack
//! cargo run --release -p fetcher-e2e --bin bench-lambda-extract -- --rows 1000000
//! cargo run --release -p fetcher-e2e --bin bench-lambda-extract -- --rows 5000000
//! cargo run --release -p fetcher-e2e --bin bench-lambda-extract -- --rows 1000000 --partitions 2
//! cargo run --release -p fetcher-e2e --bin bench-lambda-extract -- --rows 1000000 --traces
//! ```
//!
//! `--traces` exports the handlers' spans as the deployed functions do with tracing on
//! (OTLP/HTTP to a loopback receiver in this process, flushed before the invocation's
//! answer, which the wall time includes), and prints what setting telemetry up cost the
//! cold start; without it, telemetry is set up with export off, as the default stack runs.
//!
//! Seeds `bench_accounts` (id, name, email, balance, created_at) with `--rows` rows in the
//! local PostgreSQL (database `fetcher_bench`), bootstraps the AWS resources, registers
//! the connection and submits the job through the `api` handler, takes the job message
//! from SQS and runs it through the `extract` handler (the same library code the Lambda
//! binary runs), in this process. Prints rows, stored bytes, wall time of the extraction
//! and the process's peak RSS (VmHWM), which stays flat as rows grow because results
//! stream through the sealing writer into an S3 multipart upload with bounded parts.

use std::time::{Duration, Instant};

use fetcher_aws::bootstrap::{Options, bootstrap};
use fetcher_aws::host::HostConfig;
use fetcher_aws::testing::{clients, config};
use fetcher_e2e::{create_database, psql};
use serde_json::{Value, json};

/// The value after `name` on the command line, or `default`.
fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

// As the extract bootstrap runs: one malloc arena, one worker thread per vCPU.
fn main() {
    fetcher_fn_extract::one_malloc_arena();
    let traces = std::env::args().any(|a| a == "--traces");
    // Kept for the whole run: the handlers export into it.
    let receiver = traces.then(fetcher_telemetry::testing::OtlpReceiver::start);
    if let Some(r) = &receiver {
        // SAFETY: no other thread runs yet (the runtime starts below).
        unsafe {
            std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint());
            std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
        }
    }
    let t = Instant::now();
    let exporting = fetcher_aws::host::init_telemetry("fetcher-extract").expect("telemetry");
    eprintln!(
        "telemetry set up in {:.2} ms (traces {})",
        t.elapsed().as_secs_f64() * 1000.0,
        if exporting { "exported" } else { "off" }
    );
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let rows: u64 = arg("--rows", 1_000_000);
    let partitions: usize = arg("--partitions", 1);
    let db = "fetcher_bench";
    create_database(db);
    let t = Instant::now();
    psql(
        db,
        &format!(
            "DROP TABLE IF EXISTS bench_accounts; CREATE TABLE bench_accounts (id bigint PRIMARY KEY, name text NOT NULL, email text NOT NULL, balance numeric(12,2) NOT NULL, created_at timestamptz NOT NULL); \
             INSERT INTO bench_accounts SELECT g, 'name-' || g, 'user' || g || '@example.com', (g % 100000) / 100.0, timestamptz '2024-01-01' + g * interval '1 second' FROM generate_series(1, {rows}) g;"
        ),
    );
    eprintln!("seeded {rows} rows in {:?}", t.elapsed());

    let c = clients().await;
    let prefix = format!("fetcher-bench-{}", std::process::id());
    let r = bootstrap(&c, &Options::new(&prefix))
        .await
        .expect("bootstrap");
    let sdk = config().await;
    // Results stream to S3 in constant memory: lift the reference's 256 MiB ceiling and
    // the 5-minute bound so the 5M-row run is limited by nothing but the data.
    let cfg = HostConfig {
        max_result_bytes: 0,
        read_partitions: partitions,
        extraction_timeout: Duration::from_secs(900),
        ..HostConfig::for_resources(&r)
    };
    let router = fetcher_fn_api::router_from_config(cfg.clone(), &sdk)
        .await
        .expect("api");
    let extractor = fetcher_fn_extract::from_config(cfg, &sdk).expect("extract");

    let call = |method: &str, path: &str, body: Value| {
        let req = fetcher_e2e::api_request(method, path, Some(&body), "bench");
        fetcher_fn_api::handle(router.clone(), req)
    };
    let res = call("POST", "/v1/management/connections", json!({"configName": "bench", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432, "databaseName": db, "userName": "postgres", "password": "x"})).await.unwrap();
    assert!(res.status().is_success(), "connection: {:?}", res.body());
    let res = call("POST", "/v1/fetcher", json!({"dataRequest": {"mappedFields": {"bench": {"bench_accounts": ["id", "name", "email", "balance", "created_at"]}}}, "metadata": {"source": "bench"}})).await.unwrap();
    assert_eq!(res.status().as_u16(), 202, "job: {:?}", res.body());

    let out = c
        .sqs
        .receive_message()
        .queue_url(&r.queue_url)
        .message_attribute_names("All")
        .wait_time_seconds(5)
        .send()
        .await
        .expect("receive");
    let m = out.messages().first().expect("job message").clone();
    let msg = fetcher_aws::sqs::queue_message_from_sdk(&m);
    let attrs: serde_json::Map<String, Value> = msg
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), json!({"stringValue": v, "dataType": "String"})))
        .collect();
    let event = json!({"Records": [{"messageId": m.message_id(), "receiptHandle": m.receipt_handle(),
        "body": String::from_utf8_lossy(&msg.body), "attributes": {}, "messageAttributes": attrs,
        "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:1:q", "awsRegion": "us-east-1"}]});
    let rss_before = vm_hwm_kib();
    let t = Instant::now();
    let answer = extractor.handle(event).await;
    // As the function does before its invocation returns.
    let flushing = Instant::now();
    fetcher_aws::host::flush_traces().await;
    let flush = flushing.elapsed();
    let wall = t.elapsed();
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let job: Value = {
        let body = String::from_utf8_lossy(&msg.body).into_owned();
        serde_json::from_str(&body).unwrap()
    };
    let stored = extractor
        .pipeline
        .jobs
        .get(
            "default",
            fetcher_host::model::JobId::parse(job["jobId"].as_str().unwrap()).unwrap(),
        )
        .await
        .unwrap()
        .expect("job");
    let result = stored
        .result
        .unwrap_or_else(|| panic!("job not completed: {:?}", stored.error));
    println!(
        "traces={} flush={:.1}ms partitions={partitions} rows={} plaintext_bytes={} stored_bytes={} wall={:.2}s rows_per_s={:.0} peak_rss_before_extract={} MiB peak_rss={} MiB",
        if fetcher_telemetry::exporting() {
            "on"
        } else {
            "off"
        },
        flush.as_secs_f64() * 1000.0,
        result.row_count,
        result.size_bytes,
        result.stored_bytes,
        wall.as_secs_f64(),
        result.row_count as f64 / wall.as_secs_f64(),
        rss_before / 1024,
        vm_hwm_kib() / 1024
    );
}
