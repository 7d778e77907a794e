//! A task: one processor instance for one partition (of every co-partitioned input), with
//! its stream time. Pure: the Kafka runtime and the in-memory driver both drive it.

use serde::{Deserialize, Serialize};

use super::{
    StreamTime,
    clock::{Claim, Writer},
    processor::{OutputRecord, Outputs, ProcessError, Processor, RecordMeta},
    store::{Change, KvStore, StateStore, StoreError},
};

/// Name of the task's own store of global-input positions.
pub const GLOBAL_POSITIONS_STORE: &str = "global-positions";

/// Name of the task's own store of its stream time and its lanes' writers
/// ([`ClockKey`]); every task has it.
pub const STREAM_TIME_STORE: &str = "stream-time";

/// Keys of the [`STREAM_TIME_STORE`] (values are `i64`). Variants are only ever appended:
/// their order is their changelog encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ClockKey {
    /// The task's stream time.
    StreamTime,
    /// The stream-time period last forwarded on an output port
    /// ([`super::OutputPort::stream_time_every_ms`]).
    Forwarded {
        /// The port.
        port: u32,
    },
    /// Writers a multi-writer lane expects (the `tasks` of its latest record).
    LaneTasks {
        /// Input index.
        input: u32,
        /// Partition.
        partition: i32,
    },
    /// The next offset to process of one writer of a multi-writer lane.
    LaneNext {
        /// Input index.
        input: u32,
        /// Partition.
        partition: i32,
        /// The writing task.
        task: u32,
    },
    /// The highest timestamp processed of one writer of a multi-writer lane.
    LaneBound {
        /// Input index.
        input: u32,
        /// Partition.
        partition: i32,
        /// The writing task.
        task: u32,
    },
    /// The last watcher heartbeat processed on a checked lane (what its next records are
    /// judged against: [`super::Gate::checking`]).
    LaneHeartbeat {
        /// Input index.
        input: u32,
        /// Partition.
        partition: i32,
    },
    /// The snapshot epoch the publisher of a checked lane began ([`super::Gate::vet`]).
    LanePublisherEpoch {
        /// Input index.
        input: u32,
        /// Partition.
        partition: i32,
    },
    /// The hash of that publisher's instance ([`super::clock::Claim::instance_hash`]).
    LanePublisherInstance {
        /// Input index.
        input: u32,
        /// Partition.
        partition: i32,
    },
}

/// Where a restored task stands on one writer of a multi-writer lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanePosition {
    /// Input index.
    pub input: usize,
    /// Partition.
    pub partition: i32,
    /// The writer.
    pub writer: Writer,
    /// Offsets below this were processed.
    pub next_offset: i64,
    /// The highest timestamp processed.
    pub bound: i64,
}

/// One processor instance and its stream time.
#[derive(Debug)]
pub struct Task<P> {
    partition: i32,
    processor: P,
    stream_time: Option<StreamTime>,
    /// Ports that carry the task's stream time: (port, period in ms, period last forwarded).
    forward: Vec<(usize, i64, Option<i64>)>,
    /// `stream_time` or `forwarded` changed since the clock store last had them.
    clock_dirty: bool,
    out: Outputs,
    /// Inputs from this index on are global (every task reads all their partitions).
    first_global: usize,
    /// Next offset to process per (global input, partition), changelogged with the task's
    /// stores so a restored task resumes its global inputs where its state stands.
    positions: Option<KvStore<(u32, i32), i64>>,
    /// Stream time and multi-writer lane positions, changelogged ([`ClockKey`]).
    clock: KvStore<ClockKey, i64>,
    /// Co-partitioned inputs whose positions are changelogged like a multi-writer lane's
    /// although one task writes them ([`Task::tracking`]).
    tracked: Vec<bool>,
    /// The largest records Kafka takes from this task ([`Task::limiting`]).
    limits: WriteLimits,
}

/// The largest records a task's transaction can write: a record whose outputs or state
/// changes exceed them is refused (`output_too_large`) with its effects rolled back, so
/// that it cannot abort every transaction after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteLimits {
    /// Per output port: the topic's name and the largest key and value it takes, bytes.
    pub outputs: Vec<(String, usize)>,
    /// The largest changelog record (key and value), bytes.
    pub changelog_bytes: usize,
}

impl Default for WriteLimits {
    /// What the runtime's producer sends at most ([`super::deadletter::DEFAULT_MAX_BYTES`])
    /// everywhere: the in-memory driver's limits, and Kafka's on topics created with the
    /// broker's default `max.message.bytes`.
    fn default() -> Self {
        Self { outputs: Vec::new(), changelog_bytes: super::deadletter::DEFAULT_MAX_BYTES }
    }
}

