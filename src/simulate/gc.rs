//! The garbage collector: a deleted Job's pods, then the Job itself.

use std::collections::VecDeque;

use super::{Ev, Item, Owner, PodPhase, Sim, pod_phase};
use crate::trace::TraceEntry;

impl Sim {
    /// The garbage collector deletes a deleted Job's pods (or the Job, once they are gone).
    pub(super) fn gc_pods(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let pods: Vec<u64> = self.jobs.get(&job).map(|j| j.pods.clone()).unwrap_or_default();
        let mut any = false;
        for p in pods {
            let Some(pod) = self.pods.get_mut(&p) else { continue };
            any = true;
            if pod.deletion_ms.is_none() {
                pod.deletion_ms = Some(now + 30_000);
                // The garbage collector deletes orphans' finalizers with them.
                pod.finalizer = false;
                self.touch_pod(p, out);
                if matches!(pod_phase(&self.pods, p), PodPhase::Running | PodPhase::Pending) {
                    self.after(500, 3_000, Ev::PodExit(p));
                } else {
                    self.after(300, 2_000, Ev::PodGone(p));
                }
            }
        }
        if !any {
            self.job_gone(job, out);
        }
    }

    pub(super) fn job_gone(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get(&job) else { return };
        if j.deletion_ms != Some(i64::MIN) {
            // Foreground: the finalizer is removed and the Job disappears.
            let rv = self.next_rv();
            if let Some(j) = self.jobs.get_mut(&job) {
                j.rv = rv;
            }
            self.emit(out, Item::Job(job), true);
            if !self.watching {
                self.stats.deleted_while_unobserved += 1;
            }
        }
        if !self.jobs[&job].pods.is_empty() {
            return;
        }
        if let Some(j) = self.jobs.remove(&job)
            && let Owner::Cron(c) = j.owner
        {
            self.crons[c].active.retain(|x| *x != job);
        }
    }
}
