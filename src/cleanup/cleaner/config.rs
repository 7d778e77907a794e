//! The cleaner's settings, `[cleaner]` in a pipeline file.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::RetryPolicy;

/// Settings of `kubefacts cleaner` (`[cleaner]` in a pipeline file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanerConfig {
    /// Most DELETE requests per second sent to the API server (retries included).
    pub max_deletes_per_sec: u32,
    /// Attempts of one API request (GET or DELETE) on a retriable failure (5xx, 429, a
    /// timeout, a connection failure) before the outcome is ERROR.
    pub max_attempts: u32,
    /// Pause before the first retry, in milliseconds; it doubles with every retry.
    pub retry_backoff_ms: u64,
    /// Longest pause between two retries, in milliseconds.
    pub max_retry_backoff_ms: u64,
    /// How long one API request may take, in milliseconds, before it counts as a timeout.
    pub request_timeout_ms: u64,
    /// Most decisions whose outcomes share one Kafka transaction.
    pub max_decisions_per_transaction: u32,
    /// Longest time spent applying decisions before their outcomes are committed, in
    /// milliseconds (a decision already started is finished first).
    pub commit_interval_ms: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self {
            max_deletes_per_sec: 10,
            max_attempts: 4,
            retry_backoff_ms: 500,
            max_retry_backoff_ms: 10_000,
            request_timeout_ms: 10_000,
            max_decisions_per_transaction: 100,
            commit_interval_ms: 1_000,
        }
    }
}

impl CleanerConfig {
    /// The first setting out of range, as (key under `[cleaner]`, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        fn within<T: PartialOrd + std::fmt::Display>(
            key: &'static str,
            v: T,
            lo: T,
            hi: T,
        ) -> Result<(), (&'static str, String)> {
            if v < lo || v > hi { Err((key, format!("{v} is outside {lo}..={hi}"))) } else { Ok(()) }
        }
        within("max_deletes_per_sec", self.max_deletes_per_sec, 1, 1000)?;
        within("max_attempts", self.max_attempts, 1, 10)?;
        within("retry_backoff_ms", self.retry_backoff_ms, 1, 60_000)?;
        within("max_retry_backoff_ms", self.max_retry_backoff_ms, self.retry_backoff_ms, 300_000)?;
        within("request_timeout_ms", self.request_timeout_ms, 100, 120_000)?;
        within("max_decisions_per_transaction", self.max_decisions_per_transaction, 1, 10_000)?;
        within("commit_interval_ms", self.commit_interval_ms, 1, 60_000)?;
        Ok(())
    }

    /// The retry policy these settings give.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial: Duration::from_millis(self.retry_backoff_ms),
            max: Duration::from_millis(self.max_retry_backoff_ms),
        }
    }

    /// The longest one decision can take, in milliseconds: a GET and a DELETE, each with
    /// every attempt timing out, waiting for a rate-limiter slot and backing off in between.
    /// The consumer's `max.poll.interval.ms` must exceed a batch's time, which is at most
    /// `commit_interval_ms` plus this.
    pub fn worst_case_decision_ms(&self) -> u64 {
        let attempts = u64::from(self.max_attempts);
        let slot = 1000u64.div_ceil(u64::from(self.max_deletes_per_sec.max(1)));
        let per_request = attempts * (self.request_timeout_ms + slot)
            + attempts.saturating_sub(1) * self.max_retry_backoff_ms;
        2 * per_request
    }
}
