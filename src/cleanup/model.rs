//! Typed mirror of `schemas/cleanup-decision.avsc`, encoded with serde like every typed
//! record.

use serde::{Deserialize, Serialize};

use crate::facts::{RunOwner, RunResult};

/// Identity of a Job to remove (`io.kubefacts.v1.JobRef`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID: the Kafka key and the delete precondition.
    pub uid: String,
}

/// Where an effective retention came from (`io.kubefacts.v1.RetentionSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RetentionSource {
    /// A value this reader does not know.
    #[default]
    Unknown,
    /// `[cleanup].job_retention_secs`.
    Default,
    /// The Job's `spec.ttlSecondsAfterFinished`, shorter than the default.
    JobTtl,
}

/// A finished Job may be removed (`io.kubefacts.v1.CleanupDecision`, key: Job UID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupDecision {
    /// The Job.
    pub job: JobRef,
    /// The run's owner, when known.
    pub owner: Option<RunOwner>,
    /// The run's result, when known.
    pub result: Option<RunResult>,
    /// The finish time retention counted from, epoch ms.
    pub finished_at: i64,
    /// Effective retention, seconds.
    pub retention_secs: i64,
    /// Which setting gave `retention_secs`.
    pub retention_source: RetentionSource,
    /// Stream time of the deciding sweep, epoch ms.
    pub decided_at: i64,
    /// Sequence number of the deciding sweep within its partition.
    pub sweep: i64,
}

impl CleanupDecision {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.CleanupDecision";
}
