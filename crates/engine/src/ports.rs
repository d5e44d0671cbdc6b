//! The ports: what a host supplies to the engine. All are object-safe and used as
//! `Arc<dyn Port>`; async methods return a boxed future ([`BoxFuture`]).
//!
//! Obligations common to every port:
//! * **Tenant scoping.** Every method that takes a [`TenantContext`] must make one tenant's
//!   records invisible to every other tenant: another tenant's record is reported exactly
//!   like a missing one.
//! * **No secrets out.** Errors and returned values never carry passwords, ciphertext,
//!   DSNs or driver messages. Connector errors are replaced by the engine's fixed texts
//!   anyway; store errors are returned to the caller unchanged, so a store must make its
//!   own errors safe.
//! * **Cancellation.** Every call gets the operation's [`Context`]; a port should stop
//!   promptly when it is done.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::context::Context;
use crate::error::{EngineError, Result};
use crate::model::*;
use crate::tenant::TenantContext;
use crate::value::{Columns, Row, RowBatch};

/// A boxed, sendable future: the return type of every async port method.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

// ---------------------------------------------------------------------------------------
// Connectors
// ---------------------------------------------------------------------------------------

/// Finds the factory for a datasource type. Required.
///
/// A pure lookup: no I/O, deterministic by type. `None` means the type is not registered;
/// the engine turns it into `not_found` / `no connector registered for datasource type <t>`
/// (reason [`crate::Reason::NoConnector`]).
pub trait ConnectorRegistry: Send + Sync {
    fn connector(&self, datasource_type: DatasourceType) -> Option<Arc<dyn ConnectorFactory>>;
}

/// Builds one connector for one operation.
pub trait ConnectorFactory: Send + Sync {
    /// Builds a connector from the secret-free descriptor. Must not perform network I/O
    /// (credentials may be resolved here, e.g. through a [`CredentialProtector`]).
    /// `Ok(None)` means "built nothing"; the engine treats it like a build failure and
    /// neither tests nor closes anything.
    /// `tenant` is the caller's scope (beyond the reference, whose factories got only the
    /// descriptor), so a factory can reveal the tenant's stored credential.
    fn build<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Option<Box<dyn Connector>>>>;
}

/// A live datasource connection, owned by one task. Lifecycle:
/// build → `test_connection` → `discover_schema` / `query_stream` → `close`.
///
/// The schema path skips `test_connection`, so `discover_schema` must connect lazily;
/// a failed lazy connect should be reported as a `connect`-category [`EngineError`], which
/// the engine passes through. `close` is idempotent and safe after a failed connect; its
/// errors are ignored. The engine closes every connector it built exactly once.
pub trait Connector: Send {
    /// Connects and pings.
    fn test_connection<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<()>>;

    /// Tables and fields, with system schemas already filtered out.
    fn discover_schema<'a>(&'a mut self, ctx: &'a Context)
    -> BoxFuture<'a, Result<SchemaSnapshot>>;

