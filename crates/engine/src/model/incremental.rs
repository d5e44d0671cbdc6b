//! Incremental reads (docs/api.md, "Incremental extraction"): a table read only past the
//! watermark of the previous completed job of its sync, in `(cursor, key)` order.
//!
//! A table may instead be read **from the log** ([`ReadMode::Log`], PostgreSQL): its first
//! job delivers a snapshot, every later one the changes committed since; the watermark is
//! then a [`LogPosition`] (docs/api.md, "Changes from the log").
//!
//! The watermark is a tuple: the cursor column's value, then the key columns' values,
//! each as it appears in the result (the NDJSON rendering of docs/encodings.md). A read
//! after a watermark `w` takes the rows whose `(cursor, key)` is strictly greater than `w`
//! (rows that share a cursor value are told apart by their key, so none is lost or read
//! twice across jobs), and never a row whose cursor is NULL.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How an incremental table is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReadMode {
    /// Past a watermark on a cursor column.
    #[default]
    Cursor,
    /// From the database's log: a snapshot first, then the committed changes, deletes
    /// included (PostgreSQL logical decoding).
    Log,
}

impl ReadMode {
    pub fn is_cursor(&self) -> bool {
        *self == ReadMode::Cursor
    }
}

/// What a job asks of one table: read it incrementally on `cursor`, ties broken by `key`;
/// or, in [`ReadMode::Log`], from the log (no cursor; `key` the primary key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IncrementalSpec {
    #[serde(default, skip_serializing_if = "ReadMode::is_cursor")]
    pub mode: ReadMode,
    /// The column whose growth marks new and changed rows (an integer, numeric,
    /// timestamp, date or text column). Empty in log mode.
    #[serde(default, skip_serializing_if = "String::is_empty")]
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
    /// The watermark's columns: the cursor, then the key (log mode: the key alone).
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        let cursor = (self.mode == ReadMode::Cursor).then_some(self.cursor.as_str());
        cursor
            .into_iter()
            .chain(self.key.iter().map(String::as_str))
    }

    pub fn is_log(&self) -> bool {
        self.mode == ReadMode::Log
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
/// A log read's watermark has no cursor and no values, and a [`LogPosition`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Watermark {
    #[serde(default)]
    pub cursor: String,
    #[serde(default)]
    pub key: Vec<String>,
    /// The cursor's value, then each key column's, as the result renders them.
    #[serde(default)]
    pub values: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogPosition>,
}

impl Watermark {
    /// Whether this watermark is on the columns `spec` names, in its mode.
    pub fn matches(&self, spec: &IncrementalSpec) -> bool {
        self.cursor == spec.cursor && self.key == spec.key && self.log.is_some() == spec.is_log()
    }

    /// A log read's watermark.
    pub fn at_log(spec: &IncrementalSpec, position: LogPosition) -> Watermark {
        Watermark {
            cursor: String::new(),
            key: spec.key.clone(),
            values: Vec::new(),
            log: Some(position),
        }
    }
}

/// Where a log read stands: the log position its next read starts from, and while it is
/// still needed, the snapshot of the first job (its changes skip what the snapshot saw).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogPosition {
    /// A PostgreSQL log position, as it prints them (`16/B374D848`).
    pub lsn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<LogSnapshot>,
    /// The replication slot the sync reads (for an operator: `pg_replication_slots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Bytes of log the slot kept from being recycled when the job began (what an idle
    /// or failing sync costs the server's disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_bytes: Option<u64>,
}

/// The first job's snapshot: PostgreSQL's `xmin:xmax:xip,…` text, and the log position
/// read right after it (every transaction it saw committed below it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogSnapshot {
    pub seen: String,
    pub taken_at: String,
}

impl LogPosition {
    /// The position as a number, when it is well formed (`hex/hex`).
    pub fn value(&self) -> Option<u64> {
        lsn_value(&self.lsn)
    }
}

/// A PostgreSQL log position (`16/B374D848`) as a number.
pub fn lsn_value(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    let part = |p: &str| {
        (!p.is_empty() && p.len() <= 8)
            .then(|| u64::from_str_radix(p, 16).ok())
            .flatten()
    };
    Some(part(hi)? << 32 | part(lo)?)
}

