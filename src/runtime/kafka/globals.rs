//! The global-table reader: one consumer outside the group reads global inputs whole and
//! hands each record to every task that still needs it. A global lane of a topic the
//! stage also reads co-partitioned is fed by the thread's own consumer instead, on the
//! partitions the thread owns, once the lane has caught up with it
//! ([`super::stage`]'s `accept`); the reader then pauses those partitions.

use std::{
    collections::{BTreeMap, HashMap},
    sync::atomic::AtomicBool,
    time::Duration,
};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
};
use tokio::runtime::Handle;

use super::{
    RuntimeError,
    assign::{Lanes, TaskSlot},
    kafka,
    read::{Read, admit_waiting, again},
    stats::RuntimeStats,
};
use crate::{codec::Codec, runtime::processor::Processor};

/// Hands global records to every task that has not buffered or processed them yet.
///
/// On a partition the thread owns of a topic the stage also reads co-partitioned
/// (`global_of`: per co-partitioned input, its global input), the reader only fills what
/// lies before the thread consumer's position; from there on that consumer feeds the lane
/// (`Stage::feed_global`). A record at or past that position tells the lane it has
/// everything before the position.
pub(super) fn take_globals<P: Processor>(
    consumer: &BaseConsumer,
    tasks: &mut BTreeMap<i32, TaskSlot<P>>,
    lanes: &Lanes,
    (global_index, global_of): (&HashMap<&str, usize>, &[Option<usize>]),
    max: usize,
    (codec, handle, stats, stop): (&Codec, &Handle, &RuntimeStats, &AtomicBool),
) -> usize {
    let mut taken = 0;
    while taken < max {
        match consumer.poll(Duration::ZERO) {
            Some(Ok(m)) => {
                let Some(&input) = global_index.get(m.topic()) else { continue };
                let Some(gl) = lanes.global_lane(input, m.partition()) else { continue };
                let offset = m.offset();
                // Where the thread's consumer stands on this partition, if it owns it.
                let group = (global_of.iter().position(|g| *g == Some(input)))
                    .and_then(|i| Some(tasks.get(&m.partition())?.group_next(i)));
                if let Some(at) = group.filter(|at| offset >= *at) {
                    for slot in tasks.values_mut() {
                        if slot.lane_next[gl] <= offset {
                            slot.lane_next[gl] = slot.lane_next[gl].max(at);
                        }
                    }
                    continue;
                }
                if tasks.values().all(|slot| offset < slot.lane_next[gl]) {
                    continue;
                }
                // Admitted once for every task that reads it.
                let read = Read::from_message(input, &m);
                let Some(admitted) = admit_waiting::<P::Input>(codec, handle, &read, stats, stop) else {
                    break;
                };
                stats.global_from_reader.inc();
                for slot in tasks.values_mut() {
                    if offset >= slot.lane_next[gl] {
                        let p = read.clone().into_pending(again(&admitted));
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
pub(super) fn reposition_globals<P: Processor>(
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
