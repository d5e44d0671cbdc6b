use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::cursor::EagerCursor;
use crate::context::Context;
use crate::error::{Category, EngineError, Result};
use crate::model::*;
use crate::ports::*;
use crate::value::{Row, RowBatch};

/// Registers factories by datasource type; a later registration overwrites.
#[derive(Default)]
pub struct MemoryRegistry {
    factories: Mutex<BTreeMap<DatasourceType, Arc<dyn ConnectorFactory>>>,
}

impl MemoryRegistry {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn register(&self, datasource_type: DatasourceType, factory: Arc<dyn ConnectorFactory>) {
        self.factories
            .lock()
            .unwrap()
            .insert(datasource_type, factory);
    }
}

impl ConnectorRegistry for MemoryRegistry {
    fn connector(&self, datasource_type: DatasourceType) -> Option<Arc<dyn ConnectorFactory>> {
        self.factories
            .lock()
            .unwrap()
            .get(&datasource_type)
            .cloned()
    }
}

/// Produces `count` rows of `table` lazily: row `i` is `make(i)`. For large or
/// synthetic data (benchmarks, size-limit tests) without holding it in memory.
#[derive(Clone)]
pub struct RowGenerator {
    pub table: String,
    pub count: u64,
    pub make: Arc<dyn Fn(u64) -> Row + Send + Sync>,
}

/// An async hook run at the start of every query (barriers, jitter, cancellation).
pub type QueryHook = Arc<dyn Fn(Context) -> BoxFuture<'static, ()> + Send + Sync>;

/// Text of every error the template connector reports. It is deliberately unsafe (a
/// host, a user and a password) so tests can prove the engine never surfaces it.
pub const CONNECTOR_FAILURE_TEXT: &str =
    "dial tcp 10.1.2.3:5432: password authentication failed for user \"admin\" (password=hunter2)";

fn driver_error() -> EngineError {
    EngineError::new(Category::Unavailable, CONNECTOR_FAILURE_TEXT)
}

/// The datasource's refusal: a transient category, but an answer no retry changes.
fn refusal() -> EngineError {
    EngineError::new(Category::Connect, CONNECTOR_FAILURE_TEXT).final_answer()
}

/// The configurable behaviour a [`TemplateFactory`] clones into every connector it builds.
#[derive(Clone, Default)]
pub struct TemplateBehaviour {
    /// Canned rows per table; a query serves the requested tables (sorted), rows as given.
    pub rows: BTreeMap<String, Vec<Row>>,
    /// Lazily generated rows (served after `rows`).
    pub generator: Option<RowGenerator>,
    /// Returned by `discover_schema`.
    pub schema: SchemaSnapshot,
    pub fail_test: bool,
    /// The datasource answers with a refusal (a wrong password, a query it rejects): the
    /// connection test, the key span and the query fail with a
    /// [final answer](EngineError::final_answer) of category `connect`.
    pub refuse: bool,
    /// A connection test takes this long.
    pub test_delay: Option<std::time::Duration>,
    /// Discovery fails with this category (`Connect` passes through the engine).
    pub fail_discover: Option<Category>,
    pub fail_query: bool,
    /// The query is rejected as invalid (`validation`, e.g. an unsupported operator).
    pub reject_query: bool,
    pub fail_close: bool,
    /// The query waits until the context is done and returns its error.
    pub block_on_context: bool,
    /// The cursor yields this many rows, then fails.
    pub fail_stream_after: Option<usize>,
    /// The cursor ends cleanly even when the context is done (swallows the cancel).
    pub cursor_ignores_cancel: bool,
    pub panic_on_query: bool,
    pub on_query: Option<QueryHook>,
    /// Runs after the query, also on its error path.
    pub after_query: Option<Arc<dyn Fn() + Send + Sync>>,
    /// An integer column every table is ordered by (its rows are given in its order): with
    /// it the connector reports positions when asked and resumes after one, like a SQL
    /// connector with a primary key (docs/engine.md, "Continued runs").
    pub key: Option<String>,
}

/// Lifecycle counters of one built connector.
#[derive(Default)]
pub struct ConnectorStats {
    pub tests: AtomicUsize,
    pub discovers: AtomicUsize,
    pub queries: AtomicUsize,
    pub closes: AtomicUsize,
    /// Lifecycle calls in order: `test`, `discover`, `query`, `close`.
    pub calls: Mutex<Vec<&'static str>>,
    pub last_step: Mutex<Option<PlanStep>>,
}

impl ConnectorStats {
    fn note(&self, call: &'static str, counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::SeqCst);
        self.calls.lock().unwrap().push(call);
    }

    pub fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().unwrap().clone()
    }
}

