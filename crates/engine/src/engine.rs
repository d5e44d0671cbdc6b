//! Construction and the connection lifecycle operations (docs/engine.md, "Construction",
//! "Connections").

use std::sync::Arc;
use std::time::Instant;

use crate::context::Context;
use crate::error::{Category, EngineError, Result, msg};
use crate::limits::Limits;
use crate::model::*;
use crate::ports::*;
use crate::tenant::TenantContext;

/// Builds an [`Engine`]. The registry is required; the protector is required when
/// encrypted persistence is on; everything else is optional (see each port's docs for
/// what its absence means).
/// How long a cached schema is trusted when the host sets nothing: a table or column
/// created since is seen within this long, and at once by a job that names it.
pub const DEFAULT_SCHEMA_TTL: std::time::Duration = std::time::Duration::from_secs(5 * 60);

#[derive(Default)]
pub struct EngineBuilder {
    registry: Option<Arc<dyn ConnectorRegistry>>,
    protector: Option<Arc<dyn CredentialProtector>>,
    encrypted_persistence: bool,
    connection_store: Option<Arc<dyn ConnectionStore>>,
    execution_store: Option<Arc<dyn ExecutionStore>>,
    result_sink: Option<Arc<dyn ResultSink>>,
    schema_cache: Option<Arc<dyn SchemaCache>>,
    schema_ttl: Option<std::time::Duration>,
    active_checker: Option<Arc<dyn ActiveExecutionChecker>>,
    observability: Option<Arc<dyn Observability>>,
    limits: Option<Limits>,
}

impl EngineBuilder {
    pub fn connector_registry(mut self, r: Arc<dyn ConnectorRegistry>) -> Self {
        self.registry = Some(r);
        self
    }
    pub fn credential_protector(mut self, p: Arc<dyn CredentialProtector>) -> Self {
        self.protector = Some(p);
        self
    }
    pub fn encrypted_persistence(mut self, on: bool) -> Self {
        self.encrypted_persistence = on;
        self
    }
    pub fn connection_store(mut self, s: Arc<dyn ConnectionStore>) -> Self {
        self.connection_store = Some(s);
        self
    }
    pub fn execution_store(mut self, s: Arc<dyn ExecutionStore>) -> Self {
        self.execution_store = Some(s);
        self
    }
    pub fn result_sink(mut self, s: Arc<dyn ResultSink>) -> Self {
        self.result_sink = Some(s);
        self
    }
    pub fn schema_cache(mut self, c: Arc<dyn SchemaCache>) -> Self {
        self.schema_cache = Some(c);
        self
    }
    /// How long a cached schema is trusted (default [`DEFAULT_SCHEMA_TTL`]): an older
    /// snapshot, or one without a capture time, is discovered again whatever the cache
    /// adapter keeps (docs/engine.md, "Schema discovery and validation").
    pub fn schema_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.schema_ttl = Some(ttl);
        self
    }
    pub fn active_execution_checker(mut self, c: Arc<dyn ActiveExecutionChecker>) -> Self {
        self.active_checker = Some(c);
        self
    }
    pub fn observability(mut self, o: Arc<dyn Observability>) -> Self {
        self.observability = Some(o);
        self
    }
    /// Limits used as-is, unless zero ([`Limits::is_zero`]), which means the defaults.
    /// There is no field-by-field merge: a zero field means unbounded.
    pub fn limits(mut self, l: Limits) -> Self {
        self.limits = Some(l);
        self
    }

    pub fn build(self) -> Result<Engine> {
        let Some(registry) = self.registry else {
            return Err(EngineError::validation(msg::REGISTRY_REQUIRED));
        };
        if self.encrypted_persistence && self.protector.is_none() {
            return Err(EngineError::validation(msg::PROTECTOR_REQUIRED));
        }
        let limits = match self.limits {
            Some(l) if !l.is_zero() => l,
            _ => Limits::defaults(),
        };
        Ok(Engine {
            inner: Arc::new(Inner {
                registry,
                protector: self.protector,
                encrypted_persistence: self.encrypted_persistence,
                connection_store: self.connection_store,
                execution_store: self.execution_store,
                result_sink: self.result_sink,
                schema_cache: self.schema_cache,
                schema_ttl: self.schema_ttl.unwrap_or(DEFAULT_SCHEMA_TTL),
                active_checker: self.active_checker,
                observability: self.observability,
                limits,
            }),
        })
    }
}

