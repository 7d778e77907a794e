//! The Kafka shell around tasks: consume → process → produce outputs, changelog writes,
//! dead letters and input offsets in one transaction (exactly-once, DESIGN §4).
//!
//! The loop runs on one dedicated thread (`run_blocking`), so librdkafka's blocking
//! transaction calls never stall the async runtime; the codec's rare registry look-ups go
//! back to the async runtime through its handle.
//!
//! One iteration: poll a batch (no transaction is open while polling, so a rebalance never
//! lands mid-transaction); apply revocations (drop the tasks and what they buffered) and
//! assignments (create tasks, restore their stores from the changelogs up to the last
//! stable offset); begin a transaction; feed each task its records in merge order; produce
//! what they emitted and their store changes; send the consumed offsets with the group's
//! metadata (which fences zombies: a member that left the group cannot commit); commit.
//! Any failure aborts: every task is dropped and restored from its changelog, and the
//! consumer rewinds to the committed offsets, so nothing is half-applied.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use opentelemetry::{
    Context, KeyValue,
    global::{BoxedSpan, BoxedTracer},
    trace::{Link, Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _},
};
use rdkafka::{
    ClientConfig, ClientContext, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
    error::KafkaError,
    message::{BorrowedMessage, Header, Headers, OwnedHeaders},
    producer::{BaseRecord, Producer, ThreadedProducer},
};
use thiserror::Error;
use tokio::runtime::Handle;

use super::{
    HEARTBEAT_HEADER,
    admit::{self, Admitted, Envelope, InputRules},
    clock::{Gate, Mark, Verdict, WRITER_HEADER, Writer},
    deadletter::{self, DeadLetter, Source},
    partitioner::partition_for_key,
    processor::{OutputPort, OutputRecord, Outputs, Processor, RecordMeta},
    task::Task,
};
use crate::{
    codec::{Codec, CodecError, RecordWriter},
    telemetry,
};

/// How one runtime instance runs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Kafka bootstrap servers.
    pub bootstrap: String,
    /// The application: prefix of consumer groups, transactional ids and changelog topics.
    pub application_id: String,
    /// This instance's stable id, part of its transactional id (see
    /// [`RuntimeConfig::transactional_id`]).
    pub instance_id: String,
    /// Name of the stage (unique in the application): part of the consumer group,
    /// changelog topic names and dead letters.
    pub processor: String,
    /// Input topics, co-partitioned, in the processor's input order.
    pub inputs: Vec<String>,
    /// Global input topics: every task reads all their partitions (input indexes follow
    /// `inputs`), e.g. leases for lease coverage.
    pub globals: Vec<String>,
    /// Inputs (of `inputs`) whose producers send no stream time: they never hold a task's
    /// time back (docs/RUNTIME.md, "Stream time").
    pub untimed: Vec<String>,
    /// Output topics, one per output port.
    pub outputs: Vec<String>,
    /// How each input is admitted: checked against heartbeats, dead-lettered here or not
    /// ([`crate::config::PipelineConfig::input_rules`]).
    pub rules: InputRules,
    /// The dead-letter topic.
    pub dead_letter: String,
    /// Most records taken into one transaction.
    pub max_batch_records: usize,
    /// Longest time spent filling one batch, in milliseconds.
    pub commit_interval_ms: u64,
    /// Broker-side transaction timeout, in milliseconds: how long a crashed instance's
    /// open transaction blocks read_committed readers.
    pub transaction_timeout_ms: u64,
    /// Consumer group session timeout, in milliseconds: how soon a crashed instance's
    /// partitions move.
    pub session_timeout_ms: u64,
    /// A deliberate pause, for tests of lost assignments only.
    pub failpoint: Option<Failpoint>,
}

/// Where in a transaction a [`Failpoint`] pauses the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailpointAt {
    /// The transaction's records are produced; its offsets are not sent yet.
    BeforeOffsets,
    /// The offsets are sent; the commit is not.
    BeforeCommit,
}

/// Stops the whole process with SIGSTOP inside its `transaction`-th transaction (counting
/// from 1), as a long GC pause or a frozen VM would: heartbeats stop, the group moves the
/// partitions away, and a test resumes the process with SIGCONT to check that the zombie's
/// transaction cannot corrupt the new owner's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failpoint {
    /// Where the pause happens.
    pub at: FailpointAt,
    /// Which transaction pauses.
    pub transaction: u64,
}

impl std::str::FromStr for Failpoint {
    type Err = String;

    /// `before-offsets:N` or `before-commit:N`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (at, n) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected <where>:<transaction>"))?;
        let at = match at {
            "before-offsets" => FailpointAt::BeforeOffsets,
            "before-commit" => FailpointAt::BeforeCommit,
            other => return Err(format!("{other:?}: expected before-offsets or before-commit")),
        };
        let transaction = n.parse().map_err(|e| format!("{n:?}: {e}"))?;
        Ok(Self { at, transaction })
    }
}

impl Failpoint {
    fn pause_if(this: Option<Self>, at: FailpointAt, transaction: u64) {
        if this.is_some_and(|f| f.at == at && f.transaction == transaction) {
            tracing::warn!(?at, transaction, "failpoint: stopping this process (SIGSTOP)");
            let pid = std::process::id().to_string();
            if let Err(e) = std::process::Command::new("kill").args(["-STOP", &pid]).status() {
                tracing::error!(error = %e, "failpoint: could not stop the process");
            }
        }
    }
}

impl RuntimeConfig {
    /// Defaults for everything but the names.
    pub fn new(bootstrap: &str, application_id: &str, instance_id: &str, processor: &str) -> Self {
        Self {
            bootstrap: bootstrap.to_owned(),
            application_id: application_id.to_owned(),
            instance_id: instance_id.to_owned(),
            processor: processor.to_owned(),
            inputs: Vec::new(),
            globals: Vec::new(),
            untimed: Vec::new(),
            outputs: Vec::new(),
            rules: InputRules::default(),
            dead_letter: format!("{application_id}.dead-letter.v1"),
            max_batch_records: 10_000,
            commit_interval_ms: 100,
            transaction_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            failpoint: None,
        }
    }

    /// The internal topic a stage writes re-keyed records to for the next stage
    /// (`<application>-<stage>-repartition`; created like any output, not compacted).
    pub fn repartition_topic(&self, stage: &str) -> String {
        format!("{}-{stage}-repartition", self.application_id)
    }

    /// The consumer group of this stage: `<application_id>-<processor>`. Each stage of a
    /// pipeline is its own group with its own transactions, so one slow or failing stage
    /// never holds another's commits.
    pub fn group_id(&self) -> String {
        format!("{}-{}", self.application_id, self.processor)
    }

    /// The transactional id: `<application_id>-<processor>-<instance_id>`, stable across
    /// restarts so a restarted instance fences its previous incarnation.
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.group_id(), self.instance_id)
    }

    /// The changelog topic of one store.
    pub fn changelog_topic(&self, store: &str) -> String {
        format!("{}-{}-{store}-changelog", self.application_id, self.processor)
    }
}

