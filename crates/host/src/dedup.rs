//! The canonical request hash of job de-duplication (docs/api.md, "Duplicates").
//!
//! The hash is the lower-case hex SHA-256 of compact JSON of exactly this shape:
//!
//! ```text
//! {"dataRequest":{"mappedFields":{…},"filters":{…}},"metadata":{…}}
//! ```
//!
//! encoded the way the reference's encoder does it, so a Rust Manager and reference
//! instances compute the same hash for the same request:
//!
//! * object keys sorted byte-wise at every level; arrays keep request order;
//! * `filters` and `metadata` omitted when empty;
//! * filter conditions list their operators in the fixed order `eq, gt, gte, lt, lte,
//!   between, in, nin, ne, like`, each omitted when absent or empty (unknown operators
//!   were already dropped when the request was decoded);
//! * numbers re-encoded from `f64` with the shortest round-trip text: plain decimal for
//!   `1e-6 <= |x| < 1e21`, exponent form (`1e+21`, `1e-7`) otherwise; except an integer
//!   no double equals (beyond 2^53: `9007199254740993`), written as its digits, so two
//!   such requests never share a hash (the reference merged them). The API refuses a
//!   filter number that is neither (more digits than a double holds), so every hashed
//!   number is the number the job reads with;
//! * strings escaped with `<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes, the short
//!   escapes `\n \r \t \b \f`, other control characters as `\u00xx` (lower-case hex).
//!
//! Beyond the reference: a request that names a result format (`resultFormat`) appends
//! `"resultFormat":"v1"|"v2"` as a last top-level key, so the same extraction asked in two
//! formats is two jobs; an incremental request appends `"incremental":{…}` (its reads,
//! keys sorted, as JSON) and `"syncId":"…"` when it names a sync. Requests without them
//! hash exactly like the reference.

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::ResultFormat;

/// Lowercase hex of the request hash (the engine's, shared by every digest).
pub use fetcher_engine::hex;

/// `datasource → table → [field]`.
pub type MappedFields = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// `datasource → table → field → condition`, the engine's typed filters.
pub use fetcher_engine::Filters;

/// What the hash covers.
#[derive(Debug, Clone, Copy)]
pub struct HashedRequest<'a> {
    pub mapped_fields: &'a MappedFields,
    pub filters: &'a Filters,
    pub metadata: &'a serde_json::Map<String, Value>,
    pub result_format: Option<ResultFormat>,
    pub incremental: &'a crate::incremental::Incremental,
    pub sync_id: Option<&'a str>,
    /// A schedule run's due time ([`crate::schedules`]).
    pub scheduled_for: Option<fetcher_engine::Timestamp>,
}

/// Lower-case hex SHA-256 of the canonical request, incremental parts included.
pub fn request_hash_of(r: &HashedRequest<'_>) -> String {
    let mut bytes = canonical_request(r.mapped_fields, r.filters, r.metadata, r.result_format);
    if !r.incremental.is_empty() || r.sync_id.is_some() || r.scheduled_for.is_some() {
        // Appended inside the top-level object, after what the reference hashes.
        bytes.pop();
        let mut tail = String::new();
        if !r.incremental.is_empty() {
            tail.push_str(",\"incremental\":");
            value(
                &mut tail,
                &serde_json::to_value(r.incremental).expect("incremental reads are JSON"),
            );
        }
        if let Some(id) = r.sync_id {
            tail.push_str(",\"syncId\":");
            string(&mut tail, id);
        }
        if let Some(due) = r.scheduled_for {
            tail.push_str(",\"scheduledFor\":");
            string(&mut tail, &due.to_string());
        }
        tail.push('}');
        bytes.extend_from_slice(tail.as_bytes());
    }
    hex(&Sha256::digest(&bytes))
}

/// Lower-case hex SHA-256 of the canonical request.
pub fn request_hash(
    mapped_fields: &MappedFields,
    filters: &Filters,
    metadata: &serde_json::Map<String, Value>,
    result_format: Option<ResultFormat>,
) -> String {
    let bytes = canonical_request(mapped_fields, filters, metadata, result_format);
    hex(&Sha256::digest(&bytes))
}

