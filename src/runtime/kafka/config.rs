//! How one runtime instance runs: [`RuntimeConfig`], and the [`Failpoint`] of tests of lost
//! assignments.

use crate::{brokers::Brokers, health::Heartbeat, runtime::admit::InputRules};

/// How one runtime instance runs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The brokers, and how clients reach them (`[kafka]`).
    pub brokers: Brokers,
    /// The application: its consumer group, prefix of transactional ids and changelog
    /// topics.
    pub application_id: String,
    /// This instance's stable id, part of its transactional id (see
    /// [`RuntimeConfig::transactional_id`]).
    pub instance_id: String,
    /// Name of the stage (unique in the application): part of changelog topic names and
    /// dead letters.
    pub processor: String,
    /// Input topics, co-partitioned, in the processor's input order.
    pub inputs: Vec<String>,
    /// Global input topics: every task reads all their partitions (input indexes follow
    /// `inputs`), e.g. leases for lease coverage.
    pub globals: Vec<String>,
    /// Inputs (of `inputs`) whose producers send no stream time: they never hold a task's
    /// time back (docs/RUNTIME.md, "Stream time").
    pub untimed: Vec<String>,
    /// Output topics, one per output port.
    pub outputs: Vec<String>,
    /// Inputs (of `inputs`) that only this application writes and reads (repartition
    /// topics): records below the group's committed offset are deleted every
    /// `purge_interval_ms` (docs/RUNTIME.md, "Purging internal topics").
    pub purged: Vec<String>,
    /// How often a stream thread deletes what it committed past on `purged` topics, in
    /// milliseconds; 0 never deletes (Kafka Streams' `repartition.purge.interval.ms`).
    pub purge_interval_ms: u64,
    /// How each input is admitted: checked against heartbeats, dead-lettered here or not
    /// ([`crate::config::PipelineConfig::input_rules`]).
    pub rules: InputRules,
    /// The dead-letter topic.
    pub dead_letter: String,
    /// Most records taken into one transaction.
    pub max_batch_records: usize,
    /// Records a task buffers of one input partition before that partition is paused
    /// (bounded buffers; docs/RUNTIME.md). A soft bound: one batch may overshoot it.
    pub buffered_records_per_partition: usize,
    /// Longest time spent filling one batch, in milliseconds.
    pub commit_interval_ms: u64,
    /// Broker-side transaction timeout, in milliseconds: how long a crashed instance's
    /// open transaction blocks read_committed readers.
    pub transaction_timeout_ms: u64,
    /// Consumer group session timeout, in milliseconds: how soon a crashed instance's
    /// partitions move.
    pub session_timeout_ms: u64,
    /// A deliberate pause, for tests of lost assignments only; it pauses nothing in a build
    /// without the `failpoints` feature.
    pub failpoint: Option<Failpoint>,
    /// What the stream thread running this stage beats once per turn of its loop and of a
    /// restore (`/healthz`); detached unless the shell serves one.
    pub heartbeat: Heartbeat,
}

/// How one stream thread runs: its consumer in the application's group and its
/// transactional producer ([`RuntimeConfig::thread`]).
#[derive(Debug, Clone)]
pub struct ThreadConfig {
    /// The brokers, and how clients reach them (`[kafka]`).
    pub brokers: Brokers,
    /// The application's consumer group.
    pub group_id: String,
    /// The thread's transactional id.
    pub transactional_id: String,
    /// The thread's index in its instance (0..`num_stream_threads`).
    pub thread: usize,
    /// Most records taken into one transaction (over all the thread's stages).
    pub max_batch_records: usize,
    /// Records a task buffers of one input partition before that partition is paused.
    pub buffered_records_per_partition: usize,
    /// Longest time spent filling one batch, in milliseconds.
    pub commit_interval_ms: u64,
    /// Broker-side transaction timeout, in milliseconds.
    pub transaction_timeout_ms: u64,
    /// Consumer group session timeout, in milliseconds.
    pub session_timeout_ms: u64,
    /// How often the thread deletes what it committed past on its stages' purged topics,
    /// in milliseconds; 0 never ([`RuntimeConfig::purged`]).
    pub purge_interval_ms: u64,
    /// A deliberate pause, for tests of lost assignments only.
    pub failpoint: Option<Failpoint>,
    /// Beaten once per turn of the thread's loop (`/healthz`).
    pub heartbeat: Heartbeat,
}

/// Where a [`Failpoint`] pauses the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailpointAt {
    /// The transaction's records are produced; its offsets are not sent yet.
    BeforeOffsets,
    /// The offsets are sent; the commit is not.
    BeforeCommit,
    /// A restore has applied this many changelog records (counted over the instance's
    /// restores) and has not finished.
    DuringRestore,
}

/// Stops the whole process with SIGSTOP inside its `nth` transaction (counting from 1), or
/// after its `nth` restored changelog record, as a long GC pause or a frozen VM would:
/// heartbeats stop, the group moves the partitions away, and a test resumes the process
/// with SIGCONT (or SIGKILLs it) to check that the zombie cannot corrupt the new owner's
/// results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failpoint {
    /// Where the pause happens.
    pub at: FailpointAt,
    /// Which transaction (or restored record) pauses.
    pub nth: u64,
}

