//! A fanned-out job (docs/operations.md, "Fan-out"): one big table cut into key ranges,
//! each read by its own worker under its own claim, the job's manifest written once by
//! whoever finishes the last range. The rules live here, on the job record, so the three
//! job stores apply them in the same conditional write as every other transition.
//!
//! Claims of ranges take their tokens from the job's claim counter (`attempts`), so a
//! token names one claim of one range and the job's ordinary transitions (renew, release,
//! checkpoint, fail, cancel, complete) work with it unchanged: [`Job::check_claim`]
//! accepts the token of a running range, or of the finisher.

use fetcher_engine::{KeyRange, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Checkpoint, Job, JobStatus, Progress};
use crate::error::ServiceError;

/// The ranges of a fanned-out job's big table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fanout {
    /// The table read in ranges: its datasource and name as the request has them.
    pub config: String,
    pub table: String,
    /// In key order: range 0 also reads the plan's tables before the big table, the last
    /// range the ones after it, so the ranges' parts in order are the job's result.
    pub ranges: Vec<FanoutRange>,
    /// The claim that writes the manifest and completes the job, once every range is
    /// done (the worker whose range finished last, or one that took over after it died:
    /// the job's lease is then its lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finisher: Option<u32>,
    /// Claims of the finish so far: a finish that keeps failing is capped like a run.
    #[serde(default)]
    pub finishes: u32,
}

/// One range and how far it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FanoutRange {
    pub keys: KeyRange,
    pub state: RangeState,
    /// The claim of the running range (the latest one after).
    #[serde(default)]
    pub token: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<Timestamp>,
    /// Claims of this range so far: its claim cap counts from its checkpoint's.
    #[serde(default)]
    pub claims: u32,
    /// What this range's segments sealed so far (a range may need several runs); once
    /// the range is done, every part it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// When the range's current run of claims began (its first claim, or its latest
    /// checkpoint): its retry budget runs from here, not from the job's creation (a range
    /// may wait in the queue behind the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Claims of this range that were taken over ([`Job::superseded`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RangeState {
    Pending,
    Running,
    Done,
}

impl Fanout {
    /// The fan-out of `config.table` over `keys`, every range pending.
    pub fn new(config: &str, table: &str, keys: Vec<KeyRange>) -> Fanout {
        Fanout {
            config: config.to_owned(),
            table: table.to_owned(),
            ranges: keys
                .into_iter()
                .map(|keys| FanoutRange {
                    keys,
                    state: RangeState::Pending,
                    token: 0,
                    lease_expires_at: None,
                    claims: 0,
                    checkpoint: None,
                    progress: None,
                    since: None,
                    superseded: Vec::new(),
                })
                .collect(),
            finisher: None,
            finishes: 0,
        }
    }

    pub fn all_done(&self) -> bool {
        self.ranges.iter().all(|r| r.state == RangeState::Done)
    }

    /// Every part of every range, in range order: the manifest's list.
    pub fn parts(&self) -> Vec<fetcher_engine::ResultPart> {
        self.ranges
            .iter()
            .filter_map(|r| r.checkpoint.as_ref())
            .flat_map(|c| c.parts.iter().cloned())
            .collect()
    }

    /// The running range `token` holds.
    fn running(&mut self, token: u32) -> Option<&mut FanoutRange> {
        self.ranges
            .iter_mut()
            .find(|r| r.state == RangeState::Running && r.token == token)
    }

    /// The figures of every range together: rows and bytes summed, tables done the
    /// fewest any range reports (a range without figures yet counts none).
    fn progress(&self, tables_total: u64, at: Timestamp) -> Progress {
        let figures = self.ranges.iter().filter_map(|r| r.progress);
        let (rows, bytes) = figures.fold((0, 0), |(r, b), p| (r + p.rows, b + p.bytes));
        let tables = self
            .ranges
            .iter()
            .map(|r| r.progress.map_or(0, |p| p.tables_done))
            .min()
            .unwrap_or(0);
        Progress {
            rows,
            bytes,
            // The big table is done only with its last range.
            tables_done: tables.min(tables_total.saturating_sub(1)),
            tables_total,
            updated_at: at,
        }
    }
}

