//! Rust mirrors of the five observation schemas (`schemas/*-observation.avsc`).
//!
//! The `.avsc` files are the source of truth: every struct here has the fields of its Avro
//! record, with the same names and in the same order; `["null", T]` is `Option<T>`, maps are
//! `BTreeMap<String, String>` (deterministic order), `timestamp-millis` is `i64` epoch
//! milliseconds and UUIDs are their canonical lowercase text. Named types the schemas
//! repeat in several files (`Source`, `ObjectMeta`, …) are defined once here. A test walks
//! each schema against these types, so drift fails the build.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Who published an observation (`io.kubefacts.v1.Source`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Source {
    /// Cluster name from the publisher's configuration.
    pub cluster: String,
    /// The publishing instance (watcher instance id or host application producer id).
    pub instance: String,
    /// Snapshot epoch; increases at every relist.
    pub epoch: i64,
}

/// What an observation reports (`io.kubefacts.v1.ObservationEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ObservationEvent {
    /// Reader-side default for a symbol added by a newer writer; never written.
    #[default]
    Unknown,
    /// The object was added, modified or re-listed; it is present.
    Applied,
    /// The object was deleted; the record carries its last observed state.
    Deleted,
    /// A relist with a new `source.epoch` starts; no object.
    SnapshotBegin,
    /// The relist of `source.epoch` is complete; no object.
    SnapshotEnd,
    /// Advances stream time in a quiet partition; no object.
    Heartbeat,
}

/// Minimized Kubernetes metadata (`io.kubefacts.v1.ObjectMeta`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (Avro `uuid`).
    pub uid: String,
    /// `metadata.resourceVersion`, opaque.
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp`, epoch ms.
    pub creation_timestamp: Option<i64>,
    /// `metadata.deletionTimestamp`, epoch ms; present while the object is terminating.
    pub deletion_timestamp: Option<i64>,
    /// The allowlisted labels present on the object.
    pub labels: BTreeMap<String, String>,
    /// The allowlisted annotations present on the object.
    pub annotations: BTreeMap<String, String>,
}

/// The controlling owner reference (`io.kubefacts.v1.OwnerReference`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerReference {
    /// Kind of the owner (`Job`, `CronJob`, `ReplicaSet`, …).
    pub kind: String,
    /// Name of the owner, in the owned object's namespace.
    pub name: String,
    /// UID of the owner (Avro `uuid`).
    pub uid: String,
}

/// Pod `status.phase` (`io.kubefacts.v1.PodPhase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PodPhase {
    /// Kubernetes' `Unknown`, an absent phase, or a newer writer's symbol.
    #[default]
    Unknown,
    /// `Pending`.
    Pending,
    /// `Running`.
    Running,
    /// `Succeeded`.
    Succeeded,
    /// `Failed`.
    Failed,
}

/// A container termination, without its message (`io.kubefacts.v1.ContainerTermination`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerTermination {
    /// `exitCode`.
    pub exit_code: i32,
    /// `reason` in Kubernetes vocabulary; absent when empty.
    pub reason: Option<String>,
    /// `signal`, when reported.
    pub exit_signal: Option<i32>,
    /// `startedAt`, epoch ms.
    pub started_at: Option<i64>,
    /// `finishedAt`, epoch ms.
    pub finished_at: Option<i64>,
    /// `containerID`: identifies this termination.
    pub container_id: Option<String>,
}

/// One container or init container (`io.kubefacts.v1.ContainerObservation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerObservation {
    /// Container name.
    pub name: String,
    /// `resources.requests.cpu` exactly as written.
    pub requests_cpu: Option<String>,
    /// `resources.requests.memory` exactly as written.
    pub requests_memory: Option<String>,
    /// `restartCount`; 0 without a status.
    pub restart_count: i32,
    /// `state.terminated`.
    pub state: Option<ContainerTermination>,
    /// `lastState.terminated`.
    pub last_state: Option<ContainerTermination>,
}

/// Minimized Pod (`io.kubefacts.v1.Pod`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// Pod metadata.
    pub meta: ObjectMeta,
    /// The controlling owner reference, if any.
    pub controller: Option<OwnerReference>,
    /// `status.phase`.
    pub phase: PodPhase,
    /// `spec.containers` with their statuses, in spec order.
    pub containers: Vec<ContainerObservation>,
    /// `spec.initContainers` with their statuses, in spec order.
    pub init_containers: Vec<ContainerObservation>,
}

/// An observation on `pods.v1` (`io.kubefacts.v1.PodObservation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodObservation {
    /// Who published it.
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
    /// What it reports.
    pub event: ObservationEvent,
    /// The Pod, for APPLIED and DELETED.
    pub pod: Option<Pod>,
}

impl PodObservation {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.PodObservation";
}

/// Selected Job spec fields (`io.kubefacts.v1.JobSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobSpec {
    /// `spec.parallelism`.
    pub parallelism: Option<i32>,
    /// `spec.completions`.
    pub completions: Option<i32>,
    /// `spec.backoffLimit`.
    pub backoff_limit: Option<i32>,
    /// `spec.ttlSecondsAfterFinished`.
    pub ttl_seconds_after_finished: Option<i32>,
    /// `spec.suspend`.
    pub suspend: Option<bool>,
    /// `spec.completionMode` as written.
    pub completion_mode: Option<String>,
    /// `spec.activeDeadlineSeconds` (schema revision 2).
    pub active_deadline_seconds: Option<i64>,
}

/// Kubernetes condition status (`io.kubefacts.v1.ConditionStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConditionStatus {
    /// Kubernetes' `Unknown`, or a newer writer's symbol.
    #[default]
    Unknown,
    /// `True`.
    True,
    /// `False`.
    False,
}

