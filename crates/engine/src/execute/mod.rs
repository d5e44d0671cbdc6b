//! Extraction execution (docs/engine.md, "Execution"): direct and store modes.
//!
//! This module holds what both modes share: the step tasks, the first-error record and
//! the close-once guarantee below. How a step fails is in [`failure`], rows into batches
//! in [`batch`], direct mode in [`direct`], store mode's scheduler and writer in
//! [`store`], the multi-object mode's producer, part writer and manifest in [`parts`],
//! and a segmented run's stop signal and resumed plan in [`segment`].
//!
//! Each plan step runs in its own task and owns its connector. The first failure is
//! recorded once and cancels the run; every task is joined before returning, and every
//! connector that was built is closed exactly once, also when a step panics.
//!
//! * **Direct mode** runs at most `W` steps at once (a semaphore), keeps the rows, and
//!   returns indented, sorted JSON.
//! * **Store mode** streams NDJSON: producers encode 1024-row batches into a one-batch
//!   hand-off queue each (back-pressure); a single writer drains the queues strictly in
//!   plan order. Producers are scheduled by an *ordinal window* (step `i` starts only
//!   after step `i - W` finished), so the running steps are always the `W` lowest
//!   unfinished ones and the writer can never wait on a step that cannot run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::context::{Context, Done};
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::model::*;
use crate::ports::{Connector, TableFormat};
use crate::progress::ExtractionProgress;
use crate::tenant::TenantContext;
use crate::time::Timestamp;

mod batch;
mod direct;
mod failure;
mod parts;
mod segment;
mod store;

use batch::Sink;
use failure::{catch, connector_error};
use segment::StopSignal;

/// Rows per NDJSON hand-off batch.
///
/// 1024 rather than 256: each hand-off wakes the writer on another thread, and at 256
/// rows the wake-ups cost a tenth of an extraction's CPU (README, "Benchmarks"). The
/// bytes do not depend on it: v2 frames have a fixed size whatever the writes are.
pub const STORE_BATCH_ROWS: usize = 1024;

/// How long the best-effort terminal status write may take (it runs on a fresh context,
/// so a cancelled run can still record `canceled`).
const STATUS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

impl From<Done> for EngineError {
    /// `timeout` / `execution exceeded its deadline` or `canceled` / `execution canceled`.
    fn from(d: Done) -> Self {
        match d {
            Done::DeadlineExceeded => EngineError::new(Category::Timeout, msg::DEADLINE),
            Done::Canceled => EngineError::new(Category::Canceled, msg::CANCELED),
        }
    }
}

impl Engine {
    /// Runs a plan. Limits come from the plan; connections are re-resolved by config name.
    pub async fn execute_extraction(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
    ) -> Result<ExtractionResult> {
        let progress = ExtractionProgress::default();
        self.execute_extraction_observed(ctx, plan, &progress).await
    }

    /// [`Engine::execute_extraction`], counting what store mode writes into `progress`
    /// as it goes (direct mode counts nothing: its result is one bounded document).
    pub async fn execute_extraction_observed(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
        progress: &ExtractionProgress,
    ) -> Result<ExtractionResult> {
        self.traced(
            "engine.extraction.execute",
            self.execute(ctx, plan, progress, None, &Segment::default()),
        )
        .await
    }

    /// Store mode with one object per `(config, table)` in a typed file `format`
    /// (Parquet), then a manifest listing them as the result (docs/results.md, "Parquet
    /// results"). The plan's mode is ignored: this is always store mode. The reference's
    /// `format` is the format's name, `rowCount`/`sizeBytes` cover every part, and
    /// `parts` lists them; `path` and the integrity are the manifest's.
    pub async fn execute_extraction_parts(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
        format: Arc<dyn TableFormat>,
        progress: &ExtractionProgress,
    ) -> Result<ExtractionResult> {
        self.traced(
            "engine.extraction.execute",
            self.execute(ctx, plan, progress, Some(format), &Segment::default()),
        )
        .await
    }

