//! Long jobs in segments (docs/engine.md, "Continued runs"; docs/operations.md, "Long
//! jobs") on in-memory ports: every segment stops at once (after one 1024-row batch),
//! records its checkpoint and sends a signed continuation; the parts of all segments are
//! exactly the bytes of one uninterrupted run, and one event announces the job. Forged,
//! replayed and mismatched continuations are refused; a job that fails or is canceled
//! between segments leaves no part.

mod pipeline_support;

use std::time::Duration;

use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::Timestamp;
use fetcher_host::memory::MemoryJobQueue;
use fetcher_host::message;
use fetcher_host::model::*;
use fetcher_host::pipeline::*;
use fetcher_host::ports::*;
use pipeline_support::*;
use tokio::sync::mpsc::UnboundedReceiver;

const ROWS: i64 = 5000;

/// The world with `public.accounts` of `ROWS` rows ordered by `id` (its connector
/// reports positions), a queue for continuations, and segments that stop at once.
async fn long_world() -> (World, UnboundedReceiver<QueueMessage>) {
    let mut w = world().await;
    {
        let mut b = w.factory.behaviour.lock().unwrap();
        b.rows.insert(
            "public.accounts".into(),
            (1..=ROWS).map(|i| row(i, &format!("n{i}"))).collect(),
        );
        b.key = Some("id".into());
    }
    let queue = MemoryJobQueue::new();
    let rx = queue.receiver().unwrap();
    w.pipeline.queue = Some(queue);
    w.pipeline.config.segment_after = Some(Duration::ZERO);
    (w, rx)
}

/// Handles `msg`, then every continuation it leads to, until the job ends; the
/// outcomes in order.
async fn drive(
    w: &World,
    rx: &mut UnboundedReceiver<QueueMessage>,
    msg: QueueMessage,
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut next = Some(msg);
    while let Some(m) = next.take() {
        let outcome = w.pipeline.handle(&m).await;
        let continued = matches!(outcome, Outcome::Continued { .. });
        outcomes.push(outcome);
        if continued {
            next = Some(rx.try_recv().expect("a continuation was sent"));
        }
        assert!(outcomes.len() < 50, "no end");
    }
    outcomes
}

async fn stored(w: &World, id: JobId) -> Job {
    w.jobs.get("acme", id).await.unwrap().unwrap()
}

/// The plaintext of an uninterrupted v2 job over the same table.
async fn one_run(w: &mut World) -> Vec<u8> {
    let after = w.pipeline.config.segment_after.take();
    let (job, msg) = submit(w, None).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Completed { .. }
    ));
    w.pipeline.config.segment_after = after;
    let r = result_of(w, job.id).await;
    assert!(r.parts.is_empty(), "one object");
    open_v2(w, &r.path, &job.id.to_string(), &r.hmac).await
}

#[tokio::test]
async fn a_long_job_runs_in_segments_whose_parts_are_one_runs_bytes() {
    let (mut w, mut rx) = long_world().await;
    let whole = one_run(&mut w).await;
    let (job, msg) = submit(&w, None).await;

    // The first segment: pending again, with its checkpoint and progress, and the
    // continuation on the queue, signed for that checkpoint.
    let first = w.pipeline.handle(&msg).await;
    assert!(
        matches!(first, Outcome::Continued { segment: 1, .. }),
        "{first:?}"
    );
    let between = stored(&w, job.id).await;
    assert_eq!(between.status, JobStatus::Pending);
    let c = between.checkpoint.clone().expect("checkpoint");
    assert_eq!(
        (c.segment, c.rows, c.parts.len(), c.tables_done),
        (1, 1024, 1, 0)
    );
    assert_eq!(c.resume.after, Some(vec![serde_json::json!(1024)]));
    let p = between.progress.unwrap();
    assert_eq!((p.rows, p.tables_done, p.tables_total), (1024, 0, 1));
    let continuation = rx.try_recv().unwrap();
    let body: message::JobMessage = serde_json::from_slice(&continuation.body).unwrap();
    assert_eq!(body.segment, Some(1));
    assert_eq!(body.checkpoint, Some(c.digest()));

    // The rest: 5 segments hold the rows (1024 each, the last 904), a sixth finds
    // nothing after the last row and writes the manifest.
    let outcomes = drive(&w, &mut rx, continuation).await;
    assert_eq!(outcomes.len(), 5);
    let Some(Outcome::Completed { rows, .. }) = outcomes.last() else {
        panic!("{outcomes:?}")
    };
    assert_eq!(*rows, ROWS as u64);
    let done = stored(&w, job.id).await;
    assert_eq!(done.status, JobStatus::Completed);
    let r = done.result.unwrap();
    assert_eq!(
        r.path,
        format!("acme/external-data/{}.manifest.json.v2", job.id)
    );
    assert_eq!((r.format, r.row_count), (ResultFormat::V2, ROWS as u64));
    assert_eq!(r.parts.len(), 5);
    // Part 0 is where a one-run job's object would be; the others beside the manifest.
    assert_eq!(
        r.parts[0].path,
        format!("acme/external-data/{}.ndjson.v2", job.id)
    );
    assert_eq!(
        r.parts[1].path,
        format!("acme/external-data/{}/part-00001.ndjson.v2", job.id)
    );
    let mut joined = Vec::new();
    for part in &r.parts {
        joined.extend(open_v2(&w, &part.path, &job.id.to_string(), &part.hmac).await);
    }
    assert_eq!(joined, whole, "the parts are one run's bytes, in order");
    assert_eq!(r.size_bytes, whole.len() as u64);
    let manifest: serde_json::Value =
        serde_json::from_slice(&open_v2(&w, &r.path, &job.id.to_string(), &r.hmac).await).unwrap();
    assert_eq!(manifest["format"], "ndjson");
    assert_eq!(manifest["rowCount"], ROWS);
    assert_eq!(manifest["parts"].as_array().unwrap().len(), 5);
    // One event for the job, with its parts.
    let events: Vec<_> = w
        .events
        .events()
        .into_iter()
        .filter(|e| e.job_id == job.id)
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].detail_type,
        fetcher_host::model::EventType::Completed
    );
    let payload: serde_json::Value = serde_json::from_str(&events[0].payload).unwrap();
    assert_eq!(payload["result"]["parts"].as_array().unwrap().len(), 5);
    assert_eq!(payload["result"]["rowCount"], ROWS);
    assert_eq!(done.progress.unwrap().rows, ROWS as u64);
}

