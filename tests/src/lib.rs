//! Harness of the end-to-end test (`tests/e2e.rs`): the real `api` and `extract` binaries
//! under `cargo lambda watch` (the pip `cargo-lambda` in the project venv, compiling with
//! `CARGO_LAMBDA_COMPILER=cargo`), moto server with the bootstrapped resources, and the
//! local PostgreSQL (127.0.0.1:5432, user `postgres`, trust) as the datasource. Everything
//! talks to 127.0.0.1 only; every wait is bounded.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use fetcher_aws::testing::{endpoint, service_endpoint, workspace_root};

/// `cargo lambda watch` on a local port; killed on drop.
pub struct Watch {
    child: Child,
    pub port: u16,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Watch {
    /// Starts the emulator with `env` for the functions.
    pub fn start(env: &[(String, String)], log: &Path) -> Watch {
        let root = workspace_root();
        let bin = root.join(".venv/bin/cargo-lambda");
        assert!(
            bin.exists(),
            "{} is missing: run ./scripts/test (it installs cargo-lambda into .venv)",
            bin.display()
        );
        let env_file = log.with_extension("env");
        let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&env_file, text).expect("env file");
        let port = free_port();
        let out = std::fs::File::create(log).expect("watch log");
        let mut cmd = Command::new(bin);
        // `cargo test` sets CARGO_MANIFEST_DIR, CARGO_PKG_* … for this process; build
        // scripts that track those (ring) would rebuild under the inner `cargo run`.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if (k.starts_with("CARGO_") || k == "CARGO")
                && k != "CARGO_HOME"
                && k != "CARGO_TARGET_DIR"
                && !k.starts_with("CARGO_LAMBDA_")
            {
                cmd.env_remove(k.as_ref());
            }
        }
        let child = cmd
            .args([
                "lambda",
                "watch",
                "--ignore-changes",
                "-A",
                "127.0.0.1",
                "-P",
            ])
            .arg(port.to_string())
            .arg("--env-file")
            .arg(&env_file)
            .env("CARGO_LAMBDA_COMPILER", "cargo")
            .current_dir(&root)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("cargo lambda watch");
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "cargo lambda watch did not listen"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Watch { child, port }
    }

    /// The functions' environment for the bootstrapped `r`: endpoints through the SDK chain,
    /// as on AWS, each service at the one this lane uses (the LocalStack lane takes
    /// DynamoDB from moto); a private test deployment (PostgreSQL and MariaDB on
    /// 127.0.0.1, no authorizer in front of the function URL: the template sets neither,
    /// both default to secure); then `extra`.
    pub fn function_env(r: &Resources, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let endpoints = [
            "DYNAMODB",
            "S3",
            "SQS",
            "KMS",
            "SECRETS_MANAGER",
            "EVENTBRIDGE",
        ]
        .map(|s| (format!("AWS_ENDPOINT_URL_{s}"), service_endpoint(s)));
        [
            ("AWS_ENDPOINT_URL", endpoint()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("FETCHER_TABLE", r.table.clone()),
            ("FETCHER_BUCKET", r.bucket.clone()),
            ("FETCHER_QUEUE_URL", r.queue_url.clone()),
            ("FETCHER_MASTER_KEY_SECRET", r.secret_id.clone()),
            ("FETCHER_EVENT_BUS", r.bus_name.clone()),
            ("FETCHER_EVENT_SOURCE", r.event_source.clone()),
            ("FETCHER_LOG", "info".into()),
            ("FETCHER_ALLOW_PRIVATE_HOSTS", "true".into()),
            ("FETCHER_ALLOW_UNAUTHENTICATED", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain(endpoints)
        .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
    }

    /// Invokes a function with a JSON event; returns its JSON answer.
    pub fn invoke(&self, function: &str, event: &Value) -> Value {
        let url = format!(
            "http://127.0.0.1:{}/2015-03-31/functions/{function}/invocations",
            self.port
        );
        let (status, body) = http("POST", &url, &[], Some(&event.to_string()));
        assert_eq!(status, 200, "invoke {function}: {body}");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// An HTTP request to the `api` function through its function URL.
    pub fn api(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.api_with(method, path, body, &[])
    }

    /// [`Watch::api`] with more headers.
    pub fn api_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let url = format!("http://127.0.0.1:{}/lambda-url/api{path}", self.port);
        let body = body.map(Value::to_string);
        let mut all = vec![
            ("content-type", "application/json"),
            ("x-product-name", "e2e"),
        ];
        all.extend_from_slice(headers);
        let (status, text) = http(method, &url, &all, body.as_deref());
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// One HTTP request through `curl` (bounded by a 600 s timeout: the first call compiles
/// the function). Returns (status, body).
pub fn http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-s",
        "-S",
        "--max-time",
        "600",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    for (k, v) in headers {
        cmd.arg("-H").arg(format!("{k}: {v}"));
    }
    if let Some(b) = body {
        cmd.arg("--data-binary").arg(b);
    }
    let out = cmd.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Runs SQL against the local PostgreSQL (`psql`).
pub fn psql(database: &str, sql: &str) {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-d",
            database,
            "-c",
            sql,
        ])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates the scratch database (if missing) and the `accounts` table with `rows`.
pub fn seed_postgres(database: &str, rows: &[(i64, &str)]) {
    let _ = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-q", "-c"])
        .arg(format!("CREATE DATABASE {database}"))
        .stderr(Stdio::null())
        .output();
    let values: Vec<String> = rows
        .iter()
        .map(|(id, name)| format!("({id}, '{name}')"))
        .collect();
    psql(
        database,
        &format!(
            "DROP TABLE IF EXISTS accounts; CREATE TABLE accounts (id bigint PRIMARY KEY, name text NOT NULL); INSERT INTO accounts VALUES {};",
            values.join(", ")
        ),
    );
}

/// A Lambda SQS event of one received message (what the event source mapping sends).
pub fn sqs_event(m: &aws_like::Message, queue_arn: &str) -> Value {
    let attrs: serde_json::Map<String, Value> = m
        .attributes
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!({"stringValue": v, "stringListValues": [], "binaryListValues": [], "dataType": "String"}),
            )
        })
        .collect();
    json!({"Records": [{
        "messageId": m.id,
        "receiptHandle": m.receipt,
        "body": m.body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0", "SenderId": "e2e", "ApproximateFirstReceiveTimestamp": "0"},
        "messageAttributes": attrs,
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": "us-east-1"
    }]})
}

