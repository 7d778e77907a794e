//! One stage's tasks on a stream thread: the records the thread's consumer and its
//! global-table reader hand it, its rebalances, and its share of each transaction (outputs, dead
//! letters, changelog writes, the offsets it needs committed).
//!
//! [`StageRun`] erases the processor type, so one thread loop ([`super::run`]) hosts the
//! tasks of every stage of the pipeline.

use std::{
    collections::{BTreeMap, HashMap},
    sync::atomic::AtomicBool,
    time::Duration,
};

use opentelemetry::{
    Context,
    global::BoxedTracer,
    trace::{Span as _, Status, TraceContextExt as _},
};
use rdkafka::{
    Message, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::BorrowedMessage,
};
use tokio::runtime::Handle;

use super::{
    RuntimeError,
    assign::{Lanes, RebalanceLog, TaskFactory, TaskSlot, set_task_gauges},
    client_config,
    config::RuntimeConfig,
    flow::{Part, Pressure},
    globals::{global_from, take_global},
    kafka,
    read::{Read, admit_waiting, again},
    spans::{emit_span, process_span},
    stats::RuntimeStats,
    transactions::{headers, produce_output, send},
};
use crate::{
    codec::{Codec, CodecError, RecordWriter},
    runtime::{
        admit::Admitted,
        clock::{Mark, Writer},
        deadletter,
        processor::{DecodeInput as _, OutputPort, Processor},
        step::{Refused, Released, step},
        task::WriteLimits,
    },
    telemetry,
};

/// The thread consumer's position (next offset to read) per topic, then partition.
pub(super) type Positions = HashMap<String, HashMap<i32, i64>>;

/// A task's consumer position on each of `inputs` (by input index).
fn position<'p>(
    positions: &'p Positions,
    inputs: &'p [String],
    partition: i32,
) -> impl Fn(usize) -> Option<i64> + 'p {
    move |input| positions.get(inputs[input].as_str())?.get(&partition).copied()
}

/// What one transaction commits per (topic, partition): the lowest next offset any stage
/// of the thread still needs.
pub(super) type Offsets = BTreeMap<(String, i32), i64>;

type Producer = super::transactions::TxProducer;

/// One stage's tasks as a stream thread drives them (the processor type erased).
pub(crate) trait StageRun {
    /// The stage's name.
    fn name(&self) -> &str;
    /// Its co-partitioned input topics, in input order.
    fn inputs(&self) -> &[String];
    /// Those of its inputs whose records are deleted once committed past.
    fn purged(&self) -> &[String];
    /// Changelogs the positions of these inputs (indexes): the thread shares their topics
    /// with another stage. Called before the first assignment.
    fn track(&mut self, inputs: Vec<usize>);
    /// Buffers a record of one of its inputs in its task. `None`: `stop` was set while
    /// admission waited for the registry; `Some(true)`: buffered (not read before).
    fn accept(&mut self, m: &BorrowedMessage<'_>, stop: &AtomicBool) -> Option<bool>;
    /// Its global input topics (read whole by every task).
    fn globals(&self) -> &[String];
    /// Hands a record the thread's global-table reader fetched of one of its global inputs
    /// to the tasks that need it. `None`: `stop` was set while admission waited for the
    /// registry.
    fn take_global(&mut self, m: &BorrowedMessage<'_>, stop: &AtomicBool) -> Option<()>;
    /// Per partition of its global inputs, the earliest offset one of its tasks needs
    /// (where the global reader goes after the tasks changed); empty without tasks.
    fn global_from(&self) -> Vec<(Part, i64)>;
    /// Drops the tasks of revoked partitions; true if any.
    fn revoke(&mut self, parts: &[(String, i32)]) -> bool;
    /// Creates and restores the tasks of assigned partitions; true if any.
    fn assign(
        &mut self,
        consumer: &BaseConsumer<RebalanceLog>,
        parts: &[(String, i32)],
    ) -> Result<bool, RuntimeError>;
    /// After its tasks changed: lag and task gauges.
    fn reassigned(&mut self, thread: usize) -> Result<(), RuntimeError>;
    /// Whether a transaction has something to do for it.
    fn has_work(&self, positions: &Positions) -> bool;
    /// Logs (at debug, rate-limited by the caller) what its tasks wait for.
    fn log_waiting(&self);
    /// Bounded buffers ([`super::flow`]): notes in `group` which partitions of its inputs
    /// its tasks buffer `limit` records of, and which they wait for; returns, per partition
    /// of its global inputs, whether the global reader may pause it for this stage.
    fn pace(&mut self, limit: usize, group: &mut Pressure) -> Vec<(Part, bool)>;
    /// Processes what its tasks release into the open transaction: outputs, dead letters,
    /// changelog writes; lowers `offsets` to what it needs committed. `Ok(Some(e))`: a send
    /// failed and the transaction must abort.
    fn process(
        &mut self,
        producer: &Producer,
        positions: &Positions,
        offsets: &mut Offsets,
    ) -> Result<Option<KafkaError>, RuntimeError>;
    /// The transaction committed: its counts become visible, its tasks' offsets committed.
    fn committed(&mut self, positions: &Positions, thread: usize);
    /// The transaction aborted: every task is dropped (the consumer rewinds next).
    fn aborted(&mut self);
    /// After the rewind: the dropped tasks again, restored from their changelogs.
    /// `committed`: the consumer's committed offsets it was rewound to.
    fn recreate(&mut self, thread: usize, committed: &TopicPartitionList) -> Result<(), RuntimeError>;
    /// The lag of its inputs, from the thread consumer's lag of every assigned partition.
    fn set_lag(&self, thread: usize, lag: &[(String, i32, Option<u64>)]);
}

/// A stage's tasks on one stream thread, ready to be hosted by [`super::run_thread`].
pub struct KafkaStage<'a>(pub(super) Box<dyn StageRun + 'a>);

impl std::fmt::Debug for KafkaStage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("KafkaStage").field(&self.0.name()).finish()
    }
}

