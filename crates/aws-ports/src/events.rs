//! The EventBridge [`EventPublisher`].
//!
//! One `PutEvents` entry per terminal event (the repair pass batches up to 10 per request):
//! `Source` = the configured source, `DetailType` = `job.completed` / `job.failed`,
//! `EventBusName` = the configured bus, `Detail` = the payload object (docs/events.md,
//! "Detail") with two fields added: `eventId` (the deterministic
//! `fetcher.job.<status>.<jobId>`, the subscribers' dedup key — EventBridge assigns its own
//! envelope `id`, so ours travels in the detail) and `tenantId`. `Resources` is left empty.
//! The response is checked per entry (`FailedEntryCount`, `ErrorCode`); failed entries
//! alone are retried a bounded number of times with back-off, then that event's publish
//! fails so its outbox marker stays for the next repair pass.

use std::time::Duration;

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use fetcher_engine::BoxFuture;
use fetcher_host::error::{Result, ServiceError};
use fetcher_host::model::TerminalEvent;
use fetcher_host::ports::EventPublisher;

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

/// `PutEvents` takes at most 10 entries and 256 KiB per request.
const MAX_ENTRIES: usize = 10;
const MAX_REQUEST_BYTES: usize = 256 * 1024;

impl EventBridgePublisher {
    fn entry(&self, event: &TerminalEvent) -> Result<PutEventsRequestEntry> {
        Ok(PutEventsRequestEntry::builder()
            .source(&self.source)
            .detail_type(event.detail_type.as_str())
            .detail(detail(event)?)
            .event_bus_name(&self.bus_name)
            .build())
    }

    /// Puts one request's worth of entries, retrying only the entries that failed, with
    /// back-off, up to `attempts` times. One result per entry.
    async fn put_chunk(
        &self,
        ids: &[&str],
        entries: Vec<PutEventsRequestEntry>,
    ) -> Vec<Result<()>> {
        let mut last: Vec<Option<String>> = vec![Some(String::new()); entries.len()];
        let mut pending: Vec<usize> = (0..entries.len()).collect();
        for attempt in 0..self.attempts {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt.min(5))).await;
            }
            let batch: Vec<_> = pending.iter().map(|&i| entries[i].clone()).collect();
            let out = match self
                .client
                .put_events()
                .set_entries(Some(batch))
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    tracing::warn!(error = %e, entries = pending.len(), "PutEvents failed");
                    for &i in &pending {
                        last[i] = Some(e.to_string());
                    }
                    continue;
                }
            };
            // Result entries are positional: the n-th answers the n-th request entry.
            let answers = out.entries();
            let mut still = Vec::new();
            for (n, &i) in pending.iter().enumerate() {
                match answers.get(n) {
                    Some(a) if a.error_code().is_none() => last[i] = None,
                    a => {
                        let reason = format!(
                            "{}: {}",
                            a.and_then(|a| a.error_code()).unwrap_or("unknown"),
                            a.and_then(|a| a.error_message()).unwrap_or("")
                        );
                        tracing::warn!(error = %reason, event = %ids[i], "PutEvents entry failed");
                        last[i] = Some(reason);
                        still.push(i);
                    }
                }
            }
            pending = still;
        }
        last.into_iter()
            .map(|failure| match failure {
                None => Ok(()),
                Some(reason) => Err(ServiceError::unavailable("event bus unavailable")
                    .with_cause(std::io::Error::other(reason))),
            })
            .collect()
    }

    async fn put_all(&self, events: &[TerminalEvent]) -> Vec<Result<()>> {
        let mut results: Vec<Option<Result<()>>> = (0..events.len()).map(|_| None).collect();
        let mut chunk: Vec<(usize, PutEventsRequestEntry)> = Vec::new();
        let mut chunk_bytes = 0;
        for (i, event) in events.iter().enumerate() {
            let entry = match self.entry(event) {
                Ok(entry) => entry,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            let size = entry_size(&entry);
            if !chunk.is_empty()
                && (chunk.len() == MAX_ENTRIES || chunk_bytes + size > MAX_REQUEST_BYTES)
            {
                self.flush(events, std::mem::take(&mut chunk), &mut results)
                    .await;
                chunk_bytes = 0;
            }
            chunk_bytes += size;
            chunk.push((i, entry));
        }
        if !chunk.is_empty() {
            self.flush(events, chunk, &mut results).await;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ServiceError::internal("event not published"))))
            .collect()
    }

    async fn flush(
        &self,
        events: &[TerminalEvent],
        chunk: Vec<(usize, PutEventsRequestEntry)>,
        results: &mut [Option<Result<()>>],
    ) {
        let (index, entries): (Vec<usize>, Vec<_>) = chunk.into_iter().unzip();
        let ids: Vec<&str> = index.iter().map(|&i| events[i].id.as_str()).collect();
        for (i, r) in index.iter().zip(self.put_chunk(&ids, entries).await) {
            results[*i] = Some(r);
        }
    }
}

/// An upper bound of an entry's size as EventBridge counts it (UTF-8 bytes of its
/// strings, plus the `Time` field whether set or not).
fn entry_size(e: &PutEventsRequestEntry) -> usize {
    [e.source(), e.detail_type(), e.detail(), e.event_bus_name()]
        .iter()
        .map(|s| s.map_or(0, str::len))
        .sum::<usize>()
        + 14 // the Time field
}

impl EventPublisher for EventBridgePublisher {
    fn publish<'a>(&'a self, event: &'a TerminalEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.put_all(std::slice::from_ref(event))
                .await
                .pop()
                .unwrap_or_else(|| Err(ServiceError::internal("event not published")))
        })
    }

    fn publish_batch<'a>(&'a self, events: &'a [TerminalEvent]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(self.put_all(events))
    }
}
