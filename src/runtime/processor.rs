//! The processor contract: a pure state machine over decoded records and stream time.

use std::future::Future;

use serde::Serialize;

use super::{HEARTBEAT_KEY, StreamTime, clock::Writer, deadletter::Reason, store::StateStore};
use crate::codec::{Codec, CodecError, RecordWriter, direct::DirectRecord};

/// Where a record came from and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMeta {
    /// Index of the input (in the order the processor declares its inputs).
    pub input: usize,
    /// Partition (the task's partition for co-partitioned inputs).
    pub partition: i32,
    /// Offset within the partition.
    pub offset: i64,
    /// Record timestamp, epoch ms (the observation time set by the publisher, or the
    /// writing task's stream time for a record another stage wrote).
    pub timestamp_ms: i64,
    /// Who wrote the record: a task of the upstream stage ([`Writer::SOLE`] for a source
    /// topic).
    pub writer: Writer,
    /// The Kafka key.
    pub key: Option<Vec<u8>>,
    /// The trace context (W3C `traceparent`) of this record's processing: its `process`
    /// span, or the upstream header when no span is exported. A processor that emits the
    /// record's effect later (a window, a sweep) keeps it and links that output to it
    /// ([`Outputs::link_last`]).
    pub traceparent: Option<String>,
}

/// The most inputs one output links to (OpenTelemetry's default span link limit).
pub const MAX_LINKS: usize = 128;

/// Decodes the raw value of one input record into a processor's input type.
/// (`Clone`: a global input's record is decoded once for every task that reads it.)
pub trait DecodeInput: Sized + Send + Clone {
    /// Decodes a record value of input `input` (the processor's input index).
    fn decode(
        input: usize,
        codec: &Codec,
        bytes: &[u8],
    ) -> impl Future<Output = Result<Self, CodecError>> + Send;

    /// Whether the decoded record keeps its topic's contract, given its key and whether it
    /// carries the heartbeat header (`observe::shape::ObservationShape` for observations).
    /// A record that does not is dead-lettered with the reason, carrying no time.
    fn check(&self, _key: Option<&[u8]>, _time_header: bool) -> Result<(), ProcessError> {
        Ok(())
    }

    /// What an observation says of its own time and, for a heartbeat or snapshot marker,
    /// of its publisher: on a checked input the runtime holds it to them (its observation
    /// time agrees with its record timestamp; its publisher is the one its lane knows).
    /// `None`: nothing to check.
    fn stamp(&self) -> Option<Stamp<'_>> {
        None
    }

    /// This record as input `input` reads the same bytes, made from the decoded value
    /// without decoding again; `None`: decode them. A stage that reads a topic both
    /// co-partitioned and global (the Jobs of `[runs]`) has the global lanes of partitions
    /// its thread owns fed from the co-partitioned record, so each record is decoded once.
    /// It must equal what `decode(input, …)` and `check` make of the same bytes.
    fn view_as(&self, _input: usize) -> Option<Self> {
        None
    }
}

/// What a decoded observation says of itself ([`DecodeInput::stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp<'a> {
    /// When it was observed, epoch ms (what the publisher stamps the record with).
    pub observed_at_ms: i64,
    /// Who published it, for a heartbeat or snapshot marker.
    pub publisher: Option<Publisher<'a>>,
}

/// The publisher a heartbeat or snapshot marker names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publisher<'a> {
    /// Its cluster.
    pub cluster: &'a str,
    /// Its instance (a watcher replica).
    pub instance: &'a str,
    /// The snapshot epoch it carries.
    pub epoch: i64,
    /// Whether it is a SNAPSHOT_BEGIN.
    pub begins: bool,
}

impl Publisher<'_> {
    /// What the gate judges of it.
    pub fn claim(&self) -> super::clock::Claim {
        super::clock::Claim {
            epoch: self.epoch,
            instance: super::clock::Claim::instance_hash(self.instance),
            begins: self.begins,
        }
    }
}

/// A processor rejected a record it could decode (semantically invalid): the runtime
/// dead-letters it with this reason and goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct ProcessError {
    /// Bounded reason code for metrics and the dead-letter record, e.g. `unknown_event`.
    pub reason: Reason,
    /// What was wrong, for people.
    pub detail: String,
}

