//! # fetcher-aws
//!
//! Fetcher's AWS adapters (docs/operations.md, "What runs where"): every host port and
//! engine storage port over DynamoDB, SQS, S3, KMS + Secrets Manager and EventBridge. Each
//! adapter passes the same conformance suites as the in-memory and embedded ones
//! (`tests/conformance.rs`, run against moto server; `AWS_ENDPOINT_URL` points them at
//! LocalStack or AWS unchanged).
//!
//! | module | ports |
//! |---|---|
//! | [`dynamo`] | `ConnectionStore`, `ExecutionStore`, `JobStore`, `RateLimiter` ([`dynamo::DynamoStore`]); `SchemaCache` with an in-process fallback ([`dynamo::DynamoSchemaCache`]) |
//! | [`s3`] | `ObjectStore`: multipart streaming upload with bounded parts in flight, streamed reads |
//! | [`sqs`] | `JobQueue` (signed envelope: headers → message attributes) and SQS record → `QueueMessage` |
//! | [`keys`] | `MasterKeySource` (KMS-encrypted master key in a secret; version = secret version id) and a cold-start-cached `KeyProvider` |
//! | [`events`] | `EventPublisher` on an EventBridge bus, checked per entry, bounded retries of the failed entries; the repair pass batches 10 per `PutEvents` |
//! | [`bootstrap`] | creates the resources `template.yaml` declares (tests, moto, LocalStack): table, bucket, job queue + DLQ, KMS key, master-key secret, bus, rule with retry policy + DLQ, queue policies |
//! | `host` (feature `host`) | the two Lambdas' shared wiring: settings from the environment (`FETCHER_*`), clients built once, the engine over these adapters |
//! | [`testing`] | the emulator harness of the tests: endpoint (starts moto if needed), clients, resources |
//!
//! Clients come from [`sdk_config`]: the standard chain, so `AWS_ENDPOINT_URL` (and
//! `AWS_ENDPOINT_URL_<SERVICE>`) override endpoints; S3 then uses path-style addressing.
//!
//! ## DynamoDB key design
//!
//! One table (`pk`, `sk`, both strings), on-demand, TTL attribute `expiresAt`, three
//! GSIs projecting all attributes. One table because every record is read by key (no
//! cross-entity joins), the two Lambdas need the same records, and transactions span
//! entities (a job, its dedup lock and its active-config markers change together).
//! Tenants inside composite keys are length-prefixed (`<len>:<tenant>`), so no tenant id
//! can produce another tenant's key.
//!
//! | record | `pk` | `sk` | other attributes |
//! |---|---|---|---|
//! | connection | `CONN#<tenant>` | `N#<configName>` | `id`, `doc` (descriptor JSON), `attrs`, `cred` (binary), `credVersion` |
//! | connection id index | `CONN#<tenant>` | `I#<id>` | `name` |
//! | job | `JOB#<t>#<jobId>` | `J` | `doc` (job JSON), `ver` (optimistic version), GSI keys below |
//! | job lease (while processing) | `JOB#<t>#<jobId>` | `L` | `tok` (claim token), `until` (lease end, ns), `prog` (progress JSON), `cancel`, `hb` (heartbeat count): a heartbeat updates this item alone (one write unit, no index); every transition of the job writes or deletes it in the same transaction, conditional on `hb` |
//! | dedup lock | `DEDUP#<t>#<requestHash>` | `D` | `jobId` of the active job holding the hash |
//! | active-config marker | `ACTIVE#<t>#<configName>` | `<jobId>` | one per config an active job reads |
//! | execution state | `EXEC#<t>#<jobId>` | `E` | `doc` |
//! | schema cache | `SCHEMA#<t>#<configName>` | `S` | `doc`, `expiresAt` (TTL, also checked on read) |
//! | tenant slots | `SLOTS#<tenant>` | `S` | `holds` (hold token → end, ns), `ver`, `expiresAt` (a day after the last hold's end) |
//! | rate-limit counter | `RATE#<key>` | `R` | `hits` (atomic `ADD`), `windowStart` (ms), `expiresAt` |
//!
//! | GSI | partition | sort | holds |
//! |---|---|---|---|
//! | `by-hash` | `hpk` = `H#<t>#<hash>` | `hsk` = created (20-digit ns) `#id` | every job: `find_recent_by_hash` is one query, newest first, `hsk >= since` |
//! | `work` | `wpk` = `work` | `wsk` = created `#id` | sparse: only pending/processing jobs; `list_pending` filters live leases out |
//! | `by-tenant` | `tpk` = `T#<t>#` | `tsk` = created `#id` | every job (written with it): the job list, newest first, by creation window |
//! | `outbox` | `opk` = `outbox` | `osk` = completed `#` created `#id` | sparse: only terminal jobs with a pending event; `list_pending_events` reads it in order |
//!
//! The two sparse GSIs use a constant partition key: they only ever hold the jobs that
//! need attention right now (small), and their readers scan them in order across
//! tenants. At very high job rates the partition would be sharded (`work#0..n`).
//!
//! **Configuration uniqueness**: creating a connection is a transaction of the name item
//! and the id item, both `attribute_not_exists(pk)`. A rename moves the name item in
//! one transaction.
//!
//! **Atomic dedup**: an insert is one `TransactWriteItems` of the job item
//! (`attribute_not_exists`), the dedup lock (`attribute_not_exists`) and the
//! active-config markers. Of concurrent identical inserts exactly one commits; the others
//! see the lock's condition fail, read the lock's job and return it as the duplicate. A
//! job leaving the active states (`complete`, `fail`) deletes its lock and markers in the
//! same transaction as its status write, so the lock never outlives an active job and
//! needs no TTL (a lock whose job is gone or terminal is treated as stale and removed).
//!
//! **Transitions** (`claim`, `renew`, `complete`, `fail`, `release`, clearing the event
//! marker) read the job (strongly consistent), apply exactly the in-memory store's rules
//! (`fetcher_host::model::Job`'s lifecycle methods, shared by every job store: claim tokens = attempt counter, leases,
//! `Conflict` on a lost claim) and write back conditional on the version read
//! (`ver = :v`); a lost race re-reads and re-decides. So every transition is atomic
//! and a redelivered message can never produce a second result or a second event.

