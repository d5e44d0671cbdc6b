//! The wiring both Lambdas share (feature `host`): configuration from the environment
//! (one clap schema, `fetcher_host::settings`; every flag is exactly `true` or `false`, and
//! a `FETCHER_*` variable not in this table stops the cold start),
//! SDK clients built once per cold start, and the engine over the AWS adapters — the
//! same things `fetcher serve` wires over the embedded ones.
//!
//! | variable | meaning |
//! |---|---|
//! | `FETCHER_TABLE` | the DynamoDB table (required) |
//! | `FETCHER_BUCKET` | the result bucket (required) |
//! | `FETCHER_RESULT_PREFIX` | key prefix inside the bucket (default empty) |
//! | `FETCHER_QUEUE_URL` | the job queue (required by the API) |
//! | `FETCHER_MASTER_KEY_SECRET` | the secret holding the KMS-encrypted master key (required) |
//! | `FETCHER_EVENT_BUS` | the EventBridge bus (required by the extract function, which refuses to start without it) |
//! | `FETCHER_EVENT_SOURCE` | the events' `Source` (default `fetcher.worker`) |
//! | `FETCHER_MULTI_TENANT` | `true`: tenants from the JWT authorizer's `tenantId` claim |
//! | `FETCHER_LOG` | the log filter (default `info`) |
//! | `FETCHER_KEY_REFRESH_SECS` | how old the cached master keys may get before they are loaded afresh (default 300, 1 to 3600): after a rotation, warm containers seal and sign under the new version within it |
//! | `FETCHER_STACK_NAME` | the stack the functions belong to (the template sets it): the `Stack` dimension of every metric, so one stage's alarms never count another's (default `fetcher`) |
//! | `FETCHER_READ_PARTITIONS` | PostgreSQL connections per extraction step, 1 to 16 (default 1; docs/datasources.md, "Partitioned reads") |
//! | `FETCHER_PROGRESS_INTERVAL_MS` | how often a running job writes its progress with its lease heartbeat, and so how soon a cancel is seen (default 2000, at least 100) |
//! | `FETCHER_EXTRACT_CONCURRENCY` | extractions the event source runs at once (the template passes its `MaximumConcurrency`; default 10): the default of the per-tenant share below |
//! | `FETCHER_MAX_JOBS_PER_TENANT` | extractions of one tenant that run at once, whole jobs, continuations and ranges alike (default one less than `FETCHER_EXTRACT_CONCURRENCY`, at least 1): a message past it is sent again after `FETCHER_TENANT_DEFER_SECS` (default 20, 1 to 900) instead of taking an invocation (docs/operations.md, "Fair workers") |
//! | `FETCHER_RETRY_BACKOFF_SECS` | first delay before a retried job message comes back (default 30; doubles per receive, at most 15 minutes) instead of the queue's visibility timeout |
//! | `FETCHER_MAX_MESSAGE_AGE_SECS` | oldest job message trusted (default 21600); must exceed the queue's visibility × receive count (the template sets visibility × 6) |
//! | `FETCHER_ALLOW_UNAUTHENTICATED` | `true`: the API serves calls without verified claims (a private test deployment). Default `false`: a call the authorizer did not verify is 401, in every mode |
//! | `FETCHER_PRIVATE_NETWORKS` | private networks (comma-separated CIDRs) host safety admits: a VPC deployment's customer databases. Only subnets of the private ranges; a list reaching loopback, link-local or metadata addresses stops the cold start (default empty) |
//! | `FETCHER_ALLOW_PRIVATE_HOSTS` | `true`: API-supplied hosts may be private, loopback or metadata addresses (tests against a local database). Default `false`: host safety (SSRF) is on for every API-supplied host, in every mode |
//! | `FETCHER_SCHEMA_CACHE_TTL_SECS` | schema cache TTL (default 300) |
//! | `FETCHER_LEASE_SECS` | job lease (default 900, the Lambda maximum) |
//! | `FETCHER_EXTRACTION_TIMEOUT_SECS` | fixed bound on one extraction (default 300, the reference's; `0` = none, the template's). The extract function also bounds each run by its invocation's deadline less 30 s, so a slow job fails cleanly with `timeout` and its event goes out before Lambda stops the function |
//! | `FETCHER_MAX_RESULT_BYTES` | result ceiling (default 68719476736, 64 GiB: `fetcher_host::settings::DEFAULT_MAX_RESULT_BYTES` says why; `0` = unbounded). v2 and Parquet results stream to S3 in constant memory, so raising it costs no memory; v1 results (built in memory) stay capped at the reference's 256 MiB whatever this says |

