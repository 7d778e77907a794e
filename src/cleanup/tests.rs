//! The cleanup sweep, driven through a `[runs]` task with exact stream times.

use std::collections::BTreeMap;

use super::{CleanupConfig, CleanupDecision, RetentionSource};
use crate::{
    codec::{Codec, Framing, RecordWriter},
    journal::{JobRun, Journal, JournalConfig, Runs, RunsConfig, wiring::RunsInput},
    observe::model::{
        ConditionStatus, Job, JobCondition, JobObservation, JobSpec, JobStatus, ObjectMeta, ObservationEvent,
        Source,
    },
    runtime::{Outputs, RecordMeta, task::Task},
};

/// A minute-aligned instant (2026-11-01T00:00Z).
const T0: i64 = 1_793_491_200_000;
const HOUR_MS: i64 = 3_600_000;
const MIN_MS: i64 = 60_000;

fn uid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// Job `job-<n>` in namespace `etl`, running (no conditions).
fn running(n: u32) -> Job {
    Job {
        meta: ObjectMeta {
            namespace: "etl".into(),
            name: format!("job-{n}"),
            uid: uid(n),
            resource_version: None,
            creation_timestamp: Some(T0 - HOUR_MS),
            deletion_timestamp: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        },
        owner_cronjob: None,
        spec: JobSpec::default(),
        status: JobStatus { start_time: Some(T0 - HOUR_MS), active: Some(1), ..JobStatus::default() },
    }
}

/// Job `job-<n>`, Complete at `finished_at`.
fn finished(n: u32, finished_at: i64) -> Job {
    let mut job = running(n);
    job.status = JobStatus {
        start_time: Some(T0 - HOUR_MS),
        completion_time: Some(finished_at),
        succeeded: Some(1),
        conditions: vec![JobCondition {
            type_: "Complete".into(),
            status: ConditionStatus::True,
            reason: None,
            last_transition_time: Some(finished_at),
        }],
        ..JobStatus::default()
    };
    job
}

fn with_ttl(mut job: Job, ttl: i32) -> Job {
    job.spec.ttl_seconds_after_finished = Some(ttl);
    job
}

fn depending_on(mut job: Job, names: &str) -> Job {
    job.meta.annotations.insert("kubefacts.io/depends-on".into(), names.into());
    job
}

/// One `[runs]` task on partition 0, fed typed observations at exact times.
struct Harness {
    task: Task<Runs>,
    codec: Codec,
    offset: i64,
    decisions: Vec<CleanupDecision>,
    runs: Vec<JobRun>,
    counts: BTreeMap<&'static str, u64>,
    /// The trace context the next fed record carries.
    context: Option<String>,
    /// (port, links) of every output.
    links: Vec<(usize, Vec<String>)>,
}

impl Harness {
    fn new(cleanup: CleanupConfig) -> Self {
        let codec = Codec::new(None).unwrap();
        let writers = [JobRun::FULL_NAME, JobRun::FULL_NAME, CleanupDecision::FULL_NAME]
            .iter()
            .map(|r| {
                let known = codec.schemas().current(r).unwrap();
                RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
            })
            .collect();
        let cfg = RunsConfig { cleanup, ..RunsConfig::default() };
        let task = Task::new(
            0,
            Runs::new(cfg, Journal::input_key(&JournalConfig::default())),
            Outputs::new(writers, vec![1, 1, 1]),
        );
        Self {
            task,
            codec,
            offset: 0,
            decisions: Vec::new(),
            runs: Vec::new(),
            counts: BTreeMap::new(),
            context: None,
            links: Vec::new(),
        }
    }

    /// Minute sweeps, one-hour retention.
    fn minutely() -> Self {
        Self::new(CleanupConfig { cleanup_period_secs: 60, ..CleanupConfig::default() })
    }

    async fn feed(
        &mut self,
        input: usize,
        partition: i32,
        at: i64,
        event: ObservationEvent,
        job: Option<Job>,
    ) {
        let obs = JobObservation {
            source: Source { cluster: "c".into(), instance: "w".into(), epoch: 1 },
            observed_at: at,
            event,
            job,
        };
        self.offset += 1;
        let traceparent = self.context.take();
        let meta = RecordMeta {
            input,
            partition,
            offset: self.offset,
            timestamp_ms: at,
            writer: crate::runtime::Writer::SOLE,
            key: None,
            traceparent,
        };
        let input = if input == 0 {
            RunsInput::Job(Box::new(obs))
        } else {
            RunsInput::AnyJob(crate::journal::glance::JobGlance::of(&obs).into())
        };
        self.task.process(input, &meta).unwrap();
        self.drain().await;
    }

