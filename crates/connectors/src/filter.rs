//! Filter conditions (docs/filters.md) → a SQL `WHERE` clause with bound parameters.
//!
//! Shape: `{field: {op: [values…], …}, …}` for one table. Operators: `eq`, `gt`, `gte`,
//! `lt`, `lte`, `between`, `in`, `nin`, `ne`, `like`. Fields are taken in sorted order,
//! operators in the order above, everything joined with `AND`.
//!
//! Stricter than the reference, because a dropped filter widens a job to the whole table.
//! The typed [`fetcher_engine::Condition`] already refuses an unknown operator or a
//! non-array value list when it is decoded; here an empty value list, a condition with no
//! operators, an arity violation, a value of the wrong type for the column's catalog type, a filter
//! on an unknown column or on a column type that cannot be compared (JSON, bytes, arrays…)
//! are all `validation` errors. Values are typed from the catalog, never from the column
//! name (no "name contains id → UUID" or date-name heuristics).
//!
//! NULL, as SQL has it (docs/filters.md, "`null`"): `eq [null]` is `IS NULL` and
//! `ne [null]` is `IS NOT NULL`; anywhere else in `eq`/`in`/`ne`/`nin` a `null` is SQL
//! `NULL` in the list, so `in` never matches NULL rows and `nin` with a `null` matches
//! nothing (`NOT IN (…, NULL)`); `null` in `gt`/`gte`/`lt`/`lte`/`between`/`like` is a
//! type error. Booleans filter boolean-like columns on every dialect: `boolean` (PG),
//! `BOOLEAN` (SQLite) and MySQL/MariaDB `TINYINT(1)` (`BOOL`), where `true`/`false` bind
//! as `1`/`0`. `between [a, b]` on a date/timestamp column whose end `b` is a
//! bare date (`2024-01-31`) includes that whole day (`f < b + 1 day`).

use fetcher_engine::{FilterKind, Operator, Result, TableFilters};
use serde_json::Value as J;

use crate::Dialect;
use crate::catalog::{Kind, TableInfo};
use crate::error::{msg, validation};

/// One bound parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Text(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Where {
    /// Empty when there are no filters; otherwise `cond AND cond …` (no `WHERE`).
    pub sql: String,
    pub binds: Vec<Bind>,
}

pub fn quote_ident(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::MySql => format!("`{}`", name.replace('`', "``")),
        Dialect::Postgres | Dialect::Sqlite => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

pub(crate) struct Builder<'a> {
    pub(crate) dialect: Dialect,
    pub(crate) binds: &'a mut Vec<Bind>,
    /// The column is an integer that holds booleans (MySQL `TINYINT(1)`).
    pub(crate) bool_like: bool,
}

impl Builder<'_> {
    /// A placeholder for `b`, cast to the column's type where the dialect needs it.
    pub(crate) fn param(&mut self, b: Bind, cast: Option<&str>) -> String {
        self.binds.push(b);
        let p = match self.dialect {
            Dialect::Postgres => format!("${}", self.binds.len()),
            Dialect::MySql | Dialect::Sqlite => "?".to_owned(),
        };
        match cast {
            Some(c) => format!("CAST({p} AS {c})"),
            None => p,
        }
    }
}

