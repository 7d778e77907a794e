//! The compact state of the simulated objects, and the events that change it.

use std::collections::{BTreeMap, VecDeque};

/// A relist in progress: the objects that existed when it began, rendered one by one
/// (nothing changes while it runs: the event queue waits).
#[derive(Debug)]
pub(super) struct Relist {
    pub(super) epoch: i64,
    pub(super) at_ms: i64,
    pub(super) items: VecDeque<Item>,
}

/// An object of the simulated cluster.
#[derive(Debug, Clone, Copy)]
pub(super) enum Item {
    Namespace(usize),
    CronJob(usize),
    Lease(usize),
    Job(u64),
    Pod(u64),
}

/// Who created a Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// The CronJob of this index.
    Cron(usize),
    /// Bare Job of this index.
    Bare(usize),
}

/// How one pod attempt of a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    Completed,
    Error,
    OomKilled,
    /// Runs until something stops it (the deadline).
    Overrun,
}

#[derive(Debug)]
pub(super) struct CronState {
    pub(super) rv: u64,
    pub(super) last_schedule_ms: Option<i64>,
    pub(super) last_successful_ms: Option<i64>,
    pub(super) active: Vec<u64>,
    pub(super) succeeded_history: VecDeque<u64>,
    pub(super) failed_history: VecDeque<u64>,
}

#[derive(Debug)]
pub(super) struct JobState {
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) owner: Owner,
    pub(super) created_ms: i64,
    pub(super) scheduled_ms: Option<i64>,
    pub(super) rv: u64,
    pub(super) start_ms: Option<i64>,
    pub(super) active: u32,
    pub(super) ready: u32,
    pub(super) terminating: u32,
    pub(super) succeeded: u32,
    pub(super) failed: u32,
    pub(super) uncounted_succeeded: Vec<String>,
    pub(super) uncounted_failed: Vec<String>,
    /// The interim condition: (reason, when); `CompletionsReached` → SuccessCriteriaMet.
    pub(super) target: Option<(&'static str, i64)>,
    /// The terminal condition: (success, reason, when).
    pub(super) finished: Option<(bool, &'static str, i64)>,
    pub(super) deletion_ms: Option<i64>,
    pub(super) attempts: Vec<(Exit, i64)>,
    pub(super) next_attempt: usize,
    pub(super) pods: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

#[derive(Debug)]
pub(super) enum PodKind {
    Job(u64),
    Session { session: String, namespace: String, requests: (u32, u32) },
}

#[derive(Debug)]
pub(super) struct PodState {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) kind: PodKind,
    pub(super) created_ms: i64,
    pub(super) rv: u64,
    pub(super) node: Option<String>,
    pub(super) scheduled_ms: Option<i64>,
    pub(super) running_ms: Option<i64>,
    pub(super) phase: PodPhase,
    pub(super) exit: Option<(i32, &'static str, i64)>,
    pub(super) finalizer: bool,
    pub(super) deletion_ms: Option<i64>,
    /// How long the container runs once started; `None`: until stopped.
    pub(super) run_ms: Option<i64>,
    pub(super) planned_exit: Exit,
}

impl PodState {
    pub(super) fn host_ip(&self) -> String {
        let n = self.node.as_deref().and_then(|n| n.rsplit('-').next()).and_then(|n| n.parse::<u64>().ok());
        format!("10.0.{}.{}", n.unwrap_or(0) / 250, n.unwrap_or(0) % 250 + 2)
    }

    pub(super) fn pod_ip(&self) -> String {
        format!("10.{}.{}.{}", 64 + (self.id >> 16) % 64, (self.id >> 8) % 256, self.id % 256)
    }
}

#[derive(Debug)]
pub(super) struct LeaseState {
    pub(super) name: &'static str,
    pub(super) uid: String,
    pub(super) rv: u64,
    pub(super) holder: String,
    pub(super) duration_secs: i64,
    pub(super) acquire_ms: i64,
    pub(super) renew_ms: i64,
    pub(super) transitions: i64,
}

#[derive(Debug)]
pub(super) struct SessionState0 {
    pub(super) id: String,
    pub(super) owner: String,
    pub(super) pod: Option<u64>,
    pub(super) pod_name: String,
    /// `updated_at` of its latest line: a host application's changes never go backwards.
    pub(super) updated_ms: i64,
}

/// What happens next, and to whom.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
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
    pub(super) fn by_controller_manager(&self) -> bool {
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

pub(super) fn pod_phase(pods: &BTreeMap<u64, PodState>, p: u64) -> PodPhase {
    pods.get(&p).map_or(PodPhase::Succeeded, |p| p.phase)
}
