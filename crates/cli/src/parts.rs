//! Results in parts (docs/results.md, "Results in parts"): a Parquet job's files, and a
//! long job's NDJSON in several objects, each listed by a sealed manifest.
//!
//! The manifest is opened and checked first (its HMAC when known, its job binding); then
//! each part, found beside it in the layout of `serve`'s result directory and of the S3
//! bucket (the first NDJSON part at `<jobId>.ndjson.v2`, the others in
//! `<jobId>/part-NNNNN.<ext>.v2`), is opened against the HMAC the manifest lists and its
//! plaintext SHA-256 compared with the listed one.
//!
//! * `fetcher result open <job|manifest> --output-dir DIR` writes a Parquet job's files:
//!   each to `<name>.partial`, renamed to `<config>.<table>.parquet` (`-2`, `-3`, … for
//!   a table in several parts) only once it verified, so a file with the final name is
//!   always a whole, authentic one.
//! * `fetcher result open <job|manifest>` streams an NDJSON job's parts to stdout, in
//!   order: their concatenation is the job's result.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use fetcher_crypto::{KeyRing, Opener};
use fetcher_engine::ResultPart;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::result::{progress, stream_open};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    pub(crate) format: fetcher_engine::StoredFormat,
    job_id: String,
    row_count: i64,
    size_bytes: i64,
    parts: Vec<ResultPart>,
}

/// Opens and checks the manifest in `file`.
pub(crate) async fn read_manifest(
    ring: &KeyRing,
    file: &Path,
    hmac: Option<&str>,
) -> Result<Manifest> {
    let sealed = tokio::fs::read(file)
        .await
        .with_context(|| format!("opening {}", file.display()))?;
    let mut opener = Opener::new_any_job(ring);
    if let Some(h) = hmac {
        opener = opener.expect_hmac(h);
    }
    let mut plain = Vec::new();
    opener
        .update_into(&sealed, &mut plain)
        .map_err(|e| anyhow::anyhow!("manifest: {e}"))?;
    let summary = opener
        .finish()
        .map_err(|e| anyhow::anyhow!("manifest: {e}"))?;
    let manifest: Manifest =
        serde_json::from_slice(&plain).context("the result is not a parts manifest")?;
    if manifest.job_id != summary.job_id {
        bail!("the manifest names another job than it is sealed for");
    }
    // The totals are the sums of the parts (as every host writes them): a manifest whose
    // totals disagree with its own list is not one a host wrote.
    let rows: i64 = manifest.parts.iter().map(|p| p.row_count).sum();
    let bytes: i64 = manifest.parts.iter().map(|p| p.size_bytes).sum();
    if rows != manifest.row_count || bytes != manifest.size_bytes {
        bail!(
            "the manifest's totals ({} rows, {} bytes) differ from its parts' ({rows} rows, {bytes} bytes)",
            manifest.row_count,
            manifest.size_bytes
        );
    }
    Ok(manifest)
}

/// Whether `file` holds a manifest (by its name, as every host names it).
pub(crate) fn is_manifest(file: &Path) -> bool {
    file.to_string_lossy().ends_with(".manifest.json.v2")
}

/// Where `part` is on disk: beside the manifest, by the part's key under the results
/// prefix (`<jobId>.ndjson.v2` or `<jobId>/part-NNNNN.<ext>.v2`); any other key is
/// refused, so a manifest cannot point outside its job's objects.
fn part_file(manifest_file: &Path, job_id: &str, part: &ResultPart) -> Result<PathBuf> {
    let rel = part
        .path
        .rsplit_once("external-data/")
        .map_or(part.path.as_str(), |(_, r)| r);
    let parts: Vec<&str> = rel.split('/').collect();
    let ok = match parts.as_slice() {
        [single] => *single == format!("{job_id}.ndjson.v2"),
        [dir, name] => *dir == job_id && name.starts_with("part-") && !name.contains(".."),
        _ => false,
    };
    if !ok {
        bail!("a part path in the manifest is malformed");
    }
    Ok(manifest_file.parent().unwrap_or(Path::new(".")).join(rel))
}

