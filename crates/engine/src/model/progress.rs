//! Live figures of one extraction, for a host to report while it runs: rows and bytes of
//! the plaintext NDJSON written so far (so they end equal to the result's `row_count`
//! and `size_bytes`) and tables finished out of the plan's. Counters only: updated once
//! per written batch, read whenever the host likes.

use std::sync::atomic::{AtomicU64, Ordering};

/// Shared counters of one run (`Arc` it; [`crate::Engine::execute_extraction_observed`]
/// updates them).
#[derive(Debug, Default)]
pub struct ExtractionProgress {
    rows: AtomicU64,
    bytes: AtomicU64,
    tables_done: AtomicU64,
    tables_total: AtomicU64,
}

/// One reading of [`ExtractionProgress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressSnapshot {
    pub rows: u64,
    pub bytes: u64,
    pub tables_done: u64,
    pub tables_total: u64,
}

impl ExtractionProgress {
    /// The figures now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        ProgressSnapshot {
            rows: self.rows.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            tables_done: self.tables_done.load(Ordering::Relaxed),
            tables_total: self.tables_total.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn start(&self, tables: u64) {
        self.tables_total.store(tables, Ordering::Relaxed);
    }

    pub(crate) fn wrote(&self, rows: u64, bytes: u64, tables_done: u64) {
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.tables_done.fetch_add(tables_done, Ordering::Relaxed);
    }
}
