//! Session projections (DESIGN §5.4, docs/SESSIONS.md): which stopped sessions still hold
//! compute, and how much.
//!
//! The folder has the shape of every processor folder:
//!
//! * [`config`] — the settings of `[sessions]`.
//! * [`model`] — the records both write.
//! * [`state`] — what both keep in their stores.
//! * [`project`] — `[sessions]`: sessions + their Pods (keyed by session id) → one
//!   projection per change on `session-projections.v1`, and what each session holds
//!   re-keyed by owner.
//! * [`owners`] — `[session-owners]`: the retained compute of each owner's sessions.
//! * [`wiring`] — the inputs, output ports and counted events of both, named.
//! * [`retention`] — the precedence table, in one function.
//! * [`quantity`] — exact Kubernetes quantities.

pub mod config;
pub mod model;
pub mod owners;
pub mod project;
pub mod quantity;
pub mod retention;
pub mod state;
pub mod wiring;

pub use config::SessionsConfig;
pub use model::{ContainerRequests, OwnerRetainedCompute, SessionProjection, SessionRetained};
pub use owners::SessionOwners;
pub use project::Sessions;
pub use retention::RetentionState;

#[cfg(test)]
mod tests;
