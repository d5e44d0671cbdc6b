//! Encoding conventions shared with the reference (docs/encodings.md): timestamps and
//! times print like RFC 3339 with nanoseconds (trailing zeros trimmed, no fraction when
//! zero), and PostgreSQL `inet` as PostgreSQL's own text (no `/32` or `/128`).

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn postgres_timestamps_times_and_inet_print_like_the_reference() {
    let db = PgDb::create(
        "CREATE TABLE enc (id int PRIMARY KEY, ts timestamptz, t timestamp, d date, tm time, ip inet, net cidr);
         INSERT INTO enc VALUES
           (1, '2024-01-31 00:00:00+00', '2024-01-31 10:20:30.5', '2024-01-31', '10:20:30', '10.0.0.1', '10.0.0.0/8'),
           (2, '2024-01-31 00:00:00.120000+00', '2024-01-31 10:20:30.000001', '0044-03-15 BC', '23:59:59.999999', '10.0.0.1/8', '::1/128'),
           (3, NULL, NULL, NULL, NULL, '::1', NULL),
           (4, NULL, NULL, NULL, NULL, 'fe80::1/64', NULL);",
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let out = h
        .store_ndjson(
            json!({"mappedFields": {"pg": {"enc": ["id", "ts", "t", "d", "tm", "ip", "net"]}}}),
        )
        .await
        .unwrap();
    let rows = rows_of(&out, "enc");
    let want = [
        json!({"id": 1, "ts": "2024-01-31T00:00:00Z", "t": "2024-01-31T10:20:30.5Z", "d": "2024-01-31T00:00:00Z", "tm": "10:20:30", "ip": "10.0.0.1", "net": "10.0.0.0/8"}),
        json!({"id": 2, "ts": "2024-01-31T00:00:00.12Z", "t": "2024-01-31T10:20:30.000001Z", "d": "-0043-03-15T00:00:00Z", "tm": "23:59:59.999999", "ip": "10.0.0.1/8", "net": "::1/128"}),
        json!({"id": 3, "ts": null, "t": null, "d": null, "tm": null, "ip": "::1", "net": null}),
        json!({"id": 4, "ts": null, "t": null, "d": null, "tm": null, "ip": "fe80::1/64", "net": null}),
    ];
    assert_eq!(rows, want);
    // The inet text is PostgreSQL's own (its output function).
    let mut admin = pg_admin(&db.name).await;
    let own: Vec<Option<String>> =
        sqlx::query_scalar("SELECT format('%s', ip) FROM enc ORDER BY id")
            .fetch_all(&mut admin)
            .await
            .unwrap();
    let ours: Vec<Option<String>> = rows
        .iter()
        .map(|r| r["ip"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ours, own);
    drop(admin);
    db.drop_db().await;
}

#[tokio::test]
async fn mysql_temporals_print_like_the_reference() {
    let db = MyDb::create(&[
        "SET SESSION sql_mode = ''",
        "CREATE TABLE enc (id int PRIMARY KEY, dt datetime(6), ts timestamp(6) NULL, d date, tm time(6))",
        "INSERT INTO enc VALUES (1, '2024-01-31 00:00:00', '2024-01-31 00:00:00.5', '2024-01-31', '-838:59:59'), \
         (2, '2024-00-15 10:20:30.5', NULL, '0000-00-00', '10:20:30.000100')",
    ])
    .await;
    let h = harness(&[db.descriptor("my")]).await;
    let out = h
        .store_ndjson(json!({"mappedFields": {"my": {"enc": ["id", "dt", "ts", "d", "tm"]}}}))
        .await
        .unwrap();
    assert_eq!(
        rows_of(&out, "enc"),
        [
            json!({"id": 1, "dt": "2024-01-31T00:00:00Z", "ts": "2024-01-31T00:00:00.5Z", "d": "2024-01-31T00:00:00Z", "tm": "-838:59:59"}),
            json!({"id": 2, "dt": "2024-00-15 10:20:30.5", "ts": null, "d": "0000-00-00", "tm": "10:20:30.0001"}),
        ]
    );
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_values_arrive_as_stored_even_when_odd() {
    // SQLite checks neither that TEXT is UTF-8 nor that a BOOLEAN holds 0 or 1, nor that
    // a JSON column holds JSON.
    let db = LiteDb::create(
        "CREATE TABLE odd (id INTEGER PRIMARY KEY, flag BOOLEAN, t TEXT, j JSON);
         INSERT INTO odd VALUES (1, 0, 'fine', '\"quoted\"'), (2, 1, CAST(X'C328' AS TEXT), 'quoted'),
                                (3, 2, CAST(X'FF' AS TEXT), 'null'), (4, -1, NULL, NULL),
                                (5, 865, 'ok', CAST(X'FF' AS TEXT)), (6, 1, 'blob', X'7B7D');",
    )
    .await;
    let h = harness(&[db.descriptor("lite")]).await;
    let out = h
        .store_ndjson(json!({"mappedFields": {"lite": {"odd": ["id", "flag", "t", "j"]}}}))
        .await
        .expect("one odd value never makes the table unextractable");
    // No two stored values read alike: the string document, text that is no JSON, the
    // document `null`, SQL NULL, bytes that are no text, a BLOB.
    assert_eq!(
        rows_of(&out, "odd"),
        [
            json!({"id": 1, "flag": 0, "t": "fine", "j": "quoted"}),
            json!({"id": 2, "flag": 1, "t": "wyg=", "j": {"$text": "quoted"}}),
            json!({"id": 3, "flag": 2, "t": "/w==", "j": {"$json": null}}),
            json!({"id": 4, "flag": -1, "t": null, "j": null}),
            json!({"id": 5, "flag": 865, "t": "ok", "j": {"$bytes": "/w=="}}),
            json!({"id": 6, "flag": 1, "t": "blob", "j": {"$bytes": "e30="}}),
        ]
    );
    // Booleans still filter it (true is 1).
    let out = h
        .store_ndjson(json!({"mappedFields": {"lite": {"odd": ["id"]}}, "filters": {"lite": {"odd": {"flag": {"eq": [true]}}}}}))
        .await
        .unwrap();
    assert_eq!(rows_of(&out, "odd"), [json!({"id": 2}), json!({"id": 6})]);
    db.remove();
}

#[tokio::test]
async fn postgres_char_with_a_high_byte_is_postgres_text_not_base64() {
    let db = PgDb::create(
        r#"CREATE TABLE c (id int PRIMARY KEY, ch "char");
           INSERT INTO c VALUES (1, 'a'), (2, '\303'::"char"), (3, NULL), (4, ''::"char");"#,
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let out = h
        .store_ndjson(json!({"mappedFields": {"pg": {"c": ["id", "ch"]}}}))
        .await
        .unwrap();
    let rows = rows_of(&out, "c");
    let mut admin = pg_admin(&db.name).await;
    let own: Vec<Option<String>> = sqlx::query_scalar(r#"SELECT ch::text FROM c ORDER BY id"#)
        .fetch_all(&mut admin)
        .await
        .unwrap();
    let ours: Vec<Option<String>> = rows
        .iter()
        .map(|r| r["ch"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ours, own, "{rows:?}");
    drop(admin);
    db.drop_db().await;
}

#[tokio::test]
async fn postgres_timestamps_near_the_end_of_its_range_stay_distinct() {
    let db = PgDb::create(
        "CREATE TABLE far (id int PRIMARY KEY, t timestamp, tz timestamptz);
         INSERT INTO far VALUES
           (1, '294247-01-10 04:00:54.775806', '294247-01-10 04:00:54.775806+00'),
           (2, '294247-01-10 04:00:54.775808', '294247-01-10 04:00:54.775808+00'),
           (3, '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999+00'),
           (4, '4713-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC');",
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let out = h
        .store_ndjson(json!({"mappedFields": {"pg": {"far": ["id", "t", "tz"]}}}))
        .await
        .unwrap();
    let got: Vec<(String, String)> = rows_of(&out, "far")
        .iter()
        .map(|r| {
            (
                r["t"].as_str().unwrap().to_owned(),
                r["tz"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        "+294247-01-10T04:00:54.775806Z",
        "+294247-01-10T04:00:54.775808Z",
        "+294276-12-31T23:59:59.999999Z",
        "-4712-01-01T00:00:00Z",
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(got[i], (w.to_string(), w.to_string()), "row {}", i + 1);
    }
    // The query path (a filter) prints the same bytes as the COPY path.
    let filtered = h
        .store_ndjson(json!({"mappedFields": {"pg": {"far": ["id", "t", "tz"]}},
            "filters": {"pg": {"far": {"id": {"gte": [1]}}}}}))
        .await
        .unwrap();
    assert_eq!(rows_of(&filtered, "far"), rows_of(&out, "far"));
    db.drop_db().await;
}

/// The JSON documents a tree cannot hold as written, and how each must arrive.
fn odd_documents() -> Vec<(&'static str, String)> {
    let deep = format!("{}1{}", "[".repeat(150), "]".repeat(150));
    vec![
        (r#"{"a": 1, "big": 1e400}"#, r#"{"a":1,"big":1e400}"#.into()),
        (r#"{"k": 1, "k": 2}"#, r#"{"k":1,"k":2}"#.into()),
        // More digits than a double holds, with no repeated key (#28).
        (
            r#"{"n": 0.1000000000000000000001, "m": 12345678901234567890123}"#,
            r#"{"n":0.1000000000000000000001,"m":12345678901234567890123}"#.into(),
        ),
        // An unpaired surrogate escape: the text, tagged, since strict readers (DuckDB)
        // refuse the document (#28).
        (r#"["\ud800"]"#, r#"{"$text":"[\"\\ud800\"]"}"#.into()),
        (Box::leak(deep.clone().into_boxed_str()), deep),
        (
            r#"{"b": [1.5, -0.0], "a": "x"}"#,
            r#"{"a":"x","b":[1.5,-0]}"#.into(),
        ),
        // The document `null` is not SQL NULL, and a tag-shaped document is not a tag
        // (docs/encodings.md, "JSON columns").
        ("null", r#"{"$json":null}"#.into()),
        (r#"{"$text": "x"}"#, r#"{"$json":{"$text":"x"}}"#.into()),
        (
            r#"{"$bytes": 1, "$bytes": 2}"#,
            r#"{"$json":{"$bytes":1,"$bytes":2}}"#.into(),
        ),
    ]
}

/// The NDJSON lines of `out` for `table`, as text (to see documents byte for byte).
fn raw_rows(out: &[u8]) -> Vec<&str> {
    std::str::from_utf8(out).unwrap().lines().collect()
}

#[tokio::test]
async fn json_documents_arrive_as_documents_on_every_dialect() {
    let docs = odd_documents();
    // MariaDB's JSON refuses lone surrogates and nesting past 32 levels: not stored there.
    let mariadb_takes = |text: &str| !text.contains("\\ud800") && !text.starts_with("[[[");
    let rows = |keep: &dyn Fn(&str) -> bool, backslashes: bool| -> Vec<String> {
        docs.iter()
            .enumerate()
            .filter(|(_, (text, _))| keep(text))
            .map(|(i, (text, _))| {
                let mut t = text.replace('\'', "''");
                if backslashes {
                    t = t.replace('\\', "\\\\");
                }
                format!("({}, '{t}')", i + 1)
            })
            .collect()
    };
    let all = |_: &str| true;
    let pg = PgDb::create(&format!(
        "CREATE TABLE docs (id int PRIMARY KEY, j json); INSERT INTO docs VALUES {};",
        rows(&all, false).join(", ")
    ))
    .await;
    let create = "CREATE TABLE docs (id int PRIMARY KEY, j JSON)".to_owned();
    let insert = format!(
        "INSERT INTO docs VALUES {}",
        rows(&mariadb_takes, true).join(", ")
    );
    let my = MyDb::create(&[&create, &insert]).await;
    let lite = LiteDb::create(&format!(
        "CREATE TABLE docs (id INTEGER PRIMARY KEY, j JSON); INSERT INTO docs VALUES {};",
        rows(&all, false).join(", ")
    ))
    .await;
    let h = harness(&[
        pg.descriptor("pg"),
        my.descriptor("my"),
        lite.descriptor("lite"),
    ])
    .await;
    for ds in ["pg", "my", "lite"] {
        let out = h
            .store_ndjson(json!({"mappedFields": {ds: {"docs": ["id", "j"]}}}))
            .await
            .unwrap();
        let lines = raw_rows(&out);
        let expected: Vec<&(&str, String)> = docs
            .iter()
            .filter(|(text, _)| ds != "my" || mariadb_takes(text))
            .collect();
        assert_eq!(lines.len(), expected.len(), "{ds}");
        for (line, (text, want)) in lines.iter().zip(expected) {
            let row = format!(r#""row":{{"id":{},"j":{want}}}"#, line_id(line));
            assert!(line.contains(&row), "{ds}: {text} → {line}");
        }
    }
    pg.drop_db().await;
    my.drop_db().await;
    lite.remove();
}

fn line_id(line: &str) -> i64 {
    // Not through a JSON parser: a document may hold a number no double can.
    let key = r#""row":{"id":"#;
    let rest = &line[line.find(key).expect("row.id first") + key.len()..];
    rest[..rest.find(',').unwrap()].parse().unwrap()
}

/// Rows that compare equal but print differently, in `order` (a permutation of 0..n).
fn permuted(rows: &[&str], order: &[usize]) -> String {
    order
        .iter()
        .map(|&i| rows[i])
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test]
async fn tables_without_a_key_give_the_same_bytes_whatever_their_physical_order() {
    let pg_rows = [
        "(1.0, 0::float8, '1 day'::interval)",
        "(1.00, '-0'::float8, '24 hours'::interval)",
        "(1.000, 0::float8, '1 day'::interval)",
    ];
    let my_rows = ["('a', 0e0)", "('A', -0e0)", "('a', -0e0)"];
    let lite_rows = ["(1, 'a')", "(1.0, 'A')", "('1', 'a')"];
    let h_for = |descriptors: Vec<fetcher_engine::ConnectionDescriptor>| async move {
        harness(&descriptors).await
    };
    let mut outputs: Vec<Vec<Vec<u8>>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let pg = PgDb::create(&format!(
            "CREATE TABLE nk (n numeric, f float8, i interval); INSERT INTO nk VALUES {};",
            permuted(&pg_rows, &order)
        ))
        .await;
        let create =
            "CREATE TABLE nk (t varchar(5) COLLATE utf8mb4_general_ci, d double)".to_owned();
        let insert = format!("INSERT INTO nk VALUES {}", permuted(&my_rows, &order));
        let my = MyDb::create(&[&create, &insert]).await;
        let lite = LiteDb::create(&format!(
            "CREATE TABLE nk (v, t TEXT COLLATE NOCASE); INSERT INTO nk VALUES {};",
            permuted(&lite_rows, &order)
        ))
        .await;
        let h = h_for(vec![
            pg.descriptor("pg"),
            my.descriptor("my"),
            lite.descriptor("lite"),
        ])
        .await;
        for (k, (ds, fields)) in [
            ("pg", json!(["n", "f", "i"])),
            ("my", json!(["t", "d"])),
            ("lite", json!(["v", "t"])),
        ]
        .into_iter()
        .enumerate()
        {
            let out = h
                .store_ndjson(json!({"mappedFields": {ds: {"nk": fields}}}))
                .await
                .unwrap();
            outputs[k].push(out);
        }
        pg.drop_db().await;
        my.drop_db().await;
        lite.remove();
    }
    for (k, ds) in ["pg", "my", "lite"].iter().enumerate() {
        let first = &outputs[k][0];
        assert_eq!(raw_rows(first).len(), 3, "{ds}");
        for other in &outputs[k][1..] {
            assert_eq!(
                String::from_utf8_lossy(other),
                String::from_utf8_lossy(first),
                "{ds}: another physical order, other bytes"
            );
        }
    }
}

#[tokio::test]
async fn a_sql_ascii_database_with_high_bit_bytes_is_extractable() {
    use sqlx::Executor as _;
    let name = format!("fx_ascii_{}", std::process::id());
    let mut admin = pg_admin("postgres").await;
    admin
        .execute(
            format!("CREATE DATABASE {name} ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
                .as_str(),
        )
        .await
        .unwrap();
    let db = PgDb { name };
    // Written as the bytes an old application stored (the server checks nothing).
    db.exec(
        r#"CREATE TABLE t (id int PRIMARY KEY, s text, v varchar(20), j json, n int, c char(5));
           INSERT INTO t VALUES (1, convert_from('\x636166e9'::bytea, 'SQL_ASCII'), 'plain', '{"a": 1}', 7, 'ab'),
                                (2, convert_from('\xc3a92075746638'::bytea, 'SQL_ASCII'), convert_from('\xff'::bytea, 'SQL_ASCII'), NULL, NULL, NULL),
                                (3, '\x41', 'a\b', '{"a": "x\\ny"}', NULL, convert_from('\xe9'::bytea, 'SQL_ASCII'));"#,
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    // `char(5)` keeps its padding, as on any other database (#28), also after a high
    // byte (#38: its send function refused it); backslashes are text, not escapes.
    let want = [
        json!({"id": 1, "s": "Y2Fm6Q==", "v": "plain", "j": {"a": 1}, "n": 7, "c": "ab   "}),
        json!({"id": 2, "s": "é utf8", "v": "/w==", "j": null, "n": null, "c": null}),
        json!({"id": 3, "s": "\\x41", "v": "a\\b", "j": {"a": "x\\ny"}, "n": null, "c": "6SAgICA="}),
    ];
    // Both paths: COPY (no filter) and the query (a filter on a text column).
    let copy = h
        .store_ndjson(json!({"mappedFields": {"pg": {"t": ["id", "s", "v", "j", "n", "c"]}}}))
        .await
        .expect("a SQL_ASCII table is extractable");
    assert_eq!(rows_of(&copy, "t"), want);
    let query = h
        .store_ndjson(
            json!({"mappedFields": {"pg": {"t": ["id", "s", "v", "j", "n", "c"]}},
            "filters": {"pg": {"t": {"v": {"ne": ["nothing"]}}}}}),
        )
        .await
        .unwrap();
    assert_eq!(rows_of(&query, "t"), want);
    drop(admin);
    db.drop_db().await;
}
