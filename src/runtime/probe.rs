//! The runtime probes: trivial processors for the runtime's own tests and benchmark.
//!
//! [`Probe`] counts records per key (`kubefacts process --processor probe`): its output
//! makes loss and duplication visible, because per key the counts must read 1, 2, 3 … with
//! no gap and no repeat. [`ProbeRekey`] re-keys records into buckets through a repartition
//! topic, so a two-stage pipeline (re-key, then count) can be checked the same way.

use serde::{Deserialize, Serialize};

use super::{
    StreamTime,
    deadletter::Reason,
    processor::{DecodeInput, OutputPort, Outputs, Port, ProcessError, Processor, RecordMeta},
    store::{KvStore, StateStore},
};
use crate::codec::{Codec, CodecError};

/// `io.kubefacts.v1.KeyedCount` (`schemas/keyed-count.avsc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedCount {
    /// The key counted (`counted_key` in the schema: `key` is a reserved word of MySQL
    /// and SQL Server).
    #[serde(rename = "counted_key")]
    pub key: String,
    /// Records seen for the key so far.
    pub count: i64,
    /// Partition of the input record.
    pub input_partition: i32,
    /// Offset of the input record.
    pub input_offset: i64,
}

impl KeyedCount {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.KeyedCount";
}

impl DecodeInput for KeyedCount {
    async fn decode(input: usize, codec: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
        #[cfg(test)]
        DECODED.with(|d| d.borrow_mut().push(input));
        #[cfg(not(test))]
        let _ = input;
        codec.decode_as(bytes).await
    }
}

#[cfg(test)]
thread_local! {
    /// The input index of every [`KeyedCount`] decoded on this thread (tests count decodes).
    pub(super) static DECODED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`Probe`]'s output ports, in the order of [`Probe::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOut {
    /// `probe_output`: the counts.
    Counts,
}

impl Port for ProbeOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// [`ProbeRekey`]'s output ports, in the order of [`ProbeRekey::OUTPUTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RekeyOut {
    /// `probe_repartition`: the re-keyed records.
    Repartition,
}

impl Port for RekeyOut {
    fn index(self) -> usize {
        self as usize
    }
}

/// [`Probe`]'s inputs, in order: the first (co-partitioned), then any number of globals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeIn {
    /// The first input: counted by key.
    Keyed,
    /// A global input (every task reads it): counted per task.
    Global,
}

impl ProbeIn {
    /// The input at `index` (every index past the first is a global).
    pub fn of(index: usize) -> Option<Self> {
        Some(if index == 0 { Self::Keyed } else { Self::Global })
    }
}

/// Counts records per Kafka key; emits a [`KeyedCount`] per input record. Records of
/// inputs after the first (global inputs, which every task reads) are counted per task,
/// under `global/<task partition>/<key>`, so each task's exactly-once delivery shows too.
#[derive(Debug)]
pub struct Probe {
    task: i32,
    counts: KvStore<String, Tally>,
}

/// What the probe keeps per key: format 2 of its `counts` store. Format 1 (until
/// 2026-12-02) was the bare count; it restores as a tally whose last offset is unknown, so
/// an instance upgraded over a changelog of the previous release continues its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Records counted for the key.
    pub count: i64,
    /// Offset of the last record counted (`-1`: counted by a release that did not keep it).
    pub last_offset: i64,
}

impl Tally {
    /// The format version of the `counts` store's values.
    pub const VERSION: u8 = 2;

    /// A value of format 1, the count alone.
    fn from_count(count: i64) -> Self {
        Self { count, last_offset: -1 }
    }
}

impl Probe {
    /// The probe's single output.
    pub const OUTPUTS: [OutputPort; 1] = [OutputPort {
        topic: "probe_output",
        record: KeyedCount::FULL_NAME,
        compacted: false,
        key_record: None,
        stream_time_every_ms: None,
    }];

    /// A probe with empty state, for task 0.
    pub fn new() -> Self {
        Self::for_task(0)
    }

