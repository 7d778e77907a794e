//! The in-memory driver: runs processors over topics held in memory, with no broker, in
//! exactly the order the Kafka runtime does (per task: the deterministic merge of its
//! co-partitioned inputs). `replay`, `demo` and unit tests use it.
//!
//! What "the same output" means across drivers: Kafka orders records per partition, and
//! two tasks writing to one output partition interleave in whatever order their
//! transactions commit. So outputs are identical per key (and per task), dead letters per
//! partition, and changelogs in the state they rebuild (the driver writes a change per
//! record, the Kafka runtime one per key per transaction); the interleaving of different
//! tasks' records is not defined, here or in Kafka.

use thiserror::Error;

use super::{
    admit::{self, Admitted, Envelope, InputRules},
    clock::{Gate, Mark, Writer},
    deadletter::DeadLetter,
    partitioner::{partition_for_key, placement},
    processor::{OutputRecord, Outputs, Processor},
    step::{Released, step},
    task::{Task, WriteLimits},
};
use crate::codec::{Codec, CodecError, RecordWriter};

/// One record as a topic partition holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` for tombstones and forwarded heartbeats.
    pub value: Option<Vec<u8>>,
    /// Timestamp, epoch ms.
    pub timestamp_ms: i64,
    /// Whether the record is forwarded stream time: the heartbeat header and no value.
    pub heartbeat: bool,
    /// Whether it carries the heartbeat header with a value: a watcher heartbeat.
    pub beat: bool,
    /// Who wrote it: the upstream task for a stage's output ([`Writer::SOLE`] otherwise).
    pub writer: Writer,
}

/// A topic in memory: its partitions, each a list of records in offset order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemTopic {
    /// Topic name.
    pub name: String,
    /// Records per partition; the index in the list is the offset.
    pub partitions: Vec<Vec<LogRecord>>,
}

impl MemTopic {
    /// An empty topic with `partitions` partitions.
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        Self { name: name.into(), partitions: vec![Vec::new(); partitions.max(1) as usize] }
    }

    /// Partition count.
    pub fn partition_count(&self) -> i32 {
        self.partitions.len() as i32
    }

    /// Appends a record to a partition.
    pub fn append(&mut self, partition: i32, record: LogRecord) {
        self.partitions[partition as usize].push(record);
    }

    /// Appends a keyed record to the partition its key hashes to (Java's murmur2), or, when
    /// keyless, to every partition (markers and heartbeats are written to each).
    pub fn produce(
        &mut self,
        key: Option<&[u8]>,
        value: Option<Vec<u8>>,
        timestamp_ms: i64,
        heartbeat: bool,
    ) {
        let record = LogRecord {
            key: key.map(<[u8]>::to_vec),
            value,
            timestamp_ms,
            heartbeat,
            beat: false,
            writer: Writer::SOLE,
        };
        self.produce_record(record);
    }

    /// Appends forwarded stream time at `timestamp_ms` to every partition, as an upstream
    /// stage writes it (the heartbeat key, no value).
    pub fn forward_time(&mut self, timestamp_ms: i64) {
        for p in 0..self.partition_count() {
            let key = Some(super::HEARTBEAT_KEY.to_vec());
            let record = LogRecord {
                key,
                value: None,
                timestamp_ms,
                heartbeat: true,
                beat: false,
                writer: Writer::SOLE,
            };
            self.append(p, record);
        }
    }

    /// Appends `record` to its key's partition, or to every partition when keyless
    /// ([`placement`], as the watcher's publisher places it).
    pub fn produce_record(&mut self, record: LogRecord) {
        let mut partitions = placement(record.key.as_deref(), self.partition_count());
        let last = partitions.next_back();
        for p in partitions {
            self.append(p, record.clone());
        }
        if let Some(p) = last {
            self.append(p, record);
        }
    }

    /// Records in all partitions that are not forwarded heartbeats.
    pub fn facts(&self) -> usize {
        self.partitions.iter().flatten().filter(|r| !r.heartbeat).count()
    }

    /// Records in all partitions.
    pub fn len(&self) -> usize {
        self.partitions.iter().map(Vec::len).sum()
    }

    /// Whether the topic holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a driver run could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DriverError {
    /// Co-partitioned inputs differ in partition count (DESIGN §2: refuse to run).
    #[error("co-partitioned inputs must have equal partition counts: {counts}")]
    NotCopartitioned {
        /// `topic: count` for each input.
        counts: String,
    },
    /// The number of output topics does not match the writers given.
    #[error("{ports} output ports but {topics} output topics")]
    Outputs {
        /// Ports declared.
        ports: usize,
        /// Topics given.
        topics: usize,
    },
    /// A record could not be judged: the schema registry did not answer (on Kafka the
    /// runtime waits and retries; a run in memory stops rather than dead-letter it).
    #[error("input {input}, partition {partition}, offset {offset}: {source}")]
    Retriable {
        /// Input index.
        input: usize,
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
        /// The registry error.
        #[source]
        source: CodecError,
    },
}

