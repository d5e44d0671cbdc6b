//! Extraction throughput: PostgreSQL (or MySQL) table → engine store mode → NDJSON file,
//! against the database's own CLI export of the same columns, in one run.
//!
//! ```text
//! cargo run --release -p fetcher-connectors --bin bench-extract -- --rows 1000000
//! cargo run --release -p fetcher-connectors --bin bench-extract -- --rows 1000000 --mysql
//! ```
//!
//! Needs the local servers (PostgreSQL 127.0.0.1:5432 user `postgres` trust auth, `psql`;
//! MariaDB 127.0.0.1:3306 root without password, `mysql`). Creates and drops a scratch
//! database. Prints rows/s, the ratio to the CLI, output sizes and peak RSS (VmHWM).

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fetcher_connectors::{HostPolicy, SqlRegistry, StaticCredentials};
use fetcher_engine::memory::MemoryConnectionStore;
use fetcher_engine::ports::{ConnectionStore, ResultSink, ResultStreamWriter};
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, Engine, EngineError, ExecutionMode,
    ExtractionRequest, Limits, ResultReference, TenantContext,
};
use sqlx::{Connection, Executor};

/// Writes the NDJSON stream to a file through a 1 MiB buffer.
struct FileSink {
    path: PathBuf,
}

struct FileWriter {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    bytes: u64,
}

fn io_err(e: std::io::Error) -> EngineError {
    EngineError::wrap(Category::Unavailable, "result file write failed", e)
}

impl ResultSink for FileSink {
    fn open_stream<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        _: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Box<dyn ResultStreamWriter>>> {
        Box::pin(async move {
            let f = std::fs::File::create(&self.path).map_err(io_err)?;
            Ok(Box::new(FileWriter {
                path: self.path.clone(),
                out: std::io::BufWriter::with_capacity(1 << 20, f),
                bytes: 0,
            }) as Box<dyn ResultStreamWriter>)
        })
    }

    fn persist<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        _: &'a [u8],
    ) -> BoxFuture<'a, fetcher_engine::Result<ResultReference>> {
        Box::pin(async { Err(EngineError::new(Category::Internal, "not supported")) })
    }
}

impl ResultStreamWriter for FileWriter {
    fn write<'a>(
        &'a mut self,
        _: &'a Context,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        let r = self.out.write_all(bytes).map_err(io_err);
        self.bytes += bytes.len() as u64;
        Box::pin(std::future::ready(r))
    }

    fn close(
        mut self: Box<Self>,
        _: &Context,
    ) -> BoxFuture<'_, fetcher_engine::Result<ResultReference>> {
        Box::pin(async move {
            self.out.flush().map_err(io_err)?;
            Ok(ResultReference {
                path: self.path.to_string_lossy().into_owned(),
                format: fetcher_engine::StoredFormat::Ndjson,
                size_bytes: self.bytes as i64,
                ..Default::default()
            })
        })
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn rate(rows: u64, d: Duration) -> f64 {
    rows as f64 / d.as_secs_f64()
}

async fn ours(d: ConnectionDescriptor, table: &str, out: PathBuf) -> (Duration, u64) {
    let store = MemoryConnectionStore::new();
    let tenant = TenantContext::new("bench").unwrap();
    let ctx = Context::background();
    store.create(&ctx, &tenant, &d, None).await.unwrap();
    let engine = Engine::builder()
        .connector_registry(Arc::new(SqlRegistry::new(
            Arc::new(StaticCredentials::new()),
            HostPolicy::single_tenant(),
        )))
        .connection_store(store)
        .result_sink(Arc::new(FileSink { path: out.clone() }))
        .limits(Limits {
            timeout: Duration::ZERO,
            max_result_bytes: 0,
            ..Limits::defaults()
        })
        .build()
        .unwrap();
    let request: ExtractionRequest = serde_json::from_value(serde_json::json!({
        "mappedFields": {"bench": {table: ["b", "i", "id", "n", "nt", "t", "ts", "u"]}}
    }))
    .unwrap();
    let started = Instant::now();
    let mut plan = engine
        .plan_extraction(&ctx, &tenant, &request)
        .await
        .unwrap();
    plan.mode = ExecutionMode::Store;
    let result = engine.execute_extraction(&ctx, &plan).await.unwrap();
    let took = started.elapsed();
    let reference = result.reference.expect("store mode");
    assert_eq!(
        reference.row_count as u64,
        result.row_counts["bench"] as u64
    );
    (took, std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0))
}

