//! `fetcher serve` fails closed on its settings: the real binary, started with a weak or
//! missing token key, exits at start with a clear message and never listens.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Runs `serve` with `args` and `env`; it must exit non-zero within 20 s. Its stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    refused_with(dir.path(), args, env)
}

/// [`refused`] over a given data directory.
fn refused_in(data_dir: &std::path::Path, args: &[&str]) -> String {
    refused_with(data_dir, args, &[])
}

fn refused_with(data_dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fetcher"));
    cmd.args(["serve", "--data-dir"])
        .arg(data_dir)
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

/// A JWT key without --multi-tenant requires tokens (the tenant stays `default`), and a
/// private key given as the RS256 public key stops the start (#30).
#[test]
fn a_jwt_key_requires_tokens_and_must_be_a_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    let key = b"0123456789abcdef0123456789abcdef";
    std::fs::write(&secret, key).unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--jwt-hs256-secret-file", secret.to_str().unwrap()],
    );
    let (status, body) = server.request("GET", "/v1/management/connections", None, &[]);
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("MISSING_TOKEN")),
        "{body}"
    );
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 60;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"sub": "me", "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(key),
    )
    .unwrap();
    let bearer = format!("Bearer {token}");
    let (status, body) = server.request(
        "GET",
        "/v1/management/connections",
        None,
        &[("Authorization", &bearer)],
    );
    assert_eq!(status, 200, "{body}");
    drop(server);

    let private = dir.path().join("private.pem");
    std::fs::write(
        &private,
        include_str!("../../http/tests/http_support/test_rsa_private.pem"),
    )
    .unwrap();
    let err = refused(&["--jwt-rs256-public-key", private.to_str().unwrap()], &[]);
    assert!(err.contains("private key"), "{err}");
}

const DEMO_JOB: &str = r#"{"dataRequest":{"mappedFields":{"demo":{"orders":["id","customer_id","total","status","ordered_at"]}}},"metadata":{"source":"demo"}}"#;

#[cfg(unix)]
#[test]
fn the_data_directory_is_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // An existing, world-readable directory is tightened too.
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = Server::start(&data, &["--demo"]);
    let body: serde_json::Value = serde_json::from_str(DEMO_JOB).unwrap();
    let (status, created) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
    assert_eq!(status, 202, "{created}");
    let job = server.wait_job(created["jobId"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(job["status"], "completed", "{job}");
    // The directory, fetcher.db, demo.sqlite, master.key, results/…, the result object.
    let entries = owner_only_tree(&data);
    assert!(entries.len() >= 6, "{entries:?}");
    // Loosened while it was stopped, at every depth: the restart tightens them all.
    drop(server);
    for path in &entries {
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let nested = entries
        .iter()
        .filter(|p| p.strip_prefix(&data).unwrap().components().count() >= 3)
        .count();
    assert!(nested >= 1, "a result below a subdirectory: {entries:?}");
    let _server = Server::start(&data, &[]);
    assert_eq!(owner_only_tree(&data).len(), entries.len());
}

/// `result open --hmac` opens only the result with that HMAC: by job id a different one
/// stops before any output, by path the object's own HMAC must match (#30).
#[test]
fn result_open_checks_the_hmac_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--demo"]);
    let body: serde_json::Value = serde_json::from_str(DEMO_JOB).unwrap();
    let (_, created) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
    let job = server.wait_job(created["jobId"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(job["status"], "completed", "{job}");
    drop(server);
    let id = job["id"].as_str().unwrap();
    let right = job["resultHmac"].as_str().unwrap();
    let wrong = format!(
        "{}{}",
        if right.starts_with('0') { "1" } else { "0" },
        &right[1..]
    );
    let path = job["resultPath"].as_str().unwrap();
    let (ok, rows, err) = open_result_with(&data, id, &["--hmac", right]);
    assert!(ok && rows.lines().count() == 200, "{err}");
    for target in [id, path] {
        let (ok, _, err) = open_result_with(&data, target, &["--hmac", &wrong]);
        assert!(!ok, "{target} opened with a wrong --hmac");
        assert!(err.contains("hmac") || err.contains("HMAC"), "{err}");
    }
    let (ok, by_path, err) = open_result_with(&data, path, &["--hmac", right]);
    assert!(ok, "{err}");
    assert_eq!(by_path, rows);
}

/// A connection whose host name does not resolve is 422 `FET-0415` on its test and its
/// schema, on the real connectors (#30): the caller has a host to fix, the server did not
/// fail.
#[test]
fn an_unresolvable_host_is_a_422_on_test_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let body = serde_json::json!({"configName": "nowhere", "type": "POSTGRESQL",
        "host": "nowhere.invalid", "port": 5432, "databaseName": "test",
        "userName": "postgres", "password": "x"});
    let product = [("X-Product-Name", "reporter")];
    let (status, created) =
        server.request("POST", "/v1/management/connections", Some(&body), &product);
    assert_eq!(status, 201, "{created}");
    let url = format!(
        "/v1/management/connections/{}",
        created["id"].as_str().unwrap()
    );
    for (method, path) in [
        ("POST", format!("{url}/test")),
        ("GET", format!("{url}/schema")),
    ] {
        let (status, answer) = server.request(method, &path, None, &product);
        assert_eq!(
            (status, answer["code"].as_str()),
            (422, Some("FET-0415")),
            "{method} {path}: {answer}"
        );
        assert!(!answer.to_string().contains("nowhere.invalid"), "{answer}");
    }
}

/// Every entry under `root` (itself included), asserting directories 0700, files 0600.
#[cfg(unix)]
fn owner_only_tree(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut seen = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{}", path.display());
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode, 0o600, "{}", path.display());
        }
        seen.push(path);
    }
    seen
}

