//! The call context: a cancellation signal plus an optional deadline.
//!
//! Every operation and every port call receives a [`Context`]. The engine must tell a
//! *deadline* apart from a *cancel by the host* (they map to `timeout` and `canceled`),
//! so a context records why it ended ([`Done`]). Contexts form a tree: cancelling a
//! parent cancels every child; a child's deadline is the earlier of its own and its
//! parent's.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why a context is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Cancelled by its owner (or an ancestor's owner).
    Canceled,
    /// Its deadline (or an ancestor's) has passed.
    DeadlineExceeded,
}

struct Node {
    deadline: Option<Instant>,
    state: watch::Sender<Option<Done>>,
    children: Mutex<Vec<Weak<Node>>>,
}

impl Node {
    fn cancel(&self, why: Done) {
        let changed = self.state.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(why);
                true
            } else {
                false
            }
        });
        if changed {
            let children = std::mem::take(&mut *self.children.lock().expect("context lock"));
            for child in children.iter().filter_map(Weak::upgrade) {
                child.cancel(why);
            }
        }
    }
}

/// A cheap, cloneable handle on a node of the context tree.
#[derive(Clone)]
pub struct Context {
    node: Arc<Node>,
}

impl Default for Context {
    fn default() -> Self {
        Self::background()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("deadline", &self.node.deadline)
            .field("done", &self.err())
            .finish()
    }
}

impl Context {
    /// A root context: never cancelled, no deadline.
    pub fn background() -> Self {
        Self::root(None)
    }

    fn root(deadline: Option<Instant>) -> Self {
        let (state, _) = watch::channel(None);
        Context {
            node: Arc::new(Node {
                deadline,
                state,
                children: Mutex::new(Vec::new()),
            }),
        }
    }

    fn derive(&self, deadline: Option<Instant>) -> Context {
        let deadline = match (self.node.deadline, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let child = Self::root(deadline);
        let mut children = self.node.children.lock().expect("context lock");
        // Checked under the lock so a concurrent cancel cannot be missed.
        if let Some(why) = *self.node.state.borrow() {
            child.node.cancel(why);
        } else {
            children.retain(|w| w.strong_count() > 0);
            children.push(Arc::downgrade(&child.node));
        }
        child
    }

    /// A child that can be cancelled on its own (see [`Context::cancel`]).
    pub fn child(&self) -> Context {
        self.derive(None)
    }

    /// A child whose deadline is `timeout` from now (or the parent's, if earlier).
    pub fn with_timeout(&self, timeout: Duration) -> Context {
        self.derive(Some(Instant::now() + timeout))
    }

    /// A child with an absolute deadline (or the parent's, if earlier).
    pub fn with_deadline(&self, deadline: Instant) -> Context {
        self.derive(Some(deadline))
    }

    /// Cancels this context and all its descendants. Idempotent; the first reason wins.
    pub fn cancel(&self) {
        self.node.cancel(Done::Canceled);
    }

    /// The effective deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.node.deadline
    }

    /// `None` while live; otherwise why the context ended.
    pub fn err(&self) -> Option<Done> {
        if let Some(why) = *self.node.state.borrow() {
            return Some(why);
        }
        match self.node.deadline {
            Some(d) if Instant::now() >= d => Some(Done::DeadlineExceeded),
            _ => None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.err().is_some()
    }

    /// Completes when the context is cancelled or its deadline passes.
    pub async fn done(&self) -> Done {
        let mut rx = self.node.state.subscribe();
        let cancelled = async {
            match rx.wait_for(Option::is_some).await {
                Ok(v) => v.unwrap_or(Done::Canceled),
                // The sender lives as long as `self`, so this cannot happen; treat as cancel.
                Err(_) => Done::Canceled,
            }
        };
        match self.node.deadline {
            None => cancelled.await,
            Some(deadline) => tokio::select! {
                why = cancelled => why,
                _ = tokio::time::sleep_until(deadline) => {
                    // A cancel that raced the deadline wins if it was recorded first.
                    (*self.node.state.borrow()).unwrap_or(Done::DeadlineExceeded)
                }
            },
        }
    }

    /// Runs `fut` unless the context ends first.
    pub async fn run<F: std::future::Future>(&self, fut: F) -> Result<F::Output, Done> {
        if let Some(why) = self.err() {
            return Err(why);
        }
        tokio::select! {
            biased;
            why = self.done() => Err(why),
            out = fut => Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancel_propagates_to_children_but_not_parents() {
        let root = Context::background();
        let a = root.child();
        let b = a.child();
        assert_eq!(b.err(), None);
        a.cancel();
        assert_eq!(a.err(), Some(Done::Canceled));
        assert_eq!(b.err(), Some(Done::Canceled));
        assert_eq!(root.err(), None);
        assert_eq!(b.done().await, Done::Canceled);
        // A child of a cancelled context starts cancelled.
        assert_eq!(a.child().err(), Some(Done::Canceled));
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_is_distinguished_from_cancel() {
        let root = Context::background();
        let t = root.with_timeout(Duration::from_millis(30));
        assert_eq!(t.err(), None);
        assert_eq!(t.done().await, Done::DeadlineExceeded);
        assert_eq!(t.err(), Some(Done::DeadlineExceeded));
        // The child inherits the earlier deadline.
        let long = t.with_timeout(Duration::from_secs(60));
        assert_eq!(long.deadline(), t.deadline());
        assert_eq!(long.err(), Some(Done::DeadlineExceeded));
        // Cancel recorded before the deadline wins.
        let c = root.with_timeout(Duration::from_secs(1));
        c.cancel();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(c.err(), Some(Done::Canceled));
    }

    #[tokio::test]
    async fn run_stops_at_cancel() {
        let ctx = Context::background().child();
        let c2 = ctx.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            c2.cancel();
        });
        let out = ctx.run(std::future::pending::<()>()).await;
        assert_eq!(out, Err(Done::Canceled));
        assert_eq!(ctx.run(async { 1 }).await, Err(Done::Canceled));
    }
}