/// The canonical bytes that are hashed.
pub fn canonical_request(
    mapped_fields: &MappedFields,
    filters: &Filters,
    metadata: &serde_json::Map<String, Value>,
    result_format: Option<ResultFormat>,
) -> Vec<u8> {
    let mut out = String::with_capacity(256);
    out.push_str("{\"dataRequest\":{\"mappedFields\":{");
    for (i, (ds, tables)) in mapped_fields.iter().enumerate() {
        comma(&mut out, i);
        string(&mut out, ds);
        out.push_str(":{");
        for (j, (table, fields)) in tables.iter().enumerate() {
            comma(&mut out, j);
            string(&mut out, table);
            out.push_str(":[");
            for (k, f) in fields.iter().enumerate() {
                comma(&mut out, k);
                string(&mut out, f);
            }
            out.push(']');
        }
        out.push('}');
    }
    out.push('}');
    if !filters.is_empty() {
        out.push_str(",\"filters\":{");
        for (i, (ds, tables)) in filters.iter().enumerate() {
            comma(&mut out, i);
            string(&mut out, ds);
            out.push_str(":{");
            for (j, (table, fields)) in tables.iter().enumerate() {
                comma(&mut out, j);
                string(&mut out, table);
                out.push_str(":{");
                for (k, (field, condition)) in fields.iter().enumerate() {
                    comma(&mut out, k);
                    string(&mut out, field);
                    out.push_str(":{");
                    // Canonical operator order; an empty list hashes as absent.
                    let present = condition.iter().filter(|(_, v)| !v.is_empty());
                    for (n, (op, values)) in present.enumerate() {
                        comma(&mut out, n);
                        string(&mut out, op.as_str());
                        out.push_str(":[");
                        for (m, v) in values.iter().enumerate() {
                            comma(&mut out, m);
                            value(&mut out, v);
                        }
                        out.push(']');
                    }
                    out.push('}');
                }
                out.push('}');
            }
            out.push('}');
        }
        out.push('}');
    }
    out.push('}');
    if !metadata.is_empty() {
        out.push_str(",\"metadata\":");
        object(&mut out, metadata);
    }
    if let Some(f) = result_format {
        out.push_str(",\"resultFormat\":");
        string(&mut out, f.as_str());
    }
    out.push('}');
    out.into_bytes()
}

fn comma(out: &mut String, i: usize) {
    if i > 0 {
        out.push(',');
    }
}

fn object(out: &mut String, map: &serde_json::Map<String, Value>) {
    // serde_json's map is a BTreeMap (no `preserve_order`), but sort anyway so the
    // canonical form never depends on a feature flag.
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.into_iter().enumerate() {
        comma(out, i);
        string(out, k);
        out.push(':');
        value(out, &map[k]);
    }
    out.push('}');
}

/// A number as the reference hashes it (re-encoded from its double), unless the double is
/// not the number: an integer beyond 2^53 that no double equals (`9007199254740993`)
/// hashes as its own digits, so two such jobs are never one.
fn exact_number(out: &mut String, n: &serde_json::Number) {
    let integer = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
    match (integer, n.as_f64()) {
        (Some(i), Some(f)) if f as i128 == i => number(out, f),
        (Some(i), _) => out.push_str(&i.to_string()),
        (None, f) => number(out, f.unwrap_or(0.0)),
    }
}

fn value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => exact_number(out, n),
        Value::String(s) => string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                comma(out, i);
                value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => object(out, map),
    }
}

/// The reference encoder's float formatting (shortest round-trip text).
fn number(out: &mut String, x: f64) {
    if !x.is_finite() {
        out.push_str("null");
        return;
    }
    let abs = x.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        out.push_str(&format!("{x}"));
    } else {
        // Rust gives `1e21` / `1.5e-7`; the reference writes `1e+21` / `1.5e-7`.
        let s = format!("{x:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                out.push_str(mantissa);
                out.push_str("e+");
                out.push_str(exp);
            }
            _ => out.push_str(&s),
        }
    }
}

