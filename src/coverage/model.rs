//! Typed mirror of `schemas/coverage-alert.avsc` (`coverage-alerts.v1`), encoded with serde
//! like every typed record.

use serde::{Deserialize, Serialize};

/// The object whose progress is judged (`io.kubefacts.v1.CoverageSubject`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CoverageSubject {
    /// Kubernetes kind (`CronJob`).
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID: the Kafka key of `coverage-alerts.v1`.
    pub uid: String,
}

/// Coverage state of a subject (`io.kubefacts.v1.CoverageState`); see docs/COVERAGE.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CoverageState {
    /// A symbol added by a newer writer.
    #[default]
    Unknown,
    /// Progress within the expected interval.
    Ok,
    /// Overdue while the manager lease is covered; the pending span accrues.
    Pending,
    /// The pending span reached `for`.
    Firing,
    /// Progress after FIRING.
    Resolved,
    /// Overdue, but the manager lease had an uncovered gap: the control plane stopped.
    ManagerStopped,
    /// The manager lease history does not cover the span judged.
    InsufficientEvidence,
}

impl CoverageState {
    /// The Avro symbol.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Ok => "OK",
            Self::Pending => "PENDING",
            Self::Firing => "FIRING",
            Self::Resolved => "RESOLVED",
            Self::ManagerStopped => "MANAGER_STOPPED",
            Self::InsufficientEvidence => "INSUFFICIENT_EVIDENCE",
        }
    }
}

/// Kind of progress evidence (`io.kubefacts.v1.ProgressSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProgressSource {
    /// A symbol added by a newer writer.
    #[default]
    Unknown,
    /// A finished run on `job-run-facts.v1`.
    Run,
    /// The CronJob's `status.lastSuccessfulTime`.
    LastSuccessfulTime,
    /// No progress at all: measured from the subject's creation.
    Creation,
}

/// An interval with no manager-lease coverage (`io.kubefacts.v1.CoverageGap`), epoch ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CoverageGap {
    /// End of the last covering interval.
    pub started_at: i64,
    /// Start of the next covering interval, or the record's stream time if still open.
    pub ended_at: i64,
}

/// One state change of a subject (`io.kubefacts.v1.CoverageAlert`), with its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageAlert {
    /// What is judged.
    pub subject: CoverageSubject,
    /// The new state.
    pub state: CoverageState,
    /// The state before; `None` for the subject's first record.
    pub previous_state: Option<CoverageState>,
    /// Stream time of the change, epoch ms.
    pub stream_time: i64,
    /// Latest progress evidence, epoch ms.
    pub last_progress: Option<i64>,
    /// Where `last_progress` comes from.
    pub last_progress_source: Option<ProgressSource>,
    /// When the next progress was due (overdue after it), epoch ms.
    pub expected_by: Option<i64>,
    /// Start of the current pending span (PENDING and FIRING), epoch ms.
    pub pending_since: Option<i64>,
    /// The manager Lease judged, `namespace/name`.
    pub manager_lease: String,
    /// End of the manager lease's latest recorded coverage, epoch ms.
    pub manager_covered_until: Option<i64>,
    /// Coverage gaps within the span judged, oldest first.
    pub coverage_gaps: Vec<CoverageGap>,
}

impl CoverageAlert {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.CoverageAlert";
}