impl ProcessError {
    /// An error of `reason`, described by `detail`.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self { reason, detail: detail.into() }
    }
}

/// One of a processor's output ports: a variant of the processor's own enum of ports,
/// whose order is that of its declared outputs (`OUTPUTS`). Only those enums implement
/// it — not `usize` — so every emit names its port.
pub trait Port: Copy {
    /// The port's index among the processor's declared outputs.
    fn index(self) -> usize;
}

/// An event a processor counts (exported per stage as
/// `kubefacts_processor_events_total{stage, event}`): a variant of the processor's own
/// enum of events, whose [`Event::as_str`] is the `event` label.
pub trait Event: Copy {
    /// The bounded event name.
    fn as_str(self) -> &'static str;
}

/// What a processor declares about one of its outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPort {
    /// Topic name key in the pipeline configuration (e.g. `job_run_facts`).
    pub topic: &'static str,
    /// Full name of the Avro record written there.
    pub record: &'static str,
    /// Whether records supersede each other by key (the topic is compacted).
    pub compacted: bool,
    /// Full name of the Avro record the keys are, for a port keyed by an Avro record
    /// ([`Outputs::emit_keyed`]); `None`: keys are UTF-8 strings.
    pub key_record: Option<&'static str>,
    /// Set on ports another stage reads: the runtime forwards the task's stream time to
    /// every partition of this port (a heartbeat record) whenever it enters a new period of
    /// this many milliseconds, so the reader's windows, sweeps and judgements advance with
    /// this stage's time where no record lands. `None`: not forwarded.
    pub stream_time_every_ms: Option<i64>,
}

impl OutputPort {
    /// The ports among `ports` that carry stream time, with their periods
    /// ([`OutputPort::stream_time_every_ms`]).
    pub fn forwarding(ports: &[OutputPort]) -> Vec<(usize, i64)> {
        ports.iter().enumerate().filter_map(|(i, p)| Some((i, p.stream_time_every_ms?))).collect()
    }
}

/// A pure, deterministic state machine. One instance runs per task (input partition).
pub trait Processor: Send {
    /// The decoded input, usually an enum over the processor's input topics.
    type Input: DecodeInput;

    /// The processor's state stores, backed by changelog topics and restored before the
    /// task processes anything. All state that must survive a restart lives in them.
    fn stores(&mut self) -> Vec<&mut dyn StateStore>;

    /// Handles one record at stream time `now` (already advanced to this record).
    ///
    /// An observation that carries only time (event `HEARTBEAT`) may come before or after
    /// other records of its own time — the gate releases it once stream time has reached it
    /// (docs/RUNTIME.md) — so what it does must not depend on that place: take it as time.
    fn process(
        &mut self,
        input: Self::Input,
        meta: &RecordMeta,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError>;

    /// Called when stream time advances (after the record that advanced it), to close
    /// windows and run sweeps.
    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs);
    /// A record of this task could not be decoded (the runtime dead-letters it): a
    /// processor whose answer depends on the latest observation of a key can say it no
    /// longer knows it. Stream time does not move.
    fn on_undecodable(&mut self, _meta: &RecordMeta, _now: StreamTime, _out: &mut Outputs) {}
    /// The runtime put the stores back as they were before a record whose effects could
    /// not be written (`output_too_large`): a processor that keeps anything derived from
    /// its stores outside them rebuilds it.
    fn on_rollback(&mut self) {}
}

/// One record a processor emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    /// Index into the processor's output ports.
    pub port: usize,
    /// The Kafka key.
    pub key: Vec<u8>,
    /// The encoded value; `None` is a tombstone or a forwarded heartbeat.
    pub value: Option<Vec<u8>>,
    /// Timestamp: the stream time at emission.
    pub timestamp_ms: i64,
    /// `Some` for records written to one explicit partition (forwarded heartbeats go to
    /// each); `None` partitions by key with the Java-compatible murmur2.
    pub partition: Option<i32>,
    /// Whether this is a forwarded heartbeat (carries the heartbeat header).
    pub heartbeat: bool,
    /// Trace contexts of the inputs this record summarises beyond the one being
    /// processed (at most [`MAX_LINKS`]): the runtime links its `emit` span to them.
    pub links: Vec<String>,
}

