//! The sync obligations of the [`JobStore`] suite: one active job per sync, watermarks
//! written with the completion, resets.

use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::Timestamp;
use fetcher_engine::testing::unique_tenant;

use super::{event, request, result};
use crate::error::ErrorKind;
use crate::model::*;
use crate::ports::*;

/// A job of sync `sync` (the request's `tag` sets its hash).
fn sync_job(t: &str, sync: &str, tag: &str) -> Job {
    let mut r = request(tag);
    r.sync_id = Some(sync.to_owned());
    r.incremental.insert(
        "pg".into(),
        [(
            "public.accounts".to_string(),
            fetcher_engine::IncrementalSpec {
                mode: Default::default(),
                cursor: "updated_at".into(),
                key: vec!["id".into()],
                lookback: None,
            },
        )]
        .into(),
    );
    Job::new(t, r, format!("hash-{sync}-{tag}-{t}"))
}

/// Syncs: one active job each (atomic, after dedup), the watermarks of a completed job
/// recorded in the write that completes it, none from a failed one, resets refused while
/// a job runs, per-table resets, tenants apart.
pub(super) async fn syncs(store: &Arc<dyn JobStore>, t: &str) {
    let other = unique_tenant("jobs-sync-other").tenant_id;
    assert_eq!(store.sync(t, "s1").await.unwrap(), None);
    let first = sync_job(t, "s1", "a");
    assert_eq!(store.insert(&first).await.unwrap(), InsertOutcome::Created);
    let s = store.sync(t, "s1").await.unwrap().expect("the sync exists");
    assert_eq!(s.active_job, Some(first.id));
    assert!(s.tables.is_empty());
    // The same request again is its duplicate; another request of the sync is refused.
    let dup = Job::new(t, first.request.clone(), first.request_hash.clone());
    assert!(
        matches!(store.insert(&dup).await.unwrap(), InsertOutcome::Duplicate(j) if j.id == first.id)
    );
    let second = sync_job(t, "s1", "b");
    match store.insert(&second).await.unwrap() {
        InsertOutcome::SyncBusy(j) => assert_eq!(j.id, first.id),
        other => panic!("a second active job of the sync: {other:?}"),
    }
    assert_eq!(
        store.get(t, second.id).await.unwrap(),
        None,
        "nothing stored"
    );
    // Another tenant's sync of the same name is its own.
    assert_eq!(store.sync(&other, "s1").await.unwrap(), None);
    let theirs = sync_job(&other, "s1", "a");
    assert_eq!(store.insert(&theirs).await.unwrap(), InsertOutcome::Created);
    // A reset is refused while the job is active.
    let err = store.reset_sync(t, "s1", &[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    // Completing the job records its watermarks and frees the sync, in the same write.
    let now = Timestamp::now();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(t, first.id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    let done = result();
    store
        .complete(t, first.id, token, &done, &event(JobStatus::Completed), now)
        .await
        .unwrap();
    let s = store.sync(t, "s1").await.unwrap().unwrap();
    assert_eq!(s.active_job, None);
    let reached = done.watermarks["pg"]["accounting.invoices"]
        .to_watermark
        .clone()
        .unwrap();
    assert_eq!(s.watermark("pg", "accounting.invoices"), Some(&reached));
    assert_eq!(s.tables["pg"]["accounting.invoices"].job_id, first.id);
    assert_eq!(
        store
            .sync(&other, "s1")
            .await
            .unwrap()
            .unwrap()
            .tables
            .len(),
        0
    );
    // The next job of the sync is created; failing it changes no watermark.
    assert_eq!(store.insert(&second).await.unwrap(), InsertOutcome::Created);
    store
        .fail(t, second.id, None, "x", &event(JobStatus::Failed), now)
        .await
        .unwrap();
    let s = store.sync(t, "s1").await.unwrap().unwrap();
    assert_eq!(
        (s.active_job, s.watermark("pg", "accounting.invoices")),
        (None, Some(&reached))
    );
    // A canceled job of the sync frees it, and changes no watermark either.
    let third = sync_job(t, "s1", "c");
    assert_eq!(store.insert(&third).await.unwrap(), InsertOutcome::Created);
    let canceled = event(JobStatus::Canceled);
    assert!(
        store
            .transition(
                t,
                third.id,
                Transition::Cancel {
                    event: &canceled,
                    at: now
                }
            )
            .await
            .unwrap()
    );
    let s = store.sync(t, "s1").await.unwrap().unwrap();
    assert_eq!(
        (s.active_job, s.watermark("pg", "accounting.invoices")),
        (None, Some(&reached))
    );
    // Resets: of a table the sync does not hold (nothing changes), then of all.
    let kept = store
        .reset_sync(t, "s1", &[("pg".into(), "other".into())])
        .await
        .unwrap();
    assert!(kept.watermark("pg", "accounting.invoices").is_some());
    let reset = store
        .reset_sync(t, "s1", &[("pg".into(), "accounting.invoices".into())])
        .await
        .unwrap();
    assert!(reset.tables.is_empty());
    assert!(
        store
            .sync(t, "s1")
            .await
            .unwrap()
            .unwrap()
            .tables
            .is_empty()
    );
    let err = store.reset_sync(t, "no-such-sync", &[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // Concurrent inserts of different requests for one sync: exactly one is created.
    let mut handles = Vec::new();
    for i in 0..8 {
        let (store, job) = (store.clone(), sync_job(t, "race", &format!("r{i}")));
        handles.push(tokio::spawn(
            async move { store.insert(&job).await.unwrap() },
        ));
    }
    let mut created = 0;
    for h in handles {
        match h.await.unwrap() {
            InsertOutcome::Created => created += 1,
            InsertOutcome::SyncBusy(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(created, 1, "one of 8 concurrent jobs of a sync is created");
    // The list: a tenant's syncs in id order, paged after an id, never another's.
    let ids = |v: Vec<crate::model::SyncState>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_syncs(t, None, 10).await.unwrap()),
        ["race", "s1"]
    );
    assert_eq!(ids(store.list_syncs(t, None, 1).await.unwrap()), ["race"]);
    assert_eq!(
        ids(store.list_syncs(t, Some("race"), 10).await.unwrap()),
        ["s1"]
    );
    assert!(
        store
            .list_syncs(t, Some("s1"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let listed = store.list_syncs(&other, None, 10).await.unwrap();
    assert_eq!(
        (ids(listed.clone()), listed[0].active_job),
        (vec!["s1".to_owned()], Some(theirs.id)),
        "the active job is listed with the sync"
    );
    // Deletion: refused while a job of the sync is active, then the record is gone (a
    // second delete is not found) and another tenant's sync of the name stays.
    let err = store.delete_sync(&other, "s1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let before = store.sync(t, "s1").await.unwrap().unwrap();
    assert_eq!(
        before.log_tables.len(),
        0,
        "a cursor sync has no log tables"
    );
    store.delete_sync(t, "s1").await.unwrap();
    assert_eq!(store.sync(t, "s1").await.unwrap(), None);
    assert_eq!(ids(store.list_syncs(t, None, 10).await.unwrap()), ["race"]);
    let err = store.delete_sync(t, "s1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        store.sync(&other, "s1").await.unwrap().unwrap().active_job,
        Some(theirs.id)
    );
    // A job of the deleted sync's id starts a new sync, from the start.
    let again = sync_job(t, "s1", "d");
    assert_eq!(store.insert(&again).await.unwrap(), InsertOutcome::Created);
    let fresh = store.sync(t, "s1").await.unwrap().unwrap();
    assert!(fresh.tables.is_empty() && fresh.last_completed.is_none());
    assert_eq!(fresh.active_job, Some(again.id));
    // A log read's table is recorded when its job ends, even failed (its first run made
    // the slot), and kept through a reset: deleting the sync drops what it names.
    let mut logged = sync_job(t, "logged", "a");
    for spec in logged
        .request
        .incremental
        .get_mut("pg")
        .unwrap()
        .values_mut()
    {
        spec.mode = fetcher_engine::ReadMode::Log;
        spec.cursor.clear();
    }
    assert_eq!(store.insert(&logged).await.unwrap(), InsertOutcome::Created);
    store
        .fail(t, logged.id, None, "x", &event(JobStatus::Failed), now)
        .await
        .unwrap();
    let expected: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        [("pg".into(), ["public.accounts".to_string()].into())].into();
    assert_eq!(
        store.sync(t, "logged").await.unwrap().unwrap().log_tables,
        expected
    );
    let reset = store.reset_sync(t, "logged", &[]).await.unwrap();
    assert_eq!(reset.log_tables, expected, "a reset keeps the slot's table");
    assert_eq!(
        store.sync(t, "logged").await.unwrap().unwrap().log_tables,
        expected
    );
}
