//! The simulated cluster's state, its event queue, and the dispatch of each event to
//! the controller that handles it (one file per controller beside this one).

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, VecDeque},
};

use super::{
    CronState, Ev, Exit, Item, JobState, LeaseState, Owner, PodKind, PodPhase, PodState, Profile, Relist,
    SessionState0, SimulationStats,
    fleet::{CronJobPlan, LEASE_DURATION_SECS, Plan, SESSION_NAMESPACE},
    render,
    rng::Rng,
};
use crate::trace::{KubeObject, TraceEntry, TraceEvent};

/// The simulated cluster.
#[derive(Debug)]
pub(super) struct Sim {
    pub(super) profile: Profile,
    pub(super) plan: Plan,
    pub(super) rng: Rng,
    pub(super) now: i64,
    pub(super) seq: u64,
    pub(super) rv: u64,
    pub(super) next_id: u64,
    pub(super) queue: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    pub(super) namespaces: Vec<(String, String)>,
    pub(super) crons: Vec<CronState>,
    pub(super) jobs: BTreeMap<u64, JobState>,
    pub(super) pods: BTreeMap<u64, PodState>,
    pub(super) leases: Vec<LeaseState>,
    pub(super) sessions: Vec<SessionState0>,
    pub(super) watching: bool,
    pub(super) epoch: i64,
    pub(super) manager_down: bool,
    pub(super) deferred: Vec<Ev>,
    pub(super) stats: SimulationStats,
    pub(super) nodes: u64,
    /// Pod specs of the CronJobs' templates, then of the bare Jobs'.
    pub(super) pod_specs: Vec<k8s_openapi::api::core::v1::PodSpec>,
}

impl Sim {
    pub(super) fn new(profile: Profile, plan: Plan, seed: u64) -> Sim {
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

    pub(super) fn next_rv(&mut self) -> u64 {
        self.rv += self.rng.range(1, 7) as u64;
        self.rv
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn at(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t.max(self.now), self.seq, ev)));
    }

    pub(super) fn after(&mut self, lo_ms: i64, hi_ms: i64, ev: Ev) {
        let t = self.now + self.rng.range(lo_ms, hi_ms);
        self.at(t, ev);
    }

    pub(super) fn behavior(&self, owner: Owner) -> &CronJobPlan {
        match owner {
            Owner::Cron(i) => &self.plan.cronjobs[i],
            Owner::Bare(i) => &self.plan.bare_jobs[i].behavior,
        }
    }

    pub(super) fn pod_spec(&self, owner: Owner) -> &k8s_openapi::api::core::v1::PodSpec {
        match owner {
            Owner::Cron(i) => &self.pod_specs[i],
            Owner::Bare(i) => &self.pod_specs[self.plan.cronjobs.len() + i],
        }
    }

    pub(super) fn render(&self, item: Item) -> Option<KubeObject> {
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

    pub(super) fn emit(&mut self, out: &mut VecDeque<TraceEntry>, item: Item, deleted: bool) {
        if !self.watching {
            return;
        }
        if let Some(o) = self.render(item) {
            let event = if deleted { TraceEvent::Deleted(o) } else { TraceEvent::Applied(o) };
            out.push_back(TraceEntry { observed_at_ms: self.now, event });
        }
    }

    pub(super) fn touch_job(&mut self, id: u64, out: &mut VecDeque<TraceEntry>) {
        let rv = self.next_rv();
        if let Some(j) = self.jobs.get_mut(&id) {
            j.rv = rv;
            self.emit(out, Item::Job(id), false);
        }
    }

    pub(super) fn touch_pod(&mut self, id: u64, out: &mut VecDeque<TraceEntry>) {
        let rv = self.next_rv();
        if let Some(p) = self.pods.get_mut(&id) {
            p.rv = rv;
            self.emit(out, Item::Pod(id), false);
        }
    }

    pub(super) fn touch_cron(&mut self, i: usize, out: &mut VecDeque<TraceEntry>) {
        self.crons[i].rv = self.next_rv();
        self.emit(out, Item::CronJob(i), false);
    }

    /// Processes one event; returns a relist to stream when the watcher (re)starts.
    pub(super) fn step(&mut self, ev: Ev, out: &mut VecDeque<TraceEntry>) -> Option<Relist> {
        if self.manager_down && ev.by_controller_manager() {
            // A run not started before the outage is a missed schedule; the controller
            // looks back when it returns.
            if !matches!(ev, Ev::StartRun(..)) {
                self.deferred.push(ev);
            }
            return None;
        }
        match ev {
            Ev::Heartbeat => self.heartbeat(out),
            Ev::LeaseRenew(i) => self.lease_renew(i, out),
            Ev::LeaseHandover(i) => self.lease_handover(i, out),
            Ev::OutageStart(_) => self.outage_start(),
            Ev::OutageEnd(_) => self.recover(out),
            Ev::WatcherDown(_) => self.watching = false,
            Ev::WatcherUp(k) => return Some(self.watcher_up(k)),
            Ev::Fire(i) => self.fire(i),
            Ev::StartRun(i, scheduled) => self.start_scheduled(i, scheduled, out),
            Ev::CreateBare(b) => self.create_bare(b, out),
            Ev::CreatePod(job) => self.create_pod(job, out),
            Ev::JobReady(job) => self.job_ready(job, out),
            Ev::JobCount(job, pod) => self.job_count(job, pod, out),
            Ev::JobFinalize(job, pod) => self.job_finalize(job, pod, out),
            Ev::JobDeadline(job) => self.job_deadline(job, out),
            Ev::CronSync(job) => self.cron_sync(job, out),
            Ev::TtlExpire(job) => self.ttl_expire(job, out),
            Ev::GcPods(job) => self.gc_pods(job, out),
            Ev::PodScheduled(p) => self.pod_scheduled(p, out),
            Ev::PodRunning(p) => self.pod_running(p, out),
            Ev::PodExit(p) => self.pod_exit(p, out),
            Ev::PodGone(p) => self.pod_gone(p, out),
            Ev::Session(i, step) => self.session_step(i, step, out),
            Ev::OddPods(step) => self.odd_pods(step, out),
        }
        None
    }

    /// A new Pending Pod, created now, unscheduled: its id (not emitted yet).
    pub(super) fn insert_pod(
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
}
