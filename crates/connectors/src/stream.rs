//! What every dialect's producer shares: tables streamed in plan order over one
//! connection ([`produce`]), and rows cut into the engine's batches ([`send_batches`]).
//! A dialect brings only how it runs a table's statement and decodes a row.

use fetcher_engine::{BoxFuture, Result, Row, Value};
use futures_util::{Stream, StreamExt};
use sqlx::Connection;
use tokio::sync::mpsc;

use crate::catalog::ColumnInfo;
use crate::query::{BATCH_ROWS, Msg, TablePlan};

/// How a dialect streams one planned table into `tx`: `Ok(false)` when the cursor went
/// away (nothing more to send).
pub type StreamTable<C> =
    for<'a> fn(&'a mut C, &'a TablePlan, &'a mpsc::Sender<Msg>) -> BoxFuture<'a, Result<bool>>;

/// The producer: streams every planned table in order with `stream_table`, then closes
/// the connection and ends the stream. A table's error ends it with that error; a cursor
/// dropped meanwhile stops it quietly.
pub async fn produce<C: Connection>(
    mut conn: C,
    plans: Vec<TablePlan>,
    tx: mpsc::Sender<Msg>,
    stream_table: StreamTable<C>,
) {
    for plan in &plans {
        match stream_table(&mut conn, plan, &tx).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let _ = tx.send(Msg::Failed(e)).await;
                return;
            }
        }
    }
    let _ = conn.close().await;
    let _ = tx.send(Msg::End).await;
}

/// Sends a table's decoded rows as batches of [`BATCH_ROWS`]; a table without rows is
/// announced by one empty batch (so typed formats can still write its columns).
/// `Ok(false)` when the cursor went away.
pub async fn send_batches<S>(plan: &TablePlan, rows: S, tx: &mpsc::Sender<Msg>) -> Result<bool>
where
    S: Stream<Item = Result<Vec<Value>>>,
{
    let mut rows = std::pin::pin!(rows);
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    let mut sent_any = false;
    while let Some(values) = rows.next().await {
        batch.push(Row::new(plan.columns.clone(), values?));
        if batch.len() >= BATCH_ROWS {
            sent_any = true;
            let full = plan.batch(std::mem::replace(
                &mut batch,
                Vec::with_capacity(BATCH_ROWS),
            ));
            if tx.send(Msg::Batch(full)).await.is_err() {
                return Ok(false);
            }
        }
    }
    let last = if !batch.is_empty() {
        plan.batch(batch)
    } else if !sent_any {
        plan.empty_batch()
    } else {
        return Ok(true);
    };
    Ok(tx.send(Msg::Batch(last)).await.is_ok())
}

/// A row's selected columns decoded by the dialect's `decode` (row, column index, column).
pub fn decoded<R>(
    plan: &TablePlan,
    row: &R,
    decode: fn(&R, usize, &ColumnInfo) -> Result<Value>,
) -> Result<Vec<Value>> {
    plan.selected
        .iter()
        .enumerate()
        .map(|(i, c)| decode(row, i, c))
        .collect()
}

/// How a dialect binds one filter value to its statement.
pub type BindValue<DB> =
    for<'q> fn(
        sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
        &crate::filter::Bind,
    ) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>;

/// One table over a plain `sqlx` statement (MySQL/MariaDB, SQLite): the plan's statement
/// with its values bound by `bind`, each row decoded by `decode`, batched into `tx`.
pub fn stream_statement<'a, DB>(
    conn: &'a mut DB::Connection,
    plan: &'a TablePlan,
    tx: &'a mpsc::Sender<Msg>,
    bind: BindValue<DB>,
    decode: fn(&DB::Row, usize, &ColumnInfo) -> Result<Value>,
) -> BoxFuture<'a, Result<bool>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB> + Send,
{
    Box::pin(async move {
        let sql = plan.sql();
        let mut q = sqlx::query::<DB>(&sql);
        for b in &plan.binds {
            q = bind(q, b);
        }
        let rows = q
            .fetch(&mut *conn)
            .map(|row| decoded(plan, &row.map_err(crate::error::query_failed)?, decode));
        send_batches(plan, rows, tx).await
    })
}
