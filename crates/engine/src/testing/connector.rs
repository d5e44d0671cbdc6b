//! The connector conformance suite (docs/engine.md, "Writing a connector").
//!
//! One suite states the read contract of [`Connector`] in the engine's terms, and every
//! connector runs it against its real datasource: a connector is done when it passes.
//! The connector's test loads the suite's [`fixture`] into its datasource (in its own
//! types and statements), then calls [`connector`] with a [`Subject`]. Where a datasource
//! legitimately differs, the subject declares it as a [`Capabilities`] flag, and the suite
//! checks the other behaviour instead (a connector that cannot split a key must say so
//! and refuse a key range): no check is ever skipped.
//!
//! One file, a little over 800 lines, on purpose: the fixture and the cases that read it
//! are one contract, read top to bottom by whoever writes a connector.
//!
//! ```text
//! #[tokio::test]
//! async fn postgres_conforms() {
//!     let db = load_into_postgres(fetcher_engine::testing::connector::fixture()).await;
//!     fetcher_engine::testing::connector::connector(&Subject { … }).await;
//! }
//! ```
//!
//! What it checks: discovery (the fixture's tables, their fields in order, primary keys
//! and nullability; nothing else but what the datasource itself holds); a full read (rows in key
//! order, in bounded batches of one table each, every value as the encodings say);
//! projection; every filter operator and what `null` means in each; a table without a
//! key (ordered by its columns); an empty table; key spans and key ranges (each row in
//! exactly one range, in order); resuming after a position, and positions reported;
//! an incremental read past a watermark with ties on the cursor; cancellation mid-stream;
//! a connection test and an idempotent close.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value as J, json};

use crate::context::Context;
use crate::error::Category;
use crate::model::*;
use crate::ports::*;
use crate::tenant::TenantContext;
use crate::value::RowBatch;

/// A column type of the fixture, in the engine's terms; the connector's test picks its
/// datasource's type for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixtureType {
    /// A 64-bit signed integer.
    Int,
    /// Text of up to 40 characters (a type an index and a primary key can take).
    Text,
    /// An exact decimal with 10 digits, 2 after the point.
    Decimal,
}

/// A fixture column.
#[derive(Debug, Clone)]
pub struct FixtureColumn {
    pub name: &'static str,
    pub kind: FixtureType,
    pub nullable: bool,
}

/// A fixture table: its columns in order, its primary key (empty: none), its rows (in an
/// order that is not the key's, so reading in key order is the connector's doing).
#[derive(Debug, Clone)]
pub struct FixtureTable {
    pub name: &'static str,
    pub columns: Vec<FixtureColumn>,
    pub primary_key: Vec<&'static str>,
    /// Each row's values in column order: JSON integers, strings (text and decimals, the
    /// decimal as its exact text with two places), or null.
    pub rows: Vec<Vec<J>>,
}

/// Rows of `items`: enough for several batches.
pub const ITEM_ROWS: i64 = 2600;

