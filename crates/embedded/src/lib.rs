//! # fetcher-embedded
//!
//! `fetcher serve`'s adapters, everything on one machine and no cloud: the mirror of
//! `fetcher-aws`, passing the same conformance suites (`fetcher_host::testing`,
//! `fetcher_engine::testing`).
//!
//! | adapter | ports |
//! |---|---|
//! | [`SqliteStore`] | engine: connection store, schema cache, execution store; host: job store, rate limiter |
//! | [`LocalDirObjectStore`] | object store (sealed results under a directory) |
//! | [`EventLog`] | event publisher (NDJSON file, optional webhook) |
//! | [`InProcessQueue`] | job queue, durable through the jobs table |

mod events;
mod local;
mod queue;
mod sqlite;

pub use events::{EventLog, event_line};
pub use local::LocalDirObjectStore;
pub use queue::{InProcessQueue, Shares, SlotObserver, Worker, WorkerConfig};
pub use sqlite::SqliteStore;
