//! Bounds on the waits a connector controls: every connect and every discovery ends by
//! its own limit and by the caller's context, whichever comes first.

use std::time::Duration;

use fetcher_engine::{Category, Context, EngineError, Result};

use crate::error::{self, msg};

/// Runs `fut` bounded by `limit` and the context; a timeout is `on_timeout`'s error, the
/// context's end its own (`timeout` or `canceled`).
pub async fn bounded<T>(
    ctx: &Context,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T>>,
    on_timeout: fn() -> EngineError,
) -> Result<T> {
    match ctx.run(tokio::time::timeout(limit, fut)).await {
        Err(done) => Err(error::from_done(done)),
        Ok(Err(_elapsed)) => Err(on_timeout()),
        Ok(Ok(r)) => r,
    }
}

/// A connect that did not finish in time (reason `ConnectTimedOut`).
pub fn connect_timed_out() -> EngineError {
    EngineError::of(fetcher_engine::Reason::ConnectTimedOut)
}

/// A discovery that did not finish in time.
pub fn discover_timed_out() -> EngineError {
    EngineError::new(Category::Timeout, msg::DISCOVER_FAILED)
}