    /// One segment of a run that may take several (docs/engine.md, "Continued runs"):
    /// store mode, NDJSON or `format`'s files. Past `segment.stop_at` it stops at the
    /// next resumable boundary and returns [`ExtractionResult::stopped`] (where the next
    /// segment resumes, and the parts this one sealed). Resumed from
    /// `segment.resume`, it reads exactly the rows after that point and writes parts
    /// numbered after `segment.earlier_parts`; when it reaches the end of the plan, its
    /// result is the manifest of every part. A segment that neither resumes nor stops is
    /// exactly [`Engine::execute_extraction_observed`] (or `_parts`): one object, the
    /// same bytes.
    pub async fn execute_segment(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
        format: Option<Arc<dyn TableFormat>>,
        segment: &Segment,
        progress: &ExtractionProgress,
    ) -> Result<ExtractionResult> {
        let mut plan = plan.clone();
        plan.mode = ExecutionMode::Store;
        self.traced(
            "engine.extraction.execute",
            self.execute(ctx, &plan, progress, format, segment),
        )
        .await
    }

    /// The manifest of a fanned-out job (docs/engine.md, "Fan-out"): `parts`, every
    /// range's in order, listed by a sealed manifest written as the job's result (the
    /// job is `tenant`'s request id), as the last segment of a continued job would. The
    /// host calls it once, after its ranges are all done.
    pub async fn seal_manifest(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        format: StoredFormat,
        parts: Vec<ResultPart>,
    ) -> Result<ExtractionResult> {
        if self.inner.result_sink.is_none() {
            return Err(EngineError::validation(msg::STORE_NEEDS_SINK));
        }
        tenant.validate_scope()?;
        let plan = ExtractionPlan {
            tenant_id: tenant.tenant_id.clone(),
            request_id: tenant.request_id.clone(),
            ..ExtractionPlan::default()
        };
        let mut tally = Tally::default();
        for p in &parts {
            *tally.row_counts.entry(p.config.clone()).or_default() += p.row_count;
        }
        self.manifest_result(ctx, tenant, &plan, format, parts, tally, None)
            .await
    }

    /// The key span of each table of `plan`'s step of `config`, in the step's table
    /// order (its integer leading primary key's smallest and largest value and the row
    /// estimate; `None` for a table without such a key or a connector that cannot tell),
    /// over one connection. What a host cuts a fanned-out job's ranges from.
    pub async fn key_spans(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
        config: &str,
    ) -> Result<Vec<Option<KeySpan>>> {
        let store = self
            .inner
            .connection_store
            .as_ref()
            .ok_or_else(|| EngineError::validation(msg::STORE_NOT_CONFIGURED))?;
        let tenant = plan_tenant(plan)?;
        let step = plan
            .steps
            .iter()
            .find(|s| s.config_name == config)
            .ok_or_else(|| EngineError::validation(msg::UNKNOWN_DATASOURCE))?;
        let descriptor = self
            .require_step_connection(ctx, store, &tenant, config)
            .await?;
        let mut connector: Box<dyn Connector> =
            catch(self.build_connector(ctx, &tenant, &descriptor)).await?;
        let spans = catch(async {
            let mut spans = Vec::with_capacity(step.tables.len());
            for table in &step.tables {
                let span = connector
                    .key_span(ctx, step, table)
                    .await
                    .map_err(|e| connector_error(e, ctx, msg::QUERY_FAILED))?;
                spans.push(span);
            }
            Ok(spans)
        })
        .await;
        let _ = connector.close(ctx).await;
        spans
    }

