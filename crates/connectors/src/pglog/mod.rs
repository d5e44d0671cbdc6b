//! PostgreSQL log reads (docs/api.md, "Changes from the log"): a sync's table read from
//! the write-ahead log through a logical replication slot (`pgoutput`), in bounded
//! batches, with SQL functions only (no replication connection: the job's ordinary
//! session does everything, on RDS and Aurora too).
//!
//! The lifecycle of one sync:
//!
//! 1. **Start** ([`ensure_publication`], [`ensure_slot`]): a publication for the table
//!    and a slot, both named by [`LogSlot::for_sync`] (`fetcher_` and a hash). The slot keeps every change that
//!    commits after its creation.
//! 2. **Snapshot** ([`begin_snapshot`]): the first job reads the table in a
//!    `REPEATABLE READ` transaction and keeps that transaction's [`Snapshot`]. A change
//!    whose transaction the snapshot sees is in the snapshot; the slot holds it too when it
//!    committed between the slot's creation and the snapshot, so the first change read
//!    skips the transactions the snapshot saw ([`Snapshot::sees`]): none is in both, and
//!    none in neither (every transaction committed before the slot is in the snapshot).
//! 3. **Changes** ([`read_changes`]): a later job reads the transactions that committed
//!    at or after the sync's stored position and before the position current when it
//!    started ([`bound`]), in commit order, without consuming them
//!    (`pg_logical_slot_peek_binary_changes`).
//! 4. **Advance** ([`advance`]): only after the job's completion stored its bound, the slot
//!    is moved there (`pg_replication_slot_advance`): a failed job leaves the slot where it
//!    was, and its retry reads the same changes.
//!
//! [`drop_log`] removes the slot and the publication (reset, sync deletion).

pub mod pgoutput;
mod read;

pub use read::{LogTable, MARKER, MARKER_PREFIX};
pub(crate) use read::{plan_table, stream_table};

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use fetcher_engine::{Category, EngineError, LogSlot, Result};
use futures_util::TryStreamExt;
use sqlx::{Executor, PgConnection};

use crate::error::query_failed;
use pgoutput::{Datum, Message, Relation};

/// A position in the write-ahead log, printed as PostgreSQL prints it (`16/B374D848`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl FromStr for Lsn {
    type Err = InvalidLsn;
    /// The engine's reading of a stored position ([`fetcher_engine::lsn_value`]).
    fn from_str(s: &str) -> std::result::Result<Lsn, InvalidLsn> {
        fetcher_engine::lsn_value(s).map(Lsn).ok_or(InvalidLsn)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidLsn;

impl fmt::Display for InvalidLsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a log position (expected hex/hex, as 16/B374D848)")
    }
}
impl std::error::Error for InvalidLsn {}

/// Which transactions a snapshot saw: PostgreSQL's `pg_current_snapshot()`
/// (`xmin:xmax:xip,…`, 64-bit transaction ids), and the log position read right after
/// it: every transaction the snapshot saw committed before that position (its commit
/// record is written before it becomes visible), so only a change read starting below
/// it needs the snapshot. Under `synchronous_commit = off` that position can be past the
/// log flushed when the next job starts; the snapshot is kept until a read passes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    xmin: u64,
    xmax: u64,
    in_progress: Vec<u64>,
    /// Every transaction the snapshot saw committed below this position.
    pub taken_at: Lsn,
}

impl Snapshot {
    /// Whether the snapshot saw the transaction `xid` (the 32-bit id the log carries)
    /// that committed at `commit`: it committed before the snapshot was taken. The id is
    /// widened to 64 bits in the epoch nearest the snapshot's `xmax` (only transactions
    /// committed before [`Snapshot::taken_at`] are asked about: close to it in time).
    pub fn sees(&self, xid: u32, commit: Lsn) -> bool {
        if commit >= self.taken_at {
            return false;
        }
        let x = widen(xid, self.xmax);
        x < self.xmin || (x < self.xmax && !self.in_progress.contains(&x))
    }

