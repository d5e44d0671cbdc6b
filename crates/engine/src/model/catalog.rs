//! What a datasource holds, as discovery reports it (tables and their fields, table-name
//! normalisation per datasource type), and a mapping validated against it (docs/engine.md,
//! "Schema discovery and validation").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::datasource::DatasourceType;
use crate::time::Timestamp;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableSnapshot {
    /// Qualified name, e.g. `schema.table`.
    pub name: String,
    /// Field names; nested document fields are dotted (`address.city`).
    pub fields: Vec<String>,
    /// The primary key's columns in key order (empty: none, or a connector that does not
    /// say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_key: Vec<String>,
    /// Per field, its catalog type and what an incremental read may use it for (empty: a
    /// connector that does not say).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, FieldType>,
    /// The catalog's estimate of the table's rows, when the datasource keeps one (a
    /// table never analysed has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_estimate: Option<i64>,
    /// A view (or materialised view): read like a table, but it has no primary key, so
    /// no key ranges and no reads from the log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub view: bool,
}

/// A field's catalog type, and whether it can order an incremental read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldType {
    /// The database's name for it (`timestamp with time zone`, `bigint`, `jsonb`).
    pub name: String,
    /// May be an incremental cursor: integers, numeric, timestamps, dates, text.
    #[serde(default)]
    pub cursor: bool,
    /// May be part of an incremental key: comparable and orderable (also UUIDs).
    #[serde(default)]
    pub key: bool,
    /// The lookback a cursor of this type takes (none: text, or not a cursor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookback: Option<crate::LookbackKind>,
    /// Whether the column may hold NULL (`None`: the connector does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nullable: Option<bool>,
    /// What a filter value on this column must be, so a job's filters are checked when
    /// it is created (`None`: the connector does not say; nothing is checked early).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterKind>,
}

/// The kind of value a filter on a column takes (docs/filters.md, "Values"), as a SQL
/// connector classifies the column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FilterKind {
    /// A JSON number or a decimal string (integers, decimals, floats).
    Number,
    Bool,
    Text,
    /// A UUID string.
    Uuid,
    /// A date or date-time string (`YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.f]][Z|±HH:MM]`).
    DateTime,
    /// A time string (`HH:MM[:SS[.f]]`).
    Time,
    /// No filter applies (JSON, bytes, arrays, …).
    None,
}