/// Why the runtime stopped with an error.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A Kafka client could not be created or a call failed for good.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Another instance with the same transactional id took over: this one is a zombie.
    #[error("fenced: another instance with transactional id {transactional_id} is running; stopping")]
    Fenced {
        /// The transactional id.
        transactional_id: String,
    },
    /// Output writers could not be set up (schema registration).
    #[error("setting up the output writers: {0}")]
    Codec(#[from] CodecError),
    /// A changelog record could not be applied: the state cannot be trusted.
    #[error("restoring {topic}[{partition}]: {source}")]
    Restore {
        /// The changelog topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// What was wrong.
        #[source]
        source: super::store::StoreError,
    },
    /// The topics do not exist with the partition counts the pipeline needs.
    #[error(transparent)]
    Topics(#[from] super::topics::TopicsError),
}

fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> RuntimeError {
    move |source| RuntimeError::Kafka { context, source }
}

/// Counters of one instance; cheap to read from another thread.
#[derive(Debug, Default)]
pub struct RuntimeStats {
    /// Input records consumed and processed (heartbeats included).
    pub records_in: AtomicU64,
    /// Output records produced (forwarded heartbeats included).
    pub records_out: AtomicU64,
    /// Records dead-lettered (in committed transactions).
    pub dead_lettered: AtomicU64,
    /// Admissions retried because the schema registry did not answer.
    pub retries: AtomicU64,
    /// Non-zero while a record waits for the registry (a gauge: the stage is not ready).
    pub retrying: AtomicU64,
    /// Transactions committed.
    pub commits: AtomicU64,
    /// Transactions aborted.
    pub aborts: AtomicU64,
    /// Changelog records applied during restores (moves while a restore runs).
    pub restored: AtomicU64,
    /// Milliseconds spent restoring.
    pub restore_ms: AtomicU64,
    /// Tasks being restored right now (a gauge: non-zero while a restore runs).
    pub restoring_tasks: AtomicU64,
    /// Records in the assigned input partitions not yet consumed (high watermark minus
    /// position, summed), refreshed every few seconds; per partition in
    /// [`RuntimeStats::lag_by_partition`].
    pub lag: AtomicU64,
    /// Processor events of committed transactions, by name.
    pub events: Mutex<BTreeMap<&'static str, u64>>,
    /// `records_in` by input topic (topics come from configuration: bounded).
    records_in_by_topic: Mutex<BTreeMap<String, u64>>,
    /// `records_out` by output topic.
    records_out_by_topic: Mutex<BTreeMap<String, u64>>,
    /// `dead_lettered` by bounded reason code.
    dead_letters_by_reason: Mutex<BTreeMap<&'static str, u64>>,
    /// Lag per assigned (input topic, partition); revoked partitions are removed.
    lag_by_partition: Mutex<BTreeMap<(String, i32), u64>>,
    /// The lowest stream time (epoch ms) among the assigned tasks that have one, and the
    /// entries of each state store summed over the tasks; refreshed each transaction.
    tasks: Mutex<TaskGauges>,
}

/// What [`RuntimeStats::set_task_gauges`] holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TaskGauges {
    /// The lowest stream time (epoch ms) among the assigned tasks that have one.
    pub lowest_stream_time_ms: Option<i64>,
    /// Entries per state store name, summed over the assigned tasks. A store once seen
    /// keeps its entry (0 while no task holds it), so its series does not vanish.
    pub state_entries: BTreeMap<String, u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn add_to(map: &Mutex<BTreeMap<String, u64>>, key: &str, n: u64) {
    let mut map = lock(map);
    match map.get_mut(key) {
        Some(v) => *v += n,
        None => {
            map.insert(key.to_owned(), n);
        }
    }
}

impl RuntimeStats {
    /// Gives every input and output topic a series at 0, so alerts on their rates see
    /// them before the first record.
    pub fn declare_topics<I: AsRef<str>, O: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = I>,
        outputs: impl IntoIterator<Item = O>,
    ) {
        for topic in inputs {
            add_to(&self.records_in_by_topic, topic.as_ref(), 0);
        }
        for topic in outputs {
            add_to(&self.records_out_by_topic, topic.as_ref(), 0);
        }
    }

    /// Counts `n` input records read from `topic` (in `records_in` and by topic).
    pub fn count_in(&self, topic: &str, n: u64) {
        self.records_in.fetch_add(n, Ordering::Relaxed);
        add_to(&self.records_in_by_topic, topic, n);
    }

    /// Counts `n` output records written to `topic` (in `records_out` and by topic).
    pub fn count_out(&self, topic: &str, n: u64) {
        self.records_out.fetch_add(n, Ordering::Relaxed);
        add_to(&self.records_out_by_topic, topic, n);
    }

    /// Counts `n` dead letters of the bounded reason code `reason`.
    pub fn count_dead_letters(&self, reason: &'static str, n: u64) {
        self.dead_lettered.fetch_add(n, Ordering::Relaxed);
        *lock(&self.dead_letters_by_reason).entry(reason).or_default() += n;
    }

    /// Input records so far, by topic.
    pub fn records_in_by_topic(&self) -> BTreeMap<String, u64> {
        lock(&self.records_in_by_topic).clone()
    }

    /// Output records so far, by topic.
    pub fn records_out_by_topic(&self) -> BTreeMap<String, u64> {
        lock(&self.records_out_by_topic).clone()
    }

    /// Dead letters so far, by reason code.
    pub fn dead_letters_by_reason(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.dead_letters_by_reason).clone()
    }

    /// Replaces the per-partition lag with the partitions assigned now: (topic, partition,
    /// lag if it could be measured). A partition left out disappears; one whose lag could
    /// not be measured keeps its last value (or stays absent). `lag` becomes the sum.
    pub fn set_lag(&self, assigned: Vec<(String, i32, Option<u64>)>) {
        let mut by_partition = lock(&self.lag_by_partition);
        let mut next = BTreeMap::new();
        for (topic, partition, lag) in assigned {
            let key = (topic, partition);
            if let Some(lag) = lag.or_else(|| by_partition.get(&key).copied()) {
                next.insert(key, lag);
            }
        }
        *by_partition = next;
        self.lag.store(by_partition.values().sum(), Ordering::Relaxed);
    }

    /// Drops the lag of partitions no longer assigned (`assigned(partition)` false), at
    /// once rather than at the next lag refresh.
    pub fn retain_lag(&self, assigned: impl Fn(i32) -> bool) {
        let mut by_partition = lock(&self.lag_by_partition);
        by_partition.retain(|(_, partition), _| assigned(*partition));
        self.lag.store(by_partition.values().sum(), Ordering::Relaxed);
    }

    /// Lag per assigned (topic, partition).
    pub fn lag_by_partition(&self) -> BTreeMap<(String, i32), u64> {
        lock(&self.lag_by_partition).clone()
    }

    /// Sets the task gauges: the lowest stream time and the entries of each store.
    pub fn set_task_gauges(&self, lowest_stream_time_ms: Option<i64>, state_entries: BTreeMap<String, u64>) {
        let mut tasks = lock(&self.tasks);
        tasks.lowest_stream_time_ms = lowest_stream_time_ms;
        tasks.state_entries.values_mut().for_each(|v| *v = 0);
        tasks.state_entries.extend(state_entries);
    }

    /// The task gauges last set.
    pub fn task_gauges(&self) -> TaskGauges {
        lock(&self.tasks).clone()
    }

    /// Adds the events of one committed transaction.
    pub fn add_events(&self, counts: BTreeMap<&'static str, u64>) {
        let mut events = self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (event, n) in counts {
            *events.entry(event).or_default() += n;
        }
    }

    /// Processor events committed so far.
    pub fn events(&self) -> BTreeMap<&'static str, u64> {
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Rebalance events, recorded by the consumer's callbacks (which run inside `poll`) and
/// applied by the loop between transactions.
#[derive(Default, Clone)]
struct RebalanceLog {
    events: Arc<Mutex<Vec<RebalanceEvent>>>,
}

