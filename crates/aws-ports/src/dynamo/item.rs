//! The item codec every DynamoDB adapter here shares: attribute values, tenant-scoped
//! keys, sortable times, conditional puts and deletes for transactions, and the mapping of
//! SDK errors to our own.

use super::*;

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn get_s<'a>(item: &'a Item, k: &str) -> Option<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

pub(super) fn get_n(item: &Item, k: &str) -> Option<i128> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// A tenant inside a composite key: length-prefixed, so no tenant id can forge another
/// tenant's key whatever characters it holds.
pub(super) fn tk(prefix: &str, tenant: &str, rest: &str) -> String {
    format!("{prefix}#{}:{tenant}#{rest}", tenant.len())
}

pub(super) fn pad(t: Timestamp) -> String {
    format!("{:020}", t.unix_nanos().max(0))
}

pub(super) fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn epoch_millis() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i128)
        .unwrap_or(0)
}

pub(super) fn key(pk: String, sk: &str) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

pub(super) fn unavailable<E>(e: E) -> ServiceError
where
    E: std::error::Error + Send + Sync + 'static,
{
    ServiceError::unavailable("job store unavailable").with_cause(e)
}

pub(super) fn engine_unavailable<E>(what: &'static str) -> impl FnOnce(E) -> EngineError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| EngineError::wrap(Category::Unavailable, what, e)
}

pub(super) fn is_conditional<E: ProvideCode>(
    e: &SdkError<E, aws_smithy_http_response::HttpResponse>,
) -> bool {
    e.as_service_error()
        .and_then(|e| e.code())
        .is_some_and(|c| c == "ConditionalCheckFailedException")
}

/// Alias so the helper above names the SDK's response type without another dependency.
pub(super) mod aws_smithy_http_response {
    pub type HttpResponse = aws_sdk_dynamodb::config::http::HttpResponse;
}

/// Error codes of SDK service errors.
pub(crate) trait ProvideCode {
    fn code(&self) -> Option<&str>;
}

impl<T: aws_sdk_dynamodb::error::ProvideErrorMetadata> ProvideCode for T {
    fn code(&self) -> Option<&str> {
        aws_sdk_dynamodb::error::ProvideErrorMetadata::code(self)
    }
}

/// What a cancelled transaction says about each of its items: `Some(code)` per item.
pub(super) fn cancellation(
    e: &SdkError<TransactWriteItemsError, aws_smithy_http_response::HttpResponse>,
) -> Option<Vec<String>> {
    match e.as_service_error()? {
        TransactWriteItemsError::TransactionCanceledException(c) => Some(
            c.cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect(),
        ),
        _ => None,
    }
}

pub(super) fn put(
    table: &str,
    item: Item,
    condition: Option<&str>,
    values: &[(&str, AttributeValue)],
) -> TransactWriteItem {
    let mut p = Put::builder().table_name(table).set_item(Some(item));
    if let Some(c) = condition {
        p = p.condition_expression(c);
    }
    for (k, v) in values {
        p = p.expression_attribute_values(*k, v.clone());
    }
    TransactWriteItem::builder()
        .put(p.build().expect("put has table and item"))
        .build()
}

pub(super) fn delete(
    table: &str,
    k: Item,
    condition: Option<&str>,
    values: &[(&str, AttributeValue)],
) -> TransactWriteItem {
    let mut d = Delete::builder().table_name(table).set_key(Some(k));
    if let Some(c) = condition {
        d = d.condition_expression(c);
    }
    for (k, v) in values {
        d = d.expression_attribute_values(*k, v.clone());
    }
    TransactWriteItem::builder()
        .delete(d.build().expect("delete has table and key"))
        .build()
}
