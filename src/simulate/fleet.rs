//! The plan of a simulated fleet: which CronJobs exist, on which schedules, how they
//! behave, and how many runs their schedules fire in the simulated hours. Cheap to compute
//! (no objects are rendered), so the size of a profile can be checked without generating it.

use super::{Profile, rng::Rng};

/// A schedule template the simulator emits: its text, time zone, and its fire times as a
/// period and a phase in minutes of UTC (every template's period divides a day, and the
/// time zones used have fixed offsets, so this is exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The `spec.schedule` text.
    pub text: &'static str,
    /// The `spec.timeZone`, if any.
    pub time_zone: Option<&'static str>,
    /// Minutes between fire times.
    pub period_min: i64,
    /// Fire times are the UTC minutes `m` with `m % period_min == phase_min`.
    pub phase_min: i64,
}

/// The templates, in the order of [`Profile::schedule_weights`].
pub const SCHEDULES: [Schedule; 11] = [
    Schedule { text: "* * * * *", time_zone: None, period_min: 1, phase_min: 0 },
    Schedule { text: "*/5 * * * *", time_zone: None, period_min: 5, phase_min: 0 },
    Schedule { text: "*/15 * * * *", time_zone: None, period_min: 15, phase_min: 0 },
    Schedule { text: "7 * * * *", time_zone: None, period_min: 60, phase_min: 7 },
    Schedule { text: "@hourly", time_zone: None, period_min: 60, phase_min: 0 },
    Schedule { text: "30 */6 * * *", time_zone: None, period_min: 360, phase_min: 30 },
    Schedule { text: "0 3 * * *", time_zone: None, period_min: 1440, phase_min: 180 },
    Schedule { text: "@daily", time_zone: None, period_min: 1440, phase_min: 0 },
    // 7 past every hour in UTC+05:30 is 37 past in UTC.
    Schedule { text: "7 * * * *", time_zone: Some("Asia/Kolkata"), period_min: 60, phase_min: 37 },
    // 03:00 in UTC+09:00 is 18:00 UTC.
    Schedule { text: "0 3 * * *", time_zone: Some("Asia/Tokyo"), period_min: 1440, phase_min: 1080 },
    // 00:30, 06:30, … in UTC+05:30 are 01:00, 07:00, … UTC.
    Schedule { text: "30 */6 * * *", time_zone: Some("Asia/Kolkata"), period_min: 360, phase_min: 60 },
];

impl Schedule {
    /// The first fire time at or after `t_ms` (epoch ms), on a whole minute.
    pub fn next_at_or_after(&self, t_ms: i64) -> i64 {
        let m = t_ms.div_euclid(60_000) + i64::from(t_ms.rem_euclid(60_000) != 0);
        let rem = (m - self.phase_min).rem_euclid(self.period_min);
        let first = if rem == 0 { m } else { m + self.period_min - rem };
        first * 60_000
    }

    /// The last fire time at or before `t_ms`.
    pub fn last_at_or_before(&self, t_ms: i64) -> i64 {
        let m = t_ms.div_euclid(60_000);
        (m - (m - self.phase_min).rem_euclid(self.period_min)) * 60_000
    }

    /// How many fire times fall in `[from_ms, to_ms)`.
    pub fn fires_between(&self, from_ms: i64, to_ms: i64) -> u64 {
        let first = self.next_at_or_after(from_ms);
        if first >= to_ms {
            return 0;
        }
        ((to_ms - 1 - first) / (self.period_min * 60_000) + 1) as u64
    }
}

/// The schedule of the coverage scenario's [`STOPPED_NAME`] CronJob (not a fleet template).
pub const EVERY_10_MIN: Schedule =
    Schedule { text: "*/10 * * * *", time_zone: None, period_min: 10, phase_min: 0 };

/// `spec.concurrencyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Runs may overlap.
    Allow,
    /// A run is skipped while the previous one is active.
    Forbid,
    /// The active run is deleted and a new one started.
    Replace,
}

impl Concurrency {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Concurrency::Allow => "Allow",
            Concurrency::Forbid => "Forbid",
            Concurrency::Replace => "Replace",
        }
    }
}

