//! Lossless rendering helpers shared by every dialect: calendar arithmetic, RFC 3339
//! timestamps with microseconds, tagged strings for values RFC 3339 cannot express, exact
//! floats, UUIDs and JSON documents. The table of encodings is in the crate docs.

use std::fmt::Write as _;

use fetcher_engine::Value;

/// Tagged strings for special values (see the crate docs' encoding table).
pub const INFINITY: &str = "infinity";
pub const NEG_INFINITY: &str = "-infinity";
pub const NAN: &str = "NaN";

pub use fetcher_engine::time::{civil_from_days, days_from_civil};

/// Years 0..=9999 as four digits (RFC 3339); others as ISO 8601 expanded years with an
/// explicit sign (`+12345`, `-0044`: astronomical numbering, so 1 BC is `0000`).
fn write_year(out: &mut String, y: i64) {
    if (0..=9999).contains(&y) {
        let _ = write!(out, "{y:04}");
    } else if y > 9999 {
        let _ = write!(out, "+{y}");
    } else {
        let _ = write!(out, "-{:04}", -y);
    }
}

/// `.f…` for a sub-second part in microseconds, as RFC 3339 with nanoseconds prints
/// it (the reference's format): trailing zeros trimmed, nothing when zero.
pub fn push_fraction(s: &mut String, micros: u32) {
    if micros == 0 {
        return;
    }
    let mut digits = 6;
    let mut m = micros;
    while m.is_multiple_of(10) {
        m /= 10;
        digits -= 1;
    }
    s.push('.');
    push_digits(s, u64::from(m), digits);
}

/// `YYYY-MM-DDTHH:MM:SS[.f…]Z` from microseconds since the Unix epoch (UTC).
pub fn timestamp_from_unix_micros(us: i64) -> String {
    timestamp_from_epoch_days(0, us)
}

/// `YYYY-MM-DDTHH:MM:SS[.f…]Z` from microseconds since an epoch `epoch_days` days after
/// the Unix one (PostgreSQL counts from 2000-01-01); no shift of `us`, so no overflow.
pub fn timestamp_from_epoch_days(epoch_days: i64, us: i64) -> String {
    let days = us.div_euclid(86_400_000_000) + epoch_days;
    let rem = us.rem_euclid(86_400_000_000);
    let mut s = String::with_capacity(27);
    write_date(&mut s, days);
    s.push('T');
    write_time_of_day(&mut s, rem);
    s.push('Z');
    s
}

/// A calendar date as midnight UTC: `YYYY-MM-DDT00:00:00Z`.
pub fn date_from_unix_days(days: i64) -> String {
    let mut s = String::with_capacity(20);
    write_date(&mut s, days);
    s.push_str("T00:00:00Z");
    s
}

/// Appends `n` as exactly `width` zero-padded digits (n < 10^width).
fn push_digits(s: &mut String, mut n: u64, width: usize) {
    let mut buf = [b'0'; 6];
    for i in (0..width).rev() {
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    s.extend(buf[..width].iter().map(|&b| char::from(b)));
}

pub fn write_date(s: &mut String, days: i64) {
    let (y, m, d) = civil_from_days(days);
    if (0..=9999).contains(&y) {
        push_digits(s, y as u64, 4);
    } else {
        write_year(s, y);
    }
    s.push('-');
    push_digits(s, m as u64, 2);
    s.push('-');
    push_digits(s, d as u64, 2);
}

/// `HH:MM:SS[.f…]` from microseconds since midnight.
pub fn write_time_of_day(s: &mut String, us: i64) {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let hours = secs / 3600;
    if (0..100).contains(&hours) {
        push_digits(s, hours as u64, 2);
    } else {
        let _ = write!(s, "{hours:02}");
    }
    s.push(':');
    push_digits(s, ((secs / 60) % 60) as u64, 2);
    s.push(':');
    push_digits(s, (secs % 60) as u64, 2);
    push_fraction(s, micros as u32);
}

/// `+HH:MM` / `-HH:MM` for an offset east of UTC in seconds.
pub fn write_offset(s: &mut String, east_secs: i64) {
    let sign = if east_secs < 0 { '-' } else { '+' };
    let a = east_secs.abs();
    let _ = write!(s, "{sign}{:02}:{:02}", a / 3600, (a / 60) % 60);
    if a % 60 != 0 {
        let _ = write!(s, ":{:02}", a % 60);
    }
}

/// Floats: finite values as JSON numbers; NaN and infinities as tagged strings.
pub fn float(v: f64) -> Value {
    if v.is_nan() {
        Value::String(NAN.into())
    } else if v.is_infinite() {
        Value::String(if v > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        Value::Float(v)
    }
}

/// A 4-byte float in its own shortest form (`89.99`, not `89.98999786376953`).
pub fn float32(v: f32) -> Value {
    if !v.is_finite() {
        return float(v as f64);
    }
    float(v.to_string().parse::<f64>().unwrap_or(v as f64))
}

/// Canonical lower-case hyphenated UUID text.
pub fn uuid(b: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(HEX[(byte >> 4) as usize] as char);
        s.push(HEX[(byte & 15) as usize] as char);
    }
    s
}

/// Parses any accepted UUID spelling (hyphenated, 32 hex digits, braced, `urn:uuid:`) into
/// its canonical text.
pub fn parse_uuid(s: &str) -> Option<String> {
    let t = s
        .strip_prefix("urn:uuid:")
        .or_else(|| s.strip_prefix('{').and_then(|x| x.strip_suffix('}')))
        .unwrap_or(s);
    let hex: Vec<u8> = match t.len() {
        36 => {
            let b = t.as_bytes();
            if [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
                return None;
            }
            t.bytes().filter(|&c| c != b'-').collect()
        }
        32 => t.bytes().collect(),
        _ => return None,
    };
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let v = |c: u8| (c as char).to_digit(16);
        out[i] = (v(pair[0])? * 16 + v(pair[1])?) as u8;
    }
    Some(uuid(&out))
}

