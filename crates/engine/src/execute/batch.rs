//! From rows to batches: what a step does with the rows its cursor yields (keeps them,
//! encodes them as NDJSON, or hands them to a table format), the 1024-row NDJSON
//! producer with its back-pressured hand-off, and the pool that recycles batch buffers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::STORE_BATCH_ROWS;
use super::failure::serialize_failed;
use super::parts::PartProducer;
use crate::context::{Context, Done};
use crate::error::Result;
use crate::json::Encoder;
use crate::model::ResumePoint;
use crate::value::{Row, RowBatch};

/// What a step does with its rows.
pub(super) enum Sink<'a> {
    /// Keep them, grouped by table, in cursor order.
    Direct(&'a mut BTreeMap<String, Vec<Row>>),
    /// Encode them as NDJSON and hand them to the writer.
    Store(&'a mut Producer),
    /// Encode each table as a file of a [`TableFormat`] and hand the bytes to the writer.
    Parts(&'a mut PartProducer),
}

impl Sink<'_> {
    pub(super) async fn accept(&mut self, ctx: &Context, batch: RowBatch) -> Result<()> {
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

    /// Ends a step that stopped at `at`: what it holds goes to the writer, then the stop
    /// marker (a segmented run; direct mode never stops).
    pub(super) async fn stop(&mut self, ctx: &Context, at: ResumePoint) -> Result<()> {
        let tx = match self {
            Sink::Direct(_) => return Ok(()),
            Sink::Store(p) => {
                p.flush(ctx).await?;
                &p.tx
            }
            Sink::Parts(p) => p.stop(ctx).await?,
        };
        let marker = Batch {
            stop: Some(at),
            ..Batch::default()
        };
        hand_off(ctx, tx, marker).await
    }
}

/// One NDJSON batch on its way to the writer.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) bytes: Vec<u8>,
    pub(super) rows: i64,
    /// Tables of the step that ended before this batch's last row (progress only).
    pub(super) tables_ended: u64,
    /// Parts mode: the table whose part begins with this batch.
    pub(super) opens: Option<Arc<str>>,
    /// Parts mode: this batch ends its part.
    pub(super) closes: bool,
    /// The step's last batch, in a segmented run that stopped here: where the next run
    /// resumes (no rows).
    pub(super) stop: Option<ResumePoint>,
}

/// Encodes a step's rows into 1024-row batches and hands them off with back-pressure.
/// Batch buffers handed back by the writer for reuse, so steady-state streaming allocates
/// no batch buffers at all.
#[derive(Clone, Default)]
pub(super) struct BufferPool(Arc<Mutex<Vec<Vec<u8>>>>);

pub(super) const BATCH_BUFFER_CAPACITY: usize = 64 * 1024;
pub(super) const POOLED_BUFFERS: usize = 16;

impl BufferPool {
    pub(super) fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .expect("pool lock")
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH_BUFFER_CAPACITY))
    }

    pub(super) fn give(&self, mut buf: Vec<u8>) {
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

pub(super) struct Producer {
    /// `{"config":"<name>","table":` for this step.
    pub(super) config_prefix: Vec<u8>,
    /// The last table seen and its full line prefix `...,"table":"<t>","row":`.
    pub(super) table: Option<(Arc<str>, Vec<u8>)>,
    /// Table switches since the last flush.
    pub(super) tables_ended: u64,
    pub(super) buf: Vec<u8>,
    pub(super) rows: i64,
    pub(super) tx: mpsc::Sender<Batch>,
    pub(super) pool: BufferPool,
}

impl Producer {
    pub(super) fn new(config_name: &str, tx: mpsc::Sender<Batch>, pool: BufferPool) -> Self {
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

    pub(super) async fn push(&mut self, ctx: &Context, batch: RowBatch) -> Result<()> {
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

    pub(super) async fn flush(&mut self, ctx: &Context) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let batch = Batch {
            bytes: std::mem::replace(&mut self.buf, self.pool.take()),
            rows: self.rows,
            tables_ended: std::mem::take(&mut self.tables_ended),
            ..Batch::default()
        };
        self.rows = 0;
        hand_off(ctx, &self.tx, batch).await
    }
}

/// Sends a batch to the writer, waiting for room (back-pressure).
pub(super) async fn hand_off(ctx: &Context, tx: &mpsc::Sender<Batch>, batch: Batch) -> Result<()> {
    match ctx.run(tx.send(batch)).await {
        Ok(Ok(())) => Ok(()),
        // The writer stopped: the run is failing; report cancellation.
        Ok(Err(_)) => Err(ctx.err().unwrap_or(Done::Canceled).into()),
        Err(d) => Err(d.into()),
    }
}