#[test]
fn a_private_network_list_reaching_metadata_or_loopback_stops_serve() {
    for bad in [
        "169.254.169.254/32",
        "127.0.0.0/8",
        "10.0.0.0/16,169.254.0.0/16",
    ] {
        let err = refused(&["--private-networks", bad], &[]);
        assert!(err.contains("never admitted"), "{bad}: {err}");
    }
    let err = refused(&[], &[("FETCHER_PRIVATE_NETWORKS", "0.0.0.0/0")]);
    assert!(err.contains("0.0.0.0/0"), "{err}");
}

#[test]
fn the_result_size_limit_is_a_serve_setting() {
    let dir = tempfile::tempdir().unwrap();
    let body: serde_json::Value = serde_json::from_str(DEMO_JOB).unwrap();
    let run = |data: &str, extra: &[&str]| {
        let mut args = vec!["--demo"];
        args.extend_from_slice(extra);
        let server = Server::start(&dir.path().join(data), &args);
        let (status, created) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
        assert_eq!(status, 202, "{created}");
        server.wait_job(created["jobId"].as_str().unwrap(), Duration::from_secs(30))
    };
    // 200 orders are about 24 KB of NDJSON.
    let small = run("small", &["--max-result-bytes", "4096"]);
    assert_eq!(small["status"], "failed", "{small}");
    // The failure names the ceiling and the setting that raises it.
    let said = small["metadata"]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("4096 bytes") && said.contains("--max-result-bytes"),
        "{said}"
    );
    let big = run("unbounded", &["--max-result-bytes", "0"]);
    assert_eq!(big["status"], "completed", "{big}");
    let err = refused(&["--max-result-bytes=-1"], &[]);
    assert!(err.contains("max-result-bytes"), "{err}");
}

