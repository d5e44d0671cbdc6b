//! Filters (docs/filters.md) → a MongoDB query document with the engine's semantics,
//! not the reference's: every operator of a field applies (joined with `$and`, where the
//! reference let one overwrite another), values are converted to the type the field holds
//! (an ObjectId from its hex, a date from RFC 3339, an exact decimal to Decimal128, so a
//! filter on such a field matches), and `like` patterns are escaped.
//!
//! What `null` and a missing field mean, per operator: `eq [null]` matches a field that
//! is null **or missing**; `ne [null]` one that is present and not null; `ne`/`nin` of
//! values never match a null or missing field (as SQL's `<>` never matches NULL), and a
//! `null` inside an `in`/`nin`/`eq` list matches nothing (so `nin` with one matches no
//! document); ordered comparisons (`gt`…`between`) compare within the value's type, as
//! MongoDB does, and never match null or missing.

use fetcher_engine::{Category, Condition, EngineError, Operator, Result, Timestamp};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, DateTime, Decimal128, Document, doc};
use serde_json::Value as J;

use crate::discover::Shape;
use fetcher_connect::error::msg;

fn refused(m: &'static str) -> EngineError {
    EngineError::new(Category::Validation, m)
}

/// The query document of `filters` (field → condition) on a collection of `shape`.
pub fn query<'a>(
    shape: &Shape,
    filters: impl IntoIterator<Item = (&'a String, &'a Condition)>,
) -> Result<Vec<Document>> {
    let mut clauses = Vec::new();
    for (field, condition) in filters {
        if !shape.has(field) {
            return Err(refused(msg::FILTER_UNKNOWN_COLUMN));
        }
        if condition.is_empty() {
            return Err(refused(msg::FILTER_EMPTY));
        }
        let kind = shape.kind(field);
        for (op, values) in condition.iter() {
            clauses.push(clause(field, kind, op, values)?);
        }
    }
    Ok(clauses)
}

/// Matches no document.
fn nothing(field: &str) -> Document {
    doc! { field: { "$in": [] } }
}

fn clause(field: &str, kind: Option<&str>, op: Operator, values: &[J]) -> Result<Document> {
    if values.is_empty() {
        return Err(refused(msg::FILTER_EMPTY));
    }
    let one = || {
        if values.len() == 1 {
            Ok(&values[0])
        } else {
            Err(refused(msg::FILTER_ARITY))
        }
    };
    let ordered = |v: &J| {
        if v.is_null() {
            Err(refused(msg::FILTER_VALUE_TYPE))
        } else {
            typed(kind, v)
        }
    };
    // Values of a list, a `null` among them dropped (it matches nothing).
    let listed = || -> Result<(Vec<Bson>, bool)> {
        let had_null = values.iter().any(J::is_null);
        let list = values
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| typed(kind, v))
            .collect::<Result<Vec<_>>>()?;
        Ok((list, had_null))
    };
    Ok(match op {
        Operator::Eq if values.len() == 1 && values[0].is_null() => doc! { field: Bson::Null },
        Operator::Eq | Operator::In => {
            let (list, _) = listed()?;
            if list.is_empty() {
                nothing(field)
            } else {
                doc! { field: { "$in": list } }
            }
        }
        Operator::Ne if values.len() == 1 && values[0].is_null() => {
            doc! { field: { "$ne": Bson::Null } }
        }
        Operator::Ne | Operator::Nin => {
            let (mut list, had_null) = listed()?;
            if had_null {
                nothing(field)
            } else {
                list.push(Bson::Null);
                doc! { field: { "$nin": list } }
            }
        }
        Operator::Gt => doc! { field: { "$gt": ordered(one()?)? } },
        Operator::Gte => doc! { field: { "$gte": ordered(one()?)? } },
        Operator::Lt => doc! { field: { "$lt": ordered(one()?)? } },
        Operator::Lte => doc! { field: { "$lte": ordered(one()?)? } },
        Operator::Between => {
            let [a, b] = values else {
                return Err(refused(msg::FILTER_ARITY));
            };
            doc! { field: { "$gte": ordered(a)?, "$lte": ordered(b)? } }
        }
        Operator::Like => {
            let J::String(pattern) = one()? else {
                return Err(refused(msg::FILTER_VALUE_TYPE));
            };
            if !matches!(kind, None | Some("string")) {
                return Err(refused(msg::FILTER_COLUMN_TYPE));
            }
            doc! { field: { "$regex": like_regex(pattern), "$options": "is" } }
        }
    })
}

