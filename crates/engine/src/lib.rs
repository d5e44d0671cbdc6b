//! # fetcher-engine
//!
//! The rules of extraction, behind ports. The engine owns what an extraction *means*
//! (tenancy, connection lifecycle, schema discovery and validation, planning, limits,
//! execution, the NDJSON/JSON encodings, digests and the error contract); a host owns how
//! it *runs* (HTTP, queues, databases, object storage, keys) and reaches the engine only
//! through the traits in [`ports`]. The rules are written down in `docs/engine.md`; they
//! follow the reference implementation, and the differences are listed below.
//!
//! ## Module map
//!
//! ```text
//! src/
//!   engine.rs  schema.rs  plan.rs  execute/   the operations a host calls
//!   model/                                     the contract's value types
//!   ports.rs                                   the traits a host implements
//!   error.rs  context.rs  json.rs              machinery every operation shares
//!   memory/  testing.rs                        in-memory ports, conformance suites
//! ```
//!
//! | module | what it holds |
//! |---|---|
//! | [`engine`] | [`EngineBuilder`], [`Engine`], the connection lifecycle (create, read, list, patch, delete, assign) and connection tests |
//! | `schema` | discovery (cache-first or fresh) and schema validation (methods on [`Engine`]) |
//! | `plan` | [`Engine::plan_extraction`]: limits, scope probe, validation, deterministic steps |
//! | `execute` | [`Engine::execute_extraction`] and [`Engine::execute_extraction_parts`]: the per-step work and the run's bookkeeping (`mod.rs`), how a step fails (`failure`), rows into batches (`batch`), direct mode (`direct`), store mode and its ordinal-window scheduler and ordered writer (`store`), the multi-object mode's parts and manifest (`parts`), segmented runs' stop signal and resumed plan (`segment`, [`Engine::execute_segment`]) |
//! | [`model`] | the contract's value types, re-exported at the root: connections ([`model::connection`]), catalog and validation ([`model::catalog`]), extraction request, plan and run state ([`model::extraction`]), results ([`model::result`]), incremental reads ([`model::incremental`]), segments of a continued run ([`model::segment`]), and [`filter`], [`value`], [`limits`], [`tenant`], [`time`], [`secret`], [`progress`] |
//! | [`ports`] | the nine ports: registry/connector/cursor, protector, stores, sink, table format, cache, checker, observability |
//! | [`error`] | [`EngineError`], its eleven [`Category`] values and the fixed message catalogue |
//! | [`context`] | [`Context`]: cancellation plus deadline, telling the two apart |
//! | [`json`] | the canonical JSON encoder (byte-compatible with the reference) |
//! | [`memory`] | in-memory implementations of every port, a template connector and [`EagerCursor`] |
//! | `testing` | conformance suites every storage adapter must pass (feature `testing`) |
//!
//! Where each rule of `docs/engine.md` lives is listed there ("Where the rules live").
//!
//! ## Error policy
//!
//! Every failure is an [`EngineError`]: a [`Category`] (stable string, decides the HTTP
//! status and whether a retry can help) plus a fixed message from [`error::msg`]. Text from
//! drivers, factories, protectors, checkers and sinks never crosses the boundary; it is
//! replaced by the fixed message. A host may attach a hidden cause with
//! [`EngineError::wrap`]. Connection store errors pass through unchanged (they are the
//! host's own, and must be safe).
//!
//! ## Ordering contract
//!
//! The same data gives the same bytes. Steps run in ascending config-name order; the
//! [`ports::Connector::query_stream`] contract requires rows in a stable order (tables by
//! name, rows by primary key, else by the selected columns); the store-mode writer drains
//! steps in plan order whatever order they finish in; map keys are always sorted.
//!
//! ## Result formats
//!
//! * **Direct**: `{config: {table: [row, ...]}}` as indented JSON (two spaces, sorted
//!   keys, no final newline), with a SHA-256 digest.
//! * **Store**: NDJSON lines `{"config":"…","table":"…","row":{…}}\n`, written
//!   incrementally in 1024-row batches with back-pressure, digested as they stream.
//! * **Parts** ([`Engine::execute_extraction_parts`]): one object per `(config, table)`
//!   in a host's typed file format ([`ports::TableFormat`], e.g. Parquet), then a JSON
//!   manifest listing them (docs/engine.md, "Multi-object store mode").
//!
//! ## Differences from the reference
//!
//! * **Ordering is a written contract** on connectors (above); the reference promised
//!   determinism but issued no `ORDER BY`.
//! * **Filters are never dropped.** Filters are typed ([`filter`]): an entry that is not a
//!   `table → field → condition` map does not decode, and one that targets a table or
//!   datasource not selected for extraction fails planning with `extraction request failed
//!   schema validation`. The reference skipped the former and passed the latter to
//!   connectors unvalidated.
//! * **Store-mode `format` is `ndjson`**, what the bytes are (the reference says `json`).
//! * **Writers are aborted**: on failure the engine calls
//!   [`ports::ResultStreamWriter::abort`] (never `close`), so a sink can discard a partial
//!   object (e.g. abort a multipart upload) instead of relying on it being dropped.
//! * **Key versions are labels** (text), as the product stores them; the reference
//!   engine types them as integers.
//! * **Unset timestamps are omitted** rather than rendered as `0001-01-01T00:00:00Z`.
//! * **Terminal status writes use a fresh context** (bounded to 10 s), so a cancelled run
//!   still records `canceled`.
//! * **Connector `validation` rejections keep their category and text** (a blocked host,
//!   an invalid TLS mode, an unsupported filter operator): they are the caller's to fix,
//!   not a dependency failure. Connectors write these texts themselves and never put
//!   driver output in them; every other connector error is still replaced by a fixed text.
//! * **Test results carry latency** (`latencyMs`).
//! * **Cursors are batched**: [`ports::RowCursor::next_batch`] returns rows of one table at
//!   a time instead of the reference's row-at-a-time `next/row/err`.
//! * **Dependencies**: Rust's std has no JSON, SHA-256 or executor, so the boundary is
//!   serde, serde_json, sha2 and tokio (`rt`, `sync`, `time`, `macros`) and what they pull
//!   in, checked by `scripts/check-engine-deps` (docs/engine.md, "Dependency boundary"). No
//!   `std::net`, `std::process` or `std::fs` in this crate.

pub mod context;
pub mod engine;
pub mod error;
mod execute;
pub mod json;
pub mod memory;
pub mod model;
mod plan;
pub mod ports;
mod schema;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

// The contract's modules, at the paths hosts name them by.
pub use model::{filter, limits, progress, secret, tenant, time, value};

pub use context::{Context, Done};
pub use engine::{DEFAULT_SCHEMA_TTL, Engine, EngineBuilder};
pub use error::{Category, EngineError, Reason, Result, Retry};
pub use execute::{STORE_BATCH_ROWS, hex};
pub use filter::{Condition, DatasourceFilters, Filters, Operator, TableFilters};
pub use limits::Limits;
pub use memory::EagerCursor;
pub use model::{
    catalog::*, connection::*, datasource::*, extraction::*, incremental::*, options::*, result::*,
    segment::*,
};
pub use ports::BoxFuture;
pub use progress::{ExtractionProgress, ProgressSnapshot};
pub use secret::Secret;
pub use tenant::TenantContext;
pub use time::Timestamp;
pub use value::{ColumnType, Columns, Row, RowBatch, Value};
