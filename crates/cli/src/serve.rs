//! `fetcher serve`: the API and the extraction worker in one process, on the embedded
//! adapters (SQLite for connections/jobs/schema cache/rate limits, a local directory for
//! sealed results, an in-process queue durable through the jobs table, an NDJSON event
//! log). Everything lives under `--data-dir`.
//!
//! Shutdown (SIGTERM or Ctrl-C): `/readyz` answers 503 for the drain delay so a load
//! balancer stops routing here, then new jobs are refused, the HTTP server stops, and
//! in-flight jobs finish (or, after the grace period, are abandoned with their leases,
//! which the next start takes over).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use fetcher_connectors::{HostPolicy, SqliteFiles, SqliteRoot};
use fetcher_crypto::KeyRing;
use fetcher_embedded::{
    EventLog, InProcessQueue, LocalDirObjectStore, Shares, SlotObserver, SqliteStore, Worker,
    WorkerConfig,
};
use fetcher_host::memory::StaticKeyProvider;
use fetcher_host::model::ResultFormat;
use fetcher_host::pipeline::PipelineConfig;
use fetcher_host::ports::{JobStore, KeyProvider, ObjectStore as _};
use fetcher_host::settings::ExtractionSettings;
use fetcher_host::wiring::{Datasources, EngineSettings, HostPorts};
use fetcher_http::{self as http, ApiConfig, AppDeps, AppState};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::{demo, keys};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Generate (and keep) a development master key, and register a demo SQLite datasource.
    #[arg(long)]
    pub demo: bool,
    /// Where data lives: database, results, events, demo key.
    #[arg(long, default_value = ".fetcher", env = "FETCHER_DATA_DIR")]
    pub data_dir: PathBuf,
    /// SQLite datasources must be files in this directory (no `..`, no symlinks); it may
    /// neither be nor contain the data directory. Without it SQLite datasources are
    /// refused (FET-0414); `--demo` then uses `<data-dir>-sqlite` for its demo database.
    #[arg(long, env = "FETCHER_SQLITE_DIR")]
    pub sqlite_dir: Option<PathBuf>,
    /// Address to listen on: `HOST:PORT`, or a bare port (on 127.0.0.1).
    #[arg(long, default_value = "127.0.0.1:8080", env = "FETCHER_LISTEN", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// Host names this server answers for besides IP addresses and `localhost`
    /// (comma-separated, no port): a request whose `Host` is any other name is 421, so a
    /// web page cannot reach the API through DNS rebinding.
    #[arg(long, value_delimiter = ',', env = "FETCHER_ALLOWED_HOSTS")]
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call the API cross-origin (CORS; comma-separated
    /// `scheme://host[:port]`). Default: none, so no web page of another origin can
    /// read an answer.
    #[arg(long, value_delimiter = ',', env = "FETCHER_CORS_ORIGINS")]
    pub cors_origins: Vec<String>,
    /// HS256 secret for verifying JWTs (at least 32 bytes). Prefer
    /// --jwt-hs256-secret-file: a command-line value shows in `ps`.
    #[arg(long, env = "FETCHER_JWT_HS256_SECRET", hide_env_values = true)]
    pub jwt_hs256_secret: Option<String>,
    /// File holding the HS256 secret (at least 32 bytes; one trailing newline is ignored).
    #[arg(
        long,
        env = "FETCHER_JWT_HS256_SECRET_FILE",
        conflicts_with = "jwt_hs256_secret"
    )]
    pub jwt_hs256_secret_file: Option<PathBuf>,
    /// RS256 public key (PEM file) for verifying JWTs; a private key stops the start.
    /// With any JWT key, every business route needs a valid token, with or without
    /// --multi-tenant.
    #[arg(long, env = "FETCHER_JWT_RS256_PUBLIC_KEY")]
    pub jwt_rs256_public_key: Option<PathBuf>,
    /// Require this `iss` in every token.
    #[arg(long, env = "FETCHER_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// Require this value in every token's `aud`.
    #[arg(long, env = "FETCHER_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Seconds a client has to send a request head, from connecting or from the end of
    /// its previous response (an idle keep-alive connection closes after it too).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600), env = "FETCHER_HEADER_TIMEOUT")]
    pub header_timeout: u64,
    /// Seconds from a request head to its response: a body still arriving then is cut off
    /// with 408.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600), env = "FETCHER_REQUEST_TIMEOUT")]
    pub request_timeout: u64,
    /// HTTP connections open at once; past it the listener waits for one to close. Keep
    /// it under the process's file limit (`ulimit -n`) less what the stores and
    /// datasources need.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=1_000_000), env = "FETCHER_MAX_HTTP_CONNECTIONS")]
    pub max_http_connections: u32,
    /// HTTP connections one peer address may hold; past it, its oldest connection that
    /// has sent nothing is closed for the new one, or the new one is refused.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=1_000_000), env = "FETCHER_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: u32,
    /// Jobs run at once (at least 1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=1024), env = "FETCHER_WORKERS")]
    pub workers: u16,
    /// Jobs of one tenant running at once (docs/operations.md, "Fair workers"). Default:
    /// `--workers` − 1 (at least 1) in multi-tenant mode, so another tenant's job always
    /// finds a worker; every worker in single-tenant mode.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024), env = "FETCHER_MAX_JOBS_PER_TENANT")]
    pub max_jobs_per_tenant: Option<u16>,
    /// Jobs reading one connection running at once. Default: `--workers` − 1 (at least
    /// 1), so a connection whose queries run slow never holds every worker.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024), env = "FETCHER_MAX_JOBS_PER_CONNECTION")]
    pub max_jobs_per_connection: Option<u16>,
    /// Ranges of fanned-out jobs and continuations of long jobs running at once, over all
    /// tenants. Default: `--workers` − 2 (at least 1), so a new job (a small one behind a
    /// big job's ranges, on the same connection) finds a worker.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024), env = "FETCHER_MAX_FOLLOW_UP_JOBS")]
    pub max_follow_up_jobs: Option<u16>,
    /// Jobs of one tenant waiting for a worker at most; past it, its new jobs are
    /// refused (429) until some start.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000), env = "FETCHER_MAX_WAITING_JOBS_PER_TENANT")]
    pub max_waiting_jobs_per_tenant: u32,
    /// Connections one tenant may hold (0 = no cap).
    #[arg(
        long,
        default_value_t = 1000,
        env = "FETCHER_MAX_CONNECTIONS_PER_TENANT"
    )]
    pub max_connections_per_tenant: usize,
    /// Seconds after its creation a job's retryable failures (a datasource restarting,
    /// a failover) are retried, with exponential back-off and jitter (1 s doubling to
    /// 15 s).
    #[arg(long, default_value_t = 60, env = "FETCHER_RETRY_BUDGET")]
    pub retry_budget: u64,
    /// Seconds a worker's claim on a job lasts without a renewal (heartbeats renew it
    /// while the job runs): how long a job whose worker died waits before another takes
    /// it over. A restart on the same data directory takes the previous process's jobs
    /// back at once, whatever this says.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(5..=3600), env = "FETCHER_LEASE_SECS")]
    pub lease_secs: u64,
    /// Seconds in-flight jobs may take to finish on shutdown; then they are abandoned
    /// and handed back (`pending`) for the next start.
    #[arg(long, default_value_t = 60, env = "FETCHER_SHUTDOWN_GRACE")]
    pub shutdown_grace: u64,
    /// Seconds `/readyz` answers 503 before the server stops, on shutdown: behind a load
    /// balancer, its health check interval times its threshold (say 12). None by default:
    /// on a laptop Ctrl-C stops at once.
    #[arg(long, default_value_t = 0, env = "FETCHER_DRAIN_DELAY")]
    pub drain_delay: u64,
    /// Seconds between two checks for due schedules (docs/api.md, "Schedules"): a run
    /// starts at most this long after its due time.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300), env = "FETCHER_SCHEDULE_TICK")]
    pub schedule_tick: u64,
    /// Result format when a job does not ask: `v2` (streamed; as large as
    /// --max-result-bytes allows), `v1` (the reference's format, for consumers built for
    /// it; built in memory, at most 256 MiB) or `parquet` (one file per table).
    #[arg(long, default_value = "v2", value_parser = ["v1", "v2", "parquet"], env = "FETCHER_RESULT_FORMAT")]
    pub result_format: String,
    /// Also POST every terminal event to this http:// URL (a failure keeps the event
    /// pending; the repair pass retries).
    #[arg(long, env = "FETCHER_EVENTS_WEBHOOK")]
    pub events_webhook: Option<String>,
    /// What an extraction may do: the settings the Lambdas read too.
    #[command(flatten)]
    pub extraction: ExtractionSettings,
    /// Log as JSON lines.
    #[arg(long, env = "FETCHER_LOG_JSON")]
    pub log_json: bool,
}

