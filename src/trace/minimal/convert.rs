//! Whole k8s-openapi objects (what `simulate` renders and tests build) to the allowlisted
//! types, field by field: the same fields decoding keeps, with every label and annotation
//! (no [`super::keeping`] scope applies to a copy; minimization looks its keys up anyway).

use k8s_openapi::api::{batch::v1 as batch, coordination::v1 as coordination, core::v1 as core};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::{
    Container, ContainerState, ContainerStatus, Count, CronJob, CronJobSpec, CronJobStatus, Job,
    JobCondition, JobSpec, JobStatus, JobTemplate, JobTemplateSpec, Lease, LeaseSpec, Namespace, Pod,
    PodSpec, PodStatus, PodTemplate, Requests, Resources, Terminated, UncountedTerminatedPods,
};

/// The allowlisted fields of `m` (owner references without their `apiVersion`, as decoded).
pub(crate) fn meta(m: &meta::ObjectMeta) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        creation_timestamp: m.creation_timestamp.clone(),
        deletion_timestamp: m.deletion_timestamp.clone(),
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
        owner_references: m.owner_references.as_ref().map(|refs| {
            refs.iter()
                .map(|o| meta::OwnerReference {
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    controller: o.controller,
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    }
}

fn template(t: &core::PodTemplateSpec) -> PodTemplate {
    PodTemplate { metadata: t.metadata.as_ref().map(|m| Box::new(meta(m))) }
}

fn container(c: &core::Container) -> Container {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    Container {
        name: c.name.clone(),
        resources: c.resources.as_ref().map(|_| Resources {
            requests: requests
                .map(|r| Requests { cpu: r.get("cpu").cloned(), memory: r.get("memory").cloned() }),
        }),
    }
}

fn state(s: &core::ContainerState) -> ContainerState {
    ContainerState {
        terminated: s.terminated.as_ref().map(|t| Terminated {
            exit_code: t.exit_code,
            reason: t.reason.clone(),
            signal: t.signal,
            started_at: t.started_at.clone(),
            finished_at: t.finished_at.clone(),
            container_id: t.container_id.clone(),
        }),
    }
}

fn status(s: &core::ContainerStatus) -> ContainerStatus {
    ContainerStatus {
        name: s.name.clone(),
        restart_count: s.restart_count,
        state: s.state.as_ref().map(state),
        last_state: s.last_state.as_ref().map(state),
    }
}

fn count(list: Option<&Vec<impl Sized>>) -> Option<Count> {
    list.map(|l| Count(l.len()))
}

impl From<&core::Pod> for Pod {
    fn from(p: &core::Pod) -> Self {
        Pod {
            metadata: meta(&p.metadata),
            spec: p.spec.as_ref().map(|s| PodSpec {
                containers: s.containers.iter().map(container).collect(),
                init_containers: s.init_containers.as_ref().map(|c| c.iter().map(container).collect()),
            }),
            status: p.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                container_statuses: s.container_statuses.as_ref().map(|c| c.iter().map(status).collect()),
                init_container_statuses: s
                    .init_container_statuses
                    .as_ref()
                    .map(|c| c.iter().map(status).collect()),
            }),
        }
    }
}

impl From<&batch::Job> for Job {
    fn from(j: &batch::Job) -> Self {
        Job {
            metadata: meta(&j.metadata),
            spec: j.spec.as_ref().map(|s| JobSpec {
                parallelism: s.parallelism,
                completions: s.completions,
                backoff_limit: s.backoff_limit,
                ttl_seconds_after_finished: s.ttl_seconds_after_finished,
                suspend: s.suspend,
                completion_mode: s.completion_mode.clone(),
                active_deadline_seconds: s.active_deadline_seconds,
                template: template(&s.template),
            }),
            status: j.status.as_ref().map(|s| JobStatus {
                start_time: s.start_time.clone(),
                completion_time: s.completion_time.clone(),
                active: s.active,
                succeeded: s.succeeded,
                failed: s.failed,
                ready: s.ready,
                uncounted_terminated_pods: s.uncounted_terminated_pods.as_ref().map(|u| {
                    UncountedTerminatedPods {
                        succeeded: count(u.succeeded.as_ref()),
                        failed: count(u.failed.as_ref()),
                    }
                }),
                conditions: s.conditions.as_ref().map(|c| {
                    c.iter()
                        .map(|c| JobCondition {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
                            reason: c.reason.clone(),
                            last_transition_time: c.last_transition_time.clone(),
                        })
                        .collect()
                }),
            }),
        }
    }
}

impl From<&batch::CronJob> for CronJob {
    fn from(c: &batch::CronJob) -> Self {
        CronJob {
            metadata: meta(&c.metadata),
            spec: c.spec.as_ref().map(|s| CronJobSpec {
                schedule: s.schedule.clone(),
                time_zone: s.time_zone.clone(),
                suspend: s.suspend,
                starting_deadline_seconds: s.starting_deadline_seconds,
                concurrency_policy: s.concurrency_policy.clone(),
                job_template: JobTemplate {
                    metadata: s.job_template.metadata.as_ref().map(|m| Box::new(meta(m))),
                    spec: s
                        .job_template
                        .spec
                        .as_ref()
                        .map(|j| JobTemplateSpec { template: template(&j.template) }),
                },
            }),
            status: c.status.as_ref().map(|s| CronJobStatus {
                last_schedule_time: s.last_schedule_time.clone(),
                last_successful_time: s.last_successful_time.clone(),
                active: count(s.active.as_ref()),
            }),
        }
    }
}

impl From<&coordination::Lease> for Lease {
    fn from(l: &coordination::Lease) -> Self {
        Lease {
            metadata: meta(&l.metadata),
            spec: l.spec.as_ref().map(|s| LeaseSpec {
                holder_identity: s.holder_identity.clone(),
                lease_duration_seconds: s.lease_duration_seconds,
                acquire_time: s.acquire_time.clone(),
                renew_time: s.renew_time.clone(),
                lease_transitions: s.lease_transitions,
            }),
        }
    }
}

impl From<&core::Namespace> for Namespace {
    fn from(n: &core::Namespace) -> Self {
        Namespace { metadata: meta(&n.metadata) }
    }
}
