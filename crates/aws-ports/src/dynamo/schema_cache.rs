//! The schema cache: DynamoDB items with a TTL, an in-process fallback when unreachable.

use super::*;

/// The schema cache: `SCHEMA#<tenant>#<configName>` items expiring after `ttl` (checked on
/// read, and removed by DynamoDB's TTL). When DynamoDB is unreachable, reads and writes
/// fall back to an in-process map with the same TTL, as the reference falls back from
/// Redis to memory.
pub struct DynamoSchemaCache {
    store: DynamoStore,
    ttl: Duration,
    local: Mutex<HashMap<(String, String), (Instant, SchemaSnapshot)>>,
}

impl DynamoSchemaCache {
    pub fn new(store: DynamoStore, ttl: Duration) -> Self {
        DynamoSchemaCache {
            store,
            ttl,
            local: Mutex::default(),
        }
    }

    fn local_get(&self, tenant: &str, name: &str) -> Option<SchemaSnapshot> {
        let map = self.local.lock().unwrap();
        map.get(&(tenant.to_owned(), name.to_owned()))
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, snap)| snap.clone())
    }

    fn local_put(&self, tenant: &str, snap: &SchemaSnapshot) {
        let mut map = self.local.lock().unwrap();
        if map.len() > 10_000 {
            map.retain(|_, (at, _)| at.elapsed() < self.ttl);
        }
        map.insert(
            (tenant.to_owned(), snap.config_name.clone()),
            (Instant::now(), snap.clone()),
        );
    }
}

impl SchemaCache for DynamoSchemaCache {
    fn get<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<SchemaSnapshot>>> {
        Box::pin(async move {
            let res = self
                .store
                .client
                .get_item()
                .table_name(&self.store.table)
                .set_key(Some(key(tk("SCHEMA", &t.tenant_id, name), "S")))
                .send()
                .await;
            match res {
                Ok(out) => Ok(out.item.and_then(|i| {
                    let live = get_n(&i, TTL_ATTR).is_none_or(|exp| exp > epoch_secs() as i128);
                    live.then(|| get_s(&i, "doc").and_then(|d| serde_json::from_str(d).ok()))
                        .flatten()
                })),
                Err(e) => {
                    tracing::warn!(error = %e, "schema cache: DynamoDB unreachable, using the in-process cache");
                    Ok(self.local_get(&t.tenant_id, name))
                }
            }
        })
    }

    fn put<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        snap: &'a SchemaSnapshot,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut item = key(tk("SCHEMA", &t.tenant_id, &snap.config_name), "S");
            item.insert(
                "doc".into(),
                s(serde_json::to_string(snap).expect("snapshot is JSON")),
            );
            item.insert(TTL_ATTR.into(), n(epoch_secs() + self.ttl.as_secs().max(1)));
            let res = self
                .store
                .client
                .put_item()
                .table_name(&self.store.table)
                .set_item(Some(item))
                .send()
                .await;
            if let Err(e) = res {
                tracing::warn!(error = %e, "schema cache: DynamoDB unreachable, using the in-process cache");
                self.local_put(&t.tenant_id, snap);
            }
            Ok(())
        })
    }
}
