//! A log read as one table of a step: planned with the other tables, streamed by the
//! PostgreSQL producer in its turn. The first job of a sync reads the snapshot (the
//! table's ordinary `SELECT`, inside the snapshot's transaction), every later one the
//! changes since the stored position; each row ends with the change marker
//! ([`MARKER`]), and every batch carries the position a completed job stores.

use std::sync::Arc;

use fetcher_engine::{
    Category, ColumnType, Columns, EngineError, IncrementalRead, LogPosition, LogSnapshot,
    PlanStep, Result, Value, Watermark,
};
use sqlx::{Executor, PgConnection};
use tokio::sync::mpsc;

use super::pgoutput::{Datum, Relation};
use super::{Change, ChangeRead, Lsn, Op, Snapshot};
use crate::Dialect;
use crate::catalog::{ColumnInfo, TableInfo};
use crate::error::{decode_failed, query_failed};
use crate::filter::Where;
use crate::pg::{Out, stream_query};
use crate::pgbin;
use crate::query::{BATCH_ROWS, Msg, TablePlan, pg_decoders};

/// The change marker every row of a log read ends with (docs/api.md, "Changes from the
/// log"): the operation, the commit's log position, its time, and the columns an update
/// left as they were without repeating them (unchanged TOASTed values).
pub const MARKER: [(&str, ColumnType); 4] = [
    ("_fetcher_op", ColumnType::Text),
    ("_fetcher_lsn", ColumnType::Text),
    ("_fetcher_commit_time", ColumnType::TimestampTz),
    ("_fetcher_unchanged", ColumnType::Json),
];

/// The prefix no column of a table read from the log may have (the marker's).
pub const MARKER_PREFIX: &str = "_fetcher_";

/// What a log read needs beyond its plan's statement.
#[derive(Debug, Clone)]
pub struct LogTable {
    pub read: IncrementalRead,
    pub schema: String,
    pub name: String,
    /// A continued run of a change read: the commit position of the last transaction an
    /// earlier segment delivered whole; the read skips it and every one before it.
    resume_after: Option<Lsn>,
    /// Asked for positions (a segmented run): a change read's batches that end at a
    /// transaction's end carry its commit position, where a segment may stop.
    positions: bool,
    /// Decoder OIDs of the selected columns (as the ordinary read decodes them).
    decoders: Vec<u32>,
}

fn refused(text: String) -> EngineError {
    EngineError::new(Category::Validation, text).final_answer()
}

/// A resume point a log read never gives (a snapshot does not resume; a change read
/// resumes after a commit position).
fn bad_resume() -> EngineError {
    EngineError::new(
        Category::Internal,
        "a log read's resume point is not a commit position",
    )
}

/// Plans a table read from the log: every selected column must be one the log carries in
/// the binary form the ordinary read decodes; the key columns are always read; no
/// filter or key range applies, and only a change read resumes (after a transaction).
pub(crate) fn plan_table(
    dialect: Dialect,
    table: &TableInfo,
    requested: &str,
    mut selected: Vec<ColumnInfo>,
    read: &IncrementalRead,
    step: &PlanStep,
    copy_fast_path: bool,
) -> Result<TablePlan> {
    let name = &table.key;
    if dialect != Dialect::Postgres {
        return Err(refused(format!(
            "table '{name}' is read from the log, which only PostgreSQL datasources offer"
        )));
    }
    if step.filters.contains_key(requested) {
        return Err(refused(format!(
            "table '{name}' is read from the log: a filter cannot apply to its changes (read every row, or use a cursor)"
        )));
    }
    if step.key_ranges.contains_key(requested) {
        return Err(refused(format!(
            "table '{name}' is read from the log, which is read whole by one job"
        )));
    }
    let resume_after = match step.resume_after.get(requested).map(Vec::as_slice) {
        None => None,
        Some([serde_json::Value::String(lsn)]) if read.after.is_some() => {
            Some(lsn.parse::<Lsn>().map_err(|_| bad_resume())?)
        }
        Some(_) => return Err(bad_resume()),
    };
    if table.primary_key.is_empty() {
        return Err(refused(format!(
            "table '{name}' has no primary key: a log read needs one to identify deleted rows"
        )));
    }
    if let Some(c) = table
        .columns
        .iter()
        .find(|c| c.name.starts_with(MARKER_PREFIX))
    {
        return Err(refused(format!(
            "column '{}' of table '{name}' takes the change marker's prefix '{MARKER_PREFIX}': read the table with a cursor",
            c.name
        )));
    }
    for k in &table.primary_key {
        if !selected.iter().any(|c| &c.name == k)
            && let Some(c) = table.column(k)
        {
            selected.push(c.clone());
        }
    }
    if let Some(c) = selected
        .iter()
        .find(|c| c.pg_text_cast || c.pg_text_array || c.pg_raw_bytes)
    {
        return Err(refused(format!(
            "column '{}' of table '{name}' has type {}, which a log read cannot decode yet: leave it out of mappedFields",
            c.name, c.type_name
        )));
    }
    let mut columns: Vec<(String, ColumnType)> =
        selected.iter().map(|c| (c.name.clone(), c.ctype)).collect();
    columns.extend(MARKER.iter().map(|(n, t)| (n.to_string(), *t)));
    let select = crate::query::select_parts(dialect, table, &selected, &Where::default());
    let mut plan = TablePlan::for_log(
        Arc::from(requested),
        Columns::typed(columns),
        selected,
        select,
        copy_fast_path,
    );
    plan.log = Some(LogTable {
        read: read.clone(),
        schema: table.schema.clone(),
        name: table.name.clone(),
        resume_after,
        positions: step.positions,
        decoders: pg_decoders(&plan),
    });
    Ok(plan)
}

