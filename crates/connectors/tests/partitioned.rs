//! PostgreSQL partitioned reads against the real server (docs/datasources.md,
//! "Partitioned reads"): the same bytes as one stream, whatever the number of
//! connections, the path (COPY or query) or the key's shape; every connection in one
//! snapshot.

mod common;

use std::sync::Arc;

use common::*;
use fetcher_connectors::{Dialect, HostPolicy, SqlConnectorFactory, StaticCredentials};
use fetcher_engine::ExtractionRequest;
use serde_json::json;

fn factory(connections: usize, copy: bool) -> SqlConnectorFactory {
    SqlConnectorFactory::new(
        Dialect::Postgres,
        Arc::new(StaticCredentials::new()),
        HostPolicy::single_tenant(),
    )
    .with_copy_fast_path(copy)
    .with_read_partitions(connections)
    // Small chunks, so a few thousand rows make dozens of them.
    .with_chunk_rows(97)
}

/// Keys with gaps, a skewed tail, negatives, the integer limits, repeated leading values
/// of a composite key, a text key (not split), an empty table and one without a key.
const FIXTURE: &str = r#"
CREATE TABLE big (id bigint PRIMARY KEY, t text, n numeric(18,4), ts timestamptz, j jsonb, nt text);
INSERT INTO big SELECT g * 3 + (g % 7), 'row ' || g, g * 1.2345, timestamptz '2024-01-01' + g * interval '1 minute',
  jsonb_build_object('g', g), CASE WHEN g % 5 = 0 THEN NULL ELSE 'n' || g END FROM generate_series(1, 3000) g;
INSERT INTO big SELECT 1000000000000 + g * g * g, 'tail ' || g, g, NULL, NULL, NULL FROM generate_series(1, 400) g;
INSERT INTO big VALUES (-9223372036854775808, 'min', 0, NULL, NULL, NULL), (9223372036854775807, 'max', 0, NULL, NULL, NULL);
CREATE TABLE small (id smallint PRIMARY KEY, v int);
INSERT INTO small SELECT g, g * g FROM generate_series(-32768, 32767, 41) g;
CREATE TABLE comp (a int, b text, v int, PRIMARY KEY (a, b));
INSERT INTO comp SELECT g % 300, 'b' || (g % 11) || '-' || g, g FROM generate_series(1, 2500) g;
CREATE TABLE txt (k text PRIMARY KEY, v int);
INSERT INTO txt SELECT md5(g::text), g FROM generate_series(1, 800) g;
CREATE TABLE empty (id int PRIMARY KEY, v int);
CREATE TABLE nokey (v int, w text);
INSERT INTO nokey SELECT g % 50, 'w' || g FROM generate_series(1, 600) g;
ANALYZE;
"#;

