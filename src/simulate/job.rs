//! The Job controller: pods for each attempt, counting, backoff, deadlines, terminal conditions.

use std::collections::VecDeque;

use super::{Ev, Exit, Item, JobState, Owner, PodKind, PodPhase, Sim, rng::Rng};
use crate::trace::TraceEntry;

impl Sim {
    /// Someone creates bare Job `b` (no owner).
    pub(super) fn create_bare(&mut self, b: usize, out: &mut VecDeque<TraceEntry>) {
        self.stats.bare_jobs += 1;
        let name = self.plan.bare_jobs[b].name.clone();
        self.create_job(Owner::Bare(b), name, None, out);
    }

    pub(super) fn create_job(
        &mut self,
        owner: Owner,
        name: String,
        scheduled: Option<i64>,
        out: &mut VecDeque<TraceEntry>,
    ) -> u64 {
        let id = self.next_id();
        let b = self.behavior(owner).clone();
        let roll = self.rng.below(1000) as u32;
        let failure = |rng: &mut Rng| if rng.chance(b.oom_per_mille) { Exit::OomKilled } else { Exit::Error };
        let mut attempts = Vec::new();
        let run = |rng: &mut Rng| (b.run_secs * 1000 * rng.range(70, 130) / 100).max(1_000);
        if b.active_deadline_secs.is_some() && roll < b.overrun_per_mille {
            attempts.push((Exit::Overrun, i64::MAX / 4));
        } else if roll < b.overrun_per_mille + b.fail_per_mille {
            for _ in 0..=b.backoff_limit {
                let e = failure(&mut self.rng);
                attempts.push((e, run(&mut self.rng) / 3));
            }
        } else if roll < b.overrun_per_mille + b.fail_per_mille + b.retry_per_mille && b.backoff_limit > 0 {
            let fails = self.rng.range(1, i64::from(b.backoff_limit));
            for _ in 0..fails {
                let e = failure(&mut self.rng);
                attempts.push((e, run(&mut self.rng) / 3));
            }
            attempts.push((Exit::Completed, run(&mut self.rng)));
        } else {
            attempts.push((Exit::Completed, run(&mut self.rng)));
        }
        if let (Owner::Cron(i), Some(t)) = (owner, scheduled)
            && self.plan.hangs(i, t)
        {
            // The coverage scenario's silent stop: the pod runs until the trace ends.
            attempts = vec![(Exit::Overrun, i64::MAX / 4)];
        }
        let rv = self.next_rv();
        let job = JobState {
            name,
            uid: self.rng.uuid(),
            owner,
            created_ms: self.now,
            scheduled_ms: scheduled,
            rv,
            start_ms: None,
            active: 0,
            ready: 0,
            terminating: 0,
            succeeded: 0,
            failed: 0,
            uncounted_succeeded: Vec::new(),
            uncounted_failed: Vec::new(),
            target: None,
            finished: None,
            deletion_ms: None,
            attempts,
            next_attempt: 0,
            pods: Vec::new(),
        };
        self.jobs.insert(id, job);
        self.stats.jobs_created += 1;
        self.emit(out, Item::Job(id), false);
        self.after(15, 80, Ev::CreatePod(id));
        id
    }

    pub(super) fn create_pod(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(j) = self.jobs.get(&job) else { return };
        if j.finished.is_some() || j.target.is_some() || j.deletion_ms.is_some() {
            return;
        }
        let Some(&(exit, run_ms)) = j.attempts.get(j.next_attempt) else { return };
        let name = format!("{}-{}", j.name, self.rng.suffix(5));
        let first = j.start_ms.is_none();
        let deadline = self.behavior(j.owner).active_deadline_secs;
        let id =
            self.insert_pod(name, PodKind::Job(job), true, (exit != Exit::Overrun).then_some(run_ms), exit);
        let j = self.jobs.get_mut(&job).expect("checked above");
        j.next_attempt += 1;
        j.pods.push(id);
        j.active += 1;
        if first {
            j.start_ms = Some(now);
        }
        self.emit(out, Item::Pod(id), false);
        self.touch_job(job, out);
        if first && let Some(d) = deadline {
            self.at(now + d * 1000, Ev::JobDeadline(job));
        }
        self.after(5, 60, Ev::PodScheduled(id));
    }

    /// The Job controller sees its running pod ready.
    pub(super) fn job_ready(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.finished.is_some() || j.deletion_ms.is_some() || j.active == 0 {
            return;
        }
        j.ready = 1;
        self.touch_job(job, out);
    }

