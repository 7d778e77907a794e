//! The watcher: heartbeats, and relists when it (re)starts after a gap.

use std::collections::VecDeque;

use super::{Ev, Item, Relist, Sim};
use crate::trace::{TraceEntry, TraceEvent};

impl Sim {
    /// The watcher's HEARTBEAT line (only while it watches), then the next one.
    pub(super) fn heartbeat(&mut self, out: &mut VecDeque<TraceEntry>) {
        if self.watching {
            self.stats.heartbeats += 1;
            out.push_back(TraceEntry { observed_at_ms: self.now, event: TraceEvent::Heartbeat });
        }
        let next = self.now + self.profile.heartbeat_ms;
        self.at(next, Ev::Heartbeat);
    }

    /// The watcher (re)starts: a new epoch and a relist of everything that exists now.
    pub(super) fn watcher_up(&mut self, k: usize) -> Relist {
        self.watching = true;
        self.epoch += 1;
        if k != usize::MAX {
            self.stats.relists += 1;
        }
        let mut items: VecDeque<Item> = (0..self.namespaces.len()).map(Item::Namespace).collect();
        items.extend((0..self.crons.len()).map(Item::CronJob));
        items.extend((0..self.leases.len()).map(Item::Lease));
        items.extend(self.jobs.keys().map(|id| Item::Job(*id)));
        items.extend(self.pods.keys().map(|id| Item::Pod(*id)));
        Relist { epoch: self.epoch, at_ms: self.now, items }
    }
}