    async fn applied(&mut self, at: i64, job: Job) {
        self.feed(0, 0, at, ObservationEvent::Applied, Some(job)).await;
    }

    /// The Job observed through the global input, from another partition.
    async fn applied_elsewhere(&mut self, at: i64, job: Job) {
        self.feed(2, 7, at, ObservationEvent::Applied, Some(job)).await;
    }

    async fn heartbeat(&mut self, at: i64) {
        self.feed(0, 0, at, ObservationEvent::Heartbeat, None).await;
    }

    async fn drain(&mut self) {
        for rec in self.task.take_outputs() {
            self.links.push((rec.port, rec.links.clone()));
            let bytes = rec.value.as_deref().unwrap_or_default();
            match rec.port {
                0 => self.runs.push(self.codec.decode_as(bytes).await.unwrap()),
                2 => {
                    let d: CleanupDecision = self.codec.decode_as(bytes).await.unwrap();
                    assert_eq!(rec.key, d.job.uid.as_bytes(), "keyed by Job UID");
                    assert_eq!(rec.timestamp_ms, d.decided_at, "stamped with the sweep's stream time");
                    self.decisions.push(d);
                }
                _ => {}
            }
        }
        for (event, n) in self.task.take_counts() {
            *self.counts.entry(event).or_default() += n;
        }
    }

    fn decided(&self) -> Vec<String> {
        self.decisions.iter().map(|d| d.job.name.clone()).collect()
    }
}

/// A job whose retention expires at `sweep_at + offset_ms`, and sweeps just before and at
/// `sweep_at`: the names decided by then.
async fn decided_by_sweep(offset_ms: i64) -> Vec<CleanupDecision> {
    let sweep_at = T0 + 2 * HOUR_MS; // minute-aligned: a sweep runs exactly here
    let mut h = Harness::minutely();
    h.applied(T0, finished(1, sweep_at + offset_ms - HOUR_MS)).await;
    h.heartbeat(sweep_at - MIN_MS).await;
    h.heartbeat(sweep_at).await;
    h.decisions
}

#[tokio::test]
async fn retention_expires_when_the_time_left_is_zero_not_a_millisecond_earlier() {
    let at = decided_by_sweep(0).await;
    assert_eq!(at.len(), 1, "exactly at finished_at + retention: decided");
    let d = &at[0];
    assert_eq!((d.decided_at, d.finished_at + d.retention_secs * 1000), (T0 + 2 * HOUR_MS, T0 + 2 * HOUR_MS));
    assert_eq!((d.retention_secs, d.retention_source), (3600, RetentionSource::Default));
    assert_eq!(decided_by_sweep(-1).await.len(), 1, "one ms past: decided");
    assert!(decided_by_sweep(1).await.is_empty(), "one ms left: kept");
}

#[tokio::test]
async fn zero_retention_turns_cleanup_off_even_for_jobs_with_a_ttl() {
    let mut h =
        Harness::new(CleanupConfig { job_retention_secs: 0, cleanup_period_secs: 60, ..Default::default() });
    h.applied(T0, finished(1, T0)).await;
    h.applied(T0, with_ttl(finished(2, T0), 0)).await;
    for m in 1..=24 * 60 {
        h.heartbeat(T0 + m * MIN_MS).await;
    }
    assert!(h.decisions.is_empty(), "{:?}", h.decided());
    assert!(h.counts["sweeps"] > 1000, "sweeps still run: {:?}", h.counts);
    assert_eq!(h.task.processor().tracked_jobs(), 2);
}

