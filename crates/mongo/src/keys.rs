//! `_id` as a split key (docs/datasources.md, "MongoDB"): the span of a collection's
//! `_id`s, and a key range as a query. Integers, ObjectIds and UUIDs (binary subtype 4)
//! are cut; a collection whose first and last `_id` differ in type, or are of another
//! type, reports no span and is read in one piece.

use fetcher_engine::{KeyRange, KeySpan, KeyValue, Result};
use mongodb::Database;
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, Document, doc, oid::ObjectId};

use crate::error::query_failed;
use fetcher_connect::error::{self, msg};

/// The key an `_id` is, when it is of a kind a span can be cut in.
pub fn key_of(v: &Bson) -> Option<KeyValue> {
    match v {
        Bson::Int32(i) => Some(KeyValue::Int(i64::from(*i))),
        Bson::Int64(i) => Some(KeyValue::Int(*i)),
        Bson::ObjectId(o) => Some(KeyValue::ObjectId(o.bytes())),
        Bson::Binary(b) if b.subtype == BinarySubtype::Uuid => {
            <[u8; 16]>::try_from(b.bytes.as_slice())
                .ok()
                .map(KeyValue::Uuid)
        }
        _ => None,
    }
}

/// A key as the BSON value it compares with. Integers are written as 64-bit: MongoDB
/// compares numbers by value whatever their width.
pub fn bson_of(k: &KeyValue) -> Result<Bson> {
    Ok(match k {
        KeyValue::Int(i) => Bson::Int64(*i),
        KeyValue::ObjectId(b) => Bson::ObjectId(ObjectId::from_bytes(*b)),
        KeyValue::Uuid(b) => Bson::Binary(Binary {
            subtype: BinarySubtype::Uuid,
            bytes: b.to_vec(),
        }),
        KeyValue::Text(_) => {
            return Err(error::validation(
                "a MongoDB key range has integer, ObjectId or UUID bounds",
            ));
        }
    })
}

/// The query clause of `range` on `_id`, `None` for an unbounded one. MongoDB's
/// comparisons match only values of the bound's type, so the first range's upper bound
/// is written as "not at or above": an `_id` of another type inserted while the job runs
/// is then read once, by the first range, rather than by none.
pub fn clause(range: &KeyRange) -> Result<Option<Document>> {
    Ok(match (&range.lo, &range.hi) {
        (None, None) => None,
        (None, Some(hi)) => Some(doc! {"_id": {"$not": {"$gte": bson_of(hi)?}}}),
        (Some(lo), None) => Some(doc! {"_id": {"$gte": bson_of(lo)?}}),
        (Some(lo), Some(hi)) => Some(doc! {"_id": {"$gte": bson_of(lo)?, "$lt": bson_of(hi)?}}),
    })
}

/// The span of `collection`'s `_id`s with the server's count estimate; `None` when empty,
/// estimated empty, or when its ends are not keys of one kind.
pub async fn span(db: &Database, collection: &str) -> Result<Option<KeySpan>> {
    let c = db.collection::<Document>(collection);
    let mut ends = Vec::with_capacity(2);
    for order in [1, -1] {
        let end = c
            .find_one(doc! {})
            .sort(doc! {"_id": order})
            .projection(doc! {"_id": 1})
            .await
            .map_err(|e| query_failed(e, msg::QUERY_FAILED))?;
        match end.as_ref().and_then(|d| d.get("_id")).and_then(key_of) {
            Some(k) => ends.push(k),
            None => return Ok(None),
        }
    }
    let (max, min) = (ends.pop().expect("two ends"), ends.pop().expect("two ends"));
    if min.kind() != max.kind() {
        return Ok(None);
    }
    let rows = c
        .estimated_document_count()
        .await
        .map_err(|e| query_failed(e, msg::QUERY_FAILED))?;
    let rows = i64::try_from(rows).unwrap_or(i64::MAX);
    Ok((rows > 0).then_some(KeySpan { min, max, rows }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_bson() {
        for k in [
            KeyValue::Int(-5),
            KeyValue::ObjectId([7; 12]),
            KeyValue::Uuid([9; 16]),
        ] {
            assert_eq!(key_of(&bson_of(&k).unwrap()), Some(k));
        }
        assert_eq!(key_of(&Bson::Int32(3)), Some(KeyValue::Int(3)));
        assert_eq!(key_of(&Bson::String("a".into())), None);
        assert_eq!(key_of(&Bson::Double(1.5)), None);
        assert!(bson_of(&KeyValue::Text("a".into())).is_err());
    }

    #[test]
    fn the_first_range_also_holds_other_types() {
        let r = KeyRange {
            lo: None,
            hi: Some(KeyValue::Int(10)),
        };
        assert_eq!(
            clause(&r).unwrap(),
            Some(doc! {"_id": {"$not": {"$gte": Bson::Int64(10)}}})
        );
        assert_eq!(clause(&KeyRange::default()).unwrap(), None);
    }
}
