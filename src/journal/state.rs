//! What `[runs]` and `[journal]` keep in their state stores (changelogged: a field change
//! is a state format change).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{finish::ExitKey, model::RunResult};
use crate::{
    observe::model::Job,
    runtime::{Epoched, StreamTime},
};

/// What `[runs]` keeps per Job UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedJob {
    /// The latest observation of the Job (absent while only its Pods were seen); trimmed
    /// once the run is filed, stored with binary UIDs (`tracked.rs`).
    #[serde(with = "super::tracked::job")]
    pub job: Option<Job>,
    /// Snapshot epoch of the latest observation of the Job.
    pub epoch: i64,
    /// Terminations of its Pods' containers, by (container, exit code, reason).
    pub exits: BTreeMap<ExitKey, i64>,
    /// Identities of the terminations counted (container ids).
    pub seen: BTreeSet<String>,
    /// When it was first seen finished (stream time), if it is.
    pub finished_seen_at: Option<StreamTime>,
    /// Whether its run was filed.
    pub filed: bool,
}

impl Epoched for TrackedJob {
    /// A Job seen only through its Pods was never listed itself: any relist ends it.
    fn epoch(&self) -> Option<i64> {
        self.job.as_ref().map(|_| self.epoch)
    }
}

/// A Job `[runs]` no longer tracks: decided for removal (and maybe still in the cluster), or
/// observed gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// Snapshot epoch of its latest observation.
    pub epoch: i64,
    /// When it was observed gone (stream time); `None` while a decided Job may still exist.
    pub gone_at: Option<StreamTime>,
}

impl Epoched for Ended {
    fn epoch(&self) -> Option<i64> {
        Some(self.epoch)
    }
}

/// A pending Job that declares dependencies, from any partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependent {
    /// Partition of the jobs topic it was observed on (a relist there forgets it).
    pub partition: i32,
    /// Snapshot epoch of its latest observation.
    pub epoch: i64,
    /// Its namespace (where the names below are).
    pub namespace: String,
    /// The Jobs it depends on.
    pub needs: Vec<String>,
}

impl Epoched for Dependent {
    fn epoch(&self) -> Option<i64> {
        Some(self.epoch)
    }
}

/// Sweep bookkeeping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sweeps {
    /// Index (stream time / period) of the period last swept.
    pub period: i64,
    /// Sweeps run so far in this partition: the decisions' `sweep`.
    pub count: i64,
}

/// What `[journal]` keeps per window besides its runs (which are kept one by one, so a
/// new run changes one small state entry, not the whole window).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowState {
    /// Distinct runs filed in the window.
    pub runs: u64,
    /// Of those, succeeded.
    pub succeeded: u64,
    /// Of those, failed, by failure reason (`None`: no reason given).
    pub failure_reasons: BTreeMap<Option<String>, u64>,
    /// Pages written so far (numbered 1..=pages).
    pub pages: i32,
    /// Revision of the last emission (0: never emitted).
    pub revision: i64,
    /// Stream time of the last emission.
    pub emitted_at: Option<StreamTime>,
    /// Runs are waiting for the next page.
    pub dirty: bool,
    /// The last emission was final.
    pub final_emitted: bool,
}

/// What `[journal]` keeps of a run once filed: enough to tell a duplicate from a new
/// version (the digest of its datum) and to take it out of the summary's counts when a new
/// version replaces it. The run itself was written to a page and is not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiledRun {
    /// CRC-64-AVRO of the run's datum.
    pub digest: u64,
    /// Its result.
    pub result: RunResult,
    /// Its failure reason.
    pub failure_reason: Option<String>,
}
