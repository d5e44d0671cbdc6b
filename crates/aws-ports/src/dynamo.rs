//! DynamoDB adapters: connections, jobs (with dedup locks and active-config markers),
//! execution states, the schema cache and rate-limit counters, all in one table.
//! The key design is documented in the crate docs.
//!
//! One file because every adapter here shares that one-table key design and its
//! transition helper; it splits by record type when the ports are narrowed (the rebuild).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, Delete, GlobalSecondaryIndex,
    KeySchemaElement, KeyType, Projection, ProjectionType, Put, ScalarAttributeType,
    TimeToLiveSpecification, TransactWriteItem,
};
use fetcher_engine::ports::{ConnectionStore, ExecutionStore, SchemaCache};
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, EngineError, ExecutionState,
    HostAttributes, ProtectedCredential, SchemaSnapshot, TenantContext, Timestamp,
};
use fetcher_host::error::{Result, ServiceError};
use fetcher_host::model::{Job, JobStatus, Progress, Transition};
use fetcher_host::ports::{ClaimOutcome, InsertOutcome, JobStore, RateDecision, RateLimiter};

type Item = HashMap<String, AttributeValue>;

/// GSI over jobs by (tenant, request hash), sorted by creation time.
pub const GSI_HASH: &str = "by-hash";
/// Sparse GSI over active (pending / processing) jobs, oldest first.
pub const GSI_WORK: &str = "work";
/// Sparse GSI over terminal jobs whose event is still pending (the outbox).
pub const GSI_OUTBOX: &str = "outbox";
/// The TTL attribute (epoch seconds).
pub const TTL_ATTR: &str = "expiresAt";

const WORK_PK: &str = "work";
const OUTBOX_PK: &str = "outbox";
const MAX_RETRIES: usize = 32;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s<'a>(item: &'a Item, k: &str) -> Option<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn get_n(item: &Item, k: &str) -> Option<i128> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// A tenant inside a composite key: length-prefixed, so no tenant id can forge another
/// tenant's key whatever characters it holds.
fn tk(prefix: &str, tenant: &str, rest: &str) -> String {
    format!("{prefix}#{}:{tenant}#{rest}", tenant.len())
}

fn pad(t: Timestamp) -> String {
    format!("{:020}", t.unix_nanos().max(0))
}

fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn epoch_millis() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i128)
        .unwrap_or(0)
}

fn key(pk: String, sk: &str) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

fn unavailable<E>(e: E) -> ServiceError
where
    E: std::error::Error + Send + Sync + 'static,
{
    ServiceError::unavailable("job store unavailable").with_cause(e)
}

fn engine_unavailable<E>(what: &'static str) -> impl FnOnce(E) -> EngineError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| EngineError::wrap(Category::Unavailable, what, e)
}

fn is_conditional<E: ProvideCode>(e: &SdkError<E, aws_smithy_http_response::HttpResponse>) -> bool {
    e.as_service_error()
        .and_then(|e| e.code())
        .is_some_and(|c| c == "ConditionalCheckFailedException")
}

/// Alias so the helper above names the SDK's response type without another dependency.
mod aws_smithy_http_response {
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
fn cancellation(
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

fn put(
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

fn delete(
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

// ---------------------------------------------------------------------------------------
// The store and its table
// ---------------------------------------------------------------------------------------

/// Every DynamoDB-backed port over one table. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// A liveness probe for readiness checks (DescribeTable).
    pub async fn ping(&self) -> Result<()> {
        self.client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| ServiceError::unavailable("DynamoDB unavailable").with_cause(e))?;
        Ok(())
    }

    /// Creates the table (and its GSIs and TTL) if it does not exist — tests and the
    /// local bootstrap; `template.yaml` declares the same table for deployments.
    pub async fn create_table(&self) -> Result<()> {
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attribute")
        };
        let ks = |name: &str, t: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(t)
                .build()
                .expect("key schema")
        };
        let gsi = |name: &str, pk: &str, sk: &str| {
            GlobalSecondaryIndex::builder()
                .index_name(name)
                .key_schema(ks(pk, KeyType::Hash))
                .key_schema(ks(sk, KeyType::Range))
                // Every index query reads a job's document and version (as the template).
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::Include)
                        .non_key_attributes("doc")
                        .non_key_attributes("ver")
                        .build(),
                )
                .build()
                .expect("gsi")
        };
        let res = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attr("pk"))
            .attribute_definitions(attr("sk"))
            .attribute_definitions(attr("hpk"))
            .attribute_definitions(attr("hsk"))
            .attribute_definitions(attr("wpk"))
            .attribute_definitions(attr("wsk"))
            .attribute_definitions(attr("opk"))
            .attribute_definitions(attr("osk"))
            .key_schema(ks("pk", KeyType::Hash))
            .key_schema(ks("sk", KeyType::Range))
            .global_secondary_indexes(gsi(GSI_HASH, "hpk", "hsk"))
            .global_secondary_indexes(gsi(GSI_WORK, "wpk", "wsk"))
            .global_secondary_indexes(gsi(GSI_OUTBOX, "opk", "osk"))
            .send()
            .await;
        match res {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .and_then(|e| e.code())
                    .is_some_and(|c| c == "ResourceInUseException") =>
            {
                return Ok(());
            }
            Err(e) => return Err(unavailable(e)),
        }
        let _ = self
            .client
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name(TTL_ATTR)
                    .build()
                    .expect("ttl"),
            )
            .send()
            .await;
        Ok(())
    }

    async fn get_item(&self, k: Item) -> std::result::Result<Option<Item>, ServiceError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(k))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(out.item)
    }

    async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> std::result::Result<
        (),
        SdkError<TransactWriteItemsError, aws_smithy_http_response::HttpResponse>,
    > {
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map(|_| ())
    }
}

