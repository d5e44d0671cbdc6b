//! Log reads (`fetcher_connectors::pglog`) against a real PostgreSQL with
//! `wal_level=logical`: the private cluster of `scripts/pg-logical` (started here when it is
//! not up; the machine's own server runs `wal_level=replica`). The module's own calls:
//! snapshot and change reads under churn, TOAST, deletes, truncates, dropped slots, users.
//! Reads through the engine are `pglog_engine.rs`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::logical::*;
use fetcher_connectors::pgbin;
use fetcher_connectors::pglog::{self, ChangeRead, Lsn, Op, pgoutput::Datum};
use fetcher_engine::LogSlot;
use sqlx::{Connection, Executor, PgConnection};

fn int(d: &Datum) -> Option<i64> {
    match d {
        Datum::Binary(b) => match pgbin::decode(pgbin::oid::INT8, b).unwrap() {
            fetcher_engine::Value::Int(i) => Some(i),
            other => panic!("an integer, got {other:?}"),
        },
        Datum::Null => None,
        other => panic!("a binary integer, got {other:?}"),
    }
}

/// The model a consumer keeps: id → version, applied change by change, refusing anything
/// that is not exactly once (an insert of a known row, an update that skips or repeats a
/// version, a delete of an unknown row).
#[derive(Default, Debug, PartialEq)]
struct Model(BTreeMap<i64, i64>);

impl Model {
    fn apply(&mut self, c: &pglog::Change) {
        match c.op {
            Op::Insert => {
                let new = c.new.as_ref().unwrap();
                let (id, v) = (int(&new[0]).unwrap(), int(&new[1]).unwrap());
                assert!(self.0.insert(id, v).is_none(), "insert of {id} twice");
            }
            Op::Update => {
                let new = c.new.as_ref().unwrap();
                let (id, v) = (int(&new[0]).unwrap(), int(&new[1]).unwrap());
                let old = self.0.insert(id, v);
                assert_eq!(old, Some(v - 1), "update of {id} to version {v}");
            }
            Op::Delete => {
                let id = int(&c.old.as_ref().unwrap()[0]).unwrap();
                assert!(self.0.remove(&id).is_some(), "delete of unknown {id}");
            }
            Op::Truncate => self.0.clear(),
            Op::Snapshot => panic!("a change read yields no snapshot rows"),
        }
    }

    async fn of_table(conn: &mut PgConnection) -> Model {
        let rows: Vec<(i64, i64)> = sqlx::query_as("SELECT id, version FROM t ORDER BY id")
            .fetch_all(conn)
            .await
            .unwrap();
        Model(rows.into_iter().collect())
    }
}

/// Every change of `read`.
async fn all(
    conn: &mut PgConnection,
    read: &ChangeRead<'_>,
) -> fetcher_engine::Result<Vec<pglog::Change>> {
    let mut changes = pglog::read_changes(conn, read);
    let mut out = Vec::new();
    while let Some(c) = changes.next().await? {
        out.push(c);
    }
    Ok(out)
}

/// One job of a sync after its snapshot: reads `from..bound` and, when `complete`,
/// advances the slot to the bound it stores (a failed job does not).
async fn change_job(
    conn: &mut PgConnection,
    names: &LogSlot,
    from: Lsn,
    snapshot: Option<&pglog::Snapshot>,
    model: &mut Model,
    complete: bool,
) -> (Lsn, pglog::ReadSummary) {
    let upto = pglog::bound(conn).await.unwrap();
    let read = ChangeRead {
        slot: names,
        from,
        upto,
        snapshot,
    };
    let mut seen: Vec<pglog::Change> = Vec::new();
    let mut changes = pglog::read_changes(conn, &read);
    while let Some(c) = changes.next().await.unwrap() {
        assert!(c.commit_lsn >= from && c.commit_lsn < upto, "in range");
        if let Some(last) = seen.last().map(|c| c.commit_lsn) {
            assert!(c.commit_lsn >= last, "commit order");
        }
        seen.push(c);
    }
    let summary = changes.summary().clone();
    drop(changes);
    if complete {
        for c in &seen {
            model.apply(c);
        }
        pglog::advance(conn, names, upto).await.unwrap();
        (upto, summary)
    } else {
        (from, summary)
    }
}

