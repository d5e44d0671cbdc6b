//! One configuration schema for every host (docs/operations.md, "Settings"): settings are
//! clap arguments, each with its environment variable. `fetcher serve` takes them as
//! flags or variables; the Lambdas, which have no command line, read the same schema from
//! their environment alone through [`from_variables`], which also refuses a `FETCHER_*`
//! variable no setting declares (a typo must stop the cold start, not be ignored).
//!
//! [`ExtractionSettings`] are the settings both kinds of host share, flattened into each
//! host's own schema.

use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Command, FromArgMatches};

/// Variables with this prefix belong to the test harness and are never settings.
pub const TEST_PREFIX: &str = "FETCHER_TEST_";

/// The default ceiling on one job's result, for the streamed formats (v2 and Parquet,
/// whole or in parts): 64 GiB. The defaults it must agree with (the test
/// `defaults_agree` below, and aws-ports' with S3's limits):
///
/// * a table big enough to fan out (2 × [`crate::pipeline::DEFAULT_FANOUT_RANGE_ROWS`]
///   rows, 10 million) completes with rows of up to 1 KiB of NDJSON (10 GiB); the
///   reference's 256 MiB failed an 8M-row, two-column table at 2.8M rows;
/// * one object stays within S3's multipart limit at the writer's part size (10,000
///   parts of 8 MiB: 78 GiB), well under S3's 5 TiB object limit;
/// * a runaway job (a filter forgotten) is still stopped: 64 GiB costs about 1.5 USD a
///   month in S3 Standard, not an unbounded bill.
///
/// v1 results are built in memory and keep the reference's 256 MiB
/// ([`fetcher_engine::limits::DEFAULT_MAX_RESULT_BYTES`]) whatever this says.
pub const DEFAULT_MAX_RESULT_BYTES: u64 = 64 << 30;

/// `FETCHER_TEST_SEGMENT_SECS` (test harness only, docs/operations.md): every segment of a
/// long job stops this many seconds (a decimal) after it starts, so tests see jobs
/// continued many times. A value that is not a positive number stops the start.
pub fn test_segment_after() -> Result<Option<Duration>, String> {
    const NAME: &str = "FETCHER_TEST_SEGMENT_SECS";
    let Some(raw) = std::env::var_os(NAME) else {
        return Ok(None);
    };
    let secs: f64 = raw
        .to_str()
        .and_then(|s| s.trim().parse().ok())
        .filter(|s: &f64| s.is_finite() && *s > 0.0)
        .ok_or_else(|| format!("{NAME} must be a positive number of seconds"))?;
    Ok(Some(Duration::from_secs_f64(secs)))
}

/// `FETCHER_TEST_CLOCK_SPEED` (test harness only, docs/operations.md): `serve`'s scheduler
/// reads a clock that runs this many times faster than real time from the start, so a
/// schedule of minutes runs in seconds. A value that is not a positive number stops the
/// start.
pub fn test_clock_speed() -> Result<Option<f64>, String> {
    const NAME: &str = "FETCHER_TEST_CLOCK_SPEED";
    let Some(raw) = std::env::var_os(NAME) else {
        return Ok(None);
    };
    raw.to_str()
        .and_then(|s| s.trim().parse().ok())
        .filter(|s: &f64| s.is_finite() && *s > 0.0)
        .map(Some)
        .ok_or_else(|| format!("{NAME} must be a positive number"))
}

