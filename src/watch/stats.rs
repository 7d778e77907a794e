//! Counters of one watcher process, shared with the metrics endpoint. The counters are
//! `prometheus-client` metrics incremented where the watcher counts; the endpoint encodes
//! these very handles, so nothing is copied at scrape time.

use std::sync::{
    Arc, Mutex, PoisonError,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};

use crate::{
    health::{Condition, DEFAULT_STALL_LIMIT, Health, Heartbeat},
    observe::{AdmissionCounts, Cuts},
    trace::KubeObject,
    watch::publish::PublishCounts,
};

/// What the watcher reports to `/healthz` and `/readyz`.
#[derive(Debug, Clone)]
pub struct WatcherHealth {
    /// Beaten once per leader-election round (every `retry_period_secs`).
    pub election: Heartbeat,
    /// Beaten once per turn of a term's publishing loop (at least every 100 ms while
    /// leading); not watched between terms.
    pub publishing: Heartbeat,
    /// Met once an election round has decided whether this process leads or stands by.
    pub ready: Arc<Condition>,
}

impl WatcherHealth {
    /// Heartbeats and a condition registered with `health`.
    pub fn new(health: &Health) -> Self {
        let publishing = health.heartbeat("publishing", DEFAULT_STALL_LIMIT);
        publishing.retire();
        Self {
            election: health.heartbeat("leader election", DEFAULT_STALL_LIMIT),
            publishing,
            ready: health.condition("watcher", "no leader election round has finished yet"),
        }
    }
}

impl Default for WatcherHealth {
    /// Registered nowhere: nothing serves `/healthz`.
    fn default() -> Self {
        Self::new(&Health::default())
    }
}

/// The label set of the per-kind families. Kinds are `&'static str`: bounded, and a
/// lookup allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct KindLabels {
    /// `Pod`, `Job`, `CronJob`, `Lease`, `Namespace` (or another kind counted).
    pub kind: &'static str,
}

/// A counter of seconds (fractional).
pub type SecondsCounter = Counter<f64, AtomicU64>;

/// What the watcher has done so far. Cheap to update from the watch loop, read at scrape.
#[derive(Debug)]
pub struct WatchStats {
    /// Watch events received, per kind; every kind of [`KubeObject::KINDS`] has a series
    /// from the start (at 0), so alerts need not handle absent series.
    pub events: Family<KindLabels, Counter>,
    /// Relists (snapshots) started, per kind: the first list of a term counts too.
    pub relists: Family<KindLabels, Counter>,
    /// Admission decisions (admitted per kind; excluded per kind and step) since the
    /// process started, copied from the observer after every event (a snapshot the
    /// observer keeps, so it stays a copy rather than a counter).
    pub admission: Mutex<AdmissionCounts>,
    /// Whether this process holds the leader Lease and may publish.
    pub leader: AtomicBool,
    /// Leadership terms begun.
    pub terms: Counter,
    /// Kafka records published (a heartbeat or marker counts once per partition).
    pub published_records: Counter,
    /// Heartbeats published (once per interval, whatever the partition count).
    pub heartbeats: Counter,
    /// Delivery acknowledgements received.
    pub acked_records: Counter,
    /// Sum of send-to-acknowledgement latencies, in seconds (divided by `acked_records`
    /// it is the mean publish latency).
    pub ack_latency: SecondsCounter,
    /// What minimization's bounds cut (docs/security.md, "Bounds"): Job conditions, Pod
    /// containers, reasons shortened.
    pub cut_conditions: Counter,
    /// See `cut_conditions`.
    pub cut_containers: Counter,
    /// See `cut_conditions`.
    pub cut_reasons: Counter,
    /// Observations skipped because, bounded, they still exceeded the producer's limit.
    pub oversized: Counter,
    /// Liveness and readiness (`/healthz`, `/readyz`).
    pub health: WatcherHealth,
}

impl Default for WatchStats {
    fn default() -> Self {
        let stats = Self {
            events: Family::default(),
            relists: Family::default(),
            admission: Mutex::default(),
            leader: AtomicBool::default(),
            terms: Counter::default(),
            published_records: Counter::default(),
            heartbeats: Counter::default(),
            acked_records: Counter::default(),
            ack_latency: SecondsCounter::default(),
            cut_conditions: Counter::default(),
            cut_containers: Counter::default(),
            cut_reasons: Counter::default(),
            oversized: Counter::default(),
            health: WatcherHealth::default(),
        };
        // Every expected kind has a series at 0 before its first event.
        for kind in KubeObject::KINDS {
            stats.events.get_or_create_owned(&KindLabels { kind });
            stats.relists.get_or_create_owned(&KindLabels { kind });
        }
        stats
    }
}

impl WatchStats {
    /// Counts one event of `kind`.
    pub fn event(&self, kind: &'static str) {
        self.events.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts one relist of `kind`.
    pub fn relist(&self, kind: &'static str) {
        self.relists.get_or_create(&KindLabels { kind }).inc();
    }

    /// Replaces the admission counters.
    pub fn set_admission(&self, counts: &AdmissionCounts) {
        counts.clone_into(&mut self.admission.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Counts what minimization's bounds cut of one entry.
    pub fn count_cuts(&self, cuts: Cuts) {
        self.cut_conditions.inc_by(cuts.conditions);
        self.cut_containers.inc_by(cuts.containers);
        self.cut_reasons.inc_by(cuts.reasons);
    }

    /// Takes the publisher's running totals. The publisher counts records, acknowledgements
    /// and latency itself (as totals since it started), so the counters are set to them
    /// rather than incremented: the same values, with no delta bookkeeping.
    pub fn set_publisher_totals(&self, counts: &PublishCounts) {
        let PublishCounts { records, acked, ack_latency_us, oversized, .. } = *counts;
        self.published_records.inner().store(records, Ordering::Relaxed);
        self.oversized.inner().store(oversized, Ordering::Relaxed);
        self.acked_records.inner().store(acked, Ordering::Relaxed);
        let seconds = ack_latency_us as f64 / 1_000_000.0;
        self.ack_latency.inner().store(seconds.to_bits(), Ordering::Relaxed);
    }

    /// Whether this process leads now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }
}