/// Writers that insert, update and delete at random, some transactions taking their
/// values early and committing late, while a sync snapshots and then reads 20 jobs of
/// changes: the snapshot plus every job's changes, applied in order, is the table's
/// final state, and every change applies exactly once (versions step by one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshot_and_changes_under_churn_give_the_final_state_exactly_once() {
    let db = LogDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, version bigint NOT NULL, pad text); \
         INSERT INTO t SELECT g, 1, 'seed' FROM generate_series(1, 200) g;",
    )
    .await;
    let names = LogSlot::for_sync("t1", &common::unique("churn"), "pg", "t");
    let mut churn = Churn::start(&db, 3, 260).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The first job: publication, slot, snapshot.
    let mut conn = db.conn().await;
    assert!(pglog::may_replicate(&mut conn).await.unwrap());
    assert!(pglog::logical_decoding_on(&mut conn).await.unwrap());
    pglog::ensure_publication(&mut conn, &names, "public", "t")
        .await
        .unwrap();
    let start = pglog::ensure_slot(&mut conn, &names)
        .await
        .unwrap()
        .confirmed;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let snapshot = pglog::begin_snapshot(&mut conn).await.unwrap();
    let mut model = Model::of_table(&mut conn).await;
    conn.execute("COMMIT").await.unwrap();

    let mut from = start;
    let mut skipped = 0;
    let mut changes = 0;
    for job in 0..20 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        if job == 19 {
            churn.stop().await;
        }
        // The snapshot's filter stays until a job's range starts at or past its position.
        let snap = (from < snapshot.taken_at).then_some(&snapshot);
        // Every fourth job fails once before it completes: its retry reads the same.
        if job % 4 == 1 {
            let (kept, _) = change_job(&mut conn, &names, from, snap, &mut model, false).await;
            assert_eq!(kept, from);
        }
        let (to, s) = change_job(&mut conn, &names, from, snap, &mut model, true).await;
        skipped += s.skipped;
        changes += s.changes;
        from = to;
    }
    let (_, last) = change_job(&mut conn, &names, from, None, &mut model, true).await;
    assert_eq!(last.changes, 0, "nothing left after the writers stopped");
    assert!(changes > 100, "the writers changed the table: {changes}");
    eprintln!("{changes} changes, {skipped} transactions seen by the snapshot and skipped");
    assert_eq!(model, Model::of_table(&mut conn).await);
    drop(conn);
    db.drop().await;
}

/// An update that leaves a TOASTed value as it was does not repeat it: the log says
/// `Unchanged`, never `NULL`; a delete carries the key (or the whole row under
/// `REPLICA IDENTITY FULL`); a `TRUNCATE` is a change without a row.
#[tokio::test]
async fn unchanged_toast_deletes_and_truncates_are_told_apart() {
    let db = LogDb::create(
        "CREATE TABLE t (id bigint PRIMARY KEY, version bigint NOT NULL, big text, note text); \
         CREATE TABLE f (id bigint PRIMARY KEY, v text); ALTER TABLE f REPLICA IDENTITY FULL;",
    )
    .await;
    let mut conn = db.conn().await;
    let names = LogSlot::for_sync("t1", &common::unique("toast"), "pg", "t");
    pglog::ensure_publication(&mut conn, &names, "public", "t")
        .await
        .unwrap();
    let start = pglog::ensure_slot(&mut conn, &names)
        .await
        .unwrap()
        .confirmed;
    conn.execute(
        "INSERT INTO t SELECT 1, 1, string_agg(md5(g::text), '') FROM generate_series(1, 2000) g; \
         UPDATE t SET version = 2, note = 'n' WHERE id = 1; \
         UPDATE t SET version = 3, big = NULL WHERE id = 1; \
         DELETE FROM t WHERE id = 1; \
         INSERT INTO f VALUES (1, 'other table');
         INSERT INTO t VALUES (2, 1, 'x', NULL); TRUNCATE t;",
    )
    .await
    .unwrap();
    let upto = pglog::bound(&mut conn).await.unwrap();
    let read = ChangeRead {
        slot: &names,
        from: start,
        upto,
        snapshot: None,
    };
    let got = all(&mut conn, &read).await.unwrap();
    let ops: Vec<Op> = got.iter().map(|c| c.op).collect();
    assert_eq!(
        ops,
        [
            Op::Insert,
            Op::Update,
            Op::Update,
            Op::Delete,
            Op::Insert,
            Op::Truncate
        ],
        "only the published table's changes"
    );
    assert!(matches!(&got[0].new.as_ref().unwrap()[2], Datum::Binary(b) if b.len() == 64_000));
    assert_eq!(got[1].new.as_ref().unwrap()[2], Datum::Unchanged);
    assert_eq!(got[2].new.as_ref().unwrap()[2], Datum::Null);
    let delete = got[3].old.as_ref().unwrap();
    assert_eq!(int(&delete[0]), Some(1));
    assert_eq!(
        delete[1],
        Datum::Null,
        "a default identity carries the key only"
    );
    assert_eq!(got[3].relation.name, "t");
    assert!(got[3].relation.columns[0].key && !got[3].relation.columns[1].key);
    assert!(got.windows(2).all(|w| w[0].commit_lsn <= w[1].commit_lsn));
    assert!(got[0].commit_time > 0);

    // REPLICA IDENTITY FULL: the delete carries the whole old row.
    let full = LogSlot::for_sync("t1", &common::unique("full"), "pg", "t");
    pglog::ensure_publication(&mut conn, &full, "public", "f")
        .await
        .unwrap();
    let start = pglog::ensure_slot(&mut conn, &full)
        .await
        .unwrap()
        .confirmed;
    conn.execute("DELETE FROM f WHERE id = 1").await.unwrap();
    let upto = pglog::bound(&mut conn).await.unwrap();
    let read = ChangeRead {
        slot: &full,
        from: start,
        upto,
        snapshot: None,
    };
    let got = all(&mut conn, &read).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].old.as_ref().unwrap()[1],
        Datum::Binary(b"other table".to_vec())
    );
    drop(conn);
    db.drop().await;
}

