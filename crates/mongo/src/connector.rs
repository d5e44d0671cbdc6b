//! The engine ports: [`MongoConnectorFactory`] → [`MongoConnector`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fetcher_connect::bound::{bounded, connect_timed_out, discover_timed_out};
use fetcher_connect::error::{self, msg};
use fetcher_connect::stream::{ChannelCursor, Msg};
use fetcher_connect::{CredentialSource, DialTarget, HostPolicy};
use fetcher_engine::ports::{Connector, ConnectorFactory, RowCursor};
use fetcher_engine::{
    BoxFuture, Category, ColumnType, Columns, ConnectionDescriptor, Context, DatasourceType,
    EngineError, IncrementalRead, Lookback, MongoOptions, PlanStep, Result, Row, RowBatch,
    SchemaSnapshot, Secret, TenantContext, TlsMode, Value,
};
use mongodb::bson::raw::RawBsonRef;
use mongodb::bson::{Bson, Document, RawDocument, RawDocumentBuf, doc};
use mongodb::options::{
    ClientOptions, Credential, ReadPreference, ReadPreferenceOptions, SelectionCriteria,
    ServerAddress, Tls, TlsOptions,
};
use mongodb::{Client, Database};
use tokio::sync::mpsc;

use crate::discover::{SAMPLE, Shape, is_user_collection};
use crate::error::{connect_failed, query_failed};
use crate::filter;
use crate::keys;
use crate::values;

/// Bounds every connect (server selection and the first command) and the context's
/// deadline applies too.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the driver looks for the server before the connect fails.
pub const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds a whole discovery.
pub const DISCOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Documents per batch, and per round trip to the server.
pub const BATCH_ROWS: usize = 1024;

/// Builds MongoDB connectors: checks the type, the TLS mode and host safety's no-network
/// rules, then asks the credential source for the password; no network I/O.
#[derive(Clone)]
pub struct MongoConnectorFactory {
    credentials: Arc<dyn CredentialSource>,
    policy: HostPolicy,
}

impl MongoConnectorFactory {
    pub fn new(credentials: Arc<dyn CredentialSource>, policy: HostPolicy) -> Self {
        MongoConnectorFactory {
            credentials,
            policy,
        }
    }

    /// Builds the connector directly (the trait method boxes it).
    pub async fn build_connector(
        &self,
        ctx: &Context,
        tenant: &TenantContext,
        d: &ConnectionDescriptor,
    ) -> Result<MongoConnector> {
        if d.database_name.trim().is_empty() {
            return Err(EngineError::new(
                Category::Validation,
                "a MongoDB connection names its database (databaseName)",
            ));
        }
        let password = fetcher_connect::credentials::reveal_checked(
            ctx,
            tenant,
            d,
            DatasourceType::MongoDb,
            &self.policy,
            self.credentials.as_ref(),
        )
        .await?;
        Ok(MongoConnector {
            descriptor: d.clone(),
            password,
            policy: self.policy.clone(),
            client: None,
            _ca_file: None,
            shapes: BTreeMap::new(),
        })
    }
}

impl ConnectorFactory for MongoConnectorFactory {
    fn build<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Option<Box<dyn Connector>>>> {
        Box::pin(async move {
            let c = self.build_connector(ctx, tenant, descriptor).await?;
            Ok(Some(Box::new(c) as Box<dyn Connector>))
        })
    }
}

/// One client for one operation; connects lazily.
pub struct MongoConnector {
    descriptor: ConnectionDescriptor,
    password: Secret,
    policy: HostPolicy,
    client: Option<Client>,
    /// The tenant's CA, written for the driver (which reads a file); removed on drop.
    _ca_file: Option<tempfile::NamedTempFile>,
    /// Sampled shapes of the collections read so far.
    shapes: BTreeMap<String, Shape>,
}

impl std::fmt::Debug for MongoConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoConnector")
            .field("config", &self.descriptor.config_name)
            .field("connected", &self.client.is_some())
            .finish()
    }
}