// ---------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------

fn conn_pk(tenant: &str) -> String {
    format!("CONN#{tenant}")
}

fn name_sk(name: &str) -> String {
    format!("N#{name}")
}

fn id_sk(id: &str) -> String {
    format!("I#{id}")
}

fn not_found() -> EngineError {
    EngineError::new(Category::NotFound, "connection not found")
}

const CONN_UNAVAILABLE: &str = "connection store unavailable";

fn descriptor_from(item: &Item) -> fetcher_engine::Result<ConnectionDescriptor> {
    let corrupt = || EngineError::new(Category::Internal, "stored connection is corrupt");
    let mut d: ConnectionDescriptor =
        serde_json::from_str(get_s(item, "doc").ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    d.host_attributes =
        serde_json::from_str::<HostAttributes>(get_s(item, "attrs").ok_or_else(corrupt)?)
            .map_err(|_| corrupt())?;
    d.id = get_s(item, "id").ok_or_else(corrupt)?.to_owned();
    Ok(d)
}

fn name_item(
    tenant: &str,
    d: &ConnectionDescriptor,
    credential: Option<&ProtectedCredential>,
) -> Item {
    let mut item = key(conn_pk(tenant), &name_sk(&d.config_name));
    item.insert("id".into(), s(&d.id));
    item.insert(
        "doc".into(),
        s(serde_json::to_string(d).expect("descriptor is JSON")),
    );
    item.insert(
        "attrs".into(),
        s(serde_json::to_string(&d.host_attributes).expect("attributes are JSON")),
    );
    if let Some(c) = credential {
        item.insert(
            "cred".into(),
            AttributeValue::B(Blob::new(c.ciphertext.clone())),
        );
        item.insert("credVersion".into(), s(&c.key_version));
    }
    item
}

/// What a re-encryption pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReencryptReport {
    /// Stored credentials seen.
    pub credentials: u64,
    /// Re-encrypted under the current key version.
    pub reencrypted: u64,
    /// Not readable under any version of the ring (left as they are).
    pub unreadable: u64,
}

