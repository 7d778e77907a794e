//! Reading topics as a bystander, for `tail` and `report`: a read_committed consumer that
//! never commits (its group is only there because librdkafka assigns in one), assigned
//! every partition of the topics it reads.

use std::time::Duration;

use anyhow::Context;
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{Consumer, StreamConsumer},
    message::Headers,
};

use kubefacts::{
    brokers::Brokers,
    runtime::{HEARTBEAT_HEADER, kafka::QuietEof},
};

/// A consumer of `brokers` in a group of its own (`kubefacts-<verb>-<pid>-<ns>`) that reads
/// committed records only and commits nothing; with `partition_eof` it reports each
/// partition's last stable offset as it reaches it.
pub(super) fn committed_consumer(
    brokers: &Brokers,
    verb: &str,
    partition_eof: bool,
) -> anyhow::Result<StreamConsumer<QuietEof>> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    brokers
        .client()
        .set("group.id", format!("kubefacts-{verb}-{}-{}", std::process::id(), nanos.as_nanos()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", if partition_eof { "true" } else { "false" })
        .create_with_context(QuietEof)
        .context("creating the Kafka consumer")
}

/// A partition to read, with its watermarks when the reading started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Assigned {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Low watermark (the earliest retained offset).
    pub low: i64,
    /// High watermark.
    pub high: i64,
}

/// The partition ids of `topic`, or `None` when it does not exist on the brokers.
pub(super) fn partitions_of(
    consumer: &StreamConsumer<QuietEof>,
    topic: &str,
    brokers: &Brokers,
) -> anyhow::Result<Option<Vec<i32>>> {
    let metadata =
        tokio::task::block_in_place(|| consumer.fetch_metadata(Some(topic), Duration::from_secs(10)))
            .with_context(|| format!("reading metadata of {topic} from {brokers}"))?;
    let t = metadata.topics().first().context("broker returned no topic metadata")?;
    if t.error().is_some() || t.partitions().is_empty() {
        return Ok(None);
    }
    Ok(Some(t.partitions().iter().map(|p| p.id()).collect()))
}

/// Assigns every partition of `topics` (each `(topic, partitions)`) at `start`, and returns
/// them with their watermarks now.
pub(super) fn assign(
    consumer: &StreamConsumer<QuietEof>,
    topics: &[(String, Vec<i32>)],
    start: Offset,
) -> anyhow::Result<Vec<Assigned>> {
    let mut assignment = TopicPartitionList::new();
    let mut assigned = Vec::new();
    for (topic, partitions) in topics {
        for &p in partitions {
            assignment.add_partition_offset(topic, p, start)?;
            let (low, high) =
                tokio::task::block_in_place(|| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)))
                    .with_context(|| format!("reading the watermarks of {topic}[{p}]"))?;
            assigned.push(Assigned { topic: topic.clone(), partition: p, low, high });
        }
    }
    consumer.assign(&assignment)?;
    Ok(assigned)
}

/// Whether `msg` is forwarded stream time (the heartbeat header and no value): no fact
/// (docs/TOPICS.md).
pub(super) fn is_forwarded_heartbeat(msg: &impl Message) -> bool {
    msg.payload().is_none() && msg.headers().is_some_and(|h| h.iter().any(|h| h.key == HEARTBEAT_HEADER))
}
