//! The cleanup policy, pure: which finished Job may be removed, when, and why not (DESIGN
//! §5.2). `[runs]` calls it at each sweep; nothing here reads a clock or does I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::model::RetentionSource;
use crate::observe::model::Job;

/// Settings of the cleanup sweep (`[cleanup]` in a pipeline file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanupConfig {
    /// How long a finished Job is kept, in seconds after it finished; `0` turns cleanup off.
    pub job_retention_secs: i64,
    /// Stream time between two sweeps, in seconds.
    pub cleanup_period_secs: i64,
    /// Most decisions one sweep emits; the rest wait for the next sweep.
    pub max_decisions_per_sweep: u32,
    /// Annotation on a Job naming the Jobs (same namespace, comma-separated) it depends on:
    /// they are kept while it has not finished. Empty: no dependency holds.
    pub dependency_annotation: String,
}

pub use crate::observe::annotations::DEFAULT_DEPENDENCY_ANNOTATION;

/// Longest accepted `job_retention_secs` (one year): anything longer is a typo in units.
pub const MAX_RETENTION_SECS: i64 = 366 * 24 * 3600;
/// Longest accepted `cleanup_period_secs` (one day).
pub const MAX_PERIOD_SECS: i64 = 24 * 3600;
/// Most accepted `max_decisions_per_sweep` (one sweep's decisions share a transaction).
pub const MAX_DECISIONS_PER_SWEEP: u32 = 100_000;

impl Default for CleanupConfig {
    fn default() -> Self {
        Self {
            job_retention_secs: 3600,
            cleanup_period_secs: 300,
            max_decisions_per_sweep: 1000,
            dependency_annotation: DEFAULT_DEPENDENCY_ANNOTATION.into(),
        }
    }
}

impl CleanupConfig {
    /// Whether decisions are made at all.
    pub fn enabled(&self) -> bool {
        self.job_retention_secs > 0
    }

    /// The sweep period in milliseconds.
    pub fn period_ms(&self) -> i64 {
        self.cleanup_period_secs * 1000
    }

    /// The first setting out of range, as (key under `[cleanup]`, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(0..=MAX_RETENTION_SECS).contains(&self.job_retention_secs) {
            return Err((
                "job_retention_secs",
                format!(
                    "{} is outside 0..={MAX_RETENTION_SECS} (0 turns cleanup off)",
                    self.job_retention_secs
                ),
            ));
        }
        if !(1..=MAX_PERIOD_SECS).contains(&self.cleanup_period_secs) {
            return Err((
                "cleanup_period_secs",
                format!("{} is outside 1..={MAX_PERIOD_SECS}", self.cleanup_period_secs),
            ));
        }
        if !(1..=MAX_DECISIONS_PER_SWEEP).contains(&self.max_decisions_per_sweep) {
            return Err((
                "max_decisions_per_sweep",
                format!("{} is outside 1..={MAX_DECISIONS_PER_SWEEP}", self.max_decisions_per_sweep),
            ));
        }
        Ok(())
    }
}

/// The retention that applies to one Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Seconds after `finished_at`.
    pub secs: i64,
    /// Which setting gave it.
    pub source: RetentionSource,
}

/// The Job's effective retention: the configured one, or its own `ttlSecondsAfterFinished`
/// when shorter (a negative TTL, which the API server would reject, is ignored). `None` when
/// cleanup is off.
pub fn retention(cfg: &CleanupConfig, job: &Job) -> Option<Retention> {
    if !cfg.enabled() {
        return None;
    }
    Some(match job.spec.ttl_seconds_after_finished.map(i64::from) {
        Some(ttl) if (0..cfg.job_retention_secs).contains(&ttl) => {
            Retention { secs: ttl, source: RetentionSource::JobTtl }
        }
        _ => Retention { secs: cfg.job_retention_secs, source: RetentionSource::Default },
    })
}

/// Why a finished Job past its retention is not decided at this sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// `spec.suspend` is true.
    Suspended,
    /// A deletion was already requested (`deletionTimestamp` set).
    BeingDeleted,
    /// A pending Job depends on it.
    DependedOn,
}

/// The verdict for one finished Job at stream time `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Remove it.
    Decide(Retention),
    /// Its retention has time left (or cleanup is off).
    NotYet,
    /// Expired, but kept for this reason.
    Keep(Keep),
}

/// Judges a finished Job (`finished_at`: its run's finish time) at stream time `now`. The
/// boundary is Kubernetes' TTL-after-finished controller's: expired when the time left,
/// `finished_at + retention - now`, is ≤ 0.
pub fn judge(
    cfg: &CleanupConfig,
    job: &Job,
    finished_at: i64,
    now: i64,
    deps: &PendingDependents,
) -> Verdict {
    let Some(retention) = retention(cfg, job) else { return Verdict::NotYet };
    if finished_at.saturating_add(retention.secs * 1000) > now {
        return Verdict::NotYet;
    }
    if job.spec.suspend == Some(true) {
        return Verdict::Keep(Keep::Suspended);
    }
    if job.meta.deletion_timestamp.is_some() {
        return Verdict::Keep(Keep::BeingDeleted);
    }
    if deps.depended_on(&job.meta.namespace, &job.meta.name) {
        return Verdict::Keep(Keep::DependedOn);
    }
    Verdict::Decide(retention)
}

/// The Jobs a Job declares it depends on: names in its own namespace, from `annotation`
/// (comma- or whitespace-separated, duplicates and blanks ignored, sorted).
pub fn dependencies_of(job: &Job, annotation: &str) -> Vec<String> {
    dependencies_in(&job.meta.annotations, annotation)
}

/// [`dependencies_of`] a Job with these annotations.
pub fn dependencies_in(annotations: &BTreeMap<String, String>, annotation: &str) -> Vec<String> {
    if annotation.is_empty() {
        return Vec::new();
    }
    let Some(value) = annotations.get(annotation) else { return Vec::new() };
    let names: BTreeSet<&str> =
        value.split(|c: char| c == ',' || c.is_whitespace()).filter(|n| !n.is_empty()).collect();
    names.into_iter().map(str::to_owned).collect()
}

/// What pending (unfinished) Jobs depend on: (namespace, name) → how many pending Jobs name
/// it. The one place the dependency model lives: a richer model replaces this type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingDependents {
    needed: BTreeMap<(String, String), u32>,
}

impl PendingDependents {
    /// Records that a pending Job in `namespace` depends on each of `names`.
    pub fn add(&mut self, namespace: &str, names: &[String]) {
        for name in names {
            *self.needed.entry((namespace.to_owned(), name.clone())).or_default() += 1;
        }
    }

    /// Whether some pending Job depends on `namespace/name`.
    pub fn depended_on(&self, namespace: &str, name: &str) -> bool {
        self.needed.contains_key(&(namespace.to_owned(), name.to_owned()))
    }
}
