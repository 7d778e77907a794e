//! The kubelet: containers start and exit, deleted pods disappear.

use std::collections::VecDeque;

use super::{Ev, Exit, Item, PodKind, PodPhase, Sim};
use crate::trace::TraceEntry;

impl Sim {
    /// The kubelet starts the container.
    pub(super) fn pod_running(&mut self, p: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(pod) = self.pods.get_mut(&p) else { return };
        if pod.deletion_ms.is_some() || pod.phase != PodPhase::Pending {
            return;
        }
        pod.phase = PodPhase::Running;
        pod.running_ms = Some(now);
        let run = pod.run_ms;
        let job = match pod.kind {
            PodKind::Job(j) => Some(j),
            PodKind::Session { .. } => None,
        };
        self.touch_pod(p, out);
        if let Some(run) = run {
            let t = now + run;
            self.at(t, Ev::PodExit(p));
        }
        if let Some(j) = job {
            self.after(15, 60, Ev::JobReady(j));
        }
    }

    /// The kubelet reports the container's end (or kills it when the pod is being deleted).
    pub(super) fn pod_exit(&mut self, p: u64, out: &mut VecDeque<TraceEntry>) {
        let now = self.now;
        let Some(pod) = self.pods.get_mut(&p) else { return };
        if pod.exit.is_some() || matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
            return;
        }
        let killed = pod.deletion_ms.is_some();
        let (code, reason, phase) = if killed {
            (143, "Error", PodPhase::Failed)
        } else {
            match pod.planned_exit {
                Exit::Completed => (0, "Completed", PodPhase::Succeeded),
                Exit::Error => (1, "Error", PodPhase::Failed),
                Exit::OomKilled => (137, "OOMKilled", PodPhase::Failed),
                Exit::Overrun => (143, "Error", PodPhase::Failed),
            }
        };
        let started = pod.running_ms.is_some();
        if started {
            pod.exit = Some((code, reason, now));
            match code {
                0 => self.stats.exits_completed += 1,
                1 => self.stats.exits_error += 1,
                137 => self.stats.exits_oom_killed += 1,
                _ => self.stats.exits_terminated += 1,
            }
        }
        pod.phase = phase;
        let job = match pod.kind {
            PodKind::Job(j) => Some(j),
            PodKind::Session { .. } => None,
        };
        let finalizer = pod.finalizer;
        self.touch_pod(p, out);
        match job {
            Some(j) if finalizer => self.after(10, 60, Ev::JobCount(j, p)),
            _ if killed => self.after(200, 1_500, Ev::PodGone(p)),
            _ => {}
        }
    }

    /// A deleted pod without finalizers disappears.
    pub(super) fn pod_gone(&mut self, p: u64, out: &mut VecDeque<TraceEntry>) {
        let Some(pod) = self.pods.get(&p) else { return };
        if pod.finalizer {
            return;
        }
        let job = match pod.kind {
            PodKind::Job(j) => Some(j),
            PodKind::Session { .. } => None,
        };
        let rv = self.next_rv();
        if let Some(pod) = self.pods.get_mut(&p) {
            pod.rv = rv;
        }
        self.emit(out, Item::Pod(p), true);
        if !self.watching {
            self.stats.deleted_while_unobserved += 1;
        }
        self.pods.remove(&p);
        if let Some(j) = job
            && let Some(js) = self.jobs.get_mut(&j)
        {
            js.pods.retain(|x| *x != p);
            if js.deletion_ms.is_some() && js.pods.is_empty() {
                self.job_gone(j, out);
            }
        }
    }
}
