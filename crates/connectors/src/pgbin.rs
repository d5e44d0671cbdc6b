//! PostgreSQL binary wire format → [`Value`], shared by the streaming query path (sqlx rows
//! arrive in binary format) and the `COPY … TO STDOUT (FORMAT binary)` fast path, so both
//! produce the same values by construction.
//!
//! Columns whose type has no decoder here are selected as `column::text` and decoded as
//! text (money, inet, enums, ranges, geometric types, citext, …), see
//! [`pg_supported`].

use std::fmt::Write as _;

use fetcher_engine::Value;

use crate::values::{self, INFINITY, NAN, NEG_INFINITY};

pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const CHAR: u32 = 18;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    /// `text[]`.
    pub const TEXT_ARRAY: u32 = 1009;
    pub const OID: u32 = 26;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const TIMETZ: u32 = 1266;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
    /// Not PostgreSQL OIDs: decoders for a `SQL_ASCII` database's text, selected as its
    /// stored bytes (`bytea`): text when the bytes are UTF-8, else kept as bytes; JSON
    /// documents likewise.
    pub const RAW_TEXT: u32 = u32::MAX;
    pub const RAW_JSON: u32 = u32::MAX - 1;
}

/// Whether values of this (base) type OID are decoded from binary here.
pub fn pg_supported(o: u32) -> bool {
    use oid::*;
    matches!(
        o,
        BOOL | BYTEA
            | CHAR
            | NAME
            | INT8
            | INT2
            | INT4
            | TEXT
            | OID
            | JSON
            | FLOAT4
            | FLOAT8
            | BPCHAR
            | VARCHAR
            | DATE
            | TIME
            | TIMESTAMP
            | TIMESTAMPTZ
            | INTERVAL
            | TIMETZ
            | NUMERIC
            | UUID
            | JSONB
    )
}

/// Microseconds between 1970-01-01 and PostgreSQL's epoch 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

#[derive(Debug)]
pub struct DecodeError;

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("malformed binary value")
    }
}
impl std::error::Error for DecodeError {}

type R<T> = Result<T, DecodeError>;

fn be<const N: usize>(b: &[u8]) -> R<[u8; N]> {
    b.get(..N)
        .and_then(|s| s.try_into().ok())
        .ok_or(DecodeError)
}

fn exact<const N: usize>(b: &[u8]) -> R<[u8; N]> {
    if b.len() != N {
        return Err(DecodeError);
    }
    be::<N>(b)
}

/// Decodes one non-NULL value of base type `type_oid` (a text-cast column uses `TEXT`).
pub fn decode(type_oid: u32, b: &[u8]) -> R<Value> {
    use oid::*;
    Ok(match type_oid {
        BOOL => Value::Bool(exact::<1>(b)?[0] != 0),
        INT2 => Value::Int(i16::from_be_bytes(exact(b)?) as i64),
        INT4 => Value::Int(i32::from_be_bytes(exact(b)?) as i64),
        INT8 => Value::Int(i64::from_be_bytes(exact(b)?)),
        OID => Value::Int(u32::from_be_bytes(exact(b)?) as i64),
        FLOAT4 => values::float32(f32::from_be_bytes(exact(b)?)),
        FLOAT8 => values::float(f64::from_be_bytes(exact(b)?)),
        NUMERIC => Value::String(numeric(b)?),
        UUID => Value::String(values::uuid(&exact::<16>(b)?)),
        BYTEA => Value::Bytes(b.to_vec()),
        RAW_TEXT => values::text(b),
        RAW_JSON => values::json_bytes(b),
        JSON => values::json(std::str::from_utf8(b).map_err(|_| DecodeError)?),
        JSONB => {
            let (&version, rest) = b.split_first().ok_or(DecodeError)?;
            if version != 1 {
                return Err(DecodeError);
            }
            values::json(std::str::from_utf8(rest).map_err(|_| DecodeError)?)
        }
        DATE => Value::String(date(i32::from_be_bytes(exact(b)?))),
        TIMESTAMP | TIMESTAMPTZ => Value::String(timestamp(i64::from_be_bytes(exact(b)?))),
        TIME => {
            let mut s = String::with_capacity(15);
            values::write_time_of_day(&mut s, i64::from_be_bytes(exact(b)?));
            Value::String(s)
        }
        TIMETZ => {
            let us = i64::from_be_bytes(be(b)?);
            // The wire offset is seconds *west* of UTC.
            let west = i32::from_be_bytes(be(b.get(8..).ok_or(DecodeError)?)?);
            let mut s = String::with_capacity(21);
            values::write_time_of_day(&mut s, us);
            values::write_offset(&mut s, -(west as i64));
            Value::String(s)
        }
        INTERVAL => Value::String(interval(b)?),
        // `"char"` is one byte; a high-bit one is no UTF-8 text: PostgreSQL's own text
        // for it is an octal escape (`\303`), always a string, never bytes.
        CHAR => match b {
            // The zero byte is PostgreSQL's empty `"char"` (`''::"char"`), printed ''.
            [0] | [] => Value::String(String::new()),
            [byte] if *byte >= 0x80 => Value::String(format!("\\{byte:03o}")),
            _ => values::text(b),
        },
        NAME | TEXT | BPCHAR | VARCHAR => values::text(b),
        a if is_array(a) => array(b)?,
        _ => values::text(b),
    })
}

