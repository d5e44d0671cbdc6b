//! The EventBridge [`EventPublisher`].
//!
//! One `PutEvents` entry per terminal event: `Source` = the configured source,
//! `DetailType` = `job.completed` / `job.failed`, `EventBusName` = the configured bus,
//! `Detail` = the §9.2 payload object with two fields added: `eventId` (the deterministic
//! `fetcher.job.<status>.<jobId>`, the subscribers' dedup key — EventBridge assigns its
//! own envelope `id`, so ours travels in the detail) and `tenantId`. `Resources` is left
//! empty. The response is checked per entry (`FailedEntryCount`, `ErrorCode`); failed
//! entries are retried a bounded number of times with back-off, then the publish fails
//! so the outbox marker stays for the repair pass.

use std::time::Duration;

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use fetcher_engine::BoxFuture;
use fetcher_service::error::{Result, ServiceError};
use fetcher_service::model::TerminalEvent;
use fetcher_service::ports::EventPublisher;

/// Publishes terminal events to one bus.
#[derive(Clone, Debug)]
pub struct EventBridgePublisher {
    client: Client,
    bus_name: String,
    source: String,
    attempts: u32,
}

/// The default `Source`.
pub const DEFAULT_SOURCE: &str = "fetcher.worker";

/// The `Detail` of `event`: its payload plus `eventId` and `tenantId`.
pub fn detail(event: &TerminalEvent) -> Result<String> {
    let mut v: serde_json::Value = serde_json::from_str(&event.payload)
        .map_err(|_| ServiceError::internal("terminal event payload is not JSON"))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| ServiceError::internal("terminal event payload is not an object"))?;
    obj.insert("eventId".into(), event.id.clone().into());
    obj.insert("tenantId".into(), event.tenant_id.clone().into());
    Ok(v.to_string())
}

impl EventBridgePublisher {
    pub fn new(client: Client, bus_name: impl Into<String>, source: impl Into<String>) -> Self {
        EventBridgePublisher {
            client,
            bus_name: bus_name.into(),
            source: source.into(),
            attempts: 4,
        }
    }

    /// Attempts per event (at least 1).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    pub fn bus_name(&self) -> &str {
        &self.bus_name
    }

    /// A liveness probe (DescribeEventBus).
    pub async fn ping(&self) -> Result<()> {
        self.client
            .describe_event_bus()
            .name(&self.bus_name)
            .send()
            .await
            .map_err(|e| ServiceError::unavailable("event bus unavailable").with_cause(e))?;
        Ok(())
    }
}

impl EventPublisher for EventBridgePublisher {
    fn publish<'a>(&'a self, event: &'a TerminalEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let entry = PutEventsRequestEntry::builder()
                .source(&self.source)
                .detail_type(&event.detail_type)
                .detail(detail(event)?)
                .event_bus_name(&self.bus_name)
                .build();
            let mut last = String::new();
            for attempt in 0..self.attempts {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(5))).await;
                }
                let out = match self.client.put_events().entries(entry.clone()).send().await {
                    Ok(out) => out,
                    Err(e) => {
                        last = e.to_string();
                        tracing::warn!(error = %e, event = %event.id, "PutEvents failed");
                        continue;
                    }
                };
                let failed = out.failed_entry_count() > 0
                    || out.entries().iter().any(|e| e.error_code().is_some());
                if !failed {
                    return Ok(());
                }
                let first = out.entries().first();
                last = format!(
                    "{}: {}",
                    first.and_then(|e| e.error_code()).unwrap_or("unknown"),
                    first.and_then(|e| e.error_message()).unwrap_or("")
                );
                tracing::warn!(error = %last, event = %event.id, "PutEvents entry failed");
            }
            Err(ServiceError::unavailable("event bus unavailable")
                .with_cause(std::io::Error::other(last)))
        })
    }
}