/// Logs, and traces when `OTEL_*` asks for them (docs/operations.md, "Traces").
fn init_telemetry(json: bool) -> Result<bool> {
    fetcher_telemetry::init(fetcher_telemetry::Options {
        service: "fetcher-serve",
        logs: if json {
            fetcher_telemetry::LogFormat::Json
        } else {
            fetcher_telemetry::LogFormat::Text
        },
        default_filter: "info,sqlx=warn",
    })
    .context("the trace export settings")
}

async fn key_ring(args: &ServeArgs) -> Result<KeyRing> {
    if let Some(ring) = keys::ring_from_env().await? {
        return Ok(ring);
    }
    if !args.demo {
        bail!(
            "FETCHER_MASTER_KEY is not set: export one (`fetcher keys generate`) or run with --demo"
        );
    }
    let key = keys::demo_key(&args.data_dir)?;
    warn!(
        "!!! DEMO MODE: using the development master key in {}/master.key. Never use it for real credentials or data. !!!",
        args.data_dir.display()
    );
    eprintln!(
        "\n  *** DEMO MODE: development master key at {}/master.key — not for real data ***\n",
        args.data_dir.display()
    );
    Ok(KeyRing::from_base64(&key, "1")?)
}

/// The token verifier the settings ask for. Fails closed: a weak or unreadable key, or
/// multi-tenant mode without one, stops the process at start.
pub fn authenticator(args: &ServeArgs) -> Result<Arc<dyn http::Authenticator>> {
    let secret = match (&args.jwt_hs256_secret, &args.jwt_hs256_secret_file) {
        (Some(s), _) => Some(s.clone().into_bytes()),
        (None, Some(path)) => {
            let mut bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            if bytes.ends_with(b"\n") {
                bytes.pop();
                if bytes.ends_with(b"\r") {
                    bytes.pop();
                }
            }
            Some(bytes)
        }
        (None, None) => None,
    };
    let jwt = match (secret, &args.jwt_rs256_public_key) {
        (Some(_), Some(_)) => {
            bail!("give one JWT key: an HS256 secret or --jwt-rs256-public-key, not both")
        }
        (Some(secret), None) => http::JwtAuthenticator::hs256(&secret)
            .context("--jwt-hs256-secret / FETCHER_JWT_HS256_SECRET")?,
        (None, Some(pem)) => {
            let pem = std::fs::read(pem).with_context(|| format!("reading {}", pem.display()))?;
            http::JwtAuthenticator::rs256_pem(&pem).context("--jwt-rs256-public-key")?
        }
        (None, None) if args.extraction.multi_tenant => {
            bail!(
                "--multi-tenant needs --jwt-hs256-secret-file, --jwt-hs256-secret or --jwt-rs256-public-key"
            )
        }
        (None, None) => {
            if args.jwt_issuer.is_some() || args.jwt_audience.is_some() {
                bail!("--jwt-issuer / --jwt-audience need a JWT key");
            }
            return Ok(Arc::new(http::NoAuthentication));
        }
    };
    let jwt = match &args.jwt_issuer {
        Some(iss) if iss.is_empty() => bail!("--jwt-issuer is empty"),
        Some(iss) => jwt.with_issuer(&[iss.as_str()]),
        None => jwt,
    };
    let jwt = match &args.jwt_audience {
        Some(aud) if aud.is_empty() => bail!("--jwt-audience is empty"),
        Some(aud) => jwt.with_audience(&[aud.as_str()]),
        None => jwt,
    };
    Ok(Arc::new(jwt))
}

