//! Segmented runs (docs/engine.md, "Continued runs"): a run asked to stop stops at the
//! next boundary it can resume from, seals what it wrote as finished parts, and says
//! where the next run starts. A run that resumes reads exactly the rows after that point,
//! in the same order, so the parts of all runs together hold what one uninterrupted run
//! would have written.

use serde::{Deserialize, Serialize};

use crate::model::result::ResultPart;

/// Where a stopped run ended and the next one resumes: the datasource (plan step) and
/// table it stopped in, and the order-key values of the last row it wrote, as the result
/// renders them (`None`: the table is read from its start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumePoint {
    pub config: String,
    pub table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<serde_json::Value>>,
}

/// What a run may do beyond an ordinary one ([`crate::Engine::execute_segment`]).
#[derive(Debug, Clone, Default)]
pub struct Segment {
    /// Once this instant passes, stop at the next resumable boundary: after a batch of a
    /// table whose connector reports positions (its order key), or where a table begins.
    pub stop_at: Option<tokio::time::Instant>,
    /// Where this run starts; `None`: at the plan's beginning.
    pub resume: Option<ResumePoint>,
    /// The parts earlier runs of the job wrote, in order: this run's parts are numbered
    /// after them, and when it finishes the manifest lists them first.
    pub earlier_parts: Vec<ResultPart>,
}

impl Segment {
    /// Whether earlier runs wrote parts, so this one writes parts too (never the single
    /// result object) and its result, when it finishes, is their manifest. A run resumed
    /// after segments that wrote nothing is like a first one.
    pub fn continues(&self) -> bool {
        !self.earlier_parts.is_empty()
    }
}

/// A run that stopped before the end of its plan ([`crate::ExtractionResult::stopped`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    /// Where the next run resumes.
    pub at: ResumePoint,
    /// The parts this run sealed, in order (none when it wrote no row).
    pub parts: Vec<ResultPart>,
}