impl FilterKind {
    /// How a caller should write a value of this kind, for error messages.
    pub fn expected(self) -> &'static str {
        match self {
            FilterKind::Number => "a number (or a decimal string)",
            FilterKind::Bool => "true or false",
            FilterKind::Text => "a string",
            FilterKind::Uuid => "a UUID string",
            FilterKind::DateTime => {
                "a date or date-time string ('YYYY-MM-DD', 'YYYY-MM-DDTHH:MM:SS[.f][Z|±HH:MM]')"
            }
            FilterKind::Time => "a time string ('HH:MM[:SS[.f]]')",
            FilterKind::None => "nothing: the column cannot be filtered",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaSnapshot {
    pub config_name: String,
    pub tables: Vec<TableSnapshot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_at: Option<Timestamp>,
}

impl SchemaSnapshot {
    pub fn has_table(&self, name: &str) -> bool {
        self.tables.iter().any(|t| t.name == name)
    }

    pub fn table(&self, name: &str) -> Option<&TableSnapshot> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// A table as a caller names it: the exact name first, then the name as the
    /// datasource type's naming rules normalise it ([`normalize_table_name`]). Schema
    /// validation, job planning and the connectors all find tables through these rules,
    /// so a mapping validate-schema accepts is one a job runs.
    pub fn find_table(
        &self,
        datasource_type: DatasourceType,
        requested: &str,
    ) -> Option<&TableSnapshot> {
        self.table(requested)
            .or_else(|| self.table(&normalize_table_name(datasource_type, requested)))
    }

    /// What of `selection` (table → fields, as a caller names them) this schema lacks:
    /// `(table, None)` for an unknown table, `(table, Some(field))` for an unknown field
    /// of a known one. A field matches a column exactly or as the parent object of a
    /// dotted one; Oracle names compare upper-cased. The one rule validate-schema, job
    /// creation and planning share.
    pub fn missing<'a>(
        &self,
        datasource_type: DatasourceType,
        selection: impl IntoIterator<Item = (&'a String, &'a Vec<String>)>,
    ) -> Vec<(String, Option<String>)> {
        let oracle = datasource_type == DatasourceType::Oracle;
        let mut out = Vec::new();
        for (table, fields) in selection {
            let Some(found) = self.find_table(datasource_type, table) else {
                out.push((table.clone(), None));
                continue;
            };
            for f in fields {
                let name = if oracle { f.to_uppercase() } else { f.clone() };
                if !found.has_field(&name) {
                    out.push((table.clone(), Some(f.clone())));
                }
            }
        }
        out
    }
}

impl TableSnapshot {
    /// `name` is a column, or the parent object of a dotted one (`address` of
    /// `address.city`).
    pub fn has_field(&self, name: &str) -> bool {
        self.fields.iter().any(|f| {
            f == name
                || (f.len() > name.len() && f.starts_with(name) && f.as_bytes()[name.len()] == b'.')
        })
    }
}

/// Table naming (docs/api.md, the job's `mappedFields`): a name has one, two or three dot-separated parts
/// (`table`, `schema.table`, `database.schema.table`); the database part is dropped, and
/// so is the default schema: PostgreSQL `public` (matched case-insensitively), SQL Server
/// `dbo`; Oracle names are upper-cased. MySQL and SQLite tables are keyed bare, so a
/// qualified name matches nothing (a prefix may name another database: it is never
/// dropped). A name of more parts, with an empty part (`.users`, `public.`) or with
/// spaces around it or a part is returned unchanged: it matches only a table of exactly
/// that name, never a trimmed one, so a mistyped name is an unknown table rather than
/// another table read in its place. A MongoDB collection is named exactly as it is.
pub fn normalize_table_name(datasource_type: DatasourceType, name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.iter().any(|p| p.is_empty() || p.trim() != *p) {
        return name.to_owned();
    }
    let (schema, table) = match parts.as_slice() {
        [t] => ("", *t),
        [s, t] | [_, s, t] => (*s, *t),
        _ => return name.to_owned(),
    };
    let qualified = |default: &str| {
        if schema.is_empty() || schema.eq_ignore_ascii_case(default) {
            table.to_owned()
        } else {
            format!("{schema}.{table}")
        }
    };
    match datasource_type {
        DatasourceType::Postgresql => qualified("public"),
        DatasourceType::SqlServer => qualified("dbo"),
        DatasourceType::Oracle => qualified("").to_uppercase(),
        DatasourceType::Mysql | DatasourceType::Sqlite => qualified(""),
        // A collection's name may hold dots (`logs.2024`): never split into parts, so
        // one collection is never read in place of another.
        DatasourceType::MongoDb => name.to_owned(),
    }
}

impl SchemaSnapshot {
    /// Names sorted ascending.
    pub fn table_names(&self) -> Vec<String> {
        let mut names: Vec<_> = self.tables.iter().map(|t| t.name.clone()).collect();
        names.sort();
        names
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableValidation {
    pub name: String,
    #[serde(default)]
    pub fields: Vec<String>,
    #[serde(default)]
    pub filter_fields: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatasourceValidation {
    pub config_name: String,
    #[serde(default)]
    pub tables: Vec<TableValidation>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationRequest {
    pub datasources: Vec<DatasourceValidation>,
}

/// Stable failure type strings of a validation report.
pub mod failure_type {
    pub const DATASOURCE_NOT_FOUND: &str = "datasource_not_found";
    pub const TABLE_NOT_FOUND: &str = "table_not_found";
    pub const FIELD_NOT_FOUND: &str = "field_not_found";
    pub const INVALID_FILTER: &str = "invalid_filter";
    pub const LIMIT_EXCEEDED: &str = "limit_exceeded";
}

/// Fixed details of validation failures.
pub mod detail {
    pub const NO_CONNECTION: &str = "no connection configured for the requested datasource";
    pub const TABLE_NOT_FOUND: &str = "table not found in datasource schema";
    pub const FIELD_NOT_FOUND: &str = "field not found in table schema";
    pub const FILTER_NOT_FOUND: &str = "filter references a field not found in table schema";
    pub const DATASOURCE_COUNT: &str = "datasource count exceeds the configured limit";
    pub const TABLE_COUNT: &str = "table count exceeds the configured limit";
    pub const FIELD_COUNT: &str = "field count exceeds the configured limit";
    pub const FILTER_COUNT: &str = "filter count exceeds the configured limit";
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationFailure {
    #[serde(rename = "type")]
    pub failure_type: String,
    pub config_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub table: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationReport {
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ValidationFailure>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_normalise_by_datasource_type() {
        let n = normalize_table_name;
        assert_eq!(n(DatasourceType::Postgresql, "public.users"), "users");
        assert_eq!(n(DatasourceType::Postgresql, "PUBLIC.users"), "users");
        assert_eq!(n(DatasourceType::Postgresql, "public.Users"), "Users");
        assert_eq!(n(DatasourceType::Postgresql, "acc.inv"), "acc.inv");
        assert_eq!(
            n(DatasourceType::Postgresql, "mydb.sales.orders"),
            "sales.orders"
        );
        assert_eq!(
            n(DatasourceType::Postgresql, "mydb.public.orders"),
            "orders"
        );
        assert_eq!(n(DatasourceType::Postgresql, "a.b.c.d"), "a.b.c.d");
        assert_eq!(n(DatasourceType::SqlServer, "dbo.t"), "t");
        assert_eq!(n(DatasourceType::Oracle, "hr.emp"), "HR.EMP");
        assert_eq!(n(DatasourceType::Mysql, "db.s.t"), "s.t");
        assert_eq!(n(DatasourceType::Mysql, "otherdb.users"), "otherdb.users");
        // Collection names hold dots: `x.logs.2024` is not `logs.2024`.
        assert_eq!(n(DatasourceType::MongoDb, "x.logs.2024"), "x.logs.2024");
        assert_eq!(n(DatasourceType::MongoDb, "db.orders"), "db.orders");
        // Never trimmed, never an empty part dropped (#30): these match only themselves.
        for odd in [
            " users",
            "users ",
            ".users",
            "public.",
            " public.users",
            "public. users",
        ] {
            assert_eq!(n(DatasourceType::Postgresql, odd), odd);
        }
        let snap = SchemaSnapshot {
            config_name: "c".into(),
            tables: vec![TableSnapshot {
                name: "orders".into(),
                fields: vec!["id".into()],
                ..Default::default()
            }],
            captured_at: None,
        };
        assert!(
            snap.find_table(DatasourceType::Postgresql, "public.orders")
                .is_some()
        );
        assert!(
            snap.find_table(DatasourceType::Postgresql, "orders")
                .is_some()
        );
        assert!(
            snap.find_table(DatasourceType::Postgresql, "other.orders")
                .is_none()
        );
        assert!(
            snap.find_table(DatasourceType::Mysql, "otherdb.orders")
                .is_none()
        );
    }
}