enum RebalanceEvent {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

impl ClientContext for RebalanceLog {}

/// A client context that does not report PartitionEOF as an error: consumers that ask for
/// end-of-partition events (restore, `kubefacts alerts`) get one per partition by design,
/// and librdkafka's default context logs each as a global ERROR.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        // librdkafka reports it as a global error carrying the PartitionEOF code.
        if error.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF) {
            tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for QuietEof {}

impl ConsumerContext for RebalanceLog {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.events.lock().expect("rebalance log").push(RebalanceEvent::Revoked(pairs(tpl)));
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.events.lock().expect("rebalance log").push(RebalanceEvent::Assigned(pairs(tpl)));
        }
    }
}

fn pairs(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements().iter().map(|e| (e.topic().to_owned(), e.partition())).collect()
}

/// A record taken from the consumer, admitted, waiting in its task's gate.
struct Pending<I> {
    input: usize,
    partition: i32,
    offset: i64,
    timestamp_ms: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    /// Forwarded stream time: the heartbeat header and no value (only time, no record).
    heartbeat: bool,
    /// What it says about its writer's time: a watcher heartbeat (the header with a value)
    /// promises nothing more of its time.
    mark: Mark,
    /// The upstream task that wrote it ([`Writer::SOLE`] without the header).
    writer: Writer,
    /// The record's `traceparent` header, kept only when it is valid: forwarded as is when
    /// no span is exported, parsed into the `process` span's parent when one is.
    traceparent: Option<String>,
    /// What admission said of it.
    admitted: Admitted<I>,
}

/// A message's envelope as admission reads it, with what the gate and spans need.
#[derive(Clone)]
struct Read {
    input: usize,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    time_header: bool,
    /// `None`: a writer header that does not parse.
    writer: Option<Writer>,
    traceparent: Option<String>,
}

impl Read {
    fn from_message(input: usize, m: &BorrowedMessage<'_>) -> Self {
        let (mut time_header, mut traceparent, mut writer) = (false, None, Some(Writer::SOLE));
        for h in m.headers().iter().flat_map(|h| h.iter()) {
            if h.key == HEARTBEAT_HEADER {
                time_header = true;
            } else if h.key == WRITER_HEADER {
                writer = h.value.and_then(Writer::parse);
            } else if h.key == telemetry::TRACEPARENT {
                traceparent = h
                    .value
                    .filter(|v| telemetry::parse_traceparent(v).is_some())
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .map(str::to_owned);
            }
        }
        Self {
            input,
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            time_header,
            writer,
            traceparent,
        }
    }

    fn envelope(&self) -> Envelope<'_> {
        Envelope {
            input: self.input,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            timestamp_ms: self.timestamp_ms,
            time_header: self.time_header,
            writer: self.writer,
        }
    }

    /// The record, admitted: what the gate merges it as follows from what admission said.
    fn into_pending<I>(self, admitted: Admitted<I>) -> Pending<I> {
        let mark = match &admitted {
            Admitted::Use(_) if self.time_header => Mark::Through,
            Admitted::Use(_) => Mark::Record,
            Admitted::Time => Mark::Forwarded,
            Admitted::Reject { .. } | Admitted::Retry(_) => Mark::Void,
        };
        Pending {
            input: self.input,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp_ms.unwrap_or(0),
            key: self.key,
            value: self.value,
            heartbeat: matches!(admitted, Admitted::Time),
            mark,
            writer: self.writer.unwrap_or(Writer::SOLE),
            traceparent: self.traceparent,
            admitted,
        }
    }
}

