//! Direct mode (docs/engine.md, "Execution"): at most `W` steps at once (a semaphore),
//! rows kept in memory under a size guard, one indented, sorted JSON document.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::batch::Sink;
use super::failure::{FirstError, panic_error, serialize_failed};
use super::{Tally, completed_state, hex};
use crate::context::{Context, Done};
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::json::Encoder;
use crate::model::*;
use crate::tenant::TenantContext;
use crate::time::Timestamp;
use crate::value::Row;

/// Shared state of the size guard in direct mode (layer 1).
struct DirectBudget {
    limit: i64,
    total: AtomicI64,
}

impl Engine {
    pub(super) async fn run_direct(
        &self,
        run: &Context,
        caller: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
    ) -> Result<ExtractionResult> {
        let permits = Arc::new(Semaphore::new(plan.limits.concurrency()));
        let first = FirstError::new(run);
        let budget = Arc::new(DirectBudget {
            limit: plan.limits.max_result_bytes,
            total: AtomicI64::new(0),
        });
        let mut tasks = JoinSet::new();
        for (index, step) in plan.steps.iter().enumerate() {
            let (engine, run, tenant, step) =
                (self.clone(), run.clone(), tenant.clone(), step.clone());
            let (permits, first, budget) = (permits.clone(), first.clone(), budget.clone());
            let span = self.span_about(
                "engine.step",
                crate::ports::SpanSubject {
                    config: Some(&step.config_name),
                    table: None,
                },
            );
            tasks.spawn(async move {
                let _permit = permits
                    .acquire_owned()
                    .await
                    .expect("semaphore never closed");
                let mut tables = BTreeMap::new();
                let out = crate::engine::within(
                    span,
                    engine.run_step(&run, &tenant, &step, Sink::Direct(&mut tables), None),
                )
                .await;
                let out =
                    out.and_then(|reached| check_direct_budget(&tables, &budget).map(|()| reached));
                match out {
                    Ok(reached) => Some((index, tables, reached)),
                    Err(e) => {
                        first.record(e);
                        None
                    }
                }
            });
        }
        let mut per_step: Vec<Option<BTreeMap<String, Vec<Row>>>> = vec![None; plan.steps.len()];
        let mut tally = Tally::default();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Some((i, tables, reached))) => {
                    per_step[i] = Some(tables);
                    tally.reached(&plan.steps[i].config_name, reached);
                }
                Ok(None) => {}
                Err(e) if e.is_panic() => first.record(panic_error(e.into_panic())),
                Err(_) => first.record(Done::Canceled.into()),
            }
        }
        if let Some(e) = first.take() {
            return Err(e);
        }
        if let Some(d) = caller.err().or(run.err()) {
            return Err(d.into());
        }

        let mut aggregate: BTreeMap<String, BTreeMap<String, Vec<Row>>> = BTreeMap::new();
        for (step, tables) in plan.steps.iter().zip(per_step) {
            let tables = tables.unwrap_or_default();
            let rows: i64 = tables.values().map(|r| r.len() as i64).sum();
            *tally
                .row_counts
                .entry(step.config_name.clone())
                .or_insert(0) += rows;
            aggregate
                .entry(step.config_name.clone())
                .or_default()
                .extend(tables);
        }
        if let Some(d) = caller.err().or(run.err()) {
            return Err(d.into());
        }
        let mut data = Vec::new();
        Encoder::indented(&mut data)
            .map(&aggregate, |e, tables| {
                e.map(tables, |e, rows| e.list(rows, |e, row| e.row(row)))
            })
            .map_err(|_| serialize_failed())?;
        if plan.limits.max_result_bytes > 0 && data.len() as i64 > plan.limits.max_result_bytes {
            return Err(EngineError::new(
                Category::LimitExceeded,
                msg::RESULT_TOO_LARGE,
            ));
        }
        let completed_at = Timestamp::now();
        let row_count = tally.row_counts.values().sum();
        Ok(ExtractionResult {
            state: completed_state(plan, completed_at),
            direct: Some(DirectResult {
                format: StoredFormat::Json,
                row_count,
                plaintext_size: data.len() as i64,
                integrity: Some(ResultIntegrity::sha256(hex(&Sha256::digest(&data)))),
                protection: Some(ResultProtection {
                    encrypted: false,
                    key_version: String::new(),
                    mode: String::new(),
                    applied_by: AppliedBy::Engine,
                }),
                completed_at: Some(completed_at),
                data,
            }),
            reference: None,
            row_counts: tally.row_counts,
            watermarks: tally.watermarks,
            stopped: None,
        })
    }
}

/// Layer 1 of the direct size guard: the step's compact size joins a shared running
/// total (a lower bound of the final size), failing fast once past the limit.
fn check_direct_budget(tables: &BTreeMap<String, Vec<Row>>, budget: &DirectBudget) -> Result<()> {
    if budget.limit <= 0 {
        return Ok(());
    }
    let mut buf = Vec::new();
    Encoder::compact(&mut buf)
        .map(tables, |e, rows| e.list(rows, |e, row| e.row(row)))
        .map_err(|_| serialize_failed())?;
    let total = budget.total.fetch_add(buf.len() as i64, Ordering::SeqCst) + buf.len() as i64;
    if total > budget.limit {
        return Err(EngineError::new(
            Category::LimitExceeded,
            msg::RESULT_TOO_LARGE,
        ));
    }
    Ok(())
}
