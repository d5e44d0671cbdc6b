//! Shared helpers: unique per-test databases on the real servers, fixtures
//! (docs/datasources.md, "Test fixtures"), and an engine wired with the SQL registry and
//! in-memory ports.
#![allow(dead_code)]

pub mod logical;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fetcher_connectors::{HostPolicy, SqlRegistry, StaticCredentials};
use fetcher_engine::memory::{MemoryConnectionStore, MemoryResultSink};
use fetcher_engine::ports::ConnectionStore;
use fetcher_engine::{
    ConnectionDescriptor, Context, Engine, ExecutionMode, ExtractionRequest, TenantContext,
};
use sqlx::{Connection, Executor};

pub const PG_HOST: &str = "127.0.0.1";
pub const PG_PORT: u16 = 5432;
pub const MY_PORT: u16 = 3306;

static SEQ: AtomicUsize = AtomicUsize::new(0);

pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn tenant() -> TenantContext {
    TenantContext::new("t1").unwrap()
}

// --- PostgreSQL ---------------------------------------------------------------------------

pub async fn pg_admin(db: &str) -> sqlx::PgConnection {
    fetcher_connectors::tls_provider();
    sqlx::PgConnection::connect(&format!("postgres://postgres@{PG_HOST}:{PG_PORT}/{db}"))
        .await
        .expect("PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) is required")
}

/// A fresh database, dropped by [`PgDb::drop_db`].
pub struct PgDb {
    pub name: String,
}

impl PgDb {
    pub async fn create(sql: &str) -> PgDb {
        let name = unique("fx_pg");
        let mut admin = pg_admin("postgres").await;
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        admin.close().await.unwrap();
        let mut c = pg_admin(&name).await;
        c.execute(sql).await.expect("fixture SQL");
        c.close().await.unwrap();
        PgDb { name }
    }

    pub fn descriptor(&self, config: &str) -> ConnectionDescriptor {
        ConnectionDescriptor {
            config_name: config.into(),
            datasource_type: fetcher_engine::DatasourceType::Postgresql,
            host: PG_HOST.into(),
            port: PG_PORT,
            database_name: self.name.clone(),
            username: "postgres".into(),
            ..Default::default()
        }
    }

    pub async fn exec(&self, sql: &str) {
        let mut c = pg_admin(&self.name).await;
        c.execute(sql).await.unwrap();
        c.close().await.unwrap();
    }

    pub async fn drop_db(self) {
        let mut admin = pg_admin("postgres").await;
        let _ = admin
            .execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str())
            .await;
        let _ = admin.close().await;
    }
}

// --- MySQL / MariaDB ----------------------------------------------------------------------

pub async fn my_admin(db: Option<&str>) -> sqlx::MySqlConnection {
    let url = match db {
        Some(d) => format!("mysql://root@127.0.0.1:{MY_PORT}/{d}"),
        None => format!("mysql://root@127.0.0.1:{MY_PORT}"),
    };
    fetcher_connectors::tls_provider();
    sqlx::MySqlConnection::connect(&url)
        .await
        .expect("MariaDB on 127.0.0.1:3306 (root, no password) is required")
}

pub struct MyDb {
    pub name: String,
}