impl DynamoStore {
    /// Re-encrypts every stored credential, across tenants, that is not under the
    /// cipher's current key version (after a master key rotation): a scan of the
    /// connection items, each rewritten only if its version is still the one read.
    pub async fn reencrypt_credentials(
        &self,
        cipher: &fetcher_crypto::CredentialCipher,
        current_version: &str,
    ) -> Result<ReencryptReport> {
        let mut report = ReencryptReport::default();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :conn) AND attribute_exists(cred)")
                .expression_attribute_values(":conn", s("CONN#"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                let Some(cred) = credential_from(item) else {
                    continue;
                };
                report.credentials += 1;
                if cred.key_version == current_version {
                    continue;
                }
                let revealed = std::str::from_utf8(&cred.ciphertext)
                    .ok()
                    .and_then(|text| cipher.reveal(text, &cred.key_version).ok());
                let Some(plain) = revealed else {
                    report.unreadable += 1;
                    continue;
                };
                let fresh = cipher
                    .protect(&plain)
                    .map_err(|e| ServiceError::internal("re-encryption failed").with_cause(e))?;
                let (Some(pk), Some(sk)) = (item.get("pk"), item.get("sk")) else {
                    continue;
                };
                let res = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .key("pk", pk.clone())
                    .key("sk", sk.clone())
                    .update_expression("SET cred = :c, credVersion = :v")
                    .condition_expression("credVersion = :old")
                    .expression_attribute_values(
                        ":c",
                        AttributeValue::B(Blob::new(fresh.ciphertext.into_bytes())),
                    )
                    .expression_attribute_values(":v", s(&fresh.key_version))
                    .expression_attribute_values(":old", s(&cred.key_version))
                    .send()
                    .await;
                match res {
                    Ok(_) => report.reencrypted += 1,
                    Err(e) if is_conditional(&e) => {} // changed meanwhile (a PATCH): it is current
                    Err(e) => return Err(unavailable(e)),
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(report)
    }
}

fn credential_from(item: &Item) -> Option<ProtectedCredential> {
    let ciphertext = item.get("cred")?.as_b().ok()?.as_ref().to_vec();
    Some(ProtectedCredential {
        ciphertext,
        key_version: get_s(item, "credVersion").unwrap_or_default().to_owned(),
    })
}

impl DynamoStore {
    async fn conn_get(&self, tenant: &str, sk: &str) -> fetcher_engine::Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(conn_pk(tenant), sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(engine_unavailable(CONN_UNAVAILABLE))?;
        Ok(out.item)
    }

    /// The live name item of connection `id`.
    async fn conn_by_id(&self, tenant: &str, id: &str) -> fetcher_engine::Result<Option<Item>> {
        if id.is_empty() {
            return Ok(None);
        }
        let Some(idx) = self.conn_get(tenant, &id_sk(id)).await? else {
            return Ok(None);
        };
        let Some(name) = get_s(&idx, "name") else {
            return Ok(None);
        };
        Ok(self
            .conn_get(tenant, &name_sk(name))
            .await?
            .filter(|item| get_s(item, "id") == Some(id)))
    }

    /// Rewrites the name item of `current` (same name) with `d`, keeping the secret when
    /// `credential` is `None`. Conditional on the record still being connection `id`.
    async fn conn_update_same_name(
        &self,
        tenant: &str,
        id: &str,
        d: &ConnectionDescriptor,
        credential: Option<&ProtectedCredential>,
    ) -> fetcher_engine::Result<()> {
        let mut d = d.clone();
        d.id = id.to_owned();
        let mut expr = String::from("SET doc = :doc, attrs = :attrs");
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(conn_pk(tenant), &name_sk(&d.config_name))))
            .condition_expression("attribute_exists(pk) AND id = :id")
            .expression_attribute_values(":id", s(id))
            .expression_attribute_values(
                ":doc",
                s(serde_json::to_string(&d).expect("descriptor is JSON")),
            )
            .expression_attribute_values(
                ":attrs",
                s(serde_json::to_string(&d.host_attributes).expect("attributes are JSON")),
            );
        if let Some(c) = credential {
            expr.push_str(", cred = :cred, credVersion = :cv");
            req = req
                .expression_attribute_values(
                    ":cred",
                    AttributeValue::B(Blob::new(c.ciphertext.clone())),
                )
                .expression_attribute_values(":cv", s(&c.key_version));
        }
        match req.update_expression(expr).send().await {
            Ok(_) => Ok(()),
            Err(e) if is_conditional(&e) => Err(not_found()),
            Err(e) => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
        }
    }

    /// Deletes the name item (conditional on `id`) and the id item in one transaction.
    async fn conn_delete(&self, tenant: &str, name: &str, id: &str) -> fetcher_engine::Result<()> {
        let items = vec![
            delete(
                &self.table,
                key(conn_pk(tenant), &name_sk(name)),
                Some("id = :id"),
                &[(":id", s(id))],
            ),
            delete(&self.table, key(conn_pk(tenant), &id_sk(id)), None, &[]),
        ];
        match self.transact(items).await {
            Ok(()) => Ok(()),
            Err(e) if cancellation(&e).is_some() => Err(not_found()),
            Err(e) => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
        }
    }
}