/// What a run produced.
#[derive(Debug)]
pub struct DriverRun {
    /// One topic per output port.
    pub outputs: Vec<MemTopic>,
    /// One changelog per store, named `<processor>-<store>-changelog`, a partition per task.
    pub changelogs: Vec<MemTopic>,
    /// Records that could not be used, in the order they were met.
    pub dead_letters: Vec<DeadLetter>,
    /// Input records read (heartbeats included).
    pub records_in: u64,
    /// Processor events counted, all tasks.
    pub counts: std::collections::BTreeMap<&'static str, u64>,
}

/// Writers and topics for a processor's outputs.
#[derive(Debug)]
pub struct OutputTopics {
    /// One writer per port, in port order.
    pub writers: Vec<RecordWriter>,
    /// One empty topic per port (name and partition count), in port order.
    pub topics: Vec<MemTopic>,
    /// Key writers of ports keyed by Avro records (index = port; may be empty when no
    /// port is).
    pub key_writers: Vec<Option<RecordWriter>>,
    /// Ports that carry the task's stream time, with their periods
    /// ([`super::OutputPort::forwarding`]).
    pub forward: Vec<(usize, i64)>,
}

/// Runs `make(partition)` processors over co-partitioned `inputs`, one task per partition.
pub async fn run<P, F>(
    processor_name: &str,
    codec: &Codec,
    inputs: &[&MemTopic],
    outputs: OutputTopics,
    make: F,
) -> Result<DriverRun, DriverError>
where
    P: Processor,
    F: FnMut(i32) -> P,
{
    run_with_globals(processor_name, codec, inputs, &[], outputs, make).await
}

/// [`run`] with global inputs too: every task reads every partition of each global topic
/// (input indexes follow the co-partitioned inputs), merged with its own records.
pub async fn run_with_globals<P, F>(
    processor_name: &str,
    codec: &Codec,
    inputs: &[&MemTopic],
    globals: &[&MemTopic],
    outputs: OutputTopics,
    make: F,
) -> Result<DriverRun, DriverError>
where
    P: Processor,
    F: FnMut(i32) -> P,
{
    let rules = InputRules::default();
    let stage = StageInputs { inputs, globals, untimed: &[], rules: &rules };
    run_stage(processor_name, codec, stage, outputs, make).await
}

/// What one stage reads in memory.
#[derive(Debug, Clone, Copy)]
pub struct StageInputs<'a> {
    /// Co-partitioned inputs, in the processor's input order.
    pub inputs: &'a [&'a MemTopic],
    /// Global inputs (every task reads all their partitions).
    pub globals: &'a [&'a MemTopic],
    /// Indexes of co-partitioned inputs whose producers send no stream time: they never hold
    /// the task's time back (docs/RUNTIME.md, "Stream time").
    pub untimed: &'a [usize],
    /// How each input is admitted: checked against heartbeats, dead-lettered here or not.
    pub rules: &'a InputRules,
}

