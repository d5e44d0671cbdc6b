//! Extraction execution (docs/engine.md, "Execution"): direct and store modes.
//!
//! One file (about 930 lines): both modes share the step tasks, the first-error record
//! and the close-once guarantee below, which a split would scatter. The multi-object
//! mode's producer, part writer and manifest are in [`parts`].
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

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::progress::ExtractionProgress;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::context::{Context, Done};
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::json::Encoder;
use crate::ports::{Connector, ResultStreamWriter, TableFormat};
use crate::tenant::TenantContext;
use crate::time::Timestamp;
use crate::types::*;
use crate::value::{Row, RowBatch};

mod parts;
use parts::{PartProducer, PartsOutput};

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

/// The connector-error rule: the connector's own deadline/cancel (or its `validation`
/// rejection, beyond the reference), else the live context's state, else `unavailable`
/// with the fixed fallback. Any other raw error is dropped.
fn connector_error(e: EngineError, ctx: &Context, fallback: &'static str) -> EngineError {
    match e.category() {
        Category::Timeout => Done::DeadlineExceeded.into(),
        Category::Canceled => Done::Canceled.into(),
        // The connector rejected the request itself (an unknown operator, a value of the
        // wrong type): the caller's fault, reported as such. Connectors write these texts
        // themselves and never put driver output in them.
        Category::Validation => e,
        _ => match ctx.err() {
            Some(d) => d.into(),
            None => EngineError::new(Category::Unavailable, fallback),
        },
    }
}

fn serialize_failed() -> EngineError {
    EngineError::new(Category::Internal, msg::SERIALIZE_FAILED)
}

fn panic_error(payload: Box<dyn Any + Send>) -> EngineError {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    EngineError::new(Category::Internal, format!("{}{text}", msg::PANIC_PREFIX))
}

/// Polls a future inside `catch_unwind`, turning a panic into a value.
struct CatchUnwind<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);

impl<T> Future for CatchUnwind<'_, T> {
    type Output = std::result::Result<T, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => Poll::Ready(Err(p)),
        }
    }
}

async fn catch<'a, T>(fut: impl Future<Output = Result<T>> + Send + 'a) -> Result<T> {
    CatchUnwind(Box::pin(fut))
        .await
        .unwrap_or_else(|p| Err(panic_error(p)))
}

/// The first failure of a run, recorded once; recording it cancels the run.
#[derive(Clone)]
struct FirstError {
    slot: Arc<Mutex<Option<EngineError>>>,
    run: Context,
}

impl FirstError {
    fn new(run: &Context) -> Self {
        FirstError {
            slot: Arc::default(),
            run: run.clone(),
        }
    }

    fn record(&self, e: EngineError) {
        let mut slot = self.slot.lock().expect("first-error lock");
        if slot.is_none() {
            *slot = Some(e);
        }
        drop(slot);
        self.run.cancel();
    }

    fn take(&self) -> Option<EngineError> {
        self.slot.lock().expect("first-error lock").take()
    }
}

