//! Counters of one watcher process, shared with the metrics endpoint.

use std::{
    collections::BTreeMap,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use crate::observe::AdmissionCounts;

/// What the watcher has done so far. Cheap to update from the watch loop, read at scrape.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Watch events received, per kind (`Pod`, `Job`, `CronJob`, `Lease`, `Namespace`).
    pub events: Mutex<BTreeMap<&'static str, u64>>,
    /// Relists (snapshots) started, per kind: the first list of a term counts too.
    pub relists: Mutex<BTreeMap<&'static str, u64>>,
    /// Admission decisions (admitted per kind; excluded per kind and step) of the
    /// current term, copied from the observer after every event.
    pub admission: Mutex<AdmissionCounts>,
    /// Whether this process holds the leader Lease and may publish.
    pub leader: AtomicBool,
    /// Leadership terms begun.
    pub terms: AtomicU64,
    /// Kafka records published (a heartbeat or marker counts once per partition).
    pub published_records: AtomicU64,
    /// Heartbeats published (once per interval, whatever the partition count).
    pub heartbeats: AtomicU64,
    /// Delivery acknowledgements awaited, and their total latency in microseconds (the
    /// mean publish latency is the ratio).
    pub acked_records: AtomicU64,
    /// Sum of send-to-acknowledgement latencies, in microseconds.
    pub ack_latency_us: AtomicU64,
}

impl WatchStats {
    /// Counts one event of `kind`.
    pub fn event(&self, kind: &'static str) {
        *self.events.lock().unwrap_or_else(PoisonError::into_inner).entry(kind).or_default() += 1;
    }

    /// Counts one relist of `kind`.
    pub fn relist(&self, kind: &'static str) {
        *self.relists.lock().unwrap_or_else(PoisonError::into_inner).entry(kind).or_default() += 1;
    }

    /// Replaces the admission counters.
    pub fn set_admission(&self, counts: &AdmissionCounts) {
        counts.clone_into(&mut self.admission.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Whether this process leads now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }
}
