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
//! - **Connections only while a table needs them.** The importing connections are opened
//!   just before a split table is read and closed after it, so none idles in its
//!   transaction while the step's connection reads another table (a server with
//!   `idle_in_transaction_session_timeout` would end it).
//! - **Fallbacks, never failures**: a server that cannot export a snapshot (a standby
//!   before PostgreSQL 10) reads in one stream as before; a connection that cannot be
//!   opened (the server's connection limit) leaves fewer workers; an importing
//!   connection lost mid-table (the server ended its session) is replaced by a new one
//!   in the same snapshot, which reads that worker's chunks on from the row the merger
//!   had reached (the same snapshot and order give the same rows); a table without an
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
    let snapshot = Snapshot {
        options,
        id,
        connections: settings.connections,
    };
    let mut main = Some(conn);
    for plan in &plans {
        match read_table(&mut main, &snapshot, plan, settings.chunk_rows, &tx).await {
            Ok(true) => {}
            Ok(false) => return, // the cursor went away
            Err(e) => {
                let _ = tx.send(Msg::Failed(e)).await;
                return;
            }
        }
    }
    if let Some(c) = main {
        release(c).await;
    }
    let _ = tx.send(Msg::End).await;
}

/// The exported snapshot and how to join it.
struct Snapshot {
    options: PgConnectOptions,
    id: String,
    /// Connections a split table is read over, the step's own included.
    connections: usize,
}

impl Snapshot {
    /// A new connection in the snapshot, if the server gives one in time.
    async fn join(&self) -> Option<PgConnection> {
        match tokio::time::timeout(CONNECT_TIMEOUT, import_snapshot(&self.options, &self.id)).await
        {
            Ok(Ok(c)) => Some(c),
            _ => None,
        }
    }
}

/// Ends an importing connection's read-only transaction and closes it.
async fn release(mut c: PgConnection) {
    let _ = c.execute("COMMIT").await;
    let _ = c.close().await;
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

/// One table: in one stream when it cannot or need not be split, else over the step's
/// connection and connections joined to its snapshot for this table, merged. `main` is
/// lent to worker 0 and given back when the table is done. `Ok(false)`: the cursor went
/// away.
async fn read_table(
    main: &mut Option<PgConnection>,
    snapshot: &Snapshot,
    plan: &TablePlan,
    chunk_rows: i64,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    let conn = main.as_mut().ok_or_else(worker_lost)?;
    let Some(key) = plan.split.as_ref().filter(|_| snapshot.connections > 1) else {
        return pg::stream_table(conn, plan, tx).await;
    };
    let ranges = key_ranges(conn, key, chunk_rows).await?;
    if ranges.len() < 2 {
        return pg::stream_table(conn, plan, tx).await;
    }
    // Joined only now (the key span can take long on a table a policy guards): a
    // connection joined to the snapshot sees the data as the step's does, whenever.
    let mut extra = Vec::new();
    while extra.len() + 1 < snapshot.connections.min(ranges.len()) {
        match snapshot.join().await {
            Some(c) => extra.push(c),
            None => break, // fewer workers
        }
    }
    if extra.is_empty() {
        return pg::stream_table(conn, plan, tx).await;
    }
    let workers = extra.len() + 1;
    let mut set = JoinSet::new();
    let own = main.take().ok_or_else(worker_lost)?;
    let mut queues: Vec<_> = std::iter::once(own)
        .chain(extra)
        .enumerate()
        .map(|(w, c)| {
            let mine = chunks_of(&ranges, w, workers, 0);
            spawn_worker(&mut set, w == 0, c, plan, mine)
        })
        .collect();
    let merged = merge(&mut queues, &ranges, plan, snapshot, &mut set, tx).await;
    drop(queues);
    // Every worker has finished its chunks (or stops at its closed queue).
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((true, Some(c))) => *main = Some(c),
            Ok((false, Some(c))) => release(c).await,
            Ok((_, None)) | Err(_) => {}
        }
    }
    match (merged, main.is_some()) {
        (Ok(_), false) => Err(worker_lost()),
        (merged, _) => merged,
    }
}

