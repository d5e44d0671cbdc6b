//! Claims and their ends: retries within the budget and the claim cap, crashed and lost
//! leases, the host's deadline, and cancellation of pending and running jobs.

mod pipeline_support;

use std::sync::Arc;
use std::time::Duration;

use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::*;
use fetcher_host::message;
use fetcher_host::model::*;
use fetcher_host::pipeline::*;
use fetcher_host::ports::*;
use pipeline_support::*;

#[tokio::test]
async fn retryable_failures_release_the_claim_then_fail_after_max_attempts() {
    let mut w = world().await;
    w.pipeline.config.max_attempts = 3;
    w.factory.behaviour.lock().unwrap().fail_query = true;
    let (job, msg) = submit(&w, None).await;
    for attempt in 1..=2 {
        let outcome = w.pipeline.handle(&msg).await;
        assert!(outcome.should_retry(), "attempt {attempt}: {outcome:?}");
        let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
        assert_eq!((j.status, j.attempts), (JobStatus::Pending, attempt));
    }
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Failed { .. }
    ));
    assert_eq!(w.events.events().len(), 1);
    // A non-retryable failure fails at once.
    let (bad, msg) = {
        let mut req = JobRequest::default();
        req.mapped_fields.insert(
            "pg".into(),
            [("public.nope".to_string(), vec!["id".to_string()])].into(),
        );
        let job = Job::new("acme", req, "h2".into());
        w.jobs.insert(&job).await.unwrap();
        let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
        let m = message::encode(&job, &signer, "", message::unix_now());
        (job, m)
    };
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!()
    };
    assert_eq!(
        error,
        "engine: [validation] extraction request failed schema validation: unknown table 'pg.public.nope'"
    );
    assert_eq!(
        w.jobs.get("acme", bad.id).await.unwrap().unwrap().attempts,
        1
    );
}

#[tokio::test]
async fn a_crashed_runs_lease_is_taken_over() {
    let w = world().await;
    let (job, msg) = submit(&w, None).await;
    // Simulate a worker that claimed the job and died.
    let long_ago = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() - 3_600_000_000_000);
    assert!(matches!(
        w.jobs
            .claim("acme", job.id, long_ago, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    let outcome = w.pipeline.handle(&msg).await;
    assert!(matches!(outcome, Outcome::Completed { .. }), "{outcome:?}");
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (JobStatus::Completed, 2));

    // A live lease held by someone else: come back later.
    let (job2, msg2) = submit(&w, None).await;
    assert!(matches!(
        w.jobs
            .claim("acme", job2.id, Timestamp::now(), Duration::from_secs(600))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    assert!(w.pipeline.handle(&msg2).await.should_retry());
}

#[tokio::test]
async fn retryable_failures_are_retried_within_the_budget_only() {
    let mut w = world().await;
    w.factory.behaviour.lock().unwrap().fail_query = true;
    // Inside the budget: retried, far beyond the reference's three attempts.
    let (job, msg) = submit(&w, None).await;
    for attempt in 1..=6 {
        let outcome = w.pipeline.handle(&msg).await;
        assert!(outcome.should_retry(), "attempt {attempt}: {outcome:?}");
        let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
        assert_eq!((j.status, j.attempts), (JobStatus::Pending, attempt));
    }
    // Past the budget: the next retryable failure fails the job, with its event.
    w.pipeline.config.retry_budget = Duration::ZERO;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Failed { .. }
    ));
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(w.events.events().len(), 1);
}

#[tokio::test]
async fn a_job_out_of_retries_fails_with_its_first_error() {
    let mut w = world().await;
    let (job, msg) = submit(&w, None).await;
    // First the datasource cannot be reached, then it answers but queries fail.
    w.factory.behaviour.lock().unwrap().fail_discover = Some(fetcher_engine::Category::Connect);
    assert!(w.pipeline.handle(&msg).await.should_retry());
    let first = w
        .jobs
        .get("acme", job.id)
        .await
        .unwrap()
        .unwrap()
        .first_error;
    let first = first.expect("the first error is kept");
    {
        let mut b = w.factory.behaviour.lock().unwrap();
        b.fail_discover = None;
        b.fail_query = true;
    }
    assert!(w.pipeline.handle(&msg).await.should_retry());
    w.pipeline.config.retry_budget = Duration::ZERO;
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!("out of retries")
    };
    assert_eq!(
        error, first,
        "the first meaningful category, not the last attempt's"
    );
    assert!(error.contains("[connect]"), "{error}");
}

#[tokio::test]
async fn a_job_whose_workers_keep_dying_fails_at_the_claim_cap() {
    let mut w = world().await;
    w.pipeline.config.max_attempts = 2;
    w.pipeline.config.lease = Duration::from_millis(1);
    let (job, msg) = submit(&w, None).await;
    // Two claims whose workers "died": the lease just expires.
    for _ in 0..2 {
        claim_and_die(&w, &job).await;
    }
    // The next delivery would be the third claim: over the cap, the job fails, once, with
    // its event; a later delivery is a no-op.
    let Outcome::Failed { error, .. } = w.pipeline.handle(&msg).await else {
        panic!("over the claim cap")
    };
    assert!(error.contains("abandoned"), "{error}");
    let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(w.events.events().len(), 1);
    assert!(!w.pipeline.handle(&msg).await.should_retry());
    assert_eq!(w.events.events().len(), 1);
}

