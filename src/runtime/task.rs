//! A task: one processor instance for one partition (of every co-partitioned input), with
//! its stream time. Pure: the Kafka runtime and the in-memory driver both drive it.

use std::collections::VecDeque;

use super::{
    StreamTime,
    processor::{OutputRecord, Outputs, ProcessError, Processor, RecordMeta},
    store::{Change, KvStore, StateStore, StoreError},
};

/// Name of the task's own store of global-input positions.
pub const GLOBAL_POSITIONS_STORE: &str = "global-positions";

/// One processor instance and its stream time.
#[derive(Debug)]
pub struct Task<P> {
    partition: i32,
    processor: P,
    stream_time: Option<StreamTime>,
    out: Outputs,
    /// Inputs from this index on are global (every task reads all their partitions).
    first_global: usize,
    /// Next offset to process per (global input, partition), changelogged with the task's
    /// stores so a restored task resumes its global inputs where its state stands.
    positions: Option<KvStore<(u32, i32), i64>>,
}

impl<P: Processor> Task<P> {
    /// A task for `partition`, emitting through `out`.
    pub fn new(partition: i32, processor: P, out: Outputs) -> Self {
        Self { partition, processor, stream_time: None, out, first_global: usize::MAX, positions: None }
    }

    /// Declares inputs `first_global..` global: delivered to every task, all partitions.
    pub fn with_globals(mut self, first_global: usize) -> Self {
        self.first_global = first_global;
        self.positions = Some(KvStore::new(GLOBAL_POSITIONS_STORE));
        self
    }

    /// The next offset this task must process of a global input's partition (0 if none
    /// was processed yet).
    pub fn global_position(&self, input: usize, partition: i32) -> i64 {
        self.positions.as_ref().and_then(|p| p.get(&(input as u32, partition)).copied()).unwrap_or(0)
    }

    fn record_position(&mut self, input: usize, partition: i32, offset: i64) {
        if input >= self.first_global
            && let Some(p) = &mut self.positions
        {
            p.put((input as u32, partition), offset + 1);
        }
    }

    /// A record that could not be used still counts as read: a global input moves past it.
    pub fn skip(&mut self, meta: &RecordMeta) {
        self.record_position(meta.input, meta.partition, meta.offset);
    }

    /// A record that could not be decoded: skipped like [`Task::skip`], and the processor
    /// told (at the current stream time), so it can stop trusting what that key said.
    pub fn undecodable(&mut self, meta: &RecordMeta) {
        self.record_position(meta.input, meta.partition, meta.offset);
        let now = self.stream_time.unwrap_or(meta.timestamp_ms);
        self.out.set_now(now);
        self.processor.on_undecodable(meta, now, &mut self.out);
    }

    /// The partition this task owns.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The highest record timestamp processed so far.
    pub fn stream_time(&self) -> Option<StreamTime> {
        self.stream_time
    }

    /// The processor (for inspection in tests and metrics).
    pub fn processor(&self) -> &P {
        &self.processor
    }

    /// Handles one decoded record: stream time moves to its timestamp if later, the
    /// processor sees the record, then, if time advanced, the new stream time.
    pub fn process(&mut self, input: P::Input, meta: &RecordMeta) -> Result<(), ProcessError> {
        self.record_position(meta.input, meta.partition, meta.offset);
        let advanced = self.observe_time(meta.timestamp_ms);
        let now = self.stream_time.unwrap_or(meta.timestamp_ms);
        self.out.set_now(now);
        let result = self.processor.process(input, meta, now, &mut self.out);
        if advanced {
            self.processor.on_stream_time(now, &mut self.out);
        }
        result
    }

    /// A record that carries only time (a forwarded heartbeat).
    pub fn advance(&mut self, meta: &RecordMeta) {
        self.record_position(meta.input, meta.partition, meta.offset);
        let timestamp_ms = meta.timestamp_ms;
        if self.observe_time(timestamp_ms) {
            let now = timestamp_ms;
            self.out.set_now(now);
            self.processor.on_stream_time(now, &mut self.out);
        }
    }

    fn observe_time(&mut self, ts: i64) -> bool {
        match self.stream_time {
            Some(t) if t >= ts => false,
            _ => {
                self.stream_time = Some(ts);
                true
            }
        }
    }