/// The fixture every connector loads:
///
/// - `items (id Int key, name Text, price Decimal null, qty Int null, note Text null)`:
///   2,600 rows inserted in a shuffled order; `name` is `item-<id>`, every seventh row has
///   no price, every fifth no quantity, notes cycle through `alpha`, `beta`, `gamma` and
///   null;
/// - `events (seq Int key, at Int, kind Text)`: 90 rows whose cursor `at` repeats (three
///   rows per value), for incremental reads with ties;
/// - `nokey (v Int null, w Text)`: no primary key, duplicates included;
/// - `empty (id Int key)`: no rows.
pub fn fixture() -> Vec<FixtureTable> {
    let col = |name, kind, nullable| FixtureColumn {
        name,
        kind,
        nullable,
    };
    // A fixed permutation of 1..=ITEM_ROWS (a multiplier coprime with the count).
    let items = (0..ITEM_ROWS)
        .map(|i| (i * 1103 + 17) % ITEM_ROWS + 1)
        .map(|id| {
            let price = if id % 7 == 0 {
                J::Null
            } else {
                json!(format!("{}.{:02}", id / 3, id % 100))
            };
            let qty = if id % 5 == 0 { J::Null } else { json!(id % 40) };
            let note = match id % 4 {
                0 => json!("alpha"),
                1 => json!("beta"),
                2 => json!("gamma"),
                _ => J::Null,
            };
            vec![json!(id), json!(format!("item-{id}")), price, qty, note]
        })
        .collect();
    let events = (1..=90i64)
        .rev()
        .map(|seq| {
            vec![
                json!(seq),
                json!((seq - 1) / 3),
                json!(["create", "update", "delete"][(seq % 3) as usize]),
            ]
        })
        .collect();
    let nokey = [(3, "c"), (1, "a"), (2, "b"), (1, "a"), (2, "a")]
        .into_iter()
        .map(|(v, w)| vec![json!(v), json!(w)])
        .chain([vec![J::Null, json!("z")]])
        .collect();
    vec![
        FixtureTable {
            name: "items",
            columns: vec![
                col("id", FixtureType::Int, false),
                col("name", FixtureType::Text, false),
                col("price", FixtureType::Decimal, true),
                col("qty", FixtureType::Int, true),
                col("note", FixtureType::Text, true),
            ],
            primary_key: vec!["id"],
            rows: items,
        },
        FixtureTable {
            name: "events",
            columns: vec![
                col("seq", FixtureType::Int, false),
                col("at", FixtureType::Int, false),
                col("kind", FixtureType::Text, false),
            ],
            primary_key: vec!["seq"],
            rows: events,
        },
        FixtureTable {
            name: "nokey",
            columns: vec![
                col("v", FixtureType::Int, true),
                col("w", FixtureType::Text, false),
            ],
            primary_key: vec![],
            rows: nokey,
        },
        FixtureTable {
            name: "empty",
            columns: vec![col("id", FixtureType::Int, false)],
            primary_key: vec!["id"],
            rows: vec![],
        },
    ]
}

/// What a datasource legitimately does differently; each flag changes what the suite
/// checks, never whether it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Reports key spans of an integer leading key and reads key ranges (fan-out). Off:
    /// `key_span` answers `None`, and a key-range step is refused as `validation`.
    pub key_ranges: bool,
    /// Decimals keep their declared scale (`12.50`). Off (a datasource that stores them
    /// as binary floating point): they read as the same number, compared as numbers.
    pub exact_decimals: bool,
    /// A document datasource: every table (collection) is keyed by its `_id`, which is how
    /// the connector's test loads a fixture table's key column (a table without a key
    /// gets increasing ids in the fixture's row order), and fields are learned from the
    /// documents, so an empty table shows its `_id` only. The suite then names the key
    /// `_id` in what it asks and checks, and a keyless table reads in `_id` order.
    pub documents: bool,
}

/// A connector under test: how to build it, and the connection to the loaded fixture.
pub struct Subject {
    pub factory: Arc<dyn ConnectorFactory>,
    pub descriptor: ConnectionDescriptor,
    pub tenant: TenantContext,
    pub capabilities: Capabilities,
}

/// Batches a connector may hand over at once at most: bounded, never a whole table.
pub const MAX_BATCH_ROWS: usize = 10_000;

/// The key column of a fixture table, if it has one (the fixture's keys are single).
fn key_of(table: &str) -> Option<&'static str> {
    fixture()
        .into_iter()
        .find(|t| t.name == table)
        .and_then(|t| t.primary_key.first().copied())
}

impl Subject {
    /// How the datasource names `field` of fixture `table`: a document datasource's
    /// key is `_id`.
    fn name_of(&self, table: &str, field: &str) -> String {
        if self.capabilities.documents && key_of(table) == Some(field) {
            "_id".to_owned()
        } else {
            field.to_owned()
        }
    }

