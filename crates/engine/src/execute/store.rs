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
use super::{Tally, hex, stored_result};
use crate::context::Context;
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::model::*;
use crate::ports::{ResultStreamWriter, TableFormat};
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
    pub(super) async fn run_store(
        &self,
        run: &Context,
        caller: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
        progress: &ExtractionProgress,
    ) -> Result<ExtractionResult> {
        if let Some(d) = run.err() {
            return Err(d.into());
        }
        let sink = self.inner.result_sink.as_ref().expect("checked at entry");
        let mut writer = sink
            .open_stream(run, tenant, &plan.request_id)
            .await
            .map_err(|_| EngineError::new(Category::Unavailable, msg::PERSIST_FAILED))?;

        let mut out = Output::Stream {
            writer: writer.as_mut(),
            hasher: Sha256::new(),
        };
        let streamed = self
            .stream_steps(run, caller, tenant, plan, &mut out, None, progress)
            .await;
        let Output::Stream { hasher, .. } = out else {
            unreachable!("built above")
        };
        let (total_bytes, tally) = match streamed {
            Ok(s) => s,
            Err(e) => {
                writer.abort(run).await;
                return Err(e);
            }
        };
        let digest = hex(&hasher.finalize());

        let mut reference = writer
            .close(run)
            .await
            .map_err(|_| EngineError::new(Category::Unavailable, msg::PERSIST_FAILED))?;
        // The reference says `json` here although the bytes are NDJSON; we say what
        // they are.
        reference.format = "ndjson".into();
        reference.row_count = tally.row_counts.values().sum();
        if reference.size_bytes == 0 {
            reference.size_bytes = total_bytes;
        }
        stored_result(plan, reference, digest, tally)
    }

    /// Producers + ordered writer: NDJSON producers, or part producers when a `format`
    /// is given. Returns (bytes written, what the run counted).
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
    ) -> Result<(i64, Tally)> {
        progress.start(plan.steps.iter().map(|s| s.tables.len() as u64).sum());
        let window = plan.limits.concurrency();
        let first = FirstError::new(run);
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
            let (engine, run, tenant, step, first, pool, format, tally) = (
                self.clone(),
                run.clone(),
                tenant.clone(),
                step.clone(),
                first.clone(),
                pool.clone(),
                format.cloned(),
                reached.clone(),
            );
            tasks.spawn(async move {
                // Signals "finished" however the task ends (success, error, panic, abort).
                let _done = SetOnDrop(done_tx);
                if let Some(mut rx) = wait_for {
                    let _ = rx.wait_for(|f| *f).await;
                }
                let outcome = match format {
                    None => {
                        let mut producer = Producer::new(&step.config_name, tx, pool);
                        engine
                            .run_step(&run, &tenant, &step, Sink::Store(&mut producer))
                            .await
                    }
                    Some(format) => {
                        let mut producer = PartProducer::new(format, tx, pool);
                        engine
                            .run_step(&run, &tenant, &step, Sink::Parts(&mut producer))
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
        tally.row_counts = row_counts;
        Ok((total, tally))
    }
}