/// One Job condition, without its message (`io.kubefacts.v1.JobCondition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCondition {
    /// Condition type (`Complete`, `Failed`, `FailureTarget`, …; an open set).
    #[serde(rename = "type")]
    pub type_: String,
    /// Condition status.
    pub status: ConditionStatus,
    /// Reason in Kubernetes vocabulary; absent when empty.
    pub reason: Option<String>,
    /// `lastTransitionTime`, epoch ms.
    pub last_transition_time: Option<i64>,
}

/// Selected Job status fields (`io.kubefacts.v1.JobStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobStatus {
    /// `status.startTime`, epoch ms.
    pub start_time: Option<i64>,
    /// `status.completionTime`, epoch ms; set only on success.
    pub completion_time: Option<i64>,
    /// `status.active`; absent means 0 (see [`JobStatus::active_count`]).
    pub active: Option<i32>,
    /// `status.succeeded`; absent means 0.
    pub succeeded: Option<i32>,
    /// `status.failed`; absent means 0.
    pub failed: Option<i32>,
    /// `status.ready`; absent when not reported.
    pub ready: Option<i32>,
    /// Size of `status.uncountedTerminatedPods.succeeded`.
    pub uncounted_succeeded: i32,
    /// Size of `status.uncountedTerminatedPods.failed`.
    pub uncounted_failed: i32,
    /// `status.conditions` in API order.
    pub conditions: Vec<JobCondition>,
}

impl JobStatus {
    /// `active`, with absent read as 0 (the API omits zero counts).
    pub fn active_count(&self) -> i32 {
        self.active.unwrap_or(0)
    }

    /// `succeeded`, with absent read as 0.
    pub fn succeeded_count(&self) -> i32 {
        self.succeeded.unwrap_or(0)
    }

    /// `failed`, with absent read as 0.
    pub fn failed_count(&self) -> i32 {
        self.failed.unwrap_or(0)
    }
}

/// Minimized Job (`io.kubefacts.v1.Job`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Job metadata.
    pub meta: ObjectMeta,
    /// The controlling owner reference when it is a CronJob.
    pub owner_cronjob: Option<OwnerReference>,
    /// Selected spec fields.
    pub spec: JobSpec,
    /// Selected status fields.
    pub status: JobStatus,
}

/// An observation on `jobs.v1` (`io.kubefacts.v1.JobObservation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobObservation {
    /// Who published it.
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
    /// What it reports.
    pub event: ObservationEvent,
    /// The Job, for APPLIED and DELETED.
    pub job: Option<Job>,
}

impl JobObservation {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.JobObservation";
}

/// Selected CronJob status fields (`io.kubefacts.v1.CronJobStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CronJobStatus {
    /// `status.lastScheduleTime`, epoch ms.
    pub last_schedule_time: Option<i64>,
    /// `status.lastSuccessfulTime`, epoch ms.
    pub last_successful_time: Option<i64>,
    /// Number of entries in `status.active`.
    pub active_count: i32,
}

/// Minimized CronJob (`io.kubefacts.v1.CronJob`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronJob {
    /// CronJob metadata.
    pub meta: ObjectMeta,
    /// `spec.schedule` as written.
    pub schedule: String,
    /// `spec.timeZone`.
    pub time_zone: Option<String>,
    /// `spec.suspend`; false when not set.
    pub suspend: bool,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline_seconds: Option<i64>,
    /// `spec.concurrencyPolicy` as written.
    pub concurrency_policy: Option<String>,
    /// Selected status fields.
    pub status: CronJobStatus,
}

/// An observation on `cronjobs.v1` (`io.kubefacts.v1.CronJobObservation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronJobObservation {
    /// Who published it.
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
    /// What it reports.
    pub event: ObservationEvent,
    /// The CronJob, for APPLIED and DELETED.
    pub cronjob: Option<CronJob>,
}

impl CronJobObservation {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.CronJobObservation";
}

/// Minimized Lease (`io.kubefacts.v1.Lease`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Lease metadata.
    pub meta: ObjectMeta,
    /// `spec.holderIdentity`; empty is a graceful release.
    pub holder_identity: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `spec.acquireTime`, truncated to epoch ms.
    pub acquire_time: Option<i64>,
    /// `spec.renewTime`, truncated to epoch ms.
    pub renew_time: Option<i64>,
    /// `spec.leaseTransitions`.
    pub lease_transitions: Option<i32>,
}

/// An observation on `leases.v1` (`io.kubefacts.v1.LeaseObservation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseObservation {
    /// Who published it.
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
    /// What it reports.
    pub event: ObservationEvent,
    /// The Lease, for APPLIED and DELETED.
    pub lease: Option<Lease>,
}

impl LeaseObservation {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.LeaseObservation";
}

/// A session's state (defined with the trace format, which carries it too).
pub use crate::trace::SessionState;

/// Identity of the Pod a session runs in (`io.kubefacts.v1.PodIdentity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentity {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID (Avro `uuid`), when known.
    pub uid: Option<String>,
}

/// A session as the host application reports it (`io.kubefacts.v1.Session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The session id: the key of `sessions.v1` and the session label's value.
    pub session_id: String,
    /// The session's state.
    pub state: SessionState,
    /// The Pod the host application expects to run it.
    pub pod: PodIdentity,
    /// Opaque owner id.
    pub owner: String,
    /// When the state changed, epoch ms.
    pub updated_at: i64,
}

/// An observation on `sessions.v1` (`io.kubefacts.v1.SessionObservation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionObservation {
    /// Who published it.
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
    /// What it reports.
    pub event: ObservationEvent,
    /// The session, for APPLIED and DELETED.
    pub session: Option<Session>,
}

impl SessionObservation {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.SessionObservation";
}
