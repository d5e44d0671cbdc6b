//! The engine ports: [`SqlRegistry`] → [`SqlConnectorFactory`] → [`SqlConnector`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::ports::{Connector, ConnectorFactory, ConnectorRegistry, RowCursor};
use fetcher_engine::{
    BoxFuture, ConnectionDescriptor, Context, DatasourceType, PlanStep, Result, SchemaSnapshot,
    Secret, TenantContext,
};
use sqlx::Connection as _;

use crate::catalog::Catalog;
use crate::error;
use crate::host::HostPolicy;
use crate::partition::{self, ReadPartitions};
use crate::query::{self, ChannelCursor};
#[cfg(feature = "sqlite")]
use crate::sqlite;
use crate::{Dialect, mysql, pg};
use fetcher_connect::bound::{bounded, connect_timed_out, discover_timed_out};

pub use fetcher_connect::credentials::{CredentialSource, StaticCredentials};

/// Bounds every connect attempt (the context's deadline applies too).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Bounds a whole schema discovery (docs/datasources.md, "Connecting").
pub const DISCOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// Builds connectors of one type.
#[derive(Clone)]
pub struct SqlConnectorFactory {
    dialect: Dialect,
    credentials: Arc<dyn CredentialSource>,
    policy: HostPolicy,
    copy_fast_path: bool,
    partitions: ReadPartitions,
    session: Option<SessionLimits>,
}

/// Bounds on the waits a database controls, set on every session a connector opens
/// (docs/operations.md, "Fair workers"): a statement that runs, or a lock it waits for,
/// past them is cut off by the server (an outage of that run: retried with back-off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// PostgreSQL `statement_timeout`; MariaDB `max_statement_time` (MySQL:
    /// `max_execution_time`).
    pub statement: Duration,
    /// PostgreSQL `lock_timeout`; MySQL/MariaDB `lock_wait_timeout`.
    pub lock: Duration,
}

impl SessionLimits {
    /// The limits for a run bounded by `extraction_timeout`: statements end a quarter of
    /// it (at most 30 s) before it, after the point where a long job's segment stops on
    /// its own; lock waits end after 30 s, or with the statement bound when lower. `None`
    /// for an unbounded run.
    pub fn below(extraction_timeout: Duration) -> Option<SessionLimits> {
        if extraction_timeout.is_zero() {
            return None;
        }
        let statement = extraction_timeout - (extraction_timeout / 4).min(Duration::from_secs(30));
        let statement = statement.max(Duration::from_secs(1));
        Some(SessionLimits {
            statement,
            lock: statement.min(Duration::from_secs(30)),
        })
    }
}

impl SqlConnectorFactory {
    pub fn new(
        dialect: Dialect,
        credentials: Arc<dyn CredentialSource>,
        policy: HostPolicy,
    ) -> Self {
        SqlConnectorFactory {
            dialect,
            credentials,
            policy,
            copy_fast_path: true,
            partitions: ReadPartitions::default(),
            session: None,
        }
    }

    /// Sets `limits` on every session this factory's connectors open.
    pub fn with_session_limits(mut self, limits: Option<SessionLimits>) -> Self {
        self.session = limits;
        self
    }

    /// PostgreSQL only: read each step over `connections` connections in one exported
    /// snapshot, big tables split on their integer key (docs/datasources.md, "Partitioned
    /// reads"); `1` (the default) reads in one stream. The bytes are the same either way.
    pub fn with_read_partitions(mut self, connections: usize) -> Self {
        self.partitions.connections = connections.max(1);
        self
    }

    /// Rows per key-range chunk of a partitioned read (small in tests, to get many
    /// chunks from a small table).
    #[doc(hidden)]
    pub fn with_chunk_rows(mut self, rows: i64) -> Self {
        self.partitions.chunk_rows = rows.max(1);
        self
    }

