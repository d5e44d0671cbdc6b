//! `fetcher serve` end to end with a real PostgreSQL datasource: create a connection,
//! submit a job, wait for it, open the sealed result, compare with the rows; then the
//! crash and shutdown paths.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn seed(db: &PgDb) {
    psql(
        &db.0,
        r#"CREATE TABLE accounts (id bigint PRIMARY KEY, name text NOT NULL, balance numeric(18,4), "Order" int, created_at timestamptz);
           INSERT INTO accounts VALUES
             (1, 'Ada', 10.5000, 3, '2024-05-01 12:00:00+00'),
             (2, 'Grace <&>', -0.0001, NULL, '2024-05-02 08:30:00.123456+00'),
             (3, 'Linus', 9223372036854.7758, 7, NULL);"#,
    );
}

/// Registers `db` as the `ledger` connection of product `reporter`.
fn register_ledger(server: &Server, db: &PgDb) {
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(&connection(db)),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
}

fn connection(db: &PgDb) -> serde_json::Value {
    json!({
        "configName": "ledger",
        "type": "POSTGRESQL",
        "host": "127.0.0.1",
        "port": 5432,
        "databaseName": db.0,
        "userName": "postgres",
        "password": "not-used-with-trust-auth"
    })
}

fn job_body(source: &str) -> serde_json::Value {
    json!({
        "dataRequest": {
            "mappedFields": {"ledger": {"accounts": ["id", "name", "balance", "Order", "created_at"]}},
            "filters": {"ledger": {"accounts": {"id": {"gte": [2]}}}}
        },
        "metadata": {"source": source}
    })
}

const EXPECTED: &str = concat!(
    r#"{"config":"ledger","table":"accounts","row":{"Order":null,"balance":"-0.0001","created_at":"2024-05-02T08:30:00.123456Z","id":2,"name":"Grace \u003c\u0026\u003e"}}"#,
    "\n",
    r#"{"config":"ledger","table":"accounts","row":{"Order":7,"balance":"9223372036854.7758","created_at":null,"id":3,"name":"Linus"}}"#,
    "\n"
);

#[test]
fn serve_extracts_from_postgres_and_the_result_opens() {
    let db = PgDb::create("fetcher_e2e");
    seed(&db);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);

    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(&connection(&db)),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    assert!(
        !created.to_string().contains("not-used-with-trust-auth"),
        "the password is never returned"
    );
    let (status, test) = server.request(
        "POST",
        &format!(
            "/v1/management/connections/{}/test",
            created["id"].as_str().unwrap()
        ),
        None,
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 200, "{test}");

    let (status, accepted) =
        server.request("POST", "/v1/fetcher", Some(&job_body("reporter")), &[]);
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["jobId"].as_str().unwrap().to_owned();
    // The identical request while it is active or just completed: the same job, 200.
    let (status, dup) = server.request("POST", "/v1/fetcher", Some(&job_body("reporter")), &[]);
    assert_eq!(
        (status, dup["jobId"].as_str()),
        (200, Some(id.as_str())),
        "{dup}"
    );

    let job = server.wait_job(&id, Duration::from_secs(60));
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["resultPath"], format!("external-data/{id}.ndjson.v2"));
    assert_eq!(job["resultHmac"].as_str().unwrap().len(), 64);

    let (ok, out, err) = open_result(dir.path(), &id);
    assert!(ok, "{err}");
    assert_eq!(out, EXPECTED);

    // The event log has exactly one job.completed for it, with the reference fields.
    let events = std::fs::read_to_string(dir.path().join("events.ndjson")).unwrap();
    let mine: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["detail"]["jobId"] == id.as_str())
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["id"], format!("fetcher.job.completed.{id}"));
    assert_eq!(mine[0]["detail"]["result"]["hmac"], job["resultHmac"]);
    assert_eq!(mine[0]["detail"]["result"]["rowCount"], 2);

    // A bad table fails the job with a sanitised error; the HTTP request itself succeeds.
    let mut bad = job_body("reporter");
    bad["dataRequest"]["mappedFields"] = json!({"ledger": {"missing_table": ["id"]}});
    bad["dataRequest"]["filters"] = json!({});
    // The job above cached the schema: a mapping it refutes is refused at creation, with
    // validate-schema's body, instead of queueing a job that must fail.
    let (status, refused) = server.request("POST", "/v1/fetcher", Some(&bad), &[]);
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["errors"],
        json!([{"type": "TABLE_NOT_FOUND", "dataSourceId": "ledger", "table": "missing_table"}])
    );
}

