//! #28 on the Lambda handlers (DynamoDB's schema cache, on moto or with LocalStack): a
//! table and a column created after a connection's first job are read by the next job
//! that names them, even with the cache trusted for an hour.

use std::time::Duration;

use fetcher_aws::host::HostConfig;
use fetcher_e2e::*;
use fetcher_host::model::JobStatus;
use serde_json::{Value, json};

const DB: &str = "fetcher_lambda_schema_changes";

/// Runs the job `mapped` asks for of the `schemas` connection; asserts it completed.
async fn run(h: &Handlers, mapped: Value, n: u32) {
    let (job, _) = h
        .run_job(json!({"dataRequest": {"mappedFields": {"schemas": mapped}},
            "metadata": {"source": "lambda", "n": n}}))
        .await;
    assert_eq!(job.status, JobStatus::Completed, "{:?}", job.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_and_a_column_created_after_the_first_job_are_read_by_the_next() {
    create_database(DB);
    psql(
        DB,
        "DROP TABLE IF EXISTS invoices; DROP TABLE IF EXISTS accounts; \
         CREATE TABLE accounts (id bigint PRIMARY KEY); INSERT INTO accounts VALUES (1), (2);",
    );
    let h = Handlers::start("fetcher-schema", |cfg| HostConfig {
        schema_cache_ttl: Duration::from_secs(3600),
        ..cfg
    })
    .await;
    let (status, conn) = h
        .call(
            "POST",
            "/v1/management/connections",
            Some(json!({"configName": "schemas", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432, "databaseName": DB, "userName": "postgres", "password": "x"})),
        )
        .await;
    assert_eq!(status, 201, "{conn}");
    run(&h, json!({"accounts": ["id"]}), 1).await;
    psql(
        DB,
        "CREATE TABLE invoices (id bigint PRIMARY KEY, total numeric(10,2)); \
         INSERT INTO invoices VALUES (7, 12.50); \
         ALTER TABLE accounts ADD COLUMN region text DEFAULT 'eu';",
    );
    // Cached for an hour, yet the next job naming the new table and column reads them.
    run(
        &h,
        json!({"invoices": ["id", "total"], "accounts": ["id", "region"]}),
        2,
    )
    .await;
}