/// Array type OIDs whose element type is decodable.
pub fn array_element(array_oid: u32) -> Option<u32> {
    use oid::*;
    Some(match array_oid {
        1000 => BOOL,
        1001 => BYTEA,
        1002 => CHAR,
        1003 => NAME,
        1016 => INT8,
        1005 => INT2,
        1007 => INT4,
        TEXT_ARRAY => TEXT,
        1028 => OID,
        199 => JSON,
        1021 => FLOAT4,
        1022 => FLOAT8,
        1014 => BPCHAR,
        1015 => VARCHAR,
        1182 => DATE,
        1183 => TIME,
        1115 => TIMESTAMP,
        1185 => TIMESTAMPTZ,
        1187 => INTERVAL,
        1270 => TIMETZ,
        1231 => NUMERIC,
        2951 => UUID,
        3807 => JSONB,
        _ => return None,
    })
}

fn is_array(o: u32) -> bool {
    array_element(o).is_some()
}

/// One-dimensional arrays become lists; n-dimensional ones nested lists. An array whose
/// lower bounds are not all 1 (`'[0:2]={10,20,30}'`) keeps them: it arrives as the tagged
/// object `{"lowerBounds":[0],"values":[10,20,30]}` (docs/encodings.md).
fn array(b: &[u8]) -> R<Value> {
    let ndim = i32::from_be_bytes(be(b)?);
    let elem = u32::from_be_bytes(be(b.get(8..).ok_or(DecodeError)?)?);
    if !(0..=6).contains(&ndim) || !pg_supported(elem) {
        return Err(DecodeError);
    }
    let mut dims = Vec::new();
    let mut lower_bounds = Vec::new();
    let mut pos = 12;
    for _ in 0..ndim {
        let len = i32::from_be_bytes(be(b.get(pos..).ok_or(DecodeError)?)?);
        dims.push(usize::try_from(len).map_err(|_| DecodeError)?);
        lower_bounds.push(i32::from_be_bytes(be(b
            .get(pos + 4..)
            .ok_or(DecodeError)?)?));
        pos += 8;
    }
    let total: usize = if dims.is_empty() {
        0
    } else {
        dims.iter().product()
    };
    let mut flat = Vec::with_capacity(total);
    for _ in 0..total {
        let len = i32::from_be_bytes(be(b.get(pos..).ok_or(DecodeError)?)?);
        pos += 4;
        if len < 0 {
            flat.push(Value::Null);
        } else {
            let end = pos + len as usize;
            flat.push(decode(elem, b.get(pos..end).ok_or(DecodeError)?)?);
            pos = end;
        }
    }
    fn nest(dims: &[usize], it: &mut std::vec::IntoIter<Value>) -> Value {
        match dims.split_first() {
            None => it.next().unwrap_or(Value::Null),
            Some((&n, [])) => Value::List(it.take(n).collect()),
            Some((&n, rest)) => Value::List((0..n).map(|_| nest(rest, it)).collect()),
        }
    }
    if dims.is_empty() {
        return Ok(Value::List(Vec::new()));
    }
    let values = nest(&dims, &mut flat.into_iter());
    if lower_bounds.iter().all(|&l| l == 1) {
        return Ok(values);
    }
    let bounds = lower_bounds.into_iter().map(Value::from).collect();
    Ok(Value::Map(
        [
            ("lowerBounds".to_owned(), Value::List(bounds)),
            ("values".to_owned(), values),
        ]
        .into(),
    ))
}

