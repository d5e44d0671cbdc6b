//! Incremental reads (docs/api.md, "Incremental extraction"): a table read only past the
//! watermark of the previous completed job of its sync, in `(cursor, key)` order.
//!
//! The watermark is a tuple: the cursor column's value, then the key columns' values,
//! each as it appears in the result (the NDJSON rendering of docs/encodings.md). A read
//! after a watermark `w` takes the rows whose `(cursor, key)` is strictly greater than `w`
//! (rows that share a cursor value are told apart by their key, so none is lost or read
//! twice across jobs), and never a row whose cursor is NULL.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a job asks of one table: read it incrementally on `cursor`, ties broken by `key`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IncrementalSpec {
    /// The column whose growth marks new and changed rows (an integer, numeric,
    /// timestamp, date or text column).
    pub cursor: String,
    /// Columns that tell rows sharing a cursor value apart, in order: unique together
    /// with the cursor. Empty in a request: the table's primary key (resolved when the
    /// job is created, so a stored job always names them).
    #[serde(default)]
    pub key: Vec<String>,
    /// Re-read this far behind the watermark (late-arriving rows): duplicates are then
    /// possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookback: Option<Lookback>,
}

impl IncrementalSpec {
    /// The watermark's columns: the cursor, then the key.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.cursor.as_str()).chain(self.key.iter().map(String::as_str))
    }
}

/// How far behind the watermark a lookback starts: a duration for date and time cursors
/// (ISO 8601, `PT5M`), an amount for numeric ones (`1000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookback {
    Duration(Duration),
    Amount(u64),
}

/// Which [`Lookback`] a cursor takes: a duration (dates, timestamps) or an amount
/// (numbers); text cursors take none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LookbackKind {
    Duration,
    Amount,
}

impl Lookback {
    pub fn kind(&self) -> LookbackKind {
        match self {
            Lookback::Duration(_) => LookbackKind::Duration,
            Lookback::Amount(_) => LookbackKind::Amount,
        }
    }

    /// An ISO 8601 duration of days, hours, minutes and seconds: `P1D`, `PT5M`,
    /// `PT1H30M`, `PT0.5S` (no years or months: they have no fixed length).
    pub fn parse_duration(s: &str) -> Option<Duration> {
        let rest = s.strip_prefix('P')?;
        if rest.is_empty() {
            return None;
        }
        let (date, time) = match rest.split_once('T') {
            Some((d, t)) if !t.is_empty() => (d, Some(t)),
            Some(_) => return None,
            None => (rest, None),
        };
        let mut total = 0f64;
        let mut seen = false;
        let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
            let mut number = String::new();
            let mut next = 0;
            for c in part.chars() {
                if c.is_ascii_digit() || c == '.' {
                    number.push(c);
                    continue;
                }
                let i = units[next..].iter().position(|(u, _)| *u == c)? + next;
                let n: f64 = number.parse().ok()?;
                if !n.is_finite() || (number.contains('.') && units[i].0 != 'S') {
                    return None;
                }
                total += n * units[i].1;
                number.clear();
                next = i + 1;
                seen = true;
            }
            number.is_empty().then_some(())
        };
        take(date, &[('D', 86_400.0)])?;
        if let Some(t) = time {
            take(t, &[('H', 3_600.0), ('M', 60.0), ('S', 1.0)])?;
        }
        (seen && total < 1e12).then(|| Duration::from_secs_f64(total))
    }

    /// The ISO 8601 text of a duration (`PT300S`), or the amount.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Lookback::Duration(d) if d.subsec_nanos() == 0 => format!("PT{}S", d.as_secs()).into(),
            Lookback::Duration(d) => format!("PT{}S", d.as_secs_f64()).into(),
            Lookback::Amount(n) => n.into(),
        }
    }
}

impl Serialize for Lookback {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Lookback {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Lookback::parse_duration(&s)
                .map(Lookback::Duration)
                .ok_or_else(|| {
                    serde::de::Error::custom(
                        "lookback must be an ISO 8601 duration such as PT5M, or a number",
                    )
                }),
            serde_json::Value::Number(n) => n.as_u64().map(Lookback::Amount).ok_or_else(|| {
                serde::de::Error::custom("a numeric lookback must be a whole number, 0 or more")
            }),
            _ => Err(serde::de::Error::custom(
                "lookback must be an ISO 8601 duration such as PT5M, or a number",
            )),
        }
    }
}

/// A point in a table's `(cursor, key)` order: the highest tuple a completed job read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Watermark {
    pub cursor: String,
    #[serde(default)]
    pub key: Vec<String>,
    /// The cursor's value, then each key column's, as the result renders them.
    pub values: Vec<serde_json::Value>,
}

impl Watermark {
    /// Whether this watermark is on the columns `spec` names.
    pub fn matches(&self, spec: &IncrementalSpec) -> bool {
        self.cursor == spec.cursor && self.key == spec.key
    }
}

/// One table's incremental read as a connector receives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncrementalRead {
    #[serde(flatten)]
    pub spec: IncrementalSpec,
    /// Read past this point; `None`: from the start (the sync's first job, or after a
    /// reset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Watermark>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookbacks_parse_as_iso_durations_or_amounts() {
        let d = |s| Lookback::parse_duration(s);
        assert_eq!(d("PT5M"), Some(Duration::from_secs(300)));
        assert_eq!(d("PT1H30M"), Some(Duration::from_secs(5400)));
        assert_eq!(d("P1D"), Some(Duration::from_secs(86_400)));
        assert_eq!(d("P1DT2S"), Some(Duration::from_secs(86_402)));
        assert_eq!(d("PT0.5S"), Some(Duration::from_millis(500)));
        for bad in [
            "", "P", "PT", "5M", "PT5X", "P1M", "PT5M1H", "PT1.5M", "P-1D", "PTM",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
        let parsed: Lookback = serde_json::from_str("\"PT5M\"").unwrap();
        assert_eq!(parsed, Lookback::Duration(Duration::from_secs(300)));
        assert_eq!(serde_json::to_string(&parsed).unwrap(), "\"PT300S\"");
        let amount: Lookback = serde_json::from_str("1000").unwrap();
        assert_eq!(amount, Lookback::Amount(1000));
        assert!(serde_json::from_str::<Lookback>("-1").is_err());
        assert!(serde_json::from_str::<Lookback>("true").is_err());
    }

    #[test]
    fn a_spec_refuses_unknown_keys_and_names_its_columns() {
        let s: IncrementalSpec =
            serde_json::from_value(serde_json::json!({"cursor": "updated_at", "key": ["id"]}))
                .unwrap();
        assert_eq!(s.columns().collect::<Vec<_>>(), ["updated_at", "id"]);
        assert!(
            serde_json::from_value::<IncrementalSpec>(
                serde_json::json!({"cursor": "c", "cursr": "x"})
            )
            .is_err()
        );
    }
}
