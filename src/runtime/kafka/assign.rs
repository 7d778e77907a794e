//! Assignments and rebalances: the rebalance log the consumer's callbacks fill, the tasks an
//! assignment creates (restored from their changelogs) and drops, and their gate lanes.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, atomic::Ordering},
    time::{Duration, Instant},
};

use rdkafka::{
    ClientContext, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
    error::KafkaError,
};

use super::{
    RuntimeError, config::RuntimeConfig, kafka, read::Pending, restore::restore, stats::RuntimeStats,
};
use crate::{
    codec::{Codec, CodecError, RecordWriter},
    runtime::{
        clock::{Gate, Writer},
        processor::{Outputs, Processor},
        task::{Task, WriteLimits},
    },
};

/// Rebalance events, recorded by the consumer's callbacks (which run inside `poll`) and
/// applied by the loop between transactions.
#[derive(Default, Clone)]
pub(super) struct RebalanceLog {
    events: Arc<Mutex<Vec<RebalanceEvent>>>,
}

/// One rebalance callback's partitions, as (topic, partition).
pub(super) enum RebalanceEvent {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

impl RebalanceLog {
    /// The events recorded since the last call, in order.
    pub(super) fn take(&self) -> Vec<RebalanceEvent> {
        std::mem::take(&mut *self.events.lock().expect("rebalance log"))
    }
}

impl ClientContext for RebalanceLog {}

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

pub(super) struct TaskSlot<P: Processor> {
    pub(super) task: Task<P>,
    /// The task's lanes, merged (docs/RUNTIME.md, "Stream time").
    pub(super) gate: Gate<Pending<P::Input>>,
    /// Per co-partitioned input: the offset after the last record read from it (`None`
    /// before the first); what is committed when nothing of it is buffered.
    pub(super) read_next: Vec<Option<i64>>,
    /// Next offset to buffer per global lane (global records reach every task; a task
    /// skips what it already has or already processed).
    pub(super) lane_next: Vec<i64>,
    /// Per co-partitioned input: the offset last committed (`None`: not by this task).
    pub(super) committed: Vec<Option<i64>>,
    /// Per co-partitioned input: the committed offset the thread's consumer started from
    /// (0 without one: it reads from the earliest).
    pub(super) group_from: Vec<i64>,
}

impl<P: Processor> TaskSlot<P> {
    /// Where the thread's consumer stands on co-partitioned input `input`: every record
    /// before it has been read (none lies between the last one read and it).
    pub(super) fn group_next(&self, input: usize) -> i64 {
        self.read_next[input].unwrap_or(self.group_from[input])
    }

