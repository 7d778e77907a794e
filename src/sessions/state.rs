//! What `[sessions]` and `[session-owners]` keep in their state stores (changelogged: a
//! field change is a state format change).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{ContainerRequests, SessionProjection, SessionRetained};
use crate::{
    observe::model::{PodPhase, Session},
    runtime::epoch::Epoched,
};

/// A Pod seen under a session id (its latest decoded observation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.phase`.
    pub phase: PodPhase,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Requests of its verified main container.
    pub requests: ContainerRequests,
    /// Snapshot epoch of the observation.
    pub epoch: i64,
    /// Deleted, or not re-listed by a relist.
    pub gone: bool,
    /// Position among the observations of this session id (orders Pods and failures).
    pub seq: u64,
}

impl Epoched for SeenPod {
    fn epoch(&self) -> Option<i64> {
        Some(self.epoch)
    }
}

/// What `[sessions]` keeps per session id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tracked {
    /// The latest session record; `None` while only Pods were seen (no row), or after the
    /// host application deleted the session.
    pub session: Option<Session>,
    /// Every labelled Pod seen under this id, by UID.
    pub pods: BTreeMap<String, SeenPod>,
    /// Observations counted under this id (Pods and failed decodes).
    pub seq: u64,
    /// `seq` of the latest Pod observation that could not be decoded.
    pub undecodable_seq: Option<u64>,
    /// Revision of the latest projection emitted.
    pub revision: i64,
    /// The latest projection emitted, without stream time and revision.
    pub emitted: Option<SessionProjection>,
    /// The latest retained compute sent to the owner's total.
    pub contributed: Option<SessionRetained>,
    /// Stream time at which its emitted projection became RELEASED (`None` while not).
    pub released_at: Option<i64>,
}

/// What one RETAINED session adds to its owner's total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// CPU request, millicores.
    pub cpu_millicores: Option<i64>,
    /// Memory request, bytes.
    pub memory_bytes: Option<i64>,
}