    /// Opens a cursor over the rows of the step's tables (`step.fields_of(table)`, every
    /// column when empty), with `step.filters[table][field]` applied, incremental tables
    /// read past their watermark, resumed tables after their position, and positions
    /// reported when `step.positions` asks. The step is the plan's own, not a rebuilt
    /// request.
    ///
    /// **Ordering contract (stricter than the reference):** rows come in a stable order —
    /// tables in ascending name order, rows ordered by primary key (or by the selected
    /// columns when there is none) — so the same data always gives the same bytes.
    /// How the rows are read is the connector's business (several connections, say) as
    /// long as the rows, their order and the batches are the ones one stream would give.
    /// Filters must be applied or rejected, never silently dropped.
    fn query_stream<'a>(
        &'a mut self,
        ctx: &'a Context,
        step: &'a PlanStep,
    ) -> BoxFuture<'a, Result<Box<dyn RowCursor + 'a>>>;

    /// The key span of `table` in `step` (with the step's filters it is an estimate over
    /// the whole table): the smallest and largest value of its leading key, typed
    /// ([`crate::KeyValue`]), and the catalog's row estimate. `None` (the default) when
    /// the table has no key of a kind this connector splits, or it cannot tell: the table
    /// is then never fanned out. The spans a connector answers are its declaration of
    /// what it splits, and it must honour `step.key_ranges` of those kinds in
    /// [`Connector::query_stream`] (`lo <= key < hi` on that key, in the same order).
    fn key_span<'a>(
        &'a mut self,
        _ctx: &'a Context,
        _step: &'a PlanStep,
        _table: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::KeySpan>>> {
        Box::pin(async { Ok(None) })
    }

    /// Drops what a sync's log reads keep on the datasource (PostgreSQL: the replication
    /// slot and publication `slot` names), when the sync is deleted; what is already gone
    /// is no error. The default does nothing: a datasource without log reads keeps
    /// nothing.
    fn release_log<'a>(
        &'a mut self,
        _ctx: &'a Context,
        _slot: &'a LogSlot,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Releases the connection. Idempotent.
    fn close<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<()>>;
}

/// A stream of rows from one query, owned by one task. Carries data only.
pub trait RowCursor: Send {
    /// The next batch of rows (one table per batch), or `Ok(None)` at the end. A cursor
    /// should stop with the context's error when the context is done. Batches should be
    /// bounded (a few hundred to a few thousand rows): never a whole table in memory.
    fn next_batch<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<Option<RowBatch>>>;

    /// Releases the cursor. Idempotent.
    fn close<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        let _ = ctx;
        Box::pin(async { Ok(()) })
    }
}

// ---------------------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------------------

/// Protects connection secrets. Required when encrypted persistence is on.
///
/// Must never log the plaintext nor put plaintext or ciphertext in an error. The engine
/// calls only `protect`, before any store write; `reveal` is for host connectors.
pub trait CredentialProtector: Send + Sync {
    fn protect<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        plaintext: &'a [u8],
    ) -> BoxFuture<'a, Result<ProtectedCredential>>;

    fn reveal<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        credential: &'a ProtectedCredential,
    ) -> BoxFuture<'a, Result<crate::secret::Secret>>;
}

// ---------------------------------------------------------------------------------------
// Stores
// ---------------------------------------------------------------------------------------

/// Connection persistence. Optional, but without it nearly every operation fails with
/// `connection store is not configured`.
///
/// * Config names are unique within a tenant; a duplicate `create` fails (`validation` /
///   `connection already exists` by the port contract; the engine's own pre-check says
///   `conflict`).
/// * `update*` with `credential = None` keeps the stored secret; missing → `not_found`.
/// * `delete` and `delete_by_id` remove the record and its credential: nothing of a
///   deleted connection is kept, and its name and id are free at once (a new connection
///   may take both). Missing → `not_found`. (The reference kept a soft-deleted row, its
///   encrypted password included; docs/api.md, "Connections".)
/// * `list` is deterministic (ascending config name) and excludes deleted records.
/// * `list_paged` (provided): a page and the total; the store may own paging, filtering
///   and ordering by overriding it.
/// * Errors are returned to callers unchanged, so they must be safe to show.
pub trait ConnectionStore: Send + Sync {
    fn find<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>>;

    fn create<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>>;

    fn update<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>>;

    fn delete<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<()>>;

