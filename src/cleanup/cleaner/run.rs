//! What one cleaner instance is given ([`CleanerRun`]), why it stops ([`CleanerError`]),
//! and what one transaction of it carries: shared by the loop (`shell.rs`) and its Kafka
//! calls (`kafka.rs`).

use std::collections::BTreeMap;

use rdkafka::error::KafkaError;
use thiserror::Error;

use super::CleanerConfig;
use crate::codec::CodecError;

/// How one cleaner instance runs.
#[derive(Debug, Clone)]
pub struct CleanerRun {
    /// The brokers, and how clients reach them (`[kafka]`).
    pub brokers: crate::brokers::Brokers,
    /// The pipeline's application id (`[process].application_id`).
    pub application_id: String,
    /// This instance's stable id, part of its transactional id.
    pub instance_id: String,
    /// Dry run: GET only, outcomes WOULD_DELETE etc., never a DELETE.
    pub dry_run: bool,
    /// The decisions topic (read_committed).
    pub decisions: String,
    /// The outcomes topic.
    pub outcomes: String,
    /// The dead-letter topic.
    pub dead_letter: String,
    /// Broker-side transaction timeout, in milliseconds.
    pub transaction_timeout_ms: u64,
    /// Consumer group session timeout, in milliseconds.
    pub session_timeout_ms: u64,
    /// `[cleaner]`.
    pub cleaner: CleanerConfig,
    /// Beaten once per turn of the cleaner's loop (`/healthz`).
    pub heartbeat: crate::health::Heartbeat,
    /// Met once the cleaner has polled its group's decisions (`/readyz`).
    pub ready: std::sync::Arc<crate::health::Condition>,
}

impl CleanerRun {
    /// `<application_id>-cleaner`, or `<application_id>-cleaner-dry-run` for a dry run, so
    /// a dry run never consumes decisions an applying cleaner still needs.
    pub fn group_id(&self) -> String {
        if self.dry_run {
            format!("{}-cleaner-dry-run", self.application_id)
        } else {
            format!("{}-cleaner", self.application_id)
        }
    }

    /// `<group_id>-<instance_id>`: `<application_id>-cleaner-<instance>` when applying. A
    /// restarted instance fences its previous incarnation; a dry run never fences an
    /// applying cleaner of the same instance id.
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.group_id(), self.instance_id)
    }

    /// The consumer's `max.poll.interval.ms`: longer than a batch can take (the commit
    /// interval, one more decision at its worst, the commit), with a minute to spare.
    pub(super) fn max_poll_interval_ms(&self) -> u64 {
        (self.cleaner.commit_interval_ms
            + self.cleaner.worst_case_decision_ms()
            + self.transaction_timeout_ms
            + 60_000)
            .clamp(self.session_timeout_ms, 86_400_000)
    }
}

/// Why the cleaner stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CleanerError {
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
        "fenced: another cleaner with transactional id {transactional_id} is running; stopping ({reason})"
    )]
    Fenced {
        /// The transactional id.
        transactional_id: String,
        /// The producer's error.
        reason: String,
    },
    /// Kafka refused the cleaner (authentication, a missing ACL): never retried.
    #[error(transparent)]
    Refused(#[from] crate::brokers::Refused),
    /// A topic the cleaner writes to does not exist.
    #[error("topic {topic} does not exist (run `kubefacts cleaner --create-topics` once)")]
    MissingTopic {
        /// The topic.
        topic: String,
    },
    /// Writers could not be set up (schema registration) or an outcome could not be encoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

impl CleanerError {
    /// A bounded label of the error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kafka { .. } => "kafka",
            Self::Fenced { .. } => "fenced",
            Self::Refused(_) => "refused",
            Self::MissingTopic { .. } => "missing_topic",
            Self::Codec(e) => e.reason(),
        }
    }
}

pub(super) fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> CleanerError {
    move |source| CleanerError::Kafka { context, source }
}

/// A decision record as polled.
pub(super) struct Pending {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp_ms: Option<i64>,
    pub(super) key: Option<Vec<u8>>,
    pub(super) value: Option<Vec<u8>>,
    pub(super) heartbeat: bool,
}

/// A record to write in the batch's transaction.
pub(super) struct Output {
    pub(super) topic_is_outcomes: bool,
    pub(super) partition: i32,
    pub(super) key: Option<Vec<u8>>,
    pub(super) value: Vec<u8>,
    pub(super) timestamp_ms: i64,
}

/// What one transaction carries.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) outputs: Vec<Output>,
    /// Next offset per decisions partition (last applied + 1).
    pub(super) offsets: BTreeMap<i32, i64>,
    /// Outcomes by label, and decisions / dead letters, counted once committed.
    pub(super) events: BTreeMap<&'static str, u64>,
    pub(super) decisions: u64,
    pub(super) outcomes: u64,
    pub(super) dead_letters: BTreeMap<&'static str, u64>,
}
