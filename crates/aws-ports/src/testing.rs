//! Test harness (feature `testing`): an SDK configuration pointing at moto server, and
//! the bootstrapped resources.
//!
//! The endpoint is `AWS_ENDPOINT_URL` when set (moto, LocalStack, …); otherwise moto is
//! started through `scripts/moto` (which needs the venv `./scripts/test` creates, or
//! network access to PyPI to create it). Credentials default to `test`/`test` and the
//! region to `us-east-1` when the environment has none.

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

/// The emulator endpoint: `AWS_ENDPOINT_URL`, or a moto server started on demand.
pub fn endpoint() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| {
            if let Some(url) = std::env::var("AWS_ENDPOINT_URL")
                .ok()
                .filter(|u| !u.is_empty())
            {
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

/// An SDK configuration for the emulator.
pub async fn config() -> SdkConfig {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let creds = Credentials::new(
        env("AWS_ACCESS_KEY_ID").unwrap_or_else(|| "test".into()),
        env("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|| "test".into()),
        None,
        None,
        "fetcher-test",
    );
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint())
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