/// One CronJob of the fleet, with how its runs behave.
#[derive(Debug, Clone)]
pub struct CronJobPlan {
    /// Index in [`Plan::cronjobs`].
    pub index: usize,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
    /// Created this long before the trace starts, seconds.
    pub age_secs: i64,
    /// Its schedule.
    pub schedule: Schedule,
    /// `spec.concurrencyPolicy`.
    pub concurrency: Concurrency,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline_secs: Option<i64>,
    /// `spec.successfulJobsHistoryLimit`.
    pub successful_history: u32,
    /// `spec.failedJobsHistoryLimit`.
    pub failed_history: u32,
    /// `spec.suspend`.
    pub suspend: bool,
    /// The Job template's `backoffLimit`.
    pub backoff_limit: u32,
    /// The Job template's `activeDeadlineSeconds`.
    pub active_deadline_secs: Option<i64>,
    /// The Job template's `ttlSecondsAfterFinished`.
    pub ttl_secs: Option<i64>,
    /// The container image.
    pub image: String,
    /// Requests: CPU millicores, memory MiB.
    pub requests: (u32, u32),
    /// Whether the pod template carries command, args and env.
    pub verbose: bool,
    /// Carries the opt-out annotation (on the CronJob itself).
    pub opt_out: bool,
    /// Carries the opt-out annotation on its pod template only.
    pub template_opt_out: bool,
    /// Typical container run time, seconds.
    pub run_secs: i64,
    /// Per mille of runs that need retries (and succeed).
    pub retry_per_mille: u32,
    /// Per mille of runs that exhaust the backoff limit.
    pub fail_per_mille: u32,
    /// Per mille of runs that overrun `activeDeadlineSeconds` (only with one set).
    pub overrun_per_mille: u32,
    /// Per mille of failed containers killed by the OOM killer (the rest exit 1).
    pub oom_per_mille: u32,
}

/// A bare Job (no owner), created once at `at_ms`.
#[derive(Debug, Clone)]
pub struct BareJobPlan {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Creation time, epoch ms.
    pub at_ms: i64,
    /// Its behaviour, as a CronJob's (schedule unused).
    pub behavior: CronJobPlan,
}

/// The fleet and its disturbances, decided from the profile and seed alone.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Trace start, epoch ms.
    pub start_ms: i64,
    /// Trace end (exclusive), epoch ms.
    pub end_ms: i64,
    /// Namespaces holding CronJobs (the opted-out one last).
    pub namespaces: Vec<String>,
    /// The CronJobs.
    pub cronjobs: Vec<CronJobPlan>,
    /// The bare Jobs.
    pub bare_jobs: Vec<BareJobPlan>,
    /// Controller-manager outages, `[from, to)` epoch ms.
    pub outages: Vec<(i64, i64)>,
    /// Watcher gaps, `[from, to)` epoch ms: nothing observed; a relist at `to`.
    pub watcher_gaps: Vec<(i64, i64)>,
    /// Session start times, epoch ms.
    pub sessions: Vec<i64>,
    /// The coverage scenario (its two CronJobs are the last two of [`Plan::cronjobs`]).
    scenario: CoverageScenario,
}

/// `leaseDurationSeconds` of both managers' Leases (the holder of an expired one is gone).
pub const LEASE_DURATION_SECS: i64 = 15;
/// Namespace of the coverage scenario's two CronJobs.
pub const SCENARIO_NAMESPACE: &str = "batch-ops";
/// The scenario CronJob that silently stops: `*/10 * * * *`, Forbid, one run hangs.
pub const STOPPED_NAME: &str = "report-export";
/// The scenario CronJob that is overdue only during controller-manager outages:
/// `*/5 * * * *`, Forbid, `startingDeadlineSeconds: 200`, always succeeds.
pub const OUTAGE_ONLY_NAME: &str = "frequent-sync";

/// One CronJob of the coverage scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioCronJob {
    /// Index in [`Plan::cronjobs`].
    pub index: usize,
    /// Namespace ([`SCENARIO_NAMESPACE`]).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (drawn from the seed's scenario stream, so fixed per seed).
    pub uid: String,
}