    /// What to commit per co-partitioned input: the lowest offset still buffered (a
    /// multi-writer partition is released out of offset order; its writers' positions in
    /// the task's stream-time store say what above it was processed), else the consumer's
    /// position — past what was read, records read again after a restore and dropped, and
    /// the transaction markers a stage's output topic holds (committing only past the last
    /// record would leave the lag at one marker forever).
    pub(super) fn commit_offsets(&self, position: impl Fn(usize) -> Option<i64>) -> Vec<Option<i64>> {
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
    pub(super) fn has_work(&self, position: impl Fn(usize) -> Option<i64>) -> bool {
        self.gate.ready(self.task.stream_time()) || self.commit_offsets(position) != self.committed
    }
}

/// The lanes of a task's gate: one per co-partitioned input, then one per partition of
/// each global input.
#[derive(Debug, Clone)]
pub(super) struct Lanes {
    pub(super) inputs: usize,
    /// (input index, partition) of each global lane, in lane order.
    pub(super) globals: Vec<(usize, i32)>,
    /// Whether each lane is timed (untimed: a co-partitioned input declared so).
    pub(super) timed: Vec<bool>,
    /// Whether each lane is checked against the heartbeats that follow its records.
    pub(super) checked: Vec<bool>,
}

impl Lanes {
    pub(super) fn global_lane(&self, input: usize, partition: i32) -> Option<usize> {
        self.globals.iter().position(|&(i, p)| i == input && p == partition)
    }
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
) -> Result<TopicPartitionList, RuntimeError> {
    if partitions.is_empty() {
        return Ok(TopicPartitionList::new());
    }
    let mut tpl = TopicPartitionList::new();
    for topic in &cfg.inputs {
        for &p in partitions {
            tpl.add_partition(topic, p);
        }
    }
    // The broker aborts a transaction after its timeout, so this wait is bounded by it.
    // A coordinator that moves meanwhile adds its own wait: another 30 s.
    let timeout = Duration::from_millis(cfg.transaction_timeout_ms.saturating_mul(2) + 60_000);
    let started = Instant::now();
    let committed = retrying_coordinator_moves(timeout, |left| consumer.committed_offsets(tpl.clone(), left))
        .map_err(kafka("waiting for stable committed offsets"))?;
    let waited_ms = started.elapsed().as_millis() as u64;
    if waited_ms > 1_000 {
        tracing::info!(?partitions, waited_ms, "waited for a pending transaction of the previous owner");
    }
    Ok(committed)
}

/// Longest single offset fetch of [`retrying_coordinator_moves`]: a fetch that timed out is
/// asked again, from scratch, until the caller's deadline.
const OFFSET_FETCH_TRY: Duration = Duration::from_secs(15);

/// Calls `fetch` (an offset fetch given its time, at most [`OFFSET_FETCH_TRY`]) until it
/// succeeds, fails otherwise than by the group coordinator moving, a broker being down or
/// a timeout, or `timeout` passes.
///
/// librdkafka hands an offset fetch's `NOT_COORDINATOR` back instead of asking the new
/// coordinator, and one fetch can wait out its whole timeout on a coordinator that went
/// away: broker restarts stopped instances with both in the broker-failure test.
fn retrying_coordinator_moves<T>(
    timeout: Duration,
    mut fetch: impl FnMut(Duration) -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    use rdkafka::types::RDKafkaErrorCode as C;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match fetch(left.clamp(Duration::from_millis(100), OFFSET_FETCH_TRY)) {
            Err(e)
                if Instant::now() < deadline
                    && e.rdkafka_error_code().is_some_and(|c| {
                        matches!(
                            c,
                            C::NotCoordinator
                                | C::CoordinatorNotAvailable
                                | C::CoordinatorLoadInProgress
                                | C::BrokerTransportFailure
                                | C::AllBrokersDown
                                | C::NetworkException
                                | C::RequestTimedOut
                                | C::OperationTimedOut
                        )
                    }) =>
            {
                tracing::warn!(error = %e, "fetching committed offsets: the coordinator moved or is down; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Moves every assigned partition back to its committed offset (after an abort): what was
/// polled but not committed is read again. `err` names the failing step (the runtime and
/// the cleaner each wrap Kafka errors their own way). Returns the committed offsets.
pub(crate) fn rewind<C: ConsumerContext, E>(
    consumer: &BaseConsumer<C>,
    err: impl Fn(&'static str, KafkaError) -> E,
) -> Result<TopicPartitionList, E> {
    let committed = retrying_coordinator_moves(Duration::from_secs(30), |left| consumer.committed(left))
        .map_err(|e| err("reading committed offsets", e))?;
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        consumer
            .seek(e.topic(), e.partition(), offset, Duration::from_secs(30))
            .map_err(|e| err("rewinding", e))?;
    }
    Ok(committed)
}

/// Everything needed to create tasks: built once per instance, so creating tasks after a
/// rebalance or an abort is one call.
pub(super) struct TaskFactory<'a, F, W> {
    pub(super) cfg: &'a RuntimeConfig,
    pub(super) codec: &'a Codec,
    pub(super) stats: &'a RuntimeStats,
    pub(super) make: F,
    /// Builds one set of output writers (registers schemas when a registry is used).
    pub(super) writers: W,
    /// Key writers per port (for ports keyed by Avro records), copied into each task.
    pub(super) key_writers: Vec<Option<RecordWriter>>,
    pub(super) output_partitions: Vec<i32>,
    /// Output ports that carry the tasks' stream time, with their periods.
    pub(super) forward: Vec<(usize, i64)>,
    /// The largest records the tasks' transactions can write.
    pub(super) limits: WriteLimits,
    pub(super) lanes: Lanes,
    /// Writers of a dropped task, reused by the next one created.
    pub(super) spare: Option<Vec<RecordWriter>>,
    /// Inputs the stream thread shares with another stage: their positions are
    /// changelogged ([`Task::tracking`]).
    pub(super) tracked: Vec<usize>,
}

impl<F, W> TaskFactory<'_, F, W>
where
    W: Fn(&Codec) -> Result<Vec<RecordWriter>, CodecError>,
{
    /// Drops a task, keeping its writers for the next one.
    pub(super) fn recycle<P: Processor>(&mut self, slot: TaskSlot<P>) {
        self.spare = Some(slot.task.into_writers());
    }

    /// Drops the tasks of the revoked partitions of this stage's inputs; true if any.
    pub(super) fn revoke<P: Processor>(
        &mut self,
        parts: &[(String, i32)],
        tasks: &mut BTreeMap<i32, TaskSlot<P>>,
    ) -> bool {
        let mut changed = false;
        for (_, partition) in parts.iter().filter(|(t, _)| self.cfg.inputs.contains(t)) {
            if let Some(slot) = tasks.remove(partition) {
                tracing::info!(stage = %self.cfg.processor, partition, "task revoked");
                self.recycle(slot);
                changed = true;
            }
        }
        changed
    }

    /// Creates (and restores) the tasks of the assigned partitions of this stage's
    /// inputs; true if any.
    pub(super) fn assign<P: Processor>(
        &mut self,
        consumer: &BaseConsumer<RebalanceLog>,
        parts: &[(String, i32)],
        tasks: &mut BTreeMap<i32, TaskSlot<P>>,
    ) -> Result<bool, RuntimeError>
    where
        F: FnMut(i32) -> P,
    {
        let mut partitions: Vec<i32> = (parts.iter())
            .filter(|(t, p)| self.cfg.inputs.contains(t) && !tasks.contains_key(p))
            .map(|(_, p)| *p)
            .collect();
        partitions.sort_unstable();
        partitions.dedup();
        if partitions.is_empty() {
            return Ok(false);
        }
        let committed = wait_for_stable_offsets(consumer, self.cfg, &partitions)?;
        tasks.extend(self.create(&partitions, &committed)?);
        Ok(true)
    }

    /// Tasks for `partitions`, their stores restored from their changelogs (one restore
    /// consumer for all of them: its start-up, not the records, dominates small restores).
    pub(super) fn create<P: Processor>(
        &mut self,
        partitions: &[i32],
        committed: &TopicPartitionList,
    ) -> Result<Vec<(i32, TaskSlot<P>)>, RuntimeError>
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
            let mut task = Task::new(partition, (self.make)(partition), out)
                .forwarding(self.forward.iter().copied())
                .limiting(self.limits.clone());
            if !lanes.globals.is_empty() {
                task = task.with_globals(lanes.inputs);
            }
            if !self.tracked.is_empty() {
                task = task.tracking(self.tracked.iter().copied());
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
        stats.count_restore_ms(ms);
        tracing::info!(?partitions, restored = applied, ms, "tasks assigned and restored");
        Ok(tasks
            .into_iter()
            .map(|task| {
                let lane_next =
                    lanes.globals.iter().map(|&(input, q)| task.global_position(input, q)).collect();
                let mut gate = Gate::new(lanes.timed.iter().copied()).checking(
                    lanes.checked.iter().copied(),
                    (cfg.rules.max_ahead_ms, cfg.rules.max_behind_ms),
                );
                // Multi-writer lanes go on where the restored state stands (their partitions
                // are processed out of offset order: the committed offset is not enough).
                for p in task.lane_positions() {
                    gate.resume(p.input, p.writer, p.next_offset, p.bound);
                }
                // Checked lanes judge their next records against the last heartbeat taken.
                let lane_of = |input: usize, q: i32| match input.checked_sub(lanes.inputs) {
                    None => Some(input),
                    Some(_) => lanes.global_lane(input, q).map(|gl| lanes.inputs + gl),
                };
                for (input, q, at) in task.lane_heartbeats() {
                    if let Some(lane) = lane_of(input, q) {
                        gate.resume_heartbeat(lane, Writer::SOLE, at);
                    }
                }
                // … and their next publishers against the last one they accepted.
                for (input, q, publisher) in task.lane_publishers() {
                    if let Some(lane) = lane_of(input, q) {
                        gate.resume_publisher(lane, Writer::SOLE, publisher);
                    }
                }
                let partition = task.partition();
                let group_from = (cfg.inputs.iter())
                    .map(|topic| match committed.find_partition(topic, partition).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => 0,
                    })
                    .collect();
                let (read_next, committed) = (vec![None; lanes.inputs], vec![None; lanes.inputs]);
                let slot = TaskSlot { task, gate, read_next, lane_next, committed, group_from };
                (slot.task.partition(), slot)
            })
            .collect())
    }
}

/// Publishes the tasks' lowest stream time and their stores' entries (once per
/// transaction and rebalance: walking the stores per record would cost too much).
pub(super) fn set_task_gauges<P: Processor>(
    stats: &RuntimeStats,
    thread: usize,
    tasks: &mut BTreeMap<i32, TaskSlot<P>>,
) {
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
    stats.set_thread_task_gauges(thread, lowest, entries);
}

#[cfg(test)]
mod tests {
    use rdkafka::types::RDKafkaErrorCode as C;

    use super::*;

    #[test]
    fn an_offset_fetch_is_retried_while_the_coordinator_moves() {
        let mut calls = 0;
        let got = retrying_coordinator_moves(Duration::from_secs(5), |_| {
            calls += 1;
            if calls < 3 { Err(KafkaError::MetadataFetch(C::NotCoordinator)) } else { Ok(calls) }
        });
        assert_eq!(got.unwrap(), 3);
    }

    #[test]
    fn a_timed_out_offset_fetch_is_asked_again_in_tries_of_bounded_length() {
        let mut tries = Vec::new();
        let got = retrying_coordinator_moves(Duration::from_secs(120), |given| {
            tries.push(given);
            if tries.len() < 2 { Err(KafkaError::MetadataFetch(C::OperationTimedOut)) } else { Ok(()) }
        });
        assert!(got.is_ok());
        assert_eq!(tries.len(), 2);
        assert!(tries.iter().all(|t| *t <= OFFSET_FETCH_TRY), "{tries:?}");
    }

    #[test]
    fn any_other_failure_of_an_offset_fetch_is_returned_at_once() {
        let mut calls = 0;
        let got: Result<(), _> = retrying_coordinator_moves(Duration::from_secs(5), |_| {
            calls += 1;
            Err(KafkaError::MetadataFetch(C::GroupAuthorizationFailed))
        });
        assert!(got.is_err());
        assert_eq!(calls, 1);
    }
}
