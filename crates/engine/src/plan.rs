//! Extraction planning (docs/engine.md, "Planning"): resolve and validate, never query data.

use std::collections::BTreeMap;

use crate::context::Context;
use crate::engine::Engine;
use crate::error::{Category, EngineError, Result, msg};
use crate::model::*;
use crate::tenant::TenantContext;

impl Engine {
    /// Validates `request` against the live (cache-first) schemas within the effective
    /// limits and returns a deterministic plan: one step per config name, in ascending
    /// config-name order, tables and fields sorted.
    pub async fn plan_extraction(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        request: &ExtractionRequest,
    ) -> Result<ExtractionPlan> {
        self.traced("engine.extraction.plan", self.plan(ctx, tenant, request))
            .await
    }

    async fn plan(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        request: &ExtractionRequest,
    ) -> Result<ExtractionPlan> {
        let store = self.scoped_store(tenant)?;
        if request.mapped_fields.is_empty() {
            return Err(EngineError::validation(msg::PLAN_NO_FIELDS));
        }
        // BTreeMap iteration is the sorted config order.
        if request.mapped_fields.values().any(BTreeMap::is_empty) {
            return Err(EngineError::validation(msg::PLAN_NO_TABLES));
        }
        let limits = self.inner.limits.effective(request.overrides.as_ref())?;

        // Scope-consistency probe: decide scope before limits, with a bounded number of
        // lookups (ceiling + 1) so a huge request cannot fan out store reads.
        let names: Vec<&String> = request.mapped_fields.keys().collect();
        let over = limits.max_datasources > 0 && names.len() as u64 > limits.max_datasources as u64;
        let budget = if over {
            limits.max_datasources as usize + 1
        } else {
            names.len()
        };
        for name in names.iter().take(budget) {
            if name.trim().is_empty() {
                return Err(EngineError::validation(msg::PLAN_BLANK_CONFIG));
            }
            self.require_connection(ctx, store, tenant, name)
                .await
                .map_err(|e| match e.category() {
                    // The name is the caller's own input: say which one is unknown.
                    Category::NotFound => EngineError::new(
                        Category::NotFound,
                        format!("{}: unknown datasource '{name}'", msg::UNKNOWN_DATASOURCE),
                    ),
                    _ => e,
                })?;
        }
        if over {
            return Err(EngineError::validation(msg::DATASOURCE_COUNT));
        }

        check_filter_targets(request)?;
        check_incremental_targets(request)?;
        let filters = &request.filters;
        let no_filters = BTreeMap::new();
        let no_incremental = BTreeMap::new();
        // An incremental table's cursor and key are always read (its watermark is made of
        // them): added to an explicit field list, validated like the other fields.
        let fields_of = |config: &str, table: &str, fields: &[String]| -> Vec<String> {
            let mut out = sorted(fields);
            if let Some(inc) = request.incremental.get(config).and_then(|t| t.get(table))
                && !fields.is_empty()
            {
                for c in inc.spec.columns() {
                    if !out.iter().any(|f| f == c) {
                        out.push(c.to_owned());
                    }
                }
                out.sort();
            }
            out
        };
        let validation = ValidationRequest {
            datasources: request
                .mapped_fields
                .iter()
                .map(|(config, selection)| {
                    let filters = filters.get(config).unwrap_or(&no_filters);
                    DatasourceValidation {
                        config_name: config.clone(),
                        tables: selection
                            .iter()
                            .map(|(table, fields)| TableValidation {
                                name: table.clone(),
                                fields: fields_of(config, table, fields),
                                filter_fields: filters
                                    .get(table)
                                    .map(|f| f.keys().cloned().collect())
                                    .unwrap_or_default(),
                            })
                            .collect(),
                    }
                })
                .collect(),
        };
        let report = self
            .traced(
                "engine.schema.validate",
                self.validate_core(ctx, tenant, &validation, &limits),
            )
            .await?;
        if !report.valid {
            let unknown = report
                .failures
                .iter()
                .any(|f| f.failure_type == failure_type::DATASOURCE_NOT_FOUND);
            // The names are the caller's own input, not driver text: say which are wrong.
            let what = describe_failures(&report.failures);
            return Err(if unknown {
                EngineError::new(
                    Category::NotFound,
                    format!("{}: {what}", msg::UNKNOWN_DATASOURCE),
                )
            } else {
                EngineError::new(
                    Category::Validation,
                    format!("{}: {what}", msg::PLAN_SCHEMA_INVALID),
                )
            });
        }

        let steps = request
            .mapped_fields
            .iter()
            .enumerate()
            .map(|(ordinal, (config, selection))| PlanStep {
                ordinal,
                config_name: config.clone(),
                tables: selection.keys().cloned().collect(),
                fields: selection
                    .iter()
                    .filter(|(_, f)| !f.is_empty())
                    .map(|(t, f)| (t.clone(), fields_of(config, t, f)))
                    .collect(),
                filters: filters.get(config).cloned().unwrap_or_default(),
                incremental: request
                    .incremental
                    .get(config)
                    .unwrap_or(&no_incremental)
                    .clone(),
                resume_after: BTreeMap::new(),
                positions: false,
                key_ranges: BTreeMap::new(),
            })
            .collect();
        Ok(ExtractionPlan {
            tenant_id: tenant.tenant_id.clone(),
            request_id: tenant.request_id.clone(),
            steps,
            metadata: request.metadata.clone(),
            limits,
            mode: ExecutionMode::Auto,
        })
    }
}

