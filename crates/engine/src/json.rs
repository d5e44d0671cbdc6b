//! Canonical JSON encoding (docs/engine.md, "Canonical JSON"), byte-compatible with the reference's
//! encoder so digests match across implementations:
//!
//! * object keys sorted byte-wise; compact form has no spaces; indented form uses two
//!   spaces per level, `": "` after keys, brackets on their own lines, `{}`/`[]` when empty;
//! * integers in decimal; floats in shortest round-trip form, plain decimal when
//!   `1e-6 <= |x| < 1e21` (or zero), else exponent form `1e+21` / `1e-7`; NaN and ±Inf
//!   are an [`EncodeError`];
//! * strings escape `"` `\` and control bytes (`\n \r \t \b \f` short, others `\u00xx`),
//!   plus `<` `>` `&` (`\u003c` `\u003e` `\u0026`) and U+2028/U+2029; other non-ASCII raw;
//! * bytes as standard Base64.

use std::collections::BTreeMap;

use crate::value::{Row, Value};

/// A value that cannot be represented in JSON (NaN or an infinity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeError;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Bytes that need escaping: control bytes, `"`, `\`, `<`, `>`, `&`, and the lead byte
/// 0xE2 of U+2028/U+2029 (checked precisely when seen).
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t[0xE2] = true;
    t
};

/// Whether any byte of `w` may need escaping: a control byte, `"`, `\\`, `<`, `>`, `&`,
/// or any non-ASCII byte (checked exactly by the byte loop). SWAR, no false negatives.
#[inline]
fn word_needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    #[inline]
    fn has_zero(v: u64) -> u64 {
        v.wrapping_sub(ONES) & !v & HIGH
    }
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let special = has_zero(w ^ (ONES * b'"' as u64))
        | has_zero(w ^ (ONES * b'\\' as u64))
        | has_zero(w ^ (ONES * b'<' as u64))
        | has_zero(w ^ (ONES * b'>' as u64))
        | has_zero(w ^ (ONES * b'&' as u64));
    (below_space | special | (w & HIGH)) != 0
}

/// Writes `s` as a quoted, escaped JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        // Fast path: skip 8 plain bytes at a time.
        if i + 8 <= b.len() {
            let word = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            if !word_needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let c = b[i];
        if !NEEDS_ESCAPE[c as usize] {
            i += 1;
            continue;
        }
        if c == 0xE2 {
            // U+2028 = E2 80 A8, U+2029 = E2 80 A9; anything else starting E2 is plain.
            if i + 2 < b.len() && b[i + 1] == 0x80 && (b[i + 2] == 0xA8 || b[i + 2] == 0xA9) {
                out.extend_from_slice(&b[start..i]);
                out.extend_from_slice(if b[i + 2] == 0xA8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 3;
                start = i;
            } else {
                i += 1;
            }
            continue;
        }
        out.extend_from_slice(&b[start..i]);
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0C => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 0xF) as usize],
            ]),
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

/// Writes a float the way the reference encoder does.
pub fn write_f64(out: &mut Vec<u8>, f: f64) -> Result<(), EncodeError> {
    use std::io::Write;
    if !f.is_finite() {
        return Err(EncodeError);
    }
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        write!(out, "{f}").expect("write to Vec");
    } else {
        let start = out.len();
        write!(out, "{f:e}").expect("write to Vec");
        // Rust writes `1e21`; the reference writes `1e+21`. Negative exponents already
        // match (`1e-7`), and positive ones here always have at least two digits.
        if let Some(pos) = out[start..].iter().position(|&c| c == b'e') {
            let at = start + pos + 1;
            if out.get(at) != Some(&b'-') {
                out.insert(at, b'+');
            }
        }
    }
    Ok(())
}

/// Standard Base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        let sextets = [n >> 18, n >> 12, n >> 6, n];
        for (i, s) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(s & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Encoder state: compact, or indented with two spaces per level.
pub(crate) struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    indent: bool,
    depth: usize,
}

