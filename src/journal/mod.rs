//! The job-run journal (DESIGN §5.1): every finished Job becomes one run fact.
//!
//! * [`model`] — the run facts ([`crate::facts`]).
//! * [`runs`] — `[runs]`: Jobs and their Pods (keyed by Job UID) → one [`JobRun`] per
//!   finished Job, with its container exit breakdown; also re-keyed by window for the journal.
//! * [`wiring`] — the inputs, output ports and counted events of both, named.
//! * [`tracked`] — how `[runs]` keeps a Job in state: trimmed once filed, binary UIDs.
//! * [`window`] — `[journal]`: runs filed into tumbling windows on `job-runs.v1`.

mod datum;
mod finish;
/// The run facts, which live in [`crate::facts`] (shared with `[coverage]` and cleanup).
pub use crate::facts as model;
pub mod runs;
mod tracked;
pub mod window;
pub mod wiring;

pub use model::{ContainerExitCount, JobRun, OwnerKind, RunOwner, RunResult};
pub use runs::Runs;
pub use window::{JobRunWindow, JobRunWindowKey, Journal, JournalConfig};

#[cfg(test)]
mod tests;
