//! The retention precedence table (docs/SESSIONS.md): whether a session's own Pod still
//! holds compute. One function, rules in order, first match wins; nothing else in the crate
//! decides a retention state.

use serde::{Deserialize, Serialize};

pub use crate::observe::model::{PodPhase, SessionState};

/// Whether a session's Pod holds compute (`io.kubefacts.v1.RetentionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RetentionState {
    /// Not determinable, or a newer writer's symbol.
    #[default]
    Unknown,
    /// The session is not terminal.
    Active,
    /// A terminal session whose Pod still holds compute.
    Retained,
    /// A terminal session whose Pod is being deleted.
    Releasing,
    /// A terminal session whose Pod no longer holds compute.
    Released,
}

impl RetentionState {
    /// The Avro symbol.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Active => "ACTIVE",
            Self::Retained => "RETAINED",
            Self::Releasing => "RELEASING",
            Self::Released => "RELEASED",
        }
    }
}

/// Whether the host application is done with the session.
pub fn is_terminal(session: SessionState) -> bool {
    matches!(session, SessionState::Completed | SessionState::Failed | SessionState::Cancelled)
}

/// Whether every container of a Pod in `phase` has ended (the scheduler no longer counts
/// its requests). Kubernetes' Unknown phase (node stopped reporting) is not: the Pod is
/// still bound to its node.
pub fn has_ended(phase: PodPhase) -> bool {
    matches!(phase, PodPhase::Succeeded | PodPhase::Failed)
}

/// What is known of the session's own Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodEvidence {
    /// Its latest observation: phase, and whether a deletion timestamp is set.
    Present {
        /// `status.phase`.
        phase: PodPhase,
        /// `metadata.deletionTimestamp` is set.
        deleting: bool,
    },
    /// Observed, then deleted (or not re-listed by a relist): gone.
    Gone,
    /// Never observed (foreign Pods carrying the label do not count: they supply nothing).
    Missing,
    /// Its latest observation could not be decoded (dead-lettered): its state is unknown.
    Undecodable,
}

/// The precedence table, rules in order (docs/SESSIONS.md lists the same rules):
///
/// 1. an unknown session state → UNKNOWN;
/// 2. a session that is not terminal (WAITING_FOR_INPUT and IDLE included) → ACTIVE;
/// 3. a terminal session whose own Pod's latest observation did not decode → UNKNOWN;
/// 4. … whose own Pod was never observed → UNKNOWN;
/// 5. … whose own Pod is gone → RELEASED;
/// 6. … whose own Pod has ended (Succeeded or Failed, deleting or not) → RELEASED;
/// 7. … whose own Pod is being deleted → RELEASING;
/// 8. … whose own Pod is Pending, Running or Unknown → RETAINED.
pub fn retention(session: SessionState, pod: PodEvidence) -> RetentionState {
    use RetentionState as R;
    if session == SessionState::Unknown {
        return R::Unknown;
    }
    if !is_terminal(session) {
        return R::Active;
    }
    match pod {
        PodEvidence::Undecodable | PodEvidence::Missing => R::Unknown,
        PodEvidence::Gone => R::Released,
        PodEvidence::Present { phase, .. } if has_ended(phase) => R::Released,
        PodEvidence::Present { deleting: true, .. } => R::Releasing,
        PodEvidence::Present { .. } => R::Retained,
    }
}

/// Every session state (for exhaustive tests).
#[cfg(test)]
pub(crate) const SESSION_STATES: [SessionState; 9] = [
    SessionState::Unknown,
    SessionState::Created,
    SessionState::Starting,
    SessionState::Running,
    SessionState::WaitingForInput,
    SessionState::Idle,
    SessionState::Completed,
    SessionState::Failed,
    SessionState::Cancelled,
];

/// Every Pod phase (for exhaustive tests).
#[cfg(test)]
pub(crate) const PHASES: [PodPhase; 5] =
    [PodPhase::Pending, PodPhase::Running, PodPhase::Succeeded, PodPhase::Failed, PodPhase::Unknown];

#[cfg(test)]
mod tests {
    use super::{PodEvidence as E, RetentionState as R, *};

    /// Every observation kind the table distinguishes, with every phase × deletion for a
    /// present Pod.
    fn evidences() -> Vec<E> {
        let mut all = vec![E::Gone, E::Missing, E::Undecodable];
        for phase in PHASES {
            for deleting in [false, true] {
                all.push(E::Present { phase, deleting });
            }
        }
        all
    }

    /// The expected retention, written as a plain case list (not the rules' order), so
    /// dropping or reordering a rule in `retention` changes at least one row.
    fn expected(session: SessionState, pod: E) -> R {
        use PodPhase::*;
        use SessionState as S;
        match (session, pod) {
            (S::Unknown, _) => R::Unknown,
            (S::Created | S::Starting | S::Running | S::WaitingForInput | S::Idle, _) => R::Active,
            (_, E::Gone) => R::Released,
            (_, E::Missing | E::Undecodable) => R::Unknown,
            (_, E::Present { phase: Succeeded | Failed, deleting: _ }) => R::Released,
            (_, E::Present { phase: Pending | Running | Unknown, deleting: true }) => R::Releasing,
            (_, E::Present { phase: Pending | Running | Unknown, deleting: false }) => R::Retained,
        }
    }

    #[test]
    fn every_session_state_pod_phase_deletion_and_observation() {
        let mut rows = 0;
        for session in SESSION_STATES {
            for pod in evidences() {
                assert_eq!(retention(session, pod), expected(session, pod), "{session:?} × {pod:?}");
                rows += 1;
            }
        }
        assert_eq!(rows, 9 * (3 + 5 * 2), "9 states × (gone, missing, undecodable, 5 phases × deletion)");
    }

    #[test]
    fn named_cases_from_the_brief() {
        let running = E::Present { phase: PodPhase::Running, deleting: false };
        assert_eq!(retention(SessionState::Completed, running), R::Retained, "completed, Pod still running");
        assert_eq!(retention(SessionState::WaitingForInput, running), R::Active, "waiting is not stopped");
        assert_eq!(
            retention(SessionState::Unknown, running),
            R::Unknown,
            "a state this version does not know"
        );
        let deleting = E::Present { phase: PodPhase::Running, deleting: true };
        assert_eq!(retention(SessionState::Cancelled, deleting), R::Releasing);
        let done = E::Present { phase: PodPhase::Succeeded, deleting: false };
        assert_eq!(retention(SessionState::Failed, done), R::Released, "an ended Pod holds nothing");
    }
}