/// Streams a log table: the snapshot on a sync's first job, else the changes since its
/// stored position. `Ok(false)`: the reader went away.
pub(crate) async fn stream_table(
    conn: &mut PgConnection,
    plan: &TablePlan,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    let log = plan.log.as_ref().expect("a log plan");
    let slot = log.read.slot.as_ref().ok_or_else(|| {
        EngineError::new(
            Category::Internal,
            "a log read was planned without its slot",
        )
    })?;
    match log.read.after.as_ref().and_then(|w| w.log.as_ref()) {
        None => snapshot(conn, plan, log, slot, tx).await,
        Some(at) => changes(conn, plan, log, slot, at, tx).await,
    }
}

/// The first job: checks what the server and user allow, makes the publication and the
/// slot, then reads the table in a snapshot taken after the slot's start.
async fn snapshot(
    conn: &mut PgConnection,
    plan: &TablePlan,
    log: &LogTable,
    slot: &fetcher_engine::LogSlot,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    if !super::logical_decoding_on(conn).await? {
        return Err(refused(format!(
            "table '{}' is read from the log, but the server's wal_level is not 'logical' (docs/operations.md, \"Logical decoding\")",
            log.name
        )));
    }
    if !super::may_replicate(conn).await? {
        return Err(refused(
            "a log read needs a user with the REPLICATION attribute (on RDS and Aurora: the rds_replication role)".into(),
        ));
    }
    super::ensure_publication(conn, slot, &log.schema, &log.name).await?;
    let held = super::ensure_slot(conn, slot).await?;
    let (start, retained) = (held.confirmed, Some(held.retained_bytes));
    let seen = super::begin_snapshot(conn).await?;
    let mut plan = plan.clone();
    plan.suffix = vec![
        Value::String(Op::Snapshot.as_str().into()),
        Value::String(start.to_string()),
        Value::Null,
        Value::Null,
    ];
    plan.watermark = Some(Watermark::at_log(
        &log.read.spec,
        LogPosition {
            lsn: start.to_string(),
            snapshot: Some(LogSnapshot {
                seen: seen.text(),
                taken_at: seen.taken_at.to_string(),
            }),
            slot: Some(slot.slot.clone()),
            retained_bytes: retained,
        },
    ));
    let mut out = Out::Engine {
        tx,
        plan: &plan,
        sent_any: false,
    };
    let read = stream_query(conn, &plan, &plan.sql(), &mut out).await;
    let ended = (&mut *conn).execute("COMMIT").await;
    if !read? {
        return Ok(false);
    }
    ended.map_err(query_failed)?;
    Ok(match out {
        Out::Engine { sent_any: true, .. } => true,
        _ => crate::pg::announce_empty(tx, &plan).await,
    })
}

