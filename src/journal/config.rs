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
    /// Windows of at most this many runs are emitted every `emit_interval_ms` while they
    /// change; larger ones wait for growth (below).
    pub eager_window_runs: u64,
    /// A larger window is emitted again once the runs filed since its last emission are at
    /// least this percentage of its runs…
    pub emit_growth_percent: u64,
    /// …or this much stream time has passed since its last emission, in milliseconds.
    pub emit_max_delay_ms: i64,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            window_length_ms: 3_600_000,
            grace_ms: 600_000,
            retention_ms: 7 * 24 * 3_600_000,
            emit_interval_ms: 10_000,
            eager_window_runs: 1_000,
            emit_growth_percent: 10,
            emit_max_delay_ms: 300_000,
        }
    }
}

impl JournalConfig {
    /// Start of the window holding `at`.
    pub fn window_start(&self, at: i64) -> i64 {
        at - at.rem_euclid(self.window_length_ms)
    }
}
