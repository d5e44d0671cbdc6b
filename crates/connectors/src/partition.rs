//! PostgreSQL partitioned reads (docs/datasources.md, "Partitioned reads"): one table read
//! over several connections that share one exported snapshot, split into ranges of its
//! integer leading primary-key column, and merged back into exactly the single stream's
//! rows, order and batches, so a result's bytes do not depend on the setting.
//!
//! - **One snapshot.** The step's connection opens a `REPEATABLE READ READ ONLY`
//!   transaction and exports its snapshot (`pg_export_snapshot()`); every other
//!   connection imports it (`SET TRANSACTION SNAPSHOT`) before its first query. All of
//!   them see the same data, for every table of the step.
//! - **Chunks, not halves.** A table is cut into key ranges of about
//!   [`ReadPartitions::chunk_rows`] rows. Worker `w` of `P` reads chunks `w`, `w + P`, …
//!   in order, each into its own bounded channel; the merger takes chunk 0, 1, 2, … from
//!   their owners in turn and re-cuts the rows into [`BATCH_ROWS`]-row batches. Many
//!   small chunks let every worker read ahead while the merger drains another (two
//!   halves could not overlap in bounded memory).
//! - **Bounded memory**: at most [`CHUNK_BATCHES`] batches wait per worker, whatever the
//!   key distribution; a worker whose turn is far off waits.
//! - **Fallbacks, never failures**: a server that cannot export a snapshot (a standby
//!   before PostgreSQL 10) reads in one stream as before; a connection that cannot be
//!   opened (the server's connection limit) leaves fewer workers; a table without an
//!   integer leading key, or smaller than two chunks, is read in one stream on the
//!   step's connection, inside the snapshot.

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection as _, Executor as _};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use fetcher_engine::{Category, EngineError, Result, Row as ERow};

use crate::connector::CONNECT_TIMEOUT;
use crate::error::{msg, query_failed};
use crate::pg;
use crate::query::{BATCH_ROWS, Msg, SplitKey, TablePlan};

/// Batches one worker may have waiting for the merger.
const CHUNK_BATCHES: usize = 8;

/// How a connector reads a PostgreSQL table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPartitions {
    /// Connections per step (`1`: one stream, no snapshot transaction).
    pub connections: usize,
    /// Rows per key-range chunk (estimated from the table's statistics).
    pub chunk_rows: i64,
}

impl Default for ReadPartitions {
    fn default() -> Self {
        ReadPartitions {
            connections: 1,
            // A chunk fits a worker's queue (8 batches of 1,024 rows), so a worker can
            // read its next chunk whole while the merger drains another.
            chunk_rows: (CHUNK_BATCHES * BATCH_ROWS) as i64,
        }
    }
}

/// What a worker sends the merger.
pub(crate) enum Part {
    Rows(Vec<ERow>),
    /// The chunk is complete.
    End,
    Failed(EngineError),
}

/// The producer of a partitioned read: streams every planned table in order, like
/// [`pg::produce`], over `settings.connections` connections in one snapshot.
pub async fn produce(
    mut conn: PgConnection,
    options: PgConnectOptions,
    plans: Vec<TablePlan>,
    settings: ReadPartitions,
    tx: mpsc::Sender<Msg>,
) {
    let id = match export_snapshot(&mut conn).await {
        Ok(id) => id,
        Err(_) => {
            let _ = conn.execute("ROLLBACK").await;
            return pg::produce(conn, plans, tx).await;
        }
    };
    let mut conns = vec![conn];
    let wanted = plans.iter().any(|p| p.split.is_some());
    while wanted && conns.len() < settings.connections {
        match tokio::time::timeout(CONNECT_TIMEOUT, import_snapshot(&options, &id)).await {
            Ok(Ok(c)) => conns.push(c),
            _ => break,
        }
    }
    for plan in &plans {
        match read_table(&mut conns, plan, settings.chunk_rows, &tx).await {
            Ok(true) => {}
            Ok(false) => return, // the cursor went away
            Err(e) => {
                let _ = tx.send(Msg::Failed(e)).await;
                return;
            }
        }
    }
    for mut c in conns {
        let _ = c.execute("COMMIT").await;
        let _ = c.close().await;
    }
    let _ = tx.send(Msg::End).await;
}

