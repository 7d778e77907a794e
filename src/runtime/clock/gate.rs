//! The merge of a task's lanes ([`Gate`]), what a record is pushed with ([`Mark`]) and what
//! it is released with ([`Verdict`]).

use super::{
    lane::{Entry, Lane, Sub},
    mark::{Claim, Mark, Verdict},
    sequence::Sequence,
    writer::Writer,
};

/// The offset a beat from the progress channel is released with ([`Gate::push_beat`]): it
/// has none on the lane's partition.
pub const BEAT_OFFSET: i64 = i64::MAX;

/// A record the gate released.
#[derive(Debug, PartialEq, Eq)]
pub struct Released<T> {
    /// The lane it was pushed on.
    pub lane: usize,
    /// Who wrote it.
    pub writer: Writer,
    /// Its timestamp.
    pub timestamp_ms: i64,
    /// Its offset in the lane's partition.
    pub offset: i64,
    /// Whether its time was plausible.
    pub verdict: Verdict,
    /// What was pushed.
    pub item: T,
}

/// Where a buffered head sorts: (timestamp, lane, writer task).
pub type HeadKey = (i64, usize, u32);

/// A sub-lane that holds a head back: (lane, writer task, the highest time it has shown).
pub type Holding = (usize, u32, Option<i64>);

/// The merge of a task's lanes (see the module docs).
#[derive(Debug)]
pub struct Gate<T> {
    lanes: Vec<Lane<T>>,
    /// Nothing more will arrive (the in-memory driver: every lane is complete).
    closed: bool,
    /// How far ahead of the heartbeat after it a record of a checked lane may be.
    max_ahead_ms: i64,
    /// How far behind the heartbeat before it a record of a checked lane may be.
    max_behind_ms: i64,
    len: usize,
}

impl<T> Gate<T> {
    /// A gate over lanes, each timed (`true`) or untimed.
    pub fn new(timed: impl IntoIterator<Item = bool>) -> Self {
        let lanes = (timed.into_iter())
            .map(|timed| Lane { timed, checked: false, tasks: 1, subs: Vec::new() })
            .collect();
        Self { lanes, closed: false, max_ahead_ms: i64::MAX, max_behind_ms: i64::MAX, len: 0 }
    }

    /// Checks the lanes flagged `true` (one flag per lane): their records are judged by
    /// the heartbeats that follow them, at most `max_ahead_ms` ahead, and by the heartbeat
    /// before them, at most `max_behind_ms` behind (module docs).
    pub fn checking(
        mut self,
        checked: impl IntoIterator<Item = bool>,
        (max_ahead_ms, max_behind_ms): (i64, i64),
    ) -> Self {
        for (lane, checked) in self.lanes.iter_mut().zip(checked) {
            lane.checked = checked;
        }
        self.max_ahead_ms = max_ahead_ms.max(0);
        self.max_behind_ms = max_behind_ms.max(0);
        self
    }

    /// Whether `lane` is checked (its heartbeats and markers name a publisher it knows).
    pub fn is_checked(&self, lane: usize) -> bool {
        self.lanes[lane].checked
    }

    /// Judges the publisher a heartbeat or snapshot marker at `offset` of `writer` on a
    /// checked `lane` claims ([`Claim::judge`]) and keeps what the lane then knows. `Err`
    /// carries the epoch the lane's publisher began. A record released before the task
    /// was restored (read again, then dropped) is judged `Ok` and teaches nothing.
    pub fn vet(&mut self, lane: usize, writer: Writer, offset: i64, claim: Claim) -> Result<(), i64> {
        let sub = sub_mut(&mut self.lanes[lane], writer.task);
        if offset < sub.next_offset {
            return Ok(());
        }
        sub.publisher = claim.judge(sub.publisher)?;
        Ok(())
    }

    /// Seeds a checked lane's writer from a restored task: the publisher it last accepted
    /// (the epoch it began, its instance's hash).
    pub fn resume_publisher(&mut self, lane: usize, writer: Writer, (epoch, instance): (i64, u64)) {
        sub_mut(&mut self.lanes[lane], writer.task).publisher = Some((epoch, instance));
    }

