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

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, VecDeque},
};

pub use fleet::{CoverageScenario, Plan, ScenarioCronJob};
pub use profile::{PROFILES, Profile, profile};

use crate::trace::{KubeObject, SessionPod, SessionRecord, SessionState, TraceEntry, TraceEvent};
use fleet::{Concurrency, CronJobPlan, LEASE_DURATION_SECS, SESSION_NAMESPACE};
use rng::Rng;

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

/// A relist in progress: the objects that existed when it began, rendered one by one
/// (nothing changes while it runs: the event queue waits).
#[derive(Debug)]
struct Relist {
    epoch: i64,
    at_ms: i64,
    items: VecDeque<Item>,
}

/// An object of the simulated cluster.
#[derive(Debug, Clone, Copy)]
enum Item {
    Namespace(usize),
    CronJob(usize),
    Lease(usize),
    Job(u64),
    Pod(u64),
}

/// Who created a Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The CronJob of this index.
    Cron(usize),
    /// Bare Job of this index.
    Bare(usize),
}

/// How one pod attempt of a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Completed,
    Error,
    OomKilled,
    /// Runs until something stops it (the deadline).
    Overrun,
}

#[derive(Debug)]
struct CronState {
    rv: u64,
    last_schedule_ms: Option<i64>,
    last_successful_ms: Option<i64>,
    active: Vec<u64>,
    succeeded_history: VecDeque<u64>,
    failed_history: VecDeque<u64>,
}

