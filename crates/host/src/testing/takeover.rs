//! The takeover suite (#39): a worker cut off from the job store past its lease, whose
//! job another worker took over, never removes the other's parts, and no object is left
//! outside the result. Run on every job store (memory, SQLite, DynamoDB), because the
//! claim, the superseded claims and the refused write are the store's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use fetcher_crypto::{KeyPurpose, KeyRing, MessageSigner, Opener};
use fetcher_engine::memory::{
    MemoryConnectionStore, MemoryRegistry, TemplateBehaviour, TemplateFactory,
};
use fetcher_engine::testing::unique_tenant;
use fetcher_engine::{
    BoxFuture, ConnectionInput, Context, DatasourceType, Engine, Row, SchemaSnapshot,
    TableSnapshot, Timestamp, Value,
};

use crate::memory::{MemoryEventPublisher, MemoryJobQueue, MemoryObjectStore, StaticKeyProvider};
use crate::message;
use crate::model::*;
use crate::pipeline::{Outcome, Pipeline, PipelineConfig};
use crate::ports::*;
use crate::sink::SealedResultSink;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// A job store that stops answering the writes that end a run (a checkpoint, a
/// completion) while `hold` is set: one worker cut off from the store. Everything else
/// passes through.
pub struct CutOff {
    inner: Arc<dyn JobStore>,
    hold: AtomicBool,
    waiting: AtomicBool,
    resume: tokio::sync::Notify,
}

impl CutOff {
    async fn gate(&self, change: &Transition<'_>) {
        if matches!(
            change,
            Transition::Checkpoint { .. } | Transition::Complete { .. }
        ) {
            while self.hold.load(SeqCst) {
                let resumed = self.resume.notified();
                self.waiting.store(true, SeqCst);
                if !self.hold.load(SeqCst) {
                    break;
                }
                resumed.await;
            }
        }
    }
}

impl JobStore for CutOff {
    fn insert<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, crate::Result<InsertOutcome>> {
        self.inner.insert(job)
    }
    fn get<'a>(&'a self, tenant: &'a str, id: JobId) -> BoxFuture<'a, crate::Result<Option<Job>>> {
        self.inner.get(tenant, id)
    }
    fn find_recent_by_hash<'a>(
        &'a self,
        tenant: &'a str,
        hash: &'a str,
        since: Timestamp,
    ) -> BoxFuture<'a, crate::Result<Option<Job>>> {
        self.inner.find_recent_by_hash(tenant, hash, since)
    }
    fn claim<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        now: Timestamp,
        lease: Duration,
    ) -> BoxFuture<'a, crate::Result<ClaimOutcome>> {
        self.inner.claim(tenant, id, now, lease)
    }
    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: JobId,
        change: Transition<'a>,
    ) -> BoxFuture<'a, crate::Result<bool>> {
        Box::pin(async move {
            self.gate(&change).await;
            self.inner.transition(tenant, id, change).await
        })
    }
    fn list_pending_events<'a>(&'a self, limit: usize) -> BoxFuture<'a, crate::Result<Vec<Job>>> {
        self.inner.list_pending_events(limit)
    }
    fn list_created<'a>(
        &'a self,
        tenant: &'a str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, crate::Result<Vec<Job>>> {
        self.inner.list_created(tenant, from, to, limit)
    }
    fn has_active_jobs<'a>(
        &'a self,
        tenant: &'a str,
        config_name: &'a str,
    ) -> BoxFuture<'a, crate::Result<bool>> {
        self.inner.has_active_jobs(tenant, config_name)
    }
    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, crate::Result<Vec<Job>>> {
        self.inner.list_pending(now, limit)
    }
    fn sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, crate::Result<Option<SyncState>>> {
        self.inner.sync(tenant, id)
    }
    fn list_syncs<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, crate::Result<Vec<SyncState>>> {
        self.inner.list_syncs(tenant, after, limit)
    }
    fn reset_sync<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        tables: &'a [(String, String)],
    ) -> BoxFuture<'a, crate::Result<SyncState>> {
        self.inner.reset_sync(tenant, id, tables)
    }
    fn delete_sync<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, crate::Result<()>> {
        self.inner.delete_sync(tenant, id)
    }
}

fn row(id: i64) -> Row {
    Row::from_pairs([
        ("id", Value::Int(id)),
        ("name", Value::from(format!("n{id}"))),
    ])
}

/// Runs the scenario on `jobs`, twice: a segmented job (segments of one 1024-row batch)
/// one of whose runs (the first; then the last, which writes the manifest) is cut off
/// from the store after writing, past its lease; another worker takes the job over and
/// runs it to its end; the cut-off worker comes back. The result holds every row once,
/// in order, and no object of the job is outside it.
pub async fn takeover_loses_no_part(jobs: Arc<dyn JobStore>) {
    cut_off_run(jobs.clone(), 3000, false).await;
    cut_off_run(jobs, 1500, true).await;
}

