//! (One file over 800 lines: each mode is a pair loop over the shared harness above it;
//! the log mode, whose database is a private cluster of its own, is `log.rs`;
//! MongoDB, whose datasource setup is its own, is `mongo.rs`.)
//!
//! End-to-end extraction bench: a real `fetcher serve` (POST a job, poll it to
//! `completed`; the result is sealed v2 NDJSON in the local result directory) against
//! the database's own export of the same table to a file (`psql \copy`, `mysql -B` with
//! `--mysql`, or the `sqlite3` shell's `-csv` with `--sqlite`, on a file under serve's
//! `--sqlite-dir`), run in alternating turns in one run. The summary gives wall and CPU
//! ratios to that peer, and serve's CPU-seconds per job, per 1M rows and per GB of the
//! plaintext NDJSON (#54's table in the README).
//!
//! ```text
//! cargo build --profile bench -p fetcher --bin fetcher --bin bench-serve
//! target/release/bench-serve --rows 1000000 --pairs 5   # the bench profile builds into target/release
//! ```
//!
//! The table is `bench-extract`'s (bigint, uuid, text, numeric(18,4), int, bool,
//! timestamptz, nullable text; MariaDB: the same in its types). Prints, per pair, both wall times and their ratio; then
//! the median ratio, `serve`'s CPU seconds per job (from `/proc/<pid>/stat`), `psql`'s
//! (its rusage), and `serve`'s peak RSS over one job (VmHWM, reset before each job
//! through `/proc/<pid>/clear_refs`). Needs PostgreSQL on 127.0.0.1:5432 (user
//! `postgres`, trust auth) and `psql`, or MariaDB on 127.0.0.1:3306 (root, no password)
//! and `mysql`; creates and drops a scratch database.
//!
//! `--partitions 1,2,4` runs one `serve` per value of `--read-partitions` (PostgreSQL
//! partitioned reads) in the same alternation: per value, the wall ratio to the peer, the
//! speed-up over the first value, CPU and peak RSS; every job's result HMAC must be the
//! same (the partitioned result is byte-identical).
//!
//! `--parquet` compares a Parquet job (`"resultFormat":"parquet"`) with an NDJSON job of
//! the same table through the same `serve` instead, in alternating turns: wall ratio,
//! CPU seconds and peak RSS of both, and the stored sizes.
//!
//! `--segments SECS` runs the NDJSON job on a second `serve` whose segments stop after
//! SECS seconds (a long job continued from its checkpoint, `FETCHER_TEST_SEGMENT_SECS`)
//! against one uninterrupted run, alternating: wall and CPU ratios, peak RSS, parts.
//!
//! `--fanout N` runs the NDJSON job on a second `serve` of N workers whose jobs cut the
//! table into N key ranges read at once (fan-out, `FETCHER_FANOUT_RANGES`) against one
//! uninterrupted run, alternating: the same figures.
//!
//! `--traces` runs the NDJSON job on a second `serve` that exports its traces over OTLP/HTTP
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, to a loopback receiver in this process) against one that exports none, alternating: what tracing costs a job.
//!
//! `--cursor` (with `--segments`, on either database) indexes `ts` and makes every job an
//! incremental one of a sync of its own on cursor `ts` (key `id`): the whole table read in
//! `(ts, id)` order, so each continued segment reads past a watermark
//! (`ts >= ? AND (ts > ? OR id > ?) ORDER BY ts, id`) instead of past a key.
//!
//! `--mongo` reads a MongoDB collection of the same 8 fields (`_id` an int64, a UUID
//! binary, a string, a Decimal128, an int32, a bool, a date, a string missing from every
//! third document) from the wire server on `MONGO_PORT` (27117, `./scripts/mongo
//! start`), against the official Rust driver's own read of it with the same query (the
//! fields projected, `_id` order; raw BSON documents, counted and dropped: the most a
//! client of this driver can do, no command event handler on the read path), run as a
//! child process so its CPU is measured the same way.
//!
//! `--log` (PostgreSQL, `log.rs`) reads a table from the write-ahead log on the private
//! `wal_level=logical` cluster of `scripts/pg-logical`: a sync's snapshot, then per pair
//! a scattered 1% of the rows updated and, alternating, a full job of the table and the
//! sync's next log job: wall and CPU (serve's, and the database cluster's) of both.
//!
//! `--incremental` (PostgreSQL) indexes the cursor (`ts, id`), runs a sync's first
//! (full) incremental job, then per pair moves 1% of the rows past the watermark (a fresh
//! 1% each pair, `ts` bumped) and runs, in alternating order, a full job of the table and
//! the sync's next incremental job: the wall ratio incremental/full, and each
//! incremental job must have read exactly the moved rows.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod log;
mod mongo;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
/// The scratch MariaDB user's password (a local bench database only).
const MARIA_PASSWORD: &str = "bench-only-password";
const COLUMNS: [&str; 8] = ["id", "u", "t", "n", "i", "b", "ts", "nt"];

