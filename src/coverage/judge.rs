//! The verdict on one subject at one stream time: a pure function of its facts, its rule
//! and the Lease history (the state machine around it lives in the processor).

use super::{
    CoverageGap, CoverageRule, CoverageState, ProgressSource, SubjectSpec, lease::LeaseBook,
    schedule::Schedule,
};

/// What is known of a subject.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The CronJob.
    pub spec: &'a SubjectSpec,
    /// Latest finished run, epoch ms.
    pub last_run_ms: Option<i64>,
    /// Durations of its latest runs, ms.
    pub recent_run_ms: &'a [i64],
    /// When it was last unsuspended.
    pub resumed_at: Option<i64>,
    /// Its parsed schedule (`None`: unparseable).
    pub schedule: Option<&'a Schedule>,
    /// The override interval from the annotation, ms.
    pub interval_ms: Option<i64>,
}

/// The computed state and its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The state the evidence supports (the processor keeps FIRING until progress).
    pub state: CoverageState,
    /// Latest progress and where it comes from.
    pub last_progress: Option<(i64, ProgressSource)>,
    /// When progress was due.
    pub expected_by: Option<i64>,
    /// Start of the pending span (PENDING and FIRING).
    pub pending_since: Option<i64>,
    /// Coverage gaps of the manager Lease overlapping `[fire time, now]`.
    pub gaps: Vec<CoverageGap>,
    /// When the verdict can next change on its own (stream time), if it can.
    pub recheck_at: Option<i64>,
}

impl Facts<'_> {
    /// The latest progress evidence: a finished run or `lastSuccessfulTime`, whichever is
    /// later; with neither, the creation time.
    pub fn last_progress(&self) -> Option<(i64, ProgressSource)> {
        let run = self.last_run_ms.map(|t| (t, ProgressSource::Run));
        let lst = self.spec.last_successful_ms.map(|t| (t, ProgressSource::LastSuccessfulTime));
        match (run, lst) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b).or(self.spec.created_ms.map(|t| (t, ProgressSource::Creation))),
        }
    }

    /// Slack: the rule's, or twice the slowest recent run when that is more.
    fn slack_ms(&self, rule: &CoverageRule) -> i64 {
        let slowest = self.recent_run_ms.iter().copied().max().unwrap_or(0);
        rule.slack_ms.max(slowest.saturating_mul(2))
    }

    /// When the controller, back at `back_ms` after a gap, can next start a run: at once
    /// when a schedule was missed within `startingDeadlineSeconds` (or no deadline is set:
    /// the controller starts the latest missed run), else at the next fire time.
    fn restart_at(&self, back_ms: i64, measured_from: i64) -> Option<i64> {
        if self.interval_ms.is_some() {
            return Some(back_ms);
        }
        let schedule = self.schedule?;
        let missed = schedule.prev_at_or_before(back_ms).filter(|m| *m > measured_from);
        let in_deadline = |m: i64| {
            self.spec.starting_deadline_seconds.is_none_or(|d| back_ms - m <= d.saturating_mul(1000))
        };
        match missed {
            Some(m) if in_deadline(m) => Some(back_ms),
            _ => schedule.next_after(back_ms),
        }
    }
}

/// Judges `facts` under `rule` at `now` against the manager Lease history in `leases`.
pub fn judge(facts: &Facts<'_>, rule: &CoverageRule, leases: &LeaseBook, now: i64) -> Verdict {
    let last_progress = facts.last_progress();
    let mut verdict = Verdict {
        state: CoverageState::InsufficientEvidence,
        last_progress,
        expected_by: None,
        pending_since: None,
        gaps: Vec::new(),
        recheck_at: None,
    };
    let Some((progress, _)) = last_progress else { return verdict };
    let measured_from = progress.max(facts.resumed_at.unwrap_or(i64::MIN));
    let slack = facts.slack_ms(rule);
    // `fire`: when the controller had to act; `expected_by`: when its run had to be done.
    let next = match (facts.interval_ms, facts.schedule) {
        (Some(interval), _) => Some((measured_from.saturating_add(interval), 0)),
        (None, Some(s)) => s.next_after(measured_from).map(|t| (t, slack)),
        // An unparseable schedule: nothing can be expected.
        (None, None) => return verdict,
    };
    let Some((fire, slack_after_fire)) = next else {
        // A schedule that never fires again is never overdue.
        verdict.state = CoverageState::Ok;
        return verdict;
    };
    let expected_by = fire.saturating_add(slack_after_fire);
    verdict.expected_by = Some(expected_by);
    if now < expected_by {
        verdict.state = CoverageState::Ok;
        verdict.recheck_at = Some(expected_by);
        return verdict;
    }
    let lease = &rule.manager_lease;
    if !leases.known(lease) {
        return verdict; // the manager's Lease was never observed: no judgement
    }
    // Gaps since the fire time: a manager down when the run was due to start excuses the
    // run it missed even if it was back before `expected_by` (a CronJob whose missed run
    // is past its startingDeadlineSeconds waits for its next fire time).
    let gaps = leases.gaps(lease, fire.min(now - 1), now);
    verdict.gaps = gaps.iter().map(|g| g.gap).collect();
    let mut pending_since = expected_by;
    if let Some(last) = gaps.last() {
        let stopped =
            if last.observed { CoverageState::ManagerStopped } else { CoverageState::InsufficientEvidence };
        if !leases.covered_at(lease, now) {
            verdict.state = stopped; // not covered now
            return verdict;
        }
        // Covered again since `last.gap.ended_at`: pending restarts once the controller had
        // its chance to start and finish the run it missed.
        let restart = facts.restart_at(last.gap.ended_at, measured_from);
        let Some(restart) = restart else {
            verdict.state = CoverageState::Ok;
            return verdict;
        };
        pending_since = pending_since.max(restart.saturating_add(slack));
        if now < pending_since {
            verdict.state = stopped;
            verdict.recheck_at = Some(pending_since);
            return verdict;
        }
    }
    verdict.pending_since = Some(pending_since);
    if now - pending_since >= rule.for_ms {
        verdict.state = CoverageState::Firing;
    } else {
        verdict.state = CoverageState::Pending;
        verdict.recheck_at = Some(pending_since + rule.for_ms);
    }
    verdict
}