/// The replication slot and publication a log read of one sync uses (PostgreSQL). Both
/// carry the `fetcher_` prefix, so an operator listing `pg_replication_slots` knows whose
/// they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogSlot {
    pub slot: String,
    pub publication: String,
}

impl LogSlot {
    /// `fetcher_` and 24 hex digits of SHA-256 over the tenant, the sync and the table:
    /// within PostgreSQL's 63 bytes and its slot-name alphabet, whatever the ids hold.
    pub fn for_sync(tenant: &str, sync_id: &str, config: &str, table: &str) -> LogSlot {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [tenant, sync_id, config, table] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let digest = h.finalize();
        let name = format!("fetcher_{}", crate::execute::hex(&digest[..12]));
        LogSlot {
            slot: name.clone(),
            publication: name,
        }
    }
}

impl Watermark {
    /// Where this watermark stands against `other` in the table's `(cursor, key)` order,
    /// judged on the rendered values: numbers (JSON numbers and exact decimal strings),
    /// dates and timestamps (`YYYY-MM-DDTHH:MM:SS[.f]Z`, expanded years, `±infinity`)
    /// and, for key columns, text in byte order. `None` when the two are on other columns
    /// or a value is of no form compared here.
    ///
    /// Byte order can differ from the database's collation for text keys; a caller uses
    /// this only to keep the later of two watermarks, where a wrong answer costs a re-read
    /// and never a row.
    pub fn position_cmp(&self, other: &Watermark) -> Option<std::cmp::Ordering> {
        use std::cmp::Ordering::Equal;
        if let (Some(a), Some(b)) = (&self.log, &other.log) {
            return Some(a.value()?.cmp(&b.value()?));
        }
        if self.log.is_some() != other.log.is_some() {
            return None;
        }
        if self.cursor != other.cursor
            || self.key != other.key
            || self.values.len() != other.values.len()
        {
            return None;
        }
        for (i, (a, b)) in self.values.iter().zip(&other.values).enumerate() {
            let o = compare_rendered(a, b, i > 0)?;
            if o != Equal {
                return Some(o);
            }
        }
        Some(Equal)
    }
}

/// Two rendered values of one column, in the column's order (see
/// [`Watermark::position_cmp`]); `text` admits plain text compared byte by byte.
fn compare_rendered(
    a: &serde_json::Value,
    b: &serde_json::Value,
    text: bool,
) -> Option<std::cmp::Ordering> {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(p), Some(q), _, _) => Some(p.cmp(&q)),
            (_, _, Some(p), Some(q)) => Some(p.cmp(&q)),
            _ => compare_decimals(&x.to_string(), &y.to_string())
                .or_else(|| x.as_f64()?.partial_cmp(&y.as_f64()?)),
        },
        (J::Number(x), J::String(y)) => compare_decimals(&x.to_string(), y),
        (J::String(x), J::Number(y)) => compare_decimals(x, &y.to_string()),
        (J::String(x), J::String(y)) => compare_decimals(x, y)
            .or_else(|| Some(instant_of(x)?.cmp(&instant_of(y)?)))
            .or_else(|| text.then(|| x.as_bytes().cmp(y.as_bytes()))),
        _ => None,
    }
}

/// Exact comparison of decimals written as `[-]digits[.digits]`; PostgreSQL's numeric
/// `NaN` sorts above `Infinity`, above every number.
fn compare_decimals(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    fn rank(s: &str) -> Option<(i8, bool, String, String)> {
        match s {
            "-Infinity" => return Some((-1, false, String::new(), String::new())),
            "Infinity" => return Some((1, false, String::new(), String::new())),
            "NaN" => return Some((2, false, String::new(), String::new())),
            _ => {}
        }
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
            return None;
        }
        let int = int.trim_start_matches('0').to_owned();
        let frac = frac.trim_end_matches('0').to_owned();
        let zero = int.is_empty() && frac.is_empty();
        Some((0, negative && !zero, int, frac))
    }
    let (ra, na, ia, fa) = rank(a)?;
    let (rb, nb, ib, fb) = rank(b)?;
    if ra != 0 || rb != 0 {
        return Some(ra.cmp(&rb));
    }
    let magnitude = ia
        .len()
        .cmp(&ib.len())
        .then_with(|| ia.cmp(&ib))
        .then_with(|| fa.cmp(&fb));
    Some(match (na, nb) {
        (false, false) => magnitude,
        (true, true) => magnitude.reverse(),
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
    })
}

