//! The managers' Lease renewals, and the scheduler's graceful handover.

use std::collections::VecDeque;

use super::{Ev, Item, Sim, fleet::LEASE_DURATION_SECS};
use crate::trace::TraceEntry;

impl Sim {
    /// The holder renews lease `i` (not the controller manager's while it is down).
    pub(super) fn lease_renew(&mut self, i: usize, out: &mut VecDeque<TraceEntry>) {
        if i == 0 && self.manager_down {
            return;
        }
        let now = self.now;
        let l = &mut self.leases[i];
        if l.holder.is_empty() {
            return;
        }
        l.renew_ms = now;
        self.stats.lease_renewals += 1;
        self.leases[i].rv = self.next_rv();
        self.emit(out, Item::Lease(i), false);
        let every = self.profile.lease_renew_ms;
        self.after(every - 40, every + 60, Ev::LeaseRenew(i));
    }

    /// The holder releases (empty holder, duration 1 s), a new one acquires.
    pub(super) fn lease_handover(&mut self, i: usize, out: &mut VecDeque<TraceEntry>) {
        // The holder releases (empty holder, duration 1 s), a new one acquires.
        let now = self.now;
        if self.leases[i].holder.is_empty() {
            let holder = format!("cp-3_{}", self.rng.uuid());
            let l = &mut self.leases[i];
            l.holder = holder;
            l.duration_secs = LEASE_DURATION_SECS;
            l.acquire_ms = now;
            l.renew_ms = now;
            l.transitions += 1;
            self.leases[i].rv = self.next_rv();
            self.emit(out, Item::Lease(i), false);
            let every = self.profile.lease_renew_ms;
            self.after(every - 40, every + 60, Ev::LeaseRenew(i));
        } else {
            let l = &mut self.leases[i];
            l.holder = String::new();
            l.duration_secs = 1;
            l.acquire_ms = now;
            l.renew_ms = now;
            self.leases[i].rv = self.next_rv();
            self.emit(out, Item::Lease(i), false);
            self.after(800, 2_500, Ev::LeaseHandover(i));
        }
    }
}