struct Serve {
    child: Child,
    port: u16,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn psql(db: &str, sql: &str) {
    let st = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            db,
            "-c",
            sql,
        ])
        .stdout(Stdio::null())
        .status()
        .expect("psql");
    assert!(st.success(), "psql failed: {sql}");
}

fn mysql(db: &str, sql: &str) -> Vec<u8> {
    let out = Command::new("mysql")
        .args(["-h", "127.0.0.1", "-u", "root", "-B", "-N", db, "-e", sql])
        .output()
        .expect("mysql");
    assert!(out.status.success(), "mysql failed: {sql}");
    out.stdout
}

/// The PostgreSQL `bench` table of `rows` rows, as SQL.
fn pg_bench_table(rows: u64) -> String {
    format!(
        "CREATE TABLE bench (id bigint PRIMARY KEY, u uuid NOT NULL, t text NOT NULL, n numeric(18,4) NOT NULL, \
         i int NOT NULL, b bool NOT NULL, ts timestamptz NOT NULL, nt text); \
         INSERT INTO bench SELECT g, md5(g::text)::uuid, 'name-' || g, (g * 1.2345)::numeric(18,4), (g % 100000)::int, \
           g % 2 = 0, '2024-01-01T00:00:00Z'::timestamptz + g * interval '1 second', \
           CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, {rows}) g"
    )
}

/// Which database the bench runs against.
#[derive(Clone, Copy, PartialEq)]
enum Db {
    Postgres,
    Maria,
    Mongo,
    /// `--sqlite`: a file under serve's `--sqlite-dir`, against the `sqlite3` shell's CSV.
    Sqlite,
}

/// `--sqlite`: where the bench's SQLite files live (serve's `--sqlite-dir`).
fn sqlite_dir() -> PathBuf {
    std::env::temp_dir().join(format!("bench_serve_sqlite_{}", std::process::id()))
}

fn sqlite(db: &str, sql: &str) -> Vec<u8> {
    let file = sqlite_dir().join(format!("{db}.db"));
    let out = Command::new("sqlite3")
        .args(["-csv", "-bail"])
        .arg(&file)
        .arg(sql)
        .output()
        .expect("sqlite3");
    assert!(out.status.success(), "sqlite3 failed: {sql}");
    out.stdout
}

impl Db {
    fn create(self, db: &str, rows: u64) {
        match self {
            Db::Mongo => mongo::create(db, rows),
            Db::Sqlite => {
                std::fs::create_dir_all(sqlite_dir()).unwrap();
                sqlite(
                    db,
                    &format!(
                        "CREATE TABLE bench (id INTEGER PRIMARY KEY, u TEXT NOT NULL, t TEXT NOT NULL, \
                         n DECIMAL(18,4) NOT NULL, i INT NOT NULL, b BOOLEAN NOT NULL, ts TEXT NOT NULL, nt TEXT); \
                         INSERT INTO bench WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {rows}) \
                         SELECT x, lower(hex(randomblob(16))), 'name-' || x, round(x * 1.2345, 4), x % 100000, x % 2 = 0, \
                         strftime('%Y-%m-%dT%H:%M:%SZ', 1704067200 + x, 'unixepoch'), \
                         CASE WHEN x % 3 = 0 THEN NULL ELSE 'note ' || x END FROM g"
                    ),
                );
            }
            Db::Postgres => {
                psql("postgres", &format!("CREATE DATABASE {db}"));
                psql(db, &pg_bench_table(rows));
                psql(db, "VACUUM ANALYZE bench");
            }
            Db::Maria => {
                mysql("", &format!("CREATE DATABASE {db}"));
                mysql(
                    db,
                    &format!(
                        "CREATE TABLE bench (id bigint PRIMARY KEY, u char(36) NOT NULL, t varchar(64) NOT NULL, \
                         n decimal(18,4) NOT NULL, i int NOT NULL, b bool NOT NULL, ts timestamp(6) NOT NULL, nt text); \
                         INSERT INTO bench SELECT seq, uuid(), CONCAT('name-', seq), seq * 1.2345, seq % 100000, seq % 2 = 0, \
                         TIMESTAMP '2024-01-01 00:00:00' + INTERVAL (seq % 100000000) SECOND, \
                         IF(seq % 3 = 0, NULL, CONCAT('note ', seq)) FROM seq_1_to_{rows}"
                    ),
                );
                // The API requires a password; root has none here.
                mysql(
                    db,
                    &format!(
                        "CREATE USER IF NOT EXISTS 'fetcher_bench'@'%' IDENTIFIED BY '{MARIA_PASSWORD}'; \
                         GRANT SELECT ON {db}.* TO 'fetcher_bench'@'%'"
                    ),
                );
            }
        }
    }

