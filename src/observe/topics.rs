//! Topic names and what each topic is (docs/TOPICS.md): part of the input contract, read
//! by the watcher's publisher, the in-memory inputs and every stage through the pipeline
//! file's `[topics]` section.

use serde::{Deserialize, Serialize};

/// Topic names: each is `prefix` + its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicsConfig {
    /// Prepended to every topic name below.
    pub prefix: String,
    /// Pod observations (key: routing key — owning Job UID, session id or Pod UID).
    pub pods: String,
    /// Job observations (key: Job UID).
    pub jobs: String,
    /// CronJob observations (key: CronJob UID).
    pub cronjobs: String,
    /// Lease observations (key: `namespace/name`).
    pub leases: String,
    /// Session state from host applications (key: session id).
    pub sessions: String,
    /// Finished runs (key: owner UID).
    pub job_run_facts: String,
    /// Windowed journals of finished runs, summaries and pages (key: part record), compacted.
    pub job_runs: String,
    /// Internal: finished runs re-keyed by journal window, from `[runs]` to `[journal]`
    /// (with stream time forwarded, so windows close in a quiet cluster).
    pub journal_repartition: String,
    /// Replicated cleanup decisions (key: Job UID).
    pub cleanup_decisions: String,
    /// What `kubefacts cleaner` did with each decision (key: Job UID).
    pub cleanup_outcomes: String,
    /// Lease-coverage alerts (key: subject UID).
    pub coverage_alerts: String,
    /// Session projections (key: session id), compacted.
    pub session_projections: String,
    /// Internal: what each session holds, re-keyed by owner, from `[sessions]` to
    /// `[session-owners]` (with stream time forwarded).
    pub session_owner_repartition: String,
    /// Retained compute per owner (key: owner), compacted.
    pub retained_by_owner: String,
    /// Records that could not be decoded or were invalid, with a reason.
    pub dead_letter: String,
    /// How long each kind of topic keeps its records (`[topics.retention]`).
    pub retention: RetentionConfig,
}

/// `[topics.retention]`: how long each kind of topic keeps its records, in milliseconds;
/// `-1` keeps them forever. The broker deletes by record timestamp, and ours are
/// observation and stream times — a recorded trace replayed, or a backfill, carries old
/// ones — so a finite retention deletes such records at once: `publish` refuses input older
/// than its topic's retention. Tables and changelogs are compacted and keep every key's
/// latest record regardless (docs/TOPICS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// The watcher's and host applications' observations (pods, jobs, cronjobs, leases,
    /// sessions), in milliseconds; -1: forever.
    pub inputs_ms: i64,
    /// Logs of facts and of state changes (job-run facts, cleanup decisions and outcomes,
    /// coverage alerts), in milliseconds; -1: forever.
    pub facts_ms: i64,
    /// Internal repartition topics between stages, in milliseconds; -1: forever.
    pub internal_ms: i64,
    /// The dead-letter topic, in milliseconds; -1: forever.
    pub dead_letter_ms: i64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self { inputs_ms: -1, facts_ms: -1, internal_ms: -1, dead_letter_ms: -1 }
    }
}

/// What a topic is: how it is cleaned up and how long it keeps records (docs/TOPICS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicKind {
    /// Observations from the watcher or a host application: a log.
    Input,
    /// Facts, each written once: a log.
    Facts,
    /// One record per state change of a key, the history being the point: a log, never
    /// compacted.
    StateChanges,
    /// Each record supersedes the key's previous one: compacted.
    Table,
    /// Between two stages of one pipeline: a log.
    Internal,
    /// Records that could not be used, with a reason: a log.
    DeadLetter,
}

impl TopicKind {
    /// Whether the topic is compacted (`cleanup.policy=compact`) rather than deleted by
    /// retention.
    pub fn compacted(self) -> bool {
        self == Self::Table
    }

    /// The table's word for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Input => "input log",
            Self::Facts => "fact log",
            Self::StateChanges => "state-change log",
            Self::Table => "table",
            Self::Internal => "internal log",
            Self::DeadLetter => "dead-letter log",
        }
    }
}

/// One topic of the pipeline, as docs/TOPICS.md lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicRole {
    /// Its key in `[topics]`.
    pub key: &'static str,
    /// What it is.
    pub kind: TopicKind,
    /// What its records are keyed by.
    pub record_key: &'static str,
    /// What its record timestamps are.
    pub timestamp: &'static str,
}

