//! An extraction: the request, the plan built from it (docs/engine.md, "Planning") and the
//! recorded state of its run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::filter::{DatasourceFilters, Filters};
use crate::limits::Limits;
use crate::model::incremental::IncrementalRead;
use crate::time::Timestamp;

/// `qualifiedTable → [field]`.
pub type FieldSelection = BTreeMap<String, Vec<String>>;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractionRequest {
    /// `configName → (table → [field])`.
    #[serde(default)]
    pub mapped_fields: BTreeMap<String, FieldSelection>,
    /// `configName → (table → (field → condition))`; the engine checks the targets, the
    /// connector the values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filters: Filters,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Limits>,
    /// `configName → (table → incremental read)`: tables read only past a watermark, in
    /// `(cursor, key)` order (docs/api.md, "Incremental extraction"). The engine checks
    /// the targets, the connector the columns.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub incremental: BTreeMap<String, BTreeMap<String, IncrementalRead>>,
}

/// Where the result goes. Unknown strings behave as `Auto`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExecutionMode {
    #[default]
    Auto,
    Direct,
    Store,
}

impl ExecutionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Auto => "",
            ExecutionMode::Direct => "direct",
            ExecutionMode::Store => "store",
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "direct" => ExecutionMode::Direct,
            "store" => ExecutionMode::Store,
            _ => ExecutionMode::Auto,
        }
    }

    fn is_auto(&self) -> bool {
        *self == ExecutionMode::Auto
    }
}

impl Serialize for ExecutionMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ExecutionMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ExecutionMode::parse(&String::deserialize(d)?))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub ordinal: usize,
    pub config_name: String,
    pub tables: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: FieldSelection,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filters: DatasourceFilters,
    /// `table → incremental read` of this step's incremental tables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub incremental: BTreeMap<String, IncrementalRead>,
    /// `table → position`: tables a resumed run reads from just after that row.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resume_after: BTreeMap<String, Vec<serde_json::Value>>,
    /// Ask the connector for positions: every batch of a table with a usable order key
    /// carries [`crate::RowBatch::position`] (docs/engine.md, "Continued runs"). Set by
    /// the engine for a segmented run's steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub positions: bool,
    /// `table → key range`: tables of which only that range of their integer leading
    /// primary key is read (one range of a fanned-out job; docs/engine.md, "Fan-out").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_ranges: BTreeMap<String, crate::KeyRange>,
}

impl PlanStep {
    /// The step of `config` in `request`, as the planner would write it, without the
    /// planner's checks: for callers that drive a connector directly (tests, tools).
    /// Tables in name order; an empty field list reads every column.
    pub fn for_datasource(request: &ExtractionRequest, config: &str) -> PlanStep {
        let selection = request
            .mapped_fields
            .get(config)
            .cloned()
            .unwrap_or_default();
        PlanStep {
            ordinal: 0,
            config_name: config.to_owned(),
            tables: selection.keys().cloned().collect(),
            fields: selection
                .into_iter()
                .filter(|(_, f)| !f.is_empty())
                .collect(),
            filters: request.filters.get(config).cloned().unwrap_or_default(),
            incremental: request.incremental.get(config).cloned().unwrap_or_default(),
            resume_after: BTreeMap::new(),
            positions: false,
            key_ranges: BTreeMap::new(),
        }
    }

    /// The fields read from `table` (empty: every column).
    pub fn fields_of(&self, table: &str) -> &[String] {
        self.fields.get(table).map_or(&[], Vec::as_slice)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractionPlan {
    pub tenant_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    pub steps: Vec<PlanStep>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    pub limits: Limits,
    #[serde(default, skip_serializing_if = "ExecutionMode::is_auto")]
    pub mode: ExecutionMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionStatus {
    Pending,
    Running,
    Completed,
    Failed,
    Canceled,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Pending => "pending",
            ExecutionStatus::Running => "running",
            ExecutionStatus::Completed => "completed",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Canceled => "canceled",
        }
    }

    /// Exact, case-sensitive.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionState {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_id: String,
    /// `None` means "not initialised".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ExecutionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AppliedBy;

    #[test]
    fn enums_have_stable_strings() {
        assert_eq!(ExecutionMode::parse("store"), ExecutionMode::Store);
        assert_eq!(ExecutionMode::parse("STORE"), ExecutionMode::Auto);
        assert_eq!(serde_json::to_string(&ExecutionMode::Auto).unwrap(), "\"\"");
        for s in ["pending", "running", "completed", "failed", "canceled"] {
            assert_eq!(ExecutionStatus::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(ExecutionStatus::parse("cancelled"), None);
        assert_eq!(ExecutionStatus::parse("Completed"), None);
        assert!(ExecutionStatus::Canceled.is_terminal() && !ExecutionStatus::Running.is_terminal());
        for s in ["engine", "adapter", "host"] {
            let a: AppliedBy = serde_json::from_value(serde_json::json!(s)).unwrap();
            assert_eq!(a.as_str(), s);
        }
        // Outside the closed set nothing parses (#29).
        for s in ["", "ENGINE", "sink"] {
            assert!(serde_json::from_value::<AppliedBy>(serde_json::json!(s)).is_err());
        }
    }
}
