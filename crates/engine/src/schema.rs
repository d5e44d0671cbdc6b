//! Schema discovery (cache as an accelerator only) and schema validation (docs/engine.md,
//! "Schema discovery and validation").

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

    /// Always live; neither reads nor writes the cache.
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
            .require_connection(ctx, store, tenant, config_name, msg::CONNECTION_NOT_FOUND)
            .await?;
        self.resolve_schema(ctx, tenant, &descriptor, skip_cache)
            .await
    }

    /// The resolve core shared by discovery, validation and planning.
    pub(crate) async fn resolve_schema(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        descriptor: &ConnectionDescriptor,
        skip_cache: bool,
    ) -> Result<SchemaSnapshot> {
        let cache = if skip_cache {
            None
        } else {
            self.inner.schema_cache.as_ref()
        };
        if let Some(cache) = cache
            && let Ok(Some(hit)) = cache.get(ctx, tenant, &descriptor.config_name).await
        {
            return Ok(hit);
        }
        let mut connector = self.build_connector(ctx, tenant, descriptor).await?;
        let discovered = connector.discover_schema(ctx).await;
        let _ = connector.close(ctx).await;
        let mut snapshot = discovered.map_err(|e| {
            if matches!(e.category(), Category::Connect | Category::Validation) {
                e // "could not connect" / "not allowed" keep their connector-chosen, safe text
            } else {
                EngineError::new(Category::Unavailable, msg::DISCOVER_FAILED)
            }
        })?;
        snapshot.config_name.clone_from(&descriptor.config_name);
        if let Some(cache) = cache {
            let _ = cache.put(ctx, tenant, &snapshot).await;
        }
        Ok(snapshot)
    }

    /// The cached schema of a connection, if the cache holds one; never discovers.
    pub async fn cached_schema(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        config_name: &str,
    ) -> Option<SchemaSnapshot> {
        let cache = self.inner.schema_cache.as_ref()?;
        cache.get(ctx, tenant, config_name).await.ok().flatten()
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
            let snapshot = self
                .resolve_schema(&ctx, tenant, &descriptor, false)
                .await?;
            for t in &ds.tables {
                let Some(table) = snapshot.find_table(&descriptor.datasource_type, &t.name) else {
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
        }
        Ok(report(failures))
    }
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
