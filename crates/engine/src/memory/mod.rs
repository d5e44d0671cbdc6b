//! In-memory implementations of every port, for tests and simple embedded use.
//!
//! No I/O, no environment access, all shared state behind locks, deterministic listings,
//! and failures returned as stable [`EngineError`](crate::EngineError)s rather than panics.
//! Not production persistence: no TTLs, no eviction, no durability. Most types have
//! switches to inject failures (`fail_*`) and counters to observe calls.

mod connector;
mod cursor;
mod sink;
mod stores;

pub use connector::{
    CONNECTOR_FAILURE_TEXT, ConnectorStats, MemoryRegistry, QueryHook, RowGenerator,
    TemplateBehaviour, TemplateFactory,
};
pub use cursor::EagerCursor;
pub use sink::{MemoryResultSink, SinkSwitches};
pub use stores::{
    CHECKER_FAILURE_TEXT, MemoryActiveChecker, MemoryConnectionStore, MemoryCredentialProtector,
    MemoryExecutionStore, MemorySchemaCache, RecordingExecutionStore, RecordingObservability,
    SpanNode,
};
