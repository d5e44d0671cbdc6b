//! Jobs longer than one run (docs/engine.md, "Continued runs"; docs/operations.md,
//! "Long jobs"): when a segment's time is up the engine stops at a resumable point; the
//! pipeline records the checkpoint in the transition that ends the segment and sends the
//! job a continuation message, signed with the checkpoint's number and digest. The next
//! worker resumes only from the checkpoint its message was signed for.

use std::time::Duration;

use fetcher_crypto::{KeyPurpose, MessageSigner};
use fetcher_engine::{Context, ResultPart, Segment, Stopped, Timestamp};
use tracing::{info, warn};

use super::{Outcome, Pipeline};
use crate::error::ErrorKind;
use crate::message::{self, JobMessage};
use crate::model::*;

/// What the checkpoint of a job says about the message that names it.
pub(super) enum Continuation {
    /// The message is the one the job waits for (or the job never continued).
    Current,
    /// A message of an earlier segment (a redelivery): nothing to do.
    Superseded,
    /// The message was signed for a checkpoint the job does not hold: the stored one was
    /// changed or lost. The job cannot be resumed safely.
    Mismatch,
}

/// The failure of a job whose checkpoint does not match its continuation message.
pub const CHECKPOINT_MISMATCH: &str =
    "the job's checkpoint does not match its continuation message; it cannot be resumed";

/// Whether `m` is the message `job`'s checkpoint waits for.
pub(super) fn continuation(job: &Job, m: &JobMessage) -> Continuation {
    match (&job.checkpoint, m.segment) {
        (None, None) => Continuation::Current,
        (Some(c), Some(n)) if n == c.segment => {
            if m.checkpoint.as_deref() == Some(c.digest().as_str()) {
                Continuation::Current
            } else {
                Continuation::Mismatch
            }
        }
        (Some(c), n) if n.is_none_or(|n| n < c.segment) => Continuation::Superseded,
        _ => Continuation::Mismatch,
    }
}

impl Pipeline {
    /// The segment a claimed `job` runs: resumed from its checkpoint, stopping when its
    /// time is up. Only v2 and Parquet jobs run in segments, and only on a host that can
    /// send the continuation (a queue); `deadline` is the host's hard end for the run.
    /// Its parts are named by `token`, the claim it runs under.
    pub(super) fn segment_of(
        &self,
        job: &Job,
        token: u32,
        format: ResultFormat,
        deadline: Option<tokio::time::Instant>,
    ) -> Segment {
        let now = tokio::time::Instant::now();
        let segmented = self.queue.is_some() && format != ResultFormat::V1;
        // Time to seal the part, write the checkpoint and send the message before the
        // hard end; at most half of what is left.
        let before_end = deadline.map(|end| {
            let left = end.saturating_duration_since(now);
            end - self.config.checkpoint_margin.min(left / 2)
        });
        let after = self.config.segment_after.map(|after| now + after);
        let stop_at = match (segmented, after, before_end) {
            (false, _, _) => None,
            // A set segment length never runs past the hard end.
            (true, Some(a), Some(b)) => Some(a.min(b)),
            (true, a, b) => a.or(b),
        };
        Segment {
            part_base: super::fanout::part_base(job),
            stop_at,
            resume: job.checkpoint.as_ref().map(|c| c.resume.clone()),
            earlier_parts: job
                .checkpoint
                .as_ref()
                .map(|c| c.parts.clone())
                .unwrap_or_default(),
            // Once the job (or range) was taken over, runs name their parts by their
            // claim: a replaced run may still be writing the plain names.
            claim: (!job.superseded.is_empty()).then_some(token),
        }
    }

    /// Ends a segment that stopped: the checkpoint, in the transition that gives the
    /// claim back, then the continuation message. A range of a fanned-out job that read
    /// its range to the end is done instead ([`Pipeline::range_finished`]).
    pub(super) async fn continue_later(
        &self,
        job: &Job,
        token: u32,
        request_id: &str,
        run: SegmentRun,
    ) -> Outcome {
        if run.stopped.ended {
            return self.range_finished(job, token, run).await;
        }
        let checkpoint = next_checkpoint(job, &run);
        let at = Timestamp::now();
        let progress = Progress {
            rows: checkpoint.rows,
            bytes: checkpoint.bytes,
            tables_done: checkpoint.tables_done,
            tables_total: total_tables(job),
            updated_at: at,
        };
        let change = Transition::Checkpoint {
            token,
            checkpoint: &checkpoint,
            progress,
            at,
        };
        if let Err(e) = self.jobs.transition(&job.tenant_id, job.id, change).await {
            return self.segment_refused(job, token, &run, e).await;
        }
        let mut next = job.clone();
        next.checkpoint = Some(checkpoint);
        let segment = next.checkpoint.as_ref().map_or(0, |c| c.segment);
        match self.send_continuation(&next, request_id).await {
            Ok(()) => {
                info!(job_id = %job.id, range = ?job.range, segment, rows = progress.rows, "segment done; the job continues in the next");
            }
            Err(e) => {
                // The job is pending with its checkpoint: the repair pass sends it again.
                warn!(job_id = %job.id, segment, error = %e.log_detail(), "could not send the continuation; the repair pass will");
            }
        }
        Outcome::Continued {
            job_id: job.id,
            segment,
        }
    }

