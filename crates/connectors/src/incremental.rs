//! Incremental reads (docs/api.md, "Incremental extraction") → the `WHERE` condition and
//! `ORDER BY` of a table read past a watermark.
//!
//! The condition is the strict tuple comparison `(cursor, key…) > (watermark…)`, written
//! so that an index on the cursor serves it: `c >= w AND (c > w OR (k…) > (wk…))`. A
//! cursor that is NULL is never read (`c IS NOT NULL`, also on the first read). With a
//! lookback the condition is `c >= w - lookback` instead: rows at or below the watermark
//! are read again. Watermark values are bound as parameters, typed from the catalog like
//! filter values; on SQLite, whose date and time columns hold text compared as text, a
//! watermark's text is bound as written.

use fetcher_engine::{Category, EngineError, IncrementalRead, Lookback, LookbackKind, Result};
use serde_json::Value as J;

use crate::Dialect;
use crate::catalog::{ColumnInfo, Kind, TableInfo};
use crate::filter::{Bind, Builder, parse_datetime, quote_ident, typed};

/// Whether `c` can order an incremental read: integers, exact decimals, timestamps,
/// dates and text (columns read through a text cast or as raw bytes excluded).
pub fn can_be_cursor(c: &ColumnInfo) -> bool {
    plain(c)
        && matches!(
            c.kind,
            Kind::Int
                | Kind::UInt
                | Kind::Decimal
                | Kind::Timestamp
                | Kind::TimestampTz
                | Kind::Date
                | Kind::Text
        )
}

/// Whether `c` can be part of an incremental key: a cursor type, a UUID or a time of day.
pub fn can_be_key(c: &ColumnInfo) -> bool {
    can_be_cursor(c) || (plain(c) && matches!(c.kind, Kind::Uuid | Kind::Time))
}

/// The lookback a cursor `c` takes: a duration for dates and timestamps, an amount for
/// numbers, none for text (or a column that cannot be a cursor).
pub fn lookback_kind(c: &ColumnInfo) -> Option<LookbackKind> {
    if !can_be_cursor(c) {
        return None;
    }
    match c.kind {
        Kind::Int | Kind::UInt | Kind::Decimal => Some(LookbackKind::Amount),
        Kind::Timestamp | Kind::TimestampTz | Kind::Date => Some(LookbackKind::Duration),
        _ => None,
    }
}

fn plain(c: &ColumnInfo) -> bool {
    c.orderable && !c.pg_text_cast && !c.pg_raw_bytes
}

fn refused(text: String) -> EngineError {
    EngineError::new(Category::Validation, text)
}

/// The columns of `read` on `table`: the cursor, then the key, each checked.
pub fn columns<'t>(table: &'t TableInfo, read: &IncrementalRead) -> Result<Vec<&'t ColumnInfo>> {
    let mut out = Vec::with_capacity(1 + read.spec.key.len());
    for (i, name) in read.spec.columns().enumerate() {
        let role = if i == 0 { "cursor" } else { "key" };
        let c = table.column(name).ok_or_else(|| {
            refused(format!(
                "incremental {role} column '{name}' is not a column of table '{}'",
                table.key
            ))
        })?;
        let ok = if i == 0 {
            can_be_cursor(c)
        } else {
            can_be_key(c)
        };
        if !ok {
            let allowed = if i == 0 {
                "integers, numeric, timestamps, dates or text"
            } else {
                "integers, numeric, timestamps, dates, text, UUIDs or times"
            };
            return Err(refused(format!(
                "incremental {role} column '{name}' has type {}; a {role} must be one of {allowed}",
                c.type_name
            )));
        }
        out.push(c);
    }
    let cursor = out[0];
    let fits = read
        .spec
        .lookback
        .is_none_or(|l| lookback_kind(cursor) == Some(l.kind()));
    if !fits {
        return Err(refused(format!(
            "a lookback on cursor '{}' ({}) must be a duration for dates and timestamps, a number for numeric cursors, and is not available for text",
            cursor.name, cursor.type_name
        )));
    }
    Ok(out)
}

