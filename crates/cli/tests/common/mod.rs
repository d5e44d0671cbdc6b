//! Harness for end-to-end tests of the `fetcher` binary: a running `serve`, a minimal
//! HTTP client over loopback, and throwaway PostgreSQL databases.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `fetcher serve` child process; killed on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub data_dir: PathBuf,
}

impl Server {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Self::start_logged(data_dir, extra, None)
    }

    /// [`Server::start`] with its log (`FETCHER_LOG=info`) written to `log`.
    pub fn start_logged(data_dir: &Path, extra: &[&str], log: Option<&Path>) -> Server {
        Self::start_with(data_dir, extra, log, &[])
    }

    /// [`Server::start_logged`] with more environment variables.
    pub fn start_with(
        data_dir: &Path,
        extra: &[&str],
        log: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Server {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fetcher"));
        cmd.args(["serve", "--data-dir"])
            .arg(data_dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("FETCHER_MASTER_KEY", KEY)
            .env("FETCHER_LOG", if log.is_some() { "info" } else { "warn" })
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
                None => Stdio::inherit(),
            });
        let child = cmd.spawn().expect("spawn fetcher serve");
        let server = Server {
            child,
            port,
            data_dir: data_dir.to_path_buf(),
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok((200, _)) = self.try_request("GET", "/health", None, &[]) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("fetcher serve did not become healthy on port {}", self.port);
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> (u16, serde_json::Value) {
        let (status, text) = self
            .try_request(method, path, body, headers)
            .expect("request");
        let json = if text.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
        };
        (status, json)
    }

    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> std::io::Result<(u16, String)> {
        http(
            self.port,
            method,
            path,
            body.map(|b| b.to_string()).as_deref(),
            headers,
        )
    }

    /// Polls the job until it is terminal (bounded).
    pub fn wait_job(&self, id: &str, timeout: Duration) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (status, job) = self.request("GET", &format!("/v1/fetcher/{id}"), None, &[]);
            assert_eq!(status, 200, "{job}");
            if matches!(
                job["status"].as_str(),
                Some("completed" | "failed" | "canceled")
            ) {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} not terminal in time: {job}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for the process to exit (bounded).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP/1.1 client (loopback only): one request per connection.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let body = body.unwrap_or("");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Runs SQL against the local PostgreSQL (trust auth) in `db`.
pub fn psql(db: &str, sql: &str) {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            db,
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-c",
            sql,
        ])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh database, dropped on drop.
pub struct PgDb(pub String);

impl PgDb {
    pub fn create(prefix: &str) -> PgDb {
        let name = format!(
            "{prefix}_{}",
            std::process::id() as u64 * 1000 + (Instant::now().elapsed().as_nanos() % 1000) as u64
        );
        let name = format!("{name}_{}", free_port());
        psql("postgres", &format!("CREATE DATABASE {name}"));
        PgDb(name)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0),
            ])
            .output();
    }
}

/// Runs `fetcher result open` and returns stdout.
pub fn open_result(data_dir: &Path, job_id: &str) -> (bool, String, String) {
    open_result_with(data_dir, job_id, &[])
}

/// [`open_result`] with more arguments (`--hmac …`).
pub fn open_result_with(data_dir: &Path, target: &str, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["result", "open", target, "--quiet", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env("FETCHER_MASTER_KEY", KEY)
        .output()
        .expect("fetcher result open");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Runs SQL against the local MariaDB as root (in `db` when given).
pub fn mysql(db: Option<&str>, sql: &str) {
    let mut cmd = Command::new("mysql");
    cmd.args(["-h", "127.0.0.1", "-u", "root"]);
    if let Some(db) = db {
        cmd.arg(db);
    }
    let out = cmd.args(["-e", sql]).output().expect("mysql");
    assert!(
        out.status.success(),
        "mysql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Holds an exclusive lock on `table` of `db` for `seconds` (a psql child), so an
/// extraction reading it blocks, and the jobs queued behind it wait.
pub fn lock_table(db: &PgDb, table: &str, seconds: u32) -> Child {
    let sql = format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({seconds}); COMMIT;"
    );
    Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", &db.0, "-q", "-c"])
        .arg(sql)
        .spawn()
        .unwrap()
}

/// The project's venv Python with pyarrow (`./scripts/test` creates it).
pub fn python() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("FETCHER_TEST_PYTHON") {
        return p.into();
    }
    let venv = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        venv.exists(),
        "pyarrow is needed: run ./scripts/test once (it creates .venv), or set FETCHER_TEST_PYTHON"
    );
    venv
}

/// `fetcher result open <job> --output-dir <out>` on serve's data directory.
pub fn open_into(
    data_dir: &std::path::Path,
    job: &str,
    out: &std::path::Path,
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["result", "open", job, "--quiet", "--data-dir"])
        .arg(data_dir)
        .arg("--output-dir")
        .arg(out)
        .env("FETCHER_MASTER_KEY", KEY)
        .output()
        .unwrap()
}
