//! The connector conformance suite (`fetcher_engine::testing::connector`) on a MongoDB
//! wire server: the fixture loaded as documents (each table's key as `_id`, a keyless
//! table with increasing `_id`s in its row order, decimals as Decimal128, NULLs stored as
//! `null`), then the whole read contract. Declared differences: a document datasource
//! (`documents`).

mod common;

use common::*;
use fetcher_engine::TenantContext;
use fetcher_engine::testing::connector::{Capabilities, FixtureType, Subject, connector, fixture};
use mongodb::bson::{Bson, Document};
use serde_json::Value as J;

fn bson(v: &J, kind: FixtureType) -> Bson {
    match (v, kind) {
        (J::Null, _) => Bson::Null,
        (J::Number(n), _) => Bson::Int64(n.as_i64().expect("an integer")),
        (J::String(s), FixtureType::Decimal) => Bson::Decimal128(s.parse().expect("a decimal")),
        (J::String(s), _) => Bson::String(s.clone()),
        (other, _) => panic!("no fixture value {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_conforms() {
    let db = fresh_database("conformance").await;
    for t in fixture() {
        let key = t.primary_key.first().copied();
        let docs = t
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut d = Document::new();
                if key.is_none() {
                    d.insert("_id", i as i64 + 1);
                }
                for (c, v) in t.columns.iter().zip(row) {
                    let name = if Some(c.name) == key { "_id" } else { c.name };
                    d.insert(name, bson(v, c.kind));
                }
                d
            })
            .collect();
        load(&db, t.name, docs).await;
    }
    connector(&Subject {
        factory: factory(),
        descriptor: descriptor(db.name()),
        tenant: TenantContext::new("conformance").unwrap(),
        capabilities: Capabilities {
            key_ranges: true,
            exact_decimals: true,
            documents: true,
        },
    })
    .await;
    db.drop().await.ok();
}
