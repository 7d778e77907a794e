//! `kubefacts alerts`: the coverage alerts of `[coverage]` (`coverage-alerts.v1`) forwarded
//! to Prometheus Alertmanager (docs/ALERTS.md).
//!
//! * [`state`] — pure: the latest state per subject and the alerts owed at a given time
//!   (which ones fire, which resolve, when a firing one is re-sent).
//! * [`shell`] — reads the topic from the beginning (it is compacted, keyed by subject),
//!   follows it, and posts what [`state::Forwarder`] owes to `POST /api/v2/alerts`, retrying
//!   with capped backoff while Alertmanager is away.

pub mod shell;
pub mod state;

pub use shell::AlertsRun;
pub use state::{ALERTNAME, Forwarder, ForwarderConfig, Outbox, PostableAlert};

use rdkafka::error::KafkaError;

/// Longest part of an error response body kept in a log line or an error.
pub const MAX_BODY_CHARS: usize = 512;

/// What can go wrong in `kubefacts alerts`.
#[derive(Debug, thiserror::Error)]
pub enum AlertsError {
    /// A Kafka client could not be created or a call failed.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Kafka refused the reader (authentication, a missing ACL): never retried.
    #[error(transparent)]
    Refused(#[from] crate::brokers::Refused),
    /// The coverage alerts topic does not exist.
    #[error("topic {topic} does not exist on {bootstrap} (is [coverage] running?)")]
    MissingTopic {
        /// The topic.
        topic: String,
        /// The brokers asked.
        bootstrap: String,
    },
    /// The Alertmanager URL is not usable.
    #[error("--alertmanager {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// Alertmanager could not be reached or did not answer in time.
    #[error("POST {url}: {source}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// The HTTP client error.
        #[source]
        source: reqwest::Error,
    },
    /// Alertmanager answered with a status other than 2xx.
    #[error("POST {url}: HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the response body ([`MAX_BODY_CHARS`]).
        body: String,
    },
}

impl AlertsError {
    /// Whether trying the same request again later may succeed: connection errors, timeouts,
    /// 5xx, 408 and 429. Any other 4xx means Alertmanager refuses these alerts as they are.
    pub fn retriable(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            Self::Kafka { .. } | Self::Refused(_) | Self::MissingTopic { .. } | Self::InvalidUrl { .. } => {
                false
            }
        }
    }

    /// A bounded label of the error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kafka { .. } => "kafka",
            Self::Refused(_) => "refused",
            Self::MissingTopic { .. } => "missing_topic",
            Self::InvalidUrl { .. } => "invalid_url",
            Self::Unreachable { .. } => "unreachable",
            Self::Status { status, .. } if *status >= 500 => "http_5xx",
            Self::Status { .. } => "http_4xx",
        }
    }
}

/// The first [`MAX_BODY_CHARS`] characters of `body`, marked when cut.
pub fn truncate_body(body: &str) -> String {
    match body.char_indices().nth(MAX_BODY_CHARS) {
        Some((cut, _)) => format!("{}… ({} bytes in all)", &body[..cut], body.len()),
        None => body.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retriable_statuses_and_truncated_bodies() {
        let status = |status| AlertsError::Status { url: "u".into(), status, body: String::new() };
        for s in [500, 502, 503, 408, 429] {
            assert!(status(s).retriable(), "{s}");
        }
        for s in [400, 404, 422] {
            assert!(!status(s).retriable(), "{s}");
        }
        assert_eq!(status(503).reason(), "http_5xx");
        assert_eq!(status(400).reason(), "http_4xx");
        assert_eq!(truncate_body("short"), "short");
        let long = "é".repeat(600);
        let cut = truncate_body(&long);
        assert!(cut.starts_with(&"é".repeat(512)) && cut.ends_with("(1200 bytes in all)"), "{cut}");
    }
}
