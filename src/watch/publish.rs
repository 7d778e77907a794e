//! The publishing end of the watcher: observations to their input topics.
//!
//! Keyed records go to the Java-compatible murmur2 partition of their key (DESIGN §2), so a
//! Java or Python producer of the same key lands on the same partition; keyless records
//! (snapshot markers, heartbeats) go to every partition, so every task of every processor
//! sees them. The producer is idempotent with `acks=all`: a retried send is never
//! duplicated or reordered within a partition. Record timestamps are the observation
//! times: stream time downstream comes from them (DESIGN §3).

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use rdkafka::{
    Message,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::{Header, OwnedHeaders},
    producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer},
};
use thiserror::Error;

use crate::{
    brokers::{Brokers, describe_refused, refusal_code},
    codec::{Codec, CodecError, RecordWriter},
    observe::topics::TopicsConfig,
    observe::{InputTopic, Observation},
    runtime::{HEARTBEAT_HEADER, partitioner::placement},
    telemetry,
};

/// Most sends awaiting their delivery report before `publish` waits for the oldest.
const MAX_IN_FLIGHT: usize = 10_000;

/// Why publishing failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PublishError {
    /// A Kafka client call failed.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Kafka refused a write to an input topic (a missing ACL).
    #[error(
        "kafka refused write on topic {topic} ({code}); docs/security.md lists the ACLs of each component"
    )]
    Refused {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: rdkafka::types::RDKafkaErrorCode,
    },
    /// An input topic does not exist (the watcher never creates topics implicitly).
    #[error("topic {topic} does not exist; create it (or run `kubefacts publish --create-topics`)")]
    MissingTopic {
        /// The topic.
        topic: String,
    },
    /// A record could not be encoded, or a writer could not be set up.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> PublishError {
    move |source| PublishError::Kafka { context, source }
}

/// What has been published so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PublishCounts {
    /// Kafka records written (a marker or heartbeat counts once per partition).
    pub records: u64,
    /// Bytes of record values written.
    pub value_bytes: u64,
    /// Records the broker acknowledged.
    pub acked: u64,
    /// Sum of send-to-acknowledgement latencies, in microseconds.
    pub ack_latency_us: u64,
    /// Observations skipped as larger than the producer's limit
    /// ([`crate::observe::MAX_OBSERVATION_BYTES`]).
    pub oversized: u64,
}

struct TopicOut {
    name: String,
    partitions: i32,
    writer: RecordWriter,
}

/// Publishes observations to the input topics named in a [`TopicsConfig`].
pub struct Publisher {
    producer: FutureProducer,
    topics: Vec<(InputTopic, TopicOut)>,
    in_flight: VecDeque<(Instant, DeliveryFuture)>,
    counts: PublishCounts,
    /// `(partition, offset)` of every acknowledged record, in send order, when tracked.
    deliveries: Option<Vec<(i32, i64)>>,
    /// Where `publish` spans go; `None` (no exporter) creates none.
    tracer: Option<opentelemetry::global::BoxedTracer>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("counts", &self.counts).finish_non_exhaustive()
    }
}

impl Publisher {
    /// Connects to `brokers`, reads the partition counts of every input topic (all must
    /// exist) and prepares a writer per topic (registering schemas when `codec` has a
    /// registry).
    pub async fn connect(
        brokers: &Brokers,
        codec: &Codec,
        topics: &TopicsConfig,
    ) -> Result<Self, PublishError> {
        Self::connect_to(brokers, codec, topics, &InputTopic::ALL).await
    }