/// Builds a fresh connector from its template on every `build`, recording each.
#[derive(Default)]
pub struct TemplateFactory {
    pub behaviour: Mutex<TemplateBehaviour>,
    pub fail_build: AtomicBool,
    pub build_nothing: AtomicBool,
    built: Mutex<Vec<Arc<ConnectorStats>>>,
    pub builds: AtomicUsize,
}

impl TemplateFactory {
    pub fn new(behaviour: TemplateBehaviour) -> Arc<Self> {
        Arc::new(TemplateFactory {
            behaviour: Mutex::new(behaviour),
            ..Default::default()
        })
    }

    pub fn build_count(&self) -> usize {
        self.builds.load(Ordering::SeqCst)
    }

    pub fn built(&self) -> Vec<Arc<ConnectorStats>> {
        self.built.lock().unwrap().clone()
    }

    pub fn last_built(&self) -> Option<Arc<ConnectorStats>> {
        self.built.lock().unwrap().last().cloned()
    }

    /// Sum of a counter over all built connectors.
    pub fn total(&self, pick: impl Fn(&ConnectorStats) -> &AtomicUsize) -> usize {
        self.built()
            .iter()
            .map(|s| pick(s).load(Ordering::SeqCst))
            .sum()
    }
}

impl ConnectorFactory for TemplateFactory {
    fn build<'a>(
        &'a self,
        _: &'a Context,
        _: &'a crate::TenantContext,
        _: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Option<Box<dyn Connector>>>> {
        self.builds.fetch_add(1, Ordering::SeqCst);
        let out: Result<Option<Box<dyn Connector>>> = if self.fail_build.load(Ordering::SeqCst) {
            Err(driver_error())
        } else if self.build_nothing.load(Ordering::SeqCst) {
            Ok(None)
        } else {
            let stats = Arc::new(ConnectorStats::default());
            self.built.lock().unwrap().push(stats.clone());
            Ok(Some(Box::new(TemplateConnector {
                b: self.behaviour.lock().unwrap().clone(),
                stats,
            })))
        };
        Box::pin(std::future::ready(out))
    }
}

struct TemplateConnector {
    b: TemplateBehaviour,
    stats: Arc<ConnectorStats>,
}

impl Connector for TemplateConnector {
    fn test_connection<'a>(&'a mut self, _: &'a Context) -> BoxFuture<'a, Result<()>> {
        self.stats.note("test", &self.stats.tests);
        let out = if self.b.refuse {
            Err(refusal())
        } else if self.b.fail_test {
            Err(driver_error())
        } else {
            Ok(())
        };
        let delay = self.b.test_delay;
        Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            out
        })
    }

    fn discover_schema<'a>(&'a mut self, _: &'a Context) -> BoxFuture<'a, Result<SchemaSnapshot>> {
        self.stats.note("discover", &self.stats.discovers);
        let out = match self.b.fail_discover {
            Some(Category::Connect) => Err(EngineError::new(
                Category::Connect,
                "could not connect to datasource",
            )),
            Some(Category::Validation) => Err(EngineError::new(
                Category::Validation,
                "datasource host is not allowed",
            )),
            Some(c) => Err(EngineError::new(c, CONNECTOR_FAILURE_TEXT)),
            None => Ok(self.b.schema.clone()),
        };
        Box::pin(std::future::ready(out))
    }

    fn query_stream<'a>(
        &'a mut self,
        ctx: &'a Context,
        step: &'a PlanStep,
    ) -> BoxFuture<'a, Result<Box<dyn RowCursor + 'a>>> {
        Box::pin(async move {
            self.stats.note("query", &self.stats.queries);
            *self.stats.last_step.lock().unwrap() = Some(step.clone());
            if let Some(hook) = &self.b.on_query {
                hook(ctx.clone()).await;
            }
            if self.b.panic_on_query {
                panic!("template connector panicked on purpose");
            }
            let out = self.open(ctx, step).await;
            if let Some(after) = &self.b.after_query {
                after();
            }
            out
        })
    }

    /// The span of the canned rows' key (with [`TemplateBehaviour::key`] set): a table
    /// of them can be fanned out.
    fn key_span<'a>(
        &'a mut self,
        _: &'a Context,
        _: &'a PlanStep,
        table: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::KeySpan>>> {
        if self.b.refuse {
            return Box::pin(std::future::ready(Err(refusal())));
        }
        let span = self.b.key.as_ref().and_then(|k| {
            let keys: Vec<i64> = self
                .b
                .rows
                .get(table)?
                .iter()
                .filter_map(|r| key_of(r, k))
                .collect();
            Some(crate::KeySpan {
                min: (*keys.iter().min()?).into(),
                max: (*keys.iter().max()?).into(),
                rows: keys.len() as i64,
            })
        });
        Box::pin(std::future::ready(Ok(span)))
    }

    fn close<'a>(&'a mut self, _: &'a Context) -> BoxFuture<'a, Result<()>> {
        self.stats.note("close", &self.stats.closes);
        let out = if self.b.fail_close {
            Err(driver_error())
        } else {
            Ok(())
        };
        Box::pin(std::future::ready(out))
    }
}

