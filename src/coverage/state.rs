//! What `[coverage]` keeps in its state stores (changelogged: a field change is a state
//! format change).

use serde::{Deserialize, Serialize};

use super::model::CoverageState;
use crate::runtime::epoch::Epoched;

/// What the CronJob says about itself (its latest observation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectSpec {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.schedule`.
    pub schedule: String,
    /// `spec.timeZone`.
    pub time_zone: Option<String>,
    /// `spec.suspend`: a suspended CronJob is not expected to progress, so not judged.
    pub suspend: bool,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline_seconds: Option<i64>,
    /// `metadata.creationTimestamp`, epoch ms.
    pub created_ms: Option<i64>,
    /// The raw override annotation, if any.
    pub expected_interval: Option<String>,
    /// `status.lastSuccessfulTime`, epoch ms.
    pub last_successful_ms: Option<i64>,
}

/// What `[coverage]` keeps per subject UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// The CronJob (absent while only its runs were seen).
    pub spec: Option<SubjectSpec>,
    /// Snapshot epoch of its latest observation.
    pub epoch: i64,
    /// Latest progress from a finished run, epoch ms.
    pub last_run_ms: Option<i64>,
    /// Durations of its latest runs (at most 5), ms: a slow CronJob gets more slack.
    pub recent_run_ms: Vec<i64>,
    /// When it was last unsuspended (stream time): not due before its next fire after it.
    pub resumed_at: Option<i64>,
    /// The state last emitted; `None`: nothing emitted (or a tombstone was).
    pub state: Option<CoverageState>,
    /// Start of the pending span that fired (kept while FIRING).
    pub fired_pending_since: Option<i64>,
    /// When an OK subject is next due for evaluation (its index entry).
    pub due_at: Option<i64>,
}

impl Epoched for Subject {
    // A subject seen only through its runs keeps epoch 0 (not `None`): compared as it always was.
    fn epoch(&self) -> Option<i64> {
        Some(self.epoch)
    }
}

/// Trace contexts of the records an alert is judged from (kept only for records that
/// carried one): the alert links to them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectContexts {
    /// The CronJob's latest observation.
    pub cronjob: Option<String>,
    /// The latest run counted as progress.
    pub run: Option<String>,
}
