//! Test harness (feature `testing`): an SDK configuration for the emulators (or real AWS)
//! and the bootstrapped resources.
//!
//! Endpoints resolve like the Lambda binaries resolve them: through the SDK's standard
//! chain, so `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` apply (the LocalStack
//! lane points DynamoDB at moto with `AWS_ENDPOINT_URL_DYNAMODB`; see `scripts/test-aws`).
//! When neither names an endpoint, moto is started through `scripts/moto` (which needs
//! the venv `./scripts/test` creates, or PyPI to create it) and every client uses it.
//! Credentials default to `test`/`test` and the region to `us-east-1` when the
//! environment has none.

use std::path::PathBuf;
use std::sync::OnceLock;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

use crate::Clients;
use crate::bootstrap::{Options, Resources, bootstrap};

/// The workspace root (where `scripts/` lives).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// Whether the environment names an endpoint for any service (then the SDK's chain
/// resolves every client's endpoint, and moto is not started here).
fn endpoints_from_env() -> bool {
    std::env::vars().any(|(k, v)| k.starts_with("AWS_ENDPOINT_URL") && !v.is_empty())
}

/// The endpoint of `service` (the SDK's env name: `DYNAMODB`, `S3`, `SQS`, …) as the
/// binaries would resolve it: `AWS_ENDPOINT_URL_<SERVICE>`, else `AWS_ENDPOINT_URL`,
/// else the moto server this harness starts. Handed to child processes (the e2e test).
pub fn service_endpoint(service: &str) -> String {
    env(&format!("AWS_ENDPOINT_URL_{service}")).unwrap_or_else(endpoint)
}

/// The general endpoint: `AWS_ENDPOINT_URL`, or a moto server started on demand.
pub fn endpoint() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| {
            if let Some(url) = env("AWS_ENDPOINT_URL") {
                return url;
            }
            let script = workspace_root().join("scripts/moto");
            let out = std::process::Command::new(&script)
                .stderr(std::process::Stdio::inherit())
                .output()
                .unwrap_or_else(|e| {
                    panic!("AWS_ENDPOINT_URL is unset and {} could not run ({e}); run ./scripts/test once to create the moto venv", script.display())
                });
            assert!(
                out.status.success(),
                "AWS_ENDPOINT_URL is unset and scripts/moto failed; run ./scripts/test once (it creates the moto venv)"
            );
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .clone()
}

/// An SDK configuration for the emulators: the standard chain, with moto as the one
/// endpoint when the environment names none.
pub async fn config() -> SdkConfig {
    let creds = Credentials::new(
        env("AWS_ACCESS_KEY_ID").unwrap_or_else(|| "test".into()),
        env("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|| "test".into()),
        None,
        None,
        "fetcher-test",
    );
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if !endpoints_from_env() {
        loader = loader.endpoint_url(endpoint());
    }
    loader
        .region(Region::new(
            env("AWS_REGION").unwrap_or_else(|| "us-east-1".into()),
        ))
        .credentials_provider(creds)
        .load()
        .await
}

/// Clients on the emulator (build them per test runtime: SDK connections belong to the
/// runtime that made them).
pub async fn clients() -> Clients {
    Clients::new(&config().await)
}

static RESOURCES: tokio::sync::OnceCell<Resources> = tokio::sync::OnceCell::const_new();

/// The bootstrapped resources, created once per process under a per-process prefix.
pub async fn resources() -> Resources {
    RESOURCES
        .get_or_init(|| async {
            let prefix = format!("fetcher-t{}", std::process::id());
            // A private runtime: the clients used to bootstrap must not belong to a test
            // runtime that ends before the others.
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime")
                    .block_on(async {
                        let c = clients().await;
                        bootstrap(&c, &Options::new(prefix))
                            .await
                            .unwrap_or_else(|e| {
                                panic!("bootstrap on {}: {}", endpoint(), e.log_detail())
                            })
                    })
            })
            .join()
            .expect("bootstrap thread")
        })
        .await
        .clone()
}
