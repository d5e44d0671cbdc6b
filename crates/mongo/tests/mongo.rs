//! The MongoDB connector beyond the conformance suite: host safety before any dial,
//! connection failures told apart, every BSON type read back as docs/encodings.md says
//! (compared with what the server stored, read raw), and a whole-document read that
//! meets a field discovery did not list.

mod common;

use common::*;
use fetcher_engine::ports::ConnectorFactory;
use fetcher_engine::{
    Category, Context, ExtractionRequest, PlanStep, Reason, TenantContext, Value,
};
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, DateTime, Document, RawDocumentBuf, doc, oid::ObjectId};
use serde_json::json;

fn tenant() -> TenantContext {
    TenantContext::new("mongo-tests").unwrap()
}

/// Every row of `collection` read through the connector with `fields`.
async fn read(
    db: &str,
    collection: &str,
    fields: &[&str],
) -> fetcher_engine::Result<Vec<fetcher_engine::Row>> {
    let ctx = Context::background();
    let mut c = factory()
        .build(&ctx, &tenant(), &descriptor(db))
        .await?
        .expect("a connector");
    let request: ExtractionRequest =
        serde_json::from_value(json!({"mappedFields": {"mg": {collection: fields}}})).unwrap();
    let step = PlanStep::for_datasource(&request, "mg");
    let mut rows = Vec::new();
    let out = async {
        let mut cursor = c.query_stream(&ctx, &step).await?;
        while let Some(b) = cursor.next_batch(&ctx).await? {
            rows.extend(b.rows);
        }
        Ok(())
    }
    .await;
    let _ = c.close(&ctx).await;
    out.map(|()| rows)
}

#[tokio::test]
async fn every_bson_type_reads_as_documented_and_as_stored() {
    let db = fresh_database("values").await;
    let oid = ObjectId::parse_str("64b7f0c2a1b2c3d4e5f60718").unwrap();
    let uuid = [
        0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    let values: Vec<(&str, Bson, serde_json::Value)> = vec![
        (
            "oid",
            Bson::ObjectId(oid),
            json!("64b7f0c2a1b2c3d4e5f60718"),
        ),
        ("i32", Bson::Int32(i32::MIN), json!(i32::MIN)),
        ("i64", Bson::Int64(i64::MAX), json!(i64::MAX)),
        ("big", Bson::Int64((1 << 53) + 1), json!((1i64 << 53) + 1)),
        ("dbl", Bson::Double(0.1), json!(0.1)),
        ("negzero", Bson::Double(-0.0), json!(-0.0)),
        ("nan", Bson::Double(f64::NAN), json!("NaN")),
        ("inf", Bson::Double(f64::INFINITY), json!("Infinity")),
        (
            "dec",
            Bson::Decimal128("-12345678901234567890.123450".parse().unwrap()),
            json!("-12345678901234567890.123450"),
        ),
        (
            "before1970",
            Bson::DateTime(DateTime::from_millis(-86_400_001)),
            json!("1969-12-30T23:59:59.999Z"),
        ),
        (
            "after9999",
            Bson::DateTime(DateTime::from_millis(253_402_300_800_000)),
            json!("+10000-01-01T00:00:00Z"),
        ),
        (
            "ts",
            Bson::Timestamp(mongodb::bson::Timestamp {
                time: 1_700_000_000,
                increment: 7,
            }),
            json!({"$timestamp": {"t": 1_700_000_000u32, "i": 7}}),
        ),
        (
            "uuid4",
            Bson::Binary(Binary {
                subtype: BinarySubtype::Uuid,
                bytes: uuid.to_vec(),
            }),
            json!("12345678-9abc-def0-0102-030405060708"),
        ),
        (
            "bin16",
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: uuid.to_vec(),
            }),
            json!("123456789abcdef00102030405060708"),
        ),
        (
            "binuser",
            Bson::Binary(Binary {
                subtype: BinarySubtype::UserDefined(0x80),
                bytes: vec![0xff],
            }),
            json!({"$binary": {"base64": "/w==", "subType": "80"}}),
        ),
        (
            "re",
            Bson::RegularExpression(mongodb::bson::Regex {
                pattern: "^a.c$".into(),
                options: "i".into(),
            }),
            json!({"$regularExpression": {"pattern": "^a.c$", "options": "i"}}),
        ),
        (
            "js",
            Bson::JavaScriptCode("x => 1".into()),
            json!({"$code": "x => 1"}),
        ),
        ("min", Bson::MinKey, json!({"$minKey": 1})),
        ("max", Bson::MaxKey, json!({"$maxKey": 1})),
        (
            "nested",
            Bson::Document(doc! {"z": 1, "a": [1, "two", Bson::Null]}),
            json!({"a": [1, "two", null], "z": 1}),
        ),
        ("null", Bson::Null, json!(null)),
        ("t", Bson::Boolean(true), json!(true)),
        (
            "s",
            Bson::String("naïve \u{1F600}".into()),
            json!("naïve \u{1F600}"),
        ),
    ];
    let mut d = Document::new();
    d.insert("_id", 1);
    for (k, v, _) in &values {
        d.insert(*k, v.clone());
    }
    load(&db, "typed", vec![d]).await;

    // What the server stored, read raw: each value is the one inserted.
    let stored = db
        .collection::<RawDocumentBuf>("typed")
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    let fields: Vec<&str> = values.iter().map(|(k, _, _)| *k).collect();
    let rows = read(db.name(), "typed", &fields).await.unwrap();
    assert_eq!(rows.len(), 1);
    for (k, v, want) in &values {
        let raw = stored.get(k).unwrap().unwrap();
        assert_eq!(
            fetcher_mongo::values::value(raw).to_json(),
            rows[0].get(k).unwrap().to_json(),
            "{k}: the row holds the stored value"
        );
        if !matches!(v, Bson::Double(f) if f.is_nan()) {
            assert_eq!(
                Bson::try_from(raw.to_raw_bson()).unwrap(),
                *v,
                "{k}: stored as inserted"
            );
        }
        let got = rows[0].get(k).unwrap();
        let got_json = match got {
            Value::Json(text) => serde_json::from_str(text).unwrap(),
            other => other.to_json(),
        };
        assert_eq!(&got_json, want, "{k}");
    }
    db.drop().await.ok();
}

