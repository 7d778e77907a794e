//! Stream time out of band: where a writer's forwarded stream time sits among its records
//! when it travels on a progress channel instead of on every partition.
//!
//! In band, a writer forwards its stream time by writing a heartbeat to every partition of
//! an output, and a reader's sub-lane (partition, writer) holds the writer's records and
//! heartbeats in the order it wrote them. Out of band, the writer writes its records alone,
//! and once per forwarding a **beat** — its stream time and, per partition, how many
//! records it had written there — to a progress channel. Each record says where it stands:
//! its **sequence** on its partition (1 for the writer's first record there) and the time
//! of the last beat before it. A reader rebuilds the in-band order of a sub-lane from the
//! two, whatever order it reads them in (a [`Stitch`]):
//!
//! - a beat goes in once every record the writer had written to the partition before it
//!   is in (its count is the sequence of the last record in);
//! - a record goes in once every beat before it is in (the last beat in is not earlier
//!   than the time the record names).
//!
//! So the rebuilt order depends only on what the writer wrote: the same on Kafka, where
//! records and beats arrive from different partitions at different times, as in memory.

use std::collections::VecDeque;

/// Header of a record whose writer sends its stream time out of band:
/// `<sequence>` or `<sequence>@<time of the last beat before it, epoch ms>`.
pub const SEQUENCE_HEADER: &str = "kubefacts-sequence";

/// Where a record stands among its writer's records and beats on its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// The record's place among its writer's records on the partition, from 1.
    pub seq: u64,
    /// The time of the writer's last beat before it, if any.
    pub after_ms: Option<i64>,
}

impl Sequence {
    /// The [`SEQUENCE_HEADER`] value.
    pub fn header_value(self) -> String {
        match self.after_ms {
            Some(at) => format!("{}@{at}", self.seq),
            None => self.seq.to_string(),
        }
    }

    /// Parses a [`SEQUENCE_HEADER`] value; `None` unless it is a positive sequence, with
    /// an optional `@<time>`.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        let (seq, after_ms) = match text.split_once('@') {
            Some((seq, at)) => (seq, Some(at.parse().ok()?)),
            None => (text, None),
        };
        let seq: u64 = seq.parse().ok()?;
        (seq > 0).then_some(Self { seq, after_ms })
    }
}

/// A writer's forwarded stream time on one output: its time, and per partition how many
/// records it had written there before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    /// The writer's stream time, epoch ms.
    pub at_ms: i64,
    /// Records written per partition before it (index = partition).
    pub counts: Vec<u64>,
}

/// What a writer has sent on one output that carries its stream time out of band: it
/// stamps each record with its [`Sequence`] and makes each [`Beat`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamper {
    counts: Vec<u64>,
    last_beat_ms: Option<i64>,
}

impl Stamper {
    /// A writer that has sent nothing to an output of `partitions` partitions.
    pub fn new(partitions: i32) -> Self {
        Self { counts: vec![0; partitions.max(1) as usize], last_beat_ms: None }
    }

    /// A restored writer: `counts` records sent per partition, its last beat at
    /// `last_beat_ms`.
    pub fn resume(counts: Vec<u64>, last_beat_ms: Option<i64>) -> Self {
        Self { counts, last_beat_ms }
    }

    /// The sequence of the next record, written to `partition`.
    pub fn stamp(&mut self, partition: i32) -> Sequence {
        let p = partition.max(0) as usize;
        if self.counts.len() <= p {
            self.counts.resize(p + 1, 0);
        }
        self.counts[p] += 1;
        Sequence { seq: self.counts[p], after_ms: self.last_beat_ms }
    }

    /// A beat at `at_ms` (the writer's stream time, later than its last beat's).
    pub fn beat(&mut self, at_ms: i64) -> Beat {
        self.last_beat_ms = Some(at_ms);
        Beat { at_ms, counts: self.counts.clone() }
    }

    /// Records sent per partition.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The time of the last beat.
    pub fn last_beat_ms(&self) -> Option<i64> {
        self.last_beat_ms
    }
}

/// One sub-lane's records and beats, put back in the order their writer wrote them (see
/// the module docs). `T` is what the gate buffers for each.
#[derive(Debug)]
pub(super) struct Stitch<T> {
    records: VecDeque<(Sequence, T)>,
    /// (time, count on this partition) of beats not in yet.
    beats: VecDeque<(i64, u64, T)>,
    /// The sequence of the last record in (0: none).
    seq: u64,
    /// The time of the last beat in.
    beat_ms: Option<i64>,
}

impl<T> Default for Stitch<T> {
    fn default() -> Self {
        Self { records: VecDeque::new(), beats: VecDeque::new(), seq: 0, beat_ms: None }
    }
}

impl<T> Stitch<T> {
    /// Seeds a restored sub-lane: the last record and beat it had let in.
    pub(super) fn resume(&mut self, seq: u64, beat_ms: Option<i64>) {
        self.seq = self.seq.max(seq);
        self.beat_ms = self.beat_ms.max(beat_ms);
    }

    /// Adds a record; false (and it is dropped) when one of its sequence was let in
    /// already (read again after a restore).
    pub(super) fn record(&mut self, sequence: Sequence, item: T) -> bool {
        let last_pending = self.records.back().map_or(self.seq, |(s, _)| s.seq);
        if sequence.seq <= last_pending {
            return false;
        }
        self.records.push_back((sequence, item));
        true
    }

    /// Adds a beat at `at_ms` after `count` records on this partition; false (dropped) when
    /// it is not later than the last beat it knows (read again after a restore).
    pub(super) fn beat(&mut self, at_ms: i64, count: u64, item: T) -> bool {
        let last_pending = self.beats.back().map(|(at, _, _)| *at).or(self.beat_ms);
        if last_pending.is_some_and(|last| at_ms <= last) {
            return false;
        }
        self.beats.push_back((at_ms, count, item));
        true
    }

    /// The next item in writer order, if it is known: `Ok(item)` a record, `Err(item)` a
    /// beat.
    pub(super) fn next(&mut self) -> Option<Result<T, T>> {
        if self.beats.front().is_some_and(|(_, count, _)| *count <= self.seq) {
            let (at, _, item) = self.beats.pop_front()?;
            self.beat_ms = Some(at);
            return Some(Err(item));
        }
        let (sequence, _) = self.records.front()?;
        if sequence.after_ms.is_some_and(|after| self.beat_ms.is_none_or(|b| b < after)) {
            return None;
        }
        let (sequence, item) = self.records.pop_front()?;
        self.seq = sequence.seq;
        Some(Ok(item))
    }

    /// The first record waiting (for its offset).
    pub(super) fn first_record(&self) -> Option<&T> {
        self.records.front().map(|(_, item)| item)
    }

    /// Whether a record waits for a beat (only the progress channel can let it in).
    pub(super) fn awaits_beat(&self) -> bool {
        self.records
            .front()
            .is_some_and(|(s, _)| s.after_ms.is_some_and(|a| self.beat_ms.is_none_or(|b| b < a)))
    }

    /// Records and beats waiting.
    pub(super) fn len(&self) -> usize {
        self.records.len() + self.beats.len()
    }
}