/// `--cors-origins` as header values: each exactly `http(s)://host[:port]` with no
/// wildcard anywhere, lower-cased as browsers send an `Origin` (scheme and host are
/// case-insensitive), or the start stops.
fn cors_origins(raw: &[String]) -> Result<Vec<axum::http::HeaderValue>> {
    raw.iter()
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
        .map(|o| {
            let not_origin = || {
                anyhow::anyhow!(
                    "--cors-origins: {o:?} is not an origin (scheme://host[:port], no path, no wildcard)"
                )
            };
            if o.contains('*') {
                return Err(not_origin());
            }
            let lower = o.to_ascii_lowercase();
            let uri: axum::http::Uri = lower.parse().map_err(|_| not_origin())?;
            let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
            let bare =
                uri.path_and_query().is_none_or(|p| p.as_str() == "/") && !lower.ends_with('/');
            if !scheme_ok || uri.host().is_none_or(str::is_empty) || !bare {
                return Err(not_origin());
            }
            axum::http::HeaderValue::from_str(&lower).map_err(|_| not_origin())
        })
        .collect()
}

/// Takes the data directory's lock (`serve.lock`, an exclusive `flock`), or stops: two
/// processes on one store would take each other's jobs over.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File> {
    let path = dir.join("serve.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock on a descriptor this function owns; the lock lives as long as it.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            anyhow::bail!(
                "another fetcher serve is using the data directory {}: stop it, or give this one its own --data-dir",
                dir.display()
            );
        }
    }
    Ok(file)
}