    /// A request in the fixture's names, in the datasource's (`tables`, `filters` and
    /// `incremental` keyed by table).
    fn renamed(&self, mut request: J) -> J {
        if !self.capabilities.documents {
            return request;
        }
        let rename_list = |table: &str, list: &mut J| {
            if let Some(items) = list.as_array_mut() {
                for f in items {
                    if let Some(name) = f.as_str() {
                        *f = J::String(self.name_of(table, name));
                    }
                }
            }
        };
        if let Some(tables) = request.get_mut("tables").and_then(J::as_object_mut) {
            for (t, fields) in tables.iter_mut() {
                rename_list(t, fields);
            }
        }
        if let Some(filters) = request.get_mut("filters").and_then(J::as_object_mut) {
            for (t, f) in filters.iter_mut() {
                if let Some(fields) = f.as_object() {
                    *f = J::Object(
                        fields
                            .iter()
                            .map(|(k, v)| (self.name_of(t, k), v.clone()))
                            .collect(),
                    );
                }
            }
        }
        if let Some(inc) = request.get_mut("incremental").and_then(J::as_object_mut) {
            for (t, read) in inc.iter_mut() {
                if let Some(key) = read.get_mut("key") {
                    rename_list(t, key);
                }
                if let Some(key) = read.pointer_mut("/after/key") {
                    rename_list(t, key);
                }
            }
        }
        request
    }

    /// A row of fixture `table` as JSON in the fixture's names.
    fn plain(&self, table: &str, row: &crate::Row) -> serde_json::Map<String, J> {
        row.iter()
            .map(|(k, v)| {
                let k = match (self.capabilities.documents, key_of(table)) {
                    (true, Some(key)) if k == "_id" => key.to_owned(),
                    _ => k.to_owned(),
                };
                (k, v.to_json())
            })
            .collect()
    }

    async fn build(&self, ctx: &Context) -> Box<dyn Connector> {
        self.factory
            .build(ctx, &self.tenant, &self.descriptor)
            .await
            .expect("the connector builds")
            .expect("the factory builds a connector")
    }

    fn step(&self, request: J) -> PlanStep {
        let request = self.renamed(request);
        let config = &self.descriptor.config_name;
        let request: ExtractionRequest =
            serde_json::from_value(json!({"mappedFields": {config: request["tables"]},
                "filters": request.get("filters").map(|f| json!({config: f})).unwrap_or(json!({})),
                "incremental": request.get("incremental").map(|f| json!({config: f})).unwrap_or(json!({}))}))
            .expect("a well-formed request");
        PlanStep::for_datasource(&request, config)
    }

    /// Every batch of `step`, checked to be bounded and of one named table.
    async fn read(&self, step: &PlanStep) -> crate::Result<Vec<RowBatch>> {
        let ctx = Context::background();
        let mut c = self.build(&ctx).await;
        let mut out = Vec::new();
        let read = async {
            let mut cursor = c.query_stream(&ctx, step).await?;
            while let Some(b) = cursor.next_batch(&ctx).await? {
                assert!(
                    b.rows.len() <= MAX_BATCH_ROWS,
                    "a batch of {} rows: batches must be bounded",
                    b.rows.len()
                );
                assert!(
                    step.tables.iter().any(|t| **t == *b.table),
                    "a batch of table {:?}, which the step does not read",
                    b.table
                );
                out.push(b);
            }
            let _ = cursor.close(&ctx).await;
            Ok(())
        }
        .await;
        let _ = c.close(&ctx).await;
        read.map(|()| out)
    }

    /// The rows of `table` in `step`, as JSON objects in the order read.
    async fn rows(&self, step: &PlanStep, table: &str) -> Vec<serde_json::Map<String, J>> {
        self.read(step)
            .await
            .unwrap_or_else(|e| panic!("reading {table}: {e}"))
            .into_iter()
            .filter(|b| &*b.table == table)
            .flat_map(|b| b.rows)
            .map(|r| self.plain(table, &r))
            .collect()
    }

    /// The `id`s of `items` that `filter` selects, in the order read.
    async fn ids(&self, filter: J) -> Vec<i64> {
        let step = self.step(json!({"tables": {"items": ["id"]}, "filters": {"items": filter}}));
        self.rows(&step, "items")
            .await
            .iter()
            .map(|r| r["id"].as_i64().expect("an integer id"))
            .collect()
    }
}

