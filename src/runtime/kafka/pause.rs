//! Bounded buffers: a partition whose task has buffered `buffered_records_per_partition` of
//! its records is paused at the consumer until the task has worked them off, as Kafka
//! Streams does with `buffered.records.per.partition`. Over a backlog, a fast input then
//! waits at the broker instead of in memory while its task's merge waits for a slower one.
//!
//! A lane the merge may still need is never paused (`Gate::needs`): one whose records wait
//! for the heartbeat behind them, or one whose other writer holds the next release back.
//! Pausing it could stall the task; every other lane only waits for what the task waits
//! for anyway.

use std::collections::{BTreeMap, BTreeSet};

use rdkafka::{
    TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
};

use super::assign::{Lanes, TaskSlot};
use crate::runtime::processor::Processor;

/// What is paused, and the limit.
#[derive(Debug)]
pub(super) struct Pauses {
    limit: usize,
    /// (co-partitioned input index, partition) paused on the group consumer.
    group: BTreeSet<(usize, i32)>,
    /// Global lanes paused on the global reader (index into [`Lanes::globals`]).
    globals: BTreeSet<usize>,
}

impl Pauses {
    pub(super) fn new(limit: usize) -> Self {
        Self { limit: limit.max(1), group: BTreeSet::new(), globals: BTreeSet::new() }
    }

    /// Partitions paused now, both consumers.
    pub(super) fn len(&self) -> usize {
        self.group.len() + self.globals.len()
    }

    /// After a record of `input` was buffered by `slot` (the task of `partition`): pauses
    /// the partition once the task holds enough of it.
    pub(super) fn after_push<P: Processor, C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        topic: &str,
        (input, partition): (usize, i32),
        slot: &TaskSlot<P>,
    ) {
        if slot.gate.lane_len(input) < self.limit
            || self.group.contains(&(input, partition))
            || slot.gate.needs(input, slot.task.stream_time())
        {
            return;
        }
        if set_paused(consumer, topic, partition, true) {
            self.group.insert((input, partition));
        }
    }

    /// Once per round: resumes what the tasks have worked off (or now need), pauses global
    /// lanes every task has enough of. Cheap: a few counters per task and lane.
    pub(super) fn review<P: Processor, C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        global_consumer: &BaseConsumer,
        tasks: &BTreeMap<i32, TaskSlot<P>>,
        lanes: &Lanes,
        topics: &[&str],
    ) {
        let limit = self.limit;
        self.group.retain(|&(input, partition)| {
            let keep = tasks.get(&partition).is_some_and(|slot| {
                slot.gate.lane_len(input) >= limit && !slot.gate.needs(input, slot.task.stream_time())
            });
            if !keep {
                // Refused only when no longer assigned: then it is not paused either.
                set_paused(consumer, topics[input], partition, false);
            }
            keep
        });
        for (gl, &(input, partition)) in lanes.globals.iter().enumerate() {
            let lane = lanes.inputs + gl;
            let full = !tasks.is_empty()
                && tasks.values().any(|s| s.gate.lane_len(lane) >= limit)
                && !tasks.values().any(|s| s.gate.needs(lane, s.task.stream_time()));
            if full != self.globals.contains(&gl)
                && set_paused(global_consumer, topics[input], partition, full)
            {
                if full {
                    self.globals.insert(gl);
                } else {
                    self.globals.remove(&gl);
                }
            }
        }
    }

    /// The global reader was given a new assignment (which starts unpaused).
    pub(super) fn globals_reassigned(&mut self) {
        self.globals.clear();
    }

    /// The group's assignment changed or the tasks were rebuilt: resume everything (a
    /// partition assigned again must not stay paused for a task that no longer buffers it).
    pub(super) fn reset<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>, topics: &[&str]) {
        for (input, partition) in std::mem::take(&mut self.group) {
            set_paused(consumer, topics[input], partition, false);
        }
    }
}

/// Pauses or resumes one partition; false when the consumer refused (not assigned).
fn set_paused<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    pause: bool,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let done = if pause { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
    match done {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(topic, partition, pause, error = %e, "could not pause or resume");
            false
        }
    }
}