async fn postgres(rows: u64) {
    let db = format!("bench_fetcher_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/postgres")
        .await
        .expect("PostgreSQL on 127.0.0.1:5432");
    admin
        .execute(format!("CREATE DATABASE {db}").as_str())
        .await
        .unwrap();
    let mut c = sqlx::PgConnection::connect(&format!("postgres://postgres@127.0.0.1:5432/{db}"))
        .await
        .unwrap();
    let load = Instant::now();
    c.execute(
        format!(
            "CREATE TABLE bench (id bigint PRIMARY KEY, u uuid NOT NULL, t text NOT NULL, n numeric(18,4) NOT NULL, \
             i int NOT NULL, b bool NOT NULL, ts timestamptz NOT NULL, nt text);
             INSERT INTO bench SELECT g, md5(g::text)::uuid, 'name-' || g, (g * 1.2345)::numeric(18,4), (g % 100000)::int,
               g % 2 = 0, '2024-01-01T00:00:00Z'::timestamptz + g * interval '1 second',
               CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, {rows}) g"
        )
        .as_str(),
    )
    .await
    .unwrap();
    c.execute("VACUUM ANALYZE bench").await.unwrap();
    c.close().await.unwrap();
    println!("loaded {rows} rows in {:.1?}", load.elapsed());

    let psql_out = std::env::temp_dir().join(format!("{db}.psql.txt"));
    let copy = format!(
        "\\copy (SELECT id, u, t, n, i, b, ts, nt FROM bench ORDER BY id) TO '{}'",
        psql_out.display()
    );
    let psql = || {
        let started = Instant::now();
        let st = Command::new("psql")
            .args([
                "-X",
                "-q",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                &db,
                "-c",
                &copy,
            ])
            .status()
            .expect("psql");
        assert!(st.success());
        started.elapsed()
    };
    psql(); // warm the cache
    let psql_time = psql();
    let psql_bytes = std::fs::metadata(&psql_out).map(|m| m.len()).unwrap_or(0);

    let out = std::env::temp_dir().join(format!("{db}.ndjson"));
    let d = ConnectionDescriptor {
        config_name: "bench".into(),
        datasource_type: fetcher_engine::DatasourceType::Postgresql,
        host: "127.0.0.1".into(),
        port: 5432,
        database_name: db.clone(),
        username: "postgres".into(),
        ..Default::default()
    };
    let (ours_time, ours_bytes) = ours(d, "bench", out.clone()).await;

    println!(
        "psql \\copy (text):   {psql_time:>9.2?}  {:>12.0} rows/s  {psql_bytes} bytes",
        rate(rows, psql_time)
    );
    println!(
        "fetcher NDJSON:      {ours_time:>9.2?}  {:>12.0} rows/s  {ours_bytes} bytes",
        rate(rows, ours_time)
    );
    println!(
        "ratio fetcher/psql wall time: {:.2}",
        ours_time.as_secs_f64() / psql_time.as_secs_f64()
    );
    println!("peak RSS (VmHWM): {} MiB", peak_rss_kib() / 1024);

    let _ = std::fs::remove_file(&psql_out);
    let _ = std::fs::remove_file(&out);
    admin
        .execute(format!("DROP DATABASE {db} WITH (FORCE)").as_str())
        .await
        .unwrap();
}

async fn mysql(rows: u64) {
    let db = format!("bench_fetcher_{}", std::process::id());
    let mut admin = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306")
        .await
        .expect("MariaDB on 127.0.0.1:3306");
    admin
        .execute(format!("CREATE DATABASE {db}").as_str())
        .await
        .unwrap();
    let mut c = sqlx::MySqlConnection::connect(&format!("mysql://root@127.0.0.1:3306/{db}"))
        .await
        .unwrap();
    let load = Instant::now();
    c.execute(
        "CREATE TABLE bench (id bigint PRIMARY KEY, u char(36) NOT NULL, t varchar(64) NOT NULL, \
         n decimal(18,4) NOT NULL, i int NOT NULL, b bool NOT NULL, ts timestamp(6) NOT NULL, nt text)",
    )
    .await
    .unwrap();
    c.execute(
        format!(
            "INSERT INTO bench SELECT seq, uuid(), CONCAT('name-', seq), seq * 1.2345, seq % 100000, seq % 2 = 0, \
             TIMESTAMP '2024-01-01 00:00:00' + INTERVAL (seq % 100000000) SECOND, \
             IF(seq % 3 = 0, NULL, CONCAT('note ', seq)) FROM seq_1_to_{rows}"
        )
        .as_str(),
    )
    .await
    .unwrap();
    c.close().await.unwrap();
    println!("loaded {rows} rows in {:.1?}", load.elapsed());

    let cli = || {
        let started = Instant::now();
        let out = Command::new("mysql")
            .args([
                "-h",
                "127.0.0.1",
                "-u",
                "root",
                "-B",
                "-N",
                &db,
                "-e",
                "SELECT id, u, t, n, i, b, ts, nt FROM bench ORDER BY id",
            ])
            .output()
            .expect("mysql");
        assert!(out.status.success());
        (started.elapsed(), out.stdout.len())
    };
    cli();
    let (cli_time, cli_bytes) = cli();

    let out = std::env::temp_dir().join(format!("{db}.ndjson"));
    let d = ConnectionDescriptor {
        config_name: "bench".into(),
        datasource_type: fetcher_engine::DatasourceType::Mysql,
        host: "127.0.0.1".into(),
        port: 3306,
        database_name: db.clone(),
        username: "root".into(),
        ..Default::default()
    };
    let (ours_time, ours_bytes) = ours(d, "bench", out.clone()).await;
    println!(
        "mysql -B (TSV):      {cli_time:>9.2?}  {:>12.0} rows/s  {cli_bytes} bytes",
        rate(rows, cli_time)
    );
    println!(
        "fetcher NDJSON:      {ours_time:>9.2?}  {:>12.0} rows/s  {ours_bytes} bytes",
        rate(rows, ours_time)
    );
    println!(
        "ratio fetcher/mysql-cli wall time: {:.2}",
        ours_time.as_secs_f64() / cli_time.as_secs_f64()
    );
    println!("peak RSS (VmHWM): {} MiB", peak_rss_kib() / 1024);
    let _ = std::fs::remove_file(&out);
    admin
        .execute(format!("DROP DATABASE {db}").as_str())
        .await
        .unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = args
        .iter()
        .position(|a| a == "--rows")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000u64);
    let use_mysql = args.iter().any(|a| a == "--mysql");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if use_mysql {
            mysql(rows).await
        } else {
            postgres(rows).await
        }
    });
}