/// Two CronJobs in every trace whose fate is known in advance, for the `[coverage]`
/// processor's tests and the demo (see `docs/SIMULATE.md`, "The coverage scenario").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoverageScenario {
    /// [`STOPPED_NAME`]: runs every 10 min until the run scheduled at [`Self::stops_at_ms`]
    /// hangs (its pod runs forever); Forbid then skips every later schedule.
    pub stopped: ScenarioCronJob,
    /// Schedule time of the hanging run, epoch ms: at least 1 h after the trace start, 45 min
    /// clear of every outage and 1 h before the end. `None` when the trace has no such time
    /// (short traces): the CronJob then never stops.
    pub stops_at_ms: Option<i64>,
    /// [`OUTAGE_ONLY_NAME`]: every 5 min, always succeeds; no runs during an outage.
    pub outage_only: ScenarioCronJob,
    /// Controller-manager outages, `[from, to)` epoch ms (as [`Plan::outages`]): no Lease
    /// renewals, no CronJob or Job controller; at `to` a new holder acquires the Lease.
    pub outages: Vec<(i64, i64)>,
    /// Interval between kube-controller-manager Lease renewals, ms (± 60 ms).
    pub lease_renew_ms: i64,
    /// The Lease's `leaseDurationSeconds`: during an outage it expires this long after the
    /// last renewal.
    pub lease_duration_secs: i64,
}

/// The namespace whose annotation opts it out.
pub const OPT_OUT_NAMESPACE: &str = "billing-private";
/// Where session pods run.
pub const SESSION_NAMESPACE: &str = "agents";

const WORDS: [&str; 24] = [
    "report",
    "sync",
    "export",
    "backup",
    "index",
    "rollup",
    "billing",
    "invoice",
    "cleanup",
    "compact",
    "ingest",
    "digest",
    "audit",
    "rotate",
    "refresh",
    "snapshot",
    "reconcile",
    "metrics",
    "thumbnail",
    "mailer",
    "warmup",
    "scan",
    "archive",
    "prune",
];
const TEAMS: [&str; 8] = ["etl", "analytics", "platform", "ml", "payments", "search", "media", "growth"];