/// A JSON column's value: the document embedded as nested values, exactly. A document a
/// tree cannot hold as written (a number beyond a double's range or precision, a
/// repeated key, nesting past 128 levels) is kept as its own text, compacted
/// ([`Value::Json`]), so every document stays a JSON document.
///
/// Three cases would be ambiguous embedded as they are, so they arrive tagged, as a
/// one-key object (docs/encodings.md, "JSON columns"): the document `null` (else it reads
/// as SQL `NULL`) and a document that is an object with a top-level tag key (else it reads
/// as a tag) arrive as `{"$json": <document>}`; text that is not JSON at all (SQLite
/// checks nothing), or a document with an unpaired surrogate escape (which strict readers
/// refuse), as `{"$text": "<text>"}`.
pub fn json(text: &str) -> Value {
    match serde_json::from_str::<StrictJson>(text) {
        // A number the parser rounded (more digits than a double holds) keeps the text.
        Ok(StrictJson(v)) if fetcher_engine::json::numbers_exact(text) => {
            let v = Value::from(v);
            let ambiguous = match &v {
                Value::Null => true,
                Value::Map(m) => JSON_TAGS.iter().any(|t| m.contains_key(*t)),
                _ => false,
            };
            if ambiguous { json_tag("$json", v) } else { v }
        }
        _ => match compact_json(text) {
            // Strict readers (DuckDB, Go) refuse or replace an unpaired surrogate escape:
            // such a document is kept as text, tagged, readable everywhere.
            Some(compact) if has_lone_surrogate(&compact) => {
                json_tag("$text", Value::String(text.to_owned()))
            }
            Some(compact) if has_top_level_tag(&compact) => {
                json_tag("$json", Value::Json(compact.into_boxed_str()))
            }
            Some(compact) => Value::Json(compact.into_boxed_str()),
            None => json_tag("$text", Value::String(text.to_owned())),
        },
    }
}

/// Whether JSON `text` has a `\uD800`–`\uDFFF` escape that is not half of a pair.
fn has_lone_surrogate(text: &str) -> bool {
    let b = text.as_bytes();
    let unit = |at: usize| -> Option<u16> {
        let hex = text.get(at + 2..at + 6)?;
        (b.get(at) == Some(&b'\\') && b.get(at + 1) == Some(&b'u'))
            .then(|| u16::from_str_radix(hex, 16).ok())
            .flatten()
    };
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) => {
                if !matches!(unit(i + 6), Some(0xDC00..=0xDFFF)) {
                    return true;
                }
                i += 12;
            }
            Some(0xDC00..=0xDFFF) => return true,
            Some(_) => i += 6,
            // Any other escape is two bytes (an escaped backslash too, so its second one is skipped).
            None => i += 2,
        }
    }
    false
}

/// A JSON column's value read as bytes: [`json`] when they are UTF-8, else the tagged
/// `{"$bytes": "<Base64>"}` (a bare Base64 string would read as a string document).
pub fn json_bytes(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => json(s),
        Err(_) => json_blob(b.to_vec()),
    }
}

