//! Schedules on the API (docs/api.md, "Schedules"): set, read, pause, resume, remove; what
//! a bad schedule is told; and the runs, driven by calling the tick at chosen times (the
//! test's clock, never a sleep): one job per due time, also under two concurrent ticks;
//! a run skipped while the previous job runs; missed runs collapse into one; a schedule
//! that pauses itself after failed runs.

mod http_support;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use fetcher_engine::Timestamp;
use fetcher_host::model::{JobId, JobResult, JobStatus, PendingEvent};
use fetcher_host::ports::{ClaimOutcome, JobStore};
use fetcher_http::schedules::run_due;
use http_support::*;
use serde_json::{Value, json};

const SYNC: &str = "users-hourly";

fn sync_request() -> Value {
    let mut body = job("core-pg", "reporter");
    body["incremental"] = json!({"core-pg": {"users": {"cursor": "id"}}});
    body
}

fn url(sync: &str) -> String {
    format!("/v1/syncs/{sync}/schedule")
}

async fn put(h: &Harness, sync: &str, body: Value) -> Reply {
    h.call(Method::PUT, &url(sync), &[], Some(body)).await
}

async fn schedule(h: &Harness) -> Value {
    let r = h.get(&url(SYNC)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.json()
}

fn at(v: &Value) -> Timestamp {
    Timestamp::parse(v.as_str().unwrap_or_else(|| panic!("a time: {v}"))).unwrap()
}

fn plus(t: Timestamp, secs: i64) -> Timestamp {
    Timestamp::from_unix_nanos(t.unix_nanos() + i128::from(secs) * 1_000_000_000)
}

/// A schedule of `SYNC` every minute; its first due time.
async fn every_minute(h: &Harness) -> Timestamp {
    let r = put(h, SYNC, json!({"request": sync_request(), "rate": "PT1M"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    at(&r.json()["nextRunAt"])
}

/// The jobs of the sync, oldest first.
async fn sync_jobs(h: &Harness) -> Vec<fetcher_host::model::Job> {
    let mut jobs: Vec<_> = h
        .jobs
        .list_pending(plus(Timestamp::now(), 3600), 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.request.sync_id.as_deref() == Some(SYNC))
        .collect();
    jobs.sort_by_key(|j| j.created_at);
    jobs
}

/// Ends `id` as completed, as a worker would.
async fn finish(h: &Harness, id: JobId) {
    finish_at(h, id, Timestamp::now()).await
}

/// Ends `id` as completed at `now` (the test's clock).
async fn finish_at(h: &Harness, id: JobId, now: Timestamp) {
    let ClaimOutcome::Claimed { token, .. } = h
        .jobs
        .claim("default", id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    let event = PendingEvent {
        status: JobStatus::Completed,
        payload: "{}".into(),
        failures: 0,
    };
    h.jobs
        .complete("default", id, token, &JobResult::default(), &event, now)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_schedule_is_set_read_paused_resumed_and_removed() {
    let h = setup().await;
    let r = put(
        &h,
        SYNC,
        json!({"request": sync_request(), "cron": "0 6 * * 1-5", "timeZone": "Europe/Paris"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let set = r.json();
    assert_eq!(set["state"], "active");
    assert_eq!(set["cron"], "0 6 * * 1-5");
    assert_eq!(set["timeZone"], "Europe/Paris");
    assert_eq!(
        set["request"]["syncId"], SYNC,
        "the path's sync is the request's"
    );
    let next = at(&set["nextRunAt"]);
    assert!(next > Timestamp::now());
    assert!(set.get("lastRun").is_none());
    assert_eq!(schedule(&h).await, set);

    let paused = h
        .call(Method::POST, &format!("{}/pause", url(SYNC)), &[], None)
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.text);
    assert_eq!(paused.json()["state"], "paused");
    assert!(paused.json().get("nextRunAt").is_none());
    // A paused schedule does not run, however late it is.
    let report = run_due(&h.state, plus(next, 86_400 * 7)).await.unwrap();
    assert_eq!(report.created + report.skipped + report.failed, 0);

    let resumed = h
        .call(Method::POST, &format!("{}/resume", url(SYNC)), &[], None)
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.text);
    assert_eq!(resumed.json()["state"], "active");
    assert!(resumed.json()["nextRunAt"].is_string());

    // Replaced: a rate now.
    let r = put(&h, SYNC, json!({"request": sync_request(), "rate": "PT6H"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["rate"], "PT6H");
    assert!(
        at(&r.json()["nextRunAt"]) >= plus(Timestamp::now(), 6 * 3600 - 5),
        "a rate's first run is a period after it was set: {}",
        r.text
    );
    assert!(r.json().get("cron").is_none());

    let gone = h.call(Method::DELETE, &url(SYNC), &[], None).await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.text);
    let r = h.get(&url(SYNC)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.code(), "FET-1001");
    let again = h.call(Method::DELETE, &url(SYNC), &[], None).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_bad_schedule_is_told_what_to_fix() {
    let h = setup().await;
    let bad = [
        (
            json!({"request": sync_request(), "rate": "PT30S"}),
            "FET-1030",
            "one minute",
        ),
        (
            json!({"request": sync_request(), "rate": "every hour"}),
            "FET-1030",
            "ISO 8601",
        ),
        (
            json!({"request": sync_request(), "rate": "P1M"}),
            "FET-1030",
            "cron",
        ),
        (
            json!({"request": sync_request(), "cron": "0 0 6 * * *"}),
            "FET-1030",
            "five",
        ),
        (
            json!({"request": sync_request(), "cron": "0 6 * *"}),
            "FET-1030",
            "five",
        ),
        (
            json!({"request": sync_request(), "cron": "0 6 * * *", "timeZone": "Paris"}),
            "FET-1030",
            "IANA",
        ),
        (
            json!({"request": sync_request(), "rate": "PT1H", "timeZone": "UTC"}),
            "FET-1030",
            "cron",
        ),
        (
            json!({"request": sync_request(), "rate": "PT1H", "cron": "0 * * * *"}),
            "FET-1030",
            "not both",
        ),
        (json!({"request": sync_request()}), "FET-1030", "rate"),
        (
            json!({"request": job("core-pg", "reporter"), "rate": "PT1H"}),
            "FET-1031",
            "incremental",
        ),
        (
            json!({"request": {"syncId": "another", "dataRequest": sync_request()["dataRequest"], "metadata": {"source": "reporter"}, "incremental": sync_request()["incremental"]}, "rate": "PT1H"}),
            "FET-1031",
            "another sync",
        ),
        // The request is checked as a job creation checks it.
        (
            json!({"request": {"dataRequest": {"mappedFields": {"nope": {"users": ["id"]}}}, "metadata": {"source": "reporter"}, "incremental": {"nope": {"users": {"cursor": "id"}}}}, "rate": "PT1H"}),
            "FET-1020",
            "connections",
        ),
        (
            json!({"request": {"dataRequest": {"mappedFields": {"core-pg": {"users": ["id"]}}}, "metadata": {"source": "reporter"}, "incremental": {"core-pg": {"users": {"cursor": "missing_column"}}}}, "rate": "PT1H"}),
            "FET-0401",
            "missing_column",
        ),
        (
            json!({"request": sync_request(), "rate": "PT1H", "every": "hour"}),
            "FET-0001",
            "every",
        ),
    ];
    for (body, code, says) in bad {
        let r = put(&h, SYNC, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text);
        assert_eq!(r.code(), code, "{body}: {}", r.text);
        assert!(
            r.text.contains(says),
            "{body}: {} should say {says}",
            r.text
        );
    }
    assert_eq!(
        h.get(&url(SYNC)).await.status,
        StatusCode::NOT_FOUND,
        "nothing was stored"
    );
}

#[tokio::test]
async fn a_schedule_answers_to_its_own_product_only() {
    let h = setup().await;
    h.create("other", connection("other-pg")).await;
    // The sync belongs to `reporter` once its first job ran.
    let r = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[],
            Some({
                let mut b = sync_request();
                b["syncId"] = json!(SYNC);
                b
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let mut theirs = job("other-pg", "other");
    theirs["incremental"] = json!({"other-pg": {"users": {"cursor": "id"}}});
    let r = h
        .call(
            Method::PUT,
            &url(SYNC),
            &[("x-product-name", "other")],
            Some(json!({"request": theirs, "rate": "PT1H"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.code(), "FET-1026");

    every_minute(&h).await;
    let r = h.get_as("other", &url(SYNC)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = h
        .call(
            Method::POST,
            &format!("{}/pause", url(SYNC)),
            &[("x-product-name", "other")],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(
        h.get_as("reporter", &url(SYNC)).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn each_due_time_makes_one_job_even_under_two_ticks() {
    let h = setup().await;
    let due = every_minute(&h).await;
    assert!(
        run_due(&h.state, plus(due, -1)).await.unwrap().created == 0,
        "not yet due"
    );

    // Two schedulers fire at once: one job.
    let (a, b) = tokio::join!(run_due(&h.state, due), run_due(&h.state, due));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.created + b.created, 1, "{a:?} {b:?}");
    let jobs = sync_jobs(&h).await;
    assert_eq!(jobs.len(), 1);
    let first = jobs[0].id;
    let s = schedule(&h).await;
    assert_eq!(s["lastRun"]["outcome"], "created");
    assert_eq!(s["lastRun"]["jobId"], first.to_string());
    assert_eq!(at(&s["lastRun"]["dueAt"]), due);
    assert_eq!(at(&s["lastRunAt"]), due);
    let next = at(&s["nextRunAt"]);
    assert_eq!(next, plus(due, 60), "the next minute");
    // The same instant again: already run.
    assert_eq!(run_due(&h.state, due).await.unwrap(), Default::default());

    // The job ends; the next due time makes the next job, which is not a duplicate of
    // the first although its request is the same.
    finish(&h, first).await;
    let report = run_due(&h.state, next).await.unwrap();
    assert_eq!(report.created, 1, "{report:?}");
    let jobs = sync_jobs(&h).await;
    assert_eq!(jobs.len(), 1, "the first is completed, the second pending");
    assert_ne!(jobs[0].id, first);
    assert_ne!(jobs[0].request_hash, "", "hashed");
    let got = h.get(&format!("/v1/fetcher/{}", jobs[0].id)).await.json();
    assert_eq!(got["syncId"], SYNC);
    assert_eq!(got["status"], "pending");
    assert_eq!(at(&got["scheduledFor"]), next, "the job names its due time");
}

#[tokio::test]
async fn a_run_is_skipped_while_the_previous_job_runs() {
    let h = setup().await;
    let due = every_minute(&h).await;
    assert_eq!(run_due(&h.state, due).await.unwrap().created, 1);
    let running = sync_jobs(&h).await[0].id;
    let report = run_due(&h.state, plus(due, 60)).await.unwrap();
    assert_eq!(report.skipped, 1, "{report:?}");
    assert_eq!(sync_jobs(&h).await.len(), 1, "nothing queued behind it");
    let s = schedule(&h).await;
    assert_eq!(s["lastRun"]["outcome"], "skipped");
    assert_eq!(s["lastRun"]["jobId"], running.to_string());
    assert_eq!(s["consecutiveFailures"], 0, "a skip is no failure");
    assert_eq!(at(&s["nextRunAt"]), plus(due, 120));
}

#[tokio::test]
async fn missed_runs_after_downtime_give_one_job() {
    let h = setup().await;
    let due = every_minute(&h).await;
    // Ten due times pass with no scheduler running.
    let late = plus(due, 10 * 60 + 5);
    let report = run_due(&h.state, late).await.unwrap();
    assert_eq!(report.created, 1, "{report:?}");
    assert_eq!(run_due(&h.state, late).await.unwrap(), Default::default());
    assert_eq!(sync_jobs(&h).await.len(), 1);
    let s = schedule(&h).await;
    assert_eq!(
        at(&s["nextRunAt"]),
        plus(due, 11 * 60),
        "the next due time after now"
    );
}

#[tokio::test]
async fn a_schedule_pauses_itself_after_three_failed_runs() {
    let h = setup().await;
    let due = every_minute(&h).await;
    // The connection is deleted after the schedule was set: every run now fails.
    let list = h.get("/v1/management/connections").await.json();
    let id = list["items"][0]["id"].as_str().unwrap().to_owned();
    let r = h
        .call(
            Method::DELETE,
            &format!("/v1/management/connections/{id}"),
            &[],
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    for i in 0..3 {
        let report = run_due(&h.state, plus(due, 60 * i)).await.unwrap();
        assert_eq!(report.failed, 1, "run {i}: {report:?}");
        let s = schedule(&h).await;
        assert_eq!(s["lastRun"]["outcome"], "failed");
        assert_eq!(s["lastRun"]["code"], "FET-1020", "{s}");
        assert!(
            s["lastRun"]["message"]
                .as_str()
                .unwrap()
                .contains("No connection"),
            "{s}"
        );
        assert_eq!(s["consecutiveFailures"], i + 1);
        if i == 2 {
            assert_eq!(report.paused.len(), 1);
        }
    }
    let s = schedule(&h).await;
    assert_eq!(s["state"], "pausedAfterFailures");
    let events = h.sync_events.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].detail_type.as_str(), "schedule.paused");
    let payload: Value = serde_json::from_str(&events[0].payload).unwrap();
    assert_eq!(payload["syncId"], SYNC);
    assert_eq!(payload["state"], "pausedAfterFailures");
    assert_eq!(payload["lastRun"]["code"], "FET-1020");
    assert_eq!(payload["consecutiveFailures"], 3);
    assert!(s.get("nextRunAt").is_none());
    let report = run_due(&h.state, plus(due, 3600)).await.unwrap();
    assert_eq!(report, Default::default(), "a paused schedule does not run");
    assert!(sync_jobs(&h).await.is_empty());

    // Resumed: active again, failures forgotten.
    let r = h
        .call(Method::POST, &format!("{}/resume", url(SYNC)), &[], None)
        .await;
    assert_eq!(r.json()["state"], "active");
    assert_eq!(r.json()["consecutiveFailures"], 0);
}

#[tokio::test]
async fn a_sync_behind_its_schedule_is_stale_once_per_episode() {
    let h = setup().await;
    let due = every_minute(&h).await;
    assert_eq!(run_due(&h.state, due).await.unwrap().created, 1);
    let job = sync_jobs(&h).await[0].id;
    let stale = |h: &Harness| {
        h.sync_events
            .events()
            .into_iter()
            .filter(|e| e.detail_type.as_str() == "sync.stale")
            .collect::<Vec<_>>()
    };
    // The job never ends: skipped runs, then past three periods the sync is stale, once.
    for minutes in 1..=5 {
        let report = run_due(&h.state, plus(due, 60 * minutes)).await.unwrap();
        assert_eq!(report.skipped, 1, "{report:?}");
        assert_eq!(
            report.stale.len(),
            usize::from(minutes == 3),
            "minute {minutes}"
        );
    }
    let events = stale(&h);
    assert_eq!(events.len(), 1, "one event per episode: {events:?}");
    let payload: Value = serde_json::from_str(&events[0].payload).unwrap();
    assert_eq!(payload["syncId"], SYNC);
    assert_eq!(payload["periodSeconds"], 60);
    assert!(payload["ageSeconds"].as_u64().unwrap() > 180, "{payload}");
    let sync = h.get(&format!("/v1/syncs/{SYNC}")).await.json();
    assert_eq!(sync["stale"], true, "{sync}");
    let fresh = fetcher_http::schedules::record_freshness(&h.state, plus(due, 5 * 60))
        .await
        .unwrap();
    assert_eq!(fresh.len(), 1);
    assert!(fresh[0].stale && fresh[0].period_seconds == 60, "{fresh:?}");
    let metrics = h.get("/metrics").await.text;
    assert!(metrics.contains("fetcher_syncs_stale 1"), "{metrics}");
    assert!(sync.get("lastCompletedAt").is_none());

    // The job completes: fresh again at the next run, and the sync says its age.
    let done = plus(due, 6 * 60);
    finish_at(&h, job, done).await;
    let report = run_due(&h.state, plus(due, 6 * 60 + 1)).await.unwrap();
    assert_eq!((report.created, report.stale.len()), (1, 0), "{report:?}");
    let sync = h.get(&format!("/v1/syncs/{SYNC}")).await.json();
    assert_eq!(sync["lastCompletedJob"], job.to_string());
    assert_eq!(at(&sync["lastCompletedAt"]), done);
    assert!(sync["ageSeconds"].is_u64(), "{sync}");

    // Behind again later: a second episode, a second event.
    for minutes in 7..=10 {
        run_due(&h.state, plus(due, 60 * minutes)).await.unwrap();
    }
    assert_eq!(stale(&h).len(), 2);
    assert_ne!(stale(&h)[0].id, stale(&h)[1].id, "each episode its own id");
}
