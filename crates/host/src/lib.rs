//! # fetcher-host
//!
//! What every Fetcher host shares: the API Lambda, the extraction Lambda and
//! `fetcher serve` run this crate's job service and pipeline over their own adapters
//! (`fetcher-aws`, `fetcher-embedded`); `fetcher-http` puts the router on top. No server
//! stack, no database driver: the extract Lambda links this and not HTTP.
//!
//! ```text
//! engine ← connectors ← host ← { http, embedded, aws } ← { api, extract, fetcher }
//! ```
//!
//! ## Module map
//!
//! | module | what it holds |
//! |---|---|
//! | [`ports`] | host ports: [`ports::JobStore`], [`ports::JobQueue`], [`ports::EventPublisher`], [`ports::RateLimiter`], [`ports::KeyProvider`], [`ports::ObjectStore`], [`ports::ReadinessProbe`] |
//! | [`model`] | the job record, result descriptor, terminal event and queue message |
//! | [`connection`] | [`connection::ConnectionRecord`]: the API's connection record, typed, and its one codec to the engine's descriptor |
//! | [`jobs`] | job use cases: create (validation, dedup, enqueue), get; the active-job gate |
//! | [`incremental`] | incremental jobs: request checks, sync ids, schema checks and key resolution; the sync use cases (get, reset) |
//! | [`schedules`] | schedule use cases: set, pause, resume, remove, and the tick that runs due schedules (claim, skip or create, record) |
//! | [`dedup`] | the canonical request hash of job de-duplication (docs/api.md, "Duplicates") |
//! | [`message`] | the signed job message: encode on the API side, verify + parse on the worker side |
//! | [`pipeline`] | the extraction pipeline: verify → claim → engine → seal → store → complete → publish, and the event repair pass |
//! | [`sink`] | the engine's result sink: NDJSON sealed with v2 frames, streamed to an object store; v1 for the reference format |
//! | [`credentials`] | the engine's credential protector over AES-256-GCM, and the connectors' credential source |
//! | [`sanitize`] | error-text sanitisation for job records and events |
//! | [`settings`] | the one settings schema (clap with a variable per setting) and [`settings::ExtractionSettings`], shared by `serve` and the Lambdas |
//! | [`observe`] | [`observe::TracingObservability`]: the engine's spans on `tracing` |
//! | [`wiring`] | [`wiring::HostPorts`]: the one engine and pipeline wiring every host uses |
//! | [`memory`] | in-memory implementations of every host port |
//! | [`testing`] | conformance suites every host-port adapter passes (feature `testing`) |
//! | [`error`] | [`ServiceError`]: kind, safe message, retryability |
//!
//! ## Error policy
//!
//! Every failure is a [`ServiceError`] whose message was written here (or is an engine
//! error's fixed rendering); adapter and SDK text is only ever a hidden cause, visible in
//! logs via [`ServiceError::log_detail`], never in an HTTP body or an event.
//! [`ServiceError::is_retryable`] decides whether a queue message comes back.

pub mod connection;
pub mod credentials;
pub mod dedup;
pub mod error;
pub mod incremental;
pub mod jobs;
pub mod memory;
pub mod message;
pub mod model;
pub mod observe;
pub mod pipeline;
pub mod ports;
pub mod sanitize;
pub mod schedules;
pub mod settings;
pub mod sink;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wiring;

pub use error::{ErrorKind, Result, ServiceError};