/// Worker `w`'s chunks of `workers`, from chunk `from` on: `w`, `w + workers`, ….
fn chunks_of(
    ranges: &[(Option<i64>, Option<i64>)],
    w: usize,
    workers: usize,
    from: usize,
) -> Vec<(Option<i64>, Option<i64>)> {
    (from..ranges.len())
        .filter(|i| i % workers == w)
        .map(|i| ranges[i])
        .collect()
}

/// A task reading `chunks` in order on `conn` into a queue of its own. It gives the
/// connection back (`main`: whether it is the step's own) unless a query on it failed.
fn spawn_worker(
    set: &mut JoinSet<(bool, Option<PgConnection>)>,
    main: bool,
    mut conn: PgConnection,
    plan: &TablePlan,
    chunks: Vec<(Option<i64>, Option<i64>)>,
) -> mpsc::Receiver<Part> {
    let (ptx, prx) = mpsc::channel(CHUNK_BATCHES);
    let plan = plan.clone();
    set.spawn(async move {
        for (start, end) in chunks {
            let sql = plan.sql_in_range(start, end);
            let mut out = pg::Out::Chunk(&ptx);
            match pg::stream_query(&mut conn, &plan, &sql, &mut out).await {
                Ok(true) if ptx.send(Part::End).await.is_ok() => {}
                Ok(_) => break,
                Err(e) => {
                    let _ = ptx.send(Part::Failed(e)).await;
                    return (main, None);
                }
            }
        }
        (main, Some(conn))
    });
    prx
}

/// How many lost importing connections one table replaces at most.
const MAX_REPLACEMENTS: usize = 8;

/// Takes chunk 0, 1, 2, … from their workers in turn and re-cuts the rows into the
/// single stream's batches. An importing connection lost with an error a retry may help
/// (the server ended its session) is replaced by a new one in the snapshot, which reads
/// that worker's chunks on; the rows of the current chunk merged already are skipped.
async fn merge(
    queues: &mut [mpsc::Receiver<Part>],
    ranges: &[(Option<i64>, Option<i64>)],
    plan: &TablePlan,
    snapshot: &Snapshot,
    set: &mut JoinSet<(bool, Option<PgConnection>)>,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    let mut pending = Vec::with_capacity(BATCH_ROWS);
    let mut sent_any = false;
    let workers = queues.len();
    let mut replaced = 0;
    for chunk in 0..ranges.len() {
        let w = chunk % workers;
        // Rows of this chunk merged, and rows a replacement reads again to skip.
        let (mut got, mut skip) = (0usize, 0usize);
        loop {
            match queues[w].recv().await {
                Some(Part::Rows(rows)) => {
                    for row in rows {
                        if skip > 0 {
                            skip -= 1;
                            continue;
                        }
                        got += 1;
                        pending.push(row);
                        if pending.len() == BATCH_ROWS {
                            let full =
                                std::mem::replace(&mut pending, Vec::with_capacity(BATCH_ROWS));
                            sent_any = true;
                            let batch = plan.batch(full);
                            if tx.send(Msg::Batch(batch)).await.is_ok() {
                                continue;
                            }
                            return Ok(false);
                        }
                    }
                }
                Some(Part::End) => break,
                Some(Part::Failed(e)) => {
                    // The step's own connection holds the snapshot: without it, the
                    // step cannot go on.
                    if w == 0 || !e.is_retryable() || replaced == MAX_REPLACEMENTS {
                        return Err(e);
                    }
                    let Some(c) = snapshot.join().await else {
                        return Err(e);
                    };
                    replaced += 1;
                    let rest = chunks_of(ranges, w, workers, chunk);
                    queues[w] = spawn_worker(set, false, c, plan, rest);
                    skip = got;
                }
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
