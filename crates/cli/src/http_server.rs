//! `serve`'s HTTP/1.1 server: the API router on hyper, with graceful shutdown.
//!
//! Why not `axum::serve`: it cannot size hyper's request-head buffer, and hyper answers
//! a head larger than its buffer with a bare 431 (no body). Here the buffer is
//! [`HEAD_BUFFER_BYTES`], far above the router's own limit
//! ([`fetcher_http::MAX_HEADER_BYTES`]), so an oversized head reaches the router
//! and gets the documented JSON error (docs/api.md, "Errors"). What hyper still answers
//! itself (a request line over 64 KiB, a head over that buffer, a line it cannot parse)
//! goes through [`JsonParseErrors`], which writes the same JSON error in its place.

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
    /// Connections open at once. At the cap, the oldest connection that has sent nothing
    /// is closed to make room (a client holding idle sockets cannot block others); when
    /// every one has spoken, the listener waits for one to close.
    pub max_connections: usize,
    /// Connections one peer address may hold: past it, that peer's oldest silent
    /// connection is closed for the new one, or the new one is refused.
    pub max_per_peer: usize,
}

/// The open connections, in accept order: who they are from, whether they have sent a
/// byte, and how to close them.
#[derive(Default)]
struct Open {
    next: u64,
    conns: std::collections::VecDeque<Tracked>,
}

struct Tracked {
    id: u64,
    peer: std::net::IpAddr,
    spoke: Arc<std::sync::atomic::AtomicBool>,
    close: Arc<tokio::sync::Notify>,
}

impl Open {
    fn add(
        &mut self,
        peer: std::net::IpAddr,
        spoke: Arc<std::sync::atomic::AtomicBool>,
        close: Arc<tokio::sync::Notify>,
    ) -> u64 {
        self.next += 1;
        self.conns.push_back(Tracked {
            id: self.next,
            peer,
            spoke,
            close,
        });
        self.next
    }

    fn remove(&mut self, id: u64) {
        self.conns.retain(|c| c.id != id);
    }

    fn of_peer(&self, peer: std::net::IpAddr) -> usize {
        self.conns.iter().filter(|c| c.peer == peer).count()
    }