use std::sync::Arc;
use std::time::Duration;

use clap::CommandFactory;
use fetcher_connectors::HostPolicy;
use fetcher_engine::Engine;
use fetcher_host::ports::ReadinessProbe;
use fetcher_host::ports::{JobStore, KeyProvider, ObjectStore};
use fetcher_host::settings::{ExtractionSettings, from_variables};
use fetcher_host::wiring::{Datasources, EngineSettings, HostPorts};

use crate::{
    CachedKeyProvider, Clients, DynamoSchemaCache, DynamoStore, S3ObjectStore,
    SecretsManagerKeySource,
};

/// Deployment settings read from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    pub table: String,
    pub bucket: String,
    pub result_prefix: String,
    pub queue_url: Option<String>,
    pub master_key_secret: String,
    pub event_bus: Option<String>,
    pub event_source: String,
    pub multi_tenant: bool,
    pub schema_cache_ttl: Duration,
    pub lease: Duration,
    pub extraction_timeout: Duration,
    pub max_result_bytes: i64,
    /// PostgreSQL connections per step (docs/datasources.md, "Partitioned reads").
    pub read_partitions: usize,
    /// Key ranges a big table is cut into at most, and rows per range at least
    /// (docs/operations.md, "Fan-out").
    pub fanout_ranges: usize,
    pub fanout_range_rows: i64,
    /// The first back-off of a retried job message; doubles per receive up to 15 minutes.
    pub retry_backoff: Duration,
    /// Extractions of one tenant that run at once (at least 1).
    pub max_jobs_per_tenant: usize,
    /// How long a message past its tenant's share waits before it comes back.
    pub tenant_defer: Duration,
    /// How old a job message may be and still be trusted. It must exceed the queue's
    /// visibility timeout × its receive count, or a late redelivery is rejected unseen
    /// (the template derives it so).
    pub max_message_age: Duration,
    /// The API refuses calls without verified claims (default; off only through
    /// `FETCHER_ALLOW_UNAUTHENTICATED=true`).
    pub require_auth: bool,
    /// `X-Product-Name` on every business route (`FETCHER_REQUIRE_PRODUCT=true`;
    /// docs/api.md, "Products").
    pub require_product: bool,
    /// Host safety on every API-supplied host (default; off only through
    /// `FETCHER_ALLOW_PRIVATE_HOSTS=true`).
    pub guard_hosts: bool,
    /// Private networks host safety admits (`FETCHER_PRIVATE_NETWORKS`; a VPC
    /// deployment's customer databases).
    pub private_networks: fetcher_connectors::PrivateNetworks,
    /// How often a running job's heartbeat writes its progress (and notices a cancel).
    pub progress_interval: Duration,
    /// The stack (stage) the functions belong to: the `Stack` dimension of every metric.
    pub stack_name: String,
    /// How old the cached master keys may get before they are loaded afresh, so a warm
    /// container seals and signs under a rotated key within it.
    pub key_refresh: Duration,
}

impl HostConfig {
    /// Reads the process environment; a `FETCHER_*` variable no setting declares is
    /// refused.
    pub fn from_env() -> Result<HostConfig, String> {
        let present = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        Self::parse(|k| std::env::var(k).ok(), present)
    }