#[tokio::test]
async fn segments_of_a_parquet_job_are_parts_of_its_table() {
    let (w, mut rx) = long_world().await;
    let (job, msg) = submit(&w, Some(ResultFormat::Parquet)).await;
    let outcomes = drive(&w, &mut rx, msg).await;
    assert!(matches!(outcomes.last(), Some(Outcome::Completed { .. })));
    let r = result_of(&w, job.id).await;
    assert_eq!(r.format, ResultFormat::Parquet);
    assert_eq!(r.parts.len(), 5);
    assert!(r.parts.iter().all(|p| p.table == "public.accounts"));
    assert_eq!(
        r.parts.iter().map(|p| p.row_count).sum::<i64>(),
        ROWS,
        "every row once"
    );
    for (i, p) in r.parts.iter().enumerate() {
        assert_eq!(
            p.path,
            format!("acme/external-data/{}/part-{i:05}.parquet.v2", job.id)
        );
        let file = open_v2(&w, &p.path, &job.id.to_string(), &p.hmac).await;
        assert!(file.starts_with(b"PAR1") && file.ends_with(b"PAR1"));
    }
}

#[tokio::test]
async fn segments_do_not_spend_the_claim_cap_and_keep_the_watermark() {
    let (mut w, mut rx) = long_world().await;
    // Two claims per job would end a job of six segments if the cap counted them all.
    w.pipeline.config.max_attempts = 2;
    let (mut job, _) = submit(&w, None).await;
    // An incremental read on `id`: the template orders by it, so it is the cursor too.
    job.id = JobId::new();
    job.request_hash = format!("hash-{}", job.id);
    job.request.incremental.insert(
        "pg".into(),
        [(
            "public.accounts".to_string(),
            fetcher_engine::IncrementalSpec {
                mode: Default::default(),
                cursor: "id".into(),
                key: vec![],
                lookback: None,
            },
        )]
        .into(),
    );
    job.request.sync_id = Some("s1".into());
    assert_eq!(w.jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let msg = message::encode(&job, &signer, "req-1", message::unix_now());
    let outcomes = drive(&w, &mut rx, msg).await;
    assert_eq!(outcomes.len(), 6);
    assert!(matches!(outcomes.last(), Some(Outcome::Completed { .. })));
    let done = stored(&w, job.id).await;
    assert!(done.attempts >= 6, "one claim per segment");
    let span = &done.result.unwrap().watermarks["pg"]["public.accounts"];
    assert_eq!(span.from_watermark, None);
    assert_eq!(
        span.to_watermark.as_ref().unwrap().values,
        vec![serde_json::json!(ROWS)],
        "the last row, reached in an earlier segment than the last"
    );
    let sync = w.jobs.sync("acme", "s1").await.unwrap().unwrap();
    assert_eq!(
        sync.watermark("pg", "public.accounts").unwrap().values,
        vec![serde_json::json!(ROWS)]
    );
}

#[tokio::test]
async fn a_redelivered_message_of_an_earlier_segment_does_nothing() {
    let (w, mut rx) = long_world().await;
    let (job, msg) = submit(&w, None).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Continued { segment: 1, .. }
    ));
    let second = rx.try_recv().unwrap();
    assert!(matches!(
        w.pipeline.handle(&second).await,
        Outcome::Continued { segment: 2, .. }
    ));
    let before = stored(&w, job.id).await;
    for stale in [&msg, &second] {
        let outcome = w.pipeline.handle(stale).await;
        assert!(
            matches!(outcome, Outcome::Skipped("message of an earlier segment")),
            "{outcome:?}"
        );
    }
    assert_eq!(stored(&w, job.id).await, before, "nothing changed");
    let third = rx.try_recv().unwrap();
    let outcomes = drive(&w, &mut rx, third).await;
    assert!(matches!(outcomes.last(), Some(Outcome::Completed { .. })));
}

