//! Schedules (docs/api.md, "Schedules"): a sync that runs itself. A schedule holds the job
//! request its sync runs, when (a rate or a cron expression in a time zone), and what its
//! last run did. The rules of a run live in [`crate::schedules`]; this is the record.
//!
//! Every write of a schedule is conditional on the version it read
//! ([`crate::ports::ScheduleStore::save_schedule`]): two schedulers that see the same due run race
//! for one write, and only the winner creates the job.

use std::str::FromStr;

use fetcher_engine::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::JobId;

/// The shortest rate a schedule may have.
pub const MIN_RATE_SECONDS: u64 = 60;
/// The longest delay added to a due time: a fixed share of it per sync, so schedules that
/// share a minute (every `0 * * * *`) do not all start at its first second.
pub const MAX_JITTER_SECONDS: u64 = 30;
/// Consecutive failed runs after which a schedule pauses itself.
pub const MAX_CONSECUTIVE_FAILURES: u32 = 3;
/// A scheduled sync is stale when its last completed job (or, before its first, the
/// schedule's start) is older than this many periods.
pub const STALE_AFTER_PERIODS: u64 = 3;

/// When a schedule runs: every fixed period, or at the times of a cron expression read in
/// a time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    /// An ISO 8601 duration of at least a minute, counted from the schedule's anchor.
    Rate { text: String, seconds: u64 },
    /// A five-field cron expression (minute, hour, day of month, month, day of week) in an
    /// IANA time zone.
    Cron {
        expression: String,
        zone: chrono_tz::Tz,
    },
}

/// Why a cadence is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CadenceError {
    #[error(
        "give either rate (an ISO 8601 duration such as PT15M) or cron (with timeZone), not both"
    )]
    Both,
    #[error("give rate (an ISO 8601 duration such as PT15M) or cron (with timeZone)")]
    Neither,
    #[error(
        "rate '{0}' is not an ISO 8601 duration of weeks, days, hours, minutes and seconds (such as PT15M, PT1H or P1D): {1}"
    )]
    Rate(String, String),
    #[error("rate '{0}' is shorter than the minimum of one minute (PT1M)")]
    RateTooShort(String),
    #[error("rate '{0}' names years or months, which have no fixed length: use a cron expression")]
    RateCalendar(String),
    #[error(
        "cron '{0}' is not a five-field cron expression (minute hour day-of-month month day-of-week): {1}"
    )]
    Cron(String, String),
    #[error("timeZone '{0}' is not an IANA time zone (such as UTC or Europe/Paris)")]
    Zone(String),
    #[error("timeZone is given for a cron expression only")]
    ZoneWithoutCron,
}

/// The cadence as the API and the stores spell it: `{"rate": "PT15M"}` or
/// `{"cron": "0 6 * * *", "timeZone": "Europe/Paris"}` (`UTC` when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CadenceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

impl Cadence {
    /// The cadence a spec names, or what is wrong with it.
    pub fn parse(spec: &CadenceSpec) -> Result<Cadence, CadenceError> {
        match (&spec.rate, &spec.cron) {
            (Some(_), Some(_)) => Err(CadenceError::Both),
            (None, None) => Err(CadenceError::Neither),
            (Some(rate), None) => {
                if spec.time_zone.is_some() {
                    return Err(CadenceError::ZoneWithoutCron);
                }
                Self::rate(rate)
            }
            (None, Some(cron)) => {
                let zone_name = spec.time_zone.as_deref().unwrap_or("UTC");
                let zone = chrono_tz::Tz::from_str(zone_name)
                    .map_err(|_| CadenceError::Zone(zone_name.to_owned()))?;
                parse_cron(cron)?;
                Ok(Cadence::Cron {
                    expression: cron.clone(),
                    zone,
                })
            }
        }
    }

    fn rate(text: &str) -> Result<Cadence, CadenceError> {
        // The ISO 8601 grammar only (`Span`'s `FromStr` also takes "15 minutes").
        static ISO: jiff::fmt::temporal::SpanParser = jiff::fmt::temporal::SpanParser::new();
        let span = ISO
            .parse_span(text)
            .map_err(|e| CadenceError::Rate(text.to_owned(), e.to_string()))?;
        if span.is_negative() {
            return Err(CadenceError::Rate(text.to_owned(), "it is negative".into()));
        }
        if span.get_years() != 0 || span.get_months() != 0 {
            return Err(CadenceError::RateCalendar(text.to_owned()));
        }
        let seconds = i128::from(span.get_weeks()) * 7 * 86_400
            + i128::from(span.get_days()) * 86_400
            + i128::from(span.get_hours()) * 3_600
            + i128::from(span.get_minutes()) * 60
            + i128::from(span.get_seconds());
        let subsecond = span.get_milliseconds() != 0
            || span.get_microseconds() != 0
            || span.get_nanoseconds() != 0;
        if seconds < i128::from(MIN_RATE_SECONDS) {
            return Err(CadenceError::RateTooShort(text.to_owned()));
        }
        if subsecond {
            return Err(CadenceError::Rate(
                text.to_owned(),
                "a rate is whole seconds".into(),
            ));
        }
        Ok(Cadence::Rate {
            text: text.to_owned(),
            seconds: u64::try_from(seconds).unwrap_or(u64::MAX),
        })
    }

