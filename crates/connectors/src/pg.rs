//! PostgreSQL: connect options, catalog discovery, streaming (COPY binary fast path and
//! bound-parameter query path, both decoded by [`crate::pgbin`]).

use futures_util::TryStreamExt;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgRow};
use sqlx::{ConnectOptions, Row, ValueRef};
use tokio::sync::mpsc;

use fetcher_engine::{ColumnType, ConnectionDescriptor, Result, Row as ERow, Value};

use crate::Dialect;
use crate::catalog::{Catalog, ColumnInfo, Kind, TableInfo, decimal_type, table_key};
use crate::error::{decode_failed, discover_failed, query_failed};
use crate::filter::Bind;
use crate::host::DialTarget;
use crate::partition::Part;
use crate::pgbin::{self, CopyBinaryParser, oid};
use crate::query::{BATCH_ROWS, Msg, TablePlan, pg_decoders};
use crate::ssl;

pub fn options(
    d: &ConnectionDescriptor,
    target: &DialTarget,
    password: &str,
    session: Option<crate::connector::SessionLimits>,
) -> Result<PgConnectOptions> {
    let ca = ssl::root_cert(d);
    let mode = ssl::pg_mode(d, ca.is_some())?;
    let mut o = PgConnectOptions::new_without_pgpass()
        .host(&target.address)
        .port(d.port)
        .username(&d.username)
        .database(&d.database_name)
        .ssl_mode(mode)
        .application_name("fetcher")
        .statement_cache_capacity(32)
        .options([("TimeZone", "UTC".to_owned())])
        .disable_statement_logging();
    if let Some(limits) = session {
        // Startup options, so every session (a partitioned read's too) has them.
        o = o.options([
            (
                "statement_timeout",
                limits.statement.as_millis().to_string(),
            ),
            ("lock_timeout", limits.lock.as_millis().to_string()),
        ]);
    }
    if !password.is_empty() {
        o = o.password(password);
    }
    if let Some(ca) = ca {
        o = o.ssl_root_cert_from_pem(ca);
    }
    Ok(o)
}

pub async fn connect(o: &PgConnectOptions) -> std::result::Result<PgConnection, sqlx::Error> {
    crate::tls_provider();
    o.connect().await
}

// A domain is read as its base type, through any depth of domains over domains (#38):
// `dom` walks down to the first type that is no domain, keeping the outermost typmod set
// (`numeric(10,2)` of the domain that declared it).
const CATALOG_SQL: &str = "\
SELECT n.nspname::text, c.relname::text, a.attname::text, \
  a.atttypid::int8, t.typtype::text, COALESCE(dom.base, t.typbasetype)::int8, t.typcategory::text, \
  CASE WHEN t.typtype = 'd' THEN format_type(dom.base, dom.typmod) \
       ELSE format_type(a.atttypid, a.atttypmod) END, \
  COALESCE((SELECT k.n FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
            WHERE i.indrelid = c.oid AND i.indisprimary AND k.attnum = a.attnum), 0)::int8, \
  NOT a.attnotnull, c.reltuples::int8, c.relkind IN ('v', 'm') \
FROM pg_class c \
JOIN pg_namespace n ON n.oid = c.relnamespace \
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
JOIN pg_type t ON t.oid = a.atttypid \
LEFT JOIN LATERAL ( \
  WITH RECURSIVE d(base, typmod, depth) AS ( \
    SELECT t.typbasetype, t.typtypmod, 1 WHERE t.typtype = 'd' \
    UNION ALL \
    SELECT b.typbasetype, CASE WHEN d.typmod <> -1 THEN d.typmod ELSE b.typtypmod END, d.depth + 1 \
    FROM d JOIN pg_type b ON b.oid = d.base WHERE b.typtype = 'd' AND d.depth < 64) \
  SELECT d.base, d.typmod FROM d ORDER BY d.depth DESC LIMIT 1) dom ON true \
WHERE c.relkind IN ('r', 'p', 'v', 'm') AND c.relpersistence <> 't' \
  AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema' \
  AND has_table_privilege(c.oid, 'SELECT') \
ORDER BY n.nspname, c.relname, a.attnum";

