//! Fan-out (docs/operations.md, "Fan-out"): a job whose plan has a big table with an
//! integer leading key is cut, by its first worker, into key ranges from the table's
//! span; each range gets its own signed message, claim and parts, and may itself be
//! continued in segments like a job. The worker whose range finishes last (one
//! conditional write decides) writes the manifest of every range's parts, in order, and
//! completes the job. The queue is the scheduler: the event source's concurrency and the
//! per-job range cap bound the readers.

use std::time::Duration;

use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::{
    Context, ExtractionPlan, RANGE_PART_STRIDE, StoredFormat, TenantContext, Timestamp,
};
use tracing::{info, warn};

use super::segment::{CHECKPOINT_MISMATCH, Continuation, SegmentRun, continuation};
use super::{Outcome, Pipeline};
use crate::error::{ErrorKind, Result, ServiceError};
use crate::message::{self, JobMessage};
use crate::model::*;
use crate::sanitize::sanitize;

/// How often a worker re-reads a fanned-out job whose claim counter another range's
/// claim moved meanwhile (with a short jittered pause), before letting its message come
/// back later: enough for the 64 ranges of the largest cap starting at once.
const CLAIM_TRIES: usize = 32;

impl Pipeline {
    /// The fan-out of a claimed job, when its plan has a table big enough: the first
    /// table (plan order) whose key span holds at least two ranges' rows. `None` when the
    /// job cannot fan out (a v1 or incremental job, a continued one, a host without a
    /// queue, fan-out off) or nothing is big enough; a failure to tell is logged and the
    /// job runs as one, whose own run reports the cause.
    pub(super) async fn plan_fanout(
        &self,
        job: &Job,
        format: ResultFormat,
        ctx: &Context,
    ) -> Planned {
        let cap = self.config.fanout_ranges;
        let per_range = self.config.fanout_range_rows.max(1);
        if cap < 2
            || self.queue.is_none()
            || format == ResultFormat::V1
            || job.checkpoint.is_some()
            || job.fanout.is_some()
            || !job.request.incremental.is_empty()
        {
            return Planned::Whole(None);
        }
        let Ok(planned) = self.plan_of(job, ctx).await else {
            return Planned::Whole(None);
        };
        let plan = &planned.1;
        for step in &plan.steps {
            let spans = match self.engine.key_spans(ctx, plan, &step.config_name).await {
                Ok(s) => s,
                Err(e) => {
                    warn!(job_id = %job.id, error = %e.message(), "could not read the key spans; the job runs in one piece");
                    return Planned::Whole(Some(Box::new(planned)));
                }
            };
            for (table, span) in step.tables.iter().zip(spans) {
                let Some(span) = span.filter(|s| s.rows >= per_range.saturating_mul(2)) else {
                    continue;
                };
                let n = ((span.rows / per_range) as usize).clamp(2, cap);
                let keys = span.ranges(n);
                if keys.len() >= 2 {
                    return Planned::FanOut(Fanout::new(&step.config_name, table, keys));
                }
            }
        }
        Planned::Whole(Some(Box::new(planned)))
    }

    /// Hands the claimed `job` to the ranges of `fanout`: recorded in one conditional
    /// write with the claim, then one message per range.
    pub(super) async fn fan_out(
        &self,
        job: &Job,
        token: u32,
        fanout: Fanout,
        request_id: &str,
    ) -> Outcome {
        let at = Timestamp::now();
        let change = Transition::FanOut {
            token,
            fanout: &fanout,
            at,
        };
        if let Err(e) = self.jobs.transition(&job.tenant_id, job.id, change).await {
            return match e.kind() {
                // A cancel asked for meanwhile: it wins.
                ErrorKind::Conflict => match self.cancel_claimed(job, token).await {
                    Outcome::Skipped(_) => Outcome::Skipped("claim lost before the fan-out"),
                    canceled => canceled,
                },
                _ => {
                    self.give_back(job, token).await;
                    Outcome::Retry(e)
                }
            };
        }
        let ranges = fanout.ranges.len();
        info!(job_id = %job.id, ranges, config = %fanout.config, table = %fanout.table, "job fanned out");
        let mut split = job.clone();
        split.fanout = Some(fanout);
        let all: Vec<usize> = (0..ranges).collect();
        if let Err(e) = self.send_ranges(&split, &all, request_id).await {
            // The job's message comes back and sends them again (duplicates are
            // harmless: a range is claimed once).
            warn!(job_id = %job.id, error = %e.log_detail(), "could not send every range's message");
            return Outcome::Retry(e);
        }
        Outcome::FannedOut {
            job_id: job.id,
            ranges,
        }
    }

