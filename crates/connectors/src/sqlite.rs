//! SQLite (type `SQLITE`, the embedded demo source): the database file is
//! `descriptor.database_name`, opened read-only; host, port, user and password are
//! ignored. Values follow the storage class, refined by the declared type (`BOOLEAN` →
//! bool, `JSON` → nested value, `DECIMAL`/`NUMERIC` → exact string of what is stored,
//! `UUID` 16-byte blobs → canonical text).

use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use tokio::sync::mpsc;

use fetcher_engine::{ColumnType, Result, Value};

use crate::Dialect;
use crate::catalog::{Catalog, ColumnInfo, Kind, TableInfo};
use crate::error::{decode_failed, discover_failed, sqlite_read_failed};
use crate::filter::Bind;
use crate::query::{Msg, TablePlan};
use crate::values;

/// Options for the file the host policy resolved ([`crate::HostPolicy::sqlite_path`]).
pub fn options(path: &std::path::Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .create_if_missing(false)
        .disable_statement_logging()
}

pub async fn connect(
    o: &SqliteConnectOptions,
) -> std::result::Result<SqliteConnection, sqlx::Error> {
    o.connect().await
}

/// Declared type → kind, by SQLite's affinity rules refined with common type names.
pub fn kind_of(declared: &str) -> Kind {
    let t = declared.to_ascii_uppercase();
    let has = |s: &str| t.contains(s);
    if has("JSON") {
        Kind::Json
    } else if has("UUID") {
        Kind::Uuid
    } else if has("BOOL") {
        Kind::Bool
    } else if has("DATETIME") || has("TIMESTAMP") {
        Kind::Timestamp
    } else if has("DATE") {
        Kind::Date
    } else if has("TIME") {
        Kind::Time
    } else if has("INT") {
        Kind::Int
    } else if has("CHAR") || has("CLOB") || has("TEXT") {
        Kind::Text
    } else if has("BLOB") {
        Kind::Bytes
    } else if has("REAL") || has("FLOA") || has("DOUB") {
        Kind::Float
    } else if has("DEC") || has("NUMERIC") {
        Kind::Decimal
    } else {
        Kind::Other
    }
}

/// The Parquet type of a SQLite column (docs/parquet.md), by its declared type: only what
/// SQLite's storage classes hold exactly gets a typed column; dates and times (stored as
/// text, or as numbers) and decimals (the stored number's text) are text.
pub fn column_type(kind: Kind) -> ColumnType {
    match kind {
        Kind::Int | Kind::Bool => ColumnType::Int64,
        Kind::Float => ColumnType::Float64,
        Kind::Json => ColumnType::Json,
        Kind::Bytes => ColumnType::Bytes,
        Kind::Text | Kind::Uuid => ColumnType::Text,
        _ => ColumnType::Unknown,
    }
}

pub async fn discover(conn: &mut SqliteConnection) -> Result<Catalog> {
    let tables: Vec<(String, bool)> = sqlx::query_as(
        "SELECT name, type = 'view' FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(discover_failed)?;
    let mut catalog = Catalog::default();
    for (t, view) in tables {
        let cols: Vec<(String, String, i64, i64)> = sqlx::query_as(
            "SELECT name, type, pk, \"notnull\" FROM pragma_table_info(?) ORDER BY cid",
        )
        .bind(&t)
        .fetch_all(&mut *conn)
        .await
        .map_err(discover_failed)?;
        let mut pk: Vec<(i64, String)> = cols
            .iter()
            .filter(|c| c.2 > 0)
            .map(|c| (c.2, c.0.clone()))
            .collect();
        pk.sort();
        catalog.insert(
            Dialect::Sqlite,
            TableInfo {
                schema: String::new(),
                key: t.clone(),
                name: t,
                columns: cols
                    .into_iter()
                    .map(|(name, ty, pk, notnull)| ColumnInfo {
                        // A key column of a rowid table is NOT NULL whatever it says.
                        nullable: notnull == 0 && pk == 0,
                        name,
                        kind: kind_of(&ty),
                        ctype: column_type(kind_of(&ty)),
                        type_name: ty,
                        pg_oid: 0,
                        pg_text_cast: false,
                        pg_raw_bytes: false,
                        pg_text_array: false,
                        orderable: true,
                    })
                    .collect(),
                primary_key: pk.into_iter().map(|(_, n)| n).collect(),
                ordered_indexes: Vec::new(),
                row_estimate: None,
                view,
            },
        );
    }
    Ok(catalog)
}

/// A stored value, by its storage class, refined by the column's declared type.
fn decode_value(cell: rusqlite::types::ValueRef<'_>, c: &ColumnInfo) -> Value {
    use rusqlite::types::ValueRef as Cell;
    match cell {
        Cell::Null => Value::Null,
        Cell::Integer(v) => match c.kind {
            // SQLite has no boolean: a BOOLEAN column holds integers (2, -1, … too), so
            // it stays the integer it holds, like MySQL's TINYINT(1) (docs/encodings.md).
            Kind::Decimal => Value::String(v.to_string()),
            _ => Value::Int(v),
        },
        Cell::Real(v) => match c.kind {
            Kind::Decimal if v.is_finite() => Value::String(v.to_string()),
            _ => values::float(v),
        },
        // Read as bytes: SQLite does not check that TEXT is UTF-8, and one value that is
        // not must not make the table unextractable (kept as bytes).
        Cell::Text(b) => match c.kind {
            Kind::Json => values::json_bytes(b),
            _ => values::text(b),
        },
        Cell::Blob(b) => match (c.kind, <[u8; 16]>::try_from(b)) {
            (Kind::Uuid, Ok(u)) => Value::String(values::uuid(&u)),
            // A BLOB is no JSON text: tagged, so it cannot read as a string document.
            (Kind::Json, _) => values::json_blob(b.to_vec()),
            _ => Value::Bytes(b.to_vec()),
        },
    }
}

fn bind_value(b: &Bind) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match b {
        Bind::I64(v) => V::Integer(*v),
        Bind::U64(v) => match i64::try_from(*v) {
            Ok(i) => V::Integer(i),
            Err(_) => V::Real(*v as f64),
        },
        Bind::F64(v) => V::Real(*v),
        Bind::Bool(v) => V::Integer(i64::from(*v)),
        Bind::Text(v) => V::Text(v.clone()),
    }
}

