//! Transactions: the transactional producer, how its errors are judged, the records it
//! sends and the commit of a transaction with the consumed offsets.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::{Header, OwnedHeaders},
    producer::{BaseRecord, Producer, ThreadedProducer},
};

use super::{
    RuntimeError,
    assign::RebalanceLog,
    config::{Failpoint, FailpointAt, RuntimeConfig},
};
use crate::{
    runtime::{
        HEARTBEAT_HEADER, clock::WRITER_HEADER, partitioner::partition_for_key, processor::OutputRecord,
    },
    telemetry,
};

/// A transactional, idempotent producer (not initialised yet).
pub(crate) fn transactional_producer(
    bootstrap: &str,
    transactional_id: &str,
    transaction_timeout_ms: u64,
) -> Result<ThreadedProducer<rdkafka::producer::DefaultProducerContext>, KafkaError> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", transaction_timeout_ms.to_string())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
}

/// Whether a transactional producer's error is fatal (it must be recreated).
pub(crate) fn is_fatal(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(t) => t.is_fatal(),
        _ => false,
    }
}

/// Whether a transactional producer was fenced (another instance with its transactional id
/// started) or failed fatally: either way it is done.
pub(crate) fn is_fenced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::Fenced | rdkafka::types::RDKafkaErrorCode::ProducerFenced)
    ) || is_fatal(e)
}

pub(super) fn fenced_or(e: KafkaError, transactional_id: &str, context: &'static str) -> RuntimeError {
    if is_fenced(&e) {
        RuntimeError::Fenced { transactional_id: transactional_id.to_owned() }
    } else {
        RuntimeError::Kafka { context, source: e }
    }
}

/// Produces one output record of the task `writer` (its [`WRITER_HEADER`] value).
pub(super) fn produce_output(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    cfg: &RuntimeConfig,
    output_partitions: &[i32],
    out: OutputRecord,
    writer: &str,
    traceparent: Option<&str>,
) -> Result<(), KafkaError> {
    let topic = &cfg.outputs[out.port];
    let partition = out.partition.unwrap_or_else(|| partition_for_key(&out.key, output_partitions[out.port]));
    let (key, value) = (Some(&out.key[..]), out.value.as_deref());
    let headers = headers(out.heartbeat, Some(writer), traceparent);
    send(producer, topic, partition, key, value, out.timestamp_ms, headers)
}

/// The headers of a produced record: the heartbeat marker, the writing task and the trace
/// context, each when given.
pub(super) fn headers(
    heartbeat: bool,
    writer: Option<&str>,
    traceparent: Option<&str>,
) -> Option<OwnedHeaders> {
    if !heartbeat && writer.is_none() && traceparent.is_none() {
        return None;
    }
    let mut headers = OwnedHeaders::new_with_capacity(3);
    if heartbeat {
        headers = headers.insert(Header { key: HEARTBEAT_HEADER, value: Some("1") });
    }
    if let Some(w) = writer {
        headers = headers.insert(Header { key: WRITER_HEADER, value: Some(w) });
    }
    if let Some(tp) = traceparent {
        headers = headers.insert(Header { key: telemetry::TRACEPARENT, value: Some(tp) });
    }
    Some(headers)
}

/// Queues one record, waiting while librdkafka's queue is full.
pub(crate) fn send(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: &str,
    partition: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    timestamp_ms: i64,
    headers: Option<OwnedHeaders>,
) -> Result<(), KafkaError> {
    let mut record: BaseRecord<'_, [u8], [u8]> =
        BaseRecord::to(topic).partition(partition).timestamp(timestamp_ms);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    if let Some(h) = headers {
        record = record.headers(h);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

pub(super) fn commit(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    consumer: &BaseConsumer<RebalanceLog>,
    cfg: &RuntimeConfig,
    inputs: &[&str],
    offsets: &BTreeMap<(usize, i32), i64>,
    transaction: u64,
) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (&(input, partition), &next) in offsets {
        tpl.add_partition_offset(inputs[input], partition, Offset::Offset(next))?;
    }
    let group =
        consumer.group_metadata().ok_or(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::State))?;
    let timeout = Duration::from_millis(cfg.transaction_timeout_ms);
    // Wait for the batch's deliveries first. Sent at once, AddOffsetsToTxn collides with the
    // transaction's AddPartitionsToTxn (CONCURRENT_TRANSACTIONS, retried after
    // retry.backoff.ms = 100 ms), and rust-rdkafka's commit_transaction flush polls in
    // 100 ms steps while anything is in flight: ~100 ms lost per transaction either way
    // (docs/RUNTIME.md, "Runtime benchmark"). Exactly-once is unchanged: the commit waits
    // for the same deliveries.
    let deadline = Instant::now() + timeout;
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    Failpoint::pause_if(cfg.failpoint, FailpointAt::BeforeOffsets, transaction);
    producer.send_offsets_to_transaction(&tpl, &group, timeout)?;
    Failpoint::pause_if(cfg.failpoint, FailpointAt::BeforeCommit, transaction);
    producer.commit_transaction(timeout)
}
