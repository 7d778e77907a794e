//! Reading topics as a bystander (`kubefacts tail` and `report`, the testcontainers helper,
//! the tests): a read_committed consumer in a group of its own that never commits (the group
//! is only there because librdkafka assigns in one), assigned every partition it reads.

use std::time::{Duration, Instant};

use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, StreamConsumer},
    error::KafkaError,
    message::Headers,
};
use thiserror::Error;

use super::QuietEof;
use crate::{brokers::Brokers, runtime::HEARTBEAT_HEADER};

/// How long a metadata or watermark request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a topic could not be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BystanderError {
    /// The consumer could not be created.
    #[error("creating the Kafka consumer: {0}")]
    Consumer(#[source] KafkaError),
    /// A request failed: reading metadata or watermarks, assigning, consuming.
    #[error("{what}: {source}")]
    Kafka {
        /// What was being done, naming the topic.
        what: String,
        /// The client's error.
        #[source]
        source: KafkaError,
    },
    /// The topic was not read to its end in time.
    #[error("reading {topic} to its end took over {} s", timeout.as_secs())]
    Timeout {
        /// The topic.
        topic: String,
        /// How long it may take.
        timeout: Duration,
    },
}

/// A consumer of `brokers` in a group of its own (`kubefacts-<verb>-<pid>-<ns>`) that reads
/// committed records only and commits nothing; with `partition_eof` it reports each
/// partition's last stable offset as it reaches it.
pub fn committed_consumer(
    brokers: &Brokers,
    verb: &str,
    partition_eof: bool,
) -> Result<StreamConsumer<QuietEof>, BystanderError> {
    bystander_config(brokers.client(), verb, partition_eof)
        .create_with_context(QuietEof)
        .map_err(BystanderError::Consumer)
}

/// `config` (the connection: bootstrap servers, security) as a bystander's consumer.
fn bystander_config(mut config: ClientConfig, verb: &str, partition_eof: bool) -> ClientConfig {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    config
        .set("group.id", format!("kubefacts-{verb}-{}-{}", std::process::id(), nanos.as_nanos()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", if partition_eof { "true" } else { "false" });
    config
}

/// A partition to read, with its watermarks when the reading started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Low watermark (the earliest retained offset).
    pub low: i64,
    /// High watermark.
    pub high: i64,
}

/// The partition ids of `topic`, or `None` when it does not exist on the brokers. Blocks:
/// call it where blocking is allowed (`block_in_place`, `spawn_blocking`).
pub fn partitions_of<C: Consumer<QuietEof>>(
    consumer: &C,
    topic: &str,
    brokers: &impl std::fmt::Display,
) -> Result<Option<Vec<i32>>, BystanderError> {
    let metadata = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT).map_err(|source| {
        BystanderError::Kafka { what: format!("reading metadata of {topic} from {brokers}"), source }
    })?;
    let Some(t) = metadata.topics().first() else { return Ok(None) };
    if t.error().is_some() || t.partitions().is_empty() {
        return Ok(None);
    }
    Ok(Some(t.partitions().iter().map(|p| p.id()).collect()))
}

/// Assigns every partition of `topics` (each `(topic, partitions)`) at `start`, and returns
/// them with their watermarks now. Blocks, like [`partitions_of`]. A partition whose leader
/// is not known yet (a topic created a moment ago) is asked again, for up to
/// [`SETTLE_TIMEOUT`].
pub fn assign<C: Consumer<QuietEof>>(
    consumer: &C,
    topics: &[(String, Vec<i32>)],
    start: Offset,
) -> Result<Vec<Assigned>, BystanderError> {
    let mut assigned = Vec::new();
    for (topic, partitions) in topics {
        for &p in partitions {
            let (low, high) =
                until_settled(SETTLE_TIMEOUT, || consumer.fetch_watermarks(topic, p, REQUEST_TIMEOUT))
                    .map_err(|source| BystanderError::Kafka {
                        what: format!("reading the watermarks of {topic}[{p}]"),
                        source,
                    })?;
            assigned.push(Assigned { topic: topic.clone(), partition: p, low, high });
        }
    }
    assign_at(consumer, topics, start)?;
    Ok(assigned)
}