fn all_tables() -> serde_json::Value {
    json!({"pg": {
        "big": ["id", "t", "n", "ts", "j", "nt"], "small": ["id", "v"], "comp": ["a", "b", "v"],
        "txt": ["k", "v"], "empty": ["id", "v"], "nokey": ["v", "w"]
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_reads_give_the_single_streams_bytes() {
    let db = PgDb::create(FIXTURE).await;
    let d = db.descriptor("pg");
    let requests = [
        json!({"mappedFields": all_tables()}),
        // A filter: the query path, its bound parameters beside the key ranges.
        json!({"mappedFields": all_tables(), "filters": {"pg": {
            "big": {"nt": {"ne": ["n7"]}, "id": {"gte": [-5]}}, "comp": {"v": {"lt": [2000]}}}}}),
    ];
    for request in requests {
        for copy in [true, false] {
            let single = pg_harness(factory(1, copy), &d).await;
            let want = single.store_ndjson(request.clone()).await.unwrap();
            assert!(rows_of(&want, "big").len() > 3000 || request.get("filters").is_some());
            for connections in [2, 3, 4] {
                let h = pg_harness(factory(connections, copy), &d).await;
                let got = h.store_ndjson(request.clone()).await.unwrap();
                assert!(
                    got == want,
                    "{connections} connections, copy {copy}: other bytes ({} vs {})",
                    got.len(),
                    want.len()
                );
            }
        }
    }
    db.drop_db().await;
}

/// The batches themselves are the single stream's (Parquet row groups are cut on them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_reads_give_the_single_streams_batches() {
    let db = PgDb::create(FIXTURE).await;
    let d = db.descriptor("pg");
    let request: ExtractionRequest =
        serde_json::from_value(json!({"mappedFields": all_tables()})).unwrap();
    let shape = |connections| {
        let (d, request) = (d.clone(), request.clone());
        async move {
            let got = batches(&factory(connections, true), &d, &request).await;
            got.into_iter()
                .map(|(table, rows)| (table, rows.len()))
                .collect::<Vec<_>>()
        }
    };
    let want = shape(1).await;
    assert!(want.contains(&("empty".to_owned(), 0)), "{want:?}");
    assert_eq!(shape(4).await, want);
    db.drop_db().await;
}

/// Every connection reads the one exported snapshot: a change committed after the read
/// began but before any worker's first query (the table is locked until then) does not
/// show, in any table of the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_reads_share_one_snapshot() {
    use sqlx::Executor as _;
    let db = PgDb::create(FIXTURE).await;
    let d = db.descriptor("pg");
    let request: ExtractionRequest = serde_json::from_value(
        json!({"mappedFields": {"pg": {"big": ["id", "t"], "comp": ["a", "b", "v"]}}}),
    )
    .unwrap();
    let read = |connections: usize| {
        let (d, request) = (d.clone(), request.clone());
        async move {
            let got = batches(&factory(connections, true), &d, &request).await;
            got.into_iter()
                .flat_map(|(table, rows)| {
                    rows.into_iter()
                        .map(move |r| format!("{table}:{:?}", r.values()))
                })
                .collect::<Vec<_>>()
        }
    };
    let before = read(1).await;

    let mut admin = pg_admin(&db.name).await;
    admin
        .execute(
            "BEGIN; LOCK TABLE big IN ACCESS EXCLUSIVE MODE; \
             UPDATE big SET t = 'changed'; DELETE FROM big WHERE id % 2 = 0; \
             INSERT INTO big VALUES (5, 'new', 0, NULL, NULL, NULL) ON CONFLICT DO NOTHING; \
             UPDATE comp SET v = -v; INSERT INTO comp VALUES (299, 'zz', 1)",
        )
        .await
        .unwrap();
    let during = tokio::spawn(read(4));
    // Wait until the read waits for the lock: the snapshot was exported before this
    // change commits; the other connections join it only when the table is read, after
    // the commit, and must still see the data as it was. (Watched from another session:
    // inside a transaction, pg_stat_activity is a frozen snapshot.)
    let mut watch = pg_admin(&db.name).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (open, waiting): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'fetcher'",
        )
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if open >= 1 && waiting == 1 {
            break;
        }
        if std::time::Instant::now() > deadline {
            let seen: Option<String> = sqlx::query_scalar(
                "SELECT string_agg(concat_ws(' ', application_name, state, wait_event_type, left(query, 80)), '; ') \
                 FROM pg_stat_activity WHERE datname = current_database()",
            )
            .fetch_one(&mut watch)
            .await
            .unwrap();
            panic!("open {open}, waiting {waiting}: {seen:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    admin.execute("COMMIT").await.unwrap();
    let during = during.await.unwrap();
    assert_eq!(during.len(), before.len());
    assert!(
        during == before,
        "a change committed during the read showed"
    );
    // The change itself is real: a new read sees it.
    assert_ne!(read(4).await, before);
    db.drop_db().await;
}

/// #52 item 3: a database whose sessions may not idle in a transaction
/// (`idle_in_transaction_session_timeout`, common on managed PostgreSQL) and a first
/// table that takes long to read (a row-level-security policy that sleeps). The
/// connections that join the snapshot are opened only when the table they split is read,
/// so none idles while the first is read, and the read gives the single stream's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_join_only_when_their_table_is_read() {
    let db = PgDb::create(FIXTURE).await;
    let role = format!("{}_idle", db.name);
    db.exec(&format!(
        "CREATE FUNCTION slow_true() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(1.5); RETURN true; END$$;
         CREATE TABLE a_slow (id int PRIMARY KEY, v text); INSERT INTO a_slow VALUES (1, 'one');
         ALTER TABLE a_slow ENABLE ROW LEVEL SECURITY;
         CREATE POLICY p ON a_slow USING (slow_true());
         CREATE ROLE {role} LOGIN;
         ALTER ROLE {role} SET idle_in_transaction_session_timeout = '500ms';
         GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};
         ANALYZE;"
    ))
    .await;
    let mut d = db.descriptor("pg");
    d.username = role.clone();
    let request = json!({"mappedFields": {"pg": {"a_slow": ["id", "v"], "big": ["id", "t", "n"]}}});
    for copy in [true, false] {
        let want = pg_harness(factory(1, copy), &d)
            .await
            .store_ndjson(request.clone())
            .await
            .unwrap();
        assert_eq!(rows_of(&want, "a_slow").len(), 1);
        let got = pg_harness(factory(4, copy), &d)
            .await
            .store_ndjson(request.clone())
            .await
            .unwrap();
        assert!(
            got == want,
            "copy {copy}: other bytes ({} vs {})",
            got.len(),
            want.len()
        );
    }
    let mut admin = pg_admin("postgres").await;
    db.drop_db().await;
    let _ =
        sqlx::Executor::execute(&mut admin, format!("DROP ROLE IF EXISTS {role}").as_str()).await;
}

/// #52 item 3: an importing connection the server ends mid-table (here terminated while
/// its worker waits for the merger) is replaced by a new one in the same snapshot, which
/// reads that worker's chunks on: the read completes with the single stream's rows and
/// batches instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_the_server_ends_mid_table_is_replaced() {
    use fetcher_engine::ports::Connector as _;
    // Many more rows than the cursor's and the workers' queues hold.
    let db = PgDb::create(
        "CREATE TABLE many (id bigint PRIMARY KEY, t text, n numeric(18,4));
         INSERT INTO many SELECT g, 'row ' || g, g * 1.5 FROM generate_series(1, 60000) g;
         ANALYZE;",
    )
    .await;
    let d = db.descriptor("pg");
    let request: ExtractionRequest =
        serde_json::from_value(json!({"mappedFields": {"pg": {"many": ["id", "t", "n"]}}}))
            .unwrap();
    let shape = |got: Vec<(String, Vec<fetcher_engine::Row>)>| {
        got.into_iter()
            .map(|(t, rows)| {
                (
                    t,
                    rows.iter()
                        .map(|r| format!("{:?}", r.values()))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    let want = shape(batches(&factory(1, true), &d, &request).await);
    for copy in [true, false] {
        let ctx = fetcher_engine::Context::background();
        let mut c = factory(4, copy)
            .build_connector(&ctx, &tenant(), &d)
            .await
            .unwrap();
        let step = fetcher_engine::PlanStep::for_datasource(&request, "pg");
        let mut cursor = c.query_stream(&ctx, &step).await.unwrap();
        let mut got = Vec::new();
        let first = cursor.next_batch(&ctx).await.unwrap().unwrap();
        got.push((first.table.to_string(), first.rows));
        // The workers now wait on their full queues: end the newest session (one that
        // joined the snapshot; the step's own connection is the oldest).
        let mut admin = pg_admin(&db.name).await;
        let mut ended = false;
        for _ in 0..100 {
            let newest: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'fetcher' AND pid <> pg_backend_pid() \
                 ORDER BY backend_start DESC LIMIT 1 OFFSET 0",
            )
            .fetch_optional(&mut admin)
            .await
            .unwrap();
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'fetcher'",
            )
            .fetch_one(&mut admin)
            .await
            .unwrap();
            if let (Some(pid), 4) = (newest, open) {
                ended = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                    .bind(pid)
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(ended, "copy {copy}: no joined session to end");
        while let Some(b) = cursor.next_batch(&ctx).await.unwrap() {
            got.push((b.table.to_string(), b.rows));
        }
        assert!(shape(got) == want, "copy {copy}: other rows or batches");
    }
    db.drop_db().await;
}