    /// The Job controller sees a terminated pod: uncounted, and the interim condition when
    /// the outcome is decided.
    pub(super) fn job_count(&mut self, job: u64, p: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(pod) = self.pods.get(&p) else { return };
        let (uid, ok) = (pod.uid.clone(), pod.phase == PodPhase::Succeeded);
        let backoff = self.jobs.get(&job).map(|j| self.behavior(j.owner).backoff_limit);
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.active = j.active.saturating_sub(1);
        j.ready = 0;
        j.terminating = j.terminating.saturating_sub(u32::from(pod.deletion_ms.is_some()));
        if ok {
            j.uncounted_succeeded.push(uid);
            if j.target.is_none() {
                j.target = Some(("CompletionsReached", now));
            }
        } else {
            j.uncounted_failed.push(uid);
            let failed = j.failed + j.uncounted_failed.len() as u32;
            if j.target.is_none() && failed > backoff.unwrap_or(0) {
                j.target = Some(("BackoffLimitExceeded", now));
            }
        }
        self.touch_job(job, out);
        self.after(10, 50, Ev::JobFinalize(job, p));
    }

    /// The Job controller removes the pod's tracking finalizer, counts it, and finishes the
    /// Job when its interim condition is set (or creates the next pod after a backoff).
    pub(super) fn job_finalize(&mut self, job: u64, p: u64, out: &mut VecDeque<TraceEntry>) {
        if let Some(pod) = self.pods.get_mut(&p) {
            pod.finalizer = false;
            let deleting = pod.deletion_ms.is_some();
            self.touch_pod(p, out);
            if deleting {
                self.after(100, 1_000, Ev::PodGone(p));
            }
        }
        let now = self.now;
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.succeeded += j.uncounted_succeeded.len() as u32;
        j.failed += j.uncounted_failed.len() as u32;
        j.uncounted_succeeded.clear();
        j.uncounted_failed.clear();
        let mut finished = false;
        match j.target {
            Some(("CompletionsReached", at)) => {
                let _ = at;
                j.finished = Some((true, "CompletionsReached", now));
                finished = true;
                if j.failed == 0 {
                    self.stats.succeeded_first_try += 1;
                } else {
                    self.stats.succeeded_after_retries += 1;
                }
            }
            Some((reason, _)) if j.active == 0 => {
                j.finished = Some((false, reason, now));
                finished = true;
                if reason == "DeadlineExceeded" {
                    self.stats.deadline_exceeded += 1;
                } else {
                    self.stats.backoff_limit_exceeded += 1;
                }
            }
            Some(_) => {}
            None => {
                // Retry after the pod-failure backoff: 10 s doubling, capped at 6 min.
                let delay = (10_000i64 << (j.failed.saturating_sub(1)).min(6)).min(360_000);
                let t = now + delay + self.rng.range(0, 900);
                self.at(t, Ev::CreatePod(job));
            }
        }
        self.touch_job(job, out);
        if finished {
            self.on_finished(job, now);
        }
    }

    /// activeDeadlineSeconds passed: the Job controller kills the running pods.
    pub(super) fn job_deadline(&mut self, job: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.finished.is_some() || j.target.is_some() || j.deletion_ms.is_some() {
            return;
        }
        j.target = Some(("DeadlineExceeded", now));
        let running: Vec<u64> = j.pods.clone();
        let mut killing = Vec::new();
        for p in running {
            if let Some(pod) = self.pods.get_mut(&p)
                && matches!(pod.phase, PodPhase::Pending | PodPhase::Running)
                && pod.deletion_ms.is_none()
            {
                pod.deletion_ms = Some(now + 30_000);
                killing.push(p);
            }
        }
        let nothing_running = killing.is_empty();
        if let Some(j) = self.jobs.get_mut(&job) {
            j.terminating = killing.len() as u32;
            j.ready = 0;
            if nothing_running {
                j.finished = Some((false, "DeadlineExceeded", now));
                self.stats.deadline_exceeded += 1;
            }
        }
        self.touch_job(job, out);
        if nothing_running {
            self.on_finished(job, now);
        }
        for p in killing {
            self.touch_pod(p, out);
            self.after(300, 2_500, Ev::PodExit(p));
        }
    }

    /// What follows a Job's terminal condition: the CronJob controller's sync and the
    /// TTL-after-finished countdown.
    pub(super) fn on_finished(&mut self, job: u64, now: i64) {
        let Some(j) = self.jobs.get(&job) else { return };
        let owner = j.owner;
        if let Owner::Cron(_) = owner {
            self.after(10, 40, Ev::CronSync(job));
        }
        if let Some(ttl) = self.behavior(owner).ttl_secs {
            let t = now + ttl * 1000 + self.rng.range(0, 1_500);
            self.at(t, Ev::TtlExpire(job));
        }
    }
}
