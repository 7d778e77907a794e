//! The Kubernetes objects as kubefacts decodes them: only the allowlisted fields (DESIGN §3).
//!
//! The watcher (through kube-rs) and the trace reader deserialize Kubernetes JSON straight
//! into these types. Each holds exactly what admission and minimization read; serde skips
//! every other field while parsing, so env, args, command, volumes, images, messages and
//! the values of unlisted labels and annotations never become values in memory. Labels and
//! annotations keep the configured keys only ([`KeptKeys`], [`keeping`]).
//!
//! Shapes and names follow k8s-openapi's (`metadata`, `spec`, `status`, the same nesting),
//! so code reads them the same way; `metadata` *is* k8s-openapi's `ObjectMeta`, filled
//! with the allowlisted fields only, because kube-rs reads the resource version through it
//! ([`kube::Resource`] comes with the `k8s_openapi::Resource` impls below). Timestamps and
//! quantities use k8s-openapi's own leaf types, so they parse exactly as before.
//!
//! A value that is present and read must have its Kubernetes type (a container's `name`,
//! a condition's `status`): bad input there is an error, as it was. A field that is not
//! read is not checked: an object is no longer rejected for a malformed field kubefacts
//! never looks at.

mod convert;
mod keys;
mod time;

use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity,
    apis::meta::v1::{MicroTime, ObjectMeta, Time},
};
use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, SeqAccess, Visitor},
};

/// The reference minimization from whole objects (tests and benchmarks) copies metadata
/// through the same allowlisted copy.
#[cfg(any(test, feature = "fixtures"))]
pub(crate) use convert::meta as allowlisted_meta;
pub use keys::{KeptKeys, keeping};

/// One decoded object of a kind kubefacts reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// `v1/Pod`.
    Pod(Box<Pod>),
    /// `batch/v1/Job`.
    Job(Box<Job>),
    /// `batch/v1/CronJob`.
    CronJob(Box<CronJob>),
    /// `coordination.k8s.io/v1/Lease`.
    Lease(Box<Lease>),
    /// `v1/Namespace`.
    Namespace(Box<Namespace>),
}

impl Object {
    /// The Kubernetes kind, e.g. `Job`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Pod(_) => "Pod",
            Self::Job(_) => "Job",
            Self::CronJob(_) => "CronJob",
            Self::Lease(_) => "Lease",
            Self::Namespace(_) => "Namespace",
        }
    }

    /// Its metadata (allowlisted fields only).
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Pod(o) => &o.metadata,
            Self::Job(o) => &o.metadata,
            Self::CronJob(o) => &o.metadata,
            Self::Lease(o) => &o.metadata,
            Self::Namespace(o) => &o.metadata,
        }
    }
}

/// A Pod: identity, containers and their statuses.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Pod {
    /// Allowlisted metadata.
    #[serde(default, deserialize_with = "keys::allowlisted")]
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: Option<PodSpec>,
    /// `status`.
    pub status: Option<PodStatus>,
}

/// `Pod.spec`: the containers, for their names and requests.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// `containers` (required, as in Kubernetes).
    pub containers: Vec<Container>,
    /// `initContainers`.
    pub init_containers: Option<Vec<Container>>,
}

/// A container: its name and requests; never its image, command, args, env or mounts.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Container {
    /// `name`.
    pub name: String,
    /// `resources`.
    pub resources: Option<Resources>,
}

/// `resources`: the requests only.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Resources {
    /// `requests`.
    pub requests: Option<Requests>,
}

/// `resources.requests`: CPU and memory, exactly as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Requests {
    /// `cpu`.
    pub cpu: Option<Quantity>,
    /// `memory`.
    pub memory: Option<Quantity>,
}

/// `Pod.status`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `phase`.
    pub phase: Option<String>,
    /// `containerStatuses`.
    pub container_statuses: Option<Vec<ContainerStatus>>,
    /// `initContainerStatuses`.
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
}

/// A container's status: restarts and terminations.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// `name` (required).
    pub name: String,
    /// `restartCount` (required).
    pub restart_count: i32,
    /// `state`.
    pub state: Option<ContainerState>,
    /// `lastState`.
    pub last_state: Option<ContainerState>,
}

/// A container state: only `terminated` is read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ContainerState {
    /// `terminated`.
    pub terminated: Option<Terminated>,
}

/// `state.terminated`, without its `message`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terminated {
    /// `exitCode` (required).
    pub exit_code: i32,
    /// `reason`.
    pub reason: Option<String>,
    /// `signal`.
    pub signal: Option<i32>,
    /// `startedAt`.
    #[serde(default, deserialize_with = "time::opt")]
    pub started_at: Option<Time>,
    /// `finishedAt`.
    #[serde(default, deserialize_with = "time::opt")]
    pub finished_at: Option<Time>,
    /// `containerID`.
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
}

/// A Job: identity, the spec fields that bound a run, the pod template's metadata (for
/// admission) and its status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Job {
    /// Allowlisted metadata.
    #[serde(default, deserialize_with = "keys::allowlisted")]
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: Option<JobSpec>,
    /// `status`.
    pub status: Option<JobStatus>,
}

/// `Job.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// `parallelism`.
    pub parallelism: Option<i32>,
    /// `completions`.
    pub completions: Option<i32>,
    /// `backoffLimit`.
    pub backoff_limit: Option<i32>,
    /// `ttlSecondsAfterFinished`.
    pub ttl_seconds_after_finished: Option<i32>,
    /// `suspend`.
    pub suspend: Option<bool>,
    /// `completionMode`.
    pub completion_mode: Option<String>,
    /// `activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// `template`: its metadata only (the pod spec is never read).
    #[serde(default)]
    pub template: PodTemplate,
}

