//! `fetcher result open`: verify and decrypt a sealed result to stdout (a long job's
//! NDJSON parts in order), or a Parquet job's files into a directory (`--output-dir`,
//! docs/results.md, "Parquet results").
//!
//! v2 objects (NDJSON in authenticated frames) are opened as a stream: each frame is
//! written out only after it authenticated, and a truncated, reordered or tampered
//! object ends the command with an error (exit 1) at the frame where it was detected.
//! v1 objects (the reference format, Base64 text) are checked against their HMAC before
//! anything is written.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use fetcher_crypto::{KeyRing, Opener};
use fetcher_embedded::SqliteStore;
use fetcher_host::model::ResultFormat;
use fetcher_host::ports::JobStore;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::keys::ring_for;

#[derive(Subcommand)]
pub enum ResultCommand {
    /// Verify and decrypt a result (by job id, object key or file path) to stdout.
    Open(OpenArgs),
}

#[derive(Args)]
pub struct OpenArgs {
    /// A job id, an object key under the data directory's `results/`, or a file path.
    pub target: String,
    /// The `serve` data directory.
    #[arg(long, default_value = ".fetcher", env = "FETCHER_DATA_DIR")]
    pub data_dir: PathBuf,
    /// The job's tenant (when opening by job id).
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// Expected document HMAC (hex); required for v1 objects opened by path.
    #[arg(long)]
    pub hmac: Option<String>,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write a Parquet job's files here (`<config>.<table>.parquet`), each verified
    /// against the manifest's HMAC and SHA-256 before it gets its name.
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
}

pub async fn run(cmd: ResultCommand) -> Result<()> {
    match cmd {
        ResultCommand::Open(args) => open(args).await,
    }
}

struct Target {
    file: PathBuf,
    hmac: Option<String>,
    job_id: Option<String>,
    /// What the job says it is (opened by path: unknown).
    format: Option<ResultFormat>,
}

async fn locate(args: &OpenArgs) -> Result<Target> {
    if uuid_like(&args.target)
        && let Some(id) = fetcher_host::model::JobId::parse(&args.target)
    {
        let db = args.data_dir.join("fetcher.db");
        if !db.is_file() {
            bail!(
                "no serve data directory at {} (no fetcher.db there): give the one serve uses with --data-dir or FETCHER_DATA_DIR",
                args.data_dir.display()
            );
        }
        let store = SqliteStore::open(&db)
            .await
            .with_context(|| format!("opening the data directory {}", args.data_dir.display()))?;
        let job = store
            .get(&args.tenant, id)
            .await?
            .with_context(|| format!("no job {} for tenant {}", args.target, args.tenant))?;
        let result = job.result.with_context(|| {
            format!(
                "job {} has no result (status {})",
                job.id,
                job.status.as_str()
            )
        })?;
        // An HMAC the caller gives is what they expect to open: another job's, or one
        // from an announcement that does not match the record, stops here.
        if let Some(given) = &args.hmac
            && !given.trim().eq_ignore_ascii_case(&result.hmac)
        {
            bail!(
                "--hmac does not match the result of job {}: this is not the result you expect",
                job.id
            );
        }
        return Ok(Target {
            file: args.data_dir.join("results").join(&result.path),
            hmac: Some(result.hmac),
            job_id: Some(job.id.to_string()),
            format: Some(result.format),
        });
    }
    let direct = Path::new(&args.target);
    let file = if direct.is_file() {
        direct.to_path_buf()
    } else {
        args.data_dir.join("results").join(&args.target)
    };
    Ok(Target {
        file,
        hmac: args.hmac.clone(),
        job_id: None,
        format: None,
    })
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

pub(crate) fn progress(len: u64, quiet: bool) -> ProgressBar {
    if quiet || len < 8 * 1024 * 1024 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {bar:40} {bytes_per_sec} eta {eta}",
        )
        .expect("static template"),
    );
    bar
}

