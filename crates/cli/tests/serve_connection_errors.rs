//! #53 item 1: a connection test, a schema discovery and a failed job say why a connection
//! failed, each with its documented code, in our words (never the driver's): the login
//! refused, the database unknown, nothing listening at host:port, no answer in time, the
//! TLS handshake failed. PostgreSQL and MariaDB on their real servers.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const MY_PASSWORD: &str = "connection-errors-test-only";
/// A CA that signed nothing: the local server's certificate never verifies against it.
const UNRELATED_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUO9nh2CWtWixEILuipMWc+p/Awc4wCgYIKoZIzj0EAwIw\nLjEsMCoGA1UEAwwjZmV0Y2hlciB0ZXN0IENBIHRoYXQgc2lnbmVkIG5vdGhpbmcw\nIBcNMjYxMjA3MDYyMDE0WhgPMjEyNjExMTMwNjIwMTRaMC4xLDAqBgNVBAMMI2Zl\ndGNoZXIgdGVzdCBDQSB0aGF0IHNpZ25lZCBub3RoaW5nMFkwEwYHKoZIzj0CAQYI\nKoZIzj0DAQcDQgAELhEYYyWguh1YRnMjeIB1DqTqAKmme9nnrPaoOkbVaARUh9fI\nSxzIcqcNE1t14w3JQA4o9uwAa7jJLI41LUiiUqNTMFEwHQYDVR0OBBYEFD9O1Ejo\nzZNL8slCu3Oad6oIpp3/MB8GA1UdIwQYMBaAFD9O1EjozZNL8slCu3Oad6oIpp3/\nMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgC6V5ghK1F7XvHWP5\n8ePaXBFocvNYhTJx1I7VOUjsjnMCIQDEBEvyWkqgMarrM4KQ44b1tBeWCtqws9tD\n9a0Zs2ZURg==\n-----END CERTIFICATE-----\n";

/// Registers `body` (product `reporter`) and returns its id.
fn register(server: &Server, body: &Value) -> String {
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(body),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

#[test]
fn connection_failures_say_what_to_fix() {
    let db = PgDb::create("fetcher_why");
    psql(&db.0, "CREATE TABLE t (id bigint PRIMARY KEY)");
    let user = format!("why_{}", free_port());
    mysql(
        None,
        &format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY '{MY_PASSWORD}'; GRANT SELECT ON *.* TO '{user}'@'%'"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    // One worker, so the job below queues behind a blocker while its login changes.
    let server = Server::start(dir.path(), &["--workers", "1"]);
    let closed_port = free_port();
    // A listener that accepts and never says a word (MySQL waits for the server's hello).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let pg = |name: &str, port: u16, database: &str, user: &str, ssl: Option<&str>| {
        let mut c = json!({"configName": name, "type": "POSTGRESQL", "host": "127.0.0.1", "port": port,
            "databaseName": database, "userName": user, "password": "unused"});
        if let Some(mode) = ssl {
            c["ssl"] = json!({"mode": mode, "ca": UNRELATED_CA});
        }
        c
    };
    let my = |name: &str, port: u16, database: &str, password: &str| {
        json!({"configName": name, "type": "MYSQL", "host": "127.0.0.1", "port": port,
            "databaseName": database, "userName": user, "password": password})
    };
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            pg("pg-no-role", 5432, &db.0, "no_such_role_here", None),
            422,
            "FET-0416",
        ),
        (
            pg("pg-no-db", 5432, "no_such_database_here", "postgres", None),
            422,
            "FET-0417",
        ),
        (
            pg("pg-closed", closed_port, &db.0, "postgres", None),
            422,
            "FET-0418",
        ),
        (
            pg("pg-tls", 5432, &db.0, "postgres", Some("verify-full")),
            422,
            "FET-0420",
        ),
        (
            my("my-password", 3306, "mysql", "wrong-password"),
            422,
            "FET-0416",
        ),
        (
            my("my-no-db", 3306, "no_such_database_here", MY_PASSWORD),
            422,
            "FET-0417",
        ),
        (
            my("my-silent", silent_port, "mysql", MY_PASSWORD),
            504,
            "FET-0419",
        ),
    ];
    for (body, status, code) in &cases {
        let name = body["configName"].as_str().unwrap();
        let id = register(&server, body);
        for route in ["test", "schema"] {
            let (method, path) = match route {
                "test" => ("POST", format!("/v1/management/connections/{id}/test")),
                _ => ("GET", format!("/v1/management/connections/{id}/schema")),
            };
            let (got, answer) =
                server.request(method, &path, None, &[("X-Product-Name", "reporter")]);
            assert_eq!(
                (got, answer["code"].as_str()),
                (*status, Some(*code)),
                "{name} {route}: {answer}"
            );
            let text = answer.to_string();
            for driver in [
                "password authentication",
                "Access denied",
                "FATAL",
                "os error",
            ] {
                assert!(
                    !text.contains(driver),
                    "{name} {route}: driver text in {text}"
                );
            }
        }
    }
    // A job whose login is refused when it runs says so in its error.
    let good = my("my-later", 3306, "mysql", MY_PASSWORD);
    register(&server, &good);
    let lock = lock_table(&db, "t", 2);
    let ledger = pg("ledger", 5432, &db.0, "postgres", None);
    register(&server, &ledger);
    let post = |body: Value| {
        let (status, job) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
        assert_eq!(status, 202, "{job}");
        job["jobId"].as_str().unwrap().to_owned()
    };
    std::thread::sleep(Duration::from_millis(300));
    let _blocker = post(
        json!({"dataRequest": {"mappedFields": {"ledger": {"t": ["id"]}}},
                               "metadata": {"source": "reporter"}}),
    );
    let later = post(
        json!({"dataRequest": {"mappedFields": {"my-later": {"user": ["User"]}}},
                            "metadata": {"source": "reporter"}}),
    );
    mysql(
        None,
        &format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'changed-meanwhile'"),
    );
    let job = server.wait_job(&later, Duration::from_secs(30));
    assert_eq!(job["status"], "failed", "{job}");
    let error = job["metadata"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("the datasource refused the login"), "{job}");
    drop(server);
    drop(silent);
    let mut lock = lock;
    let _ = lock.wait();
    mysql(None, &format!("DROP USER IF EXISTS '{user}'@'%'"));
}

