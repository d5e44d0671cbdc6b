//! End to end on the real handler binaries: HTTP to the `api` function, the harness
//! polls SQS and invokes the `extract` function with a real SQS event, results land in
//! (moto) S3, events travel through the EventBridge rule to a subscriber queue. Both
//! functions export their traces to a loopback OTLP receiver: the happy path's job is one
//! trace across the two processes, SQS and EventBridge.

use std::sync::Arc;
use std::time::Duration;

use fetcher_aws::bootstrap::{Options, bootstrap};
use fetcher_aws::testing::clients;
use fetcher_aws::{S3ObjectStore, SecretsManagerKeySource};
use fetcher_crypto::{KeyRing, Opener};
use fetcher_e2e::*;
use fetcher_host::ports::{ObjectStore, read_all};
use serde_json::{Value, json};

const DB: &str = "fetcher_e2e";

/// The caller's trace that the happy path's job continues.
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

fn create_job(w: &Watch, config: &str, table: &str, source: &str) -> String {
    create_job_with(w, config, table, source, &[])
}

fn create_job_with(
    w: &Watch,
    config: &str,
    table: &str,
    source: &str,
    headers: &[(&str, &str)],
) -> String {
    // The forged-message case selects other fields, so it is not a duplicate request.
    let fields: &[&str] = if source == "e2e-forged" {
        &["id"]
    } else {
        &["id", "name"]
    };
    let (status, v) = w.api_with(
        "POST",
        "/v1/fetcher",
        Some(&json!({"dataRequest": {"mappedFields": {config: {table: fields}}}, "metadata": {"source": "e2e", "case": source}})),
        headers,
    );
    assert_eq!(status, 202, "create job: {v}");
    v["jobId"].as_str().expect("jobId").to_owned()
}