    /// PostgreSQL only: turns the unfiltered `COPY` fast path off (every table then uses
    /// the bound-parameter query path). For tests and comparisons.
    pub fn with_copy_fast_path(mut self, on: bool) -> Self {
        self.copy_fast_path = on;
        self
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Builds the connector directly (the trait method boxes it).
    pub async fn build_connector(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        d: &ConnectionDescriptor,
    ) -> Result<SqlConnector> {
        // Host safety before any credential is revealed (docs/datasources.md, "Connecting").
        let password = fetcher_connect::credentials::reveal_checked(
            ctx,
            tenant,
            d,
            self.dialect.datasource_type(),
            &self.policy,
            self.credentials.as_ref(),
        )
        .await?;
        Ok(SqlConnector {
            dialect: self.dialect,
            descriptor: d.clone(),
            password,
            policy: self.policy.clone(),
            copy_fast_path: self.copy_fast_path,
            partitions: self.partitions,
            session: self.session,
            pg_options: None,
            conn: None,
            catalog: None,
        })
    }
}

impl ConnectorFactory for SqlConnectorFactory {
    fn build<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Option<Box<dyn Connector>>>> {
        Box::pin(async move {
            let c = self.build_connector(ctx, tenant, descriptor).await?;
            Ok(Some(Box::new(c) as Box<dyn Connector>))
        })
    }
}

/// Registers `POSTGRESQL`, `MYSQL` and `SQLITE`.
pub struct SqlRegistry {
    factories: BTreeMap<DatasourceType, Arc<SqlConnectorFactory>>,
}

impl SqlRegistry {
    /// PostgreSQL, MySQL/MariaDB and SQLite.
    pub fn new(credentials: Arc<dyn CredentialSource>, policy: HostPolicy) -> Self {
        Self::with_dialects(
            &[Dialect::Postgres, Dialect::MySql, Dialect::Sqlite],
            credentials,
            policy,
        )
    }

    /// The network databases only (PostgreSQL, MySQL/MariaDB): for hosts where a SQLite
    /// file cannot work, such as Lambda (the API and extract functions share no disk, and
    /// a path would name the function's own filesystem). `SQLITE` then gets the engine's
    /// `no connector registered` error, like any other unsupported type.
    pub fn servers_only(credentials: Arc<dyn CredentialSource>, policy: HostPolicy) -> Self {
        Self::with_dialects(&[Dialect::Postgres, Dialect::MySql], credentials, policy)
    }

    fn with_dialects(
        dialects: &[Dialect],
        credentials: Arc<dyn CredentialSource>,
        policy: HostPolicy,
    ) -> Self {
        let factories = dialects
            .iter()
            .copied()
            .map(|d| {
                (
                    d.datasource_type(),
                    Arc::new(SqlConnectorFactory::new(
                        d,
                        credentials.clone(),
                        policy.clone(),
                    )),
                )
            })
            .collect();
        SqlRegistry { factories }
    }

    /// Every factory with [`SqlConnectorFactory::with_read_partitions`].
    pub fn with_read_partitions(self, connections: usize) -> Self {
        let factories = self
            .factories
            .into_iter()
            .map(|(k, f)| (k, Arc::new((*f).clone().with_read_partitions(connections))))
            .collect();
        SqlRegistry { factories }
    }

    /// Every factory with [`SqlConnectorFactory::with_session_limits`].
    pub fn with_session_limits(self, limits: Option<SessionLimits>) -> Self {
        let factories = self
            .factories
            .into_iter()
            .map(|(k, f)| (k, Arc::new((*f).clone().with_session_limits(limits))))
            .collect();
        SqlRegistry { factories }
    }

    pub fn factory(&self, datasource_type: DatasourceType) -> Option<Arc<SqlConnectorFactory>> {
        self.factories.get(&datasource_type).cloned()
    }
}

impl ConnectorRegistry for SqlRegistry {
    fn connector(&self, datasource_type: DatasourceType) -> Option<Arc<dyn ConnectorFactory>> {
        self.factory(datasource_type)
            .map(|f| f as Arc<dyn ConnectorFactory>)
    }
}

enum Conn {
    Pg(sqlx::PgConnection),
    My(sqlx::MySqlConnection),
    #[cfg(feature = "sqlite")]
    Lite(sqlx::SqliteConnection),
}

impl Conn {
    async fn close(self) {
        let _ = match self {
            Conn::Pg(c) => c.close().await,
            Conn::My(c) => c.close().await,
            #[cfg(feature = "sqlite")]
            Conn::Lite(c) => c.close().await,
        };
    }

