//! `[runs]`: Jobs and their Pods, co-partitioned by Job UID → one [`JobRun`] per finished
//! Job on `job-run-facts.v1`, keyed by the owner's UID (DESIGN §5.1).
//!
//! * A Job is **finished** when a `Complete` or `Failed` condition is True and no
//!   terminated Pod is still uncounted (`uncountedTerminatedPods` empty: the counters are
//!   final). `FailureTarget` and `SuccessCriteriaMet` alone are not finished; a running Job
//!   is not a run.
//! * A finished Job is **filed** once, `settle_ms` of stream time after it was first seen
//!   finished: Pods and Jobs are separate watches, so a Pod's last termination may be
//!   observed just after its Job's completion; waiting a moment of stream time (which
//!   heartbeats advance in a quiet cluster) lets the exit breakdown include it. A Job
//!   deleted before that is filed at its deletion.
//! * Filing is **idempotent by Job UID**: the filed flag is state, so a relist or replay
//!   re-observing the Job files nothing again.
//! * The **exit breakdown** counts distinct terminations — the current and the last
//!   terminated state of every container and init container, told apart by container id —
//!   by (container, exit code, reason); a Pod observed many times counts each termination
//!   once. Reasons are copied as observed, never inferred from the code.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::model::{ContainerExitCount, JobRun, OwnerKind, RunOwner, RunResult};
use crate::{
    codec::{Codec, CodecError},
    observe::{
        JobObservation, ObservationEvent, PodObservation,
        model::{ConditionStatus, ContainerTermination, Job, Pod},
    },
    runtime::{
        DecodeInput, KvStore, OutputPort, Outputs, ProcessError, Processor, RecordMeta, StateStore,
        StreamTime,
    },
};

/// Settings of `[runs]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunsConfig {
    /// How long after a Job is first seen finished it is filed, in milliseconds of stream
    /// time (late Pod terminations still count).
    pub settle_ms: i64,
    /// The journal's window length, in milliseconds: runs are re-keyed by window for it.
    pub window_length_ms: i64,
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self { settle_ms: 5_000, window_length_ms: super::window::JournalConfig::default().window_length_ms }
    }
}

/// `[runs]`'s inputs, in order: `jobs.v1`, `pods.v1`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunsInput {
    /// A Job observation (or a marker or heartbeat of the jobs topic).
    Job(JobObservation),
    /// A Pod observation (or a marker or heartbeat of the pods topic).
    Pod(PodObservation),
}

impl DecodeInput for RunsInput {
    async fn decode(input: usize, codec: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
        Ok(match input {
            0 => RunsInput::Job(codec.decode_as(bytes).await?),
            _ => RunsInput::Pod(codec.decode_as(bytes).await?),
        })
    }
}

/// A termination counted: (container, exit code, reason).
type ExitKey = (String, i32, Option<String>);

/// What `[runs]` keeps per Job UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedJob {
    /// The latest observation of the Job (absent while only its Pods were seen).
    pub job: Option<Job>,
    /// Snapshot epoch of the latest observation of the Job.
    pub epoch: i64,
    /// Terminations of its Pods' containers, by (container, exit code, reason).
    pub exits: BTreeMap<ExitKey, i64>,
    /// Identities of the terminations counted (container ids).
    pub seen: BTreeSet<String>,
    /// When it was first seen finished (stream time), if it is.
    pub finished_seen_at: Option<StreamTime>,
    /// Whether its run was filed.
    pub filed: bool,
}

/// The `[runs]` processor of one task.
#[derive(Debug)]
pub struct Runs {
    cfg: RunsConfig,
    jobs: KvStore<String, TrackedJob>,
    /// (due stream time, Job UID) of finished Jobs waiting to be filed.
    due: KvStore<(StreamTime, String), ()>,
    /// The stream-time second last forwarded to the journal (changelogged, so a restarted
    /// task forwards the same heartbeats).
    forwarded: KvStore<(), i64>,
}

impl Runs {
    /// `[runs]`'s outputs: the run facts (keyed by owner UID), and the same runs re-keyed by
    /// journal window start for `[journal]` (an internal topic that also carries stream time).
    pub const OUTPUTS: [OutputPort; 2] = [
        OutputPort { topic: "job_run_facts", record: JobRun::FULL_NAME, compacted: false, key_record: None },
        OutputPort {
            topic: "journal_repartition",
            record: JobRun::FULL_NAME,
            compacted: false,
            key_record: None,
        },
    ];

