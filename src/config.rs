//! Pipeline configuration: cluster identity and topic names. Every component reads the
//! same file (`pipelines/default.toml` is the documented default), so a deployment
//! renames topics in one place.

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The default pipeline configuration, as shipped in `pipelines/default.toml`.
pub const DEFAULT_PIPELINE_TOML: &str = include_str!("../pipelines/default.toml");

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
}

fn default_cluster() -> String {
    "default".into()
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self { cluster: default_cluster(), topics: TopicsConfig::default() }
    }
}

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
    /// Windowed journals of finished runs (key: window record), compacted.
    pub job_runs: String,
    /// Replicated cleanup decisions (key: Job UID).
    pub cleanup_decisions: String,
    /// Lease-coverage alerts (key: subject UID).
    pub coverage_alerts: String,
    /// Session projections (key: session id), compacted.
    pub session_projections: String,
    /// Records that could not be decoded or were invalid, with a reason.
    pub dead_letter: String,
}

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
            job_runs: "job-runs.v1".into(),
            cleanup_decisions: "cleanup-decisions.v1".into(),
            coverage_alerts: "coverage-alerts.v1".into(),
            session_projections: "session-projections.v1".into(),
            dead_letter: "dead-letter.v1".into(),
        }
    }
}

impl TopicsConfig {
    /// The full topic name for one of the names above.
    pub fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn named(&self) -> [(&'static str, &str); 11] {
        [
            ("pods", &self.pods),
            ("jobs", &self.jobs),
            ("cronjobs", &self.cronjobs),
            ("leases", &self.leases),
            ("sessions", &self.sessions),
            ("job_run_facts", &self.job_run_facts),
            ("job_runs", &self.job_runs),
            ("cleanup_decisions", &self.cleanup_decisions),
            ("coverage_alerts", &self.coverage_alerts),
            ("session_projections", &self.session_projections),
            ("dead_letter", &self.dead_letter),
        ]
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
        let cfg: Self = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { origin: origin.into(), source: Box::new(e) })?;
        cfg.validate(origin)?;
        Ok(cfg)
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
        let mut seen = std::collections::HashSet::new();
        for (key, name) in self.topics.named() {
            let full = self.topics.full(name);
            // Kafka's own rule: 1..=249 of [a-zA-Z0-9._-].
            if name.is_empty()
                || full.len() > 249
                || !full.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(invalid(
                    &format!("topics.{key}"),
                    format!("{full:?} is not a valid Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)"),
                ));
            }
            if !seen.insert(full.clone()) {
                return Err(invalid(&format!("topics.{key}"), format!("{full:?} is used twice")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_default_file_equals_the_built_in_defaults() {
        assert_eq!(PipelineConfig::embedded_default().unwrap(), PipelineConfig::default());
    }

    #[test]
    fn unknown_keys_and_bad_topics_fail_naming_the_key() {
        let e = PipelineConfig::parse("[topics]\npodz = \"x\"\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("podz"), "{e}");
        let e = PipelineConfig::parse("[topics]\njobs = \"a b\"\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("topics.jobs"), "{e}");
        let e = PipelineConfig::parse("[topics]\njobs = \"pods.v1\"\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("used twice"), "{e}");
    }
}
