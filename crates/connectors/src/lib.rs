//! # fetcher-connectors
//!
//! The engine's connector ports for PostgreSQL (`POSTGRESQL`), MySQL/MariaDB (`MYSQL`) and
//! SQLite (`SQLITE`, the embedded demo source), on sqlx with rustls. Described in
//! `docs/datasources.md`; deviations from the reference are listed at the end.
//!
//! ## Module map
//!
//! | module | what it holds |
//! |---|---|
//! | [`connector`] | [`SqlRegistry`], [`SqlConnectorFactory`], [`SqlConnector`], the [`CredentialSource`] trait, [`StaticCredentials`] |
//! | [`catalog`] | discovered tables/columns/primary keys with type classes; naming and normalisation; system-object exclusion (docs/datasources.md) |
//! | [`query`] | request → validated, ordered `SELECT` per table; the channel cursor fed by a producer task |
//! | [`filter`] | filter conditions (docs/filters.md) → SQL with bound, catalog-typed parameters |
//! | [`pgbin`] | PostgreSQL binary format decoding (query rows and `COPY … (FORMAT binary)`) |
//! | [`pglog`] | PostgreSQL log reads: a sync's slot and publication, its first snapshot, bounded change reads in commit order (`pgoutput`, [`pglog::pgoutput`]), the slot's advance after a completed job |
//! | `stream` | what every dialect's producer shares: tables in plan order over one connection, rows cut into batches |
//! | `pg`, `mysql`, `sqlite` | per-dialect connect options, catalog queries, how a table's rows are read and decoded |
//! | `partition` | PostgreSQL partitioned reads: several connections in one exported snapshot, key-range chunks merged back into the single stream ([`ReadPartitions`]) |
//! | `values`, `host`, `cloud_services` | re-exported from `fetcher-connect`, the driver-free crate every connector family shares (lossless value helpers; host safety) |
//! | [`ssl`] | TLS mode parsing per type ([`validate_ssl_mode`]) and the sqlx mapping |
//! | [`env`] | internal datasources from `DATASOURCE_{NAME}_*` pairs ([`parse_env`]) |
//! | [`error`] | fixed messages, typed hidden causes (no API codes: those are the hosts') |
//!
//! ## Lifecycle
//!
//! `build` checks the type, the TLS mode and the no-network host rules, then asks the
//! [`CredentialSource`] for the password; it does no network I/O. `test_connection`
//! connects (lazily, single `PgConnection`/`MySqlConnection`/`SqliteConnection`, no pool)
//! and pings; `discover_schema` connects lazily and reads the catalog (30 s bound);
//! `query_stream` validates the whole plan step against the catalog **before** streaming,
//! then hands the connection to a producer task that streams tables in ascending name
//! order, rows in batches of 1024 ([`query::BATCH_ROWS`]) through a small channel (bounded
//! memory; decoding overlaps the engine's encoding). The cursor owns that connection;
//! `close` is idempotent. Every connect is bounded by 15 s and the context's deadline.
//!
//! Extraction request semantics: `mappedFields[config][table] = []` (an **empty field
//! list**) selects **all columns** in catalog order. Tables may be requested by their
//! snapshot key or a qualified spelling (`public.users`, `db.public.users`); batches are
//! labelled with the name as requested. Filters: see [`filter`].
//!
//! ## Ordering
//!
//! `ORDER BY` the primary key (in key order); without one, by the selected columns
//! (PostgreSQL `json`/arrays/text-cast types by their text form). Tables in ascending name
//! order. The same data gives byte-identical NDJSON (tested on all three databases).
//! Caveat: MySQL sorts long TEXT/BLOB values by a `max_sort_length` prefix, so a table with
//! no primary key whose rows differ only after that prefix may vary in order.
//!
//! ## PostgreSQL COPY fast path
//!
//! Unfiltered tables are read with `COPY (SELECT … ORDER BY …) TO STDOUT (FORMAT binary)`
//! and decoded straight into values; filtered tables use a bound-parameter query. COPY
//! cannot take parameters, and rendering tenant-supplied literals into SQL is the one thing
//! this crate never does, so filters fall back to the streaming query. Both paths share the
//! binary decoder ([`pgbin::decode`]) and are tested to give identical bytes.
//!
//! ## PostgreSQL partitioned reads
//!
//! With [`SqlConnectorFactory::with_read_partitions`] above 1, a step reads PostgreSQL over
//! that many connections inside one exported snapshot (`pg_export_snapshot()`), each table
//! with an integer leading primary key in key-range chunks merged back in order: the same
//! rows, order and batches as one stream, so the same bytes (tested). See `partition` and
//! docs/datasources.md, "Partitioned reads". MySQL/MariaDB cannot share a snapshot between
//! connections, so they always read in one stream.
//!
//! ## Error policy
//!
//! Every error is an [`fetcher_engine::EngineError`] with a fixed message ([`error::msg`]).
//! Driver errors are kept only as the hidden cause (`EngineError::wrap`); messages never
//! carry driver text, DSNs, passwords, hosts or row values, and nothing is logged.
//! Connect failures (also wrong passwords, TLS refusals, DNS failures) are `connect` /
//! `failed to connect to datasource` (DNS: `datasource host could not be resolved`, reason
//! `HostNotResolved`, or `failed to resolve datasource host` when the resolver does not answer), also from
//! `discover_schema`. Bad requests (unknown table/column, bad filter) are `validation`.
//! Host-safety rejections are `validation` / `host is not a valid external database
//! endpoint` (reason `ForbiddenHost`, cause [`ForbiddenHost`]); invalid TLS modes
//! `validation` / `the TLS mode is not one of the connection type's` (reason
//! `InvalidTlsMode`, cause [`InvalidSslMode`] with the mode as given). The codes a host
//! answers them with (`FET-0414`, `FET-0413`) are the host's. Query failures are
//! `unavailable` / `failed to query datasource`; undecodable values `internal`.
//!
//! ## Value encodings
//!
//! How each source type becomes a JSON value, and where that differs from the reference
//! on purpose, is the table in `docs/encodings.md` (kept with the tests that pin it:
//! `tests/encodings.rs`, the fixtures in `tests/postgres.rs` and `tests/mysql_sqlite.rs`).
//!
//! ## TLS
//!
//! See [`ssl`] for the full mode table. PostgreSQL: `disable` and the default are plain;
//! `allow` is plain (sqlx never upgrades); `prefer` encrypts when offered; `require`
//! encrypts without verification, or verifies the chain when a tenant CA is given (libpq
//! rule); `verify-ca` verifies the chain; `verify-full` chain and host name. The tenant CA
//! is PEM in the descriptor's typed TLS material (`tls.root_cert`); without it the
//! bundled Mozilla roots are used. MySQL: `false`/`""` Disabled, `true` VerifyIdentity,
//! `skip-verify` Required, `preferred` Preferred. Known gap: with sqlx 0.8.6 and rustls
//! 0.23.4x, `verify-ca` also checks the host name (sqlx's no-hostname verifier only
//! tolerates rustls' old `NotValidForName` error), so it fails closed on a name mismatch.
//!
//! ## Host safety (SSRF; docs/datasources.md)
//!
//! Active when the policy is [`HostPolicy::multi_tenant`] and the connection is external
//! (non-empty key version); internal datasources and [`HostPolicy::single_tenant`] are
//! exempt. An empty password is **not** an exemption. Layer 1 ([`validate_host_input`]) is
//! for the API. Layer 2 runs in `build` (names and literals, before the credential is
//! revealed) and again before every dial:
//! * blocked names (lower-cased, trailing dots removed): empty, `localhost`,
//!   `metadata.google.internal`, `metadata.gcp.internal`, `metadata.azure.internal`,
//!   `169.254.169.254`, and suffixes `.local` (includes `.cluster.local`), `.internal`,
//!   `.localhost`;
//! * IPv4: `0/8`, `10/8`, `100.64/10`, `127/8`, `169.254/16`, `172.16/12`, `192.0.0/24`,
//!   `192.0.2/24`, `192.168/16`, `198.18/15`, `198.51.100/24`, `203.0.113/24`, `224/4`,
//!   `240/4`, `255.255.255.255`;
//! * IPv6: mapped `::ffff:a.b.c.d` checked as IPv4; `::/96` (IPv4-compatible, `::`, `::1`)
//!   blocked; NAT64 `64:ff9b::/96` and 6to4 `2002::/16` checked by their embedded IPv4;
//!   `fc00::/7`, `fe80::/10`, `fec0::/10`, `ff00::/8`, `2001:db8::/32`, `100::/64`, Teredo
//!   `2001::/32`, `64:ff9b:1::/48` blocked;
//! * non-canonical numeric hosts (decimal `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`,
//!   short `127.1`), brackets, zone ids, ports or user-info in the host: rejected outright;
//! * other names are resolved **once**; any blocked answer rejects; a DNS failure is an
//!   error (`connect`, not a pass); the connector then dials the first checked address.
//!   sqlx cannot separate the TCP address from the TLS server name, so with a pinned
//!   address TLS SNI/verification use the IP: `verify-full` on a pinned host requires an
//!   IP SAN in the server certificate (`verify-ca`/`require` are unaffected apart from the
//!   gap above). The pin is kept anyway: it is what closes the rebinding window.
//! * `SQLITE` connections are rejected for external (tenant) connections: tenants may not
//!   name server files.
//!
//! ## Differences from the reference
//!
//! * Identifiers are **quoted** (`"x"`, `` `x` ``); mixed case and reserved words work;
//!   PostgreSQL tables are schema-qualified explicitly.
//! * **Ordered** output (above) and **streaming** in batches; the reference issued no
//!   `ORDER BY` and materialised whole tables.
//! * **Filters are never dropped**: unknown operators and non-array value lists do not
//!   decode (`fetcher_engine::Condition`); empty value lists, empty conditions, unknown columns and wrongly typed values are `validation` errors (the
//!   reference ignored several of these, widening jobs). Values are typed from the catalog;
//!   the "name contains id → UUID" and date-name heuristics are gone. The end-of-day rule
//!   for `between` applies by column type (timestamp columns with a bare-date end), exactly
//!   (`< next midnight`), not by column name with `.999Z`. `like` needs exactly one string
//!   on a text column. `eq`/`in` with `null` match NULLs (`IS NULL`), `ne`/`nin` with `null`
//!   exclude them.
//! * Values: text never becomes Base64 (MySQL text/decimals/dates), JSON scalars embed,
//!   timestamps are UTC with microseconds regardless of the process time zone, special
//!   values are tagged strings instead of failing the job.
//! * Discovery lists every non-system schema the user can read (the port has no scope
//!   argument), with `public` tables bare and others `schema.table`.
//! * TLS modes are **applied**, and a tenant CA (`tls.root_cert`) is honoured; the reference
//!   validated modes but never used CA material.
//! * Host safety: DNS failures fail (the reference allowed them), the dialled address is
//!   the checked one (rebinding closed), non-canonical numeric hosts and IPv6 forms that
//!   embed private IPv4 addresses are blocked.
//! * Env datasources: duplicates resolved in ascending `{NAME}` order (deterministic);
//!   `_SSL_CA` is used; a registry entry `demo_sqlite` and type `SQLITE` (no host) exist.
//! * Connection test latency is measured by the engine (`ConnectionTestResult.latency`).