/// `unknown table 'ds.orders'; unknown field 'ds.orders.amount'; …` (sorted, as the report).
fn describe_failures(failures: &[crate::ValidationFailure]) -> String {
    failures
        .iter()
        .map(|f| {
            let path = [&f.config_name, &f.table, &f.field]
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(".");
            let what = match f.failure_type.as_str() {
                failure_type::DATASOURCE_NOT_FOUND => "unknown datasource",
                failure_type::TABLE_NOT_FOUND => "unknown table",
                failure_type::FIELD_NOT_FOUND => "unknown field",
                failure_type::INVALID_FILTER => "unknown filter field",
                _ => "over a limit:",
            };
            if f.failure_type == failure_type::LIMIT_EXCEEDED {
                format!("{what} {}", f.detail)
            } else {
                format!("{what} '{path}'")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// Every incremental read must target a selected table and name a cursor (a log read:
/// its key and slot); a watermark it starts after must be on the columns it names.
fn check_incremental_targets(request: &ExtractionRequest) -> Result<()> {
    for (config, tables) in &request.incremental {
        for (table, read) in tables {
            let selected = request
                .mapped_fields
                .get(config)
                .is_some_and(|s| s.contains_key(table));
            // A log read names no cursor, but its key and its sync's slot.
            let named = if read.spec.is_log() {
                read.spec.cursor.is_empty() && !read.spec.key.is_empty() && read.slot.is_some()
            } else {
                !read.spec.cursor.trim().is_empty()
            } && read.spec.key.iter().all(|k| !k.trim().is_empty());
            let consistent = read.after.as_ref().is_none_or(|w| {
                w.matches(&read.spec)
                    && if read.spec.is_log() {
                        w.log.as_ref().is_some_and(|l| l.value().is_some())
                    } else {
                        w.values.len() == 1 + read.spec.key.len()
                    }
            });
            if !selected || !named || !consistent {
                return Err(EngineError::validation(msg::PLAN_INCREMENTAL_INVALID));
            }
        }
    }
    Ok(())
}

/// Every filter must target a selected table of a selected datasource: a filter that
/// cannot apply fails the request, never widens it. (The reference passed such filters to
/// connectors unvalidated.)
fn check_filter_targets(request: &ExtractionRequest) -> Result<()> {
    for (config, tables) in &request.filters {
        let selected = match request.mapped_fields.get(config) {
            Some(selection) => tables.keys().all(|t| selection.contains_key(t)),
            None => tables.is_empty(),
        };
        if !selected {
            return Err(EngineError::validation(msg::PLAN_SCHEMA_INVALID));
        }
    }
    Ok(())
}
