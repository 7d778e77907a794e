//! The job-run journal (DESIGN §5.1): every finished Job becomes one run fact.
//!
//! * [`model`] — the output records.
//! * [`runs`] — `[runs]`: Jobs and their Pods (keyed by Job UID) → one [`JobRun`] per
//!   finished Job, with its container exit breakdown.

pub mod model;
pub mod runs;

pub use model::{ContainerExitCount, JobRun, OwnerKind, RunOwner, RunResult};
pub use runs::Runs;

#[cfg(test)]
mod tests;
