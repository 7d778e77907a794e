//! What the journal stages write: the run facts of `job-run-facts.v1` (which live in
//! [`crate::facts`], shared with `[coverage]` and cleanup) and the windows of `job-runs.v1`.

use serde::{Deserialize, Serialize};

pub use crate::facts::*;

/// `io.kubefacts.v1.JobRunWindowKey`: the key of `job-runs.v1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRunWindowKey {
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window length, ms.
    pub window_length_ms: i64,
}

impl JobRunWindowKey {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.JobRunWindowKey";
}

/// `io.kubefacts.v1.JobRunWindow`: one window's journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRunWindow {
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window length, ms.
    pub window_length_ms: i64,
    /// Increases with every emission for the window; the highest wins.
    pub revision: i64,
    /// Stream time had passed window end + grace at emission.
    pub is_final: bool,
    /// Stream time at emission.
    pub stream_time: i64,
    /// Every run of the window, sorted by `finished_at`, then `run_uid`.
    pub runs: Vec<JobRun>,
}

impl JobRunWindow {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.JobRunWindow";
}
