//! Multi-object store mode (docs/engine.md, "Multi-object store mode"): a step's rows
//! encoded per table by a host's [`TableFormat`], one object per table, then the
//! manifest that lists them. The steps, window and ordered writer are store mode's
//! ([`super`]).

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::batch::{BATCH_BUFFER_CAPACITY, Batch, BufferPool, hand_off};
use super::failure::serialize_failed;
use super::segment::StopSignal;
use super::store::Output;
use super::*;
use crate::ports::{ResultObject, ResultSink, ResultStreamWriter, TableEncoder, TableFormat};
use crate::value::{Columns, RowBatch};

/// Encodes a step's tables with a [`TableFormat`], one part per table, and hands the
/// bytes off in pieces of about [`BATCH_BUFFER_CAPACITY`], marking where parts begin
/// and end. The encoder bounds its own memory (e.g. Parquet row groups by size).
pub(super) struct PartProducer {
    format: Arc<dyn TableFormat>,
    current: Option<(Arc<str>, Box<dyn TableEncoder>)>,
    /// Tables that got a part, to give the unannounced ones theirs at the end.
    seen: Vec<Arc<str>>,
    /// The table whose part the next hand-off begins.
    opens: Option<Arc<str>>,
    buf: Vec<u8>,
    rows: i64,
    tx: mpsc::Sender<Batch>,
    pool: BufferPool,
}

impl PartProducer {
    pub(super) fn new(
        format: Arc<dyn TableFormat>,
        tx: mpsc::Sender<Batch>,
        pool: BufferPool,
    ) -> Self {
        PartProducer {
            format,
            current: None,
            seen: Vec::new(),
            opens: None,
            buf: pool.take(),
            rows: 0,
            tx,
            pool,
        }
    }

    pub(super) async fn push(&mut self, ctx: &Context, batch: RowBatch) -> Result<()> {
        if self.current.as_ref().is_none_or(|(t, _)| *t != batch.table) {
            self.end_part(ctx).await?;
            let Some(columns) = batch.columns().cloned() else {
                return Ok(()); // an empty batch that names no columns says nothing
            };
            self.begin_part(batch.table.clone(), &columns)?;
        }
        let (_, encoder) = self.current.as_mut().expect("begun above");
        encoder.push(&batch.rows, &mut self.buf)?;
        self.rows += batch.rows.len() as i64;
        if self.buf.len() >= BATCH_BUFFER_CAPACITY {
            self.send(ctx, false).await?;
        }
        Ok(())
    }

    fn begin_part(&mut self, table: Arc<str>, columns: &Arc<Columns>) -> Result<()> {
        let encoder = self.format.encoder(&table, columns)?;
        self.seen.push(table.clone());
        self.opens = Some(table.clone());
        self.current = Some((table, encoder));
        Ok(())
    }

    async fn end_part(&mut self, ctx: &Context) -> Result<()> {
        let Some((_, encoder)) = self.current.take() else {
            return Ok(());
        };
        encoder.finish(&mut self.buf)?;
        self.send(ctx, true).await
    }

    /// Ends the last part, then writes a part for every table of the step the connector
    /// did not announce (no batch at all): its columns are the selected field names,
    /// untyped.
    pub(super) async fn finish(&mut self, ctx: &Context, step: &PlanStep) -> Result<()> {
        self.end_part(ctx).await?;
        for table in &step.tables {
            // A resumed table has its parts from the run that began it.
            if self.seen.iter().any(|t| **t == **table) || step.resume_after.contains_key(table) {
                continue;
            }
            let columns = Columns::new(step.fields.get(table).cloned().unwrap_or_default());
            self.begin_part(Arc::from(table.as_str()), &columns)?;
            self.end_part(ctx).await?;
        }
        Ok(())
    }

    async fn send(&mut self, ctx: &Context, closes: bool) -> Result<()> {
        let batch = Batch {
            bytes: std::mem::replace(&mut self.buf, self.pool.take()),
            rows: std::mem::take(&mut self.rows),
            tables_ended: u64::from(closes),
            opens: self.opens.take(),
            closes,
            stop: None,
        };
        hand_off(ctx, &self.tx, batch).await
    }

    /// A segmented run stopped: the open part ends here (a whole file of what was read);
    /// the writer's queue, for the stop marker.
    pub(super) async fn stop(&mut self, ctx: &Context) -> Result<&mpsc::Sender<Batch>> {
        self.end_part(ctx).await?;
        Ok(&self.tx)
    }
}

struct OpenPart {
    config: String,
    table: String,
    writer: Box<dyn ResultStreamWriter>,
    hasher: Sha256,
    rows: i64,
    bytes: i64,
}

pub(super) struct PartsOutput<'w> {
    sink: &'w dyn ResultSink,
    tenant: &'w TenantContext,
    job_id: &'w str,
    extension: &'static str,
    /// This run's part numbering: its first part's index (a resumed run's come after
    /// earlier runs') and, for a range, the space it must stay in.
    segment: &'w Segment,
    open: Option<OpenPart>,
    done: Vec<ResultPart>,
}