/// The driver's options: one server, the checked address host safety chose, dialled
/// directly (the driver never follows the members a server names, so every address
/// dialled is a checked one), reads from the primary when there is one.
fn options(
    d: &ConnectionDescriptor,
    opts: &MongoOptions,
    target: &DialTarget,
    password: &str,
    ca_file: Option<&std::path::Path>,
) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.hosts = vec![ServerAddress::Tcp {
        host: target.address.clone(),
        port: Some(d.port),
    }];
    o.direct_connection = Some(true);
    o.app_name = Some("fetcher".into());
    o.connect_timeout = Some(CONNECT_TIMEOUT);
    // As the reference's probe: a server that cannot be selected in 5 s (nothing
    // listening, a refused handshake) fails the connect rather than waiting it out.
    o.server_selection_timeout = Some(SERVER_SELECTION_TIMEOUT);
    o.max_pool_size = Some(2);
    o.selection_criteria = Some(SelectionCriteria::ReadPreference(
        ReadPreference::PrimaryPreferred {
            options: Some(ReadPreferenceOptions::default()),
        },
    ));
    if !d.username.is_empty() {
        let mut c = Credential::default();
        c.username = Some(d.username.clone());
        c.password = Some(password.to_owned());
        c.source = Some(opts.auth_source().to_owned());
        o.credential = Some(c);
    }
    o.tls = match d.ssl_mode {
        TlsMode::True | TlsMode::Enable | TlsMode::Insecure => {
            let mut t = TlsOptions::default();
            if d.ssl_mode == TlsMode::Insecure {
                t.allow_invalid_certificates = Some(true);
            }
            t.ca_file_path = ca_file.map(std::path::Path::to_path_buf);
            Some(Tls::Enabled(t))
        }
        _ => Some(Tls::Disabled),
    };
    o
}

impl MongoConnector {
    async fn database(&mut self, ctx: &Context) -> Result<Database> {
        if self.client.is_none() {
            let d = &self.descriptor;
            let target = self.policy.target(ctx, d).await?;
            let ca_file = match d.tls.root_cert_pem() {
                Some(pem) => {
                    let mut f = tempfile::NamedTempFile::new().map_err(|e| {
                        EngineError::wrap(Category::Internal, msg::CONNECT_FAILED, e)
                    })?;
                    std::io::Write::write_all(&mut f, pem).map_err(|e| {
                        EngineError::wrap(Category::Internal, msg::CONNECT_FAILED, e)
                    })?;
                    Some(f)
                }
                None => None,
            };
            let password = self.password.expose_str().unwrap_or_default();
            // Checked when the connection was stored; a record from before the check
            // with a bad option fails here, saying which.
            let opts = MongoOptions::of(d)
                .map_err(|e| EngineError::new(Category::Validation, e.to_string()))?;
            let o = options(
                d,
                &opts,
                &target,
                password,
                ca_file.as_ref().map(|f| f.path()),
            );
            fetcher_connect::tls_provider();
            let client = Client::with_options(o).map_err(connect_failed)?;
            let db = client.database(&d.database_name);
            let ping = async {
                db.run_command(doc! {"ping": 1})
                    .await
                    .map(drop)
                    .map_err(connect_failed)
            };
            bounded(ctx, CONNECT_TIMEOUT, ping, connect_timed_out).await?;
            self._ca_file = ca_file;
            self.client = Some(client);
        }
        let client = self.client.as_ref().expect("connected above");
        Ok(client.database(&self.descriptor.database_name))
    }

    /// The sampled shape of `collection` (read once per connector).
    async fn shape(&mut self, ctx: &Context, collection: &str) -> Result<Shape> {
        if let Some(s) = self.shapes.get(collection) {
            return Ok(s.clone());
        }
        let db = self.database(ctx).await?;
        let shape = bounded(
            ctx,
            DISCOVER_TIMEOUT,
            sample(&db, collection),
            discover_timed_out,
        )
        .await?;
        self.shapes.insert(collection.to_owned(), shape.clone());
        Ok(shape)
    }
}