    async fn execute(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
        progress: &ExtractionProgress,
        format: Option<Arc<dyn TableFormat>>,
        segment: &Segment,
    ) -> Result<ExtractionResult> {
        self.inner
            .connection_store
            .as_ref()
            .ok_or_else(|| EngineError::validation(msg::STORE_NOT_CONFIGURED))?;
        let tenant = plan_tenant(plan)?;
        let store_mode = match plan.mode {
            _ if format.is_some() => {
                if self.inner.result_sink.is_none() {
                    return Err(EngineError::validation(msg::STORE_NEEDS_SINK));
                }
                true
            }
            ExecutionMode::Store => {
                if self.inner.result_sink.is_none() {
                    return Err(EngineError::validation(msg::STORE_NEEDS_SINK));
                }
                true
            }
            ExecutionMode::Direct => false,
            ExecutionMode::Auto => self.inner.result_sink.is_some(),
        };
        let run = if plan.limits.timeout.is_zero() {
            ctx.child()
        } else {
            ctx.with_timeout(plan.limits.timeout)
        };
        let resumed;
        let plan = match &segment.resume {
            Some(point) => {
                resumed = segment::resumed(plan, point)?;
                &resumed
            }
            None => plan,
        };

        self.record_status(
            ctx,
            &tenant,
            ExecutionState {
                job_id: plan.request_id.clone(),
                status: Some(ExecutionStatus::Running),
                started_at: Some(Timestamp::now()),
                ..Default::default()
            },
        )
        .await;
        // A segmented run's steps stop once the stop time passes (store mode only).
        let stop = segment
            .stop_at
            .filter(|_| store_mode)
            .map(|at| Arc::new(StopSignal::at(at)));
        let out = if let Some(format) = format {
            self.run_parts(
                &run,
                ctx,
                &tenant,
                plan,
                format,
                progress,
                segment,
                stop.clone(),
            )
            .await
        } else if store_mode {
            self.run_store(&run, ctx, &tenant, plan, progress, segment, stop.clone())
                .await
        } else {
            self.run_direct(&run, ctx, &tenant, plan).await
        };
        let out = match (out, &stop) {
            (Err(e), Some(signal)) => Err(signal.explain(e)),
            (out, _) => out,
        };
        let terminal = match &out {
            // A stopped segment: the job goes on in the next one.
            Ok(r) if r.stopped.is_some() => ExecutionState {
                job_id: plan.request_id.clone(),
                status: Some(ExecutionStatus::Running),
                ..Default::default()
            },
            Ok(r) => ExecutionState {
                job_id: plan.request_id.clone(),
                status: Some(ExecutionStatus::Completed),
                completed_at: r.state.completed_at,
                ..Default::default()
            },
            Err(e) => ExecutionState {
                job_id: plan.request_id.clone(),
                status: Some(if e.category() == Category::Canceled {
                    ExecutionStatus::Canceled
                } else {
                    ExecutionStatus::Failed
                }),
                completed_at: Some(Timestamp::now()),
                failure_message: e.message().to_owned(),
                ..Default::default()
            },
        };
        let status_ctx = Context::background().with_timeout(STATUS_WRITE_TIMEOUT);
        self.record_status(&status_ctx, &tenant, terminal).await;
        out
    }

    /// Best effort: errors are ignored and never change the result.
    async fn record_status(&self, ctx: &Context, tenant: &TenantContext, state: ExecutionState) {
        if let Some(store) = &self.inner.execution_store {
            let _ = store.save(ctx, tenant, &state).await;
        }
    }