/// What a step does with its rows.
enum Sink<'a> {
    /// Keep them, grouped by table, in cursor order.
    Direct(&'a mut BTreeMap<String, Vec<Row>>),
    /// Encode them as NDJSON and hand them to the writer.
    Store(&'a mut Producer),
    /// Encode each table as a file of a [`TableFormat`] and hand the bytes to the writer.
    Parts(&'a mut PartProducer),
}

impl Sink<'_> {
    async fn accept(&mut self, ctx: &Context, batch: RowBatch) -> Result<()> {
        match self {
            // A table announced without rows adds nothing to the document.
            Sink::Direct(_) if batch.rows.is_empty() => Ok(()),
            Sink::Direct(tables) => {
                tables
                    .entry(batch.table.to_string())
                    .or_default()
                    .extend(batch.rows);
                Ok(())
            }
            Sink::Store(p) => p.push(ctx, batch).await,
            Sink::Parts(p) => p.push(ctx, batch).await,
        }
    }
}

/// One NDJSON batch on its way to the writer.
struct Batch {
    bytes: Vec<u8>,
    rows: i64,
    /// Tables of the step that ended before this batch's last row (progress only).
    tables_ended: u64,
    /// Parts mode: the table whose part begins with this batch.
    opens: Option<Arc<str>>,
    /// Parts mode: this batch ends its part.
    closes: bool,
}

/// Encodes a step's rows into 1024-row batches and hands them off with back-pressure.
/// Batch buffers handed back by the writer for reuse, so steady-state streaming allocates
/// no batch buffers at all.
#[derive(Clone, Default)]
struct BufferPool(Arc<Mutex<Vec<Vec<u8>>>>);

const BATCH_BUFFER_CAPACITY: usize = 64 * 1024;
const POOLED_BUFFERS: usize = 16;

impl BufferPool {
    fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .expect("pool lock")
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH_BUFFER_CAPACITY))
    }

    fn give(&self, mut buf: Vec<u8>) {
        // A part producer's buffer can have taken a whole Parquet row group: keeping
        // that capacity in the pool would hold it for the rest of the run.
        if buf.capacity() > 4 * BATCH_BUFFER_CAPACITY {
            return;
        }
        buf.clear();
        let mut pool = self.0.lock().expect("pool lock");
        if pool.len() < POOLED_BUFFERS {
            pool.push(buf);
        }
    }
}

struct Producer {
    /// `{"config":"<name>","table":` for this step.
    config_prefix: Vec<u8>,
    /// The last table seen and its full line prefix `...,"table":"<t>","row":`.
    table: Option<(Arc<str>, Vec<u8>)>,
    /// Table switches since the last flush.
    tables_ended: u64,
    buf: Vec<u8>,
    rows: i64,
    tx: mpsc::Sender<Batch>,
    pool: BufferPool,
}

impl Producer {
    fn new(config_name: &str, tx: mpsc::Sender<Batch>, pool: BufferPool) -> Self {
        let mut config_prefix = b"{\"config\":".to_vec();
        crate::json::write_str(&mut config_prefix, config_name);
        config_prefix.extend_from_slice(b",\"table\":");
        Producer {
            config_prefix,
            table: None,
            tables_ended: 0,
            buf: pool.take(),
            rows: 0,
            tx,
            pool,
        }
    }

    async fn push(&mut self, ctx: &Context, batch: RowBatch) -> Result<()> {
        if self.table.as_ref().is_none_or(|(t, _)| *t != batch.table) {
            if self.table.is_some() {
                self.tables_ended += 1;
            }
            let mut prefix = self.config_prefix.clone();
            crate::json::write_str(&mut prefix, &batch.table);
            prefix.extend_from_slice(b",\"row\":");
            self.table = Some((batch.table.clone(), prefix));
        }
        for row in &batch.rows {
            let prefix = &self.table.as_ref().expect("set above").1;
            self.buf.extend_from_slice(prefix);
            Encoder::compact(&mut self.buf)
                .row(row)
                .map_err(|_| serialize_failed())?;
            self.buf.extend_from_slice(b"}\n");
            self.rows += 1;
            if self.rows as usize == STORE_BATCH_ROWS {
                self.flush(ctx).await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self, ctx: &Context) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let batch = Batch {
            bytes: std::mem::replace(&mut self.buf, self.pool.take()),
            rows: self.rows,
            tables_ended: std::mem::take(&mut self.tables_ended),
            opens: None,
            closes: false,
        };
        self.rows = 0;
        hand_off(ctx, &self.tx, batch).await
    }
}

/// Sends a batch to the writer, waiting for room (back-pressure).
async fn hand_off(ctx: &Context, tx: &mpsc::Sender<Batch>, batch: Batch) -> Result<()> {
    match ctx.run(tx.send(batch)).await {
        Ok(Ok(())) => Ok(()),
        // The writer stopped: the run is failing; report cancellation.
        Ok(Err(_)) => Err(ctx.err().unwrap_or(Done::Canceled).into()),
        Err(d) => Err(d.into()),
    }
}

/// Where the ordered writer puts the batches of a store-mode run.
enum Output<'w> {
    /// One NDJSON stream, hashed as it goes.
    Stream {
        writer: &'w mut dyn ResultStreamWriter,
        hasher: Sha256,
    },
    /// One object per table (then a manifest, written by the caller).
    Parts(PartsOutput<'w>),
}

impl Output<'_> {
    async fn write(&mut self, run: &Context, config: &str, batch: &Batch) -> Result<()> {
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

/// Shared state of the size guard in direct mode (layer 1).
struct DirectBudget {
    limit: i64,
    total: AtomicI64,
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
            self.execute(ctx, plan, progress, None),
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
            self.execute(ctx, plan, progress, Some(format)),
        )
        .await
    }

