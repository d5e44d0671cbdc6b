//! Job use cases of the API (docs/api.md, "Jobs"): create with validation and
//! de-duplication, enqueue the signed message, read back.
//!
//! Create, in the order of docs/api.md, "Creating a job" (the first failing step decides the answer):
//! `mappedFields` present → request hash ([`crate::dedup`]) → structure (non-empty, every
//! datasource has a table with fields, ≤ 10 datasources) → `metadata.source` → filter
//! references → de-duplication (newest job with the same hash in the last 5 minutes that
//! is not `failed` → duplicate) → resolve connections (ascending name) → product ownership
//! → connectivity (sequential, 10 s each) → insert (atomic: [`JobStore::insert`] returns
//! the active job with the same hash as a duplicate; a duplicate that is no longer active
//! is retried once) → enqueue ([`crate::message::encode`], carrying the request id) → new.
//! A failed enqueue marks the job `failed` (`process failed: unable to publish`) and is
//! an error.
//!
//! Also here: [`JobStoreActiveChecker`], the engine's active-execution gate over
//! [`JobStore::has_active_jobs`] (PATCH/DELETE of a connection answer 409 while a pending
//! or processing job reads it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fetcher_connectors::HostPolicy;
use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::ports::ActiveExecutionChecker;
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, Engine, EngineError, TenantContext,
    Timestamp,
};
use serde_json::Value;

use crate::connection::ConnectionRecord;
use crate::dedup::{self, Filters, MappedFields};
use crate::model::{Job, JobId, JobRequest, JobStatus, PendingEvent, ResultFormat, Transition};
use crate::ports::{InsertOutcome, JobQueue, JobStore, KeyProvider};

mod error;
mod filter_values;
mod shape;
use shape::{rows_estimate, validate_structure, within_limits};

/// `metadata.error` of a job whose message could not be enqueued.
pub const PUBLISH_FAILED: &str = "process failed: unable to publish";
/// Maximum datasources per job.
pub const MAX_DATASOURCES: usize = 10;

/// The largest job request (mapped fields, filters and metadata, JSON-encoded) accepted:
/// with the envelope and the event's other fields it stays under the smallest limit on
/// its way (SQS and EventBridge: 256 KiB; docs/api.md "Limits").
pub const MAX_JOB_REQUEST_BYTES: usize = 192 * 1024;

/// A decoded create request (the HTTP layer parses the body into this).
#[derive(Debug, Clone, Default)]
pub struct CreateJob {
    /// `None` when `dataRequest` or `dataRequest.mappedFields` is absent or null.
    pub mapped_fields: Option<MappedFields>,
    pub filters: Filters,
    /// `None` when absent or null.
    pub metadata: Option<serde_json::Map<String, Value>>,
    pub result_format: Option<ResultFormat>,
    /// `configName → table → incremental read` (docs/api.md, "Incremental extraction").
    pub incremental: crate::incremental::Incremental,
    /// The sync the job continues; `None` with incremental reads: derived.
    pub sync_id: Option<String>,
    /// The product the caller named (`X-Product-Name`), if any: `metadata.source` must be
    /// it (docs/api.md, "Products").
    pub product: Option<String>,
    /// The due time of the schedule run creating the job ([`crate::schedules`]), if any:
    /// part of the request hash, so runs are not duplicates of each other.
    pub scheduled_for: Option<Timestamp>,
}

/// A request that passed every check of job creation, ready to be stored.
#[derive(Debug, Clone)]
pub struct CheckedRequest {
    pub hash: String,
    /// `metadata.source`: the product whose job it is.
    pub source: String,
    pub request: JobRequest,
    /// The rows the job will read, from the catalogs' estimates, when it reads whole
    /// tables whose estimates are known ([`rows_estimate`]).
    pub rows_estimate: Option<u64>,
}

/// A request past the shape checks, before any datasource is looked up.
struct Shaped {
    hash: String,
    source: String,
    mapped: MappedFields,
    metadata: serde_json::Map<String, Value>,
    req: CreateJob,
    sync_id: Option<String>,
}

pub use error::JobError;

/// New or existing job.
#[derive(Debug, Clone)]
pub enum Created {
    New(Job),
    Duplicate(Job),
}

