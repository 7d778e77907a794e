//! Typed mirrors of `schemas/session-projection.avsc`, `schemas/session-retained.avsc` and
//! `schemas/owner-retained-compute.avsc`, encoded with serde like every typed record.

use serde::{Deserialize, Serialize};

use super::retention::RetentionState;
pub use crate::observe::model::{PodIdentity, PodPhase, SessionState};

/// Requests of one container (`io.kubefacts.v1.ContainerRequests`): an explicit zero is
/// `Some(0)`, a request that is not set is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContainerRequests {
    /// CPU request in millicores (rounded up).
    pub cpu_millicores: Option<i64>,
    /// Memory request in bytes (rounded up).
    pub memory_bytes: Option<i64>,
}

/// A session joined with its own Pod (`io.kubefacts.v1.SessionProjection`,
/// `session-projections.v1`, key: session id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionProjection {
    /// The session id: the Kafka key.
    pub session_id: String,
    /// The session's owner.
    pub owner: String,
    /// The session's latest state.
    pub session_state: SessionState,
    /// By the precedence table (`retention::retention`).
    pub retention_state: RetentionState,
    /// The session's own Pod as observed; `None` when no matching Pod was observed.
    pub pod: Option<PodIdentity>,
    /// Its phase (latest decoded observation); `None` without one.
    pub pod_phase: Option<PodPhase>,
    /// Requests of its verified main container.
    pub main_container_requests: ContainerRequests,
    /// Pods carrying the session's label whose identity did not match.
    pub foreign_pods_seen: i64,
    /// Stream time at emission, epoch ms.
    pub stream_time: i64,
    /// Increases per session id; supersedes every lower revision.
    pub revision: i64,
}

impl SessionProjection {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.SessionProjection";
}

/// What one session holds for its owner's total (`io.kubefacts.v1.SessionRetained`, internal,
/// key: owner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRetained {
    /// The session id.
    pub session_id: String,
    /// The session's owner now (differs from the key when it left the key's owner).
    pub owner: String,
    /// Whether its retention state is RETAINED.
    pub retained: bool,
    /// CPU request of its main container while retained, millicores.
    pub cpu_millicores: Option<i64>,
    /// Memory request of its main container while retained, bytes.
    pub memory_bytes: Option<i64>,
    /// Stream time at emission, epoch ms.
    pub stream_time: i64,
}

impl SessionRetained {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.SessionRetained";
}

/// The compute an owner's stopped sessions still hold (`io.kubefacts.v1.OwnerRetainedCompute`,
/// `retained-compute-by-owner.v1`, key: owner).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRetainedCompute {
    /// The owner: the Kafka key.
    pub owner: String,
    /// RETAINED sessions of the owner.
    pub retained_sessions: i64,
    /// Sum of their main containers' CPU requests, millicores.
    pub cpu_millicores: i64,
    /// Sum of their main containers' memory requests, bytes.
    pub memory_bytes: i64,
    /// RETAINED sessions with no CPU request (not in the sum).
    pub sessions_without_cpu_request: i64,
    /// RETAINED sessions with no memory request (not in the sum).
    pub sessions_without_memory_request: i64,
    /// Stream time at emission, epoch ms.
    pub stream_time: i64,
    /// Increases per owner; supersedes every lower revision.
    pub revision: i64,
}

impl OwnerRetainedCompute {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.OwnerRetainedCompute";
}