    async fn execute(
        &self,
        ctx: &Context,
        plan: &ExtractionPlan,
        progress: &ExtractionProgress,
        format: Option<Arc<dyn TableFormat>>,
    ) -> Result<ExtractionResult> {
        self.inner
            .connection_store
            .as_ref()
            .ok_or_else(|| EngineError::validation(msg::STORE_NOT_CONFIGURED))?;
        let tenant = TenantContext {
            tenant_id: plan.tenant_id.clone(),
            request_id: plan.request_id.clone(),
        };
        tenant.validate_scope()?;
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
        let out = if let Some(format) = format {
            self.run_parts(&run, ctx, &tenant, plan, format, progress)
                .await
        } else if store_mode {
            self.run_store(&run, ctx, &tenant, plan, progress).await
        } else {
            self.run_direct(&run, ctx, &tenant, plan).await
        };
        let terminal = match &out {
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
    /// panic-catching section so it is closed even when the step panics.
    async fn run_step(
        &self,
        run: &Context,
        tenant: &TenantContext,
        step: &PlanStep,
        mut sink: Sink<'_>,
    ) -> Result<()> {
        if let Some(d) = run.err() {
            return Err(d.into());
        }
        let store = self
            .inner
            .connection_store
            .as_ref()
            .expect("checked at entry");
        let descriptor = self
            .require_connection(
                run,
                store,
                tenant,
                &step.config_name,
                msg::UNKNOWN_DATASOURCE,
            )
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
            let request = step_request(step);
            let mut cursor = connector
                .query_stream(run, &request)
                .await
                .map_err(|e| connector_error(e, run, msg::QUERY_FAILED))?;
            let mut drained = Ok(());
            loop {
                match cursor.next_batch(run).await {
                    Ok(Some(batch)) => {
                        if let Err(e) = sink.accept(run, batch).await {
                            drained = Err(e);
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        drained = Err(connector_error(e, run, msg::QUERY_FAILED));
                        break;
                    }
                }
            }
            let _ = cursor.close(run).await;
            drained?;
            // A cursor that swallowed a cancel must not yield a half-read result.
            if let Some(d) = run.err() {
                return Err(d.into());
            }
            match &mut sink {
                Sink::Store(p) => p.flush(run).await?,
                Sink::Parts(p) => p.finish(run, step).await?,
                Sink::Direct(_) => {}
            }
            Ok(())
        })
        .await;
        let _ = catch(connector.close(run)).await;
        outcome
    }

    // --- direct mode ---------------------------------------------------------------------

    async fn run_direct(
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
            tasks.spawn(async move {
                let _permit = permits
                    .acquire_owned()
                    .await
                    .expect("semaphore never closed");
                let mut tables = BTreeMap::new();
                let out = engine
                    .run_step(&run, &tenant, &step, Sink::Direct(&mut tables))
                    .await;
                let out = out.and_then(|()| check_direct_budget(&tables, &budget));
                match out {
                    Ok(()) => Some((index, tables)),
                    Err(e) => {
                        first.record(e);
                        None
                    }
                }
            });
        }
        let mut per_step: Vec<Option<BTreeMap<String, Vec<Row>>>> = vec![None; plan.steps.len()];
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Some((i, tables))) => per_step[i] = Some(tables),
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
        let mut row_counts = BTreeMap::new();
        for (step, tables) in plan.steps.iter().zip(per_step) {
            let tables = tables.unwrap_or_default();
            let rows: i64 = tables.values().map(|r| r.len() as i64).sum();
            *row_counts.entry(step.config_name.clone()).or_insert(0) += rows;
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
        let row_count = row_counts.values().sum();
        Ok(ExtractionResult {
            state: completed_state(plan, completed_at),
            direct: Some(DirectResult {
                format: "json".into(),
                row_count,
                plaintext_size: data.len() as i64,
                integrity: Some(ResultIntegrity::sha256(hex(&Sha256::digest(&data)))),
                protection: Some(ResultProtection {
                    encrypted: false,
                    applied_by: applied_by::ENGINE.into(),
                    ..Default::default()
                }),
                completed_at: Some(completed_at),
                data,
            }),
            reference: None,
            row_counts,
        })
    }

