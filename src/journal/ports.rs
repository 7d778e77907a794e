//! The inputs and output ports of `[runs]` and `[journal]`, named: each enum's order is the
//! order the processor declares (`OUTPUTS`) or its stage lists its topics.

use crate::runtime::Port;

/// `[runs]`'s output ports, in the order of [`super::Runs::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsOut {
    /// `job_run_facts`: the run facts, keyed by owner UID.
    Facts,
    /// `journal_repartition`: the same runs keyed by journal window start.
    JournalRepartition,
    /// `cleanup_decisions`: the cleanup decisions, keyed by Job UID.
    CleanupDecisions,
}

impl Port for RunsOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// `[runs]`'s inputs, in order: `jobs.v1`, `pods.v1` (co-partitioned), then `jobs.v1`
/// again as a global input (every partition), for the dependency holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsIn {
    /// `jobs.v1`, this task's partition.
    Jobs,
    /// `pods.v1`, this task's partition.
    Pods,
    /// `jobs.v1`, every partition (the global input).
    AllJobs,
}

impl RunsIn {
    /// The input at `index`; `None` past the last.
    pub fn of(index: usize) -> Option<Self> {
        [Self::Jobs, Self::Pods, Self::AllJobs].get(index).copied()
    }
}

/// `[journal]`'s output ports, in the order of [`super::Journal::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalOut {
    /// `job_runs`: the windows, keyed by [`super::JobRunWindowKey`].
    Windows,
}

impl Port for JournalOut {
    fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Journal, Runs};

    #[test]
    fn ports_name_the_outputs_declared_at_their_index() {
        let runs = [RunsOut::Facts, RunsOut::JournalRepartition, RunsOut::CleanupDecisions];
        assert_eq!(runs.len(), Runs::OUTPUTS.len());
        let topics = runs.map(|p| Runs::OUTPUTS[p.index()].topic);
        assert_eq!(topics, ["job_run_facts", "journal_repartition", "cleanup_decisions"]);
        assert_eq!(Journal::OUTPUTS.len(), 1);
        assert_eq!(Journal::OUTPUTS[JournalOut::Windows.index()].topic, "job_runs");
    }

    #[test]
    fn inputs_follow_the_stage_order() {
        let inputs = [0, 1, 2, 3].map(RunsIn::of);
        assert_eq!(inputs, [Some(RunsIn::Jobs), Some(RunsIn::Pods), Some(RunsIn::AllJobs), None]);
    }
}