/// Builds the predicate for one table's filters (`None` or `{}` → no predicate).
pub fn build_where(
    dialect: Dialect,
    table: &TableInfo,
    filters: Option<&TableFilters>,
) -> Result<Where> {
    let mut out = Where::default();
    let Some(filters) = filters else {
        return Ok(out);
    };
    let mut parts = Vec::new();
    // Fields in sorted order (the map's), operators in canonical order (the condition's).
    for (name, condition) in filters {
        let column = table
            .column(name)
            .ok_or_else(|| validation(msg::FILTER_UNKNOWN_COLUMN))?;
        if condition.is_empty() {
            return Err(validation(msg::FILTER_EMPTY));
        }
        if matches!(column.kind, Kind::Json | Kind::Bytes | Kind::Other) {
            return Err(validation(msg::FILTER_COLUMN_TYPE));
        }
        let mut col = quote_ident(dialect, &column.name);
        if dialect == Dialect::Postgres && column.pg_text_cast {
            col = format!("CAST({col} AS text)");
        }
        let mut b = Builder {
            dialect,
            binds: &mut out.binds,
            bool_like: is_bool_like(dialect, column),
        };
        for (op, values) in condition.iter() {
            if values.is_empty() {
                return Err(validation(msg::FILTER_EMPTY));
            }
            let arity = |n: usize| {
                if values.len() == n {
                    Ok(())
                } else {
                    Err(validation(msg::FILTER_ARITY))
                }
            };
            match op {
                Operator::Eq | Operator::In | Operator::Ne | Operator::Nin => {
                    parts.push(membership(&mut b, &col, column.kind, values, op)?)
                }
                Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => {
                    arity(1)?;
                    let sym = match op {
                        Operator::Gt => ">",
                        Operator::Gte => ">=",
                        Operator::Lt => "<",
                        _ => "<=",
                    };
                    let p = typed(&mut b, column.kind, &values[0])?;
                    parts.push(format!("{col} {sym} {p}"));
                }
                Operator::Between => {
                    arity(2)?;
                    let lo = typed(&mut b, column.kind, &values[0])?;
                    let whole_day = matches!(column.kind, Kind::Timestamp | Kind::TimestampTz)
                        && matches!(&values[1], J::String(s) if s.len() == 10);
                    if whole_day {
                        // Validate as a date, then compare against the next midnight.
                        let J::String(end) = &values[1] else {
                            unreachable!()
                        };
                        let d = parse_datetime(end)
                            .ok_or_else(|| validation(msg::FILTER_VALUE_TYPE))?;
                        let p = b.param(Bind::Text(d.date_text()), None);
                        let next = match dialect {
                            Dialect::Postgres => format!("(CAST({p} AS date) + 1)"),
                            Dialect::MySql => {
                                format!("DATE_ADD(CAST({p} AS DATE), INTERVAL 1 DAY)")
                            }
                            Dialect::Sqlite => format!("date({p}, '+1 day')"),
                        };
                        parts.push(format!("{col} >= {lo} AND {col} < {next}"));
                    } else {
                        let hi = typed(&mut b, column.kind, &values[1])?;
                        parts.push(format!("{col} >= {lo} AND {col} <= {hi}"));
                    }
                }
                Operator::Like => {
                    arity(1)?;
                    let J::String(pattern) = &values[0] else {
                        return Err(validation(msg::FILTER_VALUE_TYPE));
                    };
                    let target = match (column.kind, dialect) {
                        (Kind::Text, _) => col.clone(),
                        (Kind::Uuid, Dialect::Postgres) => format!("CAST({col} AS text)"),
                        (Kind::Uuid, _) => col.clone(),
                        _ => return Err(validation(msg::FILTER_VALUE_TYPE)),
                    };
                    no_nul(dialect, pattern)?;
                    let p = b.param(Bind::Text(pattern.clone()), None);
                    parts.push(format!("{target} LIKE {p}"));
                }
            }
        }
    }
    out.sql = parts
        .iter()
        .map(|p| format!("({p})"))
        .collect::<Vec<_>>()
        .join(" AND ");
    Ok(out)
}

/// `eq`/`in` (`negate = false`) and `ne`/`nin` (`negate = true`), with SQL's semantics
/// (docs/filters.md, "`null`"): a lone `null` in `eq`/`ne` is the `IS NULL` /
/// `IS NOT NULL` shorthand; otherwise `null` is SQL `NULL` in the list, so `in` never
/// matches a NULL row and a `nin` (or a multi-value `ne`) naming `null` matches no row
/// (`f NOT IN ('a', NULL)` is never true), the same on every dialect.
fn membership(
    b: &mut Builder<'_>,
    col: &str,
    kind: Kind,
    values: &[J],
    op: Operator,
) -> Result<String> {
    let negate = matches!(op, Operator::Ne | Operator::Nin);
    if matches!(op, Operator::Eq | Operator::Ne) && values.len() == 1 && values[0].is_null() {
        let not = if negate { "NOT " } else { "" };
        return Ok(format!("{col} IS {not}NULL"));
    }
    let mut params = Vec::new();
    for v in values {
        params.push(if v.is_null() {
            "NULL".to_owned()
        } else {
            typed(b, kind, v)?
        });
    }
    Ok(if params.len() == 1 {
        format!("{col} {} {}", if negate { "<>" } else { "=" }, params[0])
    } else {
        format!(
            "{col} {}IN ({})",
            if negate { "NOT " } else { "" },
            params.join(", ")
        )
    })
}