    /// A probe with empty state for the task of `partition`.
    pub fn for_task(partition: i32) -> Self {
        let counts = KvStore::new("counts").upgrading_from(Tally::VERSION, Tally::from_count);
        Self { task: partition, counts }
    }

    /// The count of a key.
    pub fn count(&self, key: &str) -> i64 {
        self.tally(key).map_or(0, |t| t.count)
    }

    /// What the probe keeps of a key.
    pub fn tally(&self, key: &str) -> Option<Tally> {
        self.counts.get(key).copied()
    }
}

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

impl Processor for Probe {
    type Input = KeyedCount;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![&mut self.counts]
    }

    fn process(
        &mut self,
        _input: KeyedCount,
        meta: &RecordMeta,
        _now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        let Some(key) = meta.key.as_deref() else {
            return Err(ProcessError::new(Reason::MissingKey, "the probe counts by key"));
        };
        let key = match ProbeIn::of(meta.input) {
            Some(ProbeIn::Keyed) => String::from_utf8_lossy(key).into_owned(),
            Some(ProbeIn::Global) | None => format!("global/{}/{}", self.task, String::from_utf8_lossy(key)),
        };
        let count = self.count(&key) + 1;
        self.counts.put(key.clone(), Tally { count, last_offset: meta.offset });
        let record = KeyedCount {
            key: key.clone(),
            count,
            input_partition: meta.partition,
            input_offset: meta.offset,
        };
        out.emit(ProbeOut::Counts, key, &record)
            .map_err(|e| ProcessError { reason: Reason::EncodeFailed, detail: e.to_string() })
    }

    fn on_stream_time(&mut self, _now: StreamTime, _out: &mut Outputs) {}
}

/// Re-keys each record to `bucket-<n>` (`n` = the key's length modulo [`Self::BUCKETS`]) —
/// a stand-in for the journal, which re-keys runs by window. Its output carries stream time
/// (the runtime forwards it to every partition once per second of it), so the next stage
/// advances even where no record lands.
#[derive(Debug, Default)]
pub struct ProbeRekey;

impl ProbeRekey {
    /// Number of buckets keys are re-keyed into.
    pub const BUCKETS: usize = 3;

    /// The re-keyer's single output (a repartition topic).
    pub const OUTPUTS: [OutputPort; 1] = [OutputPort {
        topic: "probe_repartition",
        record: KeyedCount::FULL_NAME,
        compacted: false,
        key_record: None,
        stream_time_every_ms: Some(1_000),
    }];

    /// A re-keyer (it has no state).
    pub fn new() -> Self {
        Self
    }

    /// The bucket a key goes to.
    pub fn bucket(key: &[u8]) -> String {
        format!("bucket-{}", key.len() % Self::BUCKETS)
    }
}

impl Processor for ProbeRekey {
    type Input = KeyedCount;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        Vec::new()
    }

    fn process(
        &mut self,
        input: KeyedCount,
        meta: &RecordMeta,
        _now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        let Some(key) = meta.key.as_deref() else {
            return Err(ProcessError::new(Reason::MissingKey, "the re-keyer buckets by key"));
        };
        let bucket = Self::bucket(key);
        out.emit(RekeyOut::Repartition, bucket.clone(), &KeyedCount { key: bucket, ..input })
            .map_err(|e| ProcessError { reason: Reason::EncodeFailed, detail: e.to_string() })
    }

    fn on_stream_time(&mut self, _now: StreamTime, _out: &mut Outputs) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_name_the_outputs_declared_at_their_index() {
        assert_eq!(Probe::OUTPUTS.len(), 1);
        assert_eq!(Probe::OUTPUTS[ProbeOut::Counts.index()].topic, "probe_output");
        assert_eq!(ProbeRekey::OUTPUTS.len(), 1);
        assert_eq!(ProbeRekey::OUTPUTS[RekeyOut::Repartition.index()].topic, "probe_repartition");
    }

    #[test]
    fn inputs_past_the_first_are_globals() {
        assert_eq!(
            [0, 1, 2].map(ProbeIn::of),
            [Some(ProbeIn::Keyed), Some(ProbeIn::Global), Some(ProbeIn::Global)]
        );
    }
}
