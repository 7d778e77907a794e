//! `kubefacts cleaner`: applies cleanup decisions to the cluster.

use serde::{Deserialize, Serialize};

/// Settings of `kubefacts cleaner` (`[cleaner]` in a pipeline file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanerConfig {
    /// Most DELETE requests per second sent to the API server.
    pub max_deletes_per_sec: u32,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self { max_deletes_per_sec: 10 }
    }
}

impl CleanerConfig {
    /// The first setting out of range, as (key under `[cleaner]`, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=1000).contains(&self.max_deletes_per_sec) {
            return Err(("max_deletes_per_sec", format!("{} is outside 1..=1000", self.max_deletes_per_sec)));
        }
        Ok(())
    }
}