/// A pod template: its metadata only, where an opt-out annotation may sit.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PodTemplate {
    /// `metadata`, allowlisted. Boxed: an `ObjectMeta` is ~0.5 KB, and serde moves a
    /// value up through every enclosing struct (a tenth of a Job's decoding was those
    /// copies).
    #[serde(default, deserialize_with = "keys::allowlisted_opt")]
    pub metadata: Option<Box<ObjectMeta>>,
}

/// `Job.status`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// `startTime`.
    #[serde(default, deserialize_with = "time::opt")]
    pub start_time: Option<Time>,
    /// `completionTime`.
    #[serde(default, deserialize_with = "time::opt")]
    pub completion_time: Option<Time>,
    /// `active`.
    pub active: Option<i32>,
    /// `succeeded`.
    pub succeeded: Option<i32>,
    /// `failed`.
    pub failed: Option<i32>,
    /// `ready`.
    pub ready: Option<i32>,
    /// `uncountedTerminatedPods`.
    pub uncounted_terminated_pods: Option<UncountedTerminatedPods>,
    /// `conditions`.
    pub conditions: Option<Vec<JobCondition>>,
}

/// `status.uncountedTerminatedPods`: how many UIDs each list holds (the UIDs are skipped).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct UncountedTerminatedPods {
    /// `succeeded`.
    pub succeeded: Option<Count>,
    /// `failed`.
    pub failed: Option<Count>,
}

/// A Job condition, without its `message`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// `type` (required).
    #[serde(rename = "type")]
    pub type_: String,
    /// `status` (required).
    pub status: String,
    /// `reason`.
    pub reason: Option<String>,
    /// `lastTransitionTime`.
    #[serde(default, deserialize_with = "time::opt")]
    pub last_transition_time: Option<Time>,
}

/// A CronJob: identity, schedule, the templates' metadata (for admission) and status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CronJob {
    /// Allowlisted metadata.
    #[serde(default, deserialize_with = "keys::allowlisted")]
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: Option<CronJobSpec>,
    /// `status`.
    pub status: Option<CronJobStatus>,
}

/// `CronJob.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJobSpec {
    /// `schedule` (required).
    pub schedule: String,
    /// `timeZone`.
    pub time_zone: Option<String>,
    /// `suspend`.
    pub suspend: Option<bool>,
    /// `startingDeadlineSeconds`.
    pub starting_deadline_seconds: Option<i64>,
    /// `concurrencyPolicy`.
    pub concurrency_policy: Option<String>,
    /// `jobTemplate`: metadata and the pod template's metadata only.
    #[serde(default)]
    pub job_template: JobTemplate,
}

/// `CronJob.spec.jobTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct JobTemplate {
    /// `metadata`, allowlisted (boxed, as a pod template's).
    #[serde(default, deserialize_with = "keys::allowlisted_opt")]
    pub metadata: Option<Box<ObjectMeta>>,
    /// `spec`: its pod template only.
    pub spec: Option<JobTemplateSpec>,
}

/// `CronJob.spec.jobTemplate.spec`: its pod template only.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct JobTemplateSpec {
    /// `template`.
    #[serde(default)]
    pub template: PodTemplate,
}

/// `CronJob.status`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJobStatus {
    /// `lastScheduleTime`.
    #[serde(default, deserialize_with = "time::opt")]
    pub last_schedule_time: Option<Time>,
    /// `lastSuccessfulTime`.
    #[serde(default, deserialize_with = "time::opt")]
    pub last_successful_time: Option<Time>,
    /// `active`: how many references (they are skipped).
    pub active: Option<Count>,
}

/// A Lease: holder and timing.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Lease {
    /// Allowlisted metadata.
    #[serde(default, deserialize_with = "keys::allowlisted")]
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: Option<LeaseSpec>,
}

/// `Lease.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// `holderIdentity`.
    pub holder_identity: Option<String>,
    /// `leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `acquireTime`.
    pub acquire_time: Option<MicroTime>,
    /// `renewTime`.
    pub renew_time: Option<MicroTime>,
    /// `leaseTransitions`.
    pub lease_transitions: Option<i32>,
}

/// A Namespace: its metadata (admission reads its name and opt-out annotation).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Namespace {
    /// Allowlisted metadata.
    #[serde(default, deserialize_with = "keys::allowlisted")]
    pub metadata: ObjectMeta,
}

/// The length of a list whose items are never read: each is skipped as it is parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count(pub usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Counting;
        impl<'de> Visitor<'de> for Counting {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(Counting)
    }
}

/// `k8s_openapi::Resource` and `Metadata` (and through them `kube::Resource`), so kube-rs
/// lists and watches straight into the allowlisted type.
macro_rules! resource {
    ($ty:ty, $api_version:literal, $group:literal, $kind:literal, $plural:literal, $scope:ident) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::$scope;
        }
        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

resource!(Pod, "v1", "", "Pod", "pods", NamespaceResourceScope);
resource!(Job, "batch/v1", "batch", "Job", "jobs", NamespaceResourceScope);
resource!(CronJob, "batch/v1", "batch", "CronJob", "cronjobs", NamespaceResourceScope);
resource!(Lease, "coordination.k8s.io/v1", "coordination.k8s.io", "Lease", "leases", NamespaceResourceScope);
resource!(Namespace, "v1", "", "Namespace", "namespaces", ClusterResourceScope);

#[cfg(test)]
mod tests;
