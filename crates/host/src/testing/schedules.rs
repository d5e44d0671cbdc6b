//! The [`ScheduleStore`] obligations.

use std::sync::Arc;

use fetcher_engine::Timestamp;
use fetcher_engine::testing::unique_tenant;

use crate::model::*;
use crate::ports::*;

fn at(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("a test time")
}

/// A schedule of `sync_id` for `tenant`, due at `next`, at its first version.
pub fn schedule_fixture(tenant: &str, sync_id: &str, next: Timestamp) -> Schedule {
    let cadence = Cadence::parse(&CadenceSpec {
        cron: Some("*/5 * * * *".into()),
        time_zone: Some("Europe/Paris".into()),
        ..Default::default()
    })
    .expect("a valid cron");
    Schedule {
        tenant_id: tenant.to_owned(),
        sync_id: sync_id.to_owned(),
        product: "suite".into(),
        request: serde_json::json!({"metadata": {"source": "suite"}}),
        cadence,
        state: ScheduleState::Active,
        anchor: at("2026-01-01T00:00:00Z"),
        next_run_at: Some(next),
        last_run: None,
        consecutive_failures: 0,
        stale_since: None,
        version: 1,
        updated_at: at("2026-01-01T00:00:00Z"),
    }
}

/// Conditional saves (exactly one of concurrent writers from one version wins), reads that
/// return every field, tenant isolation, delete, and the due query across tenants.
pub async fn schedule_store(store: &Arc<dyn ScheduleStore>) {
    let tenant = unique_tenant("sched").tenant_id;
    let other = unique_tenant("sched").tenant_id;
    let t0 = at("2026-03-01T10:00:00Z");
    assert_eq!(store.schedule(&tenant, "s1").await.unwrap(), None);

    // First write is version 1; a second first write is stale.
    let mut s = schedule_fixture(&tenant, "s1", t0);
    assert_eq!(store.save_schedule(&s).await.unwrap(), SaveOutcome::Saved);
    assert_eq!(store.save_schedule(&s).await.unwrap(), SaveOutcome::Stale);
    assert_eq!(
        store.schedule(&tenant, "s1").await.unwrap(),
        Some(s.clone())
    );
    assert_eq!(
        store.schedule(&other, "s1").await.unwrap(),
        None,
        "tenant-scoped"
    );

    // Every field comes back as written.
    s.version = 2;
    s.consecutive_failures = 2;
    s.last_run = Some(ScheduleRun {
        due_at: t0,
        ran_at: at("2026-03-01T10:00:03.25Z"),
        outcome: RunOutcome::Failed,
        job_id: Some(JobId::new()),
        code: Some("FET-1020".into()),
        message: Some("No Connections Found".into()),
    });
    s.request = serde_json::json!({"metadata": {"source": "suite", "n": 1.5}, "syncId": "s1"});
    assert_eq!(store.save_schedule(&s).await.unwrap(), SaveOutcome::Saved);
    assert_eq!(
        store.schedule(&tenant, "s1").await.unwrap(),
        Some(s.clone())
    );

    // A version that skips one, or repeats one, is stale.
    let mut skip = s.clone();
    skip.version = 4;
    assert_eq!(
        store.save_schedule(&skip).await.unwrap(),
        SaveOutcome::Stale
    );
    assert_eq!(store.save_schedule(&s).await.unwrap(), SaveOutcome::Stale);

    // Of concurrent writers from one version, exactly one saves.
    let writers = (0..8).map(|i| {
        let store = store.clone();
        let mut next = s.clone();
        next.version = 3;
        next.consecutive_failures = 10 + i;
        async move { store.save_schedule(&next).await.unwrap() }
    });
    let outcomes = futures_util::future::join_all(writers).await;
    let saved = outcomes
        .iter()
        .filter(|o| **o == SaveOutcome::Saved)
        .count();
    assert_eq!(saved, 1, "one writer wins: {outcomes:?}");
    let stored = store.schedule(&tenant, "s1").await.unwrap().unwrap();
    assert_eq!(stored.version, 3);
    assert!(stored.consecutive_failures >= 10);

    // Due: active and at or before now, earliest first; paused and future ones are not.
    let mine = |v: Vec<Schedule>| -> Vec<String> {
        v.into_iter()
            .filter(|s| s.tenant_id == tenant)
            .map(|s| s.sync_id)
            .collect()
    };
    let early = schedule_fixture(&tenant, "early", at("2026-03-01T09:00:00Z"));
    let late = schedule_fixture(&tenant, "late", at("2026-03-01T11:00:00Z"));
    let mut paused = schedule_fixture(&tenant, "paused", at("2026-03-01T08:00:00Z"));
    paused.state = ScheduleState::Paused;
    let mut never = schedule_fixture(&tenant, "never", t0);
    never.next_run_at = None;
    for s in [&early, &late, &paused, &never] {
        assert_eq!(store.save_schedule(s).await.unwrap(), SaveOutcome::Saved);
    }
    assert_eq!(
        mine(store.due_schedules(t0, 10_000).await.unwrap()),
        ["early", "s1"],
        "due at {t0}"
    );
    assert_eq!(
        mine(
            store
                .due_schedules(at("2026-03-01T11:00:00Z"), 10_000)
                .await
                .unwrap()
        ),
        ["early", "s1", "late"]
    );
    assert!(
        store.due_schedules(t0, 1).await.unwrap().len() <= 1,
        "limit"
    );

    // Moving the next run moves it out of the due set.
    let mut moved = stored.clone();
    moved.version = 4;
    moved.next_run_at = Some(at("2026-03-01T12:00:00Z"));
    assert_eq!(
        store.save_schedule(&moved).await.unwrap(),
        SaveOutcome::Saved
    );
    assert_eq!(
        mine(store.due_schedules(t0, 10_000).await.unwrap()),
        ["early"]
    );

    // Delete.
    assert!(store.delete_schedule(&tenant, "s1").await.unwrap());
    assert!(!store.delete_schedule(&tenant, "s1").await.unwrap());
    assert_eq!(store.schedule(&tenant, "s1").await.unwrap(), None);
    // Set again after a delete: a first write again.
    assert_eq!(
        store
            .save_schedule(&schedule_fixture(&tenant, "s1", t0))
            .await
            .unwrap(),
        SaveOutcome::Saved
    );
    for id in ["s1", "early", "late", "paused", "never"] {
        assert!(store.delete_schedule(&tenant, id).await.unwrap());
    }
}
