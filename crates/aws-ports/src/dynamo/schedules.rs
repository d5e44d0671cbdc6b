//! `ScheduleStore`: one item per sync's schedule (`doc`, a `Schedule`; `ver`, its version,
//! the condition of every write). An active schedule with a next run is also in the `work`
//! index under the partition `due`, sorted by its next run time, which is what the tick
//! queries; a paused one leaves the index (the attributes are absent).

use aws_sdk_dynamodb::types::ReturnValue;
use fetcher_host::model::{Schedule, ScheduleState};
use fetcher_host::ports::{SaveOutcome, ScheduleStore};

use super::*;

const SCHEDULE_SK: &str = "SCHED";
/// The `work` index's partition of due schedules (jobs use `work`).
const DUE_PK: &str = "due";

fn schedule_key(tenant: &str, sync_id: &str) -> Item {
    key(tk("SCHED", tenant, sync_id), SCHEDULE_SK)
}

fn schedule_item(schedule: &Schedule) -> Result<Item> {
    let sch = schedule;
    let mut item = schedule_key(&sch.tenant_id, &sch.sync_id);
    let doc =
        serde_json::to_string(sch).map_err(|_| ServiceError::internal("schedule not encodable"))?;
    item.insert("doc".into(), s(doc));
    item.insert("ver".into(), n(sch.version));
    if let (ScheduleState::Active, Some(next)) = (sch.state, sch.next_run_at) {
        item.insert("wpk".into(), s(DUE_PK));
        // Unique per schedule, so one due time shared by many keeps them all.
        item.insert(
            "wsk".into(),
            s(format!(
                "{}#{}",
                pad(next),
                tk("", &sch.tenant_id, &sch.sync_id)
            )),
        );
    }
    Ok(item)
}

fn schedule_from(item: &Item) -> Result<Schedule> {
    let doc =
        get_s(item, "doc").ok_or_else(|| ServiceError::internal("schedule item has no doc"))?;
    serde_json::from_str(doc).map_err(|_| ServiceError::internal("stored schedule is corrupt"))
}

impl ScheduleStore for DynamoStore {
    fn schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Schedule>>> {
        Box::pin(async move {
            self.get_item(schedule_key(tenant, sync_id))
                .await?
                .as_ref()
                .map(schedule_from)
                .transpose()
        })
    }

    fn save_schedule<'a>(&'a self, schedule: &'a Schedule) -> BoxFuture<'a, Result<SaveOutcome>> {
        Box::pin(async move {
            if schedule.version == 0 {
                return Ok(SaveOutcome::Stale);
            }
            let mut put = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(schedule_item(schedule)?));
            put = if schedule.version == 1 {
                put.condition_expression("attribute_not_exists(pk)")
            } else {
                put.condition_expression("ver = :prev")
                    .expression_attribute_values(":prev", n(schedule.version - 1))
            };
            match put.send().await {
                Ok(_) => Ok(SaveOutcome::Saved),
                Err(e) if is_conditional(&e) => Ok(SaveOutcome::Stale),
                Err(e) => Err(unavailable(e)),
            }
        })
    }

    fn delete_schedule<'a>(
        &'a self,
        tenant: &'a str,
        sync_id: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let out = self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(schedule_key(tenant, sync_id)))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
                .map_err(unavailable)?;
            Ok(out.attributes.is_some_and(|a| !a.is_empty()))
        })
    }

    fn due_schedules<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Schedule>>> {
        Box::pin(async move {
            // Every key of a due time at or before `now` sorts below `pad(now)` + "$"
            // (the separator `#` is below `$`).
            let upper = format!("{}$", pad(now));
            let mut out = Vec::new();
            let mut start = None;
            while out.len() < limit {
                let page = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(GSI_WORK)
                    .key_condition_expression("wpk = :p AND wsk < :u")
                    .expression_attribute_values(":p", s(DUE_PK))
                    .expression_attribute_values(":u", s(upper.clone()))
                    .set_exclusive_start_key(start)
                    .limit(i32::try_from(limit - out.len()).unwrap_or(i32::MAX))
                    .send()
                    .await
                    .map_err(unavailable)?;
                for item in page.items() {
                    // The index is eventually consistent: keep what the document says is due.
                    let schedule = schedule_from(item)?;
                    if schedule.is_due(now) {
                        out.push(schedule);
                    }
                }
                start = page.last_evaluated_key;
                if start.is_none() {
                    break;
                }
            }
            Ok(out)
        })
    }
}
