//! Fan-out (docs/operations.md, "Fan-out") on in-memory ports: a big table cut into key
//! ranges, one signed message per range, each range's own claim and parts; the ranges'
//! parts in order are one uninterrupted run's bytes, whatever order the ranges run in,
//! and the manifest and the event come once even when ranges finish together. A range
//! whose worker died is taken over; forged and mismatched range messages are refused; a
//! cancel leaves no object.

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

/// Rows of the big table; with 1000 rows per range and a cap of 4, it is cut in 4.
const ROWS: i64 = 5000;
const TABLES: [&str; 3] = ["public.a_small", "public.accounts", "public.z_after"];

/// The world with three tables ordered by `id` (positions reported): a small one before
/// the big `public.accounts` and one after it, fan-out at 4 ranges of at least 1000 rows.
async fn fan_world() -> (World, UnboundedReceiver<QueueMessage>) {
    let mut w = world().await;
    {
        let mut b = w.factory.behaviour.lock().unwrap();
        b.rows.insert(
            "public.accounts".into(),
            (1..=ROWS).map(|i| row(i, &format!("n{i}"))).collect(),
        );
        b.rows.insert(
            "public.a_small".into(),
            (1..=30).map(|i| row(i, &format!("s{i}"))).collect(),
        );
        b.rows.insert(
            "public.z_after".into(),
            (1..=40).map(|i| row(i * 10, &format!("z{i}"))).collect(),
        );
        b.schema.tables = TABLES
            .iter()
            .map(|t| fetcher_engine::TableSnapshot {
                name: (*t).into(),
                fields: vec!["id".into(), "name".into()],
                ..Default::default()
            })
            .collect();
        b.key = Some("id".into());
    }
    let queue = MemoryJobQueue::new();
    let rx = queue.receiver().unwrap();
    w.pipeline.queue = Some(queue);
    w.pipeline.config.fanout_ranges = 4;
    w.pipeline.config.fanout_range_rows = 1000;
    (w, rx)
}

