//! Stream time across tasks: who wrote each record, and the merge of a task's lanes that
//! releases a record only once no lane can still deliver an earlier one.
//!
//! A task reads **lanes**: its partition of each co-partitioned input, and every partition
//! of each global input. A lane of a source topic has one writer (the watcher, a host
//! application). A lane of a topic another stage writes has one writer per task of that
//! stage, interleaved on the partition in the order their transactions committed, so the
//! partition is not in timestamp order and its highest timestamp says nothing about the
//! slower writers. Each output record of a stage therefore names its writer in the
//! [`WRITER_HEADER`] header (`<task>/<tasks>`), and the gate keeps one **sub-lane** per
//! (lane, writer). Within a sub-lane timestamps do not decrease (a writer emits in its own
//! stream-time order), so a sub-lane that has shown timestamp `t` will deliver nothing
//! earlier.
//!
//! The gate releases the buffered head with the smallest `(timestamp, lane, writer)` once
//! every sub-lane that could still deliver something smaller has shown that it will not:
//! every expected writer of every timed lane must be heard from, and an empty sub-lane
//! blocks while its highest timestamp sorts before the candidate. The order released is then
//! the merge of the complete sub-lanes, whatever order fetches and commits brought them in —
//! the same on Kafka as in memory, where every sub-lane is complete from the start. A
//! task's stream time (the highest timestamp released) is at most the minimum over its
//! lanes, and over each lane's writers, of the time each has reached: the watermark.
//!
//! An **untimed** lane (an input whose producers send no stream time) never holds the
//! others back: its records are released in order with everything else once the timed
//! lanes allow it, and an empty untimed lane blocks nothing.
//!
//! **Time cannot be poisoned.** A record that the runtime could not use ([`Mark::Void`]:
//! undecodable, invalid for its topic) carries no time: it sorts at its writer's time so
//! far and moves no bound, so a wrong timestamp on a bad record neither holds its lane back
//! nor lets it jump. On a **checked** lane (a source topic the watcher heartbeats) a record
//! may be at most `max_ahead_ms` ahead of the heartbeat that follows it — what the watcher
//! stamps before a heartbeat was observed before it. A record within that bound of the
//! lane's last heartbeat goes at once; one beyond it is held, with everything after it on
//! its lane, until a heartbeat judges it: one no more than `max_ahead_ms` ahead of the
//! heartbeat after it (or within the bound of the last) is accepted, and every record held
//! before it that is further ahead of it is released as [`Verdict::Ahead`] — carrying no
//! time, for the runtime to dead-letter. After an outage the first records are far ahead
//! of the last heartbeat and simply wait for the watcher's next two heartbeats.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Header naming the task that wrote a record: `<task>/<tasks>`, e.g. `2/3` (task 2 of a
/// stage with 3 tasks). Records without it have one writer ([`Writer::SOLE`]).
pub const WRITER_HEADER: &str = "kubefacts-writer";

/// The writer of a record on a partition: a task of the upstream stage, and how many tasks
/// that stage has (so a reader knows how many writers to wait for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Writer {
    /// The writing task (its partition number).
    pub task: u32,
    /// Tasks of the writing stage.
    pub tasks: u32,
}

impl Writer {
    /// The only writer of a source topic's partition.
    pub const SOLE: Self = Self { task: 0, tasks: 1 };

    /// Task `task` of a stage with `tasks` tasks.
    pub fn new(task: i32, tasks: i32) -> Self {
        let tasks = tasks.max(1) as u32;
        Self { task: (task.max(0) as u32).min(tasks - 1), tasks }
    }

    /// The header value, `<task>/<tasks>`.
    pub fn header_value(self) -> String {
        format!("{}/{}", self.task, self.tasks)
    }

    /// Parses a header value; `None` unless it is `<task>/<tasks>` with `task < tasks`.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let (task, tasks) = std::str::from_utf8(value).ok()?.split_once('/')?;
        let (task, tasks): (u32, u32) = (task.parse().ok()?, tasks.parse().ok()?);
        (task < tasks).then_some(Self { task, tasks })
    }
}