/// The first and last [`SAMPLE`] documents of `collection` in `_id` order.
async fn sample(db: &Database, collection: &str) -> Result<Shape> {
    let c = db.collection::<RawDocumentBuf>(collection);
    let mut shape = Shape::default();
    let mut first = 0;
    for order in [1, -1] {
        let mut cursor = c
            .find(doc! {})
            .sort(doc! {"_id": order})
            .limit(SAMPLE)
            .await
            .map_err(|e| query_failed(e, msg::DISCOVER_FAILED))?;
        let mut n = 0;
        while cursor
            .advance()
            .await
            .map_err(|e| query_failed(e, msg::DISCOVER_FAILED))?
        {
            shape.add(cursor.current());
            n += 1;
        }
        if order == 1 {
            first = n;
        }
        if first < SAMPLE {
            break; // the whole collection was read
        }
    }
    Ok(shape)
}

/// How one collection is read.
struct TablePlan {
    /// The table as the step names it (batches carry this name).
    table: Arc<str>,
    collection: String,
    /// The row's columns in order: the requested fields, then the incremental cursor and
    /// key when not requested; for a whole-document read, the discovered top-level
    /// fields.
    columns: Vec<String>,
    /// Each column's type for typed formats: the field's one observed BSON type.
    types: Vec<ColumnType>,
    /// Whole documents are read (no field named): no projection.
    whole: bool,
    query: Document,
    projection: Option<Document>,
    sort: Document,
    /// Paths of the order key a position is made of (`_id`, or the cursor then the key).
    order_key: Vec<String>,
    positions: bool,
}

/// The projection of `fields`: a path under another requested one is covered by it
/// (MongoDB refuses both in one projection); the order key's paths are always read.
fn projection(fields: &[String], order_key: &[String]) -> Document {
    let all: Vec<&String> = fields.iter().chain(order_key).collect();
    let mut p = Document::new();
    for f in &all {
        let covered = all.iter().any(|g| {
            g.len() < f.len() && f.starts_with(g.as_str()) && f.as_bytes()[g.len()] == b'.'
        });
        if !covered {
            p.insert(f.as_str(), 1);
        }
    }
    p
}

/// `(cursor, key…) > (values…)` as a query, each value of its field's type.
fn after(shape: &Shape, columns: &[String], values: &[serde_json::Value]) -> Result<Document> {
    if values.len() != columns.len() {
        return Err(error::validation(
            "the position does not match the order key",
        ));
    }
    let mut alternatives = Vec::new();
    for i in 0..columns.len() {
        let mut d = Document::new();
        for (c, v) in columns[..i].iter().zip(values) {
            d.insert(c.as_str(), filter::typed(shape.kind(c), v)?);
        }
        let v = filter::typed(shape.kind(&columns[i]), &values[i])?;
        d.insert(columns[i].as_str(), doc! {"$gt": v});
        alternatives.push(Bson::Document(d));
    }
    Ok(doc! {"$or": alternatives})
}

/// The cursor at or past `watermark − lookback` (re-reading late rows).
fn lookback_floor(
    shape: &Shape,
    cursor: &str,
    watermark: &serde_json::Value,
    lookback: &Lookback,
) -> Result<Document> {
    let bad = || error::validation("the lookback does not fit the cursor's type");
    let floor = match (lookback, filter::typed(shape.kind(cursor), watermark)?) {
        (Lookback::Duration(d), Bson::DateTime(t)) => {
            Bson::DateTime(mongodb::bson::DateTime::from_millis(
                t.timestamp_millis().saturating_sub(d.as_millis() as i64),
            ))
        }
        (Lookback::Amount(a), Bson::Int64(i)) => Bson::Int64(i.saturating_sub(*a as i64)),
        (Lookback::Amount(a), Bson::Double(f)) => Bson::Double(f - *a as f64),
        _ => return Err(bad()),
    };
    Ok(doc! {cursor: {"$gte": floor}})
}

