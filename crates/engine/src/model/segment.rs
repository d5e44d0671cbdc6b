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
    /// A range of a fanned-out job (docs/engine.md, "Fan-out"): `Some(base)` numbers its
    /// parts from `base` (then after `earlier_parts`), writes every stream as a part
    /// (never at the single object's key) and, at the end of its plan, returns its parts
    /// in a [`Stopped`] that is [`Stopped::ended`] instead of writing a manifest: the host
    /// writes that once every range is done ([`crate::Engine::seal_manifest`]).
    pub part_base: Option<usize>,
}

impl Segment {
    /// Whether earlier runs wrote parts, so this one writes parts too (never the single
    /// result object) and its result, when it finishes, is their manifest. A run resumed
    /// after segments that wrote nothing is like a first one.
    pub fn continues(&self) -> bool {
        !self.earlier_parts.is_empty()
    }

    /// Whether this run writes parts whatever happens: it continues earlier runs or is a
    /// range of a fanned-out job.
    pub fn in_parts(&self) -> bool {
        self.continues() || self.part_base.is_some()
    }

    /// The number of this run's first part.
    pub fn first_part(&self) -> usize {
        self.part_base.unwrap_or(0) + self.earlier_parts.len()
    }
}

/// Part numbers each range of a fanned-out job has to itself: range `i` numbers its parts
/// from `i * RANGE_PART_STRIDE`.
pub const RANGE_PART_STRIDE: usize = 100_000;

/// A key range `lo <= key < hi` of a table's integer leading primary-key column (an open
/// end where `None`): what one range of a fanned-out job reads of its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<i64>,
}

/// What a connector knows of a table's integer leading key: its smallest and largest
/// value and the catalog's row estimate ([`crate::ports::Connector::key_span`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpan {
    pub min: i64,
    pub max: i64,
    pub rows: i64,
}

impl KeySpan {
    /// `n` ranges covering every key, the first and last open (rows inserted beyond the
    /// span while the job runs are read too), cut at equal key distances; fewer when the
    /// span has fewer keys than `n`.
    pub fn ranges(&self, n: usize) -> Vec<KeyRange> {
        let width = (self.max as i128 - self.min as i128 + 1).max(1);
        let n = (n.max(1) as i128).min(width) as usize;
        let cut = |k: usize| (self.min as i128 + width * k as i128 / n as i128) as i64;
        (0..n)
            .map(|k| KeyRange {
                lo: (k > 0).then(|| cut(k)),
                hi: (k + 1 < n).then(|| cut(k + 1)),
            })
            .collect()
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
    /// A range of a fanned-out job read its plan to the end ([`Segment::part_base`]):
    /// there is nothing to resume; `at` is only where it ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended: bool,
}