async fn cut_off_run(jobs: Arc<dyn JobStore>, rows: i64, cut_last: bool) {
    let tenant = unique_tenant("takeover");
    let ring = Arc::new(KeyRing::from_base64(KEY, "1").unwrap());
    let keys: Arc<dyn KeyProvider> = Arc::new(StaticKeyProvider(ring.clone()));
    let objects = MemoryObjectStore::new();
    let registry = MemoryRegistry::new();
    let factory = TemplateFactory::new(TemplateBehaviour {
        rows: [("public.accounts".to_string(), (1..=rows).map(row).collect())].into(),
        key: Some("id".into()),
        schema: SchemaSnapshot {
            config_name: String::new(),
            tables: vec![TableSnapshot {
                name: "public.accounts".into(),
                fields: vec!["id".into(), "name".into()],
                ..Default::default()
            }],
            captured_at: None,
        },
        ..Default::default()
    });
    registry.register(DatasourceType::Postgresql, factory);
    let connections = MemoryConnectionStore::new();
    let engine = Engine::builder()
        .connector_registry(registry)
        .connection_store(connections)
        .result_sink(Arc::new(SealedResultSink::new(
            objects.clone(),
            keys.clone(),
        )))
        .build()
        .unwrap();
    let input = ConnectionInput {
        config_name: "pg".into(),
        datasource_type: DatasourceType::Postgresql,
        ..Default::default()
    };
    engine
        .create_connection(&Context::background(), &tenant, &input)
        .await
        .unwrap();
    let queue = MemoryJobQueue::new();
    let mut rx = queue.receiver().unwrap();
    let pipeline = |jobs: Arc<dyn JobStore>, lease: Duration| Pipeline {
        engine: engine.clone(),
        jobs,
        events: MemoryEventPublisher::new(),
        objects: objects.clone(),
        keys: keys.clone(),
        config: PipelineConfig {
            lease,
            segment_after: Some(Duration::ZERO),
            ..Default::default()
        },
        table_format: None,
        queue: Some(queue.clone()),
        tenant_share: None,
    };
    let cut = Arc::new(CutOff {
        inner: jobs.clone(),
        hold: true.into(),
        waiting: false.into(),
        resume: tokio::sync::Notify::new(),
    });
    let cut_off = Arc::new(pipeline(cut.clone(), Duration::from_millis(300)));
    let takeover = pipeline(jobs.clone(), Duration::from_secs(60));

    let mut request = JobRequest::default();
    request.mapped_fields.insert(
        "pg".into(),
        [(
            "public.accounts".to_string(),
            vec!["id".to_string(), "name".to_string()],
        )]
        .into(),
    );
    request.metadata.insert("source".into(), "crm".into());
    let job = Job::new(&tenant.tenant_id, request, format!("hash-{}", JobId::new()));
    assert_eq!(jobs.insert(&job).await.unwrap(), InsertOutcome::Created);
    let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
    let mut msg = message::encode(&job, &signer, "req-takeover", message::unix_now());
    if cut_last {
        // The runs before the last go as usual (1024 rows, the rest, then the end).
        for _ in 0..2 {
            let outcome = takeover.handle(&msg).await;
            assert!(matches!(outcome, Outcome::Continued { .. }), "{outcome:?}");
            msg = rx.try_recv().expect("a continuation");
        }
    }
    let before = objects.paths();

    // The first worker runs the first segment, writes its part, and cannot record it.
    let first = tokio::spawn({
        let (p, m) = (cut_off.clone(), msg.clone());
        async move { p.handle(&m).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cut.waiting.load(SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the segment never ended"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        objects.paths().len(),
        before.len() + 1,
        "the cut-off run's part (or manifest)"
    );
    // Its lease runs out; the message comes back, and another worker takes the job over
    // and runs it to its end (continuations included).
    tokio::time::sleep(Duration::from_millis(450)).await;
    let mut next = Some(msg);
    let mut runs = 0;
    while let Some(m) = next.take() {
        let outcome = takeover.handle(&m).await;
        runs += 1;
        assert!(runs < 20, "no end");
        match outcome {
            Outcome::Continued { .. } => next = Some(rx.try_recv().expect("a continuation")),
            Outcome::Completed { .. } => {}
            other => panic!("the takeover's run: {other:?}"),
        }
    }
    let done = jobs.get(&tenant.tenant_id, job.id).await.unwrap().unwrap();
    assert_eq!(done.status, JobStatus::Completed);
    let result = done.result.expect("a result");
    // The takeover names what it wrote by its claim: the first part, or the manifest.
    let named = if cut_last {
        &result.path
    } else {
        &result.parts[0].path
    };
    // Claims: the cut-off run's, then the takeover's (the last claim, when it ran the end).
    let claim = if cut_last {
        format!(".c{}.", done.attempts)
    } else {
        ".c2.".to_owned()
    };
    assert!(
        named.contains(&claim),
        "the takeover's object is named by its claim ({claim}): {named}"
    );
    if !cut_last {
        // Every later run of the job names its parts by its claim too: the replaced run
        // may have written further, at plain names.
        assert!(
            result.parts.iter().all(|p| p.path.contains(".c")),
            "{:?}",
            result.parts
        );
    }
    // The cut-off worker comes back: its checkpoint is refused; it removes only its own.
    cut.hold.store(false, SeqCst);
    cut.resume.notify_waiters();
    let late = tokio::time::timeout(Duration::from_secs(20), first)
        .await
        .expect("the cut-off worker ends")
        .unwrap();
    assert!(matches!(late, Outcome::Skipped(_)), "{late:?}");

    // Every row once, in order, from the parts the manifest lists.
    let mut ids = Vec::new();
    for part in &result.parts {
        let sealed = read_all(objects.as_ref(), &part.path)
            .await
            .unwrap()
            .expect("a part");
        let mut opener = Opener::new(&ring, &job.id.to_string()).expect_hmac(&part.hmac);
        let mut plain = Vec::new();
        opener.update_into(&sealed, &mut plain).unwrap();
        opener.finish().unwrap();
        for line in plain.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            ids.push(v["row"]["id"].as_i64().expect("an id"));
        }
    }
    assert_eq!(
        ids,
        (1..=rows).collect::<Vec<_>>(),
        "every row once, in order"
    );
    let mut expected: Vec<String> = result.parts.iter().map(|p| p.path.clone()).collect();
    expected.push(result.path.clone());
    expected.sort();
    let mut left = objects.paths();
    left.sort();
    assert_eq!(left, expected, "no object outside the result");
}
