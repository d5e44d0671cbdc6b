//! What discovery learns about a datasource: tables, columns with their type class, and
//! primary keys. The engine's [`SchemaSnapshot`] keeps only names; the connector keeps
//! this richer form to type filter values and pick value decoders.
//!
//! Naming (docs/datasources.md, "Table names and discovery"): PostgreSQL tables in `public`
//! are bare, others `schema.table`; MySQL and SQLite names are always bare. Lookups accept
//! the qualified spellings too (`public.users`, `PUBLIC.users`, `db.public.users` →
//! `users`).

use std::collections::BTreeMap;

use fetcher_engine::{ColumnType, FieldType, SchemaSnapshot, TableSnapshot};

use crate::Dialect;

/// The type class of a column: decides how filter values are typed and bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    /// MySQL `BIGINT UNSIGNED` and friends.
    UInt,
    Float,
    /// Exact decimals (`numeric`, `DECIMAL`).
    Decimal,
    Bool,
    Text,
    Uuid,
    Date,
    /// Without time zone.
    Timestamp,
    TimestampTz,
    Time,
    Json,
    Bytes,
    /// Anything else (arrays, intervals, enums rendered as text, …): not filterable.
    Other,
}

#[derive(Debug, Clone)]
pub struct ColumnInfo {
    pub name: String,
    pub kind: Kind,
    /// The catalog's type name (`integer`, `decimal(15,2)`, …), for docs and debugging.
    pub type_name: String,
    /// PostgreSQL: the base type OID to decode with (`TEXT` when selected as `::text`).
    pub pg_oid: u32,
    /// PostgreSQL: the column is selected as `col::text`.
    pub pg_text_cast: bool,
    /// PostgreSQL `SQL_ASCII` databases: the column's text is selected as its stored
    /// bytes (the server refuses to convert high-bit bytes to UTF-8), decoded as text
    /// when they are UTF-8 and kept as bytes otherwise.
    pub pg_raw_bytes: bool,
    /// PostgreSQL arrays of a type without a binary decoder: selected as `text[]` of the
    /// elements' own texts (its text output read back as `text[]`).
    pub pg_text_array: bool,
    /// Whether `ORDER BY col` works natively (PG `json`, `xml`, … do not).
    pub orderable: bool,
    /// Whether the column may hold NULL, as the catalog says.
    pub nullable: bool,
    /// The type a typed result format (Parquet) writes the column as (docs/parquet.md).
    pub ctype: ColumnType,
}

/// `DECIMAL(p, s)` of a declared type name (`numeric(18,4)`, `decimal(15,2) unsigned`,
/// `decimal(10)`), when precision and scale fit a typed decimal (`0 <= s <= p <= 76`,
/// the widest Parquet decimal Arrow writes). `None`: unbounded or out of that range, so
/// the column is written as text.
pub fn decimal_type(type_name: &str) -> Option<ColumnType> {
    let args = type_name.split_once('(')?.1.split_once(')')?.0;
    let mut it = args.split(',').map(|a| a.trim().parse::<i64>());
    let precision = it.next()?.ok()?;
    let scale = match it.next() {
        Some(s) => s.ok()?,
        None => 0,
    };
    if it.next().is_some() || !(1..=76).contains(&precision) || !(0..=precision).contains(&scale) {
        return None;
    }
    Some(ColumnType::Decimal {
        precision: precision as u8,
        scale: scale as u8,
    })
}

#[derive(Debug, Clone)]
pub struct TableInfo {
    /// Physical schema (PG), empty for MySQL/SQLite.
    pub schema: String,
    pub name: String,
    /// The snapshot key (`users`, `accounting.invoices`).
    pub key: String,
    pub columns: Vec<ColumnInfo>,
    /// Primary-key column names in key order.
    pub primary_key: Vec<String>,
    /// MySQL/MariaDB: the table's indexes that can return rows in order (empty on the
    /// other dialects, whose planners find such an index themselves).
    pub ordered_indexes: Vec<OrderedIndex>,
    /// The catalog's row estimate (PostgreSQL `reltuples` once analysed, InnoDB's
    /// `table_rows`); `None` when it keeps none.
    pub row_estimate: Option<i64>,
    /// A view or materialised view (read with a `SELECT` like a table).
    pub view: bool,
}