impl std::str::FromStr for Failpoint {
    type Err = String;

    /// `before-offsets:N`, `before-commit:N` or `during-restore:N`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (at, n) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected <where>:<n>"))?;
        let at = match at {
            "before-offsets" => FailpointAt::BeforeOffsets,
            "before-commit" => FailpointAt::BeforeCommit,
            "during-restore" => FailpointAt::DuringRestore,
            other => {
                return Err(format!("{other:?}: expected before-offsets, before-commit or during-restore"));
            }
        };
        let nth = n.parse().map_err(|e| format!("{n:?}: {e}"))?;
        Ok(Self { at, nth })
    }
}

impl Failpoint {
    #[cfg(not(feature = "failpoints"))]
    pub(super) fn pause_if(_: Option<Self>, _: FailpointAt, _: u64) {}

    #[cfg(feature = "failpoints")]
    pub(super) fn pause_if(this: Option<Self>, at: FailpointAt, nth: u64) {
        if this.is_some_and(|f| f.at == at && f.nth == nth) {
            tracing::warn!(?at, nth, "failpoint: stopping this process (SIGSTOP)");
            let pid = std::process::id().to_string();
            if let Err(e) = std::process::Command::new("kill").args(["-STOP", &pid]).status() {
                tracing::error!(error = %e, "failpoint: could not stop the process");
            }
        }
    }
}

impl RuntimeConfig {
    /// Defaults for everything but the names; plaintext brokers at `bootstrap` (see
    /// [`RuntimeConfig::with_brokers`]).
    pub fn new(bootstrap: &str, application_id: &str, instance_id: &str, processor: &str) -> Self {
        Self {
            brokers: Brokers::plaintext(bootstrap),
            application_id: application_id.to_owned(),
            instance_id: instance_id.to_owned(),
            processor: processor.to_owned(),
            inputs: Vec::new(),
            globals: Vec::new(),
            untimed: Vec::new(),
            outputs: Vec::new(),
            purged: Vec::new(),
            purge_interval_ms: 30_000,
            rules: InputRules::default(),
            dead_letter: format!("{application_id}.dead-letter.v1"),
            max_batch_records: 10_000,
            buffered_records_per_partition: 1_000,
            commit_interval_ms: 100,
            transaction_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            failpoint: None,
            heartbeat: Heartbeat::detached(),
        }
    }

    /// The same, reaching the brokers as `brokers` says (TLS, SASL: the `[kafka]` section).
    pub fn with_brokers(mut self, brokers: Brokers) -> Self {
        self.brokers = brokers;
        self
    }

    /// The internal topic a stage writes re-keyed records to for the next stage
    /// (`<application>-<stage>-repartition`; created like any output, not compacted).
    pub fn repartition_topic(&self, stage: &str) -> String {
        format!("{}-{stage}-repartition", self.application_id)
    }

    /// The application's one consumer group: `<application_id>`. Every stream thread of
    /// every instance is a member, subscribed to the inputs of every stage (as in Kafka
    /// Streams), so one transaction commits the offsets of all the stages a thread hosts.
    pub fn group_id(&self) -> String {
        self.application_id.clone()
    }

    /// The transactional id of stream thread `thread` of this instance:
    /// `<application_id>-<instance_id>-<thread>`, stable across restarts so a restarted
    /// instance fences its previous incarnation thread by thread.
    pub fn transactional_id(&self, thread: usize) -> String {
        format!("{}-{}-{thread}", self.application_id, self.instance_id)
    }

    /// This stage's own prefix of the clients that read outside the group (global inputs,
    /// restores): `<application_id>-<processor>`.
    pub fn stage_prefix(&self) -> String {
        format!("{}-{}", self.application_id, self.processor)
    }

    /// What stream thread `thread` of this instance runs with (its settings are the
    /// instance's: every stage of an instance shares them).
    pub fn thread(&self, thread: usize) -> ThreadConfig {
        ThreadConfig {
            brokers: self.brokers.clone(),
            group_id: self.group_id(),
            transactional_id: self.transactional_id(thread),
            thread,
            max_batch_records: self.max_batch_records,
            buffered_records_per_partition: self.buffered_records_per_partition,
            commit_interval_ms: self.commit_interval_ms,
            transaction_timeout_ms: self.transaction_timeout_ms,
            session_timeout_ms: self.session_timeout_ms,
            purge_interval_ms: self.purge_interval_ms,
            failpoint: self.failpoint,
            heartbeat: self.heartbeat.clone(),
        }
    }

    /// The group the stage's restore consumers assign in (never joined or committed to):
    /// `<application_id>-<processor>-restore`.
    pub fn restore_group(&self) -> String {
        format!("{}-restore", self.stage_prefix())
    }

    /// The changelog topic of one store.
    pub fn changelog_topic(&self, store: &str) -> String {
        format!("{}-{}-{store}-changelog", self.application_id, self.processor)
    }
}