/// A JSON column's value that is bytes, not text: `{"$bytes": "<Base64>"}`.
pub fn json_blob(b: Vec<u8>) -> Value {
    json_tag("$bytes", Value::Bytes(b))
}

/// The keys of the one-key objects that tag a JSON column's value.
const JSON_TAGS: [&str; 3] = ["$json", "$text", "$bytes"];

fn json_tag(tag: &str, v: Value) -> Value {
    Value::Map([(tag.to_owned(), v)].into())
}

/// Whether compact JSON `text` is an object with a tag among its top-level keys (keys are
/// compared unescaped, so `"\u0024json"` counts).
fn has_top_level_tag(text: &str) -> bool {
    let b = text.as_bytes();
    if b.first() != Some(&b'{') {
        return false;
    }
    let (mut depth, mut i, mut prev) = (0usize, 0usize, 0u8);
    while i < b.len() {
        match b[i] {
            b'"' => {
                let mut end = i + 1;
                while b[end] != b'"' {
                    end += if b[end] == b'\\' { 2 } else { 1 };
                }
                let is_key = depth == 1 && matches!(prev, b'{' | b',');
                if is_key
                    && serde_json::from_str::<String>(&text[i..=end])
                        .is_ok_and(|k| JSON_TAGS.contains(&k.as_str()))
                {
                    return true;
                }
                prev = b'"';
                i = end + 1;
                continue;
            }
            c @ (b'{' | b'[') => {
                depth += 1;
                prev = c;
            }
            c @ (b'}' | b']') => {
                depth -= 1;
                prev = c;
            }
            c => prev = c,
        }
        i += 1;
    }
    false
}

/// A JSON value parsed with a repeated object key as an error (serde_json keeps the last).
struct StrictJson(serde_json::Value);

impl<'de> serde::Deserialize<'de> for StrictJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictJson)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        serde_json::Number::from_f64(v)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom("not a finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictJson(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictJson(v) = map.next_value()?;
            if out.insert(key, v).is_some() {
                return Err(serde::de::Error::custom("repeated key"));
            }
        }
        Ok(serde_json::Value::Object(out))
    }
}

/// `text` without insignificant whitespace, if it is exactly one JSON value (RFC 8259).
/// Strings and numbers are copied as written; checked with an explicit stack, so any
/// depth is fine.
pub fn compact_json(text: &str) -> Option<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Want {
        Value,
        ValueOrClose,
        Key,
        KeyOrClose,
        Colon,
        CommaOrClose,
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut stack: Vec<u8> = Vec::new();
    let mut want = Want::Value;
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        if want == Want::CommaOrClose && stack.is_empty() {
            return (i == b.len()).then_some(out);
        }
        let c = *b.get(i)?;
        match want {
            Want::Colon => {
                if c != b':' {
                    return None;
                }
                out.push(':');
                i += 1;
                want = Want::Value;
            }
            Want::CommaOrClose => {
                match (c, stack.last()) {
                    (b',', Some(b'{')) => want = Want::Key,
                    (b',', Some(b'[')) => want = Want::Value,
                    (b'}', Some(b'{')) | (b']', Some(b'[')) => {
                        stack.pop();
                    }
                    _ => return None,
                }
                out.push(c as char);
                i += 1;
            }
            Want::Key | Want::KeyOrClose if c == b'}' && want == Want::KeyOrClose => {
                stack.pop();
                out.push('}');
                i += 1;
                want = Want::CommaOrClose;
            }
            Want::Key | Want::KeyOrClose => {
                if c != b'"' {
                    return None;
                }
                i = copy_string(text, i, &mut out)?;
                want = Want::Colon;
            }
            Want::Value | Want::ValueOrClose if c == b']' && want == Want::ValueOrClose => {
                stack.pop();
                out.push(']');
                i += 1;
                want = Want::CommaOrClose;
            }
            Want::Value | Want::ValueOrClose => {
                match c {
                    b'{' | b'[' => {
                        stack.push(c);
                        out.push(c as char);
                        i += 1;
                        want = if c == b'{' {
                            Want::KeyOrClose
                        } else {
                            Want::ValueOrClose
                        };
                        continue;
                    }
                    b'"' => i = copy_string(text, i, &mut out)?,
                    b't' | b'f' | b'n' => {
                        let word = ["true", "false", "null"]
                            .into_iter()
                            .find(|w| text[i..].starts_with(w))?;
                        out.push_str(word);
                        i += word.len();
                    }
                    b'-' | b'0'..=b'9' => i = copy_number(text, i, &mut out)?,
                    _ => return None,
                }
                want = Want::CommaOrClose;
            }
        }
    }
}