async fn export_snapshot(conn: &mut PgConnection) -> sqlx::Result<String> {
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await?;
    let id: String = sqlx::query_scalar("SELECT pg_export_snapshot()")
        .fetch_one(&mut *conn)
        .await?;
    // Spliced into SQL below (SET TRANSACTION SNAPSHOT takes no parameter): only the
    // server's own format (`00000003-0000001B-1`) is accepted.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(sqlx::Error::Protocol("unexpected snapshot id".into()));
    }
    Ok(id)
}

async fn import_snapshot(options: &PgConnectOptions, id: &str) -> sqlx::Result<PgConnection> {
    let mut c = pg::connect(options).await?;
    let sql =
        format!("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{id}'");
    c.execute(sql.as_str()).await?;
    Ok(c)
}

/// Key ranges `[start, end)` covering every key of the table (the first and last open),
/// about `chunk_rows` rows each by the table's statistics; one range for a small table.
async fn key_ranges(
    conn: &mut PgConnection,
    key: &SplitKey,
    chunk_rows: i64,
) -> Result<Vec<(Option<i64>, Option<i64>)>> {
    let sql = format!(
        "SELECT min({c})::int8, max({c})::int8, \
         (SELECT reltuples::int8 FROM pg_class WHERE oid = $1::regclass) FROM {t}",
        c = key.column,
        t = key.table
    );
    let (min, max, estimate): (Option<i64>, Option<i64>, Option<i64>) = sqlx::query_as(&sql)
        .bind(&key.table)
        .fetch_one(conn)
        .await
        .map_err(query_failed)?;
    let (Some(min), Some(max)) = (min, max) else {
        return Ok(vec![(None, None)]);
    };
    Ok(split(min, max, estimate.unwrap_or(-1), chunk_rows))
}

/// `[min, max]` cut into equal-width ranges of about `chunk_rows` of `estimate` rows. A
/// table never analysed has no estimate (`-1`): it is one range, since guessing from the
/// key span could turn two rows with keys far apart into a million queries.
fn split(min: i64, max: i64, estimate: i64, chunk_rows: i64) -> Vec<(Option<i64>, Option<i64>)> {
    let span = max as i128 - min as i128 + 1;
    let rows = estimate.max(0) as i128;
    let chunks = (rows / chunk_rows.max(1) as i128).clamp(1, span.min(1_000_000));
    let width = (span + chunks - 1) / chunks;
    let bound = |i: i128| (min as i128 + width * i) as i64;
    (0..chunks)
        .map(|i| {
            let start = (i > 0).then(|| bound(i));
            let end = (i + 1 < chunks).then(|| bound(i + 1));
            (start, end)
        })
        .collect()
}