    async fn ping(&mut self) -> std::result::Result<(), sqlx::Error> {
        match self {
            Conn::Pg(c) => c.ping().await,
            Conn::My(c) => c.ping().await,
            #[cfg(feature = "sqlite")]
            Conn::Lite(c) => c.ping().await,
        }
    }
}

/// One live connection for one operation; connects lazily.
pub struct SqlConnector {
    dialect: Dialect,
    descriptor: ConnectionDescriptor,
    password: Secret,
    policy: HostPolicy,
    copy_fast_path: bool,
    partitions: ReadPartitions,
    session: Option<SessionLimits>,
    /// PostgreSQL: the options the connection was made with (the resolved, checked
    /// address), for a partitioned read's further connections.
    pg_options: Option<sqlx::postgres::PgConnectOptions>,
    conn: Option<Conn>,
    catalog: Option<Catalog>,
}

impl std::fmt::Debug for SqlConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConnector")
            .field("type", &self.dialect.datasource_type())
            .field("config", &self.descriptor.config_name)
            .field("connected", &self.conn.is_some())
            .finish()
    }
}

impl SqlConnector {
    async fn connect(&mut self, ctx: &Context) -> Result<&mut Conn> {
        if self.conn.is_none() {
            let d = &self.descriptor;
            let password = self.password.expose_str().unwrap_or_default();
            let conn = match self.dialect {
                #[cfg(not(feature = "sqlite"))]
                Dialect::Sqlite => {
                    // Built without SQLite (the Lambdas): as if no file were allowed.
                    self.policy.sqlite_path(d)?;
                    return Err(error::forbidden_host());
                }
                #[cfg(feature = "sqlite")]
                Dialect::Sqlite => {
                    let o = sqlite::options(&self.policy.sqlite_path(d)?);
                    let fut = async { sqlite::connect(&o).await.map_err(error::connect_failed) };
                    Conn::Lite(bounded(ctx, CONNECT_TIMEOUT, fut, connect_timed_out).await?)
                }
                Dialect::Postgres => {
                    let target = self.policy.target(ctx, d).await?;
                    let o = pg::options(d, &target, password, self.session)?;
                    let fut = async { pg::connect(&o).await.map_err(error::connect_failed) };
                    let c = bounded(ctx, CONNECT_TIMEOUT, fut, connect_timed_out).await?;
                    self.pg_options = Some(o);
                    Conn::Pg(c)
                }
                Dialect::MySql => {
                    let target = self.policy.target(ctx, d).await?;
                    let o = mysql::options(d, &target, password)?;
                    let session = self.session;
                    let fut = async {
                        let mut c = mysql::connect(&o).await.map_err(error::connect_failed)?;
                        mysql::limit_session(&mut c, session).await;
                        Ok(c)
                    };
                    Conn::My(bounded(ctx, CONNECT_TIMEOUT, fut, connect_timed_out).await?)
                }
            };
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    async fn load_catalog(&mut self, ctx: &Context) -> Result<()> {
        if self.catalog.is_some() {
            return Ok(());
        }
        let conn = self.connect(ctx).await?;
        let fut = async {
            match conn {
                Conn::Pg(c) => pg::discover(c).await,
                Conn::My(c) => mysql::discover(c).await,
                #[cfg(feature = "sqlite")]
                Conn::Lite(c) => sqlite::discover(c).await,
            }
        };
        let catalog = bounded(ctx, DISCOVER_TIMEOUT, fut, discover_timed_out).await?;
        self.catalog = Some(catalog);
        Ok(())
    }

    /// Whether the live session is encrypted (connects if needed): PostgreSQL
    /// `pg_stat_ssl.ssl` of this backend, MySQL a non-empty `Ssl_cipher`, SQLite `false`.
    /// A diagnostic for operators and the TLS tests.
    pub async fn tls_in_use(&mut self, ctx: &Context) -> Result<bool> {
        let conn = self.connect(ctx).await?;
        let fut = async {
            match conn {
                Conn::Pg(c) => sqlx::query_scalar::<_, bool>(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                )
                .fetch_one(c)
                .await
                .map_err(error::query_failed),
                Conn::My(c) => {
                    sqlx::query_as::<_, (String, String)>("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                        .fetch_optional(c)
                        .await
                        .map(|r| r.is_some_and(|(_, v)| !v.is_empty()))
                        .map_err(error::query_failed)
                }
                #[cfg(feature = "sqlite")]
                Conn::Lite(_) => Ok(false),
            }
        };
        bounded(ctx, CONNECT_TIMEOUT, fut, connect_timed_out).await
    }

    /// The catalog discovered by this connector, if any (column types included).
    pub fn catalog(&self) -> Option<&Catalog> {
        self.catalog.as_ref()
    }

    /// Plans the step without running it (validation only). Connects and discovers.
    pub async fn plan(&mut self, ctx: &Context, step: &PlanStep) -> Result<Vec<query::TablePlan>> {
        self.load_catalog(ctx).await?;
        query::plan(
            self.dialect,
            self.catalog.as_ref().expect("loaded"),
            step,
            self.copy_fast_path,
        )
    }
}

impl Connector for SqlConnector {
    fn test_connection<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let conn = self.connect(ctx).await?;
            let pinged = bounded(
                ctx,
                CONNECT_TIMEOUT,
                async { conn.ping().await.map_err(error::connect_failed) },
                connect_timed_out,
            )
            .await;
            if pinged.is_err()
                && let Some(c) = self.conn.take()
            {
                c.close().await;
            }
            pinged
        })
    }