/// Admits a record, waiting while the schema registry does not answer (the same bytes
/// may decode later: they are never dead-lettered for it). Returns `None` when `stop` is
/// set meanwhile. No transaction is open here; the wait is visible as
/// `kubefacts_runtime_retrying` and on `/readyz`.
fn admit_waiting<I: super::DecodeInput>(
    codec: &Codec,
    handle: &Handle,
    read: &Read,
    stats: &RuntimeStats,
    stop: &AtomicBool,
) -> Option<Admitted<I>> {
    let mut backoff = Duration::from_millis(100);
    let mut waiting = false;
    let admitted = loop {
        match handle.block_on(admit::admit::<I>(codec, read.envelope())) {
            Admitted::Retry(e) => {
                if !waiting {
                    waiting = true;
                    stats.retrying.fetch_add(1, Ordering::Relaxed);
                }
                stats.retries.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    error = %e, input = read.input, partition = read.partition, offset = read.offset,
                    retry_in_ms = backoff.as_millis() as u64,
                    "the schema registry did not answer: waiting, then admitting the record again"
                );
                let until = Instant::now() + backoff;
                while Instant::now() < until {
                    if stop.load(Ordering::Relaxed) {
                        stats.retrying.fetch_sub(1, Ordering::Relaxed);
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            other => break other,
        }
    };
    if waiting {
        stats.retrying.fetch_sub(1, Ordering::Relaxed);
        tracing::info!(
            input = read.input,
            partition = read.partition,
            offset = read.offset,
            "the schema registry answers again"
        );
    }
    Some(admitted)
}

struct TaskSlot<P: Processor> {
    task: Task<P>,
    /// The task's lanes, merged (docs/RUNTIME.md, "Stream time").
    gate: Gate<Pending<P::Input>>,
    /// Per co-partitioned input: the offset after the last record read from it (`None`
    /// before the first); what is committed when nothing of it is buffered.
    read_next: Vec<Option<i64>>,
    /// Next offset to buffer per global lane (global records reach every task; a task
    /// skips what it already has or already processed).
    lane_next: Vec<i64>,
    /// Per co-partitioned input: the offset last committed (`None`: not by this task).
    committed: Vec<Option<i64>>,
}

impl<P: Processor> TaskSlot<P> {
    /// What to commit per co-partitioned input: the lowest offset still buffered (a
    /// multi-writer partition is released out of offset order; its writers' positions in
    /// the task's stream-time store say what above it was processed), else the consumer's
    /// position — past what was read, records read again after a restore and dropped, and
    /// the transaction markers a stage's output topic holds (committing only past the last
    /// record would leave the lag at one marker forever).
    fn commit_offsets(&self, position: impl Fn(usize) -> Option<i64>) -> Vec<Option<i64>> {
        (self.read_next.iter().enumerate())
            .map(|(input, next)| {
                let next = (*next)?;
                Some(
                    self.gate
                        .first_offset(input)
                        .unwrap_or_else(|| position(input).unwrap_or(next).max(next)),
                )
            })
            .collect()
    }

    /// Whether a transaction has something to do: a record to release, or an offset to
    /// move past records that need no processing.
    fn has_work(&self, position: impl Fn(usize) -> Option<i64>) -> bool {
        self.gate.ready(self.task.stream_time()) || self.commit_offsets(position) != self.committed
    }
}

/// The lanes of a task's gate: one per co-partitioned input, then one per partition of
/// each global input.
#[derive(Debug, Clone)]
struct Lanes {
    inputs: usize,
    /// (input index, partition) of each global lane, in lane order.
    globals: Vec<(usize, i32)>,
    /// Whether each lane is timed (untimed: a co-partitioned input declared so).
    timed: Vec<bool>,
    /// Whether each lane is checked against the heartbeats that follow its records.
    checked: Vec<bool>,
}

impl Lanes {
    fn global_lane(&self, input: usize, partition: i32) -> Option<usize> {
        self.globals.iter().position(|&(i, p)| i == input && p == partition)
    }
}

/// Runs one instance until `stop` is set (then commits what it has and leaves the group)
/// or an unrecoverable error. Blocking: call it on a dedicated thread (for example with
/// `tokio::task::spawn_blocking`); `handle` serves the codec's registry look-ups.
pub fn run_blocking<P, F>(
    cfg: &RuntimeConfig,
    codec: &Codec,
    handle: &Handle,
    ports: &[OutputPort],
    make: F,
    stop: &AtomicBool,
    stats: &RuntimeStats,
) -> Result<(), RuntimeError>
where
    P: Processor,
    F: FnMut(i32) -> P,
{
    let transactional_id = cfg.transactional_id();
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
    let dead_letter_max_bytes = {
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            client_config(cfg).create().map_err(kafka("creating an admin client"))?;
        let limit = handle.block_on(super::topics::max_message_bytes(&admin, &cfg.dead_letter));
        deadletter::max_bytes(limit.ok().flatten())
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
    let writers = |codec: &Codec| -> Result<Vec<RecordWriter>, CodecError> {
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

    let producer = transactional_producer(&cfg.bootstrap, &transactional_id, cfg.transaction_timeout_ms)
        .map_err(kafka("creating the transactional producer"))?;
    producer
        .init_transactions(Duration::from_secs(60))
        .map_err(|e| fenced_or(e, &transactional_id, "init_transactions"))?;

    let rebalances = RebalanceLog::default();
    let consumer: BaseConsumer<RebalanceLog> = group_consumer_config(&cfg.bootstrap, &cfg.group_id())
        // librdkafka pauses fetching up to 1 s once its queue is full; a loop that drains the
        // queue quickly would idle most of that pause.
        .set("fetch.queue.backoff.ms", "20")
        .set("session.timeout.ms", cfg.session_timeout_ms.to_string())
        .create_with_context(rebalances.clone())
        .map_err(kafka("creating the consumer"))?;
    let inputs: Vec<&str> = cfg.inputs.iter().map(String::as_str).collect();
    consumer.subscribe(&inputs).map_err(kafka("subscribing"))?;
    // Every instance reads global inputs whole, outside the group; positions live in the
    // tasks' changelogged stores, not in committed offsets.
    let global_consumer: BaseConsumer = client_config(cfg)
        .set("group.id", format!("{}-global", cfg.group_id()))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka("creating the global consumer"))?;
    let all_topics: Vec<&str> = cfg.inputs.iter().chain(&cfg.globals).map(String::as_str).collect();

    let mut tasks: BTreeMap<i32, TaskSlot<P>> = BTreeMap::new();
    let mut factory = TaskFactory {
        cfg,
        codec,
        stats,
        make,
        writers,
        key_writers,
        output_partitions,
        forward,
        lanes,
        spare: None,
    };
    // A topic may be both a co-partitioned input and a global (the jobs topic of `[runs]`):
    // which it is depends on the consumer that read it.
    let input_index: HashMap<&str, usize> =
        cfg.inputs.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let global_index: HashMap<&str, usize> =
        cfg.globals.iter().enumerate().map(|(g, t)| (t.as_str(), cfg.inputs.len() + g)).collect();

    stats.declare_topics(&all_topics, &cfg.outputs);
    // Per-record `process` spans only when an exporter is installed (docs/TRACING.md).
    let tracer = telemetry::tracer();
    let group_id = cfg.group_id();

    let mut lag_checked = Instant::now();
    let mut waiting_logged = Instant::now();
    let mut transactions = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if lag_checked.elapsed() >= Duration::from_secs(5) {
            lag_checked = Instant::now();
            if let Some(lag) = lag(&consumer) {
                stats.set_lag(lag);
            }
        }
        // 1. Fill a batch; no transaction is open, so rebalances happen only here.
        let started = Instant::now();
        let mut taken = 0;
        while taken < cfg.max_batch_records
            && started.elapsed() < Duration::from_millis(cfg.commit_interval_ms)
        {
            let polled = consumer.poll(Duration::from_millis(20));
            if factory.apply_rebalances(&rebalances, &consumer, &mut tasks)? {
                reposition_globals(&global_consumer, &tasks, &factory.lanes, &all_topics)?;
                stats.retain_lag(|p| tasks.contains_key(&p));
                set_task_gauges(stats, &mut tasks);
            }
            match polled {
                Some(Ok(m)) => {
                    let Some(&input) = input_index.get(m.topic()) else { continue };
                    match tasks.get_mut(&m.partition()) {
                        Some(slot) => {
                            let read = Read::from_message(input, &m);
                            let Some(admitted) = admit_waiting(codec, handle, &read, stats, stop) else {
                                break;
                            };
                            let p = read.into_pending(admitted);
                            slot.read_next[input] = Some(p.offset + 1);
                            // A record processed before a restore is read again and dropped.
                            if slot.gate.push(input, p.writer, (p.timestamp_ms, p.offset), p.mark, p) {
                                taken += 1;
                            }
                        }
                        // Not processed and not committed: the partition's owner reads it.
                        None => tracing::warn!(
                            topic = m.topic(),
                            partition = m.partition(),
                            "record of an unassigned partition"
                        ),
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "consumer error"),
                None => {}
            }
            // Only the task's own records fill a batch: counting global ones starved them
            // (a batch of 30 took 1 own record and 29 global).
            if !factory.lanes.globals.is_empty() {
                let admission = (codec, handle, stats, stop);
                take_globals(
                    &global_consumer,
                    &mut tasks,
                    &factory.lanes,
                    &global_index,
                    cfg.max_batch_records,
                    admission,
                );
            }
        }
        // Nothing to release (empty, or every task waits for a lane to pass its head) and no
        // offset to move: no transaction.
        let positions = &positions(&consumer, &input_index);
        let at = |partition: i32| move |input: usize| positions.get(&(input, partition)).copied();
        if !tasks.iter().any(|(p, slot)| slot.has_work(at(*p))) {
            if waiting_logged.elapsed() >= Duration::from_secs(5) {
                waiting_logged = Instant::now();
                for (p, slot) in &tasks {
                    if let Some((head, holding)) = slot.gate.waiting(slot.task.stream_time()) {
                        tracing::debug!(
                            stage = %cfg.processor, partition = p, buffered = slot.gate.len(), ?head, ?holding,
                            "waiting for lanes to pass the next record's time (lane, writer, time shown)"
                        );
                    }
                }
            }
            continue;
        }

        // 2. One transaction for everything the tasks can process now.
        producer.begin_transaction().map_err(|e| fenced_or(e, &transactional_id, "begin_transaction"))?;
        let mut offsets: BTreeMap<(usize, i32), i64> = BTreeMap::new();
        let mut failed: Option<KafkaError> = None;
        let mut counted: BTreeMap<&'static str, u64> = BTreeMap::new();
        // Per-topic and per-reason counts, gathered here and added to the shared stats once
        // per transaction (a lock per record would tax the hot loop).
        let mut records_in = vec![0u64; all_topics.len()];
        let mut records_out = vec![0u64; cfg.outputs.len()];
        let mut dead_letters: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (&partition, slot) in tasks.iter_mut() {
            let writer = Writer::new(partition, task_count).header_value();
            while let Some(released) = slot.gate.pop(slot.task.stream_time()) {
                let verdict = released.verdict;
                let lane = released.lane;
                let mut rec = released.item;
                // Taken: the decoded record moves into the processor.
                let admitted = std::mem::replace(&mut rec.admitted, Admitted::Time);
                records_in[rec.input] += 1;
                // Global records are read outside the consumer group.
                let group = (rec.input < factory.lanes.inputs).then_some(group_id.as_str());
                let mut span = tracer.as_ref().map(|t| process_span(t, &all_topics, group, &rec));
                // What this record's outputs carry: the `process` span, or without an
                // exporter the upstream context unchanged (the trace still connects).
                let own = span.as_ref().and_then(|span| telemetry::traceparent(span.span_context()));
                let traceparent = own.as_deref().or(rec.traceparent.as_deref());
                let global = rec.input >= factory.lanes.inputs;
                let letters =
                    cfg.rules.writes_dead_letter(rec.input, global, rec.partition, partition, task_count);
                if factory.lanes.checked[lane]
                    && rec.mark == Mark::Through
                    && verdict == Verdict::Use
                    && matches!(admitted, Admitted::Use(_))
                {
                    slot.task.note_heartbeat(rec.input, rec.partition, rec.timestamp_ms);
                }
                let judged = (admitted, verdict);
                let stepped = step(cfg, &mut slot.task, &all_topics, &rec, judged, traceparent)
                    .filter(|(_, _, own)| *own || letters);
                if let Some((reason, dl, _)) = stepped {
                    if let Some(span) = &mut span {
                        span.set_status(Status::error(reason));
                    }
                    *dead_letters.entry(reason).or_default() += 1;
                    let value = dead_letter_writer.encode(&dl.fitting(dead_letter_max_bytes))?;
                    let p = partition % dead_letter_partitions;
                    if let Err(e) = send(
                        &producer,
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
                    let emit = match (&tracer, &cx) {
                        (Some(tracer), Some(cx)) if !out.links.is_empty() => {
                            Some(emit_span(tracer, cx, &cfg.outputs[out.port], &out.links))
                        }
                        _ => None,
                    };
                    let linked = emit.as_ref().and_then(|s| telemetry::traceparent(s.span_context()));
                    let tp = if out.heartbeat { None } else { linked.as_deref().or(traceparent) };
                    let ports = &factory.output_partitions;
                    if let Err(e) = produce_output(&producer, cfg, ports, out, &writer, tp) {
                        failed = Some(e);
                    }
                }
            }
            for (input, offset) in slot.commit_offsets(at(partition)).into_iter().enumerate() {
                if let Some(offset) = offset {
                    offsets.insert((input, partition), offset);
                }
            }
            for (event, n) in slot.task.take_counts() {
                *counted.entry(event).or_default() += n;
            }
            let stores = slot.task.store_names();
            for (store, (key, value)) in slot.task.take_changes() {
                let topic = cfg.changelog_topic(&stores[store]);
                let ts = slot.task.stream_time().unwrap_or(0);
                if let Err(e) = send(&producer, &topic, partition, Some(&key), value.as_deref(), ts, None) {
                    failed = Some(e);
                }
            }
        }
        for (topic, n) in all_topics.iter().zip(records_in).filter(|(_, n)| *n > 0) {
            stats.count_in(topic, n);
        }
        for (topic, n) in cfg.outputs.iter().zip(records_out).filter(|(_, n)| *n > 0) {
            stats.count_out(topic, n);
        }
        let result = match failed {
            Some(e) => Err(e),
            None => {
                transactions += 1;
                commit(&producer, &consumer, cfg, &inputs, &offsets, transactions)
            }
        };
        match result {
            Ok(()) => {
                stats.commits.fetch_add(1, Ordering::Relaxed);
                stats.add_events(counted);
                // Counted once committed: an aborted attempt wrote none.
                for (reason, n) in dead_letters {
                    stats.count_dead_letters(reason, n);
                }
                for (p, slot) in tasks.iter_mut() {
                    slot.committed = slot.commit_offsets(at(*p));
                }
            }
            Err(e) => {
                if is_fatal(&e) {
                    return Err(fenced_or(e, &transactional_id, "commit"));
                }
                tracing::warn!(error = %e, "aborting the transaction; tasks restart from their changelogs");
                producer
                    .abort_transaction(Duration::from_secs(60))
                    .map_err(|e| fenced_or(e, &transactional_id, "abort"))?;
                stats.aborts.fetch_add(1, Ordering::Relaxed);
                // Drop every task and rewind: state and positions return to the last commit.
                let assigned: Vec<i32> = tasks.keys().copied().collect();
                for (_, slot) in std::mem::take(&mut tasks) {
                    factory.recycle(slot);
                }
                rewind(&consumer)?;
                tasks.extend(factory.create(&assigned)?);
                reposition_globals(&global_consumer, &tasks, &factory.lanes, &all_topics)?;
            }
        }
        set_task_gauges(stats, &mut tasks);
    }

    // Leaving: commit what was processed (the loop always ends between transactions) and
    // leave the group so partitions move at once.
    consumer.unsubscribe();
    Ok(())
}

/// The consumer's position (next offset to read) per (input index, partition): local, no
/// request to the broker.
fn positions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    input_index: &HashMap<&str, usize>,
) -> HashMap<(usize, i32), i64> {
    let Ok(tpl) = consumer.position() else { return HashMap::new() };
    tpl.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((*input_index.get(e.topic())?, e.partition()), o)),
            _ => None,
        })
        .collect()
}