/// Every topic of the pipeline, in `[topics]` order.
pub const TOPIC_ROLES: [TopicRole; 15] = {
    use TopicKind::*;
    const OBSERVED: &str = "observation time (the watcher's clock)";
    const STREAM: &str = "stream time of the writing task at emission";
    [
        TopicRole {
            key: "pods",
            kind: Input,
            record_key: "routing key: owning Job UID, else session id, else Pod UID",
            timestamp: OBSERVED,
        },
        TopicRole { key: "jobs", kind: Input, record_key: "Job UID", timestamp: OBSERVED },
        TopicRole { key: "cronjobs", kind: Input, record_key: "CronJob UID", timestamp: OBSERVED },
        TopicRole { key: "leases", kind: Input, record_key: "`namespace/name`", timestamp: OBSERVED },
        TopicRole {
            key: "sessions",
            kind: Input,
            record_key: "session id",
            timestamp: "observation time (the host application's clock)",
        },
        TopicRole {
            key: "job_run_facts",
            kind: Facts,
            record_key: "owner UID (CronJob, or the bare Job)",
            timestamp: STREAM,
        },
        TopicRole {
            key: "job_runs",
            kind: Table,
            record_key: "`JobRunWindowPartKey` (Avro: window start, length, part)",
            timestamp: STREAM,
        },
        TopicRole {
            key: "journal_repartition",
            kind: Internal,
            record_key: "window start",
            timestamp: STREAM,
        },
        TopicRole { key: "cleanup_decisions", kind: Facts, record_key: "Job UID", timestamp: STREAM },
        TopicRole {
            key: "cleanup_outcomes",
            kind: Facts,
            record_key: "Job UID",
            timestamp: "when the cleaner applied the decision (its clock)",
        },
        TopicRole {
            key: "coverage_alerts",
            kind: StateChanges,
            record_key: "subject (CronJob) UID",
            timestamp: STREAM,
        },
        TopicRole { key: "session_projections", kind: Table, record_key: "session id", timestamp: STREAM },
        TopicRole {
            key: "session_owner_repartition",
            kind: Internal,
            record_key: "owner",
            timestamp: STREAM,
        },
        TopicRole { key: "retained_by_owner", kind: Table, record_key: "owner", timestamp: STREAM },
        TopicRole {
            key: "dead_letter",
            kind: DeadLetter,
            record_key: "the original record's key",
            timestamp: "the original record's timestamp",
        },
    ]
};

impl Default for TopicsConfig {
    fn default() -> Self {
        Self {
            prefix: "kubefacts.".into(),
            pods: "pods.v1".into(),
            jobs: "jobs.v1".into(),
            cronjobs: "cronjobs.v1".into(),
            leases: "leases.v1".into(),
            sessions: "sessions.v1".into(),
            job_run_facts: "job-run-facts.v1".into(),
            job_runs: "job-runs.v2".into(),
            journal_repartition: "internal.journal-repartition.v1".into(),
            cleanup_decisions: "cleanup-decisions.v1".into(),
            cleanup_outcomes: "cleanup-outcomes.v1".into(),
            coverage_alerts: "coverage-alerts.v1".into(),
            session_projections: "session-projections.v1".into(),
            session_owner_repartition: "internal.session-owner-repartition.v1".into(),
            retained_by_owner: "retained-compute-by-owner.v1".into(),
            dead_letter: "dead-letter.v1".into(),
            retention: RetentionConfig::default(),
        }
    }
}

/// `segment.ms` of internal topics: the broker deletes a purged segment once it rolls, and
/// it rolls by record time, so an internal topic keeps about this much stream time beyond
/// what the application has committed.
pub const INTERNAL_SEGMENT_MS: i64 = 600_000;

/// `segment.bytes` of internal topics: a bound on a segment's size in a backlog.
pub const INTERNAL_SEGMENT_BYTES: i64 = 52_428_800;

