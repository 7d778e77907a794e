//! The global-table reader: one consumer per stream thread, outside the group, reads the
//! global inputs of every stage the thread hosts whole and hands each record to every task
//! that still needs it. A global lane of a topic the stage also reads co-partitioned is fed
//! by the thread's own consumer instead, on the partitions the thread owns, from that
//! consumer's position on ([`super::stage`]'s `accept`); the reader only fills what lies
//! before that position, then pauses those partitions.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::atomic::AtomicBool,
    time::Duration,
};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::BorrowedMessage,
};
use tokio::runtime::Handle;

use super::{
    RuntimeError,
    assign::{Lanes, TaskSlot},
    config::ThreadConfig,
    flow::{Part, Paused},
    kafka,
    read::{Read, admit_waiting, again},
    stats::RuntimeStats,
};
use crate::{
    codec::Codec,
    runtime::{admit::InputRules, processor::Processor},
};

/// The thread's one reader of global inputs, shared by its stages: a topic read whole by
/// two stages is fetched once. Its positions live in the tasks' changelogged stores, not in
/// committed offsets; its group id is never joined.
pub(super) struct GlobalReader {
    consumer: BaseConsumer,
    /// Partitions paused because every stage reading them has enough of them buffered (or
    /// is fed them by the thread's own consumer).
    paused: Paused,
    /// Per global topic, the stages (indexes) that read it whole.
    readers: HashMap<String, Vec<usize>>,
    /// The brokers, to name what a refusal refused.
    brokers: crate::brokers::Brokers,
    /// The application's group.
    group: String,
    /// Failed logins while running (a broker restarting).
    reauthentication: crate::brokers::Reauthentication,
}

/// The group the global reader assigns in: `<application_id>-global`.
pub fn global_group(application_group: &str) -> String {
    format!("{application_group}-global")
}

impl GlobalReader {
    /// A reader for the global inputs of the thread's stages (`globals`: per stage, its
    /// global topics); `None` when none has any.
    pub(super) fn new(cfg: &ThreadConfig, globals: &[&[String]]) -> Result<Option<Self>, RuntimeError> {
        let mut readers: HashMap<String, Vec<usize>> = HashMap::new();
        for (s, topics) in globals.iter().enumerate() {
            for topic in *topics {
                readers.entry(topic.clone()).or_default().push(s);
            }
        }
        if readers.is_empty() {
            return Ok(None);
        }
        let mut c = cfg.brokers.client();
        // Assigned, never joined or committed: the group only because librdkafka assigns in
        // one (DESCRIBE on it: docs/security.md).
        c.set("group.id", global_group(&cfg.group_id))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        super::bounded_prefetch(&mut c);
        let consumer: BaseConsumer = c.create().map_err(kafka("creating the global consumer"))?;
        Ok(Some(Self {
            consumer,
            paused: Paused::default(),
            readers,
            brokers: cfg.brokers.clone(),
            group: cfg.group_id.clone(),
            reauthentication: Default::default(),
        }))
    }

    /// Hands up to `max` fetched records to the stages that read their topic whole
    /// (`hand(stage, record)`; `None` from it stops: `stop` was set meanwhile); returns how
    /// many it handed. Kafka refusing the reader (a missing ACL) is the error.
    pub(super) fn take(
        &mut self,
        max: usize,
        mut hand: impl FnMut(usize, &BorrowedMessage<'_>) -> Option<()>,
    ) -> Result<usize, RuntimeError> {
        let mut taken = 0;
        while taken < max {
            match self.consumer.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    taken += 1;
                    for &s in self.readers.get(m.topic()).map(Vec::as_slice).unwrap_or_default() {
                        if hand(s, &m).is_none() {
                            return Ok(taken);
                        }
                    }
                }
                Some(Err(e)) => match self.reauthentication.refusal_code(&e) {
                    Some(code) => {
                        let topics: Vec<String> = self.readers.keys().cloned().collect();
                        let group = global_group(&self.group);
                        let what =
                            crate::brokers::Refusing::reading("reading global inputs", &topics, &group);
                        return Err(self.brokers.refusal(code, what).into());
                    }
                    None => tracing::warn!(error = %e, "global consumer error"),
                },
                None => return Ok(taken),
            }
        }
        Ok(taken)
    }

    /// Points the reader at the earliest position any task of any stage still needs
    /// (`needed`: every stage's tasks' next offsets per global partition), after the tasks
    /// changed (a rebalance, an abort). Nothing stays paused.
    pub(super) fn reposition(
        &mut self,
        needed: impl IntoIterator<Item = (Part, i64)>,
    ) -> Result<(), RuntimeError> {
        self.paused.release(&self.consumer);
        let mut from: BTreeMap<Part, i64> = BTreeMap::new();
        for (part, next) in needed {
            let at = from.entry(part).or_insert(next);
            *at = (*at).min(next);
        }
        if from.is_empty() {
            return self.consumer.unassign().map_err(kafka("unassigning globals"));
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), next) in from {
            tpl.add_partition_offset(&topic, partition, Offset::Offset(next))
                .map_err(kafka("global assignment"))?;
        }
        self.consumer.assign(&tpl).map_err(kafka("global assignment"))
    }

    /// Bounded buffers for the reader: pauses a partition every stage reading it asks to
    /// pause (its lanes full, or fed by the thread's consumer), resumes the rest.
    pub(super) fn pace(&mut self, wants: impl IntoIterator<Item = (Part, bool)>) -> Result<(), RuntimeError> {
        self.paused.set(&self.consumer, agreed(wants)).map_err(kafka("pausing global partitions"))
    }
}