/// The fixture's `items` rows as JSON objects, by id.
fn items() -> Vec<serde_json::Map<String, J>> {
    let t = fixture()
        .into_iter()
        .find(|t| t.name == "items")
        .expect("items");
    let mut rows: Vec<_> = t
        .rows
        .iter()
        .map(|r| {
            t.columns
                .iter()
                .zip(r)
                .map(|(c, v)| (c.name.to_owned(), v.clone()))
                .collect::<serde_json::Map<_, _>>()
        })
        .collect();
    rows.sort_by_key(|r| r["id"].as_i64());
    rows
}

/// The ids of `items` for which `keep` holds, ascending.
fn expected(keep: impl Fn(&serde_json::Map<String, J>) -> bool) -> Vec<i64> {
    items()
        .iter()
        .filter(|r| keep(r))
        .map(|r| r["id"].as_i64().expect("id"))
        .collect()
}

/// A decimal as read, compared with the fixture's text: exactly, or as the same number
/// where the datasource keeps no scale.
fn same_decimal(read: &J, fixture: &J, exact: bool) -> bool {
    let number = |v: &J| match v {
        J::String(s) => s.parse::<f64>().ok(),
        J::Number(n) => n.as_f64(),
        _ => None,
    };
    match (read, fixture) {
        (J::Null, J::Null) => true,
        (r, f) if exact => r == f,
        (r, f) => number(r).is_some() && number(r) == number(f),
    }
}

/// Runs the whole suite against `subject`; panics at the first broken obligation.
pub async fn connector(subject: &Subject) {
    connects_and_closes(subject).await;
    discovers_the_fixture(subject).await;
    reads_in_key_order_in_bounded_batches(subject).await;
    projects_the_fields_asked(subject).await;
    applies_every_filter_operator(subject).await;
    orders_a_keyless_table_and_reads_an_empty_one(subject).await;
    splits_by_key_or_says_it_cannot(subject).await;
    resumes_after_a_position(subject).await;
    reads_past_a_watermark_with_ties(subject).await;
    stops_when_canceled(subject).await;
}

async fn connects_and_closes(s: &Subject) {
    let ctx = Context::background();
    let mut c = s.build(&ctx).await;
    c.test_connection(&ctx)
        .await
        .unwrap_or_else(|e| panic!("the connection test: {e}"));
    c.close(&ctx).await.expect("close");
    c.close(&ctx).await.expect("a second close is harmless");
}

async fn discovers_the_fixture(s: &Subject) {
    let ctx = Context::background();
    let mut c = s.build(&ctx).await;
    let snapshot = c
        .discover_schema(&ctx)
        .await
        .unwrap_or_else(|e| panic!("discovery: {e}"));
    let _ = c.close(&ctx).await;
    for t in fixture() {
        let found = snapshot
            .tables
            .iter()
            .find(|d| d.name == t.name)
            .unwrap_or_else(|| panic!("discovery lists no table {}", t.name));
        let mut fields: Vec<String> = t
            .columns
            .iter()
            .map(|c| s.name_of(t.name, c.name))
            .collect();
        let mut key: Vec<String> = t.primary_key.iter().map(|c| s.name_of(t.name, c)).collect();
        if s.capabilities.documents {
            // Every document has an `_id`, stored first; an empty table shows nothing else.
            if key.is_empty() {
                fields.insert(0, "_id".into());
                key.push("_id".into());
            }
            fields.retain(|f| f == "_id" || !t.rows.is_empty());
            fields.sort_by_key(|f| f != "_id");
        }
        assert_eq!(found.fields, fields, "{}: the fields, in order", t.name);
        assert_eq!(found.primary_key, key, "{}: the primary key", t.name);
        for c in t
            .columns
            .iter()
            .filter(|_| !s.capabilities.documents || !t.rows.is_empty())
        {
            // A key column is never NULL, whatever the table declared.
            let want = c.nullable && !t.primary_key.contains(&c.name);
            let name = s.name_of(t.name, c.name);
            let said = found.types.get(&name).and_then(|ty| ty.nullable);
            assert_eq!(said, Some(want), "{}.{}: nullable", t.name, c.name);
        }
    }
    let lower: BTreeSet<String> = snapshot
        .tables
        .iter()
        .map(|t| t.name.to_ascii_lowercase())
        .collect();
    for system in [
        "pg_catalog",
        "information_schema",
        "sqlite_sequence",
        "mysql",
        "sys",
    ] {
        assert!(
            !lower
                .iter()
                .any(|t| t == system || t.starts_with(&format!("{system}."))),
            "discovery lists the system object {system}"
        );
    }
}

