//! `serve`'s HTTP/1.1 server: the API router on hyper, with graceful shutdown.
//!
//! Why not `axum::serve`: it cannot size hyper's request-head buffer, and hyper answers
//! a head larger than its buffer with a bare 431 (no body). Here the buffer is
//! [`HEAD_BUFFER_BYTES`], far above the router's own limit
//! ([`fetcher_http::MAX_HEADER_BYTES`]), so an oversized head reaches the router
//! and gets the documented JSON error (docs/api.md, "Errors").

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tracing::warn;

/// hyper's request-head buffer; heads beyond it still get hyper's bare 431.
pub const HEAD_BUFFER_BYTES: usize = 4 * 1024 * 1024;
/// Header lines hyper parses (its default is 100).
pub const MAX_HEADERS: usize = 1000;
/// How long open connections may take to finish once shutdown begins.
const CLOSE_GRACE: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and
/// lets open connections finish their requests (bounded).
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let service = TowerToHyperService::new(router.clone());
                let conn = hyper::server::conn::http1::Builder::new()
                    .max_buf_size(HEAD_BUFFER_BYTES)
                    .max_headers(MAX_HEADERS)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
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
