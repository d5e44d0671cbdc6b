//! Jobs longer than a segment through `fetcher serve` (docs/operations.md, "Long jobs"):
//! with segments forced to a second (`FETCHER_TEST_SEGMENT_SECS`, a test setting), a job
//! over a 2M-row PostgreSQL table and a 1M-row MariaDB table completes across many
//! segments; its NDJSON parts, opened in order, are byte for byte what one uninterrupted
//! run of another `serve` writes, and its Parquet parts hold the same values. Progress
//! counts every segment; a cancel stops the job within seconds and leaves no object.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const PG_ROWS: u64 = 2_000_000;
const MY_ROWS: u64 = 1_000_000;
const MY_PASSWORD: &str = "long-jobs-test-only";

/// A MariaDB database with `big`, dropped on drop.
struct MyDb(String);

impl MyDb {
    fn create() -> MyDb {
        let name = format!("fetcher_long_{}", free_port());
        mysql(None, &format!("CREATE DATABASE {name}"));
        mysql(
            Some(&name),
            &format!(
                "CREATE TABLE big (id BIGINT PRIMARY KEY, t VARCHAR(64) NOT NULL, n DECIMAL(18,4) NOT NULL, \
                 ts DATETIME(6) NOT NULL, nt TEXT); \
                 INSERT INTO big SELECT seq, CONCAT('name-', seq), seq * 1.2345, \
                 TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND, IF(seq % 3 = 0, NULL, CONCAT('note ', seq)) \
                 FROM seq_1_to_{MY_ROWS}; \
                 CREATE USER IF NOT EXISTS 'fetcher_long'@'%' IDENTIFIED BY '{MY_PASSWORD}'; \
                 GRANT SELECT ON {name}.* TO 'fetcher_long'@'%'; \
                 ANALYZE TABLE big"
            ),
        );
        MyDb(name)
    }
}

impl Drop for MyDb {
    fn drop(&mut self) {
        let _ = Command::new("mysql")
            .args(["-h", "127.0.0.1", "-u", "root", "-e"])
            .arg(format!("DROP DATABASE IF EXISTS {}", self.0))
            .output();
    }
}

/// The PostgreSQL connection `ledger` to `pg`.
fn ledger(pg: &PgDb) -> Value {
    json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
           "databaseName": pg.0, "userName": "postgres", "password": "unused"})
}

/// The MariaDB connection `shop` to `my`.
fn shop(my: &MyDb) -> Value {
    json!({"configName": "shop", "type": "MYSQL", "host": "127.0.0.1", "port": 3306,
           "databaseName": my.0, "userName": "fetcher_long", "password": MY_PASSWORD})
}

fn register(server: &Server, connections: &[Value]) {
    for body in connections {
        let (status, created) = server.request(
            "POST",
            "/v1/management/connections",
            Some(body),
            &[("X-Product-Name", "reporter")],
        );
        assert_eq!(status, 201, "{created}");
    }
}

fn job(format: &str, run: &str) -> Value {
    json!({
        "dataRequest": {"mappedFields": {
            "ledger": {"big": ["id", "n", "ts", "nt"]},
            "shop": {"big": ["id", "t", "ts"]}
        }},
        "metadata": {"source": "reporter", "run": run},
        "resultFormat": format
    })
}

fn submit(server: &Server, body: &Value) -> String {
    let (status, accepted) = server.request("POST", "/v1/fetcher", Some(body), &[]);
    assert_eq!(status, 202, "{accepted}");
    accepted["jobId"].as_str().unwrap().to_owned()
}

/// The plaintext of a completed NDJSON job, through `fetcher result open`.
fn ndjson(dir: &Path, id: &str) -> String {
    let (ok, out, err) = open_result(dir, id);
    assert!(ok, "{err}");
    out
}

