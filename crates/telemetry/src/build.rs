//! The build's identity: what `/readyz` and `/version` show and every exported span's
//! resource carries (`service.version`, `vcs.revision`, `fetcher.built_at`).

/// The release version (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git revision this binary was built from (`unknown` without one; `build.rs`).
pub const REVISION: &str = env!("FETCHER_GIT_REVISION");

/// When this revision was built, in seconds since the Unix epoch (0 when unknown).
pub fn built_at_unix() -> i64 {
    env!("FETCHER_BUILT_AT_UNIX").parse().unwrap_or(0)
}