    /// The spec this cadence was parsed from.
    pub fn spec(&self) -> CadenceSpec {
        match self {
            Cadence::Rate { text, .. } => CadenceSpec {
                rate: Some(text.clone()),
                ..Default::default()
            },
            Cadence::Cron { expression, zone } => CadenceSpec {
                cron: Some(expression.clone()),
                time_zone: Some(zone.name().to_owned()),
                ..Default::default()
            },
        }
    }

    /// The first due time strictly after `after`. A rate counts whole periods from
    /// `anchor` (so it does not drift by the time each run takes); a cron expression is
    /// read in its zone (a local time skipped by a daylight-saving change fires after the
    /// change). `None`: the expression never fires again (a 30 February).
    pub fn next_after(&self, anchor: Timestamp, after: Timestamp) -> Option<Timestamp> {
        match self {
            Cadence::Rate { seconds, .. } => {
                let period = i128::from(*seconds) * 1_000_000_000;
                let since = after.unix_nanos() - anchor.unix_nanos();
                // Due times are `anchor + k × period` for k ≥ 1: the first a period after
                // the schedule was set.
                let periods = if since < 0 { 1 } else { since / period + 1 };
                Some(Timestamp::from_unix_nanos(
                    anchor.unix_nanos() + periods * period,
                ))
            }
            Cadence::Cron { expression, zone } => {
                let cron = parse_cron(expression).ok()?;
                let nanos = after.unix_nanos();
                let utc = chrono::DateTime::from_timestamp(
                    i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?,
                    u32::try_from(nanos.rem_euclid(1_000_000_000)).ok()?,
                )?;
                let next = cron
                    .find_next_occurrence(&utc.with_timezone(zone), false)
                    .ok()?;
                let ns = i128::from(next.timestamp()) * 1_000_000_000
                    + i128::from(next.timestamp_subsec_nanos());
                Some(Timestamp::from_unix_nanos(ns))
            }
        }
    }

    /// The period of a rate, or the shortest gap between the next two times of a cron
    /// expression after `at`: what staleness is measured in.
    pub fn period_seconds(&self, at: Timestamp) -> u64 {
        match self {
            Cadence::Rate { seconds, .. } => *seconds,
            Cadence::Cron { .. } => {
                let first = self.next_after(at, at);
                let second = first.and_then(|f| self.next_after(f, f));
                match (first, second) {
                    (Some(a), Some(b)) => b.seconds_since(a),
                    _ => u64::MAX,
                }
            }
        }
    }
}

fn parse_cron(text: &str) -> Result<croner::Cron, CadenceError> {
    let bad = |why: String| CadenceError::Cron(text.to_owned(), why);
    if text.split_whitespace().count() != 5 && !text.trim_start().starts_with('@') {
        return Err(bad("it must have exactly five fields".into()));
    }
    croner::Cron::from_str(text).map_err(|e| bad(e.to_string()))
}

impl Serialize for Cadence {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.spec().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Cadence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spec = CadenceSpec::deserialize(d)?;
        Cadence::parse(&spec).map_err(serde::de::Error::custom)
    }
}

/// The delay added to every due time of the sync `sync_id` of `tenant`: fixed per sync
/// (the first bytes of a SHA-256 of both), under [`MAX_JITTER_SECONDS`] and under a tenth
/// of a rate.
pub fn jitter_seconds(tenant: &str, sync_id: &str, cadence: &Cadence) -> u64 {
    let digest = Sha256::digest(format!("{tenant}\0{sync_id}").as_bytes());
    let n = u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"));
    let bound = match cadence {
        Cadence::Rate { seconds, .. } => (seconds / 10).min(MAX_JITTER_SECONDS),
        Cadence::Cron { .. } => MAX_JITTER_SECONDS,
    };
    if bound == 0 { 0 } else { n % bound }
}