    /// Seeds a checked lane's writer from a restored task: the last heartbeat it accepted.
    pub fn resume_heartbeat(&mut self, lane: usize, writer: Writer, at_ms: i64) {
        let sub = sub_mut(&mut self.lanes[lane], writer.task);
        sub.heartbeat = Some(sub.heartbeat.map_or(at_ms, |h| h.max(at_ms)));
    }

    /// Whether `lane`'s writer `task` holds records for a heartbeat to judge and shows none
    /// yet (the in-memory driver then feeds it more).
    pub fn holds(&self, lane: usize, task: u32) -> bool {
        let subs = &self.lanes[lane].subs;
        subs.get(task as usize).is_some_and(|s| s.queue.is_empty() && !s.held.is_empty())
    }

    /// Whether some writer of `lane` shows the merge nothing and holds records for a
    /// heartbeat to judge: only more of the lane (that heartbeat) can release them, so its
    /// partition must keep fetching however much of it is buffered.
    pub fn awaits_heartbeat(&self, lane: usize) -> bool {
        self.lanes[lane].subs.iter().any(|s| s.queue.is_empty() && !s.held.is_empty())
    }

    /// The end of `lane`'s records of writer `task` (a finite input): what is held, with no
    /// heartbeat after it to judge it, is accepted.
    pub fn end(&mut self, lane: usize, task: u32) {
        if let Some(sub) = self.lanes[lane].subs.get_mut(task as usize) {
            while let Some(entry) = sub.held.pop_front() {
                sub.enqueue(entry);
            }
        }
    }

    /// Declares every lane complete: nothing more will be pushed, so the buffered records
    /// are released in merge order without waiting (the end of an input held in memory).
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Seeds a writer's sub-lane from a restored task: it had released everything below
    /// `next_offset`, up to timestamp `bound`.
    pub fn resume(&mut self, lane: usize, writer: Writer, next_offset: i64, bound: i64) {
        let lane = &mut self.lanes[lane];
        lane.tasks = writer.tasks;
        let sub = sub_mut(lane, writer.task);
        sub.next_offset = sub.next_offset.max(next_offset);
        sub.bound = Some(sub.bound.map_or(bound, |b| b.max(bound)));
    }

    /// Buffers a record of `writer` on `lane` at (timestamp, offset). Returns false (and
    /// drops it) when it was released before the task was restored.
    pub fn push(&mut self, lane: usize, writer: Writer, at: (i64, i64), mark: Mark, item: T) -> bool {
        let (timestamp_ms, offset) = at;
        let (max_ahead_ms, max_behind_ms) = (self.max_ahead_ms, self.max_behind_ms);
        let lane = &mut self.lanes[lane];
        lane.tasks = writer.tasks;
        let checked = lane.checked;
        let sub = sub_mut(lane, writer.task);
        if offset < sub.next_offset {
            return false;
        }
        self.len += 1;
        let entry = Entry { key_ms: timestamp_ms, timestamp_ms, offset, mark, verdict: Verdict::Use, item };
        if !checked {
            sub.enqueue(entry);
            return true;
        }
        let within = mark == Mark::Void
            || sub.heartbeat.is_some_and(|h| timestamp_ms <= h.saturating_add(max_ahead_ms));
        if sub.held.is_empty() && within {
            let mut entry = entry;
            Sub::judge_behind(&mut entry, sub.heartbeat, max_behind_ms);
            if mark == Mark::Through && !entry.verdict.refuses() {
                sub.heartbeat = Some(timestamp_ms.max(sub.heartbeat.unwrap_or(i64::MIN)));
            }
            sub.enqueue(entry);
            return true;
        }
        sub.held.push_back(entry);
        if mark == Mark::Through {
            sub.resolve(max_ahead_ms, max_behind_ms);
        }
        true
    }

