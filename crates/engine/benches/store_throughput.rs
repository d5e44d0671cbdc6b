//! Store-mode throughput: 8-column rows from the in-memory connector, encoded to NDJSON,
//! digested and handed to a sink that discards them, on ONE core (current-thread runtime).
//!
//!     cargo bench -p fetcher-engine --bench store_throughput            # 1M rows, 5 runs
//!     cargo bench -p fetcher-engine --bench store_throughput -- 200000 3
//!
//! Prints rows/s and MB/s of NDJSON for each run and the median. Row generation (the
//! connector's work: building the values) is included, so the figure is a lower bound
//! for the engine's own encoding rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use fetcher_engine::memory::*;
use fetcher_engine::ports::*;
use fetcher_engine::*;

/// CPU time of this thread (ns), so the figure holds on a busy machine too: the whole
/// pipeline runs on this one thread (current-thread runtime).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

struct Discard(Arc<AtomicU64>);

impl ResultStreamWriter for Discard {
    fn write<'a>(&'a mut self, _: &'a Context, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.0.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Box::pin(async { Ok(()) })
    }
    fn close(self: Box<Self>, _: &Context) -> BoxFuture<'_, Result<ResultReference>> {
        Box::pin(async {
            Ok(ResultReference {
                path: "discard://".into(),
                ..Default::default()
            })
        })
    }
}

struct DiscardSink(Arc<AtomicU64>);

impl ResultSink for DiscardSink {
    fn open_stream<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn ResultStreamWriter>>> {
        let w: Box<dyn ResultStreamWriter> = Box::new(Discard(self.0.clone()));
        Box::pin(async move { Ok(w) })
    }
    fn persist<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        _: &'a [u8],
    ) -> BoxFuture<'a, Result<ResultReference>> {
        Box::pin(async { Ok(ResultReference::default()) })
    }
}

const FIELDS: [&str; 8] = [
    "id",
    "uuid",
    "name",
    "amount",
    "qty",
    "active",
    "created_at",
    "note",
];

/// Rows like a decoder would produce them: text values are fresh allocations (cloned
/// from a pool, as a decoder copies them off the wire), numbers are inline.
fn generator(rows: u64) -> RowGenerator {
    const POOL: u64 = 4096;
    let columns = Columns::new(FIELDS);
    let pool = |f: &dyn Fn(u64) -> String| (0..POOL).map(f).collect::<Vec<String>>();
    let uuids = pool(&|i| format!("{:08x}-0000-4000-8000-{:012x}", i as u32 * 2_654_435_761, i));
    let names = pool(&|i| format!("customer {i}"));
    let amounts = pool(&|i| format!("{}.{:04}", i * 37 % 100_000, i % 10_000));
    RowGenerator {
        table: "public.bench".into(),
        count: rows,
        make: Arc::new(move |i| {
            let k = (i % POOL) as usize;
            Row::new(
                columns.clone(),
                vec![
                    Value::Int(i as i64),
                    Value::String(uuids[k].clone()),
                    Value::String(names[k].clone()),
                    Value::String(amounts[k].clone()),
                    Value::Int((i % 1000) as i64),
                    Value::Bool(i % 2 == 0),
                    Value::String("2024-05-01T12:00:00.000000+00:00".into()),
                    if i % 2 == 0 {
                        Value::Null
                    } else {
                        Value::String("some free text".into())
                    },
                ],
            )
        }),
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let rows: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bytes = Arc::new(AtomicU64::new(0));
        let registry = MemoryRegistry::new();
        let factory = TemplateFactory::new(TemplateBehaviour {
            generator: Some(generator(rows)),
            schema: SchemaSnapshot {
                config_name: String::new(),
                tables: vec![TableSnapshot { name: "public.bench".into(), fields: FIELDS.iter().map(|f| f.to_string()).collect(), ..Default::default() }],
                captured_at: None,
            },
            ..Default::default()
        });
        registry.register(fetcher_engine::DatasourceType::Sqlite, factory);
        let store = MemoryConnectionStore::new();
        let engine = Engine::builder()
            .connector_registry(registry)
            .connection_store(store)
            .result_sink(Arc::new(DiscardSink(bytes.clone())))
            .limits(Limits { max_result_bytes: 0, timeout: std::time::Duration::ZERO, ..Limits::defaults() })
            .build()
            .unwrap();
        let tenant = TenantContext::new("bench").unwrap();
        let ctx = Context::background();
        let input = ConnectionInput { config_name: "bench".into(), datasource_type: fetcher_engine::DatasourceType::Sqlite, ..Default::default() };
        engine.create_connection(&ctx, &tenant, &input).await.unwrap();
        let mut req = ExtractionRequest::default();
        req.mapped_fields.insert("bench".into(), [("public.bench".to_string(), FIELDS.iter().map(|f| f.to_string()).collect())].into());
        let plan = engine.plan_extraction(&ctx, &tenant, &req).await.unwrap();

        // Baseline: what producing the rows alone costs (the connector's share).
        let g = generator(rows);
        let start = Instant::now();
        let mut sink = 0usize;
        for i in 0..rows {
            sink += (g.make)(i).values().len();
        }
        let gen_secs = start.elapsed().as_secs_f64();
        println!("row generation alone: {gen_secs:.3} s ({:.2} M rows/s) [{sink}]", rows as f64 / gen_secs / 1e6);

        let mut rates = Vec::new();
        for run in 1..=runs {
            bytes.store(0, Ordering::Relaxed);
            let start = Instant::now();
            let cpu0 = thread_cpu_ns();
            let r = engine.execute_extraction(&ctx, &plan).await.unwrap();
            let cpu = (thread_cpu_ns() - cpu0) as f64 / 1e9;
            let secs = start.elapsed().as_secs_f64();
            let n = r.reference.unwrap().row_count as f64;
            let mb = bytes.load(Ordering::Relaxed) as f64 / 1e6;
            println!(
                "run {run}: {n:.0} rows, {mb:.1} MB NDJSON, wall {secs:.3} s ({:.2} M rows/s), cpu {cpu:.3} s ({:.2} M rows/s, {:.0} MB/s)",
                n / secs / 1e6,
                n / cpu / 1e6,
                mb / cpu
            );
            rates.push((n / cpu, mb / cpu, n / secs));
        }
        rates.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (r, m, w) = rates[rates.len() / 2];
        println!(
            "median per CPU-second of one core: {:.2} M rows/s, {:.0} MB/s NDJSON (wall: {:.2} M rows/s); {rows} rows x 8 columns",
            r / 1e6,
            m,
            w / 1e6
        );
    });
}
