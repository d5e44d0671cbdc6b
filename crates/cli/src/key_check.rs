//! The data directory's key check (docs/operations.md, "Master key"): which master key
//! sealed the credentials and results a data directory holds. Without it, `serve` started
//! on an existing directory with another key would start, then find every stored
//! connection broken. The check is an HMAC of a fixed label under a key derived from the
//! master key (the internal HMAC key of each version): it tells whether a key is the one,
//! and nothing about the key.
//!
//! The file (`key-check`, owner-only) holds a line per key version, `<version> <hex>`;
//! the current version's line is added when it is first used.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use fetcher_crypto::KeyRing;

/// The file's name in the data directory.
pub const FILE: &str = "key-check";
/// Verifies `ring` against the data directory's check (every version it names must be in
/// the ring, with the same key) and records the current version's when it is new. Stops
/// the start, saying what to do, when the key is not the directory's.
pub fn verify(data_dir: &Path, ring: &KeyRing) -> Result<()> {
    let path = data_dir.join(FILE);
    let recorded = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut known = Vec::new();
    for line in recorded.lines().filter(|l| !l.trim().is_empty()) {
        let Some((version, value)) = line.split_once(' ') else {
            bail!(
                "{} is damaged (line {line:?}): restore it, or remove it to record the current key anew",
                path.display()
            );
        };
        if ring.get(version).is_err() {
            bail!(
                "this data directory's credentials and results were sealed with master key version {version}, which the configured keys do not hold: set FETCHER_MASTER_KEY (or FETCHER_MASTER_KEY_PREVIOUS) to hold the key this directory was created with, or use another --data-dir"
            );
        }
        if ring.check_value(version)? != value.trim() {
            bail!(
                "this data directory's credentials and results were sealed with another master key (version {version} differs): set FETCHER_MASTER_KEY to the key this directory was created with, or use another --data-dir"
            );
        }
        known.push(version.to_owned());
    }
    let current = ring.current_version();
    if !known.iter().any(|v| v == current) {
        let line = format!("{current} {}\n", ring.check_value(current)?);
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        f.write_all(line.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_remembers_its_key_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        let a = KeyRing::from_base64("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "1").unwrap();
        let b = KeyRing::from_base64("ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=", "1").unwrap();
        verify(dir.path(), &a).unwrap();
        verify(dir.path(), &a).unwrap();
        let err = verify(dir.path(), &b).unwrap_err().to_string();
        assert!(err.contains("sealed with another master key"), "{err}");
        let other_version =
            KeyRing::from_base64("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "2").unwrap();
        let err = verify(dir.path(), &other_version).unwrap_err().to_string();
        assert!(
            err.contains("version 1, which the configured keys do not hold"),
            "{err}"
        );
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("MDEyMzQ1"), "the file holds no key");
    }
}