/// Copies the string starting at `text[i] == '"'`; returns the index after it.
fn copy_string(text: &str, start: usize, out: &mut String) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = start + 1;
    loop {
        match *b.get(i)? {
            b'"' => break,
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' if b.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => i += 6,
                _ => return None,
            },
            c if c < 0x20 => return None,
            _ => i += 1,
        }
    }
    out.push_str(&text[start..=i]);
    Some(i + 1)
}

/// Copies the number starting at `text[i]`; returns the index after it.
fn copy_number(text: &str, start: usize, out: &mut String) -> Option<usize> {
    let b = text.as_bytes();
    let digits = |mut i: usize| {
        let from = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        (i > from).then_some(i)
    };
    let mut i = start;
    if b[i] == b'-' {
        i += 1;
    }
    i = if b.get(i) == Some(&b'0') {
        i + 1
    } else {
        digits(i)?
    };
    if b.get(i) == Some(&b'.') {
        i = digits(i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(i)?;
    }
    out.push_str(&text[start..i]);
    Some(i)
}

/// Text from bytes; invalid UTF-8 is kept losslessly as bytes.
pub fn text(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => Value::Bytes(b.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_documents_arrive_exactly() {
        // Ordinary documents: a tree, keys sorted (the reference's convention).
        assert!(matches!(json(r#"{"b":1,"a":[true,null]}"#), Value::Map(_)));
        // What a tree cannot hold as written is kept as its compacted text.
        for (text, kept) in [
            (r#"{"a": 1, "big": 1e400}"#, r#"{"a":1,"big":1e400}"#),
            (r#"{"k": 1, "k": 2}"#, r#"{"k":1,"k":2}"#),
            (r#"{"x": {"k": 1, "k": [2]}}"#, r#"{"x":{"k":1,"k":[2]}}"#),
            // More digits than a double holds: the text, not a rounded number (#28).
            (
                r#"{"n": 0.1000000000000000000001}"#,
                r#"{"n":0.1000000000000000000001}"#,
            ),
            (
                r#"[12345678901234567890123]"#,
                r#"[12345678901234567890123]"#,
            ),
            (
                r#"{"s": "1e400", "n": 9007199254740993.0}"#,
                r#"{"s":"1e400","n":9007199254740993.0}"#,
            ),
        ] {
            assert_eq!(json(text), Value::Json(kept.into()), "{text}");
        }
        // An unpaired surrogate escape: the text, tagged (strict readers refuse it), #28.
        for text in [
            r#"[ "\ud800" ]"#,
            r#"{"a":"x\udc00"}"#,
            r#"["\ud800\u0041"]"#,
        ] {
            assert_eq!(
                json(text),
                json_tag("$text", Value::String(text.into())),
                "{text}"
            );
        }
        // A pair, or an escaped backslash before `u`, is no lone surrogate.
        assert!(!matches!(json(r#"["\ud83d\ude00"]"#), Value::Map(_)));
        assert!(!has_lone_surrogate(r#"["\\ud800"]"#));
        // Numbers a double holds exactly (as values: `0.10` is `0.1`) stay a tree.
        for text in [
            r#"{"n":0.10}"#,
            "[1e2, 2.5, -3, 18446744073709551615, 5e-324]",
        ] {
            assert!(!matches!(json(text), Value::Json(_)), "{text}");
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(json(&deep), Value::Json(deep.clone().into()));
        // Not JSON at all (SQLite checks nothing): tagged, so it cannot read as the
        // string document `"quoted"`.
        for text in [
            "quoted",
            "{\"a\":}",
            "[1,]",
            "01",
            "1.",
            "\"\\x\"",
            "[1] 2",
            "{\"a\" 1}",
            "",
        ] {
            assert_eq!(json(text), json_tag("$text", text.into()), "{text}");
        }
        assert_ne!(json("quoted"), json("\"quoted\""));
        // The document `null` is not SQL NULL, and a document shaped like a tag is not a
        // tag: both arrive wrapped in `$json`, tree or kept text alike.
        assert_eq!(json(" null "), json_tag("$json", Value::Null));
        for text in [
            r#"{"$text":"x"}"#,
            r#"{"a":1,"$json":null}"#,
            r#"{"\u0024bytes":1}"#,
        ] {
            let Value::Map(m) = json(text) else {
                panic!("{text}")
            };
            assert!(m.contains_key("$json") && m.len() == 1, "{text}");
        }
        assert_eq!(
            json(r#"{"$text":1,"$text":2}"#),
            json_tag("$json", Value::Json(r#"{"$text":1,"$text":2}"#.into()))
        );
        // Tag keys below the top level, or as values, are the document's own business.
        for text in [r#"{"a":{"$json":1}}"#, r#"{"a":"$json"}"#, r#"["$text"]"#] {
            assert!(
                !matches!(json(text), Value::Map(ref m) if m.len() == 1 && m.contains_key("$json")),
                "{text}"
            );
        }
        assert_eq!(
            json(r#"{"a":{"$json":1},"a":2}"#),
            Value::Json(r#"{"a":{"$json":1},"a":2}"#.into())
        );
        assert_eq!(
            json_bytes(b"\xff"),
            json_tag("$bytes", Value::Bytes(vec![0xff]))
        );
        assert_eq!(
            compact_json(" { \"a b\" : [ 1 , 2.5e+3 , \"x\\\" y\" ] } "),
            Some(r#"{"a b":[1,2.5e+3,"x\" y"]}"#.into())
        );
        assert_eq!(compact_json("{}"), Some("{}".into()));
        assert_eq!(compact_json("[]"), Some("[]".into()));
        assert_eq!(compact_json("[}"), None);
        assert_eq!(compact_json("{\"a\":1,}"), None);
        assert_eq!(compact_json("\"ctl\u{1}\""), None);
    }

    /// Numbers inside JSON documents are doubles: each must parse to the very double its
    /// shortest text names (seeded sweep over bit patterns, plus a case the default
    /// serde_json parser gets one ULP wrong).
    #[test]
    fn json_numbers_parse_to_the_exact_double() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut checked = 0;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = f64::from_bits(state);
            if !f.is_finite() {
                continue;
            }
            let text = format!("{f:e}");
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                parsed.as_f64().map(f64::to_bits),
                Some(f.to_bits()),
                "{text}"
            );
            checked += 1;
        }
        assert!(checked > 19_000);
        let v: serde_json::Value = serde_json::from_str("[-2027874574.0522642]").unwrap();
        assert_eq!(v.to_string(), "[-2027874574.0522642]");
    }

    #[test]
    fn calendar_round_trips_across_eras() {
        for days in [
            -1_000_000_000i64,
            -719_528,
            -1,
            0,
            1,
            10_957,
            2_932_896,
            1_000_000_000,
        ] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{days}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
    }

    #[test]
    fn timestamps_and_years() {
        assert_eq!(timestamp_from_unix_micros(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            timestamp_from_unix_micros(-1),
            "1969-12-31T23:59:59.999999Z"
        );
        assert_eq!(
            timestamp_from_unix_micros(500_000),
            "1970-01-01T00:00:00.5Z"
        );
        assert_eq!(
            timestamp_from_unix_micros(120),
            "1970-01-01T00:00:00.00012Z"
        );
        assert_eq!(
            date_from_unix_days(days_from_civil(12345, 6, 7)),
            "+12345-06-07T00:00:00Z"
        );
        assert_eq!(
            date_from_unix_days(days_from_civil(-43, 3, 15)),
            "-0043-03-15T00:00:00Z"
        );
        assert_eq!(
            date_from_unix_days(days_from_civil(0, 1, 1)),
            "0000-01-01T00:00:00Z"
        );
    }

    #[test]
    fn uuids_and_floats() {
        let c = "550e8400-e29b-41d4-a716-446655440000";
        for s in [
            c,
            "550E8400-E29B-41D4-A716-446655440000",
            "550e8400e29b41d4a716446655440000",
            "{550e8400-e29b-41d4-a716-446655440000}",
            "urn:uuid:550e8400-e29b-41d4-a716-446655440000",
        ] {
            assert_eq!(parse_uuid(s).as_deref(), Some(c), "{s}");
        }
        for bad in [
            "",
            "550e8400",
            "550e8400-e29b-41d4-a716-44665544000g",
            "x".repeat(36).as_str(),
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
        assert_eq!(float32(89.99), Value::Float(89.99));
        assert_eq!(float(f64::NAN), Value::String("NaN".into()));
        assert_eq!(float(f64::NEG_INFINITY), Value::String("-Infinity".into()));
    }
}