/// How many records a task processes between two takes of its store changes: the
/// changelogs hold the same latest values, written in fewer, larger steps.
const CHANGES_EVERY: usize = 1024;

/// Runs `make(partition)` processors over a stage's inputs, one task per partition, each
/// task's lanes merged by the same [`Gate`] as on Kafka — split by writer, so the order
/// does not depend on how upstream tasks' outputs happen to interleave on a partition.
pub async fn run_stage<P, F>(
    processor_name: &str,
    codec: &Codec,
    stage: StageInputs<'_>,
    outputs: OutputTopics,
    mut make: F,
) -> Result<DriverRun, DriverError>
where
    P: Processor,
    F: FnMut(i32) -> P,
{
    let StageInputs { inputs, globals, untimed, rules } = stage;
    let partitions = inputs.first().map_or(1, |t| t.partition_count());
    if inputs.iter().any(|t| t.partition_count() != partitions) {
        let counts =
            inputs.iter().map(|t| format!("{}: {}", t.name, t.partition_count())).collect::<Vec<_>>();
        return Err(DriverError::NotCopartitioned { counts: counts.join(", ") });
    }
    if outputs.writers.len() != outputs.topics.len() {
        return Err(DriverError::Outputs { ports: outputs.writers.len(), topics: outputs.topics.len() });
    }
    let counts: Vec<i32> = outputs.topics.iter().map(MemTopic::partition_count).collect();
    // Kafka's limits on topics of the broker's default `max.message.bytes`.
    let limits = WriteLimits {
        outputs: outputs
            .topics
            .iter()
            .map(|t| (t.name.clone(), super::deadletter::DEFAULT_MAX_BYTES))
            .collect(),
        ..WriteLimits::default()
    };
    let mut out_topics = outputs.topics;
    let mut writers = Some(outputs.writers);
    let outputs_keys = outputs.key_writers;
    let mut changelogs: Vec<MemTopic> = Vec::new();
    let mut run = DriverRun {
        outputs: Vec::new(),
        changelogs: Vec::new(),
        dead_letters: Vec::new(),
        records_in: 0,
        counts: std::collections::BTreeMap::new(),
    };
    // Every task reads every partition of a global input: each record is admitted (decoded)
    // once here, and each task takes a copy of the verdict (the decoded value shared where
    // it is an `Arc`), as a stream thread's global reader hands one record to its tasks.
    let mut admitted_globals: Vec<Vec<Admitted<P::Input>>> = Vec::new();
    for (g, topic) in globals.iter().enumerate() {
        let input = inputs.len() + g;
        for (q, records) in topic.partitions.iter().enumerate() {
            let mut verdicts = Vec::with_capacity(records.len());
            for (offset, rec) in records.iter().enumerate() {
                verdicts.push(admit_judged((codec, rules), (input, q as i32, offset as i64), rec).await?);
            }
            admitted_globals.push(verdicts);
        }
    }

    for partition in 0..partitions {
        // Writers are cheap to rebuild but not Clone: move them into each task and back.
        let task_writers = writers.take().expect("writers returned after each task");
        let keys: Vec<Option<RecordWriter>> = outputs_keys
            .iter()
            .map(|k| k.as_ref().map(|k| k.try_clone().expect("a writer of an embedded schema clones")))
            .collect();
        let out = Outputs::new(task_writers, counts.clone()).with_key_writers(keys);
        let mut task = Task::new(partition, make(partition), out)
            .forwarding(outputs.forward.iter().copied())
            .limiting(limits.clone());
        if !globals.is_empty() {
            task = task.with_globals(inputs.len());
        }
        if changelogs.is_empty() {
            changelogs = task
                .store_names()
                .iter()
                .map(|s| MemTopic::new(format!("{processor_name}-{s}-changelog"), partitions))
                .collect();
        }
        // Lanes: each co-partitioned input's partition of this task, then every partition
        // of every global input.
        let mut lanes: Vec<(usize, &MemTopic, i32)> =
            inputs.iter().enumerate().map(|(i, t)| (i, *t, partition)).collect();
        for (g, topic) in globals.iter().enumerate() {
            lanes.extend((0..topic.partition_count()).map(|q| (inputs.len() + g, *topic, q)));
        }
        // One sub-lane per (lane, writer): the offsets of that writer's records. Each feeds
        // the gate its next record once the last one left — the same order as buffering
        // whole partitions, without a large buffer per lane and task, whose allocation and
        // release showed in the profile.
        let subs: Vec<(usize, u32, Vec<u32>)> = lanes
            .iter()
            .enumerate()
            .flat_map(|(lane, (_, topic, q))| {
                // By writing task, as the gate keys its sub-lanes.
                let mut by_task: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
                for (offset, rec) in topic.partitions[*q as usize].iter().enumerate() {
                    by_task.entry(rec.writer.task).or_default().push(offset as u32);
                }
                by_task.into_iter().map(move |(task, offsets)| (lane, task, offsets))
            })
            .collect();
        let checked = lanes.iter().map(|(input, _, _)| rules.checked.contains(input));
        let mut gate = Gate::new(lanes.iter().map(|(input, _, _)| !untimed.contains(input)))
            .checking(checked, (rules.max_ahead_ms, rules.max_behind_ms));
        // Everything each lane will ever hold is here: release in merge order.
        gate.close();
        let mut next = vec![0usize; subs.len()];
        let feeding = Feeding {
            codec,
            rules,
            lanes: &lanes,
            subs: &subs,
            globals: &admitted_globals,
            inputs: inputs.len(),
        };
        for sub in 0..subs.len() {
            feeding.feed(&mut gate, &mut next, sub).await?;
        }
        let mut since_changes = 0;
        while let Some(released) = gate.pop(task.stream_time()) {
            let (sub, admitted) = released.item;
            feeding.feed(&mut gate, &mut next, sub).await?;
            let (input, topic, q) = lanes[released.lane];
            let rec = &topic.partitions[q as usize][released.offset as usize];
            run.records_in += 1;
            let global = input >= inputs.len();
            let released = Released {
                input,
                topic: &topic.name,
                partition: q,
                offset: released.offset,
                timestamp_ms: rec.timestamp_ms,
                writer: released.writer,
                key: rec.key.as_deref(),
                value: rec.value.as_deref(),
                traceparent: None,
                admitted,
                verdict: released.verdict,
                checked_beat: rec.beat && rules.checked.contains(&input),
                checked: rules.checked.contains(&input),
                letters: rules.writes_dead_letter(input, global, q, partition, partitions),
            };
            if let Some(refused) = step(processor_name, &mut task, released) {
                run.dead_letters.push(refused.letter);
            }
            for out in task.take_outputs() {
                route(&mut out_topics, out, Writer::new(partition, partitions));
            }
            since_changes += 1;
            if since_changes >= CHANGES_EVERY || gate.is_empty() {
                since_changes = 0;
                for (store, (key, value)) in task.take_changes() {
                    let change = LogRecord {
                        key: Some(key),
                        value,
                        timestamp_ms: rec.timestamp_ms,
                        heartbeat: false,
                        beat: false,
                        writer: Writer::SOLE,
                    };
                    changelogs[store].append(partition, change);
                }
            }
        }
        for (event, n) in task.take_counts() {
            *run.counts.entry(event).or_default() += n;
        }
        writers = Some(task.into_writers());
    }
    // On Kafka tasks run side by side, so their outputs interleave on a partition in time;
    // a stable sort by timestamp shows that interleaving (ties in task order) without
    // changing any task's or key's own order. Nothing downstream depends on it: the gate
    // merges by writer.
    for topic in &mut out_topics {
        for records in &mut topic.partitions {
            records.sort_by_key(|r| r.timestamp_ms);
        }
    }
    run.outputs = out_topics;
    run.changelogs = changelogs;
    Ok(run)
}