impl ConnectionStore for DynamoStore {
    fn find<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(async move {
            self.conn_get(&t.tenant_id, &name_sk(name))
                .await?
                .map(|i| descriptor_from(&i))
                .transpose()
        })
    }

    fn create<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut d = d.clone();
            if d.id.is_empty() {
                d.id = uuid::Uuid::new_v4().to_string();
            }
            let tenant = &t.tenant_id;
            let mut idx = key(conn_pk(tenant), &id_sk(&d.id));
            idx.insert("name".into(), s(&d.config_name));
            let items = vec![
                put(
                    &self.table,
                    name_item(tenant, &d, c),
                    Some("attribute_not_exists(pk)"),
                    &[],
                ),
                put(&self.table, idx, Some("attribute_not_exists(pk)"), &[]),
            ];
            match self.transact(items).await {
                Ok(()) => Ok(()),
                Err(e)
                    if cancellation(&e)
                        .is_some_and(|r| r.iter().any(|c| c == "ConditionalCheckFailed")) =>
                {
                    Err(EngineError::new(
                        Category::Conflict,
                        fetcher_engine::error::msg::CONNECTION_EXISTS,
                    ))
                }
                Err(e) => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
            }
        })
    }

    fn update<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let item = self
                .conn_get(&t.tenant_id, &name_sk(&d.config_name))
                .await?
                .ok_or_else(not_found)?;
            let id = get_s(&item, "id").unwrap_or_default().to_owned();
            self.conn_update_same_name(&t.tenant_id, &id, d, c).await
        })
    }

    fn delete<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let item = self
                .conn_get(&t.tenant_id, &name_sk(name))
                .await?
                .ok_or_else(not_found)?;
            let id = get_s(&item, "id").unwrap_or_default().to_owned();
            self.conn_delete(&t.tenant_id, name, &id).await
        })
    }

    fn list<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
    ) -> BoxFuture<'a, fetcher_engine::Result<Vec<ConnectionDescriptor>>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut start: Option<Item> = None;
            loop {
                let page = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .key_condition_expression("pk = :pk AND begins_with(sk, :n)")
                    .expression_attribute_values(":pk", s(conn_pk(&t.tenant_id)))
                    .expression_attribute_values(":n", s("N#"))
                    .consistent_read(true)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(engine_unavailable(CONN_UNAVAILABLE))?;
                for item in page.items() {
                    out.push(descriptor_from(item)?);
                }
                match page.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => break,
                }
            }
            Ok(out)
        })
    }

    fn find_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(async move {
            self.conn_by_id(&t.tenant_id, id)
                .await?
                .map(|i| descriptor_from(&i))
                .transpose()
        })
    }

    fn update_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let tenant = &t.tenant_id;
            let current = self.conn_by_id(tenant, id).await?.ok_or_else(not_found)?;
            let old_name = descriptor_from(&current)?.config_name;
            if old_name == d.config_name {
                return self.conn_update_same_name(tenant, id, d, c).await;
            }
            // A rename: move the record to the new name in one transaction.
            let mut d = d.clone();
            d.id = id.to_owned();
            let kept = credential_from(&current);
            let mut idx = key(conn_pk(tenant), &id_sk(id));
            idx.insert("name".into(), s(&d.config_name));
            let items = vec![
                delete(
                    &self.table,
                    key(conn_pk(tenant), &name_sk(&old_name)),
                    Some("id = :id"),
                    &[(":id", s(id))],
                ),
                put(
                    &self.table,
                    name_item(tenant, &d, c.or(kept.as_ref())),
                    Some("attribute_not_exists(pk)"),
                    &[],
                ),
                put(&self.table, idx, None, &[]),
            ];
            match self.transact(items).await {
                Ok(()) => Ok(()),
                Err(e) => match cancellation(&e) {
                    Some(r) if r.get(1).is_some_and(|c| c == "ConditionalCheckFailed") => {
                        Err(EngineError::new(
                            Category::Conflict,
                            fetcher_engine::error::msg::CONNECTION_EXISTS,
                        ))
                    }
                    Some(_) => Err(not_found()),
                    None => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
                },
            }
        })
    }

    fn delete_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let current = self
                .conn_by_id(&t.tenant_id, id)
                .await?
                .ok_or_else(not_found)?;
            let name = descriptor_from(&current)?.config_name;
            self.conn_delete(&t.tenant_id, &name, id).await
        })
    }

    fn credential<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ProtectedCredential>>> {
        Box::pin(async move {
            Ok(self
                .conn_get(&t.tenant_id, &name_sk(name))
                .await?
                .and_then(|i| credential_from(&i)))
        })
    }
}

// ---------------------------------------------------------------------------------------
// Execution states
// ---------------------------------------------------------------------------------------

impl ExecutionStore for DynamoStore {
    fn save<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        state: &'a ExecutionState,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut item = key(tk("EXEC", &t.tenant_id, &state.job_id), "E");
            item.insert(
                "doc".into(),
                s(serde_json::to_string(state).expect("state is JSON")),
            );
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(engine_unavailable("execution store unavailable"))?;
            Ok(())
        })
    }

    fn find<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        job_id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ExecutionState>>> {
        Box::pin(async move {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(key(tk("EXEC", &t.tenant_id, job_id), "E")))
                .consistent_read(true)
                .send()
                .await
                .map_err(engine_unavailable("execution store unavailable"))?;
            out.item
                .map(|i| {
                    get_s(&i, "doc")
                        .and_then(|d| serde_json::from_str(d).ok())
                        .ok_or_else(|| {
                            EngineError::new(Category::Internal, "stored state is corrupt")
                        })
                })
                .transpose()
        })
    }
}

// ---------------------------------------------------------------------------------------
// Schema cache: DynamoDB items with a TTL, an in-process fallback when unreachable
// ---------------------------------------------------------------------------------------

/// The schema cache: `SCHEMA#<tenant>#<configName>` items expiring after `ttl` (checked on
/// read, and removed by DynamoDB's TTL). When DynamoDB is unreachable, reads and writes
/// fall back to an in-process map with the same TTL, as the reference falls back from
/// Redis to memory.
pub struct DynamoSchemaCache {
    store: DynamoStore,
    ttl: Duration,
    local: Mutex<HashMap<(String, String), (Instant, SchemaSnapshot)>>,
}

impl DynamoSchemaCache {
    pub fn new(store: DynamoStore, ttl: Duration) -> Self {
        DynamoSchemaCache {
            store,
            ttl,
            local: Mutex::default(),
        }
    }

