//! `bench-serve --mongo`: the collection, its connection, and the peer (the official
//! driver's raw read of the job's query, run as a child process so its CPU is measured as
//! `psql`'s is).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

/// The same fields in a MongoDB collection, keyed by `_id`.
pub const MONGO_FIELDS: [&str; 8] = ["_id", "u", "t", "n", "i", "b", "ts", "nt"];

/// `--mongo`: the bench reads a MongoDB collection.
pub fn mode() -> bool {
    std::env::args().any(|a| a == "--mongo")
}

/// The fields every job asks for.
pub fn fields() -> [&'static str; 8] {
    if mode() { MONGO_FIELDS } else { super::COLUMNS }
}

fn port() -> u16 {
    std::env::var("MONGO_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(27117)
}

/// A client of the bench's MongoDB server, on a runtime of its own.
fn client<T>(f: impl AsyncFnOnce(mongodb::Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let uri = format!("mongodb://127.0.0.1:{}/?directConnection=true", port());
        f(mongodb::Client::with_uri_str(&uri).await.unwrap()).await
    })
}

/// The peer of `--mongo` (run as `bench-serve --mongo-read DB`, by [`export`]): every document of
/// `bench` in `_id` order as raw BSON, counted; prints the count.
pub fn read(db: &str) {
    use mongodb::bson::{RawDocumentBuf, doc};
    let n = client(async |c| {
        let coll = c.database(db).collection::<RawDocumentBuf>("bench");
        let mut find = coll.find(doc! {}).sort(doc! {"_id": 1}).batch_size(1024);
        // The same query as the job's: its fields projected, in `_id` order.
        let mut p = mongodb::bson::Document::new();
        for f in MONGO_FIELDS {
            p.insert(f, 1);
        }
        find = find.projection(p);
        let mut cursor = find.await.unwrap();
        let mut n = 0u64;
        while cursor.advance().await.unwrap() {
            n += u64::from(!cursor.current().as_bytes().is_empty());
        }
        n
    });
    println!("{n}");
}

/// Loads `rows` documents of the bench's 8 fields into `db.bench`, 10,000 per insert.
pub fn create(db: &str, rows: u64) {
    client(async |c| {
        use mongodb::bson::{Binary, Bson, DateTime, Document, doc, spec::BinarySubtype};
        let coll = c.database(db).collection::<Document>("bench");
        let mut start = 1u64;
        while start <= rows {
            let end = (start + 9_999).min(rows);
            let docs: Vec<Document> = (start..=end)
                .map(|g| {
                    let g = g as i64;
                    let mut d = doc! {
                        "_id": g,
                        "u": Binary { subtype: BinarySubtype::Uuid, bytes: (g as u128 * 0x9e37_79b9_7f4a_7c15).to_be_bytes().to_vec() },
                        "t": format!("name-{g}"),
                        "n": Bson::Decimal128(format!("{}.{:04}", g, (g * 2345) % 10_000).parse().unwrap()),
                        "i": (g % 100_000) as i32,
                        "b": g % 2 == 0,
                        "ts": DateTime::from_millis(1_704_067_200_000 + g * 1000),
                    };
                    if g % 3 != 0 {
                        d.insert("nt", format!("note {g}"));
                    }
                    d
                })
                .collect();
            coll.insert_many(docs).await.unwrap();
            start = end + 1;
        }
    })
}

pub fn drop(db: &str) {
    client(async |c| c.database(db).drop().await.unwrap())
}

/// The job's connection to `db` (a server without authentication).
pub fn connection(db: &str) -> Value {
    json!({"configName": "bench", "type": "MONGODB", "host": "127.0.0.1",
        "port": port(), "databaseName": db})
}

/// The peer's read of `db`, in a child process; its output (the count) to `out`.
pub fn export(db: &str, out: &Path) {
    let read = Command::new(std::env::current_exe().unwrap())
        .args(["--mongo-read", db])
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    std::fs::write(out, &read.stdout).unwrap();
}
