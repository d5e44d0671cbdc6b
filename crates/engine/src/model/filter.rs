//! Filter conditions, typed once (docs/filters.md): the HTTP layer decodes into these, the
//! host hashes them for deduplication, the queue and the stores carry them, and each
//! connector turns them into a `WHERE` clause. The JSON shape is the reference's:
//! `{configName: {table: {field: {op: [values…]}}}}`.
//!
//! Decoding is strict: an operator outside [`Operator::ALL`], a condition that is not an
//! object or a value list that is not an array is a decode error, so a filter can never be
//! silently dropped and widen a job to the whole table. What the types cannot say (an empty
//! list, an arity, a value of the wrong type for the column) the connector checks against
//! the catalog.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A filter operator. The declaration order is the canonical order: the order in which
/// a condition's operators are hashed and turned into SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operator {
    Eq,
    Gt,
    Gte,
    Lt,
    Lte,
    Between,
    In,
    Nin,
    Ne,
    Like,
}

impl Operator {
    /// Every operator, in canonical order.
    pub const ALL: [Operator; 10] = [
        Operator::Eq,
        Operator::Gt,
        Operator::Gte,
        Operator::Lt,
        Operator::Lte,
        Operator::Between,
        Operator::In,
        Operator::Nin,
        Operator::Ne,
        Operator::Like,
    ];

    /// The wire name (`"eq"`, `"in"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Eq => "eq",
            Operator::Gt => "gt",
            Operator::Gte => "gte",
            Operator::Lt => "lt",
            Operator::Lte => "lte",
            Operator::Between => "between",
            Operator::In => "in",
            Operator::Nin => "nin",
            Operator::Ne => "ne",
            Operator::Like => "like",
        }
    }
}

/// One field's condition: each operator with its list of values, iterated in canonical
/// order. Every operator present applies (they are joined with `AND`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Condition(BTreeMap<Operator, Vec<Value>>);

impl Condition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) `op`'s values.
    pub fn with(mut self, op: Operator, values: Vec<Value>) -> Self {
        self.0.insert(op, values);
        self
    }

    pub fn get(&self, op: Operator) -> Option<&[Value]> {
        self.0.get(&op).map(Vec::as_slice)
    }

    /// `(operator, values)` in canonical order.
    pub fn iter(&self) -> impl Iterator<Item = (Operator, &[Value])> {
        self.0.iter().map(|(op, v)| (*op, v.as_slice()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(Operator, Vec<Value>)> for Condition {
    fn from_iter<I: IntoIterator<Item = (Operator, Vec<Value>)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// `field → condition`, for one table.
pub type TableFilters = BTreeMap<String, Condition>;

/// `table → field → condition`, for one datasource.
pub type DatasourceFilters = BTreeMap<String, TableFilters>;

/// `configName → table → field → condition`: a job's filters.
pub type Filters = BTreeMap<String, DatasourceFilters>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operators_round_trip_by_wire_name_in_canonical_order() {
        for op in Operator::ALL {
            let v = serde_json::to_value(op).unwrap();
            assert_eq!(v, json!(op.as_str()));
            assert_eq!(serde_json::from_value::<Operator>(v).unwrap(), op);
        }
        let mut sorted = Operator::ALL;
        sorted.sort();
        assert_eq!(sorted, Operator::ALL, "Ord is the canonical order");
    }

    #[test]
    fn a_condition_keeps_the_reference_json_shape() {
        let raw = json!({"like": ["a%"], "between": [1, 2], "eq": [null]});
        let c: Condition = serde_json::from_value(raw.clone()).unwrap();
        let ops: Vec<_> = c.iter().map(|(op, _)| op).collect();
        assert_eq!(ops, [Operator::Eq, Operator::Between, Operator::Like]);
        assert_eq!(serde_json::to_value(&c).unwrap(), raw);
        let f: Filters =
            serde_json::from_value(json!({"pg": {"public.users": {"id": raw}}})).unwrap();
        assert_eq!(f["pg"]["public.users"]["id"], c);
    }

    #[test]
    fn bad_shapes_do_not_decode() {
        for bad in [
            json!({"id": {"contains": ["x"]}}),
            json!({"id": {"eq": 1}}),
            json!({"id": {"eq": "x"}}),
            json!({"id": [1]}),
            json!({"id": "x"}),
            json!({"id": null}),
            json!(["id"]),
        ] {
            assert!(
                serde_json::from_value::<TableFilters>(bad.clone()).is_err(),
                "{bad} decoded"
            );
        }
    }
}