/// What a record says about its writer's time on its lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A record: its writer delivers nothing earlier after it.
    Record,
    /// Forwarded stream time (a heartbeat without a value): nothing earlier follows, and
    /// it changes nothing once stream time has reached it, wherever it goes among records
    /// of its own time.
    Forwarded,
    /// A watcher heartbeat (an observation carrying time): nothing at or before its time
    /// follows on the partition (the observer stamps a later observation of the same
    /// millisecond one millisecond later). Processors take it as time only, so like
    /// [`Mark::Forwarded`] it changes nothing once stream time has reached it.
    Through,
    /// A record the runtime cannot use (it is dead-lettered): it carries no time, so it
    /// sorts at its writer's time so far and shows nothing.
    Void,
}

impl Mark {
    /// A heartbeat, or a record that carries no time: once stream time has reached it,
    /// where it goes among records of its own time changes no stream time, so it goes
    /// without waiting (a refused record's one effect, a processor forgetting what its key
    /// said, happens at that same stream time).
    fn is_time_only(self) -> bool {
        matches!(self, Self::Forwarded | Self::Through | Self::Void)
    }
}

/// What the gate says of a released record's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its time is plausible: process it (or, pushed [`Mark::Void`], dead-letter it).
    Use,
    /// More than `max_ahead_ms` ahead of the heartbeat after it on a checked lane: it
    /// carried no time and must be dead-lettered (`timestamp_ahead`).
    Ahead,
}

/// One buffered record.
#[derive(Debug)]
struct Entry<T> {
    /// Where it sorts: its timestamp, or for a record that carries no time its writer's
    /// time so far.
    key_ms: i64,
    timestamp_ms: i64,
    offset: i64,
    mark: Mark,
    verdict: Verdict,
    item: T,
}

impl<T> Entry<T> {
    /// How it flows through the merge: a record judged ahead carries no time either.
    fn flow(&self) -> Mark {
        if self.verdict == Verdict::Ahead { Mark::Void } else { self.mark }
    }
}

/// The records of one writer on one lane.
#[derive(Debug)]
struct Sub<T> {
    queue: VecDeque<Entry<T>>,
    /// Records of a checked lane waiting for a heartbeat to judge them (not in `queue`
    /// yet, so they show nothing).
    held: VecDeque<Entry<T>>,
    /// The highest timestamp this writer has shown on the lane (buffered or released).
    bound: Option<i64>,
    /// The highest timestamp of its records enqueued (`bound` without the heartbeat's
    /// "and nothing more of this millisecond"): where a record that carries no time sorts.
    last_ms: Option<i64>,
    /// On a checked lane: the time of the last heartbeat accepted.
    heartbeat: Option<i64>,
    /// Records at lower offsets were released before this task was restored: read again,
    /// they are dropped.
    next_offset: i64,
}

impl<T> Default for Sub<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            held: VecDeque::new(),
            bound: None,
            last_ms: None,
            heartbeat: None,
            next_offset: 0,
        }
    }
}

