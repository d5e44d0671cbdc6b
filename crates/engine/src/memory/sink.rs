use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::context::Context;
use crate::error::{Category, EngineError, Result, msg};
use crate::model::*;
use crate::ports::*;
use crate::tenant::TenantContext;

/// Failure injection and reporting switches of a [`MemoryResultSink`].
#[derive(Debug, Clone, Default)]
pub struct SinkSwitches {
    pub fail_open: bool,
    pub fail_persist: bool,
    /// Fail the write with this (1-based) index; the size is recorded first.
    pub fail_write_at: Option<usize>,
    pub fail_close: bool,
    /// Report no integrity, so the engine stamps its own digest.
    pub omit_integrity: bool,
    /// Report `sizeBytes = 0`, so the engine fills in its own count.
    pub omit_size: bool,
    /// Protection to report on the reference.
    pub protection: Option<ResultProtection>,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Vec<u8>>,
    write_sizes: Vec<usize>,
    seq: u64,
}

/// Stores results under `memory://<tenant>/<sha256>-<seq>`.
#[derive(Default)]
pub struct MemoryResultSink {
    pub switches: Mutex<SinkSwitches>,
    state: Arc<Mutex<State>>,
    pub persist_calls: AtomicUsize,
    pub opens: AtomicUsize,
    pub closes: Arc<AtomicUsize>,
    pub aborts: Arc<AtomicUsize>,
    /// When set, the first write of each stream waits for a permit (back-pressure tests).
    pub gate: Mutex<Option<Arc<Semaphore>>>,
}

impl MemoryResultSink {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn with_switches(switches: SinkSwitches) -> Arc<Self> {
        Arc::new(MemoryResultSink {
            switches: Mutex::new(switches),
            ..Default::default()
        })
    }

    /// A copy of a stored object.
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// Finalised objects only.
    pub fn stored_count(&self) -> usize {
        self.state.lock().unwrap().objects.len()
    }

    pub fn write_sizes(&self) -> Vec<usize> {
        self.state.lock().unwrap().write_sizes.clone()
    }

    fn store(
        state: &Mutex<State>,
        switches: &SinkSwitches,
        tenant: &TenantContext,
        payload: Vec<u8>,
    ) -> ResultReference {
        let digest = crate::execute::hex(&Sha256::digest(&payload));
        let mut st = state.lock().unwrap();
        st.seq += 1;
        let path = format!("memory://{}/{}-{}", tenant.tenant_id, digest, st.seq);
        let size = payload.len() as i64;
        st.objects.insert(path.clone(), payload);
        ResultReference {
            path,
            format: StoredFormat::Json,
            size_bytes: if switches.omit_size { 0 } else { size },
            integrity: (!switches.omit_integrity).then(|| ResultIntegrity::sha256(digest)),
            protection: switches.protection.clone(),
            ..Default::default()
        }
    }
}

fn unavailable() -> EngineError {
    EngineError::new(Category::Unavailable, msg::SINK_UNAVAILABLE)
}

struct MemoryWriter {
    tenant: TenantContext,
    buf: Vec<u8>,
    writes: usize,
    switches: SinkSwitches,
    state: Arc<Mutex<State>>,
    closes: Arc<AtomicUsize>,
    aborts: Arc<AtomicUsize>,
    gate: Option<Arc<Semaphore>>,
}

impl ResultStreamWriter for MemoryWriter {
    fn write<'a>(&'a mut self, ctx: &'a Context, bytes: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if self.writes == 0
                && let Some(gate) = self.gate.take()
            {
                match ctx.run(gate.acquire_owned()).await {
                    Ok(Ok(permit)) => permit.forget(),
                    Ok(Err(_)) => return Err(unavailable()),
                    Err(d) => return Err(d.into()),
                }
            }
            self.writes += 1;
            self.state.lock().unwrap().write_sizes.push(bytes.len());
            if self.switches.fail_write_at == Some(self.writes) {
                return Err(EngineError::new(
                    Category::Unavailable,
                    "disk full at /var/secret/path",
                ));
            }
            self.buf.extend_from_slice(bytes);
            Ok(())
        })
    }

    fn close(self: Box<Self>, _ctx: &Context) -> BoxFuture<'_, Result<ResultReference>> {
        self.closes.fetch_add(1, Ordering::SeqCst);
        let out = if self.switches.fail_close {
            Err(EngineError::new(
                Category::Unavailable,
                "bucket policy denied for key AKIA...",
            ))
        } else {
            let this = *self;
            Ok(MemoryResultSink::store(
                &this.state,
                &this.switches,
                &this.tenant,
                this.buf,
            ))
        };
        Box::pin(std::future::ready(out))
    }

    fn abort(self: Box<Self>, _ctx: &Context) -> BoxFuture<'_, ()> {
        self.aborts.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
}

impl ResultSink for MemoryResultSink {
    fn open_stream<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        _job: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn ResultStreamWriter>>> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        let switches = self.switches.lock().unwrap().clone();
        let out: Result<Box<dyn ResultStreamWriter>> = if switches.fail_open {
            Err(unavailable())
        } else {
            Ok(Box::new(MemoryWriter {
                tenant: tenant.clone(),
                buf: Vec::new(),
                writes: 0,
                switches,
                state: self.state.clone(),
                closes: self.closes.clone(),
                aborts: self.aborts.clone(),
                gate: self.gate.lock().unwrap().clone(),
            }))
        };
        Box::pin(std::future::ready(out))
    }

    fn persist<'a>(
        &'a self,
        _: &'a Context,
        tenant: &'a TenantContext,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<ResultReference>> {
        self.persist_calls.fetch_add(1, Ordering::SeqCst);
        let switches = self.switches.lock().unwrap().clone();
        let out = if switches.fail_persist {
            Err(unavailable())
        } else {
            Ok(Self::store(
                &self.state,
                &switches,
                tenant,
                payload.to_vec(),
            ))
        };
        Box::pin(std::future::ready(out))
    }

    /// Parts and manifests are streams like any other here (the path is by digest).
    fn open_object<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
        _object: ResultObject<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ResultStreamWriter>>> {
        self.open_stream(ctx, tenant, job_id)
    }

    fn discard<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        paths: &'a [String],
    ) -> BoxFuture<'a, ()> {
        let mut st = self.state.lock().unwrap();
        for p in paths {
            st.objects.remove(p);
        }
        Box::pin(std::future::ready(()))
    }
}
