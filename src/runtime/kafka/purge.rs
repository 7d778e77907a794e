//! Deleting what the application has committed past on its own internal topics, so the
//! broker's disk is bounded by the lag and not by how long a deployment has run (Kafka
//! Streams does the same for its repartition topics: `repartition.purge.interval.ms`).
//!
//! Only topics that one stage writes and another reads in the same application qualify:
//! once the group has committed offset `o` of such a partition, nothing will ever read
//! below `o` again — a restore reads changelogs, not inputs, and a task resumes at the
//! committed offset. Source topics (the watcher's, a host application's) and public
//! outputs are other readers' business and keep their retention.
//!
//! The deletion runs on a thread of its own: the stream thread hands over the offsets and
//! never waits for the broker's answer. A refusal (an ACL without `Delete`) or an
//! unreachable broker is logged, and the next request (for a later committed offset) covers
//! it; it never stops the pipeline.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::mpsc,
    time::{Duration, Instant},
};

use rdkafka::{
    Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions},
    client::DefaultClientContext,
    error::{KafkaError, RDKafkaErrorCode},
};
use thiserror::Error;

use crate::brokers::Brokers;

/// How long one deletion request may take before it is given up (and retried later).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why `process` cannot purge its internal topics.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PurgeError {
    /// The principal may not delete records of a topic (no `Delete` ACL on it).
    #[error(
        "kafka refused delete on topic {topic} (topic authorization failed): `process` deletes what it \
         committed past on its repartition topics; docs/security.md lists the ACLs of each component"
    )]
    Refused {
        /// The topic.
        topic: String,
    },
    /// The request failed (unreachable, timed out).
    #[error("kafka delete_records request failed: {0}")]
    Kafka(#[from] KafkaError),
}

/// Checks at start that the principal may delete records of `topics` (of `partitions`
/// partitions each): asks to delete below offset 0, which deletes nothing but is refused
/// without the `Delete` ACL, so a missing ACL stops `process` at once, naming the topic,
/// instead of leaving the disk to grow.
pub async fn check_purge_allowed(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[String],
    partitions: i32,
) -> Result<(), PurgeError> {
    let mut tpl = TopicPartitionList::new();
    for topic in topics {
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Offset(0))?;
        }
    }
    if tpl.count() == 0 {
        return Ok(());
    }
    let refused = |e: &KafkaError| e.rdkafka_error_code() == Some(RDKafkaErrorCode::TopicAuthorizationFailed);
    let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let done = match admin.delete_records(&tpl, &opts).await {
        Ok(done) => done,
        Err(e) if refused(&e) => return Err(PurgeError::Refused { topic: topics.join(", ") }),
        Err(e) => return Err(e.into()),
    };
    for e in done.elements() {
        if let Err(err) = e.error()
            && refused(&err)
        {
            return Err(PurgeError::Refused { topic: e.topic().to_owned() });
        }
    }
    Ok(())
}

/// What a stream thread has committed of the purged topics, and when it last asked the
/// broker to delete below it.
pub(super) struct Purger {
    topics: BTreeSet<String>,
    every: Option<Duration>,
    last: Instant,
    /// Per (topic, partition): the committed offset not yet handed to the deleting thread.
    pending: BTreeMap<(String, i32), i64>,
    /// Per (topic, partition): the offset last handed over (nothing below it is asked twice).
    asked: BTreeMap<(String, i32), i64>,
    brokers: Brokers,
    worker: Option<mpsc::Sender<TopicPartitionList>>,
}

impl Purger {
    /// Purges `topics` every `every_ms` milliseconds (0: never).
    pub(super) fn new(brokers: &Brokers, topics: BTreeSet<String>, every_ms: u64) -> Self {
        Self {
            every: (every_ms > 0 && !topics.is_empty()).then(|| Duration::from_millis(every_ms)),
            topics,
            last: Instant::now(),
            pending: BTreeMap::new(),
            asked: BTreeMap::new(),
            brokers: brokers.clone(),
            worker: None,
        }
    }

    /// A transaction committed these offsets (the next offset to read, per partition).
    pub(super) fn committed<'a>(&mut self, offsets: impl IntoIterator<Item = (&'a (String, i32), &'a i64)>) {
        if self.every.is_none() {
            return;
        }
        for (part, &next) in offsets {
            if self.topics.contains(&part.0) && self.asked.get(part).is_none_or(|&a| a < next) {
                self.pending.insert(part.clone(), next);
            }
        }
    }

    /// Hands what was committed since the last purge to the deleting thread, once the
    /// interval has passed.
    pub(super) fn tick(&mut self) {
        let Some(every) = self.every else { return };
        if self.pending.is_empty() || self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), next) in std::mem::take(&mut self.pending) {
            if tpl.add_partition_offset(&topic, partition, Offset::Offset(next)).is_ok() {
                self.asked.insert((topic, partition), next);
            }
        }
        if self.worker.is_none() {
            self.worker = self.start();
        }
        if let Some(worker) = &self.worker
            && worker.send(tpl).is_err()
        {
            self.worker = None;
        }
    }

    /// Starts the deleting thread; `None` (logged) if its admin client cannot be created:
    /// the pipeline runs on without purging.
    fn start(&self) -> Option<mpsc::Sender<TopicPartitionList>> {
        let admin: AdminClient<DefaultClientContext> = match self.brokers.client().create() {
            Ok(admin) => admin,
            Err(e) => {
                tracing::warn!(error = %e, "cannot create the admin client that purges internal topics");
                return None;
            }
        };
        let (tx, rx) = mpsc::channel::<TopicPartitionList>();
        let spawned = std::thread::Builder::new().name("kubefacts-purge".into()).spawn(move || {
            let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
            while let Ok(tpl) = rx.recv() {
                match futures::executor::block_on(admin.delete_records(&tpl, &opts)) {
                    Ok(done) => {
                        for e in done.elements() {
                            match e.error() {
                                Ok(()) => tracing::debug!(
                                    topic = e.topic(), partition = e.partition(), offset = ?e.offset(),
                                    "purged an internal topic up to the committed offset"
                                ),
                                Err(err) => tracing::warn!(
                                    topic = e.topic(), partition = e.partition(), error = %err,
                                    "purging an internal topic failed; the next committed offset is asked for again"
                                ),
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "purging internal topics failed; the next committed offsets are asked for again"),
                }
            }
        });
        match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the thread that purges internal topics");
                None
            }
        }
    }
}