/// The data directory holds ciphertext and metadata: owner-only. Everything this process
/// creates from here on is too (umask 077: SQLite's own files, results, temporary
/// objects, the event log), and an existing directory or database is tightened.
fn private_data_dir(dir: &std::path::Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // SAFETY: umask only swaps the process's file-mode mask; it cannot fail.
        unsafe { libc::umask(0o077) };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {} to its owner", dir.display()))?;
        restrict_tree(dir)?;
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(())
}

/// Every directory under `dir` to 0700 and every file to 0600, however deep (results
/// live in subdirectories, written before a umask was set or copied in by hand).
/// Symbolic links are left alone: changing one's mode would change what it points to,
/// which may be outside the data directory.
#[cfg(unix)]
fn restrict_tree(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let kind = std::fs::symlink_metadata(&path)?.file_type();
        if kind.is_symlink() {
            continue;
        }
        let mode = if kind.is_dir() { 0o700 } else { 0o600 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("restricting {}", path.display()))?;
        if kind.is_dir() {
            restrict_tree(&path)?;
        }
    }
    Ok(())
}

/// Readiness probe over the result directory: a job needs to write there.
struct ResultsProbe(Arc<LocalDirObjectStore>);

impl http::ReadinessProbe for ResultsProbe {
    fn name(&self) -> &str {
        "results"
    }

    fn check(&self) -> fetcher_engine::BoxFuture<'_, fetcher_host::Result<()>> {
        self.0.check_writable()
    }
}

/// Readiness probe over the embedded database.
struct DbProbe(SqliteStore);

impl http::ReadinessProbe for DbProbe {
    fn name(&self) -> &str {
        "sqlite"
    }

    fn check(&self) -> fetcher_engine::BoxFuture<'_, fetcher_host::Result<()>> {
        Box::pin(self.0.ping())
    }
}