/// An index and the column order it returns rows in: its own full ascending columns, and
/// on InnoDB, after those of a secondary index, the primary key's (each secondary entry
/// ends with it). Stops at the first column indexed by a prefix or descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderedIndex {
    pub name: String,
    pub columns: Vec<String>,
}

impl TableInfo {
    pub fn column(&self, name: &str) -> Option<&ColumnInfo> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The index that returns rows in `order` (its leading columns are `order`): the
    /// primary key's when it does, else the one of fewest columns, then first by name.
    pub fn index_for_order(&self, order: &[&str]) -> Option<&OrderedIndex> {
        let serves = |i: &&OrderedIndex| {
            !order.is_empty()
                && i.columns.len() >= order.len()
                && i.columns.iter().zip(order).all(|(c, o)| c == o)
        };
        let primary = self
            .ordered_indexes
            .iter()
            .filter(serves)
            .find(|i| i.name == "PRIMARY");
        primary.or_else(|| {
            self.ordered_indexes
                .iter()
                .filter(serves)
                .min_by_key(|i| (i.columns.len(), i.name.as_str()))
        })
    }
}

/// All tables of a datasource, by snapshot key.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub tables: BTreeMap<String, TableInfo>,
}

impl Catalog {
    pub fn snapshot(&self, dialect: Dialect, config_name: &str) -> SchemaSnapshot {
        SchemaSnapshot {
            config_name: config_name.to_owned(),
            tables: self
                .tables
                .values()
                .map(|t| TableSnapshot {
                    name: t.key.clone(),
                    fields: t.columns.iter().map(|c| c.name.clone()).collect(),
                    primary_key: t.primary_key.clone(),
                    types: t
                        .columns
                        .iter()
                        .map(|c| {
                            let ty = FieldType {
                                name: c.type_name.clone(),
                                cursor: crate::incremental::can_be_cursor(c),
                                key: crate::incremental::can_be_key(c),
                                lookback: crate::incremental::lookback_kind(c),
                                nullable: Some(c.nullable),
                                filter: crate::filter::filter_kind(dialect, c),
                            };
                            (c.name.clone(), ty)
                        })
                        .collect(),
                    row_estimate: t.row_estimate,
                    view: t.view,
                })
                .collect(),
            captured_at: None,
        }
    }

    /// Finds a requested table: the exact key first, then its normalised form.
    pub fn lookup(&self, dialect: Dialect, requested: &str) -> Option<&TableInfo> {
        self.tables
            .get(requested)
            .or_else(|| self.tables.get(&normalize_table(dialect, requested)))
    }

    pub fn insert(&mut self, dialect: Dialect, t: TableInfo) {
        if !is_system_table(dialect, &t.key) {
            self.tables.insert(t.key.clone(), t);
        }
    }
}

/// The dialect's default schema (docs/datasources.md, "Table names and discovery"):
/// PostgreSQL `public`, others none.
pub fn default_schema(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "public",
        Dialect::MySql | Dialect::Sqlite => "",
    }
}

/// `schema.table` key, bare for the default schema.
pub fn table_key(dialect: Dialect, schema: &str, table: &str) -> String {
    if schema.is_empty() || schema == default_schema(dialect) {
        table.to_owned()
    } else {
        format!("{schema}.{table}")
    }
}