impl Plan {
    /// The plan of `profile` over `hours` from `start_ms`, for `seed`.
    pub fn new(profile: &Profile, hours: u32, seed: u64, start_ms: i64) -> Plan {
        let mut rng = Rng::new(seed, 1);
        let end_ms = start_ms + i64::from(hours) * 3_600_000;
        let span = end_ms - start_ms;
        let mut namespaces: Vec<String> = (0..profile.namespaces.max(1))
            .map(|i| {
                let team = TEAMS[i as usize % TEAMS.len()];
                if (i as usize) < TEAMS.len() { team.to_owned() } else { format!("{team}-{i:03}") }
            })
            .collect();
        namespaces.push(OPT_OUT_NAMESPACE.to_owned());
        let total_weight: u32 = profile.schedule_weights.iter().sum();
        let mut cronjobs = Vec::with_capacity(profile.cronjobs as usize);
        for i in 0..profile.cronjobs as usize {
            // Every template appears once before weighted picks begin.
            let schedule_index = if i < SCHEDULES.len() {
                i
            } else {
                let mut x = rng.below(u64::from(total_weight)) as u32;
                let mut k = 0;
                while x >= profile.schedule_weights[k] {
                    x -= profile.schedule_weights[k];
                    k += 1;
                }
                k
            };
            // The last namespace opts out; only a few CronJobs live there.
            let namespace = if i % 50 == 7 {
                OPT_OUT_NAMESPACE.to_owned()
            } else {
                namespaces[rng.below(namespaces.len() as u64 - 1) as usize].clone()
            };
            let mut cj = behavior(&mut rng, profile, i, SCHEDULES[schedule_index], namespace);
            // A few fixed roles, so even the small fleet shows each of them.
            match i {
                // Frequent and flaky, with a deadline: every outcome shows up in a day.
                1 => {
                    cj.retry_per_mille = 100;
                    cj.fail_per_mille = 50;
                    cj.overrun_per_mille = 40;
                    cj.backoff_limit = cj.backoff_limit.clamp(2, 3);
                    cj.active_deadline_secs = Some((cj.run_secs * 3).clamp(60, 240));
                    cj.oom_per_mille = 300;
                }
                3 => cj.opt_out = true,
                5 => cj.template_opt_out = true,
                // Low history limits and a short TTL: deletions of both kinds early on.
                2 => {
                    cj.successful_history = 1;
                    cj.ttl_secs = None;
                }
                4 => cj.ttl_secs = Some(300),
                _ => {}
            }
            cronjobs.push(cj);
        }
        let bare_jobs = (0..profile.bare_jobs as usize)
            .map(|i| {
                let namespace = namespaces[i % (namespaces.len() - 1)].clone();
                let mut b = behavior(&mut rng, profile, 1_000_000 + i, SCHEDULES[7], namespace.clone());
                b.run_secs = rng.range(60, 900);
                let at_ms = start_ms + rng.range(span / 20, span * 19 / 20);
                let name = match i % 3 {
                    0 => format!("backfill-{}-{i}", rng.suffix(4)),
                    1 => format!("migrate-db-{}", rng.hex(8)),
                    _ => format!("manual-{}-{}", WORDS[i % WORDS.len()], rng.suffix(5)),
                };
                b.name = name.clone();
                // The first bare Job always fails once and retries; the second runs out of
                // retries: bare Jobs report failures too.
                match i {
                    0 => b.retry_per_mille = 1000,
                    1 => {
                        b.fail_per_mille = 1000;
                        b.retry_per_mille = 0;
                    }
                    _ => {}
                }
                BareJobPlan { name, namespace, at_ms, behavior: b }
            })
            .collect();
        // Disturbances: outages and watcher gaps spread over the trace, at least half a slot
        // apart (so never overlapping once a slot is ≥ 52 min: 24 h in every profile, not
        // 6 h of medium or large).
        let slots = (profile.controller_outages + profile.watcher_restarts).max(1) as i64;
        // Lease history before the first outage: in a trace of 6 h or more nothing starts in
        // the first 2 h. The spread alone ensures that in long traces (their plans unchanged).
        let lead = if span >= 6 * HOUR && span / (slots + 1) * 3 / 4 < 2 * HOUR { 2 * HOUR } else { 0 };
        let slot = (span - lead) / (slots + 1);
        let mut outages = Vec::new();
        let mut watcher_gaps = Vec::new();
        for k in 0..slots {
            let base = start_ms + lead + slot * (k + 1) - slot / 4 + rng.range(0, slot / 2);
            let base = base - base.rem_euclid(1000) + rng.range(0, 999);
            if k % 2 == 0 && (outages.len() as u32) < profile.controller_outages
                || watcher_gaps.len() as u32 >= profile.watcher_restarts
            {
                outages
                    .push((base, base + i64::from(profile.outage_minutes) * 60_000 + rng.range(0, 59_999)));
            } else {
                watcher_gaps.push((base, base + rng.range(3 * 60_000, 9 * 60_000)));
            }
        }
        outages.truncate(profile.controller_outages as usize);
        watcher_gaps.truncate(profile.watcher_restarts as usize);
        let mut sessions: Vec<i64> = (0..profile.sessions)
            .map(|_| start_ms + rng.range(60_000, (span - 3 * 3_600_000).max(120_000)))
            .collect();
        sessions.sort_unstable();
        // The coverage scenario comes last, from its own stream: the fleet's draws above are
        // the same as without it.
        let mut srng = Rng::new(seed, 3);
        let mut scenario_cronjob = |name: &str, schedule: Schedule, run_secs: i64, deadline: Option<i64>| {
            let index = cronjobs.len();
            let cj = CronJobPlan {
                index,
                name: name.to_owned(),
                namespace: SCENARIO_NAMESPACE.to_owned(),
                uid: srng.uuid(),
                age_secs: 30 * 86_400,
                schedule,
                concurrency: Concurrency::Forbid,
                starting_deadline_secs: deadline,
                successful_history: 3,
                failed_history: 1,
                suspend: false,
                backoff_limit: 2,
                // No deadline: a hanging run hangs for good.
                active_deadline_secs: None,
                ttl_secs: None,
                image: format!("registry.example.com/{SCENARIO_NAMESPACE}/{name}:1.4.2"),
                requests: (100, 128),
                verbose: false,
                opt_out: false,
                template_opt_out: false,
                run_secs,
                retry_per_mille: 0,
                fail_per_mille: 0,
                overrun_per_mille: 0,
                oom_per_mille: 0,
            };
            let entry = ScenarioCronJob {
                index,
                namespace: cj.namespace.clone(),
                name: cj.name.clone(),
                uid: cj.uid.clone(),
            };
            cronjobs.push(cj);
            entry
        };
        // Runs of 63–117 s and 32–58 s (run_secs ± 30 %).
        let stopped = scenario_cronjob(STOPPED_NAME, EVERY_10_MIN, 90, None);
        let outage_only = scenario_cronjob(OUTAGE_ONLY_NAME, SCHEDULES[1], 45, Some(200));
        namespaces.insert(namespaces.len() - 1, SCENARIO_NAMESPACE.to_owned());
        let scenario = CoverageScenario {
            stopped,
            stops_at_ms: stop_time(start_ms, end_ms, &outages, &watcher_gaps),
            outage_only,
            outages: outages.clone(),
            lease_renew_ms: profile.lease_renew_ms,
            lease_duration_secs: LEASE_DURATION_SECS,
        };
        Plan { start_ms, end_ms, namespaces, cronjobs, bare_jobs, outages, watcher_gaps, sessions, scenario }
    }

