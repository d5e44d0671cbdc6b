//! `fetcher serve` fails closed on its settings: the real binary, started with a weak or
//! missing token key, exits at start with a clear message and never listens.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Runs `serve` with `args` and `env`; it must exit non-zero within 20 s. Its stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fetcher"));
    cmd.args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(args)
        .env("FETCHER_MASTER_KEY", KEY)
        .env_remove("FETCHER_JWT_HS256_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn fetcher serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve {args:?} {env:?} started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{args:?}: {err}");
    err
}

#[test]
fn weak_or_missing_jwt_keys_stop_serve_at_start() {
    let err = refused(&["--multi-tenant", "--jwt-hs256-secret", ""], &[]);
    assert!(err.contains("at least 32"), "{err}");
    let err = refused(&["--multi-tenant"], &[("FETCHER_JWT_HS256_SECRET", "")]);
    assert!(
        err.contains("32") || err.contains("--multi-tenant needs"),
        "{err}"
    );
    let err = refused(&["--multi-tenant", "--jwt-hs256-secret", "too-short"], &[]);
    assert!(err.contains("9 bytes"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "0123456789abcdef0123456789abcde\n").unwrap(); // 31 + newline
    let err = refused(
        &[
            "--multi-tenant",
            "--jwt-hs256-secret-file",
            short.to_str().unwrap(),
        ],
        &[],
    );
    assert!(err.contains("31 bytes"), "{err}");
    let err = refused(
        &[
            "--multi-tenant",
            "--jwt-hs256-secret-file",
            "/nonexistent/secret",
        ],
        &[],
    );
    assert!(err.contains("/nonexistent/secret"), "{err}");
    let err = refused(&["--multi-tenant"], &[]);
    assert!(err.contains("--multi-tenant needs"), "{err}");
    let err = refused(&["--jwt-issuer", "https://idp.example"], &[]);
    assert!(err.contains("need a JWT key"), "{err}");
}

#[test]
fn a_secret_file_configures_multi_tenant_serve() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
    let data = dir.path().join("data");
    let server = Server::start(
        &data,
        &[
            "--multi-tenant",
            "--jwt-hs256-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let (status, body) = server.request("GET", "/v1/management/connections", None, &[]);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["code"], "MISSING_TOKEN");
}
