//! Segmented runs (docs/engine.md, "Continued runs"): the signal that asks a run's steps
//! to stop at their next resumable boundary, and the plan of a resumed run.

use std::sync::Mutex;

use crate::error::{Category, EngineError, Result};
use crate::model::*;

/// A segmented run's stop time, read by every step after each batch (one clock read per
/// batch: cheaper than a timer task, and exact whatever the runtime schedules).
pub(super) struct StopSignal {
    at: tokio::time::Instant,
    /// The table a step was reading when a stop was asked and could not stop in (its
    /// connector reports no positions): if the run then runs out of time, that is why.
    blocked: Mutex<Option<(String, String)>>,
    /// The datasources whose step has read a row in this run.
    read: Mutex<Vec<String>>,
}

impl StopSignal {
    pub(super) fn at(at: tokio::time::Instant) -> Self {
        StopSignal {
            at,
            blocked: Mutex::default(),
            read: Mutex::default(),
        }
    }

    /// The step of `config` read a row.
    pub(super) fn read_rows(&self, config: &str) {
        let mut read = self.read.lock().expect("stop lock");
        if !read.iter().any(|c| c == config) {
            read.push(config.to_owned());
        }
    }

    /// Whether a step before `config`'s (plan order is datasource-name order) read a
    /// row: then this run writes something even if `config`'s step stops at once.
    pub(super) fn read_before(&self, config: &str) -> bool {
        self.read
            .lock()
            .expect("stop lock")
            .iter()
            .any(|c| c.as_str() < config)
    }

    pub(super) fn asked(&self) -> bool {
        tokio::time::Instant::now() >= self.at
    }

    pub(super) fn blocked_in(&self, config: &str, table: &str) {
        let mut b = self.blocked.lock().expect("stop lock");
        if b.is_none() {
            *b = Some((config.to_owned(), table.to_owned()));
        }
    }

    /// A run that ran out of time after a stop was asked, in a table it could not stop
    /// in: `limit_exceeded`, naming the table and why.
    pub(super) fn explain(&self, e: EngineError) -> EngineError {
        match (&*self.blocked.lock().expect("stop lock"), e.category()) {
            (Some((config, table)), Category::Timeout) => EngineError::new(
                Category::LimitExceeded,
                format!(
                    "table '{config}.{table}' did not fit in one run and cannot be continued in another: it has no primary key to resume after"
                ),
            ),
            _ => e,
        }
    }
}

fn bad_point() -> EngineError {
    EngineError::validation("the resume point is not in the plan")
}

/// `plan` from `point` on: the steps before its datasource and, in its step, the tables
/// before its table are dropped (an earlier run wrote them); its table is read after the
/// point's position, when it has one.
pub(super) fn resumed(plan: &ExtractionPlan, point: &ResumePoint) -> Result<ExtractionPlan> {
    let at = plan
        .steps
        .iter()
        .position(|s| s.config_name == point.config)
        .ok_or_else(bad_point)?;
    let mut out = plan.clone();
    out.steps.drain(..at);
    let step = &mut out.steps[0];
    let from = step
        .tables
        .iter()
        .position(|t| *t == point.table)
        .ok_or_else(bad_point)?;
    let dropped: Vec<String> = step.tables.drain(..from).collect();
    for t in &dropped {
        step.fields.remove(t);
        step.filters.remove(t);
        step.incremental.remove(t);
    }
    if let Some(after) = &point.after {
        step.resume_after.insert(point.table.clone(), after.clone());
    }
    Ok(out)
}
