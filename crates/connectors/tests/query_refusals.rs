//! #37: what the database answers is classified by what it said, not retried as an outage.
//! A tenant controls its own database, so it can make any query fail at will (a
//! row-level-security policy that raises, a revoked grant, a locked user): such answers
//! fail the job at once and never hold a worker through retries. Only connection,
//! resource, lock and shutdown failures stay retryable.

mod common;

use common::*;
use fetcher_engine::Category;
use serde_json::json;
use sqlx::{Connection, Executor};

fn classify(e: sqlx::Error) -> (Category, bool) {
    let e = fetcher_connectors::error::query_failed(e);
    (e.category(), e.is_retryable())
}

#[tokio::test]
async fn postgres_refusals_fail_at_once_and_outages_stay_retryable() {
    let role = unique("rls_reader");
    let db = PgDb::create(&format!(
        "CREATE TABLE secrets (id bigint PRIMARY KEY, v text);
         INSERT INTO secrets VALUES (1, 'a'), (2, 'b');
         CREATE FUNCTION boom() RETURNS boolean LANGUAGE plpgsql AS
           $$BEGIN RAISE EXCEPTION 'policy says no'; END$$;
         ALTER TABLE secrets ENABLE ROW LEVEL SECURITY;
         CREATE POLICY p ON secrets USING (boom());
         CREATE TABLE hidden (id bigint PRIMARY KEY);
         CREATE ROLE {role} LOGIN;
         GRANT SELECT ON secrets TO {role};"
    ))
    .await;
    let mut reader = db.descriptor("pg");
    reader.username = role.clone();
    let h = harness(&[reader]).await;

    // The policy raises for every row: the job fails at once, not retryable.
    let started = std::time::Instant::now();
    let err = h
        .store_ndjson(json!({"mappedFields": {"pg": {"secrets": ["id", "v"]}}}))
        .await
        .expect_err("the policy raises");
    assert_eq!(err.category(), Category::Validation, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(err.message(), "the datasource refused the query");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // The database's answers, one by one.
    let mut as_reader =
        sqlx::PgConnection::connect(&format!("postgres://{role}@127.0.0.1:5432/{}", db.name))
            .await
            .unwrap();
    for sql in [
        "SELECT * FROM secrets",      // P0001 raise_exception (the policy)
        "SELECT * FROM hidden",       // 42501 insufficient privilege
        "SELECT * FROM no_such",      // 42P01 undefined table
        "SELECT no_such FROM hidden", // 42703 undefined column
    ] {
        let e = sqlx::query(sql).execute(&mut as_reader).await.unwrap_err();
        assert_eq!(classify(e), (Category::Validation, false), "{sql}");
    }
    // A statement timeout (57014) and a lock timeout (55P03) are retryable.
    as_reader
        .execute("SET statement_timeout = '10ms'")
        .await
        .unwrap();
    let e = sqlx::query("SELECT pg_sleep(1)")
        .execute(&mut as_reader)
        .await
        .unwrap_err();
    assert_eq!(classify(e), (Category::Unavailable, true));
    as_reader
        .execute("SET statement_timeout = 0")
        .await
        .unwrap();
    let mut holder = pg_admin(&db.name).await;
    holder
        .execute("BEGIN; LOCK TABLE secrets IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    as_reader
        .execute("SET lock_timeout = '10ms'")
        .await
        .unwrap();
    let e = sqlx::query("SELECT 1 FROM secrets LIMIT 1")
        .execute(&mut as_reader)
        .await
        .unwrap_err();
    assert_eq!(classify(e), (Category::Unavailable, true));
    holder.execute("ROLLBACK").await.unwrap();
    drop(holder);
    drop(as_reader);

    // A blocked user: the login is refused, a final answer (not retryable).
    db.exec(&format!("ALTER ROLE {role} NOLOGIN")).await;
    let h = harness(&[{
        let mut d = db.descriptor("pg");
        d.username = role.clone();
        d
    }])
    .await;
    let err = h
        .store_ndjson(json!({"mappedFields": {"pg": {"secrets": ["id"]}}}))
        .await
        .expect_err("the user may not log in");
    assert_eq!(err.category(), Category::Connect, "{err}");
    assert!(!err.is_retryable(), "{err}");
    // An unreachable server is no answer: retryable.
    let h = harness(&[{
        let mut d = db.descriptor("pg");
        d.port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        d
    }])
    .await;
    let err = h
        .store_ndjson(json!({"mappedFields": {"pg": {"secrets": ["id"]}}}))
        .await
        .expect_err("nothing listens");
    assert_eq!(err.category(), Category::Connect, "{err}");
    assert!(err.is_retryable(), "{err}");

    db.drop_db().await;
    let mut admin = pg_admin("postgres").await;
    admin
        .execute(format!("DROP ROLE IF EXISTS {role}").as_str())
        .await
        .unwrap();
}

#[tokio::test]
async fn mariadb_refusals_fail_at_once_and_locks_stay_retryable() {
    let user = unique("locked");
    let db = MyDb::create(&[
        "CREATE TABLE t (id BIGINT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
    ])
    .await;
    let mut admin = my_admin(Some(&db.name)).await;
    admin
        .execute(format!("CREATE USER '{user}'@'127.0.0.1'").as_str())
        .await
        .unwrap();
    admin
        .execute(format!("GRANT SELECT ON {}.t TO '{user}'@'127.0.0.1'", db.name).as_str())
        .await
        .unwrap();
    let mut as_user =
        sqlx::MySqlConnection::connect(&format!("mysql://{user}@127.0.0.1:3306/{}", db.name))
            .await
            .unwrap();
    // 1142 command denied, 1146 no such table, 1644 a raised SIGNAL: answers.
    admin
        .execute("CREATE TABLE other (id INT PRIMARY KEY)")
        .await
        .unwrap();
    for sql in [
        "SELECT * FROM other",
        "SELECT * FROM no_such",
        "SELECT no_such FROM t",
    ] {
        let e = sqlx::query(sql).execute(&mut as_user).await.unwrap_err();
        assert_eq!(classify(e), (Category::Validation, false), "{sql}");
    }
    let e = sqlx::query("SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no'")
        .execute(&mut admin)
        .await
        .unwrap_err();
    assert_eq!(classify(e), (Category::Validation, false));
    // A lock wait timeout (1205) is retryable.
    let mut holder = my_admin(Some(&db.name)).await;
    holder
        .execute("START TRANSACTION; SELECT * FROM t FOR UPDATE")
        .await
        .unwrap();
    admin
        .execute("SET innodb_lock_wait_timeout = 1")
        .await
        .unwrap();
    let e = sqlx::query("SELECT * FROM t FOR UPDATE")
        .execute(&mut admin)
        .await
        .unwrap_err();
    assert_eq!(classify(e), (Category::Unavailable, true));
    holder.execute("ROLLBACK").await.unwrap();
    drop(holder);
    drop(as_user);

    // A locked account: the login is refused, a final answer.
    admin
        .execute(format!("ALTER USER '{user}'@'127.0.0.1' ACCOUNT LOCK").as_str())
        .await
        .unwrap();
    let mut d = db.descriptor("my");
    d.username = user.clone();
    let h = harness(&[d]).await;
    let err = h
        .store_ndjson(json!({"mappedFields": {"my": {"t": ["id"]}}}))
        .await
        .expect_err("the account is locked");
    assert_eq!(err.category(), Category::Connect, "{err}");
    assert!(!err.is_retryable(), "{err}");

    admin
        .execute(format!("DROP USER '{user}'@'127.0.0.1'").as_str())
        .await
        .unwrap();
    drop(admin);
    db.drop_db().await;
}

/// #52 item 3: a session the server ends (here an idle-in-transaction timeout, FATAL
/// `25P03`, then a closed connection) is an outage of that session, retried; a FATAL
/// refusal of a login stays final.
#[tokio::test]
async fn a_session_the_server_ends_is_retryable_and_a_refused_login_is_not() {
    let role = unique("idle_reader");
    let db = PgDb::create(&format!(
        "CREATE TABLE t (id bigint PRIMARY KEY);
         CREATE ROLE {role} LOGIN;
         ALTER ROLE {role} SET idle_in_transaction_session_timeout = '200ms';
         GRANT SELECT ON t TO {role};"
    ))
    .await;
    let url = format!("postgres://{role}@127.0.0.1:5432/{}", db.name);
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let ended = sqlx::query("SELECT * FROM t")
        .fetch_all(&mut c)
        .await
        .unwrap_err();
    let (category, retryable) = classify(ended);
    assert_eq!(category, Category::Unavailable);
    assert!(
        retryable,
        "the server ended the session: a new one may succeed"
    );
    drop(c);
    // A login the server refuses (FATAL, class 28) is its answer.
    let mut admin = pg_admin(&db.name).await;
    admin
        .execute(format!("ALTER ROLE {role} NOLOGIN").as_str())
        .await
        .unwrap();
    let refused = sqlx::PgConnection::connect(&url).await.unwrap_err();
    let e = fetcher_connectors::error::connect_failed(refused);
    assert!(!e.is_retryable(), "{e}");
    admin.close().await.unwrap();
    db.drop_db().await;
    let mut admin = pg_admin("postgres").await;
    let _ = admin
        .execute(format!("DROP ROLE IF EXISTS {role}").as_str())
        .await;
}

/// A harness whose connectors set `limits` on every session.
async fn limited_harness(
    d: &fetcher_engine::ConnectionDescriptor,
    limits: fetcher_connectors::SessionLimits,
) -> Harness {
    let dialect = match d.datasource_type {
        fetcher_engine::DatasourceType::Postgresql => fetcher_connectors::Dialect::Postgres,
        _ => fetcher_connectors::Dialect::MySql,
    };
    let factory = fetcher_connectors::SqlConnectorFactory::new(
        dialect,
        std::sync::Arc::new(fetcher_connectors::StaticCredentials::new()),
        fetcher_connectors::HostPolicy::single_tenant(),
    )
    .with_session_limits(Some(limits));
    let registry = fetcher_engine::memory::MemoryRegistry::new();
    registry.register(d.datasource_type, std::sync::Arc::new(factory));
    harness_with_registry(registry, std::slice::from_ref(d)).await
}

/// #52 item 1: the waits a database controls are bounded per session below the run's
/// own bound: a read a policy makes slow, or one waiting on a lock another session holds,
/// is cut off by the server at the session's limits and is retryable (its worker free
/// while it waits), on PostgreSQL and MariaDB.
#[tokio::test]
async fn session_limits_cut_slow_statements_and_lock_waits() {
    let limits = fetcher_connectors::SessionLimits {
        statement: std::time::Duration::from_millis(800),
        lock: std::time::Duration::from_secs(1),
    };
    assert_eq!(
        fetcher_connectors::SessionLimits::below(std::time::Duration::from_secs(300)),
        Some(fetcher_connectors::SessionLimits {
            statement: std::time::Duration::from_secs(270),
            lock: std::time::Duration::from_secs(30),
        })
    );
    assert_eq!(
        fetcher_connectors::SessionLimits::below(std::time::Duration::ZERO),
        None
    );

    let role = unique("limited_reader");
    let db = PgDb::create(&format!(
        "CREATE FUNCTION sleepy() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(5); RETURN true; END$$;
         CREATE TABLE slow (id bigint PRIMARY KEY); INSERT INTO slow VALUES (1);
         ALTER TABLE slow ENABLE ROW LEVEL SECURITY;
         CREATE POLICY p ON slow USING (sleepy());
         CREATE TABLE locked (id bigint PRIMARY KEY); INSERT INTO locked VALUES (1);
         CREATE ROLE {role} LOGIN;
         GRANT SELECT ON slow, locked TO {role};"
    ))
    .await;
    let mut reader = db.descriptor("pg");
    reader.username = role.clone();
    let h = limited_harness(&reader, limits).await;
    let started = std::time::Instant::now();
    let err = h
        .store_ndjson(json!({"mappedFields": {"pg": {"slow": ["id"]}}}))
        .await
        .expect_err("the statement outlives its limit");
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let mut holder = pg_admin(&db.name).await;
    holder
        .execute("BEGIN; LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = h
        .store_ndjson(json!({"mappedFields": {"pg": {"locked": ["id"]}}}))
        .await
        .expect_err("the lock outlives its limit");
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    holder.execute("ROLLBACK").await.unwrap();
    drop(holder);
    db.drop_db().await;
    let mut admin = pg_admin("postgres").await;
    let _ = admin
        .execute(format!("DROP ROLE IF EXISTS {role}").as_str())
        .await;

    let my = MyDb::create(&[
        "CREATE TABLE locked (id BIGINT PRIMARY KEY)",
        "INSERT INTO locked VALUES (1)",
    ])
    .await;
    let h = limited_harness(&my.descriptor("my"), limits).await;
    let mut holder = my_admin(Some(&my.name)).await;
    holder.execute("LOCK TABLES locked WRITE").await.unwrap();
    let started = std::time::Instant::now();
    let err = h
        .store_ndjson(json!({"mappedFields": {"my": {"locked": ["id"]}}}))
        .await
        .expect_err("the metadata lock outlives its limit");
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    holder.execute("UNLOCK TABLES").await.unwrap();
    drop(holder);
    my.drop_db().await;
}