/// Publishes the tasks' lowest stream time and their stores' entries (once per
/// transaction and rebalance: walking the stores per record would cost too much).
fn set_task_gauges<P: Processor>(stats: &RuntimeStats, tasks: &mut BTreeMap<i32, TaskSlot<P>>) {
    let lowest = tasks.values().filter_map(|s| s.task.stream_time()).min();
    let mut entries: BTreeMap<String, u64> = BTreeMap::new();
    for slot in tasks.values_mut() {
        slot.task.store_sizes(|store, len| match entries.get_mut(store) {
            Some(n) => *n += len as u64,
            None => {
                entries.insert(store.to_owned(), len as u64);
            }
        });
    }
    stats.set_task_gauges(lowest, entries);
}

fn client_config(cfg: &RuntimeConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.bootstrap);
    c
}

/// A consumer in `group` that commits only through transactions and reads only committed
/// records, from the earliest offset when the group has none; partitions are assigned by
/// range, so co-partitioned topics land together.
pub(crate) fn group_consumer_config(bootstrap: &str, group: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range");
    c
}

/// A transactional, idempotent producer (not initialised yet).
pub(crate) fn transactional_producer(
    bootstrap: &str,
    transactional_id: &str,
    transaction_timeout_ms: u64,
) -> Result<ThreadedProducer<rdkafka::producer::DefaultProducerContext>, KafkaError> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", transaction_timeout_ms.to_string())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
}

/// Whether a transactional producer's error is fatal (it must be recreated).
pub(crate) fn is_fatal(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(t) => t.is_fatal(),
        _ => false,
    }
}

/// Whether a transactional producer was fenced (another instance with its transactional id
/// started) or failed fatally: either way it is done.
pub(crate) fn is_fenced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::Fenced | rdkafka::types::RDKafkaErrorCode::ProducerFenced)
    ) || is_fatal(e)
}

