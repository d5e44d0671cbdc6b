use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::context::Context;
use crate::error::{Category, EngineError, Result, msg};
use crate::model::*;
use crate::ports::*;
use crate::secret::Secret;
use crate::tenant::TenantContext;

type Key = (String, String);

fn key(tenant: &TenantContext, name: &str) -> Key {
    (tenant.tenant_id.clone(), name.to_owned())
}

fn ready<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

fn not_found() -> EngineError {
    EngineError::of(crate::Reason::ConnectionNotFound)
}

#[derive(Clone)]
struct Record {
    descriptor: ConnectionDescriptor,
    credential: Option<ProtectedCredential>,
}

/// Connections keyed by (tenant, config name). Hard deletes; `list` sorted by config name.
#[derive(Default)]
pub struct MemoryConnectionStore {
    records: Mutex<BTreeMap<Key, Record>>,
}

impl MemoryConnectionStore {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A copy of the stored protected credential (test accessor).
    pub fn protected_credential(
        &self,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Option<ProtectedCredential> {
        self.records
            .lock()
            .unwrap()
            .get(&key(tenant, config_name))
            .and_then(|r| r.credential.clone())
    }

    pub fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn find_id(records: &BTreeMap<Key, Record>, tenant: &TenantContext, id: &str) -> Option<Key> {
        if id.is_empty() {
            return None;
        }
        records
            .iter()
            .find(|((t, _), r)| *t == tenant.tenant_id && r.descriptor.id == id)
            .map(|(k, _)| k.clone())
    }
}

impl ConnectionStore for MemoryConnectionStore {
    fn find<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>> {
        ready(Ok(self
            .records
            .lock()
            .unwrap()
            .get(&key(tenant, name))
            .map(|r| r.descriptor.clone())))
    }

    fn create<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>> {
        let mut records = self.records.lock().unwrap();
        let k = key(tenant, &d.config_name);
        if records.contains_key(&k) {
            return ready(Err(EngineError::of(crate::Reason::ConnectionExists)));
        }
        records.insert(
            k,
            Record {
                descriptor: d.clone(),
                credential: credential.cloned(),
            },
        );
        ready(Ok(()))
    }

    fn update<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>> {
        let mut records = self.records.lock().unwrap();
        let Some(r) = records.get_mut(&key(tenant, &d.config_name)) else {
            return ready(Err(not_found()));
        };
        r.descriptor = d.clone();
        if let Some(c) = credential {
            r.credential = Some(c.clone());
        }
        ready(Ok(()))
    }

    fn delete<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        let removed = self.records.lock().unwrap().remove(&key(tenant, name));
        ready(removed.map(|_| ()).ok_or_else(not_found))
    }

    fn list<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
    ) -> BoxFuture<'a, Result<Vec<ConnectionDescriptor>>> {
        let records = self.records.lock().unwrap();
        ready(Ok(records
            .iter()
            .filter(|((t, _), _)| *t == tenant.tenant_id)
            .map(|(_, r)| r.descriptor.clone())
            .collect()))
    }

    fn find_by_id<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConnectionDescriptor>>> {
        let records = self.records.lock().unwrap();
        ready(Ok(
            Self::find_id(&records, tenant, id).map(|k| records[&k].descriptor.clone())
        ))
    }

    fn update_by_id<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
        d: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, Result<()>> {
        let mut records = self.records.lock().unwrap();
        let Some(k) = Self::find_id(&records, tenant, id) else {
            return ready(Err(not_found()));
        };
        let mut r = records.remove(&k).expect("found above");
        r.descriptor = d.clone();
        r.descriptor.id = id.to_owned();
        if let Some(c) = credential {
            r.credential = Some(c.clone());
        }
        // A changed config name re-keys the record.
        records.insert(key(tenant, &d.config_name), r);
        ready(Ok(()))
    }

    fn delete_by_id<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        let mut records = self.records.lock().unwrap();
        let Some(k) = Self::find_id(&records, tenant, id) else {
            return ready(Err(not_found()));
        };
        records.remove(&k);
        ready(Ok(()))
    }

    fn credential<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProtectedCredential>>> {
        ready(Ok(self.protected_credential(tenant, name)))
    }
}

/// Schema snapshots keyed by (tenant, config name), with injectable failures.
#[derive(Default)]
pub struct MemorySchemaCache {
    entries: Mutex<BTreeMap<Key, SchemaSnapshot>>,
    pub fail_get: std::sync::atomic::AtomicBool,
    pub fail_put: std::sync::atomic::AtomicBool,
    pub gets: AtomicUsize,
    pub puts: AtomicUsize,
}

