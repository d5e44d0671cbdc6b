//! Row cells and rows.
//!
//! A [`Row`] is a record whose column names are shared, through an `Arc<Columns>`, by
//! every row a cursor reads from one table: names are sorted and their JSON keys
//! pre-encoded once, so encoding a row is a straight copy of bytes. Values are a small
//! dynamic type ([`Value`]); connectors map database types onto it losslessly (exact
//! decimals as strings, bytes as bytes, see the connectors crate for the table).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

/// One dynamic cell value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    /// NaN and ±Infinity cannot be encoded: the engine fails with
    /// `failed to serialize extraction result` (connectors encode them as tagged strings).
    Float(f64),
    String(String),
    /// Encoded as standard Base64.
    Bytes(Vec<u8>),
    List(Vec<Value>),
    /// Keys are kept sorted, as the canonical encoding requires.
    Map(BTreeMap<String, Value>),
    /// A JSON document kept as its text (compact, valid JSON), written verbatim: for
    /// documents a tree cannot hold exactly (a number beyond any double, a repeated key,
    /// a lone surrogate escape, very deep nesting). Connectors build it only from text
    /// they have checked is JSON.
    Json(Box<str>),
}

impl Value {
    /// The value as JSON, as the result renders it (bytes as Base64; a JSON document kept
    /// as text parsed back, which may round a number beyond a double).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::UInt(u) => J::from(*u),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::String(s) => J::String(s.clone()),
            Value::Bytes(b) => J::String(crate::json::base64(b)),
            Value::List(l) => J::Array(l.iter().map(Value::to_json).collect()),
            Value::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect()),
            Value::Json(text) => serde_json::from_str(text).unwrap_or(J::Null),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v.into())
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::UInt(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl From<serde_json::Value> for Value {
    /// JSON documents (e.g. JSON columns) become nested values; object keys end sorted.
    fn from(v: serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::UInt(u)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::String(s),
            serde_json::Value::Array(a) => Value::List(a.into_iter().map(Value::from).collect()),
            serde_json::Value::Object(o) => {
                Value::Map(o.into_iter().map(|(k, v)| (k, Value::from(v))).collect())
            }
        }
    }
}

impl Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            Value::UInt(u) => s.serialize_u64(*u),
            Value::Float(f) => s.serialize_f64(*f),
            Value::String(v) => s.serialize_str(v),
            Value::Bytes(b) => s.serialize_str(&crate::json::base64(b)),
            Value::List(l) => l.serialize(s),
            Value::Map(m) => m.serialize(s),
            Value::Json(text) => serde_json::value::RawValue::from_string(text.to_string())
                .map_err(serde::ser::Error::custom)?
                .serialize(s),
        }
    }
}

/// A column's type as the datasource's catalog declares it, for typed result formats
/// (Parquet, docs/parquet.md). NDJSON ignores it: there the [`Value`] says everything.
///
/// `Unknown` is what a connector that does not say gets, and what types with no typed
/// counterpart get (unbounded `numeric`, `interval`, `timetz`, MySQL `TIME`, …): such a
/// column is written as text, the value's NDJSON form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ColumnType {
    #[default]
    Unknown,
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    /// An exact decimal of bounded precision; values arrive as their digits (a string).
    Decimal {
        precision: u8,
        scale: u8,
    },
    Text,
    Bytes,
    Uuid,
    /// Values arrive as `YYYY-MM-DDT00:00:00Z` (docs/encodings.md).
    Date,
    /// Time of day without zone, `HH:MM:SS[.f]`.
    Time,
    /// Wall time without zone.
    Timestamp,
    /// An instant (UTC).
    TimestampTz,
    /// A JSON document (also arrays, written as their JSON).
    Json,
}

/// The column names of a row shape, with their sorted order and pre-encoded JSON keys.
#[derive(Debug, PartialEq)]
pub struct Columns {
    names: Vec<String>,
    /// Catalog types, by position; all `Unknown` unless the connector said.
    types: Vec<ColumnType>,
    /// Indices into `names`, sorted by name byte-wise; duplicate names appear once
    /// (the first occurrence wins).
    order: Vec<usize>,
    /// `"name":` for each entry of `names`, already escaped.
    keys: Vec<Box<[u8]>>,
}

impl Columns {
    pub fn new<I, S>(names: I) -> Arc<Columns>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let types = vec![ColumnType::Unknown; names.len()];
        Self::build(names, types)
    }

    /// Columns with their catalog types (`names` and `types` in the same order).
    ///
    /// # Panics
    /// When the two differ in length (a connector bug).
    pub fn typed<I, S>(columns: I) -> Arc<Columns>
    where
        I: IntoIterator<Item = (S, ColumnType)>,
        S: Into<String>,
    {
        let (names, types): (Vec<String>, Vec<ColumnType>) =
            columns.into_iter().map(|(n, t)| (n.into(), t)).unzip();
        Self::build(names, types)
    }

    fn build(names: Vec<String>, types: Vec<ColumnType>) -> Arc<Columns> {
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|&a, &b| names[a].as_bytes().cmp(names[b].as_bytes()).then(a.cmp(&b)));
        order.dedup_by(|b, a| names[*a] == names[*b]);
        let keys = names
            .iter()
            .map(|n| {
                let mut k = Vec::with_capacity(n.len() + 3);
                crate::json::write_str(&mut k, n);
                k.push(b':');
                k.into_boxed_slice()
            })
            .collect();
        Arc::new(Columns {
            names,
            types,
            order,
            keys,
        })
    }

    /// Names in the order the values are laid out.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Catalog types, in the order of [`names`](Self::names).
    pub fn types(&self) -> &[ColumnType] {
        &self.types
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    pub(crate) fn sorted(&self) -> impl ExactSizeIterator<Item = (usize, &[u8])> + '_ {
        self.order.iter().map(|&i| (i, &*self.keys[i]))
    }
}

