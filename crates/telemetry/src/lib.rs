//! Logs and traces for every Fetcher process (`serve` and the Lambdas), set up once at
//! start by [`init`] (docs/operations.md, "Traces").
//!
//! Module map:
//! * [`build`]: the build's identity (version, git revision, build time), shown by
//!   `/readyz` and carried by every exported span's resource.
//! * [`context`]: [`TraceParent`], the W3C trace context a job carries from the request
//!   that created it, through the signed queue message, to its event.
//! * `testing` (feature `testing`): a loopback OTLP/HTTP receiver for tests and benches.
//! * `export` (private): the OpenTelemetry export, read from the standard `OTEL_*`
//!   variables; off when no OTLP endpoint is set.
//!
//! Logs go where they always went (text on stderr for `serve`, JSON lines on stdout on
//! Lambda), filtered by `FETCHER_LOG`. Traces are Fetcher's own spans only (targets
//! `fetcher*`, level info and above, with warnings and errors as span events): never a
//! driver's or an SDK's, whose fields this project does not control. What a span may carry
//! is the project's logging rule: ids and names, never a credential, a DSN or a row value.

pub mod build;
pub mod context;
mod export;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::OnceLock;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use context::TraceParent;

/// Why telemetry could not be set up: a setting the process must not start with.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// An `OTEL_*` variable this build cannot honour (an unknown exporter, the gRPC
    /// protocol, an endpoint that is not a URL).
    #[error("{variable}: {problem}")]
    Setting {
        variable: &'static str,
        problem: String,
    },
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines on stderr (`serve`'s default).
    Text,
    /// JSON lines on stderr (`serve --log-json`).
    Json,
    /// JSON lines on stdout without a timestamp (CloudWatch adds one) or span fields:
    /// the Lambdas'.
    Lambda,
}

/// What [`init`] sets up.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `service.name` when `OTEL_SERVICE_NAME` (or `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`) does not name one.
    pub service: &'static str,
    pub logs: LogFormat,
    /// The log filter when `FETCHER_LOG` is unset (`EnvFilter` syntax).
    pub default_filter: &'static str,
}

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Installs the process's subscriber: logs, and trace export when `OTEL_*` asks for it.
/// Returns whether traces are exported. A second call (tests that start several hosts in
/// one process) keeps the first subscriber and returns what it set up.
pub fn init(options: Options) -> Result<bool, TelemetryError> {
    let export = export::Export::from_env()?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("FETCHER_LOG")
        .unwrap_or_else(|_| options.default_filter.into());
    let logs = match options.logs {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Lambda => tracing_subscriber::fmt::layer()
            .json()
            .without_time()
            .with_current_span(false)
            .with_filter(filter)
            .boxed(),
    };
    let mut layers = vec![logs];
    let mut provider = None;
    if let Some(export) = export {
        let built = export.provider(options.service)?;
        let tracer = opentelemetry::trace::TracerProvider::tracer(&built, "fetcher");
        layers.push(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(tracing_subscriber::filter::filter_fn(exported))
                .boxed(),
        );
        provider = Some(built);
    }
    if tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .is_err()
    {
        // Already set up by an earlier call in this process.
        return Ok(PROVIDER.get().is_some());
    }
    let on = provider.is_some();
    if let Some(p) = provider {
        let _ = PROVIDER.set(p);
    }
    Ok(on)
}

/// Which spans and events reach the exporter: Fetcher's own spans at info and above, and
/// its warnings and errors (as events of the span they happen in).
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    exports(meta.target(), *meta.level(), meta.is_span())
}

fn exports(target: &str, level: tracing::Level, span: bool) -> bool {
    target.starts_with("fetcher")
        && level
            <= if span {
                tracing::Level::INFO
            } else {
                tracing::Level::WARN
            }
}

/// Whether this process exports traces.
pub fn exporting() -> bool {
    PROVIDER.get().is_some()
}

/// Sends every finished span now, waiting for the exporter (a Lambda calls it before its
/// invocation returns: a frozen sandbox sends nothing). A no-op without export.
pub fn flush() {
    if let Some(p) = PROVIDER.get()
        && let Err(e) = p.force_flush()
    {
        tracing::warn!(error = %e, "could not export the spans of this invocation");
    }
}

/// Sends what is left and stops the exporter (at a clean process exit).
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        let _ = p.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fetchers_own_spans_and_its_warnings_are_exported() {
        use tracing::Level;
        assert!(exports("fetcher_host::pipeline", Level::INFO, true));
        assert!(!exports("fetcher_host::pipeline", Level::DEBUG, true));
        assert!(exports("fetcher_http", Level::WARN, false));
        assert!(!exports("fetcher_http", Level::INFO, false));
        assert!(!exports("sqlx::query", Level::INFO, true));
        assert!(!exports("aws_smithy_runtime", Level::ERROR, false));
    }
}
