//! `fetcher keys generate`, and the key handling `serve --demo` and `result open` share.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use clap::Subcommand;
use fetcher_crypto::{EnvMasterKeySource, KeyRing};

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Print a new random 32-byte master key (standard Base64) for FETCHER_MASTER_KEY.
    Generate,
}

pub fn run(cmd: KeysCommand) -> Result<()> {
    match cmd {
        KeysCommand::Generate => println!("{}", generate()?),
    }
    Ok(())
}

/// A new random master key, Base64.
pub fn generate() -> Result<String> {
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key)
        .map_err(|_| anyhow::anyhow!("system random generator unavailable"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(key))
}

/// The key ring from `FETCHER_MASTER_KEY` (and its companions), if set.
pub async fn ring_from_env() -> Result<Option<KeyRing>> {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    if !set(EnvMasterKeySource::KEY) && !set(EnvMasterKeySource::LEGACY_KEY) {
        return Ok(None);
    }
    Ok(Some(
        KeyRing::load(&EnvMasterKeySource::new())
            .await
            .context("invalid master key in the environment")?,
    ))
}

/// The development key of a `--demo` data directory: read it, or create it (mode 0600).
pub fn demo_key(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("master.key");
    if path.exists() {
        return Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_owned());
    }
    let key = generate()?;
    write_private(&path, &key)?;
    Ok(key)
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    Ok(())
}

/// The ring for commands run against a data directory: the environment wins, else the
/// directory's demo key.
pub async fn ring_for(data_dir: &Path) -> Result<KeyRing> {
    if let Some(ring) = ring_from_env().await? {
        return Ok(ring);
    }
    let path = data_dir.join("master.key");
    if !path.exists() {
        bail!(
            "no master key: set FETCHER_MASTER_KEY (see `fetcher keys generate`) or use the data directory of `serve --demo`"
        );
    }
    Ok(KeyRing::from_base64(&demo_key(data_dir)?, "1")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_32_random_bytes() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&a)
                .unwrap()
                .len(),
            32
        );
        KeyRing::from_base64(&a, "1").unwrap();
    }

    #[test]
    fn the_demo_key_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let k1 = demo_key(dir.path()).unwrap();
        let k2 = demo_key(dir.path()).unwrap();
        assert_eq!(k1, k2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("master.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
