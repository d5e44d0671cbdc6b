//! The engine's [`ResultSink`] for every host: NDJSON from the engine is sealed with the
//! v2 streaming format and streamed to an [`ObjectStore`], in constant memory.
//!
//! Object keys follow the reference layout (docs/results.md, "Result path"): `external-data/<jobId>`
//! for the single-tenant tenant `default`, `<tenantId>/external-data/<jobId>` otherwise,
//! with the extension naming the format (`.ndjson.v2` sealed frames; `.json` for the
//! reference-compatible v1 object).

use std::sync::Arc;

use fetcher_crypto::{KeyRing, Sealer};
use fetcher_engine::ports::{ResultObject, ResultSink, ResultStreamWriter};
use fetcher_engine::{
    AppliedBy, BoxFuture, Category, Context, EngineError, ResultIntegrity, ResultProtection,
    ResultReference, TenantContext,
};

use crate::error::ServiceError;
use crate::model::ResultFormat;
use crate::ports::{KeyProvider, ObjectStore, ObjectWriter};

/// The single-tenant tenant id, whose objects carry no tenant prefix.
pub const SINGLE_TENANT: &str = fetcher_engine::tenant::DEFAULT_TENANT;

/// The object key of a job's result.
pub fn result_path(tenant: &str, job_id: &str, format: ResultFormat) -> String {
    let ext = match format {
        ResultFormat::V2 => "ndjson.v2",
        ResultFormat::V1 => "json",
        ResultFormat::Parquet => "manifest.json.v2",
    };
    format!("{}{job_id}.{ext}", result_prefix(tenant))
}

/// The object key of a multi-object result's `index`th part: beside the manifest, in a
/// folder named by the job (`external-data/<jobId>/part-00000.parquet.v2`). Parts are
/// named by position, never by table, so no datasource name reaches a key. A part
/// written by a claim that took the job (or range) over carries that claim
/// (`part-00003.c7.ndjson.v2`): the run whose lease ran out and the one that took over
/// never write the same key.
pub fn part_path(
    tenant: &str,
    job_id: &str,
    index: usize,
    extension: &str,
    claim: Option<u32>,
) -> String {
    let owner = claim.map(|c| format!(".c{c}")).unwrap_or_default();
    format!(
        "{}{job_id}/part-{index:05}{owner}.{extension}.v2",
        result_prefix(tenant)
    )
}

/// The key of a job's manifest; a takeover's carries its claim
/// (`<jobId>.c7.manifest.json.v2`), so a replaced run that reaches the end of the job
/// never writes over the result the job records.
pub fn manifest_path(tenant: &str, job_id: &str, claim: Option<u32>) -> String {
    match claim {
        None => result_path(tenant, job_id, ResultFormat::Parquet),
        Some(c) => format!("{}{job_id}.c{c}.manifest.json.v2", result_prefix(tenant)),
    }
}

/// The keys the superseded claims `superseded` would have given the part at `path`
/// (written by a takeover claim): the plain name, and each claim's. What the claim that
/// took over removes when it ends its run: a dead run's leftovers.
pub fn superseded_paths(path: &str, superseded: &[u32]) -> Vec<String> {
    let Some(at) = path.rfind("/part-") else {
        return Vec::new();
    };
    let (dir, name) = path.split_at(at + "/part-".len());
    let digits = name.bytes().take_while(u8::is_ascii_digit).count();
    let (number, rest) = name.split_at(digits);
    // `.c<claim>` (this run's), then `.<extension>.v2`.
    let rest = match rest.strip_prefix(".c") {
        Some(r) => &r[r.find('.').unwrap_or(r.len())..],
        None => rest,
    };
    if digits == 0 || !rest.starts_with('.') {
        return Vec::new();
    }
    let mut out = vec![format!("{dir}{number}{rest}")];
    out.extend(
        superseded
            .iter()
            .map(|c| format!("{dir}{number}.c{c}{rest}")),
    );
    out.retain(|p| p != path);
    out
}