    fn list<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
    ) -> BoxFuture<'a, Result<Vec<ConnectionDescriptor>>>;

    fn find_by_id<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>>;

    fn update_by_id<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
        descriptor: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>>;

    fn delete_by_id<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, Result<()>>;

    /// Provided: offset paging over [`list`](Self::list) ([`ConnectionPage::offset`]). A
    /// store that can page natively overrides it. (Every store here is bounded per tenant
    /// by the connection cap, so none does.)
    fn list_paged<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        params: &'a ConnectionListParams,
    ) -> BoxFuture<'a, Result<ConnectionPage>> {
        Box::pin(async move {
            Ok(ConnectionPage::offset(
                self.list(ctx, tenant).await?,
                params,
            ))
        })
    }

    /// The stored protected secret (for host connectors). Tenant-scoped; `None` when the
    /// connection has no secret or does not exist. Beyond the reference's port, which
    /// left credential reads to the host.
    fn credential<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProtectedCredential>>>;
}

/// Execution status records. Optional; the engine's writes are best effort (errors are
/// ignored). `save` upserts by (tenant, job id); `find` reads the latest state back
/// (beyond the reference's port, so adapters can be checked by one conformance suite).
pub trait ExecutionStore: Send + Sync {
    fn save<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        state: &'a ExecutionState,
    ) -> BoxFuture<'a, Result<()>>;

    fn find<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ExecutionState>>>;
}

/// Result persistence for store mode. Optional (`auto` falls back to direct).
///
/// The engine opens one stream per execution, writes NDJSON batches in order, and on
/// success calls [`ResultStreamWriter::close`] exactly once. On any failure it calls
/// [`ResultStreamWriter::abort`] instead and never `close`: a partial result must never
/// become a reference. Sinks must sanitise tenant ids before composing physical paths.
pub trait ResultSink: Send + Sync {
    fn open_stream<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn ResultStreamWriter>>>;

    /// Whole-payload persistence (never called by the engine; kept for hosts).
    fn persist<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<ResultReference>>;

    /// Opens one object of a multi-object result (a table's part, or the manifest that
    /// lists the parts; docs/results.md, "Parquet results"). Same writer contract as
    /// [`open_stream`](Self::open_stream). Provided: a sink that stores single-stream
    /// results only refuses (`validation` / `result sink cannot store multi-part results`).
    fn open_object<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
        object: ResultObject<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ResultStreamWriter>>> {
        let _ = (ctx, tenant, job_id, object);
        Box::pin(async {
            Err(EngineError::validation(
                crate::error::msg::PARTS_UNSUPPORTED,
            ))
        })
    }

    /// Removes the finished parts of a multi-object result that failed before its
    /// manifest was written, best effort (errors are the sink's to log). Provided: keeps
    /// them (nothing references them).
    fn discard<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        paths: &'a [String],
    ) -> BoxFuture<'a, ()> {
        let _ = (ctx, tenant, paths);
        Box::pin(async {})
    }
}

/// Which object of a multi-object result [`ResultSink::open_object`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultObject<'a> {
    /// The `index`th part (0-based, in write order), a file of the given extension
    /// (`parquet`), written by the run of `claim` ([`crate::Segment::claim`]).
    Part {
        index: usize,
        extension: &'a str,
        claim: Option<u32>,
    },
    /// The manifest listing the parts: the job's result, written by the run of `claim`
    /// (a takeover's, [`crate::Segment::claim`], or `None`).
    Manifest { claim: Option<u32> },
}

/// A typed, per-table file format (Parquet) for store mode, supplied by a host; the
/// engine stays free of its dependencies. One [`TableEncoder`] per `(config, table)`.
pub trait TableFormat: Send + Sync {
    /// The format written: the reference's and the manifest's `format`; its spelling is
    /// the parts' extension.
    fn format(&self) -> StoredFormat;

    /// An encoder for one table of the given columns (names and catalog types); `table`
    /// names it in the encoder's errors.
    fn encoder(&self, table: &str, columns: &Arc<Columns>) -> Result<Box<dyn TableEncoder>>;
}