impl PartsOutput<'_> {
    pub(super) async fn write(&mut self, run: &Context, config: &str, batch: &Batch) -> Result<()> {
        if let Some(table) = &batch.opens {
            // A part still open here lost its producer mid-table (the run is failing).
            if let Some(stale) = self.open.take() {
                stale.writer.abort(run).await;
            }
            let object = ResultObject::Part {
                index: self
                    .segment
                    .part(self.segment.first_part() + self.done.len())?,
                extension: self.extension,
                claim: self.segment.claim,
            };
            let writer = self
                .sink
                .open_object(run, self.tenant, self.job_id, object)
                .await?;
            self.open = Some(OpenPart {
                config: config.to_owned(),
                table: table.to_string(),
                writer,
                hasher: Sha256::new(),
                rows: 0,
                bytes: 0,
            });
        }
        let part = self
            .open
            .as_mut()
            .ok_or_else(|| EngineError::new(Category::Internal, msg::SERIALIZE_FAILED))?;
        if !batch.bytes.is_empty() {
            part.writer.write(run, &batch.bytes).await?;
            part.hasher.update(&batch.bytes);
        }
        part.rows += batch.rows;
        part.bytes += batch.bytes.len() as i64;
        if batch.closes {
            let part = self.open.take().expect("checked above");
            let reference = part.writer.close(run).await?;
            self.done.push(ResultPart {
                config: part.config,
                table: part.table,
                path: reference.path,
                row_count: part.rows,
                size_bytes: part.bytes,
                stored_bytes: reference.stored_bytes,
                hmac: reference.integrity.map(|i| i.signature).unwrap_or_default(),
                sha256: hex(&part.hasher.finalize()),
            });
        }
        Ok(())
    }

    /// A failed run: aborts the open part and discards the finished ones (on a fresh
    /// context, since the run's is usually cancelled by then).
    async fn abort(&mut self) {
        let ctx = Context::background().with_timeout(STATUS_WRITE_TIMEOUT);
        if let Some(part) = self.open.take() {
            part.writer.abort(&ctx).await;
        }
        let paths: Vec<String> = self.done.drain(..).map(|p| p.path).collect();
        if !paths.is_empty() {
            self.sink.discard(&ctx, self.tenant, &paths).await;
        }
    }
}

/// The manifest of a multi-object result: the job's result object (docs/results.md,
/// "Parquet results"). Field order is fixed, so the same parts give the same bytes.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest<'a> {
    format: StoredFormat,
    job_id: &'a str,
    row_count: i64,
    size_bytes: i64,
    parts: &'a [ResultPart],
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_parts(
        &self,
        run: &Context,
        caller: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
        format: Arc<dyn TableFormat>,
        progress: &ExtractionProgress,
        segment: &Segment,
        stop: Option<Arc<StopSignal>>,
    ) -> Result<ExtractionResult> {
        if let Some(d) = run.err() {
            return Err(d.into());
        }
        let sink = self.inner.result_sink.as_deref().expect("checked at entry");
        let mut out = Output::Parts(PartsOutput {
            sink,
            tenant,
            job_id: &plan.request_id,
            extension: format.format().as_str(),
            segment,
            open: None,
            done: Vec::new(),
        });
        let streamed = self
            .stream_steps(
                run,
                caller,
                tenant,
                plan,
                &mut out,
                Some(&format),
                progress,
                stop,
            )
            .await;
        let Output::Parts(mut parts) = out else {
            unreachable!("built above")
        };
        let streamed = match streamed {
            Ok(s) => s,
            Err(e) => {
                parts.abort().await;
                return Err(e);
            }
        };
        let done = std::mem::take(&mut parts.done);
        if streamed.stopped.is_some() {
            return Ok(stopped_result(plan, done, streamed.stopped, streamed.tally));
        }
        if segment.part_base.is_some() {
            return Ok(ended_result(plan, done, streamed.tally));
        }
        let mut all = segment.earlier_parts.clone();
        all.extend(done.iter().cloned());
        match self
            .manifest_result(
                run,
                tenant,
                plan,
                format.format(),
                all,
                streamed.tally,
                segment.claim,
            )
            .await
        {
            Ok(r) => Ok(r),
            Err(e) => {
                parts.done = done;
                parts.abort().await;
                Err(e)
            }
        }
    }

    /// Writes the manifest of `parts` (every part of the result, in order) as the job's
    /// result object; the result's figures are the parts' sums.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn manifest_result(
        &self,
        run: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
        format: StoredFormat,
        parts: Vec<ResultPart>,
        tally: Tally,
        claim: Option<u32>,
    ) -> Result<ExtractionResult> {
        let sink = self.inner.result_sink.as_deref().expect("checked at entry");
        let row_count: i64 = parts.iter().map(|p| p.row_count).sum();
        let size_bytes: i64 = parts.iter().map(|p| p.size_bytes).sum();
        let manifest = serde_json::to_vec(&Manifest {
            format,
            job_id: &plan.request_id,
            row_count,
            size_bytes,
            parts: &parts,
        })
        .map_err(|_| serialize_failed())?;
        let written = async {
            let mut writer = sink
                .open_object(
                    run,
                    tenant,
                    &plan.request_id,
                    ResultObject::Manifest { claim },
                )
                .await?;
            if let Err(e) = writer.write(run, &manifest).await {
                writer.abort(run).await;
                return Err(e);
            }
            writer.close(run).await
        }
        .await;
        let mut reference =
            written.map_err(|_| EngineError::new(Category::Unavailable, msg::PERSIST_FAILED))?;
        reference.format = format;
        reference.row_count = row_count;
        reference.size_bytes = size_bytes;
        reference.parts = parts;
        let digest = hex(&Sha256::digest(&manifest));
        stored_result(plan, reference, digest, tally)
    }
}
