//! Stream time across tasks: who wrote each record, and the merge of a task's lanes that
//! releases a record only once no lane can still deliver an earlier one.
//!
//! A task reads **lanes**: its partition of each co-partitioned input, and every partition
//! of each global input. A lane of a source topic has one writer (the watcher, a host
//! application). A lane of a topic another stage writes has one writer per task of that
//! stage, interleaved on the partition in the order their transactions committed, so the
//! partition is not in timestamp order and its highest timestamp says nothing about the
//! slower writers. Each output record of a stage therefore names its writer in the
//! [`WRITER_HEADER`] header (`<task>/<tasks>`), and the gate keeps one **sub-lane** per
//! (lane, writer). Within a sub-lane timestamps do not decrease (a writer emits in its own
//! stream-time order), so a sub-lane that has shown timestamp `t` will deliver nothing
//! earlier.
//!
//! The gate releases the buffered head with the smallest `(timestamp, lane, writer)` once
//! every sub-lane that could still deliver something smaller has shown that it will not:
//! every expected writer of every timed lane must be heard from, and an empty sub-lane
//! blocks while its highest timestamp sorts before the candidate. The order released is then
//! the merge of the complete sub-lanes, whatever order fetches and commits brought them in —
//! the same on Kafka as in memory, where every sub-lane is complete from the start. A
//! task's stream time (the highest timestamp released) is at most the minimum over its
//! lanes, and over each lane's writers, of the time each has reached: the watermark.
//!
//! An **untimed** lane (an input whose producers send no stream time) never holds the
//! others back: its records are released in order with everything else once the timed
//! lanes allow it, and an empty untimed lane blocks nothing.
//!
//! **Time cannot be poisoned.** A record that the runtime could not use ([`Mark::Void`]:
//! undecodable, invalid for its topic) carries no time: it sorts at its writer's time so
//! far and moves no bound, so a wrong timestamp on a bad record neither holds its lane back
//! nor lets it jump. On a **checked** lane (a source topic the watcher heartbeats) a record
//! may be at most `max_ahead_ms` ahead of the heartbeat that follows it — what the watcher
//! stamps before a heartbeat was observed before it. A record within that bound of the
//! lane's last heartbeat goes at once; one beyond it is held, with everything after it on
//! its lane, until a heartbeat judges it: one no more than `max_ahead_ms` ahead of the
//! heartbeat after it (or within the bound of the last) is accepted, and every record held
//! before it that is further ahead of it is released as [`Verdict::Ahead`] — carrying no
//! time, for the runtime to dead-letter. After an outage the first records are far ahead
//! of the last heartbeat and simply wait for the watcher's next two heartbeats.
//!
//! A writer may send its stream time **out of band** (`sequence`): each record names its
//! [`Sequence`] on its partition, and the writer's [`Beat`]s travel on a progress channel;
//! the gate puts each sub-lane back in the order the writer wrote it before merging.
//!
//! The parts: `writer` ([`Writer`] and its header), `sequence` (records and beats of an
//! out-of-band writer), `gate` (the merge: [`Gate`], with the
//! [`Mark`] a record is pushed with and the [`Verdict`] it is released with) and `lane` (the
//! records the gate buffers per lane and writer).

mod gate;
mod lane;
mod mark;
mod sequence;
mod writer;

#[cfg(test)]
mod tests;

pub use self::{
    gate::{BEAT_OFFSET, Gate, HeadKey, Holding, Released},
    mark::{Claim, Mark, Verdict},
    sequence::{Beat, SEQUENCE_HEADER, Sequence, Stamper},
    writer::{WRITER_HEADER, Writer},
};