/// A strict decimal literal: `-?digits(.digits)?([eE][+-]?digits)?`.
fn is_decimal(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (mantissa, None),
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
    digits(int)
        && frac.is_none_or(digits)
        && exp.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)))
}

/// Decimal text of a JSON number or numeric string.
fn number_text(v: &J) -> Option<String> {
    match v {
        J::Number(n) => Some(n.to_string()),
        J::String(s) if is_decimal(s) => Some(s.clone()),
        _ => None,
    }
}

/// MySQL/MariaDB spell `BOOL`/`BOOLEAN` as `TINYINT(1)`.
fn is_bool_like(dialect: Dialect, column: &crate::catalog::ColumnInfo) -> bool {
    dialect == Dialect::MySql && column.type_name.eq_ignore_ascii_case("tinyint(1)")
}

/// The kind of filter value `column` takes, for checking a job's filters when it is
/// created (`None` for MySQL's boolean `TINYINT(1)`, which takes numbers and booleans).
pub fn filter_kind(dialect: Dialect, column: &crate::catalog::ColumnInfo) -> Option<FilterKind> {
    if is_bool_like(dialect, column) {
        return None;
    }
    Some(kind_class(column.kind))
}

fn kind_class(kind: Kind) -> FilterKind {
    match kind {
        Kind::Int | Kind::UInt | Kind::Decimal | Kind::Float => FilterKind::Number,
        Kind::Bool => FilterKind::Bool,
        Kind::Text => FilterKind::Text,
        Kind::Uuid => FilterKind::Uuid,
        Kind::Date | Kind::Timestamp | Kind::TimestampTz => FilterKind::DateTime,
        Kind::Time => FilterKind::Time,
        Kind::Json | Kind::Bytes | Kind::Other => FilterKind::None,
    }
}

/// Whether `v` is a value of `kind`: the one rule both a job's creation and the query
/// that binds it ([`typed`]) apply (docs/filters.md, "Values"). `null` is the caller's
/// to allow (only `eq`, `ne`, `in`, `nin` take it).
pub fn value_fits(kind: FilterKind, v: &J) -> bool {
    match (kind, v) {
        (FilterKind::Number, J::Number(_)) => true,
        (FilterKind::Number, J::String(s)) => is_decimal(s),
        (FilterKind::Bool, J::Bool(_)) => true,
        (FilterKind::Text, J::String(_)) => true,
        (FilterKind::Uuid, J::String(s)) => crate::values::parse_uuid(s).is_some(),
        (FilterKind::DateTime, J::String(s)) => parse_datetime(s).is_some(),
        (FilterKind::Time, J::String(s)) => parse_time(s).is_some(),
        _ => false,
    }
}

