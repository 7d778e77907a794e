//! The cleaner's Kafka plumbing: rebalance tracking, polling a batch, the transaction's
//! sends and commit, rewinding to the committed offsets.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use rdkafka::{
    ClientConfig, ClientContext, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, ConsumerContext, Rebalance},
    error::KafkaError,
};

use super::run::{Batch, CleanerError, CleanerRun, Output, Pending};
use crate::{
    brokers::Reauthentication,
    runtime::{
        HEARTBEAT_HEADER,
        kafka::{self, TxError, TxProducer, TxSession, consuming},
    },
};

/// Partitions of the decisions topic revoked by a rebalance, recorded by the consumer's
/// callback (which runs inside `poll`) and applied to the batch being filled.
#[derive(Default, Clone)]
pub(super) struct Revocations(Arc<Mutex<Vec<i32>>>);

impl ClientContext for Revocations {}

impl ConsumerContext for Revocations {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let mut revoked = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            revoked.extend(tpl.elements().iter().map(|e| e.partition()));
        }
    }
}

impl Revocations {
    fn take(&self) -> Vec<i32> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Polls up to `max` decisions: waits up to 100 ms for the first, then takes what is
/// already fetched. Rebalance callbacks run inside `poll`, before it returns a record of the
/// new assignment: after each poll, records of partitions revoked meanwhile are dropped
/// from the batch first (their next owner reads them from the committed offset), then the
/// polled record is added.
/// Kafka refusing the consumer (a missing ACL) ends the cleaner.
pub(super) fn poll_batch(
    consumer: &BaseConsumer<Revocations>,
    revocations: &Revocations,
    run: &CleanerRun,
    reauthentication: &mut Reauthentication,
    max: usize,
) -> Result<Vec<Pending>, CleanerError> {
    let mut batch: Vec<Pending> = Vec::new();
    let mut wait = Duration::from_millis(100);
    while batch.len() < max {
        let polled = consumer.poll(wait);
        let revoked = revocations.take();
        if !revoked.is_empty() {
            batch.retain(|p| !revoked.contains(&p.partition));
        }
        match polled {
            Some(Ok(m)) => {
                let heartbeat = m
                    .headers()
                    .is_some_and(|h| rdkafka::message::Headers::iter(h).any(|h| h.key == HEARTBEAT_HEADER));
                batch.push(Pending {
                    partition: m.partition(),
                    offset: m.offset(),
                    timestamp_ms: m.timestamp().to_millis(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    heartbeat,
                });
                wait = Duration::ZERO;
            }
            Some(Err(e)) => {
                if let Some(code) = reauthentication.refusal_code(&e) {
                    let topics = [run.decisions.clone()];
                    return Err(run.brokers.refusal(code, consuming(&topics, &run.group_id())).into());
                }
                tracing::warn!(error = %e, "consumer error");
                break;
            }
            None => break,
        }
    }
    Ok(batch)
}

/// Writes the batch's records and offsets in one transaction and commits it.
pub(super) fn commit(
    session: &TxSession,
    consumer: &BaseConsumer<Revocations>,
    run: &CleanerRun,
    batch: &Batch,
) -> Result<(), CleanerError> {
    session.begin()?;
    let kafka_err = |context| move |source| CleanerError::Kafka { context, source };
    for out in &batch.outputs {
        let topic = if out.topic_is_outcomes { &run.outcomes } else { &run.dead_letter };
        send(session.producer(), topic, out).map_err(kafka_err("sending"))?;
    }
    let mut tpl = TopicPartitionList::new();
    for (&partition, &next) in &batch.offsets {
        tpl.add_partition_offset(&run.decisions, partition, Offset::Offset(next))
            .map_err(kafka_err("listing the offsets"))?;
    }
    session.commit(consumer, &tpl, None, 0).map_err(|e| session.judge(e, "commit").into())
}

impl From<TxError> for CleanerError {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Fenced { transactional_id, reason } => CleanerError::Fenced { transactional_id, reason },
            TxError::Refused(r) => CleanerError::Refused(r),
            TxError::Kafka { context, source } => CleanerError::Kafka { context, source },
        }
    }
}

/// Queues one output record (the runtime's send: it waits while librdkafka's queue is full).
pub(super) fn send(producer: &TxProducer, topic: &str, out: &Output) -> Result<(), KafkaError> {
    kafka::send(producer, topic, out.partition, out.key.as_deref(), Some(&out.value), out.timestamp_ms, None)
}

pub(super) fn client_config(run: &CleanerRun) -> ClientConfig {
    run.brokers.client()
}
