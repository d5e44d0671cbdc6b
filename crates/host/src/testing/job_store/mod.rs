//! The [`JobStore`] suite and its fixtures.

use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::Timestamp;
use fetcher_engine::testing::unique_tenant;

use crate::error::ErrorKind;
use crate::model::*;
use crate::ports::*;

mod checkpoints;
mod fanout;
mod syncs;

fn request(tag: &str) -> JobRequest {
    let mut r = JobRequest::default();
    r.mapped_fields.insert(
        "pg".into(),
        [(
            "public.accounts".to_string(),
            vec!["id".to_string(), tag.to_string()],
        )]
        .into(),
    );
    r.filters.insert(
        "pg".into(),
        serde_json::from_value(serde_json::json!({"public.accounts": {"id": {"gte": [1]}}}))
            .expect("a well-shaped filter"),
    );
    r.metadata.insert("source".into(), "conformance".into());
    r
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_nanos(secs as i128 * 1_000_000_000)
}

/// Whether the job is in the store's outbox (terminal, event not yet published).
async fn in_outbox(store: &dyn JobStore, id: JobId) -> bool {
    store
        .list_pending_events(1000)
        .await
        .unwrap()
        .iter()
        .any(|j| j.id == id)
}

fn event(status: JobStatus) -> PendingEvent {
    PendingEvent {
        status,
        payload: format!("{{\"status\":\"{}\"}}", status.as_str()),
        failures: 0,
    }
}

fn result() -> JobResult {
    JobResult {
        path: "external-data/x.ndjson.sealed".into(),
        format: ResultFormat::V2,
        hmac: "ab".repeat(32),
        digest: "cd".repeat(32),
        size_bytes: 10,
        stored_bytes: 100,
        row_count: 2,
        key_version: "1".into(),
        // Every store keeps a Parquet job's parts with the result.
        parts: vec![fetcher_engine::ResultPart {
            config: "pg".into(),
            table: "accounting.invoices".into(),
            path: "external-data/x/part-00000.parquet.v2".into(),
            row_count: 2,
            size_bytes: 10,
            stored_bytes: 100,
            hmac: "ef".repeat(32),
            sha256: "01".repeat(32),
        }],
        // And an incremental job's watermarks.
        watermarks: [(
            "pg".to_string(),
            [(
                "accounting.invoices".to_string(),
                WatermarkSpan {
                    from_watermark: None,
                    to_watermark: Some(fetcher_engine::Watermark {
                        cursor: "updated_at".into(),
                        key: vec!["id".into()],
                        values: vec![
                            serde_json::json!("2026-01-01T00:00:00Z"),
                            serde_json::json!(2),
                        ],
                        log: None,
                    }),
                },
            )]
            .into(),
        )]
        .into(),
    }
}