/// A rendered date or timestamp as a sortable tuple: `(±infinity rank, year, the rest of
/// the date and time as fixed-width text, the fraction's digits without trailing zeros)`.
fn instant_of(s: &str) -> Option<(i8, i64, String, String)> {
    match s {
        "-infinity" => return Some((-1, 0, String::new(), String::new())),
        "infinity" => return Some((1, 0, String::new(), String::new())),
        _ => {}
    }
    // The year: four digits, or an expanded year with its sign.
    let year_len = match s.as_bytes().first()? {
        b'+' | b'-' => 1 + s[1..].find('-')?,
        _ => 4,
    };
    let year: i64 = s.get(..year_len)?.trim_start_matches('+').parse().ok()?;
    let rest = s
        .get(year_len..)?
        .strip_suffix(['Z', 'z'])
        .unwrap_or(&s[year_len..]);
    // `-MM-DD`, then `THH:MM:SS`, then an optional fraction.
    let (fixed, fraction) = rest.split_once('.').unwrap_or((rest, ""));
    let shape_ok = match fixed.len() {
        6 => true,
        15 => matches!(fixed.as_bytes()[6], b'T' | b't' | b' '),
        _ => false,
    };
    if !shape_ok || !fraction.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // The separator is not part of the order.
    let fixed: String = fixed
        .chars()
        .enumerate()
        .map(|(i, c)| if i == 6 { 'T' } else { c })
        .collect();
    let time = if fixed.len() == 6 {
        format!("{fixed}T00:00:00")
    } else {
        fixed
    };
    let separator = |i: usize| match i {
        0 | 3 => Some(b'-'),
        6 => Some(b'T'),
        9 | 12 => Some(b':'),
        _ => None,
    };
    let well_formed = time.bytes().enumerate().all(|(i, c)| match separator(i) {
        Some(sep) => c == sep,
        None => c.is_ascii_digit(),
    });
    if !well_formed {
        return None;
    }
    Some((0, year, time, fraction.trim_end_matches('0').to_owned()))
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
    /// Log mode: the sync's slot and publication (set by the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<LogSlot>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn mark(values: serde_json::Value) -> Watermark {
        Watermark {
            cursor: "c".into(),
            key: vec!["k".into()],
            values: serde_json::from_value(values).unwrap(),
            log: None,
        }
    }

    #[test]
    fn watermarks_order_by_cursor_then_key_on_their_rendered_values() {
        use std::cmp::Ordering::*;
        let cmp = |a, b| mark(a).position_cmp(&mark(b));
        // Timestamps: fractions of any length, expanded and BC years, infinities.
        assert_eq!(
            cmp(
                json!(["2024-01-02T10:11:12.074224Z", 179]),
                json!(["2024-01-02T10:11:12.074225Z", 180])
            ),
            Some(Less)
        );
        assert_eq!(
            cmp(
                json!(["2024-01-02T10:11:12.07Z", 1]),
                json!(["2024-01-02T10:11:12.074225Z", 1])
            ),
            Some(Less)
        );
        assert_eq!(
            cmp(
                json!(["2024-01-02T10:11:12.5Z", 1]),
                json!(["2024-01-02T10:11:12.50Z", 1])
            ),
            Some(Equal)
        );
        assert_eq!(
            cmp(
                json!(["2024-01-02T10:11:12Z", 1]),
                json!(["2024-01-02T10:11:12.000001Z", 1])
            ),
            Some(Less)
        );
        assert_eq!(
            cmp(
                json!(["-0043-03-15T00:00:00Z", 1]),
                json!(["0001-01-01T00:00:00Z", 1])
            ),
            Some(Less)
        );
        assert_eq!(
            cmp(
                json!(["+12345-01-01T00:00:00Z", 1]),
                json!(["9999-12-31T23:59:59Z", 1])
            ),
            Some(Greater)
        );
        assert_eq!(
            cmp(json!(["infinity", 1]), json!(["+12345-01-01T00:00:00Z", 1])),
            Some(Greater)
        );
        assert_eq!(
            cmp(json!(["-infinity", 1]), json!(["-0043-03-15T00:00:00Z", 1])),
            Some(Less)
        );
        // Numbers: integers, exact decimals of any scale, doubles.
        assert_eq!(
            cmp(
                json!([9007199254740993u64, 1]),
                json!([9007199254740992u64, 1])
            ),
            Some(Greater)
        );
        assert_eq!(cmp(json!(["1500.10", 1]), json!(["1500.1", 2])), Some(Less));
        assert_eq!(cmp(json!(["-2.5", 1]), json!(["-2.45", 1])), Some(Less));
        assert_eq!(cmp(json!(["-0.00", 1]), json!(["0", 1])), Some(Equal));
        assert_eq!(
            cmp(json!(["99999999999999999999.5", 1]), json!(["NaN", 1])),
            Some(Less)
        );
        assert_eq!(cmp(json!([1.5, 1]), json!([1.25, 1])), Some(Greater));
        assert_eq!(cmp(json!([2, 1]), json!(["10.0", 1])), Some(Less));
        // Ties on the cursor: the key decides, text keys in byte order.
        assert_eq!(cmp(json!([5, "b"]), json!([5, "a"])), Some(Greater));
        assert_eq!(cmp(json!([5, 3]), json!([5, 3])), Some(Equal));
        // Text is compared only as a key; other columns or shapes are not compared.
        assert_eq!(cmp(json!(["b", 1]), json!(["a", 1])), None);
        assert_eq!(cmp(json!([1, 1]), json!([true, 1])), None);
        let other = Watermark {
            cursor: "d".into(),
            ..mark(json!([1, 1]))
        };
        assert_eq!(mark(json!([1, 1])).position_cmp(&other), None);
    }

    #[test]
    fn log_reads_have_no_cursor_and_compare_by_log_position() {
        let s: IncrementalSpec =
            serde_json::from_value(json!({"mode": "log", "key": ["id"]})).unwrap();
        assert!(s.is_log());
        assert_eq!(s.columns().collect::<Vec<_>>(), ["id"]);
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"mode": "log", "key": ["id"]})
        );
        let cursor: IncrementalSpec = serde_json::from_value(json!({"cursor": "c"})).unwrap();
        assert_eq!(
            serde_json::to_value(&cursor).unwrap(),
            json!({"cursor": "c", "key": []})
        );
        let at = |lsn: &str| {
            Watermark::at_log(
                &s,
                LogPosition {
                    lsn: lsn.into(),
                    ..Default::default()
                },
            )
        };
        assert!(at("0/16B3748").matches(&s) && !at("0/1").matches(&cursor));
        assert!(!mark(json!([1, 1])).matches(&s));
        assert_eq!(
            at("1/0").position_cmp(&at("0/FFFFFFFF")),
            Some(std::cmp::Ordering::Greater)
        );
        assert_eq!(at("1/0").position_cmp(&mark(json!([1, 1]))), None);
        assert_eq!(lsn_value("16/B374D848"), Some(0x16_B374_D848));
        for bad in ["", "1", "x/1", "1/", "123456789/0"] {
            assert_eq!(lsn_value(bad), None, "{bad}");
        }
        let a = LogSlot::for_sync("t1", "s1", "pg", "public.orders");
        assert_eq!(a, LogSlot::for_sync("t1", "s1", "pg", "public.orders"));
        assert_ne!(a, LogSlot::for_sync("t1", "s1", "pg", "public.order"));
        assert!(a.slot.starts_with("fetcher_") && a.slot.len() == 32);
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
