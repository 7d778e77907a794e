//! What the journal stages write: the run facts of `job-run-facts.v1` (which live in
//! [`crate::facts`], shared with `[coverage]` and cleanup) and the window parts of
//! `job-runs.v2` — each window a superseding summary plus append-only pages of its runs.

use serde::{Deserialize, Serialize};

pub use crate::facts::*;

/// `io.kubefacts.v2.JobRunWindowPartKey`: the key of `job-runs.v2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobRunWindowPartKey {
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window length, ms.
    pub window_length_ms: i64,
    /// 0: the summary; n ≥ 1: page n.
    pub part: i32,
}

impl JobRunWindowPartKey {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v2.JobRunWindowPartKey";
    /// The part that holds a window's summary.
    pub const SUMMARY: i32 = 0;
}

/// `io.kubefacts.v2.JobRunWindowPart`: a window's summary (part 0) or one of its pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRunWindowPart {
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window length, ms.
    pub window_length_ms: i64,
    /// The key's part.
    pub part: i32,
    /// The window's revision at this emission.
    pub revision: i64,
    /// Stream time at emission.
    pub stream_time: i64,
    /// Set on part 0.
    pub summary: Option<JobRunWindowSummary>,
    /// Set on parts ≥ 1.
    pub page: Option<JobRunPage>,
}

impl JobRunWindowPart {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v2.JobRunWindowPart";

    /// The key this part is written under.
    pub fn key(&self) -> JobRunWindowPartKey {
        JobRunWindowPartKey {
            window_start: self.window_start,
            window_length_ms: self.window_length_ms,
            part: self.part,
        }
    }
}

/// `io.kubefacts.v2.JobRunWindowSummary`: what a window holds so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRunWindowSummary {
    /// Stream time had passed window end + grace at emission.
    pub is_final: bool,
    /// Pages written so far, numbered 1..=pages.
    pub pages: i32,
    /// Distinct runs filed.
    pub runs: i64,
    /// Of those, succeeded.
    pub succeeded: i64,
    /// Of those, failed.
    pub failed: i64,
    /// The failed runs by reason, sorted by reason (absent first).
    pub failure_reasons: Vec<FailureReasonCount>,
}

impl JobRunWindowSummary {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v2.JobRunWindowSummary";
}

/// `io.kubefacts.v2.FailureReasonCount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReasonCount {
    /// The Failed condition's reason; `None` for failures without one.
    pub reason: Option<String>,
    /// Failed runs with it.
    pub count: i64,
}

/// `io.kubefacts.v2.JobRunPage`: the runs one emission appended to a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRunPage {
    /// Sorted by `finished_at`, then `run_uid`.
    pub runs: Vec<JobRun>,
}

impl JobRunPage {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v2.JobRunPage";
}