async fn open(args: OpenArgs) -> Result<()> {
    let target = locate(&args).await?;
    let ring = ring_for(&args.data_dir).await?;
    if let Some(dir) = &args.output_dir {
        return crate::parts::open_parts(
            &ring,
            &target.file,
            target.hmac.as_deref(),
            dir,
            args.quiet,
        )
        .await;
    }
    if target.format == Some(ResultFormat::Parquet) {
        bail!("a parquet result is a set of files: pass --output-dir DIR");
    }
    if crate::parts::is_manifest(&target.file) {
        // A long job's NDJSON in parts (docs/results.md, "Results in parts").
        let manifest =
            crate::parts::read_manifest(&ring, &target.file, target.hmac.as_deref()).await?;
        if manifest.format == fetcher_engine::StoredFormat::Parquet {
            bail!("a parquet result is a set of files: pass --output-dir DIR");
        }
        let mut stdout = tokio::io::stdout();
        crate::parts::open_ndjson_parts(&ring, &manifest, &target.file, &mut stdout, args.quiet)
            .await?;
        stdout.flush().await?;
        return Ok(());
    }
    let mut file = tokio::fs::File::open(&target.file)
        .await
        .with_context(|| format!("opening {}", target.file.display()))?;
    let len = file.metadata().await?.len();
    let mut head = [0u8; 4];
    let n = file.read(&mut head).await?;
    let format = match fetcher_crypto::SealedFormat::detect(&head[..n]) {
        fetcher_crypto::SealedFormat::V2 => ResultFormat::V2,
        fetcher_crypto::SealedFormat::V1 => ResultFormat::V1,
    };
    let bar = progress(len, args.quiet);
    let mut stdout = tokio::io::stdout();
    match format {
        ResultFormat::V2 | ResultFormat::Parquet => {
            open_v2(&ring, &target, &head[..n], &mut file, &mut stdout, &bar).await?
        }
        ResultFormat::V1 => {
            let Some(hmac) = target.hmac.as_deref() else {
                bail!("a v1 object needs its HMAC: pass --hmac or open it by job id")
            };
            let mut object = head[..n].to_vec();
            file.read_to_end(&mut object).await?;
            bar.inc(object.len() as u64);
            let plain = fetcher_crypto::open_v1(ring.current(), &object, hmac)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            stdout.write_all(&plain).await?;
            stdout.write_all(b"\n").await?;
        }
    }
    stdout.flush().await?;
    bar.finish_and_clear();
    Ok(())
}

async fn open_v2(
    ring: &KeyRing,
    target: &Target,
    head: &[u8],
    file: &mut tokio::fs::File,
    out: &mut tokio::io::Stdout,
    bar: &ProgressBar,
) -> Result<()> {
    let mut opener = match &target.job_id {
        Some(id) => Opener::new(ring, id),
        None => Opener::new_any_job(ring),
    };
    if let Some(h) = &target.hmac {
        opener = opener.expect_hmac(h);
    }
    stream_open(opener, head, file, out, bar, |_| {}).await
}

/// Streams a v2 object through `opener` into `out`, frame by frame, handing every
/// authenticated plaintext chunk to `seen` too (a digest).
pub(crate) async fn stream_open<W: tokio::io::AsyncWrite + Unpin>(
    mut opener: Opener,
    head: &[u8],
    file: &mut tokio::fs::File,
    out: &mut W,
    bar: &ProgressBar,
    mut seen: impl FnMut(&[u8]),
) -> Result<()> {
    let mut plain = Vec::with_capacity(256 * 1024);
    let mut buf = vec![0u8; 256 * 1024];
    let mut chunk = head.to_vec();
    loop {
        if !chunk.is_empty() {
            opener
                .update_into(&chunk, &mut plain)
                .map_err(|e| anyhow::anyhow!("{e}; output is incomplete"))?;
            bar.inc(chunk.len() as u64);
            seen(&plain);
            out.write_all(&plain).await?;
            plain.clear();
        }
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        chunk = buf[..n].to_vec();
    }
    opener
        .finish()
        .map_err(|e| anyhow::anyhow!("{e}; output is incomplete"))?;
    Ok(())
}