/// One value, typed from the column's catalog type.
pub(crate) fn typed(b: &mut Builder<'_>, kind: Kind, v: &J) -> Result<String> {
    let bad = || validation(msg::FILTER_VALUE_TYPE);
    let dialect = b.dialect;
    let class = kind_class(kind);
    if class != FilterKind::None
        && !value_fits(class, v)
        && !(b.bool_like && matches!(v, J::Bool(_)))
    {
        return Err(bad());
    }
    Ok(match kind {
        Kind::Int | Kind::UInt => match v {
            J::Bool(x) if b.bool_like => b.param(Bind::I64(i64::from(*x)), None),
            J::Number(n) if n.as_i64().is_some() => b.param(Bind::I64(n.as_i64().unwrap()), None),
            // PostgreSQL has no unsigned integers: beyond i64 the value is compared as
            // numeric (a bigint column then matches no such value), as it is written.
            J::Number(n) if n.as_u64().is_some() && dialect != Dialect::Postgres => {
                b.param(Bind::U64(n.as_u64().unwrap()), None)
            }
            _ => decimal_param(b, number_text(v).ok_or_else(bad)?),
        },
        Kind::Decimal => decimal_param(b, number_text(v).ok_or_else(bad)?),
        Kind::Float => {
            let f = match v {
                J::Number(n) => n.as_f64(),
                J::String(s) if is_decimal(s) => s.parse().ok(),
                _ => None,
            }
            .ok_or_else(bad)?;
            b.param(Bind::F64(f), None)
        }
        Kind::Bool => match v {
            J::Bool(x) => b.param(Bind::Bool(*x), None),
            _ => return Err(bad()),
        },
        Kind::Text => match v {
            J::String(s) => {
                no_nul(dialect, s)?;
                b.param(Bind::Text(s.clone()), None)
            }
            _ => return Err(bad()),
        },
        Kind::Uuid => match v {
            J::String(s) => {
                let canonical = crate::values::parse_uuid(s).ok_or_else(bad)?;
                let cast = (dialect == Dialect::Postgres).then_some("uuid");
                b.param(Bind::Text(canonical), cast)
            }
            _ => return Err(bad()),
        },
        Kind::Date | Kind::Timestamp | Kind::TimestampTz => {
            let J::String(s) = v else { return Err(bad()) };
            let d = parse_datetime(s).ok_or_else(bad)?;
            match dialect {
                Dialect::Postgres => {
                    let cast = match kind {
                        Kind::Date => "date",
                        Kind::Timestamp => "timestamp",
                        _ => "timestamptz",
                    };
                    b.param(Bind::Text(s.clone()), Some(cast))
                }
                Dialect::MySql => {
                    let cast = if kind == Kind::Date {
                        "DATE"
                    } else {
                        "DATETIME(6)"
                    };
                    b.param(Bind::Text(d.utc_text()), Some(cast))
                }
                Dialect::Sqlite => {
                    let text = if d.time.is_none() {
                        d.date_text()
                    } else {
                        d.utc_text()
                    };
                    b.param(Bind::Text(text), None)
                }
            }
        }
        Kind::Time => {
            let J::String(s) = v else { return Err(bad()) };
            if parse_time(s).is_none() {
                return Err(bad());
            }
            let cast = match dialect {
                Dialect::Postgres => Some("time"),
                Dialect::MySql => Some("TIME(6)"),
                Dialect::Sqlite => None,
            };
            b.param(Bind::Text(s.clone()), cast)
        }
        Kind::Json | Kind::Bytes | Kind::Other => return Err(validation(msg::FILTER_COLUMN_TYPE)),
    })
}

/// PostgreSQL text cannot hold NUL: such a value is refused before any query, as bad
/// input (docs/filters.md), instead of failing at the database.
fn no_nul(dialect: Dialect, s: &str) -> Result<()> {
    if dialect == Dialect::Postgres && s.contains('\0') {
        return Err(validation(msg::FILTER_VALUE_NUL));
    }
    Ok(())
}

fn decimal_param(b: &mut Builder<'_>, text: String) -> String {
    match b.dialect {
        Dialect::Postgres => b.param(Bind::Text(text), Some("numeric")),
        Dialect::MySql => b.param(Bind::Text(text), Some("DECIMAL(65,30)")),
        Dialect::Sqlite => match text.parse::<i64>() {
            Ok(i) => b.param(Bind::I64(i), None),
            Err(_) => b.param(Bind::F64(text.parse().unwrap_or(f64::NAN)), None),
        },
    }
}

/// A parsed filter date/time: `YYYY-MM-DD`, optionally `[T ]HH:MM[:SS[.f…]]`, optionally
/// `Z` or `±HH:MM` / `±HHMM`.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterDateTime {
    pub y: i64,
    pub m: u32,
    pub d: u32,
    /// (h, mi, s, micros)
    pub time: Option<(u32, u32, u32, u32)>,
    /// Minutes east of UTC.
    pub offset: Option<i32>,
}

impl FilterDateTime {
    pub fn date_text(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.y, self.m, self.d)
    }

    /// `YYYY-MM-DD HH:MM:SS.ffffff` in UTC (offsets applied).
    pub fn utc_text(&self) -> String {
        let (h, mi, s, us) = self.time.unwrap_or((0, 0, 0, 0));
        let days = crate::values::days_from_civil(self.y, self.m, self.d);
        let total = (days * 86_400 + (h * 3600 + mi * 60 + s) as i64
            - self.offset.unwrap_or(0) as i64 * 60)
            * 1_000_000
            + us as i64;
        crate::values::timestamp_from_unix_micros(total)
            .trim_end_matches('Z')
            .replacen('T', " ", 1)
    }
}

