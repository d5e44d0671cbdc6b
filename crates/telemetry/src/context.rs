//! The W3C trace context a job carries (docs/operations.md, "Traces"): taken from the span
//! of the request that creates the job, kept on the job, signed into every queue message
//! of it (continuations and ranges too) and set on its event, so the worker's spans and
//! a subscriber's continue the creating request's trace.
//!
//! Parsing and rendering are the OpenTelemetry SDK's W3C propagator's; the text is the
//! `traceparent` header's (`00-<trace id>-<parent id>-<flags>`).

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header (and message and event field) that carries a [`TraceParent`].
pub const TRACEPARENT: &str = "traceparent";

/// A valid W3C `traceparent`: a trace id and the id of the span it continues.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TraceParent(String);

fn extract(text: &str) -> Context {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), text.to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

impl TraceParent {
    /// `text` if it is a valid `traceparent`: version `00`, then a 32- and a 16-digit
    /// id in lowercase hex, neither zero, then the flags. (The propagator alone would
    /// pad a short id; the header's length is exact.)
    pub fn parse(text: &str) -> Option<TraceParent> {
        let text = text.trim();
        let shaped = text.len() == 55
            && text.bytes().enumerate().all(|(i, b)| match i {
                2 | 35 | 52 => b == b'-',
                _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
            });
        if !shaped {
            return None;
        }
        Self::of_context(&extract(text))
    }

    /// The context of the current span, when traces are exported (`None` otherwise: a
    /// span nobody exports has no trace to continue).
    pub fn current() -> Option<TraceParent> {
        Self::of_span(&tracing::Span::current())
    }

    /// The context of `span`, when traces are exported.
    pub fn of_span(span: &tracing::Span) -> Option<TraceParent> {
        Self::of_context(&span.context())
    }

    fn of_context(cx: &Context) -> Option<TraceParent> {
        let span = cx.span();
        let sc: &SpanContext = span.span_context();
        if !sc.is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(
            &Context::new().with_remote_span_context(sc.clone()),
            &mut carrier,
        );
        carrier.remove(TRACEPARENT).map(TraceParent)
    }

    /// Makes `span` a child of this context (a no-op when traces are not exported).
    pub fn adopt(&self, span: &tracing::Span) {
        let _ = span.set_parent(extract(&self.0));
    }

    /// The 32 hex digits of the trace id.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TraceParent {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        TraceParent::parse(&text).ok_or_else(|| "not a W3C traceparent".to_owned())
    }
}

impl From<TraceParent> for String {
    fn from(t: TraceParent) -> String {
        t.0
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_traceparents_round_trip_and_others_are_refused() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = TraceParent::parse(text).expect("valid");
        assert_eq!(t.as_str(), text);
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(TraceParent::parse(unsampled).unwrap().as_str(), unsampled);
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "not a header",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<TraceParent>(&json).unwrap(), t);
        assert!(serde_json::from_str::<TraceParent>("\"00-zz\"").is_err());
    }

    #[test]
    fn without_export_no_span_has_a_context() {
        let span = tracing::info_span!("job");
        assert_eq!(TraceParent::of_span(&span), None);
    }
}
