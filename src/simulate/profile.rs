//! The named fleet profiles `kubefacts simulate --profile` knows (see `docs/SIMULATE.md`).

use super::SimulateError;

/// The profile names, smallest first.
pub const PROFILES: [&str; 3] = ["small", "medium", "large"];

/// What a simulated cluster contains and how it misbehaves. Every knob is a count or a
/// rate; the seed decides the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name (`small`, `medium`, `large`).
    pub name: &'static str,
    /// Hours simulated when `--hours` is not given.
    pub default_hours: u32,
    /// CronJobs in the fleet (suspended and opted-out ones included).
    pub cronjobs: u32,
    /// Team namespaces the CronJobs spread over (besides `agents`, `kube-system` and the
    /// opted-out `billing-private`).
    pub namespaces: u32,
    /// Weights of [`super::fleet::SCHEDULES`], in that order, for CronJobs after the
    /// first eleven (which take each template once).
    pub schedule_weights: [u32; 11],
    /// Per mille of CronJobs that are suspended (no runs).
    pub suspended_per_mille: u32,
    /// Per mille of CronJobs that are flaky (retries, failures, deadlines).
    pub flaky_per_mille: u32,
    /// Bare Jobs (no owner) created over the trace.
    pub bare_jobs: u32,
    /// Host-application sessions started over the trace.
    pub sessions: u32,
    /// Watcher restarts (each a gap, then a relist with a new epoch).
    pub watcher_restarts: u32,
    /// kube-controller-manager outages (no lease renewals, no CronJob/Job controller).
    pub controller_outages: u32,
    /// Length of each controller-manager outage, minutes.
    pub outage_minutes: u32,
    /// Interval between Lease renewals, milliseconds (the managers' retryPeriod).
    pub lease_renew_ms: i64,
    /// Interval between HEARTBEAT lines, milliseconds (the watcher's default is 10 s).
    pub heartbeat_ms: i64,
    /// Per mille of CronJobs whose pod template carries command, args and env (with
    /// secret-looking values); the rest carry only image and resources, to keep lines lean.
    pub verbose_template_per_mille: u32,
}

/// The named profile.
pub fn profile(name: &str) -> Result<Profile, SimulateError> {
    // Order of weights: * * * * *, */5, */15, 7 * * * *, @hourly, 30 */6, 0 3 * * *,
    // @daily, 7 * * * * (Asia/Kolkata), 0 3 * * * (Asia/Tokyo), 30 */6 (Asia/Kolkata).
    match name {
        "small" => Ok(Profile {
            name: "small",
            default_hours: 24,
            cronjobs: 36,
            namespaces: 4,
            schedule_weights: [0, 0, 1, 6, 6, 4, 3, 3, 2, 2, 2],
            suspended_per_mille: 50,
            flaky_per_mille: 200,
            bare_jobs: 6,
            sessions: 12,
            watcher_restarts: 2,
            controller_outages: 1,
            outage_minutes: 25,
            lease_renew_ms: 10_000,
            heartbeat_ms: 10_000,
            verbose_template_per_mille: 1000,
        }),
        "medium" => Ok(Profile {
            name: "medium",
            default_hours: 24,
            cronjobs: 2_000,
            namespaces: 40,
            schedule_weights: [6, 60, 100, 250, 200, 130, 110, 100, 20, 13, 11],
            suspended_per_mille: 20,
            flaky_per_mille: 100,
            bare_jobs: 40,
            sessions: 60,
            watcher_restarts: 3,
            controller_outages: 1,
            outage_minutes: 25,
            lease_renew_ms: 2_000,
            heartbeat_ms: 10_000,
            verbose_template_per_mille: 200,
        }),
        "large" => Ok(Profile {
            name: "large",
            default_hours: 24,
            cronjobs: 20_000,
            namespaces: 200,
            schedule_weights: [20, 100, 150, 200, 150, 120, 100, 110, 20, 15, 15],
            suspended_per_mille: 20,
            flaky_per_mille: 80,
            bare_jobs: 400,
            sessions: 300,
            watcher_restarts: 3,
            controller_outages: 2,
            outage_minutes: 25,
            lease_renew_ms: 2_000,
            heartbeat_ms: 10_000,
            verbose_template_per_mille: 50,
        }),
        other => Err(SimulateError::UnknownProfile { name: other.to_owned() }),
    }
}