    /// A snapshot from PostgreSQL's text (`xmin:xmax:xip,…`) and the position read after it.
    pub fn parse(text: &str, taken_at: Lsn) -> std::result::Result<Snapshot, InvalidLsn> {
        let mut parts = text.splitn(3, ':');
        let mut num = || -> std::result::Result<u64, InvalidLsn> {
            parts.next().and_then(|p| p.parse().ok()).ok_or(InvalidLsn)
        };
        let (xmin, xmax) = (num()?, num()?);
        let in_progress = parts
            .next()
            .ok_or(InvalidLsn)?
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().map_err(|_| InvalidLsn))
            .collect::<std::result::Result<_, _>>()?;
        if xmin > xmax {
            return Err(InvalidLsn);
        }
        Ok(Snapshot {
            xmin,
            xmax,
            in_progress,
            taken_at,
        })
    }

    /// PostgreSQL's text of the snapshot (without the position).
    pub fn text(&self) -> String {
        let mut s = format!("{}:{}:", self.xmin, self.xmax);
        for (i, x) in self.in_progress.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&x.to_string());
        }
        s
    }
}

fn widen(xid: u32, near: u64) -> u64 {
    let candidate = (near & !0xFFFF_FFFF) | xid as u64;
    if candidate > near.saturating_add(1 << 31) {
        candidate.saturating_sub(1 << 32)
    } else if candidate.saturating_add(1 << 31) < near {
        candidate + (1 << 32)
    } else {
        candidate
    }
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Whether the session's user may create and read replication slots: a superuser, the
/// `REPLICATION` attribute, or (RDS, Aurora) membership of `rds_replication`.
pub async fn may_replicate(conn: &mut PgConnection) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT r.rolsuper OR r.rolreplication OR EXISTS (SELECT 1 FROM pg_roles g \
         WHERE g.rolname = 'rds_replication' AND pg_has_role(current_user, g.oid, 'member')) \
         FROM pg_roles r WHERE r.rolname = current_user",
    )
    .fetch_one(conn)
    .await
    .map_err(query_failed)
}

/// Whether the server decodes its log (`wal_level = logical`).
pub async fn logical_decoding_on(conn: &mut PgConnection) -> Result<bool> {
    let level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(conn)
        .await
        .map_err(query_failed)?;
    Ok(level == "logical")
}

/// Creates the publication of `schema.table` unless it exists (an existing one is kept
/// as it is: the name is the sync's own).
pub async fn ensure_publication(
    conn: &mut PgConnection,
    names: &LogSlot,
    schema: &str,
    table: &str,
) -> Result<()> {
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
            .bind(&names.publication)
            .fetch_one(&mut *conn)
            .await
            .map_err(query_failed)?;
    if !exists {
        let sql = format!(
            "CREATE PUBLICATION {} FOR TABLE {}.{}",
            quote_ident(&names.publication),
            quote_ident(schema),
            quote_ident(table)
        );
        (&mut *conn)
            .execute(sql.as_str())
            .await
            .map_err(|e| match &e {
                // PostgreSQL lets only the table's owner add it to a publication.
                sqlx::Error::Database(d) if d.code().as_deref() == Some("42501") => {
                    EngineError::new(
                        Category::Validation,
                        format!(
                            "the connection's user may not create the publication of table '{schema}.{table}': it must own the table (or an owner creates the publication '{}' for it)",
                            names.publication
                        ),
                    )
                    .final_answer()
                }
                _ => query_failed(e),
            })?;
    }
    Ok(())
}

/// What the server reports of a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    /// Where the next read starts (`confirmed_flush_lsn`).
    pub confirmed: Lsn,
    /// Bytes of log the slot keeps from being recycled.
    pub retained_bytes: u64,
    /// The server removed log the slot still needed (`wal_status = 'lost'`): the slot can
    /// no longer be read.
    pub lost: bool,
}

/// The slot's state, or `None` when it does not exist.
pub async fn slot_state(conn: &mut PgConnection, names: &LogSlot) -> Result<Option<SlotState>> {
    let row: Option<(Option<String>, Option<i64>, Option<String>)> = sqlx::query_as(
        "SELECT confirmed_flush_lsn::text, \
         pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status \
         FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()",
    )
    .bind(&names.slot)
    .fetch_optional(conn)
    .await
    .map_err(query_failed)?;
    Ok(row.map(|(confirmed, retained, status)| SlotState {
        lost: status.as_deref() == Some("lost") || confirmed.is_none(),
        confirmed: confirmed.and_then(|c| c.parse().ok()).unwrap_or_default(),
        retained_bytes: retained.unwrap_or(0).max(0) as u64,
    }))
}