fn conflict(why: &'static str) -> ServiceError {
    ServiceError::conflict(why)
}

fn later(a: Option<Timestamp>, b: Timestamp) -> Timestamp {
    a.map_or(b, |a| if a > b { a } else { b })
}

impl Job {
    /// The planner's claim hands the job to its ranges: `fanout` recorded, the job stays
    /// `processing` (its lease now the ranges' latest), its messages sent at `at`.
    pub fn fan_out(&mut self, token: u32, fanout: &Fanout, at: Timestamp) -> crate::Result<()> {
        self.check_claim(token)?;
        self.check_not_canceling()?;
        if self.fanout.is_some() || self.checkpoint.is_some() {
            return Err(conflict("job already split"));
        }
        self.fanout = Some(fanout.clone());
        self.enqueued_at = Some(at);
        self.message_dropped_at = None;
        Ok(())
    }

    /// Claims range `index` with `token` (the job's claim counter's next value, so two
    /// claimers cannot both get it): a pending range, or a running one whose lease expired
    /// at `now`. When every range is done and the finisher's lease expired (it died before
    /// completing), the claim makes `token` the finisher instead. Answers whether it did.
    pub fn claim_range(
        &mut self,
        index: usize,
        token: u32,
        now: Timestamp,
        lease: std::time::Duration,
    ) -> crate::Result<bool> {
        if self.status != JobStatus::Processing || token != self.attempts + 1 {
            return Err(conflict("the job changed meanwhile"));
        }
        let until = Timestamp::from_unix_nanos(now.unix_nanos() + lease.as_nanos() as i128);
        let lease_expired = self.lease_expires_at.is_none_or(|l| l <= now);
        let fanout = self
            .fanout
            .as_mut()
            .ok_or_else(|| conflict("job is not split"))?;
        if fanout.all_done() {
            if fanout.finisher.is_some() && !lease_expired {
                return Err(conflict("the job is being finished"));
            }
            fanout.finisher = Some(token);
            fanout.finishes += 1;
            self.attempts = token;
            self.lease_expires_at = Some(until);
            return Ok(true);
        }
        let range = fanout
            .ranges
            .get_mut(index)
            .ok_or_else(|| conflict("no such range"))?;
        let free = match range.state {
            RangeState::Pending => true,
            RangeState::Running => range.lease_expires_at.is_none_or(|l| l <= now),
            RangeState::Done => false,
        };
        if !free {
            return Err(conflict("range is not claimable"));
        }
        if range.state == RangeState::Running {
            range.superseded.push(range.token);
        }
        range.state = RangeState::Running;
        range.token = token;
        range.claims += 1;
        range.since.get_or_insert(now);
        range.lease_expires_at = Some(until);
        self.attempts = token;
        self.lease_expires_at = Some(later(self.lease_expires_at, until));
        Ok(false)
    }

    /// A range's run is over and it read its range to the end: `checkpoint` holds every
    /// part it wrote. Answers whether it was the last range: its claim is then the
    /// finisher's, with the job's lease until `until`. One conditional write decides, so
    /// of two ranges finishing at once exactly one is last.
    pub fn range_done(
        &mut self,
        token: u32,
        checkpoint: &Checkpoint,
        progress: Progress,
        until: Timestamp,
    ) -> crate::Result<bool> {
        self.check_claim(token)?;
        self.check_not_canceling()?;
        let total = self.tables_total();
        let fanout = self
            .fanout
            .as_mut()
            .ok_or_else(|| conflict("job is not split"))?;
        let range = fanout
            .running(token)
            .ok_or_else(|| conflict("range is not held by this claim"))?;
        range.state = RangeState::Done;
        range.lease_expires_at = None;
        range.checkpoint = Some(checkpoint.clone());
        range.progress = Some(progress);
        let last = fanout.all_done();
        if last {
            fanout.finisher = Some(token);
            fanout.finishes += 1;
        }
        self.progress = Some(fanout.progress(total, progress.updated_at));
        if last {
            self.lease_expires_at = Some(until);
        }
        Ok(last)
    }

