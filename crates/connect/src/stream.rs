//! The row streamer every connector can use: a producer task owns the datasource's
//! connection and sends batches through a small channel, so reading and decoding overlap
//! with the engine's encoding, memory stays bounded (four batches in flight), and a
//! producer that stops without saying `End` (a panic, an abort) is an error, never a
//! table passed off as complete.

use fetcher_engine::ports::RowCursor;
use fetcher_engine::{BoxFuture, Category, Context, EngineError, Result, RowBatch};
use tokio::sync::mpsc;

use crate::error::{self, msg};

/// What a producer sends.
pub enum Msg {
    Batch(RowBatch),
    Failed(EngineError),
    End,
}

/// Aborts the producer when the cursor goes away.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A cursor fed by a producer task that owns the connection, so decoding overlaps with the
/// engine's encoding. A producer that stops without `End` (panic, abort) is an error, so a
/// half-read table can never pass as complete.
pub struct ChannelCursor {
    rx: mpsc::Receiver<Msg>,
    _task: AbortOnDrop,
    done: bool,
}

impl ChannelCursor {
    pub fn spawn<F>(producer: impl FnOnce(mpsc::Sender<Msg>) -> F) -> ChannelCursor
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(4);
        let task = tokio::spawn(producer(tx));
        ChannelCursor {
            rx,
            _task: AbortOnDrop(task.abort_handle()),
            done: false,
        }
    }
}

impl RowCursor for ChannelCursor {
    fn next_batch<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<Option<RowBatch>>> {
        Box::pin(async move {
            if self.done {
                return Ok(None);
            }
            match ctx.run(self.rx.recv()).await {
                Err(d) => Err(error::from_done(d)),
                Ok(Some(Msg::Batch(b))) => Ok(Some(b)),
                Ok(Some(Msg::End)) => {
                    self.done = true;
                    Ok(None)
                }
                Ok(Some(Msg::Failed(e))) => {
                    self.done = true;
                    Err(e)
                }
                Ok(None) => {
                    self.done = true;
                    Err(EngineError::new(Category::Internal, msg::QUERY_FAILED))
                }
            }
        })
    }

    fn close<'a>(&'a mut self, _ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.done = true;
            self.rx.close();
            Ok(())
        })
    }
}
