//! [`RuntimeStats`]: the counters and gauges of one instance, and the consumer lag they
//! report.

use std::{
    collections::BTreeMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rdkafka::{
    Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
};

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
