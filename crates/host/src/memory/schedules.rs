//! The in-memory [`ScheduleStore`]: the reference behaviour of every schedule store.

use std::collections::BTreeMap;
use std::sync::Mutex;

use fetcher_engine::{BoxFuture, Timestamp};

use super::ready;
use crate::error::Result;
use crate::model::Schedule;
use crate::ports::{SaveOutcome, ScheduleStore};

/// Schedules keyed by (tenant, syncId).
#[derive(Default)]
pub struct MemoryScheduleStore {
    schedules: Mutex<BTreeMap<(String, String), Schedule>>,
}

impl MemoryScheduleStore {
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::default()
    }
}

impl ScheduleStore for MemoryScheduleStore {
    fn schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Schedule>>> {
        let map = self.schedules.lock().unwrap();
        ready(Ok(map
            .get(&(tenant.to_owned(), sync_id.to_owned()))
            .cloned()))
    }

    fn save_schedule<'a>(&'a self, schedule: &'a Schedule) -> BoxFuture<'a, Result<SaveOutcome>> {
        let mut map = self.schedules.lock().unwrap();
        let key = (schedule.tenant_id.clone(), schedule.sync_id.clone());
        // Absent counts as version 0, so a first write is version 1.
        let stored = map.get(&key).map_or(0, |s| s.version);
        let outcome = if schedule.version >= 1 && stored == schedule.version - 1 {
            map.insert(key, schedule.clone());
            SaveOutcome::Saved
        } else {
            SaveOutcome::Stale
        };
        ready(Ok(outcome))
    }

    fn delete_schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        let mut map = self.schedules.lock().unwrap();
        ready(Ok(map
            .remove(&(tenant.to_owned(), sync_id.to_owned()))
            .is_some()))
    }

    fn due_schedules<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Schedule>>> {
        let map = self.schedules.lock().unwrap();
        let mut due: Vec<Schedule> = map.values().filter(|s| s.is_due(now)).cloned().collect();
        due.sort_by_key(|s| s.next_run_at);
        due.truncate(limit);
        ready(Ok(due))
    }
}