pub mod bootstrap;
pub mod dynamo;
pub mod events;
#[cfg(feature = "host")]
pub mod host;
pub mod keys;
pub mod s3;
pub mod sqs;
pub mod testing;

pub use dynamo::{DynamoSchemaCache, DynamoStore};
pub use events::EventBridgePublisher;
pub use keys::{CachedKeyProvider, SecretsManagerKeySource};
pub use s3::S3ObjectStore;
pub use sqs::SqsJobQueue;

pub use aws_config::SdkConfig;

/// The shared SDK configuration from the standard chain (environment, profile, IMDS /
/// Lambda role), honouring `AWS_ENDPOINT_URL`.
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await
}

/// One client per service, built once (per cold start) and cloned freely.
#[derive(Clone, Debug)]
pub struct Clients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub kms: aws_sdk_kms::Client,
    pub secrets: aws_sdk_secretsmanager::Client,
    pub events: aws_sdk_eventbridge::Client,
}

impl Clients {
    /// Builds the clients; S3 uses path-style addressing when an endpoint override is
    /// set for it (emulators: `AWS_ENDPOINT_URL` or `AWS_ENDPOINT_URL_S3`),
    /// virtual-hosted style otherwise.
    pub fn new(config: &SdkConfig) -> Clients {
        let s3_override = config.endpoint_url().is_some()
            || std::env::var("AWS_ENDPOINT_URL_S3").is_ok_and(|v| !v.is_empty());
        let s3 = aws_sdk_s3::config::Builder::from(config)
            .force_path_style(s3_override)
            .build();
        Clients {
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            s3: aws_sdk_s3::Client::from_conf(s3),
            sqs: aws_sdk_sqs::Client::new(config),
            kms: aws_sdk_kms::Client::new(config),
            secrets: aws_sdk_secretsmanager::Client::new(config),
            events: aws_sdk_eventbridge::Client::new(config),
        }
    }
}