/// An HS256 token for `claims` (what an identity provider would issue).
fn hs256_token(secret: &[u8], claims: &serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let input = format!(
        "{}.{}",
        b64(br#"{"alg":"HS256","typ":"JWT"}"#),
        b64(claims.to_string().as_bytes())
    );
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    let tag = aws_lc_rs::hmac::sign(&key, input.as_bytes());
    format!("{input}.{}", b64(tag.as_ref()))
}

#[test]
fn the_demo_runs_in_multi_tenant_mode_for_the_demo_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let secret = b"0123456789abcdef0123456789abcdef";
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, secret).unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &[
            "--demo",
            "--multi-tenant",
            "--jwt-hs256-secret-file",
            secret_file.to_str().unwrap(),
        ],
    );
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let demo = format!(
        "Bearer {}",
        hs256_token(secret, &serde_json::json!({"tenantId": "demo", "exp": exp}))
    );
    let other = format!(
        "Bearer {}",
        hs256_token(
            secret,
            &serde_json::json!({"tenantId": "other", "exp": exp})
        )
    );
    let body: serde_json::Value = serde_json::from_str(DEMO_JOB).unwrap();
    let (status, created) = server.request(
        "POST",
        "/v1/fetcher",
        Some(&body),
        &[("authorization", &demo)],
    );
    assert_eq!(status, 202, "{created}");
    let id = created["jobId"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let (_, job) = server.request(
            "GET",
            &format!("/v1/fetcher/{id}"),
            None,
            &[("authorization", &demo)],
        );
        if matches!(job["status"].as_str(), Some("completed" | "failed"))
            || Instant::now() > deadline
        {
            break job;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(job["status"], "completed", "{job}");
    // Another tenant does not see the demo connection, and no tenant may add a SQLite one.
    let (status, list) = server.request(
        "GET",
        "/v1/management/connections",
        None,
        &[("authorization", &other)],
    );
    assert_eq!(
        (status, list["total"].clone()),
        (200, serde_json::json!(0)),
        "{list}"
    );
    let lite = serde_json::json!({"configName": "mine", "type": "SQLITE", "host": "localhost",
        "port": 1, "databaseName": "demo.sqlite", "userName": "u", "password": "p"});
    let (status, refused) = server.request(
        "POST",
        "/v1/management/connections",
        Some(&lite),
        &[("authorization", &other), ("x-product-name", "p")],
    );
    assert_eq!(
        (status, refused["code"].clone()),
        (400, serde_json::json!("FET-0414"))
    );
}

#[test]
fn a_sqlite_directory_holding_the_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for sqlite_dir in [data.clone(), dir.path().to_path_buf(), data.join("inner")] {
        std::fs::create_dir_all(&sqlite_dir).unwrap();
        let mut cmd_args = vec!["--sqlite-dir", sqlite_dir.to_str().unwrap()];
        cmd_args.push("--demo");
        let err = refused_in(&data, &cmd_args);
        assert!(
            err.contains("data directory"),
            "{}: {err}",
            sqlite_dir.display()
        );
    }
}

#[test]
fn every_log_line_of_a_request_and_its_job_carries_the_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut server = Server::start_logged(
        &dir.path().join("data"),
        &["--demo", "--log-json"],
        Some(&log),
    );
    let ok: serde_json::Value = serde_json::from_str(DEMO_JOB).unwrap();
    let mut bad = ok.clone();
    bad["dataRequest"]["mappedFields"] = serde_json::json!({"demo": {"orders": ["amount"]}});
    let mut jobs = Vec::new();
    // The bad one first, before any discovery has cached the schema: it is queued and
    // fails, naming the unknown field.
    for (body, rid) in [(&bad, "trace-bad-42"), (&ok, "trace-ok-41")] {
        let (status, created) =
            server.request("POST", "/v1/fetcher", Some(body), &[("x-request-id", rid)]);
        assert_eq!(status, 202, "{created}");
        let id = created["jobId"].as_str().unwrap().to_owned();
        let job = server.wait_job(&id, Duration::from_secs(30));
        if rid.starts_with("trace-bad") {
            assert_eq!(job["status"], "failed", "{job}");
            assert_eq!(
                job["metadata"]["error"],
                "engine: [validation] extraction request failed schema validation: unknown field 'demo.orders.amount'"
            );
        }
        jobs.push((id, rid));
    }
    server.terminate();
    let text = std::fs::read_to_string(&log).unwrap();
    for (id, rid) in &jobs {
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(id.as_str())).collect();
        assert!(!lines.is_empty(), "no log line names job {id}:\n{text}");
        for line in lines {
            assert!(line.contains(rid), "{rid} missing from {line}");
        }
    }
}

