//! Schema discovery (cache as an accelerator only) and schema validation (docs/engine.md,
//! "Schema discovery and validation").

use crate::Timestamp;
use crate::context::Context;
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::limits::Limits;
use crate::model::*;
use crate::tenant::TenantContext;

impl Engine {
    /// Cache-first discovery: a hit returns the cached snapshot; a miss or a failed cache
    /// read discovers live and writes through (a failed write is ignored).
    pub async fn discover_schema(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<SchemaSnapshot> {
        self.traced(
            "engine.schema.discover",
            self.discover(ctx, tenant, config_name, false),
        )
        .await
    }

    /// Always live; the snapshot replaces the cached one, so the jobs that follow see
    /// what this discovery saw.
    pub async fn discover_schema_fresh(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Result<SchemaSnapshot> {
        self.traced(
            "engine.schema.discover_fresh",
            self.discover(ctx, tenant, config_name, true),
        )
        .await
    }

    async fn discover(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
        skip_cache: bool,
    ) -> Result<SchemaSnapshot> {
        let store = self.scoped_store(tenant)?;
        let descriptor = self
            .require_connection(ctx, store, tenant, config_name)
            .await?;
        let read = if skip_cache {
            Read::Live
        } else {
            Read::CacheFirst
        };
        Ok(self.resolve_schema(ctx, tenant, &descriptor, read).await?.0)
    }

    /// The resolve core shared by discovery, validation and planning: the snapshot, and
    /// whether it came from the cache. A cached snapshot older than the engine's schema
    /// TTL (or without a capture time) is a miss; a live one is stamped and written
    /// through (a failed write is ignored).
    pub(crate) async fn resolve_schema(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        descriptor: &ConnectionDescriptor,
        read: Read,
    ) -> Result<(SchemaSnapshot, bool)> {
        let cache = self.inner.schema_cache.as_ref();
        if read == Read::CacheFirst
            && let Some(cache) = cache
            && let Ok(Some(hit)) = cache.get(ctx, tenant, &descriptor.config_name).await
            && self.fresh_enough(&hit)
        {
            return Ok((hit, true));
        }
        let mut connector = self.build_connector(ctx, tenant, descriptor).await?;
        let discovered = connector.discover_schema(ctx).await;
        let _ = connector.close(ctx).await;
        let mut snapshot = discovered.map_err(|e| {
            if matches!(e.category(), Category::Connect | Category::Validation) {
                e // "could not connect" / "not allowed" keep their connector-chosen, safe text
            } else {
                let retry = e.retry();
                EngineError::wrap(Category::Unavailable, msg::DISCOVER_FAILED, e).with_retry(retry)
            }
        })?;
        snapshot.config_name.clone_from(&descriptor.config_name);
        snapshot.captured_at = Some(Timestamp::now());
        if let Some(cache) = cache {
            let _ = cache.put(ctx, tenant, &snapshot).await;
        }
        Ok((snapshot, false))
    }

    /// Whether a cached snapshot is young enough to use.
    fn fresh_enough(&self, s: &SchemaSnapshot) -> bool {
        let Some(at) = s.captured_at else {
            return false;
        };
        let age = Timestamp::now().unix_nanos() - at.unix_nanos();
        age >= 0 && age < self.inner.schema_ttl.as_nanos() as i128
    }

    /// The cached schema of a connection, if the cache holds one; never discovers.
    pub async fn cached_schema(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Option<SchemaSnapshot> {
        let cache = self.inner.schema_cache.as_ref()?;
        cache
            .get(ctx, tenant, config_name)
            .await
            .ok()
            .flatten()
            .filter(|s| self.fresh_enough(s))
    }

    /// Checks that the requested tables, fields and filter fields exist, within the
    /// engine's configured limits. Source failures are errors, not report entries.
    pub async fn validate_schema(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        request: &ValidationRequest,
    ) -> Result<ValidationReport> {
        self.traced(
            "engine.schema.validate",
            self.validate_core(ctx, tenant, request, &self.inner.limits),
        )
        .await
    }

    pub(crate) async fn validate_core(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        request: &ValidationRequest,
        limits: &Limits,
    ) -> Result<ValidationReport> {
        let store = self.scoped_store(tenant)?;
        if request.datasources.is_empty() {
            return Err(EngineError::validation(msg::VALIDATE_NO_DATASOURCES));
        }
        check_blank_names(request)?;
        let ctx = if limits.timeout.is_zero() {
            ctx.clone()
        } else {
            ctx.with_timeout(limits.timeout)
        };

        let limit_failures = count_limit_failures(request, limits);
        if !limit_failures.is_empty() {
            return Ok(report(limit_failures));
        }

        let mut failures = Vec::new();
        for ds in &request.datasources {
            let Some(descriptor) = store.find(&ctx, tenant, &ds.config_name).await? else {
                failures.push(failure(
                    failure_type::DATASOURCE_NOT_FOUND,
                    &ds.config_name,
                    "",
                    "",
                    detail::NO_CONNECTION,
                ));
                continue;
            };
            let (snapshot, cached) = self
                .resolve_schema(&ctx, tenant, &descriptor, Read::CacheFirst)
                .await?;
            let mut found = missing_in(&snapshot, &descriptor, ds);
            if cached && !found.is_empty() {
                // A table or column created since the snapshot: discover once more before
                // calling it unknown.
                let (live, _) = self
                    .resolve_schema(&ctx, tenant, &descriptor, Read::Live)
                    .await?;
                found = missing_in(&live, &descriptor, ds);
            }
            failures.extend(found);
        }
        Ok(report(failures))
    }
}

/// How [`Engine::resolve_schema`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// A fresh enough cached snapshot, else live.
    CacheFirst,
    /// Live, written through to the cache.
    Live,
}

/// What of `ds` (tables, fields, filter fields) `snapshot` lacks, as report entries.
fn missing_in(
    snapshot: &SchemaSnapshot,
    descriptor: &ConnectionDescriptor,
    ds: &DatasourceValidation,
) -> Vec<ValidationFailure> {
    let mut failures = Vec::new();
    for t in &ds.tables {
        let Some(table) = snapshot.find_table(descriptor.datasource_type, &t.name) else {
            failures.push(failure(
                failure_type::TABLE_NOT_FOUND,
                &ds.config_name,
                &t.name,
                "",
                detail::TABLE_NOT_FOUND,
            ));
            continue;
        };
        for f in t.fields.iter().filter(|f| !field_matches(table, f)) {
            failures.push(failure(
                failure_type::FIELD_NOT_FOUND,
                &ds.config_name,
                &t.name,
                f,
                detail::FIELD_NOT_FOUND,
            ));
        }
        for f in t.filter_fields.iter().filter(|f| !field_matches(table, f)) {
            failures.push(failure(
                failure_type::INVALID_FILTER,
                &ds.config_name,
                &t.name,
                f,
                detail::FILTER_NOT_FOUND,
            ));
        }
    }
    failures
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn check_blank_names(request: &ValidationRequest) -> Result<()> {
    for ds in &request.datasources {
        if is_blank(&ds.config_name) {
            return Err(EngineError::validation(msg::VALIDATE_BLANK_CONFIG));
        }
        for t in &ds.tables {
            if is_blank(&t.name) {
                return Err(EngineError::validation(msg::VALIDATE_BLANK_TABLE));
            }
            if t.fields.iter().any(|f| is_blank(f)) {
                return Err(EngineError::validation(msg::VALIDATE_BLANK_FIELD));
            }
            if t.filter_fields.iter().any(|f| is_blank(f)) {
                return Err(EngineError::validation(msg::VALIDATE_BLANK_FILTER));
            }
        }
    }
    Ok(())
}

fn exceeds(count: usize, limit: i64) -> bool {
    limit > 0 && count as u64 > limit as u64
}

fn count_limit_failures(request: &ValidationRequest, limits: &Limits) -> Vec<ValidationFailure> {
    let mut out = Vec::new();
    let lim = failure_type::LIMIT_EXCEEDED;
    if exceeds(request.datasources.len(), limits.max_datasources) {
        out.push(failure(lim, "", "", "", detail::DATASOURCE_COUNT));
    }
    for ds in &request.datasources {
        if exceeds(ds.tables.len(), limits.max_tables_per_datasource) {
            out.push(failure(lim, &ds.config_name, "", "", detail::TABLE_COUNT));
        }
        for t in &ds.tables {
            if exceeds(t.fields.len(), limits.max_fields_per_table) {
                out.push(failure(
                    lim,
                    &ds.config_name,
                    &t.name,
                    "",
                    detail::FIELD_COUNT,
                ));
            }
            if exceeds(t.filter_fields.len(), limits.max_fields_per_table) {
                out.push(failure(
                    lim,
                    &ds.config_name,
                    &t.name,
                    "",
                    detail::FILTER_COUNT,
                ));
            }
        }
    }
    out
}

/// A name matches a field exactly, or as the parent object of a dotted field.
pub(crate) fn field_matches(table: &TableSnapshot, name: &str) -> bool {
    table.has_field(name)
}

fn failure(kind: &str, config: &str, table: &str, field: &str, detail: &str) -> ValidationFailure {
    ValidationFailure {
        failure_type: kind.into(),
        config_name: config.into(),
        table: table.into(),
        field: field.into(),
        detail: detail.into(),
    }
}

fn report(mut failures: Vec<ValidationFailure>) -> ValidationReport {
    // Stable sort by (configName, table, type, field).
    failures.sort_by(|a, b| {
        (&a.config_name, &a.table, &a.failure_type, &a.field).cmp(&(
            &b.config_name,
            &b.table,
            &b.failure_type,
            &b.field,
        ))
    });
    ValidationReport {
        valid: failures.is_empty(),
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_object_matching() {
        let t = TableSnapshot {
            name: "t".into(),
            fields: vec![
                "natural_person.mother_name".into(),
                "address.city".into(),
                "id".into(),
            ],
            ..Default::default()
        };
        for ok in [
            "natural_person",
            "address",
            "natural_person.mother_name",
            "id",
        ] {
            assert!(field_matches(&t, ok), "{ok}");
        }
        for bad in [
            "natural",
            "natural_person.",
            "i",
            "address.cit",
            "mother_name",
        ] {
            assert!(!field_matches(&t, bad), "{bad}");
        }
    }
}
