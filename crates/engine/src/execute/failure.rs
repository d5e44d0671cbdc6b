//! How a step fails: connector errors reduced to the engine's fixed texts, panics turned
//! into values, the first failure of a run recorded once (which cancels the run), and a
//! guard that reports a step finished however it ends.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use tokio::sync::watch;

use crate::context::{Context, Done};
use crate::error::{Category, EngineError, Result, msg};

/// The connector-error rule: the connector's own deadline/cancel (or its `validation`
/// rejection, beyond the reference), else the live context's state, else `unavailable`
/// with the fixed fallback. The connector's error is kept only as the hidden cause (for
/// the host's log), and whether a retry helps is the connector's: a refused login or a
/// query the database rejected stays final under the reference's category and text.
pub(super) fn connector_error(
    e: EngineError,
    ctx: &Context,
    fallback: &'static str,
) -> EngineError {
    match e.category() {
        Category::Timeout => Done::DeadlineExceeded.into(),
        Category::Canceled => Done::Canceled.into(),
        // The connector rejected the request itself (an unknown operator, a value of the
        // wrong type): the caller's fault, reported as such. Connectors write these texts
        // themselves and never put driver output in them.
        Category::Validation => e,
        // Why the connection failed, in the engine's fixed words (a refused login, an
        // unknown database, nothing listening, a timeout, a failed TLS handshake): what
        // the caller must fix, so kept (the reference said only "failed to connect").
        Category::Connect if e.reason().is_some() => e,
        _ => match ctx.err() {
            Some(d) => d.into(),
            None => {
                let retry = e.retry();
                EngineError::wrap(Category::Unavailable, fallback, e).with_retry(retry)
            }
        },
    }
}

pub(super) fn serialize_failed() -> EngineError {
    EngineError::new(Category::Internal, msg::SERIALIZE_FAILED)
}

pub(super) fn panic_error(payload: Box<dyn Any + Send>) -> EngineError {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    EngineError::new(Category::Internal, format!("{}{text}", msg::PANIC_PREFIX))
}

/// Polls a future inside `catch_unwind`, turning a panic into a value.
pub(super) struct CatchUnwind<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);

impl<T> Future for CatchUnwind<'_, T> {
    type Output = std::result::Result<T, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => Poll::Ready(Err(p)),
        }
    }
}

pub(super) async fn catch<'a, T>(fut: impl Future<Output = Result<T>> + Send + 'a) -> Result<T> {
    CatchUnwind(Box::pin(fut))
        .await
        .unwrap_or_else(|p| Err(panic_error(p)))
}

/// The first failure of a run, recorded once; recording it cancels the run.
#[derive(Clone)]
pub(super) struct FirstError {
    pub(super) slot: Arc<Mutex<Slot>>,
    pub(super) run: Context,
}

#[derive(Default)]
pub(super) struct Slot {
    first: Option<EngineError>,
    /// No more failures count (a segmented run's writer stopped: the steps still going
    /// are halted on purpose).
    sealed: bool,
}

impl FirstError {
    pub(super) fn new(run: &Context) -> Self {
        FirstError {
            slot: Arc::default(),
            run: run.clone(),
        }
    }

    pub(super) fn record(&self, e: EngineError) {
        let mut slot = self.slot.lock().expect("first-error lock");
        if slot.sealed {
            return;
        }
        if slot.first.is_none() {
            slot.first = Some(e);
        }
        drop(slot);
        self.run.cancel();
    }

    /// From now on failures are ignored (and cancel nothing).
    pub(super) fn seal(&self) {
        self.slot.lock().expect("first-error lock").sealed = true;
    }

    pub(super) fn take(&self) -> Option<EngineError> {
        self.slot.lock().expect("first-error lock").first.take()
    }
}

pub(super) struct SetOnDrop(pub(super) watch::Sender<bool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}
