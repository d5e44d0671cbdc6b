//! Rate limits: one counter item per key with its window start, atomic `ADD`, TTL.

use super::*;

impl RateLimiter for DynamoStore {
    /// A token bucket per key (the shared GCRA arithmetic): a consistent read of the
    /// key's `tat`, then a write conditioned on it being unchanged, retried on a lost
    /// race. A refusal writes nothing.
    fn hit<'a>(
        &'a self,
        key_: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision>> {
        Box::pin(async move {
            let k = key(format!("BUCKET#{key_}"), "B");
            for _ in 0..MAX_RETRIES {
                let stored = self.get_item(k.clone()).await?;
                let tat = stored.as_ref().and_then(|item| get_n(item, "tat"));
                let now = epoch_millis() * 1_000_000;
                let (decision, next) = fetcher_host::ports::gcra(tat, now, limit, window);
                let Some(next) = next else {
                    return Ok(decision);
                };
                let mut item = k.clone();
                item.insert("tat".into(), n(next));
                item.insert(TTL_ATTR.into(), n(epoch_secs() + window.as_secs() + 60));
                let put = self
                    .client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item));
                let put = match tat {
                    Some(old) => put
                        .condition_expression("tat = :old")
                        .expression_attribute_values(":old", n(old)),
                    None => put.condition_expression("attribute_not_exists(pk)"),
                };
                match put.send().await {
                    Ok(_) => return Ok(decision),
                    Err(e) if is_conditional(&e) => continue, // another hit won: re-read
                    Err(e) => {
                        return Err(
                            ServiceError::unavailable("rate limiter unavailable").with_cause(e)
                        );
                    }
                }
            }
            Err(ServiceError::unavailable("rate limiter contention"))
        })
    }
}
