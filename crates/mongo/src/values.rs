//! BSON → the engine's values, losslessly (docs/encodings.md, "MongoDB").
//!
//! The reference's forms are kept where they are sound (ObjectId as its hex, Decimal128 as
//! its exact text, dates as RFC 3339 UTC, a generic binary as hex); where the reference
//! lost information (every 16-byte binary read as a UUID, Timestamp and Regex as Go
//! structs) the value is MongoDB's canonical Extended JSON v2, which says its type and
//! round-trips.

use fetcher_connect::values::{float, timestamp_from_epoch_days, uuid};
use fetcher_engine::Value;
use mongodb::bson::raw::{RawArray, RawBsonRef, RawDocument};
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Bson, DateTime};

/// Nesting deeper than this is kept as Extended JSON text rather than a tree (the engine
/// bounds its own recursion).
const MAX_DEPTH: usize = 64;

/// One BSON value.
pub fn value(v: RawBsonRef<'_>) -> Value {
    value_at(v, 0)
}

fn value_at(v: RawBsonRef<'_>, depth: usize) -> Value {
    match v {
        RawBsonRef::Null => Value::Null,
        RawBsonRef::Boolean(b) => Value::Bool(b),
        RawBsonRef::Int32(i) => Value::Int(i64::from(i)),
        RawBsonRef::Int64(i) => Value::Int(i),
        RawBsonRef::Double(f) => float(f),
        RawBsonRef::String(s) => Value::String(s.to_owned()),
        RawBsonRef::ObjectId(oid) => Value::String(oid.to_hex()),
        RawBsonRef::DateTime(d) => Value::String(date_time(d)),
        RawBsonRef::Decimal128(d) => Value::String(decimal128_text(d.bytes())),
        RawBsonRef::Binary(b) => match (b.subtype, <&[u8; 16]>::try_from(b.bytes)) {
            (BinarySubtype::Uuid | BinarySubtype::UuidOld, Ok(bytes)) => Value::String(uuid(bytes)),
            (BinarySubtype::Generic, _) => Value::String(hex(b.bytes)),
            _ => extended(v),
        },
        RawBsonRef::Document(d) if depth < MAX_DEPTH => document(d, depth + 1),
        RawBsonRef::Array(a) if depth < MAX_DEPTH => array(a, depth + 1),
        _ => extended(v),
    }
}

fn document(d: &RawDocument, depth: usize) -> Value {
    let mut map = std::collections::BTreeMap::new();
    for entry in d {
        match entry {
            Ok((k, v)) => {
                map.insert(k.to_owned(), value_at(v, depth));
            }
            Err(_) => return Value::Null,
        }
    }
    Value::Map(map)
}

fn array(a: &RawArray, depth: usize) -> Value {
    Value::List(
        a.into_iter()
            .map(|v| v.map_or(Value::Null, |v| value_at(v, depth)))
            .collect(),
    )
}