/// A received SQS message, SDK-independent.
pub mod aws_like {
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    pub struct Message {
        pub id: String,
        pub receipt: String,
        pub body: String,
        pub attributes: BTreeMap<String, String>,
    }
}

/// Where the test's logs go.
pub fn log_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fetcher-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// A TCP forwarder from a local port to `127.0.0.1:to`, until dropped: a datasource that
/// is up when a job is submitted and unreachable when it runs.
pub struct Forwarder {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Forwarder {
    pub fn start(to: u16) -> Forwarder {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        let _ = inbound.set_nonblocking(false);
                        let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)) else {
                            continue;
                        };
                        let (mut a, mut b) = (inbound, outbound);
                        let (mut a2, mut b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut a, &mut b);
                            let _ = b.shutdown(std::net::Shutdown::Both);
                        });
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut b2, &mut a2);
                            let _ = a2.shutdown(std::net::Shutdown::Both);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Forwarder { port, stop }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------
// Queues: the work queue's job messages and the subscriber queue's events.
// ---------------------------------------------------------------------------------------

use std::collections::BTreeMap;

use aws_like::Message;
use fetcher_aws::Clients;
use fetcher_aws::bootstrap::Resources;

/// Messages of `queue` (up to 10), waiting up to `wait` for at least one.
pub async fn receive(c: &Clients, queue: &str, wait: Duration) -> Vec<Message> {
    let deadline = Instant::now() + wait;
    loop {
        let out = c
            .sqs
            .receive_message()
            .queue_url(queue)
            .message_attribute_names("All")
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let msgs: Vec<Message> = out
            .messages()
            .iter()
            .map(|m| Message {
                id: m.message_id().unwrap_or_default().to_owned(),
                receipt: m.receipt_handle().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                attributes: m
                    .message_attributes()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.string_value()?.to_owned())))
                    .collect::<BTreeMap<_, _>>(),
            })
            .collect();
        if !msgs.is_empty() || Instant::now() >= deadline {
            return msgs;
        }
    }
}

pub async fn delete(c: &Clients, queue: &str, m: &Message) {
    c.sqs
        .delete_message()
        .queue_url(queue)
        .receipt_handle(&m.receipt)
        .send()
        .await
        .expect("delete message");
}

/// The job message for `job_id` from the work queue (deleted from the queue, as the
/// event source would after a successful batch).
pub async fn job_message(c: &Clients, r: &Resources, job_id: &str) -> Message {
    // Messages of other jobs received meanwhile wait here for their turn.
    static STASH: std::sync::Mutex<Vec<Message>> = std::sync::Mutex::new(Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        {
            let mut stash = STASH.lock().unwrap();
            if let Some(i) = stash.iter().position(|m| m.body.contains(job_id)) {
                return stash.remove(i);
            }
        }
        for m in receive(c, &r.queue_url, Duration::from_secs(2)).await {
            delete(c, &r.queue_url, &m).await;
            STASH.lock().unwrap().push(m);
        }
    }
    panic!("no job message for {job_id}");
}