    /// A processor with empty state.
    pub fn new(cfg: RunsConfig) -> Self {
        Self {
            cfg,
            jobs: KvStore::new("jobs"),
            due: KvStore::new("due"),
            forwarded: KvStore::new("forwarded"),
        }
    }

    fn on_job(
        &mut self,
        obs: JobObservation,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match obs.event {
            ObservationEvent::SnapshotEnd => {
                self.forget_unlisted(obs.source.epoch, out)?;
                return Ok(());
            }
            ObservationEvent::Applied | ObservationEvent::Deleted => {}
            _ => return Ok(()),
        }
        let Some(job) = obs.job else {
            return Err(ProcessError {
                reason: "missing_object",
                detail: "a Job event without a Job".into(),
            });
        };
        out.count("job_observations", 1);
        let uid = job.meta.uid.clone();
        let mut tracked = self.jobs.get(&uid).cloned().unwrap_or_default();
        tracked.epoch = obs.source.epoch;
        if tracked.finished_seen_at.is_none() && finished(&job) {
            tracked.finished_seen_at = Some(now);
            if !tracked.filed {
                self.due.put((now + self.cfg.settle_ms, uid.clone()), ());
            }
        }
        tracked.job = Some(job);
        if obs.event == ObservationEvent::Deleted {
            // Gone: file what finished now, and keep nothing.
            self.file(&uid, &mut tracked, out)?;
            self.jobs.delete(&uid);
            if let Some(at) = tracked.finished_seen_at {
                self.due.delete(&(at + self.cfg.settle_ms, uid));
            }
            return Ok(());
        }
        self.jobs.put(uid, tracked);
        Ok(())
    }

    fn on_pod(&mut self, obs: PodObservation, out: &mut Outputs) {
        let Some(pod) = obs.pod else { return };
        out.count("pod_observations", 1);
        // Only a Job's Pods belong to a run; bare and session Pods are other processors'.
        let Some(job_uid) = pod.controller.as_ref().filter(|c| c.kind == "Job").map(|c| c.uid.clone()) else {
            return;
        };
        let mut tracked = self.jobs.get(&job_uid).cloned().unwrap_or_default();
        if tracked.filed {
            return; // the fact is written; a late termination cannot change it
        }
        let new = count_terminations(&pod, &mut tracked);
        if new > 0 {
            out.count("terminations_counted", new);
            self.jobs.put(job_uid, tracked);
        }
    }

    /// Files `uid`'s run if it finished and is not filed yet.
    fn file(&mut self, uid: &str, tracked: &mut TrackedJob, out: &mut Outputs) -> Result<(), ProcessError> {
        if tracked.filed {
            return Ok(());
        }
        let Some(run) = tracked.job.as_ref().and_then(|job| run_of(job, &tracked.exits)) else {
            return Ok(());
        };
        tracked.filed = true;
        out.count("runs_filed", 1);
        // The breakdown now lives in the fact; later terminations are ignored.
        tracked.exits.clear();
        tracked.seen.clear();
        let window = run.finished_at - run.finished_at.rem_euclid(self.cfg.window_length_ms);
        out.emit(0, run.owner.uid.clone(), &run)
            .and_then(|()| out.emit(1, window.to_string(), &run))
            .map_err(|e| ProcessError { reason: "encode_failed", detail: format!("run {uid}: {e}") })
    }

    /// After a relist of Jobs (SNAPSHOT_END of `epoch`): a Job not re-listed was deleted
    /// while unobserved. What finished is filed; nothing is kept.
    fn forget_unlisted(&mut self, epoch: i64, out: &mut Outputs) -> Result<(), ProcessError> {
        let gone: Vec<String> = self
            .jobs
            .iter()
            // Not re-listed: deleted while unobserved (or Pods of a Job that is gone).
            .filter(|(_, t)| t.job.is_none() || t.epoch < epoch)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(mut tracked) = self.jobs.delete(&uid) {
                self.file(&uid, &mut tracked, out)?;
                if let Some(at) = tracked.finished_seen_at {
                    self.due.delete(&(at + self.cfg.settle_ms, uid));
                }
            }
        }
        Ok(())
    }
}

