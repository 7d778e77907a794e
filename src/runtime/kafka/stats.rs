//! [`RuntimeStats`]: the counters and gauges of one instance, and the consumer lag they
//! report.

use std::{
    collections::BTreeMap,
    sync::{
        Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};
use rdkafka::{
    Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
};

/// The labels of a stage's unlabelled families.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StageLabels {
    /// The stage (processor) name.
    pub stage: String,
}

/// `stage` and a topic (from configuration: bounded).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TopicLabels {
    /// The stage (processor) name.
    pub stage: String,
    /// The input or output topic.
    pub topic: String,
}

/// `stage` and a bounded dead-letter reason code.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The stage (processor) name.
    pub stage: String,
    /// The reason code.
    pub reason: &'static str,
}

/// `stage` and a bounded processor event name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EventLabels {
    /// The stage (processor) name.
    pub stage: String,
    /// The event name.
    pub event: &'static str,
}

/// `stage` and a transaction outcome (`committed`, `aborted`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The stage (processor) name.
    pub stage: String,
    /// The outcome.
    pub outcome: &'static str,
}

/// `stage` and where a global-table record came from (`group`, `reader`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SourceLabels {
    /// The stage (processor) name.
    pub stage: String,
    /// `group`: taken from the stream thread's own record of a partition it owns (decoded
    /// once); `reader`: decoded by the global-table reader.
    pub source: &'static str,
}

/// A counter of seconds (fractional).
pub type SecondsCounter = Counter<f64, AtomicU64>;

/// The counter families of every stage of a process, each series labelled `stage`. One
/// set per process (cloning shares them), so each family is described once however
/// many stages count into it.
#[derive(Debug, Clone, Default)]
pub struct StageFamilies {
    /// Input records by topic.
    pub records_in: Family<TopicLabels, Counter>,
    /// Output records by topic.
    pub records_out: Family<TopicLabels, Counter>,
    /// Dead letters by reason.
    pub dead_letters: Family<ReasonLabels, Counter>,
    /// Changelog records applied while restoring.
    pub restored: Family<StageLabels, Counter>,
    /// Seconds spent restoring.
    pub restore: Family<StageLabels, SecondsCounter>,
    /// Admissions retried for the schema registry.
    pub registry_retries: Family<StageLabels, Counter>,
    /// Transactions by outcome.
    pub transactions: Family<OutcomeLabels, Counter>,
    /// Processor events of committed transactions.
    pub processor_events: Family<EventLabels, Counter>,
    /// Global-table records handed to the stage's tasks, by source.
    pub global_records: Family<SourceLabels, Counter>,
}