#[tokio::test]
async fn a_jobs_own_ttl_wins_only_when_shorter() {
    let mut h = Harness::minutely();
    h.applied(T0, with_ttl(finished(1, T0), 120)).await; // 2 min < 1 h
    h.applied(T0, with_ttl(finished(2, T0), 7200)).await; // 2 h > 1 h: the default applies
    h.heartbeat(T0 + 2 * MIN_MS - 1).await;
    assert!(h.decisions.is_empty());
    h.heartbeat(T0 + 2 * MIN_MS).await;
    assert_eq!(h.decided(), ["job-1"]);
    assert_eq!(
        (h.decisions[0].retention_secs, h.decisions[0].retention_source),
        (120, RetentionSource::JobTtl)
    );
    h.heartbeat(T0 + HOUR_MS).await;
    assert_eq!(h.decided(), ["job-1", "job-2"]);
    assert_eq!(
        (h.decisions[1].retention_secs, h.decisions[1].retention_source),
        (3600, RetentionSource::Default)
    );
}

#[tokio::test]
async fn running_suspended_and_deleting_jobs_are_never_decided() {
    let mut h = Harness::minutely();
    h.applied(T0, running(1)).await;
    let mut suspended = finished(2, T0);
    suspended.spec.suspend = Some(true);
    h.applied(T0, suspended).await;
    let mut deleting = finished(3, T0);
    deleting.meta.deletion_timestamp = Some(T0 + 1);
    h.applied(T0, deleting).await;
    // Conditions that are not terminal, or counters not final, are not finished either.
    let mut target = finished(4, T0);
    target.status.conditions[0].type_ = "SuccessCriteriaMet".into();
    h.applied(T0, target).await;
    let mut uncounted = finished(5, T0);
    uncounted.status.uncounted_succeeded = 1;
    h.applied(T0, uncounted).await;
    for m in 1..=3 * 60 {
        h.heartbeat(T0 + m * MIN_MS).await;
    }
    assert!(h.decisions.is_empty(), "{:?}", h.decided());
    assert!(h.counts["kept_suspended"] > 0 && h.counts["kept_being_deleted"] > 0, "{:?}", h.counts);
    // Resumed, it goes at the next sweep.
    h.applied(T0 + 3 * HOUR_MS + 1, finished(2, T0)).await;
    h.heartbeat(T0 + 3 * HOUR_MS + MIN_MS).await;
    assert_eq!(h.decided(), ["job-2"]);
}

#[tokio::test]
async fn a_depended_on_job_is_kept_until_its_dependent_in_any_partition_finishes() {
    let mut h = Harness::minutely();
    h.applied(T0, finished(1, T0)).await;
    h.applied(T0, finished(2, T0)).await;
    // job-9 (another partition, through the global input) needs job-1; job-8 here needs job-2.
    h.applied_elsewhere(T0 + 1, depending_on(running(9), "job-1")).await;
    h.applied(T0 + 1, depending_on(running(8), " job-2 ,job-404")).await;
    for m in 1..=3 * 60 {
        h.heartbeat(T0 + m * MIN_MS).await;
    }
    assert!(h.decisions.is_empty(), "{:?}", h.decided());
    assert!(h.counts["kept_depended_on"] > 0);
    // The dependent finishes: its dependency goes at the next sweep.
    h.applied_elsewhere(T0 + 3 * HOUR_MS + 1, depending_on(finished(9, T0 + 3 * HOUR_MS), "job-1")).await;
    h.heartbeat(T0 + 3 * HOUR_MS + MIN_MS).await;
    assert_eq!(h.decided(), ["job-1"]);
    // A dependent deleted while pending releases its hold too.
    h.feed(
        0,
        0,
        T0 + 3 * HOUR_MS + MIN_MS + 1,
        ObservationEvent::Deleted,
        Some(depending_on(running(8), "job-2")),
    )
    .await;
    h.heartbeat(T0 + 3 * HOUR_MS + 2 * MIN_MS).await;
    assert_eq!(h.decided(), ["job-1", "job-2"]);
}

