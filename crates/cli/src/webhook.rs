//! `serve --events-webhook URL`: every terminal event is also POSTed (the event-log line
//! as JSON) to a webhook. A non-2xx answer or a network error fails the publish, so the
//! job keeps its outbox marker and the repair pass retries. Plain `http://` only (a local
//! relay or a test receiver); put a TLS-terminating proxy in front for anything else.

use std::time::Duration;

use fetcher_embedded::event_line;
use fetcher_engine::BoxFuture;
use fetcher_host::ServiceError;
use fetcher_host::model::TerminalEvent;
use fetcher_host::ports::EventPublisher;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub struct WebhookPublisher {
    url: hyper::Uri,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl WebhookPublisher {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|_| anyhow::anyhow!("invalid webhook URL"))?;
        if uri.scheme_str() != Some("http") {
            anyhow::bail!("the events webhook must be an http:// URL");
        }
        Ok(WebhookPublisher {
            url: uri,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }
}

impl EventPublisher for WebhookPublisher {
    fn publish<'a>(&'a self, event: &'a TerminalEvent) -> BoxFuture<'a, fetcher_host::Result<()>> {
        Box::pin(async move {
            let body = event_line(event)?;
            let req = hyper::Request::post(self.url.clone())
                .header("content-type", "application/json")
                .header("ce-id", &event.id)
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| ServiceError::internal("bad webhook request").with_cause(e))?;
            let res = tokio::time::timeout(Duration::from_secs(10), self.client.request(req))
                .await
                .map_err(|_| ServiceError::unavailable("events webhook timed out"))?
                .map_err(|e| {
                    ServiceError::unavailable("events webhook unreachable").with_cause(e)
                })?;
            if !res.status().is_success() {
                return Err(ServiceError::unavailable(format!(
                    "events webhook answered {}",
                    res.status().as_u16()
                )));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fetcher_host::model::JobStatus;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot receiver answering `status`; returns the request it got.
    async fn receiver(status: u16) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/events", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = Vec::new();
            loop {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if body.len() >= len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let reply =
                format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            s.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&got).to_string()
        });
        (url, task)
    }

    #[tokio::test]
    async fn posts_the_event_and_fails_on_non_2xx() {
        let id = fetcher_host::model::JobId::new();
        let event = TerminalEvent::new(
            "acme",
            id,
            JobStatus::Completed,
            r#"{"jobId":"j1","status":"completed"}"#.into(),
        );
        let (url, task) = receiver(204).await;
        WebhookPublisher::new(&url)
            .unwrap()
            .publish(&event)
            .await
            .unwrap();
        let request = task.await.unwrap();
        assert!(request.starts_with("POST /events HTTP/1.1"), "{request}");
        assert!(
            request
                .to_ascii_lowercase()
                .contains(&format!("ce-id: fetcher.job.completed.{id}"))
        );
        assert!(request.contains(r#""detail":{"jobId":"j1","status":"completed"}"#));

        let (url, task) = receiver(500).await;
        let err = WebhookPublisher::new(&url)
            .unwrap()
            .publish(&event)
            .await
            .unwrap_err();
        assert!(err.is_retryable());
        task.await.unwrap();
        assert!(WebhookPublisher::new("https://example.com/x").is_err());
    }
}
