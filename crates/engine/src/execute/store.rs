//! Store mode (docs/engine.md, "Execution"): producers encode 1024-row NDJSON batches
//! into a one-batch hand-off queue each (back-pressure); one writer drains the queues
//! strictly in plan order. Producers are scheduled by an *ordinal window* (step `i` starts
//! only after step `i - W` finished), so the running steps are always the `W` lowest
//! unfinished ones and the writer can never wait on a step that cannot run. The
//! multi-object mode ([`super::parts`]) shares the producers and the writer.

use std::collections::BTreeMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::batch::{Batch, BufferPool, Producer, Sink};
use super::failure::{FirstError, SetOnDrop, panic_error};
use super::parts::{PartProducer, PartsOutput};
use super::segment::StopSignal;
use super::{Tally, ended_result, hex, starts_at, stopped_result, stored_result};
use crate::context::Context;
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::model::*;
use crate::ports::{ResultObject, ResultStreamWriter, TableFormat};
use crate::progress::ExtractionProgress;
use crate::tenant::TenantContext;

/// Where the ordered writer puts the batches of a store-mode run.
pub(super) enum Output<'w> {
    /// One NDJSON stream, hashed as it goes.
    Stream {
        writer: &'w mut dyn ResultStreamWriter,
        hasher: Sha256,
    },
    /// One object per table (then a manifest, written by the caller).
    Parts(PartsOutput<'w>),
}

impl Output<'_> {
    pub(super) async fn write(&mut self, run: &Context, config: &str, batch: &Batch) -> Result<()> {
        match self {
            Output::Stream { writer, hasher } => {
                writer.write(run, &batch.bytes).await?;
                hasher.update(&batch.bytes);
                Ok(())
            }
            Output::Parts(parts) => parts.write(run, config, batch).await,
        }
    }
}