/// What feeds a task's gate: its lanes and their sub-lanes, admitting each record as it
/// enters (so a record nothing can use enters carrying no time).
struct Feeding<'a, I> {
    codec: &'a Codec,
    rules: &'a InputRules,
    lanes: &'a [(usize, &'a MemTopic, i32)],
    subs: &'a [(usize, u32, Vec<u32>)],
    /// Per global lane (lane − `inputs`), every record's verdict, admitted once for all
    /// tasks.
    globals: &'a [Vec<Admitted<I>>],
    /// Co-partitioned inputs: the lanes before the global ones.
    inputs: usize,
}

/// Admits record `rec` at (input, partition, offset); a record that cannot be judged (the
/// registry did not answer) stops the run.
async fn admit_judged<I: crate::runtime::DecodeInput>(
    (codec, rules): (&Codec, &InputRules),
    (input, partition, offset): (usize, i32, i64),
    rec: &LogRecord,
) -> Result<Admitted<I>, DriverError> {
    let env = Envelope {
        checked: rules.checked.contains(&input).then_some(rules),
        input,
        key: rec.key.as_deref(),
        value: rec.value.as_deref(),
        timestamp_ms: Some(rec.timestamp_ms),
        time_header: rec.heartbeat || rec.beat,
        writer: Some(rec.writer),
    };
    match admit::admit::<I>(codec, env).await {
        Admitted::Retry(source) => Err(DriverError::Retriable { input, partition, offset, source }),
        admitted => Ok(admitted),
    }
}

