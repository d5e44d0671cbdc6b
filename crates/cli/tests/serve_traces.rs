//! Traces on `fetcher serve` (docs/operations.md, "Traces"): with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! set, a job's spans reach an OTLP/HTTP receiver as one trace that continues the caller's
//! `traceparent`, from the API request through the queue and the worker to the event, and
//! no exported byte holds the connection's password or a row's value; the event names the
//! trace. Without the variables nothing is exported.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use fetcher_telemetry::testing::{OtlpReceiver as Receiver, attribute};
use serde_json::{Value, json};

const PASSWORD: &str = "trace-canary-Pa55word";
const ROW_VALUE: &str = "row-canary-value";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A `serve` exporting its spans to `receiver` (JSON, every 100 ms), with more `args` and `env`.
fn traced_server(
    dir: &std::path::Path,
    receiver: &Receiver,
    args: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let endpoint = receiver.endpoint();
    let mut all = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    all.extend_from_slice(env);
    Server::start_with(dir, args, None, &all)
}

fn seed() -> PgDb {
    let db = PgDb::create("traces");
    psql(
        &db.0,
        &format!(
            "CREATE TABLE notes (id bigint PRIMARY KEY, body text);
             INSERT INTO notes SELECT g, '{ROW_VALUE}-' || g FROM generate_series(1, 50) g;"
        ),
    );
    db
}

fn register(server: &Server, db: &PgDb) {
    let (status, body) = server.request(
        "POST",
        "/v1/management/connections",
        Some(&json!({
            "configName": "notes",
            "type": "POSTGRESQL",
            "host": "127.0.0.1",
            "port": 5432,
            "databaseName": db.0,
            "userName": "postgres",
            "password": PASSWORD,
        })),
        &[("X-Product-Name", "traces")],
    );
    assert_eq!(status, 201, "{body}");
}

fn submit(server: &Server, headers: &[(&str, &str)]) -> String {
    let mut headers = headers.to_vec();
    headers.push(("X-Product-Name", "traces"));
    let (status, body) = server.request(
        "POST",
        "/v1/fetcher",
        Some(&json!({
            "dataRequest": {"mappedFields": {"notes": {"notes": ["id", "body"]}}},
            "metadata": {"source": "traces"}
        })),
        &headers,
    );
    assert_eq!(status, 202, "{body}");
    body["jobId"].as_str().expect("job id").to_owned()
}