#[test]
fn readiness_probes_the_result_directory_and_start_sweeps_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // What a crash left: a half-written result.
    let leftover = data.join("results/external-data/.tmp-0000");
    std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
    std::fs::write(&leftover, vec![1u8; 1024]).unwrap();
    let server = Server::start(&data, &["--demo"]);
    assert!(!leftover.exists(), "the start sweep removes it");
    let (status, body) = server.request("GET", "/readyz", None, &[]);
    assert_eq!(status, 200, "{body}");
    // The result directory becomes unusable: readiness says so.
    std::fs::remove_dir_all(data.join("results")).unwrap();
    std::fs::write(data.join("results"), b"not a directory").unwrap();
    let (status, body) = server.request("GET", "/readyz", None, &[]);
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("results"), "{body}");
}

#[test]
fn oversized_request_heads_get_the_documented_error_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let big = "x".repeat(1024 * 1024);
    let (status, body) = server.request("GET", "/v1/fetcher/abc", None, &[("x-padding", &big)]);
    assert_eq!(status, 431, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"code": 431, "title": "request_failed", "message": "Request Header Fields Too Large"})
    );
    // #52 item 7: what hyper answers itself is JSON too: a request line over 64 KiB (414)
    // and a request line it cannot parse (400).
    let long = format!("/v1/fetcher/{}", "a".repeat(70 * 1024));
    let (status, body) = server.request("GET", &long, None, &[]);
    assert_eq!(status, 414, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"code": 414, "title": "request_failed", "message": "URI Too Long"})
    );
    let (status, body) = server.request("GET", "/health\u{1}x", None, &[]);
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"code": 400, "title": "request_failed", "message": "Bad Request"})
    );
    let many: Vec<(String, String)> = (0..300).map(|i| (format!("x-h{i}"), "v".into())).collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (status, _) = server.request("GET", "/health", None, &refs);
    assert_eq!(status, 200, "300 header lines are fine");
}

#[test]
fn the_lease_is_a_setting_within_bounds() {
    for bad in ["2", "3601", "soon"] {
        let err = refused(&["--lease-secs", bad], &[]);
        assert!(err.contains("lease-secs"), "{bad}: {err}");
    }
    let err = refused(&[], &[("FETCHER_LEASE_SECS", "0")]);
    assert!(err.contains("lease-secs"), "{err}");
}

/// One raw HTTP/1.1 request with the given `Host` and extra header lines; the status and
/// the response head (lowercased).
fn raw_request(port: u16, method: &str, host: &str, extra: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    let head = text.split("\r\n\r\n").next().unwrap_or_default().to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head)
}

#[test]
fn serve_answers_only_its_own_host_names_and_no_foreign_origin() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Server::start(&dir.path().join("plain"), &[]);
    let p = plain.port;
    // DNS rebinding: a name that is not ours is refused before routing.
    for (host, want) in [
        (format!("evil.example:{p}"), 421),
        (format!("127.0.0.1.evil.example:{p}"), 421),
        (format!("127.0.0.1:{p}"), 200),
        (format!("localhost:{p}"), 200),
        (format!("[::1]:{p}"), 200),
    ] {
        assert_eq!(raw_request(p, "GET", &host, "").0, want, "{host}");
    }
    // No CORS by default: a preflight gets no allow-origin.
    let preflight = "Origin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n";
    let (_, head) = raw_request(p, "OPTIONS", &format!("127.0.0.1:{p}"), preflight);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    drop(plain);

    let configured = Server::start(
        &dir.path().join("configured"),
        &[
            "--allowed-hosts",
            "fetcher.internal",
            "--cors-origins",
            "HTTPS://App.Example",
        ],
    );
    let p = configured.port;
    assert_eq!(
        raw_request(p, "GET", &format!("fetcher.internal:{p}"), "").0,
        200
    );
    assert_eq!(
        raw_request(p, "GET", &format!("evil.example:{p}"), "").0,
        421
    );
    let (_, head) = raw_request(p, "OPTIONS", &format!("127.0.0.1:{p}"), preflight);
    assert!(
        head.contains("access-control-allow-origin: https://app.example"),
        "{head}"
    );
    let other = "Origin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\n";
    let (_, head) = raw_request(p, "OPTIONS", &format!("127.0.0.1:{p}"), other);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    drop(configured);

    for (flag, bad) in [
        ("--cors-origins", "*"),
        ("--cors-origins", "https://app.example/path"),
        ("--cors-origins", "app.example"),
        ("--cors-origins", "https://*.example"),
        ("--cors-origins", "https://app.example:*"),
        ("--workers", "0"),
        ("--allowed-hosts", "http://x.example"),
        ("--allowed-hosts", "x.example:80"),
    ] {
        let err = refused(&[flag, bad], &[]);
        assert!(err.contains(flag), "{flag} {bad}: {err}");
    }
}

