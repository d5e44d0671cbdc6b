//! MySQL / MariaDB: connect options, catalog discovery of the connection's database,
//! streaming with sqlx, values decoded by the catalog type.

use std::collections::BTreeMap;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlRow};
use sqlx::{ConnectOptions, Row, ValueRef};
use tokio::sync::mpsc;

use fetcher_engine::{ColumnType, ConnectionDescriptor, Result, Value};

use crate::Dialect;
use crate::catalog::{Catalog, ColumnInfo, Kind, TableInfo, decimal_type};
use crate::error::{decode_failed, discover_failed, query_failed};
use crate::filter::Bind;
use crate::host::DialTarget;
use crate::query::{Msg, TablePlan};
use crate::stream::stream_statement;
use crate::{ssl, values};

pub fn options(
    d: &ConnectionDescriptor,
    target: &DialTarget,
    password: &str,
) -> Result<MySqlConnectOptions> {
    let mode = ssl::mysql_mode(d)?;
    let mut o = MySqlConnectOptions::new()
        .host(&target.address)
        .port(d.port)
        .username(&d.username)
        .database(&d.database_name)
        .ssl_mode(mode)
        .charset("utf8mb4")
        .timezone(Some("+00:00".to_owned()))
        .statement_cache_capacity(32)
        .disable_statement_logging();
    if !password.is_empty() {
        o = o.password(password);
    }
    if let Some(ca) = ssl::root_cert(d) {
        o = o.ssl_ca_from_pem(ca);
    }
    Ok(o)
}

pub async fn connect(o: &MySqlConnectOptions) -> std::result::Result<MySqlConnection, sqlx::Error> {
    crate::tls_provider();
    o.connect().await
}

/// Sets `limits` on a new session: MariaDB's `max_statement_time` (seconds), else MySQL's
/// `max_execution_time` (milliseconds, `SELECT`s only), and `lock_wait_timeout` (metadata
/// locks, which a read waits for behind `LOCK TABLES` or DDL). A server that takes
/// neither form keeps its own settings: the extraction timeout still bounds the run.
pub async fn limit_session(
    c: &mut MySqlConnection,
    limits: Option<crate::connector::SessionLimits>,
) {
    use sqlx::Executor as _;
    let Some(l) = limits else { return };
    let lock = l.lock.as_secs().max(1);
    let mariadb = format!(
        "SET SESSION max_statement_time = {:.3}, lock_wait_timeout = {lock}",
        l.statement.as_secs_f64()
    );
    if c.execute(mariadb.as_str()).await.is_ok() {
        return;
    }
    let mysql = format!(
        "SET SESSION max_execution_time = {}, lock_wait_timeout = {lock}",
        l.statement.as_millis()
    );
    let _ = c.execute(mysql.as_str()).await;
}

/// The Parquet type of a MySQL/MariaDB column (docs/parquet.md): integers by width and
/// sign, `TIME` as text (it spans ±838 hours, beyond a time of day).
fn column_type(data_type: &str, column_type: &str, kind: Kind) -> ColumnType {
    let unsigned = column_type.contains("unsigned");
    let int = |signed, unsigned_type| if unsigned { unsigned_type } else { signed };
    match (data_type, kind) {
        ("tinyint", _) => int(ColumnType::Int8, ColumnType::UInt8),
        ("smallint", _) => int(ColumnType::Int16, ColumnType::UInt16),
        ("mediumint" | "int" | "integer", _) => int(ColumnType::Int32, ColumnType::UInt32),
        ("bigint", _) => int(ColumnType::Int64, ColumnType::UInt64),
        ("year", _) => ColumnType::Int16,
        ("bit", _) => ColumnType::UInt64,
        ("float", _) => ColumnType::Float32,
        ("double" | "real", _) => ColumnType::Float64,
        ("decimal" | "numeric", _) => decimal_type(column_type).unwrap_or(ColumnType::Unknown),
        ("date", _) => ColumnType::Date,
        ("datetime", _) => ColumnType::Timestamp,
        ("timestamp", _) => ColumnType::TimestampTz,
        ("uuid", _) => ColumnType::Uuid,
        (_, Kind::Json) => ColumnType::Json,
        (_, Kind::Text) => ColumnType::Text,
        (_, Kind::Bytes) => ColumnType::Bytes,
        _ => ColumnType::Unknown,
    }
}