#[derive(Debug)]
struct JobState {
    name: String,
    uid: String,
    owner: Owner,
    created_ms: i64,
    scheduled_ms: Option<i64>,
    rv: u64,
    start_ms: Option<i64>,
    active: u32,
    ready: u32,
    terminating: u32,
    succeeded: u32,
    failed: u32,
    uncounted_succeeded: Vec<String>,
    uncounted_failed: Vec<String>,
    /// The interim condition: (reason, when); `CompletionsReached` → SuccessCriteriaMet.
    target: Option<(&'static str, i64)>,
    /// The terminal condition: (success, reason, when).
    finished: Option<(bool, &'static str, i64)>,
    deletion_ms: Option<i64>,
    attempts: Vec<(Exit, i64)>,
    next_attempt: usize,
    pods: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

#[derive(Debug)]
enum PodKind {
    Job(u64),
    Session { session: String, namespace: String, requests: (u32, u32) },
}

#[derive(Debug)]
struct PodState {
    id: u64,
    name: String,
    uid: String,
    kind: PodKind,
    created_ms: i64,
    rv: u64,
    node: Option<String>,
    scheduled_ms: Option<i64>,
    running_ms: Option<i64>,
    phase: PodPhase,
    exit: Option<(i32, &'static str, i64)>,
    finalizer: bool,
    deletion_ms: Option<i64>,
    /// How long the container runs once started; `None`: until stopped.
    run_ms: Option<i64>,
    planned_exit: Exit,
}

impl PodState {
    fn host_ip(&self) -> String {
        let n = self.node.as_deref().and_then(|n| n.rsplit('-').next()).and_then(|n| n.parse::<u64>().ok());
        format!("10.0.{}.{}", n.unwrap_or(0) / 250, n.unwrap_or(0) % 250 + 2)
    }

    fn pod_ip(&self) -> String {
        format!("10.{}.{}.{}", 64 + (self.id >> 16) % 64, (self.id >> 8) % 256, self.id % 256)
    }
}

#[derive(Debug)]
struct LeaseState {
    name: &'static str,
    uid: String,
    rv: u64,
    holder: String,
    duration_secs: i64,
    acquire_ms: i64,
    renew_ms: i64,
    transitions: i64,
}

#[derive(Debug)]
struct SessionState0 {
    id: String,
    owner: String,
    pod: Option<u64>,
    pod_name: String,
    /// `updated_at` of its latest line: a host application's changes never go backwards.
    updated_ms: i64,
}

/// What happens next, and to whom.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Heartbeat,
    LeaseRenew(usize),
    LeaseHandover(usize),
    OutageStart(usize),
    OutageEnd(usize),
    WatcherDown(usize),
    WatcherUp(usize),
    Fire(usize),
    CreateBare(usize),
    // The CronJob controller starts the run of one schedule time.
    StartRun(usize, i64),
    // Controller-manager work (deferred while it is down).
    CreatePod(u64),
    JobReady(u64),
    JobCount(u64, u64),
    JobFinalize(u64, u64),
    JobDeadline(u64),
    CronSync(u64),
    TtlExpire(u64),
    GcPods(u64),
    // Scheduler and kubelet work.
    PodScheduled(u64),
    PodRunning(u64),
    PodExit(u64),
    PodGone(u64),
    // A host application.
    Session(usize, u8),
    OddPods(u8),
}

impl Ev {
    /// Work done by kube-controller-manager (stops during its outages).
    fn by_controller_manager(&self) -> bool {
        matches!(
            self,
            Ev::StartRun(..)
                | Ev::CreatePod(_)
                | Ev::JobReady(_)
                | Ev::JobCount(..)
                | Ev::JobFinalize(..)
                | Ev::JobDeadline(_)
                | Ev::CronSync(_)
                | Ev::TtlExpire(_)
                | Ev::GcPods(_)
        )
    }
}

/// The simulated cluster.
#[derive(Debug)]
struct Sim {
    profile: Profile,
    plan: Plan,
    rng: Rng,
    now: i64,
    seq: u64,
    rv: u64,
    next_id: u64,
    queue: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    namespaces: Vec<(String, String)>,
    crons: Vec<CronState>,
    jobs: BTreeMap<u64, JobState>,
    pods: BTreeMap<u64, PodState>,
    leases: Vec<LeaseState>,
    sessions: Vec<SessionState0>,
    watching: bool,
    epoch: i64,
    manager_down: bool,
    deferred: Vec<Ev>,
    stats: SimulationStats,
    nodes: u64,
    /// Pod specs of the CronJobs' templates, then of the bare Jobs'.
    pod_specs: Vec<k8s_openapi::api::core::v1::PodSpec>,
}

impl Sim {
    fn new(profile: Profile, plan: Plan, seed: u64) -> Sim {
        let mut rng = Rng::new(seed, 2);
        let start = plan.start_ms;
        let mut namespaces: Vec<(String, String)> =
            ["kube-system", SESSION_NAMESPACE].iter().map(|n| ((*n).to_owned(), rng.uuid())).collect();
        namespaces.extend(plan.namespaces.iter().map(|n| (n.clone(), rng.uuid())));
        let crons = plan
            .cronjobs
            .iter()
            .map(|c| {
                let last = (!c.suspend).then(|| c.schedule.last_at_or_before(start - 1));
                CronState {
                    rv: 0,
                    last_schedule_ms: last,
                    last_successful_ms: last.map(|t| t + c.run_secs * 1000 + 4_000),
                    active: Vec::new(),
                    succeeded_history: VecDeque::new(),
                    failed_history: VecDeque::new(),
                }
            })
            .collect();
        let leases = ["kube-controller-manager", "kube-scheduler"]
            .iter()
            .enumerate()
            .map(|(i, name)| LeaseState {
                name,
                uid: rng.uuid(),
                rv: 0,
                holder: format!("cp-{}_{}", i + 1, rng.uuid()),
                duration_secs: LEASE_DURATION_SECS,
                acquire_ms: start - rng.range(3_600_000, 30 * 86_400_000),
                renew_ms: start - rng.range(100, 1_900),
                transitions: rng.range(0, 6),
            })
            .collect();
        let nodes = u64::from(profile.cronjobs / 20).clamp(3, 1000);
        let pod_specs = plan
            .cronjobs
            .iter()
            .chain(plan.bare_jobs.iter().map(|b| &b.behavior))
            .map(render::pod_spec)
            .collect();
        let mut sim = Sim {
            profile,
            plan,
            rng,
            now: start,
            seq: 0,
            rv: 100_000,
            next_id: 0,
            queue: BinaryHeap::new(),
            namespaces,
            crons,
            jobs: BTreeMap::new(),
            pods: BTreeMap::new(),
            leases,
            sessions: Vec::new(),
            watching: false,
            epoch: 0,
            manager_down: false,
            deferred: Vec::new(),
            stats: SimulationStats::default(),
            nodes,
            pod_specs,
        };
        sim.stats.cronjobs = sim.plan.cronjobs.len() as u64;
        sim.stats.suspended_cronjobs = sim.plan.cronjobs.iter().filter(|c| c.suspend).count() as u64;
        for i in 0..sim.crons.len() {
            sim.crons[i].rv = sim.next_rv();
        }
        for i in 0..sim.leases.len() {
            sim.leases[i].rv = sim.next_rv();
        }
        // The watcher starts with a relist at the start; everything else follows it.
        sim.at(start, Ev::WatcherUp(usize::MAX));
        sim.at(start + 10_000, Ev::Heartbeat);
        for i in 0..sim.leases.len() {
            let first = sim.leases[i].renew_ms + sim.profile.lease_renew_ms;
            sim.at(first.max(start + 1), Ev::LeaseRenew(i));
        }
        for i in 0..sim.plan.cronjobs.len() {
            if !sim.plan.cronjobs[i].suspend {
                // A fire time at the very start is due too: the initial status says the
                // last schedule was before it (skipping it looked like a missed run).
                let t = sim.plan.cronjobs[i].schedule.next_at_or_after(start);
                sim.at(t, Ev::Fire(i));
            }
        }
        for i in 0..sim.plan.bare_jobs.len() {
            let t = sim.plan.bare_jobs[i].at_ms;
            sim.at(t, Ev::CreateBare(i));
        }
        for k in 0..sim.plan.outages.len() {
            let (a, b) = sim.plan.outages[k];
            sim.at(a, Ev::OutageStart(k));
            sim.at(b, Ev::OutageEnd(k));
        }
        for k in 0..sim.plan.watcher_gaps.len() {
            let (a, b) = sim.plan.watcher_gaps[k];
            sim.at(a, Ev::WatcherDown(k));
            sim.at(b, Ev::WatcherUp(k));
        }
        for i in 0..sim.plan.sessions.len() {
            let t = sim.plan.sessions[i];
            sim.at(t, Ev::Session(i, 0));
        }
        let span = sim.plan.end_ms - start;
        sim.at(start + span / 3, Ev::OddPods(0));
        // A graceful handover of the scheduler's lease, once, mid-trace.
        sim.at(start + span / 2 + 1_234, Ev::LeaseHandover(1));
        sim
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += self.rng.range(1, 7) as u64;
        self.rv
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn at(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t.max(self.now), self.seq, ev)));
    }

    fn after(&mut self, lo_ms: i64, hi_ms: i64, ev: Ev) {
        let t = self.now + self.rng.range(lo_ms, hi_ms);
        self.at(t, ev);
    }

    fn behavior(&self, owner: Owner) -> &CronJobPlan {
        match owner {
            Owner::Cron(i) => &self.plan.cronjobs[i],
            Owner::Bare(i) => &self.plan.bare_jobs[i].behavior,
        }
    }

    fn pod_spec(&self, owner: Owner) -> &k8s_openapi::api::core::v1::PodSpec {
        match owner {
            Owner::Cron(i) => &self.pod_specs[i],
            Owner::Bare(i) => &self.pod_specs[self.plan.cronjobs.len() + i],
        }
    }

    fn render(&self, item: Item) -> Option<KubeObject> {
        Some(match item {
            Item::Namespace(i) => {
                let (name, uid) = &self.namespaces[i];
                render::namespace(name, uid, 1000 + i as u64, self.plan.start_ms - 200 * 86_400_000)
            }
            Item::CronJob(i) => render::cronjob(self, i),
            Item::Lease(i) => render::lease(self, i),
            Item::Job(id) => {
                render::job(self, self.jobs.get(&id).filter(|j| j.deletion_ms != Some(i64::MIN))?)
            }
            Item::Pod(id) => render::pod(self, self.pods.get(&id)?),
        })
    }

    fn emit(&mut self, out: &mut VecDeque<TraceEntry>, item: Item, deleted: bool) {
        if !self.watching {
            return;
        }
        if let Some(o) = self.render(item) {
            let event = if deleted { TraceEvent::Deleted(o) } else { TraceEvent::Applied(o) };
            out.push_back(TraceEntry { observed_at_ms: self.now, event });
        }
    }

    fn touch_job(&mut self, id: u64, out: &mut VecDeque<TraceEntry>) {
        let rv = self.next_rv();
        if let Some(j) = self.jobs.get_mut(&id) {
            j.rv = rv;
            self.emit(out, Item::Job(id), false);
        }
    }

    fn touch_pod(&mut self, id: u64, out: &mut VecDeque<TraceEntry>) {
        let rv = self.next_rv();
        if let Some(p) = self.pods.get_mut(&id) {
            p.rv = rv;
            self.emit(out, Item::Pod(id), false);
        }
    }

    fn touch_cron(&mut self, i: usize, out: &mut VecDeque<TraceEntry>) {
        self.crons[i].rv = self.next_rv();
        self.emit(out, Item::CronJob(i), false);
    }

    /// Processes one event; returns a relist to stream when the watcher (re)starts.
    fn step(&mut self, ev: Ev, out: &mut VecDeque<TraceEntry>) -> Option<Relist> {
        if self.manager_down && ev.by_controller_manager() {
            // A run not started before the outage is a missed schedule; the controller
            // looks back when it returns.
            if !matches!(ev, Ev::StartRun(..)) {
                self.deferred.push(ev);
            }
            return None;
        }
        match ev {
            Ev::Heartbeat => {
                if self.watching {
                    self.stats.heartbeats += 1;
                    out.push_back(TraceEntry { observed_at_ms: self.now, event: TraceEvent::Heartbeat });
                }
                let next = self.now + self.profile.heartbeat_ms;
                self.at(next, Ev::Heartbeat);
            }
            Ev::LeaseRenew(i) => {
                if i == 0 && self.manager_down {
                    return None;
                }
                let now = self.now;
                let l = &mut self.leases[i];
                if l.holder.is_empty() {
                    return None;
                }
                l.renew_ms = now;
                self.stats.lease_renewals += 1;
                self.leases[i].rv = self.next_rv();
                self.emit(out, Item::Lease(i), false);
                let every = self.profile.lease_renew_ms;
                self.after(every - 40, every + 60, Ev::LeaseRenew(i));
            }
            Ev::LeaseHandover(i) => {
                // The holder releases (empty holder, duration 1 s), a new one acquires.
                let now = self.now;
                if self.leases[i].holder.is_empty() {
                    let holder = format!("cp-3_{}", self.rng.uuid());
                    let l = &mut self.leases[i];
                    l.holder = holder;
                    l.duration_secs = LEASE_DURATION_SECS;
                    l.acquire_ms = now;
                    l.renew_ms = now;
                    l.transitions += 1;
                    self.leases[i].rv = self.next_rv();
                    self.emit(out, Item::Lease(i), false);
                    let every = self.profile.lease_renew_ms;
                    self.after(every - 40, every + 60, Ev::LeaseRenew(i));
                } else {
                    let l = &mut self.leases[i];
                    l.holder = String::new();
                    l.duration_secs = 1;
                    l.acquire_ms = now;
                    l.renew_ms = now;
                    self.leases[i].rv = self.next_rv();
                    self.emit(out, Item::Lease(i), false);
                    self.after(800, 2_500, Ev::LeaseHandover(i));
                }
            }
            Ev::OutageStart(_) => {
                self.manager_down = true;
                self.stats.lease_outages += 1;
            }
            Ev::OutageEnd(_) => self.recover(out),
            Ev::WatcherDown(_) => self.watching = false,
            Ev::WatcherUp(k) => {
                self.watching = true;
                self.epoch += 1;
                if k != usize::MAX {
                    self.stats.relists += 1;
                }
                let mut items: VecDeque<Item> = (0..self.namespaces.len()).map(Item::Namespace).collect();
                items.extend((0..self.crons.len()).map(Item::CronJob));
                items.extend((0..self.leases.len()).map(Item::Lease));
                items.extend(self.jobs.keys().map(|id| Item::Job(*id)));
                items.extend(self.pods.keys().map(|id| Item::Pod(*id)));
                return Some(Relist { epoch: self.epoch, at_ms: self.now, items });
            }
            Ev::Fire(i) => {
                let schedule = self.plan.cronjobs[i].schedule;
                let next = schedule.next_at_or_after(self.now + 1);
                self.at(next, Ev::Fire(i));
                if self.manager_down {
                    // Missed; the controller looks back when it returns.
                    return None;
                }
                let scheduled = schedule.last_at_or_before(self.now);
                self.after(20, 400, Ev::StartRun(i, scheduled));
            }
            Ev::StartRun(i, scheduled) => self.start_scheduled(i, scheduled, out),
            Ev::CreateBare(b) => {
                self.stats.bare_jobs += 1;
                let name = self.plan.bare_jobs[b].name.clone();
                self.create_job(Owner::Bare(b), name, None, out);
            }
            Ev::CreatePod(job) => self.create_pod(job, out),
            Ev::JobReady(job) => {
                let j = self.jobs.get_mut(&job)?;
                if j.finished.is_some() || j.deletion_ms.is_some() || j.active == 0 {
                    return None;
                }
                j.ready = 1;
                self.touch_job(job, out);
            }
            Ev::JobCount(job, pod) => self.job_count(job, pod, out),
            Ev::JobFinalize(job, pod) => self.job_finalize(job, pod, out),
            Ev::JobDeadline(job) => {
                let now = self.now;
                let j = self.jobs.get_mut(&job)?;
                if j.finished.is_some() || j.target.is_some() || j.deletion_ms.is_some() {
                    return None;
                }
                j.target = Some(("DeadlineExceeded", now));
                let running: Vec<u64> = j.pods.clone();
                let mut killing = Vec::new();
                for p in running {
                    if let Some(pod) = self.pods.get_mut(&p)
                        && matches!(pod.phase, PodPhase::Pending | PodPhase::Running)
                        && pod.deletion_ms.is_none()
                    {
                        pod.deletion_ms = Some(now + 30_000);
                        killing.push(p);
                    }
                }
                let nothing_running = killing.is_empty();
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.terminating = killing.len() as u32;
                    j.ready = 0;
                    if nothing_running {
                        j.finished = Some((false, "DeadlineExceeded", now));
                        self.stats.deadline_exceeded += 1;
                    }
                }
                self.touch_job(job, out);
                if nothing_running {
                    self.on_finished(job, now);
                }
                for p in killing {
                    self.touch_pod(p, out);
                    self.after(300, 2_500, Ev::PodExit(p));
                }
            }
            Ev::CronSync(job) => self.cron_sync(job, out),
            Ev::TtlExpire(job) => {
                let now = self.now;
                let j = self.jobs.get_mut(&job)?;
                if j.deletion_ms.is_some() {
                    return None;
                }
                // Foreground deletion: the Job shows its deletionTimestamp until its pods are gone.
                j.deletion_ms = Some(now);
                let owner = j.owner;
                self.stats.ttl_deletions += 1;
                if let Owner::Cron(c) = owner {
                    self.crons[c].succeeded_history.retain(|x| *x != job);
                    self.crons[c].failed_history.retain(|x| *x != job);
                }
                self.touch_job(job, out);
                self.after(100, 600, Ev::GcPods(job));
            }
            Ev::GcPods(job) => {
                let now = self.now;
                let pods: Vec<u64> = self.jobs.get(&job).map(|j| j.pods.clone()).unwrap_or_default();
                let mut any = false;
                for p in pods {
                    let Some(pod) = self.pods.get_mut(&p) else { continue };
                    any = true;
                    if pod.deletion_ms.is_none() {
                        pod.deletion_ms = Some(now + 30_000);
                        // The garbage collector deletes orphans' finalizers with them.
                        pod.finalizer = false;
                        self.touch_pod(p, out);
                        if matches!(pod_phase(&self.pods, p), PodPhase::Running | PodPhase::Pending) {
                            self.after(500, 3_000, Ev::PodExit(p));
                        } else {
                            self.after(300, 2_000, Ev::PodGone(p));
                        }
                    }
                }
                if !any {
                    self.job_gone(job, out);
                }
            }
            Ev::PodScheduled(p) => {
                let node = format!("worker-{}", self.rng.below(self.nodes));
                let now = self.now;
                let pod = self.pods.get_mut(&p)?;
                if pod.deletion_ms.is_some() {
                    return None;
                }
                pod.node = Some(node);
                pod.scheduled_ms = Some(now);
                self.touch_pod(p, out);
                self.after(900, 4_000, Ev::PodRunning(p));
            }
            Ev::PodRunning(p) => {
                let now = self.now;
                let pod = self.pods.get_mut(&p)?;
                if pod.deletion_ms.is_some() || pod.phase != PodPhase::Pending {
                    return None;
                }
                pod.phase = PodPhase::Running;
                pod.running_ms = Some(now);
                let run = pod.run_ms;
                let job = match pod.kind {
                    PodKind::Job(j) => Some(j),
                    PodKind::Session { .. } => None,
                };
                self.touch_pod(p, out);
                if let Some(run) = run {
                    let t = now + run;
                    self.at(t, Ev::PodExit(p));
                }
                if let Some(j) = job {
                    self.after(15, 60, Ev::JobReady(j));
                }
            }
            Ev::PodExit(p) => self.pod_exit(p, out),
            Ev::PodGone(p) => {
                let pod = self.pods.get(&p)?;
                if pod.finalizer {
                    return None;
                }
                let job = match pod.kind {
                    PodKind::Job(j) => Some(j),
                    PodKind::Session { .. } => None,
                };
                let rv = self.next_rv();
                if let Some(pod) = self.pods.get_mut(&p) {
                    pod.rv = rv;
                }
                self.emit(out, Item::Pod(p), true);
                if !self.watching {
                    self.stats.deleted_while_unobserved += 1;
                }
                self.pods.remove(&p);
                if let Some(j) = job
                    && let Some(js) = self.jobs.get_mut(&j)
                {
                    js.pods.retain(|x| *x != p);
                    if js.deletion_ms.is_some() && js.pods.is_empty() {
                        self.job_gone(j, out);
                    }
                }
            }
            Ev::Session(i, step) => self.session_step(i, step, out),
            Ev::OddPods(step) => self.odd_pods(step, out),
        }
        None
    }