impl MemorySchemaCache {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn entry(&self, tenant: &TenantContext, config_name: &str) -> Option<SchemaSnapshot> {
        self.entries
            .lock()
            .unwrap()
            .get(&key(tenant, config_name))
            .cloned()
    }
}

impl SchemaCache for MemorySchemaCache {
    fn get<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SchemaSnapshot>>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        if self.fail_get.load(Ordering::SeqCst) {
            return ready(Err(EngineError::new(
                Category::Unavailable,
                "schema cache unavailable",
            )));
        }
        ready(Ok(self.entry(tenant, name)))
    }

    fn put<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        s: &'a SchemaSnapshot,
    ) -> BoxFuture<'a, Result<()>> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        if self.fail_put.load(Ordering::SeqCst) {
            return ready(Err(EngineError::new(
                Category::Unavailable,
                "schema cache unavailable",
            )));
        }
        self.entries
            .lock()
            .unwrap()
            .insert(key(tenant, &s.config_name), s.clone());
        ready(Ok(()))
    }
}

/// Execution states keyed by (tenant, job id); `save` replaces the whole record.
#[derive(Default)]
pub struct MemoryExecutionStore {
    states: Mutex<BTreeMap<Key, ExecutionState>>,
}

impl MemoryExecutionStore {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn state(&self, tenant: &TenantContext, job_id: &str) -> Option<ExecutionState> {
        self.states
            .lock()
            .unwrap()
            .get(&key(tenant, job_id))
            .cloned()
    }
}

impl ExecutionStore for MemoryExecutionStore {
    fn save<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        state: &'a ExecutionState,
    ) -> BoxFuture<'a, Result<()>> {
        self.states
            .lock()
            .unwrap()
            .insert(key(tenant, &state.job_id), state.clone());
        ready(Ok(()))
    }

    fn find<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ExecutionState>>> {
        ready(Ok(self.state(tenant, job_id)))
    }
}

/// Records every saved state in order; optionally fails after recording.
#[derive(Default)]
pub struct RecordingExecutionStore {
    saved: Mutex<Vec<ExecutionState>>,
    pub fail: std::sync::atomic::AtomicBool,
}

impl RecordingExecutionStore {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn saved(&self) -> Vec<ExecutionState> {
        self.saved.lock().unwrap().clone()
    }

    pub fn statuses(&self) -> Vec<ExecutionStatus> {
        self.saved().iter().filter_map(|s| s.status).collect()
    }
}

impl ExecutionStore for RecordingExecutionStore {
    fn save<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        state: &'a ExecutionState,
    ) -> BoxFuture<'a, Result<()>> {
        self.saved.lock().unwrap().push(state.clone());
        if self.fail.load(Ordering::SeqCst) {
            return ready(Err(EngineError::new(
                Category::Unavailable,
                msg::EXECUTION_STORE_UNAVAILABLE,
            )));
        }
        ready(Ok(()))
    }

    /// The last state recorded for `job_id` (tenant ignored: a recorder, not a store).
    fn find<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ExecutionState>>> {
        let saved = self.saved.lock().unwrap();
        ready(Ok(saved.iter().rev().find(|s| s.job_id == job_id).cloned()))
    }
}

/// A **test-only** protector: reversible, not secure. Ciphertext is `mem:` followed by the
/// plaintext bytes reversed; the key version is configurable. Counts calls; can fail.
pub struct MemoryCredentialProtector {
    pub key_version: Mutex<String>,
    pub fail: std::sync::atomic::AtomicBool,
    pub protect_calls: AtomicUsize,
}

impl Default for MemoryCredentialProtector {
    fn default() -> Self {
        MemoryCredentialProtector {
            key_version: Mutex::new("1".into()),
            fail: Default::default(),
            protect_calls: Default::default(),
        }
    }
}

impl MemoryCredentialProtector {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }
}

