//! `serve`'s scheduler (docs/api.md, "Schedules"): every tick, the schedules due now run
//! through [`fetcher_http::schedules::run_due`], on the same runtime as the workers. Two
//! `serve`s never share a data directory (its lock), but the runs would stay one per due
//! time if they did: each is claimed by a conditional write.

use std::time::{Duration, Instant};

use fetcher_engine::Timestamp;
use fetcher_http::AppState;
use tokio::sync::watch;
use tracing::{info, warn};

/// The scheduler's clock: real time, or (a test harness setting) time that runs `speed`
/// times faster from the start, so a schedule of minutes runs in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    started: Instant,
    at_start: Timestamp,
    speed: f64,
}

impl Clock {
    pub fn new(speed: f64) -> Clock {
        Clock {
            started: Instant::now(),
            at_start: Timestamp::now(),
            speed,
        }
    }

    pub fn now(&self) -> Timestamp {
        let elapsed = self.started.elapsed().as_secs_f64() * self.speed;
        Timestamp::from_unix_nanos(self.at_start.unix_nanos() + (elapsed * 1e9) as i128)
    }
}

/// Runs due schedules every `tick` until `stop` turns true; a host that is draining
/// creates no job. A failed tick is logged and the next one tries again.
pub async fn run(state: AppState, tick: Duration, clock: Clock, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        if state.is_draining() {
            continue;
        }
        match fetcher_http::schedules::run_due(&state, clock.now()).await {
            Ok(report) if report.created + report.skipped + report.failed > 0 => info!(
                created = report.created,
                skipped = report.skipped,
                failed = report.failed,
                "schedules ran"
            ),
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e.log_detail(), "the scheduler's tick failed; the next one retries")
            }
        }
        if let Err(e) = fetcher_http::schedules::record_freshness(&state, clock.now()).await {
            warn!(error = %e.log_detail(), "the syncs' freshness could not be read");
        }
    }
}