    /// The coverage scenario of this plan.
    pub fn scenario(&self) -> &CoverageScenario {
        &self.scenario
    }

    /// Whether the run of CronJob `i` scheduled at `scheduled` hangs: the stopped scenario
    /// CronJob's first run at or after its stop time.
    pub fn hangs(&self, i: usize, scheduled: i64) -> bool {
        i == self.scenario.stopped.index && self.scenario.stops_at_ms.is_some_and(|t| scheduled >= t)
    }

    /// Schedule fire times of unsuspended CronJobs inside the trace: the runs the fleet
    /// would finish with no outage, no Forbid skips and no run still going at the end.
    pub fn planned_runs(&self) -> u64 {
        self.cronjobs
            .iter()
            .filter(|c| !c.suspend)
            .map(|c| c.schedule.fires_between(self.start_ms, self.end_ms))
            .sum::<u64>()
            + self.bare_jobs.len() as u64
    }
}

const HOUR: i64 = 3_600_000;

/// The stopped scenario CronJob's hanging schedule time: the first `*/10` fire time at or
/// after a third of the trace that is ≥ 1 h after the start, ≥ 1 h before the end, 45 min
/// clear of every outage (so the lease is renewed while the CronJob is overdue) and 5 min
/// clear of watcher gaps (the hanging Job's creation is observed); failing that, the latest
/// such time before a third of the trace; `None` if there is none.
fn stop_time(start_ms: i64, end_ms: i64, outages: &[(i64, i64)], gaps: &[(i64, i64)]) -> Option<i64> {
    let clear = |t: i64, windows: &[(i64, i64)], margin: i64| {
        windows.iter().all(|&(a, b)| t + margin <= a || t >= b + margin)
    };
    let ok = |t: &i64| clear(*t, outages, 45 * 60_000) && clear(*t, gaps, 5 * 60_000);
    let (lo, hi) = (start_ms + HOUR, end_ms - HOUR);
    let step = EVERY_10_MIN.period_min * 60_000;
    let preferred = EVERY_10_MIN.next_at_or_after((start_ms + (end_ms - start_ms) / 3).max(lo));
    let later = (0..).map(|k| preferred + k * step).take_while(|t| *t <= hi);
    let earlier = (1..).map(|k| preferred - k * step).take_while(|t| *t >= lo);
    later.chain(earlier).find(ok)
}

