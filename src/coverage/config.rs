//! Settings of `[coverage]`: which runs count as progress, and the rules per namespace.

use serde::{Deserialize, Serialize};

/// Which finished runs count as progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressKind {
    /// Any finished run, succeeded or failed: the schedule is producing runs (failures
    /// are the journal's business).
    #[default]
    Finished,
    /// Only succeeded runs.
    Succeeded,
}

/// Which subjects a rule judges, against which manager Lease, with which timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoverageRule {
    /// Namespaces the rule applies to; empty: every namespace.
    pub namespaces: Vec<String>,
    /// The manager Lease, `namespace/name`.
    pub manager_lease: String,
    /// How long a subject stays PENDING before it fires, in milliseconds.
    pub for_ms: i64,
    /// Added to the expected fire time before a subject counts as overdue, in
    /// milliseconds (time to start and finish a run). A subject's own slowest recent run,
    /// doubled, is used instead when larger.
    pub slack_ms: i64,
}

impl Default for CoverageRule {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            manager_lease: "kube-system/kube-controller-manager".into(),
            for_ms: 15 * 60_000,
            slack_ms: 10 * 60_000,
        }
    }
}

/// Settings of `[coverage]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoverageConfig {
    /// Rules, first match wins; a CronJob no rule matches is not judged.
    pub rules: Vec<CoverageRule>,
    /// Which finished runs are progress.
    pub progress: ProgressKind,
    /// Stream time between two evaluations of overdue subjects, in milliseconds.
    pub evaluate_interval_ms: i64,
    /// Lease history kept, in milliseconds: every instance whose interval touches
    /// `[now - retention, now]` (and each Lease's latest) is kept.
    pub retention_ms: i64,
    /// A silence of the leases topic longer than this (no Lease, marker or heartbeat) is
    /// a hole in observation, not evidence of a stop, in milliseconds. The watcher writes
    /// heartbeats every 10 s.
    pub observation_gap_ms: i64,
    /// Most coverage gaps listed in one record (the latest).
    pub max_gaps_listed: usize,
}

impl Default for CoverageConfig {
    fn default() -> Self {
        Self {
            rules: vec![CoverageRule::default()],
            progress: ProgressKind::Finished,
            evaluate_interval_ms: 10_000,
            retention_ms: 8 * 24 * 3_600_000,
            observation_gap_ms: 35_000,
            max_gaps_listed: 50,
        }
    }
}

impl CoverageConfig {
    /// The rule for a subject in `namespace`.
    pub fn rule(&self, namespace: &str) -> Option<&CoverageRule> {
        self.rules.iter().find(|r| r.namespaces.is_empty() || r.namespaces.iter().any(|n| n == namespace))
    }
}
