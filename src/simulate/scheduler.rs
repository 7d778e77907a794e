//! The scheduler: binds pending pods to nodes.

use std::collections::VecDeque;

use super::{Ev, Sim};
use crate::trace::TraceEntry;

impl Sim {
    /// The scheduler binds pod `p` to a node.
    pub(super) fn pod_scheduled(&mut self, p: u64, out: &mut VecDeque<TraceEntry>) {
        let node = format!("worker-{}", self.rng.below(self.nodes));
        let now = self.now;
        let Some(pod) = self.pods.get_mut(&p) else { return };
        if pod.deletion_ms.is_some() {
            return;
        }
        pod.node = Some(node);
        pod.scheduled_ms = Some(now);
        self.touch_pod(p, out);
        self.after(900, 4_000, Ev::PodRunning(p));
    }
}
