//! A consumed record on its way into a task: its envelope as admission reads it, admission
//! (waiting for the schema registry) and the admitted record waiting in the task's gate.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use rdkafka::{
    Message,
    message::{BorrowedMessage, Headers},
};
use tokio::runtime::Handle;

use super::stats::RuntimeStats;
use crate::{
    codec::Codec,
    runtime::{
        HEARTBEAT_HEADER,
        admit::{self, Admitted, Envelope, InputRules},
        clock::{Gate, Mark, WRITER_HEADER, Writer},
    },
    telemetry,
};

/// A record taken from the consumer, admitted, waiting in its task's gate.
pub(super) struct Pending<I> {
    pub(super) input: usize,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp_ms: i64,
    pub(super) key: Option<Vec<u8>>,
    pub(super) value: Option<Vec<u8>>,
    /// Forwarded stream time: the heartbeat header and no value (only time, no record).
    pub(super) heartbeat: bool,
    /// What it says about its writer's time: a watcher heartbeat (the header with a value)
    /// promises nothing more of its time.
    pub(super) mark: Mark,
    /// The upstream task that wrote it ([`Writer::SOLE`] without the header).
    pub(super) writer: Writer,
    /// The record's `traceparent` header, kept only when it is valid: forwarded as is when
    /// no span is exported, parsed into the `process` span's parent when one is.
    pub(super) traceparent: Option<String>,
    /// What admission said of it.
    pub(super) admitted: Admitted<I>,
}

/// A message's envelope as admission reads it, with what the gate and spans need.
#[derive(Clone)]
pub(super) struct Read {
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
    pub(super) fn from_message(input: usize, m: &BorrowedMessage<'_>) -> Self {
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

    /// The same record as another input reads it: a global lane of a topic the stage also
    /// reads co-partitioned.
    pub(super) fn as_input(&self, input: usize) -> Self {
        Self { input, ..self.clone() }
    }

    fn envelope<'a>(&'a self, rules: &'a InputRules) -> Envelope<'a> {
        Envelope {
            checked: rules.checked.contains(&self.input).then_some(rules),
            input: self.input,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            timestamp_ms: self.timestamp_ms,
            time_header: self.time_header,
            writer: self.writer,
        }
    }

    /// The record, admitted: what the gate merges it as follows from what admission said.
    pub(super) fn into_pending<I>(self, admitted: Admitted<I>) -> Pending<I> {
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

impl<I: crate::runtime::DecodeInput> Pending<I> {
    /// The record after its lane judged its publisher ([`admit::vet`]): refused, it carries
    /// no time.
    pub(super) fn vetted<T>(mut self, gate: &mut Gate<T>, lane: usize) -> Self {
        let admitted = std::mem::replace(&mut self.admitted, Admitted::Time);
        self.admitted = admit::vet(gate, lane, (self.writer, self.offset), admitted);
        if matches!(self.admitted, Admitted::Reject { .. }) {
            self.mark = Mark::Void;
        }
        self
    }
}

/// What admission said of a record, again for another task: every task that reads a
/// global record gets its own copy (the decoded value is shared where it is an `Arc`).
/// Admission waits retries out, so none reaches here.
pub(super) fn again<I: Clone>(admitted: &Admitted<I>) -> Admitted<I> {
    admitted.again().expect("admission waited for the registry")
}

/// Admits a record, waiting while the schema registry does not answer (the same bytes
/// may decode later: they are never dead-lettered for it). Returns `None` when `stop` is
/// set meanwhile. No transaction is open here; the wait is visible as
/// `kubefacts_runtime_retrying` and on `/readyz`.
pub(super) fn admit_waiting<I: crate::runtime::DecodeInput>(
    codec: &Codec,
    handle: &Handle,
    (read, rules): (&Read, &InputRules),
    stats: &RuntimeStats,
    stop: &AtomicBool,
) -> Option<Admitted<I>> {
    let mut backoff = Duration::from_millis(100);
    let mut waiting = false;
    let admitted = loop {
        match handle.block_on(admit::admit::<I>(codec, read.envelope(rules))) {
            Admitted::Retry(e) => {
                if !waiting {
                    waiting = true;
                    stats.retrying.fetch_add(1, Ordering::Relaxed);
                }
                stats.retries.inc();
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