fn kind_of(o: u32) -> Kind {
    match o {
        oid::INT2 | oid::INT4 | oid::INT8 | oid::OID => Kind::Int,
        oid::FLOAT4 | oid::FLOAT8 => Kind::Float,
        oid::NUMERIC => Kind::Decimal,
        oid::BOOL => Kind::Bool,
        oid::TEXT | oid::VARCHAR | oid::BPCHAR | oid::NAME | oid::CHAR => Kind::Text,
        oid::UUID => Kind::Uuid,
        oid::DATE => Kind::Date,
        oid::TIMESTAMP => Kind::Timestamp,
        oid::TIMESTAMPTZ => Kind::TimestampTz,
        oid::TIME => Kind::Time,
        oid::JSON | oid::JSONB => Kind::Json,
        oid::BYTEA => Kind::Bytes,
        _ => Kind::Other,
    }
}

/// The Parquet type of a PostgreSQL column (docs/parquet.md): by the effective type's
/// OID; arrays as JSON; text read as raw bytes (`SQL_ASCII`) as text; the rest as text.
fn column_type(effective: u32, kind: Kind, type_name: &str, array: bool, raw: bool) -> ColumnType {
    if raw {
        return if kind == Kind::Json {
            ColumnType::Json
        } else {
            ColumnType::Text
        };
    }
    if array {
        return ColumnType::Json;
    }
    match effective {
        oid::INT2 => ColumnType::Int16,
        oid::INT4 => ColumnType::Int32,
        oid::INT8 => ColumnType::Int64,
        oid::OID => ColumnType::UInt32,
        oid::FLOAT4 => ColumnType::Float32,
        oid::FLOAT8 => ColumnType::Float64,
        oid::NUMERIC => decimal_type(type_name).unwrap_or(ColumnType::Unknown),
        oid::BOOL => ColumnType::Bool,
        oid::UUID => ColumnType::Uuid,
        oid::DATE => ColumnType::Date,
        oid::TIMESTAMP => ColumnType::Timestamp,
        oid::TIMESTAMPTZ => ColumnType::TimestampTz,
        oid::TIME => ColumnType::Time,
        oid::JSON | oid::JSONB => ColumnType::Json,
        oid::BYTEA => ColumnType::Bytes,
        _ if kind == Kind::Text => ColumnType::Text,
        _ => ColumnType::Unknown,
    }
}

/// Every table of every non-system schema the user may `SELECT` from (regular and
/// partitioned tables, partitions included, views and materialised views; temporary
/// tables excluded).
pub async fn discover(conn: &mut PgConnection) -> Result<Catalog> {
    // A `SQL_ASCII` database stores bytes it never checked: its text is read as bytes.
    let encoding: String = sqlx::query_scalar("SHOW server_encoding")
        .fetch_one(&mut *conn)
        .await
        .map_err(discover_failed)?;
    let sql_ascii = encoding.eq_ignore_ascii_case("SQL_ASCII");
    let rows = sqlx::query(CATALOG_SQL)
        .fetch_all(&mut *conn)
        .await
        .map_err(discover_failed)?;
    let mut catalog = Catalog::default();
    let mut current: Option<(TableInfo, Vec<(i64, String)>)> = None;
    let flush = |cur: Option<(TableInfo, Vec<(i64, String)>)>, catalog: &mut Catalog| {
        if let Some((mut t, mut pk)) = cur {
            pk.sort();
            t.primary_key = pk.into_iter().map(|(_, n)| n).collect();
            catalog.insert(Dialect::Postgres, t);
        }
    };
    for r in rows {
        let get = |i| r.try_get::<String, _>(i).map_err(discover_failed);
        let (schema, table, column) = (get(0)?, get(1)?, get(2)?);
        let typid = r.try_get::<i64, _>(3).map_err(discover_failed)? as u32;
        let typtype = get(4)?;
        let base = r.try_get::<i64, _>(5).map_err(discover_failed)? as u32;
        let category = get(6)?;
        let type_name = get(7)?;
        let pk_pos = r.try_get::<i64, _>(8).map_err(discover_failed)?;
        let nullable = r.try_get::<bool, _>(9).map_err(discover_failed)?;
        // `-1` until the table is first analysed (PostgreSQL 14+), `0` before that too.
        let estimate = r.try_get::<i64, _>(10).map_err(discover_failed)?;
        let view = r.try_get::<bool, _>(11).map_err(discover_failed)?;
        let effective = if typtype == "d" { base } else { typid };
        let supported = pgbin::pg_supported(effective)
            || (category == "A" && pgbin::array_element(effective).is_some());
        let kind = if supported {
            kind_of(effective)
        } else if typtype == "e" || type_name == "citext" {
            Kind::Text
        } else {
            Kind::Other
        };
        // Everything PostgreSQL renders as text, when the database cannot convert it.
        let raw_bytes = sql_ascii
            && !matches!(
                kind,
                Kind::Int
                    | Kind::Float
                    | Kind::Decimal
                    | Kind::Bool
                    | Kind::Uuid
                    | Kind::Date
                    | Kind::Timestamp
                    | Kind::TimestampTz
                    | Kind::Time
                    | Kind::Bytes
            );
        // An array of a type without a binary decoder: read as `text[]` of its elements'
        // own texts, so it is a JSON array like every other array.
        let text_array = !supported && category == "A" && !raw_bytes;
        let ctype = if supported {
            column_type(effective, kind, &type_name, category == "A", raw_bytes)
        } else if text_array {
            ColumnType::Json
        } else if kind == Kind::Text {
            ColumnType::Text
        } else {
            ColumnType::Unknown
        };
        let info = ColumnInfo {
            name: column.clone(),
            kind,
            type_name,
            pg_oid: effective,
            pg_text_cast: !supported,
            pg_text_array: text_array,
            pg_raw_bytes: raw_bytes,
            orderable: effective != oid::JSON && category != "A",
            nullable,
            ctype,
        };
        let same = matches!(&current, Some((t, _)) if t.schema == schema && t.name == table);
        if !same {
            flush(current.take(), &mut catalog);
            current = Some((
                TableInfo {
                    key: table_key(Dialect::Postgres, &schema, &table),
                    schema,
                    name: table,
                    columns: Vec::new(),
                    primary_key: Vec::new(),
                    ordered_indexes: Vec::new(),
                    // A view keeps no estimate (its reltuples is 0 or -1).
                    row_estimate: (estimate >= 0 && !view).then_some(estimate),
                    view,
                },
                Vec::new(),
            ));
        }
        let (t, pk) = current.as_mut().expect("set above");
        if pk_pos > 0 {
            pk.push((pk_pos, column));
        }
        t.columns.push(info);
    }
    flush(current, &mut catalog);
    Ok(catalog)
}

