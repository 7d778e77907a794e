//! Settings of the two journal stages: `[runs]` and `[journal]`.

use serde::{Deserialize, Serialize};

use crate::cleanup::CleanupConfig;

/// Settings of `[runs]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsConfig {
    /// How long after a Job is first seen finished it is filed, in milliseconds of stream
    /// time (late Pod terminations still count).
    pub settle_ms: i64,
    /// How long a Job observed gone is remembered, in milliseconds of stream time: Pods
    /// deleted with it keep arriving and must not bring it back.
    pub remember_gone_ms: i64,
    /// The cleanup sweep.
    pub cleanup: CleanupConfig,
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self { settle_ms: 5_000, remember_gone_ms: 600_000, cleanup: CleanupConfig::default() }
    }
}

/// Settings of `[journal]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConfig {
    /// Window length, in milliseconds (tumbling, aligned to the epoch).
    pub window_length_ms: i64,
    /// How long after a window's end it becomes final, in milliseconds of stream time.
    pub grace_ms: i64,
    /// How long after a window's end a late run still re-opens it, in milliseconds.
    pub retention_ms: i64,
    /// Least stream time between two emissions of a changing window, in milliseconds.
    pub emit_interval_ms: i64,
    /// The most bytes one record of `job-runs.v2` takes, key and value (and headers) together:
    /// a window's runs are cut into pages of at most this. Below the broker's
    /// `max.message.bytes` (1 MiB by default); at least 4 KiB.
    pub max_record_bytes: u64,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            window_length_ms: 3_600_000,
            grace_ms: 600_000,
            retention_ms: 7 * 24 * 3_600_000,
            emit_interval_ms: 10_000,
            max_record_bytes: 512 * 1024,
        }
    }
}

impl JournalConfig {
    /// The smallest `max_record_bytes` accepted: room for a page's overhead and a few runs.
    pub const MIN_RECORD_BYTES: u64 = 4 * 1024;

    /// Start of the window holding `at`.
    pub fn window_start(&self, at: i64) -> i64 {
        at - at.rem_euclid(self.window_length_ms)
    }
}
