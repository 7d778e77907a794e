//! The inputs and output ports of `[coverage]`, named: each enum's order is the order the
//! processor declares (`OUTPUTS`) or its stage lists its topics.

use crate::runtime::Port;

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