    async fn give_back(&self, job: &Job, token: u32) {
        if let Err(e) = self.jobs.release(&job.tenant_id, job.id, token, None).await {
            warn!(job_id = %job.id, error = %e.log_detail(), "could not release the claim; the lease will expire");
        }
    }

    async fn send_ranges(&self, job: &Job, indices: &[usize], request_id: &str) -> Result<()> {
        let queue = self
            .queue
            .as_ref()
            .ok_or_else(|| ServiceError::internal("no queue for ranges"))?;
        let ring = self.keys.key_ring().await?;
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        for &i in indices {
            let view = job.range_view(i);
            queue
                .enqueue(message::encode(
                    &view,
                    &signer,
                    request_id,
                    message::unix_now(),
                ))
                .await?;
        }
        Ok(())
    }

    /// A message of a fanned-out job: its range's (claim it and run it, or finish the
    /// job when every range is done), or the job's own (sent again by the repair pass, or
    /// the planner's redelivered: the ranges that need one get a fresh message).
    pub(super) async fn process_range(
        &self,
        mut job: Job,
        m: &JobMessage,
        request_id: &str,
        stop: &Context,
        deadline: Option<tokio::time::Instant>,
    ) -> Outcome {
        let Some(index) = m.range else {
            return self.resend_ranges(&job, request_id).await;
        };
        for _ in 0..CLAIM_TRIES {
            let now = Timestamp::now();
            let Some(fanout) = job.fanout.as_ref() else {
                return Outcome::Skipped("job is not split");
            };
            let Some(range) = fanout.ranges.get(index) else {
                return Outcome::Skipped("no such range");
            };
            let live = |l: Option<Timestamp>| l.is_some_and(|l| l > now);
            // A message of a range (or a finish) a live worker holds is a duplicate (the
            // repair pass's, or the job's first message redelivered): skipped, not retried.
            // The worker's own message stays unacknowledged while it runs, so if it dies
            // that one comes back and takes over once the lease ends.
            let mismatch = if fanout.all_done() {
                if fanout.finisher.is_some() && live(job.lease_expires_at) {
                    return Outcome::Skipped("the job is being finished");
                }
                false
            } else {
                let seen = continuation(&job.range_view(index), m);
                if matches!(seen, Continuation::Superseded) {
                    return Outcome::Skipped("message of an earlier segment");
                }
                match range.state {
                    RangeState::Done => return Outcome::Skipped("range already done"),
                    RangeState::Running if live(range.lease_expires_at) => {
                        return Outcome::Skipped("range is being read elsewhere");
                    }
                    _ => {}
                }
                matches!(seen, Continuation::Mismatch)
            };
            let token = job.attempts + 1;
            let change = Transition::ClaimRange {
                index,
                token,
                now,
                lease: self.config.lease,
            };
            let claimed = self.jobs.transition(&job.tenant_id, job.id, change).await;
            let fresh = match self.jobs.get(&job.tenant_id, job.id).await {
                Ok(Some(j)) => j,
                Ok(None) => return Outcome::Skipped("job not found"),
                Err(e) => {
                    if claimed.is_ok() {
                        // Held with nobody running it: give it back for the message's return.
                        self.give_back(&job, token).await;
                    }
                    return Outcome::Retry(e);
                }
            };
            match claimed {
                Ok(true) => {
                    let finishes = fresh.fanout.as_ref().map_or(0, |f| f.finishes);
                    if finishes > self.config.max_attempts {
                        let error = format!(
                            "job abandoned: no attempt of {} finished",
                            self.config.max_attempts
                        );
                        warn!(job_id = %job.id, "finish cap reached; failing the job");
                        return self.fail_claimed(&fresh, token, &error).await;
                    }
                    return self.finish_fanout(&fresh, token).await;
                }
                Ok(false) => {
                    let view = fresh.range_view(index);
                    if mismatch {
                        warn!(job_id = %job.id, range = index, "range checkpoint does not match its message; failing the job");
                        return self.fail_claimed(&view, token, CHECKPOINT_MISMATCH).await;
                    }
                    if view.segment_claims() > self.config.max_attempts {
                        let error = format!(
                            "job abandoned: no attempt of {} finished",
                            self.config.max_attempts
                        );
                        warn!(job_id = %job.id, range = index, "claim cap reached; failing the job");
                        return self.fail_claimed(&view, token, &error).await;
                    }
                    return self
                        .run_claimed(view, token, request_id, stop, deadline)
                        .await;
                }
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    if fresh.status.is_terminal() {
                        return Outcome::Skipped("job already terminal");
                    }
                    // Another claim moved the counter: look again, a moment later.
                    let pause = 1 + (Timestamp::now().unix_nanos() % 10) as u64;
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    job = fresh;
                }
                Err(e) => return Outcome::Retry(e),
            }
        }
        Outcome::Retry(ServiceError::conflict("the job's ranges are being claimed"))
    }

    /// Sends a message to every range that needs one (pending, or running under an
    /// expired lease), or, every range done and the finisher gone, the last range's so a
    /// worker finishes the job.
    async fn resend_ranges(&self, job: &Job, request_id: &str) -> Outcome {
        let fanout = job.fanout.as_ref().expect("a fanned-out job");
        let now = Timestamp::now();
        let expired = |l: Option<Timestamp>| l.is_none_or(|l| l <= now);
        let indices: Vec<usize> = if fanout.all_done() {
            if expired(job.lease_expires_at) {
                vec![fanout.ranges.len() - 1]
            } else {
                vec![]
            }
        } else {
            fanout
                .ranges
                .iter()
                .enumerate()
                .filter(|(_, r)| match r.state {
                    RangeState::Pending => true,
                    RangeState::Running => expired(r.lease_expires_at),
                    RangeState::Done => false,
                })
                .map(|(i, _)| i)
                .collect()
        };
        if let Err(e) = self.send_ranges(job, &indices, request_id).await {
            return Outcome::Retry(e);
        }
        let change = Transition::Requeued {
            at: Timestamp::now(),
        };
        if let Err(e) = self.jobs.transition(&job.tenant_id, job.id, change).await
            && e.kind() != ErrorKind::Conflict
        {
            warn!(job_id = %job.id, error = %e.log_detail(), "ranges re-sent, but the enqueue could not be recorded");
        }
        info!(job_id = %job.id, ranges = indices.len(), "the ranges' messages were sent again");
        Outcome::Skipped("the ranges' messages were sent again")
    }

    /// A range read to its end: its parts recorded with the range done; the last range's
    /// worker goes on to finish the job.
    pub(super) async fn range_finished(&self, view: &Job, token: u32, run: SegmentRun) -> Outcome {
        let index = view.range.expect("a range's view");
        let checkpoint = super::segment::next_checkpoint(view, &run);
        let at = Timestamp::now();
        let progress = Progress {
            rows: checkpoint.rows,
            bytes: checkpoint.bytes,
            tables_done: checkpoint.tables_done,
            tables_total: super::segment::total_tables(view),
            updated_at: at,
        };
        let until =
            Timestamp::from_unix_nanos(at.unix_nanos() + self.config.lease.as_nanos() as i128);
        let change = Transition::RangeDone {
            token,
            checkpoint: &checkpoint,
            progress,
            until,
        };
        match self.jobs.transition(&view.tenant_id, view.id, change).await {
            Ok(false) => {
                info!(job_id = %view.id, range = index, rows = checkpoint.rows, "range done; other ranges are still running");
                Outcome::RangeDone {
                    job_id: view.id,
                    range: index,
                }
            }
            Ok(true) => match self.jobs.get(&view.tenant_id, view.id).await {
                Ok(Some(job)) => self.finish_fanout(&job, token).await,
                Ok(None) => Outcome::Skipped("job not found"),
                // The finish is given back: this message comes back and finishes the job.
                Err(e) => {
                    self.give_back(view, token).await;
                    Outcome::Retry(e)
                }
            },
            Err(e) => self.segment_refused(view, token, &run, e).await,
        }
    }

    /// Every range done: the manifest of their parts, in range order, as the job's
    /// result, then the job completed under the finisher's claim.
    async fn finish_fanout(&self, job: &Job, token: u32) -> Outcome {
        let fanout = job.fanout.as_ref().expect("a fanned-out job");
        let parts = fanout.parts();
        let bytes: i64 = parts.iter().map(|p| p.size_bytes.max(0)).sum();
        let ceiling = self.engine.limits().max_result_bytes;
        if ceiling > 0 && bytes > ceiling {
            let e = super::run::result_too_large();
            return self.fail_claimed(job, token, &sanitize(e.message())).await;
        }
        let format = job
            .request
            .result_format
            .unwrap_or(self.config.default_format);
        let stored = match (format, &self.table_format) {
            (ResultFormat::Parquet, Some(f)) => f.format(),
            _ => StoredFormat::Ndjson,
        };
        let sealed = async {
            let tenant = TenantContext::new(&job.tenant_id)?.with_request_id(&job.id.to_string());
            // Well inside the finisher's lease (no heartbeat renews it meanwhile).
            let ctx = Context::background()
                .with_timeout(Duration::from_secs(60).min(self.config.lease / 2));
            let out = self
                .engine
                .seal_manifest(&ctx, &tenant, stored, parts)
                .await?;
            out.reference
                .ok_or_else(|| ServiceError::internal("no manifest reference"))
        }
        .await;
        let reference = match sealed {
            Ok(r) => r,
            Err(e) if e.is_retryable() => {
                // The finish is given back: this message comes back and finishes (the
                // finish is capped like a run, [`Fanout::finishes`]).
                self.give_back(job, token).await;
                return Outcome::Retry(e);
            }
            Err(e) => return self.fail_claimed(job, token, &sanitize(e.message())).await,
        };
        let result = JobResult::sealed(&reference, format);
        let ms: u64 = fanout
            .ranges
            .iter()
            .filter_map(|r| r.checkpoint.as_ref())
            .map(|c| c.elapsed_ms)
            .sum();
        info!(job_id = %job.id, ranges = fanout.ranges.len(), parts = result.parts.len(), "every range done; manifest written");
        self.complete(job, token, result, Duration::from_millis(ms))
            .await
    }
}