fn bind<'q>(
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    b: &Bind,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    match b {
        Bind::I64(v) => q.bind(*v),
        // PostgreSQL has no unsigned type: beyond i64 the value is compared as numeric text.
        Bind::U64(v) => q.bind(v.to_string()),
        Bind::F64(v) => q.bind(*v),
        Bind::Bool(v) => q.bind(*v),
        Bind::Text(v) => q.bind(v.clone()),
    }
}

fn decode_row(row: &PgRow, decoders: &[u32]) -> Result<Vec<Value>> {
    let mut vals = Vec::with_capacity(decoders.len());
    for (i, &d) in decoders.iter().enumerate() {
        let raw = row.try_get_raw(i).map_err(query_failed)?;
        if raw.is_null() {
            vals.push(Value::Null);
            continue;
        }
        let bytes = raw.as_bytes().map_err(|_| decode_failed())?;
        vals.push(pgbin::decode(d, bytes).map_err(|_| decode_failed())?);
    }
    Ok(vals)
}

/// Where a stream of rows goes, a batch at a time.
pub(crate) enum Out<'a> {
    /// The engine's cursor; `sent_any` says whether a batch of this table went already.
    Engine {
        tx: &'a mpsc::Sender<Msg>,
        plan: &'a TablePlan,
        sent_any: bool,
    },
    /// A partitioned read's merger (one chunk of a table).
    Chunk(&'a mpsc::Sender<Part>),
}

impl Out<'_> {
    /// `false`: the reader went away.
    async fn send(&mut self, rows: Vec<ERow>) -> bool {
        match self {
            Out::Engine { tx, plan, sent_any } => {
                *sent_any = true;
                let batch = plan.batch(rows);
                tx.send(Msg::Batch(batch)).await.is_ok()
            }
            Out::Chunk(tx) => tx.send(Part::Rows(rows)).await.is_ok(),
        }
    }
}

