//! Discovery: the database's collections (system ones excluded) and, per collection, the
//! fields a bounded sample of its documents holds, with their observed BSON types and
//! whether they can be missing or null.
//!
//! The sample is the first [`SAMPLE`] and the last [`SAMPLE`] documents in `_id` order:
//! read through the `_id` index (cheap on any size), the same documents every time for the
//! same data (so a cached schema does not flicker), and both the oldest and the newest
//! shape of a collection whose documents changed over time (ObjectIds grow with time).
//! A field that appears only in the unsampled middle is not discovered; a job may still
//! name it (a sampled parent object admits any child path).

use std::collections::{BTreeMap, BTreeSet};

use fetcher_engine::{FieldType, LookbackKind, TableSnapshot};
use mongodb::bson::RawDocument;
use mongodb::bson::raw::RawBsonRef;

use crate::values::type_name;

/// Documents read from each end of a collection.
pub const SAMPLE: i64 = 500;

/// Nested objects are listed down to this depth (`a.b.c`); deeper paths are reachable
/// through their parent.
const MAX_PATH_DEPTH: usize = 3;

/// Fields listed per collection at most (a collection of free-form keys would otherwise
/// make a schema without end).
const MAX_FIELDS: usize = 1000;

/// What the sampled documents of one collection say of its fields.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    /// Field paths in the order first seen (`_id` first: the server stores it first);
    /// nested object fields dotted.
    pub fields: Vec<String>,
    types: BTreeMap<String, BTreeSet<&'static str>>,
    present: BTreeMap<String, usize>,
    sampled: usize,
}

impl Shape {
    /// Adds one sampled document.
    pub fn add(&mut self, doc: &RawDocument) {
        self.sampled += 1;
        self.walk(doc, "", 1);
    }

    fn walk(&mut self, doc: &RawDocument, prefix: &str, depth: usize) {
        for (key, value) in doc.into_iter().flatten() {
            let path = format!("{prefix}{key}");
            if !self.types.contains_key(&path) {
                if self.fields.len() >= MAX_FIELDS {
                    continue;
                }
                self.fields.push(path.clone());
            }
            self.types
                .entry(path.clone())
                .or_default()
                .insert(type_name(value));
            *self.present.entry(path.clone()).or_default() += 1;
            if let RawBsonRef::Document(sub) = value
                && depth < MAX_PATH_DEPTH
            {
                self.walk(sub, &format!("{path}."), depth + 1);
            }
        }
    }

    /// Whether `path` was seen, itself or as the parent object of a seen path.
    pub fn has(&self, path: &str) -> bool {
        self.types.contains_key(path)
            || self.fields.iter().any(|f| {
                f.len() > path.len() && f.starts_with(path) && f.as_bytes()[path.len()] == b'.'
            })
            || self.open_parent(path)
    }

    /// A sampled object field is a parent of `path` whose children below the listed depth
    /// are not listed: it admits them.
    fn open_parent(&self, path: &str) -> bool {
        path.match_indices('.').any(|(i, _)| {
            let parent = &path[..i];
            parent.matches('.').count() + 1 >= MAX_PATH_DEPTH
                && self.types.get(parent).is_some_and(|t| t.contains("object"))
        })
    }

    /// The one non-null BSON type `path` was seen with, if it was seen with one.
    pub fn kind(&self, path: &str) -> Option<&'static str> {
        let mut kinds = self.types.get(path)?.iter().filter(|t| **t != "null");
        let kind = kinds.next()?;
        kinds.next().is_none().then_some(*kind)
    }

    /// Whether `path` was missing from a sampled document or null in one.
    pub fn nullable(&self, path: &str) -> bool {
        self.present.get(path).copied().unwrap_or(0) < self.sampled
            || self.types.get(path).is_some_and(|t| t.contains("null"))
    }

    /// The collection as a table of the schema snapshot.
    pub fn table(&self, name: &str, estimate: Option<i64>) -> TableSnapshot {
        let mut fields = self.fields.clone();
        if !fields.iter().any(|f| f == "_id") {
            // An empty collection: its documents will have an `_id`, whatever else.
            fields.insert(0, "_id".into());
        }
        let types = fields
            .iter()
            .map(|f| (f.clone(), self.field_type(f)))
            .collect();
        TableSnapshot {
            name: name.to_owned(),
            fields,
            primary_key: vec!["_id".into()],
            types,
            row_estimate: estimate,
            view: false,
        }
    }

    fn field_type(&self, path: &str) -> FieldType {
        let name = match self.types.get(path) {
            Some(t) => t.iter().copied().collect::<Vec<_>>().join("|"),
            None => "objectId".into(),
        };
        let kind = if path == "_id" && !self.types.contains_key(path) {
            Some("objectId")
        } else {
            self.kind(path)
        };
        let cursor = matches!(
            kind,
            Some("int" | "long" | "double" | "decimal" | "date" | "string" | "objectId")
        );
        let lookback = match kind {
            Some("int" | "long" | "double" | "decimal") => Some(LookbackKind::Amount),
            Some("date") => Some(LookbackKind::Duration),
            _ => None,
        };
        FieldType {
            name,
            cursor,
            key: cursor,
            lookback,
            nullable: Some(path != "_id" && self.nullable(path)),
            // MongoDB filters convert their values per field (docs/datasources.md):
            // nothing to check against a sampled type at creation.
            filter: None,
        }
    }
}

/// Collections discovery lists: not `system.*` (the server's own), as the reference.
pub fn is_user_collection(name: &str) -> bool {
    !name.starts_with("system.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{RawDocumentBuf, doc};

    #[test]
    fn fields_types_and_missing_ones() {
        let mut s = Shape::default();
        for d in [
            doc! {"_id": 1, "a": 1, "o": {"x": "s"}},
            doc! {"_id": 2, "a": mongodb::bson::Bson::Null, "b": 2.5},
        ] {
            s.add(&RawDocumentBuf::from_document(&d).unwrap());
        }
        assert_eq!(s.fields, ["_id", "a", "o", "o.x", "b"]);
        assert_eq!(s.kind("a"), Some("int"));
        assert!(s.nullable("a") && s.nullable("b") && !s.nullable("_id"));
        assert!(s.has("o.x") && s.has("o") && !s.has("ghost"));
        let t = s.table("c", Some(2));
        assert_eq!(t.primary_key, ["_id"]);
        assert_eq!(t.types["a"].name, "int|null");
        assert!(t.types["a"].cursor && !t.types["o"].cursor);
        assert_eq!(Shape::default().table("e", None).fields, ["_id"]);
        assert!(!is_user_collection("system.views") && is_user_collection("orders.2024"));
    }
}