/// Counters of one instance; cheap to read from another thread. The labelled counters
/// are handles into [`StageFamilies`] (created with [`RuntimeStats::new`]); the
/// `AtomicU64` fields are totals and gauges read by summaries, `/readyz` and the
/// scrape-time gauges.
#[derive(Debug)]
pub struct RuntimeStats {
    /// The `stage` label of every series.
    stage: String,
    families: StageFamilies,
    /// Input records consumed and processed (heartbeats included), all topics.
    pub records_in: AtomicU64,
    /// Output records produced (forwarded heartbeats included), all topics.
    pub records_out: AtomicU64,
    /// Records dead-lettered (in committed transactions), all reasons.
    pub dead_lettered: AtomicU64,
    /// Admissions retried because the schema registry did not answer.
    pub retries: Counter,
    /// Non-zero while a record waits for the registry (a gauge: the stage is not ready).
    pub retrying: AtomicU64,
    /// Transactions committed.
    pub commits: Counter,
    /// Transactions aborted.
    pub aborts: Counter,
    /// Global-table records taken from the thread consumer's own records (not decoded again).
    pub global_from_group: Counter,
    /// Global-table records the global-table reader decoded.
    pub global_from_reader: Counter,
    /// Changelog records applied during restores (moves while a restore runs).
    pub restored: Counter,
    /// Seconds spent restoring.
    pub restore: SecondsCounter,
    /// Tasks being restored right now (a gauge: non-zero while a restore runs).
    pub restoring_tasks: AtomicU64,
    /// Records in the assigned input partitions not yet consumed (high watermark minus
    /// position, summed), refreshed every few seconds; per partition in
    /// [`RuntimeStats::lag_by_partition`].
    pub lag: AtomicU64,
    /// The labelled counters used so far, by topic / reason / event: a batch looks its
    /// counter up under a read lock without building labels.
    records_in_by_topic: RwLock<BTreeMap<String, Counter>>,
    records_out_by_topic: RwLock<BTreeMap<String, Counter>>,
    dead_letters_by_reason: RwLock<BTreeMap<&'static str, Counter>>,
    events: RwLock<BTreeMap<&'static str, Counter>>,
    /// Lag per assigned (input topic, partition), per stream thread (each replaces its own
    /// wholesale at each refresh; threads own disjoint partitions); revoked partitions are
    /// removed. The metrics endpoint reads it at scrape.
    lag_by_partition: Mutex<BTreeMap<usize, PartitionLag>>,
    /// Per stream thread: the lowest stream time (epoch ms) among its tasks that have one,
    /// and the entries of each state store summed over them; refreshed each transaction.
    tasks: Mutex<BTreeMap<usize, TaskGauges>>,
}