/// Assigns every partition of `topics` at `start`; asks the brokers nothing.
fn assign_at<C: Consumer<QuietEof>>(
    consumer: &C,
    topics: &[(String, Vec<i32>)],
    start: Offset,
) -> Result<(), BystanderError> {
    let mut assignment = TopicPartitionList::new();
    for (topic, partitions) in topics {
        for &p in partitions {
            assignment.add_partition_offset(topic, p, start).map_err(|source| BystanderError::Kafka {
                what: format!("assigning {topic}[{p}]"),
                source,
            })?;
        }
    }
    let topic = topics.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(", ");
    consumer
        .assign(&assignment)
        .map_err(|source| BystanderError::Kafka { what: format!("assigning {topic}"), source })
}

/// How long a request that fails because the cluster has not settled (see [`is_unsettled`])
/// is asked again.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// `request`'s answer, asked again every 200 ms while it fails with an error of a cluster
/// that has not settled yet ([`is_unsettled`]), for up to `timeout`; any other error, or
/// the last one, is returned as it is.
fn until_settled<T>(
    timeout: Duration,
    mut request: impl FnMut() -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let deadline = Instant::now() + timeout;
    loop {
        match request() {
            Err(e) if is_unsettled(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            answer => return answer,
        }
    }
}

/// Whether `e` says the cluster has not settled: a partition's leader is not known or has
/// just moved (a topic created a moment ago, a broker restarting), or a broker did not
/// answer. Such a request succeeds when asked again; an authorization error or a
/// missing topic does not.
pub fn is_unsettled(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        e.rdkafka_error_code(),
        Some(
            Code::NotLeaderForPartition
                | Code::LeaderNotAvailable
                | Code::FencedLeaderEpoch
                | Code::UnknownLeaderEpoch
                | Code::NotCoordinator
                | Code::CoordinatorLoadInProgress
                | Code::CoordinatorNotAvailable
                | Code::RequestTimedOut
                | Code::OperationTimedOut
                | Code::BrokerNotAvailable
                | Code::NetworkException
                | Code::BrokerTransportFailure
                | Code::AllBrokersDown
                | Code::OffsetNotAvailable
                | Code::KafkaStorageError
        )
    )
}

/// Whether `msg` is forwarded stream time (the heartbeat header and no value): no fact
/// (docs/TOPICS.md).
pub fn is_forwarded_heartbeat(msg: &impl Message) -> bool {
    msg.payload().is_none() && has_heartbeat_header(msg)
}

fn has_heartbeat_header(msg: &impl Message) -> bool {
    msg.headers().is_some_and(|h| h.iter().any(|h| h.key == HEARTBEAT_HEADER))
}

/// One committed record ([`read_to_end`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value; `None` for a tombstone or forwarded stream time.
    pub value: Option<Vec<u8>>,
    /// Its timestamp, epoch ms.
    pub timestamp_ms: Option<i64>,
    /// It carries the heartbeat header (with a value: a record that also moves time).
    pub heartbeat_header: bool,
}

impl CommittedRecord {
    /// Forwarded stream time (the header and no value, [`is_forwarded_heartbeat`]): no fact.
    pub fn is_forwarded_heartbeat(&self) -> bool {
        self.heartbeat_header && self.value.is_none()
    }
}