/// The [`JobStore`] obligations: atomic dedup, tenant scoping, conditional transitions
/// with leases and claim tokens, the outbox marker, and the listing queries.
pub async fn job_store(store: &Arc<dyn JobStore>) {
    let tenant = unique_tenant("jobs").tenant_id;
    let other = unique_tenant("jobs-other").tenant_id;
    let t = tenant.as_str();

    // Insert and read back (another tenant sees nothing).
    let mut a = Job::new(t, request("a"), format!("hash-a-{t}"));
    a.created_at = Timestamp::now();
    assert_eq!(store.insert(&a).await.unwrap(), InsertOutcome::Created);
    assert_eq!(store.get(t, a.id).await.unwrap().as_ref(), Some(&a));
    assert_eq!(store.get(&other, a.id).await.unwrap(), None);
    assert_eq!(
        store
            .get(
                t,
                JobId::parse("00000000-0000-7000-8000-000000000000").unwrap()
            )
            .await
            .unwrap(),
        None
    );

    // Dedup: an active job with the same hash wins; other tenants are independent.
    let dup = Job::new(t, request("a"), a.request_hash.clone());
    match store.insert(&dup).await.unwrap() {
        InsertOutcome::Duplicate(existing) => assert_eq!(existing.id, a.id),
        other => panic!("duplicate insert: {other:?}"),
    }
    assert_eq!(
        store.get(t, dup.id).await.unwrap(),
        None,
        "the duplicate was not stored"
    );
    let same_hash_other_tenant = Job::new(&other, request("a"), a.request_hash.clone());
    assert_eq!(
        store.insert(&same_hash_other_tenant).await.unwrap(),
        InsertOutcome::Created
    );

    // Concurrent identical inserts create exactly one job.
    let hash = format!("hash-race-{t}");
    let mut handles = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        let job = Job::new(t, request("race"), hash.clone());
        handles.push(tokio::spawn(
            async move { store.insert(&job).await.unwrap() },
        ));
    }
    let mut created = 0;
    for h in handles {
        if h.await.unwrap() == InsertOutcome::Created {
            created += 1;
        }
    }
    assert_eq!(
        created, 1,
        "exactly one of 16 concurrent identical inserts is created"
    );

    // Concurrent claims of one pending job: exactly one wins, and the stored job is the
    // winner's (its token finishes the job; a loser's would not).
    let racing = Job::new(t, request("claim-race"), format!("hash-claim-race-{t}"));
    assert_eq!(store.insert(&racing).await.unwrap(), InsertOutcome::Created);
    let now = Timestamp::now();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let (store, tenant, id) = (store.clone(), tenant.clone(), racing.id);
        handles.push(tokio::spawn(async move {
            store
                .claim(&tenant, id, now, Duration::from_secs(60))
                .await
                .unwrap()
        }));
    }
    let mut winners = Vec::new();
    for h in handles {
        match h.await.unwrap() {
            ClaimOutcome::Claimed { token, .. } => winners.push(token),
            ClaimOutcome::NotClaimable(job) => assert_eq!(job.status, JobStatus::Processing),
            ClaimOutcome::NotFound => panic!("the job exists"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of 8 concurrent claims wins");
    let stored = store.get(t, racing.id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Processing);
    store
        .complete(
            t,
            racing.id,
            winners[0],
            &result(),
            &event(JobStatus::Completed),
            Timestamp::now(),
        )
        .await
        .expect("the winner's token finishes the job");

    // find_recent_by_hash: the newest since the bound.
    let recent = store
        .find_recent_by_hash(t, &a.request_hash, at(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recent.id, a.id);
    let future = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() + 3_600_000_000_000);
    assert_eq!(
        store
            .find_recent_by_hash(t, &a.request_hash, future)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .find_recent_by_hash(&other, "nope", at(0))
            .await
            .unwrap(),
        None
    );

    // Active-job gate and the pending listing.
    assert!(store.has_active_jobs(t, "pg").await.unwrap());
    assert!(!store.has_active_jobs(t, "other-config").await.unwrap());
    assert!(
        store
            .list_pending(Timestamp::now(), 1000)
            .await
            .unwrap()
            .iter()
            .any(|j| j.id == a.id)
    );

    // Claim: pending → processing, once; a live lease blocks others; an expired one is
    // taken over with a new token, and the old token can no longer finish the job.
    let now = Timestamp::now();
    let ClaimOutcome::Claimed { job, token } = store
        .claim(t, a.id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("first claim")
    };
    assert_eq!(job.status, JobStatus::Processing);
    assert!(matches!(
        store
            .claim(t, a.id, now, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::NotClaimable(_)
    ));
    assert_eq!(
        store
            .claim(&other, a.id, now, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::NotFound
    );
    store
        .renew(
            t,
            a.id,
            token,
            Timestamp::from_unix_nanos(now.unix_nanos() + 120_000_000_000),
            None,
        )
        .await
        .unwrap();
    let later = Timestamp::from_unix_nanos(now.unix_nanos() + 600_000_000_000);
    let ClaimOutcome::Claimed { token: token2, .. } = store
        .claim(t, a.id, later, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("expired lease is taken over")
    };
    assert_ne!(token, token2);
    let err = store
        .complete(
            t,
            a.id,
            token,
            &result(),
            &event(JobStatus::Completed),
            later,
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Conflict,
        "a lost claim cannot complete"
    );
    assert_eq!(
        store
            .renew(t, a.id, token, later, None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict
    );

    // A processing job is listed for a worker only once its lease has expired.
    let listed = |jobs: Vec<Job>| jobs.iter().any(|j| j.id == a.id);
    assert!(!listed(store.list_pending(now, 1000).await.unwrap()));
    assert!(listed(
        store
            .list_pending(
                Timestamp::from_unix_nanos(later.unix_nanos() + 3_600_000_000_000),
                1000
            )
            .await
            .unwrap()
    ));

    // Release gives the job back; it can be claimed again.
    store
        .release(
            t,
            a.id,
            token2,
            Some("engine: [connect] failed to connect to datasource"),
        )
        .await
        .unwrap();
    let released = store.get(t, a.id).await.unwrap().unwrap();
    assert_eq!(released.status, JobStatus::Pending);
    assert_eq!(
        released.first_error.as_deref(),
        Some("engine: [connect] failed to connect to datasource"),
        "the first retryable error is kept"
    );
    let ClaimOutcome::Claimed { token: token3, .. } = store
        .claim(t, a.id, later, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claim after release")
    };

    // Complete: result + pending event in one write; terminal jobs cannot be claimed.
    store
        .complete(
            t,
            a.id,
            token3,
            &result(),
            &event(JobStatus::Completed),
            later,
        )
        .await
        .unwrap();
    let done = store.get(t, a.id).await.unwrap().unwrap();
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!(done.result, Some(result()));
    assert_eq!(done.completed_at, Some(later));
    assert_eq!(done.pending_event, Some(event(JobStatus::Completed)));
    assert!(matches!(
        store
            .claim(t, a.id, later, Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::NotClaimable(_)
    ));
    assert!(
        store
            .fail(t, a.id, Some(token3), "x", &event(JobStatus::Failed), later)
            .await
            .is_err()
    );
    // A completed job frees the dedup slot.
    let again = Job::new(t, request("a"), a.request_hash.clone());
    assert_eq!(store.insert(&again).await.unwrap(), InsertOutcome::Created);

    // The outbox: listed while pending, gone once cleared.
    assert!(in_outbox(store.as_ref(), a.id).await);
    // Failed publishes are counted; at the limit the event is quarantined: kept on the
    // job, out of the outbox.
    assert!(!store.note_event_failure(t, a.id, 3).await.unwrap());
    assert!(!store.note_event_failure(t, a.id, 3).await.unwrap());
    let counted = store.get(t, a.id).await.unwrap().unwrap();
    assert_eq!(counted.pending_event.as_ref().map(|e| e.failures), Some(2));
    assert!(
        in_outbox(store.as_ref(), a.id).await,
        "still in the outbox below the limit"
    );
    let mut held = counted.clone();
    assert!(
        store.note_event_failure(t, a.id, 3).await.unwrap(),
        "quarantined at the limit"
    );
    let quarantined = store.get(t, a.id).await.unwrap().unwrap();
    assert_eq!(quarantined.pending_event, None);
    held.pending_event.as_mut().unwrap().failures = 3;
    assert_eq!(quarantined.quarantined_event, held.pending_event);
    assert!(!in_outbox(store.as_ref(), a.id).await, "out of the outbox");
    store.clear_pending_event(t, a.id).await.unwrap();
    assert_eq!(
        store.get(t, a.id).await.unwrap().unwrap().pending_event,
        None
    );
    assert!(!in_outbox(store.as_ref(), a.id).await);

    // Fail without a claim: only from pending.
    store
        .fail(
            t,
            again.id,
            None,
            "FET-0053: bad message",
            &event(JobStatus::Failed),
            later,
        )
        .await
        .unwrap();
    let failed = store.get(t, again.id).await.unwrap().unwrap();
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (JobStatus::Failed, Some("FET-0053: bad message"))
    );
    assert_eq!(failed.pending_event, Some(event(JobStatus::Failed)));
    assert_eq!(
        store
            .fail(t, again.id, None, "again", &event(JobStatus::Failed), later)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict
    );

    // Fail with a claim.
    let b = Job::new(t, request("b"), format!("hash-b-{t}"));
    store.insert(&b).await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(t, b.id, later, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!()
    };
    store
        .fail(
            t,
            b.id,
            Some(token),
            "failed to query datasource",
            &event(JobStatus::Failed),
            later,
        )
        .await
        .unwrap();
    assert_eq!(
        store.get(t, b.id).await.unwrap().unwrap().status,
        JobStatus::Failed
    );

    // Transitions on unknown jobs fail.
    let missing = JobId::parse("00000000-0000-7000-8000-00000000dead").unwrap();
    assert!(
        store
            .complete(
                t,
                missing,
                1,
                &result(),
                &event(JobStatus::Completed),
                later
            )
            .await
            .is_err()
    );
    assert!(
        store
            .fail(t, missing, None, "x", &event(JobStatus::Failed), later)
            .await
            .is_err()
    );

    list_created(
        store.as_ref(),
        &unique_tenant("jobs-list").tenant_id,
        &other,
    )
    .await;
    cancel(store.as_ref(), &unique_tenant("jobs-cancel").tenant_id).await;
    enqueue_record(store.as_ref(), &unique_tenant("jobs-enqueue").tenant_id).await;
    checkpoints::checkpoints(store.as_ref(), &unique_tenant("jobs-checkpoint").tenant_id).await;
    fanout::fanouts(store, &unique_tenant("jobs-fanout").tenant_id).await;
    syncs::syncs(store, &unique_tenant("jobs-sync").tenant_id).await;
}

/// The job list's query: a tenant's jobs created in `[from, to)`, newest first, at most
/// `limit`, whatever their status; another tenant's never.
async fn list_created(store: &dyn JobStore, t: &str, other: &str) {
    let base = Timestamp::now().unix_nanos() - 10_000_000_000;
    let at = |s: i128| Timestamp::from_unix_nanos(base + s * 1_000_000_000);
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut job = Job::new(t, request("list"), format!("hash-list-{t}-{i}"));
        job.created_at = at(i);
        assert_eq!(store.insert(&job).await.unwrap(), InsertOutcome::Created);
        ids.push(job.id);
    }
    // A job that ended is listed like the others.
    let token = match store
        .claim(t, ids[1], at(6), Duration::from_secs(60))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token, .. } => token,
        other => panic!("claim: {other:?}"),
    };
    store
        .fail(
            t,
            ids[1],
            Some(token),
            "x",
            &event(JobStatus::Failed),
            at(7),
        )
        .await
        .unwrap();
    let mut stranger = Job::new(other, request("list"), format!("hash-list-{other}"));
    stranger.created_at = at(2);
    assert_eq!(
        store.insert(&stranger).await.unwrap(),
        InsertOutcome::Created
    );

    let listed = |v: Vec<Job>| v.iter().map(|j| j.id).collect::<Vec<_>>();
    let all = store.list_created(t, at(0), at(100), 100).await.unwrap();
    assert_eq!(
        listed(all.clone()),
        ids.iter().rev().copied().collect::<Vec<_>>(),
        "newest first"
    );
    assert_eq!(all[3].status, JobStatus::Failed);
    assert_eq!(
        listed(store.list_created(t, at(1), at(3), 100).await.unwrap()),
        [ids[2], ids[1]],
        "from included, to excluded"
    );
    assert_eq!(
        listed(store.list_created(t, at(0), at(100), 2).await.unwrap()),
        [ids[4], ids[3]],
        "at most the limit, newest"
    );
    assert!(
        store
            .list_created(t, at(50), at(100), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The enqueue record the repair pass judges lost messages by: a dropped message marks a
/// pending job only when it was its latest; a re-enqueue clears the mark and moves the
/// time; a terminal job takes neither.
async fn enqueue_record(store: &dyn JobStore, t: &str) {
    let job = Job::new(t, request("enqueue"), format!("hash-enqueue-{t}"));
    assert_eq!(store.insert(&job).await.unwrap(), InsertOutcome::Created);
    assert_eq!(job.last_enqueued_at(), job.created_at);
    let now = Timestamp::now();
    // A message signed long before its latest enqueue is an old duplicate: no mark.
    let older = Transition::MessageDropped {
        signed_at: Timestamp::from_unix_nanos(job.created_at.unix_nanos() - 3_600_000_000_000),
        at: now,
    };
    assert!(!store.transition(t, job.id, older).await.unwrap());
    assert_eq!(
        store
            .get(t, job.id)
            .await
            .unwrap()
            .unwrap()
            .message_dropped_at,
        None
    );
    let latest = Transition::MessageDropped {
        signed_at: job.created_at,
        at: now,
    };
    assert!(store.transition(t, job.id, latest).await.unwrap());
    let marked = store.get(t, job.id).await.unwrap().unwrap();
    assert_eq!(marked.message_dropped_at, Some(now));
    assert_eq!(marked.status, JobStatus::Pending);
    let sent = Timestamp::from_unix_nanos(now.unix_nanos() + 1_000);
    store
        .transition(t, job.id, Transition::Requeued { at: sent })
        .await
        .unwrap();
    let requeued = store.get(t, job.id).await.unwrap().unwrap();
    assert_eq!(
        (requeued.enqueued_at, requeued.message_dropped_at),
        (Some(sent), None)
    );
    assert_eq!(requeued.last_enqueued_at(), sent);
    // Terminal: a re-enqueue is refused, a drop marks nothing.
    store
        .fail(t, job.id, None, "x", &event(JobStatus::Failed), now)
        .await
        .unwrap();
    let err = store
        .transition(t, job.id, Transition::Requeued { at: sent })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(!store.transition(t, job.id, latest).await.unwrap());
}

/// Cancellation: a pending job ends at once; a processing one is asked, sees it at its
/// heartbeat (with its progress stored), can no longer retry or fail, and ends
/// `canceled` by its worker; a terminal one refuses. Each ends in the outbox once, and
/// leaves the active set (its dedup slot and its connections' lock are free).
async fn cancel(store: &dyn JobStore, t: &str) {
    let now = Timestamp::now();
    let canceled = event(JobStatus::Canceled);
    let cancel = |at| Transition::Cancel {
        event: &canceled,
        at,
    };

    let p = Job::new(t, request("cancel-pending"), format!("hash-cp-{t}"));
    store.insert(&p).await.unwrap();
    assert!(
        store.transition(t, p.id, cancel(now)).await.unwrap(),
        "canceled at once"
    );
    let got = store.get(t, p.id).await.unwrap().unwrap();
    assert_eq!(got.status, JobStatus::Canceled);
    assert_eq!(got.error.as_deref(), Some(crate::model::CANCELED_ERROR));
    assert!(in_outbox(store, p.id).await);
    assert!(
        !store.has_active_jobs(t, "pg").await.unwrap(),
        "a canceled job holds no connection"
    );
    let again = Job::new(t, request("cancel-pending"), p.request_hash.clone());
    assert_eq!(
        store.insert(&again).await.unwrap(),
        InsertOutcome::Created,
        "nor its dedup slot"
    );
    assert_eq!(
        store
            .transition(t, p.id, cancel(now))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict,
        "a terminal job refuses"
    );
    assert!(
        !matches!(
            store
                .claim(t, p.id, now, Duration::from_secs(60))
                .await
                .unwrap(),
            ClaimOutcome::Claimed { .. }
        ),
        "a canceled job is never claimed"
    );

    let r = Job::new(t, request("cancel-running"), format!("hash-cr-{t}"));
    store.insert(&r).await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(t, r.id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimed")
    };
    let until = Timestamp::from_unix_nanos(now.unix_nanos() + 60_000_000_000);
    let progress = Progress {
        rows: 10,
        bytes: 100,
        tables_done: 1,
        tables_total: 2,
        updated_at: now,
    };
    assert!(
        !store
            .renew(t, r.id, token, until, Some(progress))
            .await
            .unwrap()
    );
    assert_eq!(
        store.get(t, r.id).await.unwrap().unwrap().progress,
        Some(progress),
        "progress is stored with the heartbeat"
    );
    assert!(
        !store.transition(t, r.id, cancel(now)).await.unwrap(),
        "a running job is asked, not stopped"
    );
    assert_eq!(
        store.get(t, r.id).await.unwrap().unwrap().status,
        JobStatus::Processing
    );
    assert!(
        store.renew(t, r.id, token, until, None).await.unwrap(),
        "the heartbeat sees the request"
    );
    assert_eq!(
        store
            .release(t, r.id, token, Some("x"))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict,
        "no retry once a cancel is asked"
    );
    let failed = event(JobStatus::Failed);
    assert_eq!(
        store
            .fail(t, r.id, Some(token), "x", &failed, now)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict,
        "nor a failure"
    );
    let finish = Transition::FinishCanceled {
        token,
        event: &canceled,
        at: now,
    };
    store.transition(t, r.id, finish).await.unwrap();
    let got = store.get(t, r.id).await.unwrap().unwrap();
    assert_eq!(got.status, JobStatus::Canceled);
    assert!(in_outbox(store, r.id).await);
    assert_eq!(
        store.transition(t, r.id, finish).await.unwrap_err().kind(),
        ErrorKind::Conflict,
        "once"
    );
}