    /// The per-step work shared by both modes. `connector` lives outside the
    /// panic-catching section so it is closed even when the step panics. Returns the
    /// watermark each incremental table reached: its last row's `(cursor, key)`, the
    /// connector yielding those tables in that order.
    ///
    /// With a stop signal (a segmented run), the step stops once it is asked, at the first
    /// boundary it can resume from: after a batch that carries a position, or before a
    /// table begins; the sink then ends with a stop marker naming that point.
    async fn run_step(
        &self,
        run: &Context,
        tenant: &TenantContext,
        step: &PlanStep,
        mut sink: Sink<'_>,
        stop: Option<&StopSignal>,
    ) -> Result<Reached> {
        if let Some(d) = run.err() {
            return Err(d.into());
        }
        let store = self
            .inner
            .connection_store
            .as_ref()
            .expect("checked at entry");
        let descriptor = self
            .require_step_connection(run, store, tenant, &step.config_name)
            .await?;
        let mut connector: Box<dyn Connector> =
            catch(self.build_connector(run, tenant, &descriptor)).await?;
        let direct = matches!(sink, Sink::Direct(_));
        let outcome = catch(async {
            if let Err(e) = connector.test_connection(run).await {
                return Err(connector_error(e, run, msg::CONNECT_FAILED));
            }
            if direct && let Some(d) = run.err() {
                return Err(d.into());
            }
            let read = PlanStep {
                positions: stop.is_some(),
                ..step.clone()
            };
            let mut cursor = connector
                .query_stream(run, &read)
                .await
                .map_err(|e| connector_error(e, run, msg::QUERY_FAILED))?;
            let mut drained = Ok(());
            let mut reached = Reached::new();
            let mut reading: Option<std::sync::Arc<str>> = None;
            // The span of the table being read (`engine.table.read`), a child of the step's.
            let mut table_span: Option<Box<dyn crate::ports::Span>> = None;
            let mut stopped = None;
            // A step stops only once this run has read a row, in this step or an earlier
            // one, so every segment makes progress however early its stop is asked.
            let mut read_rows = false;
            let asked = |read_rows: bool| {
                stop.is_some_and(|s| s.asked() && (read_rows || s.read_before(&step.config_name)))
            };
            loop {
                match cursor.next_batch(run).await {
                    Ok(Some(batch)) => {
                        if batch.rows.is_empty() && step.resume_after.contains_key(&*batch.table) {
                            // A resumed table with nothing after its point: the run that
                            // began it announced its columns already.
                            continue;
                        }
                        if asked(read_rows) && reading.as_ref() != Some(&batch.table) {
                            // A table begins: the earlier ones are whole.
                            stopped = Some(point(step, &batch.table, None));
                            break;
                        }
                        if let Some(w) = &batch.watermark {
                            reached.insert(batch.table.to_string(), (**w).clone());
                        } else if let Some(read) = step.incremental.get(&*batch.table)
                            && !read.spec.is_log()
                            && let Some(last) = batch.rows.last()
                        {
                            reached.insert(batch.table.to_string(), reached_by(read, last));
                        }
                        let (table, position) = (batch.table.clone(), batch.position.clone());
                        if !read_rows && !batch.rows.is_empty() {
                            read_rows = true;
                            if let Some(s) = stop {
                                s.read_rows(&step.config_name);
                            }
                        }
                        if reading.as_ref() != Some(&batch.table) {
                            if let Some(done) = table_span.take() {
                                done.end(None);
                            }
                            table_span = self.span_about(
                                "engine.table.read",
                                crate::ports::SpanSubject {
                                    config: Some(&step.config_name),
                                    table: Some(&batch.table),
                                },
                            );
                        }
                        if let Err(e) = sink.accept(run, batch).await {
                            drained = Err(e);
                            break;
                        }
                        if asked(read_rows) {
                            match position {
                                Some(p) => {
                                    stopped = Some(point(step, &table, Some(p)));
                                    break;
                                }
                                None => stop.expect("asked").blocked_in(&step.config_name, &table),
                            }
                        }
                        reading = Some(table);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        drained = Err(connector_error(e, run, msg::QUERY_FAILED));
                        break;
                    }
                }
            }
            let _ = cursor.close(run).await;
            if let Some(span) = table_span.take() {
                span.end(drained.as_ref().err());
            }
            drained?;
            // A cursor that swallowed a cancel must not yield a half-read result.
            if let Some(d) = run.err() {
                return Err(d.into());
            }
            if let Some(at) = stopped {
                sink.stop(run, at).await?;
                return Ok(reached);
            }
            match &mut sink {
                Sink::Store(p) => p.flush(run).await?,
                Sink::Parts(p) => p.finish(run, step).await?,
                Sink::Direct(_) => {}
            }
            Ok(reached)
        })
        .await;
        let _ = catch(connector.close(run)).await;
        outcome
    }
}

/// A store-mode run's result from the sink's reference (its `appliedBy` is typed, so
/// always one of the closed set): fills in the engine's SHA-256 `digest` unless the sink gave one, stamps completion.
fn stored_result(
    plan: &ExtractionPlan,
    mut reference: ResultReference,
    digest: String,
    tally: Tally,
) -> Result<ExtractionResult> {
    match &mut reference.integrity {
        None => reference.integrity = Some(ResultIntegrity::sha256(digest)),
        // A keyed signature from the sink; the digest is the engine's.
        Some(i) if i.digest.is_empty() => i.digest = digest,
        Some(_) => {}
    }
    let completed_at = Timestamp::now();
    reference.completed_at = Some(completed_at);
    Ok(ExtractionResult {
        state: completed_state(plan, completed_at),
        direct: None,
        reference: Some(reference),
        row_counts: tally.row_counts,
        watermarks: tally.watermarks,
        stopped: None,
    })
}

