//! MongoDB through `fetcher serve` (docs/datasources.md, "MongoDB"): a connection of
//! type `MONGODB`, its discovered collections with their fields' types, and jobs that
//! read a collection in `_id` order with filters typed by the field, in NDJSON and
//! Parquet. The server is SecantusDB's wire server (`./scripts/mongo start`).

mod common;

use std::time::Duration;

use common::*;
use mongodb::bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use serde_json::{Value, json};

fn mongo_port() -> u16 {
    std::env::var("MONGO_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(27117)
}

/// A fresh database holding `orders`: 3000 documents inserted out of `_id` order, with a
/// nested object, a date, a Decimal128 and a field some documents lack.
fn load_orders() -> (String, Vec<ObjectId>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let uri = format!(
            "mongodb://127.0.0.1:{}/?directConnection=true",
            mongo_port()
        );
        let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let name = format!("serve_{nanos:x}");
        let db = client.database(&name);
        let mut ids: Vec<ObjectId> = (0..3000).map(|_| ObjectId::new()).collect();
        let docs: Vec<Document> = ids
            .iter()
            .enumerate()
            .rev()
            .map(|(i, id)| {
                let mut d = doc! {
                    "_id": *id,
                    "n": i as i64,
                    "amount": Bson::Decimal128(format!("{}.{:02}", i, i % 100).parse().unwrap()),
                    "at": DateTime::from_millis(1_700_000_000_000 + i as i64 * 60_000),
                    "who": {"name": format!("c{}", i % 7), "tier": (i % 3) as i32},
                };
                if i % 10 != 0 {
                    d.insert("note", format!("note-{i}"));
                }
                d
            })
            .collect();
        db.collection::<Document>("orders")
            .insert_many(docs)
            .await
            .unwrap();
        ids.sort();
        (name, ids)
    })
}

