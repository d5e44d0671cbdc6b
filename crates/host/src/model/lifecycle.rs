//! The job lifecycle: the transitions a stored job takes after its claim and the rules
//! every job store applies to them ([`Job::apply`]); a fanned-out job's own in
//! [`super::fanout`].

use fetcher_engine::Timestamp;

use super::*;

/// One conditional change to a stored job after its claim: what
/// [`crate::ports::JobStore::transition`] applies, with [`Job::apply`], inside one
/// conditional write.
#[derive(Debug, Clone, Copy)]
pub enum Transition<'a> {
    /// Extends a live claim and records the run's progress (heartbeat); answers whether
    /// a cancel was asked for.
    Renew {
        token: u32,
        until: Timestamp,
        progress: Option<Progress>,
    },
    /// A client's cancel: `pending → canceled` at once (answers `true`), or, while
    /// `processing`, a request the worker's next heartbeat sees (`false`). `Conflict`
    /// once the job is terminal.
    Cancel {
        event: &'a PendingEvent,
        at: Timestamp,
    },
    /// The worker stopped a run whose cancel was asked for: `processing → canceled`.
    FinishCanceled {
        token: u32,
        event: &'a PendingEvent,
        at: Timestamp,
    },
    /// `processing → completed`, with the result and the pending event.
    Complete {
        token: u32,
        result: &'a JobResult,
        event: &'a PendingEvent,
        at: Timestamp,
    },
    /// `pending|processing → failed`, with the error and the pending event.
    Fail {
        token: Option<u32>,
        error: &'a str,
        event: &'a PendingEvent,
        at: Timestamp,
    },
    /// `processing → pending`, giving the claim back.
    Release { token: u32, error: Option<&'a str> },
    /// `processing → pending` at the end of a segment of a continued job, with the
    /// checkpoint its next segment resumes from; its message is sent at `at`. `Conflict`
    /// when a cancel was asked for (the worker cancels instead).
    Checkpoint {
        token: u32,
        checkpoint: &'a Checkpoint,
        progress: Progress,
        at: Timestamp,
    },
    /// The planner's claim splits the job into the ranges of `fanout`, whose messages
    /// are sent at `at`; the job stays `processing` ([`Job::fan_out`]).
    FanOut {
        token: u32,
        fanout: &'a Fanout,
        at: Timestamp,
    },
    /// Claims a range of a fanned-out job, or its finish ([`Job::claim_range`]); answers
    /// whether the claim is the finisher's.
    ClaimRange {
        index: usize,
        token: u32,
        now: Timestamp,
        lease: std::time::Duration,
    },
    /// A range read to its end, with every part it wrote ([`Job::range_done`]); answers
    /// whether it was the last, its claim then the finisher's until `until`.
    RangeDone {
        token: u32,
        checkpoint: &'a Checkpoint,
        progress: Progress,
        until: Timestamp,
    },
    /// Counts a failed publish of the pending event; quarantines it at `max`.
    NoteEventFailure { max: u32 },
    /// Removes the pending-event marker (the event is published).
    ClearPendingEvent,
    /// A fresh message of a job that needs a worker was sent at `at` (the repair pass).
    /// `Conflict` once the job is terminal.
    Requeued { at: Timestamp },
    /// A worker dropped an authentic message of the job, signed at `signed_at`, without
    /// using it (too old to trust, or leaving for the dead-letter queue). Answers whether
    /// it was the job's latest message (then the job is marked, for the repair pass).
    MessageDropped { signed_at: Timestamp, at: Timestamp },
}

/// How much earlier than its recorded enqueue time a message may have been signed and
/// still count as that enqueue's message: signing, sending and recording take a moment.
pub const ENQUEUE_SLACK: std::time::Duration = std::time::Duration::from_secs(60);