    /// The CronJob controller starts the run scheduled at `scheduled`, honouring the
    /// concurrency policy.
    fn start_scheduled(&mut self, i: usize, scheduled: i64, out: &mut VecDeque<TraceEntry>) {
        let policy = self.plan.cronjobs[i].concurrency;
        let active = self.crons[i].active.clone();
        if !active.is_empty() {
            match policy {
                Concurrency::Allow => {}
                Concurrency::Forbid => {
                    self.stats.forbid_skips += 1;
                    return;
                }
                Concurrency::Replace => {
                    for job in active {
                        self.stats.replaced += 1;
                        self.crons[i].active.retain(|x| *x != job);
                        self.delete_job_background(job, out);
                    }
                }
            }
        }
        let name = format!("{}-{}", self.plan.cronjobs[i].name, scheduled / 60_000);
        let job = self.create_job(Owner::Cron(i), name, Some(scheduled), out);
        let cs = &mut self.crons[i];
        cs.active.push(job);
        cs.last_schedule_ms = Some(scheduled);
        self.touch_cron(i, out);
    }

    fn create_job(
        &mut self,
        owner: Owner,
        name: String,
        scheduled: Option<i64>,
        out: &mut VecDeque<TraceEntry>,
    ) -> u64 {
        let id = self.next_id();
        let b = self.behavior(owner).clone();
        let roll = self.rng.below(1000) as u32;
        let failure = |rng: &mut Rng| if rng.chance(b.oom_per_mille) { Exit::OomKilled } else { Exit::Error };
        let mut attempts = Vec::new();
        let run = |rng: &mut Rng| (b.run_secs * 1000 * rng.range(70, 130) / 100).max(1_000);
        if b.active_deadline_secs.is_some() && roll < b.overrun_per_mille {
            attempts.push((Exit::Overrun, i64::MAX / 4));
        } else if roll < b.overrun_per_mille + b.fail_per_mille {
            for _ in 0..=b.backoff_limit {
                let e = failure(&mut self.rng);
                attempts.push((e, run(&mut self.rng) / 3));
            }
        } else if roll < b.overrun_per_mille + b.fail_per_mille + b.retry_per_mille && b.backoff_limit > 0 {
            let fails = self.rng.range(1, i64::from(b.backoff_limit));
            for _ in 0..fails {
                let e = failure(&mut self.rng);
                attempts.push((e, run(&mut self.rng) / 3));
            }
            attempts.push((Exit::Completed, run(&mut self.rng)));
        } else {
            attempts.push((Exit::Completed, run(&mut self.rng)));
        }
        if let (Owner::Cron(i), Some(t)) = (owner, scheduled)
            && self.plan.hangs(i, t)
        {
            // The coverage scenario's silent stop: the pod runs until the trace ends.
            attempts = vec![(Exit::Overrun, i64::MAX / 4)];
        }
        let rv = self.next_rv();
        let job = JobState {
            name,
            uid: self.rng.uuid(),
            owner,
            created_ms: self.now,
            scheduled_ms: scheduled,
            rv,
            start_ms: None,
            active: 0,
            ready: 0,
            terminating: 0,
            succeeded: 0,
            failed: 0,
            uncounted_succeeded: Vec::new(),
            uncounted_failed: Vec::new(),
            target: None,
            finished: None,
            deletion_ms: None,
            attempts,
            next_attempt: 0,
            pods: Vec::new(),
        };
        self.jobs.insert(id, job);
        self.stats.jobs_created += 1;
        self.emit(out, Item::Job(id), false);
        self.after(15, 80, Ev::CreatePod(id));
        id
    }

