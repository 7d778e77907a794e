//! Session projections (DESIGN §5.4, docs/SESSIONS.md): which stopped sessions still hold
//! compute, and how much.
//!
//! * [`project`] — `[sessions]`: sessions + their Pods (keyed by session id) → one
//!   projection per change on `session-projections.v1`, and what each session holds
//!   re-keyed by owner.
//! * [`owners`] — `[session-owners]`: the retained compute of each owner's sessions.
//! * [`wiring`] — the inputs, output ports and counted events of both, named.
//! * [`retention`] — the precedence table, in one function.
//! * [`quantity`] — exact Kubernetes quantities.

pub mod model;
pub mod owners;
pub mod project;
pub mod quantity;
pub mod retention;
pub mod wiring;

pub use model::{ContainerRequests, OwnerRetainedCompute, SessionProjection, SessionRetained};
pub use owners::SessionOwners;
pub use project::{Sessions, SessionsConfig};
pub use retention::RetentionState;

#[cfg(test)]
mod tests;
