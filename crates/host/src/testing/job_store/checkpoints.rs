//! The checkpoint obligations of the [`JobStore`] suite: a segment's end is a conditional
//! transition on the claim, the checkpoint comes back byte for byte (its digest is what a
//! continuation message is signed for), and the claim cap counts from it.

use std::time::Duration;

use fetcher_engine::Timestamp;

use super::{event, request};
use crate::error::ErrorKind;
use crate::model::*;
use crate::ports::*;

fn checkpoint(claims: u32) -> Checkpoint {
    Checkpoint {
        segment: 1,
        resume: fetcher_engine::ResumePoint {
            config: "pg".into(),
            table: "public.accounts".into(),
            after: Some(vec![
                serde_json::json!(1024),
                serde_json::json!("b\u{e9}"),
                serde_json::json!(1.5),
            ]),
        },
        parts: vec![fetcher_engine::ResultPart {
            config: "pg".into(),
            table: "public.accounts".into(),
            path: "external-data/x.ndjson.v2".into(),
            row_count: 1024,
            size_bytes: 70_000,
            stored_bytes: 71_000,
            hmac: "ab".repeat(32),
            sha256: "cd".repeat(32),
        }],
        rows: 1024,
        bytes: 70_000,
        tables_done: 0,
        watermarks: Default::default(),
        claims,
        elapsed_ms: 2000,
    }
}

fn progress(at: Timestamp) -> Progress {
    Progress {
        rows: 1024,
        bytes: 70_000,
        tables_done: 0,
        tables_total: 1,
        updated_at: at,
    }
}

pub(super) async fn checkpoints(store: &dyn JobStore, t: &str) {
    let job = Job::new(t, request("checkpoint"), format!("hash-cp-{t}"));
    store.insert(&job).await.unwrap();
    let now = Timestamp::now();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(t, job.id, now, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable")
    };
    let c = checkpoint(token);
    // A stale claim cannot end the segment.
    let stale = Transition::Checkpoint {
        token: token + 1,
        checkpoint: &c,
        progress: progress(now),
        at: now,
    };
    let err = store.transition(t, job.id, stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let change = Transition::Checkpoint {
        token,
        checkpoint: &c,
        progress: progress(now),
        at: now,
    };
    store.transition(t, job.id, change).await.unwrap();
    let got = store.get(t, job.id).await.unwrap().unwrap();
    assert_eq!(got.status, JobStatus::Pending);
    assert_eq!(got.lease_expires_at, None);
    assert_eq!(
        got.enqueued_at,
        Some(now),
        "the continuation counts as its message"
    );
    assert_eq!(got.progress.map(|p| p.rows), Some(1024));
    let stored = got.checkpoint.clone().expect("the checkpoint is stored");
    assert_eq!(stored, c);
    assert_eq!(stored.digest(), c.digest(), "the same bytes come back");
    assert_eq!(got.segment_claims(), 0);
    assert!(
        store
            .list_pending(now, 1000)
            .await
            .unwrap()
            .iter()
            .any(|j| j.id == job.id),
        "a job between segments is pending work"
    );

    // The next segment's claim: a new token; a retryable failure keeps the checkpoint.
    let later = Timestamp::now();
    let ClaimOutcome::Claimed { token: next, job } = store
        .claim(t, job.id, later, Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable again")
    };
    assert!(next > token);
    assert_eq!(job.segment_claims(), 1);
    store.release(t, job.id, next, Some("x")).await.unwrap();
    let got = store.get(t, job.id).await.unwrap().unwrap();
    assert_eq!(
        got.checkpoint.as_ref().map(Checkpoint::digest),
        Some(c.digest())
    );

    // A cancel asked for during a segment refuses its checkpoint (the worker cancels).
    let ClaimOutcome::Claimed { token: third, .. } = store
        .claim(t, job.id, Timestamp::now(), Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("claimable a third time")
    };
    let canceled = event(JobStatus::Canceled);
    let cancel = Transition::Cancel {
        event: &canceled,
        at: Timestamp::now(),
    };
    assert!(!store.transition(t, job.id, cancel).await.unwrap());
    let next_cp = Checkpoint {
        segment: 2,
        ..checkpoint(third)
    };
    let refused = Transition::Checkpoint {
        token: third,
        checkpoint: &next_cp,
        progress: progress(now),
        at: Timestamp::now(),
    };
    let err = store.transition(t, job.id, refused).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
}