impl TemplateConnector {
    async fn open(&self, ctx: &Context, step: &PlanStep) -> Result<Box<dyn RowCursor + 'static>> {
        if self.b.block_on_context {
            return Err(ctx.done().await.into());
        }
        if self.b.refuse {
            return Err(refusal());
        }
        if self.b.fail_query {
            return Err(driver_error());
        }
        if self.b.reject_query {
            return Err(EngineError::new(
                Category::Validation,
                "filter operator is not supported",
            ));
        }
        // Serve the requested tables, projected onto the selected fields (an empty
        // selection means every column), like a real connector.
        let selected: BTreeMap<&String, &[String]> =
            step.tables.iter().map(|t| (t, step.fields_of(t))).collect();
        let canned = self
            .b
            .rows
            .iter()
            .filter_map(|(t, rows)| {
                let fields = selected.get(t)?;
                let after = step.resume_after.get(t).and_then(|p| p.first()?.as_i64());
                let range = step.key_ranges.get(t);
                let rows: Vec<Row> = match &self.b.key {
                    Some(k) if after.is_some() || range.is_some() => rows
                        .iter()
                        .filter(|r| {
                            key_of(r, k).is_some_and(|v| {
                                after.is_none_or(|a| v > a)
                                    && range.is_none_or(|r| r.contains(&v.into()))
                            })
                        })
                        .cloned()
                        .collect(),
                    _ => rows.clone(),
                };
                let rows = if fields.is_empty() {
                    rows
                } else {
                    rows.iter()
                        .map(|r| {
                            Row::from_map(
                                r.to_map()
                                    .into_iter()
                                    .filter(|(k, _)| fields.contains(k))
                                    .collect(),
                            )
                        })
                        .collect()
                };
                Some((t.clone(), rows))
            })
            .collect();
        Ok(Box::new(TemplateCursor {
            canned: EagerCursor::new(canned),
            generator: self.b.generator.clone(),
            next_generated: 0,
            fail_after: self.b.fail_stream_after,
            ignore_cancel: self.b.cursor_ignores_cancel,
            served: 0,
            position_key: self.b.key.clone().filter(|_| step.positions),
        }))
    }
}

/// The integer `key` of a row.
fn key_of(row: &Row, key: &str) -> Option<i64> {
    match row.get(key)? {
        crate::value::Value::Int(v) => Some(*v),
        _ => None,
    }
}

const GENERATED_BATCH_ROWS: u64 = 1024;

struct TemplateCursor {
    canned: EagerCursor,
    generator: Option<RowGenerator>,
    next_generated: u64,
    fail_after: Option<usize>,
    ignore_cancel: bool,
    served: usize,
    /// Report each batch's position by this column.
    position_key: Option<String>,
}

impl TemplateCursor {
    async fn next(&mut self, ctx: &Context) -> Result<Option<RowBatch>> {
        if let Some(limit) = self.fail_after
            && self.served >= limit
        {
            return Err(driver_error());
        }
        if ctx.is_done() && self.ignore_cancel {
            return Ok(None);
        }
        let mut batch = match self.canned.next_batch(ctx).await? {
            Some(b) => Some(b),
            None => self.generate(),
        };
        if let (Some(limit), Some(b)) = (self.fail_after, batch.as_mut()) {
            b.rows.truncate(limit - self.served);
        }
        if let Some(b) = batch.as_mut() {
            self.served += b.rows.len();
            if let Some(k) = &self.position_key {
                b.position = b
                    .rows
                    .last()
                    .and_then(|r| r.get(k))
                    .map(|v| vec![v.to_json()]);
            }
        }
        Ok(batch)
    }

    fn generate(&mut self) -> Option<RowBatch> {
        let g = self.generator.as_ref()?;
        if self.next_generated >= g.count {
            return None;
        }
        let end = (self.next_generated + GENERATED_BATCH_ROWS).min(g.count);
        let rows = (self.next_generated..end).map(|i| (g.make)(i)).collect();
        self.next_generated = end;
        Some(RowBatch::new(g.table.as_str(), rows))
    }
}

impl RowCursor for TemplateCursor {
    fn next_batch<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<Option<RowBatch>>> {
        Box::pin(self.next(ctx))
    }
}