impl Processor for Runs {
    type Input = RunsInput;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![&mut self.jobs, &mut self.due, &mut self.forwarded]
    }

    fn process(
        &mut self,
        input: RunsInput,
        _meta: &RecordMeta,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match input {
            RunsInput::Job(obs) => self.on_job(obs, now, out),
            RunsInput::Pod(obs) => {
                self.on_pod(obs, out);
                Ok(())
            }
        }
    }

    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs) {
        let ready: Vec<(StreamTime, String)> =
            self.due.iter().take_while(|((at, _), _)| *at <= now).map(|(k, _)| k.clone()).collect();
        for key in ready {
            self.due.delete(&key);
            let uid = key.1;
            if let Some(mut tracked) = self.jobs.get(&uid).cloned() {
                // Encoding a typed record cannot fail for a well-formed run; if it ever did,
                // the run stays unfiled and visible in state rather than half-written.
                if self.file(&uid, &mut tracked, out).is_ok() {
                    self.jobs.put(uid, tracked);
                }
            }
        }
        // The journal's windows close on stream time: forward ours, once per second of it,
        // after the runs filed at this time (so the journal sees them advance its time).
        let second = now.div_euclid(1000);
        if self.forwarded.get(&()).is_none_or(|last| *last < second) {
            self.forwarded.put((), second);
            out.forward_stream_time(1);
        }
    }
}

/// Whether the Job has finished: a True `Complete` or `Failed` condition and final
/// counters.
pub fn finished(job: &Job) -> bool {
    let status = &job.status;
    let terminal = status
        .conditions
        .iter()
        .any(|c| c.status == ConditionStatus::True && matches!(c.type_.as_str(), "Complete" | "Failed"));
    terminal && status.uncounted_succeeded == 0 && status.uncounted_failed == 0
}

/// The run of a finished Job (`None` while it has not finished).
pub fn run_of(job: &Job, exits: &BTreeMap<ExitKey, i64>) -> Option<JobRun> {
    if !finished(job) {
        return None;
    }
    let condition =
        |t: &str| job.status.conditions.iter().find(|c| c.type_ == t && c.status == ConditionStatus::True);
    let (result, finished_at, failure_reason) = match (condition("Failed"), condition("Complete")) {
        (Some(failed), _) => (RunResult::Failed, failed.last_transition_time, failed.reason.clone()),
        (None, Some(complete)) => {
            (RunResult::Succeeded, job.status.completion_time.or(complete.last_transition_time), None)
        }
        (None, None) => return None,
    };
    let owner = match &job.owner_cronjob {
        Some(cj) => RunOwner { kind: OwnerKind::Cronjob, name: cj.name.clone(), uid: cj.uid.clone() },
        None => RunOwner { kind: OwnerKind::Job, name: job.meta.name.clone(), uid: job.meta.uid.clone() },
    };
    Some(JobRun {
        namespace: job.meta.namespace.clone(),
        owner,
        run_name: job.meta.name.clone(),
        run_uid: job.meta.uid.clone(),
        started_at: job.status.start_time,
        // A finished Job without any time is malformed; the epoch would be a lie, so the
        // last observation's creation time stands in, else 0 is avoided by the caller.
        finished_at: finished_at.or(job.meta.creation_timestamp)?,
        result,
        failure_reason,
        succeeded_pods: job.status.succeeded_count(),
        failed_pods: job.status.failed_count(),
        parallelism: job.spec.parallelism,
        completions: job.spec.completions,
        backoff_limit: job.spec.backoff_limit,
        exits: exits
            .iter()
            .map(|((container, exit_code, reason), count)| ContainerExitCount {
                container: container.clone(),
                exit_code: *exit_code,
                reason: reason.clone(),
                count: *count,
            })
            .collect(),
    })
}

/// Counts the Pod's terminations not counted yet; returns how many were new.
fn count_terminations(pod: &Pod, tracked: &mut TrackedJob) -> u64 {
    let mut new = 0;
    for c in pod.containers.iter().chain(&pod.init_containers) {
        for t in [&c.last_state, &c.state].into_iter().flatten() {
            if tracked.seen.insert(termination_id(pod, &c.name, t)) {
                *tracked.exits.entry((c.name.clone(), t.exit_code, t.reason.clone())).or_default() += 1;
                new += 1;
            }
        }
    }
    new
}

/// A termination's identity: its container id, else what distinguishes it within the Pod.
fn termination_id(pod: &Pod, container: &str, t: &ContainerTermination) -> String {
    match &t.container_id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => format!(
            "{}/{container}/{}/{}",
            pod.meta.uid,
            t.finished_at.map_or_else(|| "?".into(), |f| f.to_string()),
            t.exit_code
        ),
    }
}
