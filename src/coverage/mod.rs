//! `[coverage]`: lease coverage and overdue CronJobs (DESIGN §5.3, docs/COVERAGE.md).

pub mod model;
pub mod schedule;

pub use model::{CoverageAlert, CoverageGap, CoverageState, CoverageSubject, ProgressSource};
