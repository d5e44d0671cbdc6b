//! A continued job's checkpoint (docs/operations.md, "Long jobs").

use std::collections::BTreeMap;

use fetcher_engine::Watermark;
use serde::{Deserialize, Serialize};

/// What the segments of a continued job so far have done, written with the transition
/// that ends a segment ([`super::Transition::Checkpoint`]); the next segment's message carries
/// its number and digest, so a worker only resumes from the checkpoint that message was
/// sent for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Segments finished so far (the next one's number).
    pub segment: u32,
    /// Where the next segment resumes.
    pub resume: fetcher_engine::ResumePoint,
    /// Every part the segments sealed, in order.
    pub parts: Vec<fetcher_engine::ResultPart>,
    /// Rows and plaintext bytes written so far, and tables finished.
    pub rows: u64,
    pub bytes: u64,
    pub tables_done: u64,
    /// `configName → table → watermark` the incremental tables reached so far.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub watermarks: BTreeMap<String, BTreeMap<String, Watermark>>,
    /// The job's claims when the checkpoint was written: the next segment's claim cap
    /// counts from here.
    pub claims: u32,
    /// Milliseconds the segments so far ran.
    pub elapsed_ms: u64,
}

impl Checkpoint {
    /// Lowercase hex SHA-256 of the checkpoint's JSON: what a continuation message
    /// carries, signed, so a checkpoint changed in the store is refused.
    pub fn digest(&self) -> String {
        use sha2::Digest;
        let json = serde_json::to_vec(self).expect("a checkpoint is JSON");
        crate::dedup::hex(&sha2::Sha256::digest(&json))
    }
}
