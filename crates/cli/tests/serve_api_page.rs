//! The API page (docs/api.md, "The API page"): `/swagger/` serves Swagger UI from assets
//! built into the binary, reading `/openapi.json`, and `/` leads to it. Checked in a real
//! browser: headless Chromium (Debian's `chromium`, which `./scripts/test` installs)
//! loads the page with no network beyond the server, and the page renders every operation
//! of the OpenAPI description.

mod common;

use std::process::Command;

use common::*;

/// Headless Chromium's rendered DOM of `url` (scripts run for up to 20 s of virtual time).
fn rendered(url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=20000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .expect("chromium (Debian's package: ./scripts/test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_api_page_renders_every_operation_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);

    // `/` leads to the page (a redirect, which the browser below follows).
    let (status, _) = http(server.port, "GET", "/", None, &[]).unwrap();
    assert!(matches!(status, 301..=308), "{status}");

    let (status, doc) = server.request("GET", "/openapi.json", None, &[]);
    assert_eq!(status, 200);
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                operations.push((method.to_owned(), path.clone()));
            }
        }
    }
    assert!(operations.len() > 15, "{operations:?}");

    let dom = rendered(&format!("http://127.0.0.1:{}/", server.port));
    assert!(
        dom.contains("swagger-ui"),
        "the page loads Swagger UI: {}",
        &dom[..dom.len().min(2000)]
    );
    let blocks = dom.matches("opblock-summary-method").count();
    assert_eq!(blocks, operations.len(), "one block per operation");
    for (method, path) in &operations {
        assert!(
            dom.contains(&format!("data-path=\"{path}\"")),
            "{method} {path} is not on the page"
        );
    }
}