    /// Buffers a record of a writer that sends its stream time out of band: it enters the
    /// merge once every beat its writer sent before it has ([`Gate::push_beat`]). Returns
    /// false (and drops it) when it was released before the task was restored.
    pub fn push_sequenced(
        &mut self,
        lane: usize,
        writer: Writer,
        (timestamp_ms, offset): (i64, i64),
        (sequence, mark): (Sequence, Mark),
        item: T,
    ) -> bool {
        let lane = &mut self.lanes[lane];
        lane.tasks = writer.tasks;
        let sub = sub_mut(lane, writer.task);
        if offset < sub.next_offset {
            return false;
        }
        let entry = Entry { key_ms: timestamp_ms, timestamp_ms, offset, mark, verdict: Verdict::Use, item };
        if !sub.stitch.record(sequence, entry) {
            return false;
        }
        self.len += 1;
        sub.stitch_in();
        true
    }

    /// Buffers a beat of `writer` from the progress channel: its stream time `at_ms`, sent
    /// after its `count`th record on `lane`'s partition. It enters the merge as forwarded
    /// stream time once that record has, and is released with [`BEAT_OFFSET`]. Returns
    /// false (and drops it) when the lane had let it in before the task was restored.
    pub fn push_beat(&mut self, lane: usize, writer: Writer, at_ms: i64, count: u64, item: T) -> bool {
        let lane = &mut self.lanes[lane];
        lane.tasks = writer.tasks;
        let sub = sub_mut(lane, writer.task);
        let entry = Entry {
            key_ms: at_ms,
            timestamp_ms: at_ms,
            offset: BEAT_OFFSET,
            mark: Mark::Forwarded,
            verdict: Verdict::Use,
            item,
        };
        if !sub.stitch.beat(at_ms, count, entry) {
            return false;
        }
        self.len += 1;
        sub.stitch_in();
        true
    }

    /// Seeds an out-of-band writer's sub-lane from a restored task: the sequence of the
    /// last record and the time of the last beat it had released.
    pub fn resume_sequence(&mut self, lane: usize, writer: Writer, seq: u64, beat_ms: Option<i64>) {
        sub_mut(&mut self.lanes[lane], writer.task).stitch.resume(seq, beat_ms);
    }

    /// Whether some writer of `lane` has a record that waits for a beat: only the progress
    /// channel can let it in.
    pub fn awaits_beat(&self, lane: usize) -> bool {
        self.lanes[lane].subs.iter().any(|s| s.stitch.awaits_beat())
    }

    /// The next record in merge order, if no lane can still deliver an earlier one.
    ///
    /// `stream_time` is the task's: a heartbeat (forwarded, or the watcher's) no later than
    /// it changes nothing wherever it goes, so it is released even while a lane could still
    /// deliver a record of the same time (the last heartbeats of a finite input would
    /// otherwise wait forever).
    pub fn pop(&mut self, stream_time: Option<i64>) -> Option<Released<T>> {
        let mut best: Option<((i64, usize, u32), Mark)> = None;
        for (l, lane) in self.lanes.iter().enumerate() {
            for (t, sub) in lane.subs.iter().enumerate() {
                if let Some(head) = sub.queue.front() {
                    let key = (head.key_ms, l, t as u32);
                    if best.is_none_or(|(b, _)| key < b) {
                        best = Some((key, head.flow()));
                    }
                }
            }
        }
        let (candidate, mark) = best?;
        let inert = mark.is_time_only() && stream_time.is_some_and(|now| candidate.0 <= now);
        if !self.closed && !inert && self.blocked(candidate) {
            return None;
        }
        let (_, l, t) = candidate;
        let lane = &mut self.lanes[l];
        let tasks = lane.tasks.max(t + 1);
        let sub = &mut lane.subs[t as usize];
        let entry = sub.queue.pop_front().expect("the candidate's sub-lane has a head");
        sub.drained();
        self.len -= 1;
        Some(Released {
            lane: l,
            writer: Writer { task: t, tasks },
            timestamp_ms: entry.timestamp_ms,
            offset: entry.offset,
            verdict: entry.verdict,
            item: entry.item,
        })
    }

    /// Whether some timed sub-lane could still deliver a record that sorts before
    /// `candidate`: an expected writer not heard from, or an empty sub-lane whose highest
    /// timestamp sorts before it.
    fn blocked(&self, candidate: (i64, usize, u32)) -> bool {
        self.lanes.iter().enumerate().filter(|(_, lane)| lane.timed).any(|(l, lane)| {
            (0..lane.tasks).any(|t| match lane.subs.get(t as usize) {
                None => true,
                Some(sub) if sub.queue.is_empty() => sub.bound.is_none_or(|b| (b, l, t) < candidate),
                Some(_) => false,
            })
        })
    }

