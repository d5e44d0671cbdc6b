//! [`JobError`]: why a job could not be created, read or canceled, one variant per answer
//! of the HTTP catalogue (docs/api.md, "Errors").

use fetcher_engine::EngineError;

use crate::error::ServiceError;
use crate::model::{JobId, JobStatus};

/// Why a job could not be created or read. The HTTP layer maps each to the catalogue.
#[derive(Debug)]
pub enum JobError {
    /// `dataRequest.mappedFields` missing (400 `FET-0402`, shape B).
    MappedFieldsRequired,
    /// 400 `FET-0401` `Invalid Data Request`.
    InvalidDataRequest(String),
    /// 400 `FET-0402`: (title, message) for `metadata` / `metadata.source`.
    Metadata(&'static str, &'static str),
    /// 400 `FET-0401` `Invalid Filter References`.
    FilterReferences(String),
    /// 400 `FET-1020` `No Connections Found`, with the config names of the product's
    /// connections (at most 20), so the caller sees what the keys may be.
    NoConnections(Vec<String>),
    /// 400 `FET-1020` `Missing Data Source`, likewise.
    MissingDataSource(String, Vec<String>),
    /// 400 `FET-1014`.
    NotAssigned(String),
    /// 400 `FET-1016`. `owner` is the connection's product where the caller may be told
    /// it: when it names no product (it sees every product's records then), or when it
    /// differs from `source` only in case (the caller wrote it).
    ProductMismatch {
        config_name: String,
        source: String,
        owner: Option<String>,
    },
    /// 400 `FET-0414`.
    ForbiddenHost,
    /// 422 `FET-0421`: a connection of a type this host stores but cannot read, with the
    /// types it reads.
    TypeNotReadable {
        config_name: String,
        datasource_type: fetcher_engine::DatasourceType,
        readable: Vec<fetcher_engine::DatasourceType>,
    },
    /// 400 `FET-1040`, with why when the connector said (the engine's fixed text of a
    /// connect reason: a refused login, an unknown database, …).
    ConnectionDown(String, Option<String>),
    /// A cancel of a job that already ended (`completed`, `failed`, `canceled`): 409.
    Finished(JobStatus),
    /// A connection-store failure while resolving (mapped like every connection-store error).
    ConnectionStore(EngineError),
    /// Any job-store failure: 500 `FET-0002`.
    JobStore(ServiceError),
    /// The message could not be enqueued; the job is marked failed. 500 `FET-0002`.
    Publish(ServiceError),
    /// The mapping names tables or fields the datasource's schema lacks:
    /// `(datasource, table, field)`. 422 `FET-1060`, validate-schema's body.
    SchemaInvalid(Vec<(String, String, Option<String>)>),
    /// The connection tests did not finish within the budget. 504.
    Timeout,
    /// The request, encoded, is this many bytes: over [`MAX_JOB_REQUEST_BYTES`]. 413.
    TooLarge(usize),
    /// The host is shutting down and takes no new jobs; nothing was stored. 503
    /// `Service Unavailable`.
    ShuttingDown,
    /// 404 `FET-1001` (job).
    NotFound,
    /// An incremental read the request or the schema refutes: 400 `FET-0401` `Invalid
    /// Incremental Read`, the text naming the table and column.
    InvalidIncremental(String),
    /// The sync's stored watermark is on other columns than the job names: 409 `FET-1025`.
    SyncMismatch(String),
    /// Another job of the sync is pending or processing (a second job of a sync never
    /// runs beside it): 409 `FET-1024`, naming that job.
    SyncBusy { sync_id: String, job_id: JobId },
    /// The tenant has its maximum number of jobs waiting for a worker: 429 `FET-1027`,
    /// nothing stored (docs/operations.md, "Fair workers").
    TooManyWaiting,
    /// Over one of the engine's per-table limits (tables per datasource, fields or
    /// filtered fields per table): 400 `FET-1061`, as validate-schema answers it.
    ValidationLimit(String),
    /// The sync belongs to another product of the tenant: 409 `FET-1026` (a product's
    /// jobs never move another product's watermarks, nor wait on its jobs).
    SyncOfAnotherProduct(String),
    /// `metadata.source` is not the product the caller named: 400 `FET-1016`.
    SourceNotNamedProduct { source: String, product: String },
    /// A sync's deletion could not drop the replication slots of its log reads on
    /// `config_name` (the connection is gone, or did not answer): 409 `FET-1028`, naming
    /// the slots still held (those of `config_name` first) and why (the engine's fixed
    /// text). Nothing of the sync was deleted.
    LogNotReleased {
        config_name: String,
        slots: Vec<fetcher_engine::LogSlot>,
        why: String,
    },
}