/// `ORDER BY` of an incremental read: the cursor, then the key.
pub fn order(dialect: Dialect, columns: &[&ColumnInfo]) -> String {
    columns
        .iter()
        .map(|c| quote_ident(dialect, &c.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The condition of `read` on `table` (no `WHERE`), its parameters appended to `binds`.
pub fn condition(
    dialect: Dialect,
    table: &TableInfo,
    read: &IncrementalRead,
    binds: &mut Vec<Bind>,
) -> Result<String> {
    let cols = columns(table, read)?;
    let q = |c: &ColumnInfo| quote_ident(dialect, &c.name);
    let cursor = q(cols[0]);
    let mut parts = vec![format!("{cursor} IS NOT NULL")];
    let Some(after) = &read.after else {
        return Ok(parts.join(" AND "));
    };
    if after.values.len() != cols.len() || !after.matches(&read.spec) {
        return Err(refused(format!(
            "the watermark of table '{}' is not on the columns this read names",
            table.key
        )));
    }
    let mut b = Builder {
        dialect,
        binds,
        bool_like: false,
    };
    match read.spec.lookback {
        Some(lookback) => {
            let lower = behind(cols[0], &after.values[0], lookback)?;
            let p = watermark_param(&mut b, cols[0], &lower)?;
            parts.push(format!("{cursor} >= {p}"));
        }
        None => parts.push(past(&mut b, &cols, &after.values)?),
    }
    Ok(parts.join(" AND "))
}

/// The rows strictly after `after` in `key` order (a resumed read, docs/engine.md,
/// "Continued runs"): the same tuple comparison as an incremental read's, without its
/// NULL rule (key columns of a primary key are never NULL).
pub fn after_condition(
    dialect: Dialect,
    key: &[&ColumnInfo],
    after: &[J],
    binds: &mut Vec<Bind>,
) -> Result<String> {
    if key.is_empty() || after.len() != key.len() {
        return Err(refused(
            "the resume position is not on the table's key".to_owned(),
        ));
    }
    let mut b = Builder {
        dialect,
        binds,
        bool_like: false,
    };
    past(&mut b, key, after)
}

/// `(c, k…) > (v…)`, written so that an index on `c` serves it:
/// `c >= v AND (c > v OR (k…) > (vk…))`, or `c > v` alone.
fn past(b: &mut Builder<'_>, cols: &[&ColumnInfo], values: &[J]) -> Result<String> {
    let dialect = b.dialect;
    let q = |c: &ColumnInfo| quote_ident(dialect, &c.name);
    let first = q(cols[0]);
    if cols.len() == 1 {
        let p = watermark_param(b, cols[0], &values[0])?;
        return Ok(format!("{first} > {p}"));
    }
    let lo = watermark_param(b, cols[0], &values[0])?;
    let same = watermark_param(b, cols[0], &values[0])?;
    let keys: Vec<String> = cols[1..].iter().map(|c| q(c)).collect();
    let rest = cols[1..]
        .iter()
        .zip(&values[1..])
        .map(|(c, v)| watermark_param(b, c, v))
        .collect::<Result<Vec<_>>>()?;
    let tail = if keys.len() == 1 {
        format!("{} > {}", keys[0], rest[0])
    } else {
        format!("({}) > ({})", keys.join(", "), rest.join(", "))
    };
    Ok(format!("{first} >= {lo} AND ({first} > {same} OR {tail})"))
}

/// A watermark value as a parameter of `column`'s type. SQLite date and time text is
/// bound as written (SQLite compares it as text); everything else as a filter value.
fn watermark_param(b: &mut Builder<'_>, column: &ColumnInfo, v: &J) -> Result<String> {
    let bad = || {
        refused(format!(
            "the watermark of column '{}' is not a value of its type {}",
            column.name, column.type_name
        ))
    };
    if let (Kind::Int | Kind::UInt, J::Number(n)) = (column.kind, v)
        && (n.is_i64() || n.is_u64())
    {
        // An integer, written as a literal: the statement keeps no parameter, so
        // PostgreSQL can still stream it with binary COPY.
        return Ok(n.to_string());
    }
    if b.dialect == Dialect::Sqlite
        && matches!(
            column.kind,
            Kind::Date | Kind::Timestamp | Kind::TimestampTz
        )
    {
        let J::String(s) = v else { return Err(bad()) };
        return Ok(b.param(Bind::Text(s.clone()), None));
    }
    if b.dialect == Dialect::Postgres
        && matches!(
            column.kind,
            Kind::Date | Kind::Timestamp | Kind::TimestampTz
        )
    {
        // As written (PostgreSQL reads back what it printed, `infinity` included).
        let J::String(s) = v else { return Err(bad()) };
        let cast = match column.kind {
            Kind::Date => "date",
            Kind::Timestamp => "timestamp",
            _ => "timestamptz",
        };
        return Ok(b.param(Bind::Text(s.clone()), Some(cast)));
    }
    typed(b, column.kind, v).map_err(|_| bad())
}

/// The cursor value `lookback` behind `v`, in `v`'s own form.
fn behind(cursor: &ColumnInfo, v: &J, lookback: Lookback) -> Result<J> {
    let bad = || {
        refused(format!(
            "the watermark of cursor '{}' cannot be moved back by the lookback",
            cursor.name
        ))
    };
    match lookback {
        Lookback::Amount(n) => match v {
            J::Number(x) if x.as_i64().is_some() => Ok(J::from(
                x.as_i64()
                    .unwrap()
                    .saturating_sub(n.min(i64::MAX as u64) as i64),
            )),
            J::Number(x) if x.as_u64().is_some() => {
                Ok(J::from(x.as_u64().unwrap().saturating_sub(n)))
            }
            J::String(s) => decimal_minus(s, n).map(J::String).ok_or_else(bad),
            _ => Err(bad()),
        },
        Lookback::Duration(d) => {
            let J::String(s) = v else { return Err(bad()) };
            let t = parse_datetime(s).ok_or_else(bad)?;
            let micros = i64::try_from(d.as_micros()).map_err(|_| bad())?;
            Ok(J::String(datetime_minus(s, &t, micros)))
        }
    }
}

/// `s - n` for a decimal written as digits (`123.45`, `-7`), exactly.
fn decimal_minus(s: &str, n: u64) -> Option<String> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let i: i128 = int.parse().ok()?;
    let negative_zero = int.starts_with('-') && i == 0;
    if frac.is_some_and(|f| !f.bytes().all(|c| c.is_ascii_digit())) {
        return None;
    }
    let frac = frac.filter(|f| !f.is_empty() && f.bytes().any(|c| c != b'0'));
    // With a fraction, work on the value scaled to an integer.
    match frac {
        None => Some((i - i128::from(n)).to_string()),
        Some(f) => {
            let scale = 10i128.checked_pow(f.len() as u32)?;
            let fv: i128 = f.parse().ok()?;
            let signed = if int.starts_with('-') || negative_zero {
                i * scale - fv
            } else {
                i * scale + fv
            };
            let r = signed.checked_sub(i128::from(n).checked_mul(scale)?)?;
            let (sign, abs) = if r < 0 { ("-", -r) } else { ("", r) };
            Some(format!(
                "{sign}{}.{:0width$}",
                abs / scale,
                abs % scale,
                width = f.len()
            ))
        }
    }
}

/// `s` (parsed as `t`) moved back by `micros`, written in `s`'s own shape: the same
/// separator and number of fraction digits; an offset becomes `Z` (the instant in UTC).
fn datetime_minus(s: &str, t: &crate::filter::FilterDateTime, micros: i64) -> String {
    let (h, mi, sec, us) = t.time.unwrap_or((0, 0, 0, 0));
    let days = crate::values::days_from_civil(t.y, t.m, t.d);
    let total = (days * 86_400 + i64::from(h * 3600 + mi * 60 + sec)
        - i64::from(t.offset.unwrap_or(0)) * 60)
        * 1_000_000
        + i64::from(us)
        - micros;
    let full = crate::values::timestamp_from_unix_micros(total); // YYYY-MM-DDTHH:MM:SS[.f]Z
    if t.time.is_none() {
        return full[..10].to_owned();
    }
    let sep = s.as_bytes().get(10).map_or('T', |c| *c as char);
    let digits = s[10..]
        .split_once('.')
        .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count());
    let micros_of_second = total.rem_euclid(1_000_000);
    let mut out = format!("{}{sep}{}", &full[..10], &full[11..19]);
    if digits > 0 {
        let six = format!("{micros_of_second:06}");
        let fraction: String = six
            .chars()
            .chain(std::iter::repeat('0'))
            .take(digits)
            .collect();
        out.push('.');
        out.push_str(&fraction);
    }
    if t.offset.is_some() {
        out.push('Z');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_move_back_exactly() {
        assert_eq!(decimal_minus("100", 7).as_deref(), Some("93"));
        assert_eq!(decimal_minus("10.25", 20).as_deref(), Some("-9.75"));
        assert_eq!(decimal_minus("-0.50", 1).as_deref(), Some("-1.50"));
        assert_eq!(decimal_minus("3.000", 1).as_deref(), Some("2"));
        assert_eq!(
            decimal_minus("12345678901234567890123.5", 1).as_deref(),
            Some("12345678901234567890122.5")
        );
        assert_eq!(decimal_minus("1e5", 1), None);
    }

    #[test]
    fn datetimes_move_back_in_their_own_shape() {
        let m =
            |s: &str, secs: i64| datetime_minus(s, &parse_datetime(s).unwrap(), secs * 1_000_000);
        assert_eq!(m("2026-01-01T00:02:00Z", 300), "2025-12-31T23:57:00Z");
        assert_eq!(m("2026-01-01 00:02:00", 60), "2026-01-01 00:01:00");
        assert_eq!(
            m("2026-01-01T00:00:00.250000", 1),
            "2025-12-31T23:59:59.250000"
        );
        assert_eq!(m("2026-03-01", 86_400), "2026-02-28");
        assert_eq!(m("2026-01-01T01:00:00+01:00", 0), "2026-01-01T00:00:00Z");
    }
}