    /// The store refused the write that ends a segment (`e`). A cancel asked for
    /// meanwhile: the job ends canceled, every part removed. Otherwise the claim was lost
    /// (another worker took the job over): this run's parts are named by its claim, so
    /// they are nobody else's, and are removed unless the stored job references them.
    pub(super) async fn segment_refused(
        &self,
        job: &Job,
        token: u32,
        run: &SegmentRun,
        e: crate::ServiceError,
    ) -> Outcome {
        if e.kind() != ErrorKind::Conflict {
            return Outcome::Retry(e);
        }
        match self.cancel_claimed(job, token).await {
            Outcome::Skipped(_) => {
                self.discard_own(job, &run.stopped.parts).await;
                Outcome::Skipped("claim lost before the checkpoint")
            }
            canceled => {
                self.discard(&run.stopped.parts).await;
                canceled
            }
        }
    }

    async fn send_continuation(&self, job: &Job, request_id: &str) -> crate::Result<()> {
        let queue = self
            .queue
            .as_ref()
            .ok_or_else(|| crate::ServiceError::internal("no queue for continuations"))?;
        let ring = self.keys.key_ring().await?;
        let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
        let m = message::encode(job, &signer, request_id, message::unix_now());
        queue.enqueue(m).await
    }

    /// Removes a continued job's parts (it failed or was canceled: none of it is a
    /// result), and a fanned-out job's, every range's as the store has them now. Best
    /// effort: a part left behind is logged.
    pub(super) async fn discard_checkpoint(&self, job: &Job) {
        let mut parts: Vec<ResultPart> = job
            .checkpoint
            .as_ref()
            .map(|c| c.parts.clone())
            .unwrap_or_default();
        if job.fanout.is_some() {
            let fresh = match self.jobs.get(&job.tenant_id, job.id).await {
                Ok(Some(j)) => j,
                _ => job.clone(),
            };
            for p in fresh.fanout.as_ref().map(Fanout::parts).unwrap_or_default() {
                if !parts.iter().any(|q| q.path == p.path) {
                    parts.push(p);
                }
            }
        }
        self.discard(&parts).await;
    }

    /// Removes the parts a run that lost its claim wrote: its keys carry its claim, so no
    /// other run wrote them, and only those the stored job does not reference (its
    /// checkpoint, its ranges', its result; a write that succeeded though it was reported
    /// failed) go. Kept when the job cannot be read: a part left behind is an orphan, a
    /// part removed wrongly would be a hole.
    pub(super) async fn discard_own(&self, job: &Job, parts: &[ResultPart]) {
        let Ok(Some(stored)) = self.jobs.get(&job.tenant_id, job.id).await else {
            warn!(job_id = %job.id, "could not read the job; a lost claim's parts stay");
            return;
        };
        let mut referenced: Vec<ResultPart> = stored
            .checkpoint
            .as_ref()
            .map(|c| c.parts.clone())
            .unwrap_or_default();
        referenced.extend(
            stored
                .fanout
                .as_ref()
                .map(Fanout::parts)
                .unwrap_or_default(),
        );
        for r in stored.result.iter() {
            referenced.extend(r.parts.iter().cloned());
            referenced.push(ResultPart {
                path: r.path.clone(),
                ..ResultPart::default()
            });
        }
        let own: Vec<ResultPart> = parts
            .iter()
            .filter(|p| !referenced.iter().any(|r| r.path == p.path))
            .cloned()
            .collect();
        self.discard(&own).await;
    }

