//! Step 3: run the engine under the claim: plan, execute (v2 streamed, Parquet parts, or
//! v1 in memory), and decide what the outcome means for the job (complete, retry, fail,
//! cancel, hand back at shutdown).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use fetcher_engine::{
    Context, ExecutionMode, ExtractionProgress, ExtractionRequest, IncrementalRead, Segment,
    TenantContext, Timestamp,
};
use tracing::{info, warn};

use super::fanout::Planned;
use super::segment::SegmentRun;
use super::{LOG_READ_NEEDS_V2, Outcome, PARQUET_UNSUPPORTED, Pipeline};
use crate::error::{ErrorKind, Result, ServiceError};
use crate::model::*;
use crate::sanitize::sanitize;
use crate::sink::{result_path, store_v1};

impl Pipeline {
    pub(super) async fn run_claimed(
        &self,
        job: Job,
        token: u32,
        request_id: &str,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let started = Instant::now();
        let format = job
            .request
            .result_format
            .unwrap_or(self.config.default_format);
        let segment = self.segment_of(&job, token, format, deadline);
        // The run's own context: the heartbeat cancels it when the lease is lost, and
        // the guard stops renewing however this function ends (a panic included).
        if job.cancel_requested_at.is_some() {
            // Asked to stop while no worker ran it (its last one died): nothing to run.
            return self.cancel_claimed(&job, token).await;
        }
        let run = match deadline {
            Some(d) => stop.with_deadline(d),
            None => stop.child(),
        };
        let progress = Arc::new(ExtractionProgress::default());
        let heartbeat = self.heartbeat(&job, token, &run, progress.clone());
        // The planner's key-span queries run under the heartbeat too (a slow database
        // must not let the claim lapse); a fan-out ends this claim.
        let planned = match job.range {
            None => match self.plan_fanout(&job, format, &run).await {
                Planned::FanOut(fanout) => {
                    drop(heartbeat);
                    return self.fan_out(&job, token, fanout, request_id).await;
                }
                Planned::Whole(planned) => planned,
            },
            Some(_) => None,
        };
        let extracted = tracing::Instrument::instrument(
            self.extract(&job, &run, &progress, &segment, planned),
            tracing::info_span!(
                "extract",
                sync_id = job.request.sync_id.as_deref().unwrap_or(""),
                segment = job.checkpoint.as_ref().map_or(0, |c| c.segment),
                range = job.range.map_or(-1, |r| r as i64),
            ),
        )
        .await;
        let end = heartbeat.stop();
        if end.lost && extracted.is_err() {
            // Another worker holds the job now (this one stalled past its lease): what
            // this run did is void, and the job is theirs to finish.
            warn!(job_id = %job.id, "lease lost during the extraction; run abandoned");
            return Outcome::Skipped("lease lost");
        }
        if end.cancel_requested && extracted.is_err() {
            // The heartbeat stopped the run on request; the engine aborted the result
            // writer, so nothing is left in the object store.
            return self.cancel_claimed(&job, token).await;
        }
        if extracted.is_err() && stop.is_done() {
            // Abandoned at shutdown: hand the job back now rather than leave its lease to
            // expire.
            return match self.jobs.release(&job.tenant_id, job.id, token, None).await {
                Ok(()) => {
                    info!(job_id = %job.id, "abandoned at shutdown; released for the next run");
                    Outcome::Skipped("abandoned at shutdown")
                }
                Err(e) => {
                    warn!(job_id = %job.id, error = %e.log_detail(), "could not release an abandoned job; its lease will expire");
                    Outcome::Skipped("abandoned at shutdown")
                }
            };
        }
        match extracted {
            Ok(Extracted::Done(result)) => {
                self.sweep_superseded(&job, token, &result.parts, Some(&result.path))
                    .await;
                let earlier = job.checkpoint.as_ref().map_or(0, |c| c.elapsed_ms);
                let elapsed = started.elapsed() + std::time::Duration::from_millis(earlier);
                self.complete(&job, token, result, elapsed).await
            }
            Ok(Extracted::Stopped(mut run)) => {
                self.sweep_superseded(&job, token, &run.stopped.parts, None)
                    .await;
                run.elapsed = started.elapsed();
                self.continue_later(&job, token, request_id, run).await
            }
            Err(e) if e.is_retryable() && self.may_retry(&job) => {
                warn!(job_id = %job.id, attempt = job.attempts, error = %e.log_detail(), "extraction failed, will retry");
                let text = sanitize(e.message());
                match self
                    .jobs
                    .release(&job.tenant_id, job.id, token, Some(&text))
                    .await
                {
                    Ok(()) => Outcome::Retry(e),
                    // A cancel asked for since the last heartbeat: it wins over a retry.
                    Err(c) if c.kind() == ErrorKind::Conflict => {
                        self.cancel_claimed(&job, token).await
                    }
                    Err(release) => {
                        warn!(job_id = %job.id, error = %release.log_detail(), "could not release the claim; the lease will expire");
                        Outcome::Retry(e)
                    }
                }
            }
            Err(e) => {
                // Out of retries: the first retryable failure says what went wrong.
                let text = match (&job.first_error, e.is_retryable()) {
                    (Some(first), true) => first.clone(),
                    _ => sanitize(e.message()),
                };
                let text = self.explain_ceiling(text, format);
                self.fail_claimed(&job, token, &text).await
            }
        }
    }