pub(crate) struct Inner {
    pub(crate) registry: Arc<dyn ConnectorRegistry>,
    pub(crate) protector: Option<Arc<dyn CredentialProtector>>,
    pub(crate) encrypted_persistence: bool,
    pub(crate) connection_store: Option<Arc<dyn ConnectionStore>>,
    pub(crate) execution_store: Option<Arc<dyn ExecutionStore>>,
    pub(crate) result_sink: Option<Arc<dyn ResultSink>>,
    pub(crate) schema_cache: Option<Arc<dyn SchemaCache>>,
    pub(crate) schema_ttl: std::time::Duration,
    pub(crate) active_checker: Option<Arc<dyn ActiveExecutionChecker>>,
    pub(crate) observability: Option<Arc<dyn Observability>>,
    pub(crate) limits: Limits,
}

/// The extraction engine. Cheap to clone; every operation returns only after all the
/// work it started has finished.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The configured limits (the ceilings a request may not raise).
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The datasource types this host can read (test, discover, extract): those its
    /// registry serves. Others may be stored, but every read of them is refused.
    pub fn readable_types(&self) -> Vec<crate::DatasourceType> {
        crate::DatasourceType::ALL
            .into_iter()
            .filter(|t| self.inner.registry.connector(*t).is_some())
            .collect()
    }

    // --- shared helpers ------------------------------------------------------------------

    /// Runs `op` inside a span named `name` (when observability is configured).
    pub(crate) async fn traced<T>(
        &self,
        name: &'static str,
        op: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let span = self
            .inner
            .observability
            .as_ref()
            .map(|o| o.start_span(name));
        within(span, op).await
    }

    /// A span about one datasource or table of an extraction (when observability is
    /// configured), a child of the span entered where it is started.
    pub(crate) fn span_about(
        &self,
        name: &'static str,
        about: crate::ports::SpanSubject<'_>,
    ) -> Option<Box<dyn crate::ports::Span>> {
        self.inner
            .observability
            .as_ref()
            .map(|o| o.start_span_about(name, about))
    }

    /// Gates 1 and 2 of every store-backed operation: store present, then tenant valid.
    pub(crate) fn scoped_store(&self, tenant: &TenantContext) -> Result<&Arc<dyn ConnectionStore>> {
        let store = self
            .inner
            .connection_store
            .as_ref()
            .ok_or_else(|| EngineError::validation(msg::STORE_NOT_CONFIGURED))?;
        tenant.validate_scope()?;
        Ok(store)
    }

    /// `find`, with "missing" (or another tenant's) `not_found` (`ConnectionNotFound`).
    pub(crate) async fn require_connection(
        &self,
        ctx: &Context,
        store: &Arc<dyn ConnectionStore>,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<ConnectionDescriptor> {
        store
            .find(ctx, tenant, config_name)
            .await?
            .ok_or_else(|| EngineError::of(crate::Reason::ConnectionNotFound))
    }

    /// The connection of a planned step: one gone since planning is `not_found` with
    /// [`msg::UNKNOWN_DATASOURCE`] (no reason: not the caller's name lookup).
    pub(crate) async fn require_step_connection(
        &self,
        ctx: &Context,
        store: &Arc<dyn ConnectionStore>,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<ConnectionDescriptor> {
        self.require_connection(ctx, store, tenant, config_name)
            .await
            .map_err(|e| match e.reason() {
                Some(crate::Reason::ConnectionNotFound) => {
                    EngineError::new(Category::NotFound, msg::UNKNOWN_DATASOURCE)
                }
                _ => e,
            })
    }

    /// Resolves the factory and builds a connector, mapping failures to fixed texts.
    pub(crate) async fn build_connector(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        descriptor: &ConnectionDescriptor,
    ) -> Result<Box<dyn Connector>> {
        let factory = self
            .inner
            .registry
            .connector(descriptor.datasource_type)
            .ok_or_else(|| {
                EngineError::new(
                    Category::NotFound,
                    format!("{}{}", msg::NO_CONNECTOR_PREFIX, descriptor.datasource_type),
                )
                .with_reason(crate::Reason::NoConnector)
            })?;
        match factory.build(ctx, tenant, descriptor).await {
            Ok(Some(c)) => Ok(c),
            // A descriptor the factory rejects (bad TLS mode, blocked host) is the
            // caller's to fix; the factory's validation text is kept (beyond the reference).
            Err(e) if e.category() == Category::Validation => Err(e),
            Ok(None) | Err(_) => Err(EngineError::new(Category::Unavailable, msg::BUILD_FAILED)),
        }
    }

    /// Protects `password` when encrypted persistence is on; `None` when nothing is to be
    /// stored. Called before any store write.
    async fn protect(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        password: Option<&crate::secret::Secret>,
    ) -> Result<Option<ProtectedCredential>> {
        let Some(password) = password else {
            return Ok(None);
        };
        if !self.inner.encrypted_persistence {
            return Ok(None);
        }
        let protector = self
            .inner
            .protector
            .as_ref()
            .ok_or_else(|| EngineError::validation(msg::PROTECTOR_NOT_CONFIGURED))?;
        protector
            .protect(ctx, tenant, password.expose())
            .await
            .map(Some)
            .map_err(|_| EngineError::new(Category::Unavailable, msg::PROTECT_FAILED))
    }

    /// The conflict gate of update/delete: checker failure is redacted.
    async fn conflict_gate(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<()> {
        let Some(checker) = &self.inner.active_checker else {
            return Ok(());
        };
        match checker
            .has_active_executions(ctx, tenant, config_name)
            .await
        {
            Err(_) => Err(EngineError::new(
                Category::Unavailable,
                msg::CHECK_ACTIVE_FAILED,
            )),
            Ok(true) => Err(EngineError::of(crate::Reason::ActiveExecutions)),
            Ok(false) => Ok(()),
        }
    }

    // --- connection lifecycle ------------------------------------------------------------

    /// Creates a connection: duplicate pre-check (`conflict`), then protect (when on),
    /// then store. Returns the secret-free descriptor with its key version.
    pub async fn create_connection(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        input: &ConnectionInput,
    ) -> Result<ConnectionDescriptor> {
        self.traced("engine.connection.create", async {
            let store = self.scoped_store(tenant)?;
            let mut descriptor = ConnectionDescriptor::from_input(input);
            if store.find(ctx, tenant, &input.config_name).await?.is_some() {
                return Err(EngineError::of(crate::Reason::ConnectionExists));
            }
            let password = input.has_password().then(|| input.password());
            let credential = self.protect(ctx, tenant, password).await?;
            if let Some(c) = &credential {
                descriptor.key_version.clone_from(&c.key_version);
            }
            store
                .create(ctx, tenant, &descriptor, credential.as_ref())
                .await?;
            Ok(descriptor)
        })
        .await
    }

    pub async fn get_connection(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<ConnectionDescriptor> {
        self.traced("engine.connection.get", async {
            let store = self.scoped_store(tenant)?;
            self.require_connection(ctx, store, tenant, config_name)
                .await
        })
        .await
    }

    pub async fn list_connections(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
    ) -> Result<Vec<ConnectionDescriptor>> {
        self.traced("engine.connection.list", async {
            self.scoped_store(tenant)?.list(ctx, tenant).await
        })
        .await
    }

    pub async fn get_connection_by_id(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        id: &str,
    ) -> Result<ConnectionDescriptor> {
        self.traced("engine.connection.get_by_id", async {
            self.scoped_store(tenant)?
                .find_by_id(ctx, tenant, id)
                .await?
                .ok_or_else(|| EngineError::of(crate::Reason::ConnectionNotFound))
        })
        .await
    }

    pub async fn list_connections_paged(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        params: &ConnectionListParams,
    ) -> Result<ConnectionPage> {
        self.traced("engine.connection.list_paged", async {
            self.scoped_store(tenant)?
                .list_paged(ctx, tenant, params)
                .await
        })
        .await
    }

    /// Applies `patch` to a connection, after the conflict gate. A patch password is
    /// protected (when encryption is on); without one the stored secret is kept.
    pub async fn update_connection(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
        patch: &ConnectionPatch,
    ) -> Result<ConnectionDescriptor> {
        self.traced("engine.connection.update", async {
            let store = self.scoped_store(tenant)?;
            let current = self
                .require_connection(ctx, store, tenant, config_name)
                .await?;
            self.conflict_gate(ctx, tenant, config_name).await?;
            let mut updated = patch.apply(&current);
            let credential = self.protect(ctx, tenant, patch.password()).await?;
            if let Some(c) = &credential {
                updated.key_version.clone_from(&c.key_version);
            }
            store
                .update(ctx, tenant, &updated, credential.as_ref())
                .await?;
            Ok(updated)
        })
        .await
    }

    /// For hosts that patch their own rich record: no gate, no existence pre-check (call
    /// [`Engine::check_active_executions`] first). Only the patch's password is read.
    pub async fn update_connection_by_id(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        id: &str,
        descriptor: &ConnectionDescriptor,
        patch: &ConnectionPatch,
    ) -> Result<ConnectionDescriptor> {
        self.traced("engine.connection.update_by_id", async {
            let store = self.scoped_store(tenant)?;
            let mut updated = descriptor.clone();
            let credential = self.protect(ctx, tenant, patch.password()).await?;
            if let Some(c) = &credential {
                updated.key_version.clone_from(&c.key_version);
            }
            store
                .update_by_id(ctx, tenant, id, &updated, credential.as_ref())
                .await?;
            Ok(updated)
        })
        .await
    }

    pub async fn delete_connection(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<()> {
        self.traced("engine.connection.delete", async {
            let store = self.scoped_store(tenant)?;
            self.require_connection(ctx, store, tenant, config_name)
                .await?;
            self.conflict_gate(ctx, tenant, config_name).await?;
            store.delete(ctx, tenant, config_name).await
        })
        .await
    }

    pub async fn delete_connection_by_id(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        id: &str,
    ) -> Result<()> {
        self.traced("engine.connection.delete_by_id", async {
            self.scoped_store(tenant)?
                .delete_by_id(ctx, tenant, id)
                .await
        })
        .await
    }

    /// The conflict policy on its own: the checker's error is returned unchanged (it goes
    /// back to the host that supplied the checker). No store needed.
    pub async fn check_active_executions(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<()> {
        self.traced("engine.connection.check_active_executions", async {
            tenant.validate_scope()?;
            let Some(checker) = &self.inner.active_checker else {
                return Ok(());
            };
            if checker
                .has_active_executions(ctx, tenant, config_name)
                .await?
            {
                return Err(EngineError::of(crate::Reason::ActiveExecutions));
            }
            Ok(())
        })
        .await
    }

    /// The read-path authority for hosts with their own persistence: tenant shape only.
    pub fn authorize_connection_access(&self, tenant: &TenantContext) -> Result<()> {
        let span = self
            .inner
            .observability
            .as_ref()
            .map(|o| o.start_span("engine.connection.authorize_access"));
        let out = tenant.validate_scope();
        if let Some(span) = span {
            span.end(out.as_ref().err());
        }
        out
    }

    /// build → test → close, with latency. Any test failure is `connect` /
    /// `failed to connect to datasource`; the connector is closed on every path.
    pub async fn test_connection(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<ConnectionTestResult> {
        self.traced("engine.connection.test", async {
            let store = self.scoped_store(tenant)?;
            let descriptor = self
                .require_connection(ctx, store, tenant, config_name)
                .await?;
            let started = Instant::now();
            let mut connector = self.build_connector(ctx, tenant, &descriptor).await?;
            let tested = connector.test_connection(ctx).await;
            let _ = connector.close(ctx).await;
            // The connector's text stays hidden; a host with no address keeps its reason,
            // so the caller can say what to fix.
            tested.map_err(|e| match e.reason() {
                Some(
                    crate::Reason::HostNotResolved
                    | crate::Reason::ForbiddenHost
                    | crate::Reason::InvalidTlsMode
                    | crate::Reason::LoginRefused
                    | crate::Reason::DatabaseUnknown
                    | crate::Reason::NotListening
                    | crate::Reason::ConnectTimedOut
                    | crate::Reason::TlsRefused,
                ) => e,
                // The operation's deadline passed while connecting: no answer in time.
                _ if e.category() == Category::Timeout => {
                    EngineError::of(crate::Reason::ConnectTimedOut)
                }
                _ => {
                    let retry = e.retry();
                    EngineError::wrap(Category::Connect, msg::CONNECT_FAILED, e).with_retry(retry)
                }
            })?;
            Ok(ConnectionTestResult {
                success: true,
                config_name: descriptor.config_name,
                latency: started.elapsed(),
            })
        })
        .await
    }
}

impl Engine {
    /// Drops the log positions `slots` keep on connection `config_name` (a deleted
    /// sync's replication slots and publications, PostgreSQL): each is gone when this
    /// answers `Ok`. A connection that cannot be reached keeps its reason, as a test of it
    /// would; any other failure is `unavailable` with the connector's text hidden.
    pub async fn release_log(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
        slots: &[LogSlot],
    ) -> Result<()> {
        self.traced("engine.log.release", async {
            let store = self.scoped_store(tenant)?;
            let descriptor = self
                .require_connection(ctx, store, tenant, config_name)
                .await?;
            let mut connector = self.build_connector(ctx, tenant, &descriptor).await?;
            let mut released = Ok(());
            for slot in slots {
                released = connector.release_log(ctx, slot).await;
                if released.is_err() {
                    break;
                }
            }
            let _ = connector.close(ctx).await;
            released.map_err(|e| match e.category() {
                Category::Connect | Category::Timeout => e,
                _ => {
                    let retry = e.retry();
                    EngineError::wrap(Category::Unavailable, msg::LOG_RELEASE_FAILED, e)
                        .with_retry(retry)
                }
            })
        })
        .await
    }
}

/// Runs `op` with `span` entered around each of its polls, so what starts a span inside
/// it (the engine, or a port it calls) starts a child; then ends `span` with the outcome.
pub(crate) async fn within<T>(
    span: Option<Box<dyn crate::ports::Span>>,
    op: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let (out, span) = InSpan {
        span,
        op: Box::pin(op),
    }
    .await;
    if let Some(span) = span {
        span.end(out.as_ref().err());
    }
    out
}

/// A future polled inside its span; it hands the span back with the output.
struct InSpan<F> {
    span: Option<Box<dyn crate::ports::Span>>,
    op: std::pin::Pin<Box<F>>,
}

impl<F: std::future::Future> std::future::Future for InSpan<F> {
    type Output = (F::Output, Option<Box<dyn crate::ports::Span>>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        let polled = {
            let _entered = this.span.as_ref().map(|s| s.enter());
            this.op.as_mut().poll(cx)
        };
        polled.map(|out| (out, this.span.take()))
    }
}
