//! The inputs and output ports of `[sessions]` and `[session-owners]`, named: each enum's
//! order is the order the processor declares (`OUTPUTS`) or its stage lists its topics.

use super::{model::SessionRetained, retention::RetentionState};
use crate::{
    codec::{Codec, CodecError},
    observe::{PodObservation, SessionObservation, shape},
    runtime::{DecodeInput, Event, Port, ProcessError, Stamp},
};

/// `[sessions]`'s output ports, in the order of [`super::Sessions::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionsOut {
    /// `session_projections`: one projection per change, keyed by session id.
    Projections,
    /// `session_owner_repartition`: what each session holds, re-keyed by owner.
    Retained,
}

impl Port for SessionsOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// `[sessions]`'s inputs, in order: `sessions.v1`, `pods.v1` (co-partitioned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionsIn {
    /// `sessions.v1`: session records from the host application.
    Sessions,
    /// `pods.v1`: Pod observations, markers and heartbeats.
    Pods,
}

impl SessionsIn {
    /// The input at `index`; `None` past the last.
    pub fn of(index: usize) -> Option<Self> {
        [Self::Sessions, Self::Pods].get(index).copied()
    }
}

/// `[session-owners]`'s output ports, in the order of [`super::SessionOwners::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnersOut {
    /// `retained_by_owner`: each owner's total.
    Totals,
}

impl Port for OwnersOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// The events `[sessions]` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionsEvent {
    /// A session record older than the one kept.
    StaleUpdates,
    /// A session record of a deleted session.
    Deleted,
    /// A session record applied.
    Updates,
    /// A Pod that names no session.
    PodsNotSession,
    /// A session Pod whose main container (and so its requests) could not be told.
    MainContainerUnverified,
    /// A session Pod observation applied.
    PodObservations,
    /// Session Pods a relist did not show again.
    PodsUnlisted,
    /// A projection or retained record that could not be encoded.
    EncodeFailed,
    /// A session Pod observation that did not decode.
    PodUndecodable,
    /// A released session forgotten.
    Forgotten,
    /// A projection emitted in this retention state.
    Projected(RetentionState),
}

impl Event for SessionsEvent {
    fn as_str(self) -> &'static str {
        match self {
            Self::StaleUpdates => "sessions_stale_updates",
            Self::Deleted => "sessions_deleted",
            Self::Updates => "sessions_updates",
            Self::PodsNotSession => "sessions_pods_not_session",
            Self::MainContainerUnverified => "sessions_main_container_unverified",
            Self::PodObservations => "sessions_pod_observations",
            Self::PodsUnlisted => "sessions_pods_unlisted",
            Self::EncodeFailed => "sessions_encode_failed",
            Self::PodUndecodable => "sessions_pod_undecodable",
            Self::Forgotten => "sessions_forgotten",
            Self::Projected(state) => match state {
                RetentionState::Unknown => "sessions_unknown",
                RetentionState::Active => "sessions_active",
                RetentionState::Retained => "sessions_retained",
                RetentionState::Releasing => "sessions_releasing",
                RetentionState::Released => "sessions_released",
            },
        }
    }
}

/// The events `[session-owners]` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnersEvent {
    /// A record that changed nothing.
    Unchanged,
    /// An owner total emitted.
    Totals,
    /// An owner total that could not be encoded.
    EncodeFailed,
}

impl Event for OwnersEvent {
    fn as_str(self) -> &'static str {
        match self {
            Self::Unchanged => "session_owners_unchanged",
            Self::Totals => "session_owners_totals",
            Self::EncodeFailed => "session_owners_encode_failed",
        }
    }
}

/// `[sessions]`'s inputs, in order: `sessions.v1`, `pods.v1` (co-partitioned).
#[derive(Debug, Clone, PartialEq)]
pub enum SessionsInput {
    /// A session record from the host application.
    Session(Box<SessionObservation>),
    /// A Pod observation, marker or heartbeat.
    Pod(Box<PodObservation>),
}

impl DecodeInput for SessionsInput {
    async fn decode(input: usize, codec: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
        Ok(match SessionsIn::of(input) {
            Some(SessionsIn::Sessions) => SessionsInput::Session(Box::new(codec.decode_as(bytes).await?)),
            Some(SessionsIn::Pods) => SessionsInput::Pod(Box::new(codec.decode_direct(bytes).await?)),
            None => return Err(CodecError::UnknownInput { input }),
        })
    }

    fn check(&self, key: Option<&[u8]>, time_header: bool) -> Result<(), ProcessError> {
        match self {
            SessionsInput::Session(o) => shape::session_shape(o).check(key, time_header),
            SessionsInput::Pod(o) => shape::pod_shape(o).check(key, time_header),
        }
    }

    fn stamp(&self) -> Option<Stamp<'_>> {
        Some(match self {
            SessionsInput::Session(o) => shape::stamp(&o.source, o.event, o.observed_at),
            SessionsInput::Pod(o) => shape::stamp(&o.source, o.event, o.observed_at),
        })
    }
}

/// `[session-owners]`'s input: what one session holds (keyed by owner).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnersInput(pub SessionRetained);

impl DecodeInput for OwnersInput {
    async fn decode(_input: usize, codec: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
        Ok(OwnersInput(codec.decode_as(bytes).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::{SessionOwners, Sessions};

    #[test]
    fn ports_name_the_outputs_declared_at_their_index() {
        let sessions = [SessionsOut::Projections, SessionsOut::Retained];
        assert_eq!(sessions.len(), Sessions::OUTPUTS.len());
        let topics = sessions.map(|p| Sessions::OUTPUTS[p.index()].topic);
        assert_eq!(topics, ["session_projections", "session_owner_repartition"]);
        assert_eq!(SessionOwners::OUTPUTS.len(), 1);
        assert_eq!(SessionOwners::OUTPUTS[OwnersOut::Totals.index()].topic, "retained_by_owner");
    }

    #[test]
    fn inputs_follow_the_stage_order() {
        let inputs = [0, 1, 2].map(SessionsIn::of);
        assert_eq!(inputs, [Some(SessionsIn::Sessions), Some(SessionsIn::Pods), None]);
    }
}