async fn submit_all(w: &World, format: Option<ResultFormat>) -> (Job, QueueMessage) {
    let mut req = JobRequest::default();
    req.mapped_fields.insert(
        "pg".into(),
        TABLES
            .iter()
            .map(|t| (t.to_string(), vec!["id".to_string(), "name".to_string()]))
            .collect(),
    );
    req.metadata.insert("source".into(), "crm".into());
    req.result_format = format;
    let job = Job::new("acme", req, format!("hash-{}", uuid::Uuid::now_v7()));
    assert_eq!(w.jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    (
        job.clone(),
        message::encode(&job, &signer, "req-1", message::unix_now()),
    )
}

async fn stored(w: &World, id: JobId) -> Job {
    w.jobs.get("acme", id).await.unwrap().unwrap()
}

fn drain(rx: &mut UnboundedReceiver<QueueMessage>) -> Vec<QueueMessage> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

fn body(m: &QueueMessage) -> message::JobMessage {
    serde_json::from_slice(&m.body).unwrap()
}

/// The plaintext of one uninterrupted run of the same job.
async fn one_run(w: &mut World, format: Option<ResultFormat>) -> (Job, JobResult) {
    let cap = std::mem::replace(&mut w.pipeline.config.fanout_ranges, 1);
    let (job, msg) = submit_all(w, format).await;
    let out = w.pipeline.handle(&msg).await;
    assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");
    w.pipeline.config.fanout_ranges = cap;
    let r = result_of(w, job.id).await;
    (job, r)
}

/// The concatenated plaintext of a manifest's parts (or of the single object).
async fn plaintext(w: &World, job: &Job, r: &JobResult) -> Vec<u8> {
    let id = job.id.to_string();
    if r.parts.is_empty() {
        return open_v2(w, &r.path, &id, &r.hmac).await;
    }
    let mut all = Vec::new();
    for p in &r.parts {
        all.extend(open_v2(w, &p.path, &id, &p.hmac).await);
    }
    all
}

/// Handles every message on the queue (and the ones they lead to) until none is left;
/// the outcomes.
async fn run_all(
    w: &World,
    rx: &mut UnboundedReceiver<QueueMessage>,
    reverse: bool,
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    loop {
        let mut batch = drain(rx);
        if batch.is_empty() {
            return outcomes;
        }
        if reverse {
            batch.reverse();
        }
        for m in batch {
            outcomes.push(w.pipeline.handle(&m).await);
        }
        assert!(outcomes.len() < 200, "no end");
    }
}

/// Every object the store holds for the job.
fn objects_of(w: &World, job: &Job) -> Vec<String> {
    let id = job.id.to_string();
    let mut keys: Vec<String> = w
        .objects
        .paths()
        .into_iter()
        .filter(|k| k.contains(&id))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_big_table_is_read_in_ranges_whose_parts_are_one_runs_bytes() {
    let (mut w, mut rx) = fan_world().await;
    let (whole_job, whole) = one_run(&mut w, None).await;
    let whole = plaintext(&w, &whole_job, &whole).await;
    let (job, msg) = submit_all(&w, None).await;

    let first = w.pipeline.handle(&msg).await;
    assert!(
        matches!(first, Outcome::FannedOut { ranges: 4, .. }),
        "{first:?}"
    );
    let split = stored(&w, job.id).await;
    assert_eq!(split.status, JobStatus::Processing);
    let fanout = split.fanout.clone().expect("fanned out");
    assert_eq!(
        (fanout.config.as_str(), fanout.table.as_str()),
        ("pg", "public.accounts")
    );
    let keys: Vec<_> = fanout
        .ranges
        .iter()
        .map(|r| {
            (
                r.keys.lo.as_ref().and_then(|k| k.as_int()),
                r.keys.hi.as_ref().and_then(|k| k.as_int()),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (None, Some(1251)),
            (Some(1251), Some(2501)),
            (Some(2501), Some(3751)),
            (Some(3751), None)
        ]
    );
    let messages = drain(&mut rx);
    let ranges: Vec<_> = messages.iter().map(|m| body(m).range).collect();
    assert_eq!(ranges, [Some(0), Some(1), Some(2), Some(3)]);

    // Last range first: the order the ranges run in changes nothing.
    let mut outcomes = Vec::new();
    for m in messages.iter().rev() {
        outcomes.push(w.pipeline.handle(m).await);
    }
    assert!(
        outcomes[..3]
            .iter()
            .all(|o| matches!(o, Outcome::RangeDone { .. })),
        "{outcomes:?}"
    );
    let Outcome::Completed { rows, .. } = outcomes[3] else {
        panic!("{outcomes:?}")
    };
    assert_eq!(rows, (ROWS + 30 + 40) as u64);
    let done = stored(&w, job.id).await;
    let r = done.result.clone().unwrap();
    assert_eq!(
        r.path,
        format!("acme/external-data/{}.manifest.json.v2", job.id)
    );
    assert_eq!(r.row_count, (ROWS + 70) as u64);
    // Range i numbers its parts from i * 100000; none at the single object's key.
    let names: Vec<String> = r
        .parts
        .iter()
        .map(|p| p.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "part-00000.ndjson.v2",
            "part-100000.ndjson.v2",
            "part-200000.ndjson.v2",
            "part-300000.ndjson.v2"
        ]
    );
    assert_eq!(plaintext(&w, &job, &r).await, whole, "the same bytes");
    let p = done.progress.unwrap();
    assert_eq!(
        (p.rows, p.tables_done, p.tables_total),
        (ROWS as u64 + 70, 3, 3)
    );
    // One event; every object is the manifest or one of its parts.
    let events: Vec<_> = w
        .events
        .events()
        .into_iter()
        .filter(|e| e.job_id == job.id)
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].detail_type, EventType::Completed);
    let mut listed: Vec<String> = r.parts.iter().map(|p| p.path.clone()).collect();
    listed.push(r.path.clone());
    listed.sort();
    assert_eq!(objects_of(&w, &job), listed, "no orphan part");
}