    // --- store mode ----------------------------------------------------------------------

    async fn run_store(
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
        let (total_bytes, row_counts) = match streamed {
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
        reference.row_count = row_counts.values().sum();
        if reference.size_bytes == 0 {
            reference.size_bytes = total_bytes;
        }
        stored_result(plan, reference, digest, row_counts)
    }

    /// Producers + ordered writer: NDJSON producers, or part producers when a `format`
    /// is given. Returns (bytes written, rows per config).
    #[allow(clippy::too_many_arguments)]
    async fn stream_steps(
        &self,
        run: &Context,
        caller: &Context,
        tenant: &TenantContext,
        plan: &ExtractionPlan,
        out: &mut Output<'_>,
        format: Option<&Arc<dyn TableFormat>>,
        progress: &ExtractionProgress,
    ) -> Result<(i64, BTreeMap<String, i64>)> {
        progress.start(plan.steps.iter().map(|s| s.tables.len() as u64).sum());
        let window = plan.limits.concurrency();
        let first = FirstError::new(run);
        let mut queues = Vec::with_capacity(plan.steps.len());
        let mut finished: Vec<watch::Receiver<bool>> = Vec::with_capacity(plan.steps.len());
        let mut tasks = JoinSet::new();
        let pool = BufferPool::default();
        for (index, step) in plan.steps.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Batch>(1);
            queues.push(rx);
            let (done_tx, done_rx) = watch::channel(false);
            let wait_for = index.checked_sub(window).map(|j| finished[j].clone());
            finished.push(done_rx);
            let (engine, run, tenant, step, first, pool, format) = (
                self.clone(),
                run.clone(),
                tenant.clone(),
                step.clone(),
                first.clone(),
                pool.clone(),
                format.cloned(),
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
                if let Err(e) = outcome {
                    first.record(e);
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
        Ok((total, row_counts))
    }
}

/// A store-mode run's result from the sink's reference: refuses an invalid `appliedBy`,
/// fills in the engine's SHA-256 `digest` unless the sink gave one, stamps completion.
fn stored_result(
    plan: &ExtractionPlan,
    mut reference: ResultReference,
    digest: String,
    row_counts: BTreeMap<String, i64>,
) -> Result<ExtractionResult> {
    if let Some(p) = &reference.protection
        && !applied_by::is_valid(&p.applied_by)
    {
        return Err(EngineError::validation(msg::APPLIED_BY_INVALID));
    }
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
        row_counts,
    })
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

struct SetOnDrop(watch::Sender<bool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
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

/// What a step asks its connector for: its own fields and filters only (no metadata, no
/// overrides). Every selected table is present, with an empty list meaning "all columns".
fn step_request(step: &PlanStep) -> ExtractionRequest {
    let fields: FieldSelection = step
        .tables
        .iter()
        .map(|t| (t.clone(), step.fields.get(t).cloned().unwrap_or_default()))
        .collect();
    let mut request = ExtractionRequest {
        mapped_fields: [(step.config_name.clone(), fields)].into(),
        ..Default::default()
    };
    if !step.filters.is_empty() {
        request
            .filters
            .insert(step.config_name.clone(), step.filters.clone());
    }
    request
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
