//! The one wiring every host uses (`fetcher serve`, the api and extract Lambdas): a host
//! brings its storage as [`HostPorts`]; what is the same everywhere (the credential
//! protector over the key provider, the connectors' stored credentials, the sealing
//! result sink, the active-job gate, encrypted persistence, the limits) is built here, so
//! the hosts cannot drift apart. docs/operations.md, "One wiring", lists what each host
//! passes in.

use std::sync::Arc;
use std::time::Duration;

use fetcher_connect::registry::Families;
use fetcher_connectors::{HostPolicy, SqlRegistry};
use fetcher_engine::ports::{ConnectionStore, ExecutionStore, SchemaCache};
use fetcher_engine::{DatasourceType, Engine, Limits};
use fetcher_mongo::MongoConnectorFactory;

use crate::credentials::{CipherProtector, StoredCredentials};
use crate::jobs::JobStoreActiveChecker;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::ports::{EventPublisher, JobStore, KeyProvider, ObjectStore};
use crate::sink::SealedResultSink;

/// The storage a host provides: DynamoDB/S3/KMS on Lambda, SQLite and a local directory
/// on `serve`, memory in tests.
#[derive(Clone)]
pub struct HostPorts {
    pub connections: Arc<dyn ConnectionStore>,
    pub schema_cache: Arc<dyn SchemaCache>,
    pub executions: Arc<dyn ExecutionStore>,
    pub jobs: Arc<dyn JobStore>,
    pub objects: Arc<dyn ObjectStore>,
    pub keys: Arc<dyn KeyProvider>,
}

/// Which datasource types a host can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datasources {
    /// PostgreSQL, MySQL/MariaDB and MongoDB: a host whose API and worker share no disk
    /// (Lambda).
    ServersOnly,
    /// Also SQLite files, under the policy's SQLite directory (`serve`). Needs the
    /// connectors' `sqlite` feature; without it a SQLite datasource is refused like any
    /// unsupported type.
    WithSqlite,
}

/// The engine settings a host chooses.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub datasources: Datasources,
    /// Host safety (SSRF rules) and where SQLite files may live.
    pub policy: HostPolicy,
    /// A fixed bound on one extraction; `Duration::ZERO` for none.
    pub extraction_timeout: Duration,
    /// The serialized-result ceiling; `0` for unbounded.
    pub max_result_bytes: i64,
    /// PostgreSQL connections per step (docs/datasources.md, "Partitioned reads").
    pub read_partitions: usize,
    /// How long a cached schema is trusted (docs/engine.md, "Schema discovery and
    /// validation").
    pub schema_ttl: Duration,
}

impl HostPorts {
    /// The engine over these ports.
    pub fn engine(&self, settings: &EngineSettings) -> fetcher_engine::Result<Engine> {
        let protector = Arc::new(CipherProtector::new(self.keys.clone()));
        let credentials = Arc::new(StoredCredentials::new(
            self.connections.clone(),
            protector.clone(),
        ));
        let policy = settings.policy.clone();
        let sql = match settings.datasources {
            Datasources::ServersOnly => {
                SqlRegistry::servers_only(credentials.clone(), policy.clone())
            }
            Datasources::WithSqlite => SqlRegistry::new(credentials.clone(), policy.clone()),
        }
        .with_read_partitions(settings.read_partitions)
        // The waits a database controls end before the run's own bound (docs/operations.md,
        // "Fair workers").
        .with_session_limits(fetcher_connectors::SessionLimits::below(
            settings.extraction_timeout,
        ));
        // The connector families: the SQL servers (and SQLite where allowed), MongoDB.
        let families = Families::new()
            .with_registry(
                &sql,
                &[
                    DatasourceType::Postgresql,
                    DatasourceType::Mysql,
                    DatasourceType::Sqlite,
                ],
            )
            .with(
                DatasourceType::MongoDb,
                Arc::new(MongoConnectorFactory::new(credentials, policy)),
            );
        Engine::builder()
            .connector_registry(Arc::new(families))
            .connection_store(self.connections.clone())
            .schema_cache(self.schema_cache.clone())
            .schema_ttl(settings.schema_ttl)
            .execution_store(self.executions.clone())
            .credential_protector(protector)
            .encrypted_persistence(true)
            .result_sink(Arc::new(SealedResultSink::new(
                self.objects.clone(),
                self.keys.clone(),
            )))
            .active_execution_checker(Arc::new(JobStoreActiveChecker(self.jobs.clone())))
            .observability(Arc::new(crate::observe::TracingObservability))
            .limits(Limits {
                timeout: settings.extraction_timeout,
                max_result_bytes: settings.max_result_bytes,
                ..Limits::defaults()
            })
            .build()
    }