/// Whether a schedule runs, and why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ScheduleState {
    Active,
    /// Paused by its caller (`POST …/schedule/pause`).
    Paused,
    /// Paused by itself after [`MAX_CONSECUTIVE_FAILURES`] failed runs in a row.
    PausedAfterFailures,
}

/// What one due run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunOutcome {
    /// The sync's next job was created (`jobId`).
    Created,
    /// The sync's previous job (`jobId`) was still pending or processing: no job.
    Skipped,
    /// The job could not be created (`code`, `message`).
    Failed,
}

/// The record of a schedule's last run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRun {
    /// The due time the run was for.
    pub due_at: Timestamp,
    /// When it ran.
    pub ran_at: Timestamp,
    pub outcome: RunOutcome,
    /// The created job, or the active one a skipped run found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
    /// A failed run's error code (as `POST /v1/fetcher` would have answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// A failed run's message (the API's safe text, never a driver's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A sync's schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    pub tenant_id: String,
    pub sync_id: String,
    /// The product whose jobs it creates (`metadata.source` of its request).
    pub product: String,
    /// The job request, as `POST /v1/fetcher` takes it; validated when the schedule is set.
    pub request: serde_json::Value,
    pub cadence: Cadence,
    pub state: ScheduleState,
    /// When the schedule was set: a rate counts its periods from here.
    pub anchor: Timestamp,
    /// The next due time, jitter included (`None`: the cadence never fires again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<ScheduleRun>,
    /// Failed runs since the last run that created or skipped.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// Since when the sync is stale ([`Schedule::stale_by`]), while it is: its `sync.stale`
    /// event was sent when this was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_since: Option<Timestamp>,
    /// The write this record is: each write is conditional on the one before (1: first).
    pub version: u64,
    pub updated_at: Timestamp,
}

impl Schedule {
    /// The due time after `after`, with this sync's jitter.
    pub fn due_after(&self, after: Timestamp) -> Option<Timestamp> {
        let jitter = jitter_seconds(&self.tenant_id, &self.sync_id, &self.cadence);
        let jitter_ns = i128::from(jitter) * 1_000_000_000;
        // The cadence's own time is what the jitter delays: the next run is the first
        // cadence time whose delayed instant is after `after`.
        let base = Timestamp::from_unix_nanos(after.unix_nanos() - jitter_ns);
        let next = self.cadence.next_after(self.anchor, base)?;
        Some(Timestamp::from_unix_nanos(next.unix_nanos() + jitter_ns))
    }

    /// Whether a run is due at `now`.
    pub fn is_due(&self, now: Timestamp) -> bool {
        self.state == ScheduleState::Active && self.next_run_at.is_some_and(|t| t <= now)
    }

    /// Whether a caller naming `product` may see and change it.
    pub fn answers_to(&self, product: Option<&str>) -> bool {
        super::answers_to(&self.product, product)
    }

    /// Seconds at `now` since the sync's last completed job, or since the schedule's start
    /// when none completed since.
    pub fn age_seconds(&self, sync: Option<&super::SyncState>, now: Timestamp) -> u64 {
        let since = sync
            .and_then(|s| s.last_completed)
            .map_or(self.anchor, |(_, at)| at.max(self.anchor));
        now.seconds_since(since)
    }