    /// After a takeover's run: removes what the runs it replaced may have left at the
    /// keys of the parts it wrote ([`crate::sink::superseded_paths`]), keeping any the
    /// stored job references. A replaced run still alive removes its own when its write
    /// is refused ([`Pipeline::discard_own`]).
    pub(super) async fn sweep_superseded(
        &self,
        job: &Job,
        token: u32,
        parts: &[ResultPart],
        manifest: Option<&str>,
    ) {
        if job.superseded.is_empty() {
            return;
        }
        let mine = format!(".c{token}.");
        // A replaced first run of a whole job wrote the single result object.
        let single =
            crate::sink::result_path(&job.tenant_id, &job.id.to_string(), ResultFormat::V2);
        // And the manifest a replaced run that reached the end may have written.
        let id = job.id.to_string();
        let manifests = manifest
            .filter(|m| m.contains(&format!("{mine}manifest")))
            .map(|_| {
                std::iter::once(None)
                    .chain(job.superseded.iter().copied().map(Some))
                    .map(|c| crate::sink::manifest_path(&job.tenant_id, &id, c))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let candidates: Vec<ResultPart> = parts
            .iter()
            .filter(|p| p.path.contains(&mine))
            .flat_map(|p| {
                let mut keys = crate::sink::superseded_paths(&p.path, &job.superseded);
                if job.range.is_none() && p.path.contains("/part-00000.") {
                    keys.push(single.clone());
                }
                keys
            })
            .chain(manifests)
            .map(|path| ResultPart {
                path,
                ..ResultPart::default()
            })
            .collect();
        if !candidates.is_empty() {
            info!(job_id = %job.id, range = ?job.range, keys = candidates.len(), "removing what the replaced claims may have left");
            self.discard_own(job, &candidates).await;
        }
    }

    pub(super) async fn discard(&self, parts: &[ResultPart]) {
        let ctx = Context::background().with_timeout(Duration::from_secs(30));
        for p in parts {
            let deleted = ctx.run(self.objects.delete(&p.path)).await;
            if !matches!(deleted, Ok(Ok(()))) {
                warn!(path = %p.path, "could not remove a part of an unfinished job");
            }
        }
    }
}

/// What a stopped segment did.
pub(super) struct SegmentRun {
    pub(super) stopped: Stopped,
    pub(super) rows: u64,
    pub(super) watermarks: std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<String, fetcher_engine::Watermark>,
    >,
    pub(super) elapsed: Duration,
}

/// The checkpoint after `run`: `job`'s (a range's view: the range's) and what the run did.
pub(super) fn next_checkpoint(job: &Job, run: &SegmentRun) -> Checkpoint {
    let earlier = job.checkpoint.as_ref();
    let mut parts: Vec<ResultPart> = earlier.map(|c| c.parts.clone()).unwrap_or_default();
    parts.extend(run.stopped.parts.iter().cloned());
    let mut watermarks = earlier.map(|c| c.watermarks.clone()).unwrap_or_default();
    for (config, tables) in &run.watermarks {
        watermarks
            .entry(config.clone())
            .or_default()
            .extend(tables.iter().map(|(t, w)| (t.clone(), w.clone())));
    }
    Checkpoint {
        segment: earlier.map_or(0, |c| c.segment) + 1,
        tables_done: tables_before(job, &run.stopped.at),
        resume: run.stopped.at.clone(),
        rows: earlier.map_or(0, |c| c.rows) + run.rows,
        bytes: earlier.map_or(0, |c| c.bytes)
            + run
                .stopped
                .parts
                .iter()
                .map(|p| p.size_bytes.max(0) as u64)
                .sum::<u64>(),
        parts,
        watermarks,
        claims: job.attempts,
        elapsed_ms: earlier.map_or(0, |c| c.elapsed_ms) + run.elapsed.as_millis() as u64,
    }
}

/// The job's tables, counted over every datasource.
pub(super) fn total_tables(job: &Job) -> u64 {
    job.request
        .mapped_fields
        .values()
        .map(|t| t.len() as u64)
        .sum()
}

/// How many of the job's tables come before `at` in plan order (datasources, then tables,
/// by name): the tables finished when a segment stops there.
fn tables_before(job: &Job, at: &fetcher_engine::ResumePoint) -> u64 {
    job.request
        .mapped_fields
        .iter()
        .map(|(config, tables)| match config.as_str().cmp(&at.config) {
            std::cmp::Ordering::Less => tables.len() as u64,
            std::cmp::Ordering::Equal => tables.keys().filter(|t| **t < at.table).count() as u64,
            std::cmp::Ordering::Greater => 0,
        })
        .sum()
}
