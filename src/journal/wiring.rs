//! The inputs and output ports of `[runs]` and `[journal]`, named: each enum's order is the
//! order the processor declares (`OUTPUTS`) or its stage lists its topics.

use super::glance::{JobGlance, PodGlance};
use crate::{
    codec::{Codec, CodecError},
    observe::{JobObservation, PodObservation, shape},
    runtime::{DecodeInput, Event, Port, ProcessError, Stamp},
};

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
    /// `job_runs`: the windows' summaries and pages, keyed by
    /// [`super::JobRunWindowPartKey`].
    Parts,
}

impl Port for JournalOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// The events `[runs]` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsEvent {
    /// A Job observation processed.
    JobObservations,
    /// A Pod observation processed.
    PodObservations,
    /// Container terminations newly counted.
    TerminationsCounted,
    /// A run filed.
    RunsFiled,
    /// A cleanup sweep run.
    Sweeps,
    /// Jobs a sweep kept: suspended.
    KeptSuspended,
    /// Jobs a sweep kept: already being deleted.
    KeptBeingDeleted,
    /// Jobs a sweep kept: a pending Job depends on them.
    KeptDependedOn,
    /// Decisions a sweep left for the next one (over its cap).
    DecisionsDeferred,
    /// A cleanup decision written.
    Decisions,
}

impl Event for RunsEvent {
    fn as_str(self) -> &'static str {
        match self {
            Self::JobObservations => "job_observations",
            Self::PodObservations => "pod_observations",
            Self::TerminationsCounted => "terminations_counted",
            Self::RunsFiled => "runs_filed",
            Self::Sweeps => "sweeps",
            Self::KeptSuspended => "kept_suspended",
            Self::KeptBeingDeleted => "kept_being_deleted",
            Self::KeptDependedOn => "kept_depended_on",
            Self::DecisionsDeferred => "decisions_deferred",
            Self::Decisions => "decisions",
        }
    }
}

/// The events `[journal]` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalEvent {
    /// A window revision emitted (its summary, after its new pages).
    WindowsEmitted,
    /// A page of runs written.
    PagesWritten,
    /// A window emitted final for the first time.
    WindowsFinalized,
    /// A run already in its window.
    RunsDuplicate,
    /// A run filed into its window.
    RunsFiled,
    /// A run filed into a window already emitted final.
    RunsLate,
}

impl Event for JournalEvent {
    fn as_str(self) -> &'static str {
        match self {
            Self::WindowsEmitted => "windows_emitted",
            Self::PagesWritten => "pages_written",
            Self::WindowsFinalized => "windows_finalized",
            Self::RunsDuplicate => "runs_duplicate",
            Self::RunsFiled => "runs_filed",
            Self::RunsLate => "runs_late",
        }
    }
}

/// `[runs]`'s inputs, in order: `jobs.v1`, `pods.v1` (co-partitioned), then optionally
/// `jobs.v1` again as a global input (every partition), for the dependency holds.
#[derive(Debug, Clone, PartialEq)]
pub enum RunsInput {
    /// A Job observation (or a marker or heartbeat of the jobs topic) of this partition.
    Job(Box<JobObservation>),
    /// A Pod observation (or a marker or heartbeat of the pods topic), as much of it as a
    /// run reads.
    Pod(Box<PodGlance>),
    /// A Job observation of any partition (the global input), as much of it as the
    /// dependency holds read. Shared: one read record reaches every task of the thread that
    /// reads it.
    AnyJob(std::sync::Arc<JobGlance>),
}

impl DecodeInput for RunsInput {
    async fn decode(input: usize, codec: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
        Ok(match RunsIn::of(input) {
            Some(RunsIn::Jobs) => RunsInput::Job(Box::new(codec.decode_direct(bytes).await?)),
            Some(RunsIn::Pods) => RunsInput::Pod(Box::new(
                codec.decode_view::<PodObservation, _>(bytes, PodGlance::read, PodGlance::of).await?,
            )),
            Some(RunsIn::AllJobs) => RunsInput::AnyJob(std::sync::Arc::new(
                codec.decode_view::<JobObservation, _>(bytes, JobGlance::read, JobGlance::of).await?,
            )),
            None => return Err(CodecError::UnknownInput { input }),
        })
    }

    fn check(&self, key: Option<&[u8]>, time_header: bool) -> Result<(), ProcessError> {
        match self {
            RunsInput::Job(o) => shape::job_shape(o).check(key, time_header),
            RunsInput::AnyJob(o) => {
                let uid = o.job.as_ref().map(|j| j.uid.as_str());
                shape::job_shape_of(o.event, &o.source, uid).check(key, time_header)
            }
            RunsInput::Pod(o) => match o.pod.as_ref().map(|p| p.job_uid.as_deref()) {
                None => shape::pod_shape_of(o.event, &o.source, None),
                Some(Some(job)) => shape::pod_shape_of(o.event, &o.source, Some(job)),
                // A Pod of no Job: `[runs]` does not keep what its key depends on.
                Some(None) => shape::pod_shape_unchecked(o.event, &o.source),
            }
            .check(key, time_header),
        }
    }

    fn stamp(&self) -> Option<Stamp<'_>> {
        Some(match self {
            RunsInput::Job(o) => shape::stamp(&o.source, o.event, o.observed_at),
            RunsInput::AnyJob(o) => shape::stamp(&o.source, o.event, o.observed_at),
            RunsInput::Pod(o) => shape::stamp(&o.source, o.event, o.observed_at),
        })
    }

    fn view_as(&self, input: usize) -> Option<Self> {
        match (self, RunsIn::of(input)?) {
            (RunsInput::Job(o), RunsIn::AllJobs) => {
                Some(RunsInput::AnyJob(std::sync::Arc::new(JobGlance::of(o))))
            }
            _ => None,
        }
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
        assert_eq!(Journal::OUTPUTS[JournalOut::Parts.index()].topic, "job_runs");
    }

    #[test]
    fn inputs_follow_the_stage_order() {
        let inputs = [0, 1, 2, 3].map(RunsIn::of);
        assert_eq!(inputs, [Some(RunsIn::Jobs), Some(RunsIn::Pods), Some(RunsIn::AllJobs), None]);
    }
}
