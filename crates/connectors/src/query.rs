//! Extraction planning inside a connector: requested tables/fields/filters → one ordered
//! `SELECT` per table, validated against the catalog before anything is streamed; and the
//! channel cursor the producers feed.

use std::sync::Arc;

use fetcher_engine::{Columns, PlanStep, Result, RowBatch};

use crate::Dialect;
use crate::catalog::{Catalog, ColumnInfo, TableInfo};
use crate::error::{msg, validation};
use crate::filter::{Bind, Where, build_where, quote_ident};
use crate::pgbin::oid;

/// Rows per batch handed to the engine.
pub const BATCH_ROWS: usize = 1024;

/// One table's query.
#[derive(Debug, Clone)]
pub struct TablePlan {
    /// The table name as requested (labels the batches).
    pub key: Arc<str>,
    pub columns: Arc<Columns>,
    pub selected: Vec<ColumnInfo>,
    pub binds: Vec<Bind>,
    /// PostgreSQL: unfiltered tables use `COPY (SELECT …) TO STDOUT (FORMAT binary)`.
    pub copy: bool,
    /// The statement in its parts, so a partitioned read can add a key range.
    pub(crate) select: SelectSql,
    /// PostgreSQL: the integer leading primary-key column a partitioned read splits the
    /// table on; `None` when the table has none (it is then read in one stream).
    pub split: Option<SplitKey>,
    /// Asked for positions: where the order key's columns are in `selected`, so each
    /// batch reports its last row's (docs/engine.md, "Continued runs"). `None` when not
    /// asked, or the table has no key a read can resume after.
    position: Option<Vec<usize>>,
    /// The columns the rows go out with, when `selected` ends with key columns read only
    /// for positions (dropped from every row).
    visible: Option<Arc<Columns>>,
    /// A table read from the log (docs/api.md, "Changes from the log"): what the read
    /// needs beyond the statement, which then reads the first job's snapshot.
    pub log: Option<crate::pglog::LogTable>,
    /// Values every row ends with, after `selected`'s (a log snapshot's change marker).
    pub suffix: Vec<fetcher_engine::Value>,
    /// The watermark every batch of the table carries (a log read's position).
    pub watermark: Option<fetcher_engine::Watermark>,
}

/// The column a partitioned read splits a table on, and the table, both quoted.
#[derive(Debug, Clone)]
pub struct SplitKey {
    pub column: String,
    pub table: String,
}

impl TablePlan {
    /// A batch of this table's `rows` (decoded in `selected` order): with its position
    /// when asked for, and without the columns read only for it.
    pub fn batch(&self, rows: Vec<fetcher_engine::Row>) -> RowBatch {
        let position = self.position.as_ref().and_then(|at| {
            let last = rows.last()?;
            Some(at.iter().map(|&i| last.values()[i].to_json()).collect())
        });
        let rows = match &self.visible {
            Some(v) => rows
                .into_iter()
                .map(|r| r.keep_leading(v.clone()))
                .collect(),
            None => rows,
        };
        let mut batch = RowBatch::new(self.key.clone(), rows);
        batch.position = position;
        batch.watermark = self.watermark.clone().map(Box::new);
        batch
    }

    /// The one batch of a table without rows: its columns, so typed formats can still
    /// write them.
    pub fn empty_batch(&self) -> RowBatch {
        let columns = self.visible.as_ref().unwrap_or(&self.columns).clone();
        let mut batch = RowBatch::empty(self.key.clone(), columns);
        batch.watermark = self.watermark.clone().map(Box::new);
        batch
    }

    /// The plan of a table read from the log (`pglog`): its statement reads the snapshot.
    pub(crate) fn for_log(
        key: Arc<str>,
        columns: Arc<Columns>,
        selected: Vec<ColumnInfo>,
        select: SelectSql,
        copy: bool,
    ) -> TablePlan {
        TablePlan {
            key,
            columns,
            selected,
            binds: Vec::new(),
            copy,
            select,
            split: None,
            position: None,
            visible: None,
            log: None,
            suffix: Vec::new(),
            watermark: None,
        }
    }