    /// Why nothing is released now, for logs: the head that waits, as (timestamp, lane,
    /// writer task), and each timed sub-lane that holds it back, as (lane, writer task, the
    /// highest timestamp it has shown, `None` when not heard from). Empty when something
    /// can be released or nothing is buffered.
    pub fn waiting(&self, stream_time: Option<i64>) -> Option<(HeadKey, Vec<Holding>)> {
        let head = self
            .lanes
            .iter()
            .enumerate()
            .flat_map(|(l, lane)| {
                lane.subs.iter().enumerate().filter_map(move |(t, sub)| {
                    sub.queue.front().map(|h| ((h.key_ms, l, t as u32), h.flow()))
                })
            })
            .min_by_key(|(k, _)| *k)?;
        let (candidate, mark) = head;
        if self.closed || (mark.is_time_only() && stream_time.is_some_and(|now| candidate.0 <= now)) {
            return None;
        }
        let mut holding = Vec::new();
        for (l, lane) in self.lanes.iter().enumerate().filter(|(_, lane)| lane.timed) {
            for t in 0..lane.tasks {
                match lane.subs.get(t as usize) {
                    None => holding.push((l, t, None)),
                    Some(sub) if sub.queue.is_empty() => {
                        if sub.bound.is_none_or(|b| (b, l, t) < candidate) {
                            holding.push((l, t, sub.bound));
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        (!holding.is_empty()).then_some((candidate, holding))
    }

    /// The time below which no timed lane will deliver anything more: the minimum over
    /// timed lanes and their writers of the highest timestamp each has shown (one past a
    /// watcher heartbeat's; `None` while a writer has shown nothing; `i64::MAX` without timed
    /// lanes).
    pub fn watermark(&self) -> Option<i64> {
        let mut low = i64::MAX;
        for lane in self.lanes.iter().filter(|l| l.timed) {
            for t in 0..lane.tasks {
                low = low.min(lane.subs.get(t as usize)?.bound?);
            }
        }
        Some(low)
    }

    /// The lowest offset still buffered on `lane`, held ones included (offsets below it
    /// were all released).
    pub fn first_offset(&self, lane: usize) -> Option<i64> {
        (self.lanes[lane].subs.iter())
            .filter_map(|s| {
                let queued = s.queue.iter().find(|e| e.offset != BEAT_OFFSET);
                queued.or(s.held.front()).or(s.stitch.first_record()).map(|e| e.offset)
            })
            .min()
    }

    /// Whether [`Gate::pop`] would release something now.
    pub fn ready(&self, stream_time: Option<i64>) -> bool {
        let best = (self.lanes.iter().enumerate())
            .flat_map(|(l, lane)| {
                lane.subs.iter().enumerate().filter_map(move |(t, sub)| {
                    sub.queue.front().map(|h| ((h.key_ms, l, t as u32), h.flow()))
                })
            })
            .min_by_key(|(k, _)| *k);
        let Some((candidate, mark)) = best else { return false };
        let inert = mark.is_time_only() && stream_time.is_some_and(|now| candidate.0 <= now);
        self.closed || inert || !self.blocked(candidate)
    }

    /// The queue capacity (records) of one writer's sub-lane: what it keeps allocated.
    #[cfg(test)]
    pub(super) fn queue_capacity(&self, lane: usize, task: u32) -> usize {
        self.lanes[lane].subs.get(task as usize).map_or(0, |s| s.queue.capacity())
    }

    /// Records buffered on `lane`, held ones and those an out-of-band writer's beats
    /// place included.
    pub fn lane_len(&self, lane: usize) -> usize {
        self.lanes[lane].subs.iter().map(|s| s.queue.len() + s.held.len() + s.stitch.len()).sum()
    }

    /// Records buffered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lanes.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }
}

fn sub_mut<T>(lane: &mut Lane<T>, task: u32) -> &mut Sub<T> {
    let t = task as usize;
    if lane.subs.len() <= t {
        lane.subs.resize_with(t + 1, Sub::default);
    }
    &mut lane.subs[t]
}
