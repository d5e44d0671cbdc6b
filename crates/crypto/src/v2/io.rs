//! `std::io` adapters over [`Sealer`] and [`Opener`].

use std::io::{self, Read, Write};

use zeroize::Zeroizing;

use super::{OpenSummary, Opener, SealSummary, Sealer};
use crate::error::{Error, Result};
use crate::keys::KeyRing;

/// Plaintext bytes handed to the sealer per step, so `write` of a huge buffer still uses
/// bounded memory.
const STEP: usize = 256 * 1024;

/// Sealed bytes read from the inner reader per step. Several frames per read keep most
/// frames on the opener's zero-copy path (records that straddle reads are reassembled).
const INPUT_BUF: usize = 256 * 1024;

/// Seals everything written to it into `inner`. Call [`finish`](Self::finish): dropping
/// the writer without it leaves a stream that readers reject as truncated.
pub struct SealWriter<W: Write> {
    inner: W,
    sealer: Sealer,
    out: Vec<u8>,
    /// Set when the inner writer failed: sealed bytes were lost, the stream is unusable.
    broken: bool,
}

impl<W: Write> std::fmt::Debug for SealWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealWriter")
            .field("sealer", &self.sealer)
            .finish_non_exhaustive()
    }
}

impl<W: Write> SealWriter<W> {
    /// Seals for `job_id` under the ring's current keys with 64 KiB frames.
    pub fn new(inner: W, ring: &KeyRing, job_id: &str) -> Result<Self> {
        Ok(Self::from_sealer(inner, Sealer::new(ring, job_id)?))
    }

    /// Wraps a configured [`Sealer`].
    pub fn from_sealer(inner: W, sealer: Sealer) -> Self {
        let cap = sealer.frame_size().min(STEP) + STEP + 64;
        SealWriter {
            inner,
            sealer,
            out: Vec::with_capacity(cap),
            broken: false,
        }
    }

    /// Writes the final frame and trailer, flushes, and returns the inner writer and
    /// the summary.
    pub fn finish(mut self) -> Result<(W, SealSummary)> {
        if self.broken {
            return Err(broken());
        }
        self.out.clear();
        let summary = self.sealer.finish_into(&mut self.out)?;
        self.inner.write_all(&self.out).map_err(Error::from_io)?;
        self.inner.flush().map_err(Error::from_io)?;
        Ok((self.inner, summary))
    }
}

impl<W: Write> Write for SealWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.broken {
            return Err(broken().into());
        }
        let n = buf.len().min(STEP);
        self.out.clear();
        self.sealer.update_into(&buf[..n], &mut self.out)?;
        // The sealer has consumed the bytes; if they cannot be handed on, the stream has a
        // hole that cannot be repaired: every later call fails too.
        if let Err(e) = self.inner.write_all(&self.out) {
            self.broken = true;
            return Err(e);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn broken() -> Error {
    Error::new(
        crate::ErrorKind::Io,
        "sealed stream is broken by an earlier write error",
    )
}

/// Reads plaintext out of a sealed v2 stream. `read` returns `Ok(0)` (EOF) only after the
/// final frame, trailer and end of input were verified; a truncated or tampered stream
/// yields an error (`InvalidData`, or `UnexpectedEof` for truncation) instead.
/// [`Error::from_io`] recovers the typed error.
pub struct OpenReader<R: Read> {
    inner: R,
    opener: Option<Opener>,
    input: Box<[u8]>,
    plain: Zeroizing<Vec<u8>>,
    pos: usize,
    summary: Option<OpenSummary>,
    failed: Option<crate::ErrorKind>,
}

impl<R: Read> std::fmt::Debug for OpenReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenReader")
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

impl<R: Read> OpenReader<R> {
    /// Opens a stream that must belong to `expected_job_id`.
    pub fn new(inner: R, ring: &KeyRing, expected_job_id: &str) -> Self {
        Self::from_opener(inner, Opener::new(ring, expected_job_id))
    }

    /// Wraps a configured [`Opener`].
    pub fn from_opener(inner: R, opener: Opener) -> Self {
        OpenReader {
            inner,
            opener: Some(opener),
            input: vec![0u8; INPUT_BUF].into_boxed_slice(),
            plain: Zeroizing::new(Vec::with_capacity(INPUT_BUF + 64 * 1024)),
            pos: 0,
            summary: None,
            failed: None,
        }
    }

    /// The summary, once `read` has returned EOF.
    pub fn summary(&self) -> Option<&OpenSummary> {
        self.summary.as_ref()
    }

    /// Reads to the end, discarding plaintext, and returns the summary (verification only).
    pub fn verify_to_end(mut self) -> Result<OpenSummary> {
        // Plaintext is authenticated and dropped without being copied out.
        while self.summary.is_none() {
            self.fill().map_err(Error::from_io)?;
        }
        self.summary
            .ok_or_else(|| Error::internal("no summary after end of stream"))
    }

    /// The inner reader.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> OpenReader<R> {
    /// Reads once from the inner reader and feeds the opener (or finishes it at EOF).
    /// Precondition: all buffered plaintext was consumed.
    fn fill(&mut self) -> io::Result<()> {
        if let Some(kind) = self.failed {
            return Err(Error::new(kind, "sealed result failed to open").into());
        }
        self.plain.clear();
        self.pos = 0;
        let n = loop {
            match self.inner.read(&mut self.input) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        let step = if n == 0 {
            match self.opener.take() {
                Some(opener) => opener.finish().map(|summary| self.summary = Some(summary)),
                None => Err(Error::internal("reader state")),
            }
        } else {
            match self.opener.as_mut() {
                Some(opener) => opener.update_into(&self.input[..n], &mut self.plain),
                None => Err(Error::internal("reader state")),
            }
        };
        if let Err(e) = step {
            self.failed = Some(e.kind());
            return Err(e.into());
        }
        Ok(())
    }
}

impl<R: Read> Read for OpenReader<R> {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.plain.len() {
                let n = dst.len().min(self.plain.len() - self.pos);
                dst[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.summary.is_some() || dst.is_empty() {
                return Ok(0);
            }
            self.fill()?;
        }
    }
}
