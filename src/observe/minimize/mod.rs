//! Minimization: pure functions from Kubernetes objects to the observation records.
//!
//! This is an **allowlist** (DESIGN §3): every output field is named here and copied from
//! one input field. Nothing else is read — in particular never env, args, command,
//! volumes, images, secrets or any `message` — and labels and annotations are looked up
//! by the configured keys, never iterated. The input is already allowlisted: the objects
//! of [`crate::trace::minimal`], which hold only what is read here and in admission, so
//! the rest never reached memory ([`MinimizeConfig::kept_keys`] names the labels and
//! annotations kept).
//!
//! What may grow without end — a Job's conditions, a Pod's containers, reasons — is
//! bounded ([`bounds`]), and what was cut is counted.
//!
//! `openapi` (tests and benchmarks only) is the same from whole k8s-openapi objects, as
//! it was before decoding was allowlisted: the reference the decoded path is checked and
//! measured against.

pub mod bounds;
#[cfg(any(test, feature = "fixtures"))]
pub mod openapi;

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::{Deserialize, Serialize};

use super::model::{
    ConditionStatus, ContainerObservation, ContainerTermination, CronJob, CronJobStatus, Job, JobCondition,
    JobSpec, JobStatus, Lease, ObjectMeta, OwnerReference, Pod, PodIdentity, PodPhase, Session,
};
use super::{ObserveError, admission::AdmissionConfig, annotations, kind::Kind};
use crate::trace::{
    KeptKeys, SessionRecord,
    minimal::{self, Count},
};
pub use bounds::Cuts;

/// The default session label: a Pod carrying it belongs to the session it names.
pub const DEFAULT_SESSION_LABEL: &str = "kubefacts.io/session";

/// Which labels and annotations minimization copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MinimizeConfig {
    /// Label keys copied when present (an allowlist); every other label is dropped.
    pub label_keys: Vec<String>,
    /// Annotation keys copied when present (an allowlist); every other annotation is
    /// dropped.
    pub annotation_keys: Vec<String>,
    /// The label whose value names a Pod's session. Always copied, even when missing from
    /// `label_keys`, because a Pod's routing key is computed from the shipped record.
    pub session_label: String,
}

impl MinimizeConfig {
    /// The label and annotation keys decoding must keep: what minimization copies, and
    /// the opt-out annotation `admission` reads. Every other key's value is skipped.
    pub fn kept_keys(&self, admission: &AdmissionConfig) -> Arc<KeptKeys> {
        let mut labels = self.label_keys.clone();
        labels.push(self.session_label.clone());
        let mut annotations = self.annotation_keys.clone();
        annotations.push(admission.opt_out_annotation.clone());
        for keys in [&mut labels, &mut annotations] {
            keys.sort();
            keys.dedup();
        }
        Arc::new(KeptKeys { labels, annotations })
    }
}

impl Default for MinimizeConfig {
    fn default() -> Self {
        Self {
            label_keys: vec![DEFAULT_SESSION_LABEL.to_owned()],
            // What `[cleanup]`, `[coverage]` and `[sessions]` read.
            annotation_keys: vec![
                annotations::DEFAULT_DEPENDENCY_ANNOTATION.to_owned(),
                annotations::EXPECTED_INTERVAL_ANNOTATION.to_owned(),
                annotations::DEFAULT_CONTAINER_ANNOTATION.to_owned(),
            ],
            session_label: DEFAULT_SESSION_LABEL.to_owned(),
        }
    }
}

/// Minimizes a Pod: identity, controller, phase, and per container its requests, restart
/// count and terminations, bounded ([`bounds::pod`]).
pub fn pod(pod: minimal::Pod, cfg: &MinimizeConfig) -> Result<Pod, ObserveError> {
    pod_counting(pod, cfg, &mut Cuts::default())
}

/// [`pod`], adding what bounding cut to `cuts`.
pub fn pod_counting(pod: minimal::Pod, cfg: &MinimizeConfig, cuts: &mut Cuts) -> Result<Pod, ObserveError> {
    let minimal::Pod { mut metadata, spec, status } = pod;
    let refs = metadata.owner_references.take();
    let meta = object_meta("Pod", metadata, cfg)?;
    let controller = controller("Pod", &meta, refs)?;
    let (containers_spec, init_spec) =
        spec.map_or_else(Default::default, |s| (s.containers, s.init_containers));
    let status = status.as_ref();
    let mut pod = Pod {
        controller,
        phase: pod_phase(status.and_then(|s| s.phase.as_deref())),
        containers: containers(containers_spec, status.and_then(|s| s.container_statuses.as_deref())),
        init_containers: containers(
            init_spec.unwrap_or_default(),
            status.and_then(|s| s.init_container_statuses.as_deref()),
        ),
        meta,
    };
    *cuts = cuts.plus(bounds::pod(&mut pod));
    Ok(pod)
}

/// Minimizes a Job: identity, scheduling CronJob, the spec fields that bound a run and its
/// status. Absent `active`/`succeeded`/`failed` counts are written as 0 (the API omits
/// zero counts). Conditions are bounded ([`bounds::job`]).
pub fn job(job: minimal::Job, cfg: &MinimizeConfig) -> Result<Job, ObserveError> {
    job_counting(job, cfg, &mut Cuts::default())
}

