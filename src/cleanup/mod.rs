//! Cleanup decisions (DESIGN §5.2): finished Jobs removed once, deterministically, through
//! the log.
//!
//! * [`policy`] — pure: the retention that applies to a Job, whether a sweep may decide it,
//!   and the dependency check. `[runs]` runs the sweep (it holds every Job of its partition).
//! * [`model`] — the decision record on `cleanup-decisions.v1`.
//! * [`cleaner`] — `kubefacts cleaner`: applies decisions through the Kubernetes API.
//! * [`outcome`] — what the cleaner did with each decision, on `cleanup-outcomes.v1`.

pub mod cleaner;
pub mod model;
pub mod outcome;
pub mod policy;

pub use model::{CleanupDecision, JobRef, RetentionSource};
pub use policy::CleanupConfig;

#[cfg(test)]
mod tests;
