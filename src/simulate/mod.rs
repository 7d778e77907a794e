//! `kubefacts simulate`: a deterministic cluster trace of a batch fleet.
//!
//! The generator is pure (no I/O, no clock, no hash-order iteration): a [`Plan`] decides
//! from a [`Profile`] and a seed which CronJobs, bare Jobs, sessions, outages and watcher
//! gaps exist; a discrete-event simulation then plays the Kubernetes controllers (CronJob,
//! Job, TTL-after-finished, garbage collector), the scheduler, the kubelet, the managers'
//! Lease renewals, a host application's sessions and the watcher (heartbeats, restarts with
//! relists) in stream-time order, yielding [`TraceEntry`] values as the watcher would
//! have observed them. Events wait in a priority queue keyed by (time, sequence), so ties
//! break in the order they were scheduled and `observed_at` never decreases.
//!
//! What each profile contains is described in `docs/SIMULATE.md`.

pub mod fleet;
mod profile;
mod render;
pub mod rng;

// The simulated cluster, and one file per controller that plays a part in it.
mod cluster;
mod cronjob;
mod gc;
mod job;
mod kubelet;
mod lease;
mod outage;
mod scheduler;
mod sessions;
mod state;
mod ttl;
mod watcher;

use std::{cmp::Reverse, collections::VecDeque};

pub use fleet::{CoverageScenario, Plan, ScenarioCronJob};
pub use profile::{PROFILES, Profile, profile};

use crate::trace::{TraceEntry, TraceEvent};
use cluster::Sim;
use state::*;

/// Where every simulated trace starts: 2026-11-01T00:00:00Z, epoch ms.
pub const START_MS: i64 = 1_793_491_200_000;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The profile name is not one of [`PROFILES`].
    #[error("unknown profile {name:?} (known: small, medium, large)")]
    UnknownProfile {
        /// The name asked for.
        name: String,
    },
    /// `--hours` is zero or too large.
    #[error("hours must be between 1 and 8760, got {hours}")]
    InvalidHours {
        /// The hours asked for.
        hours: u32,
    },
}

impl SimulateError {
    /// A bounded label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            SimulateError::UnknownProfile { .. } => "unknown_profile",
            SimulateError::InvalidHours { .. } => "invalid_hours",
        }
    }
}

/// What a simulation generated so far (complete once the iterator has ended).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulationStats {
    /// Trace entries yielded.
    pub entries: u64,
    /// CronJobs in the fleet.
    pub cronjobs: u64,
    /// Of which suspended.
    pub suspended_cronjobs: u64,
    /// Bare Jobs created.
    pub bare_jobs: u64,
    /// Jobs created (by the CronJob controller or bare).
    pub jobs_created: u64,
    /// Runs that succeeded with their first pod.
    pub succeeded_first_try: u64,
    /// Runs that succeeded after failed pods.
    pub succeeded_after_retries: u64,
    /// Runs failed with `BackoffLimitExceeded`.
    pub backoff_limit_exceeded: u64,
    /// Runs failed with `DeadlineExceeded`.
    pub deadline_exceeded: u64,
    /// Schedules skipped because a Forbid CronJob's previous run was active.
    pub forbid_skips: u64,
    /// Active runs deleted by a Replace CronJob.
    pub replaced: u64,
    /// Schedules missed during an outage and never started (beyond startingDeadlineSeconds,
    /// or not the most recent missed one).
    pub missed_schedules: u64,
    /// Pods created (job pods, session pods and the odd ones).
    pub pods: u64,
    /// Container exits with 0/Completed.
    pub exits_completed: u64,
    /// Container exits with 1/Error.
    pub exits_error: u64,
    /// Container exits with 137/OOMKilled.
    pub exits_oom_killed: u64,
    /// Container exits with 143/Error (terminated on deletion or deadline).
    pub exits_terminated: u64,
    /// Jobs deleted by the CronJob controller beyond its history limits.
    pub history_deletions: u64,
    /// Jobs deleted by the TTL-after-finished controller.
    pub ttl_deletions: u64,
    /// Objects deleted while the watcher was down (absent from the next relist).
    pub deleted_while_unobserved: u64,
    /// Relists after the initial snapshot.
    pub relists: u64,
    /// Controller-manager outages.
    pub lease_outages: u64,
    /// Lease renewals (observed or not).
    pub lease_renewals: u64,
    /// Sessions started.
    pub sessions: u64,
    /// SESSION lines.
    pub session_updates: u64,
    /// HEARTBEAT lines.
    pub heartbeats: u64,
}

impl SimulationStats {
    /// Finished runs, all outcomes.
    pub fn finished_runs(&self) -> u64 {
        self.succeeded_first_try
            + self.succeeded_after_retries
            + self.backoff_limit_exceeded
            + self.deadline_exceeded
    }
}

/// Validates `hours` for [`simulate`].
pub fn check_hours(hours: u32) -> Result<u32, SimulateError> {
    if (1..=8760).contains(&hours) { Ok(hours) } else { Err(SimulateError::InvalidHours { hours }) }
}

/// A simulation of `profile` over `hours` (clamped to 1..=8760) for `seed`, starting at
/// [`START_MS`]: an iterator of trace entries in `observed_at` order.
pub fn simulate(profile: &Profile, hours: u32, seed: u64) -> Simulation {
    simulate_from(profile, hours, seed, START_MS)
}

/// As [`simulate`], starting at `start_ms` (epoch ms; rounded down to a whole minute).
pub fn simulate_from(profile: &Profile, hours: u32, seed: u64, start_ms: i64) -> Simulation {
    let start_ms = start_ms - start_ms.rem_euclid(60_000);
    let plan = Plan::new(profile, hours.clamp(1, 8760), seed, start_ms);
    Simulation { sim: Sim::new(profile.clone(), plan, seed), out: VecDeque::new(), relist: None }
}

/// The iterator [`simulate`] returns.
#[derive(Debug)]
pub struct Simulation {
    sim: Sim,
    out: VecDeque<TraceEntry>,
    relist: Option<Relist>,
}

impl Simulation {
    /// Counts so far; complete after the iterator has ended.
    pub fn stats(&self) -> &SimulationStats {
        &self.sim.stats
    }

    /// The plan being played.
    pub fn plan(&self) -> &Plan {
        &self.sim.plan
    }
}

impl Iterator for Simulation {
    type Item = TraceEntry;

    fn next(&mut self) -> Option<TraceEntry> {
        loop {
            if let Some(e) = self.out.pop_front() {
                self.sim.stats.entries += 1;
                return Some(e);
            }
            if let Some(relist) = &mut self.relist {
                let at = relist.at_ms;
                let event = match relist.items.pop_front() {
                    Some(item) => match self.sim.render(item) {
                        Some(o) => TraceEvent::Applied(o),
                        None => continue,
                    },
                    None => {
                        let epoch = relist.epoch;
                        self.relist = None;
                        TraceEvent::SnapshotEnd { epoch, kinds: None }
                    }
                };
                self.sim.stats.entries += 1;
                return Some(TraceEntry { observed_at_ms: at, event });
            }
            let Reverse((at, _, ev)) = self.sim.queue.pop()?;
            if at >= self.sim.plan.end_ms {
                self.sim.queue.clear();
                return None;
            }
            self.sim.now = at.max(self.sim.now);
            if let Some(relist) = self.sim.step(ev, &mut self.out) {
                self.out.push_back(TraceEntry {
                    observed_at_ms: at,
                    event: TraceEvent::SnapshotBegin { epoch: relist.epoch, kinds: None },
                });
                self.relist = Some(relist);
            }
        }
    }
}

#[cfg(test)]
mod tests;
