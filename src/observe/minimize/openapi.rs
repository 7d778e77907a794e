//! Minimization from whole k8s-openapi objects: the path before decoding was allowlisted,
//! kept (tests and benchmarks only) as the reference the allowlisted path must equal
//! field for field (`observe::tests`) and is measured against (`benches/decode.rs`).

use k8s_openapi::api::{batch::v1 as batch, coordination::v1 as coordination, core::v1 as core};

use super::{
    MinimizeConfig, condition_status, controller, display, non_empty, object_meta, pod_phase, saturating_i32,
    time_ms,
};
use crate::observe::{
    ObserveError,
    kind::Kind,
    model::{
        ContainerObservation, ContainerTermination, CronJob, CronJobStatus, Job, JobCondition, JobSpec,
        JobStatus, Lease, Pod,
    },
};
use crate::trace::minimal::allowlisted_meta;

/// Minimizes a Pod: identity, controller, phase, and per container its requests, restart
/// count and terminations.
pub fn pod(pod: &core::Pod, cfg: &MinimizeConfig) -> Result<Pod, ObserveError> {
    let mut metadata = allowlisted_meta(&pod.metadata);
    let refs = metadata.owner_references.take();
    let meta = object_meta("Pod", metadata, cfg)?;
    let controller = controller("Pod", &meta, refs)?;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let mut pod = Pod {
        controller,
        phase: pod_phase(status.and_then(|s| s.phase.as_deref())),
        containers: containers(
            spec.map(|s| s.containers.as_slice()).unwrap_or_default(),
            status.and_then(|s| s.container_statuses.as_deref()),
        ),
        init_containers: containers(
            spec.and_then(|s| s.init_containers.as_deref()).unwrap_or_default(),
            status.and_then(|s| s.init_container_statuses.as_deref()),
        ),
        meta,
    };
    super::bounds::pod(&mut pod);
    Ok(pod)
}

/// Minimizes a Job: identity, scheduling CronJob, the spec fields that bound a run and its
/// status. Absent `active`/`succeeded`/`failed` counts are written as 0 (the API omits
/// zero counts).
pub fn job(job: &batch::Job, cfg: &MinimizeConfig) -> Result<Job, ObserveError> {
    let mut metadata = allowlisted_meta(&job.metadata);
    let refs = metadata.owner_references.take();
    let meta = object_meta("Job", metadata, cfg)?;
    let owner_cronjob = controller("Job", &meta, refs)?.filter(|owner| owner.kind == Kind::CronJob);
    let spec = job.spec.as_ref().map_or_else(JobSpec::default, |s| JobSpec {
        parallelism: s.parallelism,
        completions: s.completions,
        backoff_limit: s.backoff_limit,
        ttl_seconds_after_finished: s.ttl_seconds_after_finished,
        suspend: s.suspend,
        completion_mode: s.completion_mode.clone(),
        active_deadline_seconds: s.active_deadline_seconds,
    });
    let status = job.status.as_ref();
    let uncounted = status.and_then(|s| s.uncounted_terminated_pods.as_ref());
    let count = |list: Option<&Vec<String>>| list.map_or(0, |l| saturating_i32(l.len()));
    let status = JobStatus {
        start_time: status.and_then(|s| s.start_time.as_ref()).map(time_ms),
        completion_time: status.and_then(|s| s.completion_time.as_ref()).map(time_ms),
        active: Some(status.and_then(|s| s.active).unwrap_or(0)),
        succeeded: Some(status.and_then(|s| s.succeeded).unwrap_or(0)),
        failed: Some(status.and_then(|s| s.failed).unwrap_or(0)),
        ready: status.and_then(|s| s.ready),
        uncounted_succeeded: count(uncounted.and_then(|u| u.succeeded.as_ref())),
        uncounted_failed: count(uncounted.and_then(|u| u.failed.as_ref())),
        conditions: status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| JobCondition {
                type_: c.type_.clone(),
                status: condition_status(&c.status),
                reason: non_empty(c.reason.as_deref()),
                last_transition_time: c.last_transition_time.as_ref().map(time_ms),
            })
            .collect(),
    };
    let mut job = Job { meta, owner_cronjob, spec, status };
    super::bounds::job(&mut job);
    Ok(job)
}

/// Minimizes a CronJob: identity, schedule, time zone and the status processors need.
pub fn cronjob(cronjob: &batch::CronJob, cfg: &MinimizeConfig) -> Result<CronJob, ObserveError> {
    let meta = object_meta("CronJob", allowlisted_meta(&cronjob.metadata), cfg)?;
    let Some(spec) = cronjob.spec.as_ref() else {
        return Err(ObserveError::MissingField {
            kind: "CronJob",
            object: display(&meta),
            field: "spec.schedule",
        });
    };
    let status = cronjob.status.as_ref();
    Ok(CronJob {
        schedule: spec.schedule.clone(),
        time_zone: spec.time_zone.clone(),
        suspend: spec.suspend.unwrap_or(false),
        starting_deadline_seconds: spec.starting_deadline_seconds,
        concurrency_policy: spec.concurrency_policy.clone(),
        status: CronJobStatus {
            last_schedule_time: status.and_then(|s| s.last_schedule_time.as_ref()).map(time_ms),
            last_successful_time: status.and_then(|s| s.last_successful_time.as_ref()).map(time_ms),
            active_count: status.and_then(|s| s.active.as_ref()).map_or(0, |a| saturating_i32(a.len())),
        },
        meta,
    })
}

/// Minimizes a Lease: holder and timing (MicroTimes truncated to milliseconds).
pub fn lease(lease: &coordination::Lease, cfg: &MinimizeConfig) -> Result<Lease, ObserveError> {
    let meta = object_meta("Lease", allowlisted_meta(&lease.metadata), cfg)?;
    let spec = lease.spec.as_ref();
    Ok(Lease {
        meta,
        holder_identity: spec.and_then(|s| s.holder_identity.clone()),
        lease_duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
        acquire_time: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0.as_millisecond()),
        renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0.as_millisecond()),
        lease_transitions: spec.and_then(|s| s.lease_transitions),
    })
}

fn containers(
    spec: &[core::Container],
    statuses: Option<&[core::ContainerStatus]>,
) -> Vec<ContainerObservation> {
    spec.iter()
        .map(|c| {
            let status = statuses.unwrap_or_default().iter().find(|s| s.name == c.name);
            let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            let request = |resource: &str| requests.and_then(|r| r.get(resource)).map(|q| q.0.clone());
            ContainerObservation {
                name: c.name.clone(),
                requests_cpu: request("cpu"),
                requests_memory: request("memory"),
                restart_count: status.map_or(0, |s| s.restart_count),
                state: status.and_then(|s| termination(s.state.as_ref())),
                last_state: status.and_then(|s| termination(s.last_state.as_ref())),
            }
        })
        .collect()
}

/// `state.terminated` without its `message`.
fn termination(state: Option<&core::ContainerState>) -> Option<ContainerTermination> {
    let t = state?.terminated.as_ref()?;
    Some(ContainerTermination {
        exit_code: t.exit_code,
        reason: non_empty(t.reason.as_deref()),
        exit_signal: t.signal,
        started_at: t.started_at.as_ref().map(time_ms),
        finished_at: t.finished_at.as_ref().map(time_ms),
        container_id: non_empty(t.container_id.as_deref()),
    })
}