pub fn date(days: i32) -> String {
    match days {
        i32::MAX => INFINITY.into(),
        i32::MIN => NEG_INFINITY.into(),
        d => values::date_from_unix_days(d as i64 + PG_EPOCH_DAYS),
    }
}

pub fn timestamp(us: i64) -> String {
    match us {
        i64::MAX => INFINITY.into(),
        i64::MIN => NEG_INFINITY.into(),
        // Split at the PostgreSQL epoch, not shifted to the Unix one: the shift would
        // overflow i64 for timestamps past year 294247, which PostgreSQL allows.
        t => values::timestamp_from_epoch_days(PG_EPOCH_DAYS, t),
    }
}

/// ISO 8601 duration: `P<m>M<d>DT<s>S` with each part signed as stored
/// (`P1Y2M3DT4H5M6.000007S`, `PT0S`).
fn interval(b: &[u8]) -> R<String> {
    let b: [u8; 16] = exact(b)?;
    let us = i64::from_be_bytes(b[..8].try_into().unwrap());
    let days = i32::from_be_bytes(b[8..12].try_into().unwrap());
    let months = i32::from_be_bytes(b[12..].try_into().unwrap());
    if us == i64::MAX && days == i32::MAX && months == i32::MAX {
        return Ok(INFINITY.into());
    }
    if us == i64::MIN && days == i32::MIN && months == i32::MIN {
        return Ok(NEG_INFINITY.into());
    }
    let mut s = String::from("P");
    let (y, m) = (months / 12, months % 12);
    if y != 0 {
        let _ = write!(s, "{y}Y");
    }
    if m != 0 {
        let _ = write!(s, "{m}M");
    }
    if days != 0 {
        let _ = write!(s, "{days}D");
    }
    if us != 0 || s.len() == 1 {
        s.push('T');
        let neg = us < 0;
        let a = us.unsigned_abs();
        let (h, mi, sec, frac) = (
            a / 3_600_000_000,
            (a / 60_000_000) % 60,
            (a / 1_000_000) % 60,
            a % 1_000_000,
        );
        let sign = if neg { "-" } else { "" };
        if h != 0 {
            let _ = write!(s, "{sign}{h}H");
        }
        if mi != 0 {
            let _ = write!(s, "{sign}{mi}M");
        }
        if sec != 0 || frac != 0 || (h == 0 && mi == 0) {
            if frac != 0 {
                let _ = write!(s, "{sign}{sec}.{frac:06}S");
            } else {
                let _ = write!(s, "{sign}{sec}S");
            }
        }
    }
    Ok(s)
}