    /// How far the sync is behind at `now`, in seconds, when it is stale: its
    /// [age](Self::age_seconds) is over [`STALE_AFTER_PERIODS`] periods of the cadence,
    /// jitter included. A paused schedule is never stale: its sync is not expected to move.
    pub fn stale_by(&self, sync: Option<&super::SyncState>, now: Timestamp) -> Option<u64> {
        if self.state != ScheduleState::Active {
            return None;
        }
        let age = self.age_seconds(sync, now);
        let allowed = self
            .cadence
            .period_seconds(now)
            .saturating_mul(STALE_AFTER_PERIODS)
            .saturating_add(jitter_seconds(
                &self.tenant_id,
                &self.sync_id,
                &self.cadence,
            ));
        (age > allowed).then_some(age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn rate(text: &str) -> Result<Cadence, CadenceError> {
        Cadence::parse(&CadenceSpec {
            rate: Some(text.into()),
            ..Default::default()
        })
    }

    fn cron(expr: &str, zone: Option<&str>) -> Result<Cadence, CadenceError> {
        Cadence::parse(&CadenceSpec {
            cron: Some(expr.into()),
            time_zone: zone.map(Into::into),
            ..Default::default()
        })
    }

    #[test]
    fn rates_are_iso_durations_of_a_minute_or_more() {
        assert!(matches!(
            rate("PT15M"),
            Ok(Cadence::Rate { seconds: 900, .. })
        ));
        assert!(matches!(
            rate("P1D"),
            Ok(Cadence::Rate {
                seconds: 86_400,
                ..
            })
        ));
        assert!(matches!(
            rate("P1W"),
            Ok(Cadence::Rate {
                seconds: 604_800,
                ..
            })
        ));
        assert!(matches!(
            rate("PT1H30M"),
            Ok(Cadence::Rate { seconds: 5_400, .. })
        ));
        assert_eq!(
            rate("PT59S"),
            Err(CadenceError::RateTooShort("PT59S".into()))
        );
        assert_eq!(rate("P1M"), Err(CadenceError::RateCalendar("P1M".into())));
        assert!(matches!(rate("15 minutes"), Err(CadenceError::Rate(..))));
        assert!(matches!(rate("-PT1H"), Err(CadenceError::Rate(..))));
        assert_eq!(
            Cadence::parse(&CadenceSpec::default()),
            Err(CadenceError::Neither)
        );
        assert_eq!(
            Cadence::parse(&CadenceSpec {
                rate: Some("PT1H".into()),
                cron: Some("0 * * * *".into()),
                ..Default::default()
            }),
            Err(CadenceError::Both)
        );
    }

    #[test]
    fn cron_expressions_have_five_fields_and_a_real_zone() {
        assert!(cron("0 6 * * 1-5", Some("Europe/Paris")).is_ok());
        assert!(matches!(cron("0 6 * *", None), Err(CadenceError::Cron(..))));
        assert!(matches!(
            cron("0 0 6 * * *", None),
            Err(CadenceError::Cron(..))
        ));
        assert!(matches!(
            cron("61 * * * *", None),
            Err(CadenceError::Cron(..))
        ));
        assert_eq!(
            cron("0 * * * *", Some("Mars/Olympus")),
            Err(CadenceError::Zone("Mars/Olympus".into()))
        );
    }

    #[test]
    fn a_rate_counts_whole_periods_from_its_anchor() {
        let c = rate("PT15M").unwrap();
        let anchor = at("2026-01-01T00:00:07Z");
        assert_eq!(
            c.next_after(anchor, anchor),
            Some(at("2026-01-01T00:15:07Z"))
        );
        // Asked just before its anchor (jitter moves the instant asked about back): still
        // the first period's end, never the anchor itself.
        assert_eq!(
            c.next_after(anchor, at("2026-01-01T00:00:00Z")),
            Some(at("2026-01-01T00:15:07Z"))
        );
        // Three hours of downtime: the next due time is the next one, not the missed ones.
        assert_eq!(
            c.next_after(anchor, at("2026-01-01T03:01:00Z")),
            Some(at("2026-01-01T03:15:07Z"))
        );
    }

    #[test]
    fn a_cron_expression_is_read_in_its_zone() {
        let c = cron("0 6 * * *", Some("Europe/Paris")).unwrap();
        let anchor = at("2026-01-01T00:00:00Z");
        // 06:00 in Paris is 05:00 UTC in winter, 04:00 UTC in summer.
        assert_eq!(
            c.next_after(anchor, at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T05:00:00Z"))
        );
        assert_eq!(
            c.next_after(anchor, at("2026-07-10T12:00:00Z")),
            Some(at("2026-07-11T04:00:00Z"))
        );
        assert_eq!(c.period_seconds(anchor), 86_400);
    }

    #[test]
    fn jitter_is_fixed_per_sync_and_bounded() {
        let hourly = cron("0 * * * *", None).unwrap();
        let a = jitter_seconds("t1", "s1", &hourly);
        assert_eq!(a, jitter_seconds("t1", "s1", &hourly));
        assert!(a < MAX_JITTER_SECONDS);
        let spread: std::collections::BTreeSet<u64> = (0..50)
            .map(|i| jitter_seconds("t1", &format!("s{i}"), &hourly))
            .collect();
        assert!(
            spread.len() > 10,
            "fifty syncs share few seconds: {spread:?}"
        );
        let minutely = rate("PT1M").unwrap();
        assert!(jitter_seconds("t1", "s1", &minutely) < 6);
    }

    #[test]
    fn a_cadence_round_trips_through_json() {
        let c = cron("*/5 * * * *", Some("America/New_York")).unwrap();
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"cron":"*/5 * * * *","timeZone":"America/New_York"}"#
        );
        assert_eq!(serde_json::from_str::<Cadence>(&json).unwrap(), c);
    }
}