    /// What the template's environment would say for resources made by
    /// [`crate::bootstrap`] (tests, benches, local runs); other settings at their defaults.
    pub fn for_resources(r: &crate::bootstrap::Resources) -> HostConfig {
        let true_ = "true".to_owned();
        let vars = [
            ("FETCHER_TABLE", &r.table),
            ("FETCHER_BUCKET", &r.bucket),
            ("FETCHER_QUEUE_URL", &r.queue_url),
            ("FETCHER_MASTER_KEY_SECRET", &r.secret_id),
            ("FETCHER_EVENT_BUS", &r.bus_name),
            ("FETCHER_EVENT_SOURCE", &r.event_source),
            // Tests reach PostgreSQL on 127.0.0.1, without an authorizer in front.
            ("FETCHER_ALLOW_PRIVATE_HOSTS", &true_),
            ("FETCHER_ALLOW_UNAUTHENTICATED", &true_),
        ];
        Self::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).clone())
        })
        .expect("bootstrap resources name every required setting")
    }

    /// Reads settings through `lookup` (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<HostConfig, String> {
        Self::parse(lookup, std::iter::empty())
    }

    fn parse(
        lookup: impl Fn(&str) -> Option<String>,
        present: impl IntoIterator<Item = String>,
    ) -> Result<HostConfig, String> {
        let s: LambdaSettings = from_variables(LambdaSettings::command(), lookup, present)?;
        Ok(HostConfig {
            table: s.table,
            bucket: s.bucket,
            result_prefix: s.result_prefix,
            queue_url: s.queue_url,
            master_key_secret: s.master_key_secret,
            event_bus: s.event_bus,
            event_source: s.event_source,
            multi_tenant: s.extraction.multi_tenant,
            schema_cache_ttl: s.extraction.schema_ttl(),
            lease: Duration::from_secs(s.lease_secs),
            extraction_timeout: s.extraction.extraction_timeout(),
            max_result_bytes: s.extraction.max_result_bytes(),
            read_partitions: s.extraction.read_partitions.into(),
            fanout_ranges: s.extraction.fanout_ranges.into(),
            fanout_range_rows: s.extraction.fanout_range_rows as i64,
            max_message_age: Duration::from_secs(s.max_message_age_secs),
            retry_backoff: Duration::from_secs(s.retry_backoff_secs),
            max_jobs_per_tenant: s
                .max_jobs_per_tenant
                .map(|n| n as usize)
                .unwrap_or_else(|| usize::from(s.extract_concurrency).saturating_sub(1))
                .max(1),
            tenant_defer: Duration::from_secs(s.tenant_defer_secs),
            require_auth: !s.allow_unauthenticated,
            require_product: s.extraction.require_product,
            guard_hosts: !s.allow_private_hosts,
            private_networks: s.extraction.private_networks.clone(),
            progress_interval: s.extraction.progress_interval(),
            stack_name: s.stack_name,
            key_refresh: Duration::from_secs(s.key_refresh_secs),
        })
    }
}

/// The Lambdas' settings schema: the module table above, as clap arguments read from the
/// environment only (`fetcher_host::settings`).
#[derive(clap::Parser, Debug)]
#[command(name = "fetcher-lambda")]
struct LambdaSettings {
    #[arg(long, env = "FETCHER_TABLE")]
    table: String,
    #[arg(long, env = "FETCHER_BUCKET")]
    bucket: String,
    #[arg(long, env = "FETCHER_RESULT_PREFIX", default_value = "")]
    result_prefix: String,
    #[arg(long, env = "FETCHER_QUEUE_URL")]
    queue_url: Option<String>,
    #[arg(long, env = "FETCHER_MASTER_KEY_SECRET")]
    master_key_secret: String,
    #[arg(long, env = "FETCHER_EVENT_BUS")]
    event_bus: Option<String>,
    #[arg(long, env = "FETCHER_EVENT_SOURCE", default_value = crate::events::DEFAULT_SOURCE)]
    event_source: String,
    #[command(flatten)]
    extraction: ExtractionSettings,
    #[arg(long, env = "FETCHER_LEASE_SECS", default_value_t = 900)]
    lease_secs: u64,
    #[arg(long, env = "FETCHER_RETRY_BACKOFF_SECS", default_value_t = 30)]
    retry_backoff_secs: u64,
    #[arg(long, env = "FETCHER_EXTRACT_CONCURRENCY", default_value_t = 10,
        value_parser = clap::value_parser!(u16).range(1..))]
    extract_concurrency: u16,
    #[arg(long, env = "FETCHER_MAX_JOBS_PER_TENANT",
        value_parser = clap::value_parser!(u32).range(1..))]
    max_jobs_per_tenant: Option<u32>,
    #[arg(long, env = "FETCHER_TENANT_DEFER_SECS", default_value_t = 20,
        value_parser = clap::value_parser!(u64).range(1..=900))]
    tenant_defer_secs: u64,
    #[arg(long, env = "FETCHER_MAX_MESSAGE_AGE_SECS", default_value_t = 6 * 3600)]
    max_message_age_secs: u64,
    #[arg(long, env = "FETCHER_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    #[arg(long, env = "FETCHER_ALLOW_PRIVATE_HOSTS")]
    allow_private_hosts: bool,
    #[arg(long, env = "FETCHER_STACK_NAME", default_value = "fetcher")]
    stack_name: String,
    #[arg(long, env = "FETCHER_KEY_REFRESH_SECS", default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(1..=3600))]
    key_refresh_secs: u64,
    /// The log filter, read by the logger ([`init_telemetry`]); declared so that it is
    /// a known setting.
    #[arg(long, env = "FETCHER_LOG")]
    log: Option<String>,
}