/// The emit side of a processor call: encodes as it goes, with one writer per port.
#[derive(Debug)]
pub struct Outputs {
    writers: Vec<RecordWriter>,
    /// Key writers of ports keyed by Avro records (`None` elsewhere, or none at all).
    key_writers: Vec<Option<RecordWriter>>,
    partitions: Vec<i32>,
    now: StreamTime,
    records: Vec<OutputRecord>,
    /// Processor events counted since the last take (`runs_filed`, `windows_finalized`, …).
    counts: std::collections::BTreeMap<&'static str, u64>,
    /// Inside a savepoint: the counts made since, for a rollback to take back (a list
    /// reused record after record, rather than a copy of `counts` each time).
    counted_since: Option<Vec<(&'static str, u64)>>,
}

impl Outputs {
    /// Outputs for ports with these writers and partition counts.
    pub fn new(writers: Vec<RecordWriter>, partitions: Vec<i32>) -> Self {
        assert_eq!(writers.len(), partitions.len(), "one partition count per port");
        Self {
            writers,
            key_writers: Vec::new(),
            partitions,
            now: i64::MIN,
            records: Vec::new(),
            counts: std::collections::BTreeMap::new(),
            counted_since: None,
        }
    }

    /// The same, with key writers for the ports keyed by Avro records (index = port).
    pub fn with_key_writers(mut self, key_writers: Vec<Option<RecordWriter>>) -> Self {
        self.key_writers = key_writers;
        self
    }

    pub(crate) fn set_now(&mut self, now: StreamTime) {
        self.now = now;
    }

    /// Emits `value` on `port`, keyed by `key`, timestamped with the current stream time.
    pub fn emit<T: Serialize>(
        &mut self,
        port: impl Port,
        key: impl Into<Vec<u8>>,
        value: &T,
    ) -> Result<(), CodecError> {
        let port = port.index();
        let value = self.writers[port].encode(value)?;
        self.push(port, key.into(), Some(value), None, false);
        Ok(())
    }

    /// Emits `value` on `port` keyed by the Avro record `key`, encoded with the port's key
    /// writer (Confluent framing under `<topic>-key` on Kafka with a registry); the
    /// partition is murmur2 of the encoded key bytes, as a Java producer would choose.
    pub fn emit_keyed<K: Serialize, T: Serialize>(
        &mut self,
        port: impl Port,
        key: &K,
        value: &T,
    ) -> Result<(), CodecError> {
        let port = port.index();
        let key_writer = self.key_writer(port)?;
        let key = key_writer.encode(key)?;
        let value = self.writers[port].encode(value)?;
        self.push(port, key, Some(value), None, false);
        Ok(())
    }

    /// [`Outputs::emit`] of a record with a direct Avro form (same bytes, written field by
    /// field: the hot path of `[runs]`).
    pub fn emit_direct<T: DirectRecord>(
        &mut self,
        port: impl Port,
        key: impl Into<Vec<u8>>,
        value: &T,
    ) -> Result<(), CodecError> {
        let port = port.index();
        let value = self.writers[port].encode_direct(value)?;
        self.push(port, key.into(), Some(value), None, false);
        Ok(())
    }

    /// [`Outputs::emit_keyed`] with the value's datum written by `write` — a record of
    /// `full_name` the processor writes partly from encoded datums (the journal's pages).
    pub fn emit_keyed_with<K: DirectRecord>(
        &mut self,
        port: impl Port,
        key: &K,
        full_name: &str,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), CodecError> {
        let port = port.index();
        let key_writer = self.key_writer(port)?;
        let key = key_writer.encode_direct(key)?;
        let value = self.writers[port].encode_with(full_name, write)?;
        self.push(port, key, Some(value), None, false);
        Ok(())
    }

    /// [`Outputs::emit_keyed`] of a key and value with direct Avro forms.
    pub fn emit_keyed_direct<K: DirectRecord, T: DirectRecord>(
        &mut self,
        port: impl Port,
        key: &K,
        value: &T,
    ) -> Result<(), CodecError> {
        let port = port.index();
        let key_writer = self.key_writer(port)?;
        let key = key_writer.encode_direct(key)?;
        let value = self.writers[port].encode_direct(value)?;
        self.push(port, key, Some(value), None, false);
        Ok(())
    }