impl Default for RuntimeStats {
    /// Stats counting into families of their own (exported nowhere), for a run without
    /// a metrics endpoint.
    fn default() -> Self {
        Self::new("", &StageFamilies::default())
    }
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

/// Lag per (topic, partition).
type PartitionLag = BTreeMap<(String, i32), u64>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Adds `n` to the counter cached under `key`: under the read lock when it is cached (a
/// batch builds no labels and clones nothing), else created by `create` (which builds the
/// labels) once.
fn add_cached<K: Ord + Clone + std::borrow::Borrow<Q>, Q: Ord + ?Sized + ToOwned<Owned = K>>(
    cache: &RwLock<BTreeMap<K, Counter>>,
    key: &Q,
    n: u64,
    create: impl FnOnce() -> Counter,
) {
    if let Some(c) = cache.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(key) {
        c.inc_by(n);
        return;
    }
    let mut cache = cache.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    cache.entry(key.to_owned()).or_insert_with(create).inc_by(n);
}

impl RuntimeStats {
    /// Stats of `stage`, counting into the shared `families`. Its unlabelled series and
    /// both transaction outcomes exist from now on, at 0.
    pub fn new(stage: &str, families: &StageFamilies) -> Self {
        let labels = StageLabels { stage: stage.to_owned() };
        let outcome = |outcome| OutcomeLabels { stage: stage.to_owned(), outcome };
        let source = |source| SourceLabels { stage: stage.to_owned(), source };
        Self {
            stage: stage.to_owned(),
            records_in: AtomicU64::default(),
            records_out: AtomicU64::default(),
            dead_lettered: AtomicU64::default(),
            retries: families.registry_retries.get_or_create_owned(&labels),
            retrying: AtomicU64::default(),
            commits: families.transactions.get_or_create_owned(&outcome("committed")),
            aborts: families.transactions.get_or_create_owned(&outcome("aborted")),
            global_from_group: families.global_records.get_or_create_owned(&source("group")),
            global_from_reader: families.global_records.get_or_create_owned(&source("reader")),
            restored: families.restored.get_or_create_owned(&labels),
            restore: families.restore.get_or_create_owned(&labels),
            restoring_tasks: AtomicU64::default(),
            lag: AtomicU64::default(),
            records_in_by_topic: RwLock::default(),
            records_out_by_topic: RwLock::default(),
            dead_letters_by_reason: RwLock::default(),
            events: RwLock::default(),
            lag_by_partition: Mutex::default(),
            tasks: Mutex::default(),
            families: families.clone(),
        }
    }

    /// The stage name of the series.
    pub fn stage(&self) -> &str {
        &self.stage
    }

    fn topic_labels(&self, topic: &str) -> TopicLabels {
        TopicLabels { stage: self.stage.clone(), topic: topic.to_owned() }
    }

    fn add_in(&self, topic: &str, n: u64) {
        add_cached(&self.records_in_by_topic, topic, n, || {
            self.families.records_in.get_or_create_owned(&self.topic_labels(topic))
        })
    }

    fn add_out(&self, topic: &str, n: u64) {
        add_cached(&self.records_out_by_topic, topic, n, || {
            self.families.records_out.get_or_create_owned(&self.topic_labels(topic))
        })
    }

    fn add_dead_letters(&self, reason: &'static str, n: u64) {
        add_cached(&self.dead_letters_by_reason, &reason, n, || {
            let labels = ReasonLabels { stage: self.stage.clone(), reason };
            self.families.dead_letters.get_or_create_owned(&labels)
        })
    }

    fn add_event(&self, event: &'static str, n: u64) {
        add_cached(&self.events, &event, n, || {
            let labels = EventLabels { stage: self.stage.clone(), event };
            self.families.processor_events.get_or_create_owned(&labels)
        })
    }

    /// Gives every input and output topic a series at 0, so alerts on their rates see
    /// them before the first record (and the counters are cached before the first batch).
    pub fn declare_topics<I: AsRef<str>, O: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = I>,
        outputs: impl IntoIterator<Item = O>,
    ) {
        for topic in inputs {
            self.add_in(topic.as_ref(), 0);
        }
        for topic in outputs {
            self.add_out(topic.as_ref(), 0);
        }
    }

    /// Counts `n` input records read from `topic` (in `records_in` and by topic).
    pub fn count_in(&self, topic: &str, n: u64) {
        self.records_in.fetch_add(n, Ordering::Relaxed);
        self.add_in(topic, n);
    }

    /// Counts `n` output records written to `topic` (in `records_out` and by topic).
    pub fn count_out(&self, topic: &str, n: u64) {
        self.records_out.fetch_add(n, Ordering::Relaxed);
        self.add_out(topic, n);
    }

    /// Counts `n` dead letters of the bounded reason code `reason`.
    pub fn count_dead_letters(&self, reason: &'static str, n: u64) {
        self.dead_lettered.fetch_add(n, Ordering::Relaxed);
        self.add_dead_letters(reason, n);
    }

    /// Counts `ms` milliseconds spent restoring (the resolution the restore is timed at).
    pub fn count_restore_ms(&self, ms: u64) {
        self.restore.inc_by(ms as f64 / 1000.0);
    }

    /// Replaces the per-partition lag with the partitions assigned now: (topic, partition,
    /// lag if it could be measured). A partition left out disappears; one whose lag could
    /// not be measured keeps its last value (or stays absent). `lag` becomes the sum.
    pub fn set_lag(&self, assigned: Vec<(String, i32, Option<u64>)>) {
        self.set_thread_lag(0, assigned);
    }

    /// [`RuntimeStats::set_lag`] for the partitions of one stream thread: the other
    /// threads' partitions keep theirs.
    pub fn set_thread_lag(&self, thread: usize, assigned: Vec<(String, i32, Option<u64>)>) {
        let mut all = lock(&self.lag_by_partition);
        let by_partition = all.entry(thread).or_default();
        let mut next = BTreeMap::new();
        for (topic, partition, lag) in assigned {
            let key = (topic, partition);
            if let Some(lag) = lag.or_else(|| by_partition.get(&key).copied()) {
                next.insert(key, lag);
            }
        }
        *by_partition = next;
        self.lag.store(all.values().flat_map(BTreeMap::values).sum(), Ordering::Relaxed);
    }

    /// Drops the lag of partitions no longer assigned (`assigned(partition)` false), at
    /// once rather than at the next lag refresh.
    pub fn retain_lag(&self, assigned: impl Fn(i32) -> bool) {
        self.retain_thread_lag(0, assigned);
    }

    /// [`RuntimeStats::retain_lag`] for the partitions of one stream thread.
    pub fn retain_thread_lag(&self, thread: usize, assigned: impl Fn(i32) -> bool) {
        let mut all = lock(&self.lag_by_partition);
        if let Some(by_partition) = all.get_mut(&thread) {
            by_partition.retain(|(_, partition), _| assigned(*partition));
        }
        self.lag.store(all.values().flat_map(BTreeMap::values).sum(), Ordering::Relaxed);
    }

    /// Lag per assigned (topic, partition), over every stream thread.
    pub fn lag_by_partition(&self) -> BTreeMap<(String, i32), u64> {
        let all = lock(&self.lag_by_partition);
        all.values().flat_map(|m| m.iter().map(|(k, v)| (k.clone(), *v))).collect()
    }

    /// Sets the task gauges: the lowest stream time and the entries of each store.
    pub fn set_task_gauges(&self, lowest_stream_time_ms: Option<i64>, state_entries: BTreeMap<String, u64>) {
        self.set_thread_task_gauges(0, lowest_stream_time_ms, state_entries);
    }

    /// [`RuntimeStats::set_task_gauges`] for the tasks of one stream thread.
    pub fn set_thread_task_gauges(
        &self,
        thread: usize,
        lowest_stream_time_ms: Option<i64>,
        state_entries: BTreeMap<String, u64>,
    ) {
        let mut all = lock(&self.tasks);
        let tasks = all.entry(thread).or_default();
        tasks.lowest_stream_time_ms = lowest_stream_time_ms;
        tasks.state_entries.values_mut().for_each(|v| *v = 0);
        tasks.state_entries.extend(state_entries);
    }

    /// The task gauges last set, over every stream thread: the lowest stream time of all,
    /// each store's entries summed.
    pub fn task_gauges(&self) -> TaskGauges {
        let all = lock(&self.tasks);
        let mut merged = TaskGauges::default();
        for t in all.values() {
            merged.lowest_stream_time_ms = match (merged.lowest_stream_time_ms, t.lowest_stream_time_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            for (store, n) in &t.state_entries {
                *merged.state_entries.entry(store.clone()).or_default() += n;
            }
        }
        merged
    }

    /// Adds the events of one committed transaction.
    pub fn add_events(&self, counts: BTreeMap<&'static str, u64>) {
        for (event, n) in counts {
            self.add_event(event, n);
        }
    }

    /// Processor events committed so far.
    pub fn events(&self) -> BTreeMap<&'static str, u64> {
        let events = self.events.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        events.iter().map(|(event, c)| (*event, c.get())).collect()
    }
}

/// Records not yet consumed in each assigned partition: (topic, partition, lag, `None`
/// when its high watermark could not be read); `None` when the assignment is unknown. A
/// partition that has delivered nothing since its assignment has no position yet: its
/// committed offset stands in (counting from 0 would report the whole partition as lag).
///
/// High watermarks are asked through `watermarks`, a client of its own: asked through the
/// group consumer, each request queued behind that connection's long-polling fetch (up to
/// `fetch.wait.max.ms`, 500 ms), and a thread with 20 partitions spent 10 s of every 5 s
/// refresh here instead of processing.
pub(crate) fn lag<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    watermarks: &BaseConsumer,
) -> Option<Vec<(String, i32, Option<u64>)>> {
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
            let high = watermarks.fetch_watermarks(&topic, partition, Duration::from_secs(1)).ok();
            let lag = high.map(|(_, high)| u64::try_from(high - o).unwrap_or(0));
            (topic, partition, lag)
        })
        .collect();
    Some(lag)
}