/// One row: values laid out in the order of its [`Columns`].
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    columns: Arc<Columns>,
    values: Vec<Value>,
}

impl Row {
    /// # Panics
    /// When `values` and `columns` differ in length (a connector bug).
    pub fn new(columns: Arc<Columns>, values: Vec<Value>) -> Row {
        assert_eq!(
            columns.len(),
            values.len(),
            "row has {} values for {} columns",
            values.len(),
            columns.len()
        );
        Row { columns, values }
    }

    /// A row from a map (slow path: builds its own column shape).
    pub fn from_map(map: BTreeMap<String, Value>) -> Row {
        let (names, values): (Vec<String>, Vec<Value>) = map.into_iter().unzip();
        Row::new(Columns::new(names), values)
    }

    /// A row from `(name, value)` pairs.
    pub fn from_pairs<K: Into<String>, V: Into<Value>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Row {
        Row::from_map(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    pub fn columns(&self) -> &Arc<Columns> {
        &self.columns
    }

    pub fn values(&self) -> &[Value] {
        &self.values
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.columns.index_of(name).map(|i| &self.values[i])
    }

    /// `(name, value)` pairs in sorted name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> + '_ {
        self.columns
            .order
            .iter()
            .map(|&i| (self.columns.names[i].as_str(), &self.values[i]))
    }

    /// The row without its trailing values: `columns` are the leading columns of this
    /// row's (a connector drops the key columns it read only to report positions).
    ///
    /// # Panics
    /// When `columns` has more columns than the row.
    pub fn keep_leading(mut self, columns: Arc<Columns>) -> Row {
        assert!(
            columns.len() <= self.values.len(),
            "more columns than values"
        );
        debug_assert_eq!(columns.names(), &self.columns.names()[..columns.len()]);
        self.values.truncate(columns.len());
        Row {
            columns,
            values: self.values,
        }
    }

    /// The row as a sorted map (a copy).
    pub fn to_map(&self) -> BTreeMap<String, Value> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect()
    }
}

/// Rows of one table, as handed out by a cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct RowBatch {
    /// The table the rows came from, as the cursor names it.
    pub table: Arc<str>,
    pub rows: Vec<Row>,
    /// The table's columns when `rows` is empty: a connector sends one empty batch for a
    /// table without rows, so a typed format can still write its schema. `None` on
    /// batches with rows (each row carries its columns).
    pub columns: Option<Arc<Columns>>,
    /// Asked for with [`crate::ExtractionRequest::positions`]: the table's order-key
    /// values of the batch's last row, as the result renders them, when the table has a
    /// key a read can resume after (docs/engine.md, "Continued runs"); `None` otherwise.
    pub position: Option<Vec<serde_json::Value>>,
    /// Where the table's incremental read stands after this batch, when that is not its
    /// last row's `(cursor, key)`: a log read's position (the job's bound, on its last
    /// batch). The engine takes it as the table's watermark. (Boxed: most batches have none.)
    pub watermark: Option<Box<crate::Watermark>>,
}

impl RowBatch {
    pub fn new(table: impl Into<Arc<str>>, rows: Vec<Row>) -> RowBatch {
        RowBatch {
            table: table.into(),
            rows,
            columns: None,
            position: None,
            watermark: None,
        }
    }

    /// The batch that announces a table without rows.
    pub fn empty(table: impl Into<Arc<str>>, columns: Arc<Columns>) -> RowBatch {
        RowBatch {
            table: table.into(),
            rows: Vec::new(),
            columns: Some(columns),
            position: None,
            watermark: None,
        }
    }

    /// The columns of this batch's table: the first row's, or the announced ones.
    pub fn columns(&self) -> Option<&Arc<Columns>> {
        self.rows
            .first()
            .map(Row::columns)
            .or(self.columns.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_sort_dedup_and_preencode() {
        let c = Columns::new(["b", "a\"", "b", "A"]);
        let sorted: Vec<_> = c
            .sorted()
            .map(|(i, k)| (i, String::from_utf8(k.to_vec()).unwrap()))
            .collect();
        assert_eq!(
            sorted,
            [
                (3, "\"A\":".to_string()),
                (1, "\"a\\\"\":".into()),
                (0, "\"b\":".into())
            ]
        );
        let row = Row::new(c, vec![1.into(), 2.into(), 3.into(), 4.into()]);
        assert_eq!(row.get("b"), Some(&Value::Int(1)));
        let keys: Vec<_> = row.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["A", "a\"", "b"]);
    }

    #[test]
    #[should_panic(expected = "row has 1 values for 2 columns")]
    fn mismatched_row_panics() {
        Row::new(Columns::new(["a", "b"]), vec![Value::Null]);
    }

    #[test]
    fn json_documents_convert_with_sorted_keys() {
        let v =
            Value::from(serde_json::json!({"z": 1, "a": [true, null, 1.5, "s"], "big": u64::MAX}));
        let Value::Map(m) = v else { panic!("map") };
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "big", "z"]);
        assert_eq!(m["big"], Value::UInt(u64::MAX));
    }
}
