//! How one runtime instance runs: [`RuntimeConfig`], and the [`Failpoint`] of tests of lost
//! assignments.

use crate::runtime::admit::InputRules;

/// How one runtime instance runs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Kafka bootstrap servers.
    pub bootstrap: String,
    /// The application: prefix of consumer groups, transactional ids and changelog topics.
    pub application_id: String,
    /// This instance's stable id, part of its transactional id (see
    /// [`RuntimeConfig::transactional_id`]).
    pub instance_id: String,
    /// Name of the stage (unique in the application): part of the consumer group,
    /// changelog topic names and dead letters.
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
    /// How each input is admitted: checked against heartbeats, dead-lettered here or not
    /// ([`crate::config::PipelineConfig::input_rules`]).
    pub rules: InputRules,
    /// The dead-letter topic.
    pub dead_letter: String,
    /// Most records taken into one transaction.
    pub max_batch_records: usize,
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
    /// Defaults for everything but the names.
    pub fn new(bootstrap: &str, application_id: &str, instance_id: &str, processor: &str) -> Self {
        Self {
            bootstrap: bootstrap.to_owned(),
            application_id: application_id.to_owned(),
            instance_id: instance_id.to_owned(),
            processor: processor.to_owned(),
            inputs: Vec::new(),
            globals: Vec::new(),
            untimed: Vec::new(),
            outputs: Vec::new(),
            rules: InputRules::default(),
            dead_letter: format!("{application_id}.dead-letter.v1"),
            max_batch_records: 10_000,
            commit_interval_ms: 100,
            transaction_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            failpoint: None,
        }
    }

    /// The internal topic a stage writes re-keyed records to for the next stage
    /// (`<application>-<stage>-repartition`; created like any output, not compacted).
    pub fn repartition_topic(&self, stage: &str) -> String {
        format!("{}-{stage}-repartition", self.application_id)
    }

    /// The consumer group of this stage: `<application_id>-<processor>`. Each stage of a
    /// pipeline is its own group with its own transactions, so one slow or failing stage
    /// never holds another's commits.
    pub fn group_id(&self) -> String {
        format!("{}-{}", self.application_id, self.processor)
    }

    /// The transactional id: `<application_id>-<processor>-<instance_id>`, stable across
    /// restarts so a restarted instance fences its previous incarnation.
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.group_id(), self.instance_id)
    }

    /// The changelog topic of one store.
    pub fn changelog_topic(&self, store: &str) -> String {
        format!("{}-{}-{store}-changelog", self.application_id, self.processor)
    }
}