    /// The key writer of a port keyed by an Avro record.
    fn key_writer(&self, port: usize) -> Result<&RecordWriter, CodecError> {
        match self.key_writers.get(port) {
            Some(Some(w)) => Ok(w),
            _ => Err(CodecError::UnknownRecord { name: format!("key writer of output port {port}") }),
        }
    }

    /// Emits a tombstone for `key` on `port` (a compacted topic forgets the key).
    pub fn tombstone(&mut self, port: impl Port, key: impl Into<Vec<u8>>) {
        self.push(port.index(), key.into(), None, None, false);
    }

    /// Writes the current stream time to every partition of `port`, so a downstream stage
    /// advances in a quiet period too (the task does it for ports declared
    /// [`OutputPort::stream_time_every_ms`]).
    pub(crate) fn forward_stream_time(&mut self, port: usize) {
        for p in 0..self.partitions[port] {
            self.push(port, HEARTBEAT_KEY.to_vec(), None, Some(p), true);
        }
    }

    fn push(
        &mut self,
        port: usize,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        partition: Option<i32>,
        heartbeat: bool,
    ) {
        let links = Vec::new();
        self.records.push(OutputRecord {
            port,
            key,
            value,
            timestamp_ms: self.now,
            partition,
            heartbeat,
            links,
        });
    }

    /// Links the record emitted last to the trace contexts of the inputs it summarises
    /// (kept from their [`RecordMeta::traceparent`]): a window's runs, the observation
    /// that finished a Job. The first [`MAX_LINKS`] are kept.
    pub fn link_last(&mut self, contexts: impl IntoIterator<Item = String>) {
        if let Some(last) = self.records.last_mut() {
            let room = MAX_LINKS.saturating_sub(last.links.len());
            last.links.extend(contexts.into_iter().take(room));
        }
    }

    /// The writers, back from a finished task.
    pub fn into_writers(self) -> Vec<RecordWriter> {
        self.writers
    }

    /// Takes the records emitted so far, in emission order.
    pub fn take(&mut self) -> Vec<OutputRecord> {
        std::mem::take(&mut self.records)
    }

    /// Counts `n` occurrences of a processor event (a bounded name, exported per stage as
    /// `kubefacts_processor_events_total{stage, event}`). Counts of an aborted transaction
    /// are dropped with it, so the totals match what was committed.
    pub fn count(&mut self, event: impl Event, n: u64) {
        *self.counts.entry(event.as_str()).or_default() += n;
        if let Some(since) = &mut self.counted_since {
            since.push((event.as_str(), n));
        }
    }

    /// Takes the events counted so far.
    pub fn take_counts(&mut self) -> std::collections::BTreeMap<&'static str, u64> {
        std::mem::take(&mut self.counts)
    }

    /// Where the outputs stand before a record: what [`Outputs::rollback`] goes back to.
    pub(crate) fn savepoint(&mut self) -> OutputsSaved {
        let mut since = self.counted_since.take().unwrap_or_default();
        since.clear();
        self.counted_since = Some(since);
        OutputsSaved { records: self.records.len() }
    }

    /// The records emitted since `saved`.
    pub(crate) fn since(&self, saved: &OutputsSaved) -> &[OutputRecord] {
        &self.records[saved.records..]
    }

    /// Drops what was emitted and counted since `saved`.
    pub(crate) fn rollback(&mut self, saved: OutputsSaved) {
        self.records.truncate(saved.records);
        for (event, n) in self.counted_since.iter_mut().flat_map(|s| s.drain(..)) {
            if let Some(count) = self.counts.get_mut(event) {
                *count -= n;
                if *count == 0 {
                    self.counts.remove(event);
                }
            }
        }
    }

    /// Keeps what was emitted and counted since `saved`.
    pub(crate) fn release(&mut self, _saved: OutputsSaved) {
        if let Some(since) = &mut self.counted_since {
            since.clear();
        }
    }
}

/// [`Outputs`] before a record ([`Outputs::savepoint`]).
#[derive(Debug)]
pub(crate) struct OutputsSaved {
    records: usize,
}
