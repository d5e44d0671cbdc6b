//! The engine's operations reach `tracing` through the hosts' observability port: one span
//! per operation, closed by an event with its outcome (the category of a failure, never its
//! text) and its duration.

use std::io::Write;
use std::sync::{Arc, Mutex};

use fetcher_engine::memory::{MemoryConnectionStore, MemoryRegistry};
use fetcher_engine::{Context, Engine, TenantContext};
use fetcher_host::observe::TracingObservability;

/// A writer the test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn engine_operations_are_spans_with_their_outcome() {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let engine = Engine::builder()
        .connector_registry(MemoryRegistry::new())
        .connection_store(MemoryConnectionStore::new())
        .observability(Arc::new(TracingObservability))
        .build()
        .unwrap();
    let tenant = TenantContext::new("observed").unwrap();
    let ctx = Context::background();
    engine.list_connections(&ctx, &tenant).await.unwrap();
    assert!(
        engine
            .get_connection(&ctx, &tenant, "no-such-connection")
            .await
            .is_err()
    );

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("engine operation"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("operation=\"engine.connection.list\"}")
            && lines[0].contains("outcome=\"ok\"")
            && lines[0].contains("elapsed_ms="),
        "{text}"
    );
    assert!(
        lines[1].contains("engine.connection.get") && lines[1].contains("outcome=\"not_found\""),
        "{text}"
    );
    assert!(
        !text.contains("no-such-connection"),
        "no input in a span: {text}"
    );
}
