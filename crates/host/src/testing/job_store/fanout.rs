//! The fan-out obligations of the [`JobStore`] suite (docs/operations.md, "Fan-out"): the
//! split is recorded under the planner's claim, a fanned-out job is claimed range by range
//! with the claim counter's next value (two claimers never both get it), a range's
//! heartbeat keeps its own lease, and of two ranges finishing at the same moment exactly
//! one is the last: run 50 times, on the store's real concurrency.

use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::{KeyRange, Timestamp};

use super::{event, request, result};
use crate::error::ErrorKind;
use crate::model::*;
use crate::ports::*;

fn done(claims: u32) -> Checkpoint {
    Checkpoint {
        segment: 1,
        resume: fetcher_engine::ResumePoint {
            config: "pg".into(),
            table: "public.accounts".into(),
            after: None,
        },
        parts: vec![],
        rows: 10,
        bytes: 100,
        tables_done: 1,
        watermarks: Default::default(),
        claims,
        elapsed_ms: 5,
    }
}

fn progress() -> Progress {
    Progress {
        rows: 10,
        bytes: 100,
        tables_done: 1,
        tables_total: 1,
        updated_at: Timestamp::now(),
    }
}

fn halves() -> Fanout {
    let keys = vec![
        KeyRange {
            lo: None,
            hi: Some(100.into()),
        },
        KeyRange {
            lo: Some(100.into()),
            hi: None,
        },
    ];
    Fanout::new("pg", "public.accounts", keys)
}

/// A job split in two ranges, both claimed: the two claims' tokens.
async fn split_and_claim(store: &dyn JobStore, t: &str, tag: &str) -> (JobId, u32, u32) {
    let job = Job::new(t, request(tag), format!("hash-{tag}-{t}"));
    store.insert(&job).await.unwrap();
    let now = Timestamp::now();
    let lease = Duration::from_secs(60);
    let ClaimOutcome::Claimed { token, .. } = store.claim(t, job.id, now, lease).await.unwrap()
    else {
        panic!("claimable")
    };
    let fanout = halves();
    let change = Transition::FanOut {
        token,
        fanout: &fanout,
        at: now,
    };
    store.transition(t, job.id, change).await.unwrap();
    let mut tokens = Vec::new();
    for index in 0..2 {
        let next = store.get(t, job.id).await.unwrap().unwrap().attempts + 1;
        let claim = Transition::ClaimRange {
            index,
            token: next,
            now,
            lease,
        };
        assert!(!store.transition(t, job.id, claim).await.unwrap());
        tokens.push(next);
    }
    (job.id, tokens[0], tokens[1])
}

pub(super) async fn fanouts(store: &Arc<dyn JobStore>, t: &str) {
    let s = store.as_ref();
    let job = Job::new(t, request("fan"), format!("hash-fan-{t}"));
    s.insert(&job).await.unwrap();
    let now = Timestamp::now();
    let lease = Duration::from_secs(60);
    let ClaimOutcome::Claimed { token, .. } = s.claim(t, job.id, now, lease).await.unwrap() else {
        panic!("claimable")
    };
    let fanout = halves();
    // Only the planner's claim splits the job, and the split comes back as written.
    let stale = Transition::FanOut {
        token: token + 1,
        fanout: &fanout,
        at: now,
    };
    assert_eq!(
        s.transition(t, job.id, stale).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let change = Transition::FanOut {
        token,
        fanout: &fanout,
        at: now,
    };
    s.transition(t, job.id, change).await.unwrap();
    let split = s.get(t, job.id).await.unwrap().unwrap();
    assert_eq!(split.status, JobStatus::Processing);
    assert_eq!(split.fanout.as_ref(), Some(&fanout));
    // A fanned-out job is not claimed whole, even once its lease is over.
    let later = Timestamp::from_unix_nanos(now.unix_nanos() + 3_600_000_000_000);
    assert!(matches!(
        s.claim(t, job.id, later, lease).await.unwrap(),
        ClaimOutcome::NotClaimable(_)
    ));
    // A range is claimed with the counter's next value only.
    let next = split.attempts + 1;
    for wrong in [next + 1, next - 1] {
        let claim = Transition::ClaimRange {
            index: 0,
            token: wrong,
            now,
            lease,
        };
        assert_eq!(
            s.transition(t, job.id, claim).await.unwrap_err().kind(),
            ErrorKind::Conflict
        );
    }
    let claim = Transition::ClaimRange {
        index: 0,
        token: next,
        now,
        lease,
    };
    assert!(!s.transition(t, job.id, claim).await.unwrap());
    // Held: not claimable again while its lease runs; the planner's claim is gone.
    let again = Transition::ClaimRange {
        index: 0,
        token: next + 1,
        now,
        lease,
    };
    assert_eq!(
        s.transition(t, job.id, again).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let until = Timestamp::from_unix_nanos(now.unix_nanos() + 120_000_000_000);
    assert_eq!(
        s.renew(t, job.id, token, until, None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict
    );
    // The range's heartbeat: its lease and its figures, the job's figures its ranges'.
    assert!(
        !s.renew(t, job.id, next, until, Some(progress()))
            .await
            .unwrap()
    );
    let renewed = s.get(t, job.id).await.unwrap().unwrap();
    let r0 = &renewed.fanout.as_ref().unwrap().ranges[0];
    assert_eq!(
        (r0.state, r0.token, r0.lease_expires_at),
        (RangeState::Running, next, Some(until))
    );
    assert_eq!(renewed.progress.map(|p| p.rows), Some(10));
    // Only the finisher completes.
    let early = s
        .complete(
            t,
            job.id,
            next,
            &result(),
            &event(JobStatus::Completed),
            now,
        )
        .await;
    assert_eq!(early.unwrap_err().kind(), ErrorKind::Conflict);

    // Two ranges finishing at the same moment: exactly one is last, 50 times.
    for round in 0..50 {
        let (id, a, b) = split_and_claim(s, t, &format!("race{round}")).await;
        let until = Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() + 60_000_000_000);
        let finish = |token: u32| {
            let store = store.clone();
            let t = t.to_owned();
            tokio::spawn(async move {
                let c = done(1);
                let change = Transition::RangeDone {
                    token,
                    checkpoint: &c,
                    progress: progress(),
                    until,
                };
                store.transition(&t, id, change).await
            })
        };
        let (x, y) = (finish(a), finish(b));
        let (x, y) = (x.await.unwrap().unwrap(), y.await.unwrap().unwrap());
        assert!(x ^ y, "round {round}: exactly one range is last ({x}, {y})");
        let finisher = if x { a } else { b };
        let job = s.get(t, id).await.unwrap().unwrap();
        assert_eq!(job.fanout.as_ref().unwrap().finisher, Some(finisher));
        let loser = if x { b } else { a };
        let refused = s
            .complete(t, id, loser, &result(), &event(JobStatus::Completed), now)
            .await;
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);
        s.complete(
            t,
            id,
            finisher,
            &result(),
            &event(JobStatus::Completed),
            now,
        )
        .await
        .unwrap();
        assert_eq!(
            s.get(t, id).await.unwrap().unwrap().status,
            JobStatus::Completed
        );
    }
}
