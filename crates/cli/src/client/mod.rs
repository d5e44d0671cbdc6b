//! Client commands over the HTTP API (README, "The command line as a client"):
//! `connections`, `jobs` and `syncs`, against `serve` or a deployed API, so nobody writes
//! curl. Each is one or a few API calls; what they print is the API's
//! answer ([`render`]).

pub mod api;
pub mod render;

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use api::Api;
use hyper::Method;
use render::{Column, Output, print};

/// Where the API is, who calls it, and how to print its answers.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The API's base URL: `serve`'s address, or a deployed stage's URL.
    #[arg(
        long,
        env = "FETCHER_API_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub api_url: String,
    /// A bearer token, where the deployment requires one.
    #[arg(long, env = "FETCHER_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// The caller's product (the `X-Product-Name` header): connections are created for
    /// it, and lists show only its records.
    #[arg(long, env = "FETCHER_PRODUCT", global = true)]
    pub product: Option<String>,
    /// `table` for people, `json` for scripts (the API's body as it came).
    #[arg(long, short, value_enum, default_value = "table", global = true)]
    pub output: Output,
}

impl ClientArgs {
    fn api(&self) -> Result<Api> {
        Api::new(&self.api_url, self.token.clone(), self.product.clone())
    }
}

/// Paging of a list.
#[derive(Args, Debug)]
pub struct PageArgs {
    /// 1-based page.
    #[arg(long, default_value_t = 1)]
    pub page: u32,
    /// Records per page (at most 100).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// First day of creation, `YYYY-MM-DD` (default: a month before today).
    #[arg(long)]
    pub since: Option<String>,
    /// Last day of creation, `YYYY-MM-DD`.
    #[arg(long)]
    pub until: Option<String>,
}

impl PageArgs {
    fn query(&self, mut extra: Vec<(&str, String)>) -> String {
        extra.push(("page", self.page.to_string()));
        extra.push(("limit", self.limit.to_string()));
        if let Some(s) = &self.since {
            extra.push(("startDate", s.clone()));
        }
        if let Some(u) = &self.until {
            extra.push(("endDate", u.clone()));
        }
        query_string(&extra)
    }
}

#[derive(Subcommand, Debug)]
pub enum ConnectionsCommand {
    /// The product's connections.
    List(PageArgs),
    /// Register a connection: from a URL (`postgresql://user:pass@host:5432/db?sslmode=require`)
    /// or a JSON body (docs/api.md, "Connections").
    Create {
        /// The connection's name (`configName`), when it comes from `--url`.
        #[arg(long, requires = "url")]
        name: Option<String>,
        /// A connection URL (`postgresql://`, `mysql://`, `mariadb://`).
        #[arg(long, conflicts_with = "body")]
        url: Option<String>,
        /// A JSON file with the request body (`-`: standard input).
        #[arg(long)]
        body: Option<String>,
    },
    /// Connect with a stored connection and say whether it works (and why not).
    Test { id: String },
    /// Discover a connection's tables and columns.
    Schema { id: String },
}

