//! What the gate buffers: per lane, one sub-lane per writer, holding its records.

use std::collections::VecDeque;

use super::{
    mark::{Mark, Verdict},
    sequence::Stitch,
};

/// Capacity (records) above which an emptied sub-lane queue is freed.
const SHRINK_ABOVE: usize = 256;

/// One buffered record.
#[derive(Debug)]
pub(super) struct Entry<T> {
    /// Where it sorts: its timestamp, or for a record that carries no time its writer's
    /// time so far.
    pub(super) key_ms: i64,
    pub(super) timestamp_ms: i64,
    pub(super) offset: i64,
    pub(super) mark: Mark,
    pub(super) verdict: Verdict,
    pub(super) item: T,
}

impl<T> Entry<T> {
    /// How it flows through the merge: a record judged ahead carries no time either.
    pub(super) fn flow(&self) -> Mark {
        if self.verdict.refuses() { Mark::Void } else { self.mark }
    }
}

/// The records of one writer on one lane.
#[derive(Debug)]
pub(super) struct Sub<T> {
    pub(super) queue: VecDeque<Entry<T>>,
    /// Records of a checked lane waiting for a heartbeat to judge them (not in `queue`
    /// yet, so they show nothing).
    pub(super) held: VecDeque<Entry<T>>,
    /// The highest timestamp this writer has shown on the lane (buffered or released).
    pub(super) bound: Option<i64>,
    /// The highest timestamp of its records enqueued (`bound` without the heartbeat's
    /// "and nothing more of this millisecond"): where a record that carries no time sorts.
    pub(super) last_ms: Option<i64>,
    /// On a checked lane: the time of the last heartbeat accepted.
    pub(super) heartbeat: Option<i64>,
    /// On a checked lane: the publisher its heartbeats and markers come from, as the
    /// snapshot epoch it began and a hash of its instance ([`super::Claim`]).
    pub(super) publisher: Option<(i64, u64)>,
    /// Records at lower offsets were released before this task was restored: read again,
    /// they are dropped.
    pub(super) next_offset: i64,
    /// Records and beats of a writer that sends its stream time out of band, waiting to be
    /// put back in the order it wrote them (`super::sequence`).
    pub(super) stitch: Stitch<Entry<T>>,
}

impl<T> Default for Sub<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            held: VecDeque::new(),
            bound: None,
            last_ms: None,
            heartbeat: None,
            publisher: None,
            next_offset: 0,
            stitch: Stitch::default(),
        }
    }
}

impl<T> Sub<T> {
    /// Makes `entry` visible to the merge: a record that carries no time sorts at the
    /// writer's time so far (right after the record before it, never waiting for a time of
    /// its own); any other shows its time.
    pub(super) fn enqueue(&mut self, mut entry: Entry<T>) {
        if entry.mark == Mark::Void || entry.verdict.refuses() {
            entry.key_ms = self.last_ms.unwrap_or(i64::MIN);
        } else {
            let ts = entry.timestamp_ms;
            self.last_ms = Some(self.last_ms.map_or(ts, |l| l.max(ts)));
            // Through a heartbeat's time: the writer's next record is later.
            let shown = if entry.mark == Mark::Through { ts.saturating_add(1) } else { ts };
            self.bound = Some(self.bound.map_or(shown, |b| b.max(shown)));
        }
        self.queue.push_back(entry);
    }

    /// Moves what the stitch can place, in its writer's order, into the queue.
    pub(super) fn stitch_in(&mut self) {
        while let Some(next) = self.stitch.next() {
            let (Ok(entry) | Err(entry)) = next;
            self.enqueue(entry);
        }
    }

    /// After a record left: an empty queue that grew large over a backlog gives its memory
    /// back (a `VecDeque` keeps its capacity, and a lane's burst stayed resident for the
    /// rest of the run; docs/BENCHMARKS.md, peak memory).
    pub(super) fn drained(&mut self) {
        if self.queue.is_empty() && self.queue.capacity() > SHRINK_ABOVE {
            self.queue = VecDeque::new();
        }
    }

    /// Judges a record against the last heartbeat accepted before it (`reference`; before
    /// the lane's first, the heartbeat that accepts it): one stamped more than
    /// `max_behind_ms` before it is [`Verdict::Behind`] (a heartbeat included).
    pub(super) fn judge_behind(entry: &mut Entry<T>, reference: Option<i64>, max_behind_ms: i64) {
        let behind = reference.is_some_and(|h| entry.timestamp_ms < h.saturating_sub(max_behind_ms));
        if entry.mark != Mark::Void && entry.verdict == Verdict::Use && behind {
            entry.verdict = Verdict::Behind;
        }
    }

    /// Judges what is held by the first heartbeat that can be accepted (see the module
    /// docs), as often as one can.
    pub(super) fn resolve(&mut self, max_ahead_ms: i64, max_behind_ms: i64) {
        loop {
            // A heartbeat stamped behind the last one judges nothing (it is judged itself).
            let floor = self.heartbeat.map_or(i64::MIN, |h| h.saturating_sub(max_behind_ms));
            let beats: Vec<usize> = (self.held.iter().enumerate())
                .filter(|(_, e)| e.mark == Mark::Through && e.timestamp_ms >= floor)
                .map(|(i, _)| i)
                .collect();
            let mut judge = None;
            for (k, &i) in beats.iter().enumerate() {
                let ts = self.held[i].timestamp_ms;
                if self.heartbeat.is_some_and(|h| ts <= h.saturating_add(max_ahead_ms)) {
                    judge = Some(i);
                    break;
                }
                // Before the lane's first heartbeat, one far behind the next is no judge
                // either: it is judged behind by that one.
                let plausible = |next: i64| {
                    ts <= next.saturating_add(max_ahead_ms)
                        && (self.heartbeat.is_some() || ts >= next.saturating_sub(max_behind_ms))
                };
                match beats.get(k + 1) {
                    Some(&j) if plausible(self.held[j].timestamp_ms) => {
                        judge = Some(i);
                        break;
                    }
                    // Ahead of the heartbeat after it: judged as a record by a later one.
                    Some(_) => {}
                    None => break,
                }
            }
            let Some(i) = judge else { return };
            let at = self.held[i].timestamp_ms;
            let limit = at.saturating_add(max_ahead_ms);
            let reference = Some(self.heartbeat.unwrap_or(at));
            for mut entry in self.held.drain(..=i).collect::<Vec<_>>() {
                if entry.mark != Mark::Void && entry.timestamp_ms > limit {
                    entry.verdict = Verdict::Ahead;
                }
                Self::judge_behind(&mut entry, reference, max_behind_ms);
                self.enqueue(entry);
            }
            self.heartbeat = Some(self.heartbeat.map_or(at, |h| h.max(at)));
        }
    }
}

#[derive(Debug)]
pub(super) struct Lane<T> {
    pub(super) timed: bool,
    /// Whether records are judged by the heartbeats that follow them (module docs).
    pub(super) checked: bool,
    /// Writers expected: the `tasks` of the latest record (1 for a source topic).
    pub(super) tasks: u32,
    /// One per writer task.
    pub(super) subs: Vec<Sub<T>>,
}