#[tokio::test]
async fn ranges_continue_in_segments_and_parquet_keeps_every_value() {
    let (mut w, mut rx) = fan_world().await;
    let (whole_job, whole) = one_run(&mut w, None).await;
    let whole = plaintext(&w, &whole_job, &whole).await;
    // Every segment stops after one batch: each range runs in several.
    w.pipeline.config.segment_after = Some(Duration::ZERO);
    let (job, msg) = submit_all(&w, None).await;
    let first = w.pipeline.handle(&msg).await;
    assert!(
        matches!(first, Outcome::FannedOut { ranges: 4, .. }),
        "{first:?}"
    );
    let outcomes = run_all(&w, &mut rx, true).await;
    let continued = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Continued { .. }))
        .count();
    assert!(continued >= 4, "{outcomes:?}");
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Completed { .. }))
            .count(),
        1
    );
    let r = result_of(&w, job.id).await;
    assert_eq!(plaintext(&w, &job, &r).await, whole);

    // Parquet: parts per range (and table), the same rows in the same order.
    w.pipeline.config.segment_after = None;
    let (pq_job, msg) = submit_all(&w, Some(ResultFormat::Parquet)).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::FannedOut { ranges: 4, .. }
    ));
    run_all(&w, &mut rx, false).await;
    let r = result_of(&w, pq_job.id).await;
    assert_eq!(r.format, ResultFormat::Parquet);
    assert_eq!(r.row_count, (ROWS + 70) as u64);
    let tables: Vec<&str> = r.parts.iter().map(|p| p.table.as_str()).collect();
    assert_eq!(
        tables,
        [
            "public.a_small",
            "public.accounts",
            "public.accounts",
            "public.accounts",
            "public.accounts",
            "public.z_after"
        ]
    );
    let big: i64 = r
        .parts
        .iter()
        .filter(|p| p.table == "public.accounts")
        .map(|p| p.row_count)
        .sum();
    assert_eq!(big, ROWS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ranges_finishing_together_write_one_manifest_and_one_event() {
    for round in 0..50 {
        let (w, mut rx) = fan_world().await;
        let (job, msg) = submit_all(&w, None).await;
        assert!(matches!(
            w.pipeline.handle(&msg).await,
            Outcome::FannedOut { .. }
        ));
        let messages = drain(&mut rx);
        let w = std::sync::Arc::new(w);
        let runs: Vec<_> = messages
            .into_iter()
            .map(|m| {
                let w = w.clone();
                tokio::spawn(async move { w.pipeline.handle(&m).await })
            })
            .collect();
        let mut outcomes = Vec::new();
        for r in runs {
            outcomes.push(r.await.unwrap());
        }
        // A range whose claim raced another's comes back (Retry) and runs then.
        let mut retried: Vec<QueueMessage> = Vec::new();
        for m in drain(&mut rx) {
            retried.push(m);
        }
        assert!(retried.is_empty(), "round {round}: no further message");
        let completed = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Completed { .. }))
            .count();
        assert_eq!(completed, 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Outcome::Completed { .. } | Outcome::RangeDone { .. })),
            "round {round}: {outcomes:?}"
        );
        let events = w
            .events
            .events()
            .into_iter()
            .filter(|e| e.job_id == job.id)
            .count();
        assert_eq!(events, 1, "round {round}");
        let r = result_of(&w, job.id).await;
        assert_eq!(r.row_count, (ROWS + 70) as u64, "round {round}");
    }
}

#[tokio::test]
async fn a_range_whose_worker_died_is_taken_over_and_the_result_is_exact() {
    let (mut w, mut rx) = fan_world().await;
    let (whole_job, whole) = one_run(&mut w, None).await;
    let whole = plaintext(&w, &whole_job, &whole).await;
    w.pipeline.config.lease = Duration::from_millis(300);
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    let messages = drain(&mut rx);
    // Range 1's worker claims it and dies (its lease runs out, nothing finished).
    let j = stored(&w, job.id).await;
    let change = Transition::ClaimRange {
        index: 1,
        token: j.attempts + 1,
        now: Timestamp::now(),
        lease: Duration::from_millis(50),
    };
    assert!(!w.jobs.transition("acme", job.id, change).await.unwrap());
    // A copy of its message while the lease is live is a duplicate: skipped (the dead
    // worker's own message comes back once its lease is over).
    let early = w.pipeline.handle(&messages[1]).await;
    assert!(matches!(early, Outcome::Skipped(_)), "{early:?}");
    tokio::time::sleep(Duration::from_millis(80)).await;
    let mut outcomes = Vec::new();
    for m in &messages {
        outcomes.push(w.pipeline.handle(m).await);
    }
    assert!(
        matches!(outcomes.last(), Some(Outcome::Completed { .. })),
        "{outcomes:?}"
    );
    let done = stored(&w, job.id).await;
    assert_eq!(done.fanout.as_ref().unwrap().ranges[1].claims, 2);
    let r = done.result.unwrap();
    assert_eq!(plaintext(&w, &job, &r).await, whole);
    let mut listed: Vec<String> = r.parts.iter().map(|p| p.path.clone()).collect();
    listed.push(r.path.clone());
    listed.sort();
    assert_eq!(objects_of(&w, &job), listed, "no orphan part");
    // A redelivery of a done range's message is a no-op.
    assert!(matches!(
        w.pipeline.handle(&messages[0]).await,
        Outcome::Skipped(_)
    ));
}

