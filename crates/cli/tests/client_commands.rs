//! The `fetcher` binary as a client of the API (`connections`, `jobs`, `syncs`): against a
//! running `serve` and a real PostgreSQL, a connection registered from a URL, tested and
//! discovered, a job created and watched to its end, listed, read and refused a cancel;
//! exit codes say how a job ended, and API refusals print their code and message; a
//! sync's schedule set, shown, paused, resumed and removed.

mod common;

use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// Runs `fetcher <args>` against `server`; the product is `reporter`.
fn fetcher(server: &Server, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(args)
        .env(
            "FETCHER_API_URL",
            format!("http://127.0.0.1:{}", server.port),
        )
        .env("FETCHER_PRODUCT", "reporter")
        .env_remove("FETCHER_TOKEN")
        .output()
        .expect("run fetcher")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).expect("JSON on stdout")
}

#[test]
fn connections_and_jobs_are_driven_from_the_command_line() {
    let db = PgDb::create("fetcher_client");
    psql(
        &db.0,
        "CREATE TABLE users (id int PRIMARY KEY, name text); \
         INSERT INTO users SELECT g, 'user-' || g FROM generate_series(1, 500) g; ANALYZE users",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);

    // A connection from a URL (trust auth: the password is not checked).
    let url = format!("postgresql://postgres:unused@127.0.0.1:5432/{}", db.0);
    let created = json(&fetcher(
        &server,
        &[
            "connections",
            "create",
            "--name",
            "ledger",
            "--url",
            &url,
            "-o",
            "json",
        ],
    ));
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(
        !created.to_string().contains("unused"),
        "no password echoed: {created}"
    );
    let listed = ok(&fetcher(&server, &["connections", "list"]));
    assert!(listed.starts_with("ID "), "a table: {listed}");
    assert!(
        listed.contains("ledger") && listed.contains("POSTGRESQL"),
        "{listed}"
    );
    let tested = ok(&fetcher(&server, &["connections", "test", &id]));
    assert!(
        tested.contains("success") || tested.contains("ok"),
        "{tested}"
    );
    let schema = ok(&fetcher(&server, &["connections", "schema", &id]));
    assert!(
        schema.contains("users") && schema.contains("id integer (key)"),
        "{schema}"
    );

    // A job from a body file, watched to its end: exit 0, the completed job printed.
    let body = dir.path().join("job.json");
    std::fs::write(
        &body,
        r#"{"dataRequest": {"mappedFields": {"ledger": {"users": ["id", "name"]}}},
            "metadata": {"source": "reporter", "run": "cli"}}"#,
    )
    .unwrap();
    let watched = fetcher(
        &server,
        &[
            "jobs",
            "create",
            body.to_str().unwrap(),
            "--watch",
            "-o",
            "json",
        ],
    );
    let job = json(&watched);
    assert_eq!(job["status"], "completed", "{job}");
    let progress = String::from_utf8_lossy(&watched.stderr);
    assert!(
        progress.contains("completed"),
        "a progress line: {progress}"
    );
    let job_id = job["id"].as_str().unwrap().to_owned();

    let jobs = ok(&fetcher(
        &server,
        &["jobs", "list", "--status", "completed"],
    ));
    assert!(
        jobs.contains(&job_id) && jobs.contains("reporter"),
        "{jobs}"
    );
    assert!(jobs.contains("of 1;"), "the page line: {jobs}");
    let got = json(&fetcher(&server, &["jobs", "get", &job_id, "-o", "json"]));
    assert_eq!(got["resultPath"], job["resultPath"]);

    // A cancel of a job that ended: the API's code and message, exit 1.
    let refused = fetcher(&server, &["jobs", "cancel", &job_id]);
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("HTTP 409 FET-1023"), "{said}");

    // A job that fails: watch exits 1 and says why.
    std::fs::write(
        &body,
        r#"{"dataRequest": {"mappedFields": {"ledger": {"users": ["id"]}}},
            "metadata": {"source": "reporter", "run": "fails"}}"#,
    )
    .unwrap();
    psql(
        &db.0,
        "REVOKE ALL ON users FROM PUBLIC; ALTER TABLE users RENAME TO gone",
    );
    let failed = fetcher(
        &server,
        &["jobs", "create", body.to_str().unwrap(), "--watch"],
    );
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let said = String::from_utf8_lossy(&failed.stderr);
    assert!(said.contains("failed"), "{said}");

    // No API at the address: a clear message, exit 1.
    let nowhere = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args([
            "jobs",
            "list",
            "--api-url",
            &format!("http://127.0.0.1:{}", free_port()),
        ])
        .output()
        .unwrap();
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&nowhere.stderr).contains("could not reach the API"),
        "{nowhere:?}"
    );
    drop(server);
}