    /// Closes the oldest connection (of `peer`, when given) that has sent nothing yet;
    /// `false` when there is none.
    fn evict_silent(&mut self, peer: Option<std::net::IpAddr>) -> bool {
        let found = self.conns.iter().position(|c| {
            peer.is_none_or(|p| p == c.peer) && !c.spoke.load(std::sync::atomic::Ordering::Relaxed)
        });
        match found.and_then(|i| self.conns.remove(i)) {
            Some(c) => {
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
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
    let open = Arc::new(std::sync::Mutex::new(Open::default()));
    let mut accept_errors = AcceptErrors::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok((stream, peer)) => {
                        accept_errors.reset();
                        (stream, peer.ip())
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off (longer while it
                        // lasts), keep serving, log once per interval.
                        let pause = accept_errors.failed(&e);
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                };
                let slot = match slots.clone().try_acquire_owned() {
                    Ok(slot) => slot,
                    Err(_) => {
                        // Full, and a client is here: the oldest connection that has said
                        // nothing makes room; when all have spoken, wait for one to end.
                        open.lock().expect("open connections").evict_silent(None);
                        tokio::select! {
                            slot = slots.clone().acquire_owned() => slot.expect("never closed"),
                            _ = &mut shutdown => break,
                        }
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
                let (spoke, close) = (Arc::default(), Arc::new(tokio::sync::Notify::new()));
                let id = {
                    let mut open = open.lock().expect("open connections");
                    if open.of_peer(peer) >= limits.max_per_peer.max(1)
                        && !open.evict_silent(Some(peer))
                    {
                        continue; // refused: the peer holds its share, all speaking
                    }
                    open.add(peer, Arc::clone(&spoke), Arc::clone(&close))
                };
                let io = JsonParseErrors::new(Spoken::new(stream, spoke));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .max_buf_size(HEAD_BUFFER_BYTES)
                    .max_headers(MAX_HEADERS)
                    .serve_connection(TokioIo::new(io), service);
                let conn = graceful.watch(conn);
                let open = Arc::clone(&open);
                tokio::spawn(async move {
                    tokio::select! {
                        _ = conn => {}
                        // Evicted: dropping the connection closes its socket.
                        _ = close.notified() => {}
                    }
                    open.lock().expect("open connections").remove(id);
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

/// A connection that notes when its peer first sends a byte (until then it may be closed
/// to make room: [`Open::evict_silent`]).
pub struct Spoken<S> {
    io: S,
    spoke: Arc<std::sync::atomic::AtomicBool>,
}

impl<S> Spoken<S> {
    fn new(io: S, spoke: Arc<std::sync::atomic::AtomicBool>) -> Self {
        Spoken { io, spoke }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Spoken<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.spoke.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        polled
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Spoken<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The connection cap that fits the process's file limit (docs/operations.md, `serve`
/// settings): the soft `RLIMIT_NOFILE` is raised to the hard one, and the cap is clamped
/// to it less `reserve` descriptors (stores, result files, datasource connections).
/// Returns the effective cap and the limit; `Err` when the limit leaves no room.
pub fn fit_file_limit(wanted: usize, reserve: usize) -> Result<(usize, u64), String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write to and read the struct given; no other state.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok((wanted, 0)); // unknown: the configured cap stands
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    let limit = lim.rlim_cur;
    let room = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .saturating_sub(reserve);
    if room < 8 {
        return Err(format!(
            "the file limit (ulimit -n) is {limit}, which leaves no room for HTTP connections beside the {reserve} descriptors this serve reserves for its stores, results and datasource connections: raise it"
        ));
    }
    Ok((wanted.min(room), limit))
}

/// A connection whose body-less error answers from hyper become JSON. hyper answers a
/// request it cannot parse itself, before any service runs: 400 (a bad method, URI,
/// version or header line), 414 (a request line over 64 KiB, its fixed limit) and 431 (a
/// head over [`HEAD_BUFFER_BYTES`]), each with `content-length: 0`. This wrapper
/// recognises such a response as hyper writes it and writes the framework's error in
/// its place (shape D of docs/api.md, "Errors"), then the connection closes as hyper
/// closes it. Every other byte passes through unchanged.
pub struct JsonParseErrors<S> {
    io: S,
    /// A replacement being written, and how much of it is.
    pending: Vec<u8>,
    sent: usize,
}

impl<S> JsonParseErrors<S> {
    pub fn new(io: S) -> Self {
        JsonParseErrors {
            io,
            pending: Vec::new(),
            sent: 0,
        }
    }
}

/// The JSON answer for hyper's own body-less error response `head`, if it is one.
pub fn json_for_parse_error(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let code: u16 = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let lower = text.to_ascii_lowercase();
    let automatic = matches!(code, 400 | 414 | 431)
        && text.ends_with("\r\n\r\n")
        && lower.contains("\r\ncontent-length: 0\r\n");
    if !automatic {
        return None;
    }
    let status = StatusCode::from_u16(code).ok()?;
    let reason = status.canonical_reason().unwrap_or("Bad Request");
    let body =
        serde_json::json!({"code": code, "title": "request_failed", "message": reason}).to_string();
    let date = text
        .split("\r\n")
        .find(|l| l.to_ascii_lowercase().starts_with("date:"))
        .map(|l| format!("{l}\r\n"))
        .unwrap_or_default();
    Some(
        format!(
            "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{date}\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: tokio::io::AsyncWrite + Unpin> JsonParseErrors<S> {
    /// Writes what is left of a replacement.
    fn drain(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        while self.sent < self.pending.len() {
            match std::pin::Pin::new(&mut self.io).poll_write(cx, &self.pending[self.sent..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.pending.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for JsonParseErrors<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for JsonParseErrors<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        match self.drain(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        if let Some(replacement) = json_for_parse_error(buf) {
            // Taken whole: what the socket does not accept now goes out on the next
            // write, flush or shutdown.
            self.pending = replacement;
            if let Poll::Ready(Err(e)) = self.drain(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes a response head as one buffer, which is what
    // `json_for_parse_error` must see whole.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_own_error_answers_become_json_and_nothing_else_changes() {
        let head = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Mon, 07 Dec 2026 05:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(json_for_parse_error(head).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{out}");
        assert!(
            out.contains("date: Mon, 07 Dec 2026 05:00:00 GMT\r\n"),
            "{out}"
        );
        let (_, body) = out.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(body).unwrap(),
            serde_json::json!({"code": 414, "title": "request_failed", "message": "URI Too Long"})
        );
        assert!(out.contains(&format!("content-length: {}\r\n", body.len())));
        for untouched in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n{\"code\":400}",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"{\"rows\": 1}",
        ] {
            assert!(json_for_parse_error(untouched).is_none());
        }
    }
}
