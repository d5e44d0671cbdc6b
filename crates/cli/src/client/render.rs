//! What the client commands print: the API's JSON as it came (`--output json`), or a
//! table for people (`--output table`).

use std::io::Write;

use serde_json::Value;

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns (lists) or `key: value` lines (one record).
    Table,
    /// The API's JSON body, pretty-printed.
    Json,
}

/// One column of a table: its heading and the JSON pointer of its value in a row.
pub type Column = (&'static str, &'static str);

/// A cell's text: strings bare, `null`/absent empty, anything else as JSON.
fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Rows under their headings, each column as wide as its widest cell.
pub fn table(rows: &[Value], columns: &[Column], out: &mut impl Write) -> std::io::Result<()> {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|(_, p)| cell(r.pointer(p))).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (h, _))| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |out: &mut dyn Write, texts: Vec<&str>| {
        let mut l = String::new();
        for (i, t) in texts.iter().enumerate() {
            if i + 1 < texts.len() {
                l.push_str(&format!("{t:<w$}  ", w = widths[i]));
            } else {
                l.push_str(t);
            }
        }
        writeln!(out, "{}", l.trim_end())
    };
    line(out, columns.iter().map(|(h, _)| *h).collect())?;
    for r in &cells {
        line(out, r.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

/// One record as `key: value` lines (nested values as compact JSON).
pub fn record(v: &Value, out: &mut impl Write) -> std::io::Result<()> {
    match v.as_object() {
        Some(map) => {
            let width = map.keys().map(|k| k.len()).max().unwrap_or(0);
            for (k, val) in map {
                writeln!(out, "{k:<width$}  {}", cell(Some(val)))?;
            }
            Ok(())
        }
        None => writeln!(out, "{}", cell(Some(v))),
    }
}

/// `v` as `output` says: a list's `items` as a table of `columns` (with the page line
/// under it), a record as lines; JSON as it came.
pub fn print(v: &Value, output: Output, columns: Option<&[Column]>) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match (output, columns, v.get("items").and_then(Value::as_array)) {
        (Output::Json, ..) => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(v).unwrap_or_default()
        ),
        (Output::Table, Some(cols), Some(items)) => {
            table(items, cols, &mut out)?;
            let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
            let shown = items.len() as u64;
            let first = (n("page").max(1) - 1) * n("limit") + u64::from(shown > 0);
            writeln!(
                out,
                "({}–{} of {}; --page and --limit for more)",
                first,
                first + shown.saturating_sub(1),
                n("total")
            )
        }
        (Output::Table, Some(cols), None) if v.is_array() => table(
            v.as_array().map(Vec::as_slice).unwrap_or_default(),
            cols,
            &mut out,
        ),
        (Output::Table, ..) => record(v, &mut out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_their_columns() {
        let rows = [
            json!({"id": "a", "s": {"n": 1}}),
            json!({"id": "long-id", "s": null}),
        ];
        let mut out = Vec::new();
        table(&rows, &[("ID", "/id"), ("N", "/s/n")], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "ID       N\na        1\nlong-id\n"
        );
        let mut out = Vec::new();
        record(&json!({"id": "x", "tables": {"a": 1}}), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "id      x\ntables  {\"a\":1}\n"
        );
    }
}