#[test]
fn a_job_interrupted_by_a_crash_is_taken_over_after_restart() {
    let db = PgDb::create("fetcher_crash");
    seed(&db);
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    register_ledger(&server, &db);
    // Hold an exclusive lock so the extraction blocks mid-job.
    let mut locker = lock_table(&db, "accounts", 6);
    std::thread::sleep(Duration::from_millis(500));
    let (status, accepted) =
        server.request("POST", "/v1/fetcher", Some(&job_body("reporter")), &[]);
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["jobId"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(1500));
    let (_, during) = server.request("GET", &format!("/v1/fetcher/{id}"), None, &[]);
    assert_eq!(during["status"], "processing", "{during}");
    server.kill(); // SIGKILL: no chance to clean up
    let _ = locker.wait();

    let server = Server::start(dir.path(), &[]);
    // The lease (30 s) expires, the restarted worker takes the job over.
    let job = server.wait_job(&id, Duration::from_secs(90));
    assert_eq!(job["status"], "completed", "{job}");
    let (ok, out, err) = open_result(dir.path(), &id);
    assert!(ok, "{err}");
    assert_eq!(out, EXPECTED);
}

#[test]
fn sigterm_drains_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn shutdown_is_bounded_by_its_grace_and_hands_abandoned_jobs_back() {
    let db = PgDb::create("fetcher_grace");
    seed(&db);
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--workers", "1", "--shutdown-grace", "2"]);
    register_ledger(&server, &db);
    // The one worker blocks in the database; a second job waits in the queue.
    let mut locker = lock_table(&db, "accounts", 10);
    std::thread::sleep(Duration::from_millis(500));
    let mut ids = Vec::new();
    for filter in [2, 3] {
        let mut body = job_body("reporter");
        body["dataRequest"]["filters"]["ledger"]["accounts"]["id"] = json!({"gte": [filter]});
        let (status, accepted) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
        assert_eq!(status, 202, "{accepted}");
        ids.push(accepted["jobId"].as_str().unwrap().to_owned());
    }
    std::thread::sleep(Duration::from_millis(1000));
    let (_, during) = server.request("GET", &format!("/v1/fetcher/{}", ids[0]), None, &[]);
    assert_eq!(during["status"], "processing", "{during}");
    let started = std::time::Instant::now();
    let status = server.terminate();
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    // Grace 2 s (+ drain 0 s, + the release): nowhere near the blocked query's 10 s.
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    let _ = locker.kill();
    let _ = locker.wait();

    // Both jobs were handed back, not left processing under a lease: a restart runs
    // them at once (a lease left to expire would hold the first for 30 s).
    let server = Server::start(dir.path(), &[]);
    for id in &ids {
        let job = server.wait_job(id, Duration::from_secs(20));
        assert_eq!(job["status"], "completed", "{job}");
    }
}

/// Events of `id` in the event log (waiting up to `timeout` for at least one).
fn events_of(dir: &std::path::Path, id: &str, timeout: Duration) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let log = std::fs::read_to_string(dir.join("events.ndjson")).unwrap_or_default();
        let mine: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["detail"]["jobId"] == id)
            .collect();
        if !mine.is_empty() || std::time::Instant::now() > deadline {
            return mine;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether any stored file's name mentions `id` (a result, finished or partial).
fn leaves_a_file(dir: &std::path::Path, id: &str) -> bool {
    fn walk(p: &std::path::Path, id: &str) -> bool {
        std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let path = e.path();
                if path.is_dir() {
                    walk(&path, id)
                } else {
                    path.file_name().unwrap().to_string_lossy().contains(id)
                }
            })
    }
    walk(dir, id)
}

