//! The value types of the engine's contract: what crosses every boundary, typed once and
//! passed as such (JSON names camelCase). Plain data with their serde shapes and the small
//! rules that belong to them; no I/O. The crate root re-exports all of it.
//!
//! | module | what it holds |
//! |---|---|
//! | [`connection`] | connection input (with its secret), descriptor, protected credential, patch, list and page, test result |
//! | [`datasource`] | the closed vocabularies of a connection: datasource type, TLS mode |
//! | [`catalog`] | discovered tables and fields, table-name normalisation, schema validation requests and reports |
//! | [`extraction`] | the extraction request, its plan and steps, the execution mode, the recorded state of a run |
//! | [`incremental`] | incremental reads: the spec (cursor, key, lookback), the watermark, a read after one |
//! | [`result`] | the direct document, the stored reference, integrity, protection (`appliedBy`), parts |
//! | [`segment`] | segmented runs: the point a stopped run resumes from, what a run may do, what a stopped one leaves |
//! | [`filter`] | filter conditions and operators |
//! | [`value`] | cells, rows, shared columns, batches |
//! | [`options`] | the options a datasource type takes from a connection's metadata, typed (MongoDB's `authSource`, `directConnection`) |
//! | [`limits`] | resource limits and per-request overrides |
//! | [`tenant`] | the tenant context, the isolation boundary |
//! | [`time`] | RFC 3339 UTC timestamps |
//! | [`secret`] | secret holders, redacted and wiped |
//! | [`progress`] | live counters of a running extraction |

pub mod catalog;
pub mod connection;
pub mod datasource;
pub mod extraction;
pub mod filter;
pub mod incremental;
pub mod limits;
pub mod options;
pub mod progress;
pub mod result;
pub mod secret;
pub mod segment;
pub mod tenant;
pub mod time;
pub mod value;

pub use catalog::*;
pub use connection::*;
pub use datasource::*;
pub use extraction::*;
pub use incremental::*;
pub use options::*;
pub use result::*;
pub use segment::*;