/// Settings of the job use cases.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// De-duplication window (5 minutes).
    pub dedup_window: Duration,
    /// Per-connection connectivity test timeout at creation (10 s).
    pub test_timeout: Duration,
    /// Bound on all of a creation's connection tests together, which run at once (20 s:
    /// inside API Gateway's 30 s with room for the rest of the request). Past it: 504.
    pub test_budget: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            dedup_window: Duration::from_secs(300),
            test_timeout: Duration::from_secs(10),
            test_budget: Duration::from_secs(20),
        }
    }
}

/// The job use cases, over the host ports and the engine.
#[derive(Clone)]
pub struct JobService {
    pub engine: Engine,
    pub store: Arc<dyn JobStore>,
    pub queue: Arc<dyn JobQueue>,
    /// The master keys job messages are signed with (the internal HMAC key), read per job
    /// so a rotation reaches new messages within the provider's refresh.
    pub keys: Arc<dyn KeyProvider>,
    /// The dial-layer SSRF guard (multi-tenant); `None` checks nothing.
    pub host_policy: Option<HostPolicy>,
    pub settings: JobSettings,
}

/// Internal datasources (platform-provided; docs/datasources.md, "Internal datasources") skip ownership and connectivity
/// checks: a reserved name whose record carries no API identity.
pub fn is_internal(d: &ConnectionDescriptor) -> bool {
    fetcher_connectors::env::REGISTRY.contains(&d.config_name.as_str())
        && !ConnectionRecord::has_api_identity(d)
}

/// The dial-layer guard on its own (no connection opened): `Err(ForbiddenHost)` when the
/// host is blocked. DNS failures are not a block (the dial then fails normally).
pub async fn check_host(
    policy: Option<&HostPolicy>,
    ctx: &Context,
    d: &ConnectionDescriptor,
) -> Result<(), ()> {
    let Some(policy) = policy else { return Ok(()) };
    if is_internal(d) {
        return Ok(());
    }
    match policy.target(ctx, d).await {
        Err(e) if fetcher_connectors::is_forbidden_host(&e) => Err(()),
        _ => Ok(()),
    }
}

impl JobService {
    /// Creates (or de-duplicates) a job for `tenant`. `request_id` travels in the message.
    pub async fn create(
        &self,
        tenant: &TenantContext,
        request_id: &str,
        req: CreateJob,
    ) -> Result<Created, JobError> {
        let shaped = Self::check_shape(req)?;
        if let Some(existing) = self.recent_duplicate(tenant, &shaped.hash).await? {
            return Ok(Created::Duplicate(existing));
        }
        let checked = self.check_datasources(tenant, shaped).await?;
        self.store_and_enqueue(tenant, request_id, checked).await
    }

    /// Every check of [`Self::create`] but de-duplication, storing nothing: what a job
    /// created from `req` now would run (a schedule's request is checked so when set).
    pub async fn validate(
        &self,
        tenant: &TenantContext,
        req: CreateJob,
    ) -> Result<CheckedRequest, JobError> {
        let shaped = Self::check_shape(req)?;
        self.check_datasources(tenant, shaped).await
    }

