//! Differential fidelity: generated tables of every commonly used column type, seeded,
//! with extremes, extracted through the engine and compared value by value with the
//! database's own rendering of the same rows (PostgreSQL `::text`, `encode`, `format`;
//! MariaDB `CAST(… AS CHAR)`, `HEX`; SQLite `quote`, `printf('%!.17g')`, `hex`), under
//! the rules of docs/encodings.md.
//!
//! `FETCHER_FIDELITY_ROWS` sets the generated rows per dialect (default 2000, what
//! `./scripts/test` runs); for a deeper run:
//!
//! ```sh
//! FETCHER_FIDELITY_ROWS=50000 cargo test -p fetcher-connectors --test fidelity -- --nocapture
//! ```

mod common;

use common::*;
use serde_json::{Value as J, json};
use sqlx::Row as _;

fn rows() -> usize {
    std::env::var("FETCHER_FIDELITY_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// How one column's extracted value must relate to the database's own text of it.
#[derive(Clone, Copy)]
enum Rule {
    /// Our JSON number's text is the database's text (integers).
    IntText,
    /// Our string is the database's text.
    Same,
    /// A double: the database's text parses to the same bits as our number; NaN and the
    /// infinities are our tagged strings.
    F64,
    /// A float4: the same, in 32 bits.
    F32,
    /// `true`/`false` (PostgreSQL's `bool::text`) as a JSON boolean.
    PgBool,
    /// The database's `YYYY-MM-DD` as our midnight timestamp.
    Date,
    /// The database's `YYYY-MM-DD HH:MM:SS[.f]` (an optional `+00` zone) as ours.
    Timestamp,
    /// Hex of the bytes (no `\x`), as our Base64.
    Hex,
    /// The same JSON document, compared as values, read by the documented rule for JSON
    /// columns: a one-key `$json` object holds the document, a one-key `$text` object
    /// text that is no JSON; anything else is the document itself, never `null`.
    JsonDoc,
    /// PostgreSQL's array text (`{1,NULL}`, `[0:2]={1,2,3}`) as our JSON array, or as the
    /// tagged `{"lowerBounds": [..], "values": [..]}` when a lower bound is not 1.
    PgArray,
}

/// The same JSON value: numbers compared as numbers (a document's `-5.0` is our `-5`:
/// integral doubles print without a fraction, as in float columns and the reference),
/// integers beyond 2^53 exactly.
fn same_json(a: &J, b: &J) -> bool {
    match (a, b) {
        (J::Number(x), J::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(p), Some(q), _, _) => p == q,
            (_, _, Some(p), Some(q)) => p == q,
            _ => {
                x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
                    || x.as_f64() == y.as_f64()
            }
        },
        (J::Array(x), J::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

fn check(rule: Rule, theirs: Option<&str>, ours: &J) -> Result<(), String> {
    let Some(t) = theirs else {
        return if ours.is_null() {
            Ok(())
        } else {
            Err(format!("NULL became {ours}"))
        };
    };
    let ok = match rule {
        Rule::IntText => {
            let text = (ours.as_i64().map(|v| v.to_string()))
                .or_else(|| ours.as_u64().map(|v| v.to_string()));
            text.as_deref() == Some(t)
        }
        Rule::Same => ours.as_str() == Some(t),
        Rule::F64 => match t {
            "NaN" | "Infinity" | "-Infinity" => ours.as_str() == Some(t),
            _ => {
                let want: f64 = t.parse().map_err(|e| format!("{t}: {e}"))?;
                ours.as_f64().map(f64::to_bits) == Some(want.to_bits())
            }
        },
        Rule::F32 => match t {
            "NaN" | "Infinity" | "-Infinity" => ours.as_str() == Some(t),
            _ => {
                let want: f32 = t.parse().map_err(|e| format!("{t}: {e}"))?;
                ours.as_f64().map(|v| (v as f32).to_bits()) == Some(want.to_bits())
                    && ours.to_string().parse::<f32>().ok() == Some(want)
            }
        },
        Rule::PgBool => ours.as_bool() == Some(t == "true"),
        // PostgreSQL's `infinity` / `-infinity` are the documented strings, as written.
        Rule::Date | Rule::Timestamp if matches!(t, "infinity" | "-infinity") => {
            ours.as_str() == Some(t)
        }
        Rule::Date => ours.as_str() == Some(&format!("{t}T00:00:00Z")),
        Rule::Timestamp => {
            let t = t.strip_suffix("+00").unwrap_or(t);
            ours.as_str() == Some(&format!("{}Z", t.replacen(' ', "T", 1)))
        }
        Rule::Hex => {
            let bytes: Vec<u8> = (0..t.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
                .collect();
            ours.as_str() == Some(&fetcher_engine::json::base64(&bytes))
        }
        Rule::JsonDoc => {
            let doc = |t: &str| serde_json::from_str::<J>(t);
            match ours
                .as_object()
                .filter(|m| m.len() == 1)
                .and_then(|m| m.iter().next())
            {
                Some((tag, inner)) if tag == "$json" => {
                    doc(t).is_ok_and(|theirs| same_json(&theirs, inner))
                }
                Some((tag, inner)) if tag == "$text" => {
                    doc(t).is_err() && inner.as_str() == Some(t)
                }
                Some((tag, _)) if tag.starts_with('$') => false,
                _ => !ours.is_null() && doc(t).is_ok_and(|theirs| same_json(&theirs, ours)),
            }
        }
        Rule::PgArray => {
            let (bounds, body) = match t.split_once('=') {
                Some((dims, body)) if t.starts_with('[') => {
                    let lower: Vec<i64> = dims
                        .split(']')
                        .filter(|d| !d.is_empty())
                        .map(|d| {
                            d.trim_start_matches('[')
                                .split(':')
                                .next()
                                .unwrap()
                                .parse()
                                .unwrap()
                        })
                        .collect();
                    (Some(lower), body)
                }
                _ => (None, t),
            };
            let values: J = serde_json::from_str(
                &body
                    .replace('{', "[")
                    .replace('}', "]")
                    .replace("NULL", "null"),
            )
            .map_err(|e| format!("{t}: {e}"))?;
            match bounds {
                None => same_json(&values, ours),
                Some(lower) => *ours == json!({"lowerBounds": lower, "values": values}),
            }
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("database {t:?}, extracted {ours}"))
    }
}

/// Compares the extracted rows with the reference rows (`id` first, then one text per
/// column of `columns`), returning how many values were compared.
fn compare(
    dialect: &str,
    extracted: &[J],
    reference: &[(i64, Vec<Option<String>>)],
    columns: &[(&str, Rule)],
) -> usize {
    assert_eq!(extracted.len(), reference.len(), "{dialect}: row count");
    let mut compared = 0;
    let mut failures = Vec::new();
    for (row, (id, texts)) in extracted.iter().zip(reference) {
        assert_eq!(row["id"].as_i64(), Some(*id), "{dialect}: row order");
        for ((name, rule), text) in columns.iter().zip(texts) {
            compared += 1;
            if let Err(e) = check(*rule, text.as_deref(), &row[*name]) {
                failures.push(format!("{dialect} id {id} {name}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {compared} values differ, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    eprintln!(
        "fidelity {dialect}: {compared} values of {} rows identical",
        reference.len()
    );
    compared
}

async fn extract(h: &Harness, ds: &str, fields: &[&str]) -> Vec<J> {
    let out = h
        .store_ndjson(json!({"mappedFields": {ds: {"fid": fields}}}))
        .await
        .unwrap_or_else(|e| panic!("{ds}: {e}"));
    rows_of(&out, "fid")
}

const PG_COLUMNS: [(&str, Rule, &str); 18] = [
    ("i2", Rule::IntText, "i2::text"),
    ("i4", Rule::IntText, "i4::text"),
    ("i8", Rule::IntText, "i8::text"),
    ("num", Rule::Same, "num::text"),
    ("f4", Rule::F32, "f4::text"),
    ("f8", Rule::F64, "f8::text"),
    ("t", Rule::Same, "t"),
    ("b", Rule::PgBool, "b::text"),
    ("d", Rule::Date, "d::text"),
    ("ts", Rule::Timestamp, "ts::text"),
    ("tz", Rule::Timestamp, "tz::text"),
    ("tm", Rule::Same, "tm::text"),
    ("u", Rule::Same, "u::text"),
    ("by", Rule::Hex, "encode(by, 'hex')"),
    ("j", Rule::JsonDoc, "j::text"),
    ("jb", Rule::JsonDoc, "jb::text"),
    ("ia", Rule::PgArray, "ia::text"),
    (
        "ip",
        Rule::Same,
        "CASE WHEN ip IS NULL THEN NULL ELSE format('%s', ip) END",
    ),
];

#[tokio::test]
async fn postgres_values_are_the_databases_own() {
    let n = rows();
    let db = PgDb::create(&format!(
        r#"SELECT setseed(0.4242);
        CREATE TABLE fid (id int PRIMARY KEY, i2 int2, i4 int4, i8 int8, num numeric, f4 float4, f8 float8,
          t text, b bool, d date, ts timestamp, tz timestamptz, tm time, u uuid, by bytea, j json, jb jsonb, ip inet, ia int[]);
        INSERT INTO fid SELECT g,
          floor(random() * 65536 - 32768)::int2,
          floor(random() * 4294967296 - 2147483648)::int8::int4,
          floor((random() - 0.5) * 1.8e19)::numeric::int8,
          round(((random() - 0.5) * 10 ^ (g % 40))::numeric, g % 15),
          ((random() - 0.5) * 10 ^ (g % 60 - 30))::float4,
          ((random() - 0.5) * 10 ^ (g % 600 - 300))::float8,
          (SELECT string_agg(chr(1 + floor(random() * 55000)::int), '') FROM generate_series(1, g % 24)),
          random() < 0.5,
          date '0001-01-01' + floor(random() * 3652058)::int,
          timestamp '0001-01-01' + random() * interval '3652058 days',
          timestamptz '0001-01-01 00:00:00+00' + random() * interval '3652058 days',
          time '00:00' + random() * interval '86399.999999 seconds',
          md5(g::text)::uuid,
          decode(md5(g::text) || lpad(to_hex(g), 8, '0'), 'hex'),
          json_build_object('k', g, 'f', (random() - 0.5) * 10 ^ (g % 40 - 20), 's', 'x' || g, 'a', json_build_array(random(), g % 7 = 0, NULL)),
          jsonb_build_object('k', g, 'f', (random() - 0.5) * 1e9, 'n', json_build_object('deep', g % 3)),
          ('10.' || (g % 256) || '.' || (g / 256 % 256) || '.1/' || (8 + g % 25))::inet,
          CASE WHEN g % 4 = 0 THEN ('[' || (g % 9 - 4) || ':' || (g % 9 - 2) || ']={{' || g || ',' || -g || ',NULL}}')::int[]
               ELSE ARRAY[g, -g, NULL] END
        FROM generate_series(1, {n}) g;
        UPDATE fid SET i2 = NULL, num = NULL, f8 = NULL, t = NULL, ts = NULL, by = NULL, j = NULL, ip = NULL, ia = NULL WHERE id % 17 = 0;
        INSERT INTO fid VALUES
          (-1, -32768, -2147483648, -9223372036854775808, '-0.0000000000000000000001', '-3.4028235e38', '-1.7976931348623157e308',
           '', false, '0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00', '00:00:00', '00000000-0000-0000-0000-000000000000', '', '{{}}', '[]', '0.0.0.0/0', '{{}}'),
          (-2, 32767, 2147483647, 9223372036854775807, (repeat('9', 1000) || '.' || repeat('1', 500))::numeric, '1e-45', '5e-324',
           'hé 🎉 日本語 "q" \ back', true, '9999-12-31', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', '23:59:59.999999',
           'ffffffff-ffff-ffff-ffff-ffffffffffff', '\x00ff', '[-2027874574.0522642, 1e-300, 18446744073709551615]', '{{"a": 1.7976931348623157e308}}', '::1', '[0:1][5:6]={{{{1,2}},{{3,4}}}}'),
          (-3, 0, 0, 0, 'NaN', 'NaN', 'NaN', 'x', NULL, 'infinity', 'infinity', '-infinity', '24:00:00', NULL, NULL, 'null', '"s"', 'fe80::1/64', '[-2147483648:-2147483648]={{7}}'),
          (-4, NULL, NULL, NULL, '-Infinity', 'Infinity', '-Infinity', NULL, NULL, '-infinity', '-infinity', 'infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL),
          (-5, 1, 1, 1, '0', '-0', '-0', ' ', true, '2000-02-29', '2000-02-29 12:00:00.5', '2000-02-29 12:00:00.000001+00', '12:00:00.5', NULL, NULL, '0', '-0.0', NULL, '[2:3]={{1,2}}'),
          (-6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           '{{"$text": "x", "$text": "y"}}', '{{"$json": null}}', NULL, '{{{{1}},{{2}}}}');"#
    ))
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let names: Vec<&str> = std::iter::once("id")
        .chain(PG_COLUMNS.iter().map(|c| c.0))
        .collect();
    let extracted = extract(&h, "pg", &names).await;
    let mut admin = pg_admin(&db.name).await;
    sqlx::query("SET TimeZone = 'UTC'")
        .execute(&mut admin)
        .await
        .unwrap();
    let select: Vec<&str> = PG_COLUMNS.iter().map(|c| c.2).collect();
    let reference: Vec<(i64, Vec<Option<String>>)> = sqlx::query(&format!(
        "SELECT id::int8, {} FROM fid ORDER BY id",
        select.join(", ")
    ))
    .fetch_all(&mut admin)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        (
            r.get::<i64, _>(0),
            (1..=select.len()).map(|i| r.get(i)).collect(),
        )
    })
    .collect();
    let columns: Vec<(&str, Rule)> = PG_COLUMNS.iter().map(|(n, r, _)| (*n, *r)).collect();
    let count = compare("pg", &extracted, &reference, &columns);
    assert!(count >= n * columns.len());
    drop(admin);
    db.drop_db().await;
}

#[tokio::test]
async fn mariadb_values_are_the_databases_own() {
    let n = rows();
    let create = "CREATE TABLE fid (id int PRIMARY KEY, ti tinyint, si smallint, mi mediumint, i int, bi bigint, \
        ub bigint unsigned, de decimal(30,10), d double, v varchar(64), da date, dt datetime(6), ts timestamp(6) NULL, \
        tm time(6), bl blob, j json)"
        .to_owned();
    let insert = format!(
        "INSERT INTO fid SELECT seq, FLOOR(RAND(seq) * 256) - 128, FLOOR(RAND(seq + 1) * 65536) - 32768, \
         FLOOR(RAND(seq + 2) * 16777216) - 8388608, FLOOR(RAND(seq + 3) * 4294967296) - 2147483648, \
         CAST((RAND(seq + 4) - 0.5) * 9.2e18 AS SIGNED), CAST(RAND(seq + 5) * 1.8e19 AS UNSIGNED), \
         ROUND((RAND(seq + 6) - 0.5) * 1e19, CAST(seq AS SIGNED) % 11), (RAND(seq + 7) - 0.5) * POW(10, CAST(seq AS SIGNED) % 600 - 300), \
         CONCAT('v', seq, ' ', SUBSTRING('héllo wörld 🎉 日本語 \"q\"', 1 + seq % 12)), \
         DATE_ADD('1000-01-01', INTERVAL FLOOR(RAND(seq + 8) * 3287182) DAY), \
         DATE_ADD('1000-01-01', INTERVAL FLOOR(RAND(seq + 9) * 284000000000000000) MICROSECOND), \
         DATE_ADD('1970-01-02', INTERVAL FLOOR(RAND(seq + 10) * 2145000000000000) MICROSECOND), \
         SEC_TO_TIME(FLOOR(RAND(seq + 11) * 6040797) - 3020398 + FLOOR(RAND(seq + 12) * 1000000) / 1000000), \
         UNHEX(MD5(seq)), JSON_OBJECT('k', seq, 's', CONCAT('x', seq), 'f', RAND(seq + 13), 'a', JSON_ARRAY(seq % 7 = 0, NULL)) \
         FROM seq_1_to_{n}"
    );
    let nulls = "UPDATE fid SET ti = NULL, de = NULL, d = NULL, v = NULL, dt = NULL, bl = NULL, j = NULL WHERE id % 17 = 0".to_owned();
    let extremes = "INSERT INTO fid VALUES \
        (-1, -128, -32768, -8388608, -2147483648, -9223372036854775808, 0, '-99999999999999999999.9999999999', -1.7976931348623157e308, '', '1000-01-01', '1000-01-01 00:00:00', '1970-01-02 00:00:00', '-838:59:59', '', '{}'), \
        (-2, 127, 32767, 8388607, 2147483647, 9223372036854775807, 18446744073709551615, '99999999999999999999.9999999999', 5e-324, 'é 🎉', '9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '838:59:59', X'00FF', '[1.5, -2027874574.0522642]')"
        .to_owned();
    let db = MyDb::create(&[&create, &insert, &nulls, &extremes]).await;
    let h = harness(&[db.descriptor("my")]).await;
    let columns: [(&str, Rule, &str); 15] = [
        ("ti", Rule::IntText, "CAST(ti AS CHAR)"),
        ("si", Rule::IntText, "CAST(si AS CHAR)"),
        ("mi", Rule::IntText, "CAST(mi AS CHAR)"),
        ("i", Rule::IntText, "CAST(i AS CHAR)"),
        ("bi", Rule::IntText, "CAST(bi AS CHAR)"),
        ("ub", Rule::IntText, "CAST(ub AS CHAR)"),
        ("de", Rule::Same, "CAST(de AS CHAR)"),
        ("d", Rule::F64, "CAST(d AS CHAR)"),
        ("v", Rule::Same, "v"),
        ("da", Rule::Date, "CAST(da AS CHAR)"),
        (
            "dt",
            Rule::Timestamp,
            "TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(dt AS CHAR)))",
        ),
        (
            "ts",
            Rule::Timestamp,
            "TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(ts AS CHAR)))",
        ),
        (
            "tm",
            Rule::Same,
            "TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(tm AS CHAR)))",
        ),
        ("bl", Rule::Hex, "HEX(bl)"),
        ("j", Rule::JsonDoc, "CAST(j AS CHAR)"),
    ];
    let names: Vec<&str> = std::iter::once("id")
        .chain(columns.iter().map(|c| c.0))
        .collect();
    let extracted = extract(&h, "my", &names).await;
    let mut admin = my_admin(Some(&db.name)).await;
    sqlx::query("SET time_zone = '+00:00'")
        .execute(&mut admin)
        .await
        .unwrap();
    let select: Vec<&str> = columns.iter().map(|c| c.2).collect();
    let reference: Vec<(i64, Vec<Option<String>>)> = sqlx::query(&format!(
        "SELECT CAST(id AS SIGNED), {} FROM fid ORDER BY id",
        select.join(", ")
    ))
    .fetch_all(&mut admin)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        let texts = (1..=select.len())
            .map(|i| {
                r.try_get_unchecked::<Option<Vec<u8>>, _>(i)
                    .unwrap()
                    .map(|b| String::from_utf8(b).unwrap())
            })
            .collect();
        (r.get::<i64, _>(0), texts)
    })
    .collect();
    let rules: Vec<(&str, Rule)> = columns.iter().map(|c| (c.0, c.1)).collect();
    let count = compare("mariadb", &extracted, &reference, &rules);
    assert!(count >= n * rules.len());
    drop(admin);
    db.drop_db().await;
}

/// A seeded generator (PCG-style LCG), so the SQLite values are the same every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}

#[tokio::test]
async fn sqlite_values_are_the_databases_own() {
    let n = rows();
    let db = LiteDb::create(
        "CREATE TABLE fid (id INTEGER PRIMARY KEY, i INTEGER, r REAL, t TEXT, bl BLOB, flag BOOLEAN, j JSON);",
    )
    .await;
    let mut g = Lcg(42);
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.path.display()))
        .await
        .unwrap();
    use sqlx::Connection as _;
    let mut tx = conn.begin().await.unwrap();
    for id in 1..=n as i64 {
        let null = id % 17 == 0;
        let i = g.next() as i64 ^ ((g.next() as i64) << 53);
        let r = f64::from_bits(g.next() << 11 | g.next() & 0x7ff);
        let r = if r.is_finite() { r } else { (id as f64) / 3.0 };
        let text: String = (0..(g.next() % 20))
            .filter_map(|_| char::from_u32((g.next() % 0x2_0000) as u32 + 1))
            .collect();
        let blob: Vec<u8> = (0..(g.next() % 16)).map(|_| g.next() as u8).collect();
        let flag = (g.next() % 5) as i64 - 1;
        let doc = json!({"k": id, "f": r, "s": text, "a": [flag, null]}).to_string();
        sqlx::query("INSERT INTO fid VALUES (?, ?, ?, ?, ?, ?, ?)")
            .bind(id)
            .bind((!null).then_some(i))
            .bind((!null).then_some(r))
            .bind((!null).then_some(text))
            .bind((!null).then_some(blob))
            .bind(flag)
            .bind((!null).then_some(doc))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO fid VALUES (-1, -9223372036854775807 - 1, -1.7976931348623157e308, '', X'', 0, '{}'), \
         (-2, 9223372036854775807, 5e-324, 'é 🎉 \"q\"', X'00FF', 865, '[-2027874574.0522642]'), \
         (-3, 0, 0.5, ' ', X'00', 1, 'null'), \
         (-4, NULL, NULL, NULL, NULL, 0, '\"quoted\"'), \
         (-5, NULL, NULL, NULL, NULL, 0, 'quoted'), \
         (-6, NULL, NULL, NULL, NULL, 0, '{\"$text\": \"quoted\"}'), \
         (-7, NULL, NULL, NULL, NULL, 0, ' [1, 2] ')",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let h = harness(&[db.descriptor("lite")]).await;
    let columns: [(&str, Rule, &str); 6] = [
        (
            "i",
            Rule::IntText,
            "CASE WHEN i IS NULL THEN NULL ELSE quote(i) END",
        ),
        (
            "r",
            Rule::F64,
            "CASE WHEN r IS NULL THEN NULL ELSE printf('%!.17g', r) END",
        ),
        ("t", Rule::Same, "t"),
        (
            "bl",
            Rule::Hex,
            "CASE WHEN bl IS NULL THEN NULL ELSE hex(bl) END",
        ),
        ("flag", Rule::IntText, "quote(flag)"),
        ("j", Rule::JsonDoc, "j"),
    ];
    let names: Vec<&str> = std::iter::once("id")
        .chain(columns.iter().map(|c| c.0))
        .collect();
    let extracted = extract(&h, "lite", &names).await;
    let select: Vec<&str> = columns.iter().map(|c| c.2).collect();
    let reference: Vec<(i64, Vec<Option<String>>)> = sqlx::query(&format!(
        "SELECT id, {} FROM fid ORDER BY id",
        select.join(", ")
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        let texts = (1..=select.len())
            .map(|i| r.try_get_unchecked::<Option<String>, _>(i).unwrap())
            .collect();
        (r.get::<i64, _>(0), texts)
    })
    .collect();
    let rules: Vec<(&str, Rule)> = columns.iter().map(|c| (c.0, c.1)).collect();
    let count = compare("sqlite", &extracted, &reference, &rules);
    assert!(count >= n * rules.len());
    db.remove();
}

/// The values docs/encodings.md lists as reading alike ("Values that read alike"), pinned
/// so the list stays true: in a SQLite column whose values mix storage classes, REAL ±∞
/// and TEXT `'Infinity'`, a BLOB and the TEXT of its Base64, and (no declared type) REAL
/// `1.0` and INTEGER `1` arrive the same; the database's `typeof` tells them apart.
#[tokio::test]
async fn sqlite_values_that_read_alike_are_the_documented_ones() {
    let db = LiteDb::create(
        r#"CREATE TABLE fid (id INTEGER PRIMARY KEY, r REAL, u, j JSON);
         INSERT INTO fid VALUES (1, 9e999, 9e999, 9e999), (2, 'Infinity', 'Infinity', '"Infinity"'),
           (3, NULL, X'010203', NULL), (4, NULL, 'AQID', NULL), (5, NULL, 1.0, NULL), (6, NULL, 1, NULL),
           (7, -9e999, -9e999, -9e999), (8, '-Infinity', '-Infinity', '"-Infinity"');"#,
    )
    .await;
    let h = harness(&[db.descriptor("lite")]).await;
    let rows = extract(&h, "lite", &["id", "r", "u", "j"]).await;
    let cell = |id: usize, c: &str| rows[id - 1][c].clone();
    for (a, b, column) in [
        (1, 2, "r"),
        (1, 2, "u"),
        (1, 2, "j"),
        (7, 8, "j"),
        (7, 8, "r"),
        (3, 4, "u"),
        (5, 6, "u"),
    ] {
        assert_eq!(
            cell(a, column),
            cell(b, column),
            "ids {a} and {b}, column {column}"
        );
    }
    assert_eq!(cell(1, "r"), json!("Infinity"));
    assert_eq!(cell(1, "j"), json!("Infinity"), "{:?}", rows[0]);
    assert_eq!(cell(3, "u"), json!("AQID"));
    assert_eq!(cell(5, "u").to_string(), "1");
    db.remove();
}

/// JSON numbers with more digits than a double holds arrive as written, whatever else the
/// document holds (one rule, docs/encodings.md "JSON columns"): the document's text
/// compacted, compared with PostgreSQL's own (json keeps the text; jsonb's numeric is exact).
#[tokio::test]
async fn postgres_json_numbers_beyond_a_double_arrive_as_written() {
    let db = PgDb::create(
        r#"CREATE TABLE fid (id int PRIMARY KEY, j json, jb jsonb);
           INSERT INTO fid VALUES
             (1, '{"n": 0.1000000000000000000001}', '{"n": 0.1000000000000000000001}'),
             (2, '[12345678901234567890123, 1]', '[12345678901234567890123, 1]'),
             (3, '{"n": 9007199254740993}', '{"n": 9007199254740993}'),
             (4, '{"n": 0.5, "m": [1.25]}', '{"n": 0.5, "m": [1.25]}');"#,
    )
    .await;
    let h = harness(&[db.descriptor("pg")]).await;
    let out = h
        .store_ndjson(json!({"mappedFields": {"pg": {"fid": ["id", "j", "jb"]}}}))
        .await
        .unwrap();
    let lines: Vec<&str> = std::str::from_utf8(&out)
        .unwrap()
        .lines()
        .filter(|l| l.contains(r#""table":"fid""#))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for digits in [
        "0.1000000000000000000001",
        "12345678901234567890123",
        "9007199254740993",
    ] {
        assert_eq!(
            lines
                .iter()
                .map(|l| l.matches(digits).count())
                .sum::<usize>(),
            2,
            "{digits} in json and jsonb: {lines:?}"
        );
    }
    // A document a double holds exactly is a tree as before: keys sorted, numbers as the
    // double prints.
    assert!(
        lines[3].contains(r#""j":{"m":[1.25],"n":0.5}"#),
        "{}",
        lines[3]
    );
    db.drop_db().await;
}