impl MongoConnector {
    async fn plan(&mut self, ctx: &Context, step: &PlanStep, table: &str) -> Result<TablePlan> {
        let shape = self.shape(ctx, table).await?;
        let asked = step.fields_of(table);
        for f in asked {
            if f != "_id" && !shape.has(f) {
                return Err(error::validation(msg::FIELD_NOT_FOUND));
            }
        }
        let mut clauses = match step.filters.get(table) {
            Some(f) => filter::query(&shape, f)?,
            None => Vec::new(),
        };
        if let Some(range) = step.key_ranges.get(table) {
            clauses.extend(keys::clause(range)?);
        }
        let resume = step.resume_after.get(table);
        let incremental: Option<IncrementalRead> = match (step.incremental.get(table), resume) {
            (Some(read), Some(position)) => {
                // A resumed incremental read continues after the last row read, with no
                // second lookback.
                let mut read = read.clone();
                read.spec.lookback = None;
                read.after = Some(fetcher_engine::Watermark {
                    cursor: read.spec.cursor.clone(),
                    key: read.spec.key.clone(),
                    values: position.clone(),
                    log: None,
                });
                Some(read)
            }
            (read, _) => read.cloned(),
        };
        let order_key: Vec<String> = match &incremental {
            Some(read) => read.spec.columns().map(str::to_owned).collect(),
            None => vec!["_id".to_owned()],
        };
        if let Some(read) = &incremental {
            for c in &order_key {
                if c != "_id" && !shape.has(c) {
                    return Err(error::validation(msg::FIELD_NOT_FOUND));
                }
            }
            let cursor = read.spec.cursor.as_str();
            clauses.push(doc! {cursor: {"$exists": true, "$ne": Bson::Null}});
            if let Some(w) = &read.after {
                match (&read.spec.lookback, w.values.first()) {
                    (Some(lookback), Some(value)) => {
                        clauses.push(lookback_floor(&shape, cursor, value, lookback)?)
                    }
                    _ => clauses.push(after(&shape, &order_key, &w.values)?),
                }
            }
        } else if let Some(position) = resume {
            clauses.push(after(&shape, &order_key, position)?);
        }
        let mut sort = Document::new();
        for c in &order_key {
            sort.insert(c.as_str(), 1);
        }
        let whole = asked.is_empty();
        let columns = if whole {
            let t = shape.table(table, None);
            t.fields.into_iter().filter(|f| !f.contains('.')).collect()
        } else {
            let mut cols = asked.to_vec();
            if incremental.is_some() {
                for c in &order_key {
                    if !cols.contains(c) {
                        cols.push(c.clone());
                    }
                }
            }
            cols
        };
        let projection = (!whole).then(|| projection(&columns, &order_key));
        let types = columns.iter().map(|c| column_type(shape.kind(c))).collect();
        let query = match clauses.len() {
            0 => Document::new(),
            1 => clauses.pop().expect("one clause"),
            _ => doc! {"$and": clauses},
        };
        Ok(TablePlan {
            table: Arc::from(table),
            collection: table.to_owned(),
            columns,
            types,
            whole,
            query,
            projection,
            sort,
            order_key,
            positions: step.positions,
        })
    }
}

/// The column type of a field seen holding one BSON type (`None`: several, or none
/// seen: written as each value's NDJSON text).
fn column_type(kind: Option<&str>) -> ColumnType {
    match kind {
        Some("int" | "long") => ColumnType::Int64,
        Some("double") => ColumnType::Float64,
        Some("bool") => ColumnType::Bool,
        Some("string" | "objectId" | "decimal") => ColumnType::Text,
        Some("date") => ColumnType::TimestampTz,
        Some("object" | "array") => ColumnType::Json,
        _ => ColumnType::Unknown,
    }
}

/// The value at a dotted `path` of `doc`, if present.
fn lookup<'a>(doc: &'a RawDocument, path: &str) -> Option<RawBsonRef<'a>> {
    let mut parts = path.split('.');
    let mut v = doc.get(parts.next()?).ok()??;
    for p in parts {
        match v {
            RawBsonRef::Document(d) => v = d.get(p).ok()??,
            _ => return None,
        }
    }
    Some(v)
}

