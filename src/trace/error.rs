//! Errors of reading a cluster trace; each names the position (1-based JSON value index).

use thiserror::Error;

/// Why a trace value could not be read.
#[derive(Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum TraceError {
    /// The JSON itself is broken; reading stops here.
    #[error("trace value {position} (line {line}): invalid JSON: {reason}")]
    Syntax {
        /// Index of the value that failed.
        position: usize,
        /// Line of the input where parsing failed.
        line: usize,
        /// The parser's message.
        reason: String,
    },
    /// The value has no `observed_at`.
    #[error("trace value {position}: no observed_at (add the observation time, RFC 3339 or epoch ms)")]
    MissingObservedAt {
        /// Index of the value.
        position: usize,
    },
    /// `observed_at` is not a timestamp.
    #[error("trace value {position}: invalid observed_at: {reason}")]
    InvalidObservedAt {
        /// Index of the value.
        position: usize,
        /// Why.
        reason: String,
    },
    /// A required field is missing.
    #[error("trace value {position}: missing field {field}")]
    MissingField {
        /// Index of the value.
        position: usize,
        /// The field.
        field: &'static str,
    },
    /// `type` is not one the format defines.
    #[error(
        "trace value {position}: unknown type {ty:?} (expected ADDED, MODIFIED, DELETED, HEARTBEAT, SNAPSHOT_BEGIN, SNAPSHOT_END or SESSION)"
    )]
    UnknownType {
        /// Index of the value.
        position: usize,
        /// The type found.
        ty: String,
    },
    /// A Kubernetes object of a kind kubefacts does not read.
    #[error(
        "trace value {position}: unsupported object {api_version}/{kind} (kubefacts reads Pods, Jobs, CronJobs, Leases and Namespaces)"
    )]
    UnsupportedKind {
        /// Index of the value.
        position: usize,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
    /// The object does not match its kind's shape.
    #[error("trace value {position}: invalid {kind}: {reason}")]
    InvalidObject {
        /// Index of the value.
        position: usize,
        /// The kind.
        kind: String,
        /// Why.
        reason: String,
    },
}

impl TraceError {
    /// A bounded label for counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Syntax { .. } => "syntax",
            Self::MissingObservedAt { .. } | Self::InvalidObservedAt { .. } => "observed_at",
            Self::MissingField { .. } => "missing_field",
            Self::UnknownType { .. } => "unknown_type",
            Self::UnsupportedKind { .. } => "unsupported_kind",
            Self::InvalidObject { .. } => "invalid_object",
        }
    }
}