impl MyDb {
    pub async fn create(statements: &[&str]) -> MyDb {
        let name = unique("fx_my");
        let mut admin = my_admin(None).await;
        admin
            .execute(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        admin.close().await.unwrap();
        let mut c = my_admin(Some(&name)).await;
        for s in statements {
            c.execute(*s).await.expect("fixture SQL");
        }
        c.close().await.unwrap();
        MyDb { name }
    }

    pub fn descriptor(&self, config: &str) -> ConnectionDescriptor {
        ConnectionDescriptor {
            config_name: config.into(),
            datasource_type: fetcher_engine::DatasourceType::Mysql,
            host: "127.0.0.1".into(),
            port: MY_PORT,
            database_name: self.name.clone(),
            username: "root".into(),
            ..Default::default()
        }
    }

    pub async fn drop_db(self) {
        let mut admin = my_admin(None).await;
        let _ = admin
            .execute(format!("DROP DATABASE IF EXISTS {}", self.name).as_str())
            .await;
        let _ = admin.close().await;
    }
}

// --- SQLite -------------------------------------------------------------------------------

pub struct LiteDb {
    pub path: std::path::PathBuf,
}

impl LiteDb {
    pub async fn create(sql: &str) -> LiteDb {
        let path = std::env::temp_dir().join(format!("{}.db", unique("fx_lite")));
        let mut c = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
        sqlx::raw_sql(sql)
            .execute(&mut c)
            .await
            .expect("fixture SQL");
        c.close().await.unwrap();
        LiteDb { path }
    }