fn num(s: &str, len: usize) -> Option<u32> {
    (s.len() == len && s.bytes().all(|c| c.is_ascii_digit())).then(|| s.parse().ok())?
}

pub fn parse_time(s: &str) -> Option<(u32, u32, u32, u32)> {
    let (hms, frac) = match s.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (s, None),
    };
    let mut it = hms.split(':');
    let h = num(it.next()?, 2)?;
    let mi = num(it.next()?, 2)?;
    let sec = match it.next() {
        Some(x) => num(x, 2)?,
        None if frac.is_none() => 0,
        None => return None,
    };
    if it.next().is_some() || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let us = match frac {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|c| c.is_ascii_digit()) => {
            let mut padded = f.to_owned();
            while padded.len() < 6 {
                padded.push('0');
            }
            padded[..6].parse().ok()?
        }
        Some(_) => return None,
    };
    Some((h, mi, sec, us))
}

pub fn parse_datetime(s: &str) -> Option<FilterDateTime> {
    if s.len() < 10 || !s.is_char_boundary(10) {
        return None;
    }
    let (date, rest) = s.split_at(10);
    let y = num(&date[..4], 4)? as i64;
    let m = num(&date[5..7], 2)?;
    let d = num(&date[8..10], 2)?;
    if &date[4..5] != "-" || &date[7..8] != "-" || !(1..=12).contains(&m) || d == 0 {
        return None;
    }
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let month_len =
        crate::values::days_from_civil(ny, nm, 1) - crate::values::days_from_civil(y, m, 1);
    if d as i64 > month_len {
        return None;
    }
    let mut out = FilterDateTime {
        y,
        m,
        d,
        time: None,
        offset: None,
    };
    if rest.is_empty() {
        return Some(out);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (time, offset) = if let Some(t) = rest.strip_suffix(['Z', 'z']) {
        (t, Some(0))
    } else if let Some(i) = rest.rfind(['+', '-']) {
        let (t, o) = rest.split_at(i);
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let o = &o[1..];
        let (oh, om) = match o.len() {
            5 if &o[2..3] == ":" => (num(&o[..2], 2)?, num(&o[3..], 2)?),
            4 => (num(&o[..2], 2)?, num(&o[2..], 2)?),
            2 => (num(o, 2)?, 0),
            _ => return None,
        };
        // Offsets run to ±15:59 (PostgreSQL's range; real zones stay within ±14:00).
        if oh > 15 || om > 59 {
            return None;
        }
        (t, Some(sign * (oh * 60 + om) as i32))
    } else {
        (rest, None)
    };
    out.time = Some(parse_time(time)?);
    out.offset = offset;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ColumnInfo;
    use fetcher_engine::Category;
    use serde_json::json;

    fn table() -> TableInfo {
        let col = |n: &str, kind| ColumnInfo {
            name: n.into(),
            kind,
            type_name: String::new(),
            pg_oid: 0,
            pg_text_cast: false,
            pg_raw_bytes: false,
            pg_text_array: false,
            orderable: true,
            nullable: true,
            ctype: fetcher_engine::ColumnType::Unknown,
        };
        TableInfo {
            schema: "public".into(),
            name: "t".into(),
            key: "t".into(),
            columns: vec![
                col("amount", Kind::Decimal),
                col("n", Kind::Int),
                col("name", Kind::Text),
                col("id", Kind::Uuid),
                col("at", Kind::TimestampTz),
                col("ok", Kind::Bool),
                col("doc", Kind::Json),
                col("Order", Kind::Text),
            ],
            primary_key: vec![],
            ordered_indexes: vec![],
            row_estimate: None,
            view: false,
        }
    }

    fn decode(f: serde_json::Value) -> TableFilters {
        serde_json::from_value(f).expect("a well-shaped filter decodes")
    }

    fn pg(f: serde_json::Value) -> Result<Where> {
        build_where(Dialect::Postgres, &table(), Some(&decode(f)))
    }

    #[test]
    fn every_operator_renders_with_binds() {
        let w = pg(json!({
            "name": {"eq": ["a"], "ne": ["b", "c"], "like": ["a%"], "in": ["x", "y"], "nin": ["z"]},
            "n": {"gt": [1], "gte": [2], "lt": [3], "lte": [4]},
            "amount": {"between": [1, "2.50"]},
            "at": {"between": ["2024-01-01", "2024-01-31"]},
            "Order": {"eq": [null]},
        }))
        .unwrap();
        assert_eq!(
            w.sql,
            "(\"Order\" IS NULL) AND (\"amount\" >= CAST($1 AS numeric) AND \"amount\" <= CAST($2 AS numeric)) AND (\"at\" >= CAST($3 AS timestamptz) AND \"at\" < (CAST($4 AS date) + 1)) AND (\"n\" > $5) AND (\"n\" >= $6) AND (\"n\" < $7) AND (\"n\" <= $8) AND (\"name\" = $9) AND (\"name\" IN ($10, $11)) AND (\"name\" NOT IN ($12)) AND (\"name\" NOT IN ($13, $14)) AND (\"name\" LIKE $15)"
                .replace("\"name\" NOT IN ($12)", "\"name\" <> $12")
        );
        assert_eq!(w.binds.len(), 15);
        assert_eq!(w.binds[0], Bind::Text("1".into()));
        assert_eq!(w.binds[4], Bind::I64(1));
        let my = build_where(
            Dialect::MySql,
            &table(),
            Some(&decode(json!({"name": {"eq": ["a", null]}}))),
        )
        .unwrap();
        assert_eq!(my.sql, "(`name` IN (?, NULL))");
        let nin = pg(json!({"name": {"nin": ["a", null], "in": [null]}})).unwrap();
        assert_eq!(
            nin.sql,
            "(\"name\" = NULL) AND (\"name\" NOT IN ($1, NULL))"
        );
        let ne = pg(json!({"name": {"ne": [null]}})).unwrap();
        assert_eq!(ne.sql, "(\"name\" IS NOT NULL)");
    }

    #[test]
    fn bad_filters_are_validation_errors_never_dropped() {
        let cases = [
            json!({"nope": {"eq": [1]}}),
            json!({"name": {}}),
            json!({"name": {"eq": []}}),
            json!({"name": {"eq": [1]}}),
            json!({"n": {"eq": ["abc"]}}),
            json!({"n": {"eq": [true]}}),
            json!({"n": {"gt": [1, 2]}}),
            json!({"n": {"gt": [null]}}),
            json!({"n": {"between": [1]}}),
            json!({"id": {"eq": ["not-a-uuid"]}}),
            json!({"at": {"gte": ["yesterday"]}}),
            json!({"at": {"gte": ["2024-02-30"]}}),
            json!({"ok": {"eq": ["true"]}}),
            json!({"doc": {"eq": ["x"]}}),
            json!({"n": {"like": ["1%"]}}),
            json!({"name": {"like": [1]}}),
        ];
        for c in cases {
            let e = pg(c.clone()).unwrap_err();
            assert_eq!(e.category(), Category::Validation, "{c}");
        }
        // What the types already refuse never reaches a connector.
        for c in [
            json!({"name": {"regex": ["a"]}}),
            json!({"name": {"eq": null}}),
            json!({"name": {"eq": "a"}}),
            json!({"name": "x"}),
            json!(["x"]),
        ] {
            assert!(
                serde_json::from_value::<TableFilters>(c.clone()).is_err(),
                "{c}"
            );
        }
    }

    #[test]
    fn datetimes() {
        let d = parse_datetime("2024-01-31T23:00:00.5-02:00").unwrap();
        assert_eq!(d.utc_text(), "2024-02-01 01:00:00.5");
        assert_eq!(parse_datetime("2024-01-31").unwrap().time, None);
        for bad in [
            "2024-1-31",
            "2024-13-01",
            "20240131",
            "2024-01-31X10:00",
            "2024-01-31T25:00",
        ] {
            assert!(parse_datetime(bad).is_none(), "{bad}");
        }
        assert!(
            is_decimal("-1.50") && is_decimal("1e10") && !is_decimal("1.") && !is_decimal("abc")
        );
    }
}
