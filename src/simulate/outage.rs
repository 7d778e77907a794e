//! kube-controller-manager outages: its work waits, and catches up when it returns.

use std::collections::VecDeque;

use super::{Ev, Item, Sim, fleet::LEASE_DURATION_SECS};
use crate::trace::TraceEntry;

impl Sim {
    /// kube-controller-manager goes down: its work waits for [`Sim::recover`].
    pub(super) fn outage_start(&mut self) {
        self.manager_down = true;
        self.stats.lease_outages += 1;
    }

    /// The controller manager is back: a new holder acquires the lease, deferred work
    /// catches up, and each CronJob starts at most its most recent missed schedule.
    pub(super) fn recover(&mut self, out: &mut VecDeque<TraceEntry>) {
        let (from, _) = self
            .plan
            .outages
            .iter()
            .copied()
            .find(|(a, b)| *a < self.now && *b >= self.now)
            .unwrap_or((self.now, self.now));
        self.manager_down = false;
        let now = self.now;
        let holder = format!("cp-2_{}", self.rng.uuid());
        let l = &mut self.leases[0];
        l.holder = holder;
        l.duration_secs = LEASE_DURATION_SECS;
        l.acquire_ms = now;
        l.renew_ms = now;
        l.transitions += 1;
        self.leases[0].rv = self.next_rv();
        self.emit(out, Item::Lease(0), false);
        let every = self.profile.lease_renew_ms;
        self.after(every - 40, every + 60, Ev::LeaseRenew(0));
        let deferred = std::mem::take(&mut self.deferred);
        for (k, ev) in deferred.into_iter().enumerate() {
            let t = now + 200 + (k as i64) * 3;
            self.at(t, ev);
        }
        let resume = now + 2_000 + self.rng.range(0, 1_000);
        for i in 0..self.crons.len() {
            let cj = &self.plan.cronjobs[i];
            if cj.suspend {
                continue;
            }
            let last_missed = cj.schedule.last_at_or_before(now);
            if last_missed < from {
                continue;
            }
            let missed = cj.schedule.fires_between(from, now + 1);
            let too_late = cj.starting_deadline_secs.is_some_and(|d| now - last_missed > d * 1000);
            self.stats.missed_schedules += missed - u64::from(!too_late);
            if !too_late {
                let t = resume + self.rng.range(0, 20_000);
                self.at(t, Ev::StartRun(i, last_missed));
            }
        }
    }
}