/// The result of a segmented run that stopped at `at` having sealed `parts`.
fn stopped_result(
    plan: &ExtractionPlan,
    parts: Vec<ResultPart>,
    at: Option<ResumePoint>,
    tally: Tally,
) -> ExtractionResult {
    ExtractionResult {
        state: ExecutionState {
            job_id: plan.request_id.clone(),
            status: Some(ExecutionStatus::Running),
            ..Default::default()
        },
        direct: None,
        reference: None,
        row_counts: tally.row_counts,
        watermarks: tally.watermarks,
        stopped: at.map(|at| Stopped {
            at,
            parts,
            ended: false,
        }),
    }
}

/// The tenant a plan runs for (its request id the plan's), checked.
fn plan_tenant(plan: &ExtractionPlan) -> Result<TenantContext> {
    let tenant = TenantContext {
        tenant_id: plan.tenant_id.clone(),
        request_id: plan.request_id.clone(),
    };
    tenant.validate_scope()?;
    Ok(tenant)
}

/// The result of a fanned-out job's range that read its plan to the end having sealed
/// `parts`: a stop that is [`Stopped::ended`], where its last table is.
fn ended_result(plan: &ExtractionPlan, parts: Vec<ResultPart>, tally: Tally) -> ExtractionResult {
    let end = plan
        .steps
        .last()
        .map(|s| point(s, s.tables.last().map_or("", String::as_str), None));
    let end = end.unwrap_or(ResumePoint {
        config: String::new(),
        table: String::new(),
        after: None,
    });
    let mut r = stopped_result(plan, parts, Some(end), tally);
    if let Some(s) = r.stopped.as_mut() {
        s.ended = true;
    }
    r
}

/// Where a (resumed) plan begins: its first step's datasource and first table.
fn starts_at(plan: &ExtractionPlan) -> (String, String) {
    plan.steps
        .first()
        .map(|s| {
            (
                s.config_name.clone(),
                s.tables.first().cloned().unwrap_or_default(),
            )
        })
        .unwrap_or_default()
}

/// `table → the watermark it reached`, of one step.
type Reached = BTreeMap<String, Watermark>;

/// The point in `step` at `table`, after `position`.
fn point(step: &PlanStep, table: &str, after: Option<Vec<serde_json::Value>>) -> ResumePoint {
    ResumePoint {
        config: step.config_name.clone(),
        table: table.to_owned(),
        after,
    }
}

/// What a run counted: rows per config, and the watermarks its incremental tables reached.
#[derive(Debug, Default)]
struct Tally {
    row_counts: BTreeMap<String, i64>,
    watermarks: BTreeMap<String, Reached>,
}

impl Tally {
    fn reached(&mut self, config: &str, reached: Reached) {
        if !reached.is_empty() {
            self.watermarks
                .entry(config.to_owned())
                .or_default()
                .extend(reached);
        }
    }
}

/// The `(cursor, key)` of `row` under `read`, rendered as the result renders them.
/// The watermark a read reached with `row` its last: that row's, except that a watermark
/// never moves back. A lookback re-reads rows at or below the read's starting point, so
/// when the rows past it are gone (a hard delete) the last row read is below it; the
/// starting point then stays the watermark.
fn reached_by(read: &IncrementalRead, row: &crate::value::Row) -> Watermark {
    let at = watermark_of(read, row);
    match &read.after {
        Some(after)
            if read.spec.lookback.is_some()
                && at.position_cmp(after) == Some(std::cmp::Ordering::Less) =>
        {
            after.clone()
        }
        _ => at,
    }
}

fn watermark_of(read: &IncrementalRead, row: &crate::value::Row) -> Watermark {
    Watermark {
        cursor: read.spec.cursor.clone(),
        key: read.spec.key.clone(),
        values: read
            .spec
            .columns()
            .map(|c| row.get(c).map_or(serde_json::Value::Null, |v| v.to_json()))
            .collect(),
        log: None,
    }
}

/// The terminal state of a run that completed at `at`.
fn completed_state(plan: &ExtractionPlan, at: Timestamp) -> ExecutionState {
    ExecutionState {
        job_id: plan.request_id.clone(),
        status: Some(ExecutionStatus::Completed),
        completed_at: Some(at),
        ..Default::default()
    }
}

/// Lowercase hex, as every digest the engine and its hosts report is written.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}