#[tokio::test]
async fn a_whole_document_read_never_drops_a_field_discovery_missed() {
    let db = fresh_database("unlisted").await;
    // 1,200 documents: the sample (first and last 500 by _id) never sees the middle one's
    // extra field.
    let docs = (0..1200)
        .map(|i| {
            let mut d = doc! {"_id": i, "v": i};
            if i == 600 {
                d.insert("surprise", true);
            }
            d
        })
        .collect();
    load(&db, "c", docs).await;
    let err = read(db.name(), "c", &[]).await.unwrap_err();
    assert_eq!(err.category(), Category::Validation, "{err}");
    assert_eq!(err.message(), fetcher_mongo::connector::UNLISTED_FIELD);
    // Named fields read every document; a field outside the sample cannot be named (the
    // schema is the sample's, as the engine checks jobs against it).
    assert_eq!(
        read(db.name(), "c", &["_id", "v"]).await.unwrap().len(),
        1200
    );
    let err = read(db.name(), "c", &["surprise"]).await.unwrap_err();
    assert_eq!(err.category(), Category::Validation, "{err}");
    db.drop().await.ok();
}

#[tokio::test]
async fn host_safety_and_connection_failures() {
    let ctx = Context::background();
    // An external connection on a multi-tenant host: loopback is refused before any dial.
    let guarded = fetcher_mongo::MongoConnectorFactory::new(
        std::sync::Arc::new(fetcher_connect::StaticCredentials::new()),
        fetcher_connect::HostPolicy::multi_tenant(),
    );
    let mut external = descriptor("x");
    external.key_version = "1".into();
    let err = guarded
        .build(&ctx, &tenant(), &external)
        .await
        .err()
        .unwrap();
    assert_eq!(err.reason(), Some(Reason::ForbiddenHost), "{err}");
    // A name that resolves to loopback is refused when dialled, before any byte is sent.
    external.host = "localhost.".into();
    let err = guarded
        .build(&ctx, &tenant(), &external)
        .await
        .err()
        .unwrap();
    assert_eq!(err.reason(), Some(Reason::ForbiddenHost), "{err}");

    // Nothing listening: said so, and retryable.
    let mut closed = descriptor("x");
    closed.port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = factory()
        .build(&ctx, &tenant(), &closed)
        .await
        .unwrap()
        .unwrap();
    let err = c.test_connection(&ctx).await.unwrap_err();
    assert_eq!(err.category(), Category::Connect, "{err}");
    assert_eq!(err.reason(), Some(Reason::NotListening), "{err}");

    // A TLS mode of another type is refused at build.
    let mut wrong = descriptor("x");
    wrong.ssl_mode = fetcher_engine::TlsMode::VerifyFull;
    let err = factory()
        .build(&ctx, &tenant(), &wrong)
        .await
        .err()
        .unwrap();
    assert_eq!(err.reason(), Some(Reason::InvalidTlsMode), "{err}");
}

#[tokio::test]
async fn a_collection_named_with_dots_is_read_by_its_exact_name() {
    let db = fresh_database("dotted").await;
    load(&db, "logs.2024", vec![doc! {"_id": 1, "v": "dotted"}]).await;
    load(&db, "2024", vec![doc! {"_id": 1, "v": "other"}]).await;
    let rows = read(db.name(), "logs.2024", &["v"]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].values()[0], Value::String("dotted".into()));
    db.drop().await.ok();
}