/// What an extraction may do, on every host.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ExtractionSettings {
    /// Multi-tenant mode: the tenant comes from the `tenantId` claim of a verified JWT.
    #[arg(long, env = "FETCHER_MULTI_TENANT")]
    pub multi_tenant: bool,
    /// Require `X-Product-Name` on every business route (docs/api.md, "Products"). Off
    /// (the default), a caller naming no product is answered as the reference answers it;
    /// a caller naming one sees only that product's connections, jobs and syncs either way.
    #[arg(long, env = "FETCHER_REQUIRE_PRODUCT")]
    pub require_product: bool,
    /// Ceiling on one job's serialized result, in bytes (`0` = unbounded; default 64 GiB,
    /// [`DEFAULT_MAX_RESULT_BYTES`] says why). v2 and Parquet results stream in constant
    /// memory, so raising it costs no memory; a v1 result (built in memory) stays capped
    /// at 256 MiB whatever this says.
    #[arg(long, env = "FETCHER_MAX_RESULT_BYTES",
        default_value_t = DEFAULT_MAX_RESULT_BYTES,
        value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    pub max_result_bytes: u64,
    /// Seconds one extraction may run before it fails with `timeout` (`0` = no fixed
    /// bound; a Lambda still bounds each run by its invocation's deadline).
    #[arg(long = "extraction-timeout", env = "FETCHER_EXTRACTION_TIMEOUT_SECS",
        default_value_t = fetcher_engine::limits::DEFAULT_TIMEOUT.as_secs())]
    pub extraction_timeout_secs: u64,
    /// Milliseconds between a running job's progress writes (its lease heartbeat, which
    /// also notices a cancel): at least 100.
    #[arg(long, env = "FETCHER_PROGRESS_INTERVAL_MS", default_value_t = 2000,
        value_parser = clap::value_parser!(u64).range(100..))]
    pub progress_interval_ms: u64,
    /// PostgreSQL connections per extraction step, 1 to 16: above 1, a step reads inside
    /// one exported snapshot and splits big tables on their integer key across the
    /// connections (docs/datasources.md, "Partitioned reads"); the result's bytes are the
    /// same. `1` reads each table in one stream.
    #[arg(long, env = "FETCHER_READ_PARTITIONS", default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=16))]
    pub read_partitions: u16,
    /// Key ranges a job's big table is cut into at most, 1 to 64, each read by its own
    /// worker at the same time (docs/operations.md, "Fan-out"): the most readers one job
    /// puts on a customer database. `1` never fans out.
    #[arg(long, env = "FETCHER_FANOUT_RANGES", default_value_t = 4,
        value_parser = clap::value_parser!(u16).range(1..=64))]
    pub fanout_ranges: u16,
    /// Rows (by the catalog's estimate) each range of a fanned-out table gets at least: a
    /// table is fanned out from twice this many rows.
    #[arg(long, env = "FETCHER_FANOUT_RANGE_ROWS",
        default_value_t = crate::pipeline::DEFAULT_FANOUT_RANGE_ROWS as u64,
        value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    pub fanout_range_rows: u64,
    /// Private networks (comma-separated CIDRs) whose addresses host safety admits: a VPC
    /// deployment's customer databases (docs/operations.md, "Private networks"). Only
    /// subnets of 10/8, 172.16/12, 192.168/16, 100.64/10 and fc00::/7; a list that would
    /// admit loopback, link-local or metadata addresses stops the start. Empty: none.
    #[arg(long, env = "FETCHER_PRIVATE_NETWORKS", default_value = "",
        value_parser = fetcher_connectors::PrivateNetworks::parse)]
    pub private_networks: fetcher_connectors::PrivateNetworks,
    /// Seconds a discovered schema is trusted, 1 to 86400: a table or column created
    /// later is seen after this long, and at once by a job that names it (a job naming
    /// what the cached schema lacks discovers again before failing).
    #[arg(long = "schema-cache-secs", env = "FETCHER_SCHEMA_CACHE_TTL_SECS",
        default_value_t = fetcher_engine::DEFAULT_SCHEMA_TTL.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub schema_cache_ttl_secs: u64,
}

impl ExtractionSettings {
    pub fn schema_ttl(&self) -> Duration {
        Duration::from_secs(self.schema_cache_ttl_secs)
    }

    pub fn extraction_timeout(&self) -> Duration {
        Duration::from_secs(self.extraction_timeout_secs)
    }

    pub fn max_result_bytes(&self) -> i64 {
        // The parser's range keeps it within i64.
        self.max_result_bytes as i64
    }

    pub fn progress_interval(&self) -> Duration {
        Duration::from_millis(self.progress_interval_ms)
    }
}