/// Sets up one stage for a stream thread: its output and dead-letter writers (registered
/// with the registry) and the factory of its tasks (built by
/// `make` per partition). Tasks come with the thread's first assignment.
pub fn kafka_stage<'a, P, F>(
    cfg: &'a RuntimeConfig,
    codec: &'a Codec,
    handle: &'a Handle,
    ports: &'a [OutputPort],
    make: F,
    stats: &'a RuntimeStats,
) -> Result<KafkaStage<'a>, RuntimeError>
where
    P: Processor + 'a,
    F: FnMut(i32) -> P + 'a,
{
    let metadata_client: BaseConsumer =
        client_config(cfg).create().map_err(kafka("creating a metadata client"))?;
    let partition_count = |topic: &str| -> Result<i32, RuntimeError> {
        let md = metadata_client
            .fetch_metadata(Some(topic), Duration::from_secs(30))
            .map_err(kafka("reading topic metadata"))?;
        Ok(md.topics().first().map_or(0, |t| t.partitions().len() as i32))
    };
    let output_partitions: Vec<i32> =
        cfg.outputs.iter().map(|t| partition_count(t)).collect::<Result<_, _>>()?;
    let dead_letter_partitions = partition_count(&cfg.dead_letter)?.max(1);
    // Every dead letter fits the topic: one that could not be written would abort its
    // transaction again and again, and its partition would never move.
    // So does every output: a record whose effects exceed its topic's limit is refused
    // with them rolled back (`output_too_large`), not written to abort every transaction.
    let (dead_letter_max_bytes, limits) = {
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            client_config(cfg).create().map_err(kafka("creating an admin client"))?;
        let limit = |topic: &str| {
            let limit = handle.block_on(crate::runtime::topics::max_message_bytes(&admin, topic));
            deadletter::max_bytes(limit.ok().flatten())
        };
        let outputs = cfg.outputs.iter().map(|t| (t.clone(), limit(t))).collect();
        (limit(&cfg.dead_letter), WriteLimits { outputs, ..WriteLimits::default() })
    };
    // The stage's tasks: one per partition of its co-partitioned inputs. Outputs name their
    // task and this count, so a downstream task knows whom to wait for.
    let task_count = match cfg.inputs.first() {
        Some(t) => partition_count(t)?.max(1),
        None => 1,
    };
    let timed = cfg.inputs.iter().map(|t| !cfg.untimed.contains(t)).collect();
    let checked = (0..cfg.inputs.len()).map(|i| cfg.rules.checked.contains(&i)).collect();
    let mut lanes = Lanes { inputs: cfg.inputs.len(), globals: Vec::new(), timed, checked };
    for (g, topic) in cfg.globals.iter().enumerate() {
        let n = partition_count(topic)?;
        let input = cfg.inputs.len() + g;
        lanes.globals.extend((0..n).map(|q| (input, q)));
        lanes.timed.extend((0..n).map(|_| true));
        lanes.checked.extend((0..n).map(|_| cfg.rules.checked.contains(&input)));
    }
    let forward = OutputPort::forwarding(ports);
    let writers = move |codec: &Codec| -> Result<Vec<RecordWriter>, CodecError> {
        ports
            .iter()
            .zip(&cfg.outputs)
            .map(|(port, topic)| handle.block_on(codec.value_writer(topic, port.record)))
            .collect()
    };
    let dead_letter_writer = handle.block_on(codec.value_writer(&cfg.dead_letter, deadletter::FULL_NAME))?;
    // Key writers of ports keyed by Avro records, registered once; each task gets a copy.
    let key_writers: Vec<Option<RecordWriter>> = ports
        .iter()
        .zip(&cfg.outputs)
        .map(|(port, topic)| port.key_record.map(|k| handle.block_on(codec.key_writer(topic, k))).transpose())
        .collect::<Result<_, _>>()?;
    let all_topics: Vec<&str> = cfg.inputs.iter().chain(&cfg.globals).map(String::as_str).collect();
    stats.declare_topics(&all_topics, &cfg.outputs);
    // A topic may be both a co-partitioned input and a global (the jobs topic of `[runs]`):
    // which it is depends on the consumer that read it.
    let input_index = cfg.inputs.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let global_index: HashMap<&str, usize> =
        cfg.globals.iter().enumerate().map(|(g, t)| (t.as_str(), cfg.inputs.len() + g)).collect();
    let global_of = cfg.inputs.iter().map(|t| global_index.get(t.as_str()).copied()).collect();
    let factory = TaskFactory {
        cfg,
        codec,
        stats,
        make,
        writers,
        key_writers,
        output_partitions,
        forward,
        limits,
        lanes,
        spare: None,
        tracked: Vec::new(),
    };
    Ok(KafkaStage(Box::new(Stage {
        cfg,
        codec,
        handle,
        stats,
        factory,
        tasks: BTreeMap::new(),
        all_topics,
        input_index,
        global_index,
        global_of,
        task_count,
        dead_letter_writer,
        dead_letter_partitions,
        dead_letter_max_bytes,
        // Per-record `process` spans only when an exporter is installed (docs/TRACING.md).
        tracer: telemetry::tracer(),
        counted: BTreeMap::new(),
        dead_letters: BTreeMap::new(),
        assigned: Vec::new(),
    })))
}