fn result_prefix(tenant: &str) -> String {
    if tenant == SINGLE_TENANT || tenant.is_empty() {
        "external-data/".to_owned()
    } else {
        format!("{tenant}/external-data/")
    }
}

fn persist_failed(e: ServiceError) -> EngineError {
    EngineError::wrap(
        Category::Unavailable,
        "failed to persist extraction result",
        e,
    )
}

/// Seals and stores results.
pub struct SealedResultSink {
    objects: Arc<dyn ObjectStore>,
    keys: Arc<dyn KeyProvider>,
}

impl SealedResultSink {
    pub fn new(objects: Arc<dyn ObjectStore>, keys: Arc<dyn KeyProvider>) -> Self {
        SealedResultSink { objects, keys }
    }
}

/// The typed reference of a sealed result: `integrity.signature` is the HMAC, the
/// protection names the key version, `stored_bytes` the sealed size. The plaintext
/// digest is not computed here: the engine fills it in from the stream it wrote (one
/// SHA-256 pass), and the v1 path from its direct result.
pub(crate) fn sealed_reference(
    path: String,
    ring: &KeyRing,
    hmac: String,
    plaintext: u64,
    stored: u64,
) -> ResultReference {
    ResultReference {
        path,
        format: fetcher_engine::StoredFormat::Json,
        size_bytes: plaintext as i64,
        stored_bytes: stored as i64,
        integrity: Some(ResultIntegrity {
            algorithm: "HMAC-SHA256".into(),
            signature: hmac,
            digest: String::new(),
        }),
        protection: Some(ResultProtection {
            encrypted: true,
            key_version: ring.current_version().to_owned(),
            mode: "AES-256-GCM".into(),
            applied_by: AppliedBy::Adapter,
        }),
        ..Default::default()
    }
}

struct SealingWriter {
    path: String,
    ring: Arc<KeyRing>,
    sealer: Option<Sealer>,
    object: Option<Box<dyn ObjectWriter>>,
    out: Vec<u8>,
    stored: u64,
}

impl SealingWriter {
    async fn push_sealed(&mut self) -> Result<(), EngineError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let object = self.object.as_mut().expect("open until close/abort");
        object.write(&self.out).await.map_err(persist_failed)?;
        self.stored += self.out.len() as u64;
        self.out.clear();
        Ok(())
    }
}

impl ResultStreamWriter for SealingWriter {
    fn write<'a>(
        &'a mut self,
        _ctx: &'a Context,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let sealer = self.sealer.as_mut().expect("open until close/abort");
            sealer
                .update_into(bytes, &mut self.out)
                .map_err(|e| persist_failed(e.into()))?;
            self.push_sealed().await
        })
    }

    fn close(
        mut self: Box<Self>,
        _ctx: &Context,
    ) -> BoxFuture<'_, fetcher_engine::Result<ResultReference>> {
        let span = tracing::info_span!("result.store", otel.name = "result.store");
        Box::pin(tracing::Instrument::instrument(
            async move {
                let sealer = self.sealer.take().expect("open until close/abort");
                let summary = sealer
                    .finish_into(&mut self.out)
                    .map_err(|e| persist_failed(e.into()))?;
                self.push_sealed().await?;
                let object = self.object.take().expect("open until close/abort");
                let stored = object.finish().await.map_err(persist_failed)?;
                Ok(sealed_reference(
                    self.path.clone(),
                    &self.ring,
                    summary.hmac,
                    summary.plaintext_len,
                    stored,
                ))
            },
            span,
        ))
    }

    fn abort(mut self: Box<Self>, _ctx: &Context) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(object) = self.object.take() {
                object.abort().await;
            }
        })
    }
}

impl SealedResultSink {
    /// A v2 sealing writer for `path`; every object of a job is bound to the job id.
    async fn open_sealed(
        &self,
        job_id: &str,
        path: String,
    ) -> fetcher_engine::Result<Box<dyn ResultStreamWriter>> {
        let ring = self.keys.key_ring().await.map_err(persist_failed)?;
        let sealer = Sealer::new(&ring, job_id).map_err(|e| persist_failed(e.into()))?;
        let object = self.objects.put(&path).await.map_err(persist_failed)?;
        Ok(Box::new(SealingWriter {
            path,
            ring,
            sealer: Some(sealer),
            object: Some(object),
            out: Vec::with_capacity(128 * 1024),
            stored: 0,
        }))
    }
}