/// Reads from `s` until the server closes it; the time that took and what it sent.
fn until_closed(s: &mut std::net::TcpStream) -> (Duration, String) {
    use std::io::Read;
    let started = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (
        started.elapsed(),
        String::from_utf8_lossy(&got).into_owned(),
    )
}

/// #37: idle, slow-head and slow-body clients are cut off by the listener's timeouts, and
/// past the connection cap the listener waits for a slot instead of running out of files.
#[test]
fn slow_and_idle_clients_are_cut_off_and_connections_are_capped() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--header-timeout",
            "1",
            "--request-timeout",
            "2",
            "--max-http-connections",
            "4",
        ],
    );
    let p = server.port;
    let connect = || std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
    let bound = Duration::from_secs(4);

    // An idle connection that never sends a byte.
    let (took, _) = until_closed(&mut connect());
    assert!(took < bound, "idle connection open {took:?}");
    // A head that never ends.
    let mut slow = connect();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let (took, _) = until_closed(&mut slow);
    assert!(took < bound, "slow head open {took:?}");
    // A keep-alive connection idle after its answer.
    let mut kept = connect();
    kept.write_all(format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n").as_bytes())
        .unwrap();
    let (took, answer) = until_closed(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < bound, "idle keep-alive open {took:?}");
    // A body that never arrives in full: 408 with a JSON body, then closed.
    let mut body = connect();
    body.write_all(
        format!(
            "POST /v1/fetcher HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"data"
        )
        .as_bytes(),
    )
    .unwrap();
    let (took, answer) = until_closed(&mut body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"title\":\"request_failed\""), "{answer}");
    assert!(took < Duration::from_secs(5), "slow body open {took:?}");

    // Four silent connections fill the cap: a fifth client is answered at once, the
    // oldest silent one closed for it (#52 item 5).
    let idle: Vec<_> = (0..4).map(|_| connect()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, _) = raw_request(p, "GET", &format!("127.0.0.1:{p}"), "");
    assert_eq!(status, 200);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(500),
        "the fifth client waited {waited:?}"
    );
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    // Four that have spoken (heads begun) are not closed for it: the fifth is answered
    // once the header timeout frees a slot, not refused and not left hanging.
    let speaking: Vec<_> = (0..4)
        .map(|_| {
            let mut c = connect();
            c.write_all(b"GET /health HTTP/1.1\r\n").unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, _) = raw_request(p, "GET", &format!("127.0.0.1:{p}"), "");
    assert_eq!(status, 200);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < bound,
        "the fifth client waited {waited:?} behind four speaking ones"
    );
    drop(speaking);
}

/// #37: the framework's own rejections answer JSON too (a path parameter that is not
/// UTF-8).
#[test]
fn a_path_parameter_that_is_not_utf8_answers_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, body) = server.request("GET", "/v1/fetcher/%FF%FE", None, &[]);
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], 400, "{body}");
    assert_eq!(body["title"], "request_failed", "{body}");
}

/// #53 item 2: a master key that is not the data directory's stops the start with what
/// to do, instead of a serve on which every stored connection then looks broken.
#[test]
fn a_master_key_that_is_not_the_directorys_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    drop(server);
    let err = refused_with(
        &data,
        &[],
        &[(
            "FETCHER_MASTER_KEY",
            "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=",
        )],
    );
    assert!(err.contains("sealed with another master key"), "{err}");
    // The right key still starts it.
    let server = Server::start(&data, &[]);
    let (status, _) = server.request("GET", "/health", None, &[]);
    assert_eq!(status, 200);
}
