//! Rate limits: GCRA token buckets, one row per key.

use super::*;

impl RateLimiter for SqliteStore {
    fn hit<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision>> {
        Box::pin(async move {
            // Read and write in one immediate transaction: hits on one key serialise.
            let mut tx = self
                .write
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(db_error)?;
            let tat: Option<i64> =
                sqlx::query_scalar("SELECT tat FROM rate_buckets WHERE key = ?1")
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
            let now = i128::from(nanos(Timestamp::now()));
            let (decision, next) = gcra(tat.map(i128::from), now, limit, window);
            if let Some(next) = next {
                sqlx::query(
                    "INSERT INTO rate_buckets (key, tat) VALUES (?1, ?2) \
                     ON CONFLICT(key) DO UPDATE SET tat = excluded.tat",
                )
                .bind(key)
                .bind(next as i64)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            Ok(decision)
        })
    }
}
