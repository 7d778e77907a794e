//! The inputs and output ports of `[coverage]`, named: each enum's order is the order the
//! processor declares (`OUTPUTS`) or its stage lists its topics.

use super::model::CoverageState;
use crate::{
    codec::{Codec, CodecError},
    facts::JobRun,
    observe::{CronJobObservation, LeaseObservation, shape},
    runtime::{DecodeInput, Event, Port, ProcessError, Stamp},
};

/// `[coverage]`'s output ports, in the order of [`super::Coverage::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoverageOut {
    /// `coverage_alerts`: one record per state change of a subject, keyed by its UID.
    Alerts,
}

impl Port for CoverageOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// `[coverage]`'s inputs, in order: `job-run-facts.v1`, `cronjobs.v1` (co-partitioned),
/// then `leases.v1` as a global input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoverageIn {
    /// `job-run-facts.v1`: finished runs, keyed by owner UID.
    Runs,
    /// `cronjobs.v1`: CronJob observations, markers and heartbeats.
    CronJobs,
    /// `leases.v1`, every partition: Lease observations, markers and heartbeats.
    Leases,
}

impl CoverageIn {
    /// The input at `index`; `None` past the last.
    pub fn of(index: usize) -> Option<Self> {
        [Self::Runs, Self::CronJobs, Self::Leases].get(index).copied()
    }
}

/// The events `[coverage]` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoverageEvent {
    /// A run whose owner is not a CronJob.
    RunsNotCronjob,
    /// A run that does not count as progress.
    RunsNotProgress,
    /// A run counted as progress.
    Runs,
    /// A Lease snapshot recorded.
    LeaseSnapshots,
    /// A Lease snapshot older than the one kept.
    LeaseSnapshotsStale,
    /// A Lease snapshot without its times.
    LeaseSnapshotsWithoutTimes,
    /// A subject gone, its record ended.
    SubjectsForgotten,
    /// A CronJob whose expected-interval annotation does not parse.
    BadExpectedInterval,
    /// An alert that could not be encoded.
    EncodeFailed,
    /// An alert emitted in this state.
    Judged(CoverageState),
}

impl Event for CoverageEvent {
    fn as_str(self) -> &'static str {
        match self {
            Self::RunsNotCronjob => "coverage_runs_not_cronjob",
            Self::RunsNotProgress => "coverage_runs_not_progress",
            Self::Runs => "coverage_runs",
            Self::LeaseSnapshots => "coverage_lease_snapshots",
            Self::LeaseSnapshotsStale => "coverage_lease_snapshots_stale",
            Self::LeaseSnapshotsWithoutTimes => "coverage_lease_snapshots_without_times",
            Self::SubjectsForgotten => "coverage_subjects_forgotten",
            Self::BadExpectedInterval => "coverage_bad_expected_interval",
            Self::EncodeFailed => "coverage_encode_failed",
            Self::Judged(state) => match state {
                CoverageState::Ok => "coverage_ok",
                CoverageState::Pending => "coverage_pending",
                CoverageState::Firing => "coverage_firing",
                CoverageState::Resolved => "coverage_resolved",
                CoverageState::ManagerStopped => "coverage_manager_stopped",
                CoverageState::InsufficientEvidence => "coverage_insufficient_evidence",
                CoverageState::Unknown => "coverage_unknown",
            },
        }
    }
}

/// `[coverage]`'s inputs, in order: `job-run-facts.v1`, `cronjobs.v1` (co-partitioned),
/// then `leases.v1` as a global input.
#[derive(Debug, Clone, PartialEq)]
pub enum CoverageInput {
    /// A finished run (progress of its owner).
    Run(Box<JobRun>),
    /// A CronJob observation, marker or heartbeat.
    CronJob(Box<CronJobObservation>),
    /// A Lease observation, marker or heartbeat (any partition).
    Lease(Box<LeaseObservation>),
}

impl DecodeInput for CoverageInput {
    async fn decode(input: usize, codec: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
        Ok(match CoverageIn::of(input) {
            Some(CoverageIn::Runs) => CoverageInput::Run(Box::new(codec.decode_direct(bytes).await?)),
            Some(CoverageIn::CronJobs) => CoverageInput::CronJob(Box::new(codec.decode_as(bytes).await?)),
            Some(CoverageIn::Leases) => CoverageInput::Lease(Box::new(codec.decode_as(bytes).await?)),
            None => return Err(CodecError::UnknownInput { input }),
        })
    }

    fn check(&self, key: Option<&[u8]>, time_header: bool) -> Result<(), ProcessError> {
        match self {
            CoverageInput::Run(_) => Ok(()),
            CoverageInput::CronJob(o) => shape::cronjob_shape(o).check(key, time_header),
            CoverageInput::Lease(o) => shape::lease_shape(o).check(key, time_header),
        }
    }

    fn stamp(&self) -> Option<Stamp<'_>> {
        match self {
            CoverageInput::Run(_) => None,
            CoverageInput::CronJob(o) => Some(shape::stamp(&o.source, o.event, o.observed_at)),
            CoverageInput::Lease(o) => Some(shape::stamp(&o.source, o.event, o.observed_at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::Coverage;

    #[test]
    fn ports_name_the_outputs_declared_at_their_index() {
        assert_eq!(Coverage::OUTPUTS.len(), 1);
        assert_eq!(Coverage::OUTPUTS[CoverageOut::Alerts.index()].topic, "coverage_alerts");
    }

    #[test]
    fn inputs_follow_the_stage_order() {
        let inputs = [0, 1, 2, 3].map(CoverageIn::of);
        assert_eq!(
            inputs,
            [Some(CoverageIn::Runs), Some(CoverageIn::CronJobs), Some(CoverageIn::Leases), None]
        );
    }
}
