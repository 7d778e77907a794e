//! What happened, from the fact topics: the runs per journal window, the owners that fail
//! most, the cleanup decisions, the coverage states and the compute stopped sessions hold.
//! Computed here once from decoded facts ([`Facts`]), rendered by `text.rs` (the demo and
//! `kubefacts report`) or as JSON (`report --format json`).
//!
//! Every figure is independent of the order in which partitions were read: lists are sorted,
//! maps are BTreeMaps, and a key's records (one partition) are taken in offset order. So a
//! report of the live topics equals the report of `replay`'s files of the same observations.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use kubefacts::{
    cleanup::{CleanupDecision, RetentionSource},
    codec::json::rfc3339_millis,
    coverage::{CoverageAlert, CoverageState},
    journal::{JobRun, JobRunWindowPart, RunResult, WindowReader},
    observe::model::{PodPhase, SessionState},
    sessions::{OwnerRetainedCompute, RetentionState, SessionProjection},
};

/// Runs are listed one by one when at most this many match (a hand-written trace); beyond,
/// the summary aggregates.
pub(crate) const LIST_RUNS_UP_TO: usize = 20;

/// The decoded facts a summary is made of. Tables keep their keys: a tombstone (`None`)
/// removes its key.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// `job-run-facts.v1`.
    pub runs: Vec<JobRun>,
    /// `job-runs.v2`: window summaries and pages, each key's parts in offset order.
    pub windows: Vec<JobRunWindowPart>,
    /// `cleanup-decisions.v1`.
    pub decisions: Vec<CleanupDecision>,
    /// `coverage-alerts.v1`.
    pub alerts: Vec<CoverageAlert>,
    /// `session-projections.v1`, (session id, projection or tombstone), each key in offset order.
    pub projections: Vec<(String, Option<SessionProjection>)>,
    /// `retained-compute-by-owner.v1`, (owner, total or tombstone), each key in offset order.
    pub totals: Vec<(String, Option<OwnerRetainedCompute>)>,
}

/// Which facts count: `--since` and `--namespace`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// Facts at or after this time, epoch ms (by each fact's own time: a run's finish, a
    /// decision's sweep, an alert's or a projection's stream time).
    pub since_ms: Option<i64>,
    /// Only these namespaces (empty: every one).
    pub namespaces: BTreeSet<String>,
}

impl Filter {
    fn time(&self, ms: i64) -> bool {
        self.since_ms.is_none_or(|since| ms >= since)
    }

    fn namespace(&self, ns: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.contains(ns)
    }

    fn run(&self, r: &JobRun) -> bool {
        self.time(r.finished_at) && self.namespace(&r.namespace)
    }
}

/// The whole summary: one JSON document of `report --format json`.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Summary {
    /// The filters applied.
    pub filters: FiltersShown,
    /// Runs and windows.
    pub runs: RunsSummary,
    /// Cleanup decisions.
    pub cleanup: CleanupSummary,
    /// Lease coverage.
    pub coverage: CoverageSummary,
    /// Sessions and the compute they retain.
    pub sessions: SessionsSummary,
}

/// The filters, as given.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct FiltersShown {
    /// `--since`, RFC 3339.
    pub since: Option<String>,
    /// `--namespace`, sorted.
    pub namespaces: Vec<String>,
}

/// Runs per journal window and per owner.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct RunsSummary {
    /// Every window, rebuilt from its latest summary and its pages as a consumer does, by start.
    pub windows: Vec<Window>,
    /// Runs filed on `job-run-facts.v1`.
    pub filed: u64,
    /// Of those, failed.
    pub failed: u64,
    /// Owners with a failed run or a non-zero container exit, most failures first (then
    /// most non-zero exits, then namespace and name).
    pub failing: Vec<FailingOwner>,
    /// Every run, by finish time then name, when at most [`LIST_RUNS_UP_TO`] match; else `None`.
    pub every_run: Option<Vec<RunRow>>,
}

/// A journal window, or why it cannot be rebuilt from what was read.
#[derive(Debug, Serialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum Window {
    /// Rebuilt.
    Rebuilt(WindowRow),
    /// Not rebuilt: missing or malformed parts.
    Incomplete {
        /// What is missing.
        error: String,
    },
}