impl Engine {
    /// Store mode's NDJSON stream. A run that neither resumes nor stops writes the single
    /// result object; a segmented one writes its stream as a part (the first segment's at
    /// the single object's path, the later ones' beside it) and, when it reaches the end
    /// after earlier segments, the manifest of every part.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_store(
        &self,
        run: &Context,
        caller: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
        progress: &ExtractionProgress,
        segment: &Segment,
        stop: Option<Arc<StopSignal>>,
    ) -> Result<ExtractionResult> {
        if let Some(d) = run.err() {
            return Err(d.into());
        }
        let sink = self.inner.result_sink.as_ref().expect("checked at entry");
        let opened = if !segment.in_parts() {
            sink.open_stream(run, tenant, &plan.request_id).await
        } else {
            let object = ResultObject::Part {
                index: segment.part(segment.first_part())?,
                extension: StoredFormat::Ndjson.as_str(),
                claim: segment.claim,
            };
            sink.open_object(run, tenant, &plan.request_id, object)
                .await
        };
        let mut writer =
            opened.map_err(|_| EngineError::new(Category::Unavailable, msg::PERSIST_FAILED))?;

        let mut out = Output::Stream {
            writer: writer.as_mut(),
            hasher: Sha256::new(),
        };
        let streamed = self
            .stream_steps(run, caller, tenant, plan, &mut out, None, progress, stop)
            .await;
        let Output::Stream { hasher, .. } = out else {
            unreachable!("built above")
        };
        let Streamed {
            total: total_bytes,
            tally,
            stopped,
        } = match streamed {
            Ok(s) => s,
            Err(e) => {
                writer.abort(run).await;
                return Err(e);
            }
        };
        let digest = hex(&hasher.finalize());
        let row_count: i64 = tally.row_counts.values().sum();
        if (stopped.is_some() || segment.in_parts()) && total_bytes == 0 {
            // A segment that wrote no row leaves no part.
            writer.abort(run).await;
            if stopped.is_some() {
                return Ok(stopped_result(plan, Vec::new(), stopped, tally));
            }
            if segment.part_base.is_some() {
                return Ok(ended_result(plan, Vec::new(), tally));
            }
            return self
                .manifest_result(
                    run,
                    tenant,
                    plan,
                    StoredFormat::Ndjson,
                    segment.earlier_parts.clone(),
                    tally,
                    segment.claim,
                )
                .await;
        }

        let mut reference = writer
            .close(run)
            .await
            .map_err(|_| EngineError::new(Category::Unavailable, msg::PERSIST_FAILED))?;
        if stopped.is_some() || segment.in_parts() {
            // One part of a segmented result, labelled with where it begins.
            let (config, table) = starts_at(plan);
            let part = ResultPart {
                config,
                table,
                path: reference.path,
                row_count,
                size_bytes: total_bytes,
                stored_bytes: reference.stored_bytes,
                hmac: reference.integrity.map(|i| i.signature).unwrap_or_default(),
                sha256: digest,
            };
            if stopped.is_some() {
                return Ok(stopped_result(plan, vec![part], stopped, tally));
            }
            if segment.part_base.is_some() {
                return Ok(ended_result(plan, vec![part], tally));
            }
            let mut parts = segment.earlier_parts.clone();
            parts.push(part);
            return self
                .manifest_result(
                    run,
                    tenant,
                    plan,
                    StoredFormat::Ndjson,
                    parts,
                    tally,
                    segment.claim,
                )
                .await;
        }
        // The reference says `json` here although the bytes are NDJSON; we say what
        // they are.
        reference.format = StoredFormat::Ndjson;
        reference.row_count = row_count;
        if reference.size_bytes == 0 {
            reference.size_bytes = total_bytes;
        }
        stored_result(plan, reference, digest, tally)
    }

    /// Producers + ordered writer: NDJSON producers, or part producers when a `format`
    /// is given. With a stop signal (a segmented run), the writer ends at the first stop
    /// marker, in plan order: what came before it is written, the steps still running are
    /// halted, and their rows (not written) count for nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn stream_steps(
        &self,
        run: &Context,
        caller: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
        out: &mut Output<'_>,
        format: Option<&Arc<dyn TableFormat>>,
        progress: &ExtractionProgress,
        stop: Option<Arc<StopSignal>>,
    ) -> Result<Streamed> {
        progress.start(plan.steps.iter().map(|s| s.tables.len() as u64).sum());
        let window = plan.limits.concurrency();
        let first = FirstError::new(run);
        // The steps' own context: a stopped run halts the steps still going without
        // cancelling the run, whose writer still has to seal what it wrote.
        let halt = run.child();
        let mut queues = Vec::with_capacity(plan.steps.len());
        let mut finished: Vec<watch::Receiver<bool>> = Vec::with_capacity(plan.steps.len());
        let mut tasks = JoinSet::new();
        let pool = BufferPool::default();
        let reached = Arc::new(std::sync::Mutex::new(Tally::default()));
        for (index, step) in plan.steps.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Batch>(1);
            queues.push(rx);
            let (done_tx, done_rx) = watch::channel(false);
            let wait_for = index.checked_sub(window).map(|j| finished[j].clone());
            finished.push(done_rx);
            let (engine, run, tenant, step, first, pool, format, tally, stop) = (
                self.clone(),
                halt.clone(),
                tenant.clone(),
                step.clone(),
                first.clone(),
                pool.clone(),
                format.cloned(),
                reached.clone(),
                stop.clone(),
            );
            let span = self.span_about(
                "engine.step",
                crate::ports::SpanSubject {
                    config: Some(&step.config_name),
                    table: None,
                },
            );
            tasks.spawn(async move {
                // Signals "finished" however the task ends (success, error, panic, abort).
                let _done = SetOnDrop(done_tx);
                if let Some(mut rx) = wait_for {
                    let _ = rx.wait_for(|f| *f).await;
                }
                let stop = stop.as_deref();
                let outcome = match format {
                    None => {
                        let mut producer = Producer::new(&step.config_name, tx, pool);
                        let sink = Sink::Store(&mut producer);
                        crate::engine::within(
                            span,
                            engine.run_step(&run, &tenant, &step, sink, stop),
                        )
                        .await
                    }
                    Some(format) => {
                        let mut producer = PartProducer::new(format, tx, pool);
                        let sink = Sink::Parts(&mut producer);
                        crate::engine::within(
                            span,
                            engine.run_step(&run, &tenant, &step, sink, stop),
                        )
                        .await
                    }
                };
                match outcome {
                    Ok(r) => tally
                        .lock()
                        .expect("tally lock")
                        .reached(&step.config_name, r),
                    Err(e) => first.record(e),
                }
                // Dropping the producer closes this step's queue.
            });
        }
        drop(finished);

        let limit = plan.limits.max_result_bytes;
        let mut total: i64 = 0;
        let mut row_counts: BTreeMap<String, i64> = BTreeMap::new();
        let mut writer_error = None;
        let mut stopped = None;
        'steps: for (step, queue) in plan.steps.iter().zip(queues.iter_mut()) {
            let count = row_counts.entry(step.config_name.clone()).or_insert(0);
            let mut tables_ended = 0;
            loop {
                let batch = match run.run(queue.recv()).await {
                    Ok(Some(b)) => b,
                    Ok(None) => {
                        // The step is done: every table of it (empty ones too).
                        let rest = (step.tables.len() as u64).saturating_sub(tables_ended);
                        progress.wrote(0, 0, rest);
                        break;
                    }
                    Err(_) => break 'steps, // the run failed or was cancelled
                };
                if let Some(at) = batch.stop {
                    // The steps after this point are halted; a failure they meet from
                    // now on is the halt's, not the run's.
                    first.seal();
                    halt.cancel();
                    stopped = Some(at);
                    break 'steps;
                }
                total += batch.bytes.len() as i64;
                if limit > 0 && total > limit {
                    writer_error = Some(EngineError::new(
                        Category::LimitExceeded,
                        msg::RESULT_TOO_LARGE,
                    ));
                    run.cancel();
                    break 'steps;
                }
                if let Err(e) = out.write(run, &step.config_name, &batch).await {
                    // A write interrupted because the run ended reports why the run
                    // ended; a sink that cannot store parts says so; any other write
                    // failure is the sink's.
                    if run.err().is_none() {
                        writer_error = Some(if e.category() == Category::Validation {
                            e
                        } else {
                            EngineError::new(Category::Unavailable, msg::PERSIST_FAILED)
                        });
                        run.cancel();
                    }
                    break 'steps;
                }
                *count += batch.rows;
                tables_ended += batch.tables_ended;
                progress.wrote(
                    batch.rows as u64,
                    batch.bytes.len() as u64,
                    batch.tables_ended,
                );
                pool.give(batch.bytes);
            }
        }
        drop(queues); // unblocks any producer still waiting to hand off
        while let Some(joined) = tasks.join_next().await {
            if let Err(e) = joined
                && e.is_panic()
            {
                first.record(panic_error(e.into_panic()));
            }
        }
        // The writer's failure wins over producers that merely observed its cancel.
        if let Some(e) = writer_error.or_else(|| first.take()) {
            return Err(e);
        }
        if let Some(d) = caller.err().or(run.err()) {
            return Err(d.into());
        }
        let mut tally = std::mem::take(&mut *reached.lock().expect("tally lock"));
        if let Some(at) = &stopped {
            // Steps past the stop may have read ahead; none of their rows was written.
            let past = |config: &str| config > at.config.as_str();
            tally.watermarks.retain(|config, _| !past(config));
            row_counts.retain(|config, _| !past(config));
        }
        tally.row_counts = row_counts;
        Ok(Streamed {
            total,
            tally,
            stopped,
        })
    }
}

/// What the ordered writer wrote.
pub(super) struct Streamed {
    /// Bytes written.
    pub(super) total: i64,
    /// What the run counted.
    pub(super) tally: Tally,
    /// Where a segmented run stopped (`None`: it wrote the whole plan).
    pub(super) stopped: Option<ResumePoint>,
}