/// A `like` pattern as an anchored regular expression: `%` any run, `_` one character,
/// everything else literal (the reference left regex metacharacters live). Matched
/// case-insensitively, as the reference did.
pub fn like_regex(pattern: &str) -> String {
    let mut re = String::with_capacity(pattern.len() + 8);
    re.push('^');
    for c in pattern.chars() {
        match c {
            '%' => re.push_str(".*"),
            '_' => re.push('.'),
            c if "\\^$.|?*+()[]{}".contains(c) => {
                re.push('\\');
                re.push(c);
            }
            c => re.push(c),
        }
    }
    re.push('$');
    re
}

/// `v` as the BSON type of a field seen holding `kind` (its one non-null type), or by
/// its JSON form when the field holds several or none was seen. A value that cannot be
/// of the field's type is refused, never compared as something else (which would match
/// nothing and look like an empty table).
pub fn typed(kind: Option<&str>, v: &J) -> Result<Bson> {
    let wrong = || refused(msg::FILTER_VALUE_TYPE);
    Ok(match (kind, v) {
        (_, J::Null) => Bson::Null,
        (Some("objectId"), J::String(s)) => {
            Bson::ObjectId(ObjectId::parse_str(s).map_err(|_| wrong())?)
        }
        (Some("date"), J::String(s)) => Bson::DateTime(date(s).ok_or_else(wrong)?),
        (Some("decimal"), J::String(s)) => Bson::Decimal128(decimal(s).ok_or_else(wrong)?),
        (Some("decimal"), J::Number(n)) => {
            Bson::Decimal128(decimal(&n.to_string()).ok_or_else(wrong)?)
        }
        (Some("int" | "long" | "double"), J::Number(n)) => number(n),
        (Some("string"), J::String(s)) => Bson::String(s.clone()),
        (Some("bool"), J::Bool(b)) => Bson::Boolean(*b),
        (
            Some("objectId" | "date" | "decimal" | "int" | "long" | "double" | "string" | "bool"),
            _,
        ) => return Err(wrong()),
        (_, J::Number(n)) => number(n),
        (_, J::String(s)) => Bson::String(s.clone()),
        (_, J::Bool(b)) => Bson::Boolean(*b),
        (_, J::Array(_) | J::Object(_)) => return Err(wrong()),
    })
}

fn number(n: &serde_json::Number) -> Bson {
    match (n.as_i64(), n.as_f64()) {
        (Some(i), _) => Bson::Int64(i),
        (None, Some(f)) => Bson::Double(f),
        _ => Bson::Double(f64::NAN),
    }
}

/// A date from RFC 3339 or a bare `YYYY-MM-DD` (midnight UTC).
pub fn date(s: &str) -> Option<DateTime> {
    let t = if s.len() == 10 {
        Timestamp::parse(&format!("{s}T00:00:00Z"))?
    } else {
        Timestamp::parse(s)?
    };
    let ms = t.unix_nanos().div_euclid(1_000_000);
    Some(DateTime::from_millis(i64::try_from(ms).ok()?))
}

fn decimal(s: &str) -> Option<Decimal128> {
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_is_anchored_and_escaped() {
        assert_eq!(like_regex("item-12%"), "^item-12.*$");
        assert_eq!(like_regex("a.b_%"), "^a\\.b..*$");
        assert_eq!(like_regex("(x)"), "^\\(x\\)$");
    }

    #[test]
    fn values_take_the_fields_type() {
        let oid = "64b7f0c2a1b2c3d4e5f60718";
        assert!(matches!(
            typed(Some("objectId"), &J::from(oid)),
            Ok(Bson::ObjectId(_))
        ));
        assert!(typed(Some("objectId"), &J::from("nope")).is_err());
        assert!(matches!(
            typed(Some("date"), &J::from("2024-01-02T03:04:05.006Z")),
            Ok(Bson::DateTime(d)) if d.timestamp_millis() == 1_704_164_645_006
        ));
        assert!(matches!(
            typed(Some("decimal"), &J::from("12.50")),
            Ok(Bson::Decimal128(_))
        ));
        assert!(typed(Some("int"), &J::from("7")).is_err());
        assert!(matches!(typed(None, &J::from(7)), Ok(Bson::Int64(7))));
    }
}