    pub fn descriptor(&self, config: &str) -> ConnectionDescriptor {
        ConnectionDescriptor {
            config_name: config.into(),
            datasource_type: fetcher_engine::DatasourceType::Sqlite,
            database_name: self.path.to_string_lossy().into_owned(),
            ..Default::default()
        }
    }

    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

// --- Engine -------------------------------------------------------------------------------

pub struct Harness {
    pub engine: Engine,
    pub store: Arc<MemoryConnectionStore>,
    pub sink: Arc<MemoryResultSink>,
}

pub async fn harness(descriptors: &[ConnectionDescriptor]) -> Harness {
    let registry = Arc::new(SqlRegistry::new(
        Arc::new(StaticCredentials::new()),
        HostPolicy::single_tenant(),
    ));
    harness_with(registry, descriptors).await
}

/// A harness whose only PostgreSQL connector is `factory` (COPY off, partitioned reads, …).
pub async fn pg_harness(
    factory: fetcher_connectors::SqlConnectorFactory,
    d: &ConnectionDescriptor,
) -> Harness {
    let registry = fetcher_engine::memory::MemoryRegistry::new();
    registry.register(
        fetcher_engine::DatasourceType::Postgresql,
        Arc::new(factory),
    );
    harness_with(registry, std::slice::from_ref(d)).await
}

/// Reads `request` straight through a connector `factory` builds, as its cursor gives
/// it: one `(table, rows)` per batch.
pub async fn batches(
    factory: &fetcher_connectors::SqlConnectorFactory,
    d: &ConnectionDescriptor,
    request: &ExtractionRequest,
) -> Vec<(String, Vec<fetcher_engine::Row>)> {
    use fetcher_engine::ports::Connector as _;
    let ctx = Context::background();
    let mut c = factory.build_connector(&ctx, &tenant(), d).await.unwrap();
    let step = fetcher_engine::PlanStep::for_datasource(request, &d.config_name);
    let mut cursor = c.query_stream(&ctx, &step).await.unwrap();
    let mut out = Vec::new();
    while let Some(b) = cursor.next_batch(&ctx).await.unwrap() {
        out.push((b.table.to_string(), b.rows));
    }
    out
}

/// A harness over any connector registry.
pub async fn harness_with_registry(
    registry: Arc<dyn fetcher_engine::ports::ConnectorRegistry>,
    descriptors: &[ConnectionDescriptor],
) -> Harness {
    harness_with(registry, descriptors).await
}

async fn harness_with(
    registry: Arc<dyn fetcher_engine::ports::ConnectorRegistry>,
    descriptors: &[ConnectionDescriptor],
) -> Harness {
    let store = MemoryConnectionStore::new();
    let sink = MemoryResultSink::new();
    let engine = Engine::builder()
        .connector_registry(registry)
        .connection_store(store.clone())
        .result_sink(sink.clone())
        .build()
        .unwrap();
    let ctx = Context::background();
    for d in descriptors {
        store.create(&ctx, &tenant(), d, None).await.unwrap();
    }
    Harness {
        engine,
        store,
        sink,
    }
}

impl Harness {
    /// Plans and runs `request` in store mode; returns the NDJSON bytes.
    pub async fn store_ndjson(
        &self,
        request: serde_json::Value,
    ) -> fetcher_engine::Result<Vec<u8>> {
        let ctx = Context::background();
        let request: ExtractionRequest = serde_json::from_value(request).unwrap();
        let mut plan = self
            .engine
            .plan_extraction(&ctx, &tenant(), &request)
            .await?;
        plan.mode = ExecutionMode::Store;
        let result = self.engine.execute_extraction(&ctx, &plan).await?;
        let path = result.reference.expect("store mode").path;
        Ok(self.sink.get(&path).expect("stored object"))
    }
}

/// `request` planned for `h`'s engine, in store mode (NDJSON through the sink).
pub async fn store_plan(h: &Harness, request: serde_json::Value) -> fetcher_engine::ExtractionPlan {
    let request: fetcher_engine::ExtractionRequest = serde_json::from_value(request).unwrap();
    let mut plan = h
        .engine
        .plan_extraction(&fetcher_engine::Context::background(), &tenant(), &request)
        .await
        .unwrap();
    plan.mode = fetcher_engine::ExecutionMode::Store;
    plan
}

/// Runs `plan` in segments (docs/engine.md, "Continued runs"), each asked to stop at
/// once, calling `between` after every segment that stopped; returns the parts' bytes
/// joined in manifest order and the number of segments.
pub async fn run_in_segments(
    h: &Harness,
    plan: &fetcher_engine::ExtractionPlan,
    mut between: impl AsyncFnMut(),
) -> (Vec<u8>, usize) {
    let ctx = fetcher_engine::Context::background();
    let progress = fetcher_engine::ExtractionProgress::default();
    let mut segment = fetcher_engine::Segment::default();
    for n in 1..=400 {
        segment.stop_at = Some(tokio::time::Instant::now());
        let r = h
            .engine
            .execute_segment(&ctx, plan, None, &segment, &progress)
            .await
            .unwrap();
        let Some(stopped) = r.stopped else {
            let parts = r.reference.unwrap().parts;
            let joined = parts
                .iter()
                .flat_map(|p| h.sink.get(&p.path).unwrap())
                .collect();
            return (joined, n);
        };
        segment.resume = Some(stopped.at);
        segment.earlier_parts.extend(stopped.parts);
        between().await;
    }
    panic!("no end after 400 segments");
}

/// NDJSON lines whose `table` is `table`, as parsed rows.
pub fn rows_of(ndjson: &[u8], table: &str) -> Vec<serde_json::Value> {
    std::str::from_utf8(ndjson)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["table"] == table)
        .map(|v| v["row"].clone())
        .collect()
}

// --- Fixtures (docs/datasources.md, "Test fixtures") ---------------------------------------

pub const A1: &str = "11111111-1111-1111-1111-111111111111";
pub const A2: &str = "22222222-2222-2222-2222-222222222222";
pub const A3: &str = "33333333-3333-3333-3333-333333333333";

/// (account, amount, currency, type, category, status, created_at) — 26 rows, Q1 2024.
pub const PG_TRANSACTIONS: [(&str, &str, &str, &str, &str, &str, &str); 26] = [
    (
        A1,
        "3500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-01-05 09:00:00+00",
    ),
    (
        A2,
        "1500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-01-05 09:00:00+00",
    ),
    (
        A3,
        "2500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-01-05 09:00:00+00",
    ),
    (
        A1,
        "150.00",
        "USD",
        "debit",
        "groceries",
        "completed",
        "2024-01-08 14:30:00+00",
    ),
    (
        A1,
        "89.99",
        "USD",
        "debit",
        "entertainment",
        "completed",
        "2024-01-12 20:00:00+00",
    ),
    (
        A2,
        "250.00",
        "USD",
        "debit",
        "utilities",
        "completed",
        "2024-01-15 10:00:00+00",
    ),
    (
        A3,
        "45.50",
        "USD",
        "debit",
        "groceries",
        "completed",
        "2024-01-20 18:00:00+00",
    ),
    (
        A1,
        "120.00",
        "EUR",
        "debit",
        "travel",
        "completed",
        "2024-01-25 08:00:00+00",
    ),
    (
        A1,
        "3500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-02-05 09:00:00+00",
    ),
    (
        A2,
        "1500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-02-05 09:00:00+00",
    ),
    (
        A3,
        "2500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-02-05 09:00:00+00",
    ),
    (
        A2,
        "95.00",
        "USD",
        "debit",
        "groceries",
        "completed",
        "2024-02-10 12:00:00+00",
    ),
    (
        A3,
        "30.00",
        "USD",
        "debit",
        "entertainment",
        "completed",
        "2024-02-14 21:00:00+00",
    ),
    (
        A1,
        "300.00",
        "USD",
        "debit",
        "utilities",
        "completed",
        "2024-02-18 09:30:00+00",
    ),
    (
        A2,
        "450.00",
        "GBP",
        "debit",
        "travel",
        "completed",
        "2024-02-22 07:45:00+00",
    ),
    (
        A1,
        "3500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-03-05 09:00:00+00",
    ),
    (
        A2,
        "1500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-03-05 09:00:00+00",
    ),
    (
        A3,
        "500.00",
        "USD",
        "credit",
        "salary",
        "completed",
        "2024-03-08 11:00:00+00",
    ),
    (
        A1,
        "99.50",
        "USD",
        "debit",
        "groceries",
        "completed",
        "2024-03-10 16:00:00+00",
    ),
    (
        A3,
        "60.25",
        "USD",
        "debit",
        "entertainment",
        "completed",
        "2024-03-12 19:30:00+00",
    ),
    (
        A1,
        "180.00",
        "USD",
        "debit",
        "utilities",
        "completed",
        "2024-03-15 10:00:00+00",
    ),
    (
        A2,
        "12.99",
        "USD",
        "debit",
        "entertainment",
        "completed",
        "2024-03-18 22:00:00+00",
    ),
    (
        A3,
        "700.00",
        "EUR",
        "debit",
        "travel",
        "completed",
        "2024-03-20 06:00:00+00",
    ),
    (
        A1,
        "220.00",
        "USD",
        "debit",
        "utilities",
        "completed",
        "2024-03-25 10:00:00+00",
    ),
    (
        A2,
        "175.00",
        "USD",
        "debit",
        "entertainment",
        "pending",
        "2024-03-30 10:00:00+00",
    ),
    (
        A3,
        "640.00",
        "USD",
        "debit",
        "travel",
        "pending",
        "2024-03-30 15:00:00+00",
    ),
];

fn tx_id(i: usize) -> String {
    format!("10000000-0000-4000-8000-{:012}", i + 1)
}

pub fn pg_fixture_sql() -> String {
    let mut s = String::from(
        "CREATE TABLE accounts (id uuid PRIMARY KEY, name varchar(100) NOT NULL, email varchar(100), \
           created_at timestamptz NOT NULL DEFAULT '2024-01-01T00:00:00Z', updated_at timestamptz NOT NULL DEFAULT '2024-01-01T00:00:00Z');\n",
    );
    s += &format!(
        "INSERT INTO accounts (id, name, email) VALUES ('{A1}','John Doe','john@example.com'),('{A2}','Jane Smith','jane@example.com'),('{A3}','Bob Johnson','bob@example.com');\n"
    );
    s += "CREATE TABLE transactions (id uuid PRIMARY KEY, account_id uuid NOT NULL, amount decimal(15,2) NOT NULL, \
          currency varchar(3) NOT NULL DEFAULT 'USD', type varchar(10) NOT NULL CHECK (type IN ('credit','debit')), \
          description varchar(500), category varchar(100), status varchar(20) NOT NULL DEFAULT 'completed', \
          created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL DEFAULT '2024-04-01T00:00:00Z');\n";
    s += "CREATE INDEX ON transactions (account_id); CREATE INDEX ON transactions (created_at);\n";
    for (i, (acc, amount, cur, ty, cat, status, at)) in PG_TRANSACTIONS.iter().enumerate() {
        s += &format!(
            "INSERT INTO transactions (id, account_id, amount, currency, type, description, category, status, created_at) \
             VALUES ('{}','{acc}',{amount},'{cur}','{ty}','{cat} #{}','{cat}','{status}','{at}');\n",
            tx_id(i),
            i + 1
        );
    }
    s += "CREATE SCHEMA accounting; CREATE TABLE accounting.invoices (id uuid PRIMARY KEY, account_id uuid, \
          invoice_number varchar(50), amount decimal(15,2), currency varchar(3), status varchar(20), due_date date, created_at timestamptz);\n";
    let statuses = [
        "paid",
        "paid",
        "paid",
        "paid",
        "paid",
        "pending",
        "pending",
        "pending",
        "overdue",
        "cancelled",
    ];
    for (i, st) in statuses.iter().enumerate() {
        let acc = [A1, A2, A3][i % 3];
        s += &format!(
            "INSERT INTO accounting.invoices VALUES ('20000000-0000-4000-8000-{:012}','{acc}','INV-2024-{:03}',{}.00,'USD','{st}','2024-0{}-28','2024-0{}-01T10:00:00Z');\n",
            i + 1,
            i + 1,
            100 * (i + 1),
            i % 3 + 1,
            i % 3 + 1
        );
    }
    s += "CREATE SCHEMA reporting; CREATE TABLE reporting.daily_summary (id uuid PRIMARY KEY, report_date date, account_id uuid, \
          total_credits decimal(15,2), total_debits decimal(15,2), transaction_count integer, created_at timestamptz);\n";
    for i in 0..12 {
        let acc = if i < 7 {
            A1
        } else if i < 10 {
            A2
        } else {
            A3
        };
        s += &format!(
            "INSERT INTO reporting.daily_summary VALUES ('30000000-0000-4000-8000-{:012}','2024-01-{:02}','{acc}',{}.00,{}.50,{},'2024-01-{:02}T23:00:00Z');\n",
            i + 1,
            i + 1,
            1000 * i,
            10 * i,
            i,
            i + 1
        );
    }
    s
}

pub fn mysql_fixture() -> Vec<String> {
    let mut v = vec![
        "CREATE TABLE transactions (id char(36) PRIMARY KEY, account_id char(36), amount decimal(15,2), \
         currency varchar(3) DEFAULT 'USD', type enum('credit','debit'), description varchar(500), category varchar(100), \
         status enum('pending','completed','failed'), created_at timestamp NULL, updated_at timestamp NULL, \
         INDEX (account_id), INDEX (created_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            .to_owned(),
    ];
    let month = [
        ("3500.00", "credit", "salary", A1),
        ("1200.00", "credit", "salary", A2),
        ("250.00", "debit", "utilities", A1),
        ("150.00", "debit", "groceries", A3),
        ("80.00", "debit", "entertainment", A2),
        ("300.00", "debit", "travel", A3),
    ];
    let mut n = 0;
    for m in 4..=6 {
        for (amount, ty, cat, acc) in month {
            n += 1;
            v.push(format!(
                "INSERT INTO transactions VALUES ('40000000-0000-4000-8000-{n:012}','{acc}',{amount},'USD','{ty}','{cat} #{n}','{cat}','completed','2024-0{m}-{:02} 09:00:00','2024-07-01 00:00:00')",
                n % 20 + 1
            ));
        }
    }
    for (d, amount) in [(28, "50.00"), (29, "20.00")] {
        n += 1;
        v.push(format!(
            "INSERT INTO transactions VALUES ('40000000-0000-4000-8000-{n:012}','{A1}',{amount},'USD','debit','pending #{n}','groceries','pending','2024-06-{d} 12:00:00','2024-07-01 00:00:00')"
        ));
    }
    v
}