/// Events for `job_id` on the subscriber queue within `wait`.
pub async fn events_for(c: &Clients, r: &Resources, job_id: &str, wait: Duration) -> Vec<Value> {
    let deadline = Instant::now() + wait;
    let mut found = Vec::new();
    while Instant::now() < deadline {
        for m in receive(c, &r.subscriber_queue_url, Duration::from_secs(1)).await {
            let v: Value = serde_json::from_str(&m.body).unwrap_or(Value::Null);
            if v["detail"]["jobId"] == job_id {
                found.push(v);
                delete(c, &r.subscriber_queue_url, &m).await;
            }
        }
        if !found.is_empty() {
            // Give a duplicate the chance to show up too.
            for m in receive(c, &r.subscriber_queue_url, Duration::from_secs(2)).await {
                let v: Value = serde_json::from_str(&m.body).unwrap_or(Value::Null);
                if v["detail"]["jobId"] == job_id {
                    found.push(v);
                    delete(c, &r.subscriber_queue_url, &m).await;
                }
            }
            return found;
        }
    }
    found
}

/// Creates `database` in the local PostgreSQL unless it exists.
pub fn create_database(database: &str) {
    let _ = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-q",
            "-c",
            &format!("CREATE DATABASE {database}"),
        ])
        .stderr(std::process::Stdio::null())
        .output();
}

/// An API Gateway (HTTP API, payload 2.0) request for the `api` handler, as product
/// `product`, without an authorizer.
pub fn api_request(
    method: &str,
    path: &str,
    body: Option<&Value>,
    product: &str,
) -> lambda_http::Request {
    let e = json!({
        "version": "2.0", "routeKey": "ANY /{proxy+}", "rawPath": path, "rawQueryString": "",
        "headers": {"content-type": "application/json", "x-product-name": product},
        "requestContext": {"http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "fetcher-e2e"},
            "accountId": "1", "apiId": "a", "domainName": "d", "domainPrefix": "d", "requestId": "r", "routeKey": "ANY /{proxy+}", "stage": "$default", "time": "", "timeEpoch": 0},
        "body": body.map(Value::to_string).unwrap_or_default(), "isBase64Encoded": false
    });
    lambda_http::request::from_str(&e.to_string()).expect("an API Gateway event")
}

/// Both Lambda handlers in-process over resources of their own, as two warm containers:
/// the `api` router and the `extract` handler, built once from one configuration.
pub struct Handlers {
    pub clients: Clients,
    pub resources: Resources,
    pub router: fetcher_fn_api::Router,
    /// The `api` function's state: the `tick` function runs on the same.
    pub state: fetcher_fn_api::AppState,
    pub extractor: std::sync::Arc<fetcher_fn_extract::Extractor>,
}

impl Handlers {
    /// Bootstraps resources named `<prefix>-<pid>` and builds both handlers over them with
    /// the template's settings, changed by `configure`.
    pub async fn start(
        prefix: &str,
        configure: impl FnOnce(fetcher_aws::host::HostConfig) -> fetcher_aws::host::HostConfig,
    ) -> Handlers {
        let clients = fetcher_aws::testing::clients().await;
        let prefix = format!("{prefix}-{}", std::process::id());
        let resources = fetcher_aws::bootstrap::bootstrap(
            &clients,
            &fetcher_aws::bootstrap::Options::new(&prefix),
        )
        .await
        .expect("bootstrap");
        let sdk = fetcher_aws::testing::config().await;
        let cfg = configure(fetcher_aws::host::HostConfig::for_resources(&resources));
        let state = fetcher_fn_api::state_from_config(cfg.clone(), &sdk)
            .await
            .expect("api");
        let router = fetcher_fn_api::router_of(state.clone());
        let extractor =
            std::sync::Arc::new(fetcher_fn_extract::from_config(cfg, &sdk).expect("extract"));
        Handlers {
            clients,
            resources,
            router,
            state,
            extractor,
        }
    }

    /// One call through the `api` handler, as product `lambda`: its status and JSON body.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let req = api_request(method, path, body.as_ref(), "lambda");
        let res = fetcher_fn_api::handle(self.router.clone(), req)
            .await
            .expect("an answer");
        let status = res.status().as_u16();
        let text = match res.body() {
            lambda_http::Body::Text(t) => t.clone(),
            lambda_http::Body::Binary(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Creates the job of `body` through the `api` handler (202 asserted), hands its queue
    /// message to the `extract` handler (no batch failure asserted) and returns the stored
    /// job, with the message it ran from.
    pub async fn run_job(&self, body: Value) -> (fetcher_host::model::Job, Message) {
        let (status, accepted) = self.call("POST", "/v1/fetcher", Some(body)).await;
        assert_eq!(status, 202, "{accepted}");
        let job_id = accepted["jobId"].as_str().expect("a job id");
        let m = job_message(&self.clients, &self.resources, job_id).await;
        let batch = self
            .extractor
            .handle(sqs_event(&m, "arn:aws:sqs:us-east-1:123456789012:jobs"))
            .await;
        assert_eq!(batch["batchItemFailures"], json!([]), "{batch}");
        let job = self
            .extractor
            .pipeline
            .jobs
            .get(
                "default",
                fetcher_host::model::JobId::parse(job_id).expect("a UUID"),
            )
            .await
            .expect("the job store answers")
            .expect("stored job");
        (job, m)
    }
}