impl<'a> Encoder<'a> {
    pub(crate) fn compact(out: &'a mut Vec<u8>) -> Self {
        Encoder {
            out,
            indent: false,
            depth: 0,
        }
    }

    pub(crate) fn indented(out: &'a mut Vec<u8>) -> Self {
        Encoder {
            out,
            indent: true,
            depth: 0,
        }
    }

    fn newline(&mut self) {
        if self.indent {
            self.out.push(b'\n');
            for _ in 0..self.depth {
                self.out.extend_from_slice(b"  ");
            }
        }
    }

    /// Writes a `{...}` or `[...]` with `n` members, each written by `member(i)`.
    fn container(
        &mut self,
        open: u8,
        close: u8,
        n: usize,
        mut member: impl FnMut(&mut Self, usize) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        self.out.push(open);
        if n == 0 {
            self.out.push(close);
            return Ok(());
        }
        self.depth += 1;
        for i in 0..n {
            if i > 0 {
                self.out.push(b',');
            }
            self.newline();
            member(self, i)?;
        }
        self.depth -= 1;
        self.newline();
        self.out.push(close);
        Ok(())
    }

    fn key(&mut self, key: &[u8]) {
        // `key` is the pre-encoded `"name":`.
        self.out.extend_from_slice(key);
        if self.indent {
            self.out.push(b' ');
        }
    }

    fn str_key(&mut self, k: &str) {
        write_str(self.out, k);
        self.out.push(b':');
        if self.indent {
            self.out.push(b' ');
        }
    }

    pub(crate) fn value(&mut self, v: &Value) -> Result<(), EncodeError> {
        match v {
            Value::Null => self.out.extend_from_slice(b"null"),
            Value::Bool(true) => self.out.extend_from_slice(b"true"),
            Value::Bool(false) => self.out.extend_from_slice(b"false"),
            Value::Int(i) => self
                .out
                .extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
            Value::UInt(u) => self
                .out
                .extend_from_slice(itoa::Buffer::new().format(*u).as_bytes()),
            Value::Float(f) => write_f64(self.out, *f)?,
            Value::String(s) => write_str(self.out, s),
            Value::Bytes(b) => {
                self.out.push(b'"');
                self.out.extend_from_slice(base64(b).as_bytes());
                self.out.push(b'"');
            }
            Value::List(items) => {
                self.container(b'[', b']', items.len(), |e, i| e.value(&items[i]))?
            }
            Value::Map(m) => self.map(m, |e, v| e.value(v))?,
            Value::Json(text) => self.out.extend_from_slice(text.as_bytes()),
        }
        Ok(())
    }

    pub(crate) fn map<V>(
        &mut self,
        m: &BTreeMap<String, V>,
        mut each: impl FnMut(&mut Self, &V) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        let mut it = m.iter();
        self.container(b'{', b'}', m.len(), |e, _| {
            let (k, v) = it.next().expect("len checked");
            e.str_key(k);
            each(e, v)
        })
    }

    pub(crate) fn list<T>(
        &mut self,
        items: &[T],
        mut each: impl FnMut(&mut Self, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        self.container(b'[', b']', items.len(), |e, i| each(e, &items[i]))
    }

    pub(crate) fn row(&mut self, row: &Row) -> Result<(), EncodeError> {
        let cols = row.columns();
        let values = row.values();
        if !self.indent {
            // The NDJSON hot path: no closures, no indentation bookkeeping.
            self.out.push(b'{');
            for (n, (i, key)) in cols.sorted().enumerate() {
                if n > 0 {
                    self.out.push(b',');
                }
                self.out.extend_from_slice(key);
                self.value(&values[i])?;
            }
            self.out.push(b'}');
            return Ok(());
        }
        let mut sorted = cols.sorted();
        let n = sorted.len();
        self.container(b'{', b'}', n, |e, _| {
            let (i, key) = sorted.next().expect("len checked");
            e.key(key);
            e.value(&values[i])
        })
    }
}

/// Compact encoding of one value.
pub fn to_compact(v: &Value) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    Encoder::compact(&mut out).value(v)?;
    Ok(out)
}