/// Qualified names, the reference's `ParseQualifiedTableName` (docs/engine.md, "Schema
/// discovery and validation"): 1, 2 or 3 dot-separated parts.
pub fn parse_qualified(name: &str, default: &str) -> Option<(String, String)> {
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    let parts: Vec<&str> = name.split('.').collect();
    match parts.as_slice() {
        [t] => Some((default.to_owned(), (*t).to_owned())),
        [s, t] | [_, s, t] => Some(((*s).to_owned(), (*t).to_owned())),
        _ => None,
    }
}

/// Table names as callers write them: the engine's rule ([`fetcher_engine::normalize_table_name`]),
/// so the connector finds exactly the tables schema validation accepted.
pub fn normalize_table(dialect: Dialect, name: &str) -> String {
    fetcher_engine::normalize_table_name(dialect.datasource_type(), name)
}

/// System objects, the reference's `IsSystemTable` (docs/datasources.md, "Table names and
/// discovery"), on the discovered key.
pub fn is_system_table(dialect: Dialect, key: &str) -> bool {
    let l = key.to_ascii_lowercase();
    match dialect {
        Dialect::Postgres => l.starts_with("pg_") || l.starts_with("information_schema"),
        Dialect::MySql => matches!(
            l.as_str(),
            "mysql" | "information_schema" | "performance_schema" | "sys"
        ),
        Dialect::Sqlite => l.starts_with("sqlite_"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_examples() {
        let pg = |n| normalize_table(Dialect::Postgres, n);
        assert_eq!(pg("public.transactions"), "transactions");
        assert_eq!(pg("PUBLIC.users"), "users");
        assert_eq!(pg("public.Users"), "Users");
        assert_eq!(pg("accounting.invoices"), "accounting.invoices");
        assert_eq!(pg("mydb.sales.orders"), "sales.orders");
        assert_eq!(pg("a.b.c.d"), "a.b.c.d");
        assert_eq!(normalize_table(Dialect::MySql, "app.users"), "app.users");
        assert_eq!(table_key(Dialect::Postgres, "public", "t"), "t");
        assert_eq!(table_key(Dialect::Postgres, "Acc", "t"), "Acc.t");
    }

    #[test]
    fn system_tables() {
        for t in [
            "pg_catalog",
            "pg_toast",
            "pg_temp_1",
            "information_schema",
            "pg_audit",
        ] {
            assert!(is_system_table(Dialect::Postgres, t), "{t}");
        }
        assert!(!is_system_table(Dialect::Postgres, "users"));
        for t in ["mysql", "information_schema", "performance_schema", "sys"] {
            assert!(is_system_table(Dialect::MySql, t), "{t}");
        }
        assert!(!is_system_table(Dialect::MySql, "products"));
        assert!(is_system_table(Dialect::Sqlite, "sqlite_sequence"));
    }

    #[test]
    fn the_index_for_an_order_prefers_the_primary_key_then_the_narrowest() {
        let index = |name: &str, cols: &[&str]| OrderedIndex {
            name: name.into(),
            columns: cols.iter().map(|c| c.to_string()).collect(),
        };
        let t = TableInfo {
            schema: String::new(),
            name: "t".into(),
            key: "t".into(),
            columns: vec![],
            primary_key: vec!["id".into()],
            row_estimate: None,
            view: false,
            ordered_indexes: vec![
                index("wide", &["ts", "id", "v"]),
                index("PRIMARY", &["id"]),
                index("by_ts", &["ts", "id"]),
                index("by_v", &["v", "id"]),
            ],
        };
        let pick = |order: &[&str]| t.index_for_order(order).map(|i| i.name.as_str());
        assert_eq!(pick(&["id"]), Some("PRIMARY"));
        assert_eq!(pick(&["ts", "id"]), Some("by_ts"));
        assert_eq!(pick(&["ts"]), Some("by_ts"));
        assert_eq!(pick(&["ts", "id", "v"]), Some("wide"));
        assert_eq!(
            pick(&["id", "ts"]),
            None,
            "the order's columns lead, in order"
        );
        assert_eq!(pick(&["v", "ts"]), None);
        assert_eq!(pick(&[]), None);
    }
}