    fn create_pod(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(j) = self.jobs.get(&job) else { return };
        if j.finished.is_some() || j.target.is_some() || j.deletion_ms.is_some() {
            return;
        }
        let Some(&(exit, run_ms)) = j.attempts.get(j.next_attempt) else { return };
        let name = format!("{}-{}", j.name, self.rng.suffix(5));
        let first = j.start_ms.is_none();
        let deadline = self.behavior(j.owner).active_deadline_secs;
        let id =
            self.insert_pod(name, PodKind::Job(job), true, (exit != Exit::Overrun).then_some(run_ms), exit);
        let j = self.jobs.get_mut(&job).expect("checked above");
        j.next_attempt += 1;
        j.pods.push(id);
        j.active += 1;
        if first {
            j.start_ms = Some(now);
        }
        self.emit(out, Item::Pod(id), false);
        self.touch_job(job, out);
        if first && let Some(d) = deadline {
            self.at(now + d * 1000, Ev::JobDeadline(job));
        }
        self.after(5, 60, Ev::PodScheduled(id));
    }

    /// The kubelet reports the container's end (or kills it when the pod is being deleted).
    fn pod_exit(&mut self, p: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(pod) = self.pods.get_mut(&p) else { return };
        if pod.exit.is_some() || matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
            return;
        }
        let killed = pod.deletion_ms.is_some();
        let (code, reason, phase) = if killed {
            (143, "Error", PodPhase::Failed)
        } else {
            match pod.planned_exit {
                Exit::Completed => (0, "Completed", PodPhase::Succeeded),
                Exit::Error => (1, "Error", PodPhase::Failed),
                Exit::OomKilled => (137, "OOMKilled", PodPhase::Failed),
                Exit::Overrun => (143, "Error", PodPhase::Failed),
            }
        };
        let started = pod.running_ms.is_some();
        if started {
            pod.exit = Some((code, reason, now));
            match code {
                0 => self.stats.exits_completed += 1,
                1 => self.stats.exits_error += 1,
                137 => self.stats.exits_oom_killed += 1,
                _ => self.stats.exits_terminated += 1,
            }
        }
        pod.phase = phase;
        let job = match pod.kind {
            PodKind::Job(j) => Some(j),
            PodKind::Session { .. } => None,
        };
        let finalizer = pod.finalizer;
        self.touch_pod(p, out);
        match job {
            Some(j) if finalizer => self.after(10, 60, Ev::JobCount(j, p)),
            _ if killed => self.after(200, 1_500, Ev::PodGone(p)),
            _ => {}
        }
    }

    /// The Job controller sees a terminated pod: uncounted, and the interim condition when
    /// the outcome is decided.
    fn job_count(&mut self, job: u64, p: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(pod) = self.pods.get(&p) else { return };
        let (uid, ok) = (pod.uid.clone(), pod.phase == PodPhase::Succeeded);
        let backoff = self.jobs.get(&job).map(|j| self.behavior(j.owner).backoff_limit);
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.active = j.active.saturating_sub(1);
        j.ready = 0;
        j.terminating = j.terminating.saturating_sub(u32::from(pod.deletion_ms.is_some()));
        if ok {
            j.uncounted_succeeded.push(uid);
            if j.target.is_none() {
                j.target = Some(("CompletionsReached", now));
            }
        } else {
            j.uncounted_failed.push(uid);
            let failed = j.failed + j.uncounted_failed.len() as u32;
            if j.target.is_none() && failed > backoff.unwrap_or(0) {
                j.target = Some(("BackoffLimitExceeded", now));
            }
        }
        self.touch_job(job, out);
        self.after(10, 50, Ev::JobFinalize(job, p));
    }

    /// The Job controller removes the pod's tracking finalizer, counts it, and finishes the
    /// Job when its interim condition is set (or creates the next pod after a backoff).
    fn job_finalize(&mut self, job: u64, p: u64, out: &mut VecDeque<TraceEntry>) {
        if let Some(pod) = self.pods.get_mut(&p) {
            pod.finalizer = false;
            let deleting = pod.deletion_ms.is_some();
            self.touch_pod(p, out);
            if deleting {
                self.after(100, 1_000, Ev::PodGone(p));
            }
        }
        let now = self.now;
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.succeeded += j.uncounted_succeeded.len() as u32;
        j.failed += j.uncounted_failed.len() as u32;
        j.uncounted_succeeded.clear();
        j.uncounted_failed.clear();
        let mut finished = false;
        match j.target {
            Some(("CompletionsReached", at)) => {
                let _ = at;
                j.finished = Some((true, "CompletionsReached", now));
                finished = true;
                if j.failed == 0 {
                    self.stats.succeeded_first_try += 1;
                } else {
                    self.stats.succeeded_after_retries += 1;
                }
            }
            Some((reason, _)) if j.active == 0 => {
                j.finished = Some((false, reason, now));
                finished = true;
                if reason == "DeadlineExceeded" {
                    self.stats.deadline_exceeded += 1;
                } else {
                    self.stats.backoff_limit_exceeded += 1;
                }
            }
            Some(_) => {}
            None => {
                // Retry after the pod-failure backoff: 10 s doubling, capped at 6 min.
                let delay = (10_000i64 << (j.failed.saturating_sub(1)).min(6)).min(360_000);
                let t = now + delay + self.rng.range(0, 900);
                self.at(t, Ev::CreatePod(job));
            }
        }
        self.touch_job(job, out);
        if finished {
            self.on_finished(job, now);
        }
    }

    /// What follows a Job's terminal condition: the CronJob controller's sync and the
    /// TTL-after-finished countdown.
    fn on_finished(&mut self, job: u64, now: i64) {
        let Some(j) = self.jobs.get(&job) else { return };
        let owner = j.owner;
        if let Owner::Cron(_) = owner {
            self.after(10, 40, Ev::CronSync(job));
        }
        if let Some(ttl) = self.behavior(owner).ttl_secs {
            let t = now + ttl * 1000 + self.rng.range(0, 1_500);
            self.at(t, Ev::TtlExpire(job));
        }
    }

    /// The CronJob controller sees a finished Job: status, then history limits.
    fn cron_sync(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get(&job) else { return };
        let Owner::Cron(c) = j.owner else { return };
        let Some((success, _, at)) = j.finished else { return };
        let deleting = j.deletion_ms.is_some();
        let cs = &mut self.crons[c];
        cs.active.retain(|x| *x != job);
        if success {
            cs.last_successful_ms = Some(cs.last_successful_ms.map_or(at, |t| t.max(at)));
        }
        if !deleting {
            if success { cs.succeeded_history.push_back(job) } else { cs.failed_history.push_back(job) }
        }
        self.touch_cron(c, out);
        let plan = &self.plan.cronjobs[c];
        let (keep_ok, keep_failed) = (plan.successful_history as usize, plan.failed_history as usize);
        let mut doomed = Vec::new();
        let cs = &mut self.crons[c];
        while cs.succeeded_history.len() > keep_ok {
            doomed.extend(cs.succeeded_history.pop_front());
        }
        while cs.failed_history.len() > keep_failed {
            doomed.extend(cs.failed_history.pop_front());
        }
        for d in doomed {
            self.stats.history_deletions += 1;
            self.delete_job_background(d, out);
        }
    }

    /// Background deletion: the Job goes at once, the garbage collector deletes its pods.
    fn delete_job_background(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.deletion_ms.is_some() {
            return;
        }
        let rv = self.next_rv();
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.rv = rv;
        self.emit(out, Item::Job(job), true);
        if !self.watching {
            self.stats.deleted_while_unobserved += 1;
        }
        // Keep the state (pods render their owner from it) but mark it gone.
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.deletion_ms = Some(i64::MIN);
        self.after(200, 900, Ev::GcPods(job));
    }

    fn job_gone(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get(&job) else { return };
        if j.deletion_ms != Some(i64::MIN) {
            // Foreground: the finalizer is removed and the Job disappears.
            let rv = self.next_rv();
            if let Some(j) = self.jobs.get_mut(&job) {
                j.rv = rv;
            }
            self.emit(out, Item::Job(job), true);
            if !self.watching {
                self.stats.deleted_while_unobserved += 1;
            }
        }
        if !self.jobs[&job].pods.is_empty() {
            return;
        }
        if let Some(j) = self.jobs.remove(&job)
            && let Owner::Cron(c) = j.owner
        {
            self.crons[c].active.retain(|x| *x != job);
        }
    }

    /// The controller manager is back: a new holder acquires the lease, deferred work
    /// catches up, and each CronJob starts at most its most recent missed schedule.
    fn recover(&mut self, out: &mut VecDeque<TraceEntry>) {
        let (from, _) = self
            .plan
            .outages
            .iter()
            .copied()
            .find(|(a, b)| *a < self.now && *b >= self.now)
            .unwrap_or((self.now, self.now));
        self.manager_down = false;
        let now = self.now;
        let holder = format!("cp-2_{}", self.rng.uuid());
        let l = &mut self.leases[0];
        l.holder = holder;
        l.duration_secs = LEASE_DURATION_SECS;
        l.acquire_ms = now;
        l.renew_ms = now;
        l.transitions += 1;
        self.leases[0].rv = self.next_rv();
        self.emit(out, Item::Lease(0), false);
        let every = self.profile.lease_renew_ms;
        self.after(every - 40, every + 60, Ev::LeaseRenew(0));
        let deferred = std::mem::take(&mut self.deferred);
        for (k, ev) in deferred.into_iter().enumerate() {
            let t = now + 200 + (k as i64) * 3;
            self.at(t, ev);
        }
        let resume = now + 2_000 + self.rng.range(0, 1_000);
        for i in 0..self.crons.len() {
            let cj = &self.plan.cronjobs[i];
            if cj.suspend {
                continue;
            }
            let last_missed = cj.schedule.last_at_or_before(now);
            if last_missed < from {
                continue;
            }
            let missed = cj.schedule.fires_between(from, now + 1);
            let too_late = cj.starting_deadline_secs.is_some_and(|d| now - last_missed > d * 1000);
            self.stats.missed_schedules += missed - u64::from(!too_late);
            if !too_late {
                let t = resume + self.rng.range(0, 20_000);
                self.at(t, Ev::StartRun(i, last_missed));
            }
        }
    }

    /// A new Pending Pod, created now, unscheduled: its id (not emitted yet).
    fn insert_pod(
        &mut self,
        name: String,
        kind: PodKind,
        finalizer: bool,
        run_ms: Option<i64>,
        planned_exit: Exit,
    ) -> u64 {
        let id = self.next_id();
        let uid = self.rng.uuid();
        let rv = self.next_rv();
        let pod = PodState {
            id,
            name,
            uid,
            kind,
            created_ms: self.now,
            rv,
            node: None,
            scheduled_ms: None,
            running_ms: None,
            phase: PodPhase::Pending,
            exit: None,
            finalizer,
            deletion_ms: None,
            run_ms,
            planned_exit,
        };
        self.pods.insert(id, pod);
        self.stats.pods += 1;
        id
    }

    fn new_session_pod(
        &mut self,
        name: String,
        namespace: String,
        session: String,
        requests: (u32, u32),
        out: &mut VecDeque<TraceEntry>,
    ) -> u64 {
        let id = self.insert_pod(
            name,
            PodKind::Session { session, namespace, requests },
            false,
            None,
            Exit::Completed,
        );
        self.emit(out, Item::Pod(id), false);
        self.after(5, 80, Ev::PodScheduled(id));
        id
    }

    fn session_line(
        &mut self,
        i: usize,
        state: SessionState,
        with_uid: bool,
        out: &mut VecDeque<TraceEntry>,
    ) {
        // A little before it is published, and after the previous change.
        let updated_ms = (self.now - self.rng.range(50, 400)).max(self.sessions[i].updated_ms + 1);
        self.sessions[i].updated_ms = updated_ms;
        let s = &self.sessions[i];
        let uid = if with_uid { s.pod.and_then(|p| self.pods.get(&p)).map(|p| p.uid.clone()) } else { None };
        let record = SessionRecord {
            session_id: s.id.clone(),
            state,
            pod: SessionPod { namespace: SESSION_NAMESPACE.to_owned(), name: s.pod_name.clone(), uid },
            owner: s.owner.clone(),
            updated_at_ms: Some(updated_ms),
        };
        self.stats.session_updates += 1;
        // The host application publishes to Kafka directly: the watcher's gaps do not hide it.
        out.push_back(TraceEntry { observed_at_ms: self.now, event: TraceEvent::Session(record) });
    }

    /// One step of a session's life; variants by index show every retention case.
    fn session_step(&mut self, i: usize, step: u8, out: &mut VecDeque<TraceEntry>) {
        let variant = i % 6;
        match step {
            0 => {
                self.stats.sessions += 1;
                let id = format!("sess-{}", self.rng.hex(6));
                let owner = format!("tenant-{:04}", self.rng.below(200));
                let pod_name = format!("agent-{id}");
                self.sessions.push(SessionState0 {
                    id: id.clone(),
                    owner,
                    pod: None,
                    pod_name: pod_name.clone(),
                    updated_ms: i64::MIN,
                });
                debug_assert_eq!(self.sessions.len(), i + 1);
                let requests = (*self.rng.pick(&[250, 500, 1000, 0]), *self.rng.pick(&[512, 1024, 2048]));
                self.session_line(i, SessionState::Created, false, out);
                let p =
                    self.new_session_pod(pod_name, SESSION_NAMESPACE.to_owned(), id.clone(), requests, out);
                self.sessions[i].pod = Some(p);
                self.session_line(i, SessionState::Starting, false, out);
                self.after(5_000, 9_000, Ev::Session(i, 1));
                if i == 0 {
                    // A foreign pod carrying this session's label (a debug copy elsewhere).
                    self.new_session_pod(format!("debug-{id}"), "etl".into(), id, (100, 128), out);
                }
            }
            1 => {
                self.session_line(i, SessionState::Running, true, out);
                self.after(60_000, 600_000, Ev::Session(i, 2));
            }
            2 => {
                self.session_line(i, SessionState::WaitingForInput, true, out);
                if variant == 4 {
                    // Waits for input until the trace ends.
                    return;
                }
                self.after(30_000, 300_000, Ev::Session(i, 3));
            }
            3 => {
                self.session_line(i, SessionState::Idle, true, out);
                self.after(60_000, 900_000, Ev::Session(i, 4));
            }
            4 => {
                let state = match variant {
                    2 => SessionState::Failed,
                    3 => SessionState::Cancelled,
                    _ => SessionState::Completed,
                };
                self.session_line(i, state, true, out);
                let Some(p) = self.sessions[i].pod else { return };
                match variant {
                    // The pod ends by itself, and is deleted a while later.
                    0 | 2 => {
                        if let Some(pod) = self.pods.get_mut(&p) {
                            pod.planned_exit = if variant == 0 { Exit::Completed } else { Exit::Error };
                        }
                        self.after(1_000, 5_000, Ev::PodExit(p));
                        if variant == 0 {
                            self.after(600_000, 1_200_000, Ev::Session(i, 5));
                        }
                    }
                    // Retained compute: the pod keeps running after the session ended.
                    1 => {}
                    // Cancelled, or completed then released: the pod is deleted while running.
                    _ => self.after(2_000, 30_000, Ev::Session(i, 5)),
                }
            }
            _ => {
                let Some(p) = self.sessions[i].pod else { return };
                let now = self.now;
                let Some(pod) = self.pods.get_mut(&p) else { return };
                if pod.deletion_ms.is_some() {
                    return;
                }
                pod.deletion_ms = Some(now + 60_000);
                let running = pod.phase == PodPhase::Running || pod.phase == PodPhase::Pending;
                self.touch_pod(p, out);
                if running {
                    self.after(500, 5_000, Ev::PodExit(p));
                } else {
                    self.after(200, 1_000, Ev::PodGone(p));
                }
            }
        }
    }

    /// A labelled pod with no session record.
    fn odd_pods(&mut self, _step: u8, out: &mut VecDeque<TraceEntry>) {
        let id = format!("sess-orphan-{}", self.rng.hex(4));
        self.new_session_pod(format!("agent-{id}"), SESSION_NAMESPACE.to_owned(), id, (250, 512), out);
    }
}

fn pod_phase(pods: &BTreeMap<u64, PodState>, p: u64) -> PodPhase {
    pods.get(&p).map_or(PodPhase::Succeeded, |p| p.phase)
}

#[cfg(test)]
mod tests;