async fn reads_in_key_order_in_bounded_batches(s: &Subject) {
    let step = s.step(json!({"tables": {"items": ["id", "name", "price", "qty", "note"]}}));
    let batches = s.read(&step).await.expect("a full read");
    assert!(
        batches.iter().filter(|b| !b.rows.is_empty()).count() > 1,
        "{ITEM_ROWS} rows come in more than one batch"
    );
    let rows: Vec<serde_json::Map<String, J>> = batches
        .into_iter()
        .flat_map(|b| b.rows)
        .map(|r| s.plain("items", &r))
        .collect();
    let want = items();
    assert_eq!(rows.len(), want.len(), "every row, once");
    for (got, want) in rows.iter().zip(&want) {
        assert_eq!(got["id"], want["id"], "rows in key order");
        for field in ["name", "qty", "note"] {
            assert_eq!(got[field], want[field], "id {}: {field}", want["id"]);
        }
        assert!(
            same_decimal(&got["price"], &want["price"], s.capabilities.exact_decimals),
            "id {}: price {} for {}",
            want["id"],
            got["price"],
            want["price"]
        );
    }
}

async fn projects_the_fields_asked(s: &Subject) {
    let step = s.step(json!({"tables": {"items": ["note", "id"]}}));
    let rows = s.rows(&step, "items").await;
    assert_eq!(rows.len(), ITEM_ROWS as usize);
    for r in &rows {
        let keys: BTreeSet<&str> = r.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["id", "note"]),
            "only the fields asked"
        );
    }
}

async fn applies_every_filter_operator(s: &Subject) {
    let int = |r: &serde_json::Map<String, J>, f: &str| r[f].as_i64();
    let text = |r: &serde_json::Map<String, J>, f: &str| r[f].as_str().map(str::to_owned);
    let cases: Vec<(J, Vec<i64>)> = vec![
        (json!({"id": {"eq": [42]}}), vec![42]),
        (json!({"id": {"eq": [3, 5, 7]}}), vec![3, 5, 7]),
        (
            json!({"qty": {"eq": [null]}}),
            expected(|r| r["qty"].is_null()),
        ),
        (
            json!({"qty": {"ne": [null]}}),
            expected(|r| !r["qty"].is_null()),
        ),
        // `ne` of a value: NULL is never unequal to anything (SQL's three values).
        (
            json!({"qty": {"ne": [3]}}),
            expected(|r| int(r, "qty").is_some_and(|q| q != 3)),
        ),
        (json!({"id": {"gt": [2590]}}), (2591..=ITEM_ROWS).collect()),
        (json!({"id": {"gte": [2590]}}), (2590..=ITEM_ROWS).collect()),
        (json!({"id": {"lt": [4]}}), vec![1, 2, 3]),
        (json!({"id": {"lte": [4]}}), vec![1, 2, 3, 4]),
        (json!({"id": {"between": [10, 13]}}), vec![10, 11, 12, 13]),
        (json!({"id": {"in": [9, 1, 2600]}}), vec![1, 9, 2600]),
        (
            json!({"note": {"nin": ["alpha", "beta"]}}),
            expected(|r| text(r, "note").is_some_and(|n| n == "gamma")),
        ),
        // `null` inside a list is NULL: it matches nothing, and `nin` with it nothing.
        (
            json!({"note": {"in": ["alpha", null]}}),
            expected(|r| text(r, "note").is_some_and(|n| n == "alpha")),
        ),
        (json!({"note": {"nin": ["alpha", null]}}), vec![]),
        (
            json!({"name": {"like": ["item-12%"]}}),
            expected(|r| text(r, "name").is_some_and(|n| n.starts_with("item-12"))),
        ),
        // Conditions of a field, and fields, are joined with AND.
        (
            json!({"id": {"gte": [100], "lt": [110]}, "note": {"eq": ["beta"]}}),
            expected(|r| {
                let id = int(r, "id").unwrap_or(0);
                (100..110).contains(&id) && text(r, "note").as_deref() == Some("beta")
            }),
        ),
    ];
    for (filter, want) in cases {
        let got = s.ids(filter.clone()).await;
        assert_eq!(got, want, "filter {filter}");
    }
    // Refused, never widened: a value of the wrong type, a field the table lacks.
    for filter in [
        json!({"id": {"eq": ["not a number"]}}),
        json!({"ghost": {"eq": [1]}}),
        json!({"id": {"gt": [null]}}),
    ] {
        let step = s.step(json!({"tables": {"items": ["id"]}, "filters": {"items": filter}}));
        let err = s
            .read(&step)
            .await
            .err()
            .unwrap_or_else(|| panic!("filter {filter} was not refused"));
        assert_eq!(
            err.category(),
            Category::Validation,
            "filter {filter}: {err}"
        );
    }
}