/// A Parquet job's files, through `fetcher result open --output-dir`, in manifest order.
fn parquet_files(dir: &Path, id: &str, parts: &[Value]) -> Vec<(String, String)> {
    let out_dir = dir.join(format!("out-{id}"));
    let out = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["result", "open", id, "--quiet", "--data-dir"])
        .arg(dir)
        .arg("--output-dir")
        .arg(&out_dir)
        .env("FETCHER_MASTER_KEY", KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A table in several parts gets `-2`, `-3`, … after its first file.
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    parts
        .iter()
        .map(|p| {
            let stem = format!(
                "{}.{}",
                p["config"].as_str().unwrap(),
                p["table"].as_str().unwrap()
            );
            let n = seen.entry(stem.clone()).or_default();
            *n += 1;
            let name = if *n == 1 {
                format!("{stem}.parquet")
            } else {
                format!("{stem}-{n}.parquet")
            };
            (stem, out_dir.join(name).to_string_lossy().into_owned())
        })
        .collect()
}

fn python() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("FETCHER_TEST_PYTHON") {
        return p.into();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python")
}

/// pyarrow: each table's files, concatenated, equal the other job's, value for value.
fn same_parquet(a: &[(String, String)], b: &[(String, String)]) {
    let listing = json!({"a": a, "b": b}).to_string();
    let script = r#"
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
listing = json.loads(sys.argv[1])
def tables(files):
    out = {}
    for stem, f in files:
        out.setdefault(stem, []).append(pq.read_table(f))
    return {k: pa.concat_tables(v) for k, v in out.items()}
a, b = tables(listing["a"]), tables(listing["b"])
assert a.keys() == b.keys(), (a.keys(), b.keys())
for k in a:
    assert a[k].schema.equals(b[k].schema), k
    assert a[k].num_rows == b[k].num_rows, (k, a[k].num_rows, b[k].num_rows)
    assert a[k].equals(b[k]), k
print(json.dumps({k: a[k].num_rows for k in a}))
"#;
    let out = Command::new(python())
        .args(["-c", script, &listing])
        .output()
        .expect("python with pyarrow (./scripts/test installs .venv)");
    assert!(
        out.status.success(),
        "pyarrow comparison failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PostgreSQL database with `big` of `PG_ROWS` rows.
fn pg_big(name: &str) -> PgDb {
    let pg = PgDb::create(name);
    psql(
        &pg.0,
        &format!(
            "CREATE TABLE big (id bigint PRIMARY KEY, u uuid NOT NULL, t text NOT NULL, n numeric(18,4) NOT NULL, \
             ts timestamptz NOT NULL, nt text); \
             INSERT INTO big SELECT g, md5(g::text)::uuid, 'name-' || g, (g * 1.2345)::numeric(18,4), \
             '2024-01-01T00:00:00Z'::timestamptz + g * interval '1 second', \
             CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, {PG_ROWS}) g; \
             ANALYZE big"
        ),
    );
    pg
}

#[test]
fn a_job_over_big_tables_continues_across_segments_exactly() {
    let pg = pg_big("fetcher_long");
    let my = MyDb::create();

    // One uninterrupted run of each format.
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Server::start(plain_dir.path(), &["--max-result-bytes", "0"]);
    register(&plain, &[ledger(&pg), shop(&my)]);
    let whole_id = submit(&plain, &job("v2", "whole"));
    let whole_pq_id = submit(&plain, &job("parquet", "whole"));
    let done = plain.wait_job(&whole_id, Duration::from_secs(600));
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done.get("resultParts").is_none(), "one object: {done}");
    let whole = ndjson(plain_dir.path(), &whole_id);
    assert_eq!(whole.lines().count() as u64, PG_ROWS + MY_ROWS);
    let done = plain.wait_job(&whole_pq_id, Duration::from_secs(600));
    assert_eq!(done["status"], "completed", "{done}");
    let whole_pq = parquet_files(
        plain_dir.path(),
        &whole_pq_id,
        done["resultParts"].as_array().unwrap(),
    );
    drop(plain);

    // The same jobs on a serve whose segments stop after a second.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--workers", "1", "--max-result-bytes", "0"],
        None,
        &[("FETCHER_TEST_SEGMENT_SECS", "1")],
    );
    register(&server, &[ledger(&pg), shop(&my)]);
    let id = submit(&server, &job("v2", "segmented"));
    // Progress counts every segment: it only grows, and names both tables.
    let started = Instant::now();
    let mut last_rows = 0;
    let done = loop {
        let (_, v) = server.request("GET", &format!("/v1/fetcher/{id}"), None, &[]);
        if let Some(rows) = v["progress"]["rows"].as_u64() {
            assert!(rows >= last_rows, "progress went back: {v}");
            last_rows = rows;
            assert_eq!(v["progress"]["tables"]["total"], 2);
        }
        if v["status"] == "completed" || v["status"] == "failed" {
            break v;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "{v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(done["status"], "completed", "{done}");
    let parts = done["resultParts"].as_array().expect("parts").clone();
    assert!(parts.len() >= 4, "{} segments: {done}", parts.len());
    assert!(
        done["resultPath"]
            .as_str()
            .unwrap()
            .ends_with(".manifest.json.v2")
    );
    let joined = ndjson(dir.path(), &id);
    assert!(
        joined == whole,
        "the parts are not one run's bytes ({} vs {} bytes)",
        joined.len(),
        whole.len()
    );
    assert_eq!(done["progress"]["rows"], PG_ROWS + MY_ROWS);

    let pq_id = submit(&server, &job("parquet", "segmented"));
    let done = server.wait_job(&pq_id, Duration::from_secs(600));
    assert_eq!(done["status"], "completed", "{done}");
    let parts = done["resultParts"].as_array().unwrap();
    assert!(parts.len() >= 4, "{done}");
    same_parquet(&whole_pq, &parquet_files(dir.path(), &pq_id, parts));

    // A cancel mid-job: within seconds, and no object of the job is left.
    let cancel_id = submit(&server, &job("v2", "canceled"));
    let started = Instant::now();
    loop {
        let (_, v) = server.request("GET", &format!("/v1/fetcher/{cancel_id}"), None, &[]);
        if v["progress"]["rows"].as_u64().unwrap_or(0) > PG_ROWS / 4 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = server.request(
        "POST",
        &format!("/v1/fetcher/{cancel_id}/cancel"),
        None,
        &[],
    );
    assert_eq!(status, 202);
    let asked = Instant::now();
    let done = server.wait_job(&cancel_id, Duration::from_secs(30));
    assert_eq!(done["status"], "canceled", "{done}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    // The last continuation may still be on its way: give it a moment to clean up.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = objects_of(&dir.path().join("results"), &cancel_id);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every stored object whose key names `job_id`.
fn objects_of(root: &Path, job_id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains(job_id) {
                out.push(p.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// kill -9 of `serve` in the middle of a segment, then a restart on the same data
/// directory: the restart takes the job back at once (the directory is locked to one
/// serve, so the dead process's lease need not be waited out) and runs it on from its
/// last checkpoint (the killed segment runs again); its parts are still one run's bytes, and nothing else of the job is left:
/// no half-written file, no part the manifest does not list.
#[test]
fn a_serve_killed_mid_segment_finishes_the_job_exactly_after_restart() {
    const ROWS: u64 = 600_000;
    let pg = PgDb::create("fetcher_long_kill");
    psql(
        &pg.0,
        &format!(
            "CREATE TABLE big (id bigint PRIMARY KEY, t text NOT NULL, n numeric(18,4) NOT NULL); \
             INSERT INTO big SELECT g, 'name-' || g, (g * 1.2345)::numeric(18,4) FROM generate_series(1, {ROWS}) g"
        ),
    );
    let body = |run: &str| {
        json!({"dataRequest": {"mappedFields": {"ledger": {"big": ["id", "t", "n"]}}},
               "metadata": {"source": "reporter", "run": run}})
    };
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Server::start(plain_dir.path(), &[]);
    register(&plain, &[ledger(&pg)]);
    let whole_id = submit(&plain, &body("whole"));
    let done = plain.wait_job(&whole_id, Duration::from_secs(300));
    assert_eq!(done["status"], "completed", "{done}");
    let whole = ndjson(plain_dir.path(), &whole_id);
    drop(plain);

    let dir = tempfile::tempdir().unwrap();
    let segments = [("FETCHER_TEST_SEGMENT_SECS", "0.5")];
    let args = ["--workers", "1"];
    let mut server = Server::start_with(dir.path(), &args, None, &segments);
    register(&server, &[ledger(&pg)]);
    let id = submit(&server, &body("killed"));
    // Mid-job and mid-segment: a checkpoint exists and rows beyond it are being read.
    let started = Instant::now();
    loop {
        let (_, v) = server.request("GET", &format!("/v1/fetcher/{id}"), None, &[]);
        let rows = v["progress"]["rows"].as_u64().unwrap_or(0);
        if v["status"] == "processing" && rows > ROWS / 3 {
            break;
        }
        assert_ne!(v["status"], "completed", "finished before the kill: {v}");
        assert!(started.elapsed() < Duration::from_secs(120), "{v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The data directory is this serve's alone: a second one stops at start.
    let second = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .env("FETCHER_MASTER_KEY", KEY)
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("another fetcher serve is using the data directory"),
        "{err}"
    );
    server.kill();

    // The restart takes the dead process's claim back at once: no 30 s lease to wait out.
    let restarted = Instant::now();
    let server = Server::start_with(dir.path(), &args, None, &segments);
    let done = server.wait_job(&id, Duration::from_secs(240));
    eprintln!("completed {:?} after the restart", restarted.elapsed());
    assert!(
        restarted.elapsed() < Duration::from_secs(25),
        "waited out the lease: {:?}",
        restarted.elapsed()
    );
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["progress"]["rows"], ROWS, "{done}");
    let joined = ndjson(dir.path(), &id);
    assert!(
        joined == whole,
        "not one run's bytes ({} vs {} bytes)",
        joined.len(),
        whole.len()
    );
    let results = dir.path().join("results");
    let mut stored = objects_of(&results, &id);
    stored.sort();
    assert_eq!(
        stored,
        listed_objects(&results, &done),
        "every object of the job is the manifest or a listed part"
    );
}

/// The paths of a completed job's manifest and listed parts, under `results`.
fn listed_objects(results: &Path, done: &Value) -> Vec<String> {
    let mut listed: Vec<String> = done["resultParts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_owned())
        .chain([done["resultPath"].as_str().unwrap().to_owned()])
        .map(|p| results.join(p).to_string_lossy().into_owned())
        .collect();
    listed.sort();
    listed
}

/// Fan-out (docs/operations.md, "Fan-out") on `serve`: the 2M-row PostgreSQL table is cut
/// into 4 key ranges read by 4 workers at once (each continued across 1 s segments too),
/// the 1M-row MariaDB table of a second job likewise; the parts, in manifest order, are one
/// uninterrupted run's bytes (NDJSON) and values (Parquet), and nothing else of the jobs
/// is left. Then kill -9 mid-range and a restart: the ranges are taken back and the result
/// is still exact, with no orphan part.
#[test]
fn big_tables_fan_out_over_four_ranges_and_give_one_runs_bytes() {
    let pg = pg_big("fetcher_fanout");
    let my = MyDb::create();
    let shop_only = |format: &str, run: &str| {
        json!({"dataRequest": {"mappedFields": {"shop": {"big": ["id", "t", "ts"]}}},
               "metadata": {"source": "reporter", "run": run}, "resultFormat": format})
    };
    let whole_of = |body: &Value| {
        let dir = tempfile::tempdir().unwrap();
        let plain = Server::start_with(
            dir.path(),
            &["--max-result-bytes", "0"],
            None,
            &[("FETCHER_FANOUT_RANGES", "1")],
        );
        register(&plain, &[ledger(&pg), shop(&my)]);
        let id = submit(&plain, body);
        let done = plain.wait_job(&id, Duration::from_secs(600));
        assert_eq!(done["status"], "completed", "{done}");
        assert!(done.get("resultParts").is_none() || body["resultFormat"] == "parquet");
        let out = if body["resultFormat"] == "parquet" {
            parquet_files(dir.path(), &id, done["resultParts"].as_array().unwrap())
        } else {
            vec![(String::new(), ndjson(dir.path(), &id))]
        };
        (dir, out)
    };
    let (_d1, whole) = whole_of(&job("v2", "whole"));
    let (_d2, whole_pq) = whole_of(&job("parquet", "whole"));
    let (_d3, whole_shop) = whole_of(&shop_only("v2", "whole"));

    let fan_env = [
        ("FETCHER_FANOUT_RANGES", "4"),
        ("FETCHER_FANOUT_RANGE_ROWS", "200000"),
        ("FETCHER_TEST_SEGMENT_SECS", "1"),
    ];
    let args = ["--workers", "4", "--max-result-bytes", "0"];
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &args, None, &fan_env);
    register(&server, &[ledger(&pg), shop(&my)]);
    let results = dir.path().join("results");
    for (body, whole) in [
        (job("v2", "fanned"), &whole[0].1),
        (shop_only("v2", "fanned"), &whole_shop[0].1),
    ] {
        let id = submit(&server, &body);
        let done = server.wait_job(&id, Duration::from_secs(600));
        assert_eq!(done["status"], "completed", "{done}");
        let parts = done["resultParts"].as_array().unwrap();
        // Range i's parts are numbered from i * 100000: all four ranges wrote some.
        for i in 1..4 {
            let prefix = format!("part-{i}");
            assert!(
                parts
                    .iter()
                    .any(|p| p["path"].as_str().unwrap().contains(&prefix)),
                "no part of range {i}: {done}"
            );
        }
        let joined = ndjson(dir.path(), &id);
        assert!(
            joined == *whole,
            "the ranges' parts are not one run's bytes ({} vs {} bytes)",
            joined.len(),
            whole.len()
        );
        let mut stored = objects_of(&results, &id);
        stored.sort();
        assert_eq!(stored, listed_objects(&results, &done), "no orphan part");
    }
    let pq_id = submit(&server, &job("parquet", "fanned"));
    let done = server.wait_job(&pq_id, Duration::from_secs(600));
    assert_eq!(done["status"], "completed", "{done}");
    let parts = done["resultParts"].as_array().unwrap();
    same_parquet(&whole_pq, &parquet_files(dir.path(), &pq_id, parts));

    // kill -9 while the ranges run, then a restart on the same directory.
    let id = submit(&server, &job("v2", "killed"));
    let started = Instant::now();
    loop {
        let (_, v) = server.request("GET", &format!("/v1/fetcher/{id}"), None, &[]);
        if v["progress"]["rows"].as_u64().unwrap_or(0) > PG_ROWS / 3 {
            break;
        }
        assert_ne!(v["status"], "completed", "finished before the kill: {v}");
        assert!(started.elapsed() < Duration::from_secs(300), "{v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut server = server;
    server.kill();
    let server = Server::start_with(dir.path(), &args, None, &fan_env);
    let done = server.wait_job(&id, Duration::from_secs(600));
    assert_eq!(done["status"], "completed", "{done}");
    let joined = ndjson(dir.path(), &id);
    assert!(
        joined == whole[0].1,
        "not one run's bytes after the restart"
    );
    let mut stored = objects_of(&results, &id);
    stored.sort();
    assert_eq!(stored, listed_objects(&results, &done), "no orphan part");
}
