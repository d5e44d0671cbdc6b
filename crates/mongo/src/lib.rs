//! # fetcher-mongo
//!
//! The engine's connector port for MongoDB (`MONGODB`), on the official driver. Described
//! in docs/datasources.md ("MongoDB"); its values in docs/encodings.md and its filters in
//! docs/filters.md.
//!
//! ## Module map
//!
//! | module | what it holds |
//! |---|---|
//! | [`connector`] | [`MongoConnectorFactory`], [`MongoConnector`]: options, connect, discovery, the read plan and its producer |
//! | [`discover`] | the sampled shape of a collection: fields (nested paths dotted), observed BSON types, missing or null |
//! | [`filter`] | filters → a query document with the engine's semantics, values typed by the field |
//! | [`keys`] | `_id` as a split key: a collection's span, a key range as a query |
//! | [`values`] | BSON → values, losslessly |
//! | [`error`] | the driver's errors classified (refused login, outage, refused command) |
//!
//! ## Lifecycle
//!
//! `build` checks the type, TLS mode and host safety's no-network rules and reveals the
//! password; no I/O. The first operation resolves and checks the host (pinning the
//! address), makes a client of one directly-connected server and pings it (15 s bound).
//! `query_stream` samples each requested collection, checks the fields and filters
//! against it, then hands the client to a producer task that reads the collections in
//! ascending name order, documents in `_id` order (or `(cursor, _id)` for incremental
//! reads) in batches of [`connector::BATCH_ROWS`], through a small channel.
//!
//! ## Error policy
//!
//! Every error is an [`fetcher_engine::EngineError`] with a fixed message; the driver's
//! error is only the hidden cause. A refused login is final (`connect`), an unreachable
//! server or a stepping-down primary is `unavailable` (retried), a command the server
//! refuses is `validation`. Nothing is logged.

pub mod connector;
pub mod discover;
pub mod error;
pub mod filter;
pub mod keys;
pub mod values;

pub use connector::{MongoConnector, MongoConnectorFactory};