fn behavior(
    rng: &mut Rng,
    profile: &Profile,
    i: usize,
    schedule: Schedule,
    namespace: String,
) -> CronJobPlan {
    let word = WORDS[rng.below(WORDS.len() as u64) as usize];
    let word2 = WORDS[rng.below(WORDS.len() as u64) as usize];
    let name = format!("{word}-{word2}-{i}");
    let period_secs = schedule.period_min * 60;
    // Runs fit comfortably in their period: an every-minute job runs seconds.
    let run_secs = match schedule.period_min {
        1 => rng.range(2, 25),
        5 => rng.range(5, 90),
        15 => rng.range(10, 240),
        _ => rng.range(15, 600),
    };
    let flaky = rng.chance(profile.flaky_per_mille) || i < 12 && i % 3 == 1;
    let active_deadline_secs = if rng.chance(300) || i % 4 == 2 {
        Some((run_secs * 3).clamp(30, period_secs.max(60)))
    } else {
        None
    };
    let ttl_secs = if rng.chance(250) || i % 6 == 4 { Some(*rng.pick(&[300, 3600, 86_400])) } else { None };
    let concurrency = match rng.below(10) {
        0..=5 => Concurrency::Forbid,
        6..=8 => Concurrency::Allow,
        _ => Concurrency::Replace,
    };
    CronJobPlan {
        index: i,
        uid: rng.uuid(),
        name,
        namespace,
        age_secs: rng.range(86_400, 400 * 86_400),
        schedule,
        concurrency,
        starting_deadline_secs: if rng.chance(500) { Some(*rng.pick(&[60, 300, 3600])) } else { None },
        successful_history: *rng.pick(&[1, 3, 3, 3, 5]),
        failed_history: *rng.pick(&[1, 1, 3]),
        suspend: i > 12 && rng.chance(profile.suspended_per_mille) || i == 12,
        backoff_limit: *rng.pick(&[0, 1, 2, 3, 6]).max(&if flaky { 2 } else { 0 }),
        active_deadline_secs,
        ttl_secs,
        image: format!(
            "registry.example.com/{word}/{word2}:{}.{}.{}",
            rng.below(4),
            rng.below(20),
            rng.below(10)
        ),
        requests: (*rng.pick(&[50, 100, 250, 500, 1000]), *rng.pick(&[64, 128, 256, 512, 1024])),
        verbose: rng.chance(profile.verbose_template_per_mille),
        opt_out: false,
        template_opt_out: false,
        run_secs,
        retry_per_mille: if flaky { rng.range(40, 200) as u32 } else { 4 },
        fail_per_mille: if flaky { rng.range(20, 100) as u32 } else { 1 },
        overrun_per_mille: if flaky { rng.range(20, 80) as u32 } else { 1 },
        oom_per_mille: rng.range(100, 400) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{START_MS, profile};

    #[test]
    fn simulate_schedules_fire_on_their_minutes() {
        let every5 = SCHEDULES[1];
        assert_eq!(every5.next_at_or_after(START_MS + 1), START_MS + 5 * 60_000);
        assert_eq!(every5.next_at_or_after(START_MS), START_MS);
        assert_eq!(every5.last_at_or_before(START_MS + 9 * 60_000), START_MS + 5 * 60_000);
        assert_eq!(every5.fires_between(START_MS, START_MS + 3_600_000), 12);
        let tokyo = SCHEDULES[9];
        assert_eq!(tokyo.next_at_or_after(START_MS), START_MS + 18 * 3_600_000);
        assert_eq!(SCHEDULES[0].fires_between(START_MS, START_MS + 86_400_000), 1440);
    }

    #[test]
    fn simulate_large_plan_has_the_promised_size() {
        let p = profile("large").unwrap();
        let plan = Plan::new(&p, p.default_hours, 1, START_MS);
        assert!(plan.cronjobs.len() >= 20_000, "{} CronJobs", plan.cronjobs.len());
        let runs = plan.planned_runs();
        assert!(runs >= 1_000_000, "{runs} planned runs");
        assert!(plan.bare_jobs.len() >= 100);
        assert!(!plan.outages.is_empty() && plan.watcher_gaps.len() >= 3);
        assert!(plan.outages.iter().all(|(a, b)| b - a >= 20 * 60_000));
    }

    #[test]
    fn simulate_plans_are_fixed_per_seed() {
        let p = profile("small").unwrap();
        let a = Plan::new(&p, 24, 5, START_MS);
        let b = Plan::new(&p, 24, 5, START_MS);
        let c = Plan::new(&p, 24, 6, START_MS);
        let names = |p: &Plan| p.cronjobs.iter().map(|c| c.uid.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), names(&b));
        assert_ne!(names(&a), names(&c));
        assert_eq!(a.outages, b.outages);
    }
}