/// Creates the slot unless it exists; returns its state, `confirmed` being where its
/// changes start (the creation's consistent point, or an existing slot's confirmed
/// position: a snapshot taken after either is consistent with it, the change reads
/// skipping what it saw). A slot the server invalidated is dropped and made again (the
/// caller is about to take a new snapshot). Creating a slot waits for the transactions
/// running at that moment to end (the session's statement timeout bounds the wait).
pub async fn ensure_slot(conn: &mut PgConnection, names: &LogSlot) -> Result<SlotState> {
    match slot_state(conn, names).await? {
        Some(s) if s.lost => {
            sqlx::query("SELECT pg_drop_replication_slot($1)")
                .bind(&names.slot)
                .execute(&mut *conn)
                .await
                .map_err(query_failed)?;
        }
        Some(s) => return Ok(s),
        None => {}
    }
    let lsn: String = sqlx::query_scalar(
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
    )
    .bind(&names.slot)
    .fetch_one(conn)
    .await
    .map_err(query_failed)?;
    Ok(SlotState {
        confirmed: lsn.parse().map_err(|_| malformed())?,
        // A new slot holds the log from its own start only.
        retained_bytes: 0,
        lost: false,
    })
}

/// The slot cannot be read any more: the server removed log it needed
/// (`max_slot_wal_keep_size`), or it was dropped.
pub fn slot_lost() -> EngineError {
    EngineError::of(fetcher_engine::Reason::LogSlotLost).final_answer()
}

fn malformed() -> EngineError {
    EngineError::new(Category::Internal, "the log returned a malformed change")
}

/// Opens the first job's snapshot: a `REPEATABLE READ` transaction on `conn` (the table is
/// read in it next; the caller commits). Returns what the snapshot saw.
pub async fn begin_snapshot(conn: &mut PgConnection) -> Result<Snapshot> {
    (&mut *conn)
        .execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(query_failed)?;
    let text: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
        .fetch_one(&mut *conn)
        .await
        .map_err(query_failed)?;
    let taken_at = insert_position(conn).await?;
    Snapshot::parse(&text, taken_at).map_err(|_| malformed())
}

async fn insert_position(conn: &mut PgConnection) -> Result<Lsn> {
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(conn)
        .await
        .map_err(query_failed)?;
    lsn.parse().map_err(|_| malformed())
}

/// How long [`bound`] waits for the log to be flushed up to the job's start.
pub const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The upper bound of a change read starting now: the log written so far, made durable.
/// Every transaction committed (visible) before the job started commits below it. The
/// log decodes only what is flushed, and a transaction committed with
/// `synchronous_commit = off` is visible before it is: then an empty transaction
/// committed synchronously flushes the log through the bound (it takes a transaction id
/// and writes only its commit record), and at worst this waits [`FLUSH_WAIT`] for the
/// server's own flush, rather than skip such a transaction.
pub async fn bound(conn: &mut PgConnection) -> Result<Lsn> {
    let upto = insert_position(conn).await?;
    let started = std::time::Instant::now();
    let mut forced = false;
    loop {
        let flushed: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
            .fetch_one(&mut *conn)
            .await
            .map_err(query_failed)?;
        let flushed: Lsn = flushed.parse().map_err(|_| malformed())?;
        if flushed >= upto {
            return Ok(upto);
        }
        if !forced {
            forced = true;
            conn.execute(
                "BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_current_xact_id(); COMMIT",
            )
            .await
            .map_err(query_failed)?;
            continue;
        }
        if started.elapsed() > FLUSH_WAIT {
            // The server is not flushing: the bound is what is durable.
            return Ok(flushed);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Moves the slot to `to` (a bound a completed job stored): the server may then recycle
/// the log before it. A slot already past `to` stays where it is. Returns the bytes of
/// log the slot retained before it moved.
pub async fn advance(conn: &mut PgConnection, names: &LogSlot, to: Lsn) -> Result<u64> {
    let retained = match slot_state(conn, names).await? {
        None => return Err(slot_lost()),
        Some(s) if s.lost => return Err(slot_lost()),
        Some(s) if s.confirmed >= to => return Ok(s.retained_bytes),
        Some(s) => s.retained_bytes,
    };
    sqlx::query("SELECT 1 FROM pg_replication_slot_advance($1, $2::text::pg_lsn)")
        .bind(&names.slot)
        .bind(to.to_string())
        .execute(conn)
        .await
        .map_err(query_failed)?;
    Ok(retained)
}

/// Drops the slot and the publication, whichever exist.
pub async fn drop_log(conn: &mut PgConnection, names: &LogSlot) -> Result<()> {
    sqlx::query(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE slot_name = $1",
    )
    .bind(&names.slot)
    .execute(&mut *conn)
    .await
    .map_err(query_failed)?;
    let sql = format!(
        "DROP PUBLICATION IF EXISTS {}",
        quote_ident(&names.publication)
    );
    conn.execute(sql.as_str()).await.map_err(query_failed)?;
    Ok(())
}

/// What a change did to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Insert,
    Update,
    Delete,
    /// The table was emptied (`TRUNCATE`): the change has no row.
    Truncate,
    /// A row of the first job's snapshot (not a change: the state changes apply to).
    Snapshot,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Truncate => "truncate",
            Op::Snapshot => "snapshot",
        }
    }
}