/// Everything built once per cold start.
pub struct Host {
    pub config: HostConfig,
    pub clients: Clients,
    pub store: DynamoStore,
    /// The AWS adapters as the host ports (`ports.pipeline(..)` builds the worker's).
    pub ports: HostPorts,
    pub engine: Engine,
    pub probes: Vec<Arc<dyn ReadinessProbe>>,
    /// The host-safety policy the connectors apply (the API checks with it too).
    pub policy: HostPolicy,
}

impl Host {
    /// Builds the clients, adapters and engine. Does no network I/O (the master key is
    /// loaded on first use).
    pub fn build(config: HostConfig, sdk: &aws_config::SdkConfig) -> Result<Host, String> {
        let clients = Clients::new(sdk);
        let store = DynamoStore::new(clients.dynamodb.clone(), &config.table);
        let objects_impl = S3ObjectStore::new(clients.s3.clone(), &config.bucket)
            .with_prefix(config.result_prefix.clone());
        let objects: Arc<dyn ObjectStore> = Arc::new(objects_impl.clone());
        let source = SecretsManagerKeySource::new(
            clients.secrets.clone(),
            clients.kms.clone(),
            &config.master_key_secret,
        );
        let keys: Arc<dyn KeyProvider> =
            Arc::new(CachedKeyProvider::new(Arc::new(source)).with_refresh(config.key_refresh));
        let jobs: Arc<dyn JobStore> = Arc::new(store.clone());
        let policy = if config.guard_hosts {
            HostPolicy::multi_tenant()
        } else {
            HostPolicy::for_tenancy(config.multi_tenant)
        }
        .with_private_networks(config.private_networks.clone());
        let ports = HostPorts {
            connections: Arc::new(store.clone()),
            schema_cache: Arc::new(DynamoSchemaCache::new(
                store.clone(),
                config.schema_cache_ttl,
            )),
            executions: Arc::new(store.clone()),
            jobs: jobs.clone(),
            objects: objects.clone(),
            keys: keys.clone(),
        };
        let engine = ports
            .engine(&EngineSettings {
                // The API and extract functions share no disk: no SQLite datasources.
                datasources: Datasources::ServersOnly,
                policy: policy.clone(),
                extraction_timeout: config.extraction_timeout,
                max_result_bytes: config.max_result_bytes,
                read_partitions: config.read_partitions,
                schema_ttl: config.schema_cache_ttl,
            })
            .map_err(|e| format!("building the engine: {e}"))?;
        let probes: Vec<Arc<dyn ReadinessProbe>> = vec![
            Arc::new(Probe::Dynamo(store.clone())),
            Arc::new(Probe::S3(objects_impl)),
        ];
        Ok(Host {
            config,
            clients,
            store,
            ports,
            engine,
            probes,
            policy,
        })
    }
}

impl Host {
    /// The cold start's key check (#53 item 2; docs/operations.md, "Master key"): loads
    /// the master keys and checks them against those the table's data was sealed with,
    /// recording the current version's the first time. A function whose keys cannot be
    /// read, or are not the data's, must not start (its errors alarm then fires), rather
    /// than start and fail every job on credentials it cannot open.
    pub async fn verify_master_key(&self) -> Result<(), String> {
        verify_master_key(&self.store, self.ports.keys.as_ref()).await
    }
}

/// [`Host::verify_master_key`] over a store and a key provider: the message says what to
/// do, or what could not be read (never a key).
pub async fn verify_master_key(store: &DynamoStore, keys: &dyn KeyProvider) -> Result<(), String> {
    let ring = keys
        .key_ring()
        .await
        .map_err(|e| format!("loading the master key: {}", e.log_detail()))?;
    store.verify_key_check(&ring).await.map_err(|e| match &e {
        crate::dynamo::KeyCheckError::AnotherKey(_) => e.to_string(),
        _ => format!(
            "{e}: {}",
            std::error::Error::source(&e)
                .map(ToString::to_string)
                .unwrap_or_default()
        ),
    })
}

/// `/readyz` probes over the AWS services.
pub enum Probe {
    Dynamo(DynamoStore),
    S3(S3ObjectStore),
    Sqs(crate::SqsJobQueue),
    Keys(Arc<dyn KeyProvider>),
}

