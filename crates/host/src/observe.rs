//! The engine's [`Observability`] port on `tracing`, for every host: each public engine
//! operation (a connection's create, test, read, …; an extraction's plan) is a span named
//! `engine` with its `operation`, closed by a debug event that carries its outcome (`ok` or
//! the error's category, never its text) and its duration. A subscriber that exports spans
//! (OpenTelemetry, #44) sees the same spans; the default logs show the events at
//! `FETCHER_LOG=debug`.

use std::time::Instant;

use fetcher_engine::EngineError;
use fetcher_engine::ports::{Entered, Observability, Span, SpanSubject};

/// [`Observability`] over `tracing` spans.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingObservability;

impl Observability for TracingObservability {
    fn start_span(&self, operation: &'static str) -> Box<dyn Span> {
        self.start_span_about(operation, SpanSubject::default())
    }

    fn start_span_about(&self, operation: &'static str, about: SpanSubject<'_>) -> Box<dyn Span> {
        Box::new(TracingSpan {
            span: tracing::info_span!(
                "engine",
                otel.name = operation,
                operation,
                config = about.config,
                table = about.table,
            ),
            operation,
            started: Instant::now(),
        })
    }
}

struct TracingSpan {
    span: tracing::Span,
    operation: &'static str,
    started: Instant,
}

impl Span for TracingSpan {
    fn end(self: Box<Self>, error: Option<&EngineError>) {
        let elapsed_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let outcome = error.map_or("ok", |e| e.category().as_str());
        tracing::debug!(parent: &self.span, operation = self.operation, outcome, elapsed_ms, "engine operation");
    }

    fn enter(&self) -> Box<dyn Entered + '_> {
        Box::new(self.span.enter())
    }
}