/// Streams `sql` (the plan's statement, or a key range of it) into `out` in batches of
/// [`BATCH_ROWS`]: through `COPY … (FORMAT binary)` when the plan allows it, else as a
/// bound-parameter query. `Ok(false)`: the reader went away.
pub(crate) async fn stream_query(
    conn: &mut PgConnection,
    plan: &TablePlan,
    sql: &str,
    out: &mut Out<'_>,
) -> Result<bool> {
    let decoders = pg_decoders(plan);
    let mut rows = Vec::with_capacity(BATCH_ROWS);
    if plan.copy {
        let sql = format!("COPY ({sql}) TO STDOUT (FORMAT binary)");
        let mut stream = conn.copy_out_raw(&sql).await.map_err(query_failed)?;
        let mut parser = CopyBinaryParser::new();
        while let Some(chunk) = stream.try_next().await.map_err(query_failed)? {
            parser
                .feed_and_drain(&chunk, &decoders, |vals| {
                    rows.push(plan.row(vals));
                })
                .map_err(|_| decode_failed())?;
            if rows.len() >= BATCH_ROWS {
                let full = std::mem::replace(&mut rows, Vec::with_capacity(BATCH_ROWS));
                if !out.send(full).await {
                    return Ok(false);
                }
            }
        }
        if !parser.finished {
            return Err(decode_failed());
        }
    } else {
        let mut q = sqlx::query(sql);
        for b in &plan.binds {
            q = bind(q, b);
        }
        let mut stream = q.fetch(&mut *conn);
        while let Some(row) = stream.try_next().await.map_err(query_failed)? {
            rows.push(plan.row(decode_row(&row, &decoders)?));
            if rows.len() >= BATCH_ROWS {
                let full = std::mem::replace(&mut rows, Vec::with_capacity(BATCH_ROWS));
                if !out.send(full).await {
                    return Ok(false);
                }
            }
        }
    }
    Ok(rows.is_empty() || out.send(rows).await)
}

/// One table in one stream; a table without rows is announced by an empty batch (so
/// typed formats can still write its columns).
pub(crate) async fn stream_table(
    conn: &mut PgConnection,
    plan: &TablePlan,
    tx: &mpsc::Sender<Msg>,
) -> Result<bool> {
    if plan.log.is_some() {
        return crate::pglog::stream_table(conn, plan, tx).await;
    }
    let mut out = Out::Engine {
        tx,
        plan,
        sent_any: false,
    };
    if !stream_query(conn, plan, &plan.sql(), &mut out).await? {
        return Ok(false);
    }
    Ok(match out {
        Out::Engine { sent_any: true, .. } => true,
        _ => announce_empty(tx, plan).await,
    })
}

/// The one batch of a table without rows.
pub(crate) async fn announce_empty(tx: &mpsc::Sender<Msg>, plan: &TablePlan) -> bool {
    let batch = plan.empty_batch();
    tx.send(Msg::Batch(batch)).await.is_ok()
}

/// The producer: streams every planned table in order, then closes the connection.
pub async fn produce(conn: PgConnection, plans: Vec<TablePlan>, tx: mpsc::Sender<Msg>) {
    fn boxed<'a>(
        conn: &'a mut PgConnection,
        plan: &'a TablePlan,
        tx: &'a mpsc::Sender<Msg>,
    ) -> fetcher_engine::BoxFuture<'a, Result<bool>> {
        Box::pin(stream_table(conn, plan, tx))
    }
    crate::stream::produce(conn, plans, tx, boxed).await
}

/// The key span of `table` (as requested; resolved like the server resolves a name): its
/// primary key's leading column when that is `smallint`, `integer` or `bigint`, with its
/// `min`, `max` and `reltuples`; `None` for any other table, an empty one, or a name the
/// server does not know (docs/datasources.md, "Fan-out key spans").
pub async fn key_span(
    conn: &mut PgConnection,
    table: &str,
) -> Result<Option<fetcher_engine::KeySpan>> {
    // The table as the catalog names it (docs/datasources.md, "Table names and
    // discovery"): `schema.name`, or `name` in `public`, exactly, case included; quoted,
    // so the server resolves no other spelling and no other schema.
    let (schema, name) = table.split_once('.').unwrap_or(("public", table));
    let q = |s: &str| crate::filter::quote_ident(Dialect::Postgres, s);
    let table = &format!("{}.{}", q(schema), q(name));
    let key: Option<(String, String)> = sqlx::query_as(
        "SELECT a.attname::text, to_regclass($1)::text FROM pg_index i \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
         WHERE i.indrelid = to_regclass($1) AND i.indisprimary AND a.atttypid IN (20, 21, 23)",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await
    .map_err(query_failed)?;
    let Some((column, relation)) = key else {
        return Ok(None);
    };
    // `relation` is the server's own quoted spelling of the table.
    let column = crate::filter::quote_ident(Dialect::Postgres, &column);
    let sql = format!(
        "SELECT min({column})::int8, max({column})::int8, \
         (SELECT reltuples::int8 FROM pg_class WHERE oid = to_regclass($1)) FROM {relation}"
    );
    let span: (Option<i64>, Option<i64>, Option<i64>) = sqlx::query_as(&sql)
        .bind(table)
        .fetch_one(&mut *conn)
        .await
        .map_err(query_failed)?;
    Ok(crate::query::key_span(span))
}
