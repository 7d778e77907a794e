//! Bounded buffers: a partition whose task already buffers `buffered_records_per_partition`
//! of its records is paused at the consumer until the task has drained below that (Kafka
//! Streams' `buffered.records.per.partition`), so memory stays bounded over a backlog and a
//! fast partition never crowds a slow one out of the consumer's queue.
//!
//! One exception keeps the merge live: a partition some task waits for (its gate's head is
//! held back by a sub-lane of it, docs/RUNTIME.md "Stream time") is never paused, however
//! much of it is buffered. Its records are interleaved with the ones that would release the
//! head (several writers share a partition), so pausing it could wait forever.

use std::collections::BTreeSet;

use rdkafka::{
    TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    error::KafkaError,
};

use crate::runtime::clock::Gate;

/// A (topic, partition) of a consumer.
pub(super) type Part = (String, i32);

/// What a consumer's tasks ask of it: the partitions buffered up to the limit, and those a
/// task waits for.
#[derive(Debug, Default)]
pub(super) struct Pressure {
    full: BTreeSet<Part>,
    needed: BTreeSet<Part>,
}

impl Pressure {
    /// Notes one task's gate: each lane at or over `limit` records is full, each lane that
    /// holds the gate's head back is needed. `part` names a lane's partition (`None`: a lane
    /// this consumer does not read).
    pub(super) fn note<T>(
        &mut self,
        gate: &Gate<T>,
        stream_time: Option<i64>,
        limit: usize,
        part: impl Fn(usize) -> Option<Part>,
    ) {
        if let Some((_, holding)) = gate.waiting(stream_time) {
            self.needed.extend(holding.iter().filter_map(|&(lane, _, _)| part(lane)));
        }
        for lane in 0..gate.lanes() {
            // Held records waiting for their heartbeat fill a buffer too (a relist before
            // the first heartbeat); paused, the heartbeat never came (docs/RUNTIME.md).
            if gate.awaits_heartbeat(lane)
                && let Some(p) = part(lane)
            {
                self.needed.insert(p);
            }
            if gate.lane_len(lane) >= limit
                && let Some(p) = part(lane)
            {
                self.full.insert(p);
            }
        }
    }

    /// The partitions to pause: full and needed by no task.
    pub(super) fn to_pause(&self) -> BTreeSet<Part> {
        self.full.difference(&self.needed).cloned().collect()
    }
}

/// What each partition has given one fill, against its share: twice an even split of
/// the batch over the thread's partitions, at least `buffered_records_per_partition`.
#[derive(Debug)]
pub(super) struct FillShares {
    share: usize,
    given: Vec<(Part, usize)>, // a few dozen partitions at most: a scan beats hashing
}

impl FillShares {
    pub(super) fn new(
        buffered_records_per_partition: usize,
        max_batch_records: usize,
        assigned: usize,
    ) -> Self {
        let even = max_batch_records.div_ceil(assigned.max(1));
        Self { share: buffered_records_per_partition.max(2 * even), given: Vec::new() }
    }

    /// Counts one record of `(topic, partition)`; the partition when it has just given its
    /// share (the caller pauses it for the rest of the fill).
    pub(super) fn note(&mut self, topic: &str, partition: i32) -> Option<Part> {
        let at = match self.given.iter().position(|((t, p), _)| *p == partition && t == topic) {
            Some(at) => at,
            None => {
                self.given.push(((topic.to_owned(), partition), 0));
                self.given.len() - 1
            }
        };
        let (part, n) = &mut self.given[at];
        *n += 1;
        (*n == self.share).then(|| part.clone())
    }
}

/// The partitions this runtime paused on one consumer.
#[derive(Debug, Default)]
pub(super) struct Paused(BTreeSet<Part>);

impl Paused {
    /// Pauses what `want` adds and resumes what it leaves out. A resumed partition fetches
    /// again from the consumer's position; what librdkafka had prefetched of it when it was
    /// paused is fetched again.
    pub(super) fn set<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        want: BTreeSet<Part>,
    ) -> Result<(), KafkaError> {
        let pause: Vec<&Part> = want.difference(&self.0).collect();
        let resume: Vec<&Part> = self.0.difference(&want).collect();
        if !pause.is_empty() {
            consumer.pause(&list(pause.iter().copied()))?;
            tracing::debug!(partitions = ?pause, "paused: their tasks buffer enough of them");
        }
        if !resume.is_empty() {
            consumer.resume(&list(resume.iter().copied()))?;
            tracing::debug!(partitions = ?resume, "resumed");
        }
        self.0 = want;
        Ok(())
    }

    /// Pauses one more partition (it gave a fill its share); the next [`Paused::set`]
    /// resumes it unless its task still holds enough of it.
    pub(super) fn add<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        part: Part,
    ) -> Result<(), KafkaError> {
        if !self.0.contains(&part) {
            consumer.pause(&list(std::iter::once(&part)))?;
            self.0.insert(part);
        }
        Ok(())
    }

    /// Resumes everything paused, before the consumer's assignment or positions change (a
    /// rebalance, a rewind, a new global assignment): those then start from a known state.
    pub(super) fn release<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>) {
        if self.0.is_empty() {
            return;
        }
        let all = std::mem::take(&mut self.0);
        // A partition no longer assigned cannot be resumed, nor needs to be.
        if let Err(e) = consumer.resume(&list(all.iter())) {
            tracing::debug!(error = %e, "resuming paused partitions");
        }
    }
}