/// Encodes one table's rows, in order, into the file's bytes. Runs on the step's task
/// (encoding is CPU work), so it is synchronous. Memory must stay bounded whatever the
/// table's size: bytes are handed out as soon as the format allows.
pub trait TableEncoder: Send {
    /// Encodes `rows`, appending any finished bytes to `out`. A value the format cannot
    /// hold fails with `validation` / [`msg::VALUE_NOT_REPRESENTABLE`](crate::error::msg::VALUE_NOT_REPRESENTABLE),
    /// followed by `: column '<table>.<column>'` (the names, never the value).
    fn push(&mut self, rows: &[Row], out: &mut Vec<u8>) -> Result<()>;

    /// Appends the rest of the file (e.g. the footer) to `out`.
    fn finish(self: Box<Self>, out: &mut Vec<u8>) -> Result<()>;
}

/// One result being written. Writes may apply back-pressure by awaiting.
pub trait ResultStreamWriter: Send + 'static {
    fn write<'a>(&'a mut self, ctx: &'a Context, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>>;

    /// Finalises the object and returns its reference. Consumes the writer. The engine
    /// hashes the stream itself: a writer leaves `integrity.digest` empty and the engine
    /// fills in the SHA-256 of the bytes written (one pass over the plaintext).
    fn close(self: Box<Self>, ctx: &Context) -> BoxFuture<'_, Result<ResultReference>>;

    /// Discards everything written (e.g. aborts a multipart upload). Consumes the writer.
    /// The default drops it. Errors are ignored by the engine.
    fn abort(self: Box<Self>, ctx: &Context) -> BoxFuture<'_, ()> {
        let _ = ctx;
        Box::pin(async move { drop(self) })
    }
}

/// An accelerator for schema discovery, keyed by (tenant, config name). Optional.
/// Read errors count as a miss; write errors are ignored. The engine refuses a snapshot
/// older than its schema TTL by the snapshot's capture time, whatever the adapter keeps;
/// an adapter may expire entries earlier (DynamoDB's TTL).
pub trait SchemaCache: Send + Sync {
    fn get<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SchemaSnapshot>>>;

    /// Keyed by `snapshot.config_name`.
    fn put<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        snapshot: &'a SchemaSnapshot,
    ) -> BoxFuture<'a, Result<()>>;
}

/// Answers "does this connection have active executions?" (tenant-scoped, by config
/// name). Optional; absent means no conflict gating.
pub trait ActiveExecutionChecker: Send + Sync {
    fn has_active_executions<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// One span per public operation, and inside an extraction one per step and per table
/// read. Optional; absent means no spans.
///
/// Nesting follows the engine's work: the engine [enters](Span::enter) a span around
/// every poll of what it covers, so a span started meanwhile (by the engine or by a port
/// the operation calls) is its child; a step's span covers the step's task, so its
/// tables' spans are children of it across the task boundary.
pub trait Observability: Send + Sync {
    /// Called when `operation` (e.g. `engine.connection.create`) starts.
    fn start_span(&self, operation: &'static str) -> Box<dyn Span>;

    /// [`start_span`](Self::start_span) for an operation about one datasource or table of
    /// an extraction (`engine.step`, `engine.table.read`). Provided: the subject is
    /// dropped.
    fn start_span_about(&self, operation: &'static str, about: SpanSubject<'_>) -> Box<dyn Span> {
        let _ = about;
        self.start_span(operation)
    }
}

/// What a span is about: names only (never a value, a credential or a DSN).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanSubject<'a> {
    /// The datasource's config name.
    pub config: Option<&'a str>,
    /// The table (or collection).
    pub table: Option<&'a str>,
}

/// A guard that keeps a span entered until it is dropped ([`Span::enter`]); it is held
/// only within one poll, so it need not be `Send`.
pub trait Entered {}

impl<T> Entered for T {}

/// An open span; `end` is called exactly once with the operation's outcome.
pub trait Span: Send {
    fn end(self: Box<Self>, error: Option<&EngineError>);

    /// Makes this span the current one until the guard is dropped. Provided: nothing.
    fn enter(&self) -> Box<dyn Entered + '_> {
        Box::new(())
    }
}
