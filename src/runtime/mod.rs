//! The processor runtime (DESIGN §4), modelled on Kafka Streams.
//!
//! A **processor** is a pure state machine: it receives a decoded record, the record's
//! metadata and the task's stream time, updates its state stores and emits output records;
//! it is called again whenever stream time advances (windows, sweeps). It does no I/O, reads
//! no clock and draws no random numbers, so the same input log always yields the same
//! outputs — in the Kafka runtime and in the in-memory driver alike.
//!
//! * [`processor`]: the [`Processor`] trait, record metadata, [`Outputs`].
//! * [`store`]: state stores whose changes go to compacted changelog topics.
//! * [`epoch`]: the snapshot-epoch rule (who a relist did not re-list), and the store of
//!   objects it applies to.
//! * [`task`]: one processor instance per partition, with its stream time.
//! * [`step`]: what a released record does to its task, for both shells.
//! * [`clock`]: who wrote each record, and the merge of a task's inputs that releases a
//!   record only once no input (and no upstream task) can still deliver an earlier one.
//! * [`driver`]: the in-memory driver (no broker) used by `replay`, `demo` and tests.
//! * [`partitioner`]: Kafka's Java murmur2 partitioner, bit for bit.
//! * [`topics`]: topic creation and the co-partitioning check.
//! * [`deadletter`]: the dead-letter record.
//! * [`probe`]: a trivial counting processor for the runtime's own tests and benchmark.

pub mod admit;
pub mod clock;
pub mod deadletter;
pub mod driver;
pub mod epoch;
pub mod kafka;
pub mod partitioner;
pub mod probe;
pub mod processor;
pub mod step;
pub mod store;
pub mod task;
pub mod topics;

#[cfg(test)]
mod tests;

pub use clock::{Gate, Mark, WRITER_HEADER, Writer};
pub use deadletter::Reason;
pub use epoch::{EpochTable, Epoched};
pub use processor::{
    DecodeInput, Event, MAX_LINKS, OutputPort, OutputRecord, Outputs, Port, ProcessError, Processor,
    Publisher, RecordMeta, Stamp,
};
pub use store::{KvStore, StateStore, StoreError};
pub use task::{Task, WriteLimits};

/// Stream time: epoch milliseconds taken from record timestamps in the log, never from a
/// clock (DESIGN §3).
pub type StreamTime = i64;

/// Header that marks a record carrying only stream time (a forwarded heartbeat): its value
/// is null and its timestamp is the stream time of the stage that wrote it.
pub const HEARTBEAT_HEADER: &str = "kubefacts-heartbeat";
/// Key of forwarded heartbeats (compacted topics need a key; a null value deletes nothing).
pub const HEARTBEAT_KEY: &[u8] = b"kubefacts.heartbeat";