    /// Whether a retryable failure of `job` may be retried: attempts left and the job
    /// still inside its retry budget.
    pub(super) fn may_retry(&self, job: &Job) -> bool {
        // A continued job's budget runs from its latest checkpoint: a segment's transient
        // failure hours into a long job is retried like a short job's.
        // A range's runs from the range's first claim or latest checkpoint (its view's
        // `enqueued_at`).
        let since = match (&job.checkpoint, job.range) {
            (None, None) => job.created_at,
            _ => job.last_enqueued_at(),
        };
        let age_nanos = Timestamp::now().unix_nanos() - since.unix_nanos();
        job.segment_claims() < self.config.max_attempts
            && age_nanos < self.config.retry_budget.as_nanos() as i128
    }
    /// Plans and executes the job (one segment of it); returns where the sealed result
    /// is, or where the segment stopped.
    pub(super) async fn extract(
        &self,
        job: &Job,
        stop: &Context,
        progress: &ExtractionProgress,
        segment: &Segment,
        planned: Option<Box<(ExtractionRequest, fetcher_engine::ExtractionPlan)>>,
    ) -> Result<Extracted> {
        let ctx = stop.child();
        let (request, mut plan) = match planned {
            Some(p) => *p,
            None => self.plan_of(job, &ctx).await?,
        };
        if let (Some(index), Some(fanout)) = (job.range, &job.fanout) {
            plan = super::fanout::range_plan(&plan, fanout, index)?;
        }
        let before = job.bytes_so_far();
        if before > 0 && plan.limits.max_result_bytes > 0 {
            // The result's ceiling covers every segment (and every range).
            plan.limits.max_result_bytes -= before as i64;
            if plan.limits.max_result_bytes <= 0 {
                return Err(result_too_large());
            }
        }
        let (out, result) = self
            .run_plan(job, &ctx, &mut plan, progress, segment)
            .await?;
        // What the incremental tables reached: this segment's, else an earlier one's.
        let mut reached = job
            .checkpoint
            .as_ref()
            .map(|c| c.watermarks.clone())
            .unwrap_or_default();
        for (config, tables) in out.watermarks {
            reached.entry(config).or_default().extend(tables);
        }
        if let Some(stopped) = out.stopped {
            return Ok(Extracted::Stopped(SegmentRun {
                stopped,
                rows: out.row_counts.values().map(|n| (*n).max(0) as u64).sum(),
                watermarks: reached,
                elapsed: std::time::Duration::ZERO,
            }));
        }
        let mut result = result.ok_or_else(|| ServiceError::internal("no result"))?;
        result.watermarks = spans(&request, &reached);
        Ok(Extracted::Done(result))
    }