fn fenced_or(e: KafkaError, transactional_id: &str, context: &'static str) -> RuntimeError {
    if is_fenced(&e) {
        RuntimeError::Fenced { transactional_id: transactional_id.to_owned() }
    } else {
        RuntimeError::Kafka { context, source: e }
    }
}

/// Processes one released record as admission and the gate judged it; returns a dead
/// letter, with its bounded reason code, if it could not be used, and whether the processor
/// itself refused it (its own outcome: written by whichever task met it).
fn step<P: Processor>(
    cfg: &RuntimeConfig,
    task: &mut Task<P>,
    topics: &[&str],
    rec: &Pending<P::Input>,
    (admitted, verdict): (Admitted<P::Input>, Verdict),
    traceparent: Option<&str>,
) -> Option<(&'static str, DeadLetter, bool)> {
    let partition = rec.partition;
    let meta = RecordMeta {
        input: rec.input,
        partition,
        offset: rec.offset,
        timestamp_ms: rec.timestamp_ms,
        writer: rec.writer,
        key: rec.key.clone(),
        traceparent: traceparent.map(str::to_owned),
    };
    let source = Source {
        topic: topics[rec.input],
        partition,
        offset: rec.offset,
        timestamp_ms: Some(rec.timestamp_ms),
        key: rec.key.as_deref(),
        value: rec.value.as_deref(),
        processor: &cfg.processor,
        stream_time: task.stream_time(),
    };
    match (verdict, admitted) {
        (Verdict::Ahead, _) => {
            task.skip(&meta);
            Some(("timestamp_ahead", DeadLetter::ahead(source), false))
        }
        (_, Admitted::Time) => {
            task.advance(&meta);
            None
        }
        (_, Admitted::Reject { reason, detail }) => {
            task.undecodable(&meta);
            Some((reason, DeadLetter::new(source, reason, detail), false))
        }
        (_, Admitted::Retry(e)) => {
            // Never pushed: admission waits for the registry. Kept total all the same.
            task.skip(&meta);
            Some((e.reason(), DeadLetter::undecodable(source, &e), false))
        }
        (_, Admitted::Use(decoded)) => task
            .process(decoded, &meta)
            .err()
            .map(|e| (e.reason, DeadLetter::new(source, e.reason, e.detail), true)),
    }
}

/// Hands global records to every task that has not buffered or processed them yet.
fn take_globals<P: Processor>(
    consumer: &BaseConsumer,
    tasks: &mut BTreeMap<i32, TaskSlot<P>>,
    lanes: &Lanes,
    global_index: &HashMap<&str, usize>,
    max: usize,
    (codec, handle, stats, stop): (&Codec, &Handle, &RuntimeStats, &AtomicBool),
) -> usize {
    let mut taken = 0;
    while taken < max {
        match consumer.poll(Duration::ZERO) {
            Some(Ok(m)) => {
                let Some(&input) = global_index.get(m.topic()) else { continue };
                let Some(gl) = lanes.global_lane(input, m.partition()) else { continue };
                if tasks.values().all(|slot| m.offset() < slot.lane_next[gl]) {
                    continue;
                }
                // Admitted once for every task that reads it.
                let read = Read::from_message(input, &m);
                let Some(admitted) = admit_waiting::<P::Input>(codec, handle, &read, stats, stop) else {
                    break;
                };
                for slot in tasks.values_mut() {
                    if m.offset() >= slot.lane_next[gl] {
                        let again = match &admitted {
                            Admitted::Use(i) => Admitted::Use(i.clone()),
                            Admitted::Time => Admitted::Time,
                            Admitted::Reject { reason, detail } => {
                                Admitted::Reject { reason, detail: detail.clone() }
                            }
                            Admitted::Retry(_) => unreachable!("admission waited for the registry"),
                        };
                        let p = read.clone().into_pending(again);
                        slot.gate.push(lanes.inputs + gl, p.writer, (p.timestamp_ms, p.offset), p.mark, p);
                        slot.lane_next[gl] = m.offset() + 1;
                    }
                }
                taken += 1;
            }
            Some(Err(e)) => tracing::warn!(error = %e, "global consumer error"),
            None => break,
        }
    }
    taken
}

/// Points the global consumer at the earliest position any task still needs.
fn reposition_globals<P: Processor>(
    consumer: &BaseConsumer,
    tasks: &BTreeMap<i32, TaskSlot<P>>,
    lanes: &Lanes,
    topics: &[&str],
) -> Result<(), RuntimeError> {
    if lanes.globals.is_empty() {
        return Ok(());
    }
    if tasks.is_empty() {
        return consumer.unassign().map_err(kafka("unassigning globals"));
    }
    let mut tpl = TopicPartitionList::new();
    for (gl, &(input, partition)) in lanes.globals.iter().enumerate() {
        let from = tasks.values().map(|s| s.lane_next[gl]).min().unwrap_or(0);
        tpl.add_partition_offset(topics[input], partition, Offset::Offset(from))
            .map_err(kafka("global assignment"))?;
    }
    consumer.assign(&tpl).map_err(kafka("global assignment"))
}

/// Produces one output record of the task `writer` (its [`WRITER_HEADER`] value).
fn produce_output(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    cfg: &RuntimeConfig,
    output_partitions: &[i32],
    out: OutputRecord,
    writer: &str,
    traceparent: Option<&str>,
) -> Result<(), KafkaError> {
    let topic = &cfg.outputs[out.port];
    let partition = out.partition.unwrap_or_else(|| partition_for_key(&out.key, output_partitions[out.port]));
    let (key, value) = (Some(&out.key[..]), out.value.as_deref());
    let headers = headers(out.heartbeat, Some(writer), traceparent);
    send(producer, topic, partition, key, value, out.timestamp_ms, headers)
}

/// The headers of a produced record: the heartbeat marker, the writing task and the trace
/// context, each when given.
fn headers(heartbeat: bool, writer: Option<&str>, traceparent: Option<&str>) -> Option<OwnedHeaders> {
    if !heartbeat && writer.is_none() && traceparent.is_none() {
        return None;
    }
    let mut headers = OwnedHeaders::new_with_capacity(3);
    if heartbeat {
        headers = headers.insert(Header { key: HEARTBEAT_HEADER, value: Some("1") });
    }
    if let Some(w) = writer {
        headers = headers.insert(Header { key: WRITER_HEADER, value: Some(w) });
    }
    if let Some(tp) = traceparent {
        headers = headers.insert(Header { key: telemetry::TRACEPARENT, value: Some(tp) });
    }
    Some(headers)
}

/// The `process` span (kind consumer) of one input record: a child of the record's
/// `traceparent` context when it has one, with the messaging attributes of
/// docs/TRACING.md.
fn process_span<I>(
    tracer: &BoxedTracer,
    topics: &[&str],
    group: Option<&str>,
    rec: &Pending<I>,
) -> BoxedSpan {
    let parent = match rec.traceparent.as_deref().and_then(|t| telemetry::parse_traceparent(t.as_bytes())) {
        Some(sc) => Context::new().with_remote_span_context(sc),
        None => Context::new(),
    };
    let mut attributes = vec![
        KeyValue::new("messaging.system", "kafka"),
        KeyValue::new("messaging.operation.type", "process"),
        KeyValue::new("messaging.operation.name", "process"),
        KeyValue::new("messaging.destination.name", topics[rec.input].to_owned()),
        KeyValue::new("messaging.destination.partition.id", rec.partition.to_string()),
        KeyValue::new("messaging.kafka.offset", rec.offset),
    ];
    if let Some(group) = group {
        attributes.push(KeyValue::new("messaging.consumer.group.name", group.to_owned()));
    }
    if rec.heartbeat {
        attributes.push(KeyValue::new("kubefacts.heartbeat", true));
    }
    tracer
        .span_builder("process")
        .with_kind(SpanKind::Consumer)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent)
}

