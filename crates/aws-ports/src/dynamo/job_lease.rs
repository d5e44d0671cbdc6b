//! A processing job's lease item: what a heartbeat writes, alone.

use super::jobs::{corrupt, job_pk};
use super::*;

/// The sort key of a processing job's lease item.
pub(super) const LEASE_SK: &str = "L";

/// A processing job's lease item (`sk = L`, beside the job's `J`): its claim token
/// (`tok`), when its lease ends (`until`, nanoseconds), its run's progress (`prog`, JSON),
/// whether a cancel was asked (`cancel`) and a heartbeat counter (`hb`). Heartbeats
/// update only this item: about a hundred bytes, one write unit, in no index; the job
/// document (up to the 192 KiB request cap, projected into the GSIs) is written only by
/// the job's transitions, each of which writes or deletes the lease item with it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Lease {
    pub(super) token: u32,
    pub(super) until: Timestamp,
    pub(super) progress: Option<Progress>,
    pub(super) cancel: bool,
    pub(super) beats: i128,
}

impl Lease {
    /// The lease a job's state calls for: one while it is processing. A fanned-out job's
    /// ranges each hold a claim of their own, kept in the job document
    /// (docs/operations.md, "Fan-out"): its lease item names no claim (token 0, never a
    /// claim's), so their heartbeats are transitions of the document.
    pub(super) fn of(job: &Job) -> Option<Lease> {
        (job.status == JobStatus::Processing).then(|| Lease {
            token: if job.fanout.is_some() {
                0
            } else {
                job.attempts
            },
            until: job.lease_expires_at.unwrap_or(job.created_at),
            progress: job.progress,
            cancel: job.cancel_requested_at.is_some(),
            beats: 0,
        })
    }

    pub(super) fn item(&self, tenant: &str, id: &str) -> Item {
        let mut item = key(job_pk(tenant, id), LEASE_SK);
        item.insert("tok".into(), n(self.token));
        item.insert("until".into(), n(self.until.unix_nanos()));
        item.insert("cancel".into(), AttributeValue::Bool(self.cancel));
        item.insert("hb".into(), n(self.beats));
        if let Some(p) = &self.progress {
            item.insert(
                "prog".into(),
                s(serde_json::to_string(p).expect("progress is JSON")),
            );
        }
        item
    }

    pub(super) fn from_item(item: &Item) -> Result<Lease> {
        let progress = match get_s(item, "prog") {
            Some(p) => Some(serde_json::from_str(p).map_err(|_| corrupt())?),
            None => None,
        };
        Ok(Lease {
            token: get_n(item, "tok").ok_or_else(corrupt)? as u32,
            until: Timestamp::from_unix_nanos(get_n(item, "until").ok_or_else(corrupt)?),
            progress,
            cancel: item
                .get("cancel")
                .and_then(|v| v.as_bool().ok())
                .copied()
                .unwrap_or(false),
            beats: get_n(item, "hb").unwrap_or(0),
        })
    }

    /// The job as its lease says it is now: the live lease end and progress.
    pub(super) fn overlay(&self, job: &mut Job) {
        if job.status == JobStatus::Processing && job.attempts == self.token {
            job.lease_expires_at = Some(self.until);
            if self.progress.is_some() {
                job.progress = self.progress;
            }
        }
    }
}