impl ReadinessProbe for Probe {
    fn name(&self) -> &str {
        match self {
            Probe::Dynamo(_) => "dynamodb",
            Probe::S3(_) => "s3",
            Probe::Sqs(_) => "sqs",
            Probe::Keys(_) => "kms",
        }
    }

    fn check(&self) -> fetcher_engine::BoxFuture<'_, fetcher_host::Result<()>> {
        Box::pin(async move {
            match self {
                Probe::Dynamo(s) => s.ping().await,
                Probe::S3(s) => s.ping().await,
                Probe::Sqs(q) => q.ping().await,
                Probe::Keys(k) => k.key_ring().await.map(|_| ()),
            }
        })
    }
}

/// One CloudWatch Embedded Metric Format line (namespace `Fetcher`, dimensions `Stack` and
/// `Function`): `metrics` are `(name, unit, value)`. The stack keeps each deployment's
/// metrics, and so its alarms, apart from every other stage's.
pub fn emf_line(stack: &str, function: &str, metrics: &[(&str, &str, f64)]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let defs: Vec<_> = metrics
        .iter()
        .map(|(n, u, _)| serde_json::json!({"Name": n, "Unit": u}))
        .collect();
    let mut line = serde_json::json!({
        "_aws": {
            "Timestamp": now,
            "CloudWatchMetrics": [{
                "Namespace": "Fetcher",
                "Dimensions": [["Stack", "Function"]],
                "Metrics": defs,
            }],
        },
        "Stack": stack,
        "Function": function,
    });
    for (n, _, v) in metrics {
        line[*n] = serde_json::json!(v);
    }
    line.to_string()
}

/// JSON logs on stdout through `tracing` (level from `FETCHER_LOG`, default `info`), and
/// traces when `OTEL_*` asks for them (docs/operations.md, "Traces"): `service` names the
/// function in them. A Lambda calls [`fetcher_telemetry::flush`] before each invocation
/// returns. Fails on an `OTEL_*` setting this build cannot honour.
pub fn init_telemetry(service: &'static str) -> Result<bool, fetcher_telemetry::TelemetryError> {
    fetcher_telemetry::init(fetcher_telemetry::Options {
        service,
        logs: fetcher_telemetry::LogFormat::Lambda,
        default_filter: "info",
    })
}

/// Exports this invocation's spans before it returns (a frozen sandbox sends nothing);
/// nothing to do, and no cost, without trace export.
pub async fn flush_traces() {
    if fetcher_telemetry::exporting() {
        let _ = tokio::task::spawn_blocking(fetcher_telemetry::flush).await;
    }
}

#[cfg(test)]
mod tests {
    /// The deployment's defaults agree with the code's and with S3's limits
    /// (`fetcher_host::settings::DEFAULT_MAX_RESULT_BYTES` lists what they must agree with).
    #[test]
    fn template_defaults_agree_with_the_code_and_s3() {
        let template = include_str!("../../../template.yaml");
        let default_of = |param: &str| -> u64 {
            let at = template
                .find(&format!("\n  {param}:\n"))
                .unwrap_or_else(|| panic!("{param} in template.yaml"));
            let rest = &template[at..];
            let line = rest
                .lines()
                .find_map(|l| l.trim().strip_prefix("Default: "))
                .expect("a default");
            line.trim().parse().expect("a number")
        };
        let ceiling = fetcher_host::settings::DEFAULT_MAX_RESULT_BYTES;
        assert_eq!(default_of("MaxResultBytes"), ceiling);
        assert_eq!(
            default_of("FanoutRangeRows"),
            fetcher_host::pipeline::DEFAULT_FANOUT_RANGE_ROWS as u64
        );
        // One object of the whole result fits S3's 10,000 multipart parts.
        assert!(ceiling <= crate::s3::DEFAULT_PART_SIZE as u64 * 10_000);
    }

    use super::emf_line;

    #[test]
    fn every_metric_line_carries_its_stack() {
        let line: serde_json::Value = serde_json::from_str(&emf_line(
            "fetcher-dev",
            "extract",
            &[("JobsFailed", "Count", 1.0)],
        ))
        .unwrap();
        let def = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(def["Namespace"], "Fetcher");
        assert_eq!(
            def["Dimensions"],
            serde_json::json!([["Stack", "Function"]])
        );
        assert_eq!(
            (&line["Stack"], &line["Function"], &line["JobsFailed"]),
            (
                &serde_json::json!("fetcher-dev"),
                &serde_json::json!("extract"),
                &serde_json::json!(1.0)
            )
        );
    }
}