/// Rows read ahead per hand-over from the reading thread.
const CHUNK_ROWS: usize = 1024;

/// Reads `plan`'s statement on the calling (blocking) thread, sending its decoded rows in
/// chunks; stops when the receiver is gone.
fn read_table(
    path: &std::path::Path,
    plan: &TablePlan,
    tx: &mpsc::Sender<Result<Vec<Vec<Value>>>>,
) {
    let run = || -> Result<()> {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            | rusqlite::OpenFlags::SQLITE_OPEN_URI;
        let conn =
            rusqlite::Connection::open_with_flags(path, flags).map_err(sqlite_read_failed)?;
        let mut stmt = conn.prepare(&plan.sql()).map_err(sqlite_read_failed)?;
        let params: Vec<rusqlite::types::Value> = plan.binds.iter().map(bind_value).collect();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params))
            .map_err(sqlite_read_failed)?;
        let mut chunk = Vec::with_capacity(CHUNK_ROWS);
        while let Some(row) = rows.next().map_err(sqlite_read_failed)? {
            let mut values = Vec::with_capacity(plan.selected.len());
            for (i, c) in plan.selected.iter().enumerate() {
                let cell = row.get_ref(i).map_err(|_| decode_failed())?;
                values.push(decode_value(cell, c));
            }
            chunk.push(values);
            if chunk.len() >= CHUNK_ROWS
                && tx
                    .blocking_send(Ok(std::mem::replace(
                        &mut chunk,
                        Vec::with_capacity(CHUNK_ROWS),
                    )))
                    .is_err()
            {
                return Ok(());
            }
        }
        if !chunk.is_empty() {
            let _ = tx.blocking_send(Ok(chunk));
        }
        Ok(())
    };
    if let Err(e) = run() {
        let _ = tx.blocking_send(Err(e));
    }
}

/// The producer: each table's statement read on a blocking thread of its own (the file
/// opened read-only again there), its rows decoded and batched.
pub async fn produce(path: std::path::PathBuf, plans: Vec<TablePlan>, tx: mpsc::Sender<Msg>) {
    use futures_util::StreamExt;
    for plan in &plans {
        let (rows_tx, rows_rx) = mpsc::channel(2);
        let (path, table) = (path.clone(), plan.clone());
        let reader = tokio::task::spawn_blocking(move || read_table(&path, &table, &rows_tx));
        let chunks = futures_util::stream::unfold(rows_rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk, rx))
        });
        let rows = chunks.flat_map(|chunk| {
            let rows: Vec<Result<Vec<Value>>> = match chunk {
                Ok(rows) => rows.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures_util::stream::iter(rows)
        });
        let sent = crate::stream::send_batches(plan, rows, &tx).await;
        // The reader ends once its receiver is dropped (a cursor gone) or it is done.
        let _ = reader.await;
        match sent {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let _ = tx.send(Msg::Failed(e)).await;
                return;
            }
        }
    }
    let _ = tx.send(Msg::End).await;
}
