//! kubefacts turns what a Kubernetes cluster does into versioned, exactly-once Avro facts
//! on Kafka. See `docs/ARCHITECTURE.md` for one observation followed end to end.
//!
//! Entry points:
//! * [`codec`] — Avro framing (Confluent or single-object), the embedded schemas, the
//!   schema-registry client and the evolution check.
//! * [`trace`] — the cluster-trace format (JSON lines of watch events) that `demo`,
//!   `replay` and the simulator read and write.
//! * [`observe`] — minimization (an allowlist), admission (the opt-out) and keys: what
//!   the watcher publishes.
//! * [`watch`] — publishing observations to Kafka.
//! * [`facts`] — the run facts `[runs]` files and later stages read.
//! * [`coverage`] — `[coverage]`: lease coverage and overdue CronJobs.
//! * [`alerts`] — `kubefacts alerts`: coverage alerts forwarded to Alertmanager.
//! * [`runtime`] — the exactly-once processor runtime and its in-memory driver.
//! * [`sessions`] — `[sessions]`: exact Kubernetes resource quantities (CPU, memory).
//! * [`pipeline`] — the topology: every stage a pipeline file can name.
//! * [`simulate`] — a deterministic cluster trace of a simulated batch fleet.
//! * [`metrics`] — the Prometheus endpoint.
//!
//! The `kubefacts` command line is the binary's (`src/main.rs`, `src/cli/`), not part of
//! this library.

pub mod acls;
pub mod alerts;
pub mod brokers;
pub mod cleanup;
pub mod codec;
pub mod config;
pub mod coverage;
pub mod facts;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod health;
pub mod http;
pub mod journal;
pub mod metrics;
pub mod observe;
pub mod pipeline;
pub mod runtime;
pub mod sessions;
pub mod simulate;
pub mod telemetry;
#[cfg(feature = "testcontainers")]
pub mod testcontainers;
pub mod trace;
pub mod watch;
