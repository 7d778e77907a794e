//! `kubefacts cleaner`: applies cleanup decisions to the cluster (DESIGN §5.2;
//! `docs/CLEANER.md` has the outcomes, the exactly-once argument and the RBAC).
//!
//! Pure core here, I/O in [`shell`]:
//!
//! * the decision → request mapping: [`validate`] (a decision that is safe to act on),
//!   [`after_get`] (what a GET's finding means: delete, or a verdict), [`delete_params`]
//!   (the DELETE: UID precondition, background propagation);
//! * outcome classification from an API result: [`ApiFailure`] (an error reduced to its HTTP
//!   status and reason code, never the message), [`failed`], [`deleted`];
//! * [`RetryPolicy`] (which failures are retried, and the backoff) and [`RateLimiter`] (at
//!   most `max_deletes_per_sec` DELETE requests per second), both clock-free: the shell
//!   passes `Instant`s in and sleeps for what they return.
//!
//! [`shell`] consumes decisions read_committed, applies each through `Api<Job>` and writes
//! every outcome in one Kafka transaction with the decisions' offsets.
//!
//! The files, by role:
//!
//! * `config` — [`CleanerConfig`], the `[cleaner]` settings;
//! * `decision` — the pure decision → request mapping and outcome classification;
//! * `retry` — [`RetryPolicy`] and [`RateLimiter`];
//! * [`shell`] — the transactional loop; `kube_calls` (GET and DELETE through `Api<Job>`,
//!   with retries) and `kafka` (polling, rewinding, committing) are its parts.

mod config;
mod decision;
mod kafka;
mod kube_calls;
mod retry;
mod run;
pub mod shell;

pub use config::CleanerConfig;
pub use decision::{
    AfterGet, ApiFailure, Found, MAX_DETAIL_CHARS, Request, Verdict, after_get, delete_params, deleted,
    failed, validate,
};
pub use retry::{RateLimiter, RetryPolicy};

#[cfg(test)]
mod tests;