    /// The checks that look nothing up: mapped fields, the hash, structure, metadata, the
    /// product, filter references, limits, the incremental shape and the size.
    fn check_shape(req: CreateJob) -> Result<Shaped, JobError> {
        let mapped = req
            .mapped_fields
            .clone()
            .ok_or(JobError::MappedFieldsRequired)?;
        let empty_meta = serde_json::Map::new();
        let hash = dedup::request_hash_of(&dedup::HashedRequest {
            mapped_fields: &mapped,
            filters: &req.filters,
            metadata: req.metadata.as_ref().unwrap_or(&empty_meta),
            result_format: req.result_format,
            incremental: &req.incremental,
            sync_id: req.sync_id.as_deref(),
            scheduled_for: req.scheduled_for,
        });
        validate_structure(&mapped)?;
        let metadata = req.metadata.clone().ok_or(JobError::Metadata(
            "Missing Required Field",
            "metadata is required and must contain 'source' field",
        ))?;
        let source = match metadata.get("source") {
            None | Some(Value::Null) => {
                return Err(JobError::Metadata(
                    "Missing Required Field",
                    "metadata.source is required for job notification routing",
                ));
            }
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(_) => {
                return Err(JobError::Metadata(
                    "Invalid Field Value",
                    "metadata.source must be a non-empty string",
                ));
            }
        };
        if let Some(product) = req.product.clone().filter(|p| *p != source) {
            return Err(JobError::SourceNotNamedProduct { source, product });
        }
        let unknown: Vec<String> = req
            .filters
            .keys()
            .filter(|ds| !mapped.contains_key(*ds))
            .map(|ds| {
                format!("filter references unknown datasource '{ds}' not found in mappedFields")
            })
            .collect();
        if !unknown.is_empty() {
            return Err(JobError::FilterReferences(unknown.join("; ")));
        }
        within_limits(&mapped, &req.filters)?;
        crate::incremental::check_shape(&mapped, &req.incremental, req.sync_id.as_deref())?;
        if req.result_format == Some(crate::model::ResultFormat::V1)
            && let Some((config, table)) = crate::incremental::first_log_read(&req.incremental)
        {
            return Err(JobError::InvalidIncremental(format!(
                "table '{config}.{table}' is read from the log: its rows carry a change marker, which resultFormat v1 cannot; ask for v2 or parquet"
            )));
        }
        let sync_id = match (&req.sync_id, req.incremental.is_empty()) {
            (Some(id), _) => Some(id.clone()),
            (None, false) => Some(crate::incremental::derived_sync_id(
                &source,
                &mapped,
                &req.filters,
                &req.incremental,
            )),
            (None, true) => None,
        };
        // What is stored must also fit the queue message (SQS: 256 KiB), the job record
        // (DynamoDB: 400 KB) and the terminal event that echoes the metadata
        // (EventBridge: 256 KB): refused now rather than stored and stranded.
        let size = serde_json::to_vec(&(&mapped, &req.filters, &metadata, &req.incremental))
            .map_or(usize::MAX, |v| v.len());
        if size > MAX_JOB_REQUEST_BYTES {
            return Err(JobError::TooLarge(size));
        }
        Ok(Shaped {
            hash,
            source,
            mapped,
            metadata,
            req,
            sync_id,
        })
    }

    /// The newest job of the same request in the de-duplication window that neither
    /// failed nor was canceled.
    async fn recent_duplicate(
        &self,
        tenant: &TenantContext,
        hash: &str,
    ) -> Result<Option<Job>, JobError> {
        let since = Timestamp::from_unix_nanos(
            Timestamp::now().unix_nanos() - self.settings.dedup_window.as_nanos() as i128,
        );
        Ok(self
            .store
            .find_recent_by_hash(&tenant.tenant_id, hash, since)
            .await
            .map_err(JobError::JobStore)?
            .filter(|existing| !matches!(existing.status, JobStatus::Failed | JobStatus::Canceled)))
    }