/// The partitions every stage that reads them asks to pause (one that still needs a
/// partition keeps it fetching for all).
fn agreed(wants: impl IntoIterator<Item = (Part, bool)>) -> BTreeSet<Part> {
    let mut all: BTreeMap<Part, bool> = BTreeMap::new();
    for (part, pause) in wants {
        let p = all.entry(part).or_insert(true);
        *p = *p && pause;
    }
    all.into_iter().filter(|(_, p)| *p).map(|(part, _)| part).collect()
}

/// Hands one global record to every task of a stage that has not buffered or processed it
/// yet. `None`: `stop` was set while admission waited for the registry.
///
/// On a partition the thread owns of a topic the stage also reads co-partitioned
/// (`global_of`: per co-partitioned input, its global input), the reader only fills what
/// lies before the thread consumer's position; from there on that consumer feeds the lane
/// (`Stage::feed_global`). A record at or past that position tells the lane it has
/// everything before the position.
pub(super) fn take_global<P: Processor>(
    m: &BorrowedMessage<'_>,
    tasks: &mut BTreeMap<i32, TaskSlot<P>>,
    lanes: &Lanes,
    (global_index, global_of): (&HashMap<&str, usize>, &[Option<usize>]),
    (codec, handle, stats, stop, rules): (&Codec, &Handle, &RuntimeStats, &AtomicBool, &InputRules),
) -> Option<()> {
    let Some(&input) = global_index.get(m.topic()) else { return Some(()) };
    let Some(gl) = lanes.global_lane(input, m.partition()) else { return Some(()) };
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
        return Some(());
    }
    if tasks.values().all(|slot| offset < slot.lane_next[gl]) {
        return Some(());
    }
    // Admitted once for every task that reads it.
    let read = Read::from_message(input, m);
    let admitted = admit_waiting::<P::Input>(codec, handle, (&read, rules), stats, stop)?;
    stats.global_from_reader.inc();
    for slot in tasks.values_mut() {
        if offset >= slot.lane_next[gl] {
            let p = read.clone().into_pending(again(&admitted)).vetted(&mut slot.gate, lanes.inputs + gl);
            slot.gate.push(lanes.inputs + gl, p.writer, (p.timestamp_ms, p.offset), p.mark, p);
            slot.lane_next[gl] = offset + 1;
        }
    }
    Some(())
}

/// Per global lane of a stage: its (topic, partition) and the earliest next offset any of
/// its tasks needs. Empty without tasks.
pub(super) fn global_from<P: Processor>(
    tasks: &BTreeMap<i32, TaskSlot<P>>,
    lanes: &Lanes,
    topics: &[&str],
) -> Vec<(Part, i64)> {
    if tasks.is_empty() {
        return Vec::new();
    }
    (lanes.globals.iter().enumerate())
        .map(|(gl, &(input, partition))| {
            let from = tasks.values().map(|s| s.lane_next[gl]).min().unwrap_or(0);
            ((topics[input].to_owned(), partition), from)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_global_partition_pauses_only_when_every_stage_reading_it_agrees() {
        let p = |t: &str, q| (t.to_owned(), q);
        let wants = [
            (p("leases", 0), true),
            (p("leases", 1), false),
            // Two stages read the jobs whole: one still needs partition 0.
            (p("jobs", 0), true),
            (p("jobs", 0), false),
            (p("jobs", 1), true),
            (p("jobs", 1), true),
        ];
        assert_eq!(agreed(wants), BTreeSet::from([p("leases", 0), p("jobs", 1)]));
    }
}