impl WriteLimits {
    /// The limit of output `port`, and the topic it names.
    fn output(&self, port: usize) -> (&str, usize) {
        match self.outputs.get(port) {
            Some((topic, bytes)) => (topic, *bytes),
            None => ("an output", super::deadletter::DEFAULT_MAX_BYTES),
        }
    }
}

/// A task before a record ([`Task::process`]): what a rollback goes back to.
struct Saved {
    stream_time: Option<StreamTime>,
    forward: Vec<(usize, i64, Option<i64>)>,
    clock_dirty: bool,
    outputs: super::processor::OutputsSaved,
}

impl<P: Processor> Task<P> {
    /// A task for `partition`, emitting through `out`.
    pub fn new(partition: i32, processor: P, out: Outputs) -> Self {
        Self {
            partition,
            processor,
            stream_time: None,
            forward: Vec::new(),
            clock_dirty: false,
            out,
            first_global: usize::MAX,
            positions: None,
            clock: KvStore::new(STREAM_TIME_STORE),
            tracked: Vec::new(),
            limits: WriteLimits::default(),
        }
    }

    /// Refuses records whose effects exceed `limits` ([`WriteLimits`]).
    pub fn limiting(mut self, limits: WriteLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Changelogs the next offset of these co-partitioned inputs with the task's state, as
    /// for a multi-writer lane. The Kafka shell asks for it where a stream thread's stages
    /// share an input topic: the thread commits the lowest offset any of them needs, so
    /// after a restart a task reads again what it already processed and must know where
    /// its own state stands ([`Task::lane_positions`]).
    pub fn tracking(mut self, inputs: impl IntoIterator<Item = usize>) -> Self {
        for input in inputs {
            if self.tracked.len() <= input {
                self.tracked.resize(input + 1, false);
            }
            self.tracked[input] = true;
        }
        self
    }

    /// Forwards the task's stream time to every partition of these output ports, each
    /// (port, period in ms) whenever stream time enters a new period, after the outputs of
    /// the record that moved it: a downstream stage learns this task's time even where no
    /// record of it lands.
    pub fn forwarding(mut self, ports: impl IntoIterator<Item = (usize, i64)>) -> Self {
        self.forward = ports.into_iter().map(|(port, every)| (port, every.max(1), None)).collect();
        self
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

    /// Records that `meta`'s record was processed: a global lane's next offset, or a
    /// multi-writer (or tracked) lane's writer's next offset and time (its partition is
    /// processed out of offset order, or committed behind this task, so the committed
    /// offset alone cannot say what was done). `timed`: the record moved its lane's time,
    /// as the gate saw it; a rejected or ahead-of-heartbeat record moves the position only
    /// (restored with its stamp as the lane's time, a far-future one would let the gate
    /// release every other lane's records without waiting for this one).
    fn record_position(&mut self, meta: &RecordMeta, timed: bool) {
        let (input, partition) = (meta.input as u32, meta.partition);
        if meta.input >= self.first_global {
            if let Some(p) = &mut self.positions {
                p.put((input, partition), meta.offset + 1);
            }
        } else if meta.writer.tasks > 1 || self.tracked.get(meta.input).copied().unwrap_or(false) {
            let task = meta.writer.task;
            self.clock.put(ClockKey::LaneTasks { input, partition }, i64::from(meta.writer.tasks));
            self.clock.put(ClockKey::LaneNext { input, partition, task }, meta.offset + 1);
            let bound = ClockKey::LaneBound { input, partition, task };
            let before = self.clock.get(&bound).copied();
            // i64::MIN: nothing shown yet (what the gate assumes of a lane not heard from).
            let after = before.unwrap_or(i64::MIN);
            let after = if timed { after.max(meta.timestamp_ms) } else { after };
            if before != Some(after) {
                self.clock.put(bound, after);
            }
        }
    }

    /// Where this (restored) task stands on each writer of its multi-writer lanes.
    pub fn lane_positions(&self) -> Vec<LanePosition> {
        self.clock
            .iter()
            .filter_map(|(k, &next_offset)| match *k {
                ClockKey::LaneNext { input, partition, task } => {
                    let tasks = self.clock.get(&ClockKey::LaneTasks { input, partition }).copied()?;
                    let bound = self.clock.get(&ClockKey::LaneBound { input, partition, task }).copied()?;
                    Some(LanePosition {
                        input: input as usize,
                        partition,
                        writer: Writer::new(task as i32, tasks as i32),
                        next_offset,
                        bound,
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// A watcher heartbeat at `at_ms` was processed on a checked lane: a restored task
    /// judges that lane's next records against it.
    pub fn note_heartbeat(&mut self, input: usize, partition: i32, at_ms: i64) {
        self.clock.put(ClockKey::LaneHeartbeat { input: input as u32, partition }, at_ms);
    }

    /// A heartbeat or marker claiming `claim` was processed on a checked lane: the lane's
    /// publisher as the gate knows it after it ([`Claim::judge`]), so a restored task judges
    /// that lane's next publishers as the gate did. Written only when it changed (a heartbeat
    /// of the known publisher changes nothing).
    pub fn note_publisher(&mut self, input: usize, partition: i32, claim: Claim) {
        let input = input as u32;
        let at = ClockKey::LanePublisherEpoch { input, partition };
        let who = ClockKey::LanePublisherInstance { input, partition };
        let known = self.clock.get(&at).copied().zip(self.clock.get(&who).map(|&i| i as u64));
        // The gate let it through, so the claim holds; were it not to, nothing changes.
        let Ok(Some((epoch, instance))) = claim.judge(known) else { return };
        if known != Some((epoch, instance)) {
            self.clock.put(at, epoch);
            self.clock.put(who, instance as i64);
        }
    }

    /// The publisher last processed per checked lane: (input, partition, (epoch, instance
    /// hash)).
    pub fn lane_publishers(&self) -> Vec<(usize, i32, (i64, u64))> {
        self.clock
            .iter()
            .filter_map(|(k, &epoch)| match *k {
                ClockKey::LanePublisherEpoch { input, partition } => {
                    let who = ClockKey::LanePublisherInstance { input, partition };
                    let instance = *self.clock.get(&who)? as u64;
                    Some((input as usize, partition, (epoch, instance)))
                }
                _ => None,
            })
            .collect()
    }

    /// The last heartbeat processed per checked lane: (input, partition, time).
    pub fn lane_heartbeats(&self) -> Vec<(usize, i32, i64)> {
        self.clock
            .iter()
            .filter_map(|(k, &at)| match *k {
                ClockKey::LaneHeartbeat { input, partition } => Some((input as usize, partition, at)),
                _ => None,
            })
            .collect()
    }

    /// A record that could not be used still counts as read: a global input moves past it.
    pub fn skip(&mut self, meta: &RecordMeta) {
        self.record_position(meta, false);
    }

    /// A record that could not be decoded: skipped like [`Task::skip`], and the processor
    /// told (at the current stream time), so it can stop trusting what that key said.
    pub fn undecodable(&mut self, meta: &RecordMeta) {
        self.record_position(meta, false);
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
    ///
    /// A record whose outputs or state changes Kafka would not take ([`WriteLimits`]) is
    /// refused with `output_too_large`: everything it did is rolled back (state, stream
    /// time, outputs, counts) and it counts as read, like a record dead-lettered on arrival.
    pub fn process(&mut self, input: P::Input, meta: &RecordMeta) -> Result<(), ProcessError> {
        let saved = self.savepoint();
        self.record_position(meta, true);
        let advanced = self.observe_time(meta.timestamp_ms);
        let now = self.stream_time.unwrap_or(meta.timestamp_ms);
        self.out.set_now(now);
        let result = self.processor.process(input, meta, now, &mut self.out);
        if advanced {
            self.processor.on_stream_time(now, &mut self.out);
            self.forward_if_due(now);
        }
        if let Some(too_large) = self.too_large(&saved) {
            self.rollback(saved);
            self.record_position(meta, false);
            return Err(ProcessError::new(super::deadletter::Reason::OutputTooLarge, too_large));
        }
        self.release(saved);
        result
    }

    fn savepoint(&mut self) -> Saved {
        for store in self.all_stores() {
            store.savepoint();
        }
        Saved {
            stream_time: self.stream_time,
            forward: self.forward.clone(),
            clock_dirty: self.clock_dirty,
            outputs: self.out.savepoint(),
        }
    }

    /// What of the effects since `saved` Kafka would not take, if anything.
    fn too_large(&mut self, saved: &Saved) -> Option<String> {
        for record in self.out.since(&saved.outputs) {
            let bytes = record.key.len() + record.value.as_ref().map_or(0, Vec::len);
            let (topic, limit) = self.limits.output(record.port);
            if bytes > limit {
                return Some(format!(
                    "its output to {topic} would be {bytes} bytes, more than the {limit} the topic and the \
                     producer take: the record was not applied"
                ));
            }
        }
        let limit = self.limits.changelog_bytes;
        for store in self.all_stores() {
            let bytes = store.largest_change_bytes();
            if bytes > limit {
                return Some(format!(
                    "its state in store {} would be {bytes} bytes, more than the {limit} a changelog record \
                     takes: the record was not applied",
                    store.name()
                ));
            }
        }
        None
    }

    fn rollback(&mut self, saved: Saved) {
        for store in self.all_stores() {
            store.rollback();
        }
        self.processor.on_rollback();
        self.stream_time = saved.stream_time;
        self.forward = saved.forward;
        self.clock_dirty = saved.clock_dirty;
        self.out.rollback(saved.outputs);
    }

    fn release(&mut self, saved: Saved) {
        for store in self.all_stores() {
            store.release();
        }
        self.out.release(saved.outputs);
    }

    /// A record that carries only time (a forwarded heartbeat).
    pub fn advance(&mut self, meta: &RecordMeta) {
        self.record_position(meta, true);
        let timestamp_ms = meta.timestamp_ms;
        if self.observe_time(timestamp_ms) {
            let now = timestamp_ms;
            self.out.set_now(now);
            self.processor.on_stream_time(now, &mut self.out);
            self.forward_if_due(now);
        }
    }

    fn observe_time(&mut self, ts: i64) -> bool {
        match self.stream_time {
            Some(t) if t >= ts => false,
            _ => {
                self.stream_time = Some(ts);
                self.clock_dirty = true;
                true
            }
        }
    }

    fn forward_if_due(&mut self, now: StreamTime) {
        for (port, every, last) in &mut self.forward {
            let period = now.div_euclid(*every);
            if last.is_none_or(|last| last < period) {
                *last = Some(period);
                self.clock_dirty = true;
                self.out.forward_stream_time(*port);
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
        if std::mem::take(&mut self.clock_dirty) {
            if let Some(t) = self.stream_time {
                self.clock.put(ClockKey::StreamTime, t);
            }
            for &(port, _, last) in &self.forward {
                if let Some(period) = last {
                    self.clock.put(ClockKey::Forwarded { port: port as u32 }, period);
                }
            }
        }
        let mut all = Vec::new();
        let mut stores = self.all_stores();
        for (i, store) in stores.drain(..).enumerate() {
            all.extend(store.take_changes().into_iter().map(|c| (i, c)));
        }
        all
    }

    /// Gives the output writers back (the task is done).
    pub fn into_writers(self) -> Vec<crate::codec::RecordWriter> {
        self.out.into_writers()
    }

    /// The processor's stores in declared order, then the global-positions store when the
    /// task has global inputs, then the stream-time store.
    fn all_stores(&mut self) -> Vec<&mut dyn StateStore> {
        let mut stores = self.processor.stores();
        if let Some(p) = &mut self.positions {
            stores.push(p);
        }
        stores.push(&mut self.clock);
        stores
    }

    /// Names of the task's stores, in [`Task::take_changes`]' order.
    pub fn store_names(&mut self) -> Vec<String> {
        self.all_stores().iter().map(|s| s.name().to_owned()).collect()
    }

    /// Calls `f` with the name and entry count of each store, as [`Task::store_names`]
    /// orders them (for metrics: cheap, no store is walked).
    pub fn store_sizes(&mut self, mut f: impl FnMut(&str, usize)) {
        for store in self.all_stores() {
            f(store.name(), store.len());
        }
    }

    /// Applies one changelog record of store `store` (index) during restore.
    pub fn restore(&mut self, store: usize, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let mut stores = self.all_stores();
        let is_clock = store + 1 == stores.len();
        stores[store].restore(key, value)?;
        if is_clock {
            self.stream_time = self.clock.get(&ClockKey::StreamTime).copied();
            for (port, _, last) in &mut self.forward {
                *last = self.clock.get(&ClockKey::Forwarded { port: *port as u32 }).copied();
            }
        }
        Ok(())
    }
}

/// Names of the stores every task adds to its processor's: the global-positions store
/// (with global inputs), then the stream-time store.
pub fn runtime_stores(has_globals: bool) -> Vec<&'static str> {
    let mut names = Vec::new();
    if has_globals {
        names.push(GLOBAL_POSITIONS_STORE);
    }
    names.push(STREAM_TIME_STORE);
    names
}