/// Parses the schema `cmd` (a `T::command()`) from variables alone: `lookup` gives each
/// declared variable's value (blank counts as unset), `present` names every `FETCHER_*`
/// variable that is set, so an undeclared one is refused. Errors name the variable:
/// `FETCHER_TABLE is not set`, `FETCHER_LEASE_SECS has an invalid value 'x': …`.
pub fn from_variables<T: FromArgMatches>(
    cmd: Command,
    lookup: impl Fn(&str) -> Option<String>,
    present: impl IntoIterator<Item = String>,
) -> Result<T, String> {
    let original = variables_of(&cmd);
    // The process environment must not leak in behind `lookup`: the schema's variables
    // are read here, not by clap.
    let cmd = cmd.no_binary_name(true).mut_args(|a| a.env(None));
    if let Some(unknown) = present.into_iter().find(|name| {
        name.starts_with("FETCHER_")
            && !name.starts_with(TEST_PREFIX)
            && !original.iter().any(|(_, env, _)| env == name)
    }) {
        return Err(format!("{unknown} is not a setting this function reads"));
    }
    let mut argv = Vec::new();
    for (long, env, is_flag) in &original {
        let Some(value) = lookup(env).map(|v| v.trim().to_owned()) else {
            continue;
        };
        if value.is_empty() {
            continue;
        }
        if *is_flag {
            // Fail closed: only the exact words.
            match value.as_str() {
                "true" => argv.push(format!("--{long}")),
                "false" => {}
                _ => return Err(format!("{env} must be true or false")),
            }
        } else {
            argv.push(format!("--{long}={value}"));
        }
    }
    let matches = cmd
        .try_get_matches_from(argv)
        .map_err(|e| describe(&original, &e))?;
    T::from_arg_matches(&matches).map_err(|e| describe(&original, &e))
}

/// `(long name, variable, is a flag)` of every argument `cmd` declares with a variable.
fn variables_of(cmd: &Command) -> Vec<(String, String, bool)> {
    cmd.get_arguments()
        .filter_map(|a| {
            let env = a.get_env()?.to_str()?.to_owned();
            let long = a.get_long()?.to_owned();
            let flag = matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
            Some((long, env, flag))
        })
        .collect()
}