/// A rebuilt window; its counts are of the runs that pass the filter.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct WindowRow {
    /// Start, RFC 3339.
    pub window_start: String,
    /// Length, ms.
    pub window_length_ms: i64,
    /// Runs.
    pub runs: u64,
    /// Of those, succeeded (not failed).
    pub succeeded: u64,
    /// Of those, failed.
    pub failed: u64,
    /// Pages of the latest summary.
    pub pages: i32,
    /// The latest summary is final.
    pub is_final: bool,
    /// The latest summary's revision.
    pub revision: i64,
}

/// A CronJob (or bare Job) with failures.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct FailingOwner {
    /// Namespace.
    pub namespace: String,
    /// Owner name.
    pub name: String,
    /// Its runs.
    pub runs: u64,
    /// Of those, failed.
    pub failed: u64,
    /// Failed runs by `Failed` condition reason (`-`: none given).
    pub reasons: BTreeMap<String, u64>,
    /// Non-zero container exits, by (code, reason), over all its runs.
    pub exits: Vec<ExitCount>,
}

/// Container terminations of one exit code and reason.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct ExitCount {
    /// Exit code.
    pub exit_code: i32,
    /// Reason as observed (`-`: none).
    pub reason: String,
    /// Terminations.
    pub count: i64,
}

/// One run.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct RunRow {
    /// Namespace.
    pub namespace: String,
    /// The Job.
    pub run_name: String,
    /// Finish time, RFC 3339.
    pub finished_at: String,
    /// How it ended.
    pub result: RunResult,
    /// The `Failed` condition's reason.
    pub failure_reason: Option<String>,
    /// Pods that succeeded.
    pub succeeded_pods: i32,
    /// Pods that failed.
    pub failed_pods: i32,
    /// Terminations per (container, code, reason), as filed.
    pub exits: Vec<RunExit>,
}

/// Terminations of one container, code and reason in a run.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct RunExit {
    /// Container.
    pub container: String,
    /// Exit code.
    pub exit_code: i32,
    /// Reason (`-`: none).
    pub reason: String,
    /// Terminations.
    pub count: i64,
}

/// The cleanup decisions.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct CleanupSummary {
    /// `[cleanup] job_retention_secs` of the pipeline file the report was made with.
    pub job_retention_secs: i64,
    /// Decisions.
    pub decided: u64,
    /// Of those, by the Job's own TTL.
    pub by_job_ttl: u64,
    /// Of those, by the default retention.
    pub by_default_retention: u64,
    /// Every decision, by decision time then Job.
    pub decisions: Vec<DecisionRow>,
}

/// One decision.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct DecisionRow {
    /// Namespace.
    pub namespace: String,
    /// Job name.
    pub name: String,
    /// Job UID.
    pub uid: String,
    /// Finish time retention counted from, RFC 3339.
    pub finished_at: String,
    /// Effective retention, seconds.
    pub retention_secs: i64,
    /// Where it came from.
    pub retention_source: RetentionSource,
    /// Stream time of the deciding sweep, RFC 3339.
    pub decided_at: String,
    /// The deciding sweep.
    pub sweep: i64,
}

/// Lease coverage.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct CoverageSummary {
    /// State changes.
    pub state_changes: u64,
    /// Distinct CronJobs among them.
    pub cronjobs: u64,
    /// State changes by the state entered (its name: `FIRING`, `OK`, …).
    pub entered: BTreeMap<&'static str, u64>,
    /// Manager-lease gaps (merged per lease and start), by lease then start.
    pub gaps: Vec<Gap>,
    /// CronJobs that fired, by UID.
    pub fired: Vec<Fired>,
    /// CronJobs overdue only while the manager was stopped (never fired), by UID.
    pub excused: Vec<Subject>,
}

/// A span the manager's lease did not cover.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Gap {
    /// The lease, `namespace/name`.
    pub lease: String,
    /// Start, RFC 3339.
    pub started_at: String,
    /// End, RFC 3339.
    pub ended_at: String,
    /// Length, seconds.
    pub secs: i64,
}

/// A CronJob.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Subject {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// A CronJob that fired, with its first firing.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Fired {
    /// Which.
    #[serde(flatten)]
    pub subject: Subject,
    /// When the missed run was due, RFC 3339.
    pub expected_by: Option<String>,
    /// Pending since, RFC 3339.
    pub pending_since: Option<String>,
    /// First firing, RFC 3339.
    pub fired_at: String,
    /// Its latest state.
    pub state_now: CoverageState,
}