/// The job lifecycle rules every [`crate::ports::JobStore`] adapter applies, so the
/// in-memory, SQLite and DynamoDB stores cannot drift apart. Each returns
/// `Err(Conflict)` when the transition is not allowed and changes nothing then.
impl Job {
    /// Applies `change` (`Err(Conflict)` when it is not allowed, and nothing changed).
    /// The answer is the transition's question: for `Renew`, whether a cancel was asked
    /// for; for `Cancel`, whether the job is canceled now; for `NoteEventFailure`,
    /// whether the event was quarantined; `false` otherwise.
    pub fn apply(&mut self, change: &Transition<'_>) -> crate::Result<bool> {
        match *change {
            Transition::Renew {
                token,
                until,
                progress,
            } => self.renew(token, until, progress),
            Transition::Cancel { event, at } => self.request_cancel(event, at),
            Transition::FinishCanceled { token, event, at } => {
                self.finish_canceled(token, event, at).map(|()| true)
            }
            Transition::Complete {
                token,
                result,
                event,
                at,
            } => self.complete(token, result, event, at).map(|()| false),
            Transition::Fail {
                token,
                error,
                event,
                at,
            } => self.fail(token, error, event, at).map(|()| false),
            Transition::Release { token, error } => self.release(token, error).map(|()| false),
            Transition::Checkpoint {
                token,
                checkpoint,
                progress,
                at,
            } => self
                .end_segment(token, checkpoint, progress, at)
                .map(|()| false),
            Transition::FanOut { token, fanout, at } => {
                self.fan_out(token, fanout, at).map(|()| false)
            }
            Transition::ClaimRange {
                index,
                token,
                now,
                lease,
            } => self.claim_range(index, token, now, lease),
            Transition::RangeDone {
                token,
                checkpoint,
                progress,
                until,
            } => self.range_done(token, checkpoint, progress, until),
            Transition::NoteEventFailure { max } => Ok(self.note_event_failure(max)),
            Transition::ClearPendingEvent => {
                self.pending_event = None;
                Ok(false)
            }
            Transition::Requeued { at } => self.requeued(at).map(|()| false),
            Transition::MessageDropped { signed_at, at } => Ok(self.message_dropped(signed_at, at)),
        }
    }

    /// A fresh message was sent at `at`: any earlier drop no longer matters.
    pub fn requeued(&mut self, at: Timestamp) -> crate::Result<()> {
        if self.status.is_terminal() {
            return Err(crate::ServiceError::conflict("job already finished"));
        }
        self.enqueued_at = Some(at);
        self.message_dropped_at = None;
        Ok(())
    }

    /// A worker dropped a message signed at `signed_at`; marks the job when that was its
    /// latest message and it still waits for one (pending). Returns whether it marked.
    pub fn message_dropped(&mut self, signed_at: Timestamp, at: Timestamp) -> bool {
        let latest = signed_at.unix_nanos() + ENQUEUE_SLACK.as_nanos() as i128
            >= self.last_enqueued_at().unix_nanos();
        // A fanned-out job stays `processing` while its ranges wait for messages.
        let waits = self.status == JobStatus::Pending
            || (self.status == JobStatus::Processing && self.fanout.is_some());
        if !waits || !latest {
            return false;
        }
        self.message_dropped_at.get_or_insert(at);
        true
    }

    /// Whether a worker may claim the job at `now`: pending, or processing with an
    /// expired (or missing) lease.
    pub fn claimable_at(&self, now: Timestamp) -> bool {
        self.status == JobStatus::Pending
            || (self.status == JobStatus::Processing
                && self.lease_expires_at.is_none_or(|l| l <= now))
    }

    /// `pending → processing` (or a takeover); returns the claim token.
    pub fn claim(&mut self, now: Timestamp, lease: std::time::Duration) -> Option<u32> {
        // A fanned-out job is claimed range by range ([`Job::claim_range`]).
        if !self.claimable_at(now) || self.fanout.is_some() {
            return None;
        }
        if self.status == JobStatus::Processing {
            // A takeover: the claim whose lease ran out may still write.
            self.superseded.push(self.attempts);
        }
        self.status = JobStatus::Processing;
        self.attempts += 1;
        self.completed_at = None;
        self.lease_expires_at = Some(Timestamp::from_unix_nanos(
            now.unix_nanos() + lease.as_nanos() as i128,
        ));
        Some(self.attempts)
    }

    pub(super) fn check_claim(&self, token: u32) -> crate::Result<()> {
        let held = match &self.fanout {
            Some(_) => self.holds_range_claim(token),
            None => self.attempts == token,
        };
        if self.status == JobStatus::Processing && held {
            Ok(())
        } else {
            Err(crate::ServiceError::conflict(
                "job is not held by this claim",
            ))
        }
    }

    /// Extends the claim; returns whether a cancel was asked for.
    pub fn renew(
        &mut self,
        token: u32,
        until: Timestamp,
        progress: Option<Progress>,
    ) -> crate::Result<bool> {
        self.check_claim(token)?;
        if self.fanout.is_some() {
            return self.renew_range(token, until, progress);
        }
        self.lease_expires_at = Some(until);
        if progress.is_some() {
            self.progress = progress;
        }
        Ok(self.cancel_requested_at.is_some())
    }

    /// A client's cancel (see [`Transition::Cancel`]); `true` when canceled at once.
    pub fn request_cancel(&mut self, event: &PendingEvent, at: Timestamp) -> crate::Result<bool> {
        match self.status {
            JobStatus::Pending => {
                self.end_canceled(event, at);
                Ok(true)
            }
            JobStatus::Processing => {
                self.cancel_requested_at.get_or_insert(at);
                Ok(false)
            }
            _ => Err(crate::ServiceError::conflict("job already finished")),
        }
    }