impl ResultSink for SealedResultSink {
    fn open_stream<'a>(
        &'a self,
        _ctx: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Box<dyn ResultStreamWriter>>> {
        let path = result_path(&tenant.tenant_id, job_id, ResultFormat::V2);
        Box::pin(self.open_sealed(job_id, path))
    }

    /// Parts and the manifest are sealed v2 objects like any result (docs/results.md,
    /// "Parquet results").
    fn open_object<'a>(
        &'a self,
        _ctx: &'a Context,
        tenant: &'a TenantContext,
        job_id: &'a str,
        object: ResultObject<'a>,
    ) -> BoxFuture<'a, fetcher_engine::Result<Box<dyn ResultStreamWriter>>> {
        let path = match object {
            ResultObject::Part {
                index,
                extension,
                claim,
            } => part_path(&tenant.tenant_id, job_id, index, extension, claim),
            ResultObject::Manifest { claim } => manifest_path(&tenant.tenant_id, job_id, claim),
        };
        Box::pin(self.open_sealed(job_id, path))
    }

    fn discard<'a>(
        &'a self,
        _ctx: &'a Context,
        _tenant: &'a TenantContext,
        paths: &'a [String],
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for path in paths {
                if self.objects.delete(path).await.is_err() {
                    tracing::warn!("a part of a failed multi-object result could not be removed");
                }
            }
        })
    }

    /// Whole payloads are sealed in the reference's v1 format.
    fn persist<'a>(
        &'a self,
        _ctx: &'a Context,
        tenant: &'a TenantContext,
        payload: &'a [u8],
    ) -> BoxFuture<'a, fetcher_engine::Result<ResultReference>> {
        Box::pin(async move {
            let ring = self.keys.key_ring().await.map_err(persist_failed)?;
            let id = uuid::Uuid::now_v7().to_string();
            store_v1(
                self.objects.as_ref(),
                &ring,
                &result_path(&tenant.tenant_id, &id, ResultFormat::V1),
                payload,
            )
            .await
            .map_err(persist_failed)
        })
    }
}

/// Seals `payload` (the indented JSON document) in the v1 format and stores it at `path`.
pub async fn store_v1(
    objects: &dyn ObjectStore,
    ring: &KeyRing,
    path: &str,
    payload: &[u8],
) -> crate::Result<ResultReference> {
    let sealed = fetcher_crypto::seal_v1(ring.current(), payload)?;
    let mut w = objects.put(path).await?;
    let text = sealed.object.as_bytes();
    if let Err(e) = w.write(text).await {
        w.abort().await;
        return Err(e);
    }
    let stored = w.finish().await?;
    Ok(sealed_reference(
        path.to_owned(),
        ring,
        sealed.hmac.clone(),
        payload.len() as u64,
        stored,
    ))
}

#[cfg(test)]
mod claim_key_tests {
    use super::*;

    #[test]
    fn a_takeovers_part_names_the_keys_of_the_claims_it_replaced() {
        let plain = part_path("acme", "j", 3, "ndjson", None);
        assert_eq!(plain, "acme/external-data/j/part-00003.ndjson.v2");
        let mine = part_path("acme", "j", 3, "ndjson", Some(7));
        assert_eq!(mine, "acme/external-data/j/part-00003.c7.ndjson.v2");
        assert_eq!(
            superseded_paths(&mine, &[5, 6]),
            [
                "acme/external-data/j/part-00003.ndjson.v2",
                "acme/external-data/j/part-00003.c5.ndjson.v2",
                "acme/external-data/j/part-00003.c6.ndjson.v2",
            ]
        );
        assert!(superseded_paths("acme/external-data/j.ndjson.v2", &[1]).is_empty());
    }
}