/// Sessions.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct SessionsSummary {
    /// Sessions (latest projection of each).
    pub sessions: u64,
    /// Sessions by retention state.
    pub by_retention_state: BTreeMap<RetentionState, u64>,
    /// Projection records read (the demo shows it). Not in the JSON: the topic is a
    /// compacted table, so on Kafka it shrinks towards one record per session as the broker
    /// compacts, while the facts above stay the same.
    #[serde(skip)]
    pub projections: u64,
    /// Foreign Pods seen, over the sessions.
    pub foreign_pods_seen: i64,
    /// RETAINED sessions, by session id.
    pub retained: Vec<RetainedSession>,
    /// Owners whose stopped sessions hold compute, by owner (not narrowed by `--namespace`:
    /// an owner's total spans namespaces).
    pub owners_holding_compute: Vec<OwnerCompute>,
}

/// A RETAINED session.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct RetainedSession {
    /// Session id.
    pub session_id: String,
    /// Owner.
    pub owner: String,
    /// Session state.
    pub session_state: SessionState,
    /// Its Pod, `namespace/name`.
    pub pod: Option<String>,
    /// The Pod's phase.
    pub pod_phase: Option<PodPhase>,
    /// Main container CPU request, millicores.
    pub cpu_millicores: Option<i64>,
    /// Main container memory request, bytes.
    pub memory_bytes: Option<i64>,
}

/// An owner's retained compute.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct OwnerCompute {
    /// Owner.
    pub owner: String,
    /// RETAINED sessions.
    pub retained_sessions: i64,
    /// CPU, millicores.
    pub cpu_millicores: i64,
    /// Memory, bytes.
    pub memory_bytes: i64,
    /// Sessions without a CPU or memory request (the larger count): the sums are at least.
    pub sessions_without_request: i64,
}

fn time(ms: i64) -> String {
    rfc3339_millis(ms).unwrap_or_default()
}

impl Summary {
    /// The summary of `facts` that pass `filter`; `job_retention_secs` from the pipeline file.
    pub(crate) fn build(facts: Facts, filter: &Filter, job_retention_secs: i64) -> Self {
        Self {
            filters: FiltersShown {
                since: filter.since_ms.map(time),
                namespaces: filter.namespaces.iter().cloned().collect(),
            },
            runs: runs(&facts.runs, facts.windows, filter),
            cleanup: cleanup(facts.decisions, filter, job_retention_secs),
            coverage: coverage(facts.alerts, filter),
            sessions: sessions(&facts.projections, &facts.totals, filter),
        }
    }
}