/// [`job`], adding what bounding cut to `cuts`.
pub fn job_counting(job: minimal::Job, cfg: &MinimizeConfig, cuts: &mut Cuts) -> Result<Job, ObserveError> {
    let minimal::Job { mut metadata, spec, mut status } = job;
    let refs = metadata.owner_references.take();
    let meta = object_meta("Job", metadata, cfg)?;
    let owner_cronjob = controller("Job", &meta, refs)?.filter(|owner| owner.kind == Kind::CronJob);
    let spec = spec.map_or_else(JobSpec::default, |s| JobSpec {
        parallelism: s.parallelism,
        completions: s.completions,
        backoff_limit: s.backoff_limit,
        ttl_seconds_after_finished: s.ttl_seconds_after_finished,
        suspend: s.suspend,
        completion_mode: s.completion_mode,
        active_deadline_seconds: s.active_deadline_seconds,
    });
    let conditions = status.as_mut().and_then(|s| s.conditions.take()).unwrap_or_default();
    let status = status.as_ref();
    let uncounted = status.and_then(|s| s.uncounted_terminated_pods.as_ref());
    let count = |list: Option<&Count>| list.map_or(0, |l| saturating_i32(l.0));
    let status = JobStatus {
        start_time: status.and_then(|s| s.start_time.as_ref()).map(time_ms),
        completion_time: status.and_then(|s| s.completion_time.as_ref()).map(time_ms),
        active: Some(status.and_then(|s| s.active).unwrap_or(0)),
        succeeded: Some(status.and_then(|s| s.succeeded).unwrap_or(0)),
        failed: Some(status.and_then(|s| s.failed).unwrap_or(0)),
        ready: status.and_then(|s| s.ready),
        uncounted_succeeded: count(uncounted.and_then(|u| u.succeeded.as_ref())),
        uncounted_failed: count(uncounted.and_then(|u| u.failed.as_ref())),
        conditions: conditions
            .into_iter()
            .map(|c| JobCondition {
                status: condition_status(&c.status),
                type_: c.type_,
                reason: c.reason.filter(|r| !r.is_empty()),
                last_transition_time: c.last_transition_time.as_ref().map(time_ms),
            })
            .collect(),
    };
    let mut job = Job { meta, owner_cronjob, spec, status };
    *cuts = cuts.plus(bounds::job(&mut job));
    Ok(job)
}

/// Minimizes a CronJob: identity, schedule, time zone and the status processors need.
pub fn cronjob(cronjob: minimal::CronJob, cfg: &MinimizeConfig) -> Result<CronJob, ObserveError> {
    let meta = object_meta("CronJob", cronjob.metadata, cfg)?;
    let Some(spec) = cronjob.spec else {
        return Err(ObserveError::MissingField {
            kind: "CronJob",
            object: display(&meta),
            field: "spec.schedule",
        });
    };
    let status = cronjob.status.as_ref();
    Ok(CronJob {
        schedule: spec.schedule,
        time_zone: spec.time_zone,
        suspend: spec.suspend.unwrap_or(false),
        starting_deadline_seconds: spec.starting_deadline_seconds,
        concurrency_policy: spec.concurrency_policy,
        status: CronJobStatus {
            last_schedule_time: status.and_then(|s| s.last_schedule_time.as_ref()).map(time_ms),
            last_successful_time: status.and_then(|s| s.last_successful_time.as_ref()).map(time_ms),
            active_count: status.and_then(|s| s.active.as_ref()).map_or(0, |a| saturating_i32(a.0)),
        },
        meta,
    })
}

/// Minimizes a Lease: holder and timing (MicroTimes truncated to milliseconds).
pub fn lease(lease: minimal::Lease, cfg: &MinimizeConfig) -> Result<Lease, ObserveError> {
    let meta = object_meta("Lease", lease.metadata, cfg)?;
    let mut spec = lease.spec;
    let holder_identity = spec.as_mut().and_then(|s| s.holder_identity.take());
    let spec = spec.as_ref();
    Ok(Lease {
        meta,
        holder_identity,
        lease_duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
        acquire_time: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0.as_millisecond()),
        renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0.as_millisecond()),
        lease_transitions: spec.and_then(|s| s.lease_transitions),
    })
}

/// A host application's session record as a `Session`; `updated_at` defaults to
/// `observed_at_ms`.
pub fn session(record: &SessionRecord, observed_at_ms: i64) -> Result<Session, ObserveError> {
    let object = format!("session {:?}", record.session_id);
    if record.session_id.is_empty() {
        return Err(ObserveError::MissingIdentity { kind: "Session", object, field: "session_id" });
    }
    let uid = match record.pod.uid.as_deref() {
        Some(uid) => {
            check_uid("Session", || object.clone(), "pod.uid", uid)?;
            Some(uid.to_owned())
        }
        None => None,
    };
    Ok(Session {
        session_id: record.session_id.clone(),
        state: record.state,
        pod: PodIdentity { namespace: record.pod.namespace.clone(), name: record.pod.name.clone(), uid },
        owner: record.owner.clone(),
        updated_at: record.updated_at_ms.unwrap_or(observed_at_ms),
    })
}

