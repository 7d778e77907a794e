//! Pipeline configuration: cluster identity, topic names and the stages `process` runs.
//! Every component reads the same file (`pipelines/default.toml` is the documented
//! default), so a deployment renames topics in one place.

pub mod kafka;

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The default pipeline configuration, as shipped in `pipelines/default.toml`.
pub const DEFAULT_PIPELINE_TOML: &str = include_str!("../../pipelines/default.toml");

/// Why a configuration could not be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read pipeline config {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("invalid pipeline config {origin}: {source}")]
    Parse {
        /// The file (or "embedded default").
        origin: String,
        /// The parser's message, naming the key.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A value is out of range.
    #[error("invalid pipeline config {origin}: {key}: {reason}")]
    Invalid {
        /// The file.
        origin: String,
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// One pipeline's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Name of the cluster this pipeline observes; written into every observation's
    /// `source.cluster`.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Topic names.
    #[serde(default)]
    pub topics: TopicsConfig,
    /// How clients reach the brokers: TLS, SASL, other librdkafka properties.
    #[serde(default)]
    pub kafka: kafka::KafkaConfig,
    /// What `kubefacts process` runs, and how.
    #[serde(default)]
    pub process: ProcessConfig,
    /// Which observed objects may leave the cluster (the opt-out).
    #[serde(default)]
    pub admission: crate::observe::AdmissionConfig,
    /// Which labels and annotations minimization copies (allowlists).
    #[serde(default)]
    pub minimize: crate::observe::MinimizeConfig,
    /// What `kubefacts watch` watches.
    #[serde(default)]
    pub watch: crate::watch::watcher::WatchConfig,
    /// The job-run journal's windows.
    #[serde(default)]
    pub journal: crate::journal::JournalConfig,
    /// Which finished Jobs `[runs]` decides to remove, and when.
    #[serde(default)]
    pub cleanup: crate::cleanup::CleanupConfig,
    /// How `kubefacts cleaner` applies the decisions.
    #[serde(default)]
    pub cleaner: crate::cleanup::cleaner::CleanerConfig,
    /// How `[coverage]` judges CronJobs against their manager Lease.
    #[serde(default)]
    pub coverage: crate::coverage::CoverageConfig,
    /// How `[sessions]` finds a session Pod's main container.
    #[serde(default)]
    pub sessions: crate::sessions::SessionsConfig,
}

fn default_cluster() -> String {
    "default".into()
}

impl Default for PipelineConfig {
    fn default() -> Self {
        let mut cfg = Self {
            cluster: default_cluster(),
            topics: TopicsConfig::default(),
            kafka: kafka::KafkaConfig::default(),
            process: ProcessConfig::default(),
            admission: crate::observe::AdmissionConfig::default(),
            minimize: crate::observe::MinimizeConfig::default(),
            watch: crate::watch::watcher::WatchConfig::default(),
            journal: crate::journal::JournalConfig::default(),
            cleanup: crate::cleanup::CleanupConfig::default(),
            cleaner: crate::cleanup::cleaner::CleanerConfig::default(),
            coverage: crate::coverage::CoverageConfig::default(),
            sessions: crate::sessions::SessionsConfig::default(),
        };
        cfg.resolve_topic_refs("built-in default").expect("the built-in stages name known topics");
        cfg
    }
}

pub use crate::observe::topics::{
    RetentionConfig, TOPIC_ROLES, TopicKind, TopicRole, TopicsConfig, topics_table,
};

/// Prefix of a stage topic that names a `[topics]` key instead of a topic.
pub const TOPIC_REF: &str = "topics.";

/// The `[process]` section: the stages one `kubefacts process` runs and the runtime's
/// settings, shared by every stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessConfig {
    /// The application's consumer group, prefix of every transactional id
    /// (`<application_id>-<instance>-<thread>`) and changelog topic
    /// (`<application_id>-<stage>-<store>-changelog`).
    pub application_id: String,
    /// Stream threads per instance: each has one consumer in the group, one
    /// transactional producer, and hosts tasks of every stage (Kafka Streams'
    /// `num.stream.threads`).
    pub num_stream_threads: usize,
    /// Most input records in one transaction.
    pub max_batch_records: usize,
    /// Records a task buffers of one input partition before the partition is paused at
    /// the consumer until the task drains (Kafka Streams' `buffered.records.per.partition`):
    /// what bounds memory over a backlog. A partition a task waits for is never paused.
    pub buffered_records_per_partition: usize,
    /// Longest time spent filling one transaction, in milliseconds.
    pub commit_interval_ms: u64,
    /// Broker-side transaction timeout, in milliseconds.
    pub transaction_timeout_ms: u64,
    /// Consumer group session timeout, in milliseconds (the broker's minimum is 6000).
    pub session_timeout_ms: u64,
    /// How often each stream thread deletes the records of the application's internal
    /// (repartition) topics that the group has committed past, in milliseconds; 0 never
    /// deletes (Kafka Streams' `repartition.purge.interval.ms`, also 30 s by default).
    pub purge_interval_ms: u64,
    /// Create missing topics; when false, a missing topic is an error listing the exact
    /// commands that create it.
    pub create_topics: bool,
    /// Partitions of topics `create_topics` creates (changelogs follow their inputs).
    pub partitions: i32,
    /// Address of the Prometheus `/metrics` endpoint (`host:port`); unset: no endpoint.
    pub metrics_addr: Option<String>,
    /// How far, in milliseconds, a record of a source topic may be stamped ahead of the
    /// watcher heartbeat that follows it on its partition before it is dead-lettered as
    /// `timestamp_ahead` (it then moves no stream time). Covers clock skew between watcher
    /// replicas across a leader change; docs/RUNTIME.md, "Time cannot be poisoned".
    pub max_ahead_of_heartbeat_ms: i64,
    /// How far, in milliseconds, a record of a source topic may be stamped before the last
    /// watcher heartbeat before it on its partition before it is dead-lettered as
    /// `timestamp_behind` (it then moves no stream time, no sweep, no state). The watcher
    /// never stamps a record before a heartbeat it sent; a relist's historical objects are
    /// stamped when they were listed. docs/RUNTIME.md, "Time cannot be poisoned".
    pub max_behind_heartbeat_ms: i64,
    /// How far, in milliseconds, an observation's `observed_at` may be from its record
    /// timestamp on a source topic the watcher heartbeats before it is dead-lettered as
    /// `observed_at_mismatch` (the watcher stamps the record with `observed_at` exactly).
    pub max_stamp_skew_ms: i64,
    /// The stages, in topological order (a stage reads topics earlier stages write).
    pub stages: Vec<StageConfig>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            application_id: "kubefacts".into(),
            num_stream_threads: 1,
            max_batch_records: 10_000,
            buffered_records_per_partition: 1_000,
            commit_interval_ms: 100,
            transaction_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            purge_interval_ms: 30_000,
            create_topics: false,
            partitions: 3,
            metrics_addr: None,
            max_ahead_of_heartbeat_ms: 60_000,
            max_behind_heartbeat_ms: 60_000,
            max_stamp_skew_ms: 60_000,
            stages: vec![
                StageConfig {
                    name: None,
                    processor: "runs".into(),
                    inputs: vec!["topics.jobs".into(), "topics.pods".into()],
                    globals: vec!["topics.jobs".into()],
                    untimed: Vec::new(),
                    outputs: vec![
                        "topics.job_run_facts".into(),
                        "topics.journal_repartition".into(),
                        "topics.cleanup_decisions".into(),
                    ],
                },
                StageConfig {
                    name: None,
                    processor: "journal".into(),
                    inputs: vec!["topics.journal_repartition".into()],
                    globals: Vec::new(),
                    untimed: Vec::new(),
                    outputs: vec!["topics.job_runs".into()],
                },
                StageConfig {
                    name: None,
                    processor: "coverage".into(),
                    inputs: vec!["topics.job_run_facts".into(), "topics.cronjobs".into()],
                    globals: vec!["topics.leases".into()],
                    untimed: Vec::new(),
                    outputs: vec!["topics.coverage_alerts".into()],
                },
                StageConfig {
                    name: None,
                    processor: "sessions".into(),
                    inputs: vec!["topics.sessions".into(), "topics.pods".into()],
                    globals: Vec::new(),
                    untimed: Vec::new(),
                    outputs: vec![
                        "topics.session_projections".into(),
                        "topics.session_owner_repartition".into(),
                    ],
                },
                StageConfig {
                    name: None,
                    processor: "session-owners".into(),
                    inputs: vec!["topics.session_owner_repartition".into()],
                    globals: Vec::new(),
                    untimed: Vec::new(),
                    outputs: vec!["topics.retained_by_owner".into()],
                },
            ],
        }
    }
}