#[derive(Subcommand, Debug)]
pub enum JobsCommand {
    /// The jobs of the tenant (and product), newest first.
    List {
        #[command(flatten)]
        page: PageArgs,
        /// Only these statuses (`pending`, `processing`, `completed`, `failed`,
        /// `canceled`; comma-separated).
        #[arg(long)]
        status: Option<String>,
        /// Only jobs whose `metadata.source` is this.
        #[arg(long)]
        source: Option<String>,
        /// Only the jobs of this sync.
        #[arg(long)]
        sync_id: Option<String>,
    },
    /// One job.
    Get { id: String },
    /// Submit a job from a JSON request body (docs/api.md, "Creating a job").
    Create {
        /// A JSON file with the request body (`-`: standard input).
        body: String,
        /// Then watch it to its end (as `jobs watch`).
        #[arg(long)]
        watch: bool,
    },
    /// Follow a job to its end with a live progress line; exits 0 when it completes, 1
    /// when it fails or is canceled.
    Watch {
        id: String,
        /// Seconds between reads.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
    /// Stop a job (a pending one at once, a running one within seconds).
    Cancel { id: String },
}

#[derive(Subcommand, Debug)]
pub enum SyncsCommand {
    /// The syncs of the tenant (and product), in order of id.
    List {
        /// Syncs per page (1-100).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Start after this sync id (the `nextAfter` the previous page printed).
        #[arg(long)]
        after: Option<String>,
    },
    /// A sync: its watermarks and active job.
    Get { id: String },
    /// Forget a sync's watermarks (all, or one table's): its next job reads from the start.
    Reset {
        id: String,
        /// Only this `configName.table` (e.g. `shop.orders`).
        #[arg(long)]
        table: Option<String>,
    },
    /// Delete a sync: its schedule, the replication slots of its log reads, its record
    /// (its jobs and results stay).
    Delete {
        id: String,
        /// Keep the replication slots (their connection is gone): drop them yourself.
        #[arg(long)]
        keep_log: bool,
    },
    /// A sync's schedule (docs/api.md, "Schedules"): show, set, pause, resume or remove it.
    Schedule {
        id: String,
        #[command(subcommand)]
        action: Option<ScheduleAction>,
    },
}

#[derive(Subcommand, Debug)]
pub enum ScheduleAction {
    /// Set (or replace) the schedule: the job request the sync runs, and when.
    Set {
        /// A JSON file with the job request, as `jobs create` takes it (`-`: standard input).
        request: String,
        /// An ISO 8601 duration of at least a minute (`PT15M`, `PT1H`, `P1D`).
        #[arg(long, conflicts_with = "cron", required_unless_present = "cron")]
        rate: Option<String>,
        /// A five-field cron expression (`"0 6 * * 1-5"`).
        #[arg(long)]
        cron: Option<String>,
        /// The cron expression's IANA time zone (default UTC).
        #[arg(long, requires = "cron")]
        time_zone: Option<String>,
    },
    /// No run until resumed.
    Pause,
    /// Run again from the next due time.
    Resume,
    /// Remove the schedule (the sync and its jobs stay).
    Delete,
}

const CONNECTION_COLUMNS: &[Column] = &[
    ("ID", "/id"),
    ("NAME", "/configName"),
    ("TYPE", "/type"),
    ("HOST", "/host"),
    ("PORT", "/port"),
    ("DATABASE", "/databaseName"),
    ("PRODUCT", "/productName"),
    ("CREATED", "/createdAt"),
];

const SYNC_COLUMNS: &[Column] = &[
    ("SYNC", "/syncId"),
    ("ACTIVE JOB", "/activeJob"),
    ("LAST COMPLETED JOB", "/lastCompletedJob"),
    ("COMPLETED AT", "/lastCompletedAt"),
    ("AGE S", "/ageSeconds"),
];

const JOB_COLUMNS: &[Column] = &[
    ("ID", "/id"),
    ("STATUS", "/status"),
    ("SOURCE", "/metadata/source"),
    ("SYNC", "/syncId"),
    ("CREATED", "/createdAt"),
    ("COMPLETED", "/completedAt"),
    ("ERROR", "/metadata/error"),
];

pub async fn connections(cmd: ConnectionsCommand, args: &ClientArgs) -> Result<()> {
    let api = args.api()?;
    let base = "/v1/management/connections";
    match cmd {
        ConnectionsCommand::List(page) => {
            let v = api.get(&format!("{base}?{}", page.query(vec![]))).await?;
            print(&v, args.output, Some(CONNECTION_COLUMNS))?;
        }
        ConnectionsCommand::Create { name, url, body } => {
            let request = match (url, body) {
                (Some(url), _) => json!({"configName": name, "url": url}),
                (None, Some(file)) => read_json(&file)?,
                (None, None) => bail!("give --url (with --name) or --body"),
            };
            let v = api.post(base, Some(&request)).await?;
            print(&v, args.output, None)?;
        }
        ConnectionsCommand::Test { id } => {
            let v = api
                .post(&format!("{base}/{}/test", segment(&id)), None)
                .await?;
            print(&v, args.output, None)?;
        }
        ConnectionsCommand::Schema { id } => {
            let v = api.get(&format!("{base}/{}/schema", segment(&id))).await?;
            match args.output {
                Output::Json => print(&v, Output::Json, None)?,
                Output::Table => {
                    let tables: Vec<Value> = v["tables"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|t| {
                            json!({"name": t["name"], "rows": t["rowEstimate"],
                                   "columns": columns_text(&t["columns"])})
                        })
                        .collect();
                    print(
                        &Value::Array(tables),
                        Output::Table,
                        Some(&[
                            ("TABLE", "/name"),
                            ("ROWS", "/rows"),
                            ("COLUMNS", "/columns"),
                        ]),
                    )?;
                }
            }
        }
    }
    Ok(())
}

pub async fn jobs(cmd: JobsCommand, args: &ClientArgs) -> Result<()> {
    let api = args.api()?;
    match cmd {
        JobsCommand::List {
            page,
            status,
            source,
            sync_id,
        } => {
            let filters = [("status", status), ("source", source), ("syncId", sync_id)]
                .into_iter()
                .filter_map(|(k, v)| Some((k, v?)))
                .collect();
            let v = api
                .get(&format!("/v1/fetcher?{}", page.query(filters)))
                .await?;
            print(&v, args.output, Some(JOB_COLUMNS))?;
        }
        JobsCommand::Get { id } => {
            let v = api.get(&format!("/v1/fetcher/{}", segment(&id))).await?;
            print(&v, args.output, None)?;
        }
        JobsCommand::Create { body, watch: then } => {
            let v = api.post("/v1/fetcher", Some(&read_json(&body)?)).await?;
            let id = v["jobId"].as_str().unwrap_or_default().to_owned();
            if then && !id.is_empty() {
                if args.output == Output::Table {
                    eprintln!("job {id}: {}", v["message"].as_str().unwrap_or_default());
                }
                return watch(&api, &id, Duration::from_secs(1), args.output).await;
            }
            print(&v, args.output, None)?;
        }
        JobsCommand::Watch { id, interval } => {
            let every = Duration::from_secs_f64(interval.clamp(0.2, 60.0));
            return watch(&api, &id, every, args.output).await;
        }
        JobsCommand::Cancel { id } => {
            let v = api
                .post(&format!("/v1/fetcher/{}/cancel", segment(&id)), None)
                .await?;
            print(&v, args.output, None)?;
        }
    }
    Ok(())
}

pub async fn syncs(cmd: SyncsCommand, args: &ClientArgs) -> Result<()> {
    let api = args.api()?;
    let v = match cmd {
        SyncsCommand::List { limit, after } => {
            let mut path = format!("/v1/syncs?limit={limit}");
            if let Some(after) = after {
                path.push_str(&format!("&after={}", segment(&after)));
            }
            let v = api.get(&path).await?;
            if args.output == Output::Table {
                print(&v["items"], Output::Table, Some(SYNC_COLUMNS))?;
                if let Some(next) = v["nextAfter"].as_str() {
                    println!("(more: --after {next})");
                }
                return Ok(());
            }
            v
        }
        SyncsCommand::Get { id } => api.get(&format!("/v1/syncs/{}", segment(&id))).await?,
        SyncsCommand::Reset { id, table } => {
            let body = match table.as_deref().map(|t| t.split_once('.')) {
                None => None,
                Some(Some((config, table))) => Some(json!({"tables": {config: [table]}})),
                Some(None) => bail!("--table is configName.table, e.g. shop.orders"),
            };
            api.post(&format!("/v1/syncs/{}/reset", segment(&id)), body.as_ref())
                .await?
        }
        SyncsCommand::Delete { id, keep_log } => {
            let mut path = format!("/v1/syncs/{}", segment(&id));
            if keep_log {
                path.push_str("?keepLog=true");
            }
            api.call(Method::DELETE, &path, None).await?
        }
        SyncsCommand::Schedule { id, action } => {
            let path = format!("/v1/syncs/{}/schedule", segment(&id));
            match action {
                None => api.get(&path).await?,
                Some(ScheduleAction::Set {
                    request,
                    rate,
                    cron,
                    time_zone,
                }) => {
                    let mut body = json!({"request": read_json(&request)?});
                    for (key, value) in [("rate", rate), ("cron", cron), ("timeZone", time_zone)] {
                        if let Some(v) = value {
                            body[key] = json!(v);
                        }
                    }
                    api.call(Method::PUT, &path, Some(&body)).await?
                }
                Some(ScheduleAction::Pause) => api.post(&format!("{path}/pause"), None).await?,
                Some(ScheduleAction::Resume) => api.post(&format!("{path}/resume"), None).await?,
                Some(ScheduleAction::Delete) => {
                    api.call(Method::DELETE, &path, None).await?;
                    eprintln!("schedule of sync {id} removed");
                    return Ok(());
                }
            }
        }
    };
    print(&v, args.output, None)?;
    Ok(())
}

/// Follows job `id` until it ends: a progress line on standard error (rewritten in place
/// on a terminal), then the job as `output` says. Fails (exit 1) unless it completed.
async fn watch(api: &Api, id: &str, every: Duration, output: Output) -> Result<()> {
    let path = format!("/v1/fetcher/{}", segment(id));
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut last_line = String::new();
    let job = loop {
        let job = api.get(&path).await?;
        let status = job["status"].as_str().unwrap_or_default();
        let line = progress_line(&job, started.elapsed());
        if line != last_line {
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
            last_line = line;
        }
        if matches!(status, "completed" | "failed" | "canceled") {
            if tty {
                eprintln!();
            }
            break job;
        }
        tokio::time::sleep(every).await;
    };
    print(&job, output, None)?;
    match job["status"].as_str() {
        Some("completed") => Ok(()),
        status => bail!(
            "job {id} {}: {}",
            status.unwrap_or("ended"),
            job["metadata"]["error"]
                .as_str()
                .unwrap_or("no error given")
        ),
    }
}

/// `processing  rows 1,204,000  bytes 283.1 MB  41,500 rows/s  tables 1/3  12s`.
fn progress_line(job: &Value, elapsed: Duration) -> String {
    let status = job["status"].as_str().unwrap_or("?");
    let p = &job["progress"];
    let secs = elapsed.as_secs_f64();
    let mut line = format!("{status:<10}");
    if let Some(rows) = p["rows"].as_u64() {
        let bytes = p["bytes"].as_u64().unwrap_or(0);
        line.push_str(&format!("  rows {}", grouped(rows)));
        // A share of the catalogs' estimate, below 100 % until the job ends (an estimate
        // is not a count).
        if let Some(estimate) = p["rowsEstimate"].as_u64().filter(|e| *e > 0) {
            let mut pct = (rows as f64 / estimate as f64 * 100.0).min(100.0);
            if status == "processing" {
                pct = pct.min(99.0);
            }
            line.push_str(&format!(" (~{pct:.0}% of ~{})", grouped(estimate)));
        }
        line.push_str(&format!("  bytes {}", size(bytes)));
        if secs >= 1.0 {
            line.push_str(&format!(
                "  {} rows/s",
                grouped((rows as f64 / secs) as u64)
            ));
        }
        let (done, total) = (p["tables"]["done"].as_u64(), p["tables"]["total"].as_u64());
        if let (Some(done), Some(total)) = (done, total) {
            line.push_str(&format!("  tables {done}/{total}"));
        }
    }
    line.push_str(&format!("  {}s", elapsed.as_secs()));
    line
}

fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.2} GB", b / 1e9),
    }
}