#[tokio::test]
async fn a_finisher_that_died_is_replaced_by_its_message_coming_back() {
    let (w, mut rx) = fan_world().await;
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    let messages = drain(&mut rx);
    for m in &messages[..3] {
        assert!(matches!(
            w.pipeline.handle(m).await,
            Outcome::RangeDone { .. }
        ));
    }
    // The last range is read and recorded done by a worker that then dies before the
    // manifest: the job waits, every range done, under the finisher's lease.
    let j = stored(&w, job.id).await;
    let token = j.attempts + 1;
    let claim = Transition::ClaimRange {
        index: 3,
        token,
        now: Timestamp::now(),
        lease: Duration::from_millis(50),
    };
    w.jobs.transition("acme", job.id, claim).await.unwrap();
    let j = stored(&w, job.id).await;
    let done = j.range_view(3).checkpoint.unwrap_or_else(|| Checkpoint {
        segment: 1,
        resume: fetcher_engine::ResumePoint {
            config: "pg".into(),
            table: "public.z_after".into(),
            after: None,
        },
        parts: vec![],
        rows: 0,
        bytes: 0,
        tables_done: 3,
        watermarks: Default::default(),
        claims: 1,
        elapsed_ms: 1,
    });
    let p = Progress {
        rows: 0,
        bytes: 0,
        tables_done: 3,
        tables_total: 3,
        updated_at: Timestamp::now(),
    };
    let until = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() + 50_000_000);
    let change = Transition::RangeDone {
        token,
        checkpoint: &done,
        progress: p,
        until,
    };
    assert!(
        w.jobs.transition("acme", job.id, change).await.unwrap(),
        "the last range"
    );
    assert!(matches!(
        w.pipeline.handle(&messages[3]).await,
        Outcome::Skipped(_)
    ));
    tokio::time::sleep(Duration::from_millis(80)).await;
    let out = w.pipeline.handle(&messages[3]).await;
    assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");
    // The repair pass's job message for a completed job is a no-op.
    assert!(matches!(w.pipeline.handle(&msg).await, Outcome::Skipped(_)));
}

#[tokio::test]
async fn lost_range_messages_are_sent_again_by_the_jobs_own_message() {
    let (w, mut rx) = fan_world().await;
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    let messages = drain(&mut rx);
    // Ranges 0 and 1 are read; the messages of 2 and 3 are lost.
    for m in &messages[..2] {
        w.pipeline.handle(m).await;
    }
    // The job's own message (the repair pass's, or the planner's redelivered).
    let again = w.pipeline.handle(&msg).await;
    assert!(matches!(again, Outcome::Skipped(_)), "{again:?}");
    let resent: Vec<_> = drain(&mut rx).iter().map(|m| body(m).range).collect();
    assert_eq!(resent, [Some(2), Some(3)]);
    let outcomes = run_all(&w, &mut rx, false).await;
    assert!(outcomes.is_empty(), "already drained");
    for m in &messages[2..] {
        w.pipeline.handle(m).await;
    }
    assert_eq!(stored(&w, job.id).await.status, JobStatus::Completed);
}

#[tokio::test]
async fn forged_and_mismatched_range_messages_are_refused() {
    let (w, mut rx) = fan_world().await;
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    let messages = drain(&mut rx);
    // A range number changed in transit: the signature no longer verifies.
    let mut forged = messages[1].clone();
    let mut b = body(&forged);
    b.range = Some(2);
    forged.body = serde_json::to_vec(&b).unwrap();
    let out = w.pipeline.handle(&forged).await;
    assert!(
        matches!(
            out,
            Outcome::Dropped {
                reason: DropReason::InvalidSignature,
                ..
            }
        ),
        "{out:?}"
    );
    // An authentic message of range 1 claiming a checkpoint the range does not hold.
    let mut view = stored(&w, job.id).await.range_view(1);
    view.checkpoint = Some(Checkpoint {
        segment: 3,
        resume: fetcher_engine::ResumePoint {
            config: "pg".into(),
            table: "public.accounts".into(),
            after: Some(vec![serde_json::json!(2000)]),
        },
        parts: vec![],
        rows: 0,
        bytes: 0,
        tables_done: 0,
        watermarks: Default::default(),
        claims: 0,
        elapsed_ms: 0,
    });
    let signer = MessageSigner::from_ring(&w.ring, KeyPurpose::InternalHmac);
    let bad = message::encode(&view, &signer, "", message::unix_now());
    w.pipeline.handle(&messages[0]).await;
    let out = w.pipeline.handle(&bad).await;
    assert!(
        matches!(&out, Outcome::Failed { error, .. } if error == CHECKPOINT_MISMATCH),
        "{out:?}"
    );
    let failed = stored(&w, job.id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    // Range 0's part is gone with the job; the other ranges' messages do nothing.
    for m in &messages[1..] {
        assert!(matches!(w.pipeline.handle(m).await, Outcome::Skipped(_)));
    }
    assert_eq!(objects_of(&w, &job), Vec::<String>::new(), "no part left");
}

#[tokio::test]
async fn a_cancel_stops_every_range_and_leaves_no_object() {
    let (w, mut rx) = fan_world().await;
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    let messages = drain(&mut rx);
    w.pipeline.handle(&messages[0]).await;
    // A cancel while ranges wait in the queue: the next range's claim ends the job.
    let event = fetcher_host::pipeline::canceled_event(&stored(&w, job.id).await);
    let change = Transition::Cancel {
        event: &event,
        at: Timestamp::now(),
    };
    assert!(!w.jobs.transition("acme", job.id, change).await.unwrap());
    let out = w.pipeline.handle(&messages[1]).await;
    assert!(
        matches!(&out, Outcome::Failed { error, .. } if error == CANCELED_ERROR),
        "{out:?}"
    );
    for m in &messages[2..] {
        assert!(matches!(w.pipeline.handle(m).await, Outcome::Skipped(_)));
    }
    assert_eq!(stored(&w, job.id).await.status, JobStatus::Canceled);
    assert_eq!(objects_of(&w, &job), Vec::<String>::new(), "no object left");
}

#[tokio::test]
async fn small_tables_and_v1_jobs_never_fan_out() {
    let (mut w, _rx) = fan_world().await;
    w.pipeline.config.fanout_range_rows = 3000; // 5000 rows < two ranges
    let (_, msg) = submit_all(&w, None).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Completed { .. }
    ));
    w.pipeline.config.fanout_range_rows = 1000;
    let (_, msg) = submit_all(&w, Some(ResultFormat::V1)).await;
    assert!(matches!(
        w.pipeline.handle(&msg).await,
        Outcome::Completed { .. }
    ));
}

