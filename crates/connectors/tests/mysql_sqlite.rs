//! MariaDB (127.0.0.1:3306) and SQLite: fixtures, golden counts, values, quoting,
//! determinism through the engine, bad input, wrong password.

mod common;

use std::sync::Arc;

use common::*;
use fetcher_connectors::{Dialect, HostPolicy, SqlConnectorFactory, StaticCredentials};
use fetcher_engine::ports::Connector;
use fetcher_engine::{Category, Context, ExtractionRequest, Row, Value};
use serde_json::json;

fn factory(dialect: Dialect, creds: StaticCredentials) -> SqlConnectorFactory {
    SqlConnectorFactory::new(dialect, Arc::new(creds), HostPolicy::single_tenant())
}

async fn extract(
    f: &SqlConnectorFactory,
    d: &fetcher_engine::ConnectionDescriptor,
    request: serde_json::Value,
) -> fetcher_engine::Result<Vec<Row>> {
    let ctx = Context::background();
    let mut c = f.build_connector(&ctx, &tenant(), d).await?;
    let request: ExtractionRequest = serde_json::from_value(request).unwrap();
    let mut out = Vec::new();
    let res = async {
        let step = fetcher_engine::PlanStep::for_datasource(&request, &d.config_name);
        let mut cursor = c.query_stream(&ctx, &step).await?;
        while let Some(b) = cursor.next_batch(&ctx).await? {
            out.extend(b.rows);
        }
        Ok::<_, fetcher_engine::EngineError>(())
    }
    .await;
    c.close(&ctx).await.unwrap();
    res.map(|_| out)
}