    fn drop(self, db: &str) {
        match self {
            Db::Mongo => mongo::drop(db),
            Db::Sqlite => {
                let _ = std::fs::remove_dir_all(sqlite_dir());
            }
            Db::Postgres => psql("postgres", &format!("DROP DATABASE {db} WITH (FORCE)")),
            Db::Maria => {
                mysql("", &format!("DROP DATABASE {db}"));
            }
        }
    }

    fn connection(self, db: &str) -> Value {
        if let Db::Mongo = self {
            return mongo::connection(db);
        }
        if let Db::Sqlite = self {
            // A file under serve's --sqlite-dir: no server, so the server fields are
            // placeholders the API requires.
            return json!({"configName": "bench", "type": "SQLITE", "host": "localhost", "port": 1,
                "databaseName": format!("{db}.db"), "userName": "bench", "password": ""});
        }
        let (kind, port, user) = match self {
            Db::Mongo | Db::Sqlite => unreachable!(),
            Db::Postgres => ("POSTGRESQL", 5432, "postgres"),
            Db::Maria => ("MYSQL", 3306, "fetcher_bench"),
        };
        // PostgreSQL here uses trust auth (any password does).
        json!({"configName": "bench", "type": kind, "host": "127.0.0.1", "port": port,
            "databaseName": db, "userName": user, "password": MARIA_PASSWORD})
    }

    /// The database's own export to `out`: wall time and the client's CPU seconds.
    fn export(self, db: &str, out: &Path) -> (Duration, f64) {
        let cpu0 = children_cpu_seconds();
        let started = Instant::now();
        let select = format!("SELECT {} FROM bench ORDER BY id", COLUMNS.join(", "));
        match self {
            Db::Postgres => psql(db, &format!("\\copy ({select}) TO '{}'", out.display())),
            Db::Maria => std::fs::write(out, mysql(db, &select)).unwrap(),
            Db::Mongo => mongo::export(db, out),
            Db::Sqlite => std::fs::write(out, sqlite(db, &select)).unwrap(),
        }
        (started.elapsed(), children_cpu_seconds() - cpu0)
    }

    fn peer(self) -> &'static str {
        match self {
            Db::Postgres => "psql",
            Db::Maria => "mysql",
            Db::Mongo => "driver",
            Db::Sqlite => "sqlite3",
        }
    }
}

fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to serve");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nX-Product-Name: bench\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, serde_json::from_str(rest).unwrap_or(Value::Null))
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn children_cpu_seconds() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn start_serve(fetcher: &Path, data_dir: &Path, partitions: usize, env: &[(&str, &str)]) -> Serve {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(fetcher)
        // No result ceiling: the 10M-row result is over the default 256 MiB.
        .args(["serve", "--drain-delay", "0", "--max-result-bytes", "0"])
        .arg("--read-partitions")
        .arg(partitions.to_string())
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--sqlite-dir")
        .arg({
            let dir = sqlite_dir();
            std::fs::create_dir_all(&dir).unwrap();
            dir
        })
        .env("FETCHER_MASTER_KEY", KEY)
        .env("FETCHER_LOG", "warn")
        // One job at a time, read whole: the modes below set otherwise.
        .env("FETCHER_WORKERS", "1")
        .env("FETCHER_FANOUT_RANGES", "1")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn fetcher serve");
    let serve = Serve { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    serve
}

struct OursRun {
    wall: Duration,
    cpu: f64,
    peak_mib: f64,
    size: u64,
    /// The result's HMAC: the same plaintext gives the same HMAC under one key.
    hmac: String,
    /// Rows the job read.
    rows: u64,
    /// Bytes of the plaintext NDJSON (the job's progress figure).
    plain_bytes: u64,
    /// Parts of the result (0: one object).
    parts: usize,
}

fn run_ours(serve: &Serve, data_dir: &Path, run: usize) -> OursRun {
    run_job(serve, data_dir, run, "v2")
}

fn run_job(serve: &Serve, data_dir: &Path, run: usize, format: &str) -> OursRun {
    let mut body = json!({
        "dataRequest": {"mappedFields": {"bench": {"bench": mongo::fields()}}},
        "metadata": {"source": "bench", "run": run},
        "resultFormat": format
    });
    if cursor_mode() {
        // A sync of its own per run: its first job reads the whole table in (ts, id) order.
        body["incremental"] = json!({"bench": {"bench": {"cursor": "ts"}}});
        body["syncId"] = json!(format!("bench-{run}"));
    }
    run_body(serve, data_dir, &body)
}

/// `--cursor`: every job reads in the order of an indexed cursor column.
fn cursor_mode() -> bool {
    std::env::args().any(|a| a == "--cursor")
}

/// Runs the job `body` to completion and measures it.
fn run_body(serve: &Serve, data_dir: &Path, body: &Value) -> OursRun {
    let pid = serve.child.id();
    // Reset the peak-RSS counter so the reading covers this job only.
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
    let cpu0 = cpu_seconds(pid);
    let started = Instant::now();
    let (status, created) = http(serve.port, "POST", "/v1/fetcher", Some(body));
    assert!(status == 202 || status == 201, "{status} {created}");
    let id = created["jobId"].as_str().expect("job id").to_owned();
    let job = loop {
        let (_, job) = http(serve.port, "GET", &format!("/v1/fetcher/{id}"), None);
        match job["status"].as_str() {
            Some("completed") => break job,
            Some("failed") | Some("canceled") => panic!("job ended {job}"),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let wall = started.elapsed();
    let cpu = cpu_seconds(pid) - cpu0;
    let path = job["resultPath"].as_str().unwrap_or_default();
    let manifest = std::fs::metadata(data_dir.join("results").join(path))
        .map(|m| m.len())
        .unwrap_or(0);
    // A Parquet job's result is its manifest plus the parts it lists.
    let parts: u64 = job["resultParts"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["storedBytes"].as_u64()).sum())
        .unwrap_or(0);
    let size = manifest + parts;
    // The result is not needed once measured (10M rows are 2 GB sealed).
    let _ = std::fs::remove_file(data_dir.join("results").join(path));
    for part in job["resultParts"].as_array().into_iter().flatten() {
        let _ = std::fs::remove_file(
            data_dir
                .join("results")
                .join(part["path"].as_str().unwrap_or_default()),
        );
    }
    OursRun {
        rows: job["progress"]["rows"].as_u64().unwrap_or(0),
        plain_bytes: job["progress"]["bytes"].as_u64().unwrap_or(0),
        parts: job["resultParts"].as_array().map_or(0, Vec::len),
        wall,
        cpu,
        peak_mib: peak_rss_mib(pid),
        size,
        hmac: job["resultHmac"].as_str().unwrap_or_default().to_owned(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Some(db) = std::env::args().skip_while(|a| a != "--mongo-read").nth(1) {
        return mongo::read(&db);
    }
    let rows: u64 = arg("--rows", 1_000_000);
    let pairs: usize = arg("--pairs", 5).clamp(1, 50);
    let fetcher: PathBuf = arg(
        "--fetcher",
        std::env::current_exe().unwrap().with_file_name("fetcher"),
    );
    let kind = if mongo::mode() {
        Db::Mongo
    } else if std::env::args().any(|a| a == "--mysql") {
        Db::Maria
    } else if std::env::args().any(|a| a == "--sqlite") {
        Db::Sqlite
    } else {
        Db::Postgres
    };
    if std::env::args().any(|a| a == "--log") {
        return log::run(&fetcher, rows, pairs);
    }
    let db = format!("bench_serve_{}", std::process::id());
    let load = Instant::now();
    kind.create(&db, rows);
    if cursor_mode() {
        match kind {
            Db::Postgres => psql(
                &db,
                "CREATE INDEX bench_ts ON bench (ts, id); ANALYZE bench",
            ),
            Db::Maria => {
                mysql(
                    &db,
                    "ALTER TABLE bench ADD KEY bench_ts (ts); ANALYZE TABLE bench",
                );
            }
            Db::Mongo | Db::Sqlite => panic!("--cursor runs on PostgreSQL or MariaDB"),
        }
    }
    println!("loaded {rows} rows in {:.1?}", load.elapsed());

    let scratch = std::env::temp_dir().join(&db);
    std::fs::create_dir_all(&scratch).unwrap();
    let copy_out = scratch.join("export.txt");
    let partitions: Vec<usize> = arg("--partitions", "1".to_owned())
        .split(',')
        .map(|p| p.parse().expect("--partitions 1,2,4"))
        .collect();
    // One serve per partition count, each with its own data directory.
    let serves: Vec<(usize, Serve, PathBuf)> = partitions
        .iter()
        .map(|&p| {
            let data_dir = scratch.join(format!("data-p{p}"));
            let serve = start_serve(&fetcher, &data_dir, p, &[]);
            let (status, v) = http(
                serve.port,
                "POST",
                "/v1/management/connections",
                Some(&kind.connection(&db)),
            );
            assert_eq!(status, 201, "{v}");
            (p, serve, data_dir)
        })
        .collect();

    // Warm both (page cache, connection setup, first-job effects).
    kind.export(&db, &copy_out);
    for (_, serve, data_dir) in &serves {
        run_ours(serve, data_dir, 0);
    }
    if std::env::args().any(|a| a == "--incremental") {
        assert!(
            matches!(kind, Db::Postgres),
            "--incremental runs on PostgreSQL"
        );
        let (_, serve, data_dir) = &serves[0];
        incremental_pairs(&db, serve, data_dir, rows, pairs);
        drop(serves);
        let _ = std::fs::remove_dir_all(&scratch);
        kind.drop(&db);
        return;
    }
    let fan: usize = arg("--fanout", 0);
    let secs: f64 = arg("--segments", 0.0);
    let traces = std::env::args().any(|a| a == "--traces");
    // Kept to the end: the traced serve exports into it.
    let receiver = traces.then(fetcher_telemetry::testing::OtlpReceiver::start);
    let sink = receiver
        .as_ref()
        .map(fetcher_telemetry::testing::OtlpReceiver::endpoint)
        .unwrap_or_default();
    if fan > 1 || secs > 0.0 || traces {
        let (n, per_range, secs) = (
            fan.to_string(),
            (rows / fan.max(1) as u64).max(1).to_string(),
            secs.to_string(),
        );
        let (label, env): (&str, Vec<(&str, &str)>) = if traces {
            (
                "traced",
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", sink.as_str())],
            )
        } else if fan > 1 {
            (
                "fanned-out",
                vec![
                    ("FETCHER_WORKERS", n.as_str()),
                    ("FETCHER_FANOUT_RANGES", n.as_str()),
                    ("FETCHER_FANOUT_RANGE_ROWS", per_range.as_str()),
                ],
            )
        } else {
            (
                "segmented",
                vec![("FETCHER_TEST_SEGMENT_SECS", secs.as_str())],
            )
        };
        let (_, serve, data_dir) = &serves[0];
        let other_dir = scratch.join(format!("data-{label}"));
        let other = start_serve(&fetcher, &other_dir, 1, &env);
        let (status, v) = http(
            other.port,
            "POST",
            "/v1/management/connections",
            Some(&kind.connection(&db)),
        );
        assert_eq!(status, 201, "{v}");
        let base = if traces { "untraced" } else { "uninterrupted" };
        segment_pairs(
            (serve, data_dir),
            (&other, &other_dir),
            rows,
            pairs,
            (label, base),
        );
        drop((serves, other));
        let _ = std::fs::remove_dir_all(&scratch);
        kind.drop(&db);
        return;
    }
    if std::env::args().any(|a| a == "--parquet") {
        let (_, serve, data_dir) = &serves[0];
        parquet_pairs(serve, data_dir, rows, pairs);
        drop(serves);
        let _ = std::fs::remove_dir_all(&scratch);
        kind.drop(&db);
        return;
    }

    let n = serves.len();
    let mut ratios = vec![Vec::new(); n];
    let mut speedups = vec![Vec::new(); n];
    let mut runs: Vec<Vec<OursRun>> = (0..n).map(|_| Vec::new()).collect();
    let (mut psql_cpu, mut psql_wall) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        // Alternate the peer first and last, and rotate the partition counts, so drift in
        // the machine's load hits all of them.
        let order: Vec<usize> = (0..n).map(|i| (i + pair) % n).collect();
        let mut ours: Vec<Option<OursRun>> = (0..n).map(|_| None).collect();
        let peer_first = pair % 2 == 1;
        let p = peer_first.then(|| kind.export(&db, &copy_out));
        for &i in &order {
            let (_, serve, data_dir) = &serves[i];
            ours[i] = Some(run_ours(serve, data_dir, pair + 1));
        }
        let p = p.unwrap_or_else(|| kind.export(&db, &copy_out));
        let ours: Vec<OursRun> = ours.into_iter().map(Option::unwrap).collect();
        let mut line = format!(
            "pair {}: {} {:>7.2?} (cpu {:.2} s)",
            pair + 1,
            kind.peer(),
            p.0,
            p.1
        );
        for (i, o) in ours.iter().enumerate() {
            assert_eq!(
                o.hmac, ours[0].hmac,
                "partitioned results differ from the single stream"
            );
            let ratio = o.wall.as_secs_f64() / p.0.as_secs_f64();
            line.push_str(&format!(
                " | P={} {:>7.2?} (cpu {:.2} s, peak {:.0} MiB) ratio {ratio:.2}",
                serves[i].0, o.wall, o.cpu, o.peak_mib
            ));
            ratios[i].push(ratio);
            speedups[i].push(ours[0].wall.as_secs_f64() / o.wall.as_secs_f64());
        }
        println!("{line}");
        psql_wall.push(p.0.as_secs_f64());
        psql_cpu.push(p.1);
        for (i, o) in ours.into_iter().enumerate() {
            runs[i].push(o);
        }
    }
    let per_m = 1_000_000.0 / rows as f64;
    let peer_cpu = median(psql_cpu.clone());
    for (i, (p, _, _)) in serves.iter().enumerate() {
        let r = &runs[i];
        let peaks: Vec<f64> = r.iter().map(|o| o.peak_mib).collect();
        let cpu = median(r.iter().map(|o| o.cpu).collect());
        let gb = r[0].plain_bytes as f64 / 1e9;
        println!(
            "median over {pairs} pairs, P={p}: ratio fetcher/{peer} wall {:.2}, CPU {:.2}; fetcher {:.2} s wall, {:.2} CPU-s per job, {:.2} CPU-s per 1M rows, {:.2} CPU-s per GB of NDJSON ({:.3} GB), peak RSS {:.0} MiB (max {:.0}); speed-up over P={} {:.2}",
            median(ratios[i].clone()),
            cpu / peer_cpu,
            median(r.iter().map(|o| o.wall.as_secs_f64()).collect()),
            cpu,
            cpu * per_m,
            cpu / gb,
            gb,
            median(peaks.clone()),
            peaks.iter().copied().fold(0.0, f64::max),
            serves[0].0,
            median(speedups[i].clone()),
            peer = kind.peer(),
        );
    }
    println!(
        "{peer}: {:.2} s wall, {:.2} CPU-s per 1M rows; every result identical (HMAC {})",
        median(psql_wall),
        median(psql_cpu) * per_m,
        &runs[0][0].hmac[..16.min(runs[0][0].hmac.len())],
        peer = kind.peer(),
    );
    println!(
        "sizes: sealed NDJSON {} bytes, {} text {} bytes",
        runs[0][0].size,
        kind.peer(),
        std::fs::metadata(&copy_out).map(|m| m.len()).unwrap_or(0)
    );
    drop(serves);
    let _ = std::fs::remove_dir_all(&scratch);
    kind.drop(&db);
}

/// `--segments SECS`: the same NDJSON job on a `serve` whose segments stop after SECS
/// seconds (`FETCHER_TEST_SEGMENT_SECS`: the job is continued from its checkpoint many
/// times, through the in-process queue) against one uninterrupted run on another,
/// alternating: wall and CPU ratios, peak RSS of both, and the parts per job.
/// `--fanout N` runs it through the same pairs on a `serve` of N workers that cuts the
/// table into N key ranges, and `--traces` on a `serve` exporting traces (`labels`: the
/// mode's, then the plain run's).
fn segment_pairs(
    plain: (&Serve, &Path),
    segmented: (&Serve, &Path),
    rows: u64,
    pairs: usize,
    (label, base): (&str, &str),
) {
    run_job(segmented.0, segmented.1, 0, "v2");
    let (mut walls, mut cpus, mut whole, mut seg) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for pair in 0..pairs {
        let run = 2000 + pair;
        let (w, s) = if pair % 2 == 0 {
            let w = run_job(plain.0, plain.1, run, "v2");
            (w, run_job(segmented.0, segmented.1, run, "v2"))
        } else {
            let s = run_job(segmented.0, segmented.1, run, "v2");
            (run_job(plain.0, plain.1, run, "v2"), s)
        };
        assert_eq!((w.rows, s.rows), (rows, rows), "every row, in both");
        assert_eq!(w.parts, 0, "the plain run is one object");
        let (wall, cpu) = (s.wall.as_secs_f64() / w.wall.as_secs_f64(), s.cpu / w.cpu);
        println!(
            "pair {}: {label} {:>7.2?} (cpu {:.2} s, peak {:.0} MiB, {} parts)  {base} {:>7.2?} (cpu {:.2} s, peak {:.0} MiB)  ratio wall {wall:.3} cpu {cpu:.3}",
            pair + 1,
            s.wall,
            s.cpu,
            s.peak_mib,
            s.parts,
            w.wall,
            w.cpu,
            w.peak_mib
        );
        walls.push(wall);
        cpus.push(cpu);
        whole.push(w);
        seg.push(s);
    }
    let peak = |runs: &[OursRun]| runs.iter().map(|r| r.peak_mib).fold(0.0, f64::max);
    println!(
        "median over {pairs} pairs: {label}/{base} wall {:.3}, CPU {:.3}; parts per job {}..{}; peak RSS {label} {:.0} MiB (max), {base} {:.0} MiB (max)",
        median(walls),
        median(cpus),
        seg.iter().map(|r| r.parts).min().unwrap_or(0),
        seg.iter().map(|r| r.parts).max().unwrap_or(0),
        peak(&seg),
        peak(&whole)
    );
}

/// `--parquet`: Parquet jobs against NDJSON jobs of the same table, alternating.
fn parquet_pairs(serve: &Serve, data_dir: &Path, rows: u64, pairs: usize) {
    run_job(serve, data_dir, 0, "parquet");
    let (mut ratios, mut pq, mut nd) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..pairs {
        let run = 1000 + 2 * pair;
        let (p, n) = if pair % 2 == 0 {
            let p = run_job(serve, data_dir, run, "parquet");
            (p, run_job(serve, data_dir, run + 1, "v2"))
        } else {
            let n = run_job(serve, data_dir, run + 1, "v2");
            (run_job(serve, data_dir, run, "parquet"), n)
        };
        let ratio = p.wall.as_secs_f64() / n.wall.as_secs_f64();
        println!(
            "pair {}: parquet {:>7.2?} (cpu {:.2} s, peak {:.0} MiB)  ndjson {:>7.2?} (cpu {:.2} s, peak {:.0} MiB)  ratio {ratio:.2}",
            pair + 1,
            p.wall,
            p.cpu,
            p.peak_mib,
            n.wall,
            n.cpu,
            n.peak_mib
        );
        ratios.push(ratio);
        pq.push(p);
        nd.push(n);
    }
    let per_m = 1_000_000.0 / rows as f64;
    let summary = |runs: &[OursRun]| {
        (
            median(runs.iter().map(|r| r.wall.as_secs_f64()).collect()),
            median(runs.iter().map(|r| r.cpu).collect()) * per_m,
            median(runs.iter().map(|r| r.peak_mib).collect()),
            runs.iter().map(|r| r.peak_mib).fold(0.0, f64::max),
            runs.last().map(|r| r.size).unwrap_or(0),
        )
    };
    let (pw, pc, pp, pmax, ps) = summary(&pq);
    let (nw, nc, np, nmax, ns) = summary(&nd);
    println!(
        "median over {pairs} pairs: ratio parquet/ndjson wall {:.2}; parquet {pw:.2} s, {pc:.2} CPU-s per 1M rows, peak RSS {pp:.0} MiB (max {pmax:.0}); ndjson {nw:.2} s, {nc:.2} CPU-s per 1M rows, peak RSS {np:.0} MiB (max {nmax:.0})",
        median(ratios)
    );
    println!(
        "sizes: sealed parquet {ps} bytes, sealed NDJSON {ns} bytes (ratio {:.3})",
        ps as f64 / ns.max(1) as f64
    );
}

/// `--incremental`: a sync's next job after 1% of the table changed, against a full read
/// of the same table and against `psql \copy` of just the changed rows, alternating.
/// `--change append` (default) inserts the 1% as new rows, as a growing table (orders,
/// events) does; `--change update` moves a scattered 1% of the existing rows past the
/// watermark (`ts` bumped), each pair a fresh 1%. After each change `VACUUM ANALYZE`
/// stands in for autovacuum (without it the first reader of freshly updated rows also
/// pays for setting their hint bits, whoever it is).
fn incremental_pairs(db: &str, serve: &Serve, data_dir: &Path, rows: u64, pairs: usize) {
    assert!(
        rows >= 100 && pairs < 100,
        "--rows 100 or more, --pairs below 100"
    );
    let append = match arg("--change", "append".to_owned()).as_str() {
        "append" => true,
        "update" => false,
        other => panic!("--change append|update, not {other}"),
    };
    let started = Instant::now();
    psql(db, "CREATE INDEX bench_cursor ON bench (ts, id)");
    psql(db, "VACUUM ANALYZE bench");
    println!("indexed (ts, id) in {:.1?}", started.elapsed());
    let incremental = |run: usize| {
        json!({
            "dataRequest": {"mappedFields": {"bench": {"bench": COLUMNS}}},
            "metadata": {"source": "bench", "run": run},
            "incremental": {"bench": {"bench": {"cursor": "ts"}}},
            "syncId": "bench-sync"
        })
    };
    let first = run_body(serve, data_dir, &incremental(0));
    assert_eq!(
        first.rows, rows,
        "the sync's first job reads the whole table"
    );
    println!(
        "first incremental job (the whole table): {:.2?}",
        first.wall
    );
    let moved = rows / 100;
    let copy_out = std::env::temp_dir().join(format!("{db}-changed.txt"));
    let (mut vs_full, mut vs_peer) = (Vec::new(), Vec::new());
    let (mut inc, mut full, mut peer) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..pairs {
        // Every changed row's cursor lies past every earlier one: 2030 + a day per pair.
        let base = format!(
            "'2030-01-01T00:00:00Z'::timestamptz + interval '1 day' * {pair} + interval '1 millisecond'"
        );
        let change = if append {
            let from = rows + pair as u64 * moved + 1;
            format!(
                "INSERT INTO bench SELECT g, md5(g::text)::uuid, 'name-' || g, (g * 1.2345)::numeric(18,4), (g % 100000)::int, \
                 g % 2 = 0, {base} * g, CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END \
                 FROM generate_series({from}, {}) g",
                from + moved - 1
            )
        } else {
            format!(
                "UPDATE bench SET ts = {base} * id, t = 'moved-{pair}-' || id WHERE id % 100 = {pair} AND id <= {rows}"
            )
        };
        let changed = Instant::now();
        psql(db, &change);
        psql(db, "VACUUM ANALYZE bench");
        let changed = changed.elapsed();
        let since = format!("'2030-01-01T00:00:00Z'::timestamptz + interval '1 day' * {pair}");
        let peer_sql = format!(
            "\\copy (SELECT {} FROM bench WHERE ts > {since} ORDER BY ts, id) TO '{}'",
            COLUMNS.join(", "),
            copy_out.display()
        );
        let body = incremental(1 + pair);
        // Rotate who goes first, so the machine's drift hits all three.
        let (mut i, mut f, mut p) = (None, None, None);
        for turn in 0..3 {
            match (turn + pair) % 3 {
                0 => i = Some(run_body(serve, data_dir, &body)),
                1 => f = Some(run_job(serve, data_dir, 1000 + pair, "v2")),
                _ => {
                    let t = Instant::now();
                    psql(db, &peer_sql);
                    p = Some(t.elapsed());
                }
            }
        }
        let (i, f, p) = (i.unwrap(), f.unwrap(), p.unwrap());
        let total = rows + if append { (pair as u64 + 1) * moved } else { 0 };
        assert_eq!(f.rows, total, "the full read");
        assert_eq!(
            i.rows, moved,
            "the incremental job reads exactly the changed rows"
        );
        let (rf, rp) = (
            i.wall.as_secs_f64() / f.wall.as_secs_f64(),
            i.wall.as_secs_f64() / p.as_secs_f64(),
        );
        println!(
            "pair {}: {} {moved} rows ({changed:.1?} with VACUUM); incremental {:>7.2?} (cpu {:.2} s, peak {:.0} MiB)  full {:>7.2?}  psql \\copy of the changed rows {:>7.2?}  ratio to full {rf:.4}, to psql {rp:.2}",
            pair + 1,
            if append { "appended" } else { "updated" },
            i.wall,
            i.cpu,
            i.peak_mib,
            f.wall,
            p,
        );
        vs_full.push(rf);
        vs_peer.push(rp);
        inc.push(i.wall.as_secs_f64());
        full.push(f.wall.as_secs_f64());
        peer.push(p.as_secs_f64());
    }
    let _ = std::fs::remove_file(&copy_out);
    println!(
        "median over {pairs} pairs ({} 1%): ratio incremental/full wall {:.4}, incremental/psql {:.2}; incremental {:.3} s, full {:.2} s, psql {:.3} s",
        if append { "appended" } else { "updated" },
        median(vs_full),
        median(vs_peer),
        median(inc),
        median(full),
        median(peer)
    );
}