    fn local_get(&self, tenant: &str, name: &str) -> Option<SchemaSnapshot> {
        let map = self.local.lock().unwrap();
        map.get(&(tenant.to_owned(), name.to_owned()))
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, snap)| snap.clone())
    }

    fn local_put(&self, tenant: &str, snap: &SchemaSnapshot) {
        let mut map = self.local.lock().unwrap();
        if map.len() > 10_000 {
            map.retain(|_, (at, _)| at.elapsed() < self.ttl);
        }
        map.insert(
            (tenant.to_owned(), snap.config_name.clone()),
            (Instant::now(), snap.clone()),
        );
    }
}

impl SchemaCache for DynamoSchemaCache {
    fn get<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<SchemaSnapshot>>> {
        Box::pin(async move {
            let res = self
                .store
                .client
                .get_item()
                .table_name(&self.store.table)
                .set_key(Some(key(tk("SCHEMA", &t.tenant_id, name), "S")))
                .send()
                .await;
            match res {
                Ok(out) => Ok(out.item.and_then(|i| {
                    let live = get_n(&i, TTL_ATTR).is_none_or(|exp| exp > epoch_secs() as i128);
                    live.then(|| get_s(&i, "doc").and_then(|d| serde_json::from_str(d).ok()))
                        .flatten()
                })),
                Err(e) => {
                    tracing::warn!(error = %e, "schema cache: DynamoDB unreachable, using the in-process cache");
                    Ok(self.local_get(&t.tenant_id, name))
                }
            }
        })
    }

    fn put<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        snap: &'a SchemaSnapshot,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut item = key(tk("SCHEMA", &t.tenant_id, &snap.config_name), "S");
            item.insert(
                "doc".into(),
                s(serde_json::to_string(snap).expect("snapshot is JSON")),
            );
            item.insert(TTL_ATTR.into(), n(epoch_secs() + self.ttl.as_secs().max(1)));
            let res = self
                .store
                .client
                .put_item()
                .table_name(&self.store.table)
                .set_item(Some(item))
                .send()
                .await;
            if let Err(e) = res {
                tracing::warn!(error = %e, "schema cache: DynamoDB unreachable, using the in-process cache");
                self.local_put(&t.tenant_id, snap);
            }
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------
// Rate limits: one counter item per key with its window start, atomic ADD, TTL
// ---------------------------------------------------------------------------------------

impl RateLimiter for DynamoStore {
    /// A token bucket per key (the shared GCRA arithmetic): a consistent read of the
    /// key's `tat`, then a write conditioned on it being unchanged, retried on a lost
    /// race. A refusal writes nothing.
    fn hit<'a>(
        &'a self,
        key_: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision>> {
        Box::pin(async move {
            let k = key(format!("BUCKET#{key_}"), "B");
            for _ in 0..MAX_RETRIES {
                let stored = self.get_item(k.clone()).await?;
                let tat = stored.as_ref().and_then(|item| get_n(item, "tat"));
                let now = epoch_millis() * 1_000_000;
                let (decision, next) = fetcher_host::ports::gcra(tat, now, limit, window);
                let Some(next) = next else {
                    return Ok(decision);
                };
                let mut item = k.clone();
                item.insert("tat".into(), n(next));
                item.insert(TTL_ATTR.into(), n(epoch_secs() + window.as_secs() + 60));
                let put = self
                    .client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item));
                let put = match tat {
                    Some(old) => put
                        .condition_expression("tat = :old")
                        .expression_attribute_values(":old", n(old)),
                    None => put.condition_expression("attribute_not_exists(pk)"),
                };
                match put.send().await {
                    Ok(_) => return Ok(decision),
                    Err(e) if is_conditional(&e) => continue, // another hit won: re-read
                    Err(e) => {
                        return Err(
                            ServiceError::unavailable("rate limiter unavailable").with_cause(e)
                        );
                    }
                }
            }
            Err(ServiceError::unavailable("rate limiter contention"))
        })
    }
}

// ---------------------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------------------

fn job_pk(tenant: &str, id: &str) -> String {
    tk("JOB", tenant, id)
}

fn lock_pk(tenant: &str, hash: &str) -> String {
    tk("DEDUP", tenant, hash)
}

fn active_pk(tenant: &str, config: &str) -> String {
    tk("ACTIVE", tenant, config)
}

fn job_not_found() -> ServiceError {
    ServiceError::not_found("job not found")
}

fn corrupt() -> ServiceError {
    ServiceError::internal("stored job is corrupt")
}