#[test]
fn serve_reports_progress_and_cancels_pending_and_running_jobs() {
    let db = PgDb::create("fetcher_progress");
    seed(&db);
    psql(
        &db.0,
        "CREATE TABLE big (id bigint PRIMARY KEY, payload text NOT NULL);
         INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(1, 400000) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--workers", "1", "--progress-interval-ms", "200"],
    );
    register_ledger(&server, &db);
    let big = |from: i64| {
        json!({
            "dataRequest": {
                "mappedFields": {"ledger": {"big": ["id", "payload"]}},
                "filters": {"ledger": {"big": {"id": {"gte": [from]}}}}
            },
            "metadata": {"source": "reporter"}
        })
    };
    let submit = |body: &serde_json::Value| {
        let (status, accepted) = server.request("POST", "/v1/fetcher", Some(body), &[]);
        assert_eq!(status, 202, "{accepted}");
        accepted["jobId"].as_str().unwrap().to_owned()
    };

    // Progress rises while the job runs, and ends at the result's figures.
    let id = submit(&big(1));
    let mut seen: Vec<u64> = Vec::new();
    let done = loop {
        let (_, job) = server.request("GET", &format!("/v1/fetcher/{id}"), None, &[]);
        match job["status"].as_str() {
            Some("processing") => {
                if let Some(rows) = job["progress"]["rows"].as_u64()
                    && seen.last() != Some(&rows)
                {
                    seen.push(rows);
                }
            }
            Some("completed") => break job,
            Some("pending") => {}
            other => panic!("{other:?}: {job}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(seen.len() >= 2, "progress rose while processing: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(done["progress"]["rows"], 400_000, "{done}");
    assert_eq!(done["progress"]["tables"], json!({"done": 1, "total": 1}));
    let completed = events_of(dir.path(), &id, Duration::from_secs(5));
    assert_eq!(completed[0]["detail"]["result"]["rowCount"], 400_000);
    assert_eq!(
        completed[0]["detail"]["result"]["sizeBytes"],
        done["progress"]["bytes"]
    );

    // One worker: a running job, and one waiting behind it.
    let running = submit(&big(2));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, job) = server.request("GET", &format!("/v1/fetcher/{running}"), None, &[]);
        if job["status"] == "processing" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{job}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let waiting = submit(&big(3));

    // The waiting one is canceled at once.
    let (status, answer) =
        server.request("POST", &format!("/v1/fetcher/{waiting}/cancel"), None, &[]);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status"], "canceled");

    // The running one is asked, and stops within a few seconds.
    let asked = std::time::Instant::now();
    let (status, answer) =
        server.request("POST", &format!("/v1/fetcher/{running}/cancel"), None, &[]);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status"], "processing", "{answer}");
    let job = server.wait_job(&running, Duration::from_secs(10));
    assert_eq!(job["status"], "canceled", "{job}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );

    // No object left for either, and one job.failed event each.
    for id in [&running, &waiting] {
        assert!(!leaves_a_file(dir.path(), id), "a file of {id} is left");
        let events = events_of(dir.path(), id, Duration::from_secs(10));
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["detail-type"], "job.failed", "{:?}", events[0]);
        assert_eq!(
            events[0]["detail"]["metadata"]["error"]["message"],
            "engine: [canceled] job canceled by request"
        );
    }
    // Terminal: a second cancel is 409.
    let (status, again) =
        server.request("POST", &format!("/v1/fetcher/{running}/cancel"), None, &[]);
    assert_eq!(
        (status, again["code"].as_str()),
        (409, Some("FET-1023")),
        "{again}"
    );
}

#[test]
fn a_parquet_job_opens_into_files_that_pyarrow_reads_as_the_ndjson_job() {
    let db = PgDb::create("fetcher_pq");
    seed(&db);
    psql(
        &db.0,
        "CREATE TABLE empty_one (id int PRIMARY KEY, at date);",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    register_ledger(&server, &db);
    let body = |format: &str| {
        json!({
            "dataRequest": {"mappedFields": {"ledger": {
                "accounts": ["id", "name", "balance", "Order", "created_at"],
                "empty_one": ["id", "at"]}}},
            "metadata": {"source": "reporter"},
            "resultFormat": format
        })
    };
    let (status, nd) = server.request("POST", "/v1/fetcher", Some(&body("v2")), &[]);
    assert_eq!(status, 202, "{nd}");
    let (status, pq) = server.request("POST", "/v1/fetcher", Some(&body("parquet")), &[]);
    assert_eq!(status, 202, "{pq}");
    let nd_id = nd["jobId"].as_str().unwrap().to_owned();
    let pq_id = pq["jobId"].as_str().unwrap().to_owned();
    assert_ne!(nd_id, pq_id, "the format is part of the dedup hash");
    assert_eq!(
        server.wait_job(&nd_id, Duration::from_secs(60))["status"],
        "completed"
    );
    let job = server.wait_job(&pq_id, Duration::from_secs(60));
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["resultFormat"], "parquet");
    assert_eq!(
        job["resultPath"],
        format!("external-data/{pq_id}.manifest.json.v2")
    );
    let parts = job["resultParts"].as_array().expect("parts listed").clone();
    assert_eq!(parts.len(), 2, "{job}");
    assert_eq!(
        (parts[0]["table"].as_str(), parts[0]["rowCount"].as_i64()),
        (Some("accounts"), Some(3))
    );
    assert_eq!(parts[1]["table"], "empty_one");

    // Opening it needs --output-dir; with it, each file is verified and named.
    let (ok, _, err) = open_result(dir.path(), &pq_id);
    assert!(!ok && err.contains("--output-dir"), "{err}");
    let out_dir = dir.path().join("opened");
    let out = open_into(dir.path(), &pq_id, &out_dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["ledger.accounts.parquet", "ledger.empty_one.parquet"]
    );

    // pyarrow reads them as the NDJSON job's rows, with the catalog's types.
    let (ok, ndjson, err) = open_result(dir.path(), &nd_id);
    assert!(ok, "{err}");
    let nd_file = dir.path().join("result.ndjson");
    std::fs::write(&nd_file, ndjson).unwrap();
    let listing = dir.path().join("parts.json");
    let list: Vec<serde_json::Value> = ["accounts", "empty_one"]
        .iter()
        .map(|t| json!({"config": "ledger", "table": t, "file": out_dir.join(format!("ledger.{t}.parquet"))}))
        .collect();
    std::fs::write(&listing, serde_json::to_vec(&list).unwrap()).unwrap();
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/parquet_compare.py");
    let cmp = std::process::Command::new(python())
        .arg(script)
        .arg(&nd_file)
        .arg(&listing)
        .output()
        .unwrap();
    assert!(
        cmp.status.success(),
        "{}{}",
        String::from_utf8_lossy(&cmp.stdout),
        String::from_utf8_lossy(&cmp.stderr)
    );
    let types: serde_json::Value = serde_json::from_slice(&cmp.stdout).unwrap();
    assert_eq!(types["ledger.accounts"]["balance"], "decimal128(18, 4)");
    assert_eq!(
        types["ledger.accounts"]["created_at"],
        "timestamp[us, tz=UTC]"
    );
    assert_eq!(types["ledger.empty_one"]["at"], "date32[day]");

    // #37: a planted `.partial` link is never followed (its target keeps its bytes), and
    // a directory other users can write to is refused unless sticky.
    let planted = dir.path().join("planted");
    std::fs::create_dir(&planted).unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    std::os::unix::fs::symlink(&victim, planted.join("ledger.accounts.parquet.partial")).unwrap();
    let out = open_into(dir.path(), &pq_id, &planted);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not a regular file"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    assert!(!planted.join("ledger.accounts.parquet").exists());
    use std::os::unix::fs::PermissionsExt;
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    // World- or group-writable (#52 item 7: the group may be ours and hold others).
    for mode in [0o777, 0o770, 0o775] {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = open_into(dir.path(), &pq_id, &shared);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("writable by other users"),
            "{mode:o}: {err}"
        );
    }
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = open_into(dir.path(), &pq_id, &shared);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(shared.join("ledger.accounts.parquet"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o077,
        0,
        "decrypted files are the owner's only: {mode:o}"
    );

    // A tampered part is refused and leaves no file under its final name.
    let part_file = dir
        .path()
        .join("results")
        .join(parts[0]["path"].as_str().unwrap());
    let mut sealed = std::fs::read(&part_file).unwrap();
    let mid = sealed.len() / 2;
    sealed[mid] ^= 1;
    std::fs::write(&part_file, sealed).unwrap();
    let again = dir.path().join("again");
    let out = open_into(dir.path(), &pq_id, &again);
    assert!(!out.status.success());
    assert!(!again.join("ledger.accounts.parquet").exists());
    assert!(!again.join("ledger.accounts.parquet.partial").exists());
}

/// #28: a table and a column created after a connection's first job are read by the next
/// job that names them (the cached schema is discovered again), on `serve`'s SQLite
/// schema cache.
#[test]
fn a_table_and_a_column_created_after_the_first_job_are_read_by_the_next() {
    let db = PgDb::create("fetcher_schema_change");
    seed(&db);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    register_ledger(&server, &db);
    let run = |mapped: serde_json::Value, n: u32| {
        let body = json!({"dataRequest": {"mappedFields": {"ledger": mapped}},
            "metadata": {"source": "reporter", "n": n}});
        let (status, accepted) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
        assert_eq!(status, 202, "{accepted}");
        server.wait_job(accepted["jobId"].as_str().unwrap(), Duration::from_secs(60))
    };
    let first = run(json!({"accounts": ["id"]}), 1);
    assert_eq!(first["status"], "completed", "{first}");
    psql(
        &db.0,
        "CREATE TABLE invoices (id bigint PRIMARY KEY, total numeric(10,2));
         INSERT INTO invoices VALUES (7, 12.50);
         ALTER TABLE accounts ADD COLUMN region text DEFAULT 'eu';",
    );
    let next = run(
        json!({"invoices": ["id", "total"], "accounts": ["id", "region"]}),
        2,
    );
    assert_eq!(next["status"], "completed", "{next}");
    let (ok, out, err) = open_result(dir.path(), next["id"].as_str().unwrap());
    assert!(ok, "{err}");
    assert!(
        out.contains(r#"{"config":"ledger","table":"invoices","row":{"id":7,"total":"12.50"}}"#),
        "{out}"
    );
    assert_eq!(out.matches(r#""region":"eu""#).count(), 3, "{out}");
}

/// #37: a job whose retries wait (its datasource unreachable) gives its worker back while
/// it waits, so with one worker an innocent job still finishes within 2 s; a job its own
/// database refuses (a row-level-security policy that raises) fails at once.
#[test]
fn retries_wait_without_a_worker_and_refusals_fail_at_once() {
    let db = PgDb::create("fetcher_retry_free");
    seed(&db);
    let role = format!("{}_rls", db.0);
    psql(
        &db.0,
        &format!(
            "CREATE FUNCTION boom() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'no'; END$$;
             CREATE TABLE guarded (id bigint PRIMARY KEY);
             INSERT INTO guarded VALUES (1);
             ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
             CREATE POLICY p ON guarded USING (boom());
             CREATE ROLE {role} LOGIN;
             GRANT SELECT ON guarded TO {role};"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--workers", "1"]);
    register_ledger(&server, &db);
    // "down" reaches PostgreSQL through a proxy that is cut after the job's creation: its
    // connections then close at once (an outage: retryable).
    let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let streams = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let (flag, open) = (up.clone(), streams.clone());
    std::thread::spawn(move || {
        for client in proxy.incoming().flatten() {
            if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                continue; // dropped: closed at once
            }
            let server = std::net::TcpStream::connect("127.0.0.1:5432").unwrap();
            open.lock().unwrap().push(client.try_clone().unwrap());
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut c, mut s) = (client, server);
            std::thread::spawn(move || std::io::copy(&mut c, &mut s2));
            std::thread::spawn(move || std::io::copy(&mut s, &mut c2));
        }
    });
    let mut down = connection(&db);
    down["configName"] = json!("down");
    down["port"] = json!(proxy_port);
    let mut guarded = connection(&db);
    guarded["configName"] = json!("guarded");
    guarded["userName"] = json!(role);
    for c in [&down, &guarded] {
        let (status, created) = server.request(
            "POST",
            "/v1/management/connections",
            Some(c),
            &[("X-Product-Name", "reporter")],
        );
        assert_eq!(status, 201, "{created}");
    }
    let post = |body: serde_json::Value| {
        let (status, job) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
        assert_eq!(status, 202, "{job}");
        job["jobId"].as_str().unwrap().to_owned()
    };
    // The only worker is busy with a job blocked on a lock while the "down" job queues;
    // then the proxy is cut, the lock ends, and the "down" job fails its first attempt.
    let mut lock = lock_table(&db, "accounts", 3);
    std::thread::sleep(Duration::from_millis(300));
    let blocker = post(
        json!({"dataRequest": {"mappedFields": {"ledger": {"accounts": ["id"]}}},
                              "metadata": {"source": "reporter"}}),
    );
    let stuck = post(
        json!({"dataRequest": {"mappedFields": {"down": {"accounts": ["id"]}}},
                            "metadata": {"source": "reporter"}}),
    );
    up.store(false, std::sync::atomic::Ordering::SeqCst);
    for s in streams.lock().unwrap().drain(..) {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    lock.wait().unwrap();
    let job = server.wait_job(&blocker, Duration::from_secs(30));
    assert_eq!(job["status"], "completed", "{job}");
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let innocent = post(job_body("reporter"));
    let job = server.wait_job(&innocent, Duration::from_secs(30));
    assert_eq!(job["status"], "completed", "{job}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the innocent job waited {:?} behind a retrying one",
        started.elapsed()
    );
    let (_, still) = server.request("GET", &format!("/v1/fetcher/{stuck}"), None, &[]);
    assert!(
        matches!(still["status"].as_str(), Some("pending" | "processing")),
        "{still}"
    );

    let started = std::time::Instant::now();
    let refused = post(
        json!({"dataRequest": {"mappedFields": {"guarded": {"guarded": ["id"]}}},
                              "metadata": {"source": "reporter"}}),
    );
    let job = server.wait_job(&refused, Duration::from_secs(30));
    assert_eq!(job["status"], "failed", "{job}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(server);
    drop(db);
    psql("postgres", &format!("DROP ROLE IF EXISTS {role}"));
}

/// #52 item 1: a connection whose queries run slow (a row-level-security policy that
/// sleeps 3 s) cannot hold every worker. On `serve --workers 2`, three slow jobs of one
/// connection queue first; a job of another connection then completes within 2 s (by
/// default a connection holds at most `--workers` − 1 of them). With the cap raised to
/// every worker, the same job waits behind the slow ones: the setting is what frees it.
#[test]
fn a_slow_connection_cannot_hold_every_worker() {
    let db = PgDb::create("fetcher_fair");
    seed(&db);
    let role = format!("{}_slow", db.0);
    psql(
        &db.0,
        &format!(
            "CREATE FUNCTION sleepy() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(3); RETURN true; END$$;
             CREATE TABLE slow (id bigint PRIMARY KEY);
             INSERT INTO slow VALUES (1);
             ALTER TABLE slow ENABLE ROW LEVEL SECURITY;
             CREATE POLICY p ON slow USING (sleepy());
             CREATE ROLE {role} LOGIN;
             GRANT SELECT ON slow TO {role};"
        ),
    );
    let innocent_wait = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["--workers", "2"];
        args.extend_from_slice(extra);
        let server = Server::start(dir.path(), &args);
        register_ledger(&server, &db);
        let mut slow = connection(&db);
        slow["configName"] = json!("slow");
        slow["userName"] = json!(role);
        let (status, created) = server.request(
            "POST",
            "/v1/management/connections",
            Some(&slow),
            &[("X-Product-Name", "reporter")],
        );
        assert_eq!(status, 201, "{created}");
        let post = |body: serde_json::Value| {
            let (status, job) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
            assert_eq!(status, 202, "{job}");
            job["jobId"].as_str().unwrap().to_owned()
        };
        let slow_jobs: Vec<String> = (0..3)
            .map(|n| {
                post(
                    json!({"dataRequest": {"mappedFields": {"slow": {"slow": ["id"]}}},
                            "metadata": {"source": "reporter", "nonce": n}}),
                )
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let innocent = post(job_body("reporter"));
        let job = server.wait_job(&innocent, Duration::from_secs(30));
        assert_eq!(job["status"], "completed", "{job}");
        let waited = started.elapsed();
        for id in &slow_jobs {
            let job = server.wait_job(id, Duration::from_secs(30));
            assert_eq!(job["status"], "completed", "{job}");
        }
        waited
    };
    let fair = innocent_wait(&[]);
    assert!(
        fair < Duration::from_secs(2),
        "the other connection's job waited {fair:?}"
    );
    let unfair = innocent_wait(&["--max-jobs-per-connection", "2"]);
    eprintln!(
        "innocent job: {fair:?} with the default shares, {unfair:?} when one connection may hold every worker"
    );
    assert!(unfair >= Duration::from_secs(2), "{unfair:?}");
    drop(db);
    psql("postgres", &format!("DROP ROLE IF EXISTS {role}"));
}