/// The `emit` span (kind producer) of an output that summarises inputs besides the one
/// being processed (a window, a run filed after it settled): a child of the `process` span
/// in `cx`, linked to each of those inputs' contexts (docs/TRACING.md).
fn emit_span(tracer: &BoxedTracer, cx: &Context, topic: &str, links: &[String]) -> BoxedSpan {
    let links: Vec<Link> = links
        .iter()
        .filter_map(|tp| telemetry::parse_traceparent(tp.as_bytes()))
        .map(Link::with_context)
        .collect();
    let attributes = vec![
        KeyValue::new("messaging.system", "kafka"),
        KeyValue::new("messaging.operation.type", "send"),
        KeyValue::new("messaging.operation.name", "emit"),
        KeyValue::new("messaging.destination.name", topic.to_owned()),
    ];
    tracer
        .span_builder("emit")
        .with_kind(SpanKind::Producer)
        .with_attributes(attributes)
        .with_links(links)
        .start_with_context(tracer, cx)
}

/// Queues one record, waiting while librdkafka's queue is full.
fn send(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: &str,
    partition: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    timestamp_ms: i64,
    headers: Option<OwnedHeaders>,
) -> Result<(), KafkaError> {
    let mut record: BaseRecord<'_, [u8], [u8]> =
        BaseRecord::to(topic).partition(partition).timestamp(timestamp_ms);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    if let Some(h) = headers {
        record = record.headers(h);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

fn commit(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    consumer: &BaseConsumer<RebalanceLog>,
    cfg: &RuntimeConfig,
    inputs: &[&str],
    offsets: &BTreeMap<(usize, i32), i64>,
    transaction: u64,
) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (&(input, partition), &next) in offsets {
        tpl.add_partition_offset(inputs[input], partition, Offset::Offset(next))?;
    }
    let group =
        consumer.group_metadata().ok_or(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::State))?;
    let timeout = Duration::from_millis(cfg.transaction_timeout_ms);
    // Wait for the batch's deliveries first. Sent at once, AddOffsetsToTxn collides with the
    // transaction's AddPartitionsToTxn (CONCURRENT_TRANSACTIONS, retried after
    // retry.backoff.ms = 100 ms), and rust-rdkafka's commit_transaction flush polls in
    // 100 ms steps while anything is in flight: ~100 ms lost per transaction either way
    // (docs/RUNTIME.md, "Runtime benchmark"). Exactly-once is unchanged: the commit waits
    // for the same deliveries.
    let deadline = Instant::now() + timeout;
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    Failpoint::pause_if(cfg.failpoint, FailpointAt::BeforeOffsets, transaction);
    producer.send_offsets_to_transaction(&tpl, &group, timeout)?;
    Failpoint::pause_if(cfg.failpoint, FailpointAt::BeforeCommit, transaction);
    producer.commit_transaction(timeout)
}

/// Records not yet consumed in each assigned partition: (topic, partition, lag, `None`
/// when its high watermark could not be read); `None` when the assignment is unknown. A
/// partition that has delivered nothing since its assignment has no position yet: its
/// committed offset stands in (counting from 0 would report the whole partition as lag).
pub(crate) fn lag<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<Vec<(String, i32, Option<u64>)>> {
    let positions = consumer.position().ok()?;
    let mut unknown = TopicPartitionList::new();
    let mut at: Vec<(String, i32, i64)> = Vec::new();
    for e in positions.elements() {
        match e.offset() {
            Offset::Offset(o) => at.push((e.topic().to_owned(), e.partition(), o)),
            _ => {
                unknown.add_partition(e.topic(), e.partition());
            }
        }
    }
    if unknown.count() > 0
        && let Ok(committed) = consumer.committed_offsets(unknown, Duration::from_secs(1))
    {
        for e in committed.elements() {
            let o = if let Offset::Offset(o) = e.offset() { o } else { 0 };
            at.push((e.topic().to_owned(), e.partition(), o));
        }
    }
    let lag = at
        .into_iter()
        .map(|(topic, partition, o)| {
            let high = consumer.fetch_watermarks(&topic, partition, Duration::from_secs(1)).ok();
            let lag = high.map(|(_, high)| u64::try_from(high - o).unwrap_or(0));
            (topic, partition, lag)
        })
        .collect();
    Some(lag)
}

/// Waits until no transaction that commits offsets for these partitions is pending.
///
/// A member that lost its partitions (a session timeout while it was paused) may still
/// hold an open transaction carrying their offsets and changelog writes, and may yet
/// commit it. Restoring before that transaction ends would read the changelog without its
/// writes while the consumer later starts after its offsets: state and position would
/// disagree. A read_committed consumer's offset fetch asks for stable offsets (KIP-447),
/// and librdkafka retries until the pending transaction commits, aborts or times out.
fn wait_for_stable_offsets(
    consumer: &BaseConsumer<RebalanceLog>,
    cfg: &RuntimeConfig,
    partitions: &[i32],
) -> Result<(), RuntimeError> {
    if partitions.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for topic in &cfg.inputs {
        for &p in partitions {
            tpl.add_partition(topic, p);
        }
    }
    // The broker aborts a transaction after its timeout, so this wait is bounded by it.
    let timeout = Duration::from_millis(cfg.transaction_timeout_ms.saturating_mul(2) + 30_000);
    let started = Instant::now();
    consumer.committed_offsets(tpl, timeout).map_err(kafka("waiting for stable committed offsets"))?;
    let waited_ms = started.elapsed().as_millis() as u64;
    if waited_ms > 1_000 {
        tracing::info!(?partitions, waited_ms, "waited for a pending transaction of the previous owner");
    }
    Ok(())
}

/// Moves every assigned partition back to its committed offset (after an abort).
fn rewind(consumer: &BaseConsumer<RebalanceLog>) -> Result<(), RuntimeError> {
    let committed =
        consumer.committed(Duration::from_secs(30)).map_err(kafka("reading committed offsets"))?;
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        consumer
            .seek(e.topic(), e.partition(), offset, Duration::from_secs(30))
            .map_err(kafka("rewinding"))?;
    }
    Ok(())
}

/// Everything needed to create tasks: built once per instance, so creating tasks after a
/// rebalance or an abort is one call.
struct TaskFactory<'a, F, W> {
    cfg: &'a RuntimeConfig,
    codec: &'a Codec,
    stats: &'a RuntimeStats,
    make: F,
    /// Builds one set of output writers (registers schemas when a registry is used).
    writers: W,
    /// Key writers per port (for ports keyed by Avro records), copied into each task.
    key_writers: Vec<Option<RecordWriter>>,
    output_partitions: Vec<i32>,
    /// Output ports that carry the tasks' stream time, with their periods.
    forward: Vec<(usize, i64)>,
    lanes: Lanes,
    /// Writers of a dropped task, reused by the next one created.
    spare: Option<Vec<RecordWriter>>,
}