    /// The job's request as the engine takes it, and its plan (connections looked up,
    /// the schema checked, the sync's watermarks read now).
    pub(super) async fn plan_of(
        &self,
        job: &Job,
        ctx: &Context,
    ) -> Result<(ExtractionRequest, fetcher_engine::ExtractionPlan)> {
        let tenant = TenantContext::new(&job.tenant_id)?.with_request_id(&job.id.to_string());
        let request = ExtractionRequest {
            mapped_fields: job.request.mapped_fields.clone(),
            filters: job.request.filters.clone(),
            metadata: job
                .request
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            overrides: None,
            incremental: self.incremental_reads(job).await?,
        };
        let mut plan = self.engine.plan_extraction(ctx, &tenant, &request).await?;
        plan.request_id = job.id.to_string();
        Ok((request, plan))
    }

    /// The incremental reads of `job`: each table read after its sync's watermark (read
    /// now, not when the job was created; the sync has no other active job meanwhile).
    async fn incremental_reads(
        &self,
        job: &Job,
    ) -> Result<BTreeMap<String, BTreeMap<String, IncrementalRead>>> {
        if job.request.incremental.is_empty() {
            return Ok(BTreeMap::new());
        }
        let sync = match &job.request.sync_id {
            Some(id) => self.jobs.sync(&job.tenant_id, id).await?,
            None => None,
        };
        let mut reads: BTreeMap<String, BTreeMap<String, IncrementalRead>> = BTreeMap::new();
        for (config, tables) in &job.request.incremental {
            for (table, spec) in tables {
                let after = sync
                    .as_ref()
                    .and_then(|s| s.watermark(config, table))
                    .cloned();
                if after.as_ref().is_some_and(|w| !w.matches(spec)) {
                    return Err(ServiceError::validation(SYNC_COLUMNS_CHANGED));
                }
                reads.entry(config.clone()).or_default().insert(
                    table.clone(),
                    IncrementalRead {
                        spec: spec.clone(),
                        after,
                        slot: spec.is_log().then(|| {
                            fetcher_engine::LogSlot::for_sync(
                                job.tenant_id.as_str(),
                                job.request.sync_id.as_deref().unwrap_or_default(),
                                config,
                                table,
                            )
                        }),
                    },
                );
            }
        }
        Ok(reads)
    }

