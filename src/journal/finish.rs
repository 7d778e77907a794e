//! How a Job's run is read off the Job: whether it has finished, how and when, and the
//! run fact it makes. Pure functions of one Job, shared by `[runs]` and the state it keeps
//! ([`super::tracked`]).

use std::collections::BTreeMap;

use crate::{
    facts::{ContainerExitCount, JobRun, OwnerKind, RunOwner, RunResult},
    observe::model::{ConditionStatus, Job},
};

/// A termination counted: (container, exit code, reason).
pub type ExitKey = (String, i32, Option<String>);

/// Whether the Job has finished: a True `Complete` or `Failed` condition and final
/// counters.
pub fn finished(job: &Job) -> bool {
    let status = &job.status;
    let terminal = status.conditions.iter().any(|c| terminal(&c.type_, c.status));
    terminal && status.uncounted_succeeded == 0 && status.uncounted_failed == 0
}

/// Whether a condition of this type and status ends the Job (what [`finished`] looks for;
/// also read by the view of `[runs]`'s global input, which keeps no conditions).
pub(super) fn terminal(type_: &str, status: ConditionStatus) -> bool {
    status == ConditionStatus::True && matches!(type_, "Complete" | "Failed")
}

/// The run of a finished Job (`None` while it has not finished); `first_seen_finished` as
/// for [`finish`].
pub fn run_of(job: &Job, exits: &BTreeMap<ExitKey, i64>, first_seen_finished: Option<i64>) -> Option<JobRun> {
    let (result, finished_at, failure_reason) = finish(job, first_seen_finished)?;
    Some(JobRun {
        namespace: job.meta.namespace.clone(),
        owner: owner_of(job),
        run_name: job.meta.name.clone(),
        run_uid: job.meta.uid.clone(),
        started_at: job.status.start_time,
        finished_at,
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

/// A finished Job's result, finish time and failure reason (`None` while it has not
/// finished). The finish time is the best evidence there is (docs/JOURNAL.md), in order:
/// 1. the Job's own word: `completionTime` (else the `Complete` condition's transition
///    time) on success, the `Failed` condition's transition time on failure;
/// 2. `first_seen_finished`: when the Job was first observed finished (the stream time
///    `[runs]` keeps as `TrackedJob::finished_seen_at`);
/// 3. its creation time;
///
/// and never earlier than its `startTime`: a run does not end before it began. A finished
/// Job with none of the three has no run (`[runs]` always has the second).
pub fn finish(job: &Job, first_seen_finished: Option<i64>) -> Option<(RunResult, i64, Option<String>)> {
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
    let at = finished_at.or(first_seen_finished).or(job.meta.creation_timestamp)?;
    Some((result, job.status.start_time.map_or(at, |start| at.max(start)), failure_reason))
}

/// The run's owner: the scheduling CronJob, or the Job itself.
pub fn owner_of(job: &Job) -> RunOwner {
    match &job.owner_cronjob {
        Some(cj) => RunOwner { kind: OwnerKind::Cronjob, name: cj.name.clone(), uid: cj.uid.clone() },
        None => RunOwner { kind: OwnerKind::Job, name: job.meta.name.clone(), uid: job.meta.uid.clone() },
    }
}