/// A top-level field and the columns it fills: the column it is itself, and those of
/// dotted paths under it (column, the path below it).
type TopField = (String, Option<usize>, Vec<(usize, String)>);

/// Rows of one plan: every row has the plan's columns, a field a document lacks as
/// null (a typed format needs one shape per table; filters still tell missing from
/// null). A document is walked once, its top-level fields matched to the columns they
/// hold or lead to.
struct RowMaker {
    columns: Arc<Columns>,
    /// Per top-level field a column reads, what it fills.
    top: Vec<TopField>,
    /// Whole documents are read: a field no column holds fails the read.
    whole: bool,
}

impl RowMaker {
    fn new(plan: &TablePlan) -> RowMaker {
        let columns = Columns::typed(plan.columns.iter().cloned().zip(plan.types.iter().copied()));
        let mut top: Vec<TopField> = Vec::new();
        for (i, c) in plan.columns.iter().enumerate() {
            let (head, rest) = match c.split_once('.') {
                Some((h, r)) => (h, Some(r)),
                None => (c.as_str(), None),
            };
            let at = match top.iter().position(|(n, ..)| n == head) {
                Some(at) => at,
                None => {
                    top.push((head.to_owned(), None, Vec::new()));
                    top.len() - 1
                }
            };
            match rest {
                None => top[at].1 = Some(i),
                Some(r) => top[at].2.push((i, r.to_owned())),
            }
        }
        RowMaker {
            columns,
            top,
            whole: plan.whole,
        }
    }

    fn row(&self, doc: &RawDocument) -> Result<Row> {
        let mut vals = vec![Value::Null; self.columns.len()];
        for entry in doc {
            let (k, v) =
                entry.map_err(|e| EngineError::wrap(Category::Internal, msg::DECODE_FAILED, e))?;
            let Some((_, direct, nested)) = self.top.iter().find(|(n, ..)| n == k) else {
                if self.whole {
                    // Never dropped silently: the schema said less than the data holds.
                    return Err(error::validation(UNLISTED_FIELD));
                }
                continue;
            };
            if let Some(i) = direct {
                vals[*i] = values::value(v);
            }
            if let RawBsonRef::Document(sub) = v {
                for (i, rest) in nested {
                    if let Some(x) = lookup(sub, rest) {
                        vals[*i] = values::value(x);
                    }
                }
            }
        }
        Ok(Row::new(self.columns.clone(), vals))
    }
}

/// A whole-document read met a field discovery did not see.
pub const UNLISTED_FIELD: &str = "a document holds a field the collection's discovered schema does not list (discovery samples the first and last 500 documents by _id): name the fields to read";

/// Reads every plan in order and sends its batches.
async fn produce(db: Database, plans: Vec<TablePlan>, tx: mpsc::Sender<Msg>) {
    for plan in plans {
        if let Err(e) = produce_table(&db, &plan, &tx).await {
            let _ = tx.send(Msg::Failed(e)).await;
            return;
        }
    }
    let _ = tx.send(Msg::End).await;
}