pub async fn serve(args: ServeArgs) -> Result<()> {
    if init_telemetry(args.log_json)? {
        info!("exporting traces over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)");
    }
    // Settings first: a bad one stops the process before anything is created.
    let authenticator = authenticator(&args)?;
    // A JWT key means callers are meant to prove who they are: without --multi-tenant
    // every business route then needs a valid token too (the tenant stays `default`),
    // rather than a token that is checked when present and optional otherwise.
    let tokens_required = args.jwt_hs256_secret.is_some()
        || args.jwt_hs256_secret_file.is_some()
        || args.jwt_rs256_public_key.is_some();
    let allowed_hosts = crate::host_guard::AllowedHosts::new(&args.allowed_hosts)?;
    let cors_origins = cors_origins(&args.cors_origins)?;
    private_data_dir(&args.data_dir)?;
    // Held until the process ends: no other serve can use this data directory, so every
    // lease its store holds at start belongs to a process that is gone.
    let _data_dir_lock = lock_data_dir(&args.data_dir)?;
    let ring = Arc::new(key_ring(&args).await?);
    // A key that is not the one this directory's data was sealed with stops the start
    // here, not at every connection later.
    crate::key_check::verify(&args.data_dir, &ring)?;
    let keys: Arc<dyn KeyProvider> = Arc::new(StaticKeyProvider(ring.clone()));

    let db = SqliteStore::open(&args.data_dir.join("fetcher.db"))
        .await
        .context("opening the database")?;
    let store = Arc::new(db.clone());
    let objects = Arc::new(LocalDirObjectStore::new(args.data_dir.join("results")));
    // No writer of this process exists yet: whatever a crash or an abandoned job left
    // half-written goes now.
    match objects.sweep_incomplete(Duration::ZERO).await {
        Ok(0) => {}
        Ok(n) => info!(removed = n, "removed unfinished result files"),
        Err(e) => warn!(error = %e.log_detail(), "could not sweep unfinished result files"),
    }
    let mut events = EventLog::new(args.data_dir.join("events.ndjson"));
    if let Some(url) = &args.events_webhook {
        events = events.with_webhook(Arc::new(crate::webhook::WebhookPublisher::new(url)?));
    }
    let events = Arc::new(events);
    let sync_events: Arc<dyn fetcher_host::ports::EventPublisher> = events.clone();
    let jobs: Arc<dyn JobStore> = store.clone();

    let sqlite_files = sqlite_files(&args)?;
    let policy = HostPolicy::for_tenancy(args.extraction.multi_tenant)
        .with_sqlite_files(sqlite_files.clone())
        .with_private_networks(args.extraction.private_networks.clone());
    let objects_probe = objects.clone();
    let ports = HostPorts {
        connections: store.clone(),
        schema_cache: store.clone(),
        // Execution records, as the Lambdas keep them in DynamoDB.
        executions: store.clone(),
        jobs: jobs.clone(),
        objects,
        keys: keys.clone(),
    };
    let engine = ports.engine(&EngineSettings {
        datasources: Datasources::WithSqlite,
        policy: policy.clone(),
        extraction_timeout: args.extraction.extraction_timeout(),
        max_result_bytes: args.extraction.max_result_bytes(),
        read_partitions: args.extraction.read_partitions.into(),
        schema_ttl: args.extraction.schema_ttl(),
    })?;
    let queue =
        InProcessQueue::with_max_waiting_per_tenant(args.max_waiting_jobs_per_tenant as usize);
    // The test harness's crash point (docs/operations.md, "`fetcher serve` settings").
    let crash_before_complete = std::env::var_os("FETCHER_TEST_CRASH_BEFORE_COMPLETE").is_some();
    if crash_before_complete {
        tracing::warn!(
            "FETCHER_TEST_CRASH_BEFORE_COMPLETE is set: this serve aborts before completing its first job (a test harness setting)"
        );
    }
    // A v2 or Parquet job's segment stops ahead of the extraction timeout and the job
    // continues in another, so the timeout bounds a segment, not a job (docs/operations.md,
    // "Long jobs"); the test harness can force short segments.
    let segment_after = match fetcher_host::settings::test_segment_after()
        .map_err(|e| anyhow::anyhow!(e))?
    {
        Some(after) => {
            tracing::warn!(
                ?after,
                "FETCHER_TEST_SEGMENT_SECS is set: every job segment stops this soon (a test harness setting)"
            );
            Some(after)
        }
        None => {
            let timeout = args.extraction.extraction_timeout();
            (!timeout.is_zero()).then(|| timeout - Duration::from_secs(60).min(timeout / 2))
        }
    };
    let pipeline = Arc::new(
        ports
            .pipeline(
                engine.clone(),
                events,
                PipelineConfig {
                    lease: Duration::from_secs(args.lease_secs),
                    retry_budget: Duration::from_secs(args.retry_budget),
                    crash_before_complete,
                    segment_after,
                    progress_interval: args.extraction.progress_interval(),
                    fanout_ranges: args.extraction.fanout_ranges.into(),
                    fanout_range_rows: args.extraction.fanout_range_rows as i64,
                    default_format: match args.result_format.as_str() {
                        "v1" => ResultFormat::V1,
                        "parquet" => ResultFormat::Parquet,
                        _ => ResultFormat::V2,
                    },
                    ..Default::default()
                },
            )
            .with_table_format(Arc::new(fetcher_parquet::ParquetFormat::new()))
            .with_queue(queue.clone()),
    );

    let state = AppState::new(
        AppDeps {
            engine,
            job_store: jobs,
            job_queue: queue.clone(),
            rate_limiter: store.clone(),
            keys: keys.clone(),
            authenticator,
            probes: vec![Arc::new(DbProbe(db)), Arc::new(ResultsProbe(objects_probe))],
            host_policy: Some(policy),
            schedule_store: store.clone(),
            sync_events: Some(sync_events),
        },
        ApiConfig {
            multi_tenant: args.extraction.multi_tenant,
            require_auth: tokens_required,
            require_product: args.extraction.require_product,
            private_networks: args.extraction.private_networks.clone(),
            sqlite_files: sqlite_files.clone(),
            max_connections_per_tenant: args.max_connections_per_tenant,
            version: env!("CARGO_PKG_VERSION").into(),
            cors_origins,
            ..ApiConfig::default()
        },
    );
    let router = http::router(state.clone()).layer(axum::middleware::from_fn_with_state(
        allowed_hosts,
        crate::host_guard::check_host,
    ));

    if args.demo {
        let SqliteFiles::Under(root) = &sqlite_files else {
            unreachable!("--demo always has a SQLite directory")
        };
        demo::ensure_database(root.path()).await?;
        register_demo(&state, args.extraction.multi_tenant).await?;
    }

    // What one tenant and one connection may hold of the workers (docs/operations.md,
    // "Fair workers").
    let shares = {
        let d = Shares::defaults(usize::from(args.workers), args.extraction.multi_tenant);
        Shares {
            per_tenant: args.max_jobs_per_tenant.map_or(d.per_tenant, usize::from),
            per_connection: args
                .max_jobs_per_connection
                .map_or(d.per_connection, usize::from),
            follow_ups: args.max_follow_up_jobs.map_or(d.follow_ups, usize::from),
        }
    };
    info!(
        workers = args.workers,
        per_tenant = shares.per_tenant,
        per_connection = shares.per_connection,
        follow_ups = shares.follow_ups,
        waiting_per_tenant = args.max_waiting_jobs_per_tenant,
        "fair worker shares"
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let worker = Worker {
        pipeline,
        queue: queue.clone(),
        config: WorkerConfig {
            concurrency: usize::from(args.workers),
            shares,
            shutdown_grace: Duration::from_secs(args.shutdown_grace),
            // This process holds the data directory's lock (above).
            reclaim_leases: true,
            slots_observed: Some({
                let state = state.clone();
                SlotObserver(Arc::new(move |slots| {
                    state.metrics().record_log_retained(slots)
                }))
            }),
            ..Default::default()
        },
    };
    let clock_speed = fetcher_host::settings::test_clock_speed().map_err(anyhow::Error::msg)?;
    if let Some(speed) = clock_speed {
        tracing::warn!(
            speed,
            "FETCHER_TEST_CLOCK_SPEED is set: the scheduler's clock runs this many times faster (a test harness setting)"
        );
    }
    let scheduler_task = tokio::spawn(crate::scheduler::run(
        state.clone(),
        Duration::from_secs(args.schedule_tick),
        crate::scheduler::Clock::new(clock_speed.unwrap_or(1.0)),
        stop_rx.clone(),
    ));
    let worker_task = tokio::spawn(worker.run(stop_rx));

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    info!(addr = %listener.local_addr()?, data_dir = %args.data_dir.display(), "fetcher serve listening");
    let addr = listener.local_addr()?;
    eprintln!("fetcher serve: listening on http://{addr}");
    eprintln!(
        "fetcher serve: the API page is http://{addr}/swagger/ (a first call: curl http://{addr}/health)"
    );
    let drain = Duration::from_secs(args.drain_delay);
    let shutdown_state = state.clone();
    let shutdown_queue = queue.clone();
    // Descriptors kept for everything but HTTP: the stores, the data directory's files,
    // and each worker's datasource connections and result files.
    let reserve =
        64 + 16 * usize::from(args.workers) * usize::from(args.extraction.read_partitions);
    let (max_connections, file_limit) =
        crate::http_server::fit_file_limit(args.max_http_connections as usize, reserve)
            .map_err(anyhow::Error::msg)?;
    if max_connections < args.max_http_connections as usize {
        warn!(
            file_limit,
            reserve,
            configured = args.max_http_connections,
            effective = max_connections,
            "the HTTP connection cap is lowered to fit the file limit"
        );
    }
    info!(
        max_http_connections = max_connections,
        max_connections_per_peer = args.max_connections_per_peer,
        file_limit,
        "listener limits"
    );
    let limits = crate::http_server::ListenerLimits {
        header_timeout: Duration::from_secs(args.header_timeout),
        request_timeout: Duration::from_secs(args.request_timeout),
        max_connections,
        max_per_peer: args.max_connections_per_peer as usize,
    };
    crate::http_server::serve(listener, router, limits, async move {
        shutdown_signal().await;
        // A second signal while this one drains and finishes the jobs: stop now. The jobs
        // in flight stay in the data directory and the next start takes them back.
        tokio::spawn(async {
            shutdown_signal().await;
            eprintln!("fetcher serve: second signal, stopping now (jobs in flight resume at the next start)");
            std::process::exit(130);
        });
        info!(?drain, "shutting down: draining");
        shutdown_state.start_draining();
        tokio::time::sleep(drain).await;
        shutdown_queue.close();
    })
    .await;
    let _ = stop_tx.send(true);
    scheduler_task.await?;
    worker_task.await?;
    info!("fetcher serve stopped");
    // The last spans out before the process ends (blocking: the exporter's own thread).
    tokio::task::spawn_blocking(fetcher_telemetry::shutdown).await?;
    Ok(())
}

/// Where SQLite datasources may live: `--sqlite-dir`, or for `--demo` the data
/// directory's sibling `<data-dir>-sqlite` (created); else nowhere.
fn sqlite_files(args: &ServeArgs) -> Result<SqliteFiles> {
    let dir = match (&args.sqlite_dir, args.demo) {
        (Some(dir), _) => dir.clone(),
        (None, true) => {
            let mut name = args
                .data_dir
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_else(|| ".fetcher".into());
            name.push("-sqlite");
            let dir = args.data_dir.with_file_name(name);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            dir
        }
        (None, false) => return Ok(SqliteFiles::Nowhere),
    };
    let root = SqliteRoot::new(&dir, &[&args.data_dir]).map_err(anyhow::Error::msg)?;
    Ok(SqliteFiles::Under(Arc::new(root)))
}

/// Registers the demo connection through the create-connection use case, not the HTTP
/// perimeter (so it works in multi-tenant mode too, for tokens of tenant `demo`).
/// Idempotent: an existing `demo` connection is kept.
async fn register_demo(state: &AppState, multi_tenant: bool) -> Result<()> {
    let tenant = fetcher_engine::TenantContext {
        tenant_id: if multi_tenant {
            demo::MULTI_TENANT_TENANT.to_owned()
        } else {
            fetcher_engine::tenant::DEFAULT_TENANT.to_owned()
        },
        request_id: "serve-demo".to_owned(),
    };
    match http::connections::register_operator_connection(
        state,
        &tenant,
        demo::PRODUCT,
        demo::connection_body(),
    )
    .await
    {
        Ok(_) => {}
        Err(e) if e.status == axum::http::StatusCode::CONFLICT => {}
        Err(e) => bail!(
            "registering the demo datasource failed: {} {}",
            e.status,
            e.body
        ),
    }
    info!(
        tenant = %tenant.tenant_id,
        "demo datasource `{}` ready",
        demo::CONFIG_NAME
    );
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// `--listen`: `HOST:PORT` (an IP address), or a bare port on the loopback address.
fn listen_address(text: &str) -> std::result::Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        format!("'{text}' is not HOST:PORT (an IP address and a port, such as 127.0.0.1:8080 or 0.0.0.0:8080) nor a bare port")
    })
}