async fn orders_a_keyless_table_and_reads_an_empty_one(s: &Subject) {
    let step = s.step(json!({"tables": {"nokey": ["v", "w"], "empty": ["id"]}}));
    let batches = s.read(&step).await.expect("nokey and empty");
    let tables: Vec<&str> = batches.iter().map(|b| &*b.table).collect();
    let mut sorted = tables.clone();
    sorted.sort();
    assert_eq!(tables, sorted, "tables in ascending name order");
    let rows: Vec<(J, J)> = batches
        .iter()
        .filter(|b| &*b.table == "nokey")
        .flat_map(|b| &b.rows)
        .map(|r| (r.get("v").unwrap().to_json(), r.get("w").unwrap().to_json()))
        .collect();
    if s.capabilities.documents {
        // Keyed by `_id` after all, loaded in the fixture's order: read in that order.
        let fixture_order: Vec<(J, J)> = fixture()
            .into_iter()
            .find(|t| t.name == "nokey")
            .expect("nokey")
            .rows
            .into_iter()
            .map(|r| (r[0].clone(), r[1].clone()))
            .collect();
        assert_eq!(
            rows, fixture_order,
            "a keyless table of documents, in _id order"
        );
    } else {
        // Ordered by the selected columns (NULL first or last, the datasource's own rule),
        // duplicates kept.
        let non_null: Vec<(J, J)> = rows.iter().filter(|(v, _)| !v.is_null()).cloned().collect();
        assert_eq!(
            non_null,
            [(1, "a"), (1, "a"), (2, "a"), (2, "b"), (3, "c")]
                .map(|(v, w)| (json!(v), json!(w)))
                .to_vec()
        );
        assert_eq!(rows.len(), 6, "{rows:?}");
        assert!(
            rows.first().is_some_and(|r| r.0.is_null())
                || rows.last().is_some_and(|r| r.0.is_null()),
            "the NULL row sorts at one end: {rows:?}"
        );
    }
    let empty: usize = batches
        .iter()
        .filter(|b| &*b.table == "empty")
        .map(|b| b.rows.len())
        .sum();
    assert_eq!(empty, 0);
}

async fn splits_by_key_or_says_it_cannot(s: &Subject) {
    let ctx = Context::background();
    let step = s.step(json!({"tables": {"items": ["id"]}}));
    let mut c = s.build(&ctx).await;
    let span = c.key_span(&ctx, &step, "items").await;
    let _ = c.close(&ctx).await;
    let span = span.unwrap_or_else(|e| panic!("key_span: {e}"));
    let ranges = [
        (None, Some(1000)),
        (Some(1000), Some(2000)),
        (Some(2000), None),
    ];
    if !s.capabilities.key_ranges {
        assert_eq!(
            span, None,
            "a connector that cannot split a key reports no span"
        );
        let mut ranged = step.clone();
        ranged.key_ranges.insert(
            "items".into(),
            crate::KeyRange {
                lo: None,
                hi: Some(10.into()),
            },
        );
        let err = s.read(&ranged).await.expect_err("a key range is refused");
        assert_eq!(err.category(), Category::Validation, "{err}");
        return;
    }
    let span = span.expect("an integer key has a span");
    assert_eq!(
        (span.min.as_int(), span.max.as_int()),
        (Some(1), Some(ITEM_ROWS)),
        "{span:?}"
    );
    assert!(span.rows > 0, "an estimate of the rows: {span:?}");
    let mut all = Vec::new();
    for (lo, hi) in ranges {
        let mut ranged = step.clone();
        ranged.key_ranges.insert(
            "items".into(),
            crate::KeyRange {
                lo: lo.map(Into::into),
                hi: hi.map(Into::into),
            },
        );
        let ids: Vec<i64> = s
            .rows(&ranged, "items")
            .await
            .iter()
            .map(|r| r["id"].as_i64().expect("id"))
            .collect();
        assert!(
            ids.iter()
                .all(|id| lo.is_none_or(|l| *id >= l) && hi.is_none_or(|h| *id < h)),
            "range {lo:?}..{hi:?} read {:?}..",
            ids.first()
        );
        assert!(ids.is_sorted(), "range {lo:?}..{hi:?} in key order");
        all.extend(ids);
    }
    assert_eq!(
        all,
        (1..=ITEM_ROWS).collect::<Vec<_>>(),
        "each row in one range, once"
    );
}

