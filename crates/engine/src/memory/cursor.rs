//! A cursor over rows that are already in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::context::Context;
use crate::error::Result;
use crate::ports::{BoxFuture, RowCursor};
use crate::value::{Row, RowBatch};

/// Rows per batch handed out by an [`EagerCursor`].
const EAGER_BATCH_ROWS: usize = 1024;

/// Serves `table → rows` in **sorted table order**, rows in list order, in batches. When
/// the context is done it stops with the context's error, so the caller can tell an abort
/// from a clean end. `close` drops the data; it is safe to call twice.
#[derive(Debug, Default)]
pub struct EagerCursor {
    tables: std::vec::IntoIter<(Arc<str>, Vec<Row>)>,
    current: Option<(Arc<str>, std::vec::IntoIter<Row>)>,
}

impl EagerCursor {
    pub fn new(data: BTreeMap<String, Vec<Row>>) -> Self {
        let tables: Vec<_> = data
            .into_iter()
            .map(|(t, rows)| (Arc::from(t), rows))
            .collect();
        EagerCursor {
            tables: tables.into_iter(),
            current: None,
        }
    }

    fn next_sync(&mut self, ctx: &Context) -> Result<Option<RowBatch>> {
        if let Some(d) = ctx.err() {
            return Err(d.into());
        }
        loop {
            if let Some((table, rows)) = &mut self.current {
                let batch: Vec<Row> = rows.by_ref().take(EAGER_BATCH_ROWS).collect();
                if !batch.is_empty() {
                    return Ok(Some(RowBatch::new(table.clone(), batch)));
                }
            }
            match self.tables.next() {
                Some((table, rows)) => self.current = Some((table, rows.into_iter())),
                None => {
                    self.current = None;
                    return Ok(None);
                }
            }
        }
    }
}

impl RowCursor for EagerCursor {
    fn next_batch<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<Option<RowBatch>>> {
        let out = self.next_sync(ctx);
        Box::pin(async move { out })
    }

    fn close<'a>(&'a mut self, _ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        *self = EagerCursor::default();
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Category, Value};

    fn rows(ids: std::ops::Range<i64>) -> Vec<Row> {
        ids.map(|i| Row::from_pairs([("id", Value::Int(i))]))
            .collect()
    }

    #[tokio::test]
    async fn serves_tables_sorted_in_batches_then_ends() {
        let ctx = Context::background();
        let mut c = EagerCursor::new(
            [
                ("b".to_string(), rows(0..2)),
                ("a".to_string(), rows(0..1500)),
                ("c".into(), vec![]),
            ]
            .into(),
        );
        let mut seen = Vec::new();
        while let Some(b) = c.next_batch(&ctx).await.unwrap() {
            seen.push((b.table.to_string(), b.rows.len()));
        }
        assert_eq!(
            seen,
            [("a".into(), 1024), ("a".into(), 476), ("b".into(), 2)]
        );
        assert!(c.next_batch(&ctx).await.unwrap().is_none());
        c.close(&ctx).await.unwrap();
        c.close(&ctx).await.unwrap();
    }

    #[tokio::test]
    async fn stops_with_the_context_error() {
        let ctx = Context::background().child();
        let mut c = EagerCursor::new([("a".to_string(), rows(0..3))].into());
        ctx.cancel();
        let err = c.next_batch(&ctx).await.unwrap_err();
        assert_eq!(err.category(), Category::Canceled);
    }
}