impl<T> Sub<T> {
    /// Makes `entry` visible to the merge: a record that carries no time sorts at the
    /// writer's time so far (right after the record before it, never waiting for a time of
    /// its own); any other shows its time.
    fn enqueue(&mut self, mut entry: Entry<T>) {
        if entry.mark == Mark::Void || entry.verdict == Verdict::Ahead {
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

    /// Judges what is held by the first heartbeat that can be accepted (see the module
    /// docs), as often as one can.
    fn resolve(&mut self, max_ahead_ms: i64) {
        loop {
            let beats: Vec<usize> = (self.held.iter().enumerate())
                .filter(|(_, e)| e.mark == Mark::Through)
                .map(|(i, _)| i)
                .collect();
            let mut judge = None;
            for (k, &i) in beats.iter().enumerate() {
                let ts = self.held[i].timestamp_ms;
                if self.heartbeat.is_some_and(|h| ts <= h.saturating_add(max_ahead_ms)) {
                    judge = Some(i);
                    break;
                }
                match beats.get(k + 1) {
                    Some(&j) if ts <= self.held[j].timestamp_ms.saturating_add(max_ahead_ms) => {
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
            for mut entry in self.held.drain(..=i).collect::<Vec<_>>() {
                if entry.mark != Mark::Void && entry.timestamp_ms > limit {
                    entry.verdict = Verdict::Ahead;
                }
                self.enqueue(entry);
            }
            self.heartbeat = Some(at);
        }
    }
}

#[derive(Debug)]
struct Lane<T> {
    timed: bool,
    /// Whether records are judged by the heartbeats that follow them (module docs).
    checked: bool,
    /// Writers expected: the `tasks` of the latest record (1 for a source topic).
    tasks: u32,
    /// One per writer task.
    subs: Vec<Sub<T>>,
}

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
    len: usize,
}

impl<T> Gate<T> {
    /// A gate over lanes, each timed (`true`) or untimed.
    pub fn new(timed: impl IntoIterator<Item = bool>) -> Self {
        let lanes = (timed.into_iter())
            .map(|timed| Lane { timed, checked: false, tasks: 1, subs: Vec::new() })
            .collect();
        Self { lanes, closed: false, max_ahead_ms: i64::MAX, len: 0 }
    }

    /// Checks the lanes flagged `true` (one flag per lane): their records are judged by
    /// the heartbeats that follow them, at most `max_ahead_ms` ahead (module docs).
    pub fn checking(mut self, checked: impl IntoIterator<Item = bool>, max_ahead_ms: i64) -> Self {
        for (lane, checked) in self.lanes.iter_mut().zip(checked) {
            lane.checked = checked;
        }
        self.max_ahead_ms = max_ahead_ms.max(0);
        self
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
        let max_ahead_ms = self.max_ahead_ms;
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
            if mark == Mark::Through {
                sub.heartbeat = Some(timestamp_ms.max(sub.heartbeat.unwrap_or(i64::MIN)));
            }
            sub.enqueue(entry);
            return true;
        }
        sub.held.push_back(entry);
        if mark == Mark::Through {
            sub.resolve(max_ahead_ms);
        }
        true
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
        let entry = lane.subs[t as usize].queue.pop_front().expect("the candidate's sub-lane has a head");
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
            .filter_map(|s| s.queue.front().or(s.held.front()).map(|e| e.offset))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn w(task: u32, tasks: u32) -> Writer {
        Writer { task, tasks }
    }

    fn drain<T>(g: &mut Gate<T>) -> Vec<T> {
        std::iter::from_fn(|| g.pop(None).map(|r| r.item)).collect()
    }

    #[test]
    fn writer_headers_round_trip_and_nonsense_is_refused() {
        assert_eq!(Writer::parse(b"2/3"), Some(w(2, 3)));
        assert_eq!(Writer::parse(w(0, 1).header_value().as_bytes()), Some(Writer::SOLE));
        for bad in [&b"3/3"[..], b"x/3", b"1", b"", b"1/0", b"\xff/2"] {
            assert_eq!(Writer::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Writer::new(5, 3), w(2, 3), "clamped into range");
    }

    #[test]
    fn a_fast_writer_waits_for_the_slow_one() {
        // One lane, two upstream tasks: task 0 has reached 100, task 1 only 10.
        let mut g = Gate::new([true]);
        for (ts, off) in [(50, 0), (100, 1)] {
            g.push(0, w(0, 2), (ts, off), Mark::Record, format!("a{ts}"));
        }
        assert_eq!(g.pop(None), None, "task 1 has not been heard from");
        g.push(0, w(1, 2), (10, 2), Mark::Record, "b10".to_owned());
        assert_eq!(drain(&mut g), ["b10"], "a50 could still be preceded by task 1's next record");
        assert_eq!(g.watermark(), Some(10));
        g.push(0, w(1, 2), (60, 3), Mark::Record, "b60".to_owned());
        assert_eq!(drain(&mut g), ["a50", "b60"], "a100 waits for task 1 to pass it");
        g.push(0, w(1, 2), (120, 4), Mark::Record, "b120".to_owned()); // a heartbeat, say
        assert_eq!(drain(&mut g), ["a100"]);
        assert_eq!(g.watermark(), Some(100));
        assert_eq!(g.len(), 1);
        assert_eq!(g.first_offset(0), Some(4));
    }

    #[test]
    fn equal_timestamps_wait_for_a_lane_that_sorts_first() {
        // Lane 0 last showed 100 and may deliver another record at 100, which sorts before
        // lane 1's record at 100: it must wait.
        let mut g = Gate::new([true, true]);
        g.push(0, Writer::SOLE, (100, 0), Mark::Record, "a");
        assert_eq!(g.pop(None), None);
        g.push(1, Writer::SOLE, (100, 0), Mark::Record, "b");
        assert_eq!(drain(&mut g), ["a"]);
        g.push(0, Writer::SOLE, (100, 1), Mark::Record, "a2");
        g.push(0, Writer::SOLE, (101, 2), Mark::Record, "a3");
        assert_eq!(drain(&mut g), ["a2", "b"], "a3 waits for lane 1 to pass 101");
    }

    #[test]
    fn the_order_released_does_not_depend_on_arrival() {
        // Three writers on one lane plus a source lane, each in timestamp order; pushed in
        // many interleavings, the released order is always the complete merge.
        let streams: Vec<(usize, Writer, Vec<i64>)> = vec![
            (0, w(0, 3), vec![1, 5, 5, 9, 20]),
            (0, w(1, 3), vec![2, 2, 8, 20]),
            (0, w(2, 3), vec![5, 6, 7, 30]),
            (1, Writer::SOLE, vec![0, 5, 10, 15, 20, 25, 30]),
        ];
        let complete = {
            let mut g = Gate::new([true, true]);
            for (lane, writer, ts) in &streams {
                for (i, t) in ts.iter().enumerate() {
                    g.push(*lane, *writer, (*t, i as i64), Mark::Record, (*lane, writer.task, *t));
                }
            }
            g.close();
            drain(&mut g)
        };
        let mut seed = 7u64;
        for _ in 0..200 {
            let mut g = Gate::new([true, true]);
            let mut next = vec![0usize; streams.len()];
            let mut out = Vec::new();
            while next.iter().zip(&streams).any(|(n, s)| *n < s.2.len()) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let s = (seed % streams.len() as u64) as usize;
                let (lane, writer, ts) = &streams[s];
                if let Some(t) = ts.get(next[s]) {
                    g.push(*lane, *writer, (*t, next[s] as i64), Mark::Record, (*lane, writer.task, *t));
                    next[s] += 1;
                }
                out.extend(drain(&mut g));
            }
            // On Kafka the input never ends: what is left waits for later records.
            let released = out.len();
            g.close();
            out.extend(drain(&mut g));
            assert_eq!(out, complete, "released {released} before the end");
        }
    }

    #[test]
    fn an_untimed_lane_holds_nothing_back_but_is_merged_in_order() {
        let mut g = Gate::new([true, false]);
        g.push(0, Writer::SOLE, (10, 0), Mark::Record, "t10");
        g.push(0, Writer::SOLE, (30, 1), Mark::Record, "t30");
        assert_eq!(drain(&mut g), ["t10", "t30"], "the untimed lane, empty, blocks nothing");
        g.push(1, Writer::SOLE, (20, 0), Mark::Record, "u20");
        g.push(1, Writer::SOLE, (40, 1), Mark::Record, "u40");
        assert_eq!(drain(&mut g), ["u20"], "u40 waits for the timed lane to pass it");
        g.push(0, Writer::SOLE, (50, 2), Mark::Record, "t50");
        assert_eq!(drain(&mut g), ["u40", "t50"]);
        assert_eq!(g.watermark(), Some(50), "only the timed lane sets the watermark");
    }

    #[test]
    fn a_resumed_writer_drops_what_it_released_before_and_keeps_its_time() {
        let mut g = Gate::new([true]);
        g.resume(0, w(0, 2), 5, 40);
        g.resume(0, w(1, 2), 3, 35);
        assert_eq!(g.watermark(), Some(35));
        assert!(
            !g.push(0, w(0, 2), (30, 4), Mark::Record, "old"),
            "offset 4 < 5 was released before the restore"
        );
        assert!(g.push(0, w(1, 2), (36, 3), Mark::Record, "b36"));
        assert!(g.push(0, w(0, 2), (41, 5), Mark::Record, "a41"));
        assert_eq!(drain(&mut g), ["b36"], "a41 waits: task 1 has shown only 36");
        assert_eq!(g.first_offset(0), Some(5));
    }

    #[test]
    fn a_heartbeat_no_later_than_stream_time_goes_even_on_a_tie() {
        // The last heartbeat of a finite input, on every lane at the same time.
        let mut g = Gate::new([true, true]);
        g.push(0, Writer::SOLE, (100, 0), Mark::Forwarded, "a");
        g.push(1, Writer::SOLE, (100, 0), Mark::Forwarded, "b");
        assert_eq!(g.pop(None).map(|r| r.item), Some("a"));
        assert_eq!(g.pop(Some(99)), None, "b would move stream time: it waits for lane 0");
        assert_eq!(g.pop(Some(100)).map(|r| r.item), Some("b"), "at stream time 100 it changes nothing");
        g.push(1, Writer::SOLE, (100, 1), Mark::Record, "data");
        assert_eq!(g.pop(Some(100)), None, "a record of the same time still waits for lane 0");
    }

    #[test]
    fn a_watcher_heartbeat_promises_nothing_more_of_its_time() {
        // The last heartbeat of a finite input, as the watcher writes it on every partition.
        let mut g = Gate::new([true, true]);
        g.push(0, Writer::SOLE, (100, 0), Mark::Through, "a");
        g.push(1, Writer::SOLE, (100, 0), Mark::Through, "b");
        assert_eq!(drain(&mut g), ["a", "b"], "lane 0 will deliver nothing at 100 any more");
        // A record (not a heartbeat) at the same time would not let lane 1 go first.
        let mut g = Gate::new([true, true]);
        g.push(0, Writer::SOLE, (100, 0), Mark::Record, "a");
        g.push(1, Writer::SOLE, (100, 0), Mark::Through, "b");
        assert_eq!(drain(&mut g), ["a"]);
        assert_eq!(g.watermark(), Some(100));
    }

    #[test]
    fn a_writer_not_heard_from_blocks_a_timed_lane() {
        let mut g = Gate::new([true, true]);
        g.push(0, w(0, 2), (5, 0), Mark::Record, "a");
        g.push(1, Writer::SOLE, (1, 0), Mark::Record, "s");
        assert_eq!(g.pop(None), None, "task 1 of lane 0 could still deliver something earlier");
        assert_eq!(g.watermark(), None, "task 1 of lane 0 has shown nothing");
        g.close();
        assert_eq!(drain(&mut g), ["s", "a"], "a closed gate releases the rest in order");
    }

    fn drain_verdicts<T>(g: &mut Gate<T>) -> Vec<(T, Verdict)> {
        std::iter::from_fn(|| g.pop(None).map(|r| (r.item, r.verdict))).collect()
    }

    #[test]
    fn a_record_far_ahead_of_the_next_heartbeat_carries_no_time() {
        // Lane 0 starts with a record stamped far ahead (a bad clock), then its good trace.
        let mut g = Gate::new([true, true]).checking([true, true], 100);
        g.push(0, Writer::SOLE, (3_000, 0), Mark::Record, "bad");
        g.push(0, Writer::SOLE, (10, 1), Mark::Record, "a10");
        g.push(0, Writer::SOLE, (20, 2), Mark::Through, "a-beat20");
        g.push(1, Writer::SOLE, (15, 0), Mark::Record, "b15");
        g.push(1, Writer::SOLE, (20, 1), Mark::Through, "b-beat20");
        assert_eq!(g.pop(None), None, "no heartbeat of lane 0 is confirmed yet: all of it is held");
        assert_eq!(g.first_offset(0), Some(0), "held records are still buffered");
        g.push(0, Writer::SOLE, (30, 3), Mark::Through, "a-beat30");
        g.push(1, Writer::SOLE, (30, 2), Mark::Through, "b-beat30");
        let out = drain_verdicts(&mut g);
        assert_eq!(out[0], ("bad", Verdict::Ahead), "released at once, as no time");
        let rest: Vec<_> = out[1..].iter().map(|(i, v)| (*i, *v)).collect();
        assert_eq!(
            rest,
            [
                ("a10", Verdict::Use),
                ("b15", Verdict::Use),
                ("a-beat20", Verdict::Use),
                ("b-beat20", Verdict::Use),
                ("a-beat30", Verdict::Use),
                ("b-beat30", Verdict::Use)
            ],
            "the good trace in merge order, not behind the bad record"
        );
    }

    #[test]
    fn after_an_outage_records_wait_for_the_next_heartbeats_and_pass() {
        let mut g = Gate::new([true]).checking([true], 100);
        g.resume_heartbeat(0, Writer::SOLE, 20);
        g.push(0, Writer::SOLE, (25, 0), Mark::Record, "r25");
        assert_eq!(drain_verdicts(&mut g), [("r25", Verdict::Use)], "within the bound: at once");
        g.push(0, Writer::SOLE, (5_000, 1), Mark::Record, "relist");
        g.push(0, Writer::SOLE, (5_010, 2), Mark::Through, "beat");
        assert_eq!(g.pop(None), None, "the first heartbeat after the outage waits for the next");
        assert!(g.holds(0, 0));
        g.push(0, Writer::SOLE, (5_020, 3), Mark::Through, "beat2");
        assert_eq!(
            drain_verdicts(&mut g),
            [("relist", Verdict::Use), ("beat", Verdict::Use), ("beat2", Verdict::Use)]
        );
    }

    #[test]
    fn a_heartbeat_far_ahead_is_judged_by_the_one_after_it() {
        let mut g = Gate::new([true]).checking([true], 100);
        g.push(0, Writer::SOLE, (20, 0), Mark::Through, "beat20");
        g.push(0, Writer::SOLE, (9_000, 1), Mark::Through, "bogus");
        g.push(0, Writer::SOLE, (25, 2), Mark::Record, "r25");
        g.push(0, Writer::SOLE, (30, 3), Mark::Through, "beat30");
        g.end(0, 0);
        g.close();
        let out = drain_verdicts(&mut g);
        assert!(out.contains(&("bogus", Verdict::Ahead)), "{out:?}");
        assert!(out.contains(&("r25", Verdict::Use)) && out.contains(&("beat30", Verdict::Use)), "{out:?}");
    }

    #[test]
    fn a_void_record_neither_waits_nor_moves_time() {
        let mut g = Gate::new([true, true]).checking([true, true], 100);
        g.resume_heartbeat(0, Writer::SOLE, 10);
        g.resume_heartbeat(1, Writer::SOLE, 10);
        g.push(0, Writer::SOLE, (20, 0), Mark::Through, "a-beat");
        g.push(1, Writer::SOLE, (20, 0), Mark::Through, "b-beat");
        assert_eq!(drain(&mut g), ["a-beat", "b-beat"]);
        // Garbage stamped far ahead on lane 0, then lane 0's next record.
        g.push(0, Writer::SOLE, (1_000_000, 1), Mark::Void, "garbage");
        g.push(0, Writer::SOLE, (25, 2), Mark::Record, "a25");
        assert_eq!(drain(&mut g), ["garbage"], "sorted at lane 0's time so far, not its own");
        assert_eq!(g.watermark(), Some(21), "and it showed no time");
        g.push(1, Writer::SOLE, (26, 1), Mark::Record, "b26");
        assert_eq!(drain(&mut g), ["a25"]);
    }

    #[test]
    fn a_void_record_after_the_last_heartbeats_is_not_held_by_them() {
        // The end of a finite input: heartbeats at 20 on both lanes, then garbage on lane 1.
        let mut g = Gate::new([true, true]).checking([true, true], 100);
        g.resume_heartbeat(0, Writer::SOLE, 10);
        g.resume_heartbeat(1, Writer::SOLE, 10);
        g.push(0, Writer::SOLE, (20, 0), Mark::Through, "a-beat");
        g.push(1, Writer::SOLE, (20, 0), Mark::Through, "b-beat");
        g.push(1, Writer::SOLE, (5, 1), Mark::Void, "garbage");
        assert_eq!(drain(&mut g), ["a-beat", "b-beat", "garbage"], "lane 0 has promised nothing more at 20");
    }
}