#[tokio::test]
async fn a_forged_or_redirected_continuation_is_dropped_and_the_job_goes_on() {
    let (w, mut rx) = long_world().await;
    let (job, msg) = submit(&w, None).await;
    let (other, _) = submit(&w, None).await;
    w.pipeline.handle(&msg).await;
    let genuine = rx.try_recv().unwrap();
    let body = String::from_utf8(genuine.body.clone()).unwrap();
    let forgeries = [
        // Another segment number, or a checkpoint digest of one's own.
        body.replace("\"segment\":1", "\"segment\":2"),
        body.replacen("\"checkpoint\":\"", "\"checkpoint\":\"00", 1),
        // The same continuation pointed at another job.
        body.replace(&job.id.to_string(), &other.id.to_string()),
    ];
    for forged in forgeries {
        let mut m = genuine.clone();
        m.body = forged.into_bytes();
        if m.body
            .windows(36)
            .any(|w| w == other.id.to_string().as_bytes())
        {
            m.headers
                .insert(message::HEADER_JOB_ID.into(), other.id.to_string());
        }
        let outcome = w.pipeline.handle(&m).await;
        assert!(
            matches!(
                outcome,
                Outcome::Dropped {
                    reason: DropReason::InvalidSignature,
                    ..
                }
            ),
            "{outcome:?}"
        );
    }
    assert_eq!(stored(&w, other.id).await.status, JobStatus::Pending);
    assert!(stored(&w, other.id).await.checkpoint.is_none());
    let outcomes = drive(&w, &mut rx, genuine).await;
    assert!(matches!(outcomes.last(), Some(Outcome::Completed { .. })));
}

#[tokio::test]
async fn a_checkpoint_changed_in_the_store_fails_the_job_cleanly() {
    let (w, mut rx) = long_world().await;
    let (job, msg) = submit(&w, None).await;
    w.pipeline.handle(&msg).await;
    let genuine = rx.try_recv().unwrap();
    // Someone rewrites the checkpoint: resume much further on, skipping rows.
    let mut job_now = stored(&w, job.id).await;
    let mut tampered = job_now.checkpoint.clone().unwrap();
    tampered.resume.after = Some(vec![serde_json::json!(4000)]);
    let ClaimOutcome::Claimed { token, .. } = w
        .jobs
        .claim("acme", job.id, Timestamp::now(), Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    let change = Transition::Checkpoint {
        token,
        checkpoint: &tampered,
        progress: job_now.progress.take().unwrap(),
        at: Timestamp::now(),
    };
    w.jobs.transition("acme", job.id, change).await.unwrap();
    let parts = tampered.parts.clone();
    let outcome = w.pipeline.handle(&genuine).await;
    let Outcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(error, CHECKPOINT_MISMATCH);
    let failed = stored(&w, job.id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    for p in parts {
        assert!(
            w.objects.head(&p.path).await.unwrap().is_none(),
            "part {} removed",
            p.path
        );
    }
    let events = w.events.events();
    assert!(
        events
            .iter()
            .any(|e| e.job_id == job.id && e.detail_type == fetcher_host::model::EventType::Failed)
    );
}

#[tokio::test]
async fn a_job_canceled_between_segments_leaves_no_part() {
    let (w, mut rx) = long_world().await;
    let (job, msg) = submit(&w, None).await;
    w.pipeline.handle(&msg).await;
    let second = rx.try_recv().unwrap();
    w.pipeline.handle(&second).await;
    let third = rx.try_recv().unwrap();
    let parts = stored(&w, job.id).await.checkpoint.unwrap().parts;
    assert_eq!(parts.len(), 2);
    let event = canceled_event(&job);
    let change = Transition::Cancel {
        event: &event,
        at: Timestamp::now(),
    };
    assert!(
        w.jobs.transition("acme", job.id, change).await.unwrap(),
        "canceled at once"
    );
    // The continuation arrives: nothing runs, the parts go.
    let outcome = w.pipeline.handle(&third).await;
    assert!(matches!(outcome, Outcome::Skipped(_)), "{outcome:?}");
    for p in parts {
        assert!(
            w.objects.head(&p.path).await.unwrap().is_none(),
            "{}",
            p.path
        );
    }
    assert_eq!(stored(&w, job.id).await.status, JobStatus::Canceled);
}

#[tokio::test]
async fn a_job_that_fails_in_a_later_segment_leaves_no_part() {
    let (mut w, mut rx) = long_world().await;
    w.pipeline.config.retry_budget = Duration::ZERO;
    let (job, msg) = submit(&w, None).await;
    w.pipeline.handle(&msg).await;
    let second = rx.try_recv().unwrap();
    let parts = stored(&w, job.id).await.checkpoint.unwrap().parts;
    w.factory.behaviour.lock().unwrap().fail_query = true;
    let outcome = w.pipeline.handle(&second).await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    for p in parts {
        assert!(
            w.objects.head(&p.path).await.unwrap().is_none(),
            "{}",
            p.path
        );
    }
}