pub async fn open_parts(
    ring: &KeyRing,
    manifest_file: &Path,
    hmac: Option<&str>,
    dir: &Path,
    quiet: bool,
) -> Result<()> {
    let manifest = read_manifest(ring, manifest_file, hmac).await?;
    if manifest.format != fetcher_engine::StoredFormat::Parquet {
        bail!(
            "a {} result opens to stdout: leave out --output-dir",
            manifest.format
        );
    }
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    check_output_dir(dir)?;

    let bar = progress(stored_total(&manifest), quiet);
    let mut names = BTreeSet::new();
    for part in &manifest.parts {
        let source = part_file(manifest_file, &manifest.job_id, part)?;
        let name = unique_name(&mut names, &part.config, &part.table);
        let target = dir.join(&name);
        let partial = PathBuf::from(format!("{}.partial", target.display()));
        let mut out = create_exclusive(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
        let opened = open_part(ring, &manifest.job_id, part, &source, &mut out, &bar).await;
        out.flush().await?;
        drop(out);
        if let Err(e) = opened {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e.context(format!(
                "{} ({}.{})",
                source.display(),
                part.config,
                part.table
            )));
        }
        tokio::fs::rename(&partial, &target).await?;
        if !quiet {
            bar.println(format!("{} rows -> {}", part.row_count, target.display()));
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Refuses an output directory another user could write to (group-writable, whatever the
/// group, or world-writable, without the sticky bit): they could plant or swap files
/// between our writes and renames.
fn check_output_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
        if !meta.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        let mode = meta.mode();
        let sticky = mode & 0o1000 != 0;
        // Group-writable counts whatever the group: ours may hold other users too.
        let others = mode & 0o022 != 0;
        if others && !sticky {
            bail!(
                "{} is writable by other users (mode {:o}): pick a directory only you can write to (chmod go-w), or one with the sticky bit",
                dir.display(),
                mode & 0o7777
            );
        }
    }
    Ok(())
}

/// Creates `path` for the decrypted output: exclusively and without following a link
/// (`O_CREAT | O_EXCL | O_NOFOLLOW`), readable only by its owner. A stale regular file of
/// ours (an earlier run stopped midway) is removed first; a link or another user's file
/// there is refused.
fn create_exclusive(path: &Path) -> Result<tokio::fs::File> {
    let open = || {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        o.open(path)
    };
    match open() {
        Ok(f) => Ok(tokio::fs::File::from_std(f)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(path)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::MetadataExt;
                // SAFETY: geteuid has no preconditions and cannot fail.
                if meta.uid() != unsafe { libc::geteuid() } {
                    bail!("it exists and belongs to another user");
                }
            }
            if !meta.file_type().is_file() {
                bail!("it exists and is not a regular file (a link is never followed)");
            }
            std::fs::remove_file(path)?;
            Ok(tokio::fs::File::from_std(open()?))
        }
        Err(e) => Err(e.into()),
    }
}

/// An NDJSON result in parts, to `out` in order. Each part is verified as it streams
/// (frames, then its HMAC and SHA-256 at its end): a part that fails stops the output
/// with an error there.
pub(crate) async fn open_ndjson_parts<W: tokio::io::AsyncWrite + Unpin>(
    ring: &KeyRing,
    manifest: &Manifest,
    manifest_file: &Path,
    out: &mut W,
    quiet: bool,
) -> Result<()> {
    if manifest.format != fetcher_engine::StoredFormat::Ndjson {
        bail!("unknown part format {:?}", manifest.format);
    }
    let bar = progress(stored_total(manifest), quiet);
    for part in &manifest.parts {
        let source = part_file(manifest_file, &manifest.job_id, part)?;
        open_part(ring, &manifest.job_id, part, &source, out, &bar)
            .await
            .with_context(|| format!("{}", source.display()))?;
    }
    bar.finish_and_clear();
    Ok(())
}

fn stored_total(manifest: &Manifest) -> u64 {
    manifest
        .parts
        .iter()
        .map(|p| p.stored_bytes.max(p.size_bytes) as u64)
        .sum()
}

async fn open_part<W: tokio::io::AsyncWrite + Unpin>(
    ring: &KeyRing,
    job_id: &str,
    part: &ResultPart,
    source: &Path,
    out: &mut W,
    bar: &indicatif::ProgressBar,
) -> Result<()> {
    let mut file = tokio::fs::File::open(source).await.context("opening")?;
    let mut head = [0u8; 4];
    let n = file.read(&mut head).await?;
    let mut hasher = Sha256::new();
    let opener = Opener::new(ring, job_id).expect_hmac(&part.hmac);
    stream_open(opener, &head[..n], &mut file, out, bar, |b| {
        hasher.update(b)
    })
    .await?;
    if fetcher_engine::hex(&hasher.finalize()) != part.sha256 {
        bail!("its SHA-256 differs from the manifest's");
    }
    Ok(())
}

/// `<config>.<table>.parquet`, with every character but letters, digits, `-` and `_`
/// replaced by `_` (no separator or `..` can reach the file system); a name taken by an
/// earlier part gets `-2`, `-3`, … .
fn unique_name(taken: &mut BTreeSet<String>, config: &str, table: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let stem = format!("{}.{}", clean(config), clean(table));
    let mut name = format!("{stem}.parquet");
    let mut n = 1;
    while !taken.insert(name.clone()) {
        n += 1;
        name = format!("{stem}-{n}.parquet");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_cannot_escape_and_never_collide() {
        let mut taken = BTreeSet::new();
        assert_eq!(
            unique_name(&mut taken, "pg", "accounting.invoices"),
            "pg.accounting_invoices.parquet"
        );
        assert_eq!(unique_name(&mut taken, "../x", "a/b"), "___x.a_b.parquet");
        assert_eq!(
            unique_name(&mut taken, "pg", "accounting_invoices"),
            "pg.accounting_invoices-2.parquet"
        );
    }
}
