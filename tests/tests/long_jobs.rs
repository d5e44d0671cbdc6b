//! Jobs longer than one invocation on the real Lambda binaries (docs/operations.md, "Long
//! jobs"): with segments forced to 1 s (`FETCHER_TEST_SEGMENT_SECS`, a test setting), a
//! job over a 2M-row PostgreSQL table and a 1M-row MariaDB table is continued by the
//! extract function across invocations, each started by the continuation the previous
//! one sent to SQS. Its NDJSON parts, opened in manifest order, are byte for byte what
//! one uninterrupted invocation writes; one `job.completed` announces the manifest;
//! progress never goes back; a Parquet job's parts hold every row once.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fetcher_aws::bootstrap::{Options, Resources, bootstrap};
use fetcher_aws::host::HostConfig;
use fetcher_aws::testing::{clients, config};
use fetcher_aws::{Clients, S3ObjectStore, SecretsManagerKeySource};
use fetcher_crypto::{KeyRing, Opener};
use fetcher_e2e::*;
use fetcher_host::ports::read_all;
use serde_json::{Value, json};

const DB: &str = "fetcher_e2e_long";
const PG_ROWS: u64 = 2_000_000;
const MY_ROWS: u64 = 1_000_000;
const MY_USER: &str = "fetcher_e2e_long";
const MY_PASSWORD: &str = "e2e-long-test-only";

fn mysql(db: Option<&str>, sql: &str) {
    let mut cmd = Command::new("mysql");
    cmd.args(["-h", "127.0.0.1", "-u", "root"]);
    if let Some(db) = db {
        cmd.arg(db);
    }
    let out = cmd.args(["-e", sql]).output().expect("mysql");
    assert!(
        out.status.success(),
        "mysql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `big` on both databases, rebuilt for each run.
fn seed() {
    let _ = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-q", "-c"])
        .arg(format!("CREATE DATABASE {DB}"))
        .stderr(Stdio::null())
        .output();
    psql(
        DB,
        &format!(
            "DROP TABLE IF EXISTS big; \
             CREATE TABLE big (id bigint PRIMARY KEY, u uuid NOT NULL, n numeric(18,4) NOT NULL, \
             ts timestamptz NOT NULL, nt text); \
             INSERT INTO big SELECT g, md5(g::text)::uuid, (g * 1.2345)::numeric(18,4), \
             '2024-01-01T00:00:00Z'::timestamptz + g * interval '1 second', \
             CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, {PG_ROWS}) g"
        ),
    );
    mysql(None, &format!("CREATE DATABASE IF NOT EXISTS {DB}"));
    mysql(
        Some(DB),
        &format!(
            "DROP TABLE IF EXISTS big; \
             CREATE TABLE big (id BIGINT PRIMARY KEY, t VARCHAR(64) NOT NULL, ts DATETIME(6) NOT NULL); \
             INSERT INTO big SELECT seq, CONCAT('name-', seq), TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND \
             FROM seq_1_to_{MY_ROWS}; \
             CREATE USER IF NOT EXISTS '{MY_USER}'@'%' IDENTIFIED BY '{MY_PASSWORD}'; \
             GRANT SELECT ON {DB}.* TO '{MY_USER}'@'%'"
        ),
    );
}

fn register(w: &Watch) {
    for body in [
        json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
               "databaseName": DB, "userName": "postgres", "password": "unused"}),
        json!({"configName": "shop", "type": "MYSQL", "host": "127.0.0.1", "port": 3306,
               "databaseName": DB, "userName": MY_USER, "password": MY_PASSWORD}),
    ] {
        let (status, v) = w.api("POST", "/v1/management/connections", Some(&body));
        assert!(status == 201 || status == 409, "{status} {v}");
    }
}

