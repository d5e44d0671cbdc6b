//! `serve`'s HTTP/1.1 server: the API router on hyper, with graceful shutdown.
//!
//! Why not `axum::serve`: it cannot size hyper's request-head buffer, and hyper answers
//! a head larger than its buffer with a bare 431 (no body). Here the buffer is
//! [`HEAD_BUFFER_BYTES`], far above the router's own limit
//! ([`fetcher_http::MAX_HEADER_BYTES`]), so an oversized head reaches the router
//! and gets the documented JSON error (docs/api.md, "Errors").

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;
use tracing::warn;

/// hyper's request-head buffer; heads beyond it still get hyper's bare 431.
pub const HEAD_BUFFER_BYTES: usize = 4 * 1024 * 1024;
/// Header lines hyper parses (its default is 100).
pub const MAX_HEADERS: usize = 1000;
/// How long open connections may take to finish once shutdown begins.
const CLOSE_GRACE: Duration = Duration::from_secs(30);
/// How often a failing accept is logged at most (the count of the others goes with it).
const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What one client may hold of the listener (docs/operations.md, `serve` settings).
#[derive(Debug, Clone, Copy)]
pub struct ListenerLimits {
    /// From a connection's start, or the end of its previous response, to the end of the
    /// next request head: covers slow heads and idle keep-alive connections alike.
    pub header_timeout: Duration,
    /// From a request head to its response: the body must arrive within it (a slow body
    /// holds nothing longer), and no handler runs longer.
    pub request_timeout: Duration,
    /// Connections open at once; past it the listener stops accepting until one closes,
    /// so idle clients cannot take every file descriptor.
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and
/// lets open connections finish their requests (bounded).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut accept_errors = AcceptErrors::default();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("never closed"),
            _ = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => {
                        accept_errors.reset();
                        stream
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off (longer while it
                        // lasts), keep serving, log once per interval.
                        let pause = accept_errors.failed(&e);
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                };
                let service = TowerToHyperService::new(tower::service_fn({
                    let router = router.clone();
                    let timeout = limits.request_timeout;
                    move |req| {
                        let router = router.clone();
                        async move {
                            match tokio::time::timeout(timeout, router.oneshot(req)).await {
                                Ok(answer) => answer,
                                Err(_) => Ok(request_timed_out()),
                            }
                        }
                    }
                }));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .max_buf_size(HEAD_BUFFER_BYTES)
                    .max_headers(MAX_HEADERS)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(slot);
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(CLOSE_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("connections still open after the close grace; dropping them");
    }
}

/// The request did not finish within the request timeout: 408 with the framework's
/// JSON body, and the connection closes.
fn request_timed_out() -> axum::response::Response {
    let mut res = fetcher_http::ApiError::framework(
        StatusCode::REQUEST_TIMEOUT,
        "the request did not complete within the request timeout",
    )
    .into_response();
    res.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    res
}

/// Failing accepts in a row: the back-off grows from 50 ms to 1 s, and one warning per
/// [`ACCEPT_LOG_INTERVAL`] says how many failed since the last.
#[derive(Default)]
struct AcceptErrors {
    in_a_row: u32,
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl AcceptErrors {
    fn failed(&mut self, e: &std::io::Error) -> Duration {
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.unlogged += 1;
        if self
            .logged_at
            .is_none_or(|at| at.elapsed() >= ACCEPT_LOG_INTERVAL)
        {
            warn!(error = %e, failures = self.unlogged, "accept failed; backing off");
            self.unlogged = 0;
            self.logged_at = Some(Instant::now());
        }
        Duration::from_millis(50u64 << self.in_a_row.min(5).saturating_sub(1))
            .min(Duration::from_secs(1))
    }

    fn reset(&mut self) {
        self.in_a_row = 0;
    }
}