/// A JSON string as the reference's encoder writes it (`<`, `>`, `&`, U+2028 and U+2029
/// escaped): the engine's one escaper, shared with the result encoding.
fn string(out: &mut String, s: &str) {
    let mut buf = Vec::with_capacity(s.len() + 2);
    fetcher_engine::json::write_str(&mut buf, s);
    out.push_str(std::str::from_utf8(&buf).expect("the escaper writes UTF-8"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mapped(v: Value) -> MappedFields {
        serde_json::from_value(v).unwrap()
    }

    fn meta(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn canonical_form_matches_the_reference_encoder() {
        let m =
            mapped(json!({"pg": {"users": ["name", "id"], "a.b": ["x"]}, "alpha": {"t": ["f"]}}));
        let filters: Filters = serde_json::from_value(json!({"pg": {"users": {"id": {"like": ["a%"], "eq": [1.0, 2.5], "between": [1e21, 1e-7]}}}})).unwrap();
        let md =
            meta(json!({"source": "crm", "z": {"b": 1, "a": "<&>\u{2028}\n\u{1}"}, "n": null}));
        let got = String::from_utf8(canonical_request(&m, &filters, &md, None)).unwrap();
        assert_eq!(
            got,
            r#"{"dataRequest":{"mappedFields":{"alpha":{"t":["f"]},"pg":{"a.b":["x"],"users":["name","id"]}},"filters":{"pg":{"users":{"id":{"eq":[1,2.5],"between":[1e+21,1e-7],"like":["a%"]}}}}},"metadata":{"n":null,"source":"crm","z":{"a":"\u003c\u0026\u003e\u2028\n\u0001","b":1}}}"#
        );
    }

    #[test]
    fn empty_parts_are_omitted_and_order_does_not_matter() {
        let a = mapped(json!({"pg": {"t": ["id"]}}));
        let got = String::from_utf8(canonical_request(
            &a,
            &Filters::new(),
            &serde_json::Map::new(),
            None,
        ))
        .unwrap();
        assert_eq!(
            got,
            r#"{"dataRequest":{"mappedFields":{"pg":{"t":["id"]}}}}"#
        );
        let m1 = meta(serde_json::from_str(r#"{"source":"x","b":1,"a":2}"#).unwrap());
        let m2 = meta(serde_json::from_str(r#"{"a":2,"source":"x","b":1.0}"#).unwrap());
        assert_eq!(
            request_hash(&a, &Filters::new(), &m1, None),
            request_hash(&a, &Filters::new(), &m2, None)
        );
        let other = meta(json!({"source": "x", "b": 1, "a": 3}));
        assert_ne!(
            request_hash(&a, &Filters::new(), &m1, None),
            request_hash(&a, &Filters::new(), &other, None)
        );
        assert_ne!(
            request_hash(&a, &Filters::new(), &m1, None),
            request_hash(&a, &Filters::new(), &m1, Some(ResultFormat::V1))
        );
        let h = request_hash(&a, &Filters::new(), &m1, None);
        assert_eq!(h.len(), 64);
        assert!(
            h.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
    }

    /// #29: integers no double equals hash as their digits; every number a double holds
    /// hashes as the reference's (from the double).
    #[test]
    fn integers_beyond_a_double_hash_exactly() {
        let m = mapped(json!({"pg": {"t": ["id"]}}));
        let md = meta(json!({"source": "x"}));
        let hash = |v: Value| {
            let f: Filters =
                serde_json::from_value(json!({"pg": {"t": {"id": {"eq": [v]}}}})).unwrap();
            request_hash(&m, &f, &md, None)
        };
        let two53 = 1u64 << 53;
        assert_ne!(hash(json!(two53 + 1)), hash(json!(two53 + 2)));
        assert_ne!(hash(json!(two53 + 1)), hash(json!(two53)));
        assert_ne!(hash(json!(u64::MAX)), hash(json!(u64::MAX - 1)));
        assert_ne!(hash(json!(i64::MIN + 1)), hash(json!(i64::MIN + 2)));
        // What a double holds exactly is the reference's hash: 2^53 as an integer and as
        // a float are one request, and so are 1 and 1.0.
        assert_eq!(hash(json!(two53)), hash(json!(two53 as f64)));
        assert_eq!(hash(json!(1)), hash(json!(1.0)));
        let f: Filters = serde_json::from_value(
            json!({"pg": {"t": {"id": {"in": [two53 + 1, u64::MAX, -9007199254740993i64]}}}}),
        )
        .unwrap();
        let got = String::from_utf8(canonical_request(&m, &f, &md, None)).unwrap();
        assert!(
            got.contains(r#""in":[9007199254740993,18446744073709551615,-9007199254740993]"#),
            "{got}"
        );
    }

    #[test]
    fn number_formatting() {
        let cases = [
            (1000.0, "1000"),
            (89.99, "89.99"),
            (1.0, "1"),
            (1e21, "1e+21"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (-2.5, "-2.5"),
            (0.0, "0"),
            (123456789012345680000.0, "123456789012345680000"),
        ];
        for (x, want) in cases {
            let mut s = String::new();
            number(&mut s, x);
            assert_eq!(s, want, "{x}");
        }
    }
}