/// A value in canonical Extended JSON v2 (`{"$timestamp": {"t": …, "i": …}}`,
/// `{"$regularExpression": …}`, `{"$binary": …}`, `{"$minKey": 1}`, …).
fn extended(v: RawBsonRef<'_>) -> Value {
    match Bson::try_from(v.to_raw_bson()) {
        Ok(b) => Value::Json(b.into_canonical_extjson().to_string().into_boxed_str()),
        Err(_) => Value::Null,
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` for any BSON date (years before 1 and after 9999 in the
/// expanded form docs/encodings.md gives).
pub fn date_time(d: DateTime) -> String {
    let ms = d.timestamp_millis();
    timestamp_from_epoch_days(ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000) * 1000)
}

/// A Decimal128's canonical text (the BSON Decimal128 specification's to-string, as the
/// server and the driver print it: `12.50`, `-0`, `1.2E+7`, `NaN`), straight from its
/// 16 little-endian bytes (the driver's own formatter goes through a bit vector and cost
/// a tenth of a read's CPU).
pub fn decimal128_text(bytes: [u8; 16]) -> String {
    let x = u128::from_le_bytes(bytes);
    let negative = x >> 127 == 1;
    let combination = (x >> 122) & 0x1f;
    let (exponent_bits, coefficient) = if combination >> 3 == 0b11 {
        match combination {
            0b11110 => return if negative { "-Infinity" } else { "Infinity" }.into(),
            0b11111 => return "NaN".into(),
            // The implicit 100 prefix makes the coefficient exceed the maximum: zero.
            _ => ((x >> 111) & 0x3fff, 0),
        }
    } else {
        ((x >> 113) & 0x3fff, x & ((1u128 << 113) - 1))
    };
    // The largest coefficient: 34 nines.
    let coefficient = if coefficient > 10u128.pow(34) - 1 {
        0
    } else {
        coefficient
    };
    let exponent = exponent_bits as i64 - 6176;
    let digits = coefficient.to_string();
    let adjusted = exponent + digits.len() as i64 - 1;
    let mut s = String::with_capacity(digits.len() + 8);
    if negative {
        s.push('-');
    }
    if exponent <= 0 && adjusted >= -6 {
        if exponent == 0 {
            s.push_str(&digits);
        } else {
            let point = digits.len() as i64 + exponent;
            if point > 0 {
                s.push_str(&digits[..point as usize]);
                s.push('.');
                s.push_str(&digits[point as usize..]);
            } else {
                s.push_str("0.");
                s.extend(std::iter::repeat_n('0', (-point) as usize));
                s.push_str(&digits);
            }
        }
    } else {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('E');
        if adjusted >= 0 {
            s.push('+');
        }
        s.push_str(&adjusted.to_string());
    }
    s
}

fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    s
}

/// The BSON type names discovery reports (MongoDB's `$type` aliases).
pub fn type_name(v: RawBsonRef<'_>) -> &'static str {
    match v {
        RawBsonRef::Double(_) => "double",
        RawBsonRef::String(_) => "string",
        RawBsonRef::Document(_) => "object",
        RawBsonRef::Array(_) => "array",
        RawBsonRef::Binary(_) => "binData",
        RawBsonRef::Undefined => "undefined",
        RawBsonRef::ObjectId(_) => "objectId",
        RawBsonRef::Boolean(_) => "bool",
        RawBsonRef::DateTime(_) => "date",
        RawBsonRef::Null => "null",
        RawBsonRef::RegularExpression(_) => "regex",
        RawBsonRef::DbPointer(_) => "dbPointer",
        RawBsonRef::JavaScriptCode(_) => "javascript",
        RawBsonRef::Symbol(_) => "symbol",
        RawBsonRef::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        RawBsonRef::Int32(_) => "int",
        RawBsonRef::Timestamp(_) => "timestamp",
        RawBsonRef::Int64(_) => "long",
        RawBsonRef::Decimal128(_) => "decimal",
        RawBsonRef::MinKey => "minKey",
        RawBsonRef::MaxKey => "maxKey",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{Binary, doc, oid::ObjectId};

    fn of(b: Bson) -> serde_json::Value {
        let d = mongodb::bson::RawDocumentBuf::from_document(&doc! {"v": b}).unwrap();
        value(d.get("v").unwrap().unwrap()).to_json()
    }

    #[test]
    fn decimal128_text_is_the_drivers() {
        for text in [
            "0",
            "-0",
            "12.50",
            "0.001",
            "-0.000001",
            "0.0000001",
            "1E+3",
            "1.000E+3",
            "123456789012345678901234567890.1234",
            "9999999999999999999999999999999999",
            "1E-6176",
            "9.999999999999999999999999999999999E+6144",
            "-1.5E+10",
            "0E+10",
            "0.00",
            "NaN",
            "Infinity",
            "-Infinity",
            "7",
            "100",
            "1.23E-7",
        ] {
            let d: mongodb::bson::Decimal128 = text.parse().unwrap();
            assert_eq!(decimal128_text(d.bytes()), d.to_string(), "{text}");
        }
        // A non-canonical encoding (the 11 form with a coefficient past the maximum) is 0.
        let mut b = [0u8; 16];
        b[15] = 0b0110_0000;
        b[14] = 0b1000_0000;
        assert_eq!(
            decimal128_text(b),
            mongodb::bson::Decimal128::from_bytes(b).to_string()
        );
    }

    #[test]
    fn every_bson_type_has_one_lossless_form() {
        use serde_json::json;
        let oid = ObjectId::parse_str("64b7f0c2a1b2c3d4e5f60718").unwrap();
        assert_eq!(of(Bson::ObjectId(oid)), json!("64b7f0c2a1b2c3d4e5f60718"));
        assert_eq!(
            of(Bson::Int64(9_007_199_254_740_993)),
            json!(9_007_199_254_740_993i64)
        );
        assert_eq!(of(Bson::Int32(-7)), json!(-7));
        assert_eq!(of(Bson::Double(f64::NAN)), json!("NaN"));
        assert_eq!(of(Bson::Double(f64::NEG_INFINITY)), json!("-Infinity"));
        assert_eq!(of(Bson::Double(1500.0)), json!(1500.0));
        assert_eq!(
            of(Bson::DateTime(DateTime::from_millis(-1))),
            json!("1969-12-31T23:59:59.999Z")
        );
        assert_eq!(
            of(Bson::DateTime(DateTime::from_millis(0))),
            json!("1970-01-01T00:00:00Z")
        );
        let u = [7u8; 16];
        assert_eq!(
            of(Bson::Binary(Binary {
                subtype: BinarySubtype::Uuid,
                bytes: u.to_vec()
            })),
            json!("07070707-0707-0707-0707-070707070707")
        );
        // A 16-byte generic binary is bytes, not a UUID (the reference read it as one).
        assert_eq!(
            of(Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: u.to_vec()
            })),
            json!("07070707070707070707070707070707")
        );
        assert_eq!(
            of(Bson::Binary(Binary {
                subtype: BinarySubtype::UserDefined(0x80),
                bytes: vec![1, 2]
            })),
            json!({"$binary": {"base64": "AQI=", "subType": "80"}})
        );
        assert_eq!(
            of(Bson::Timestamp(mongodb::bson::Timestamp {
                time: 5,
                increment: 2
            })),
            json!({"$timestamp": {"t": 5, "i": 2}})
        );
        assert_eq!(of(Bson::MinKey), json!({"$minKey": 1}));
        assert_eq!(of(Bson::MaxKey), json!({"$maxKey": 1}));
        assert_eq!(
            of(Bson::Document(doc! {"b": 1, "a": [true, Bson::Null]})),
            json!({"a": [true, null], "b": 1})
        );
        let d: mongodb::bson::Decimal128 = "12.50".parse().unwrap();
        assert_eq!(of(Bson::Decimal128(d)), json!("12.50"));
    }
}
