//! Result objects in a local directory. A write goes to a hidden temporary file in the
//! target directory and is renamed into place on `finish` (atomic on POSIX), so readers
//! never see a partial object and `abort` leaves nothing behind: not the file, and not
//! the directories it created once they hold nothing else (a failed Parquet job's
//! `external-data/<jobId>/`). What a crash or an abandoned write leaves (`.tmp-*` files,
//! empty directories) is removed by `sweep_incomplete`, which `serve` runs at start.

use std::path::{Path, PathBuf};

use fetcher_engine::BoxFuture;
use tokio::fs;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};

use fetcher_host::error::{Result, ServiceError};
use fetcher_host::ports::{ObjectReader, ObjectStore, ObjectWriter, validate_path};

fn io_error(e: std::io::Error) -> ServiceError {
    ServiceError::unavailable("result directory unavailable").with_cause(e)
}

/// Objects as files under a root directory.
#[derive(Debug, Clone)]
pub struct LocalDirObjectStore {
    root: PathBuf,
}

impl LocalDirObjectStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalDirObjectStore { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn file(&self, path: &str) -> Result<PathBuf> {
        validate_path(path)?;
        Ok(self.root.join(path))
    }
}

/// Removes `dir` and its parents while they are empty and strictly under `root`. A
/// writer that raced the removal recreates what it needs ([`LocalDirObjectStore::put`]).
async fn remove_empty_dirs(root: &Path, mut dir: &Path) {
    while dir != root && dir.starts_with(root) {
        if fs::remove_dir(dir).await.is_err() {
            return; // not empty (or gone, or not ours to remove): stop here
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return,
        }
    }
}

struct FileWriter {
    root: PathBuf,
    tmp: PathBuf,
    target: PathBuf,
    file: BufWriter<fs::File>,
}

impl ObjectWriter for FileWriter {
    fn write<'a>(&'a mut self, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.file.write_all(bytes).await.map_err(io_error) })
    }

    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<u64>> {
        Box::pin(async move {
            let mut this = *self;
            this.file.flush().await.map_err(io_error)?;
            let file = this.file.into_inner();
            file.sync_all().await.map_err(io_error)?;
            let len = file.metadata().await.map_err(io_error)?.len();
            drop(file);
            fs::rename(&this.tmp, &this.target)
                .await
                .map_err(io_error)?;
            Ok(len)
        })
    }

    fn abort(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let (root, tmp) = (self.root.clone(), self.tmp.clone());
            drop(self);
            let _ = fs::remove_file(&tmp).await;
            if let Some(dir) = tmp.parent() {
                remove_empty_dirs(&root, dir).await;
            }
        })
    }
}

const READ_CHUNK: usize = 256 * 1024;

struct FileReader(fs::File);

impl ObjectReader for FileReader {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let mut buf = vec![0u8; READ_CHUNK];
            let n = self.0.read(&mut buf).await.map_err(io_error)?;
            if n == 0 {
                return Ok(None);
            }
            buf.truncate(n);
            Ok(Some(buf))
        })
    }
}

/// The prefix of a write in progress.
const TMP_PREFIX: &str = ".tmp-";

impl ObjectStore for LocalDirObjectStore {
    fn sweep_incomplete(&self, age: std::time::Duration) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            let cutoff = std::time::SystemTime::now()
                .checked_sub(age)
                .unwrap_or(std::time::UNIX_EPOCH);
            let mut removed = 0;
            let mut dirs = vec![self.root.clone()];
            let mut seen = Vec::new();
            while let Some(dir) = dirs.pop() {
                seen.push(dir.clone());
                let mut entries = match fs::read_dir(&dir).await {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_error(e)),
                };
                while let Some(entry) = entries.next_entry().await.map_err(io_error)? {
                    let kind = entry.file_type().await.map_err(io_error)?;
                    if kind.is_dir() {
                        dirs.push(entry.path());
                        continue;
                    }
                    let is_tmp = entry.file_name().to_string_lossy().starts_with(TMP_PREFIX);
                    let old = entry
                        .metadata()
                        .await
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t <= cutoff);
                    if kind.is_file() && is_tmp && old {
                        match fs::remove_file(entry.path()).await {
                            Ok(()) => removed += 1,
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(io_error(e)),
                        }
                    }
                }
            }
            // Then the directories left empty, deepest first (removing one only succeeds
            // when it is empty; a write starting in it makes it again: see `put`).
            for dir in seen.iter().rev().filter(|d| **d != self.root) {
                let _ = fs::remove_dir(dir).await;
            }
            Ok(removed)
        })
    }

    fn put<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Box<dyn ObjectWriter>>> {
        Box::pin(async move {
            let target = self.file(path)?;
            let dir = target.parent().expect("joined under root").to_path_buf();
            let tmp = dir.join(format!("{TMP_PREFIX}{}", uuid::Uuid::new_v4()));
            // An aborting writer may remove the directory between the two calls (it
            // removes directories it left empty): create it again, a few times.
            let mut attempts = 0;
            let file = loop {
                fs::create_dir_all(&dir).await.map_err(io_error)?;
                match fs::File::create(&tmp).await {
                    Ok(f) => break f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 3 => {
                        attempts += 1;
                    }
                    Err(e) => return Err(io_error(e)),
                }
            };
            Ok(Box::new(FileWriter {
                root: self.root.clone(),
                tmp,
                target,
                file: BufWriter::with_capacity(256 * 1024, file),
            }) as Box<dyn ObjectWriter>)
        })
    }

    fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Box<dyn ObjectReader>>>> {
        Box::pin(async move {
            match fs::File::open(self.file(path)?).await {
                Ok(f) => Ok(Some(Box::new(FileReader(f)) as Box<dyn ObjectReader>)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_error(e)),
            }
        })
    }

    fn delete<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let file = self.file(path)?;
            match fs::remove_file(&file).await {
                Ok(()) => {
                    if let Some(dir) = file.parent() {
                        remove_empty_dirs(&self.root, dir).await;
                    }
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_error(e)),
            }
        })
    }

    fn head<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(async move {
            match fs::metadata(self.file(path)?).await {
                Ok(m) => Ok(Some(m.len())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_error(e)),
            }
        })
    }
}
