//! Session records from a host application, as they appear in a trace.

use serde::{Deserialize, Deserializer, Serialize};

/// A session's state in the host application (`io.kubefacts.v1.SessionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SessionState {
    /// A newer writer's symbol, or a state the producer cannot map.
    #[default]
    Unknown,
    /// Created; not terminal.
    Created,
    /// Starting; not terminal.
    Starting,
    /// Running; not terminal.
    Running,
    /// Waiting on a user; not stopped.
    WaitingForInput,
    /// Idle; not terminal.
    Idle,
    /// Terminal.
    Completed,
    /// Terminal.
    Failed,
    /// Terminal.
    Cancelled,
}

/// A host application's session state change (the payload of `sessions.v1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    /// The session's id (the Kafka key of `sessions.v1`).
    pub session_id: String,
    /// The session's state; unknown symbols read as [`SessionState::Unknown`].
    #[serde(deserialize_with = "state_or_unknown")]
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

/// A state symbol, or `Unknown` for one this version does not know (DESIGN §5.4).
fn state_or_unknown<'de, D: Deserializer<'de>>(d: D) -> Result<SessionState, D::Error> {
    use serde::de::{IntoDeserializer, value::Error};
    let symbol = String::deserialize(d)?;
    Ok(SessionState::deserialize(IntoDeserializer::<Error>::into_deserializer(symbol.as_str()))
        .unwrap_or_default())
}
