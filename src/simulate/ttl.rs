//! The TTL-after-finished controller.

use std::collections::VecDeque;

use super::{Ev, Owner, Sim};
use crate::trace::TraceEntry;

impl Sim {
    /// The TTL-after-finished controller deletes a finished Job.
    pub(super) fn ttl_expire(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.deletion_ms.is_some() {
            return;
        }
        // Foreground deletion: the Job shows its deletionTimestamp until its pods are gone.
        j.deletion_ms = Some(now);
        let owner = j.owner;
        self.stats.ttl_deletions += 1;
        if let Owner::Cron(c) = owner {
            self.crons[c].succeeded_history.retain(|x| *x != job);
            self.crons[c].failed_history.retain(|x| *x != job);
        }
        self.touch_job(job, out);
        self.after(100, 600, Ev::GcPods(job));
    }
}