    /// Executes `plan` (one segment of it) in the job's format; the engine's result and,
    /// unless the segment stopped, the job's.
    async fn run_plan(
        &self,
        job: &Job,
        ctx: &Context,
        plan: &mut fetcher_engine::ExtractionPlan,
        progress: &ExtractionProgress,
        segment: &Segment,
    ) -> Result<(fetcher_engine::ExtractionResult, Option<JobResult>)> {
        let ctx = ctx.clone();
        let format = job
            .request
            .result_format
            .unwrap_or(self.config.default_format);
        match format {
            ResultFormat::V2 | ResultFormat::Parquet => {
                let files = match format {
                    ResultFormat::Parquet => Some(
                        self.table_format
                            .clone()
                            .ok_or_else(|| ServiceError::validation(PARQUET_UNSUPPORTED))?,
                    ),
                    _ => None,
                };
                let out = self
                    .engine
                    .execute_segment(&ctx, plan, files, segment, progress)
                    .await?;
                if out.stopped.is_some() {
                    return Ok((out, None));
                }
                let r = out
                    .reference
                    .as_ref()
                    .ok_or_else(|| ServiceError::internal("store mode returned no reference"))?;
                let result = JobResult::sealed(r, format);
                Ok((out, Some(result)))
            }
            ResultFormat::V1
                if crate::incremental::first_log_read(&job.request.incremental).is_some() =>
            {
                // The deployment's default is v1; a log read's change marker needs v2 or
                // Parquet (creation refuses an explicit v1).
                Err(ServiceError::validation(LOG_READ_NEEDS_V2))
            }
            ResultFormat::V1 => {
                plan.mode = ExecutionMode::Direct;
                let cap = self.config.v1_max_result_bytes;
                if cap > 0
                    && (plan.limits.max_result_bytes <= 0 || plan.limits.max_result_bytes > cap)
                {
                    plan.limits.max_result_bytes = cap;
                }
                let mut out = self.engine.execute_extraction(&ctx, plan).await?;
                let d = out
                    .direct
                    .take()
                    .ok_or_else(|| ServiceError::internal("direct mode returned no payload"))?;
                let ring = self.keys.key_ring().await?;
                let path = result_path(&job.tenant_id, &job.id.to_string(), ResultFormat::V1);
                let mut r = store_v1(self.objects.as_ref(), &ring, &path, &d.data).await?;
                // The engine hashed the document already.
                if let (Some(i), Some(direct)) = (r.integrity.as_mut(), d.integrity) {
                    i.digest = direct.digest;
                }
                r.row_count = d.row_count;
                let result = JobResult::sealed(&r, ResultFormat::V1);
                Ok((out, Some(result)))
            }
        }
    }
}

/// The job's failure when its sync's watermark is on other columns than it names (the
/// job was created before a change of the stored watermark, which a reset allows).
pub const SYNC_COLUMNS_CHANGED: &str =
    "incremental read does not match its sync's watermark columns; reset the sync";

impl Pipeline {
    /// A failure at the result's ceiling says which ceiling and the setting that raises
    /// it (#53): the message alone named neither.
    fn explain_ceiling(&self, text: String, format: ResultFormat) -> String {
        if !text.contains(fetcher_engine::error::msg::RESULT_TOO_LARGE) {
            return text;
        }
        let set = self.engine.limits().max_result_bytes;
        let v1 = self.config.v1_max_result_bytes;
        let ceiling = match format {
            ResultFormat::V1 if set <= 0 || set > v1 => v1,
            _ => set,
        };
        let mut out = format!(
            "{text} ({ceiling} bytes; the deployment's ceiling is serve --max-result-bytes, FETCHER_MAX_RESULT_BYTES or the MaxResultBytes parameter, 0 for none"
        );
        if format == ResultFormat::V1 {
            out.push_str(
                "; v1 results, built in memory, stay at most 256 MiB: ask for v2 or parquet",
            );
        }
        out.push(')');
        out
    }
}

/// The job's failure when its parts together pass the result's ceiling.
pub(super) fn result_too_large() -> ServiceError {
    fetcher_engine::EngineError::new(
        fetcher_engine::Category::LimitExceeded,
        fetcher_engine::error::msg::RESULT_TOO_LARGE,
    )
    .into()
}

/// What a run did: the job's result, or the segment that stopped.
pub(super) enum Extracted {
    Done(JobResult),
    Stopped(SegmentRun),
}

/// Each incremental table's span: from the watermark it was read after, to the one it
/// reached (the same when it yielded no row).
fn spans(
    request: &ExtractionRequest,
    reached: &BTreeMap<String, BTreeMap<String, fetcher_engine::Watermark>>,
) -> BTreeMap<String, BTreeMap<String, WatermarkSpan>> {
    request
        .incremental
        .iter()
        .map(|(config, tables)| {
            let spans = tables
                .iter()
                .map(|(table, read)| {
                    let reached = reached.get(config).and_then(|t| t.get(table));
                    let span = WatermarkSpan {
                        from_watermark: read.after.clone(),
                        to_watermark: reached.cloned().or_else(|| read.after.clone()),
                    };
                    (table.clone(), span)
                })
                .collect();
            (config.clone(), spans)
        })
        .collect()
}
