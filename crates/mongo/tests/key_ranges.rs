//! `_id` as a split key: a collection's span is of the `_id`s' own type (ObjectId, UUID,
//! integer), its ranges read every document once and in order, a document whose `_id` is
//! of another type is read by the first range, and a collection whose ends differ in type
//! is not split.

mod common;

use common::*;
use fetcher_engine::ports::{Connector, ConnectorFactory};
use fetcher_engine::{
    Context, ExtractionRequest, KeyKind, KeyRange, KeySpan, PlanStep, TenantContext, Value,
};
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, doc, oid::ObjectId};
use serde_json::json;

async fn connector(db: &str) -> Box<dyn Connector> {
    factory()
        .build(
            &Context::background(),
            &TenantContext::new("mongo-keys").unwrap(),
            &descriptor(db),
        )
        .await
        .unwrap()
        .expect("a connector")
}

fn step(collection: &str, range: Option<KeyRange>) -> PlanStep {
    let request: ExtractionRequest =
        serde_json::from_value(json!({"mappedFields": {"mg": {collection: ["_id"]}}})).unwrap();
    let mut step = PlanStep::for_datasource(&request, "mg");
    if let Some(r) = range {
        step.key_ranges.insert(collection.into(), r);
    }
    step
}

async fn span(db: &str, collection: &str) -> Option<KeySpan> {
    let ctx = Context::background();
    let mut c = connector(db).await;
    let span = c.key_span(&ctx, &step(collection, None), collection).await;
    let _ = c.close(&ctx).await;
    span.unwrap()
}

/// The `_id`s a read of `range` gives, as rendered.
async fn ids(db: &str, collection: &str, range: KeyRange) -> Vec<String> {
    let ctx = Context::background();
    let mut c = connector(db).await;
    let step = step(collection, Some(range));
    let mut out = Vec::new();
    let mut cursor = c.query_stream(&ctx, &step).await.unwrap();
    while let Some(b) = cursor.next_batch(&ctx).await.unwrap() {
        for r in b.rows {
            out.push(match &r.values()[0] {
                Value::String(s) => s.to_string(),
                Value::Int(i) => i.to_string(),
                other => panic!("an _id of {other:?}"),
            });
        }
    }
    drop(cursor);
    let _ = c.close(&ctx).await;
    out
}

/// Reads every range of `span` cut in `n`, checks each holds its own keys in order, and
/// returns them concatenated.
async fn read_ranges(db: &str, collection: &str, span: &KeySpan, n: usize) -> Vec<Vec<String>> {
    let ranges = span.ranges(n);
    assert_eq!(ranges.len(), n, "{span:?}");
    let mut out = Vec::new();
    for r in ranges {
        out.push(ids(db, collection, r).await);
    }
    out
}

#[tokio::test]
async fn object_id_ranges_read_each_document_once_in_order() {
    let db = fresh_database("keys_oid").await;
    let mut oids: Vec<ObjectId> = (0..2000).map(|_| ObjectId::new()).collect();
    oids.sort();
    let docs = oids.iter().map(|o| doc! {"_id": o, "v": 1}).collect();
    load(&db, "events", docs).await;

    let span = span(db.name(), "events").await.expect("an ObjectId span");
    assert_eq!(span.min.kind(), KeyKind::ObjectId);
    assert_eq!(
        span.min,
        fetcher_engine::KeyValue::ObjectId(oids[0].bytes())
    );
    assert_eq!(
        span.max,
        fetcher_engine::KeyValue::ObjectId(oids[1999].bytes())
    );
    assert!(span.rows > 0);
    // ObjectIds made in one second differ in their last bytes only: cut by value, the
    // ranges are uneven but still cover every key once.
    let parts = read_ranges(db.name(), "events", &span, 4).await;
    for p in &parts {
        assert!(p.is_sorted(), "a range reads in _id order");
    }
    let all: Vec<String> = parts.concat();
    let want: Vec<String> = oids.iter().map(|o| o.to_hex()).collect();
    assert_eq!(all, want, "each document in one range, in order");

    // An `_id` of another type (a string sorts before ObjectIds) inserted after the cut:
    // the first range reads it, no other does.
    db.collection("events")
        .insert_one(doc! {"_id": "late", "v": 2})
        .await
        .unwrap();
    let parts = read_ranges(db.name(), "events", &span, 4).await;
    assert_eq!(parts[0].first().map(String::as_str), Some("late"));
    assert_eq!(parts.concat().len(), 2001);
    db.drop().await.ok();
}

#[tokio::test]
async fn uuid_and_integer_ranges_and_unsplittable_collections() {
    let db = fresh_database("keys_other").await;
    let uuids: Vec<[u8; 16]> = (0u8..=255).map(|i| [i; 16]).collect();
    let docs = uuids
        .iter()
        .map(|u| {
            doc! {"_id": Bson::Binary(Binary {subtype: BinarySubtype::Uuid, bytes: u.to_vec()})}
        })
        .collect();
    load(&db, "uuids", docs).await;
    let s = span(db.name(), "uuids").await.expect("a UUID span");
    assert_eq!(s.min.kind(), KeyKind::Uuid);
    let parts = read_ranges(db.name(), "uuids", &s, 3).await;
    assert!(parts.iter().all(|p| !p.is_empty() && p.is_sorted()));
    assert_eq!(parts.concat().len(), 256);

    // Integers of both widths are one kind: MongoDB compares numbers by value.
    let docs = (1..=300i64)
        .map(|i| match i % 2 {
            0 => doc! {"_id": i},
            _ => doc! {"_id": i as i32},
        })
        .collect();
    load(&db, "ints", docs).await;
    let s = span(db.name(), "ints").await.expect("an integer span");
    assert_eq!((s.min.as_int(), s.max.as_int()), (Some(1), Some(300)));
    let parts = read_ranges(db.name(), "ints", &s, 3).await;
    let all: Vec<String> = parts.concat();
    assert_eq!(all, (1..=300).map(|i| i.to_string()).collect::<Vec<_>>());

    // Ends of different types, text keys, and an empty collection: no span.
    load(&db, "mixed", vec![doc! {"_id": 1}, doc! {"_id": "a"}]).await;
    load(&db, "texts", vec![doc! {"_id": "a"}, doc! {"_id": "b"}]).await;
    db.create_collection("empty").await.ok();
    for c in ["mixed", "texts", "empty"] {
        assert_eq!(span(db.name(), c).await, None, "{c}");
    }
    db.drop().await.ok();
}