/// Pod `status.phase` as the schema's enum; anything else (Kubernetes' `Unknown`, absent,
/// a future phase) is `UNKNOWN`.
pub fn pod_phase(phase: Option<&str>) -> PodPhase {
    match phase {
        Some("Pending") => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        _ => PodPhase::Unknown,
    }
}

/// A condition's `status` (`True`/`False`/anything else) as the schema's enum.
pub fn condition_status(status: &str) -> ConditionStatus {
    match status {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    }
}

fn object_meta(
    kind: &'static str,
    m: meta::ObjectMeta,
    cfg: &MinimizeConfig,
) -> Result<ObjectMeta, ObserveError> {
    // Everything is checked before anything moves out: an error names the object whole.
    // Named only in an error: formatted then, not for every object.
    let object = || format!("{}/{}", m.namespace.as_deref().unwrap_or("?"), m.name.as_deref().unwrap_or("?"));
    for (value, field) in
        [(&m.namespace, "metadata.namespace"), (&m.name, "metadata.name"), (&m.uid, "metadata.uid")]
    {
        if value.as_deref().is_none_or(str::is_empty) {
            return Err(ObserveError::MissingIdentity { kind, object: object(), field });
        }
    }
    check_uid(kind, object, "metadata.uid", m.uid.as_deref().unwrap_or_default())?;
    let meta::ObjectMeta {
        namespace,
        name,
        uid,
        resource_version,
        creation_timestamp,
        deletion_timestamp,
        labels,
        annotations,
        ..
    } = m;
    let session_label = std::iter::once(&cfg.session_label);
    Ok(ObjectMeta {
        uid: uid.unwrap_or_default(),
        namespace: namespace.unwrap_or_default(),
        name: name.unwrap_or_default(),
        resource_version,
        creation_timestamp: creation_timestamp.as_ref().map(time_ms),
        deletion_timestamp: deletion_timestamp.as_ref().map(time_ms),
        labels: pick(labels, cfg.label_keys.iter().chain(session_label)),
        annotations: pick(annotations, cfg.annotation_keys.iter()),
    })
}

/// Takes the allowlisted keys out; never iterates the object's own keys.
fn pick<'k>(
    map: Option<BTreeMap<String, String>>,
    keys: impl Iterator<Item = &'k String>,
) -> BTreeMap<String, String> {
    let Some(mut map) = map else {
        return BTreeMap::new();
    };
    keys.filter_map(|k| map.remove_entry(k)).collect()
}

/// The owner reference with `controller: true`, if any.
fn controller(
    kind: &'static str,
    owned: &ObjectMeta,
    refs: Option<Vec<meta::OwnerReference>>,
) -> Result<Option<OwnerReference>, ObserveError> {
    let Some(r) = refs.unwrap_or_default().into_iter().find(|r| r.controller == Some(true)) else {
        return Ok(None);
    };
    check_uid(kind, || display(owned), "metadata.ownerReferences[].uid", &r.uid)?;
    Ok(Some(OwnerReference { kind: r.kind, name: r.name, uid: r.uid }))
}

fn containers(
    spec: Vec<minimal::Container>,
    statuses: Option<&[minimal::ContainerStatus]>,
) -> Vec<ContainerObservation> {
    spec.into_iter()
        .map(|c| {
            let status = statuses.unwrap_or_default().iter().find(|s| s.name == c.name);
            let requests = c.resources.and_then(|r| r.requests);
            let (cpu, memory) = requests.map_or((None, None), |r| (r.cpu, r.memory));
            ContainerObservation {
                requests_cpu: cpu.map(|q| q.0),
                requests_memory: memory.map(|q| q.0),
                restart_count: status.map_or(0, |s| s.restart_count),
                state: status.and_then(|s| termination(s.state.as_ref())),
                last_state: status.and_then(|s| termination(s.last_state.as_ref())),
                name: c.name,
            }
        })
        .collect()
}

/// `state.terminated` without its `message`.
fn termination(state: Option<&minimal::ContainerState>) -> Option<ContainerTermination> {
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

/// A Kubernetes UID as the schema's `uuid`: canonical lowercase 8-4-4-4-12 hex, which is
/// what the API server generates and what an Avro reader accepts and gives back unchanged.
fn check_uid(
    kind: &'static str,
    object: impl FnOnce() -> String,
    field: &'static str,
    uid: &str,
) -> Result<(), ObserveError> {
    let canonical = uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        });
    if canonical {
        Ok(())
    } else {
        Err(ObserveError::InvalidUid { kind, object: object(), field, value: uid.to_owned() })
    }
}

fn display(meta: &ObjectMeta) -> String {
    format!("{}/{}", meta.namespace, meta.name)
}

fn non_empty(s: Option<&str>) -> Option<String> {
    s.filter(|s| !s.is_empty()).map(str::to_owned)
}

fn time_ms(t: &meta::Time) -> i64 {
    t.0.as_millisecond()
}

fn saturating_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
