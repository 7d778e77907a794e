//! The per-record step, once for both shells: a record the task's gate released, as
//! admission and the gate judged it, goes to the task — processed, counted as time only,
//! or refused — and comes back as the dead letter to write, if any. The Kafka shell
//! (`kafka::run`) and the in-memory driver (`driver`) both call [`step`], so the two runs
//! of a stage cannot drift apart record by record.

use super::{
    admit::Admitted,
    clock::{Verdict, Writer},
    deadletter::{DeadLetter, Reason, Source},
    processor::{DecodeInput as _, Processor, RecordMeta, Stamp},
    task::Task,
};

/// A released record: where it sits, its bytes, and what admission and the gate said.
#[derive(Debug)]
pub struct Released<'a, I> {
    /// Input index.
    pub input: usize,
    /// Its topic (named in a dead letter).
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Record timestamp, epoch ms.
    pub timestamp_ms: i64,
    /// The upstream task that wrote it.
    pub writer: Writer,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// Value bytes (kept whole in a dead letter).
    pub value: Option<&'a [u8]>,
    /// The trace context its outputs carry.
    pub traceparent: Option<&'a str>,
    /// What admission made of it.
    pub admitted: Admitted<I>,
    /// What the gate made of its time.
    pub verdict: Verdict,
    /// A watcher heartbeat on a lane checked against heartbeats: the task remembers it.
    pub checked_beat: bool,
    /// Whether its lane is checked: the publisher of a heartbeat or marker on it is
    /// remembered ([`Task::note_publisher`]).
    pub checked: bool,
    /// Whether this task writes the record's dead letter when admission or the gate
    /// refused it ([`super::admit::InputRules::writes_dead_letter`]); a processor's own
    /// refusal is always written by the task that met it.
    pub letters: bool,
}

/// A dead letter to write and its bounded reason code.
#[derive(Debug)]
pub struct Refused {
    /// The reason code (a metrics label).
    pub reason: &'static str,
    /// The dead letter.
    pub letter: DeadLetter,
}

/// Hands one released record to its task; returns the dead letter this task writes for
/// it, if any. `processor` names the stage in dead letters.
pub fn step<P: Processor>(
    processor: &str,
    task: &mut Task<P>,
    rec: Released<'_, P::Input>,
) -> Option<Refused> {
    let meta = RecordMeta {
        input: rec.input,
        partition: rec.partition,
        offset: rec.offset,
        timestamp_ms: rec.timestamp_ms,
        writer: rec.writer,
        key: rec.key.map(<[u8]>::to_vec),
        traceparent: rec.traceparent.map(str::to_owned),
    };
    let source = Source {
        topic: rec.topic,
        partition: rec.partition,
        offset: rec.offset,
        timestamp_ms: Some(rec.timestamp_ms),
        key: rec.key,
        value: rec.value,
        processor,
        stream_time: task.stream_time(),
    };
    if rec.verdict == Verdict::Use
        && let Admitted::Use(decoded) = &rec.admitted
    {
        if rec.checked_beat {
            task.note_heartbeat(rec.input, rec.partition, rec.timestamp_ms);
        }
        if rec.checked
            && let Some(Stamp { publisher: Some(p), .. }) = decoded.stamp()
        {
            task.note_publisher(rec.input, rec.partition, p.claim());
        }
    }
    let ((reason, letter), own) = match (rec.verdict, rec.admitted) {
        (Verdict::Ahead, _) => {
            task.skip(&meta);
            ((Reason::TimestampAhead.as_str(), DeadLetter::ahead(source)), false)
        }
        (Verdict::Behind, _) => {
            task.skip(&meta);
            ((Reason::TimestampBehind.as_str(), DeadLetter::behind(source)), false)
        }
        (_, Admitted::Time) => {
            task.advance(&meta);
            return None;
        }
        (_, Admitted::Reject { reason, detail }) => {
            task.undecodable(&meta);
            ((reason, DeadLetter::new(source, reason, detail)), false)
        }
        (_, Admitted::Retry(e)) => {
            // Never released: both shells wait for (or stop at) an unreachable registry.
            // Kept total all the same.
            task.skip(&meta);
            ((e.reason(), DeadLetter::undecodable(source, &e)), false)
        }
        (_, Admitted::Use(decoded)) => match task.process(decoded, &meta) {
            Ok(()) => return None,
            Err(e) => ((e.reason.as_str(), DeadLetter::new(source, e.reason.as_str(), e.detail)), true),
        },
    };
    (own || rec.letters).then_some(Refused { reason, letter })
}
