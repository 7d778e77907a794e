//! Changelog restore: a task's stores read back from their changelog topics up to the last
//! stable offset.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::{Duration, Instant},
};

use rdkafka::{
    ClientContext, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    error::KafkaError,
};

use super::{
    RuntimeError, client_config,
    config::{Failpoint, FailpointAt, RuntimeConfig},
    kafka,
    stats::RuntimeStats,
};

/// A client context that does not report PartitionEOF as an error: consumers that ask for
/// end-of-partition events (restore, `kubefacts alerts`) get one per partition by design,
/// and librdkafka's default context logs each as a global ERROR.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        // librdkafka reports it as a global error carrying the PartitionEOF code.
        if error.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF) {
            tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for QuietEof {}

/// Reads changelog partitions from the start to their last stable offsets, handing each
/// record to `apply` with the destination its (topic, partition) maps to. One consumer per
/// changelog topic, so an end-of-partition event (which names only the partition) is
/// unambiguous; all of them start at once and are read side by side, since a restore
/// mostly waits (each consumer's start-up, offset look-up and last fetch) rather than
/// computes: one after another, a stage of five stores spent about 100 ms per store on
/// them whatever its size.
pub(super) fn restore(
    cfg: &RuntimeConfig,
    stats: &RuntimeStats,
    sources: &HashMap<(String, i32), (usize, usize)>,
    mut apply: impl FnMut((usize, usize), &[u8], Option<&[u8]>) -> Result<(), crate::runtime::store::StoreError>,
) -> Result<u64, RuntimeError> {
    // Per changelog topic: each partition's destination (looked up per record without
    // building a key).
    let mut by_topic: BTreeMap<&str, HashMap<i32, (usize, usize)>> = BTreeMap::new();
    for ((topic, partition), dest) in sources {
        by_topic.entry(topic).or_default().insert(*partition, *dest);
    }
    let started = Instant::now();
    // Per topic: its consumer, its partitions' destinations and the partitions not read to
    // their end yet. Every consumer is created first (each connects on its own threads
    // meanwhile), then each learns its topic's leaders and is assigned.
    type Reading<'t> = (&'t str, BaseConsumer<QuietEof>, HashMap<i32, (usize, usize)>, BTreeSet<i32>);
    let mut reading: Vec<Reading<'_>> = Vec::new();
    for (topic, dests) in by_topic {
        // The restore consumer only assigns, reads to the end and goes: its group is never
        // joined or committed to, but librdkafka assigns only in a group, and looks up its
        // coordinator (DESCRIBE on the group: docs/security.md).
        let consumer: BaseConsumer<QuietEof> = client_config(cfg)
            .set("group.id", cfg.restore_group())
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "10")
            // It lives only until the end of the changelog: never pause fetching.
            .set("fetch.queue.backoff.ms", "0")
            .create_with_context(QuietEof)
            .map_err(kafka("creating the restore consumer"))?;
        let pending = dests.keys().copied().collect();
        reading.push((topic, consumer, dests, pending));
    }
    for (topic, consumer, _, partitions) in &reading {
        // Know the leaders before assigning, or librdkafka retries the offset lookup on a
        // 500 ms timer.
        consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).map_err(kafka("restore metadata"))?;
        let mut tpl = TopicPartitionList::new();
        for &p in partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning).map_err(kafka("restore assignment"))?;
        }
        consumer.assign(&tpl).map_err(kafka("restore assignment"))?;
    }
    let ready_ms = started.elapsed().as_millis() as u64;
    let mut first_ms = None;
    let mut applied = 0;
    let mut progress = Instant::now();
    let mut reauthentication = crate::brokers::Reauthentication::default();
    while reading.iter().any(|(_, _, _, pending)| !pending.is_empty()) {
        cfg.heartbeat.beat();
        let mut idle = true;
        for (topic, consumer, dests, pending) in &mut reading {
            // A consumer's queue is drained before the next one is looked at; an empty one
            // gives way at once.
            while !pending.is_empty() {
                match consumer.poll(Duration::ZERO) {
                    Some(Ok(m)) => {
                        let dest = dests[&m.partition()];
                        apply(dest, m.key().unwrap_or_default(), m.payload()).map_err(|source| {
                            RuntimeError::Restore {
                                topic: (*topic).to_owned(),
                                partition: m.partition(),
                                source,
                            }
                        })?;
                        applied += 1;
                        first_ms.get_or_insert_with(|| started.elapsed().as_millis() as u64);
                        stats.restored.inc();
                        Failpoint::pause_if(cfg.failpoint, FailpointAt::DuringRestore, stats.restored.get());
                    }
                    // At the last stable offset: everything committed so far is applied.
                    Some(Err(KafkaError::PartitionEOF(p))) => {
                        pending.remove(&p);
                    }
                    Some(Err(e)) => match reauthentication.refusal_code(&e) {
                        Some(code) => {
                            let topics = [(*topic).to_owned()];
                            let group = cfg.restore_group();
                            let what = crate::brokers::Refusing::reading("restoring", &topics, &group);
                            return Err(cfg.brokers.refusal(code, what).into());
                        }
                        // A broker down or moving leadership: librdkafka reconnects and
                        // fetches again; a restore that stops progressing times out below.
                        None if !matches!(e, KafkaError::MessageConsumptionFatal(_)) => {
                            tracing::warn!(error = %e, topic, "restoring: consumer error; retrying");
                            break;
                        }
                        None => return Err(RuntimeError::Kafka { context: "restoring", source: e }),
                    },
                    None => break,
                }
                idle = false;
            }
        }
        if !idle {
            progress = Instant::now();
        } else if progress.elapsed() >= Duration::from_secs(30) {
            return Err(RuntimeError::Kafka {
                context: "restoring: no progress in 30 s",
                source: KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut),
            });
        } else {
            // Nothing fetched anywhere: the consumers' fetches are under way.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let ms = started.elapsed().as_millis() as u64;
    tracing::debug!(stage = %cfg.processor, applied, ready_ms, ?first_ms, ms, "restore: consumers ready, first record, done");
    // Closing a consumer blocks until its threads stop (about 100 ms each, one after
    // another: most of a small stage's restore), so they close off the stream thread.
    close_elsewhere(reading.into_iter().map(|(_, consumer, _, _)| consumer).collect());
    Ok(applied)
}

/// Drops the restore consumers on a thread of their own (librdkafka's close and destroy
/// block); if that thread cannot be started, the failed spawn drops them here.
fn close_elsewhere(consumers: Vec<BaseConsumer<QuietEof>>) {
    if consumers.is_empty() {
        return;
    }
    let closing = std::thread::Builder::new().name("restore-close".into()).spawn(move || drop(consumers));
    if let Err(e) = closing {
        tracing::debug!(error = %e, "closing the restore consumers on this thread");
    }
}