    /// A decoded row of this table: `values` in `selected` order, then the suffix.
    pub fn row(&self, mut values: Vec<fetcher_engine::Value>) -> fetcher_engine::Row {
        values.extend(self.suffix.iter().cloned());
        fetcher_engine::Row::new(self.columns.clone(), values)
    }

    /// The table's statement.
    pub fn sql(&self) -> String {
        self.select.render("")
    }

    /// The query restricted to the key range `start <= key < end` (an open end where
    /// `None`). The bounds are integers the connector computed itself, written as
    /// literals: `COPY` takes no parameters.
    pub fn sql_in_range(&self, start: Option<i64>, end: Option<i64>) -> String {
        let key = &self.split.as_ref().expect("a split key").column;
        let range: Vec<String> = [
            start.map(|s| format!("{key} >= {s}")),
            end.map(|e| format!("{key} < {e}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.select.render(&range.join(" AND "))
    }
}

/// `SELECT cols FROM table [WHERE filter] [ORDER BY order]`, in parts.
#[derive(Debug, Clone)]
pub(crate) struct SelectSql {
    head: String,
    filter: String,
    order: String,
}

impl SelectSql {
    /// The statement, with `extra` (when not empty) as a further condition.
    fn render(&self, extra: &str) -> String {
        let mut sql = self.head.clone();
        match (self.filter.as_str(), extra) {
            ("", "") => {}
            (only, "") | ("", only) => sql.push_str(&format!(" WHERE {only}")),
            (filter, extra) => sql.push_str(&format!(" WHERE ({filter}) AND ({extra})")),
        }
        if !self.order.is_empty() {
            sql.push_str(" ORDER BY ");
            sql.push_str(&self.order);
        }
        sql
    }
}

fn column_expr(dialect: Dialect, c: &ColumnInfo) -> String {
    let q = quote_ident(dialect, &c.name);
    if dialect == Dialect::Postgres && c.pg_raw_bytes && c.pg_oid == crate::pgbin::oid::BPCHAR {
        // `char(n)`'s cast to text drops its padding; its output function (`format`)
        // keeps it. `convert_to` to the database's own encoding is a copy of the stored
        // bytes (a send function would convert them to the client's UTF-8 and refuse a
        // high byte), and unlike a cast to bytea it reads no backslash escapes.
        format!(
            "CASE WHEN {q} IS NULL THEN NULL ELSE convert_to(format('%s', {q}), 'SQL_ASCII') END"
        )
    } else if dialect == Dialect::Postgres && c.pg_raw_bytes {
        format!("convert_to(CAST({q} AS text), 'SQL_ASCII')")
    } else if dialect == Dialect::Postgres && c.pg_text_array {
        // The array's own text parsed back as `text[]`: each element as its type's output
        // function prints it (an inet without its full-length mask), bounds kept.
        format!("CAST(CAST({q} AS text) AS text[])")
    } else if dialect == Dialect::Postgres && c.pg_text_cast {
        if c.type_name == "inet" {
            // PostgreSQL's own text of an inet (its output function) omits a full-length
            // mask (`10.0.0.1`, not `10.0.0.1/32`); CAST(… AS text) would add it.
            format!("CASE WHEN {q} IS NULL THEN NULL ELSE format('%s', {q}) END")
        } else {
            format!("CAST({q} AS text)")
        }
    } else if dialect == Dialect::MySql
        && matches!(
            c.kind,
            crate::catalog::Kind::Date
                | crate::catalog::Kind::Timestamp
                | crate::catalog::Kind::TimestampTz
                | crate::catalog::Kind::Time
        )
    {
        // As text: the driver reports a zero date ('0000-00-00') as NULL, and a zero
        // date is a value, not a missing one (docs/encodings.md).
        format!("CAST({q} AS CHAR)")
    } else {
        q
    }
}

fn order_expr(dialect: Dialect, c: &ColumnInfo) -> String {
    let q = quote_ident(dialect, &c.name);
    if dialect == Dialect::Postgres && (c.pg_text_cast || !c.orderable) {
        format!("CAST({q} AS text)")
    } else {
        q
    }
}

/// A column's printed form, compared byte-wise.
fn tie_break_expr(dialect: Dialect, c: &ColumnInfo) -> String {
    let q = quote_ident(dialect, &c.name);
    match dialect {
        Dialect::Postgres => format!("CAST({q} AS text) COLLATE \"C\""),
        Dialect::MySql => format!("CAST({q} AS BINARY)"),
        Dialect::Sqlite => format!("quote({q})"),
    }
}

/// `SELECT cols FROM table [WHERE …] ORDER BY pk | selected columns`.
pub fn select_sql(dialect: Dialect, t: &TableInfo, selected: &[ColumnInfo], w: &Where) -> String {
    select_parts(dialect, t, selected, w).render("")
}

/// The table's name as a `FROM` names it, quoted.
fn from_name(dialect: Dialect, t: &TableInfo) -> String {
    match dialect {
        Dialect::Postgres => format!(
            "{}.{}",
            quote_ident(dialect, &t.schema),
            quote_ident(dialect, &t.name)
        ),
        Dialect::MySql | Dialect::Sqlite => quote_ident(dialect, &t.name),
    }
}

pub(crate) fn select_parts(
    dialect: Dialect,
    t: &TableInfo,
    selected: &[ColumnInfo],
    w: &Where,
) -> SelectSql {
    let cols: Vec<String> = selected.iter().map(|c| column_expr(dialect, c)).collect();
    let from = from_name(dialect, t);
    let order: Vec<String> = if t.primary_key.is_empty() {
        // Without a key, the selected columns' natural order, then their printed forms
        // byte-wise: values that compare equal but print differently (numeric `1.0` and
        // `1.00`, `-0` and `0`, `1 day` and `24 hours`, `a` and `A` under a
        // case-insensitive collation) get one order, so the same data gives the same
        // bytes whatever its physical order (docs/encodings.md).
        let natural = selected.iter().map(|c| order_expr(dialect, c));
        let printed = selected.iter().map(|c| tie_break_expr(dialect, c));
        natural.chain(printed).collect()
    } else {
        t.primary_key
            .iter()
            .map(|k| quote_ident(dialect, k))
            .collect()
    };
    SelectSql {
        head: format!("SELECT {} FROM {from}", cols.join(", ")),
        filter: w.sql.clone(),
        order: order.join(", "),
    }
}

/// MySQL/MariaDB: ` FORCE INDEX FOR ORDER BY (idx)` when an index returns rows in the
/// read's order key (docs/datasources.md, "Which index a read needs"). Without it, a read
/// past a watermark or a resume point where most rows remain is planned as a full scan
/// and a sort of everything before the first row; with it, rows stream in index order
/// from the first. It hints the order only: a selective filter still uses its own index
/// (and sorts its few rows). PostgreSQL and SQLite choose such an index themselves.
fn order_hint(
    dialect: Dialect,
    t: &TableInfo,
    order_key: Option<&[&ColumnInfo]>,
) -> Option<String> {
    if dialect != Dialect::MySql {
        return None;
    }
    let names: Vec<&str> = order_key?.iter().map(|c| c.name.as_str()).collect();
    let index = t.index_for_order(&names)?;
    Some(format!(
        " FORCE INDEX FOR ORDER BY ({})",
        quote_ident(dialect, &index.name)
    ))
}

/// The primary key a read can resume after, in order: `None` when the table has none, or
/// a column of it cannot be bound and compared (`can_be_key`).
fn resume_key(t: &TableInfo) -> Option<Vec<&ColumnInfo>> {
    if t.primary_key.is_empty() {
        return None;
    }
    t.primary_key
        .iter()
        .map(|k| t.column(k).filter(|c| crate::incremental::can_be_key(c)))
        .collect()
}

/// A PostgreSQL table's split key: its leading primary-key column when that is a plain
/// `smallint`, `integer` or `bigint` (ranges of it are cheap to compute and compare).
fn split_key(dialect: Dialect, t: &TableInfo) -> Option<SplitKey> {
    if dialect != Dialect::Postgres {
        return None;
    }
    Some(SplitKey {
        column: range_key(dialect, t)?,
        table: from_name(dialect, t),
    })
}

/// The column a fanned-out job's ranges cut a table on (docs/datasources.md, "Fan-out"):
/// its leading primary-key column when that is a plain signed integer (PostgreSQL
/// `smallint`/`integer`/`bigint`, MySQL `TINYINT`…`BIGINT`), quoted. `None` otherwise.
fn range_key(dialect: Dialect, t: &TableInfo) -> Option<String> {
    let first = t.primary_key.first()?;
    let c = t.column(first)?;
    let integer = match dialect {
        Dialect::Postgres => {
            matches!(c.pg_oid, oid::INT2 | oid::INT4 | oid::INT8)
                && !c.pg_text_cast
                && !c.pg_raw_bytes
        }
        Dialect::MySql => c.kind == crate::catalog::Kind::Int,
        Dialect::Sqlite => false,
    };
    integer.then(|| quote_ident(dialect, &c.name))
}

/// A key span from what the database answered: `(min, max, estimate)`; `None` for an
/// empty table, and for one the catalog has no estimate of (never analysed: `-1`, `0`):
/// guessing from the key's width could cut two rows with keys far apart into ranges of
/// nothing (like partitioned reads, docs/datasources.md).
pub fn key_span(
    (min, max, rows): (Option<i64>, Option<i64>, Option<i64>),
) -> Option<fetcher_engine::KeySpan> {
    Some(fetcher_engine::KeySpan {
        min: min?.into(),
        max: max?.into(),
        rows: rows.filter(|r| *r > 0)?,
    })
}

/// Validates the plan step against the catalog and plans every table, in ascending table
/// order. An empty field list selects all columns (catalog order).
pub fn plan(
    dialect: Dialect,
    catalog: &Catalog,
    step: &PlanStep,
    copy_fast_path: bool,
) -> Result<Vec<TablePlan>> {
    let filters = Some(&step.filters).filter(|f| !f.is_empty());
    if let Some(f) = filters
        && f.keys().any(|t| !step.tables.contains(t))
    {
        return Err(validation(msg::FILTER_TABLE));
    }
    let mut tables: Vec<&String> = step.tables.iter().collect();
    tables.sort();
    tables.dedup();
    let mut plans = Vec::with_capacity(tables.len());
    for requested in tables {
        let fields = step.fields_of(requested);
        let table = catalog
            .lookup(dialect, requested)
            .ok_or_else(|| validation(msg::TABLE_NOT_FOUND))?;
        let selected: Vec<ColumnInfo> = if fields.is_empty() {
            table.columns.clone()
        } else {
            fields
                .iter()
                .map(|f| {
                    table
                        .column(f)
                        .cloned()
                        .ok_or_else(|| validation(msg::FIELD_NOT_FOUND))
                })
                .collect::<Result<_>>()?
        };
        let mut w = build_where(dialect, table, filters.and_then(|f| f.get(requested)))?;
        let incremental = step.incremental.get(requested);
        if let Some(read) = incremental.filter(|r| r.spec.is_log()) {
            plans.push(crate::pglog::plan_table(
                dialect,
                table,
                requested,
                selected,
                read,
                step,
                copy_fast_path,
            )?);
            continue;
        }
        let mut selected = selected;
        let mut order = None;
        let resume = step.resume_after.get(requested);
        // A resumed incremental read continues after the last row read: the watermark is
        // that row's (cursor, key), and a lookback does not apply again.
        let resumed_read;
        let incremental = match (incremental, resume) {
            (Some(read), Some(after)) => {
                let mut read = read.clone();
                read.spec.lookback = None;
                read.after = Some(fetcher_engine::Watermark {
                    cursor: read.spec.cursor.clone(),
                    key: read.spec.key.clone(),
                    values: after.clone(),
                    log: None,
                });
                resumed_read = read;
                Some(&resumed_read)
            }
            (read, _) => read,
        };
        if let Some(read) = incremental {
            // Read past the watermark in (cursor, key) order; the cursor and key are always
            // selected (the next watermark is made of them).
            let cols = crate::incremental::columns(table, read)?;
            for c in &cols {
                if !selected.iter().any(|s| s.name == c.name) {
                    selected.push((*c).clone());
                }
            }
            let cond = crate::incremental::condition(dialect, table, read, &mut w.binds)?;
            w.sql = if w.sql.is_empty() {
                cond
            } else {
                format!("{} AND ({cond})", w.sql)
            };
            order = Some(crate::incremental::order(dialect, &cols));
        }
        // The order key a position is made of: an incremental read's (cursor, key), else
        // the primary key when every column of it can be compared to a bound value.
        let order_key: Option<Vec<&ColumnInfo>> = match incremental {
            Some(read) => Some(crate::incremental::columns(table, read)?),
            None => resume_key(table),
        };
        let hint = order_hint(dialect, table, order_key.as_deref());
        if let Some(range) = step.key_ranges.get(requested) {
            // One range of a fanned-out job: bounds are integers the host cut from the
            // key's span, written as literals (`COPY` takes no parameters).
            let key = range_key(dialect, table)
                .ok_or_else(|| validation("a key range needs an integer leading primary key"))?;
            let int = |b: &Option<fetcher_engine::KeyValue>| match b {
                None => Ok(None),
                Some(v) => v
                    .as_int()
                    .map(Some)
                    .ok_or_else(|| validation("a key range of this datasource has integer bounds")),
            };
            let cond: Vec<String> = [
                int(&range.lo)?.map(|lo| format!("{key} >= {lo}")),
                int(&range.hi)?.map(|hi| format!("{key} < {hi}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            if !cond.is_empty() {
                let cond = cond.join(" AND ");
                w.sql = if w.sql.is_empty() {
                    cond
                } else {
                    format!("({}) AND ({cond})", w.sql)
                };
            }
        }
        if let Some(after) = resume.filter(|_| incremental.is_none()) {
            let key = order_key.as_ref().ok_or_else(|| {
                validation("a read cannot resume in a table without a primary key")
            })?;
            let cond = crate::incremental::after_condition(dialect, key, after, &mut w.binds)?;
            w.sql = if w.sql.is_empty() {
                cond
            } else {
                format!("{} AND ({cond})", w.sql)
            };
        }
        let visible_count = selected.len();
        let position = order_key.filter(|_| step.positions).map(|key| {
            key.iter()
                .map(|k| match selected.iter().position(|c| c.name == k.name) {
                    Some(i) => i,
                    None => {
                        // Read for the position only; dropped from every row.
                        selected.push((*k).clone());
                        selected.len() - 1
                    }
                })
                .collect()
        });
        let typed =
            |cols: &[ColumnInfo]| Columns::typed(cols.iter().map(|c| (c.name.clone(), c.ctype)));
        let visible = (selected.len() > visible_count).then(|| typed(&selected[..visible_count]));
        let mut select = select_parts(dialect, table, &selected, &w);
        if let Some(order) = order {
            select.order = order;
        }
        if let Some(hint) = hint {
            select.head.push_str(&hint);
        }
        plans.push(TablePlan {
            select,
            // A partitioned read merges in key order, not an incremental read's; a resumed
            // table is read in one stream from its point.
            split: split_key(dialect, table).filter(|_| incremental.is_none() && resume.is_none()),
            key: Arc::from(requested.as_str()),
            columns: typed(&selected),
            copy: copy_fast_path && dialect == Dialect::Postgres && w.binds.is_empty(),
            selected,
            binds: w.binds,
            position,
            visible,
            log: None,
            suffix: Vec::new(),
            watermark: None,
        });
    }
    Ok(plans)
}

/// Decoder OIDs for the PostgreSQL columns of a plan.
pub fn pg_decoders(plan: &TablePlan) -> Vec<u32> {
    plan.selected
        .iter()
        .map(|c| match (c.pg_raw_bytes, c.kind) {
            (true, crate::catalog::Kind::Json) => oid::RAW_JSON,
            (true, _) => oid::RAW_TEXT,
            (false, _) if c.pg_text_array => oid::TEXT_ARRAY,
            (false, _) if c.pg_text_cast => oid::TEXT,
            (false, _) => c.pg_oid,
        })
        .collect()
}

pub use fetcher_connect::stream::{ChannelCursor, Msg};