impl<F, W> TaskFactory<'_, F, W>
where
    W: Fn(&Codec) -> Result<Vec<RecordWriter>, CodecError>,
{
    /// Drops a task, keeping its writers for the next one.
    fn recycle<P: Processor>(&mut self, slot: TaskSlot<P>) {
        self.spare = Some(slot.task.into_writers());
    }

    /// Applies the rebalances recorded since the last call; true if tasks changed.
    fn apply_rebalances<P: Processor>(
        &mut self,
        log: &RebalanceLog,
        consumer: &BaseConsumer<RebalanceLog>,
        tasks: &mut BTreeMap<i32, TaskSlot<P>>,
    ) -> Result<bool, RuntimeError>
    where
        F: FnMut(i32) -> P,
    {
        let events = std::mem::take(&mut *log.events.lock().expect("rebalance log"));
        let changed = !events.is_empty();
        for event in events {
            match event {
                RebalanceEvent::Revoked(parts) => {
                    for (_, partition) in parts {
                        if let Some(slot) = tasks.remove(&partition) {
                            tracing::info!(partition, "task revoked");
                            self.recycle(slot);
                        }
                    }
                }
                RebalanceEvent::Assigned(parts) => {
                    let mut partitions: Vec<i32> =
                        parts.iter().map(|(_, p)| *p).filter(|p| !tasks.contains_key(p)).collect();
                    partitions.sort_unstable();
                    partitions.dedup();
                    wait_for_stable_offsets(consumer, self.cfg, &partitions)?;
                    tasks.extend(self.create(&partitions)?);
                }
            }
        }
        Ok(changed)
    }

    /// Tasks for `partitions`, their stores restored from their changelogs (one restore
    /// consumer for all of them: its start-up, not the records, dominates small restores).
    fn create<P: Processor>(&mut self, partitions: &[i32]) -> Result<Vec<(i32, TaskSlot<P>)>, RuntimeError>
    where
        F: FnMut(i32) -> P,
    {
        let (cfg, lanes, stats) = (self.cfg, &self.lanes, self.stats);
        let mut tasks = Vec::with_capacity(partitions.len());
        for &partition in partitions {
            let w = match self.spare.take() {
                Some(w) => w,
                None => (self.writers)(self.codec)?,
            };
            let keys = self.key_writers.iter().map(|k| k.as_ref().map(RecordWriter::try_clone).transpose());
            let out = Outputs::new(w, self.output_partitions.clone())
                .with_key_writers(keys.collect::<Result<_, _>>()?);
            let mut task =
                Task::new(partition, (self.make)(partition), out).forwarding(self.forward.iter().copied());
            if !lanes.globals.is_empty() {
                task = task.with_globals(lanes.inputs);
            }
            tasks.push(task);
        }
        // (changelog topic, partition) → (task index, store index)
        let mut sources: HashMap<(String, i32), (usize, usize)> = HashMap::new();
        for (t, task) in tasks.iter_mut().enumerate() {
            for (store, name) in task.store_names().iter().enumerate() {
                sources.insert((cfg.changelog_topic(name), task.partition()), (t, store));
            }
        }
        let started = Instant::now();
        stats.restoring_tasks.fetch_add(tasks.len() as u64, Ordering::Relaxed);
        let restored =
            restore(cfg, stats, &sources, |(t, store), key, value| tasks[t].restore(store, key, value));
        stats.restoring_tasks.fetch_sub(tasks.len() as u64, Ordering::Relaxed);
        let applied = restored?;
        let ms = started.elapsed().as_millis() as u64;
        stats.restore_ms.fetch_add(ms, Ordering::Relaxed);
        tracing::info!(?partitions, restored = applied, ms, "tasks assigned and restored");
        Ok(tasks
            .into_iter()
            .map(|task| {
                let lane_next =
                    lanes.globals.iter().map(|&(input, q)| task.global_position(input, q)).collect();
                let mut gate = Gate::new(lanes.timed.iter().copied())
                    .checking(lanes.checked.iter().copied(), cfg.rules.max_ahead_ms);
                // Multi-writer lanes go on where the restored state stands (their partitions
                // are processed out of offset order: the committed offset is not enough).
                for p in task.lane_positions() {
                    gate.resume(p.input, p.writer, p.next_offset, p.bound);
                }
                // Checked lanes judge their next records against the last heartbeat taken.
                for (input, q, at) in task.lane_heartbeats() {
                    let lane = if input < lanes.inputs {
                        Some(input)
                    } else {
                        lanes.global_lane(input, q).map(|gl| lanes.inputs + gl)
                    };
                    if let Some(lane) = lane {
                        gate.resume_heartbeat(lane, Writer::SOLE, at);
                    }
                }
                let (read_next, committed) = (vec![None; lanes.inputs], vec![None; lanes.inputs]);
                let slot = TaskSlot { task, gate, read_next, lane_next, committed };
                (slot.task.partition(), slot)
            })
            .collect())
    }
}

/// Reads changelog partitions from the start to their last stable offsets, handing each
/// record to `apply` with the destination its (topic, partition) maps to. One consumer per
/// changelog topic, so an end-of-partition event (which names only the partition) is
/// unambiguous.
fn restore(
    cfg: &RuntimeConfig,
    stats: &RuntimeStats,
    sources: &HashMap<(String, i32), (usize, usize)>,
    mut apply: impl FnMut((usize, usize), &[u8], Option<&[u8]>) -> Result<(), super::store::StoreError>,
) -> Result<u64, RuntimeError> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in sources.keys() {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let mut applied = 0;
    for (topic, partitions) in by_topic {
        // The restore consumer only assigns, reads to the end and goes: its group id is
        // never joined or committed to, but librdkafka wants one.
        let consumer: BaseConsumer<QuietEof> = client_config(cfg)
            .set("group.id", format!("{}-restore", cfg.group_id()))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "10")
            // It lives only until the end of the changelog: never pause fetching.
            .set("fetch.queue.backoff.ms", "0")
            .create_with_context(QuietEof)
            .map_err(kafka("creating the restore consumer"))?;
        // Know the leaders before assigning, or librdkafka retries the offset lookup on a
        // 500 ms timer.
        consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).map_err(kafka("restore metadata"))?;
        let mut tpl = TopicPartitionList::new();
        for &p in &partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning).map_err(kafka("restore assignment"))?;
        }
        consumer.assign(&tpl).map_err(kafka("restore assignment"))?;
        let mut pending: std::collections::BTreeSet<i32> = partitions.into_iter().collect();
        while !pending.is_empty() {
            match consumer.poll(Duration::from_secs(30)) {
                Some(Ok(m)) => {
                    let dest = sources[&(topic.to_owned(), m.partition())];
                    apply(dest, m.key().unwrap_or_default(), m.payload()).map_err(|source| {
                        RuntimeError::Restore { topic: topic.to_owned(), partition: m.partition(), source }
                    })?;
                    applied += 1;
                    stats.restored.fetch_add(1, Ordering::Relaxed);
                }
                // At the last stable offset: everything committed so far is applied.
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    pending.remove(&p);
                }
                Some(Err(e)) => return Err(RuntimeError::Kafka { context: "restoring", source: e }),
                None => {
                    return Err(RuntimeError::Kafka {
                        context: "restoring: no progress in 30 s",
                        source: KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut),
                    });
                }
            }
        }
    }
    Ok(applied)
}
