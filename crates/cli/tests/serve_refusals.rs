//! #52 item 2: a login the database refuses at run time (the password changed, the role
//! lost its login after the job was accepted) is an answer, not an outage. On PostgreSQL
//! and MariaDB, with the schema discovered by the run or cached, and with the fan-out
//! planner asking for key spans or not, the job fails within 2 s of starting to run
//! instead of being retried for a minute.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const MY_PASSWORD: &str = "refusals-test-only";

/// A MariaDB database with table `t` and a user of its own that may read it; both
/// dropped on drop.
struct MyDb {
    name: String,
    user: String,
}

impl MyDb {
    fn create() -> MyDb {
        let port = free_port();
        let (name, user) = (format!("fetcher_refused_{port}"), format!("refused_{port}"));
        mysql(None, &format!("CREATE DATABASE {name}"));
        mysql(
            Some(&name),
            &format!(
                "CREATE TABLE t (id BIGINT PRIMARY KEY); INSERT INTO t VALUES (1), (2); \
                 CREATE USER '{user}'@'%' IDENTIFIED BY '{MY_PASSWORD}'; \
                 GRANT SELECT ON {name}.* TO '{user}'@'%'"
            ),
        );
        MyDb { name, user }
    }
}

impl Drop for MyDb {
    fn drop(&mut self) {
        let _ = Command::new("mysql")
            .args(["-h", "127.0.0.1", "-u", "root", "-e"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {}; DROP USER IF EXISTS '{}'@'%'",
                self.name, self.user
            ))
            .output();
    }
}

/// When the job ended, in nanoseconds since the epoch.
fn ended_at(job: &Value) -> i128 {
    let at = job["completedAt"].as_str().expect("completedAt");
    fetcher_engine::Timestamp::parse(at)
        .expect("RFC 3339")
        .unix_nanos()
}

fn refused_logins_fail_at_once(extra: &[&str]) {
    let pg = PgDb::create("fetcher_refused");
    let role = format!("{}_login", pg.0);
    psql(
        &pg.0,
        &format!(
            "CREATE TABLE accounts (id bigint PRIMARY KEY); INSERT INTO accounts VALUES (1), (2);
             CREATE ROLE {role} LOGIN; GRANT SELECT ON accounts TO {role};"
        ),
    );
    let my = MyDb::create();
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--workers", "1"];
    args.extend_from_slice(extra);
    let server = Server::start(dir.path(), &args);
    let pg_conn = |name: &str, user: &str| {
        json!({"configName": name, "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
               "databaseName": pg.0, "userName": user, "password": "unused"})
    };
    let my_conn = |name: &str| {
        json!({"configName": name, "type": "MYSQL", "host": "127.0.0.1", "port": 3306,
               "databaseName": my.name, "userName": my.user, "password": MY_PASSWORD})
    };
    let connections = [
        (pg_conn("ledger", "postgres"), false),
        (pg_conn("pg-fresh", &role), false),
        (pg_conn("pg-cached", &role), true),
        (my_conn("my-fresh"), false),
        (my_conn("my-cached"), true),
    ];
    for (body, cache) in &connections {
        let (status, created) = server.request(
            "POST",
            "/v1/management/connections",
            Some(body),
            &[("X-Product-Name", "reporter")],
        );
        assert_eq!(status, 201, "{created}");
        if *cache {
            let id = created["id"].as_str().unwrap();
            let path = format!("/v1/management/connections/{id}/schema");
            let (status, schema) = server.request("GET", &path, None, &[]);
            assert_eq!(status, 200, "{schema}");
        }
    }
    let post = |config: &str, table: &str| {
        let body = json!({"dataRequest": {"mappedFields": {config: {table: ["id"]}}},
                          "metadata": {"source": "reporter"}});
        let (status, job) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
        assert_eq!(status, 202, "{config}: {job}");
        job["jobId"].as_str().unwrap().to_owned()
    };
    let mut lock = lock_table(&pg, "accounts", 3);
    std::thread::sleep(Duration::from_millis(300));
    let blocker = post("ledger", "accounts");
    // Accepted while the logins work (creation tests each connection), queued behind the
    // blocker; then the logins are refused.
    let refused: Vec<(&str, String)> = ["pg-fresh", "pg-cached", "my-fresh", "my-cached"]
        .into_iter()
        .map(|c| {
            let table = if c.starts_with("pg") { "accounts" } else { "t" };
            (c, post(c, table))
        })
        .collect();
    psql(&pg.0, &format!("ALTER ROLE {role} NOLOGIN"));
    mysql(
        None,
        &format!(
            "ALTER USER '{}'@'%' IDENTIFIED BY 'changed-meanwhile'",
            my.user
        ),
    );
    lock.wait().unwrap();
    let job = server.wait_job(&blocker, Duration::from_secs(30));
    assert_eq!(job["status"], "completed", "{job}");
    // One worker: each job runs after the one before it ended.
    let mut previous = ended_at(&job);
    for (config, id) in &refused {
        let job = server.wait_job(id, Duration::from_secs(30));
        assert_eq!(job["status"], "failed", "{config} {extra:?}: {job}");
        let ended = ended_at(&job);
        let ran = Duration::from_nanos((ended - previous).max(0) as u64);
        assert!(
            ran < Duration::from_secs(2),
            "{config} {extra:?}: a refused login ran {ran:?} before failing: {job}"
        );
        previous = ended;
    }
    drop(server);
    drop(pg);
    psql("postgres", &format!("DROP ROLE IF EXISTS {role}"));
}

#[test]
fn a_login_refused_at_run_time_fails_at_once_with_the_fanout_planner() {
    refused_logins_fail_at_once(&[]);
}

#[test]
fn a_login_refused_at_run_time_fails_at_once_without_fanout() {
    refused_logins_fail_at_once(&["--fanout-ranges", "1"]);
}