/// Submits the job over both tables; `all_columns` or only the keys (the Parquet job
/// checks row counts, its values are compared on serve: crates/cli/tests/serve_long_jobs.rs).
fn submit(w: &Watch, format: &str, run: &str, all_columns: bool) -> String {
    let (ledger, shop) = if all_columns {
        (
            json!(["id", "u", "n", "ts", "nt"]),
            json!(["id", "t", "ts"]),
        )
    } else {
        (json!(["id"]), json!(["id"]))
    };
    let (status, v) = w.api(
        "POST",
        "/v1/fetcher",
        Some(&json!({
            "dataRequest": {"mappedFields": {"ledger": {"big": ledger}, "shop": {"big": shop}}},
            "metadata": {"source": "e2e", "case": "long", "run": run},
            "resultFormat": format
        })),
    );
    assert_eq!(status, 202, "{v}");
    v["jobId"].as_str().unwrap().to_owned()
}

/// The work queue's ARN (the emulators' account).
fn queue_arn(r: &Resources) -> String {
    let name = r.queue_url.rsplit('/').next().unwrap();
    format!("arn:aws:sqs:us-east-1:123456789012:{name}")
}

/// Delivers `job`'s messages to the extract function, one invocation each, as the event
/// source would, until the job ends; returns the job record and the invocation count.
async fn run_to_end(w: &Watch, c: &Clients, r: &Resources, job: &str) -> (Value, usize) {
    let queue_arn = queue_arn(r);
    let started = Instant::now();
    let mut last_rows = 0;
    for invocations in 1..=500 {
        let msg = job_message(c, r, job).await;
        let answer = w.invoke("extract", &sqs_event(&msg, &queue_arn));
        assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
        let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
        // Progress sums every invocation: it only grows.
        let rows = v["progress"]["rows"].as_u64().unwrap_or(0);
        assert!(rows >= last_rows, "progress went back: {v}");
        last_rows = rows;
        match v["status"].as_str() {
            Some("completed" | "failed" | "canceled") => return (v, invocations),
            _ => assert!(started.elapsed() < Duration::from_secs(900), "{v}"),
        }
    }
    panic!("{job} did not end in 500 invocations");
}

/// A fresh stack on the emulators, named `prefix` and the process id: its clients, its
/// resources, the master key ring and the results bucket.
async fn stack(prefix: &str) -> (Clients, Resources, Arc<KeyRing>, S3ObjectStore) {
    let c = clients().await;
    let prefix = format!("{prefix}-{}", std::process::id());
    let r = bootstrap(&c, &Options::new(&prefix))
        .await
        .expect("bootstrap");
    let keys = SecretsManagerKeySource::new(c.secrets.clone(), c.kms.clone(), &r.secret_id);
    let ring = Arc::new(KeyRing::load(&keys).await.expect("key ring"));
    let objects = S3ObjectStore::new(c.s3.clone(), &r.bucket);
    (c, r, ring, objects)
}