/// One committed change to a row of the read table.
#[derive(Debug, Clone)]
pub struct Change {
    pub op: Op,
    /// Where the change's transaction committed: the order of changes, and the position
    /// a job that stops after this transaction stores.
    pub commit_lsn: Lsn,
    /// Microseconds since 2000-01-01 UTC (PostgreSQL's epoch).
    pub commit_time: i64,
    pub xid: u32,
    /// The relation as the log described it before this change (columns in table order).
    pub relation: Arc<Relation>,
    /// The row after an insert or update.
    pub new: Option<Vec<Datum>>,
    /// A delete's replica identity (the key, or the whole row under `REPLICA IDENTITY
    /// FULL`); an update's old key when the key changed, or its old row under `FULL`.
    pub old: Option<Vec<Datum>>,
}

/// One bounded change read.
#[derive(Debug, Clone)]
pub struct ChangeRead<'a> {
    pub slot: &'a LogSlot,
    /// The sync's stored position: transactions committed before it were delivered.
    pub from: Lsn,
    /// The job's bound ([`bound`]): transactions committed at or after it are the next
    /// job's.
    pub upto: Lsn,
    /// The change reads after a snapshot skip what that snapshot saw, until one passes
    /// [`Snapshot::taken_at`].
    pub snapshot: Option<&'a Snapshot>,
}

/// What a change read went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSummary {
    pub transactions: u64,
    pub changes: u64,
    /// Transactions the snapshot saw, skipped.
    pub skipped: u64,
}

/// The committed changes of one [`ChangeRead`]'s range, in commit order
/// ([`read_changes`]): pulled one at a time, so the caller's batches bound the memory.
pub struct Changes<'c> {
    rows: futures_util::stream::BoxStream<'c, sqlx::Result<Vec<u8>>>,
    from: Lsn,
    upto: Lsn,
    snapshot: Option<Snapshot>,
    relations: HashMap<u32, Arc<Relation>>,
    /// The transaction being read: its commit position, time and id, and whether its
    /// changes are in range (and not seen by the snapshot).
    current: Option<(Lsn, i64, u32, bool)>,
    summary: ReadSummary,
}

/// Reads the committed changes of `read`'s range (see [`Changes::next`]).
pub fn read_changes<'c>(conn: &'c mut PgConnection, read: &ChangeRead<'_>) -> Changes<'c> {
    let rows = sqlx::query_scalar::<_, Vec<u8>>(
        "SELECT data FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL, \
         'proto_version', '1', 'publication_names', $3, 'binary', 'true')",
    )
    .bind(read.slot.slot.clone())
    .bind(read.upto.to_string())
    .bind(quote_ident(&read.slot.publication))
    .fetch(conn);
    Changes {
        rows,
        from: read.from,
        upto: read.upto,
        snapshot: read.snapshot.cloned(),
        relations: HashMap::new(),
        current: None,
        summary: ReadSummary::default(),
    }
}