/// The job item: the JSON document, an optimistic-concurrency version and the sparse
/// index attributes its listings need.
fn job_item(job: &Job, ver: i128) -> Item {
    let mut item = key(job_pk(&job.tenant_id, &job.id), "J");
    item.insert(
        "doc".into(),
        s(serde_json::to_string(job).expect("job is JSON")),
    );
    item.insert("ver".into(), n(ver));
    item.insert("hpk".into(), s(tk("H", &job.tenant_id, &job.request_hash)));
    item.insert(
        "hsk".into(),
        s(format!("{}#{}", pad(job.created_at), job.id)),
    );
    if job.status.is_active() {
        item.insert("wpk".into(), s(WORK_PK));
        item.insert(
            "wsk".into(),
            s(format!("{}#{}", pad(job.created_at), job.id)),
        );
    }
    if job.status.is_terminal() && job.pending_event.is_some() {
        let done = job.completed_at.unwrap_or(job.created_at);
        item.insert("opk".into(), s(OUTBOX_PK));
        item.insert(
            "osk".into(),
            s(format!("{}#{}#{}", pad(done), pad(job.created_at), job.id)),
        );
    }
    item
}

fn job_from(item: &Item) -> Result<(Job, i128)> {
    let job: Job =
        serde_json::from_str(get_s(item, "doc").ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    Ok((job, get_n(item, "ver").unwrap_or(0)))
}

/// The sort key of a processing job's lease item.
const LEASE_SK: &str = "L";

/// A processing job's lease item (`sk = L`, beside the job's `J`): its claim token
/// (`tok`), when its lease ends (`until`, nanoseconds), its run's progress (`prog`, JSON),
/// whether a cancel was asked (`cancel`) and a heartbeat counter (`hb`). Heartbeats
/// update only this item: about a hundred bytes, one write unit, in no index; the job
/// document (up to the 192 KiB request cap, projected into the GSIs) is written only by
/// the job's transitions, each of which writes or deletes the lease item with it.
#[derive(Debug, Clone, PartialEq)]
struct Lease {
    token: u32,
    until: Timestamp,
    progress: Option<Progress>,
    cancel: bool,
    beats: i128,
}

impl Lease {
    /// The lease a job's state calls for: one while it is processing.
    fn of(job: &Job) -> Option<Lease> {
        (job.status == JobStatus::Processing).then(|| Lease {
            token: job.attempts,
            until: job.lease_expires_at.unwrap_or(job.created_at),
            progress: job.progress,
            cancel: job.cancel_requested_at.is_some(),
            beats: 0,
        })
    }

    fn item(&self, tenant: &str, id: &str) -> Item {
        let mut item = key(job_pk(tenant, id), LEASE_SK);
        item.insert("tok".into(), n(self.token));
        item.insert("until".into(), n(self.until.unix_nanos()));
        item.insert("cancel".into(), AttributeValue::Bool(self.cancel));
        item.insert("hb".into(), n(self.beats));
        if let Some(p) = &self.progress {
            item.insert(
                "prog".into(),
                s(serde_json::to_string(p).expect("progress is JSON")),
            );
        }
        item
    }

    fn from_item(item: &Item) -> Result<Lease> {
        let progress = match get_s(item, "prog") {
            Some(p) => Some(serde_json::from_str(p).map_err(|_| corrupt())?),
            None => None,
        };
        Ok(Lease {
            token: get_n(item, "tok").ok_or_else(corrupt)? as u32,
            until: Timestamp::from_unix_nanos(get_n(item, "until").ok_or_else(corrupt)?),
            progress,
            cancel: item
                .get("cancel")
                .and_then(|v| v.as_bool().ok())
                .copied()
                .unwrap_or(false),
            beats: get_n(item, "hb").unwrap_or(0),
        })
    }

    /// The job as its lease says it is now: the live lease end and progress.
    fn overlay(&self, job: &mut Job) {
        if job.status == JobStatus::Processing && job.attempts == self.token {
            job.lease_expires_at = Some(self.until);
            if self.progress.is_some() {
                job.progress = self.progress;
            }
        }
    }
}

/// A job as read: the document's version and the lease item's heartbeat count (`None`
/// without one), which its next transition is conditional on.
struct Loaded {
    job: Job,
    ver: i128,
    beats: Option<i128>,
}

impl DynamoStore {
    /// The job item and its lease item, in one consistent query of the job's partition.
    async fn load(&self, tenant: &str, id: &str) -> Result<Option<Loaded>> {
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(job_pk(tenant, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let (mut doc, mut lease) = (None, None);
        for item in page.items() {
            match get_s(item, "sk") {
                Some("J") => doc = Some(job_from(item)?),
                Some(LEASE_SK) => lease = Some(Lease::from_item(item)?),
                _ => {}
            }
        }
        let Some((mut job, ver)) = doc else {
            return Ok(None);
        };
        if let Some(l) = &lease {
            l.overlay(&mut job);
        }
        Ok(Some(Loaded {
            job,
            ver,
            beats: lease.map(|l| l.beats),
        }))
    }

    async fn load_job(&self, tenant: &str, id: &str) -> Result<Option<(Job, i128)>> {
        Ok(self.load(tenant, id).await?.map(|l| (l.job, l.ver)))
    }

    /// The live lease end of a processing job (its lease item), if it has one.
    async fn lease_until(&self, tenant: &str, id: &str) -> Result<Option<Timestamp>> {
        Ok(
            match self.get_item(key(job_pk(tenant, id), LEASE_SK)).await? {
                Some(item) => Some(Lease::from_item(&item)?.until),
                None => None,
            },
        )
    }

    /// Read, decide with `change` (the in-memory store's rules), write back conditional
    /// on the version read; on a lost race, read again. A job leaving the active states
    /// releases its dedup lock and its active-config markers in the same transaction.
    async fn read_modify_write<T>(
        &self,
        tenant: &str,
        id: &str,
        mut change: impl FnMut(&mut Job) -> Result<(T, bool)>,
    ) -> Result<Option<T>> {
        for _ in 0..MAX_RETRIES {
            let Some(Loaded {
                mut job,
                ver,
                beats,
            }) = self.load(tenant, id).await?
            else {
                return Ok(None);
            };
            let was_active = job.status.is_active();
            let (out, write) = change(&mut job)?;
            if !write {
                return Ok(Some(out));
            }
            let cond = "ver = :v";
            let vals = [(":v", n(ver))];
            let mut items = vec![put(&self.table, job_item(&job, ver + 1), Some(cond), &vals)];
            // The lease item follows the job, conditional on the heartbeat read: a
            // heartbeat in between makes this transition read again.
            let (lease_cond, lease_vals) = match beats {
                Some(b) => ("hb = :hb", vec![(":hb", n(b))]),
                None => ("attribute_not_exists(pk)", vec![]),
            };
            match (Lease::of(&job), beats) {
                (Some(lease), _) => {
                    let lease = Lease {
                        beats: beats.unwrap_or(0) + 1,
                        ..lease
                    };
                    items.push(put(
                        &self.table,
                        lease.item(tenant, id),
                        Some(lease_cond),
                        &lease_vals,
                    ));
                }
                (None, Some(_)) => items.push(delete(
                    &self.table,
                    key(job_pk(tenant, id), LEASE_SK),
                    Some(lease_cond),
                    &lease_vals,
                )),
                (None, None) => {}
            }
            if was_active && job.status.is_terminal() {
                items.push(delete(
                    &self.table,
                    key(lock_pk(tenant, &job.request_hash), "D"),
                    Some("attribute_not_exists(pk) OR jobId = :id"),
                    &[(":id", s(&job.id))],
                ));
                for config in job.config_names() {
                    items.push(delete(
                        &self.table,
                        key(active_pk(tenant, config), &job.id),
                        None,
                        &[],
                    ));
                }
            }
            match self.transact(items).await {
                Ok(()) => return Ok(Some(out)),
                Err(e) if cancellation(&e).is_some() => {
                    // Lost a race (or a transaction conflict): read again and re-decide.
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(unavailable(e)),
            }
        }
        Err(ServiceError::unavailable("job store contention"))
    }

    async fn query_index(
        &self,
        index: &str,
        pk_attr: &str,
        pk: &str,
        mut keep: impl FnMut(&Job) -> bool,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index)
                .key_condition_expression("#p = :p")
                .expression_attribute_names("#p", pk_attr)
                .expression_attribute_values(":p", s(pk))
                .set_exclusive_start_key(start.take())
                .limit(limit.clamp(1, 500) as i32)
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                let (job, _) = job_from(item)?;
                if keep(&job) && out.len() < limit {
                    out.push(job);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }
}

impl JobStore for DynamoStore {
    fn insert<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<InsertOutcome>> {
        Box::pin(async move {
            let tenant = &job.tenant_id;
            let lock_key = key(lock_pk(tenant, &job.request_hash), "D");
            for _ in 0..MAX_RETRIES {
                let mut lock = lock_key.clone();
                lock.insert("jobId".into(), s(&job.id));
                let mut items = vec![
                    put(
                        &self.table,
                        job_item(job, 1),
                        Some("attribute_not_exists(pk)"),
                        &[],
                    ),
                    put(&self.table, lock, Some("attribute_not_exists(pk)"), &[]),
                ];
                if job.status.is_active() {
                    for config in job.config_names() {
                        let mut marker = key(active_pk(tenant, config), &job.id);
                        marker.insert("createdAt".into(), s(pad(job.created_at)));
                        items.push(put(&self.table, marker, None, &[]));
                    }
                } else {
                    items.truncate(1);
                }
                let reasons = match self.transact(items).await {
                    Ok(()) => return Ok(InsertOutcome::Created),
                    Err(e) => match cancellation(&e) {
                        Some(r) => r,
                        None => return Err(unavailable(e)),
                    },
                };
                if reasons
                    .first()
                    .is_some_and(|c| c == "ConditionalCheckFailed")
                {
                    return Err(ServiceError::conflict("job id already exists"));
                }
                if reasons.get(1).is_none_or(|c| c != "ConditionalCheckFailed") {
                    // A transaction conflict with a concurrent insert: try again.
                    tokio::task::yield_now().await;
                    continue;
                }
                // The hash is locked: report the active job holding it.
                let Some(held) = self.get_item(lock_key.clone()).await? else {
                    continue; // released meanwhile
                };
                let holder = get_s(&held, "jobId").unwrap_or_default().to_owned();
                match self.load_job(tenant, &holder).await? {
                    Some((existing, _)) if existing.status.is_active() => {
                        return Ok(InsertOutcome::Duplicate(Box::new(existing)));
                    }
                    _ => {
                        // A stale lock (its job is gone or terminal): drop it and retry.
                        let _ = self
                            .client
                            .delete_item()
                            .table_name(&self.table)
                            .set_key(Some(lock_key.clone()))
                            .condition_expression("jobId = :id")
                            .expression_attribute_values(":id", s(&holder))
                            .send()
                            .await;
                    }
                }
            }
            Err(ServiceError::unavailable("job store contention"))
        })
    }

    fn get<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move { Ok(self.load_job(tenant, id).await?.map(|(j, _)| j)) })
    }

    fn find_recent_by_hash<'a>(
        &'a self,
        tenant: &'a str,
        hash: &'a str,
        since: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Job>>> {
        Box::pin(async move {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(GSI_HASH)
                .key_condition_expression("hpk = :h AND hsk >= :since")
                .expression_attribute_values(":h", s(tk("H", tenant, hash)))
                .expression_attribute_values(":since", s(pad(since)))
                .scan_index_forward(false)
                .limit(1)
                .send()
                .await
                .map_err(unavailable)?;
            match page.items().first() {
                Some(item) => Ok(Some(job_from(item)?.0)),
                None => Ok(None),
            }
        })
    }

    fn claim<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        now: Timestamp,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ClaimOutcome>> {
        Box::pin(async move {
            let out = self
                .read_modify_write(tenant, id, |job| match job.claim(now, lease) {
                    Some(token) => Ok((
                        ClaimOutcome::Claimed {
                            job: Box::new(job.clone()),
                            token,
                        },
                        true,
                    )),
                    None => Ok((ClaimOutcome::NotClaimable(Box::new(job.clone())), false)),
                })
                .await?;
            Ok(out.unwrap_or(ClaimOutcome::NotFound))
        })
    }

    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        change: Transition<'a>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            self.read_modify_write(tenant, id, |job| job.apply(&change).map(|q| (q, true)))
                .await?
                .ok_or_else(job_not_found)
        })
    }

    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            self.query_index(
                GSI_OUTBOX,
                "opk",
                OUTBOX_PK,
                |j| j.status.is_terminal() && j.pending_event.is_some(),
                limit,
            )
            .await
        })
    }

    fn has_active_jobs<'a>(
        &'a self,
        tenant: &'a str,
        config_name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(active_pk(tenant, config_name)))
                .consistent_read(true)
                .limit(1)
                .send()
                .await
                .map_err(unavailable)?;
            Ok(!page.items().is_empty())
        })
    }

    fn list_pending<'a>(&'a self, now: Timestamp, limit: usize) -> BoxFuture<'a, Result<Vec<Job>>> {
        Box::pin(async move {
            // The index holds the documents; a processing job's live lease is in its
            // lease item (its heartbeats move it), read for those the index calls expired.
            let listed = self
                .query_index(GSI_WORK, "wpk", WORK_PK, |j| j.claimable_at(now), limit)
                .await?;
            let mut out = Vec::with_capacity(listed.len());
            for mut job in listed {
                if job.status == JobStatus::Processing {
                    match self.lease_until(&job.tenant_id, &job.id).await? {
                        Some(until) if until > now => continue,
                        Some(until) => job.lease_expires_at = Some(until),
                        None => {}
                    }
                }
                out.push(job);
            }
            Ok(out)
        })
    }

    /// The heartbeat: one conditional update of the lease item alone (its token must
    /// still be the claim's), answering whether a cancel was asked. The job document and
    /// the indexes are not written.
    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        token: u32,
        until: Timestamp,
        progress: Option<Progress>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut update = "SET #u = :u ADD hb :one".to_owned();
            let mut req = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(job_pk(tenant, id), LEASE_SK)))
                .condition_expression("tok = :t")
                .expression_attribute_names("#u", "until")
                .expression_attribute_values(":u", n(until.unix_nanos()))
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":t", n(token))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
            if let Some(p) = &progress {
                update = "SET #u = :u, prog = :p ADD hb :one".to_owned();
                req = req.expression_attribute_values(
                    ":p",
                    s(serde_json::to_string(p).expect("progress is JSON")),
                );
            }
            match req.update_expression(update).send().await {
                Ok(out) => Ok(out
                    .attributes()
                    .and_then(|a| a.get("cancel"))
                    .and_then(|v| v.as_bool().ok())
                    .copied()
                    .unwrap_or(false)),
                Err(e) if is_conditional(&e) => {
                    Err(ServiceError::conflict("job is not held by this claim"))
                }
                Err(e) => Err(unavailable(e)),
            }
        })
    }
}