    /// `processing → canceled` by the claim's worker, once a cancel was asked for.
    pub fn finish_canceled(
        &mut self,
        token: u32,
        event: &PendingEvent,
        at: Timestamp,
    ) -> crate::Result<()> {
        self.check_claim(token)?;
        if self.cancel_requested_at.is_none() {
            return Err(crate::ServiceError::conflict("no cancel was asked for"));
        }
        self.end_canceled(event, at);
        Ok(())
    }

    fn end_canceled(&mut self, event: &PendingEvent, at: Timestamp) {
        self.status = JobStatus::Canceled;
        self.error = Some(CANCELED_ERROR.to_owned());
        self.completed_at = Some(at);
        self.lease_expires_at = None;
        self.pending_event = Some(event.clone());
    }

    /// A cancel asked for: a retry or a failure of the run becomes the cancel instead
    /// (the pipeline then writes [`Transition::FinishCanceled`]).
    pub(super) fn check_not_canceling(&self) -> crate::Result<()> {
        if self.cancel_requested_at.is_some() {
            Err(crate::ServiceError::conflict("a cancel was asked for"))
        } else {
            Ok(())
        }
    }

    pub fn complete(
        &mut self,
        token: u32,
        result: &JobResult,
        event: &PendingEvent,
        at: Timestamp,
    ) -> crate::Result<()> {
        self.check_claim(token)?;
        if self
            .fanout
            .as_ref()
            .is_some_and(|f| f.finisher != Some(token))
        {
            return Err(crate::ServiceError::conflict("only the finisher completes"));
        }
        self.status = JobStatus::Completed;
        // The final figures: the result's (a cancel asked for this late loses).
        let tables = self
            .request
            .mapped_fields
            .values()
            .map(|t| t.len() as u64)
            .sum();
        self.progress = Some(Progress {
            rows: result.row_count,
            bytes: result.size_bytes,
            tables_done: tables,
            tables_total: tables,
            updated_at: at,
        });
        self.result = Some(result.clone());
        self.completed_at = Some(at);
        self.lease_expires_at = None;
        self.pending_event = Some(event.clone());
        Ok(())
    }

    /// With a token, only while that claim holds; without, only from `pending`.
    pub fn fail(
        &mut self,
        token: Option<u32>,
        error: &str,
        event: &PendingEvent,
        at: Timestamp,
    ) -> crate::Result<()> {
        match token {
            Some(t) => {
                self.check_claim(t)?;
                self.check_not_canceling()?;
            }
            None if self.status == JobStatus::Pending => {}
            None => return Err(crate::ServiceError::conflict("job is not pending")),
        }
        self.status = JobStatus::Failed;
        self.error = Some(error.to_owned());
        self.completed_at = Some(at);
        self.lease_expires_at = None;
        self.pending_event = Some(event.clone());
        Ok(())
    }

    /// One more failed publish of the pending event; at `max` failures the event is set
    /// aside (quarantined) and leaves the outbox. Returns whether it was quarantined.
    pub fn note_event_failure(&mut self, max: u32) -> bool {
        let Some(event) = self.pending_event.as_mut() else {
            return false;
        };
        event.failures += 1;
        if event.failures < max {
            return false;
        }
        self.quarantined_event = self.pending_event.take();
        true
    }

    /// The claims of the current segment (all of them for a job that never continued):
    /// what the claim cap counts.
    pub fn segment_claims(&self) -> u32 {
        self.attempts - self.checkpoint.as_ref().map_or(0, |c| c.claims)
    }

    /// Ends a segment: `processing → pending` with `checkpoint`, whose message is sent at
    /// `at` (recorded like any enqueue).
    pub fn end_segment(
        &mut self,
        token: u32,
        checkpoint: &Checkpoint,
        progress: Progress,
        at: Timestamp,
    ) -> crate::Result<()> {
        self.check_claim(token)?;
        self.check_not_canceling()?;
        if self.fanout.is_some() {
            // A range's segment: the range waits for its next message, the job runs on.
            self.release_range(token, Some((checkpoint, progress)))?;
            self.enqueued_at = Some(at);
            self.message_dropped_at = None;
            return Ok(());
        }
        self.status = JobStatus::Pending;
        self.lease_expires_at = None;
        self.checkpoint = Some(checkpoint.clone());
        self.progress = Some(progress);
        self.enqueued_at = Some(at);
        self.message_dropped_at = None;
        Ok(())
    }

    /// `processing → pending`; `error` is why (a retryable failure), kept if it is the
    /// first.
    pub fn release(&mut self, token: u32, error: Option<&str>) -> crate::Result<()> {
        self.check_claim(token)?;
        self.check_not_canceling()?;
        if self.first_error.is_none() {
            self.first_error = error.map(str::to_owned);
        }
        if self.fanout.is_some() {
            return self.release_range(token, None);
        }
        self.status = JobStatus::Pending;
        self.lease_expires_at = None;
        if self.first_error.is_none() {
            self.first_error = error.map(str::to_owned);
        }
        Ok(())
    }
}
