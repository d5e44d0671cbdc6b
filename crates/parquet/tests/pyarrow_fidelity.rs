//! Every type of the connector fixtures, on real PostgreSQL, MariaDB and SQLite: the
//! Parquet parts of a job, read back with pyarrow, equal the NDJSON result of the same
//! job row for row (`tests/parquet_compare.py` renders each Parquet value the way
//! docs/encodings.md prints it), and each column has the type docs/parquet.md promises.
//!
//! Needs the project's venv with pyarrow (`./scripts/test` installs it; or set
//! `FETCHER_TEST_PYTHON`).

#[path = "../../connectors/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use fetcher_engine::{Context, ExecutionMode, ExtractionProgress, ExtractionRequest};
use fetcher_parquet::ParquetFormat;
use serde_json::{Value, json};

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("FETCHER_TEST_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        venv.exists(),
        "pyarrow is needed: run ./scripts/test once (it creates .venv), or set FETCHER_TEST_PYTHON"
    );
    venv
}

/// Runs `request` as NDJSON and as Parquet (tiny row groups, so files have several) and
/// compares them with pyarrow; returns the column types pyarrow reports per table.
async fn compare(h: &Harness, request: Value) -> Value {
    let ndjson = h.store_ndjson(request.clone()).await.unwrap();
    let ctx = Context::background();
    let request: ExtractionRequest = serde_json::from_value(request).unwrap();
    let mut plan = h
        .engine
        .plan_extraction(&ctx, &tenant(), &request)
        .await
        .unwrap();
    plan.mode = ExecutionMode::Store;
    let result = h
        .engine
        .execute_extraction_parts(
            &ctx,
            &plan,
            Arc::new(ParquetFormat::with_row_group_bytes(4096)),
            &ExtractionProgress::default(),
        )
        .await
        .unwrap();
    let reference = result.reference.unwrap();
    assert_eq!(reference.format, fetcher_engine::StoredFormat::Parquet);
    let dir = tempfile::tempdir().unwrap();
    let nd = dir.path().join("result.ndjson");
    std::fs::write(&nd, &ndjson).unwrap();
    let mut parts = Vec::new();
    for (i, part) in reference.parts.iter().enumerate() {
        let file = dir.path().join(format!("{i}.parquet"));
        std::fs::write(&file, h.sink.get(&part.path).expect("part stored")).unwrap();
        parts.push(json!({"config": part.config, "table": part.table, "file": file}));
    }
    let listing = dir.path().join("parts.json");
    std::fs::write(&listing, serde_json::to_vec(&parts).unwrap()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/parquet_compare.py");
    let out = std::process::Command::new(python())
        .arg(script)
        .arg(&nd)
        .arg(&listing)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "pyarrow comparison failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // DuckDB, a stricter reader, reads every part too (all rows, every column; into
    // Arrow, as Python's datetime holds no year past 9999).
    let duck = std::process::Command::new(python())
        .arg("-c")
        .arg(DUCKDB_READS_EVERY_PART)
        .arg(&listing)
        .output()
        .expect("python runs");
    assert!(
        duck.status.success(),
        "DuckDB could not read a part: {}",
        String::from_utf8_lossy(&duck.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const DUCKDB_READS_EVERY_PART: &str = "import duckdb, json, sys
for p in json.load(open(sys.argv[1])):
    duckdb.sql(\"select * from read_parquet('%s')\" % p['file']).fetch_arrow_table()
";

const PG_EDGE: &str = "
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE TABLE edge (id int PRIMARY KEY, i2 int2, i8 int8, f4 real, f8 float8, n numeric(18,4),
  nbig numeric(50,10), nfree numeric, b boolean, t text, vc varchar(10), c char(3), ch \"char\",
  u uuid, d date, ts timestamp, tstz timestamptz, tm time, ttz timetz, iv interval, j json,
  jb jsonb, by bytea, ia int[], ta text[], ip inet, m mood, o oid);
INSERT INTO edge VALUES
 (1, -32768, 9223372036854775807, 89.99, 0.1, -12345678901234.5678,
  1234567890123456789012345678901234567890.0123456789, 3.14159265358979323846264338327950288,
  true, 'héllo \"w\" 🎉', 'abc', 'ab', 'x', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '2024-02-29', '2024-04-05 09:00:00.123456', '2024-04-05 09:00:00.5+02', '23:59:59.999999',
  '10:20:30+05:30', '1 year 2 mons 3 days 04:05:06.000007', '{\"b\":[1,2.5],\"a\":null}',
  '{\"z\":1,\"big\":18446744073709551615}', '\\x00ff10', '{1,2,3}', '{a,NULL,\"c d\"}',
  '10.0.0.1/8', 'happy', 4294967295),
 (2, NULL, NULL, 'NaN', '-Infinity', NULL, NULL, 'NaN', false, '', NULL, NULL, NULL, NULL,
  'infinity', '-infinity', 'infinity', '00:00:00', NULL, NULL, '\"s\"', '[]', '\\x', '{}', NULL,
  NULL, 'sad', 0),
 (3, 0, -1, '-0', 1e300, 0, 0, 1e-20, NULL, NULL, NULL, NULL, NULL, NULL,
  '0044-03-15 BC', '12345-06-07 08:09:10', '1969-12-31 23:59:59.999999+00', NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
CREATE TABLE nothing (id bigint PRIMARY KEY, label text);
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_types_read_back_in_pyarrow_as_the_ndjson_of_the_same_job() {
    let db = PgDb::create(&format!("{}\n{PG_EDGE}", pg_fixture_sql())).await;
    let h = harness(&[db.descriptor("pg")]).await;
    let request = json!({"mappedFields": {"pg": {
        "accounts": [], "transactions": [], "accounting.invoices": [],
        "reporting.daily_summary": [], "edge": [], "nothing": []}}});
    let types = compare(&h, request).await;
    let edge = &types["pg.edge"];
    for (column, ty) in [
        ("i2", "int16"),
        ("id", "int32"),
        ("i8", "int64"),
        ("o", "uint32"),
        ("f4", "float"),
        ("f8", "double"),
        ("n", "decimal128(18, 4)"),
        ("nbig", "decimal256(50, 10)"),
        ("nfree", "string"),
        ("b", "bool"),
        ("t", "string"),
        ("u", "extension<arrow.uuid>"),
        ("d", "date32[day]"),
        ("ts", "timestamp[us]"),
        ("tstz", "timestamp[us, tz=UTC]"),
        ("tm", "time64[us]"),
        ("ttz", "string"),
        ("iv", "string"),
        ("j", "json"),
        ("jb", "json"),
        ("by", "binary"),
        ("ia", "json"),
        ("m", "string"),
    ] {
        assert_eq!(edge[column], ty, "pg.edge.{column}: {edge}");
    }
    // A table without rows is a file with its typed columns.
    assert_eq!(types["pg.nothing"]["id"], "int64");
    db.drop_db().await;
}

/// #28: arrays of types without a binary decoder are JSON arrays annotated JSON, as every
/// other array; a domain over `numeric(p,s)` (through any depth of domains) is `DECIMAL(p,s)`; a JSON document with an
/// unpaired surrogate escape leaves a file DuckDB reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_arrays_of_every_type_and_numeric_domains_are_typed_as_documented() {
    let db = PgDb::create(
        r#"CREATE EXTENSION IF NOT EXISTS hstore;
           CREATE TYPE mood AS ENUM ('sad', 'happy');
           CREATE TYPE pair AS (a int, b text);
           CREATE DOMAIN amount AS numeric(12,2);
           CREATE DOMAIN price AS amount;
           CREATE DOMAIN positive_price AS price CHECK (VALUE > 0);
           CREATE TABLE arr (id int PRIMARY KEY, e mood[], ip inet[], cd cidr[], mo money[],
             bi bit(3)[], vb varbit[], mac macaddr[], pt point[], x xml[], ts tsvector[],
             hs hstore[], co pair[], rg int4range[], amt amount, j json, pr price,
             pp positive_price);
           INSERT INTO arr VALUES
             (1, '{sad,happy}', '{10.0.0.1/32,10.0.0.0/8}', '{10.0.0.0/8}', '{1.50}', '{101}',
              '{1,01}', '{08:00:2b:01:02:03}', ARRAY[point(1,2)], ARRAY['<a/>'::xml],
              ARRAY['a b'::tsvector], ARRAY['k=>v'::hstore], ARRAY[ROW(1,'x, y')::pair],
              '[0:1]={"[1,5)",empty}', 1234567890.12, '["\ud800", 1]', 3.5, 0.01),
             (2, '{}', NULL, '{NULL}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
              NULL, NULL, '{"ok": true}', NULL, NULL);"#,
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let ndjson = h
        .store_ndjson(json!({"mappedFields": {"pg": {"arr": []}}}))
        .await
        .unwrap();
    let first = std::str::from_utf8(&ndjson)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let row: Value = serde_json::from_str(&first).unwrap();
    let row = &row["row"];
    assert_eq!(row["e"], json!(["sad", "happy"]), "{row}");
    assert_eq!(row["ip"], json!(["10.0.0.1", "10.0.0.0/8"]), "{row}");
    assert_eq!(row["co"], json!(["(1,\"x, y\")"]), "{row}");
    assert_eq!(
        row["rg"],
        json!({"lowerBounds": [0], "values": ["[1,5)", "empty"]}),
        "{row}"
    );
    assert_eq!(row["amt"], json!("1234567890.12"), "{row}");
    assert_eq!(row["pr"], json!("3.50"), "{row}");
    assert_eq!(row["pp"], json!("0.01"), "{row}");
    assert_eq!(row["j"], json!({"$text": "[\"\\ud800\", 1]"}), "{row}");
    let types = compare(&h, json!({"mappedFields": {"pg": {"arr": []}}})).await;
    let arr = &types["pg.arr"];
    for column in [
        "e", "ip", "cd", "mo", "bi", "vb", "mac", "pt", "x", "ts", "hs", "co", "rg", "j",
    ] {
        assert_eq!(arr[column], "json", "pg.arr.{column}: {arr}");
    }
    assert_eq!(arr["amt"], "decimal128(12, 2)", "{arr}");
    // Domains over domains resolve to the base type at any depth (#38).
    assert_eq!(arr["pr"], "decimal128(12, 2)", "{arr}");
    assert_eq!(arr["pp"], "decimal128(12, 2)", "{arr}");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_types_read_back_in_pyarrow_as_the_ndjson_of_the_same_job() {
    let mut stmts = mysql_fixture();
    stmts.extend([
        "CREATE TABLE edge (id int PRIMARY KEY, ti tinyint, tu tinyint unsigned, b1 tinyint(1), \
         si smallint, mi mediumint, ub bigint unsigned, sb bigint, dec65 decimal(65,30), d152 decimal(15,2), \
         f float, d double, t text, j json, dt datetime(6), ts timestamp(6) NULL, da date, tm time(6), \
         y year, bl blob, bt bit(8), en enum('a','b'), u uuid)"
            .to_owned(),
        "INSERT INTO edge VALUES (1, -128, 255, 1, -32768, -8388608, 18446744073709551615, \
         -9223372036854775808, '12345678901234567890123456789012345.123456789012345678901234567890', \
         -1500.25, 89.99, 0.1, 'h\u{e9}llo', '{\"b\":[1,2],\"a\":{\"big\":1152921504606846976}}', \
         '2024-04-05 09:00:00.123456', '2024-04-05 09:00:00.5', '2024-04-05', '-838:59:59', 2024, \
         X'00ff', b'101', 'b', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')"
            .to_owned(),
        "INSERT INTO edge (id) VALUES (2)".to_owned(),
        "CREATE TABLE nothing (id int PRIMARY KEY)".to_owned(),
    ]);
    let refs: Vec<&str> = stmts.iter().map(String::as_str).collect();
    let db = MyDb::create(&refs).await;
    let h = harness(&[db.descriptor("my")]).await;
    let request = json!({"mappedFields": {"my": {"transactions": [], "edge": [], "nothing": []}}});
    let types = compare(&h, request).await;
    let edge = &types["my.edge"];
    for (column, ty) in [
        ("ti", "int8"),
        ("tu", "uint8"),
        ("b1", "int8"),
        ("si", "int16"),
        ("mi", "int32"),
        ("ub", "uint64"),
        ("sb", "int64"),
        ("dec65", "decimal256(65, 30)"),
        ("d152", "decimal128(15, 2)"),
        ("f", "float"),
        ("d", "double"),
        ("j", "json"),
        ("dt", "timestamp[us]"),
        ("ts", "timestamp[us, tz=UTC]"),
        ("da", "date32[day]"),
        ("tm", "string"),
        ("y", "int16"),
        ("bl", "binary"),
        ("bt", "uint64"),
        ("en", "string"),
        ("u", "extension<arrow.uuid>"),
    ] {
        assert_eq!(edge[column], ty, "my.edge.{column}: {edge}");
    }
    assert_eq!(types["my.transactions"]["amount"], "decimal128(15, 2)");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_types_read_back_in_pyarrow_as_the_ndjson_of_the_same_job() {
    let db = LiteDb::create(
        "CREATE TABLE edge (id INTEGER PRIMARY KEY, r REAL, t TEXT, b BLOB, flag BOOLEAN, \
           j JSON, dec DECIMAL(10,2), u UUID, at DATETIME, other);
         INSERT INTO edge VALUES (1, 1.5, 'héllo', x'00ff', 2, '{\"b\":1,\"a\":[true]}', 12.5,
           x'a0eebc999c0b4ef8bb6d6bb9bd380a11', '2024-01-01 10:00:00', 7);
         INSERT INTO edge VALUES (2, -0.0, NULL, NULL, -1, '[1, 2]', NULL,
           'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 1700000000, 'x');
         INSERT INTO edge (id) VALUES (3);",
    )
    .await;
    let h = harness(&[db.descriptor("lite")]).await;
    let types = compare(&h, json!({"mappedFields": {"lite": {"edge": []}}})).await;
    let edge = &types["lite.edge"];
    for (column, ty) in [
        ("id", "int64"),
        ("r", "double"),
        ("t", "string"),
        ("b", "binary"),
        ("flag", "int64"),
        ("j", "json"),
        ("dec", "string"),
        ("u", "string"),
        ("at", "string"),
        ("other", "string"),
    ] {
        assert_eq!(edge[column], ty, "lite.edge.{column}: {edge}");
    }
    db.remove();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_its_parquet_type_cannot_hold_fails_the_job_as_validation() {
    // SQLite's dynamic typing: text in an INTEGER column has no Int64 form.
    let db = LiteDb::create(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO t VALUES (1, 'abc');",
    )
    .await;
    let h = harness(&[db.descriptor("lite")]).await;
    let ctx = Context::background();
    let request: ExtractionRequest =
        serde_json::from_value(json!({"mappedFields": {"lite": {"t": []}}})).unwrap();
    let plan = h
        .engine
        .plan_extraction(&ctx, &tenant(), &request)
        .await
        .unwrap();
    let e = h
        .engine
        .execute_extraction_parts(
            &ctx,
            &plan,
            Arc::new(ParquetFormat::new()),
            &ExtractionProgress::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.category(), fetcher_engine::Category::Validation);
    // The column is named, the value never (#28).
    assert_eq!(
        e.message(),
        format!(
            "{}: column 't.n'",
            fetcher_engine::error::msg::VALUE_NOT_REPRESENTABLE
        )
    );
    assert!(!e.to_string().contains("abc"));
    // Nothing is left behind: no part, no manifest.
    assert_eq!(h.sink.stored_count(), 0);
    db.remove();
}
