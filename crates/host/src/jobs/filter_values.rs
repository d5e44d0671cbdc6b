//! Filter values checked against the cached schema when a job is created (#53 item 4):
//! a value of the wrong kind for its column (a word for a number, a number for a date,
//! `like` on a number) is refused then, naming the table, the column, its type and what
//! it takes, instead of failing when the job runs. The rule is the connectors' own
//! ([`fetcher_connectors::filter::value_fits`]), so what creation accepts the query binds.

use fetcher_connectors::filter::value_fits;
use fetcher_engine::{FilterKind, Operator, TableFilters, TableSnapshot};
use serde_json::Value;

use super::JobError;

/// Checks `filters` of `config.table` against the table's discovered column types.
/// Columns the schema gives no filter kind for (MongoDB, MySQL's boolean `TINYINT(1)`,
/// a column missing from the cache) are left to the run.
pub(super) fn check(
    config: &str,
    table: &str,
    schema: &TableSnapshot,
    filters: &TableFilters,
) -> Result<(), JobError> {
    for (field, condition) in filters {
        let Some(ty) = schema.types.get(field) else {
            continue;
        };
        let Some(kind) = ty.filter else {
            continue;
        };
        let at = || format!("filter on '{config}.{table}.{field}' ({})", ty.name);
        if kind == FilterKind::None {
            return Err(JobError::InvalidDataRequest(format!(
                "{}: a column of this type cannot be filtered",
                at()
            )));
        }
        for (op, values) in condition.iter() {
            if op == Operator::Like && !matches!(kind, FilterKind::Text | FilterKind::Uuid) {
                return Err(JobError::InvalidDataRequest(format!(
                    "{}: 'like' applies to text columns; use eq, in, gt, lt or between",
                    at()
                )));
            }
            let nullable = matches!(
                op,
                Operator::Eq | Operator::Ne | Operator::In | Operator::Nin
            );
            for v in values {
                if (nullable && v.is_null()) || value_fits(kind, v) {
                    continue;
                }
                return Err(JobError::InvalidDataRequest(format!(
                    "{}: '{}' takes {}, got {}",
                    at(),
                    op.as_str(),
                    kind.expected(),
                    what(kind, v)
                )));
            }
        }
    }
    Ok(())
}

/// What came, without repeating it (a filter value may be sensitive): its JSON kind, or
/// for a string of the right JSON kind, that its form is wrong.
fn what(kind: FilterKind, v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) if kind == FilterKind::Number => "a string that is not a number",
        Value::String(_) if kind != FilterKind::Text => "a string of another form",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fetcher_engine::FieldType;
    use serde_json::json;

    fn table() -> TableSnapshot {
        let ty = |name: &str, filter| FieldType {
            name: name.into(),
            filter,
            ..Default::default()
        };
        TableSnapshot {
            name: "orders".into(),
            types: [
                ("id", ty("bigint", Some(FilterKind::Number))),
                (
                    "at",
                    ty("timestamp with time zone", Some(FilterKind::DateTime)),
                ),
                ("doc", ty("jsonb", Some(FilterKind::None))),
                ("flag", ty("tinyint(1)", None)),
                ("name", ty("text", Some(FilterKind::Text))),
            ]
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t))
            .collect(),
            ..Default::default()
        }
    }

    fn check_json(f: serde_json::Value) -> Result<(), String> {
        let filters: TableFilters = serde_json::from_value(f).unwrap();
        check("shop", "orders", &table(), &filters).map_err(|e| match e {
            JobError::InvalidDataRequest(m) => m,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn values_of_the_wrong_kind_are_named() {
        assert_eq!(
            check_json(json!({"id": {"eq": ["abc"]}})).unwrap_err(),
            "filter on 'shop.orders.id' (bigint): 'eq' takes a number (or a decimal string), got a string that is not a number"
        );
        assert_eq!(
            check_json(json!({"at": {"gt": [20240101]}})).unwrap_err(),
            "filter on 'shop.orders.at' (timestamp with time zone): 'gt' takes a date or date-time string ('YYYY-MM-DD', 'YYYY-MM-DDTHH:MM:SS[.f][Z|±HH:MM]'), got a number"
        );
        assert_eq!(
            check_json(json!({"at": {"between": ["2024-01-01", "yesterday"]}})).unwrap_err(),
            "filter on 'shop.orders.at' (timestamp with time zone): 'between' takes a date or date-time string ('YYYY-MM-DD', 'YYYY-MM-DDTHH:MM:SS[.f][Z|±HH:MM]'), got a string of another form"
        );
        assert_eq!(
            check_json(json!({"id": {"like": ["1%"]}})).unwrap_err(),
            "filter on 'shop.orders.id' (bigint): 'like' applies to text columns; use eq, in, gt, lt or between"
        );
        assert_eq!(
            check_json(json!({"doc": {"eq": ["x"]}})).unwrap_err(),
            "filter on 'shop.orders.doc' (jsonb): a column of this type cannot be filtered"
        );
        assert_eq!(
            check_json(json!({"name": {"in": ["a", 1]}})).unwrap_err(),
            "filter on 'shop.orders.name' (text): 'in' takes a string, got a number"
        );
    }

    #[test]
    fn values_of_the_right_kind_pass() {
        for f in [
            json!({"id": {"eq": [1], "gt": ["12.5"], "in": [1, null]}}),
            json!({"at": {"between": ["2024-01-01", "2024-01-31T23:59:59Z"]}}),
            json!({"name": {"like": ["a%"], "ne": [null]}}),
            json!({"flag": {"eq": [true]}}),
            json!({"unknown": {"eq": ["left to the run"]}}),
        ] {
            assert_eq!(check_json(f.clone()), Ok(()), "{f}");
        }
    }
}
