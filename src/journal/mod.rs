//! The job-run journal (DESIGN §5.1): every finished Job becomes one run fact. Two
//! stages, one folder, the shape of every processor folder:
//!
//! * [`config`] — the settings of both (`[runs]`, `[journal]`).
//! * [`model`] — what they write: the run facts ([`crate::facts`]) and the windows.
//! * [`state`] — what they keep in their stores.
//! * [`wiring`] — their inputs, output ports and counted events, named.
//! * [`runs`] — `[runs]`: Jobs and their Pods (keyed by Job UID) → one [`JobRun`] per
//!   finished Job, with its container exit breakdown; also written keyed as the journal asks.
//! * [`window`] — `[journal]`: runs filed into tumbling windows on `job-runs.v2`, each a
//!   summary plus append-only pages.
//! * [`reader`] — how a consumer rebuilds a window from its summary and pages.
//! * [`glance`] — what `[runs]`'s global input reads of a Job (read without the rest).
//! * `tracked`, `finish`, `datum` — how `[runs]` keeps a Job (trimmed once filed, binary
//!   UIDs), reads a finished Job's run, and writes the records' Avro directly.

pub mod config;
mod datum;
mod finish;
pub mod glance;
pub mod model;
pub mod reader;
pub mod runs;
pub mod state;
mod tracked;
pub mod window;
pub mod wiring;

pub use config::{JournalConfig, RunsConfig};
pub use model::{ContainerExitCount, JobRun, OwnerKind, RunOwner, RunResult};
pub use model::{JobRunPage, JobRunWindowPart, JobRunWindowPartKey, JobRunWindowSummary};
pub use reader::{RebuiltWindow, WindowReader};
pub use runs::Runs;
pub use window::{Journal, JournalInputKey};

#[cfg(test)]
mod tests;
