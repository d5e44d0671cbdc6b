//! Terminal events for `fetcher serve`: appended to an NDJSON log file (one event per
//! line, flushed before `publish` returns) and, optionally, POSTed to a webhook.

use std::path::PathBuf;
use std::sync::Arc;

use fetcher_engine::BoxFuture;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use fetcher_host::error::{Result, ServiceError};
use fetcher_host::model::TerminalEvent;
use fetcher_host::ports::EventPublisher;

/// Appends events to a file; the line is the EventBridge-like envelope
/// `{"id","detail-type","source","tenantId","detail":<payload>}`.
pub struct EventLog {
    path: PathBuf,
    lock: Mutex<()>,
    webhook: Option<Arc<dyn EventPublisher>>,
}

impl EventLog {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        EventLog {
            path: path.into(),
            lock: Mutex::new(()),
            webhook: None,
        }
    }

    /// Also delivers every event to `webhook` (an event counts as published only when
    /// both succeed, so a failing webhook keeps the outbox marker for a retry).
    pub fn with_webhook(mut self, webhook: Arc<dyn EventPublisher>) -> Self {
        self.webhook = Some(webhook);
        self
    }
}

/// The line written for `event`.
pub fn event_line(event: &TerminalEvent) -> Result<String> {
    let detail: serde_json::Value = serde_json::from_str(&event.payload)
        .map_err(|_| ServiceError::internal("terminal event payload is not JSON"))?;
    let line = serde_json::json!({
        "id": event.id,
        "detail-type": event.detail_type,
        "source": "fetcher",
        "tenantId": event.tenant_id,
        "detail": detail,
    });
    Ok(format!("{line}\n"))
}

impl EventPublisher for EventLog {
    fn publish<'a>(&'a self, event: &'a TerminalEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let line = event_line(event)?;
            {
                let _guard = self.lock.lock().await;
                let io = |e: std::io::Error| {
                    ServiceError::unavailable("event log unavailable").with_cause(e)
                };
                let mut f = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .await
                    .map_err(io)?;
                f.write_all(line.as_bytes()).await.map_err(io)?;
                f.sync_data().await.map_err(io)?;
            }
            if let Some(webhook) = &self.webhook {
                webhook.publish(event).await?;
            }
            Ok(())
        })
    }
}