impl CredentialProtector for MemoryCredentialProtector {
    fn protect<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        plaintext: &'a [u8],
    ) -> BoxFuture<'a, Result<ProtectedCredential>> {
        self.protect_calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return ready(Err(EngineError::new(
                Category::Unavailable,
                "kms said: bad key for plaintext",
            )));
        }
        let mut ciphertext = b"mem:".to_vec();
        ciphertext.extend(plaintext.iter().rev());
        ready(Ok(ProtectedCredential {
            ciphertext,
            key_version: self.key_version.lock().unwrap().clone(),
        }))
    }

    fn reveal<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        c: &'a ProtectedCredential,
    ) -> BoxFuture<'a, Result<Secret>> {
        let out = c
            .ciphertext
            .strip_prefix(b"mem:")
            .map(|b| Secret::new(b.iter().rev().copied().collect::<Vec<u8>>()))
            .ok_or_else(|| {
                EngineError::new(Category::Unavailable, "credential cannot be revealed")
            });
        ready(out)
    }
}

/// Active executions as a set of (tenant, config name); can fail.
#[derive(Default)]
pub struct MemoryActiveChecker {
    active: Mutex<BTreeSet<Key>>,
    pub fail: std::sync::atomic::AtomicBool,
    pub calls: AtomicUsize,
}

impl MemoryActiveChecker {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn set_active(&self, tenant: &TenantContext, config_name: &str, active: bool) {
        let mut set = self.active.lock().unwrap();
        if active {
            set.insert(key(tenant, config_name));
        } else {
            set.remove(&key(tenant, config_name));
        }
    }
}

/// The error a failing [`MemoryActiveChecker`] returns (its text is deliberately unsafe,
/// so tests can prove the engine redacts it on the gate path).
pub const CHECKER_FAILURE_TEXT: &str = "jobs db at 10.0.0.7 refused password=hunter2";

impl ActiveExecutionChecker for MemoryActiveChecker {
    fn has_active_executions<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return ready(Err(EngineError::new(
                Category::Unavailable,
                CHECKER_FAILURE_TEXT,
            )));
        }
        ready(Ok(self.active.lock().unwrap().contains(&key(tenant, name))))
    }
}

/// `(span name, error category if the operation failed)`.
pub type SpanRecord = (&'static str, Option<Category>);
type SpanLog = Arc<Mutex<Vec<SpanRecord>>>;

/// One ended span as [`RecordingObservability::tree`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanNode {
    pub name: &'static str,
    /// What it was about ([`crate::ports::SpanSubject`]).
    pub config: Option<String>,
    pub table: Option<String>,
    /// The span entered on the thread that started it: its parent.
    pub parent: Option<&'static str>,
    pub outcome: Option<Category>,
}

thread_local! {
    /// The spans entered on this thread, innermost last.
    static ENTERED: std::cell::RefCell<Vec<&'static str>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records span names and their outcome categories, and the tree they form.
#[derive(Default)]
pub struct RecordingObservability {
    spans: SpanLog,
    nodes: Arc<Mutex<Vec<SpanNode>>>,
}

impl RecordingObservability {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// `(span name, error category if it failed)` in the order the spans ended.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.spans.lock().unwrap().clone()
    }

    /// Every ended span with its subject and parent, in the order they ended.
    pub fn tree(&self) -> Vec<SpanNode> {
        self.nodes.lock().unwrap().clone()
    }
}

struct RecordedSpan {
    node: SpanNode,
    sink: SpanLog,
    nodes: Arc<Mutex<Vec<SpanNode>>>,
}

/// Leaves the span it entered when dropped.
struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        ENTERED.with(|e| e.borrow_mut().pop());
    }
}

impl Span for RecordedSpan {
    fn end(self: Box<Self>, error: Option<&EngineError>) {
        let outcome = error.map(EngineError::category);
        self.sink.lock().unwrap().push((self.node.name, outcome));
        self.nodes.lock().unwrap().push(SpanNode {
            outcome,
            ..self.node
        });
    }

    fn enter(&self) -> Box<dyn crate::ports::Entered + '_> {
        ENTERED.with(|e| e.borrow_mut().push(self.node.name));
        Box::new(Leave)
    }
}

impl Observability for RecordingObservability {
    fn start_span(&self, operation: &'static str) -> Box<dyn Span> {
        self.start_span_about(operation, crate::ports::SpanSubject::default())
    }

    fn start_span_about(
        &self,
        operation: &'static str,
        about: crate::ports::SpanSubject<'_>,
    ) -> Box<dyn Span> {
        Box::new(RecordedSpan {
            node: SpanNode {
                name: operation,
                config: about.config.map(str::to_owned),
                table: about.table.map(str::to_owned),
                parent: ENTERED.with(|e| e.borrow().last().copied()),
                outcome: None,
            },
            sink: self.spans.clone(),
            nodes: self.nodes.clone(),
        })
    }
}