fn runs(all: &[JobRun], parts: Vec<JobRunWindowPart>, filter: &Filter) -> RunsSummary {
    let mut reader = WindowReader::new();
    parts.into_iter().for_each(|p| reader.add(p));
    let mut windows = Vec::new();
    for w in reader.windows() {
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                windows.push(Window::Incomplete { error: e.to_string() });
                continue;
            }
        };
        if filter.since_ms.is_some_and(|since| w.window_start + w.window_length_ms <= since) {
            continue;
        }
        let runs: Vec<&JobRun> = w.runs.iter().filter(|r| filter.run(r)).collect();
        let failed = runs.iter().filter(|r| r.result == RunResult::Failed).count() as u64;
        windows.push(Window::Rebuilt(WindowRow {
            window_start: time(w.window_start),
            window_length_ms: w.window_length_ms,
            runs: runs.len() as u64,
            succeeded: runs.len() as u64 - failed,
            failed,
            pages: w.summary.pages,
            is_final: w.summary.is_final,
            revision: w.revision,
        }));
    }
    let runs: Vec<&JobRun> = all.iter().filter(|r| filter.run(r)).collect();
    let failed = runs.iter().filter(|r| r.result == RunResult::Failed).count() as u64;

    // Per owner: failed runs, why, and how their containers exited.
    let mut owners: BTreeMap<(&str, &str), FailingOwner> = BTreeMap::new();
    // Per owner: non-zero exits by (code, reason).
    type Exits<'a> = BTreeMap<(i32, &'a str), i64>;
    let mut exits: BTreeMap<(&str, &str), Exits> = BTreeMap::new();
    for r in &runs {
        let key = (r.namespace.as_str(), r.owner.name.as_str());
        let f = owners.entry(key).or_insert_with(|| FailingOwner {
            namespace: r.namespace.clone(),
            name: r.owner.name.clone(),
            runs: 0,
            failed: 0,
            reasons: BTreeMap::new(),
            exits: Vec::new(),
        });
        f.runs += 1;
        if r.result == RunResult::Failed {
            f.failed += 1;
            *f.reasons.entry(r.failure_reason.clone().unwrap_or_else(|| "-".into())).or_default() += 1;
        }
        let by_code = exits.entry(key).or_default();
        for e in r.exits.iter().filter(|e| e.exit_code != 0) {
            *by_code.entry((e.exit_code, e.reason.as_deref().unwrap_or("-"))).or_default() += e.count;
        }
    }
    let mut failing: Vec<FailingOwner> = owners
        .into_iter()
        .map(|(key, mut f)| {
            f.exits = exits[&key]
                .iter()
                .map(|(&(exit_code, reason), &count)| ExitCount { exit_code, reason: reason.into(), count })
                .collect();
            f
        })
        .filter(|f| f.failed > 0 || !f.exits.is_empty())
        .collect();
    // Stable: ties stay in (namespace, name) order.
    let nonzero = |f: &FailingOwner| f.exits.iter().map(|e| e.count).sum::<i64>();
    failing.sort_by_key(|f| std::cmp::Reverse((f.failed, nonzero(f))));

    let every_run = (runs.len() <= LIST_RUNS_UP_TO).then(|| {
        let mut sorted = runs.clone();
        sorted.sort_by(|a, b| (a.finished_at, &a.run_name).cmp(&(b.finished_at, &b.run_name)));
        sorted
            .into_iter()
            .map(|r| RunRow {
                namespace: r.namespace.clone(),
                run_name: r.run_name.clone(),
                finished_at: time(r.finished_at),
                result: r.result,
                failure_reason: r.failure_reason.clone(),
                succeeded_pods: r.succeeded_pods,
                failed_pods: r.failed_pods,
                exits: r
                    .exits
                    .iter()
                    .map(|e| RunExit {
                        container: e.container.clone(),
                        exit_code: e.exit_code,
                        reason: e.reason.clone().unwrap_or_else(|| "-".into()),
                        count: e.count,
                    })
                    .collect(),
            })
            .collect()
    });
    RunsSummary { windows, filed: runs.len() as u64, failed, failing, every_run }
}

fn cleanup(mut decisions: Vec<CleanupDecision>, filter: &Filter, job_retention_secs: i64) -> CleanupSummary {
    decisions.retain(|d| filter.time(d.decided_at) && filter.namespace(&d.job.namespace));
    decisions.sort_by(|a, b| (a.decided_at, &a.job).cmp(&(b.decided_at, &b.job)));
    let by_job_ttl =
        decisions.iter().filter(|d| d.retention_source == RetentionSource::JobTtl).count() as u64;
    CleanupSummary {
        job_retention_secs,
        decided: decisions.len() as u64,
        by_job_ttl,
        by_default_retention: decisions.len() as u64 - by_job_ttl,
        decisions: decisions
            .into_iter()
            .map(|d| DecisionRow {
                namespace: d.job.namespace,
                name: d.job.name,
                uid: d.job.uid,
                finished_at: time(d.finished_at),
                retention_secs: d.retention_secs,
                retention_source: d.retention_source,
                decided_at: time(d.decided_at),
                sweep: d.sweep,
            })
            .collect(),
    }
}