/// Exact decimal text with the declared scale (`dscale`); `NaN`, `Infinity`, `-Infinity`.
fn numeric(b: &[u8]) -> R<String> {
    let ndigits = i16::from_be_bytes(be(b)?) as usize;
    let weight = i16::from_be_bytes(be(&b[2..])?) as i32;
    let sign = u16::from_be_bytes(be(&b[4..])?);
    let dscale = u16::from_be_bytes(be(&b[6..])?) as usize;
    match sign {
        0xC000 => return Ok(NAN.into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return Err(DecodeError),
    }
    if b.len() != 8 + 2 * ndigits {
        return Err(DecodeError);
    }
    let digit = |i: i32| -> u16 {
        if i < 0 || i as usize >= ndigits {
            0
        } else {
            let p = 8 + 2 * i as usize;
            u16::from_be_bytes([b[p], b[p + 1]])
        }
    };
    let mut s = String::with_capacity(ndigits * 4 + dscale + 3);
    if sign == 0x4000 {
        s.push('-');
    }
    // Base-10000 digits as text, without `fmt` (this runs for every numeric value).
    let group = |s: &mut String, d: u16, leading: bool| {
        let ds = [d / 1000, d / 100 % 10, d / 10 % 10, d % 10];
        let skip = if leading {
            ds.iter().take(3).take_while(|&&x| x == 0).count()
        } else {
            0
        };
        for x in &ds[skip..] {
            s.push(char::from(b'0' + *x as u8));
        }
    };
    if weight < 0 {
        s.push('0');
    } else {
        for i in 0..=weight {
            group(&mut s, digit(i), i == 0);
        }
    }
    if dscale > 0 {
        s.push('.');
        let end = s.len() + dscale;
        let mut i = weight + 1;
        while s.len() < end {
            group(&mut s, digit(i), false);
            i += 1;
        }
        s.truncate(end);
    }
    Ok(s)
}

/// Incremental parser of `COPY … (FORMAT binary)` output. Feed chunks in order; complete
/// tuples come out as raw field slices (`None` = NULL).
pub struct CopyBinaryParser {
    buf: bytes::BytesMut,
    header_done: bool,
    pub finished: bool,
}

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

impl Default for CopyBinaryParser {
    fn default() -> Self {
        Self::new()
    }
}

impl CopyBinaryParser {
    pub fn new() -> Self {
        CopyBinaryParser {
            buf: bytes::BytesMut::new(),
            header_done: false,
            finished: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Like `feed` + `drain`, but parses `chunk` in place when nothing is buffered (the
    /// common case: PostgreSQL sends one row per CopyData message); only an incomplete
    /// tail is copied.
    pub fn feed_and_drain(
        &mut self,
        chunk: &[u8],
        decoders: &[u32],
        row: impl FnMut(Vec<Value>),
    ) -> R<usize> {
        if !self.buf.is_empty() || !self.header_done {
            self.feed(chunk);
            return self.drain(decoders, row);
        }
        let (produced, used) = parse_tuples(chunk, decoders, &mut self.finished, row)?;
        self.buf.extend_from_slice(&chunk[used..]);
        Ok(produced)
    }

    /// Calls `row` for every complete tuple buffered so far, decoding each field with
    /// `decoders[i]`. Returns the number of rows produced.
    pub fn drain(&mut self, decoders: &[u32], row: impl FnMut(Vec<Value>)) -> R<usize> {
        let mut pos = 0usize;
        let data = &self.buf[..];
        if !self.header_done {
            if data.len() < 19 {
                return Ok(0);
            }
            if &data[..11] != SIGNATURE {
                return Err(DecodeError);
            }
            let ext = u32::from_be_bytes(be(&data[15..])?) as usize;
            if data.len() < 19 + ext {
                return Ok(0);
            }
            pos = 19 + ext;
            self.header_done = true;
        }
        let (produced, used) = parse_tuples(&data[pos..], decoders, &mut self.finished, row)?;
        bytes::Buf::advance(&mut self.buf, pos + used);
        Ok(produced)
    }
}

/// Parses complete tuples from `data`; returns (rows, bytes consumed).
fn parse_tuples(
    data: &[u8],
    decoders: &[u32],
    finished: &mut bool,
    mut row: impl FnMut(Vec<Value>),
) -> R<(usize, usize)> {
    let mut pos = 0usize;
    {
        let mut produced = 0;
        'tuples: loop {
            let start = pos;
            let Some(n) = data.get(pos..pos + 2) else {
                break;
            };
            let n = i16::from_be_bytes([n[0], n[1]]);
            pos += 2;
            if n == -1 {
                *finished = true;
                break;
            }
            if n as usize != decoders.len() {
                return Err(DecodeError);
            }
            let mut vals = Vec::with_capacity(decoders.len());
            for &d in decoders {
                let Some(l) = data.get(pos..pos + 4) else {
                    pos = start;
                    break 'tuples;
                };
                let len = i32::from_be_bytes([l[0], l[1], l[2], l[3]]);
                pos += 4;
                if len < 0 {
                    vals.push(Value::Null);
                    continue;
                }
                let end = pos + len as usize;
                let Some(field) = data.get(pos..end) else {
                    pos = start;
                    break 'tuples;
                };
                vals.push(decode(d, field)?);
                pos = end;
            }
            row(vals);
            produced += 1;
        }
        Ok((produced, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(ndigits: i16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(ndigits.to_be_bytes());
        v.extend(weight.to_be_bytes());
        v.extend(sign.to_be_bytes());
        v.extend(dscale.to_be_bytes());
        for d in digits {
            v.extend(d.to_be_bytes());
        }
        v
    }

    #[test]
    fn numerics_are_exact() {
        assert_eq!(numeric(&num(2, 0, 0, 2, &[1500, 0])).unwrap(), "1500.00");
        assert_eq!(numeric(&num(2, 0, 0, 2, &[89, 9900])).unwrap(), "89.99");
        assert_eq!(numeric(&num(1, -1, 0x4000, 4, &[5])).unwrap(), "-0.0005");
        assert_eq!(numeric(&num(0, 0, 0, 0, &[])).unwrap(), "0");
        assert_eq!(numeric(&num(0, 0, 0, 3, &[])).unwrap(), "0.000");
        assert_eq!(
            numeric(&num(3, 2, 0, 0, &[1, 2345, 6789])).unwrap(),
            "123456789"
        );
        assert_eq!(numeric(&num(0, 0, 0xC000, 0, &[])).unwrap(), "NaN");
    }

    #[test]
    fn copy_parser_handles_any_chunking() {
        let mut data = SIGNATURE.to_vec();
        data.extend(0u32.to_be_bytes());
        data.extend(0u32.to_be_bytes());
        for i in 0..5i32 {
            data.extend(2i16.to_be_bytes());
            data.extend(4i32.to_be_bytes());
            data.extend(i.to_be_bytes());
            if i == 2 {
                data.extend((-1i32).to_be_bytes());
            } else {
                data.extend(1i32.to_be_bytes());
                data.extend(b"x");
            }
        }
        data.extend((-1i16).to_be_bytes());
        for step in [1, 2, 3, 7, 19, 23, 1000] {
            let mut p = CopyBinaryParser::new();
            let mut rows = Vec::new();
            for chunk in data.chunks(step) {
                p.feed_and_drain(chunk, &[oid::INT4, oid::TEXT], |r| rows.push(r))
                    .unwrap();
            }
            assert!(p.finished, "{step}");
            assert_eq!(rows.len(), 5, "{step}");
            assert_eq!(rows[2], vec![Value::Int(2), Value::Null]);
            assert_eq!(rows[4], vec![Value::Int(4), Value::from("x")]);
        }
    }

    #[test]
    fn special_dates() {
        assert_eq!(date(i32::MAX), "infinity");
        assert_eq!(timestamp(i64::MIN), "-infinity");
        assert_eq!(date(0), "2000-01-01T00:00:00Z");
        assert_eq!(timestamp(1), "2000-01-01T00:00:00.000001Z");
    }

    #[test]
    fn intervals() {
        let iv = |us: i64, d: i32, m: i32| {
            let mut v = us.to_be_bytes().to_vec();
            v.extend(d.to_be_bytes());
            v.extend(m.to_be_bytes());
            interval(&v).unwrap()
        };
        assert_eq!(iv(0, 0, 0), "PT0S");
        assert_eq!(
            iv(4 * 3_600_000_000 + 5 * 60_000_000 + 6_000_007, 3, 14),
            "P1Y2M3DT4H5M6.000007S"
        );
        assert_eq!(iv(-1_000_000, 0, 0), "PT-1S");
    }
}
