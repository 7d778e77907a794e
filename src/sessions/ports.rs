//! The inputs and output ports of `[sessions]` and `[session-owners]`, named: each enum's
//! order is the order the processor declares (`OUTPUTS`) or its stage lists its topics.

use crate::runtime::Port;

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