fn list<'p>(parts: impl Iterator<Item = &'p Part>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in parts {
        tpl.add_partition(topic, *partition);
    }
    tpl
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::clock::{Mark, Writer};

    fn part(topics: &'static [&'static str]) -> impl Fn(usize) -> Option<Part> {
        move |lane| topics.get(lane).map(|t| ((*t).to_owned(), 0))
    }

    #[test]
    fn a_partition_sits_out_a_fill_once_it_gave_twice_its_share() {
        // 10 000 records over 4 partitions: 2 500 each is even, 5 000 is the share.
        let mut fill = FillShares::new(1_000, 10_000, 4);
        for _ in 0..4_999 {
            assert_eq!(fill.note("pods", 0), None);
            assert_eq!(fill.note("jobs", 0), None);
        }
        assert_eq!(fill.note("pods", 0), Some(("pods".to_owned(), 0)));
        assert_eq!(fill.note("pods", 0), None, "told once");
        assert_eq!(fill.note("jobs", 1), None, "counted per partition");
        // Many partitions: never below the buffer limit.
        let mut wide = FillShares::new(1_000, 10_000, 40);
        assert!((0..999).all(|_| wide.note("pods", 0).is_none()));
        assert!(wide.note("pods", 0).is_some());
    }

    #[test]
    fn a_full_lane_pauses_unless_a_task_waits_for_it() {
        // Lane 0 ("jobs") ran ahead; lane 1 ("pods") has shown nothing, so the head waits
        // for it: jobs is full and paused, pods is needed and keeps fetching.
        let mut g = Gate::new([true, true]);
        for off in 0..3 {
            g.push(0, Writer::SOLE, (100 + off, off), Mark::Record, ());
        }
        let mut p = Pressure::default();
        p.note(&g, None, 3, part(&["jobs", "pods"]));
        assert_eq!(p.to_pause(), BTreeSet::from([("jobs".to_owned(), 0)]));
        // Below the limit nothing pauses.
        let mut p = Pressure::default();
        p.note(&g, None, 4, part(&["jobs", "pods"]));
        assert!(p.to_pause().is_empty());
    }

    #[test]
    fn a_full_lane_of_records_held_for_a_heartbeat_keeps_fetching() {
        // A checked lane: three records and no heartbeat after them yet. The merge sees
        // nothing (no head), so no task "waits" for the lane, yet only its next heartbeat
        // can release them: pausing it would wait forever.
        let mut g = Gate::new([true, true]).checking([true, false], (0, i64::MAX));
        for off in 0..3 {
            g.push(0, Writer::SOLE, (100 + off, off), Mark::Record, ());
        }
        assert!(g.waiting(None).is_none(), "nothing shown to the merge");
        let mut p = Pressure::default();
        p.note(&g, None, 3, part(&["jobs", "pods"]));
        assert!(p.to_pause().is_empty(), "{p:?}");
        // Its heartbeats came (the first is judged by the one after it): the records show,
        // and a full lane pauses again.
        g.push(0, Writer::SOLE, (103, 3), Mark::Through, ());
        assert!(g.awaits_heartbeat(0), "a first heartbeat waits for the next");
        g.push(0, Writer::SOLE, (104, 4), Mark::Through, ());
        assert!(!g.awaits_heartbeat(0));
        let mut p = Pressure::default();
        p.note(&g, None, 3, part(&["jobs", "pods"]));
        assert_eq!(p.to_pause(), BTreeSet::from([("jobs".to_owned(), 0)]));
    }

    #[test]
    fn a_full_lane_whose_other_writer_holds_the_head_keeps_fetching() {
        // One lane, two upstream writers on one partition: writer 0 filled the buffer,
        // writer 1 is not heard from yet. Its records come after writer 0's in the same
        // partition, so pausing the partition would wait forever.
        let mut g = Gate::new([true]);
        for off in 0..5 {
            g.push(0, Writer { task: 0, tasks: 2 }, (100 + off, off), Mark::Record, ());
        }
        let mut p = Pressure::default();
        p.note(&g, None, 3, part(&["runs"]));
        assert!(p.to_pause().is_empty(), "{p:?}");
        // Another task that only buffers it (and waits for nothing of it) does not pause it
        // either: one task waiting is enough.
        let mut ahead = Gate::new([true, true]);
        for off in 0..5 {
            ahead.push(0, Writer::SOLE, (100 + off, off), Mark::Record, ());
        }
        p.note(&ahead, None, 3, part(&["runs", "other"]));
        assert!(p.to_pause().is_empty(), "{p:?}");
    }
}