#[tokio::test]
async fn a_backlog_of_ten_thousand_drains_in_bounded_sweeps_oldest_first() {
    let mut h = Harness::new(CleanupConfig {
        cleanup_period_secs: 60,
        max_decisions_per_sweep: 1000,
        ..Default::default()
    });
    for n in 0..10_000u32 {
        // Reverse finish order: the sweep must order by expiry, not by UID.
        h.applied(T0, finished(n, T0 - i64::from(n))).await;
    }
    assert_eq!(h.task.processor().tracked_jobs(), 10_000);
    let mut per_sweep = Vec::new();
    for m in 1..=70 {
        let before = h.decisions.len();
        h.heartbeat(T0 + HOUR_MS + m * MIN_MS).await;
        per_sweep.push(h.decisions.len() - before);
    }
    assert!(per_sweep.iter().all(|&n| n <= 1000), "{per_sweep:?}");
    assert_eq!(per_sweep.iter().filter(|&&n| n > 0).count(), 10, "{per_sweep:?}");
    assert_eq!(h.decisions.len(), 10_000);
    let finished: Vec<i64> = h.decisions.iter().map(|d| d.finished_at).collect();
    assert!(finished.windows(2).all(|w| w[0] <= w[1]), "earliest expiry first");
    let sweeps: Vec<i64> = h.decisions.iter().map(|d| d.sweep).collect();
    assert!(sweeps.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(h.counts["decisions_deferred"], (1..10).map(|k| 10_000 - k * 1000).sum::<u64>());
    // Evicted: nothing tracked; every run was filed before its Job was let go.
    assert_eq!(h.task.processor().tracked_jobs(), 0);
    assert_eq!(h.runs.len(), 10_000);
}

#[tokio::test]
async fn a_decided_job_is_evicted_and_never_filed_or_decided_again() {
    let mut h = Harness::minutely();
    // A TTL of 0 expires before the run settles: it is filed at the decision.
    h.applied(T0, with_ttl(finished(1, T0), 0)).await;
    h.heartbeat(T0 + MIN_MS).await;
    assert_eq!((h.decided(), h.runs.len()), (vec!["job-1".to_owned()], 1));
    assert_eq!((h.task.processor().tracked_jobs(), h.task.processor().ended_jobs()), (0, 1));
    // Still in the cluster (a dry-run cleaner): a relist re-observes it.
    h.applied(T0 + 2 * MIN_MS, with_ttl(finished(1, T0), 0)).await;
    for m in 3..=30 {
        h.heartbeat(T0 + m * MIN_MS).await;
    }
    assert_eq!((h.decisions.len(), h.runs.len()), (1, 1), "no second run, no second decision");
    assert_eq!(h.task.processor().tracked_jobs(), 0);
    // Deleted: the tombstone outlives the Pods deleted with it, then goes.
    h.feed(0, 0, T0 + 31 * MIN_MS, ObservationEvent::Deleted, Some(finished(1, T0))).await;
    h.heartbeat(T0 + 40 * MIN_MS).await;
    assert_eq!(h.task.processor().ended_jobs(), 1);
    h.heartbeat(T0 + 42 * MIN_MS).await;
    assert_eq!(h.task.processor().ended_jobs(), 0, "forgotten remember_gone_ms after deletion");
    assert_eq!((h.decisions.len(), h.runs.len()), (1, 1));
}

/// The run fact, its copy for the journal and the cleanup decision are emitted at later
/// stream times than the observation that finished the Job: each links to that record's
/// trace context (not to earlier or later ones), and the context goes with the Job.
#[tokio::test]
async fn the_run_and_its_decision_link_to_the_observation_that_finished_the_job() {
    let mut h = Harness::minutely();
    h.context = Some("tp-running".into());
    h.applied(T0 - MIN_MS, running(1)).await;
    h.context = Some("tp-finished".into());
    h.applied(T0, finished(1, T0)).await;
    h.context = Some("tp-again".into());
    h.applied(T0 + 1_000, finished(1, T0)).await;
    for m in 1..=2 * 60 {
        h.heartbeat(T0 + m * MIN_MS).await;
    }
    assert_eq!((h.runs.len(), h.decisions.len()), (1, 1));
    let finished = vec!["tp-finished".to_owned()];
    let linked: Vec<(usize, Vec<String>)> = h.links.iter().filter(|(_, l)| !l.is_empty()).cloned().collect();
    assert_eq!(linked, [(0, finished.clone()), (1, finished.clone()), (2, finished)]);
    let mut kept = BTreeMap::new();
    h.task.store_sizes(|store, n| {
        kept.insert(store.to_owned(), n);
    });
    assert_eq!(kept["job-contexts"], 0, "dropped with the decided Job");
}