/// A later job: moves the slot to the stored position (a completed job's), then reads
/// the changes committed since, up to the log flushed when it started.
async fn changes(
    conn: &mut PgConnection,
    plan: &TablePlan,
    log: &LogTable,
    slot: &fetcher_engine::LogSlot,
    at: &LogPosition,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    let bad_position =
        || EngineError::new(Category::Internal, "the sync's log position is malformed");
    let from: Lsn = at.lsn.parse().map_err(|_| bad_position())?;
    let snapshot = match &at.snapshot {
        Some(s) => {
            let taken_at: Lsn = s.taken_at.parse().map_err(|_| bad_position())?;
            Some(Snapshot::parse(&s.seen, taken_at).map_err(|_| bad_position())?)
        }
        None => None,
    };
    let retained = super::advance(conn, slot, from).await?;
    let upto = super::bound(conn).await?;
    let mut plan = plan.clone();
    plan.watermark = Some(Watermark::at_log(
        &log.read.spec,
        LogPosition {
            lsn: upto.max(from).to_string(),
            // Kept until a read starts at or past the snapshot's position.
            snapshot: at
                .snapshot
                .clone()
                .filter(|_| snapshot.as_ref().is_some_and(|s| upto < s.taken_at)),
            slot: Some(slot.slot.clone()),
            retained_bytes: Some(retained),
        },
    ));
    let read = ChangeRead {
        slot,
        from,
        upto,
        snapshot: snapshot.as_ref().filter(|s| from < s.taken_at),
    };
    let mut rows = Vec::with_capacity(BATCH_ROWS);
    let mut sent_any = false;
    let mut columns: Vec<(Arc<Relation>, Vec<Option<usize>>)> = Vec::new();
    // The commit position of the transaction the rows so far end in.
    let mut last_commit: Option<Lsn> = None;
    let batch = |rows: Vec<fetcher_engine::Row>, ends_at: Option<Lsn>| {
        let mut b = plan.batch(rows);
        // Only a batch that ends with a whole transaction is a place to stop.
        b.position = ends_at
            .filter(|_| log.positions)
            .map(|lsn| vec![serde_json::Value::String(lsn.to_string())]);
        b
    };
    let mut changes = super::read_changes(conn, &read);
    while let Some(change) = changes.next().await? {
        if log.resume_after.is_some_and(|r| change.commit_lsn <= r) {
            continue; // an earlier segment delivered its transaction
        }
        let ended = last_commit.filter(|c| *c != change.commit_lsn);
        // A segmented run ends a batch at a transaction's end sooner, so that it has
        // places to stop; a batch inside a big transaction is sent full, without one.
        let full_at = match ended {
            Some(_) if log.positions => BATCH_ROWS / 4,
            _ => BATCH_ROWS,
        };
        if rows.len() >= full_at {
            let full = std::mem::replace(&mut rows, Vec::with_capacity(BATCH_ROWS));
            sent_any = true;
            if tx.send(Msg::Batch(batch(full, ended))).await.is_err() {
                return Ok(false);
            }
        }
        rows.extend(change_rows(&plan, log, &mut columns, &change)?);
        last_commit = Some(change.commit_lsn);
    }
    if !rows.is_empty() {
        // The read returns whole transactions: its last row ends one.
        return Ok(tx.send(Msg::Batch(batch(rows, last_commit))).await.is_ok());
    }
    Ok(sent_any || crate::pg::announce_empty(tx, &plan).await)
}

/// The result rows of one change: one, or for an update that changed the key, a delete
/// of the old key and an insert of the new row (so applying rows in order by key works).
fn change_rows(
    plan: &TablePlan,
    log: &LogTable,
    columns: &mut Vec<(Arc<Relation>, Vec<Option<usize>>)>,
    change: &Change,
) -> Result<Vec<fetcher_engine::Row>> {
    // Where each selected column is in the relation as the log describes it (a column
    // added or dropped since the plan: absent from the log's rows, then `null`).
    // (The relations are kept, so a pointer compared is never one reused.)
    let known = columns
        .iter()
        .position(|(r, _)| Arc::ptr_eq(r, &change.relation));
    let at = match known {
        Some(i) => &columns[i].1,
        None => {
            let at: Vec<Option<usize>> = plan
                .selected
                .iter()
                .map(|c| {
                    change
                        .relation
                        .columns
                        .iter()
                        .position(|r| r.name == c.name)
                })
                .collect();
            columns.push((change.relation.clone(), at));
            &columns[columns.len() - 1].1
        }
    };
    let key_changed = change.op == Op::Update
        && change.old.as_ref().is_some_and(|old| {
            change
                .relation
                .columns
                .iter()
                .enumerate()
                .any(|(i, c)| c.key && old.get(i) != change.new.as_ref().and_then(|n| n.get(i)))
        });
    let one = |op: Op, tuple: Option<&Vec<Datum>>| -> Result<fetcher_engine::Row> {
        let mut values = Vec::with_capacity(plan.columns.len());
        let mut unchanged = Vec::new();
        for (i, pos) in at.iter().enumerate() {
            let datum = pos.and_then(|p| tuple.and_then(|t| t.get(p)));
            values.push(match datum {
                None | Some(Datum::Null) => Value::Null,
                Some(Datum::Unchanged) => {
                    unchanged.push(Value::String(plan.selected[i].name.clone()));
                    Value::Null
                }
                Some(Datum::Binary(b)) => {
                    pgbin::decode(log.decoders[i], b).map_err(|_| decode_failed())?
                }
                Some(Datum::Text(b)) => fetcher_connect::values::text(b),
            });
        }
        values.push(Value::String(op.as_str().into()));
        values.push(Value::String(change.commit_lsn.to_string()));
        values.push(Value::String(pgbin::timestamp(change.commit_time)));
        values.push(if unchanged.is_empty() {
            Value::Null
        } else {
            Value::List(unchanged)
        });
        Ok(fetcher_engine::Row::new(plan.columns.clone(), values))
    };
    Ok(match change.op {
        Op::Update if key_changed => vec![
            one(Op::Delete, change.old.as_ref())?,
            one(Op::Insert, change.new.as_ref())?,
        ],
        Op::Insert | Op::Update => vec![one(change.op, change.new.as_ref())?],
        Op::Delete => vec![one(Op::Delete, change.old.as_ref())?],
        Op::Truncate | Op::Snapshot => vec![one(change.op, None)?],
    })
}