impl<I: crate::runtime::DecodeInput> Feeding<'_, I> {
    /// Feeds sub-lane `sub` its next record — and more while the gate holds them for a
    /// heartbeat to judge — or, at its end, tells the gate so.
    async fn feed(
        &self,
        gate: &mut Gate<(usize, Admitted<I>)>,
        next: &mut [usize],
        sub: usize,
    ) -> Result<(), DriverError> {
        let (lane, task, offsets) = &self.subs[sub];
        loop {
            let Some(&offset) = offsets.get(next[sub]) else {
                gate.end(*lane, *task);
                return Ok(());
            };
            let (input, topic, q) = self.lanes[*lane];
            let rec = &topic.partitions[q as usize][offset as usize];
            // A global record's verdict was reached once for every task.
            let admitted = match lane
                .checked_sub(self.inputs)
                .and_then(|gl| self.globals[gl][offset as usize].again())
            {
                Some(admitted) => admitted,
                None => admit_judged((self.codec, self.rules), (input, q, i64::from(offset)), rec).await?,
            };
            let admitted = admit::vet(gate, *lane, (rec.writer, i64::from(offset)), admitted);
            let mark = match &admitted {
                Admitted::Retry(_) | Admitted::Reject { .. } => Mark::Void,
                Admitted::Time => Mark::Forwarded,
                Admitted::Use(_) if rec.beat => Mark::Through,
                Admitted::Use(_) => Mark::Record,
            };
            gate.push(*lane, rec.writer, (rec.timestamp_ms, i64::from(offset)), mark, (sub, admitted));
            next[sub] += 1;
            if !gate.holds(*lane, *task) {
                return Ok(());
            }
        }
    }
}

fn route(topics: &mut [MemTopic], out: OutputRecord, writer: Writer) {
    let topic = &mut topics[out.port];
    let record = LogRecord {
        key: Some(out.key),
        value: out.value,
        timestamp_ms: out.timestamp_ms,
        heartbeat: out.heartbeat,
        beat: false,
        writer,
    };
    let partition = out.partition.unwrap_or_else(|| {
        partition_for_key(record.key.as_deref().unwrap_or_default(), topic.partition_count())
    });
    topic.append(partition, record);
}