/// Every committed record of `topic` up to each partition's last stable offset now,
/// partition by partition in offset order, or `None` when the topic does not exist; `client`
/// is the connection (bootstrap servers, security: [`Brokers::client`]). Blocks (a
/// `BaseConsumer`), so it runs on any async runtime through `spawn_blocking`; fails after
/// `timeout`.
pub fn read_to_end(
    client: ClientConfig,
    verb: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Option<Vec<CommittedRecord>>, BystanderError> {
    let bootstrap = client.get("bootstrap.servers").unwrap_or_default().to_owned();
    let consumer: BaseConsumer<QuietEof> = bystander_config(client, verb, true)
        .create_with_context(QuietEof)
        .map_err(BystanderError::Consumer)?;
    let Some(partitions) = partitions_of(&consumer, topic, &bootstrap)? else { return Ok(None) };
    let mut pending: std::collections::BTreeSet<i32> = partitions.iter().copied().collect();
    // No watermarks: the partition ends say where the committed records end.
    assign_at(&consumer, &[(topic.to_owned(), partitions)], Offset::Beginning)?;
    let (mut out, deadline) = (Vec::new(), Instant::now() + timeout);
    let mut unsettled = None;
    while !pending.is_empty() {
        if Instant::now() > deadline {
            return Err(match unsettled {
                // What kept it from its end is more use than the time it took.
                Some(source) => BystanderError::Kafka { what: format!("reading {topic}"), source },
                None => BystanderError::Timeout { topic: topic.to_owned(), timeout },
            });
        }
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => out.push(CommittedRecord {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                timestamp_ms: m.timestamp().to_millis(),
                heartbeat_header: has_heartbeat_header(&m),
            }),
            // At the last stable offset: everything committed so far is read.
            Some(Err(KafkaError::PartitionEOF(p))) => {
                pending.remove(&p);
            }
            // librdkafka recovers from these itself (it refreshes the leader, reconnects).
            Some(Err(e)) if is_unsettled(&e) => unsettled = Some(e),
            Some(Err(source)) => {
                return Err(BystanderError::Kafka { what: format!("reading {topic}"), source });
            }
            None => {}
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use rdkafka::types::RDKafkaErrorCode as Code;

    use super::*;

    #[test]
    fn a_partition_without_a_leader_yet_is_asked_again_until_it_answers() {
        let asked = Cell::new(0);
        let answer = until_settled(Duration::from_secs(5), || {
            asked.set(asked.get() + 1);
            match asked.get() {
                1 => Err(KafkaError::MetadataFetch(Code::NotLeaderForPartition)),
                2 => Err(KafkaError::MetadataFetch(Code::LeaderNotAvailable)),
                _ => Ok((0, 7)),
            }
        });
        assert_eq!(answer.unwrap(), (0, 7));
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn an_error_asking_again_cannot_mend_is_returned_at_once() {
        let asked = Cell::new(0);
        let answer: Result<(), _> = until_settled(Duration::from_secs(5), || {
            asked.set(asked.get() + 1);
            Err(KafkaError::MetadataFetch(Code::TopicAuthorizationFailed))
        });
        assert_eq!(answer.unwrap_err().rdkafka_error_code(), Some(Code::TopicAuthorizationFailed));
        assert_eq!(asked.get(), 1);
    }

    #[test]
    fn an_unsettled_cluster_is_given_up_on_after_the_timeout_with_its_last_error() {
        let started = Instant::now();
        let answer: Result<(), _> = until_settled(Duration::from_millis(500), || {
            Err(KafkaError::MetadataFetch(Code::NotLeaderForPartition))
        });
        assert_eq!(answer.unwrap_err().rdkafka_error_code(), Some(Code::NotLeaderForPartition));
        assert!(started.elapsed() >= Duration::from_millis(500), "{:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }

    #[test]
    fn leaders_moving_and_brokers_away_are_unsettled_denials_and_missing_topics_are_not() {
        for code in [Code::NotLeaderForPartition, Code::LeaderNotAvailable, Code::BrokerTransportFailure] {
            assert!(is_unsettled(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
        for code in
            [Code::TopicAuthorizationFailed, Code::UnknownTopicOrPartition, Code::GroupAuthorizationFailed]
        {
            assert!(!is_unsettled(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
    }
}