#[tokio::test]
async fn a_lost_lease_cancels_the_run_and_stores_nothing() {
    let mut w = world().await;
    w.pipeline.config.lease = Duration::from_millis(300);
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    // Wait for the claim, then let another worker take the job over, as it would once
    // this run's lease had expired (a stalled process).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while w.jobs.get("acme", job.id).await.unwrap().unwrap().status != JobStatus::Processing {
        assert!(std::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let later = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() + 3_600_000_000_000);
    assert!(matches!(
        w.jobs
            .claim("acme", job.id, later, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    // The next renewal (a third of the lease) finds the claim gone and cancels the run.
    let outcome = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the run stops once its lease is lost")
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Skipped("lease lost")),
        "{outcome:?}"
    );
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (JobStatus::Processing, 2));
    assert!(w.objects.paths().is_empty(), "nothing stored");
    assert!(w.events.events().is_empty());
}

#[tokio::test]
async fn an_aborted_run_stops_renewing_its_lease() {
    let mut w = world().await;
    w.pipeline.config.lease = Duration::from_millis(300);
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    let lease = |j: Job| j.lease_expires_at.map(|t| t.unix_nanos());
    // Renewed while the run lives…
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let first = loop {
        let j = w.jobs.get("acme", job.id).await.unwrap().unwrap();
        if j.status == JobStatus::Processing {
            break lease(j);
        }
        assert!(std::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::sleep(Duration::from_millis(250)).await;
    let renewed = lease(w.jobs.get("acme", job.id).await.unwrap().unwrap());
    assert!(renewed > first, "the heartbeat renews");
    // …and not after its task is aborted (a host's `abort_all`, a panic).
    run.abort();
    let _ = run.await;
    let at_abort = lease(w.jobs.get("acme", job.id).await.unwrap().unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let after = lease(w.jobs.get("acme", job.id).await.unwrap().unwrap());
    assert_eq!(after, at_abort, "no renewal once the run is gone");
}

#[tokio::test]
async fn a_run_past_the_hosts_deadline_fails_with_timeout_and_its_event() {
    // A Lambda invocation's end (less a margin) bounds the extraction: the run ends
    // with `timeout` while the function still runs, rather than the function being
    // killed mid-run. Like any timeout it is retried while attempts last, then fails.
    let mut w = world().await;
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    async fn run(w: &World, msg: &QueueMessage) -> Outcome {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(150);
        let stop = Context::background();
        let fut = w.pipeline.handle_within(msg, &stop, Some(deadline));
        tokio::time::timeout(Duration::from_secs(5), fut)
            .await
            .expect("the deadline ends the run")
    }
    let first = run(&w, &msg).await;
    assert!(first.should_retry(), "{first:?}");
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Pending, "the claim is released");
    w.pipeline.config.max_attempts = 2;
    let outcome = run(&w, &msg).await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let stored = w.jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    let events = w.events.events();
    assert_eq!(events.len(), 1);
    assert!(
        events[0].payload.contains("timeout") || events[0].payload.contains("timed out"),
        "{}",
        events[0].payload
    );
    assert!(w.objects.paths().is_empty());
}

#[tokio::test]
async fn a_running_job_canceled_stops_within_a_heartbeat_and_leaves_nothing() {
    let mut w = world().await;
    canceled_world_config(&mut w);
    w.factory.behaviour.lock().unwrap().block_on_context = true;
    let (job, msg) = submit(&w, None).await;
    let (jobs, events, objects) = (w.jobs.clone(), w.events.clone(), w.objects.clone());
    let pipeline = Arc::new(w.pipeline);
    let run = tokio::spawn({
        let p = pipeline.clone();
        async move { p.handle(&msg).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while jobs.get("acme", job.id).await.unwrap().unwrap().status != JobStatus::Processing {
        assert!(std::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let asked = std::time::Instant::now();
    let event = canceled_event(&job);
    let change = Transition::Cancel {
        event: &event,
        at: Timestamp::now(),
    };
    assert!(!jobs.transition("acme", job.id, change).await.unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the run stops")
        .unwrap();
    assert!(asked.elapsed() < Duration::from_secs(5), "seen within 5 s");
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let stored = jobs.get("acme", job.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Canceled);
    assert!(stored.pending_event.is_none(), "published");
    assert!(objects.paths().is_empty(), "no object left");
    let sent = events.events();
    assert_eq!(sent.len(), 1, "one event");
    assert_eq!(sent[0].detail_type, fetcher_host::model::EventType::Failed);
    assert_eq!(sent[0].id, format!("fetcher.job.failed.{}", job.id));
    let payload: serde_json::Value = serde_json::from_str(&sent[0].payload).unwrap();
    assert_eq!(payload["status"], "failed");
    assert_eq!(
        payload["metadata"]["error"]["message"],
        "engine: [canceled] job canceled by request"
    );
}

#[tokio::test]
async fn a_pending_cancel_makes_the_queued_message_publish_its_event_once() {
    let w = world().await;
    let (job, msg) = submit(&w, None).await;
    let event = canceled_event(&job);
    let change = Transition::Cancel {
        event: &event,
        at: Timestamp::now(),
    };
    assert!(w.jobs.transition("acme", job.id, change).await.unwrap());
    // The message arrives: nothing runs, the outbox's event goes out.
    let first = w.pipeline.handle(&msg).await;
    assert!(
        matches!(first, Outcome::Skipped("terminal event republished")),
        "{first:?}"
    );
    // Redelivered: a no-op.
    let again = w.pipeline.handle(&msg).await;
    assert!(matches!(again, Outcome::Skipped(_)), "{again:?}");
    assert_eq!(w.events.events().len(), 1);
    assert_eq!(
        w.events.events()[0].detail_type,
        fetcher_host::model::EventType::Failed
    );
    assert!(w.objects.paths().is_empty());
    wait_for_status(&w, job.id, JobStatus::Canceled).await;
}