pub mod catalog;
pub mod connector;
pub mod env;
pub mod error;
pub mod filter;
pub mod incremental;
mod mysql;
mod partition;
mod pg;
pub mod pgbin;
pub mod pglog;
pub mod query;
#[cfg(feature = "sqlite")]
mod sqlite;
pub mod ssl;
mod stream;

// The parts every connector family shares live in `fetcher-connect` (no sqlx); kept at
// their old paths here so callers need not change.
pub use fetcher_connect::{cloud_services, host, tls_provider, values};

pub use connector::{
    CONNECT_TIMEOUT, CredentialSource, DISCOVER_TIMEOUT, SessionLimits, SqlConnector,
    SqlConnectorFactory, SqlRegistry, StaticCredentials,
};
pub use env::{EnvLoad, InternalDatasource, parse_env};
pub use fetcher_connect::{ForbiddenHost, InvalidSslMode, is_forbidden_host};
pub use host::{
    DialTarget, HostPolicy, PrivateNetworks, Resolver, SqliteFiles, SqliteRoot, SystemResolver,
    is_blocked_hostname, is_blocked_ip, validate_host_input, validate_host_input_admitting,
};
pub use partition::ReadPartitions;
pub use ssl::validate_ssl_mode;

use fetcher_engine::DatasourceType;

/// The SQL dialects this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    Postgres,
    MySql,
    Sqlite,
}

impl Dialect {
    /// The datasource type the dialect serves.
    pub fn datasource_type(self) -> DatasourceType {
        match self {
            Dialect::Postgres => DatasourceType::Postgresql,
            Dialect::MySql => DatasourceType::Mysql,
            Dialect::Sqlite => DatasourceType::Sqlite,
        }
    }

    /// The dialect of a type; `None` for the types this crate has no connector for.
    pub fn from_type(t: DatasourceType) -> Option<Dialect> {
        match t {
            DatasourceType::Postgresql => Some(Dialect::Postgres),
            DatasourceType::Mysql => Some(Dialect::MySql),
            DatasourceType::Sqlite => Some(Dialect::Sqlite),
            DatasourceType::Oracle | DatasourceType::SqlServer | DatasourceType::MongoDb => None,
        }
    }
}
