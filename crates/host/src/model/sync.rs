//! Syncs (docs/api.md, "Syncs"): the watermarks a stream of incremental jobs reached, and
//! the span each job read.

use std::collections::{BTreeMap, BTreeSet};

use fetcher_engine::{Timestamp, Watermark};
use serde::{Deserialize, Serialize};

use super::{Job, JobId, JobStatus, answers_to};

/// Where an incremental table's read started and where it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatermarkSpan {
    /// The watermark the job read after (`None`: from the start).
    pub from_watermark: Option<Watermark>,
    /// The highest `(cursor, key)` it read (the start again when it read no row).
    pub to_watermark: Option<Watermark>,
}

/// A sync (docs/api.md, "Syncs"): a stream of incremental jobs and, per table, the
/// watermark its last completed job reached. At most one of its jobs is active at a time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncState {
    pub id: String,
    pub tenant_id: String,
    /// The product whose jobs the sync runs (its first job's `metadata.source`; empty for a
    /// sync stored before syncs had one, until its next job completes): a caller naming
    /// another product is told the sync does not exist (docs/api.md, "Products").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub product: String,
    /// `configName → table → watermark`.
    #[serde(default)]
    pub tables: BTreeMap<String, BTreeMap<String, SyncedTable>>,
    /// The pending or processing job of the sync, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<JobId>,
    /// The sync's last completed job and when it completed: what its age is measured from
    /// (absent for a sync stored before syncs kept it, until its next job completes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed: Option<(JobId, Timestamp)>,
    /// `configName → tables` the sync's jobs read from the log: each has a replication
    /// slot and a publication on its datasource from the sync's first job on, kept
    /// through resets (the next job reuses them) and dropped when the sync is deleted.
    /// Recorded when a job ends, whatever its outcome: a failed first job has made them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub log_tables: BTreeMap<String, BTreeSet<String>>,
}

/// One table's watermark in a sync, and the job that reached it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncedTable {
    pub watermark: Watermark,
    pub job_id: JobId,
    pub updated_at: Timestamp,
}

impl SyncState {
    /// A sync with no watermark yet, created by `job` (its tenant and product).
    pub fn new(job: &Job, id: &str) -> SyncState {
        SyncState {
            id: id.to_owned(),
            tenant_id: job.tenant_id.clone(),
            product: job.product().to_owned(),
            ..Default::default()
        }
    }

    /// Whether a caller naming `product` (`None`: naming none) may see and change the
    /// sync: one without a product answers to every caller.
    pub fn answers_to(&self, product: Option<&str>) -> bool {
        answers_to(&self.product, product)
    }

    /// The watermark of `(config, table)`, if any.
    pub fn watermark(&self, config: &str, table: &str) -> Option<&Watermark> {
        self.tables.get(config)?.get(table).map(|t| &t.watermark)
    }

    /// What a job of this sync leaving the active states changes: it is no longer the
    /// active job, and if it completed, every watermark it reached is the sync's now
    /// (in the same write as its completion). A failed or canceled job changes no
    /// watermark.
    pub fn job_ended(&mut self, job: &Job) {
        if self.active_job == Some(job.id) {
            self.active_job = None;
        }
        for (config, tables) in &job.request.incremental {
            for (table, _) in tables.iter().filter(|(_, spec)| spec.is_log()) {
                self.log_tables
                    .entry(config.clone())
                    .or_default()
                    .insert(table.clone());
            }
        }
        if job.status != JobStatus::Completed {
            return;
        }
        if self.product.is_empty() {
            self.product = job.product().to_owned();
        }
        let at = job.completed_at.unwrap_or(job.created_at);
        self.last_completed = Some((job.id, at));
        let Some(result) = &job.result else { return };
        for (config, tables) in &result.watermarks {
            for (table, span) in tables {
                if let Some(to) = &span.to_watermark {
                    self.tables.entry(config.clone()).or_default().insert(
                        table.clone(),
                        SyncedTable {
                            watermark: to.clone(),
                            job_id: job.id,
                            updated_at: at,
                        },
                    );
                }
            }
        }
    }

    /// Seconds since the sync's last completed job at `now` (`None`: none completed yet).
    pub fn age_seconds(&self, now: Timestamp) -> Option<u64> {
        let (_, at) = self.last_completed?;
        Some(now.seconds_since(at))
    }

    /// Forgets the watermarks of `tables` (`(config, table)`; empty: all): the next job
    /// reads them from the start.
    pub fn reset(&mut self, tables: &[(String, String)]) {
        if tables.is_empty() {
            self.tables.clear();
            return;
        }
        for (config, table) in tables {
            if let Some(t) = self.tables.get_mut(config) {
                t.remove(table);
                if t.is_empty() {
                    self.tables.remove(config);
                }
            }
        }
    }
}