fn create_connection(w: &Watch, name: &str, port: u16) {
    let (status, v) = w.api(
        "POST",
        "/v1/management/connections",
        Some(&json!({
            "configName": name, "type": "POSTGRESQL", "host": "127.0.0.1", "port": port,
            "databaseName": DB, "userName": "postgres", "password": "e2e-secret-password"
        })),
    );
    assert!(
        status == 201 || status == 409,
        "create connection {name}: {status} {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_end_to_end_on_the_lambda_binaries() {
    seed_postgres(DB, &[(1, "ada"), (2, "grace"), (3, "edsger")]);
    let c = clients().await;
    let prefix = format!("fetcher-e2e-{}", std::process::id());
    let r = bootstrap(&c, &Options::new(&prefix))
        .await
        .expect("bootstrap");
    let queue_arn = format!("arn:aws:sqs:us-east-1:123456789012:{prefix}-jobs");
    let traces = fetcher_telemetry::testing::OtlpReceiver::start();
    let endpoint = traces.endpoint();
    let env = Watch::function_env(
        &r,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    let logs = log_dir();
    let w = Watch::start(&env, &logs.join("watch.log"));
    eprintln!(
        "e2e: cargo lambda watch on port {} (log {})",
        w.port,
        logs.display()
    );

    let (status, _) = w.api("GET", "/health", None);
    assert_eq!(status, 200, "health");
    // `cargo lambda watch` builds a function on its first invocation and counts the
    // build against that invocation's deadline, which a deployed Lambda never does: warm
    // `extract` up with the scheduled repair pass (no jobs exist yet, nothing to do), so
    // the jobs below run with their whole budget.
    let warm = w.invoke(
        "extract",
        &json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
    );
    assert_eq!(warm["republished"], 0, "{warm}");
    create_connection(&w, "pg-main", 5432);
    // Up while the job is submitted (the API tests it), gone when the job runs.
    let forwarder = Forwarder::start(5432);
    create_connection(&w, "pg-down", forwarder.port);
    let down_job = create_job(&w, "pg-down", "accounts", "e2e-down");
    drop(forwarder);
    // Before any job has run, no schema is cached: a bad table is queued and fails in
    // the worker (below); afterwards the same mapping is refused at creation.
    let bad_table_job = create_job(&w, "pg-main", "no_such_table", "e2e-bad-table");

    // --- The happy path -----------------------------------------------------------------
    let caller = format!("00-{CALLER_TRACE}-b7ad6b7169203331-01");
    let job = create_job_with(
        &w,
        "pg-main",
        "accounts",
        "e2e-ok",
        &[("traceparent", &caller)],
    );
    let msg = job_message(&c, &r, &job).await;
    let event = sqs_event(&msg, &queue_arn);
    let answer = w.invoke("extract", &event);
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let (status, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
    assert_eq!(status, 200);
    assert_eq!(v["status"], "completed", "{v}");
    let path = v["result"]["path"]
        .as_str()
        .or_else(|| v["resultPath"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("external-data/{job}.ndjson.v2"));

    // The stored object opens with the key ring and holds exactly the rows.
    let keys = SecretsManagerKeySource::new(c.secrets.clone(), c.kms.clone(), &r.secret_id);
    let ring = Arc::new(KeyRing::load(&keys).await.expect("key ring"));
    let objects = S3ObjectStore::new(c.s3.clone(), &r.bucket);
    let sealed = read_all(&objects, &path)
        .await
        .unwrap()
        .expect("result object");
    let mut opener = Opener::new_any_job(&ring);
    let mut plain = Vec::new();
    opener.update_into(&sealed, &mut plain).expect("open");
    opener.finish().expect("authentic");
    let text = String::from_utf8(plain).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("NDJSON line"))
        .collect();
    eprintln!("e2e: result rows {rows:?}");
    let names: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let obj = row.get("row").or_else(|| row.get("data")).unwrap_or(row);
            obj.get("name").and_then(Value::as_str).map(str::to_owned)
        })
        .collect();
    assert_eq!(
        names,
        ["ada", "grace", "edsger"],
        "rows in primary-key order: {text}"
    );

    // job.completed arrived through the EventBridge rule.
    let events = events_for(&c, &r, &job, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 1, "one job.completed: {events:?}");
    let e = &events[0];
    assert_eq!(e["detail-type"], "job.completed");
    assert_eq!(e["source"], r.event_source.as_str());
    let d = &e["detail"];
    assert_eq!(d["eventId"], format!("fetcher.job.completed.{job}"));
    assert_eq!(d["status"], "completed");
    assert_eq!(d["metadata"]["source"], "e2e");
    assert_eq!(d["metadata"]["case"], "e2e-ok");
    assert_eq!(d["result"]["path"], path.as_str());
    assert_eq!(d["result"]["rowCount"], 3);
    assert_eq!(d["result"]["integrity"]["algorithm"], "HMAC-SHA256");
    assert!(d["completedAt"].is_string() && d["result"]["hmac"].is_string());

    // One trace across both functions, SQS and EventBridge: the event names the caller's
    // trace; the `api` function's request span continues the caller, and the `extract`
    // function's job span continues that request (its context came in the signed SQS
    // message). Each function exported its spans before its invocation returned.
    let traceparent = d["traceparent"]
        .as_str()
        .expect("the event names the trace");
    assert_eq!(&traceparent[3..35], CALLER_TRACE, "{d}");
    let spans: Vec<Value> = traces
        .spans()
        .into_iter()
        .filter(|s| s["traceId"] == CALLER_TRACE)
        .collect();
    let service = |s: &Value| {
        fetcher_telemetry::testing::attribute(&s["resource"], "service.name")
            .and_then(|v| v["stringValue"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span in the trace: {spans:?}"))
    };
    let request = find("POST /v1/fetcher");
    assert_eq!(request["parentSpanId"], "b7ad6b7169203331");
    assert_eq!(service(request), "fetcher-api");
    let run = find("job");
    assert_eq!(service(run), "fetcher-extract");
    assert_eq!(
        run["parentSpanId"], request["spanId"],
        "the worker continues the request"
    );
    for name in ["enqueue", "claim", "extract", "complete", "publish"] {
        find(name);
    }
    assert!(
        !traces.raw().contains("e2e-secret-password"),
        "the password reached a span"
    );

    // A duplicated delivery: no second result, no second event.
    let size_before = objects.head(&path).await.unwrap();
    let again = w.invoke("extract", &event);
    assert_eq!(again["batchItemFailures"], json!([]), "{again}");
    assert_eq!(objects.head(&path).await.unwrap(), size_before);
    assert!(
        events_for(&c, &r, &job, Duration::from_secs(4))
            .await
            .is_empty(),
        "no second event"
    );

    // --- A Parquet job: one sealed file per table and a sealed manifest, in S3 ----------
    let (status, v) = w.api(
        "POST",
        "/v1/fetcher",
        Some(
            &json!({"dataRequest": {"mappedFields": {"pg-main": {"accounts": ["id", "name"]}}},
                     "metadata": {"source": "e2e", "case": "parquet"}, "resultFormat": "parquet"}),
        ),
    );
    assert_eq!(status, 202, "{v}");
    let pq_job = v["jobId"].as_str().unwrap().to_owned();
    let msg = job_message(&c, &r, &pq_job).await;
    let answer = w.invoke("extract", &sqs_event(&msg, &queue_arn));
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let (_, v) = w.api("GET", &format!("/v1/fetcher/{pq_job}"), None);
    assert_eq!(
        (v["status"].as_str(), v["resultFormat"].as_str()),
        (Some("completed"), Some("parquet")),
        "{v}"
    );
    let manifest_path = v["resultPath"].as_str().unwrap().to_owned();
    assert_eq!(
        manifest_path,
        format!("external-data/{pq_job}.manifest.json.v2")
    );
    let sealed = read_all(&objects, &manifest_path)
        .await
        .unwrap()
        .expect("manifest");
    let mut opener = Opener::new(&ring, &pq_job).expect_hmac(v["resultHmac"].as_str().unwrap());
    let mut manifest = Vec::new();
    opener
        .update_into(&sealed, &mut manifest)
        .expect("open manifest");
    opener.finish().expect("authentic manifest");
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(
        manifest["parts"], v["resultParts"],
        "the job lists the manifest's parts"
    );
    let part = &manifest["parts"][0];
    assert_eq!(
        (part["table"].as_str(), part["rowCount"].as_i64()),
        (Some("accounts"), Some(3))
    );
    let sealed = read_all(&objects, part["path"].as_str().unwrap())
        .await
        .unwrap()
        .expect("part");
    let mut opener = Opener::new(&ring, &pq_job).expect_hmac(part["hmac"].as_str().unwrap());
    let mut file = Vec::new();
    opener.update_into(&sealed, &mut file).expect("open part");
    opener.finish().expect("authentic part");
    let parquet_file = logs.join(format!("{pq_job}.parquet"));
    std::fs::write(&parquet_file, &file).unwrap();
    let python = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let read = std::process::Command::new(&python)
        .arg("-c")
        .arg("import sys, hashlib, json, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); \
              print(json.dumps({'names': t.column('name').to_pylist(), 'id': str(t.schema.field('id').type), \
              'sha256': hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest()}))")
        .arg(&parquet_file)
        .output()
        .expect("pyarrow (./scripts/test installs it in .venv)");
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let read: Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(read["names"], json!(["ada", "grace", "edsger"]));
    assert_eq!(read["id"], "int64");
    assert_eq!(read["sha256"], part["sha256"]);
    let events = events_for(&c, &r, &pq_job, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["detail"]["result"]["format"], "parquet");
    assert_eq!(events[0]["detail"]["result"]["parts"], manifest["parts"]);

    // The happy path's planning cached pg-main's schema (in DynamoDB): a mapping it
    // refutes is now a 422 at creation, nothing queued.
    let (status, v) = w.api(
        "POST",
        "/v1/fetcher",
        Some(&json!({"dataRequest": {"mappedFields": {"pg-main": {"no_such_table": ["id"]}}}, "metadata": {"source": "e2e", "case": "cached"}})),
    );
    assert_eq!(status, 422, "cached schema refutes the mapping: {v}");
    assert_eq!(v["errors"][0]["type"], "TABLE_NOT_FOUND", "{v}");

    // --- Failure paths: bad table, unreachable datasource --------------------------------
    for (config, source) in [("pg-main", "e2e-bad-table"), ("pg-down", "e2e-down")] {
        let job = if config == "pg-down" {
            down_job.clone()
        } else {
            bad_table_job.clone()
        };
        let msg = job_message(&c, &r, &job).await;
        // An unreachable datasource is retryable: the message comes back (as SQS would
        // redeliver it) until the pipeline's attempt limit fails the job for good.
        let event = sqs_event(&msg, &queue_arn);
        let mut deliveries = 1;
        let mut answer = w.invoke("extract", &event);
        while answer["batchItemFailures"] != json!([]) && deliveries < 5 {
            deliveries += 1;
            answer = w.invoke("extract", &event);
        }
        assert_eq!(answer["batchItemFailures"], json!([]), "{source}: {answer}");
        eprintln!("e2e: {source}: terminal after {deliveries} deliveries");
        let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
        assert_eq!(v["status"], "failed", "{source}: {v}");
        let events = events_for(&c, &r, &job, Duration::from_secs(20)).await;
        assert_eq!(events.len(), 1, "{source}: one job.failed: {events:?}");
        let d = &events[0]["detail"];
        assert_eq!(events[0]["detail-type"], "job.failed");
        assert_eq!(d["eventId"], format!("fetcher.job.failed.{job}"));
        let message = d["metadata"]["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(!message.is_empty(), "{source}: an error message");
        for secret in ["e2e-secret-password", "postgres://", "password"] {
            assert!(
                !message.contains(secret),
                "{source}: unsanitised error {message:?}"
            );
        }
        eprintln!("e2e: {source}: {message}");
    }

    // --- A forged message for an existing job: dropped, not retried, the job untouched;
    // its genuine message then completes it -------------------------------------------
    let job = create_job(&w, "pg-main", "accounts", "e2e-forged");
    let genuine = job_message(&c, &r, &job).await;
    let mut forged = genuine.clone();
    forged
        .attributes
        .insert("x-message-signature".into(), "00".repeat(32));
    let answer = w.invoke("extract", &sqs_event(&forged, &queue_arn));
    assert_eq!(
        answer["batchItemFailures"],
        json!([]),
        "not retried: {answer}"
    );
    let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
    assert_eq!(v["status"], "pending", "a forged message fails no job: {v}");
    assert!(
        receive(&c, &r.queue_url, Duration::from_secs(2))
            .await
            .is_empty(),
        "nothing left on the work queue"
    );
    let answer = w.invoke("extract", &sqs_event(&genuine, &queue_arn));
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
    assert_eq!(v["status"], "completed", "{v}");

    // --- Two incremental jobs of one sync: the second reads only what came after ------
    let incremental = |run: u32| {
        json!({"dataRequest": {"mappedFields": {"pg-main": {"accounts": ["id", "name"]}}},
               "incremental": {"pg-main": {"accounts": {"cursor": "id"}}}, "syncId": "e2e-sync",
               "metadata": {"source": "e2e", "case": "incremental", "run": run}})
    };
    let mut spans = Vec::new();
    for (run, expected) in [
        (1, vec!["ada", "grace", "edsger"]),
        (2, vec!["barbara", "ken"]),
    ] {
        if run == 2 {
            psql(
                DB,
                "INSERT INTO accounts VALUES (4, 'barbara'), (5, 'ken');",
            );
        }
        let (status, v) = w.api("POST", "/v1/fetcher", Some(&incremental(run)));
        assert_eq!(status, 202, "{v}");
        let job = v["jobId"].as_str().unwrap().to_owned();
        let msg = job_message(&c, &r, &job).await;
        let answer = w.invoke("extract", &sqs_event(&msg, &queue_arn));
        assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
        let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
        assert_eq!(v["status"], "completed", "{v}");
        let sealed = read_all(&objects, v["resultPath"].as_str().unwrap())
            .await
            .unwrap()
            .expect("result");
        let mut opener = Opener::new(&ring, &job);
        let mut plain = Vec::new();
        opener.update_into(&sealed, &mut plain).expect("open");
        opener.finish().expect("authentic");
        let names: Vec<String> = String::from_utf8(plain)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["row"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, expected, "run {run}");
        let events = events_for(&c, &r, &job, Duration::from_secs(20)).await;
        assert_eq!(events.len(), 1, "{events:?}");
        let span = &events[0]["detail"]["result"]["watermarks"]["pg-main"]["accounts"];
        assert_eq!(
            span, &v["watermarks"]["pg-main"]["accounts"],
            "the event carries the span"
        );
        spans.push(span.clone());
    }
    assert_eq!(spans[0]["fromWatermark"], Value::Null);
    assert_eq!(spans[0]["toWatermark"]["values"], json!([3]));
    assert_eq!(spans[1]["fromWatermark"], spans[0]["toWatermark"]);
    assert_eq!(spans[1]["toWatermark"]["values"], json!([5]));
    let (status, sync) = w.api("GET", "/v1/syncs/e2e-sync", None);
    assert_eq!(status, 200, "{sync}");
    assert_eq!(
        sync["tables"]["pg-main"]["accounts"]["watermark"],
        spans[1]["toWatermark"]
    );

    // The scheduled repair pass runs (nothing left to republish).
    let repaired = w.invoke(
        "extract",
        &json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
    );
    assert_eq!(repaired["republished"], 0, "{repaired}");
}