impl<P: Processor, F, W> Stage<'_, P, F, W> {
    /// Hands a record of a partition this thread owns to global lane `gl` of every task
    /// whose lane stands within `from..=offset` (the consumer read nothing else there):
    /// the lane has everything before it, so this record is its next. A lane further
    /// behind (restored behind the group) is the global reader's until it catches up; one
    /// ahead already has it.
    fn feed_global(&mut self, gl: usize, (from, offset): (i64, i64), read: &Read, view: &Admitted<P::Input>) {
        let lane = self.factory.lanes.inputs + gl;
        let mut fed = false;
        for slot in self.tasks.values_mut() {
            if (from..=offset).contains(&slot.lane_next[gl]) {
                let p = read.clone().into_pending(again(view)).vetted(&mut slot.gate, lane);
                slot.gate.push(lane, p.writer, (p.timestamp_ms, p.offset), p.mark, p);
                slot.lane_next[gl] = offset + 1;
                fed = true;
            }
        }
        if fed {
            self.stats.global_from_group.inc();
        }
    }
}

struct Stage<'a, P: Processor, F, W> {
    cfg: &'a RuntimeConfig,
    codec: &'a Codec,
    handle: &'a Handle,
    stats: &'a RuntimeStats,
    factory: TaskFactory<'a, F, W>,
    tasks: BTreeMap<i32, TaskSlot<P>>,
    all_topics: Vec<&'a str>,
    input_index: HashMap<&'a str, usize>,
    global_index: HashMap<&'a str, usize>,
    /// Per co-partitioned input: the global input of the same topic, if any.
    global_of: Vec<Option<usize>>,
    task_count: i32,
    dead_letter_writer: RecordWriter,
    dead_letter_partitions: i32,
    dead_letter_max_bytes: usize,
    tracer: Option<BoxedTracer>,
    /// The open transaction's processor events and dead letters per reason, added to the
    /// stats once it commits (an aborted attempt wrote none).
    counted: BTreeMap<&'static str, u64>,
    dead_letters: BTreeMap<&'static str, u64>,
    /// The partitions whose tasks an abort dropped, created again after the rewind.
    assigned: Vec<i32>,
}

