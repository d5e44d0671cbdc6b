//! PostgreSQL against the real server on 127.0.0.1:5432: fixtures, golden filter counts,
//! lossless values, quoting, ordering/determinism, COPY vs query path, bad input.

mod common;

use std::sync::Arc;

use common::*;
use fetcher_connectors::{Dialect, HostPolicy, SqlConnectorFactory, StaticCredentials};
use fetcher_engine::ports::Connector;
use fetcher_engine::{Category, Context, ExtractionRequest, Row, Value};
use serde_json::json;

fn factory(copy: bool) -> SqlConnectorFactory {
    SqlConnectorFactory::new(
        Dialect::Postgres,
        Arc::new(StaticCredentials::new()),
        HostPolicy::single_tenant(),
    )
    .with_copy_fast_path(copy)
}

async fn extract(
    f: &SqlConnectorFactory,
    d: &fetcher_engine::ConnectionDescriptor,
    request: serde_json::Value,
) -> fetcher_engine::Result<Vec<(String, Row)>> {
    let ctx = Context::background();
    let mut c = f.build_connector(&ctx, &tenant(), d).await?;
    let request: ExtractionRequest = serde_json::from_value(request).unwrap();
    let mut out = Vec::new();
    let res = async {
        let step = fetcher_engine::PlanStep::for_datasource(&request, &d.config_name);
        let mut cursor = c.query_stream(&ctx, &step).await?;
        while let Some(b) = cursor.next_batch(&ctx).await? {
            assert!(b.rows.len() <= 1024);
            out.extend(b.rows.into_iter().map(|r| (b.table.to_string(), r)));
        }
        cursor.close(&ctx).await
    }
    .await;
    c.close(&ctx).await.unwrap();
    res.map(|_| out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixture_discovery_golden_counts_and_determinism() {
    let db = PgDb::create(&pg_fixture_sql()).await;
    let d = db.descriptor("pg1");
    let ctx = Context::background();

    // Discovery: tables named as docs/datasources.md says, system schemas excluded, columns
    // by position.
    let mut c = factory(true)
        .build_connector(&ctx, &tenant(), &d)
        .await
        .unwrap();
    c.test_connection(&ctx).await.unwrap();
    let snap = c.discover_schema(&ctx).await.unwrap();
    c.close(&ctx).await.unwrap();
    c.close(&ctx).await.unwrap(); // idempotent
    assert_eq!(
        snap.table_names(),
        [
            "accounting.invoices",
            "accounts",
            "reporting.daily_summary",
            "transactions"
        ]
    );
    assert_eq!(
        snap.table("transactions").unwrap().fields,
        [
            "id",
            "account_id",
            "amount",
            "currency",
            "type",
            "description",
            "category",
            "status",
            "created_at",
            "updated_at"
        ]
    );

    let h = harness(std::slice::from_ref(&d)).await;
    let count = |filters: serde_json::Value| {
        let h = &h;
        async move {
            let out = h
                .store_ndjson(json!({
                    "mappedFields": {"pg1": {"transactions": ["id", "amount", "status"]}},
                    "filters": {"pg1": {"transactions": filters}},
                }))
                .await
                .unwrap();
            rows_of(&out, "transactions").len()
        }
    };
    assert_eq!(count(json!({"status": {"eq": ["completed"]}})).await, 24);
    assert_eq!(
        count(json!({"category": {"eq": ["salary", "groceries"]}})).await,
        13
    );
    assert_eq!(count(json!({"amount": {"gt": [1000]}})).await, 8);
    assert_eq!(count(json!({"amount": {"gte": [1500]}})).await, 8);
    assert_eq!(count(json!({"amount": {"lt": [100]}})).await, 7);
    assert_eq!(count(json!({"amount": {"lte": [89.99]}})).await, 5);
    assert_eq!(count(json!({"category": {"eq": ["salary"]}})).await, 9);
    assert_eq!(count(json!({"type": {"eq": ["credit"]}})).await, 9);
    assert_eq!(count(json!({"currency": {"ne": ["USD"]}})).await, 3);
    assert_eq!(
        count(json!({"currency": {"nin": ["EUR", "GBP"]}})).await,
        23
    );
    assert_eq!(count(json!({"category": {"in": ["travel"]}})).await, 4);
    assert_eq!(
        count(json!({"description": {"like": ["salary%"]}})).await,
        9
    );
    assert_eq!(count(json!({"account_id": {"eq": [A1]}})).await, 10);
    assert_eq!(
        count(json!({"created_at": {"between": ["2024-01-01", "2024-01-31"]}})).await,
        8
    );
    assert_eq!(
        count(
            json!({"created_at": {"gte": ["2024-02-01T00:00:00Z"], "lt": ["2024-03-01T00:00:00Z"]}})
        )
        .await,
        7
    );
    assert_eq!(
        count(json!({"status": {"eq": ["completed"]}, "created_at": {"between": ["2024-01-01", "2024-01-31"]}})).await,
        8
    );

    // Multi-schema job (docs/datasources.md, "Test fixtures"): 24 + 8 + 7 = 39, and
    // byte-identical across runs and paths.
    let multi = json!({
        "mappedFields": {"pg1": {
            "transactions": ["amount", "id", "status"],
            "accounting.invoices": ["invoice_number", "status"],
            "reporting.daily_summary": []
        }},
        "filters": {"pg1": {
            "transactions": {"status": {"eq": ["completed"]}},
            "accounting.invoices": {"status": {"eq": ["paid", "pending"]}},
            "reporting.daily_summary": {"account_id": {"eq": [A1]}}
        }}
    });
    let a = h.store_ndjson(multi.clone()).await.unwrap();
    let b = h.store_ndjson(multi).await.unwrap();
    assert_eq!(a, b);
    let text = String::from_utf8(a.clone()).unwrap();
    assert_eq!(text.lines().count(), 39);
    // Tables in ascending name order, rows by primary key.
    let tables: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["table"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let mut sorted = tables.clone();
    sorted.sort();
    assert_eq!(tables, sorted);
    let daily = rows_of(&a, "reporting.daily_summary");
    assert_eq!(daily.len(), 7);
    assert_eq!(
        daily[0]["transaction_count"], 0,
        "empty field list = all columns"
    );
    assert_eq!(daily[0]["total_debits"], "0.50");
    let tx = rows_of(&a, "transactions");
    assert_eq!(
        tx[0],
        json!({"amount": "3500.00", "id": "10000000-0000-4000-8000-000000000001", "status": "completed"})
    );

    // Unfiltered: COPY fast path vs the bound-parameter path give identical bytes.
    let all = json!({"mappedFields": {"pg1": {
        "transactions": [], "accounts": ["email", "id", "name"], "accounting.invoices": []
    }}});
    let copy_bytes = h.store_ndjson(all.clone()).await.unwrap();
    let query_bytes = engine_with(&d, false)
        .await
        .store_ndjson(all.clone())
        .await
        .unwrap();
    assert_eq!(copy_bytes, query_bytes);
    assert_eq!(
        String::from_utf8(copy_bytes).unwrap().lines().count(),
        26 + 3 + 10
    );

    db.drop_db().await;
}

/// A harness whose PostgreSQL factory has the COPY path switched on or off.
async fn engine_with(d: &fetcher_engine::ConnectionDescriptor, copy: bool) -> Harness {
    pg_harness(factory(copy), d).await
}

const EDGE_SQL: &str = r#"
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE edge (
  id int PRIMARY KEY, i2 smallint, i8 bigint, n numeric, n2 numeric(18,4), r real,
  d double precision, b boolean, t text, vc varchar(20), ch char(5), u uuid, j json, jb jsonb,
  by bytea, dt date, ts timestamp, tz timestamptz, tm time, ttz timetz, iv interval,
  ia int[], ta text[], m money, ip inet, mo mood, dom posint);
INSERT INTO edge VALUES
 (1, -32768, 9223372036854775807, 123456789012345678901234567890.123456789, -0.0001, 89.99,
  'NaN', true, E'h\u00e9llo "w" \\ \n \U0001F389', 'x', 'ab', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
  '{"b":1,"a":[1,2.5,null],"big":1152921504606846976}', '{"z":{"y":true}}', '\x00ff',
  'infinity', '-infinity', '2024-01-05 09:00:00.123456+02', '23:59:59.999999', '10:00:00+05:30',
  '1 year 2 mons 3 days 04:05:06.000007', '{1,NULL,3}', '{"a","b c"}', 12.34, '10.0.0.1/8', 'happy', 5),
 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (3, 1, -9223372036854775808, 'NaN', 0, '-Infinity', 'Infinity', false, '', '', '', NULL, '42',
  '"s"', '', '0044-03-15 BC', '12345-06-07 00:00:00', 'infinity', '00:00:00', '00:00:00-01:00',
  '-1 seconds', '{}', '{{1,2},{3,4}}', 0, '::1', 'sad', 1);
CREATE TABLE "MixedCase" ("Id" bigint PRIMARY KEY, "select" text, "Order" int, "user" text);
INSERT INTO "MixedCase" VALUES (2, 'b', 20, 'u2'), (1, 'a', 10, 'u1'), (3, 'c', 30, NULL);
CREATE TABLE nopk (a text, b int);
INSERT INTO nopk VALUES ('z', 1), ('a', 2), ('a', 1), (NULL, 0);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossless_values_and_quoted_identifiers() {
    let db = PgDb::create(EDGE_SQL).await;
    let d = db.descriptor("edge");
    for copy in [true, false] {
        let rows = extract(
            &factory(copy),
            &d,
            json!({"mappedFields": {"edge": {"edge": []}}}),
        )
        .await
        .unwrap();
        assert_eq!(rows.len(), 3);
        let r1 = &rows[0].1;
        let v = |n: &str| r1.get(n).unwrap().clone();
        assert_eq!(v("i2"), Value::Int(-32768));
        assert_eq!(v("i8"), Value::Int(i64::MAX));
        assert_eq!(
            v("n"),
            Value::from("123456789012345678901234567890.123456789")
        );
        assert_eq!(v("n2"), Value::from("-0.0001"));
        assert_eq!(v("r"), Value::Float(89.99));
        assert_eq!(v("d"), Value::from("NaN"));
        assert_eq!(v("b"), Value::Bool(true));
        assert_eq!(v("t"), Value::from("h\u{e9}llo \"w\" \\ \n \u{1F389}"));
        assert_eq!(v("ch"), Value::from("ab   "));
        assert_eq!(v("u"), Value::from("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"));
        let Value::Map(j) = v("j") else {
            panic!("json object")
        };
        assert_eq!(j["big"], Value::Int(1152921504606846976));
        assert_eq!(
            j["a"],
            Value::List(vec![Value::Int(1), Value::Float(2.5), Value::Null])
        );
        assert!(matches!(v("jb"), Value::Map(_)));
        assert_eq!(v("by"), Value::Bytes(vec![0, 255]));
        assert_eq!(v("dt"), Value::from("infinity"));
        assert_eq!(v("ts"), Value::from("-infinity"));
        assert_eq!(v("tz"), Value::from("2024-01-05T07:00:00.123456Z"));
        assert_eq!(v("tm"), Value::from("23:59:59.999999"));
        assert_eq!(v("ttz"), Value::from("10:00:00+05:30"));
        assert_eq!(v("iv"), Value::from("P1Y2M3DT4H5M6.000007S"));
        assert_eq!(
            v("ia"),
            Value::List(vec![Value::Int(1), Value::Null, Value::Int(3)])
        );
        assert_eq!(v("ta"), Value::List(vec!["a".into(), "b c".into()]));
        assert!(matches!(v("m"), Value::String(_)));
        assert_eq!(v("ip"), Value::from("10.0.0.1/8"));
        assert_eq!(v("mo"), Value::from("happy"));
        assert_eq!(v("dom"), Value::Int(5));
        assert!(rows[1].1.values()[1..].iter().all(|x| *x == Value::Null));
        let r3 = &rows[2].1;
        assert_eq!(r3.get("i8"), Some(&Value::Int(i64::MIN)));
        assert_eq!(r3.get("n"), Some(&Value::from("NaN")));
        assert_eq!(r3.get("r"), Some(&Value::from("-Infinity")));
        assert_eq!(r3.get("d"), Some(&Value::from("Infinity")));
        assert_eq!(
            r3.get("j"),
            Some(&Value::Int(42)),
            "top-level JSON scalars embed"
        );
        assert_eq!(r3.get("jb"), Some(&Value::from("s")));
        assert_eq!(r3.get("dt"), Some(&Value::from("-0043-03-15T00:00:00Z")));
        assert_eq!(r3.get("ts"), Some(&Value::from("+12345-06-07T00:00:00Z")));
        assert_eq!(r3.get("tz"), Some(&Value::from("infinity")));
        assert_eq!(r3.get("ttz"), Some(&Value::from("00:00:00-01:00")));
        assert_eq!(r3.get("iv"), Some(&Value::from("PT-1S")));
        assert_eq!(r3.get("ia"), Some(&Value::List(vec![])));
        assert_eq!(
            r3.get("ta"),
            Some(&Value::List(vec![
                Value::List(vec!["1".into(), "2".into()]),
                Value::List(vec!["3".into(), "4".into()])
            ]))
        );
    }

    // The same through the engine's NDJSON: exact integers, Base64 bytes, tagged strings.
    let h = harness(std::slice::from_ref(&d)).await;
    let out = h
        .store_ndjson(json!({"mappedFields": {"edge": {"edge": ["by", "d", "i8", "id"]}}}))
        .await
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(r#""by":"AP8=","d":"NaN","i8":9223372036854775807,"id":1"#),
        "{text}"
    );

    // Mixed case and reserved words, quoted; ordered by primary key; filter on them.
    let rows = extract(
        &factory(true),
        &d,
        json!({"mappedFields": {"edge": {"MixedCase": ["Id", "Order", "select", "user"]}}}),
    )
    .await
    .unwrap();
    let ids: Vec<_> = rows
        .iter()
        .map(|(_, r)| r.get("Id").unwrap().clone())
        .collect();
    assert_eq!(ids, [Value::Int(1), Value::Int(2), Value::Int(3)]);
    let rows = extract(
        &factory(true),
        &d,
        json!({"mappedFields": {"edge": {"public.MixedCase": ["select"]}},
               "filters": {"edge": {"public.MixedCase": {"Order": {"gte": [20]}, "user": {"ne": [null]}}}}}),
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, "public.MixedCase");
    assert_eq!(rows[0].1.get("select"), Some(&Value::from("b")));

    // No primary key: ordered by the selected columns (NULLs last in PostgreSQL).
    let rows = extract(
        &factory(false),
        &d,
        json!({"mappedFields": {"edge": {"nopk": ["a", "b"]}}}),
    )
    .await
    .unwrap();
    let got: Vec<String> = rows
        .iter()
        .map(|(_, r)| format!("{:?}/{:?}", r.get("a").unwrap(), r.get("b").unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            "String(\"a\")/Int(1)",
            "String(\"a\")/Int(2)",
            "String(\"z\")/Int(1)",
            "Null/Int(0)"
        ]
    );
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_never_widened() {
    let db = PgDb::create(&pg_fixture_sql()).await;
    let d = db.descriptor("pg1");
    let f = factory(true);
    let bad = [
        json!({"mappedFields": {"pg1": {"nope": []}}}),
        json!({"mappedFields": {"pg1": {"transactions": ["nope"]}}}),
        json!({"mappedFields": {"pg1": {"transactions": ["id"]}},
               "filters": {"pg1": {"transactions": {"nope": {"eq": ["x"]}}}}}),
        json!({"mappedFields": {"pg1": {"transactions": ["id"]}},
               "filters": {"pg1": {"transactions": {"amount": {"gt": ["lots"]}}}}}),
        json!({"mappedFields": {"pg1": {"transactions": ["id"]}},
               "filters": {"pg1": {"transactions": {"account_id": {"eq": ["not-a-uuid"]}}}}}),
        json!({"mappedFields": {"pg1": {"transactions": ["id"]}},
               "filters": {"pg1": {"transactions": {"status": {"eq": []}}}}}),
        json!({"mappedFields": {"pg1": {"transactions": ["id"]}},
               "filters": {"pg1": {"accounts": {"name": {"eq": ["x"]}}}}}),
    ];
    for req in bad {
        let e = extract(&f, &d, req.clone()).await.unwrap_err();
        assert_eq!(e.category(), Category::Validation, "{req}");
    }
    // An operator no connector knows does not even decode into a request.
    let unknown = json!({"mappedFields": {"pg1": {"transactions": ["id"]}},
                         "filters": {"pg1": {"transactions": {"status": {"regex": ["x"]}}}}});
    assert!(serde_json::from_value::<ExtractionRequest>(unknown).is_err());
    // Through the engine a filter the connector refuses fails the job: nothing is stored.
    let h = harness(std::slice::from_ref(&d)).await;
    let e = h
        .store_ndjson(json!({
            "mappedFields": {"pg1": {"transactions": ["id"]}},
            "filters": {"pg1": {"transactions": {"amount": {"gt": ["lots"]}}}}
        }))
        .await
        .unwrap_err();
    assert_ne!(e.category(), Category::Internal);
    assert_eq!(h.sink.stored_count(), 0);

    // Wrong database: a connect error with the fixed text (trust auth ignores passwords,
    // the wrong-password case runs against the private server in tests/tls.rs).
    let mut wrong = d.clone();
    wrong.database_name = "no_such_db_for_fetcher".into();
    let ctx = Context::background();
    let mut c = f.build_connector(&ctx, &tenant(), &wrong).await.unwrap();
    let e = c.discover_schema(&ctx).await.unwrap_err();
    assert_eq!(e.category(), Category::Connect);
    assert_eq!(
        e.to_string(),
        "engine: [connect] the datasource has no database of that name"
    );
    let e = c.test_connection(&ctx).await.unwrap_err();
    assert_eq!(e.message(), "the datasource has no database of that name");
    c.close(&ctx).await.unwrap();

    // Invalid TLS mode at build.
    let mut bad_tls = d.clone();
    bad_tls.ssl_mode = fetcher_engine::TlsMode::True; // MySQL's spelling: no PostgreSQL meaning
    let e = f
        .build_connector(&ctx, &tenant(), &bad_tls)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(fetcher_engine::Reason::InvalidTlsMode));
    db.drop_db().await;
}