/// One `[[process.stages]]` entry: a processor over its topics, run as its own consumer
/// group with its own transactions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// Unique name in the application (default: the processor's name).
    #[serde(default)]
    pub name: Option<String>,
    /// Which processor runs (`kubefacts process --help` lists them).
    pub processor: String,
    /// Co-partitioned input topics, in the processor's input order: full names, or
    /// `topics.<key>` for the name `[topics]` gives a key.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Global input topics every task reads whole.
    #[serde(default)]
    pub globals: Vec<String>,
    /// Inputs (of `inputs`) whose producers send no stream time — no heartbeats, no
    /// writer header — so they must not hold the stage's time back: their records are merged
    /// in timestamp order once the other inputs have passed them (docs/RUNTIME.md, "Stream
    /// time"). The watcher heartbeats every input topic it writes, `sessions.v1` included.
    #[serde(default)]
    pub untimed: Vec<String>,
    /// Output topics, one per output of the processor.
    #[serde(default)]
    pub outputs: Vec<String>,
}

impl StageConfig {
    /// The stage's name: `name`, else the processor's.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.processor)
    }
}

impl PipelineConfig {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), source: e })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The embedded default (`pipelines/default.toml`).
    pub fn embedded_default() -> Result<Self, ConfigError> {
        Self::parse(DEFAULT_PIPELINE_TOML, "embedded default")
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut cfg: Self = toml::from_str(text).map_err(|mut e| {
            // A line of the [kafka] section is never echoed: it may hold a mistaken secret.
            if e.span().is_some_and(|span| kafka::in_kafka_section(text, span.start)) {
                e.set_input(None);
            }
            ConfigError::Parse { origin: origin.into(), source: Box::new(e) }
        })?;
        cfg.resolve_topic_refs(origin)?;
        cfg.validate(origin)?;
        Ok(cfg)
    }

    /// Replaces stage topics written `topics.<key>` (e.g. `topics.jobs`) with the full name
    /// `[topics]` gives that key, so stages follow a renamed or re-prefixed topic.
    fn resolve_topic_refs(&mut self, origin: &str) -> Result<(), ConfigError> {
        let named: Vec<(&'static str, String)> =
            self.topics.named().iter().map(|(k, n)| (*k, self.topics.full(n))).collect();
        for (i, stage) in self.process.stages.iter_mut().enumerate() {
            for (field, list) in [
                ("inputs", &mut stage.inputs),
                ("globals", &mut stage.globals),
                ("untimed", &mut stage.untimed),
                ("outputs", &mut stage.outputs),
            ] {
                for topic in list.iter_mut() {
                    let Some(key) = topic.strip_prefix(TOPIC_REF) else { continue };
                    let Some((_, full)) = named.iter().find(|(k, _)| *k == key) else {
                        return Err(ConfigError::Invalid {
                            origin: origin.into(),
                            key: format!("process.stages[{i}].{field}"),
                            reason: format!("{topic:?} names no key of [topics]"),
                        });
                    };
                    topic.clone_from(full);
                }
            }
        }
        Ok(())
    }

    fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            origin: origin.into(),
            key: key.into(),
            reason,
        };
        if self.cluster.trim().is_empty() {
            return Err(invalid("cluster", "must not be empty".into()));
        }
        // Secrets are not read here: a pipeline file is checked where they are not mounted.
        self.kafka.check().map_err(|e| invalid("kafka", e.to_string()))?;
        let r = &self.topics.retention;
        for (key, ms) in [
            ("inputs_ms", r.inputs_ms),
            ("facts_ms", r.facts_ms),
            ("internal_ms", r.internal_ms),
            ("dead_letter_ms", r.dead_letter_ms),
        ] {
            if ms == 0 || ms < -1 {
                return Err(invalid(
                    &format!("topics.retention.{key}"),
                    format!("{ms}: must be -1 (forever) or a positive number of milliseconds"),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (key, name) in self.topics.named() {
            let full = self.topics.full(name);
            if name.is_empty() || !valid_topic(&full) {
                return Err(invalid(
                    &format!("topics.{key}"),
                    format!("{full:?} is not a valid Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)"),
                ));
            }
            if !seen.insert(full.clone()) {
                return Err(invalid(&format!("topics.{key}"), format!("{full:?} is used twice")));
            }
        }
        self.process.validate(&invalid)?;
        let leader = &self.watch.leader;
        if leader.renew_deadline_secs == 0 || leader.renew_deadline_secs >= leader.lease_duration_secs {
            return Err(invalid(
                "watch.leader.renew_deadline_secs",
                "must be at least 1 and shorter than lease_duration_secs (a leader that cannot renew must stop before another may start)".into(),
            ));
        }
        let j = &self.journal;
        if j.window_length_ms <= 0 || j.grace_ms < 0 || j.emit_interval_ms < 0 || j.retention_ms < j.grace_ms
        {
            return Err(invalid(
                "journal",
                "window_length_ms must be positive; grace_ms and emit_interval_ms not negative; \
                 retention_ms at least grace_ms"
                    .into(),
            ));
        }
        if j.max_record_bytes < crate::journal::JournalConfig::MIN_RECORD_BYTES {
            return Err(invalid(
                "journal.max_record_bytes",
                format!(
                    "must be at least {} (a page's overhead and a few runs)",
                    crate::journal::JournalConfig::MIN_RECORD_BYTES
                ),
            ));
        }
        self.validate_cleanup(&invalid)?;
        if self.watch.heartbeat_interval_ms == 0 {
            return Err(invalid("watch.heartbeat_interval_ms", "must be at least 1".into()));
        }
        if let Some(bad) = self
            .watch
            .leases
            .iter()
            .find(|l| l.split_once('/').is_none_or(|(n, m)| n.is_empty() || m.is_empty()))
        {
            return Err(invalid("watch.leases", format!("{bad:?} is not namespace/name")));
        }
        self.validate_coverage(&invalid)?;
        // The watcher would drop the annotation: no session Pod would have a main container
        // beyond single-container Pods, silently.
        if self.sessions.forget_released_after_ms < 0 || self.sessions.sweep_interval_ms <= 0 {
            return Err(invalid(
                "sessions",
                "forget_released_after_ms must not be negative and sweep_interval_ms must be positive".into(),
            ));
        }
        let annotation = &self.sessions.main_container_annotation;
        if !annotation.is_empty() && !self.minimize.annotation_keys.contains(annotation) {
            return Err(invalid(
                "sessions.main_container_annotation",
                format!("{annotation:?} must be listed in minimize.annotation_keys, or the watcher drops it"),
            ));
        }
        Ok(())
    }

    fn validate_coverage(&self, invalid: &dyn Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        let c = &self.coverage;
        if c.evaluate_interval_ms <= 0 || c.retention_ms <= 0 || c.observation_gap_ms <= 0 {
            return Err(invalid(
                "coverage",
                "evaluate_interval_ms, retention_ms and observation_gap_ms must be positive".into(),
            ));
        }
        for (i, rule) in c.rules.iter().enumerate() {
            let at = |field: &str| format!("coverage.rules[{i}].{field}");
            if rule.for_ms < 0 || rule.slack_ms < 0 {
                return Err(invalid(&at("for_ms"), "for_ms and slack_ms must not be negative".into()));
            }
            if rule.manager_lease.split_once('/').is_none_or(|(n, m)| n.is_empty() || m.is_empty()) {
                return Err(invalid(
                    &at("manager_lease"),
                    format!("{:?} is not namespace/name", rule.manager_lease),
                ));
            }
            // The watcher publishes only the Leases it is told to: one it never sends would
            // leave every CronJob of the rule INSUFFICIENT_EVIDENCE forever.
            if !self.watch.leases.contains(&rule.manager_lease) {
                return Err(invalid(
                    &at("manager_lease"),
                    format!(
                        "{} is not in watch.leases, so the watcher would never publish it",
                        rule.manager_lease
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl PipelineConfig {
    /// The heartbeats that end a finite trace whose last entry was observed at `last_ms`
    /// the way a quiet cluster does (`publish --finish`, `replay --finish`): one every
    /// `[watch].heartbeat_interval_ms`, the last at or past the end of `last_ms`'s journal
    /// window plus grace, so every stage processes every record and every window is final.
    pub fn finishing_heartbeats(&self, last_ms: i64) -> Vec<crate::trace::TraceEntry> {
        let interval = i64::try_from(self.watch.heartbeat_interval_ms).unwrap_or(i64::MAX).max(1);
        let journal = &self.journal;
        let until = journal.window_start(last_ms) + journal.window_length_ms + journal.grace_ms;
        let mut at = last_ms;
        let mut out = Vec::new();
        while at < until {
            at = at.saturating_add(interval);
            out.push(crate::trace::TraceEntry {
                observed_at_ms: at,
                event: crate::trace::TraceEvent::Heartbeat,
            });
        }
        out
    }

    /// The inputs of `stage` that another stage of this application writes (its repartition
    /// topics, [`TopicKind::Internal`]): the group's committed offset is the only reader's
    /// position, so `process` deletes what lies below it.
    pub fn purged_inputs(&self, stage: &StageConfig) -> Vec<String> {
        (stage.inputs.iter())
            .filter(|t| self.topics.role_of(t).is_some_and(|r| r.kind == TopicKind::Internal))
            .cloned()
            .collect()
    }

    /// How `stage` admits its inputs ([`crate::runtime::admit::InputRules`]): its timed
    /// source inputs are checked against the heartbeats that follow them, and it writes the
    /// dead letters of an input only when no earlier stage of `[process].stages` reads the
    /// same topic (a topic it reads both co-partitioned and whole is dead-lettered by the
    /// co-partitioned read).
    pub fn input_rules(&self, stage: &StageConfig) -> crate::runtime::admit::InputRules {
        let all: Vec<&String> = stage.inputs.iter().chain(&stage.globals).collect();
        // Topics the watcher writes: a host application's sessions are stamped by its own
        // clock and interleave with the watcher's heartbeats in no promised order.
        let source = |t: &str| {
            self.topics.role_of(t).is_some_and(|r| r.kind == TopicKind::Input && r.key != "sessions")
        };
        let checked = (all.iter().enumerate())
            .filter(|(_, t)| source(t) && !stage.untimed.contains(t))
            .map(|(i, _)| i)
            .collect();
        // A stage run on its own (`process --processor`, not one of `[process].stages`)
        // owns every input it reads.
        let listed = self.process.stages.iter().any(|s| s.name() == stage.name());
        let earlier: Vec<&StageConfig> = match listed {
            true => self.process.stages.iter().take_while(|s| s.name() != stage.name()).collect(),
            false => Vec::new(),
        };
        let dead_lettered_elsewhere = (all.iter().enumerate())
            .filter(|(i, t)| {
                let by_earlier = earlier.iter().any(|s| s.inputs.contains(t) || s.globals.contains(t));
                let by_own_read = *i >= stage.inputs.len() && stage.inputs.contains(t);
                by_earlier || by_own_read
            })
            .map(|(i, _)| i)
            .collect();
        crate::runtime::admit::InputRules {
            checked,
            dead_lettered_elsewhere,
            max_ahead_ms: self.process.max_ahead_of_heartbeat_ms,
            max_behind_ms: self.process.max_behind_heartbeat_ms,
            max_stamp_skew_ms: self.process.max_stamp_skew_ms,
            cluster: Some(self.cluster.clone()),
        }
    }

    /// `[cleanup]` and `[cleaner]` in range, and a dependency annotation that reaches `[runs]`:
    /// shipped by the watcher, and read from every partition of the jobs topic.
    fn validate_cleanup(&self, invalid: &dyn Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        if let Err((key, why)) = self.cleanup.check() {
            return Err(invalid(&format!("cleanup.{key}"), why));
        }
        if let Err((key, why)) = self.cleaner.check() {
            return Err(invalid(&format!("cleaner.{key}"), why));
        }
        let annotation = &self.cleanup.dependency_annotation;
        if annotation.is_empty() || !self.cleanup.enabled() {
            return Ok(());
        }
        if !self.minimize.annotation_keys.contains(annotation) {
            return Err(invalid(
                "cleanup.dependency_annotation",
                format!(
                    "{annotation:?} must also be listed in minimize.annotation_keys, or the watcher drops it \
                     and no dependency is ever seen (set it to \"\" to turn dependency holds off)"
                ),
            ));
        }
        let jobs = self.topics.full(&self.topics.jobs);
        for (i, stage) in self.process.stages.iter().enumerate() {
            if stage.processor == "runs" && !stage.globals.contains(&jobs) {
                return Err(invalid(
                    &format!("process.stages[{i}].globals"),
                    format!(
                        "stage {:?} must read {jobs:?} as a global (globals = [\"topics.jobs\"]): a Job's \
                         dependents may sit in any partition; or set cleanup.dependency_annotation = \"\"",
                        stage.name()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Kafka's own rule for topic names: 1..=249 of `[a-zA-Z0-9._-]`.
fn valid_topic(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl ProcessConfig {
    fn validate(&self, invalid: &dyn Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        if !valid_topic(&self.application_id) {
            return Err(invalid("process.application_id", "must be 1-249 of a-z A-Z 0-9 . _ -".into()));
        }
        let positive = [
            ("num_stream_threads", self.num_stream_threads as u64),
            ("max_batch_records", self.max_batch_records as u64),
            ("buffered_records_per_partition", self.buffered_records_per_partition as u64),
            ("commit_interval_ms", self.commit_interval_ms),
            ("transaction_timeout_ms", self.transaction_timeout_ms),
            ("session_timeout_ms", self.session_timeout_ms),
            ("partitions", u64::try_from(self.partitions).unwrap_or(0)),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(invalid(&format!("process.{key}"), "must be at least 1".into()));
            }
        }
        for (key, v) in [
            ("max_behind_heartbeat_ms", self.max_behind_heartbeat_ms),
            ("max_stamp_skew_ms", self.max_stamp_skew_ms),
        ] {
            if v < 0 {
                return Err(invalid(&format!("process.{key}"), "must be 0 or more".into()));
            }
        }
        if self.max_ahead_of_heartbeat_ms < 0 {
            return Err(invalid("process.max_ahead_of_heartbeat_ms", "must be 0 or more".into()));
        }
        if let Some(addr) = &self.metrics_addr
            && addr.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(invalid("process.metrics_addr", format!("{addr:?} is not host:port")));
        }
        let mut names = std::collections::HashSet::new();
        for (i, stage) in self.stages.iter().enumerate() {
            let at = |field: &str| format!("process.stages[{i}].{field}");
            if !valid_topic(stage.name()) {
                return Err(invalid(&at("name"), "must be 1-249 of a-z A-Z 0-9 . _ -".into()));
            }
            if !names.insert(stage.name()) {
                return Err(invalid(&at("name"), format!("stage {:?} is defined twice", stage.name())));
            }
            let topics =
                [("inputs", &stage.inputs), ("globals", &stage.globals), ("outputs", &stage.outputs)];
            for (field, list) in topics {
                if let Some(bad) = list.iter().find(|t| !valid_topic(t)) {
                    return Err(invalid(&at(field), format!("{bad:?} is not a valid Kafka topic name")));
                }
            }
            if let Some(bad) = stage.untimed.iter().find(|t| !stage.inputs.contains(t)) {
                return Err(invalid(&at("untimed"), format!("{bad:?} is not one of the stage's inputs")));
            }
            // A downstream task waits for every task of the stage that writes its input: two
            // stages writing one topic would be two writers of one name.
            for (j, earlier) in self.stages[..i].iter().enumerate() {
                if let Some(both) = stage.outputs.iter().find(|t| earlier.outputs.contains(t)) {
                    return Err(invalid(
                        &at("outputs"),
                        format!(
                            "{both:?} is also an output of process.stages[{j}]: a topic has one writing stage"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