impl<'a, P, F, W> StageRun for Stage<'a, P, F, W>
where
    P: Processor,
    F: FnMut(i32) -> P,
    W: Fn(&Codec) -> Result<Vec<RecordWriter>, CodecError>,
{
    fn name(&self) -> &str {
        &self.cfg.processor
    }

    fn inputs(&self) -> &[String] {
        &self.cfg.inputs
    }

    fn purged(&self) -> &[String] {
        &self.cfg.purged
    }

    fn track(&mut self, inputs: Vec<usize>) {
        self.factory.tracked = inputs;
    }

    fn accept(&mut self, m: &BorrowedMessage<'_>, stop: &AtomicBool) -> Option<bool> {
        let Some(&input) = self.input_index.get(m.topic()) else { return Some(false) };
        let Some(slot) = self.tasks.get_mut(&m.partition()) else {
            // Not processed and not committed: the partition's owner reads it.
            tracing::warn!(
                stage = %self.cfg.processor, topic = m.topic(), partition = m.partition(),
                "record of an unassigned partition"
            );
            return Some(false);
        };
        let read = Read::from_message(input, m);
        let admitted =
            admit_waiting::<P::Input>(self.codec, self.handle, (&read, &self.cfg.rules), self.stats, stop)?;
        // The same record on a global lane of this topic: made from what was just decoded,
        // or else admitted again as that input (a rejected record is judged as the lane
        // judges it). Always: past the thread consumer's position the reader leaves the
        // lane to this consumer (`globals::take_global`).
        let mut shared = None;
        if let Some(g) = self.global_of[input]
            && let Some(gl) = self.factory.lanes.global_lane(g, m.partition())
        {
            let global = read.as_input(g);
            let view = match &admitted {
                Admitted::Use(i) => i.view_as(g).map(Admitted::Use),
                Admitted::Time => Some(Admitted::Time),
                Admitted::Reject { .. } | Admitted::Retry(_) => None,
            };
            let view = match view {
                Some(view) => view,
                None => admit_waiting::<P::Input>(
                    self.codec,
                    self.handle,
                    (&global, &self.cfg.rules),
                    self.stats,
                    stop,
                )?,
            };
            shared = Some((gl, global, view));
        }
        let p = read.into_pending(admitted).vetted(&mut slot.gate, input);
        let offset = p.offset;
        // The consumer read every offset from here to this one: none of them held a record.
        let from = slot.group_next(input);
        slot.read_next[input] = Some(offset + 1);
        // A record processed before a restore is read again and dropped.
        let fresh = slot.gate.push(input, p.writer, (p.timestamp_ms, p.offset), p.mark, p);
        if let Some((gl, read, view)) = shared {
            self.feed_global(gl, (from, offset), &read, &view);
        }
        Some(fresh)
    }

    fn globals(&self) -> &[String] {
        &self.cfg.globals
    }

    fn take_global(&mut self, m: &BorrowedMessage<'_>, stop: &AtomicBool) -> Option<()> {
        let admission = (self.codec, self.handle, self.stats, stop, &self.cfg.rules);
        let index = (&self.global_index, self.global_of.as_slice());
        take_global(m, &mut self.tasks, &self.factory.lanes, index, admission)
    }

    fn global_from(&self) -> Vec<(Part, i64)> {
        global_from(&self.tasks, &self.factory.lanes, &self.all_topics)
    }

    fn revoke(&mut self, parts: &[(String, i32)]) -> bool {
        self.factory.revoke(parts, &mut self.tasks)
    }

    fn assign(
        &mut self,
        consumer: &BaseConsumer<RebalanceLog>,
        parts: &[(String, i32)],
    ) -> Result<bool, RuntimeError> {
        self.factory.assign(consumer, parts, &mut self.tasks)
    }

    fn reassigned(&mut self, thread: usize) -> Result<(), RuntimeError> {
        let tasks = &self.tasks;
        self.stats.retain_thread_lag(thread, |p| tasks.contains_key(&p));
        set_task_gauges(self.stats, thread, &mut self.tasks);
        Ok(())
    }

    fn has_work(&self, positions: &Positions) -> bool {
        self.tasks.iter().any(|(p, slot)| slot.has_work(position(positions, &self.cfg.inputs, *p)))
    }

    fn log_waiting(&self) {
        for (p, slot) in &self.tasks {
            if let Some((head, holding)) = slot.gate.waiting(slot.task.stream_time()) {
                tracing::debug!(
                    stage = %self.cfg.processor, partition = p, buffered = slot.gate.len(), ?head, ?holding,
                    "waiting for lanes to pass the next record's time (lane, writer, time shown)"
                );
            }
        }
    }

    fn pace(&mut self, limit: usize, group: &mut Pressure) -> Vec<(Part, bool)> {
        let lanes = &self.factory.lanes;
        let (tasks, topics, global_of) = (&self.tasks, &self.all_topics, &self.global_of);
        // The co-partitioned input a global lane's records come through when this thread
        // owns its partition (`None`: only the global reader has them).
        let through_group = |gl: usize| -> Option<(usize, i32)> {
            let (input, q) = lanes.globals[gl];
            let i = global_of.iter().position(|g| *g == Some(input))?;
            tasks.contains_key(&q).then_some((i, q))
        };
        let mut globals = Pressure::default();
        for (&p, slot) in tasks {
            let time = slot.task.stream_time();
            let inputs = &self.cfg.inputs;
            // A global lane the thread's consumer feeds counts for that consumer's
            // partition too: full, it pauses it; waited for, it keeps it fetching.
            group.note(&slot.gate, time, limit, |lane| match lane.checked_sub(lanes.inputs) {
                None => inputs.get(lane).map(|t| (t.clone(), p)),
                Some(gl) => through_group(gl).map(|(i, q)| (inputs[i].clone(), q)),
            });
            if !lanes.globals.is_empty() {
                globals.note(&slot.gate, time, limit, |lane| {
                    let (input, q) = *lanes.globals.get(lane.checked_sub(lanes.inputs)?)?;
                    Some((topics[input].to_owned(), q))
                });
            }
        }
        if tasks.is_empty() {
            return Vec::new();
        }
        let full = globals.to_pause();
        (lanes.globals.iter().enumerate())
            .map(|(gl, &(input, q))| {
                let part = (topics[input].to_owned(), q);
                // Caught up with the thread's consumer on every task: that consumer feeds
                // the partition from now on, so the reader need not fetch it again.
                let fed = through_group(gl).is_some_and(|(i, q)| {
                    tasks.get(&q).is_some_and(|owner| {
                        let at = owner.group_next(i);
                        tasks.values().all(|s| s.lane_next[gl] >= at)
                    })
                });
                let pause = fed || full.contains(&part);
                (part, pause)
            })
            .collect()
    }

    fn process(
        &mut self,
        producer: &Producer,
        positions: &Positions,
        offsets: &mut Offsets,
    ) -> Result<Option<KafkaError>, RuntimeError> {
        let cfg = self.cfg;
        let group_id = cfg.group_id();
        let mut failed: Option<KafkaError> = None;
        // Per-topic counts, gathered here and added to the shared stats once per
        // transaction (a lock per record would tax the hot loop).
        let mut records_in = vec![0u64; self.all_topics.len()];
        let mut records_out = vec![0u64; cfg.outputs.len()];
        let lanes = &self.factory.lanes;
        for (&partition, slot) in self.tasks.iter_mut() {
            let writer = Writer::new(partition, self.task_count).header_value();
            while let Some(released) = slot.gate.pop(slot.task.stream_time()) {
                let verdict = released.verdict;
                let lane = released.lane;
                let mut rec = released.item;
                // Taken: the decoded record moves into the processor.
                let admitted = std::mem::replace(&mut rec.admitted, Admitted::Time);
                records_in[rec.input] += 1;
                // Global records are read outside the consumer group.
                let group = (rec.input < lanes.inputs).then_some(group_id.as_str());
                let mut span = self.tracer.as_ref().map(|t| process_span(t, &self.all_topics, group, &rec));
                // What this record's outputs carry: the `process` span, or without an
                // exporter the upstream context unchanged (the trace still connects).
                let own = span.as_ref().and_then(|span| telemetry::traceparent(span.span_context()));
                let traceparent = own.as_deref().or(rec.traceparent.as_deref());
                let global = rec.input >= lanes.inputs;
                let released = Released {
                    input: rec.input,
                    topic: self.all_topics[rec.input],
                    partition: rec.partition,
                    offset: rec.offset,
                    timestamp_ms: rec.timestamp_ms,
                    writer: rec.writer,
                    key: rec.key.as_deref(),
                    value: rec.value.as_deref(),
                    traceparent,
                    admitted,
                    verdict,
                    checked_beat: lanes.checked[lane] && rec.mark == Mark::Through,
                    checked: lanes.checked[lane],
                    letters: cfg.rules.writes_dead_letter(
                        rec.input,
                        global,
                        rec.partition,
                        partition,
                        self.task_count,
                    ),
                };
                if let Some(Refused { reason, letter }) = step(&cfg.processor, &mut slot.task, released) {
                    if let Some(span) = &mut span {
                        span.set_status(Status::error(reason));
                    }
                    *self.dead_letters.entry(reason).or_default() += 1;
                    let value =
                        self.dead_letter_writer.encode(&letter.fitting(self.dead_letter_max_bytes))?;
                    let p = partition % self.dead_letter_partitions;
                    if let Err(e) = send(
                        producer,
                        &cfg.dead_letter,
                        p,
                        rec.key.as_deref(),
                        Some(&value),
                        rec.timestamp_ms,
                        headers(false, None, traceparent),
                    ) {
                        failed = Some(e);
                    }
                }
                // The span becomes the parent of the `emit` spans of outputs that summarise
                // other inputs too; it ends when this context is dropped.
                let cx = span.map(|span| Context::new().with_span(span));
                for out in slot.task.take_outputs() {
                    records_out[out.port] += 1;
                    let emit = match (&self.tracer, &cx) {
                        (Some(tracer), Some(cx)) if !out.links.is_empty() => {
                            Some(emit_span(tracer, cx, &cfg.outputs[out.port], &out.links))
                        }
                        _ => None,
                    };
                    let linked = emit.as_ref().and_then(|s| telemetry::traceparent(s.span_context()));
                    let tp = if out.heartbeat { None } else { linked.as_deref().or(traceparent) };
                    let ports = &self.factory.output_partitions;
                    if let Err(e) = produce_output(producer, cfg, ports, out, &writer, tp) {
                        failed = Some(e);
                    }
                }
            }
            let at = position(positions, &cfg.inputs, partition);
            for (input, offset) in slot.commit_offsets(at).into_iter().enumerate() {
                if let Some(offset) = offset {
                    // A topic two stages read commits where the one further behind stands.
                    let entry = offsets.entry((cfg.inputs[input].clone(), partition)).or_insert(offset);
                    *entry = (*entry).min(offset);
                }
            }
            for (event, n) in slot.task.take_counts() {
                *self.counted.entry(event).or_default() += n;
            }
            let stores = slot.task.store_names();
            for (store, (key, value)) in slot.task.take_changes() {
                let topic = cfg.changelog_topic(&stores[store]);
                let ts = slot.task.stream_time().unwrap_or(0);
                if let Err(e) = send(producer, &topic, partition, Some(&key), value.as_deref(), ts, None) {
                    failed = Some(e);
                }
            }
        }
        for (topic, n) in self.all_topics.iter().zip(records_in).filter(|(_, n)| *n > 0) {
            self.stats.count_in(topic, n);
        }
        for (topic, n) in cfg.outputs.iter().zip(records_out).filter(|(_, n)| *n > 0) {
            self.stats.count_out(topic, n);
        }
        Ok(failed)
    }

    fn committed(&mut self, positions: &Positions, thread: usize) {
        self.stats.commits.inc();
        self.stats.add_events(std::mem::take(&mut self.counted));
        for (reason, n) in std::mem::take(&mut self.dead_letters) {
            self.stats.count_dead_letters(reason, n);
        }
        for (&p, slot) in self.tasks.iter_mut() {
            slot.committed = slot.commit_offsets(position(positions, &self.cfg.inputs, p));
        }
        set_task_gauges(self.stats, thread, &mut self.tasks);
    }

    fn aborted(&mut self) {
        self.stats.aborts.inc();
        self.counted.clear();
        self.dead_letters.clear();
        // Drop every task: state and positions return to the last commit.
        self.assigned = self.tasks.keys().copied().collect();
        for (_, slot) in std::mem::take(&mut self.tasks) {
            self.factory.recycle(slot);
        }
    }

    fn recreate(&mut self, thread: usize, committed: &TopicPartitionList) -> Result<(), RuntimeError> {
        let assigned = std::mem::take(&mut self.assigned);
        self.tasks.extend(self.factory.create(&assigned, committed)?);
        set_task_gauges(self.stats, thread, &mut self.tasks);
        Ok(())
    }

    fn set_lag(&self, thread: usize, lag: &[(String, i32, Option<u64>)]) {
        let mine = lag.iter().filter(|(t, _, _)| self.cfg.inputs.contains(t)).cloned().collect();
        self.stats.set_thread_lag(thread, mine);
    }
}