/// `name type, …` of a schema table's columns, the key marked.
fn columns_text(columns: &Value) -> String {
    columns
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let key = if c["primaryKey"].is_u64() {
                " (key)"
            } else {
                ""
            };
            format!(
                "{} {}{key}",
                c["name"].as_str().unwrap_or("?"),
                c["type"].as_str().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A JSON body from a file, or standard input for `-`.
fn read_json(file: &str) -> Result<Value> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the body from standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
    };
    serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))
}

/// An id as one path segment: reserved characters escaped, so an id never changes the
/// route.
fn segment(id: &str) -> String {
    percent(id.trim())
}

fn query_string(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn percent(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_and_escapes() {
        let job = json!({"status": "processing",
            "progress": {"rows": 1204000, "bytes": 283_100_000, "tables": {"done": 1, "total": 3}}});
        assert_eq!(
            progress_line(&job, Duration::from_secs(10)),
            "processing  rows 1,204,000  bytes 283.1 MB  120,400 rows/s  tables 1/3  10s"
        );
        let estimated = json!({"status": "processing",
            "progress": {"rows": 250, "bytes": 1000, "rowsEstimate": 1000, "tables": {"done": 0, "total": 1}}});
        assert_eq!(
            progress_line(&estimated, Duration::from_secs(1)),
            "processing  rows 250 (~25% of ~1,000)  bytes 1.0 kB  250 rows/s  tables 0/1  1s"
        );
        assert_eq!(
            progress_line(&json!({"status": "pending"}), Duration::ZERO),
            "pending     0s"
        );
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(
            query_string(&[("status", "failed,canceled".into()), ("page", "2".into())]),
            "status=failed%2Ccanceled&page=2"
        );
    }
}