fn coverage(mut alerts: Vec<CoverageAlert>, filter: &Filter) -> CoverageSummary {
    alerts.retain(|a| filter.time(a.stream_time) && filter.namespace(&a.subject.namespace));
    alerts.sort_by(|a, b| (a.stream_time, &a.subject).cmp(&(b.stream_time, &b.subject)));
    let mut entered: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut last: BTreeMap<&str, &CoverageAlert> = BTreeMap::new();
    let mut first_fire: BTreeMap<&str, &CoverageAlert> = BTreeMap::new();
    let mut stopped: BTreeSet<&str> = BTreeSet::new();
    let mut gaps: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    for a in &alerts {
        *entered.entry(a.state.as_str()).or_default() += 1;
        last.insert(&a.subject.uid, a);
        match a.state {
            CoverageState::Firing => {
                first_fire.entry(&a.subject.uid).or_insert(a);
            }
            CoverageState::ManagerStopped => {
                stopped.insert(&a.subject.uid);
            }
            _ => {}
        }
        for g in &a.coverage_gaps {
            let to = gaps.entry((&a.manager_lease, g.started_at)).or_insert(g.ended_at);
            *to = (*to).max(g.ended_at);
        }
    }
    let subject = |a: &CoverageAlert| Subject {
        namespace: a.subject.namespace.clone(),
        name: a.subject.name.clone(),
        uid: a.subject.uid.clone(),
    };
    CoverageSummary {
        state_changes: alerts.len() as u64,
        cronjobs: last.len() as u64,
        entered,
        gaps: gaps
            .iter()
            .map(|(&(lease, from), &to)| Gap {
                lease: lease.into(),
                started_at: time(from),
                ended_at: time(to),
                secs: (to - from) / 1000,
            })
            .collect(),
        fired: first_fire
            .iter()
            .map(|(uid, f)| Fired {
                subject: subject(last[uid]),
                expected_by: f.expected_by.map(time),
                pending_since: f.pending_since.map(time),
                fired_at: time(f.stream_time),
                state_now: last[uid].state,
            })
            .collect(),
        excused: stopped
            .iter()
            .filter(|uid| !first_fire.contains_key(*uid))
            .map(|uid| subject(last[uid]))
            .collect(),
    }
}

fn sessions(
    projections: &[(String, Option<SessionProjection>)],
    totals: &[(String, Option<OwnerRetainedCompute>)],
    filter: &Filter,
) -> SessionsSummary {
    let in_namespace = |p: &SessionProjection| {
        filter.namespaces.is_empty() || p.pod.as_ref().is_some_and(|pod| filter.namespace(&pod.namespace))
    };
    // The latest record per key (a key's records are in offset order); a tombstone removes it.
    let mut latest: BTreeMap<&str, &SessionProjection> = BTreeMap::new();
    let mut records = 0u64;
    for (key, p) in projections {
        match p {
            Some(p) => {
                if filter.time(p.stream_time) && in_namespace(p) {
                    records += 1;
                }
                latest.insert(key, p);
            }
            None => {
                latest.remove(key.as_str());
            }
        }
    }
    latest.retain(|_, p| filter.time(p.stream_time) && in_namespace(p));
    let mut by_retention_state: BTreeMap<RetentionState, u64> = BTreeMap::new();
    for p in latest.values() {
        *by_retention_state.entry(p.retention_state).or_default() += 1;
    }
    let retained = latest
        .values()
        .filter(|p| p.retention_state == RetentionState::Retained)
        .map(|p| RetainedSession {
            session_id: p.session_id.clone(),
            owner: p.owner.clone(),
            session_state: p.session_state,
            pod: p.pod.as_ref().map(|i| format!("{}/{}", i.namespace, i.name)),
            pod_phase: p.pod_phase,
            cpu_millicores: p.main_container_requests.cpu_millicores,
            memory_bytes: p.main_container_requests.memory_bytes,
        })
        .collect();
    let mut owners: BTreeMap<&str, &OwnerRetainedCompute> = BTreeMap::new();
    for (key, t) in totals {
        match t {
            Some(t) => {
                owners.insert(key, t);
            }
            None => {
                owners.remove(key.as_str());
            }
        }
    }
    SessionsSummary {
        sessions: latest.len() as u64,
        by_retention_state,
        projections: records,
        foreign_pods_seen: latest.values().map(|p| p.foreign_pods_seen).sum(),
        retained,
        owners_holding_compute: owners
            .values()
            .filter(|t| t.retained_sessions > 0 && filter.time(t.stream_time))
            .map(|t| OwnerCompute {
                owner: t.owner.clone(),
                retained_sessions: t.retained_sessions,
                cpu_millicores: t.cpu_millicores,
                memory_bytes: t.memory_bytes,
                sessions_without_request: t
                    .sessions_without_cpu_request
                    .max(t.sessions_without_memory_request),
            })
            .collect(),
    }
}