/// What the planner decided: fan the job out, or run it whole (with its plan when it
/// made one, so the run does not plan again).
pub(super) enum Planned {
    FanOut(Fanout),
    Whole(Option<Box<(fetcher_engine::ExtractionRequest, ExtractionPlan)>>),
}

/// `plan` cut to what range `index` of `fanout` reads: the big table's key range and,
/// for the first range, the tables before it, for the last, the tables after it; so the
/// ranges' parts in range order are the whole plan's rows in plan order.
pub(super) fn range_plan(
    plan: &ExtractionPlan,
    fanout: &Fanout,
    index: usize,
) -> Result<ExtractionPlan> {
    let range = fanout
        .ranges
        .get(index)
        .ok_or_else(|| ServiceError::internal("no such range"))?;
    let (first, last) = (index == 0, index + 1 == fanout.ranges.len());
    let big = (fanout.config.as_str(), fanout.table.as_str());
    let mut out = plan.clone();
    out.steps.retain_mut(|step| {
        let keep = |table: &str| match (step.config_name.as_str(), table).cmp(&big) {
            std::cmp::Ordering::Less => first,
            std::cmp::Ordering::Equal => true,
            std::cmp::Ordering::Greater => last,
        };
        let dropped: Vec<String> = step.tables.iter().filter(|t| !keep(t)).cloned().collect();
        for t in &dropped {
            step.fields.remove(t);
            step.filters.remove(t);
            step.incremental.remove(t);
        }
        step.tables.retain(|t| keep(t));
        if step.config_name == fanout.config {
            step.key_ranges
                .insert(fanout.table.clone(), range.keys.clone());
        }
        !step.tables.is_empty()
    });
    let has_big = out
        .steps
        .iter()
        .any(|s| s.config_name == fanout.config && s.tables.contains(&fanout.table));
    if !has_big {
        return Err(ServiceError::validation(
            "the fanned-out table is no longer in the job's plan",
        ));
    }
    Ok(out)
}

/// The number a range's first part gets.
pub(super) fn part_base(job: &Job) -> Option<usize> {
    job.range.map(|i| i * RANGE_PART_STRIDE)
}