    fn discover_schema<'a>(
        &'a mut self,
        ctx: &'a Context,
    ) -> BoxFuture<'a, Result<SchemaSnapshot>> {
        Box::pin(async move {
            self.load_catalog(ctx).await?;
            Ok(self
                .catalog
                .as_ref()
                .expect("loaded")
                .snapshot(self.dialect, &self.descriptor.config_name))
        })
    }

    fn query_stream<'a>(
        &'a mut self,
        ctx: &'a Context,
        step: &'a PlanStep,
    ) -> BoxFuture<'a, Result<Box<dyn RowCursor + 'a>>> {
        Box::pin(async move {
            let plans = self.plan(ctx, step).await?;
            let conn = self.conn.take().expect("connected by plan");
            let partitions = self.partitions;
            let cursor = match (conn, self.pg_options.clone()) {
                // A log read's snapshot is a transaction of its own: not inside an exported one.
                (Conn::Pg(c), Some(o))
                    if partitions.connections > 1 && plans.iter().all(|p| p.log.is_none()) =>
                {
                    ChannelCursor::spawn(move |tx| partition::produce(c, o, plans, partitions, tx))
                }
                (Conn::Pg(c), _) => ChannelCursor::spawn(move |tx| pg::produce(c, plans, tx)),
                (Conn::My(c), _) => ChannelCursor::spawn(move |tx| mysql::produce(c, plans, tx)),
                #[cfg(feature = "sqlite")]
                (Conn::Lite(c), _) => {
                    // The rows are read with a connection of the reader's own; the path is
                    // the one the host policy resolved for this connection.
                    let path = self.policy.sqlite_path(&self.descriptor)?;
                    drop(c);
                    ChannelCursor::spawn(move |tx| sqlite::produce(path, plans, tx))
                }
            };
            Ok(Box::new(cursor) as Box<dyn RowCursor + 'a>)
        })
    }

    /// `min`, `max` of the integer leading key and the catalog's row estimate
    /// (`reltuples`, `information_schema.tables.table_rows`; the key's width when the
    /// table was never analysed), found with two small queries on the table alone (no
    /// full discovery: every job's planner asks). SQLite tables are not fanned out.
    fn key_span<'a>(
        &'a mut self,
        ctx: &'a Context,
        _step: &'a PlanStep,
        table: &'a str,
    ) -> BoxFuture<'a, Result<Option<fetcher_engine::KeySpan>>> {
        Box::pin(async move {
            let conn = self.connect(ctx).await?;
            let fut = async {
                match conn {
                    Conn::Pg(c) => crate::pg::key_span(c, table).await,
                    Conn::My(c) => crate::mysql::key_span(c, table).await,
                    #[cfg(feature = "sqlite")]
                    Conn::Lite(_) => Ok(None),
                }
            };
            bounded(ctx, DISCOVER_TIMEOUT, fut, discover_timed_out).await
        })
    }

    /// PostgreSQL: drops the slot and the publication ([`crate::pglog::drop_log`]),
    /// bounded like a discovery. Other dialects keep nothing.
    fn release_log<'a>(
        &'a mut self,
        ctx: &'a Context,
        slot: &'a fetcher_engine::LogSlot,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if self.dialect != Dialect::Postgres {
                return Ok(());
            }
            let Conn::Pg(conn) = self.connect(ctx).await? else {
                return Ok(());
            };
            let fut = crate::pglog::drop_log(conn, slot);
            bounded(ctx, DISCOVER_TIMEOUT, fut, discover_timed_out).await
        })
    }

    fn close<'a>(&'a mut self, _ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if let Some(c) = self.conn.take() {
                c.close().await;
            }
            Ok(())
        })
    }
}
