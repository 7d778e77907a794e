//! Settings of `[sessions]` (`[session-owners]` has none).

use serde::{Deserialize, Serialize};

use crate::observe::annotations::DEFAULT_CONTAINER_ANNOTATION;

/// Settings of `[sessions]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// The annotation that names a session Pod's main container. Without it, a Pod with
    /// exactly one container has that one as its main container; any other Pod has no
    /// verified main container, so its requests are absent. Must be listed in
    /// `[minimize].annotation_keys`.
    pub main_container_annotation: String,
    /// A session RELEASED for this long (stream time) is forgotten: its projection gets a
    /// tombstone and its state is dropped, so sessions a host application never deletes do
    /// not accumulate, in milliseconds; 0 keeps them until deleted.
    pub forget_released_after_ms: i64,
    /// Stream time between two sweeps for released sessions to forget, in milliseconds.
    pub sweep_interval_ms: i64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            main_container_annotation: DEFAULT_CONTAINER_ANNOTATION.into(),
            forget_released_after_ms: 7 * 24 * 3_600_000,
            sweep_interval_ms: 5 * 60_000,
        }
    }
}
