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

/// The run of a finished Job (`None` while it has not finished).
pub fn run_of(job: &Job, exits: &BTreeMap<ExitKey, i64>) -> Option<JobRun> {
    let (result, finished_at, failure_reason) = finish(job)?;
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
/// finished). The finish time is `completionTime` on success, the `Failed` condition's
/// transition time on failure; a finished Job without either is malformed, and its creation
/// time stands in rather than the epoch (without one, there is no run).
pub fn finish(job: &Job) -> Option<(RunResult, i64, Option<String>)> {
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
    Some((result, finished_at.or(job.meta.creation_timestamp)?, failure_reason))
}

/// The run's owner: the scheduling CronJob, or the Job itself.
pub fn owner_of(job: &Job) -> RunOwner {
    match &job.owner_cronjob {
        Some(cj) => RunOwner { kind: OwnerKind::Cronjob, name: cj.name.clone(), uid: cj.uid.clone() },
        None => RunOwner { kind: OwnerKind::Job, name: job.meta.name.clone(), uid: job.meta.uid.clone() },
    }
}