async fn resumes_after_a_position(s: &Subject) {
    let mut step = s.step(json!({"tables": {"items": ["name"]}}));
    step.positions = true;
    let batches = s.read(&step).await.expect("a read with positions");
    let mut read = 0i64;
    for b in batches.iter().filter(|b| !b.rows.is_empty()) {
        read += b.rows.len() as i64;
        assert_eq!(
            b.position.as_deref(),
            Some(&[json!(read)][..]),
            "each batch ends at its last row's key"
        );
        assert!(
            b.rows.iter().all(|r| r.get("id").is_none()),
            "the key read only for positions is not in the rows"
        );
    }
    let mut resumed = s.step(json!({"tables": {"items": ["id"]}}));
    resumed
        .resume_after
        .insert("items".into(), vec![json!(1234)]);
    let ids: Vec<i64> = s
        .rows(&resumed, "items")
        .await
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(
        ids,
        (1235..=ITEM_ROWS).collect::<Vec<_>>(),
        "the rows after it, in order"
    );
}

async fn reads_past_a_watermark_with_ties(s: &Subject) {
    // `at` repeats three times; the watermark sits on the middle row of a tie.
    let step = s.step(json!({
        "tables": {"events": ["seq", "kind"]},
        "incremental": {"events": {"cursor": "at", "key": ["seq"],
            "after": {"cursor": "at", "key": ["seq"], "values": [10, 32]}}},
    }));
    let rows = s.rows(&step, "events").await;
    let got: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["at"].as_i64().expect("at"),
                r["seq"].as_i64().expect("seq"),
            )
        })
        .collect();
    let want: Vec<(i64, i64)> = (33..=90).map(|seq| ((seq - 1) / 3, seq)).collect();
    assert_eq!(
        got, want,
        "(cursor, key) past (10, 32), in that order, ties included"
    );
    let first = s.step(json!({
        "tables": {"events": ["kind"]},
        "incremental": {"events": {"cursor": "at", "key": ["seq"]}},
    }));
    assert_eq!(
        s.rows(&first, "events").await.len(),
        90,
        "a first read reads all"
    );
}

async fn stops_when_canceled(s: &Subject) {
    let ctx = Context::background();
    let run = ctx.child();
    let mut c = s.build(&run).await;
    let step = s.step(json!({"tables": {"items": ["id", "name"]}}));
    let outcome = async {
        let mut cursor = c.query_stream(&run, &step).await?;
        let first = cursor.next_batch(&run).await?;
        assert!(first.is_some_and(|b| !b.rows.is_empty()), "a first batch");
        run.cancel();
        let mut after = 0usize;
        loop {
            match cursor.next_batch(&run).await {
                Ok(Some(b)) => after += b.rows.len(),
                Ok(None) => return Ok(after),
                Err(e) => return Err(e),
            }
        }
    }
    .await;
    let _ = c.close(&ctx).await;
    match outcome {
        Err(e) => assert_eq!(e.category(), Category::Canceled, "{e}"),
        Ok(after) => panic!("the read went on to its end after the cancel ({after} rows more)"),
    }
}