/// One table: in one stream when it cannot or need not be split, else over every
/// connection, merged. `Ok(false)`: the cursor went away.
async fn read_table(
    conns: &mut Vec<PgConnection>,
    plan: &TablePlan,
    chunk_rows: i64,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    let ranges = match &plan.split {
        Some(key) if conns.len() > 1 => key_ranges(&mut conns[0], key, chunk_rows).await?,
        _ => Vec::new(),
    };
    if ranges.len() < 2 {
        return pg::stream_table(&mut conns[0], plan, tx).await;
    }
    let workers = conns.len().min(ranges.len());
    let idle = conns.split_off(workers);
    let mut set = JoinSet::new();
    let mut queues = Vec::with_capacity(workers);
    for (w, mut conn) in std::mem::take(conns).into_iter().enumerate() {
        let (ptx, prx) = mpsc::channel(CHUNK_BATCHES);
        queues.push(prx);
        let mine: Vec<_> = ranges.iter().copied().skip(w).step_by(workers).collect();
        let plan = plan.clone();
        set.spawn(async move {
            for (start, end) in mine {
                let sql = plan.sql_in_range(start, end);
                let mut out = pg::Out::Chunk(&ptx);
                match pg::stream_query(&mut conn, &plan, &sql, &mut out).await {
                    Ok(true) if ptx.send(Part::End).await.is_ok() => {}
                    Ok(_) => break,
                    Err(e) => {
                        let _ = ptx.send(Part::Failed(e)).await;
                        break;
                    }
                }
            }
            conn
        });
    }
    let merged = merge(&mut queues, ranges.len(), plan, tx).await;
    drop(queues);
    // Every worker has finished its chunks (or stops at its closed queue).
    while let Some(joined) = set.join_next().await {
        conns.push(joined.map_err(|_| worker_lost())?);
    }
    conns.extend(idle);
    merged
}

/// Takes chunk 0, 1, 2, … from their workers in turn and re-cuts the rows into the
/// single stream's batches.
async fn merge(
    queues: &mut [mpsc::Receiver<Part>],
    chunks: usize,
    plan: &TablePlan,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    let mut pending = Vec::with_capacity(BATCH_ROWS);
    let mut sent_any = false;
    let workers = queues.len();
    for chunk in 0..chunks {
        let queue = &mut queues[chunk % workers];
        loop {
            match queue.recv().await {
                Some(Part::Rows(rows)) => {
                    for row in rows {
                        pending.push(row);
                        if pending.len() == BATCH_ROWS {
                            let full =
                                std::mem::replace(&mut pending, Vec::with_capacity(BATCH_ROWS));
                            sent_any = true;
                            let batch = plan.batch(full);
                            if tx.send(Msg::Batch(batch)).await.is_err() {
                                return Ok(false);
                            }
                        }
                    }
                }
                Some(Part::End) => break,
                Some(Part::Failed(e)) => return Err(e),
                None => return Err(worker_lost()),
            }
        }
    }
    Ok(match (pending.is_empty(), sent_any) {
        (true, true) => true,
        (true, false) => pg::announce_empty(tx, plan).await,
        (false, _) => tx.send(Msg::Batch(plan.batch(pending))).await.is_ok(),
    })
}

/// A worker that stopped without finishing its chunk (a panic): never a complete table.
fn worker_lost() -> EngineError {
    EngineError::new(Category::Internal, msg::QUERY_FAILED)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn ranges_cover_every_key_once_in_order() {
        for (min, max, estimate, chunk) in [
            (1, 1_000_000, 1_000_000, 8192),
            (-50, 50, 101, 10),
            (i64::MIN, i64::MAX, 1_000, 100),
            (7, 7, 1, 1),
            (0, 99, 100, 1000),
            (1, 10, 1_000_000, 1),
        ] {
            let r = split(min, max, estimate, chunk);
            assert!(!r.is_empty());
            assert_eq!(r[0].0, None, "first range open below");
            assert_eq!(r[r.len() - 1].1, None, "last range open above");
            for pair in r.windows(2) {
                assert_eq!(pair[0].1, pair[1].0, "ranges meet");
                assert!(pair[0].1.is_some());
            }
            for w in r.iter().filter_map(|x| x.0.zip(x.1)) {
                assert!(w.0 < w.1, "{w:?} not empty");
            }
            assert!(r.len() as i128 <= max as i128 - min as i128 + 1);
        }
        assert_eq!(split(1, 1_000_000, 1_000_000, 8192).len(), 122);
        assert_eq!(split(0, 99, 100, 1000).len(), 1);
        // No estimate (never analysed): one range, however wide the keys.
        assert_eq!(split(1, 1_000_000_000_000, -1, 10), vec![(None, None)]);
    }
}