impl Changes<'_> {
    /// The next change, or `None` at the end of the range.
    pub async fn next(&mut self) -> Result<Option<Change>> {
        while let Some(data) = self.rows.try_next().await.map_err(slot_error)? {
            let message = pgoutput::decode(&data).map_err(|_| malformed())?;
            let (commit_lsn, commit_time, xid, wanted) = match (&message, self.current) {
                (Message::Begin { .. }, _) | (Message::Relation(_), _) => (Lsn(0), 0, 0, false),
                (_, Some(c)) => c,
                (Message::Other(_), None) => continue,
                (_, None) => return Err(malformed()),
            };
            let relations = &self.relations;
            let change = |op, new, old, relation: &u32| -> Result<Change> {
                Ok(Change {
                    op,
                    commit_lsn,
                    commit_time,
                    xid,
                    relation: relations.get(relation).cloned().ok_or_else(malformed)?,
                    new,
                    old,
                })
            };
            let out = match message {
                Message::Begin {
                    final_lsn,
                    commit_time,
                    xid,
                } => {
                    let in_range = final_lsn >= self.from && final_lsn < self.upto;
                    let seen = in_range
                        && self
                            .snapshot
                            .as_ref()
                            .is_some_and(|s| s.sees(xid, final_lsn));
                    if seen {
                        self.summary.skipped += 1;
                    }
                    self.current = Some((final_lsn, commit_time, xid, in_range && !seen));
                    None
                }
                Message::Commit { .. } => {
                    if wanted {
                        self.summary.transactions += 1;
                    }
                    self.current = None;
                    None
                }
                Message::Relation(r) => {
                    self.relations.insert(r.id, Arc::new(r));
                    None
                }
                _ if !wanted => None,
                Message::Insert { relation, new } => {
                    Some(change(Op::Insert, Some(new), None, &relation)?)
                }
                Message::Update { relation, old, new } => {
                    Some(change(Op::Update, Some(new), old, &relation)?)
                }
                Message::Delete { relation, old } => {
                    Some(change(Op::Delete, None, Some(old), &relation)?)
                }
                Message::Truncate { relations: ids } => match ids.first() {
                    Some(id) => Some(change(Op::Truncate, None, None, id)?),
                    None => None,
                },
                Message::Other(_) => None,
            };
            if let Some(c) = out {
                self.summary.changes += 1;
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// What the read went through so far.
    pub fn summary(&self) -> &ReadSummary {
        &self.summary
    }
}

/// A failed change read: a slot that is gone or invalidated has its own error; the
/// rest are query failures.
fn slot_error(e: sqlx::Error) -> EngineError {
    if let sqlx::Error::Database(d) = &e {
        // 42704: the slot does not exist; 55000: it was invalidated ("can no longer get
        // changes from replication slot").
        if matches!(d.code().as_deref(), Some("42704") | Some("55000")) {
            return slot_lost();
        }
    }
    query_failed(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_positions_print_and_parse_as_postgresql_does() {
        let l: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(l, Lsn(0x16_B374_D848));
        assert_eq!(l.to_string(), "16/B374D848");
        assert_eq!(Lsn(0).to_string(), "0/0");
        for bad in ["", "1", "/1", "1/", "x/1", "123456789/0", "1/2/3"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_snapshot_sees_what_committed_before_it() {
        let at = Lsn(1000);
        let before = Lsn(999);
        let s = Snapshot::parse("100:110:103,107", at).unwrap();
        assert_eq!(s.text(), "100:110:103,107");
        assert!(s.sees(99, before) && s.sees(104, before) && s.sees(109, before));
        assert!(!s.sees(103, before) && !s.sees(107, before) && !s.sees(110, before));
        assert!(!s.sees(99, at), "committed after the snapshot's position");
        let empty = Snapshot::parse("729:729:", at).unwrap();
        assert!(empty.sees(728, before) && !empty.sees(729, before));
        for bad in ["", "1", "2:1:", "a:b:", "1:2:x"] {
            assert!(Snapshot::parse(bad, at).is_err(), "{bad}");
        }
    }

    #[test]
    fn thirty_two_bit_ids_widen_into_the_snapshots_epoch() {
        // xmax just past an epoch boundary: an id from the end of the previous epoch is
        // older (seen), one from the start of this epoch newer.
        let epoch = 1u64 << 32;
        let s = Snapshot {
            xmin: epoch + 5,
            xmax: epoch + 10,
            in_progress: vec![],
            taken_at: Lsn(10),
        };
        assert!(
            s.sees(u32::MAX - 3, Lsn(1)),
            "previous epoch: committed long before"
        );
        assert!(s.sees(7, Lsn(1)));
        assert!(!s.sees(12, Lsn(1)));
    }
}