#[tokio::test]
async fn the_repair_pass_sends_a_fanned_out_job_whose_messages_are_lost_again_and_again() {
    let (mut w, mut rx) = fan_world().await;
    // Short claims: once the ranges' messages are lost, no lease of the job is live.
    w.pipeline.config.lease = Duration::from_millis(40);
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    drain(&mut rx); // every range's message lost
    tokio::time::sleep(Duration::from_millis(60)).await;
    let repair = MemoryJobQueue::new();
    let rules = StrandedRules {
        retention: Duration::from_secs(3600),
        empty_queue_grace: Duration::from_secs(3600),
    };
    let sent = w
        .pipeline
        .requeue_stranded(repair.as_ref(), rules, 100)
        .await
        .unwrap();
    assert_eq!(sent, 1, "lost once its leases ended");
    assert_eq!(
        w.pipeline
            .requeue_stranded(repair.as_ref(), rules, 100)
            .await
            .unwrap(),
        0,
        "recorded: not sent twice"
    );
    // That message is lost too (dropped unused as too old, say): marked, then sent again.
    let signed_at = Timestamp::now();
    let dropped = Transition::MessageDropped {
        signed_at,
        at: signed_at,
    };
    assert!(w.jobs.transition("acme", job.id, dropped).await.unwrap());
    assert_eq!(
        w.pipeline
            .requeue_stranded(repair.as_ref(), rules, 100)
            .await
            .unwrap(),
        1
    );
    // The job's message sends every range its own, and they finish the job.
    w.pipeline.config.lease = Duration::from_secs(60);
    let again = repair.sent().pop().unwrap();
    assert!(matches!(
        w.pipeline.handle(&again).await,
        Outcome::Skipped(_)
    ));
    run_all(&w, &mut rx, false).await;
    assert_eq!(stored(&w, job.id).await.status, JobStatus::Completed);
}

#[tokio::test]
async fn a_range_s_retry_budget_runs_from_its_first_claim() {
    let (w, mut rx) = fan_world().await;
    let (job, msg) = submit_all(&w, None).await;
    w.pipeline.handle(&msg).await;
    drain(&mut rx);
    let j = stored(&w, job.id).await;
    let later = Timestamp::from_unix_nanos(j.created_at.unix_nanos() + 3_600_000_000_000);
    let claim = Transition::ClaimRange {
        index: 2,
        token: j.attempts + 1,
        now: later,
        lease: Duration::from_secs(60),
    };
    w.jobs.transition("acme", job.id, claim).await.unwrap();
    let view = stored(&w, job.id).await.range_view(2);
    assert_eq!(view.range, Some(2));
    assert_eq!(
        view.last_enqueued_at(),
        later,
        "an hour after the job's creation"
    );
    assert_eq!(view.attempts, 1, "the range's own claims");
}
