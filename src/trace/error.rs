//! Errors of reading a cluster trace; each names the line (1-based) of the value at fault.

use thiserror::Error;

/// Why a trace value could not be read. Reading goes on after each (except [`TraceError::Io`]).
#[derive(Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum TraceError {
    /// The JSON itself is broken; reading goes on with the next line.
    #[error("line {line}: invalid JSON: {reason}")]
    Syntax {
        /// Line where parsing failed.
        line: usize,
        /// The parser's message.
        reason: String,
    },
    /// A line is not UTF-8 text.
    #[error("line {line}: not UTF-8 text (first invalid byte at column {column})")]
    NotUtf8 {
        /// The line.
        line: usize,
        /// 1-based byte column of the first invalid byte.
        column: usize,
    },
    /// A value opened on `line` never closed before the next value (or the end).
    #[error("lines {line}..={through}: a JSON value that never ends")]
    Unterminated {
        /// Where it began.
        line: usize,
        /// The last line it took.
        through: usize,
    },
    /// The input could not be read at all from here on; reading stops.
    #[error("line {line}: reading stopped: {reason}")]
    Io {
        /// The line that could not be read.
        line: usize,
        /// The I/O error.
        reason: String,
    },
    /// The value has no `observed_at`.
    #[error("line {line}: no observed_at (add the observation time, RFC 3339 or epoch ms)")]
    MissingObservedAt {
        /// The value's first line.
        line: usize,
    },
    /// `observed_at` is not a timestamp, or not one of a sane range.
    #[error("line {line}: field observed_at: {reason}")]
    InvalidObservedAt {
        /// The value's first line.
        line: usize,
        /// Why.
        reason: String,
    },
    /// A required field is missing.
    #[error("line {line}: missing field {field}")]
    MissingField {
        /// The value's first line.
        line: usize,
        /// The field.
        field: &'static str,
    },
    /// A field is there but of the wrong type.
    #[error("line {line}: field {field}: {reason}")]
    InvalidField {
        /// The value's first line.
        line: usize,
        /// The field (`(value)`: the whole value).
        field: &'static str,
        /// What was expected and found.
        reason: String,
    },
    /// `type` is not one the format defines.
    #[error(
        "line {line}: unknown type {ty:?} (expected ADDED, MODIFIED, DELETED, HEARTBEAT, SNAPSHOT_BEGIN, SNAPSHOT_END or SESSION)"
    )]
    UnknownType {
        /// The value's first line.
        line: usize,
        /// The type found.
        ty: String,
    },
    /// A Kubernetes object of a kind kubefacts does not read.
    #[error(
        "line {line}: unsupported object {api_version}/{kind} (kubefacts reads Pods, Jobs, CronJobs, Leases and Namespaces)"
    )]
    UnsupportedKind {
        /// The value's first line.
        line: usize,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
    /// The object does not match its kind's shape.
    #[error("line {line}: invalid {kind}: {reason}")]
    InvalidObject {
        /// The value's first line.
        line: usize,
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
            Self::Syntax { .. } | Self::Unterminated { .. } => "syntax",
            Self::NotUtf8 { .. } => "not_utf8",
            Self::Io { .. } => "io",
            Self::MissingObservedAt { .. } | Self::InvalidObservedAt { .. } => "observed_at",
            Self::MissingField { .. } => "missing_field",
            Self::InvalidField { .. } => "invalid_field",
            Self::UnknownType { .. } => "unknown_type",
            Self::UnsupportedKind { .. } => "unsupported_kind",
            Self::InvalidObject { .. } => "invalid_object",
        }
    }

    /// Whether reading stopped here (the rest of the input was not read).
    pub fn stops_reading(&self) -> bool {
        matches!(self, Self::Io { .. })
    }
}