async fn produce_table(db: &Database, plan: &TablePlan, tx: &mpsc::Sender<Msg>) -> Result<()> {
    let coll = db.collection::<RawDocumentBuf>(&plan.collection);
    let mut find = coll
        .find(plan.query.clone())
        .sort(plan.sort.clone())
        .batch_size(BATCH_ROWS as u32);
    if let Some(p) = &plan.projection {
        find = find.projection(p.clone());
    }
    let mut cursor = find.await.map_err(|e| query_failed(e, msg::QUERY_FAILED))?;
    let maker = RowMaker::new(plan);
    let mut rows = Vec::with_capacity(BATCH_ROWS);
    let mut position = None;
    let mut sent_any = false;
    loop {
        let more = cursor
            .advance()
            .await
            .map_err(|e| query_failed(e, msg::QUERY_FAILED))?;
        if more {
            let doc = cursor.current();
            rows.push(maker.row(doc)?);
            if plan.positions {
                position = Some(
                    plan.order_key
                        .iter()
                        .map(|k| lookup(doc, k).map_or(Value::Null, values::value).to_json())
                        .collect::<Vec<_>>(),
                );
            }
        }
        if rows.len() == BATCH_ROWS || (!more && !rows.is_empty()) {
            let mut batch = RowBatch::new(plan.table.clone(), std::mem::take(&mut rows));
            batch.position = position.take();
            if tx.send(Msg::Batch(batch)).await.is_err() {
                return Ok(()); // the cursor went away
            }
            sent_any = true;
        }
        if !more {
            break;
        }
    }
    if !sent_any {
        let _ = tx
            .send(Msg::Batch(RowBatch::empty(
                plan.table.clone(),
                maker.columns.clone(),
            )))
            .await;
    }
    Ok(())
}

impl Connector for MongoConnector {
    fn test_connection<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.database(ctx).await.map(drop) })
    }

    fn discover_schema<'a>(
        &'a mut self,
        ctx: &'a Context,
    ) -> BoxFuture<'a, Result<SchemaSnapshot>> {
        Box::pin(async move {
            let db = self.database(ctx).await?;
            let names = async {
                db.list_collection_names()
                    .await
                    .map_err(|e| query_failed(e, msg::DISCOVER_FAILED))
            };
            let mut names: Vec<String> = bounded(ctx, DISCOVER_TIMEOUT, names, discover_timed_out)
                .await?
                .into_iter()
                .filter(|n| is_user_collection(n))
                .collect();
            names.sort();
            let mut tables = Vec::with_capacity(names.len());
            for name in names {
                let shape = self.shape(ctx, &name).await?;
                let count = async {
                    db.collection::<RawDocumentBuf>(&name)
                        .estimated_document_count()
                        .await
                        .map_err(|e| query_failed(e, msg::DISCOVER_FAILED))
                };
                let estimate = bounded(ctx, DISCOVER_TIMEOUT, count, discover_timed_out).await?;
                tables.push(shape.table(&name, i64::try_from(estimate).ok()));
            }
            Ok(SchemaSnapshot {
                config_name: self.descriptor.config_name.clone(),
                tables,
                captured_at: Some(fetcher_engine::Timestamp::now()),
            })
        })
    }

    fn query_stream<'a>(
        &'a mut self,
        ctx: &'a Context,
        step: &'a PlanStep,
    ) -> BoxFuture<'a, Result<Box<dyn RowCursor + 'a>>> {
        Box::pin(async move {
            let db = self.database(ctx).await?;
            let mut tables: Vec<&String> = step.tables.iter().collect();
            tables.sort();
            tables.dedup();
            // Every table's plan is checked before the first row is read.
            let mut plans = Vec::with_capacity(tables.len());
            for t in tables {
                plans.push(self.plan(ctx, step, t).await?);
            }
            let cursor = ChannelCursor::spawn(move |tx| produce(db, plans, tx));
            Ok(Box::new(cursor) as Box<dyn RowCursor + 'a>)
        })
    }

    /// The span of the collection's `_id`s ([`keys::span`]); the step's filters are not
    /// applied (an estimate of the whole collection, as the trait allows).
    fn key_span<'a>(
        &'a mut self,
        ctx: &'a Context,
        _step: &'a PlanStep,
        table: &'a str,
    ) -> BoxFuture<'a, Result<Option<fetcher_engine::KeySpan>>> {
        Box::pin(async move {
            let db = self.database(ctx).await?;
            bounded(
                ctx,
                DISCOVER_TIMEOUT,
                keys::span(&db, table),
                discover_timed_out,
            )
            .await
        })
    }

    fn close<'a>(&'a mut self, _ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if let Some(c) = self.client.take() {
                c.shutdown().await;
            }
            Ok(())
        })
    }
}
