//! The MongoDB wire server the tests read: SecantusDB's `secantusd-rs` on 127.0.0.1,
//! started by `./scripts/mongo start` (the test scripts do it; `MONGO_PORT`
//! names another port). A surrogate for `mongod`: where it differs, the test that meets
//! the difference names it.

#![allow(dead_code)]

use std::sync::Arc;

use fetcher_connect::{HostPolicy, StaticCredentials};
use fetcher_engine::{ConnectionDescriptor, DatasourceType};
use fetcher_mongo::MongoConnectorFactory;
use mongodb::bson::Document;
use mongodb::{Client, Database};

pub fn port() -> u16 {
    std::env::var("MONGO_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(27117)
}

/// A client of the test server; panics with what to run when none listens.
pub async fn client() -> Client {
    let uri = format!("mongodb://127.0.0.1:{}/?directConnection=true", port());
    let c = Client::with_uri_str(&uri).await.expect("a client");
    c.database("admin")
        .run_command(mongodb::bson::doc! {"ping": 1})
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no MongoDB wire server on 127.0.0.1:{} ({e}): run ./scripts/mongo start",
                port()
            )
        });
    c
}

/// A database of its own for one test (dropped by the next run's server start).
pub async fn fresh_database(tag: &str) -> Database {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    client().await.database(&format!("{tag}_{nanos:x}"))
}

/// Inserts `docs` into `collection` of `db` in their order.
pub async fn load(db: &Database, collection: &str, docs: Vec<Document>) {
    db.create_collection(collection).await.ok();
    for chunk in docs.chunks(500) {
        db.collection::<Document>(collection)
            .insert_many(chunk.to_vec())
            .await
            .expect("insert");
    }
}

/// An internal (no host safety) connection to database `db`.
pub fn descriptor(db: &str) -> ConnectionDescriptor {
    ConnectionDescriptor {
        config_name: "mg".into(),
        datasource_type: DatasourceType::MongoDb,
        host: "127.0.0.1".into(),
        port: port(),
        database_name: db.into(),
        ..Default::default()
    }
}

pub fn factory() -> Arc<MongoConnectorFactory> {
    Arc::new(MongoConnectorFactory::new(
        Arc::new(StaticCredentials::new()),
        HostPolicy::single_tenant(),
    ))
}