#[test]
fn a_schedule_is_set_and_changed_from_the_command_line() {
    let db = PgDb::create("fetcher_client_sched");
    psql(
        &db.0,
        "CREATE TABLE orders (id int PRIMARY KEY, updated_at timestamptz NOT NULL)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(
            &serde_json::json!({"configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1",
            "port": 5432, "databaseName": db.0, "userName": "postgres", "password": "unused"}),
        ),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    let request = dir.path().join("request.json");
    std::fs::write(
        &request,
        serde_json::json!({
            "dataRequest": {"mappedFields": {"ledger": {"orders": ["id"]}}},
            "incremental": {"ledger": {"orders": {"cursor": "updated_at"}}},
            "metadata": {"source": "reporter"}
        })
        .to_string(),
    )
    .unwrap();
    let request = request.to_str().unwrap();
    let set = json(&fetcher(
        &server,
        &[
            "syncs",
            "schedule",
            "orders",
            "set",
            request,
            "--cron",
            "0 6 * * 1-5",
            "--time-zone",
            "Europe/Paris",
            "-o",
            "json",
        ],
    ));
    assert_eq!(set["cron"], "0 6 * * 1-5");
    assert_eq!(set["timeZone"], "Europe/Paris");
    assert_eq!(set["request"]["syncId"], "orders");
    let got = json(&fetcher(
        &server,
        &["syncs", "schedule", "orders", "-o", "json"],
    ));
    assert_eq!(got["state"], "active");
    let paused = json(&fetcher(
        &server,
        &["syncs", "schedule", "orders", "pause", "-o", "json"],
    ));
    assert_eq!(paused["state"], "paused");
    let resumed = json(&fetcher(
        &server,
        &["syncs", "schedule", "orders", "resume", "-o", "json"],
    ));
    assert_eq!(resumed["state"], "active");

    // A refusal prints the API's code and message.
    let bad = fetcher(
        &server,
        &[
            "syncs", "schedule", "orders", "set", request, "--rate", "PT10S",
        ],
    );
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        said.contains("FET-1030") && said.contains("one minute"),
        "{said}"
    );

    ok(&fetcher(
        &server,
        &["syncs", "schedule", "orders", "delete"],
    ));
    let gone = fetcher(&server, &["syncs", "schedule", "orders"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("FET-1001"));

    // The sync list: a job of the sync makes it one; listed as JSON and as a table.
    let (status, job) = server.request(
        "POST",
        "/v1/fetcher",
        Some(&serde_json::json!({
            "dataRequest": {"mappedFields": {"ledger": {"orders": ["id"]}}},
            "incremental": {"ledger": {"orders": {"cursor": "updated_at"}}},
            "syncId": "orders",
            "metadata": {"source": "reporter"}
        })),
        &[],
    );
    assert_eq!(status, 202, "{job}");
    let listed = json(&fetcher(&server, &["syncs", "list", "-o", "json"]));
    assert_eq!(listed["items"][0]["syncId"], "orders", "{listed}");
    let table = ok(&fetcher(&server, &["syncs", "list", "--limit", "1"]));
    assert!(
        table.contains("SYNC") && table.contains("orders"),
        "{table}"
    );
    assert!(table.contains("(more: --after orders)"), "{table}");
}
