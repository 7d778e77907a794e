//! Lease history as an append-only instance log, and the coverage it proves.
//!
//! A Lease snapshot proves its holder was alive at its renew time (its acquire time when it
//! has no renew time) and holds the lease until `renew + duration`: it covers
//! `[start, renew + duration]`. Renewals by one holder with one acquire time that touch or
//! overlap extend one **instance** (the log stays small: one entry per tenure and per gap,
//! not one per renewal every 2 s); anything else appends a new instance. Coverage is the
//! union of the instances' intervals, touching ones merged, so a holder replaced by
//! another keeps coverage and a graceful release (empty holder, 1 s) cannot shorten what
//! the last holder's recorded expiry already covers. Nothing here says "alive": liveness
//! is only ever derived, at evaluation time, from the log.

use serde::{Deserialize, Serialize};

use crate::{observe::model::Lease, runtime::store::KvStore};

use super::CoverageGap;

/// One tenure of a Lease: consecutive, touching snapshots of one holder and acquire time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// `holderIdentity` (empty: a graceful release).
    pub holder: String,
    /// `acquireTime`, epoch ms.
    pub acquire_ms: Option<i64>,
    /// Start of the first snapshot's interval (its renew time, or acquire time).
    pub start_ms: i64,
    /// The latest renew time recorded.
    pub last_renew_ms: i64,
    /// `leaseDurationSeconds` in ms.
    pub duration_ms: i64,
    /// `leaseTransitions` of the latest snapshot.
    pub transitions: Option<i32>,
    /// Snapshots folded into this instance.
    pub snapshots: u64,
}

impl Instance {
    /// End of the interval covered: the latest recorded expiry.
    pub fn end_ms(&self) -> i64 {
        self.last_renew_ms.saturating_add(self.duration_ms)
    }
}

/// Why a Lease snapshot gave no evidence (counted, never an error: the Lease is valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// No renew or acquire time, or no duration: nothing to cover.
    NoTimes,
    /// Already recorded (a relist repeats the current snapshot) or older than the log.
    Stale,
}

/// A gap in coverage, and whether the leases topic was observed throughout it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The gap.
    pub gap: CoverageGap,
    /// True when the leases topic was observed throughout: the manager provably did not
    /// renew (a stop). False: nothing was observed for part of it (a watcher restart, or
    /// before history begins) — insufficient evidence, not a stop.
    pub observed: bool,
}

/// The instance logs of every Lease, and when the leases topic itself was observed.
#[derive(Debug)]
pub struct LeaseBook {
    /// (`namespace/name`, instance start) → instance.
    pub(super) instances: KvStore<(String, i64), Instance>,
    /// Spans in which the leases topic was observed without a silence longer than the
    /// observation gap: start → end (epoch ms).
    pub(super) observed: KvStore<i64, i64>,
    /// A silence of the leases topic longer than this is a hole in observation, ms.
    max_silence_ms: i64,
}

impl LeaseBook {
    /// Empty, with its stores named `instances_store` and `observed_store`; a silence of
    /// the leases topic longer than `max_silence_ms` is a hole in observation.
    pub fn new(instances_store: &str, observed_store: &str, max_silence_ms: i64) -> Self {
        Self {
            instances: KvStore::new(instances_store),
            observed: KvStore::new(observed_store),
            max_silence_ms,
        }
    }

    /// Records that the leases topic was observed at `at_ms` (any record: a Lease, a
    /// marker or a heartbeat). A silence longer than the maximum starts a new span.
    pub fn observed_at(&mut self, at_ms: i64) {
        let max_silence_ms = self.max_silence_ms;
        let last = self.observed.iter().next_back().map(|(s, e)| (*s, *e));
        match last {
            Some((_, end)) if at_ms <= end => {}
            Some((start, end)) if at_ms - end <= max_silence_ms => self.observed.put(start, at_ms),
            _ => self.observed.put(at_ms, at_ms),
        }
    }

    /// Folds one snapshot of Lease `key` into its instance log.
    pub fn record(&mut self, key: &str, lease: &Lease) -> Result<(), Ignored> {
        let start = lease.renew_time.or(lease.acquire_time).ok_or(Ignored::NoTimes)?;
        let duration_ms =
            i64::from(lease.lease_duration_seconds.filter(|d| *d > 0).ok_or(Ignored::NoTimes)?) * 1000;
        let holder = lease.holder_identity.clone().unwrap_or_default();
        let last = self.last(key).map(|(k, i)| (k, i.clone()));
        if let Some((last_key, mut last)) = last {
            if start < last.start_ms || (start <= last.last_renew_ms && holder == last.holder) {
                return Err(Ignored::Stale);
            }
            let same_tenure = holder == last.holder
                && lease.acquire_time == last.acquire_ms
                && duration_ms == last.duration_ms
                && start <= last.end_ms();
            if same_tenure {
                last.last_renew_ms = start;
                last.transitions = lease.lease_transitions;
                last.snapshots += 1;
                self.instances.put(last_key, last);
                return Ok(());
            }
        }
        let instance = Instance {
            holder,
            acquire_ms: lease.acquire_time,
            start_ms: start,
            last_renew_ms: start,
            duration_ms,
            transitions: lease.lease_transitions,
            snapshots: 1,
        };
        // Two instances cannot share a start: a later snapshot with the same start and
        // another holder replaces the entry (the log keeps the latest word on that instant).
        self.instances.put((key.to_owned(), start), instance);
        Ok(())
    }