    /// [`Job::renew`] of a fanned-out job: the running range's (or the finisher's) lease,
    /// and the range's figures into the job's.
    pub(super) fn renew_range(
        &mut self,
        token: u32,
        until: Timestamp,
        progress: Option<Progress>,
    ) -> crate::Result<bool> {
        let total = self.tables_total();
        let fanout = self.fanout.as_mut().expect("a fanned-out job");
        if fanout.finisher == Some(token) {
            self.lease_expires_at = Some(until);
            return Ok(self.cancel_requested_at.is_some());
        }
        let range = fanout
            .running(token)
            .ok_or_else(|| conflict("range is not held by this claim"))?;
        range.lease_expires_at = Some(until);
        if let Some(p) = progress {
            range.progress = Some(p);
            self.progress = Some(fanout.progress(total, p.updated_at));
        }
        self.lease_expires_at = Some(later(self.lease_expires_at, until));
        Ok(self.cancel_requested_at.is_some())
    }

    /// A range gives its claim back: `checkpoint` when its segment stopped in time (its
    /// next message resumes there), `None` for a retry from where it last was.
    pub(super) fn release_range(
        &mut self,
        token: u32,
        checkpoint: Option<(&Checkpoint, Progress)>,
    ) -> crate::Result<()> {
        let total = self.tables_total();
        let fanout = self.fanout.as_mut().expect("a fanned-out job");
        if fanout.finisher == Some(token) {
            // The finisher gives the job back: the next message of a range finishes it.
            fanout.finisher = None;
            self.lease_expires_at = None;
            return Ok(());
        }
        let range = fanout
            .running(token)
            .ok_or_else(|| conflict("range is not held by this claim"))?;
        range.state = RangeState::Pending;
        range.lease_expires_at = None;
        if let Some((c, p)) = checkpoint {
            range.checkpoint = Some(c.clone());
            range.progress = Some(p);
            // The next segment's retries count from its own start.
            range.since = None;
            self.progress = Some(fanout.progress(total, p.updated_at));
        }
        Ok(())
    }

    /// The claims a worker holds on the job now: the job's one claim, or a fanned-out
    /// job's running ranges' and finisher's (what a restarted `serve` takes back).
    pub fn claims_held(&self) -> Vec<u32> {
        match &self.fanout {
            None => vec![self.attempts],
            Some(f) => f
                .ranges
                .iter()
                .filter(|r| r.state == RangeState::Running)
                .map(|r| r.token)
                .chain(f.finisher)
                .collect(),
        }
    }

    /// Whether `token` holds a claim of this fanned-out job (a running range's or the
    /// finisher's).
    pub(super) fn holds_range_claim(&self, token: u32) -> bool {
        self.fanout.as_ref().is_some_and(|f| {
            f.finisher == Some(token)
                || f.ranges
                    .iter()
                    .any(|r| r.state == RangeState::Running && r.token == token)
        })
    }

    /// A worker's view of range `index`: the range's checkpoint as the job's and its
    /// claims as the job's, so the segment rules (resume, claim cap, continuation
    /// message) apply to the range as to a job. Never stored.
    pub fn range_view(&self, index: usize) -> Job {
        let mut view = self.clone();
        if let Some(r) = self.fanout.as_ref().and_then(|f| f.ranges.get(index)) {
            view.checkpoint = r.checkpoint.clone();
            view.attempts = r.claims;
            view.progress = r.progress;
            view.range = Some(index);
            view.superseded = r.superseded.clone();
            // What the range's retry budget counts from ([`FanoutRange::since`]).
            view.enqueued_at = r.since.or(self.enqueued_at);
        }
        view
    }

    /// Plaintext bytes the job's parts hold so far: its checkpoint's and, fanned out,
    /// every other range's (a range's own are its view's checkpoint).
    pub fn bytes_so_far(&self) -> u64 {
        let own = self.checkpoint.as_ref().map_or(0, |c| c.bytes);
        let others: u64 = self.fanout.as_ref().map_or(0, |f| {
            f.ranges
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != self.range)
                .filter_map(|(_, r)| r.checkpoint.as_ref())
                .map(|c| c.bytes)
                .sum()
        });
        own + others
    }

    pub(super) fn tables_total(&self) -> u64 {
        self.request
            .mapped_fields
            .values()
            .map(|t| t.len() as u64)
            .sum()
    }
}