/// #53 item 7: a server with trust authentication asks for no password, and a connection
/// to it says so with an empty one (a password left out is still a missing field).
#[test]
fn a_server_that_asks_for_no_password_takes_an_empty_one() {
    let db = PgDb::create("fetcher_nopass");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let pg = json!({"configName": "pg-trust", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
        "databaseName": db.0, "userName": "postgres", "password": ""});
    let my = json!({"configName": "my-nopass", "type": "MYSQL", "host": "127.0.0.1", "port": 3306,
        "databaseName": "mysql", "userName": "root", "password": ""});
    for body in [&pg, &my] {
        let id = register(&server, body);
        let (status, answer) = server.request(
            "POST",
            &format!("/v1/management/connections/{id}/test"),
            None,
            &[("X-Product-Name", "reporter")],
        );
        assert_eq!(status, 200, "{body}: {answer}");
    }
    // A type the deployment stores but cannot read says so, and which it reads.
    let oracle = json!({"configName": "ora", "type": "ORACLE", "host": "127.0.0.1", "port": 1521,
        "databaseName": "orcl", "userName": "scott", "password": "tiger"});
    let id = register(&server, &oracle);
    let expected = "Connection 'ora' is of type ORACLE, which this deployment stores but cannot read: tests, discovery and jobs work on POSTGRESQL, MONGODB, MYSQL, SQLITE.";
    for (method, path, body) in [
        (
            "POST",
            format!("/v1/management/connections/{id}/test"),
            None,
        ),
        (
            "GET",
            format!("/v1/management/connections/{id}/schema"),
            None,
        ),
        (
            "POST",
            "/v1/fetcher".to_owned(),
            Some(
                json!({"dataRequest": {"mappedFields": {"ora": {"t": ["id"]}}}, "metadata": {"source": "reporter"}}),
            ),
        ),
    ] {
        let (status, answer) = server.request(
            method,
            &path,
            body.as_ref(),
            &[("X-Product-Name", "reporter")],
        );
        assert_eq!(
            (status, answer["code"].as_str(), answer["message"].as_str()),
            (422, Some("FET-0421"), Some(expected)),
            "{path}"
        );
    }
    let mut forgot = pg.clone();
    forgot["configName"] = json!("pg-forgot");
    forgot.as_object_mut().unwrap().remove("password");
    let (status, answer) = server.request(
        "POST",
        "/v1/management/connections",
        Some(&forgot),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!((status, answer["code"].as_str()), (400, Some("FET-0402")));
    assert_eq!(
        answer["fields"]["password"],
        r#"password is a required field (send "" for a server that asks for none)"#
    );
}
