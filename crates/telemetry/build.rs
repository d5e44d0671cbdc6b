//! The build's identity (`/readyz`, `/version`, the traces' resource): the git revision the binary was built
//! from and when. `FETCHER_GIT_REVISION` overrides the revision (a build without `.git`);
//! without either it is `unknown`. The script reruns when the checkout's HEAD moves, so
//! the time is when this revision was built.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FETCHER_GIT_REVISION");
    let git = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.git");
    let mut watched = false;
    for file in ["HEAD", "packed-refs"] {
        let path = git.join(file);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
            watched = true;
        }
    }
    // The branch HEAD names, so a commit on it reruns the script too.
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(r) = head.trim().strip_prefix("ref: ")
        && git.join(r).exists()
    {
        println!("cargo:rerun-if-changed={}", git.join(r).display());
    }
    if !watched {
        println!("cargo:rerun-if-changed=build.rs");
    }
    let revision = std::env::var("FETCHER_GIT_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(|| {
            Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let built = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    println!("cargo:rustc-env=FETCHER_GIT_REVISION={revision}");
    println!("cargo:rustc-env=FETCHER_BUILT_AT_UNIX={built}");
}