    /// The extraction pipeline over these ports and `engine`, announcing on `events`.
    pub fn pipeline(
        &self,
        engine: Engine,
        events: Arc<dyn EventPublisher>,
        config: PipelineConfig,
    ) -> Pipeline {
        Pipeline {
            engine,
            jobs: self.jobs.clone(),
            events,
            objects: self.objects.clone(),
            keys: self.keys.clone(),
            config,
            table_format: None,
            queue: None,
            tenant_share: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryJobStore, MemoryObjectStore};
    use fetcher_crypto::KeyRing;
    use fetcher_engine::memory::{MemoryConnectionStore, MemoryExecutionStore, MemorySchemaCache};
    use fetcher_engine::{ConnectionInput, Context, TenantContext};

    fn ports() -> HostPorts {
        let ring =
            KeyRing::from_base64("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "1").unwrap();
        HostPorts {
            connections: MemoryConnectionStore::new(),
            schema_cache: MemorySchemaCache::new(),
            executions: MemoryExecutionStore::new(),
            jobs: MemoryJobStore::new(),
            objects: MemoryObjectStore::new(),
            keys: Arc::new(crate::memory::StaticKeyProvider(Arc::new(ring))),
        }
    }

    fn settings(datasources: Datasources) -> EngineSettings {
        EngineSettings {
            datasources,
            policy: HostPolicy::single_tenant(),
            extraction_timeout: Duration::ZERO,
            max_result_bytes: 0,
            read_partitions: 1,
            schema_ttl: fetcher_engine::DEFAULT_SCHEMA_TTL,
        }
    }

    #[tokio::test]
    async fn credentials_are_sealed_in_the_hosts_store_and_sqlite_only_where_asked() {
        let p = ports();
        let engine = p.engine(&settings(Datasources::ServersOnly)).unwrap();
        let tenant = TenantContext::new("acme").unwrap();
        let ctx = Context::background();
        let input = ConnectionInput {
            config_name: "pg".into(),
            datasource_type: fetcher_engine::DatasourceType::Postgresql,
            host: "127.0.0.1".into(),
            port: 5432,
            database_name: "test".into(),
            username: "u".into(),
            password: "s3cr3t-password".into(),
            ..Default::default()
        };
        engine
            .create_connection(&ctx, &tenant, &input)
            .await
            .unwrap();
        let stored = p
            .connections
            .find(&ctx, &tenant, "pg")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.key_version, "1",
            "the password was sealed with the host's key"
        );

        let lite = ConnectionInput {
            config_name: "lite".into(),
            datasource_type: fetcher_engine::DatasourceType::Sqlite,
            database_name: "/nowhere/x.db".into(),
            ..Default::default()
        };
        engine
            .create_connection(&ctx, &tenant, &lite)
            .await
            .unwrap();
        let refused = engine
            .test_connection(&ctx, &tenant, "lite")
            .await
            .unwrap_err();
        assert!(
            refused.reason() == Some(fetcher_engine::Reason::NoConnector),
            "a Lambda-style host has no SQLite connector: {refused}"
        );
    }
}
