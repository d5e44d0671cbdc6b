//! Tenant slots: one item per tenant holding each live hold's end, written
//! read-modify-write on its version (as the rate limiter's buckets).

use super::*;
use fetcher_host::ports::{SlotHold, TenantSlots};

/// The tenant's slots item.
fn slots_key(tenant: &str) -> Item {
    key(format!("SLOTS#{tenant}"), "S")
}

/// The live holds of a stored item: token → end (ns since the epoch).
fn live_holds(item: Option<&Item>, now_ns: i128) -> HashMap<String, i128> {
    let Some(AttributeValue::M(holds)) = item.and_then(|i| i.get("holds")) else {
        return HashMap::new();
    };
    holds
        .iter()
        .filter_map(|(token, end)| Some((token.clone(), end.as_n().ok()?.parse::<i128>().ok()?)))
        .filter(|(_, end)| *end > now_ns)
        .collect()
}

impl DynamoStore {
    /// Rewrites `tenant`'s holds through `change` (which answers what to return, and
    /// whether to write), conditional on the version read; a lost race re-reads.
    async fn change_slots<T>(
        &self,
        tenant: &str,
        mut change: impl FnMut(&mut HashMap<String, i128>) -> (T, bool),
    ) -> Result<T> {
        let k = slots_key(tenant);
        for _ in 0..MAX_RETRIES {
            let stored = self.get_item(k.clone()).await?;
            let version = stored.as_ref().and_then(|i| get_n(i, "ver"));
            let now_ns = epoch_millis() * 1_000_000;
            let mut holds = live_holds(stored.as_ref(), now_ns);
            let (answer, write) = change(&mut holds);
            if !write {
                return Ok(answer);
            }
            let last_end = holds.values().copied().max().unwrap_or(now_ns);
            let mut item = k.clone();
            item.insert(
                "holds".into(),
                AttributeValue::M(holds.into_iter().map(|(t, end)| (t, n(end))).collect()),
            );
            item.insert("ver".into(), n(version.unwrap_or(0) + 1));
            // The item goes a day after its last hold ends (a tenant gone quiet).
            item.insert(TTL_ATTR.into(), n(last_end / 1_000_000_000 + 86_400));
            let put = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item));
            let put = match version {
                Some(v) => put
                    .condition_expression("ver = :v")
                    .expression_attribute_values(":v", n(v)),
                None => put.condition_expression("attribute_not_exists(pk)"),
            };
            match put.send().await {
                Ok(_) => return Ok(answer),
                Err(e) if is_conditional(&e) => continue,
                Err(e) => {
                    return Err(ServiceError::unavailable("tenant slots unavailable").with_cause(e));
                }
            }
        }
        Err(ServiceError::unavailable("tenant slots contention"))
    }
}

impl TenantSlots for DynamoStore {
    fn acquire<'a>(
        &'a self,
        tenant: &'a str,
        cap: usize,
        until: Timestamp,
    ) -> BoxFuture<'a, Result<Option<SlotHold>>> {
        Box::pin(self.change_slots(tenant, move |holds| {
            if holds.len() >= cap {
                return (None, false);
            }
            let hold = SlotHold::new();
            holds.insert(hold.token().to_owned(), until.unix_nanos());
            (Some(hold), true)
        }))
    }

    fn release<'a>(&'a self, tenant: &'a str, hold: &'a SlotHold) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.change_slots(tenant, |holds| ((), holds.remove(hold.token()).is_some())))
    }
}