/// A dropped slot fails the read with the slot's own error (reset starts over); a slot
/// and publication that exist are kept by `ensure_*` (a retried first job), and
/// `drop_log` removes both.
#[tokio::test]
async fn a_dropped_slot_has_its_own_error_and_drop_log_removes_both() {
    let db = LogDb::create("CREATE TABLE t (id bigint PRIMARY KEY, version bigint);").await;
    let mut conn = db.conn().await;
    let names = LogSlot::for_sync("t1", &common::unique("dropped"), "pg", "t");
    pglog::ensure_publication(&mut conn, &names, "public", "t")
        .await
        .unwrap();
    let start = pglog::ensure_slot(&mut conn, &names)
        .await
        .unwrap()
        .confirmed;
    pglog::ensure_publication(&mut conn, &names, "public", "t")
        .await
        .unwrap();
    assert_eq!(
        pglog::ensure_slot(&mut conn, &names)
            .await
            .unwrap()
            .confirmed,
        start
    );
    let state = pglog::slot_state(&mut conn, &names).await.unwrap().unwrap();
    assert!(!state.lost);

    pglog::drop_log(&mut conn, &names).await.unwrap();
    assert_eq!(pglog::slot_state(&mut conn, &names).await.unwrap(), None);
    let publications: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_publication WHERE pubname = $1")
            .bind(&names.publication)
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(publications, 0);
    let upto = pglog::bound(&mut conn).await.unwrap();
    let read = ChangeRead {
        slot: &names,
        from: start,
        upto,
        snapshot: None,
    };
    let err = all(&mut conn, &read).await.unwrap_err();
    assert_eq!(err.to_string(), pglog::slot_lost().to_string());
    let err = pglog::advance(&mut conn, &names, upto).await.unwrap_err();
    assert_eq!(err.to_string(), pglog::slot_lost().to_string());
    pglog::drop_log(&mut conn, &names).await.unwrap();
    drop(conn);
    db.drop().await;
}

/// A user without `REPLICATION` (or `rds_replication`) is told apart before any slot is
/// made.
#[tokio::test]
async fn a_user_without_replication_is_known_before_a_slot_is_made() {
    let db = LogDb::create("CREATE TABLE t (id bigint PRIMARY KEY);").await;
    let user = common::unique("plain");
    let mut conn = db.conn().await;
    conn.execute(
        format!("CREATE ROLE {user} LOGIN; CREATE ROLE {user}_r REPLICATION LOGIN").as_str(),
    )
    .await
    .unwrap();
    for (who, may) in [(user.clone(), false), (format!("{user}_r"), true)] {
        let mut c = PgConnection::connect(&format!(
            "postgres://{who}@127.0.0.1:{}/{}",
            port(),
            db.name
        ))
        .await
        .unwrap();
        assert_eq!(pglog::may_replicate(&mut c).await.unwrap(), may, "{who}");
    }
    conn.execute(format!("DROP ROLE {user}; DROP ROLE {user}_r").as_str())
        .await
        .unwrap();
    drop(conn);
    db.drop().await;
}