/// Indented encoding of one value (two spaces, no trailing newline).
pub fn to_indented(v: &Value) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    Encoder::indented(&mut out).value(v)?;
    Ok(out)
}

/// Compact encoding of one row (sorted keys).
pub fn row_to_compact(row: &Row) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    Encoder::compact(&mut out).row(row)?;
    Ok(out)
}

/// Whether every number in JSON `text` is one the parsed tree holds exactly: an integer
/// that fits 64 bits, or a number whose double prints back to the same decimal value
/// (`0.10` is `0.1`'s double; `0.1000000000000000000001` and `12345678901234567890123`
/// are not any double's): what a parser into doubles and 64-bit integers keeps as
/// written. Strings are skipped; `text` is known to be JSON.
pub fn numbers_exact(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                if !number_exact(&text[start..i]) {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

fn number_exact(token: &str) -> bool {
    let integer = !token.contains(['.', 'e', 'E']);
    if integer && token != "-0" && (token.parse::<i64>().is_ok() || token.parse::<u64>().is_ok()) {
        return true;
    }
    let mantissa = token.split(['e', 'E']).next().unwrap_or(token);
    let digits = mantissa.bytes().filter(u8::is_ascii_digit).count();
    match token.parse::<f64>() {
        // At most 15 digits: no two such decimals share a normal double (2^53 > 10^15), so
        // the double's shortest text is the same value; no text to compare (the common
        // case). An underflow to zero is only exact when every digit is a zero.
        Ok(f) if digits <= 15 && f.is_normal() => true,
        Ok(f) if f == 0.0 && !mantissa.bytes().any(|b| matches!(b, b'1'..=b'9')) => true,
        Ok(f) if f.is_finite() => {
            decimal_value(token).is_some_and(|d| Some(d) == decimal_value(&format!("{f:e}")))
        }
        _ => false,
    }
}

/// A decimal number's value as (negative, significant digits, exponent of a point before
/// them): `-0.0120e3` is `(true, "12", 2)`. Zero has no digits.
fn decimal_value(s: &str) -> Option<(bool, String, i64)> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(at) => (&s[..at], s[at + 1..].parse::<i64>().ok()?),
        None => (s, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let leading = digits.len() - digits.trim_start_matches('0').len();
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    let point = int.len() as i64 - leading as i64;
    if significant.is_empty() {
        return Some((neg, String::new(), 0));
    }
    Some((neg, significant.to_owned(), exp.checked_add(point)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_exact_as_written() {
        for exact in [
            "[1, -3, 0.1, 0.10, 2.5e-3, 1e2, 0, -0.0, 0e5, 18446744073709551615]",
            "[5e-324]",
            "[123456789012345]",
        ] {
            assert!(numbers_exact(exact), "{exact}");
        }
        for inexact in [
            "[0.1000000000000000000001]",
            "[12345678901234567890123]",
            "[1e-400]",
            "[1e400]",
            r#"{"a":9007199254740993.0}"#,
        ] {
            assert!(!numbers_exact(inexact), "{inexact}");
        }
        assert!(
            numbers_exact(r#"["0.1000000000000000000001"]"#),
            "strings are skipped"
        );
    }

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    fn f(v: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_escape_like_the_reference() {
        assert_eq!(s("plain"), "\"plain\"");
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(s("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
        assert_eq!(s("\u{0}\u{1f}\u{1}"), r#""\u0000\u001f\u0001""#);
        assert_eq!(s("<a&b>"), r#""\u003ca\u0026b\u003e""#);
        assert_eq!(s("x\u{2028}y\u{2029}z"), r#""x\u2028y\u2029z""#);
        // Other characters with the 0xE2 lead byte stay raw.
        assert_eq!(s("€ → ünïcødé 日本"), "\"€ → ünïcødé 日本\"");
        assert_eq!(s("\u{7f}"), "\"\u{7f}\"");
    }

    /// The straightforward escaper the fast path must agree with.
    fn reference_escape(v: &str) -> String {
        let mut out = String::from("\"");
        for ch in v.chars() {
            match ch {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '<' => out.push_str("\\u003c"),
                '>' => out.push_str("\\u003e"),
                '&' => out.push_str("\\u0026"),
                '\u{2028}' => out.push_str("\\u2028"),
                '\u{2029}' => out.push_str("\\u2029"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn fast_path_agrees_with_the_reference_escaper() {
        let alphabet: Vec<char> =
            "abcXYZ019 _-~\"\\<>&\n\r\t\u{0}\u{1}\u{1f}\u{7f}é€→\u{2028}\u{2029}\u{2027}日🙂"
                .chars()
                .collect();
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..5000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 58) as usize;
            let mut st = String::new();
            let mut x = seed;
            for _ in 0..len {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Mostly plain text, so the 8-byte fast path is exercised too.
                let pick = (x >> 33) as usize;
                st.push(if pick.is_multiple_of(4) {
                    alphabet[pick / 4 % alphabet.len()]
                } else {
                    (b'a' + (pick % 26) as u8) as char
                });
            }
            assert_eq!(s(&st), reference_escape(&st), "{st:?}");
        }
    }

    #[test]
    fn floats_format_like_the_reference() {
        let cases = [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.2345e-7, "1.2345e-7"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (-1e21, "-1e+21"),
            (5e-324, "5e-324"),
            (123456789.125, "123456789.125"),
        ];
        for (v, want) in cases {
            assert_eq!(f(v), want, "{v:e}");
        }
        let mut out = Vec::new();
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(write_f64(&mut out, bad), Err(EncodeError));
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        for (input, want) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (&[0xfb, 0xff, 0xbf][..], "+/+/"),
        ] {
            assert_eq!(base64(input), want);
        }
    }

    #[test]
    fn values_encode_compact_and_indented() {
        let v = Value::Map(
            [
                (
                    "b".to_string(),
                    Value::List(vec![Value::Int(-1), Value::UInt(u64::MAX), Value::Null]),
                ),
                ("a".to_string(), Value::Map(BTreeMap::new())),
                ("c".to_string(), Value::List(vec![])),
                ("d".to_string(), Value::Bytes(b"hi".to_vec())),
                ("e".to_string(), Value::Bool(true)),
            ]
            .into(),
        );
        assert_eq!(
            String::from_utf8(to_compact(&v).unwrap()).unwrap(),
            r#"{"a":{},"b":[-1,18446744073709551615,null],"c":[],"d":"aGk=","e":true}"#
        );
        assert_eq!(
            String::from_utf8(to_indented(&v).unwrap()).unwrap(),
            "{\n  \"a\": {},\n  \"b\": [\n    -1,\n    18446744073709551615,\n    null\n  ],\n  \"c\": [],\n  \"d\": \"aGk=\",\n  \"e\": true\n}"
        );
        assert_eq!(to_compact(&Value::Float(f64::NAN)), Err(EncodeError));
        assert_eq!(
            to_compact(&Value::List(vec![Value::Float(f64::INFINITY)])),
            Err(EncodeError)
        );
    }

    #[test]
    fn rows_encode_with_sorted_keys() {
        let row = Row::from_pairs([("name", Value::from("al<i>ce")), ("id", Value::Int(1))]);
        assert_eq!(
            String::from_utf8(row_to_compact(&row).unwrap()).unwrap(),
            r#"{"id":1,"name":"al\u003ci\u003ece"}"#
        );
    }
}