fn register(server: &Server, database: &str) -> String {
    let (status, created) = server.request(
        "POST",
        "/v1/management/connections",
        Some(
            &json!({"configName": "docs", "type": "MONGODB", "host": "127.0.0.1",
            "port": mongo_port(), "databaseName": database, "userName": ""}),
        ),
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

/// Runs a job to its end: its id and its final state.
fn run_job(server: &Server, body: Value) -> (String, Value) {
    let (status, accepted) = server.request("POST", "/v1/fetcher", Some(&body), &[]);
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["jobId"].as_str().unwrap().to_owned();
    let job = server.wait_job(&id, Duration::from_secs(60));
    (id, job)
}

#[test]
fn a_collection_is_discovered_and_read_in_id_order_with_typed_filters() {
    let (database, ids) = load_orders();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let id = register(&server, &database);

    // Discovery: the collection, its fields (nested ones dotted) and their observed types.
    let (status, schema) = server.request(
        "GET",
        &format!("/v1/management/connections/{id}/schema"),
        None,
        &[("X-Product-Name", "reporter")],
    );
    assert_eq!(status, 200, "{schema}");
    let text = schema.to_string();
    for field in ["_id", "amount", "at", "who.name", "note"] {
        assert!(
            text.contains(&format!("\"{field}\"")),
            "{field} in {schema}"
        );
    }

    // A filtered read: ObjectId, date and decimal filters match because their values are
    // converted to the field's type; rows in `_id` order; `note` absent where missing.
    let from = ids[100].to_hex();
    let (job_id, job) = run_job(
        &server,
        json!({
            "dataRequest": {
                "mappedFields": {"docs": {"orders": ["_id", "n", "amount", "at", "who.name", "note"]}},
                "filters": {"docs": {"orders": {
                    "_id": {"gte": [from]},
                    "at": {"lt": ["2023-11-15T22:13:20Z"]},
                    "amount": {"gte": ["150.00"]}
                }}}
            },
            "metadata": {"source": "reporter", "run": 1}
        }),
    );
    assert_eq!(job["status"], "completed", "{job}");
    let (ok, out, err) = open_result(dir.path(), &job_id);
    assert!(ok, "{err}");
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["row"].clone())
        .collect();
    // ObjectIds made in one process grow with their counter: `_id` order is `n` order.
    // 1_700_000_000 s is 2023-11-14T22:13:20Z, so `at` below a day later is n < 1440.
    let got: Vec<i64> = rows.iter().map(|r| r["n"].as_i64().unwrap()).collect();
    assert_eq!(got, (150..1440).collect::<Vec<_>>());
    let r = &rows[0];
    assert_eq!(r["_id"], json!(ids[150].to_hex()));
    assert_eq!(r["amount"], json!("150.50"), "Decimal128 as its exact text");
    assert_eq!(r["at"], json!("2023-11-15T00:43:20Z"));
    assert_eq!(
        r["who.name"],
        json!("c3"),
        "a nested path as its own column"
    );
    assert_eq!(
        r["note"],
        Value::Null,
        "a field the document lacks is null: {r}"
    );
    assert_eq!(rows[1]["note"], json!("note-151"));

    // The same job as Parquet: the same rows.
    let (parquet_id, parquet) = run_job(
        &server,
        json!({
            "dataRequest": {"mappedFields": {"docs": {"orders": ["n", "note"]}}},
            "resultFormat": "parquet",
            "metadata": {"source": "reporter", "run": 2}
        }),
    );
    assert_eq!(parquet["status"], "completed", "{parquet}");
    let out = tempfile::tempdir().unwrap();
    let opened = open_into(dir.path(), &parquet_id, out.path());
    assert!(
        opened.status.success(),
        "{}",
        String::from_utf8_lossy(&opened.stderr)
    );
    let read = std::process::Command::new(python())
        .args([
            "-c",
            "import sys, glob, pyarrow.parquet as pq\n\
t = pq.read_table(sorted(glob.glob(sys.argv[1] + '/**/*.parquet', recursive=True)))\n\
n = t.column('n').to_pylist(); note = t.column('note').to_pylist()\n\
assert n == list(range(3000)), n[:5]\n\
assert note[1] == 'note-1' and note[10] is None, note[:11]\n\
print(t.num_rows)",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), "3000");
    drop(server);
}

/// A big collection is cut into `_id` ranges (ObjectIds, docs/operations.md "Fan-out"),
/// read by several workers, and the result holds exactly the rows of one unsplit run, in
/// `_id` order.
#[test]
fn a_collection_fans_out_over_object_id_ranges_and_gives_one_runs_rows() {
    let (database, _) = load_orders();
    let body = |run: &str| {
        json!({"dataRequest": {"mappedFields": {"docs": {"orders": ["_id", "n", "who.name", "note"]}}},
               "metadata": {"source": "reporter", "run": run}})
    };
    let rows_of = |dir: &std::path::Path, id: &str| -> Vec<Value> {
        let (ok, out, err) = open_result(dir, id);
        assert!(ok, "{err}");
        out.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["row"].clone())
            .collect()
    };

    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Server::start_with(
        plain_dir.path(),
        &[],
        None,
        &[("FETCHER_FANOUT_RANGES", "1")],
    );
    register(&plain, &database);
    let (whole_id, whole) = run_job(&plain, body("whole"));
    assert_eq!(whole["status"], "completed", "{whole}");
    assert!(whole.get("resultParts").is_none(), "one piece: {whole}");
    let want = rows_of(plain_dir.path(), &whole_id);
    assert_eq!(want.len(), 3000);
    drop(plain);

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--workers", "3"],
        None,
        &[
            ("FETCHER_FANOUT_RANGES", "3"),
            ("FETCHER_FANOUT_RANGE_ROWS", "500"),
        ],
    );
    register(&server, &database);
    let (id, done) = run_job(&server, body("fanned"));
    assert_eq!(done["status"], "completed", "{done}");
    let parts = done["resultParts"]
        .as_array()
        .expect("a fanned-out job's parts");
    for i in 1..3 {
        assert!(
            parts
                .iter()
                .any(|p| p["path"].as_str().unwrap().contains(&format!("part-{i}"))),
            "no part of range {i}: {done}"
        );
    }
    assert_eq!(
        rows_of(dir.path(), &id),
        want,
        "the rows of one unsplit run"
    );
    drop(server);
}