    /// [`Publisher::connect`] for the input topics `only` (a host application's tool
    /// publishing sessions needs `sessions.v1` alone); publishing to another topic panics.
    pub async fn connect_to(
        brokers: &Brokers,
        codec: &Codec,
        topics: &TopicsConfig,
        only: &[InputTopic],
    ) -> Result<Self, PublishError> {
        let producer: FutureProducer = brokers
            .client()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("compression.type", "lz4")
            .create()
            .map_err(kafka("creating the producer"))?;
        let metadata_client: BaseConsumer = brokers.client().create().map_err(kafka("metadata client"))?;
        let metadata =
            tokio::task::block_in_place(|| metadata_client.fetch_metadata(None, Duration::from_secs(30)))
                .map_err(kafka("reading topic metadata"))?;
        let mut out = Vec::new();
        for &topic in only {
            let name = topic.topic_name(topics);
            let partitions = metadata
                .topics()
                .iter()
                .find(|t| t.name() == name && t.error().is_none())
                .map(|t| t.partitions().len() as i32)
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    if describe_refused(metadata_client.client(), &name) {
                        PublishError::Refused {
                            topic: name.clone(),
                            code: rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed,
                        }
                    } else {
                        PublishError::MissingTopic { topic: name.clone() }
                    }
                })?;
            let writer = codec.value_writer(&name, topic.full_name()).await?;
            out.push((topic, TopicOut { name, partitions, writer }));
        }
        Ok(Self {
            producer,
            topics: out,
            in_flight: VecDeque::new(),
            counts: PublishCounts::default(),
            deliveries: None,
            tracer: telemetry::tracer(),
        })
    }

    /// Records the `(partition, offset)` of every acknowledged record from now on, for
    /// [`Publisher::take_deliveries`] (for a tool that reports where each record went; the
    /// watcher does not keep them).
    pub fn track_deliveries(mut self) -> Self {
        self.deliveries = Some(Vec::new());
        self
    }

    /// The `(partition, offset)` of the records acknowledged since the last call, in send
    /// order (a keyless record once per partition); empty unless tracked.
    pub fn take_deliveries(&mut self) -> Vec<(i32, i64)> {
        self.deliveries.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// What has been published so far.
    pub fn counts(&self) -> &PublishCounts {
        &self.counts
    }

    /// Queues one observation: to its key's partition, or to every partition when keyless.
    /// Returns once librdkafka holds it; [`Publisher::flush`] waits for the broker.
    pub async fn publish(&mut self, obs: &Observation) -> Result<(), PublishError> {
        let (_, out) = self.topics.iter().find(|(t, _)| *t == obs.topic).expect("a writer per input topic");
        let value = obs.record.encode(&out.writer)?;
        // Never a record the producer refuses (and retries forever): counted, logged, skipped.
        if !crate::observe::fits(obs.topic, obs.key.as_deref(), &value) {
            self.counts.oversized += 1;
            return Ok(());
        }
        let timestamp = obs.record.observed_at();
        let heartbeat = obs.record.event() == crate::observe::ObservationEvent::Heartbeat;
        for partition in placement(obs.key.as_deref().map(str::as_bytes), out.partitions) {
            let mut record: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(&out.name).partition(partition).timestamp(timestamp).payload(&value);
            if let Some(key) = &obs.key {
                record = record.key(key.as_bytes());
            }
            // A heartbeat says nothing observed at or before its time follows here: the
            // header lets a task's merge rely on it without decoding (docs/RUNTIME.md).
            if heartbeat {
                record = record
                    .headers(OwnedHeaders::new().insert(Header { key: HEARTBEAT_HEADER, value: Some("1") }));
            }
            // A keyed observation starts a trace: a `publish` span, and its context in the
            // record's `traceparent` header for the processors downstream (docs/TRACING.md).
            // Keyless markers and heartbeats start none.
            let _span = match (&self.tracer, &obs.key) {
                (Some(tracer), Some(_)) => {
                    let (span, header) = publish_span(tracer, &out.name, partition);
                    if let Some(h) = header {
                        record = record.headers(
                            OwnedHeaders::new()
                                .insert(Header { key: telemetry::TRACEPARENT, value: Some(&h) }),
                        );
                    }
                    Some(span)
                }
                _ => None,
            };
            let future = loop {
                match self.producer.send_result(record) {
                    Ok(f) => break f,
                    // librdkafka's queue is full: wait for the oldest delivery and retry.
                    Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        Self::settle(&mut self.in_flight, &mut self.counts, &mut self.deliveries, 1).await?;
                        if self.in_flight.is_empty() {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    Err((e, _)) => return Err(PublishError::Kafka { context: "sending", source: e }),
                }
            };
            self.in_flight.push_back((Instant::now(), future));
            self.counts.records += 1;
            self.counts.value_bytes += value.len() as u64;
        }
        if self.in_flight.len() > MAX_IN_FLIGHT {
            let excess = self.in_flight.len() - MAX_IN_FLIGHT;
            Self::settle(&mut self.in_flight, &mut self.counts, &mut self.deliveries, excess).await?;
        }
        Ok(())
    }

    /// Takes the delivery reports that have arrived, oldest first, without waiting (so the
    /// acknowledgement counters move while records flow); a failed delivery is the error.
    pub fn reap(&mut self) -> Result<(), PublishError> {
        use futures::FutureExt;
        let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
        while let Some((sent, f)) = self.in_flight.front_mut() {
            let std::task::Poll::Ready(report) = f.poll_unpin(&mut cx) else { break };
            let latency = sent.elapsed();
            self.in_flight.pop_front();
            record(&mut self.counts, &mut self.deliveries, latency, report)?;
        }
        Ok(())
    }

    /// Waits until every queued record is acknowledged by the broker; the first failed
    /// delivery is the error.
    pub async fn flush(&mut self) -> Result<(), PublishError> {
        let n = self.in_flight.len();
        Self::settle(&mut self.in_flight, &mut self.counts, &mut self.deliveries, n).await?;
        tokio::task::block_in_place(|| self.producer.flush(Duration::from_secs(60)))
            .map_err(kafka("flushing"))
    }

    /// Awaits the `n` oldest delivery reports.
    async fn settle(
        in_flight: &mut VecDeque<(Instant, DeliveryFuture)>,
        counts: &mut PublishCounts,
        deliveries: &mut Option<Vec<(i32, i64)>>,
        n: usize,
    ) -> Result<(), PublishError> {
        for _ in 0..n {
            let Some((sent, f)) = in_flight.pop_front() else { break };
            let report = f.await;
            record(counts, deliveries, sent.elapsed(), report)?;
        }
        Ok(())
    }
}

/// A `publish` span (kind producer) for one record to `topic`/`partition`, and the
/// `traceparent` header value that continues it.
fn publish_span(
    tracer: &opentelemetry::global::BoxedTracer,
    topic: &str,
    partition: i32,
) -> (opentelemetry::global::BoxedSpan, Option<String>) {
    use opentelemetry::{
        KeyValue,
        trace::{Span, SpanKind, Tracer},
    };
    let span = tracer
        .span_builder("publish")
        .with_kind(SpanKind::Producer)
        .with_attributes([
            KeyValue::new("messaging.system", "kafka"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.operation.name", "publish"),
            KeyValue::new("messaging.destination.name", topic.to_owned()),
            KeyValue::new("messaging.destination.partition.id", partition.to_string()),
        ])
        .start(tracer);
    let header = telemetry::traceparent(span.span_context());
    (span, header)
}

/// Counts one delivery report; a failed delivery is the error.
fn record(
    counts: &mut PublishCounts,
    deliveries: &mut Option<Vec<(i32, i64)>>,
    latency: Duration,
    report: <DeliveryFuture as std::future::Future>::Output,
) -> Result<(), PublishError> {
    match report {
        Ok(Ok(delivery)) => {
            if let Some(d) = deliveries {
                d.push((delivery.partition, delivery.offset));
            }
            counts.acked += 1;
            counts.ack_latency_us += latency.as_micros() as u64;
            Ok(())
        }
        Ok(Err((e, m))) => match refusal_code(&e) {
            Some(code) => Err(PublishError::Refused { topic: m.topic().to_owned(), code }),
            None => Err(PublishError::Kafka { context: "delivering", source: e }),
        },
        Err(_) => Err(PublishError::Kafka {
            context: "delivering: the producer went away",
            source: KafkaError::Canceled,
        }),
    }
}
