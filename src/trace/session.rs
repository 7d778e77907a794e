//! Session records from a host application, as they appear in a trace.

use serde::{Deserialize, Serialize};

/// A host application's session state change (the payload of `sessions.v1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    /// The session's id (the Kafka key of `sessions.v1`).
    pub session_id: String,
    /// The session's state; unknown symbols read as [`SessionState::Unknown`].
    pub state: SessionState,
    /// The Pod the session expects to run in.
    pub pod: SessionPod,
    /// Who the session belongs to (a team, tenant or user id — never a secret).
    pub owner: String,
    /// When the host application changed the state, epoch ms; defaults to `observed_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ms: Option<i64>,
}

/// Identity of the Pod a session expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionPod {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID, when the host application recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// Session states of DESIGN §5.4; states this version does not know read as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SessionState {
    /// Created, not yet scheduled.
    Created,
    /// Its Pod is starting.
    Starting,
    /// Working.
    Running,
    /// Waiting for its user: not stopped.
    WaitingForInput,
    /// Idle.
    Idle,
    /// Finished successfully.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
    /// A state this version does not know.
    #[serde(other)]
    Unknown,
}
