//! The CronJob controller: schedules, concurrency policy, status and history limits.

use std::collections::VecDeque;

use super::{Ev, Item, Owner, Sim, fleet::Concurrency};
use crate::trace::TraceEntry;

impl Sim {
    /// A schedule time of CronJob `i`: the next one is queued, this one starts a run.
    pub(super) fn fire(&mut self, i: usize) {
        let schedule = self.plan.cronjobs[i].schedule;
        let next = schedule.next_at_or_after(self.now + 1);
        self.at(next, Ev::Fire(i));
        if self.manager_down {
            // Missed; the controller looks back when it returns.
            return;
        }
        let scheduled = schedule.last_at_or_before(self.now);
        self.after(20, 400, Ev::StartRun(i, scheduled));
    }

    /// The CronJob controller starts the run scheduled at `scheduled`, honouring the
    /// concurrency policy.
    pub(super) fn start_scheduled(&mut self, i: usize, scheduled: i64, out: &mut VecDeque<TraceEntry>) {
        let policy = self.plan.cronjobs[i].concurrency;
        let active = self.crons[i].active.clone();
        if !active.is_empty() {
            match policy {
                Concurrency::Allow => {}
                Concurrency::Forbid => {
                    self.stats.forbid_skips += 1;
                    return;
                }
                Concurrency::Replace => {
                    for job in active {
                        self.stats.replaced += 1;
                        self.crons[i].active.retain(|x| *x != job);
                        self.delete_job_background(job, out);
                    }
                }
            }
        }
        let name = format!("{}-{}", self.plan.cronjobs[i].name, scheduled / 60_000);
        let job = self.create_job(Owner::Cron(i), name, Some(scheduled), out);
        let cs = &mut self.crons[i];
        cs.active.push(job);
        cs.last_schedule_ms = Some(scheduled);
        self.touch_cron(i, out);
    }

    /// The CronJob controller sees a finished Job: status, then history limits.
    pub(super) fn cron_sync(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get(&job) else { return };
        let Owner::Cron(c) = j.owner else { return };
        let Some((success, _, at)) = j.finished else { return };
        let deleting = j.deletion_ms.is_some();
        let cs = &mut self.crons[c];
        cs.active.retain(|x| *x != job);
        if success {
            cs.last_successful_ms = Some(cs.last_successful_ms.map_or(at, |t| t.max(at)));
        }
        if !deleting {
            if success { cs.succeeded_history.push_back(job) } else { cs.failed_history.push_back(job) }
        }
        self.touch_cron(c, out);
        let plan = &self.plan.cronjobs[c];
        let (keep_ok, keep_failed) = (plan.successful_history as usize, plan.failed_history as usize);
        let mut doomed = Vec::new();
        let cs = &mut self.crons[c];
        while cs.succeeded_history.len() > keep_ok {
            doomed.extend(cs.succeeded_history.pop_front());
        }
        while cs.failed_history.len() > keep_failed {
            doomed.extend(cs.failed_history.pop_front());
        }
        for d in doomed {
            self.stats.history_deletions += 1;
            self.delete_job_background(d, out);
        }
    }

    /// Background deletion: the Job goes at once, the garbage collector deletes its pods.
    pub(super) fn delete_job_background(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.deletion_ms.is_some() {
            return;
        }
        let rv = self.next_rv();
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.rv = rv;
        self.emit(out, Item::Job(job), true);
        if !self.watching {
            self.stats.deleted_while_unobserved += 1;
        }
        // Keep the state (pods render their owner from it) but mark it gone.
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.deletion_ms = Some(i64::MIN);
        self.after(200, 900, Ev::GcPods(job));
    }
}