    fn last(&self, key: &str) -> Option<((String, i64), &Instance)> {
        let from = (key.to_owned(), i64::MIN);
        let to = (key.to_owned(), i64::MAX);
        self.instances.range(from..=to).next_back().map(|(k, v)| (k.clone(), v))
    }

    /// The instances of `key`, oldest first.
    pub fn instances<'a>(&'a self, key: &str) -> impl Iterator<Item = &'a Instance> + 'a {
        let from = (key.to_owned(), i64::MIN);
        let to = (key.to_owned(), i64::MAX);
        self.instances.range(from..=to).map(|(_, v)| v)
    }

    /// Whether Lease `key` was ever recorded (within retention).
    pub fn known(&self, key: &str) -> bool {
        self.instances(key).next().is_some()
    }

    /// End of the latest recorded coverage of `key`: the last expiry on record.
    pub fn covered_until(&self, key: &str) -> Option<i64> {
        self.instances(key).map(Instance::end_ms).max()
    }

    /// Whether `key` is covered at `at_ms`.
    pub fn covered_at(&self, key: &str, at_ms: i64) -> bool {
        self.instances(key).any(|i| i.start_ms <= at_ms && at_ms <= i.end_ms())
    }

    /// Uncovered spans of `key` overlapping `[from_ms, to_ms]`, oldest first, each from
    /// its real start. Touching intervals merge; a span before the first instance on record
    /// is a gap too (history does not reach back that far: cut at `from_ms`), as is the
    /// open span after the last expiry (`to` = `to_ms`).
    pub fn gaps(&self, key: &str, from_ms: i64, to_ms: i64) -> Vec<Gap> {
        let mut gaps = Vec::new();
        if from_ms >= to_ms {
            return gaps;
        }
        // Merged coverage, oldest first; touching intervals (next start == end) merge.
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for i in self.instances(key) {
            match merged.last_mut() {
                Some((_, end)) if i.start_ms <= *end => *end = (*end).max(i.end_ms()),
                _ => merged.push((i.start_ms, i.end_ms())),
            }
        }
        // A gap overlapping the range is reported from its real start (the evidence says
        // since when the manager was gone); only unknown history is cut at `from_ms`.
        let mut push = |from: i64, to: i64, before_history: bool| {
            let (from, to) = (if before_history { from.max(from_ms) } else { from }, to.min(to_ms));
            if from < to && to > from_ms {
                gaps.push(self.classify(from, to, before_history));
            }
        };
        match merged.first() {
            None => push(from_ms, to_ms, true),
            Some((first, _)) => push(from_ms, *first, true),
        }
        for pair in merged.windows(2) {
            push(pair[0].1, pair[1].0, false);
        }
        if let Some((_, end)) = merged.last() {
            push(*end, to_ms, false);
        }
        gaps
    }

    /// A gap, observed if the leases topic was observed throughout it (allowing a
    /// silence shorter than the maximum at its end: the topic is read up to about now).
    fn classify(&self, from: i64, to: i64, before_history: bool) -> Gap {
        let observed = !before_history
            && self
                .observed
                .range(..=from)
                .next_back()
                .is_some_and(|(_, end)| *end >= to.saturating_sub(self.max_silence_ms));
        Gap { gap: CoverageGap { started_at: from, ended_at: to }, observed }
    }

    /// Forgets what ended before `before_ms`, keeping the latest instance of every Lease
    /// and the latest observed span (retention: whatever touches the evaluation window is
    /// kept, including what began before it).
    pub fn prune(&mut self, before_ms: i64) {
        let mut latest: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
        for ((key, start), _) in self.instances.iter() {
            latest.insert(key, *start);
        }
        let old: Vec<(String, i64)> = self
            .instances
            .iter()
            .filter(|((key, start), i)| i.end_ms() < before_ms && latest.get(key.as_str()) != Some(start))
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            self.instances.delete(&k);
        }
        let last = self.observed.iter().next_back().map(|(s, _)| *s);
        let old: Vec<i64> = self
            .observed
            .iter()
            .filter(|(s, e)| **e < before_ms && Some(**s) != last)
            .map(|(s, _)| *s)
            .collect();
        for s in old {
            self.observed.delete(&s);
        }
    }
}
