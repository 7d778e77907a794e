//! The run facts (`schemas/job-run.avsc`): one finished Job, as `[runs]` files it and
//! `[journal]`, `[coverage]` and the cleanup decisions read it. Shared by those stages,
//! so it sits below them (docs/ARCHITECTURE.md, "Layers"). Encoded with serde like every
//! typed record (BTreeMap/Vec only, so encodings are byte-deterministic).

use serde::{Deserialize, Serialize};

/// What scheduled a run (`io.kubefacts.v1.OwnerKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OwnerKind {
    /// A value this reader does not know.
    #[default]
    Unknown,
    /// The scheduling CronJob.
    Cronjob,
    /// A bare Job owns its own run.
    Job,
}

/// The owner of a run (`io.kubefacts.v1.RunOwner`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RunOwner {
    /// CronJob, or Job for a bare Job.
    pub kind: OwnerKind,
    /// Its name.
    pub name: String,
    /// Its UID (the Kafka key of job-run-facts).
    pub uid: String,
}

/// How a run ended (`io.kubefacts.v1.RunResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunResult {
    /// A value this reader does not know.
    #[default]
    Unknown,
    /// A True `Complete` condition.
    Succeeded,
    /// A True `Failed` condition.
    Failed,
}

/// Terminations of one (container, exit code, reason) in a run
/// (`io.kubefacts.v1.ContainerExitCount`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContainerExitCount {
    /// Container or init container name.
    pub container: String,
    /// Exit code as observed.
    pub exit_code: i32,
    /// Reason as observed, never inferred from the code.
    pub reason: Option<String>,
    /// Distinct terminations.
    pub count: i64,
}

/// One finished Job (`io.kubefacts.v1.JobRun`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    /// The Job's namespace.
    pub namespace: String,
    /// The scheduling CronJob, or the Job itself when bare.
    pub owner: RunOwner,
    /// The Job's name.
    pub run_name: String,
    /// The Job's UID.
    pub run_uid: String,
    /// `status.startTime`; absent when the Job never started.
    pub started_at: Option<i64>,
    /// `completionTime` on success, the `Failed` condition's transition time on failure.
    pub finished_at: i64,
    /// How it ended.
    pub result: RunResult,
    /// The `Failed` condition's reason (Kubernetes vocabulary).
    pub failure_reason: Option<String>,
    /// The Job's own succeeded pod count.
    pub succeeded_pods: i32,
    /// The Job's own failed pod count.
    pub failed_pods: i32,
    /// Declared `spec.parallelism`.
    pub parallelism: Option<i32>,
    /// Declared `spec.completions`.
    pub completions: Option<i32>,
    /// Declared `spec.backoffLimit`.
    pub backoff_limit: Option<i32>,
    /// Container terminations of the run's pods, by (container, exit code, reason), sorted.
    pub exits: Vec<ContainerExitCount>,
}

impl JobRun {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.JobRun";
}

impl crate::runtime::DecodeInput for JobRun {
    async fn decode(
        _input: usize,
        codec: &crate::codec::Codec,
        bytes: &[u8],
    ) -> Result<Self, crate::codec::CodecError> {
        codec.decode_direct(bytes).await
    }
}
