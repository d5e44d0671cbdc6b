//! DynamoDB adapters, all over one table (the key design is in the crate docs): one module
//! per port it implements, and the item codec they share.
//!
//! | module | what it holds |
//! |---|---|
//! | `item` | the shared item codec: attribute values, tenant-scoped keys, sortable times, conditional puts and deletes in transactions, error mapping |
//! | this module | [`DynamoStore`]: the client, the table (creation, readiness) |
//! | `connections` | `ConnectionStore` (name and id items in one transaction), the credential re-encryption pass |
//! | `executions` | `ExecutionStore` |
//! | `schema_cache` | `SchemaCache` with an in-process fallback ([`DynamoSchemaCache`]) |
//! | `rate_limit` | `RateLimiter` (one counter item per key, atomic `ADD`, TTL) |
//! | `jobs` | `JobStore`: the job item and its indexes, dedup locks, active-config markers, read-modify-write transitions |
//! | `job_lease` | a processing job's lease item, which heartbeats update alone |
//! | `tenant_slots` | `TenantSlots`: one item per tenant with its live holds' ends, version-conditioned writes |
//! | `schedules` | `ScheduleStore`: a version-conditional item per sync's schedule; due ones in the `work` index under the partition `due` |
//! | `syncs` | a sync's item: its watermarks and its one active job, written in its jobs' transactions |
//! | `key_check` | the deployment's key check item, verified at each Lambda's cold start ([`KeyCheckError`]) |

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
use fetcher_host::model::{Job, JobId, JobStatus, Progress, SyncState, Transition};
use fetcher_host::ports::{ClaimOutcome, InsertOutcome, JobStore, RateDecision, RateLimiter};

type Item = HashMap<String, AttributeValue>;

/// GSI over jobs by (tenant, request hash), sorted by creation time.
pub const GSI_HASH: &str = "by-hash";
/// Sparse GSI over active (pending / processing) jobs, oldest first.
pub const GSI_WORK: &str = "work";
/// Sparse GSI over terminal jobs whose event is still pending (the outbox).
pub const GSI_OUTBOX: &str = "outbox";
/// GSI over a tenant's jobs by creation time (the job list).
pub const GSI_TENANT: &str = "by-tenant";
/// The TTL attribute (epoch seconds).
pub const TTL_ATTR: &str = "expiresAt";

const WORK_PK: &str = "work";
const OUTBOX_PK: &str = "outbox";
const MAX_RETRIES: usize = 32;

mod connections;
mod executions;
mod item;
mod job_lease;
mod jobs;
mod key_check;
mod rate_limit;
mod schedules;
mod schema_cache;
mod syncs;
mod tenant_slots;

pub use connections::ReencryptReport;
use item::*;
pub use key_check::KeyCheckError;
pub use schema_cache::DynamoSchemaCache;

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
            .attribute_definitions(attr("tpk"))
            .attribute_definitions(attr("tsk"))
            .key_schema(ks("pk", KeyType::Hash))
            .key_schema(ks("sk", KeyType::Range))
            .global_secondary_indexes(gsi(GSI_HASH, "hpk", "hsk"))
            .global_secondary_indexes(gsi(GSI_WORK, "wpk", "wsk"))
            .global_secondary_indexes(gsi(GSI_OUTBOX, "opk", "osk"))
            .global_secondary_indexes(gsi(GSI_TENANT, "tpk", "tsk"))
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
