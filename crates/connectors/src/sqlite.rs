//! SQLite (type `SQLITE`, the embedded demo source): the database file is
//! `descriptor.database_name`, opened read-only; host, port, user and password are
//! ignored. Values follow the storage class, refined by the declared type (`BOOLEAN` →
//! bool, `JSON` → nested value, `DECIMAL`/`NUMERIC` → exact string of what is stored,
//! `UUID` 16-byte blobs → canonical text).

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteRow};
use sqlx::{ConnectOptions, Row, TypeInfo, ValueRef};
use tokio::sync::mpsc;

use fetcher_engine::{ColumnType, Result, Value};

use crate::Dialect;
use crate::catalog::{Catalog, ColumnInfo, Kind, TableInfo};
use crate::error::{decode_failed, discover_failed, query_failed};
use crate::filter::Bind;
use crate::query::{Msg, TablePlan};
use crate::stream::stream_statement;
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

fn bind<'q>(
    q: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    b: &Bind,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    match b {
        Bind::I64(v) => q.bind(*v),
        Bind::U64(v) => match i64::try_from(*v) {
            Ok(i) => q.bind(i),
            Err(_) => q.bind(*v as f64),
        },
        Bind::F64(v) => q.bind(*v),
        Bind::Bool(v) => q.bind(*v),
        Bind::Text(v) => q.bind(v.clone()),
    }
}

fn decode_value(row: &SqliteRow, i: usize, c: &ColumnInfo) -> Result<Value> {
    let raw = row.try_get_raw(i).map_err(query_failed)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let class = raw.type_info().name().to_owned();
    let bad = |_| decode_failed();
    Ok(match class.as_str() {
        "INTEGER" => {
            let v = row.try_get_unchecked::<i64, _>(i).map_err(bad)?;
            match c.kind {
                // SQLite has no boolean: a BOOLEAN column holds integers (2, -1, …
                // too), so it stays the integer it holds, like MySQL's TINYINT(1)
                // (docs/encodings.md).
                Kind::Decimal => Value::String(v.to_string()),
                _ => Value::Int(v),
            }
        }
        "REAL" => {
            let v = row.try_get_unchecked::<f64, _>(i).map_err(bad)?;
            match c.kind {
                Kind::Decimal if v.is_finite() => Value::String(v.to_string()),
                _ => values::float(v),
            }
        }
        "TEXT" => {
            // Read as bytes: SQLite does not check that TEXT is UTF-8, and one value
            // that is not must not make the table unextractable (kept as bytes).
            let b = row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?;
            match c.kind {
                Kind::Json => values::json_bytes(b),
                _ => values::text(b),
            }
        }
        _ => {
            let b = row.try_get_unchecked::<Vec<u8>, _>(i).map_err(bad)?;
            match (c.kind, <[u8; 16]>::try_from(b.as_slice())) {
                (Kind::Uuid, Ok(u)) => Value::String(values::uuid(&u)),
                // A BLOB is no JSON text: tagged, so it cannot read as a string document.
                (Kind::Json, _) => values::json_blob(b),
                _ => Value::Bytes(b),
            }
        }
    })
}

/// The producer: each table's statement, its rows decoded and batched.
pub async fn produce(conn: SqliteConnection, plans: Vec<TablePlan>, tx: mpsc::Sender<Msg>) {
    crate::stream::produce(conn, plans, tx, |c, plan, tx| {
        stream_statement::<sqlx::Sqlite>(c, plan, tx, bind, decode_value)
    })
    .await
}
