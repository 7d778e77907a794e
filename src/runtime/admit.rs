//! What the runtime checks of every input record before it enters a task's merge: the
//! envelope (timestamp, heartbeat header, key, value), the bytes (decoded once, here) and
//! the topic's contract (an event that makes sense for the topic, its object, its key).
//! Both drivers admit the same way, so a record is refused for the same reason on Kafka
//! and in memory, and a refused record enters the merge carrying no time
//! ([`super::Mark::Void`]): it cannot hold its lane back or move stream time.

use super::{
    HEARTBEAT_KEY, clock::Writer, deadletter::Reason, processor::DecodeInput, processor::ProcessError,
};

use crate::codec::{Codec, CodecError};

/// How a stage admits its inputs, by input index (co-partitioned inputs, then globals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRules {
    /// Inputs whose records are judged by the heartbeats that follow them (source topics
    /// the watcher heartbeats; [`super::Gate::checking`]).
    pub checked: Vec<usize>,
    /// Inputs whose dead letters are written elsewhere: by an earlier stage reading the
    /// same topic, or by this stage's co-partitioned read of a topic it also reads whole.
    /// A record is dead-lettered once, by the stage that owns its input.
    pub dead_lettered_elsewhere: Vec<usize>,
    /// How far ahead of the heartbeat after it a record of a checked input may be, ms.
    pub max_ahead_ms: i64,
}

impl Default for InputRules {
    /// Nothing checked, every dead letter written here.
    fn default() -> Self {
        Self { checked: Vec::new(), dead_lettered_elsewhere: Vec::new(), max_ahead_ms: i64::MAX }
    }
}

impl InputRules {
    /// Whether task `task` of `tasks` writes the dead letter of a record of `input`,
    /// partition `partition`: never for an input dead-lettered elsewhere; for a global
    /// input (`global`), which every task reads, only the task `partition % tasks`.
    pub fn writes_dead_letter(
        &self,
        input: usize,
        global: bool,
        partition: i32,
        task: i32,
        tasks: i32,
    ) -> bool {
        if self.dead_lettered_elsewhere.contains(&input) {
            return false;
        }
        !global || partition.rem_euclid(tasks.max(1)) == task
    }
}

/// A record as the runtime reads it, before decoding.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    /// Input index (co-partitioned inputs, then globals).
    pub input: usize,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// Value bytes.
    pub value: Option<&'a [u8]>,
    /// Its timestamp, epoch ms; `None` when the record has none.
    pub timestamp_ms: Option<i64>,
    /// Whether it carries the heartbeat header.
    pub time_header: bool,
    /// Its writer header: absent (`Some(SOLE)` is assumed by the caller), valid, or present
    /// and not `<task>/<tasks>` (`None`).
    pub writer: Option<Writer>,
}

/// What admission says of a record.
#[derive(Debug)]
pub enum Admitted<I> {
    /// A record its processor may use.
    Use(I),
    /// Forwarded stream time (the heartbeat header, the heartbeat key, no value).
    Time,
    /// A record nothing can use: dead-letter it with this reason.
    Reject {
        /// Bounded reason code.
        reason: &'static str,
        /// What was wrong, for people.
        detail: String,
    },
    /// It cannot be judged now (the schema registry is unreachable): admit it again later,
    /// and nothing after it on its lane before it.
    Retry(CodecError),
}

impl<I> Admitted<I> {
    fn reject(reason: Reason, detail: impl Into<String>) -> Self {
        Self::Reject { reason: reason.as_str(), detail: detail.into() }
    }
}

impl<I: Clone> Admitted<I> {
    /// The same verdict for another lane or task that reads the same bytes, without
    /// decoding them again. `None` for [`Admitted::Retry`]: that record is admitted again.
    pub fn again(&self) -> Option<Self> {
        Some(match self {
            Self::Use(i) => Self::Use(i.clone()),
            Self::Time => Self::Time,
            Self::Reject { reason, detail } => Self::Reject { reason, detail: detail.clone() },
            Self::Retry(_) => return None,
        })
    }
}

/// Admits one record of a stage whose inputs decode as `I`.
pub async fn admit<I: DecodeInput>(codec: &Codec, env: Envelope<'_>) -> Admitted<I> {
    match env.timestamp_ms {
        None => return Admitted::reject(Reason::TimestampOutOfRange, "the record has no timestamp"),
        Some(ts) if ts < 0 => {
            return Admitted::reject(
                Reason::TimestampOutOfRange,
                format!("timestamp {ts} ms is before the Unix epoch"),
            );
        }
        Some(_) => {}
    }
    let Some(_) = env.writer else {
        return Admitted::reject(
            Reason::BadWriterHeader,
            "a kubefacts-writer header that is not <task>/<tasks>",
        );
    };
    let Some(value) = env.value else {
        if !env.time_header {
            return Admitted::reject(Reason::NullValue, "a record with a null value and no heartbeat header");
        }
        if env.key != Some(HEARTBEAT_KEY) {
            return Admitted::reject(
                Reason::BadHeartbeat,
                format!("a forwarded heartbeat must be keyed {:?}", String::from_utf8_lossy(HEARTBEAT_KEY)),
            );
        }
        return Admitted::Time;
    };
    let decoded = match I::decode(env.input, codec, value).await {
        Ok(d) => d,
        Err(e) if e.is_retriable() => return Admitted::Retry(e),
        Err(e) => return Admitted::Reject { reason: e.reason(), detail: e.to_string() },
    };
    match decoded.check(env.key, env.time_header) {
        Ok(()) => Admitted::Use(decoded),
        Err(ProcessError { reason, detail }) => Admitted::reject(reason, detail),
    }
}