fn kind_of(data_type: &str, column_type: &str) -> Kind {
    let unsigned = column_type.contains("unsigned");
    match data_type {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "year" => {
            if unsigned { Kind::UInt } else { Kind::Int }
        }
        "float" | "double" | "real" => Kind::Float,
        "decimal" | "numeric" => Kind::Decimal,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set"
        | "inet4" | "inet6" => Kind::Text,
        "uuid" => Kind::Uuid,
        "json" => Kind::Json,
        "date" => Kind::Date,
        "datetime" => Kind::Timestamp,
        "timestamp" => Kind::TimestampTz,
        "time" => Kind::Time,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => Kind::Bytes,
        _ => Kind::Other, // bit, geometry, …
    }
}

/// Base tables and views of `DATABASE()`; names always bare.
pub async fn discover(conn: &mut MySqlConnection) -> Result<Catalog> {
    let tables: Vec<(String, Option<i64>, i64)> = sqlx::query_as(
        "SELECT CAST(table_name AS CHAR), CAST(table_rows AS SIGNED), CAST(table_type = 'VIEW' AS SIGNED) \
         FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_type IN ('BASE TABLE', 'VIEW') ORDER BY table_name",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(discover_failed)?;
    let columns = sqlx::query(
        "SELECT CAST(table_name AS CHAR), CAST(column_name AS CHAR), \
                CAST(LOWER(data_type) AS CHAR), CAST(LOWER(column_type) AS CHAR), \
                CAST(is_nullable = 'YES' AS SIGNED) \
         FROM information_schema.columns WHERE table_schema = DATABASE() \
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(discover_failed)?;
    let keys = sqlx::query(
        "SELECT CAST(table_name AS CHAR), CAST(column_name AS CHAR) \
         FROM information_schema.key_column_usage \
         WHERE table_schema = DATABASE() AND constraint_name = 'PRIMARY' \
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(discover_failed)?;
    // MariaDB stores JSON as LONGTEXT with a `json_valid(col)` check named after the column.
    let json_checks: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS CHAR), CAST(constraint_name AS CHAR) \
         FROM information_schema.check_constraints \
         WHERE constraint_schema = DATABASE() AND LOWER(check_clause) LIKE 'json_valid(%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();

    // Every index column in order, to tell which index returns rows in a read's order
    // (a resumed or incremental read is told to use it: see `query::plan`).
    let index_columns = sqlx::query(
        "SELECT CAST(s.table_name AS CHAR), CAST(s.index_name AS CHAR), CAST(s.column_name AS CHAR), \
                CAST(s.sub_part IS NULL AND COALESCE(s.collation, 'A') = 'A' AND s.index_type = 'BTREE' AS SIGNED), \
                CAST(UPPER(COALESCE(t.engine, '')) = 'INNODB' AS SIGNED) \
         FROM information_schema.statistics s JOIN information_schema.tables t \
           ON t.table_schema = s.table_schema AND t.table_name = s.table_name \
         WHERE s.table_schema = DATABASE() \
         ORDER BY s.table_name, s.index_name, s.seq_in_index",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(discover_failed)?;

    let mut by_table: BTreeMap<String, TableInfo> = tables
        .into_iter()
        .map(|(t, rows, view)| {
            (
                t.clone(),
                TableInfo {
                    schema: String::new(),
                    key: t.clone(),
                    name: t,
                    columns: Vec::new(),
                    primary_key: Vec::new(),
                    ordered_indexes: Vec::new(),
                    row_estimate: rows,
                    view: view != 0,
                },
            )
        })
        .collect();
    for r in columns {
        let get = |i| r.try_get::<String, _>(i).map_err(discover_failed);
        let (table, column, data_type, column_type) = (get(0)?, get(1)?, get(2)?, get(3)?);
        let nullable = r.try_get::<i64, _>(4).map_err(discover_failed)? != 0;
        let Some(t) = by_table.get_mut(&table) else {
            continue;
        };
        let mut kind = kind_of(&data_type, &column_type);
        if kind == Kind::Text
            && json_checks
                .iter()
                .any(|(jt, jc)| *jt == table && *jc == column)
        {
            kind = Kind::Json;
        }
        t.columns.push(ColumnInfo {
            ctype: self::column_type(&data_type, &column_type, kind),
            name: column,
            kind,
            type_name: column_type,
            pg_oid: 0,
            pg_text_cast: false,
            pg_raw_bytes: false,
            pg_text_array: false,
            orderable: true,
            nullable,
        });
    }
    for r in keys {
        let table: String = r.try_get(0).map_err(discover_failed)?;
        let column: String = r.try_get(1).map_err(discover_failed)?;
        if let Some(t) = by_table.get_mut(&table) {
            t.primary_key.push(column);
        }
    }
    // (table, index) → its columns (name, whether it orders fully) and whether InnoDB.
    type IndexColumns = (Vec<(String, bool)>, bool);
    let mut indexes: BTreeMap<(String, String), IndexColumns> = BTreeMap::new();
    for r in index_columns {
        let get = |i| r.try_get::<String, _>(i).map_err(discover_failed);
        let (table, index, column) = (get(0)?, get(1)?, get(2)?);
        let ordered: bool = r.try_get::<i64, _>(3).map_err(discover_failed)? != 0;
        let innodb: bool = r.try_get::<i64, _>(4).map_err(discover_failed)? != 0;
        let entry = indexes
            .entry((table, index))
            .or_insert((Vec::new(), innodb));
        entry.0.push((column, ordered));
    }
    for ((table, index), (columns, innodb)) in indexes {
        if let Some(t) = by_table.get_mut(&table) {
            let ordered = ordered_columns(&columns, innodb, &t.primary_key, index == "PRIMARY");
            if !ordered.is_empty() {
                t.ordered_indexes.push(crate::catalog::OrderedIndex {
                    name: index,
                    columns: ordered,
                });
            }
        }
    }
    let mut catalog = Catalog::default();
    for t in by_table.into_values() {
        catalog.insert(Dialect::MySql, t);
    }
    Ok(catalog)
}

/// The column order an index returns rows in: its columns up to the first one that is
/// indexed by a prefix, descending, or not in a B-tree (`columns`: name and whether it
/// orders fully), then, for an InnoDB secondary index whose columns all order, the
/// primary key's columns it lacks (InnoDB ends every secondary entry with them).
fn ordered_columns(
    columns: &[(String, bool)],
    innodb: bool,
    primary_key: &[String],
    is_primary: bool,
) -> Vec<String> {
    let mut out: Vec<String> = columns
        .iter()
        .take_while(|(_, ordered)| *ordered)
        .map(|(c, _)| c.clone())
        .collect();
    if innodb && !is_primary && out.len() == columns.len() {
        for k in primary_key {
            if !out.contains(k) {
                out.push(k.clone());
            }
        }
    }
    out
}

fn bind<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    b: &Bind,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    match b {
        Bind::I64(v) => q.bind(*v),
        Bind::U64(v) => q.bind(*v),
        Bind::F64(v) => q.bind(*v),
        Bind::Bool(v) => q.bind(*v),
        Bind::Text(v) => q.bind(v.clone()),
    }
}

/// DATE / DATETIME / TIMESTAMP / TIME from either wire format (binary: a length byte and
/// packed fields; text: `YYYY-MM-DD[ HH:MM:SS[.ffffff]]`, `[-]HHH:MM:SS[.ffffff]`).
fn temporal(kind: Kind, b: &[u8]) -> Option<String> {
    let binary = b.first().is_some_and(|&c| c < 0x20);
    if kind == Kind::Time {
        if binary {
            let len = b[0] as usize;
            if len == 0 {
                return Some("00:00:00".into());
            }
            let p = b.get(1..=len)?;
            let neg = p[0] == 1;
            let days = u32::from_le_bytes(p.get(1..5)?.try_into().ok()?);
            let (h, m, s) = (p[5] as u32 + days * 24, p[6], p[7]);
            let us = if len >= 12 {
                u32::from_le_bytes(p.get(8..12)?.try_into().ok()?)
            } else {
                0
            };
            let mut out = format!("{}{h:02}:{m:02}:{s:02}", if neg { "-" } else { "" });
            values::push_fraction(&mut out, us);
            return Some(out);
        }
        let t = std::str::from_utf8(b).ok()?;
        let (neg, t) = match t.strip_prefix('-') {
            Some(r) => ("-", r),
            None => ("", t),
        };
        let (hms, frac) = t.split_once('.').unwrap_or((t, ""));
        let mut out = format!("{neg}{hms}");
        values::push_fraction(&mut out, micros_of(frac)?);
        return Some(out);
    }
    let (y, mo, d, h, mi, s, us) = if binary {
        let len = b[0] as usize;
        let p = b.get(1..=len)?;
        if len == 0 {
            (0, 0, 0, 0, 0, 0, 0)
        } else {
            let y = u16::from_le_bytes(p.get(0..2)?.try_into().ok()?) as u32;
            let (h, mi, s) = if len >= 7 {
                (p[4], p[5], p[6])
            } else {
                (0, 0, 0)
            };
            let us = if len >= 11 {
                u32::from_le_bytes(p.get(7..11)?.try_into().ok()?)
            } else {
                0
            };
            (y, p[2], p[3], h, mi, s, us)
        }
    } else {
        let t = std::str::from_utf8(b).ok()?;
        let n = |r: std::ops::Range<usize>| t.get(r).and_then(|x| x.parse::<u32>().ok());
        let frac = t.get(20..).unwrap_or("");
        let time = t.len() >= 19;
        (
            n(0..4)?,
            n(5..7)? as u8,
            n(8..10)? as u8,
            if time { n(11..13)? as u8 } else { 0 },
            if time { n(14..16)? as u8 } else { 0 },
            if time { n(17..19)? as u8 } else { 0 },
            micros_of(frac)?,
        )
    };
    if mo == 0 || d == 0 {
        // MySQL zero dates ('0000-00-00', '2024-00-15 10:20:30.5') have no calendar
        // meaning: kept as MySQL prints them, the time of a DATETIME included.
        let mut out = format!("{y:04}-{mo:02}-{d:02}");
        if kind != Kind::Date {
            out.push_str(&format!(" {h:02}:{mi:02}:{s:02}"));
            values::push_fraction(&mut out, us);
        }
        return Some(out);
    }
    let mut out = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    values::push_fraction(&mut out, us);
    out.push('Z');
    Some(out)
}

/// Microseconds of a fraction's digits (`"5"` → 500000); more than six digits are cut.
fn micros_of(frac: &str) -> Option<u32> {
    let digits: String = frac.chars().take(6).collect();
    if digits.is_empty() {
        return Some(0);
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u32>().ok()? * 10u32.pow(6 - digits.len() as u32))
}

fn decode_value(row: &MySqlRow, i: usize, c: &ColumnInfo) -> Result<Value> {
    let raw = row.try_get_raw(i).map_err(query_failed)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let bad = |_| decode_failed();
    Ok(match c.kind {
        Kind::Int => Value::Int(row.try_get_unchecked::<i64, _>(i).map_err(bad)?),
        Kind::UInt => Value::UInt(row.try_get_unchecked::<u64, _>(i).map_err(bad)?),
        Kind::Float if c.type_name.starts_with("float") => {
            values::float32(row.try_get_unchecked::<f32, _>(i).map_err(bad)?)
        }
        Kind::Float => values::float(row.try_get_unchecked::<f64, _>(i).map_err(bad)?),
        Kind::Decimal | Kind::Text | Kind::Uuid | Kind::Bool => {
            values::text(row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?)
        }
        Kind::Json => values::json_bytes(row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?),
        Kind::Date | Kind::Timestamp | Kind::TimestampTz | Kind::Time => {
            let b = row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?;
            Value::String(temporal(c.kind, b).ok_or_else(decode_failed)?)
        }
        Kind::Other if c.type_name.starts_with("bit") => {
            let b = row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?;
            Value::UInt(b.iter().fold(0u64, |acc, x| (acc << 8) | *x as u64))
        }
        Kind::Bytes | Kind::Other => {
            Value::Bytes(row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?.to_vec())
        }
    })
}

/// The producer: each table's statement, its rows decoded and batched.
pub async fn produce(conn: MySqlConnection, plans: Vec<TablePlan>, tx: mpsc::Sender<Msg>) {
    crate::stream::produce(conn, plans, tx, |c, plan, tx| {
        stream_statement::<sqlx::MySql>(c, plan, tx, bind, decode_value)
    })
    .await
}

/// The key span of `table` (`name`, or `schema.name`; the connection's database when no
/// schema is named): its primary key's leading column when that is a signed `TINYINT` …
/// `BIGINT`, with its `min`, `max` and `information_schema` row estimate; `None` for any
/// other table, an empty one, or one that does not exist (docs/datasources.md, "Fan-out
/// key spans").
pub async fn key_span(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<Option<fetcher_engine::KeySpan>> {
    let (schema, name) = match table.split_once('.') {
        Some((s, n)) => (Some(s), n),
        None => (None, table),
    };
    let found: Option<(String, String, Option<i64>)> = sqlx::query_as(
        "SELECT CAST(k.COLUMN_NAME AS CHAR), CAST(k.TABLE_SCHEMA AS CHAR), CAST(t.TABLE_ROWS AS SIGNED) \
         FROM information_schema.KEY_COLUMN_USAGE k \
         JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA \
           AND c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME \
         JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = k.TABLE_SCHEMA AND t.TABLE_NAME = k.TABLE_NAME \
         WHERE k.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND k.TABLE_NAME = ? \
           AND k.CONSTRAINT_NAME = 'PRIMARY' AND k.ORDINAL_POSITION = 1 \
           AND c.DATA_TYPE IN ('tinyint', 'smallint', 'mediumint', 'int', 'bigint') \
           AND c.COLUMN_TYPE NOT LIKE '%unsigned%'",
    )
    .bind(schema)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map_err(query_failed)?;
    let Some((column, schema, rows)) = found else {
        return Ok(None);
    };
    let q = |s: &str| crate::filter::quote_ident(Dialect::MySql, s);
    let sql = format!(
        "SELECT CAST(min({c}) AS SIGNED), CAST(max({c}) AS SIGNED) FROM {s}.{t}",
        c = q(&column),
        s = q(&schema),
        t = q(name)
    );
    let (min, max): (Option<i64>, Option<i64>) = sqlx::query_as(&sql)
        .fetch_one(&mut *conn)
        .await
        .map_err(query_failed)?;
    Ok(crate::query::key_span((min, max, rows)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_orders_by_its_full_ascending_columns_then_innodbs_primary_key() {
        let cols = |c: &[(&str, bool)]| -> Vec<(String, bool)> {
            c.iter().map(|(n, o)| (n.to_string(), *o)).collect()
        };
        let pk = ["id".to_string()];
        // A secondary index on InnoDB ends with the primary key.
        assert_eq!(
            ordered_columns(&cols(&[("ts", true)]), true, &pk, false),
            ["ts", "id"]
        );
        assert_eq!(
            ordered_columns(&cols(&[("ts", true), ("id", true)]), true, &pk, false),
            ["ts", "id"]
        );
        // Not on another engine, nor for the primary key itself.
        assert_eq!(
            ordered_columns(&cols(&[("ts", true)]), false, &pk, false),
            ["ts"]
        );
        assert_eq!(
            ordered_columns(&cols(&[("id", true)]), true, &pk, true),
            ["id"]
        );
        // A prefix or descending column ends the order, and the key is not appended.
        assert_eq!(
            ordered_columns(
                &cols(&[("a", true), ("t", false), ("b", true)]),
                true,
                &pk,
                false
            ),
            ["a"]
        );
        assert!(ordered_columns(&cols(&[("t", false)]), true, &pk, false).is_empty());
    }

    #[test]
    fn temporals_from_both_formats() {
        assert_eq!(
            temporal(Kind::Timestamp, b"2024-04-05 09:00:00.5").unwrap(),
            "2024-04-05T09:00:00.5Z"
        );
        assert_eq!(
            temporal(Kind::Date, b"2024-04-05").unwrap(),
            "2024-04-05T00:00:00Z"
        );
        assert_eq!(temporal(Kind::Date, b"0000-00-00").unwrap(), "0000-00-00");
        // Zero-in-date DATETIMEs keep their time (as MySQL prints them).
        assert_eq!(
            temporal(Kind::Timestamp, b"2024-00-15 10:20:30.5").unwrap(),
            "2024-00-15 10:20:30.5"
        );
        assert_eq!(
            temporal(Kind::Timestamp, b"0000-00-00 00:00:00").unwrap(),
            "0000-00-00 00:00:00"
        );
        let mut bin = vec![11u8];
        bin.extend(2024u16.to_le_bytes());
        bin.extend([4, 5, 9, 0, 1]);
        bin.extend(7u32.to_le_bytes());
        assert_eq!(
            temporal(Kind::Timestamp, &bin).unwrap(),
            "2024-04-05T09:00:01.000007Z"
        );
        assert_eq!(temporal(Kind::Time, b"-838:59:59").unwrap(), "-838:59:59");
        let mut t = vec![8u8, 1];
        t.extend(1u32.to_le_bytes());
        t.extend([2, 3, 4]);
        assert_eq!(temporal(Kind::Time, &t).unwrap(), "-26:03:04");
    }
}
