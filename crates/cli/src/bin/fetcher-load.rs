//! Load bench for `fetcher serve`: POST /v1/fetcher, then GET /v1/fetcher/{id}, each
//! phase at N concurrent connections for a bounded time, against a loopback server.
//!
//!     cargo run --release -p fetcher -- serve --demo --data-dir /tmp/fetcher-load &
//!     cargo run --release -p fetcher --bin fetcher-load -- --url http://127.0.0.1:8080 \
//!         --connections 200 --seconds 10 --datasource demo --table customers --source demo
//!
//! Prints, per phase: requests, req/s, p50, p99 and max latency, and non-2xx counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Mutex;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 200)]
    connections: usize,
    /// Seconds per phase (bounded to 60).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value = "demo")]
    datasource: String,
    #[arg(long, default_value = "customers")]
    table: String,
    #[arg(long, default_value = "demo")]
    source: String,
}

struct Stats {
    latencies: Mutex<Vec<Duration>>,
    errors: AtomicU64,
}

fn report(phase: &str, stats: &[Duration], errors: u64, elapsed: Duration) {
    let mut v = stats.to_vec();
    v.sort();
    let pct = |p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "{phase}: {} requests in {:.1} s = {:.0} req/s; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; non-2xx/errors {errors}",
        v.len(),
        elapsed.as_secs_f64(),
        v.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        v.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seconds = args.seconds.min(60);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.connections)
        .build_http();
    let client = Arc::new(client);
    let ids = Arc::new(Mutex::new(Vec::<String>::new()));
    let seq = Arc::new(AtomicU64::new(0));

    for phase in ["POST /v1/fetcher", "GET /v1/fetcher/{id}"] {
        let stats = Arc::new(Stats {
            latencies: Mutex::new(Vec::new()),
            errors: AtomicU64::new(0),
        });
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let start = Instant::now();
        let snapshot = Arc::new(ids.lock().await.clone());
        if phase.starts_with("GET") && snapshot.is_empty() {
            anyhow::bail!("no job was created in the POST phase");
        }
        let mut tasks = Vec::new();
        for worker in 0..args.connections {
            let (client, stats, ids, seq, snapshot) = (
                client.clone(),
                stats.clone(),
                ids.clone(),
                seq.clone(),
                snapshot.clone(),
            );
            let (url, ds, table, source, phase) = (
                args.url.clone(),
                args.datasource.clone(),
                args.table.clone(),
                args.source.clone(),
                phase.to_owned(),
            );
            tasks.push(tokio::spawn(async move {
                let mut local = Vec::new();
                let mut i = worker;
                while Instant::now() < deadline {
                    let req = if phase.starts_with("POST") {
                        let n = seq.fetch_add(1, Ordering::Relaxed);
                        let body = serde_json::json!({
                            "dataRequest": {"mappedFields": {ds.clone(): {table.clone(): ["id"]}}},
                            "metadata": {"source": source, "loadRequest": n}
                        });
                        hyper::Request::post(format!("{url}/v1/fetcher"))
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body.to_string())))
                    } else {
                        i = (i + 7919) % snapshot.len();
                        hyper::Request::get(format!("{url}/v1/fetcher/{}", snapshot[i]))
                            .body(Full::new(Bytes::new()))
                    }
                    .expect("valid request");
                    let t = Instant::now();
                    match client.request(req).await {
                        Ok(res) => {
                            let ok = res.status().is_success();
                            let body = res
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            local.push(t.elapsed());
                            if !ok {
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                            } else if phase.starts_with("POST")
                                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                                && let Some(id) = v["jobId"].as_str()
                            {
                                ids.lock().await.push(id.to_owned());
                            }
                        }
                        Err(_) => {
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                stats.latencies.lock().await.extend(local);
            }));
        }
        for t in tasks {
            t.await?;
        }
        let elapsed = start.elapsed();
        report(
            phase,
            &stats.latencies.lock().await,
            stats.errors.load(Ordering::Relaxed),
            elapsed,
        );
    }
    Ok(())
}
