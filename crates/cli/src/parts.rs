//! `fetcher result open <job|manifest> --output-dir DIR`: a Parquet job's files
//! (docs/results.md, "Parquet results").
//!
//! The manifest is opened and checked first (its HMAC when known, its job binding); then
//! each part, found beside it (`<dir of the manifest>/<jobId>/part-NNNNN.parquet.v2`, the
//! layout of `serve`'s result directory and of the S3 bucket), is opened against the
//! HMAC the manifest lists and its plaintext SHA-256 compared with the listed one. A
//! part is written to `<name>.partial` and renamed to `<config>.<table>.parquet` only
//! once it verified, so a file with the final name is always a whole, authentic one.

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
struct Manifest {
    format: String,
    job_id: String,
    parts: Vec<ResultPart>,
}

pub async fn open_parts(
    ring: &KeyRing,
    manifest_file: &Path,
    hmac: Option<&str>,
    dir: &Path,
    quiet: bool,
) -> Result<()> {
    let sealed = tokio::fs::read(manifest_file)
        .await
        .with_context(|| format!("opening {}", manifest_file.display()))?;
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
    if manifest.format != "parquet" {
        bail!("unknown part format {:?}", manifest.format);
    }
    let base = manifest_file
        .parent()
        .unwrap_or(Path::new("."))
        .join(&manifest.job_id);
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;

    let total: u64 = manifest
        .parts
        .iter()
        .map(|p| p.stored_bytes.max(p.size_bytes) as u64)
        .sum();
    let bar = progress(total, quiet);
    let mut names = BTreeSet::new();
    for part in &manifest.parts {
        let object = part
            .path
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty() && *n != "..")
            .context("a part path in the manifest is malformed")?;
        let source = base.join(object);
        let name = unique_name(&mut names, &part.config, &part.table);
        let target = dir.join(&name);
        open_part(ring, &manifest.job_id, part, &source, &target, &bar)
            .await
            .with_context(|| format!("{} ({}.{})", source.display(), part.config, part.table))?;
        if !quiet {
            bar.println(format!("{} rows -> {}", part.row_count, target.display()));
        }
    }
    bar.finish_and_clear();
    Ok(())
}

async fn open_part(
    ring: &KeyRing,
    job_id: &str,
    part: &ResultPart,
    source: &Path,
    target: &Path,
    bar: &indicatif::ProgressBar,
) -> Result<()> {
    let mut file = tokio::fs::File::open(source).await.context("opening")?;
    let mut head = [0u8; 4];
    let n = file.read(&mut head).await?;
    let partial = PathBuf::from(format!("{}.partial", target.display()));
    let mut out = tokio::fs::File::create(&partial).await?;
    let mut hasher = Sha256::new();
    let opener = Opener::new(ring, job_id).expect_hmac(&part.hmac);
    let opened = stream_open(opener, &head[..n], &mut file, &mut out, bar, |b| {
        hasher.update(b)
    })
    .await;
    out.flush().await?;
    drop(out);
    let digest = fetcher_engine::hex(&hasher.finalize());
    let verified = opened.and_then(|()| {
        if digest == part.sha256 {
            Ok(())
        } else {
            Err(anyhow::anyhow!("its SHA-256 differs from the manifest's"))
        }
    });
    if let Err(e) = verified {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(e);
    }
    tokio::fs::rename(&partial, target).await?;
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