fn events(server: &Server) -> Vec<Value> {
    std::fs::read_to_string(server.data_dir.join("events.ndjson"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("event line"))
        .collect()
}

#[test]
fn a_jobs_spans_form_one_trace_from_the_request_to_the_event() {
    let receiver = Receiver::start();
    let db = seed();
    let dir = tempfile::tempdir().unwrap();
    let server = traced_server(
        dir.path(),
        &receiver,
        &[],
        &[("OTEL_SERVICE_NAME", "fetcher-under-test")],
    );
    register(&server, &db);
    let caller = format!("00-{CALLER_TRACE}-00f067aa0ba902b7-01");
    let job_id = submit(&server, &[("traceparent", &caller)]);
    let job = server.wait_job(&job_id, Duration::from_secs(60));
    assert_eq!(job["status"], "completed", "{job}");

    // The worker's spans arrive within a few export periods.
    let wanted = [
        "POST /v1/fetcher",
        "enqueue",
        "job",
        "claim",
        "extract",
        "engine.extraction.plan",
        "engine.extraction.execute",
        "engine.step",
        "engine.table.read",
        "result.store",
        "complete",
        "publish",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let in_trace = loop {
        let spans: Vec<Value> = receiver
            .spans()
            .into_iter()
            .filter(|s| s["traceId"] == CALLER_TRACE)
            .collect();
        let names: BTreeSet<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        if wanted.iter().all(|w| names.contains(w)) {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans of the job's trace so far: {names:?}; wanted {wanted:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // One tree: the request continues the caller's span; every other span's parent is
    // a span of the trace.
    let by_id: BTreeMap<&str, &Value> = in_trace
        .iter()
        .map(|s| (s["spanId"].as_str().unwrap(), s))
        .collect();
    let name_of = |id: &str| {
        by_id
            .get(id)
            .and_then(|s| s["name"].as_str())
            .unwrap_or("?")
    };
    for span in &in_trace {
        let parent = span["parentSpanId"].as_str().unwrap_or("");
        if span["name"] == "POST /v1/fetcher" {
            assert_eq!(
                parent, "00f067aa0ba902b7",
                "the request continues the caller"
            );
            assert_eq!(
                attribute(span, "http.route").unwrap()["stringValue"],
                "/v1/fetcher"
            );
        } else {
            assert!(
                by_id.contains_key(parent),
                "{} has no parent in the trace",
                span["name"]
            );
        }
    }
    let job_span = in_trace.iter().find(|s| s["name"] == "job").unwrap();
    assert_eq!(
        name_of(job_span["parentSpanId"].as_str().unwrap()),
        "POST /v1/fetcher"
    );
    assert_eq!(
        attribute(job_span, "job_id").unwrap()["stringValue"],
        job_id.as_str()
    );
    assert_eq!(
        attribute(job_span, "tenant_id").unwrap()["stringValue"],
        "default"
    );
    // The table's read names its datasource and table.
    let read = in_trace
        .iter()
        .find(|s| s["name"] == "engine.table.read")
        .unwrap();
    assert_eq!(attribute(read, "table").unwrap()["stringValue"], "notes");
    assert_eq!(attribute(read, "config").unwrap()["stringValue"], "notes");
    for (child, parent) in [
        ("claim", "job"),
        ("extract", "job"),
        ("complete", "job"),
        ("publish", "job"),
        ("enqueue", "POST /v1/fetcher"),
        ("engine.extraction.plan", "job"),
        ("engine.extraction.execute", "extract"),
        ("engine.step", "engine.extraction.execute"),
        ("engine.table.read", "engine.step"),
        ("result.store", "engine.extraction.execute"),
    ] {
        let span = in_trace.iter().find(|s| s["name"] == child).unwrap();
        assert_eq!(
            name_of(span["parentSpanId"].as_str().unwrap()),
            parent,
            "{child}"
        );
    }
    // The resource names the service (OTEL_SERVICE_NAME) and the build.
    let resource = &job_span["resource"];
    assert_eq!(
        attribute(resource, "service.name").unwrap()["stringValue"],
        "fetcher-under-test"
    );
    assert!(attribute(resource, "vcs.revision").is_some(), "{resource}");
    assert!(
        attribute(resource, "service.version").is_some(),
        "{resource}"
    );

    // The event names the trace for a subscriber to continue.
    let event = events(&server)
        .into_iter()
        .find(|e| e["detail"]["jobId"] == job_id.as_str())
        .expect("the job's event");
    let traceparent = event["detail"]["traceparent"]
        .as_str()
        .expect("traceparent");
    assert_eq!(&traceparent[3..35], CALLER_TRACE, "{event}");

    // Nothing exported holds the password or a row value.
    let raw = receiver.raw();
    assert!(!raw.contains(PASSWORD), "the password reached a span");
    assert!(!raw.contains(ROW_VALUE), "a row value reached a span");
}

#[test]
fn without_an_endpoint_nothing_is_exported_and_no_event_names_a_trace() {
    let db = seed();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    register(&server, &db);
    let caller = format!("00-{CALLER_TRACE}-00f067aa0ba902b7-01");
    let job_id = submit(&server, &[("traceparent", &caller)]);
    assert_eq!(
        server.wait_job(&job_id, Duration::from_secs(60))["status"],
        "completed"
    );
    let event = events(&server)
        .into_iter()
        .find(|e| e["detail"]["jobId"] == job_id.as_str())
        .expect("the job's event");
    assert!(event["detail"].get("traceparent").is_none(), "{event}");
}

#[test]
fn an_export_setting_this_build_cannot_honour_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .env("FETCHER_MASTER_KEY", KEY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .expect("run fetcher serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && stderr.contains("http/protobuf"),
        "{stderr}"
    );
}

/// A job fanned out over two key ranges, each continued across short segments: every
/// worker run of it (the first claim, each range, each continuation) is a `job` span of the
/// creating request's trace, because each of its messages carries that context.
#[test]
fn a_fanned_out_and_continued_jobs_runs_share_the_creating_requests_trace() {
    let receiver = Receiver::start();
    let db = PgDb::create("traces_fanout");
    psql(
        &db.0,
        "CREATE TABLE notes (id bigint PRIMARY KEY, body text);
         INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 300000) g;
         ANALYZE notes;",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = traced_server(
        dir.path(),
        &receiver,
        &["--workers", "2", "--max-result-bytes", "0"],
        &[
            ("FETCHER_FANOUT_RANGES", "2"),
            ("FETCHER_FANOUT_RANGE_ROWS", "100000"),
            ("FETCHER_TEST_SEGMENT_SECS", "0.2"),
        ],
    );
    register(&server, &db);
    let caller = format!("00-{CALLER_TRACE}-00f067aa0ba902b7-01");
    let job_id = submit(&server, &[("traceparent", &caller)]);
    let done = server.wait_job(&job_id, Duration::from_secs(120));
    assert_eq!(done["status"], "completed", "{done}");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let spans = receiver.spans();
        let of_job = |s: &&Value| {
            s["name"] == "job"
                && attribute(s, "job_id").is_some_and(|v| v["stringValue"] == job_id.as_str())
        };
        let runs: Vec<&Value> = spans.iter().filter(of_job).collect();
        let extracts: Vec<&Value> = spans.iter().filter(|s| s["name"] == "extract").collect();
        let ranges: BTreeSet<String> = extracts
            .iter()
            .filter_map(|s| attribute(s, "range"))
            .map(|v| v["intValue"].to_string())
            .collect();
        let continued = extracts.iter().any(|s| {
            attribute(s, "segment").is_some_and(|v| v["intValue"] != "0" && v["intValue"] != 0)
        });
        let complete = spans.iter().any(|s| s["name"] == "publish");
        if ranges.contains("\"0\"") && ranges.contains("\"1\"") && continued && complete {
            assert!(runs.len() >= 3, "{} runs", runs.len());
            for s in runs.iter().chain(&extracts) {
                assert_eq!(s["traceId"], CALLER_TRACE, "{} left the trace", s["name"]);
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "runs {}, ranges {ranges:?}, continued {continued}, published {complete}",
            runs.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