    /// The checks that look datasources up: resolve the connections, their product, a
    /// connectivity test, the cached schema, the incremental reads and their sync.
    async fn check_datasources(
        &self,
        tenant: &TenantContext,
        shaped: Shaped,
    ) -> Result<CheckedRequest, JobError> {
        let Shaped {
            hash,
            source,
            mapped,
            metadata,
            req,
            sync_id,
        } = shaped;
        // Resolve, own, test.
        let ctx = Context::background();
        let mut resolved = Vec::new();
        let mut missing = Vec::new();
        for name in mapped.keys() {
            match self.engine.get_connection(&ctx, tenant, name).await {
                Ok(d) => resolved.push(d),
                Err(e) if e.category() == Category::NotFound => missing.push(name.clone()),
                Err(e) => return Err(JobError::ConnectionStore(e)),
            }
        }
        if resolved.is_empty() || !missing.is_empty() {
            // `mappedFields` keys are config names: say which the product has.
            let known: Vec<String> = self
                .engine
                .list_connections(&ctx, tenant)
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|d| ConnectionRecord::product_of(d) == source)
                .map(|d| d.config_name)
                .take(20)
                .collect();
            return Err(match missing.into_iter().next() {
                Some(name) if !resolved.is_empty() => JobError::MissingDataSource(name, known),
                _ => JobError::NoConnections(known),
            });
        }
        for d in resolved.iter().filter(|d| !is_internal(d)) {
            let product = ConnectionRecord::product_of(d);
            if product.is_empty() {
                return Err(JobError::NotAssigned(d.config_name.clone()));
            }
            if product != source {
                let told = req.product.is_none() || product.eq_ignore_ascii_case(source.trim());
                return Err(JobError::ProductMismatch {
                    config_name: d.config_name.clone(),
                    source,
                    owner: told.then(|| product.to_owned()),
                });
            }
        }
        // Every referenced connection is tested at once, each bounded, all together
        // within the budget: ten slow datasources cost one timeout, not ten.
        let tests = resolved
            .iter()
            .filter(|d| !is_internal(d))
            .map(|d| async move {
                let ctx = Context::background().with_timeout(self.settings.test_timeout);
                if check_host(self.host_policy.as_ref(), &ctx, d)
                    .await
                    .is_err()
                {
                    return Err(JobError::ForbiddenHost);
                }
                let tested = tokio::time::timeout(
                    self.settings.test_timeout,
                    self.engine.test_connection(&ctx, tenant, &d.config_name),
                )
                .await;
                match tested {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) if fetcher_connectors::is_forbidden_host(&e) => {
                        Err(JobError::ForbiddenHost)
                    }
                    Ok(Err(e)) if e.reason() == Some(fetcher_engine::Reason::NoConnector) => {
                        Err(JobError::TypeNotReadable {
                            config_name: d.config_name.clone(),
                            datasource_type: d.datasource_type,
                            readable: self.engine.readable_types(),
                        })
                    }
                    Ok(Err(e))
                        if e.reason().is_some()
                            && e.category() == fetcher_engine::Category::Connect =>
                    {
                        Err(JobError::ConnectionDown(
                            d.config_name.clone(),
                            Some(e.message().to_owned()),
                        ))
                    }
                    _ => Err(JobError::ConnectionDown(d.config_name.clone(), None)),
                }
            });
        let outcomes = tokio::time::timeout(
            self.settings.test_budget,
            futures_util::future::join_all(tests),
        )
        .await
        .map_err(|_| JobError::Timeout)?;
        // The first failure in datasource order, as when they ran one by one.
        outcomes
            .into_iter()
            .collect::<Result<Vec<()>, JobError>>()?;

        // A mapping the cached schema refutes (confirmed by a fresh discovery, so a stale
        // cache refuses nothing) is refused now, with validate-schema's 422, and so is a
        // filter value of the wrong kind for its column (400 `FET-0401`), instead of
        // queueing a job that must fail.
        let mut unknown = Vec::new();
        // The schemas read here, for the job's row estimate.
        let mut schemas = BTreeMap::new();
        for d in &resolved {
            let Some(cached) = self
                .engine
                .cached_schema(&ctx, tenant, &d.config_name)
                .await
            else {
                continue;
            };
            // The mapped fields and the filtered ones: a filter on a column the table
            // lacks is refused now too, not when the job runs.
            let mut selection = mapped[&d.config_name].clone();
            for (table, conditions) in req.filters.get(&d.config_name).into_iter().flatten() {
                if let Some(fields) = selection.get_mut(table) {
                    for field in conditions.keys() {
                        if !fields.contains(field) {
                            fields.push(field.clone());
                        }
                    }
                }
            }
            let selection = &selection;
            // The filter values against their columns' types, where the schema knows them.
            let values = |schema: &fetcher_engine::SchemaSnapshot| {
                let filters = req.filters.get(&d.config_name).into_iter().flatten();
                filters
                    .filter_map(|(table, conditions)| {
                        let t = schema.find_table(d.datasource_type, table)?;
                        Some(filter_values::check(&d.config_name, table, t, conditions))
                    })
                    .collect::<Result<Vec<()>, JobError>>()
            };
            let refused = values(&cached).err();
            if refused.is_none() && cached.missing(d.datasource_type, selection).is_empty() {
                schemas.insert(d.config_name.clone(), (d.datasource_type, cached));
                continue;
            }
            let ctx = Context::background().with_timeout(self.settings.test_timeout);
            match self
                .engine
                .discover_schema_fresh(&ctx, tenant, &d.config_name)
                .await
            {
                Ok(fresh) => {
                    values(&fresh)?;
                    for (table, field) in fresh.missing(d.datasource_type, selection) {
                        unknown.push((d.config_name.clone(), table, field));
                    }
                    schemas.insert(d.config_name.clone(), (d.datasource_type, fresh));
                }
                // Without a fresh schema, the cached one's refusal stands.
                Err(_) => {
                    if let Some(e) = refused {
                        return Err(e);
                    }
                }
            }
        }
        if !unknown.is_empty() {
            return Err(JobError::SchemaInvalid(unknown));
        }
        let incremental = self
            .resolve_incremental(tenant, &resolved, &req.incremental)
            .await?;
        if let Some(id) = &sync_id
            && let Some(sync) = self
                .store
                .sync(&tenant.tenant_id, id)
                .await
                .map_err(JobError::JobStore)?
        {
            if !sync.answers_to(Some(&source)) {
                return Err(JobError::SyncOfAnotherProduct(id.clone()));
            }
            crate::incremental::check_against(&sync, &incremental)?;
        }
        let rows_estimate = rows_estimate(&mapped, &req.filters, &incremental, &schemas);
        Ok(CheckedRequest {
            rows_estimate,
            hash,
            source,
            request: JobRequest {
                mapped_fields: mapped.into_iter().collect(),
                filters: req.filters,
                metadata,
                result_format: req.result_format,
                incremental,
                sync_id,
                scheduled_for: req.scheduled_for,
            },
        })
    }

    /// Admission, the atomic insert (a duplicate or a busy sync answered as such), then
    /// the signed message.
    async fn store_and_enqueue(
        &self,
        tenant: &TenantContext,
        request_id: &str,
        checked: CheckedRequest,
    ) -> Result<Created, JobError> {
        // A host that is shutting down takes no new work: refuse before storing anything.
        if !self.queue.is_accepting() {
            return Err(JobError::ShuttingDown);
        }
        // A tenant with its maximum of jobs waiting for a worker queues no more.
        if !self.queue.admits(&tenant.tenant_id) {
            return Err(JobError::TooManyWaiting);
        }
        // Insert (atomic per hash), then enqueue.
        let mut job = Job::new(&tenant.tenant_id, checked.request, checked.hash);
        job.rows_estimate = checked.rows_estimate;
        // The creating request's trace: the job's worker and its event continue it.
        job.trace = fetcher_telemetry::TraceParent::current();
        let mut retried = false;
        loop {
            match self.store.insert(&job).await.map_err(JobError::JobStore)? {
                InsertOutcome::Created => break,
                InsertOutcome::Duplicate(existing) if existing.status.is_active() || retried => {
                    return Ok(Created::Duplicate(*existing));
                }
                // A first job of another product took the sync since it was read: its
                // job is not this caller's to name.
                InsertOutcome::SyncBusy(other) if other.product() != job.product() => {
                    return Err(JobError::SyncOfAnotherProduct(
                        job.request.sync_id.clone().unwrap_or_default(),
                    ));
                }
                InsertOutcome::SyncBusy(other) => {
                    return Err(JobError::SyncBusy {
                        sync_id: job.request.sync_id.clone().unwrap_or_default(),
                        job_id: other.id,
                    });
                }
                // The conflicting job finished meanwhile: retry exactly once.
                InsertOutcome::Duplicate(_) => retried = true,
            }
        }
        let sent = match self.keys.key_ring().await {
            Ok(ring) => {
                let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
                let message =
                    crate::message::encode(&job, &signer, request_id, crate::message::unix_now());
                let span =
                    tracing::info_span!("enqueue", tenant_id = %job.tenant_id, job_id = %job.id);
                tracing::Instrument::instrument(self.queue.enqueue(message), span).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            if !self.queue.is_accepting() {
                // Lost the race with shutdown: the job is durable in the jobs table and
                // the host re-enqueues pending jobs at its next start. Accepted, not failed.
                tracing::info!(job_id = %job.id, "queue closed for shutdown; the job stays pending for the next start");
                return Ok(Created::New(job));
            }
            self.mark_publish_failed(&job).await;
            return Err(JobError::Publish(e));
        }
        Ok(Created::New(job))
    }

    /// Marks a job whose message could not be enqueued as failed. No terminal event is
    /// published for this case (docs/events.md, "When no event is sent"): the outbox marker that `fail` writes is
    /// cleared right away. Failures here are only logged (the client already gets 500).
    async fn mark_publish_failed(&self, job: &Job) {
        let payload =
            serde_json::json!({"jobId": job.id, "status": "failed", "error": PUBLISH_FAILED})
                .to_string();
        let event = PendingEvent {
            status: JobStatus::Failed,
            payload,
            failures: 0,
        };
        let store = &self.store;
        if let Err(e) = store
            .fail(
                &job.tenant_id,
                job.id,
                None,
                PUBLISH_FAILED,
                &event,
                Timestamp::now(),
            )
            .await
        {
            tracing::error!(job_id = %job.id, error = %e.log_detail(), "could not mark job failed after publish failure");
            return;
        }
        if let Err(e) = store.clear_pending_event(&job.tenant_id, job.id).await {
            tracing::error!(job_id = %job.id, error = %e.log_detail(), "could not clear the pending event of a publish failure");
        }
    }

    /// The incremental reads checked against each datasource's schema, empty keys
    /// resolved to primary keys ([`crate::incremental::resolve`]).
    async fn resolve_incremental(
        &self,
        tenant: &TenantContext,
        resolved: &[ConnectionDescriptor],
        incremental: &crate::incremental::Incremental,
    ) -> Result<crate::incremental::Incremental, JobError> {
        let mut out = BTreeMap::new();
        for (config, tables) in incremental {
            let d = resolved
                .iter()
                .find(|d| &d.config_name == config)
                .expect("every mapped datasource was resolved");
            let schema = self.schema_for(tenant, config).await;
            out.insert(
                config.clone(),
                crate::incremental::resolve(config, d.datasource_type, schema.as_ref(), tables)?,
            );
        }
        Ok(out)
    }

    /// Reads one job of the tenant.
    /// A client's cancel (docs/api.md, "Canceling a job"): a `pending` job is
    /// `canceled` at once, its event in the outbox (published when its queued message
    /// reaches a worker, or by the repair pass); a `processing` one is asked, and its
    /// worker stops within one heartbeat. Returns the job as it is now.
    pub async fn cancel(&self, tenant: &TenantContext, id: JobId) -> Result<Job, JobError> {
        let job = self.get(tenant, id).await?;
        if job.status.is_terminal() {
            return Err(JobError::Finished(job.status));
        }
        let event = crate::pipeline::canceled_event(&job);
        let change = Transition::Cancel {
            event: &event,
            at: fetcher_engine::Timestamp::now(),
        };
        match self.store.transition(&tenant.tenant_id, id, change).await {
            Ok(_) => {}
            // It ended meanwhile (the worker completed it, or another cancel won).
            Err(e) if e.kind() == crate::ErrorKind::Conflict => {
                let now = self.get(tenant, id).await?;
                return Err(JobError::Finished(now.status));
            }
            Err(e) => return Err(JobError::JobStore(e)),
        }
        self.get(tenant, id).await
    }

    /// The tenant's jobs created in `[from, to)`, newest first, at most `limit`.
    pub async fn list_created(
        &self,
        tenant: &TenantContext,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> Result<Vec<Job>, JobError> {
        self.store
            .list_created(&tenant.tenant_id, from, to, limit)
            .await
            .map_err(JobError::JobStore)
    }

    pub async fn get(&self, tenant: &TenantContext, id: JobId) -> Result<Job, JobError> {
        self.store
            .get(&tenant.tenant_id, id)
            .await
            .map_err(JobError::JobStore)?
            .ok_or(JobError::NotFound)
    }
}

/// The engine's active-execution gate over [`JobStore::has_active_jobs`]: a connection
/// that a pending or processing job reads cannot be updated or deleted.
pub struct JobStoreActiveChecker(pub Arc<dyn JobStore>);

impl ActiveExecutionChecker for JobStoreActiveChecker {
    fn has_active_executions<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        config_name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<bool>> {
        Box::pin(async move {
            self.0
                .has_active_jobs(&tenant.tenant_id, config_name)
                .await
                .map_err(EngineError::from)
        })
    }
}
