//! The Kafka shell around tasks: consume → process → produce outputs, changelog writes,
//! dead letters and input offsets in one transaction (exactly-once, DESIGN §4).
//!
//! An instance runs stream threads ([`run_thread`]), each on a dedicated thread so
//! librdkafka's blocking transaction calls never stall the async runtime; the codec's rare
//! registry look-ups go back to the async runtime through its handle. A thread is one
//! member of the application's one consumer group, subscribed to the inputs of every
//! stage, and hosts the tasks `(stage, partition)` the group assigns it.
//!
//! One iteration: poll a batch (no transaction is open while polling, so a rebalance never
//! lands mid-transaction) and hand each record to every stage that reads its topic; apply
//! revocations (drop the tasks and what they buffered) and assignments (create tasks,
//! restore their stores from the changelogs up to the last stable offset); begin a
//! transaction; feed each task of each stage its records in merge order; produce what they
//! emitted and their store changes; send the consumed offsets with the group's metadata
//! (which fences zombies: a member that left the group cannot commit); commit. Any failure
//! aborts: every task is dropped and restored from its changelog, and the consumer rewinds
//! to the committed offsets, so nothing is half-applied.
//!
//! The parts, by role:
//!
//! * `run`: the stream thread's loop ([`run_thread`]).
//! * `purge`: deletes what the group committed past on the application's repartition
//!   topics, on a thread of its own.
//! * `stage`: one stage's tasks on a thread ([`kafka_stage`]), the processor type erased,
//!   and the processing of one record.
//! * `config`: [`RuntimeConfig`], [`ThreadConfig`] and the test-only [`Failpoint`].
//! * `read`: a consumed record's envelope, its admission and the record waiting in a gate.
//! * `assign`: rebalances, the tasks an assignment creates and their gate lanes.
//! * `restore`: changelog restore.
//! * [`bystander`]: reading topics as a bystander (read_committed, never committing).
//! * `globals`: the stream thread's one reader of every stage's global inputs, handing
//!   each record to the tasks that need it.
//! * `flow`: bounded buffers (pausing what the tasks hold enough of).
//! * `transactions`: the transactional session (begin, commit with the consumed offsets,
//!   abort; the cleaner's too), what it sends.
//! * `stats`: [`RuntimeStats`] and the consumer lag.
//! * `spans`: the `process` and `emit` tracing spans.

mod assign;
pub mod bystander;
mod config;
mod flow;
mod globals;
mod purge;
pub use globals::global_group;
mod read;
mod restore;
mod run;
mod spans;
mod stage;
mod stats;
mod transactions;

use rdkafka::{ClientConfig, error::KafkaError};
use thiserror::Error;

pub(crate) use self::{
    assign::rewind,
    stats::lag,
    transactions::{TxError, TxProducer, TxSession, send},
};
pub use self::{
    config::{Failpoint, FailpointAt, RuntimeConfig, ThreadConfig},
    purge::{PurgeError, check_purge_allowed},
    restore::QuietEof,
    run::run_thread,
    stage::{KafkaStage, kafka_stage},
    stats::{
        EventLabels, OutcomeLabels, ReasonLabels, RuntimeStats, SecondsCounter, SourceLabels, StageFamilies,
        StageLabels, TaskGauges, TopicLabels,
    },
};
use crate::{brokers::Brokers, codec::CodecError};

/// Why the runtime stopped with an error.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A Kafka client could not be created or a call failed for good.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Another instance with the same transactional id took over: this one is a zombie.
    #[error(
        "fenced: another instance with transactional id {transactional_id} is running; stopping ({reason})"
    )]
    Fenced {
        /// The transactional id.
        transactional_id: String,
        /// The producer's error.
        reason: String,
    },
    /// Kafka refused this instance (authentication, a missing ACL): never retried.
    #[error(transparent)]
    Refused(#[from] crate::brokers::Refused),
    /// Output writers could not be set up (schema registration).
    #[error("setting up the output writers: {0}")]
    Codec(#[from] CodecError),
    /// A changelog record could not be applied: the state cannot be trusted.
    #[error("restoring {topic}[{partition}]")]
    Restore {
        /// The changelog topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// What was wrong.
        #[source]
        source: super::store::StoreError,
    },
    /// The topics do not exist with the partition counts the pipeline needs.
    #[error(transparent)]
    Topics(#[from] super::topics::TopicsError),
}

fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> RuntimeError {
    move |source| RuntimeError::Kafka { context, source }
}

/// What a group consumer reading `topics` in `group` does, for naming a refusal.
pub(crate) fn consuming<'a>(topics: &'a [String], group: &'a str) -> crate::brokers::Refusing<'a> {
    crate::brokers::Refusing::reading("consuming", topics, group)
}

fn client_config(cfg: &RuntimeConfig) -> ClientConfig {
    cfg.brokers.client()
}

/// A consumer in `group` that commits only through transactions and reads only committed
/// records, from the earliest offset when the group has none; partitions are assigned by
/// range, so co-partitioned topics land together.
pub(crate) fn group_consumer_config(brokers: &Brokers, group: &str) -> ClientConfig {
    let mut c = brokers.client();
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range");
    bounded_prefetch(&mut c);
    c
}

/// What librdkafka may prefetch ahead of the tasks (the group consumer, the global
/// reader). Its defaults (100 000 records per partition, 64 MiB per consumer) held
/// 130–240 MiB more at the peak over a medium backlog, while a task buffers
/// `buffered_records_per_partition` (1 000) and a transaction takes `max_batch_records`
/// (10 000): a few batches' worth keeps the tasks fed, and the catch-up time did not move
/// (docs/BENCHMARKS.md).
pub(crate) fn bounded_prefetch(c: &mut ClientConfig) {
    c.set("queued.min.messages", "10000").set("queued.max.messages.kbytes", "16384");
}