/// Opens the sealed object at `path` for `job`, checking `hmac`.
async fn open(
    objects: &S3ObjectStore,
    ring: &KeyRing,
    job: &str,
    path: &str,
    hmac: &str,
) -> Vec<u8> {
    let sealed = read_all(objects, path)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no object at {path}"));
    let mut opener = Opener::new(ring, job).expect_hmac(hmac);
    let mut plain = Vec::with_capacity(sealed.len());
    opener.update_into(&sealed, &mut plain).expect("open");
    opener.finish().expect("authentic");
    plain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_big_tables_continues_across_invocations_exactly() {
    seed();
    let (c, r, ring, objects) = stack("fetcher-long").await;
    let logs = log_dir();

    // The functions under `cargo lambda watch`, segments forced to a second. (The
    // emulator sends a deadline long past, which the handler takes for none: the
    // segments' length is the test's.)
    let w = Watch::start(
        &Watch::function_env(
            &r,
            &[
                ("FETCHER_TEST_SEGMENT_SECS", "1"),
                ("FETCHER_MAX_RESULT_BYTES", "0"),
            ],
        ),
        &logs.join("long.log"),
    );
    register(&w);

    // One uninterrupted invocation: the same handler, in this process, with no deadline.
    let whole = {
        // Results stream to S3: the 256 MiB default ceiling lifted, as on the functions.
        let cfg = HostConfig {
            max_result_bytes: 0,
            ..HostConfig::for_resources(&r)
        };
        let extractor = fetcher_fn_extract::from_config(cfg, &config().await).expect("extract");
        let job = submit(&w, "v2", "whole", true);
        let msg = job_message(&c, &r, &job).await;
        let started = Instant::now();
        let answer = extractor.handle(sqs_event(&msg, &queue_arn(&r))).await;
        eprintln!("long: uninterrupted run in {:?}", started.elapsed());
        assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
        let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
        assert_eq!(v["status"], "completed", "{v}");
        assert!(v.get("resultParts").is_none(), "one object: {v}");
        let path = v["resultPath"].as_str().unwrap();
        open(
            &objects,
            &ring,
            &job,
            path,
            v["resultHmac"].as_str().unwrap(),
        )
        .await
    };
    assert_eq!(
        whole.iter().filter(|b| **b == b'\n').count() as u64,
        PG_ROWS + MY_ROWS
    );

    // The same job through the emulated functions: continued across invocations.
    let job = submit(&w, "v2", "segmented", true);
    let started = Instant::now();
    let (v, invocations) = run_to_end(&w, &c, &r, &job).await;
    eprintln!(
        "long: segmented run in {:?}, {invocations} invocations",
        started.elapsed()
    );
    assert_eq!(v["status"], "completed", "{v}");
    assert!(invocations >= 4, "{invocations} invocations");
    assert_eq!(v["progress"]["rows"], PG_ROWS + MY_ROWS, "{v}");
    let manifest_path = v["resultPath"].as_str().unwrap().to_owned();
    assert_eq!(
        manifest_path,
        format!("external-data/{job}.manifest.json.v2")
    );
    let manifest: Value = serde_json::from_slice(
        &open(
            &objects,
            &ring,
            &job,
            &manifest_path,
            v["resultHmac"].as_str().unwrap(),
        )
        .await,
    )
    .unwrap();
    assert_eq!(manifest["format"], "ndjson");
    let parts = manifest["parts"].as_array().unwrap();
    assert_eq!(parts.len(), invocations, "one part per invocation");
    assert_eq!(&manifest["parts"], &v["resultParts"]);
    let mut joined = Vec::with_capacity(whole.len());
    for p in parts {
        let path = p["path"].as_str().unwrap();
        joined.extend(open(&objects, &ring, &job, path, p["hmac"].as_str().unwrap()).await);
    }
    assert!(
        joined == whole,
        "the parts are not one run's bytes ({} vs {} bytes)",
        joined.len(),
        whole.len()
    );
    drop((joined, whole));
    let events = events_for(&c, &r, &job, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 1, "one job.completed: {events:?}");
    assert_eq!(events[0]["detail-type"], "job.completed");
    let result = &events[0]["detail"]["result"];
    assert_eq!(result["path"], manifest_path.as_str());
    assert_eq!(result["rowCount"], PG_ROWS + MY_ROWS);

    // Parquet: parts per table and invocation, every row once.
    let job = submit(&w, "parquet", "segmented", false);
    let (v, invocations) = run_to_end(&w, &c, &r, &job).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert!(invocations >= 4, "{invocations} invocations");
    let parts = v["resultParts"].as_array().unwrap();
    assert!(parts.len() >= invocations, "{v}");
    for (config, rows) in [("ledger", PG_ROWS), ("shop", MY_ROWS)] {
        let sum: u64 = parts
            .iter()
            .filter(|p| p["config"] == config)
            .map(|p| p["rowCount"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, rows, "{config}");
    }
    let events = events_for(&c, &r, &job, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(&events[0]["detail"]["result"]["parts"], &v["resultParts"]);
}

const FAN_DB: &str = "fetcher_e2e_fan";
const FAN_PG_ROWS: u64 = 400_000;
const FAN_MY_ROWS: u64 = 50_000;

/// The fan-out case's own tables (the other case rebuilds `big` when it starts).
fn seed_fan() {
    let _ = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-q", "-c"])
        .arg(format!("CREATE DATABASE {FAN_DB}"))
        .stderr(Stdio::null())
        .output();
    psql(
        FAN_DB,
        &format!(
            "DROP TABLE IF EXISTS big; \
             CREATE TABLE big (id bigint PRIMARY KEY, n numeric(18,4) NOT NULL, nt text); \
             INSERT INTO big SELECT g, (g * 1.2345)::numeric(18,4), \
             CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, {FAN_PG_ROWS}) g; \
             ANALYZE big"
        ),
    );
    mysql(None, &format!("CREATE DATABASE IF NOT EXISTS {FAN_DB}"));
    mysql(
        Some(FAN_DB),
        &format!(
            "DROP TABLE IF EXISTS big; \
             CREATE TABLE big (id BIGINT PRIMARY KEY, t VARCHAR(64) NOT NULL); \
             INSERT INTO big SELECT seq, CONCAT('name-', seq) FROM seq_1_to_{FAN_MY_ROWS}; \
             CREATE USER IF NOT EXISTS '{MY_USER}'@'%' IDENTIFIED BY '{MY_PASSWORD}'; \
             GRANT SELECT ON {FAN_DB}.* TO '{MY_USER}'@'%'"
        ),
    );
}

/// Every object whose key begins with `external-data/<job>` (the single object's key,
/// the manifest's and the parts beside it).
async fn objects_of(c: &Clients, r: &Resources, job: &str) -> Vec<String> {
    let out =
        c.s3.list_objects_v2()
            .bucket(&r.bucket)
            .prefix(format!("external-data/{job}"))
            .send()
            .await
            .expect("list");
    let mut keys: Vec<String> = out
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect();
    keys.sort();
    keys
}

/// Fan-out (docs/operations.md, "Fan-out") on the real functions: the 400k-row
/// PostgreSQL table is cut into 4 key ranges by the first invocation, each range read by
/// invocations of its own (segments forced to 1 s), the MariaDB table after it by the last
/// range; the parts in manifest order are one uninterrupted run's bytes, one
/// `job.completed` announces them. An invocation killed mid-range (its future dropped, as
/// a kill leaves it: no release, no cleanup) is taken over once its lease ends, and the
/// result is still exact with no orphan part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_table_fans_out_over_invocations_and_gives_one_runs_bytes() {
    seed_fan();
    let (c, r, ring, objects) = stack("fetcher-fan").await;
    let w = Watch::start(
        &Watch::function_env(
            &r,
            &[
                ("FETCHER_TEST_SEGMENT_SECS", "1"),
                ("FETCHER_MAX_RESULT_BYTES", "0"),
                ("FETCHER_FANOUT_RANGES", "4"),
                ("FETCHER_FANOUT_RANGE_ROWS", "100000"),
                ("FETCHER_LEASE_SECS", "3"),
            ],
        ),
        &log_dir().join("fanout.log"),
    );
    for body in [
        json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
               "databaseName": FAN_DB, "userName": "postgres", "password": "unused"}),
        json!({"configName": "shop", "type": "MYSQL", "host": "127.0.0.1", "port": 3306,
               "databaseName": FAN_DB, "userName": MY_USER, "password": MY_PASSWORD}),
    ] {
        let (status, v) = w.api("POST", "/v1/management/connections", Some(&body));
        assert!(status == 201 || status == 409, "{status} {v}");
    }
    let submit = |run: &str| {
        let (status, v) = w.api(
            "POST",
            "/v1/fetcher",
            Some(&json!({
                "dataRequest": {"mappedFields": {"ledger": {"big": ["id", "n", "nt"]},
                                                 "shop": {"big": ["id", "t"]}}},
                "metadata": {"source": "e2e", "case": "fanout", "run": run}
            })),
        );
        assert_eq!(status, 202, "{v}");
        v["jobId"].as_str().unwrap().to_owned()
    };
    // An in-process extractor: the uninterrupted run (fan-out off), and the killed one.
    let extractor = |fanout_ranges: usize| {
        let cfg = HostConfig {
            max_result_bytes: 0,
            fanout_ranges,
            fanout_range_rows: 100_000,
            lease: Duration::from_secs(3),
            // Its heartbeat shows its progress at once: the kill lands mid-range.
            progress_interval: Duration::from_millis(100),
            ..HostConfig::for_resources(&r)
        };
        async move { fetcher_fn_extract::from_config(cfg, &config().await).expect("extract") }
    };
    let whole = {
        let job = submit("whole");
        let msg = job_message(&c, &r, &job).await;
        let answer = extractor(1)
            .await
            .handle(sqs_event(&msg, &queue_arn(&r)))
            .await;
        assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
        let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
        assert_eq!(v["status"], "completed", "{v}");
        assert!(v.get("resultParts").is_none(), "one object: {v}");
        let (path, hmac) = (
            v["resultPath"].as_str().unwrap(),
            v["resultHmac"].as_str().unwrap(),
        );
        open(&objects, &ring, &job, path, hmac).await
    };

    let check = |v: Value, job: String| {
        let (objects, ring, whole, c, r) = (&objects, &ring, &whole, &c, &r);
        async move {
            assert_eq!(v["status"], "completed", "{v}");
            let parts = v["resultParts"].as_array().unwrap();
            for i in 1..4 {
                let prefix = format!("part-{i}");
                assert!(
                    parts
                        .iter()
                        .any(|p| p["path"].as_str().unwrap().contains(&prefix)),
                    "no part of range {i}: {v}"
                );
            }
            let mut joined = Vec::new();
            for p in parts {
                let (path, hmac) = (p["path"].as_str().unwrap(), p["hmac"].as_str().unwrap());
                joined.extend(open(objects, ring, &job, path, hmac).await);
            }
            assert!(
                joined == *whole,
                "not one run's bytes ({} vs {})",
                joined.len(),
                whole.len()
            );
            let mut listed: Vec<String> = parts
                .iter()
                .map(|p| p["path"].as_str().unwrap().to_owned())
                .chain([v["resultPath"].as_str().unwrap().to_owned()])
                .collect();
            listed.sort();
            assert_eq!(objects_of(c, r, &job).await, listed, "no orphan part");
            let events = events_for(c, r, &job, Duration::from_secs(20)).await;
            assert_eq!(events.len(), 1, "one job.completed: {events:?}");
            assert_eq!(
                events[0]["detail"]["result"]["rowCount"],
                FAN_PG_ROWS + FAN_MY_ROWS
            );
        }
    };

    let job = submit("fanned");
    let (v, invocations) = run_to_end(&w, &c, &r, &job).await;
    eprintln!("fanout: {invocations} invocations");
    assert!(invocations >= 5, "{invocations} invocations");
    check(v, job).await;

    // Killed mid-range: the planner runs, then range 1's invocation dies half-way.
    let job = submit("killed");
    let msg = job_message(&c, &r, &job).await;
    let answer = w.invoke("extract", &sqs_event(&msg, &queue_arn(&r)));
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let range_msg = loop {
        let m = job_message(&c, &r, &job).await;
        if m.body.contains("\"range\":1") {
            break m;
        }
        // The other ranges' messages go back for later.
        let answer = w.invoke("extract", &sqs_event(&m, &queue_arn(&r)));
        assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    };
    let dying = extractor(4).await;
    let event = sqs_event(&range_msg, &queue_arn(&r));
    let rows = |v: &Value| v["progress"]["rows"].as_u64().unwrap_or(0);
    let before = rows(&w.api("GET", &format!("/v1/fetcher/{job}"), None).1);
    let run = tokio::spawn(async move { dying.handle(event).await });
    // Killed once its heartbeat reported some of its range (in the job's progress).
    let started = Instant::now();
    loop {
        let (_, v) = w.api("GET", &format!("/v1/fetcher/{job}"), None);
        if rows(&v) > before {
            break;
        }
        assert!(!run.is_finished(), "the range ended before the kill: {v}");
        assert!(started.elapsed() < Duration::from_secs(60), "{v}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled(), "killed mid-range");
    // Its message comes back (SQS redelivers an unacknowledged one) after the lease.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let answer = w.invoke("extract", &sqs_event(&range_msg, &queue_arn(&r)));
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let (v, _) = run_to_end(&w, &c, &r, &job).await;
    check(v, job).await;
}
