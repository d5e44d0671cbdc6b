//! The request's shape, checked before any datasource is looked up (the structure of
//! `mappedFields`, the per-table limits), and the rows a checked job will read.

use std::collections::BTreeMap;

use super::{JobError, MAX_DATASOURCES};
use crate::dedup::{Filters, MappedFields};

/// The rows a job will read, from its datasources' catalog estimates (docs/api.md,
/// "Progress"): the sum over its tables when every one is read whole (no filter, no
/// incremental read) and its schema, cached or just discovered, has an estimate; else
/// `None`, since a filtered or incremental read's share of a table is unknown.
pub(super) fn rows_estimate(
    mapped: &MappedFields,
    filters: &Filters,
    incremental: &crate::incremental::Incremental,
    schemas: &BTreeMap<
        String,
        (
            fetcher_engine::DatasourceType,
            fetcher_engine::SchemaSnapshot,
        ),
    >,
) -> Option<u64> {
    let mut total = 0u64;
    for (config, tables) in mapped {
        let (datasource_type, schema) = schemas.get(config)?;
        for table in tables.keys() {
            let filtered = filters
                .get(config)
                .and_then(|f| f.get(table))
                .is_some_and(|f| !f.is_empty());
            let incremental = incremental
                .get(config)
                .is_some_and(|i| i.contains_key(table));
            if filtered || incremental {
                return None;
            }
            let estimate = schema.find_table(*datasource_type, table)?.row_estimate?;
            total = total.saturating_add(u64::try_from(estimate).ok()?);
        }
    }
    Some(total)
}

pub(super) fn validate_structure(mapped: &MappedFields) -> Result<(), JobError> {
    if mapped.is_empty() {
        return Err(JobError::InvalidDataRequest(
            "mappedFields cannot be empty".into(),
        ));
    }
    if mapped
        .values()
        .any(|tables| !tables.values().any(|fields| !fields.is_empty()))
    {
        return Err(JobError::InvalidDataRequest(
            "datasource must have at least one table with fields".into(),
        ));
    }
    // No silent widening: a table named with no fields is an error, never "every column".
    for (ds, tables) in mapped {
        if let Some((table, _)) = tables.iter().find(|(_, fields)| fields.is_empty()) {
            return Err(JobError::InvalidDataRequest(format!(
                "table '{table}' of datasource '{ds}' has no fields: name at least one"
            )));
        }
    }
    if mapped.len() > MAX_DATASOURCES {
        return Err(JobError::InvalidDataRequest(format!(
            "Maximum {MAX_DATASOURCES} datasources allowed per job, got {}",
            mapped.len()
        )));
    }
    Ok(())
}

/// The engine's per-table limits (docs/engine.md, "Limits"), checked when the job is
/// created as validate-schema checks them (400 `FET-1061`), so a job the run would refuse
/// is never accepted: at most 20 tables per datasource, 50 fields and 50 filtered fields
/// per table.
pub(super) fn within_limits(mapped: &MappedFields, filters: &Filters) -> Result<(), JobError> {
    use fetcher_engine::limits::{DEFAULT_MAX_FIELDS_PER_TABLE, DEFAULT_MAX_TABLES_PER_DATASOURCE};
    let (max_tables, max_fields) = (
        DEFAULT_MAX_TABLES_PER_DATASOURCE as usize,
        DEFAULT_MAX_FIELDS_PER_TABLE as usize,
    );
    for (ds, tables) in mapped {
        if tables.len() > max_tables {
            return Err(JobError::ValidationLimit(format!(
                "maximum {max_tables} tables allowed per datasource, got {} for '{ds}'",
                tables.len()
            )));
        }
        for (table, fields) in tables {
            if fields.len() > max_fields {
                return Err(JobError::ValidationLimit(format!(
                    "maximum {max_fields} fields allowed per table, got {} for '{ds}.{table}'",
                    fields.len()
                )));
            }
        }
    }
    for (ds, tables) in filters {
        for (table, conditions) in tables {
            if conditions.len() > max_fields {
                return Err(JobError::ValidationLimit(format!(
                    "maximum {max_fields} filtered fields allowed per table, got {} for '{ds}.{table}'",
                    conditions.len()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_checks_run_in_order() {
        let m: MappedFields = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(
            matches!(validate_structure(&m), Err(JobError::InvalidDataRequest(s)) if s == "mappedFields cannot be empty")
        );
        let mut many: MappedFields = (0..11)
            .map(|i| {
                (
                    format!("ds{i}"),
                    [("t".to_string(), vec!["f".to_string()])].into(),
                )
            })
            .collect();
        assert!(
            matches!(validate_structure(&many), Err(JobError::InvalidDataRequest(s)) if s == "Maximum 10 datasources allowed per job, got 11")
        );
        many.insert("empty".into(), [("t".to_string(), vec![])].into());
        assert!(
            matches!(validate_structure(&many), Err(JobError::InvalidDataRequest(s)) if s == "datasource must have at least one table with fields")
        );
    }
}
