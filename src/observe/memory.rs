//! The input topics in memory, for the in-memory driver ([`crate::runtime::driver`]):
//! observations placed as the watcher's publisher places them.

use super::{InputTopic, Observation, ObservationEvent, topics::TopicsConfig};
use crate::{
    codec::{Codec, CodecError, Framing, RecordWriter},
    runtime::{
        Writer,
        driver::{LogRecord, MemTopic},
    },
};

/// The input topics in memory, filled with observations as the publisher writes them:
/// single-object encoded, keyed records on their murmur2 partition, markers and heartbeats
/// on every partition. What `replay`, the processor tests and benchmarks feed the driver.
#[derive(Debug)]
pub struct MemInputs {
    topics: Vec<(InputTopic, RecordWriter, MemTopic)>,
    /// Observations skipped as larger than [`super::MAX_OBSERVATION_BYTES`].
    oversized: u64,
}

impl MemInputs {
    /// Empty input topics named by `names`, each with `partitions` partitions.
    pub fn new(codec: &Codec, names: &TopicsConfig, partitions: i32) -> Result<Self, CodecError> {
        let mut topics = Vec::new();
        for topic in InputTopic::ALL {
            let known = codec.schemas().current(topic.full_name())?;
            let writer = RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint })?;
            topics.push((topic, writer, MemTopic::new(topic.topic_name(names), partitions)));
        }
        Ok(Self { topics, oversized: 0 })
    }

    /// Appends one observation to its topic, unless it is larger than the publisher would
    /// send ([`super::fits`]): that one is skipped and counted, as the publisher does.
    pub fn push(&mut self, obs: &Observation) -> Result<(), CodecError> {
        let (_, writer, log) =
            self.topics.iter_mut().find(|(t, _, _)| *t == obs.topic).expect("every input topic");
        let bytes = obs.record.encode(writer)?;
        if !super::fits(obs.topic, obs.key.as_deref(), &bytes) {
            self.oversized += 1;
            return Ok(());
        }
        log.produce_record(LogRecord {
            key: obs.key.as_deref().map(|k| k.as_bytes().to_vec()),
            value: Some(bytes),
            timestamp_ms: obs.record.observed_at(),
            heartbeat: false,
            // As the publisher marks it: a watcher heartbeat carries the heartbeat header.
            beat: obs.record.event() == ObservationEvent::Heartbeat,
            writer: Writer::SOLE,
        });
        Ok(())
    }

    /// Observations skipped as too large so far.
    pub fn oversized(&self) -> u64 {
        self.oversized
    }

    /// One input topic.
    pub fn topic(&self, topic: InputTopic) -> &MemTopic {
        &self.topics.iter().find(|(t, _, _)| *t == topic).expect("every input topic").2
    }

    /// The topics, in [`InputTopic::ALL`] order.
    pub fn into_topics(self) -> Vec<MemTopic> {
        self.topics.into_iter().map(|(_, _, t)| t).collect()
    }
}