/// The table of docs/TOPICS.md, rendered from [`TOPIC_ROLES`] and the defaults (a test
/// keeps the two equal).
pub fn topics_table() -> String {
    let topics = TopicsConfig::default();
    let mut out = String::from(
        "| topic | `[topics]` key | what it is | key | cleanup | retention | record timestamp |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for role in &TOPIC_ROLES {
        let name =
            topics.named().into_iter().find(|(k, _)| *k == role.key).map(|(_, n)| n).unwrap_or_default();
        let (cleanup, retention) = match TopicsConfig::retention_key(role.kind) {
            None => ("compact", "latest record per key, forever".to_owned()),
            Some(key) if role.kind == TopicKind::Internal => (
                "delete",
                format!("`{key}` (default -1), purged up to the committed offset; segments of 10 min, 50 MB"),
            ),
            Some(key) if role.kind == TopicKind::Input => (
                "delete",
                format!("`{key}` (pipelines/default.toml and the chart: 14 days; unset: -1, forever)"),
            ),
            Some(key) => ("delete", format!("`{key}` (default -1: forever)")),
        };
        out += &format!(
            "| `{}{name}` | `{}` | {} | {} | {cleanup} | {retention} | {} |\n",
            topics.prefix,
            role.key,
            role.kind.name(),
            role.record_key,
            role.timestamp
        );
    }
    out
}

impl TopicsConfig {
    /// The full topic name for one of the names above.
    pub fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The role of the topic with this full name, when it is one of the pipeline's.
    pub fn role_of(&self, full_name: &str) -> Option<&'static TopicRole> {
        let key = self.named().into_iter().find(|(_, n)| self.full(n) == full_name)?.0;
        TOPIC_ROLES.iter().find(|r| r.key == key)
    }

    /// How long a topic of `kind` keeps records, in milliseconds (-1: forever; `None` for
    /// compacted tables, which keep every key's latest record).
    pub fn retention_ms(&self, kind: TopicKind) -> Option<i64> {
        let r = &self.retention;
        match kind {
            TopicKind::Input => Some(r.inputs_ms),
            TopicKind::Facts | TopicKind::StateChanges => Some(r.facts_ms),
            TopicKind::Internal => Some(r.internal_ms),
            TopicKind::DeadLetter => Some(r.dead_letter_ms),
            TopicKind::Table => None,
        }
    }

    /// The `[topics.retention]` key that sets a kind's retention.
    pub fn retention_key(kind: TopicKind) -> Option<&'static str> {
        match kind {
            TopicKind::Input => Some("topics.retention.inputs_ms"),
            TopicKind::Facts | TopicKind::StateChanges => Some("topics.retention.facts_ms"),
            TopicKind::Internal => Some("topics.retention.internal_ms"),
            TopicKind::DeadLetter => Some("topics.retention.dead_letter_ms"),
            TopicKind::Table => None,
        }
    }

    /// The topic to create or check for `full_name`: its cleanup policy and retention from
    /// its role; a topic that is not one of the pipeline's (a probe's, an ad-hoc stage's)
    /// is a table when `compacted`, else a fact log.
    pub fn spec(
        &self,
        full_name: &str,
        partitions: i32,
        compacted: bool,
    ) -> crate::runtime::topics::TopicSpec {
        let kind = self.role_of(full_name).map(|r| r.kind).unwrap_or(if compacted {
            TopicKind::Table
        } else {
            TopicKind::Facts
        });
        let spec = crate::runtime::topics::TopicSpec::new(full_name, partitions);
        let spec = match self.retention_ms(kind) {
            None => spec.compacted(),
            Some(ms) => {
                spec.with_config("retention.ms", ms.to_string()).with_setting(Self::retention_key(kind))
            }
        };
        if kind != TopicKind::Internal {
            return spec;
        }
        // Purged as the application commits past them; the broker frees disk a segment at a
        // time, so their segments are small (Kafka Streams' repartition topics: 10 min, 50 MB).
        spec.with_config("segment.ms", INTERNAL_SEGMENT_MS.to_string())
            .with_config("segment.bytes", INTERNAL_SEGMENT_BYTES.to_string())
    }

    /// Every topic's `[topics]` key and name, in `[topics]` order.
    pub fn named(&self) -> [(&'static str, &str); 15] {
        [
            ("pods", &self.pods),
            ("jobs", &self.jobs),
            ("cronjobs", &self.cronjobs),
            ("leases", &self.leases),
            ("sessions", &self.sessions),
            ("job_run_facts", &self.job_run_facts),
            ("job_runs", &self.job_runs),
            ("journal_repartition", &self.journal_repartition),
            ("cleanup_decisions", &self.cleanup_decisions),
            ("cleanup_outcomes", &self.cleanup_outcomes),
            ("coverage_alerts", &self.coverage_alerts),
            ("session_projections", &self.session_projections),
            ("session_owner_repartition", &self.session_owner_repartition),
            ("retained_by_owner", &self.retained_by_owner),
            ("dead_letter", &self.dead_letter),
        ]
    }
}