/// A clap error in terms of the variables.
fn describe(vars: &[(String, String, bool)], e: &clap::Error) -> String {
    let env_of = |arg: &str| {
        let long = arg.split_whitespace().next().unwrap_or(arg);
        let long = long.trim_start_matches('-');
        vars.iter()
            .find(|(l, _, _)| l == long)
            .map_or_else(|| arg.to_owned(), |(_, env, _)| env.clone())
    };
    let invalid_args: Vec<String> = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => vec![env_of(s)],
        Some(ContextValue::Strings(v)) => v.iter().map(|s| env_of(s)).collect(),
        _ => Vec::new(),
    };
    let names = invalid_args.join(", ");
    match e.kind() {
        ErrorKind::MissingRequiredArgument if invalid_args.len() > 1 => {
            format!("{names} are not set")
        }
        ErrorKind::MissingRequiredArgument => format!("{names} is not set"),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(v)) => v.clone(),
                _ => String::new(),
            };
            let reason = std::error::Error::source(e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| "not accepted".to_owned());
            format!("{names} has an invalid value '{value}': {reason}")
        }
        kind => format!("settings: {kind}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn defaults_agree() {
        use crate::pipeline::DEFAULT_FANOUT_RANGE_ROWS;
        let streamed = super::DEFAULT_MAX_RESULT_BYTES;
        let v1 = fetcher_engine::limits::DEFAULT_MAX_RESULT_BYTES as u64;
        // A table big enough to fan out completes with rows of up to 1 KiB.
        assert!(streamed >= 2 * DEFAULT_FANOUT_RANGE_ROWS as u64 * 1024);
        // v1's in-memory cap is the smaller.
        assert!(v1 < streamed);
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            extraction: super::ExtractionSettings,
        }
        let cmd = <Flags as clap::CommandFactory>::command();
        let parsed: Flags = super::from_variables(cmd, |_| None, Vec::<String>::new()).unwrap();
        assert_eq!(
            parsed.extraction.max_result_bytes, streamed,
            "the flag's default is the constant"
        );
    }

    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Schema {
        #[arg(long, env = "FETCHER_NAME")]
        name: String,
        #[arg(long, env = "FETCHER_SECS", default_value_t = 30)]
        secs: u64,
        #[arg(long, env = "FETCHER_ON")]
        on: bool,
        #[command(flatten)]
        extraction: ExtractionSettings,
    }

    fn parse(vars: &[(&str, &str)]) -> Result<Schema, String> {
        let owned: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let lookup = |k: &str| owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        from_variables(
            Schema::command(),
            lookup,
            owned.iter().map(|(k, _)| k.clone()),
        )
    }

    #[test]
    fn values_defaults_and_flags_come_from_the_variables() {
        let s = parse(&[("FETCHER_NAME", " x "), ("FETCHER_ON", "true")]).unwrap();
        assert_eq!((s.name.as_str(), s.secs, s.on), ("x", 30, true));
        assert_eq!(s.extraction.extraction_timeout(), Duration::from_secs(300));
        assert_eq!(s.extraction.progress_interval(), Duration::from_secs(2));
        assert!(!s.extraction.multi_tenant);
        assert_eq!(s.extraction.read_partitions, 1);
        let s = parse(&[
            ("FETCHER_NAME", "x"),
            ("FETCHER_SECS", "5"),
            ("FETCHER_ON", "false"),
            ("FETCHER_MULTI_TENANT", "true"),
            ("FETCHER_EXTRACTION_TIMEOUT_SECS", "0"),
            ("FETCHER_MAX_RESULT_BYTES", "0"),
            ("FETCHER_READ_PARTITIONS", "4"),
            ("FETCHER_TEST_LOG_DIR", "/tmp/whatever"),
        ])
        .unwrap();
        assert_eq!(s.extraction.read_partitions, 4);
        assert_eq!((s.secs, s.on), (5, false));
        assert!(s.extraction.multi_tenant);
        assert_eq!(s.extraction.extraction_timeout(), Duration::ZERO);
        assert_eq!(s.extraction.max_result_bytes(), 0);
    }

    #[test]
    fn bad_settings_stop_the_start_and_name_the_variable() {
        assert_eq!(parse(&[]).unwrap_err(), "FETCHER_NAME is not set");
        assert_eq!(
            parse(&[("FETCHER_NAME", "   ")]).unwrap_err(),
            "FETCHER_NAME is not set"
        );
        assert_eq!(
            parse(&[("FETCHER_NAME", "x"), ("FETCHER_ON", "yes")]).unwrap_err(),
            "FETCHER_ON must be true or false"
        );
        let e = parse(&[("FETCHER_NAME", "x"), ("FETCHER_SECS", "soon")]).unwrap_err();
        assert!(
            e.starts_with("FETCHER_SECS has an invalid value 'soon'"),
            "{e}"
        );
        let e = parse(&[
            ("FETCHER_NAME", "x"),
            ("FETCHER_PROGRESS_INTERVAL_MS", "10"),
        ])
        .unwrap_err();
        assert!(
            e.starts_with("FETCHER_PROGRESS_INTERVAL_MS has an invalid value '10'"),
            "{e}"
        );
        for partitions in ["0", "17", "two"] {
            let e = parse(&[
                ("FETCHER_NAME", "x"),
                ("FETCHER_READ_PARTITIONS", partitions),
            ])
            .unwrap_err();
            assert!(
                e.starts_with("FETCHER_READ_PARTITIONS has an invalid value"),
                "{e}"
            );
        }
        let e = parse(&[("FETCHER_NAME", "x"), ("FETCHER_MAX_RESULT_BYTES", "-1")]).unwrap_err();
        assert!(e.starts_with("FETCHER_MAX_RESULT_BYTES"), "{e}");
        assert_eq!(
            parse(&[("FETCHER_NAME", "x"), ("FETCHER_LEASE_SEC", "9")]).unwrap_err(),
            "FETCHER_LEASE_SEC is not a setting this function reads"
        );
    }

    #[test]
    fn the_process_environment_does_not_leak_in() {
        // FETCHER_NAME is never set in the test environment; if clap read the process
        // environment itself, a stray variable could satisfy it. Here only `lookup` can.
        assert!(std::env::var("FETCHER_NAME").is_err());
        assert_eq!(parse(&[]).unwrap_err(), "FETCHER_NAME is not set");
    }
}
