//! The watcher side (DESIGN §3): Kubernetes objects → minimized, admitted, keyed
//! observations on the input topics.
//!
//! * [`publish`] — observations to their topics: murmur2 partitions for keyed records,
//!   every partition for markers and heartbeats, an idempotent producer.
//!
//! Minimization and admission live in [`crate::observe`], shared with `replay` and `demo`,
//! so a recorded cluster and a live one produce the same observations.

pub mod leader;
pub mod publish;
pub mod stats;
pub mod watcher;

pub use publish::{PublishCounts, PublishError, Publisher};
pub use stats::{KindLabels, SecondsCounter, WatchStats, WatcherHealth};