const MY_EDGE: [&str; 4] = [
    "CREATE TABLE edge (id int PRIMARY KEY, ub bigint unsigned, sb bigint, dec65 decimal(65,30), \
     f float, d double, t text, j json, dt datetime(6), ts timestamp(6) NULL, da date, tm time(6), \
     y year, bl blob, bt bit(8), en enum('a','b'), `select` varchar(10), u uuid)",
    "INSERT INTO edge VALUES (1, 18446744073709551615, -9223372036854775808, \
     '12345678901234567890123456789012345.123456789012345678901234567890', 89.99, 0.1, \
     'h\u{e9}llo \"w\" \\\\ \u{1F389}', '{\"b\":[1,2],\"a\":{\"big\":1152921504606846976}}', \
     '2024-04-05 09:00:00.123456', '2024-04-05 09:00:00.5', '2024-04-05', '-838:59:59', 2024, \
     X'00ff', b'101', 'b', 'sel', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')",
    "INSERT INTO edge (id) VALUES (2)",
    "CREATE TABLE `MixedCase` (`Id` int PRIMARY KEY, `Order` int, `group` varchar(5))",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_fixture_values_and_determinism() {
    let mut stmts: Vec<String> = mysql_fixture();
    stmts.extend(MY_EDGE.iter().map(|s| s.to_string()));
    stmts.push("INSERT INTO `MixedCase` VALUES (2, 20, 'b'), (1, 10, 'a')".into());
    let refs: Vec<&str> = stmts.iter().map(String::as_str).collect();
    let db = MyDb::create(&refs).await;
    let d = db.descriptor("my1");
    let f = factory(Dialect::MySql, StaticCredentials::new());

    let ctx = Context::background();
    let mut c = f.build_connector(&ctx, &tenant(), &d).await.unwrap();
    c.test_connection(&ctx).await.unwrap();
    let snap = c.discover_schema(&ctx).await.unwrap();
    c.close(&ctx).await.unwrap();
    assert_eq!(snap.table_names(), ["MixedCase", "edge", "transactions"]);

    let count = |filters: serde_json::Value| {
        let (f, d) = (&f, &d);
        async move {
            extract(
                f,
                d,
                json!({"mappedFields": {"my1": {"transactions": ["amount", "currency"]}},
                       "filters": {"my1": {"transactions": filters}}}),
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(count(json!({"amount": {"gt": [100]}})).await.len(), 15);
    let big = count(json!({"amount": {"gt": [3000]}})).await;
    assert_eq!(big.len(), 3);
    assert_eq!(big[0].get("amount"), Some(&Value::from("3500.00")));
    assert_eq!(big[0].get("currency"), Some(&Value::from("USD")));
    assert_eq!(count(json!({"status": {"eq": ["pending"]}})).await.len(), 2);
    assert_eq!(count(json!({"type": {"ne": ["credit"]}})).await.len(), 14);
    assert_eq!(
        count(json!({"created_at": {"between": ["2024-04-01", "2024-04-30"]}}))
            .await
            .len(),
        6
    );
    assert_eq!(
        count(json!({"created_at": {"gte": ["2024-06-28T00:00:00Z"]}}))
            .await
            .len(),
        2
    );
    assert_eq!(
        count(json!({"description": {"like": ["salary%"]}}))
            .await
            .len(),
        6
    );

    let rows = extract(&f, &d, json!({"mappedFields": {"my1": {"edge": []}}}))
        .await
        .unwrap();
    let v = |n: &str| rows[0].get(n).unwrap().clone();
    assert_eq!(v("ub"), Value::UInt(u64::MAX));
    assert_eq!(v("sb"), Value::Int(i64::MIN));
    assert_eq!(
        v("dec65"),
        Value::from("12345678901234567890123456789012345.123456789012345678901234567890")
    );
    assert_eq!(v("f"), Value::Float(89.99));
    assert_eq!(v("d"), Value::Float(0.1));
    assert_eq!(v("t"), Value::from("h\u{e9}llo \"w\" \\ \u{1F389}"));
    let Value::Map(j) = v("j") else {
        panic!("json embeds: {:?}", v("j"))
    };
    assert_eq!(j["b"], Value::List(vec![Value::Int(1), Value::Int(2)]));
    assert_eq!(v("dt"), Value::from("2024-04-05T09:00:00.123456Z"));
    assert_eq!(v("ts"), Value::from("2024-04-05T09:00:00.5Z"));
    assert_eq!(v("da"), Value::from("2024-04-05T00:00:00Z"));
    assert_eq!(v("tm"), Value::from("-838:59:59"));
    assert_eq!(v("y"), Value::Int(2024));
    assert_eq!(v("bl"), Value::Bytes(vec![0, 255]));
    assert_eq!(v("bt"), Value::UInt(5));
    assert_eq!(v("en"), Value::from("b"));
    assert_eq!(v("select"), Value::from("sel"));
    assert_eq!(v("u"), Value::from("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"));
    assert!(rows[1].values()[1..].iter().all(|x| *x == Value::Null));

    let rows = extract(
        &f,
        &d,
        json!({"mappedFields": {"my1": {"MixedCase": ["Id", "group"]}},
               "filters": {"my1": {"MixedCase": {"Order": {"lte": [20]}, "group": {"in": ["a", "b"]}}}}}),
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].get("Id"), Some(&Value::Int(1)));

    // Bad input.
    for req in [
        json!({"mappedFields": {"my1": {"nope": []}}}),
        json!({"mappedFields": {"my1": {"transactions": ["nope"]}}}),
        json!({"mappedFields": {"my1": {"transactions": ["id"]}},
               "filters": {"my1": {"transactions": {"amount": {"gt": [true]}}}}}),
    ] {
        let e = extract(&f, &d, req.clone()).await.unwrap_err();
        assert_eq!(e.category(), Category::Validation, "{req}");
    }
    let unknown = json!({"mappedFields": {"my1": {"transactions": ["id"]}},
                         "filters": {"my1": {"transactions": {"amount": {"approx": [1]}}}}});
    assert!(serde_json::from_value::<ExtractionRequest>(unknown).is_err());
    let mut bad_tls = d.clone();
    bad_tls.ssl_mode = fetcher_engine::TlsMode::Require;
    let e = f
        .build_connector(&ctx, &tenant(), &bad_tls)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(fetcher_engine::Reason::InvalidTlsMode));

    // Byte-identical NDJSON across runs.
    let h = harness(std::slice::from_ref(&d)).await;
    let req = json!({"mappedFields": {"my1": {"transactions": [], "edge": [], "MixedCase": []}}});
    let a = h.store_ndjson(req.clone()).await.unwrap();
    let b = h.store_ndjson(req).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(rows_of(&a, "transactions").len(), 20);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_wrong_password_and_tls_modes() {
    let user = unique("fx_u");
    let mut admin = my_admin(None).await;
    use sqlx::Executor;
    admin
        .execute(format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'right-Pa55'").as_str())
        .await
        .unwrap();
    let db = MyDb::create(&["CREATE TABLE t (id int PRIMARY KEY)"]).await;
    admin
        .execute(format!("GRANT SELECT ON {}.* TO '{user}'@'%'", db.name).as_str())
        .await
        .unwrap();
    let mut d = db.descriptor("my");
    d.username = user.clone();
    let ctx = Context::background();

    let ok = factory(
        Dialect::MySql,
        StaticCredentials::new().with("my", "right-Pa55"),
    );
    let mut c = ok.build_connector(&ctx, &tenant(), &d).await.unwrap();
    c.test_connection(&ctx).await.unwrap();
    c.close(&ctx).await.unwrap();

    let wrong = factory(
        Dialect::MySql,
        StaticCredentials::new().with("my", "wrong-Secret-99"),
    );
    let mut c = wrong.build_connector(&ctx, &tenant(), &d).await.unwrap();
    let e = c.test_connection(&ctx).await.unwrap_err();
    assert_eq!(e.category(), Category::Connect);
    let shown = format!("{e} {e:?}");
    // Why, in the engine's words (#53): the login was refused.
    assert_eq!(e.message(), "the datasource refused the login");
    assert!(!shown.contains("wrong-Secret") && !shown.contains(&user) && !shown.contains("denied"));
    let e = c.discover_schema(&ctx).await.unwrap_err();
    assert_eq!(e.category(), Category::Connect);
    c.close(&ctx).await.unwrap();

    // The local MariaDB has no TLS: `true` (verify identity) must refuse, `preferred` and
    // `false` connect in plain text.
    for (mode, connects) in [
        ("true", false),
        ("skip-verify", false),
        ("preferred", true),
        ("false", true),
    ] {
        let mut dm = d.clone();
        dm.ssl_mode = mode.parse().unwrap();
        let mut c = ok.build_connector(&ctx, &tenant(), &dm).await.unwrap();
        assert_eq!(c.test_connection(&ctx).await.is_ok(), connects, "{mode}");
        c.close(&ctx).await.unwrap();
    }
    admin
        .execute(format!("DROP USER '{user}'@'%'").as_str())
        .await
        .unwrap();
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fixture_values_and_determinism() {
    let mut sql = String::from(
        "CREATE TABLE transactions (id UUID PRIMARY KEY, account_id TEXT NOT NULL, amount DECIMAL(15,2) NOT NULL, \
         currency VARCHAR(3) NOT NULL, type VARCHAR(10) NOT NULL, description TEXT, category TEXT, status TEXT NOT NULL, \
         created_at DATETIME NOT NULL);\n",
    );
    for (i, (acc, amount, cur, ty, cat, status, at)) in PG_TRANSACTIONS.iter().enumerate() {
        sql += &format!(
            "INSERT INTO transactions VALUES ('10000000-0000-4000-8000-{:012}','{acc}',{amount},'{cur}','{ty}','{cat} #{}','{cat}','{status}','{}');\n",
            i + 1,
            i + 1,
            &at[..19]
        );
    }
    sql += "CREATE TABLE \"Mixed Case\" (\"Id\" INTEGER PRIMARY KEY, \"where\" TEXT, ok BOOLEAN, doc JSON, b BLOB, r REAL);\n\
            INSERT INTO \"Mixed Case\" VALUES (2, 'b', 0, '[1,{\"x\":null}]', x'00ff', 1.5), (1, 'a', 1, '{\"big\":9223372036854775807}', NULL, NULL);\n";
    let db = LiteDb::create(&sql).await;
    let d = db.descriptor("lite");
    let f = factory(Dialect::Sqlite, StaticCredentials::new());
    let count = |filters: serde_json::Value| {
        let (f, d) = (&f, &d);
        async move {
            extract(
                f,
                d,
                json!({"mappedFields": {"lite": {"transactions": ["amount", "id"]}},
                       "filters": {"lite": {"transactions": filters}}}),
            )
            .await
            .unwrap()
            .len()
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
    assert_eq!(
        count(json!({"created_at": {"between": ["2024-01-01", "2024-01-31"]}})).await,
        8
    );

    let rows = extract(
        &f,
        &d,
        json!({"mappedFields": {"lite": {"Mixed Case": []}}}),
    )
    .await
    .unwrap();
    assert_eq!(rows[0].get("Id"), Some(&Value::Int(1)));
    assert_eq!(
        rows[0].get("ok"),
        Some(&Value::Int(1)),
        "SQLite BOOLEAN: the integer held"
    );
    let Value::Map(doc) = rows[0].get("doc").unwrap() else {
        panic!("json")
    };
    assert_eq!(doc["big"], Value::Int(i64::MAX));
    assert_eq!(rows[1].get("b"), Some(&Value::Bytes(vec![0, 255])));
    assert_eq!(rows[1].get("where"), Some(&Value::from("b")));

    let e = extract(
        &f,
        &d,
        json!({"mappedFields": {"lite": {"transactions": ["id"]}},
               "filters": {"lite": {"transactions": {"amount": {"gt": ["x"]}}}}}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.category(), Category::Validation);

    let h = harness(std::slice::from_ref(&d)).await;
    let req =
        json!({"mappedFields": {"lite": {"transactions": [], "Mixed Case": ["Id", "where"]}}});
    let a = h.store_ndjson(req.clone()).await.unwrap();
    assert_eq!(a, h.store_ndjson(req).await.unwrap());
    assert_eq!(rows_of(&a, "transactions").len(), 26);
    assert_eq!(rows_of(&a, "transactions")[0]["amount"], "3500");
    db.remove();
}