    /// The records emitted since the last call, in order.
    pub fn take_outputs(&mut self) -> Vec<OutputRecord> {
        self.out.take()
    }

    /// The processor events counted since the last call.
    pub fn take_counts(&mut self) -> std::collections::BTreeMap<&'static str, u64> {
        self.out.take_counts()
    }

    /// The store changes since the last call: (store index, change), stores in declared order.
    pub fn take_changes(&mut self) -> Vec<(usize, Change)> {
        let mut all = Vec::new();
        let mut stores = self.processor.stores();
        if let Some(p) = &mut self.positions {
            stores.push(p);
        }
        for (i, store) in stores.into_iter().enumerate() {
            all.extend(store.take_changes().into_iter().map(|c| (i, c)));
        }
        all
    }

    /// Gives the output writers back (the task is done).
    pub fn into_writers(self) -> Vec<crate::codec::RecordWriter> {
        self.out.into_writers()
    }

    /// Names of the task's stores: the processor's in declared order, then the
    /// global-positions store when the task has global inputs.
    pub fn store_names(&mut self) -> Vec<String> {
        let mut names: Vec<String> = self.processor.stores().iter().map(|s| s.name().to_owned()).collect();
        if self.positions.is_some() {
            names.push(GLOBAL_POSITIONS_STORE.to_owned());
        }
        names
    }

    /// Calls `f` with the name and entry count of each store, as [`Task::store_names`]
    /// orders them (for metrics: cheap, no store is walked).
    pub fn store_sizes(&mut self, mut f: impl FnMut(&str, usize)) {
        for store in self.processor.stores() {
            f(store.name(), store.len());
        }
        if let Some(p) = &self.positions {
            f(p.name(), p.len());
        }
    }

    /// Applies one changelog record of store `store` (index) during restore.
    pub fn restore(&mut self, store: usize, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let mut stores = self.processor.stores();
        if let Some(p) = &mut self.positions {
            stores.push(p);
        }
        stores[store].restore(key, value)
    }
}

/// Merges a task's input lanes into one deterministic order: the buffered head with the
/// smallest (timestamp, lane, offset) goes first; each lane keeps its own order. A lane is
/// one co-partitioned input's partition of this task, or one partition of a global input.
/// Without `force`, a record is released only while every lane has one buffered, so the
/// order does not depend on how fetches happened to arrive.
#[derive(Debug)]
pub struct Merger<T> {
    queues: Vec<VecDeque<(i64, i64, T)>>,
}

impl<T> Merger<T> {
    /// A merger over `inputs` inputs.
    pub fn new(inputs: usize) -> Self {
        Self { queues: (0..inputs).map(|_| VecDeque::new()).collect() }
    }

    /// Buffers a record of `input`.
    pub fn push(&mut self, input: usize, timestamp_ms: i64, offset: i64, item: T) {
        self.queues[input].push_back((timestamp_ms, offset, item));
    }

    /// The next record in merge order; with `force`, even if some input has nothing
    /// buffered (end of input, or waited long enough).
    pub fn pop(&mut self, force: bool) -> Option<T> {
        if !force && self.queues.iter().any(VecDeque::is_empty) {
            return None;
        }
        let (i, _) = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.front().map(|(ts, off, _)| (i, (*ts, i, *off))))
            .min_by_key(|(_, k)| *k)?;
        self.queues[i].pop_front().map(|(_, _, item)| item)
    }

    /// Records buffered.
    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops everything buffered (the task was revoked).
    pub fn clear(&mut self) {
        self.queues.iter_mut().for_each(VecDeque::clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_order_is_by_timestamp_then_input_then_offset() {
        let mut m = Merger::new(2);
        m.push(0, 10, 0, "a10");
        m.push(0, 30, 1, "a30");
        assert_eq!(m.pop(false), None, "input 1 has nothing yet: wait");
        m.push(1, 10, 0, "b10");
        m.push(1, 20, 1, "b20");
        let mut order = Vec::new();
        while let Some(x) = m.pop(false) {
            order.push(x);
        }
        assert_eq!(order, ["a10", "b10", "b20"], "a30 waits for input 1");
        assert_eq!(m.pop(true), Some("a30"));
        assert!(m.is_empty());
    }
}
