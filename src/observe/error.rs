//! Errors of turning a Kubernetes object or session into an observation.

use thiserror::Error;

/// Why an object could not be minimized into an observation.
///
/// Each is a property of the input object, never retriable: the caller counts it under
/// [`ObserveError::reason`] and skips the object.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// A field that identifies or keys the object is absent or empty.
    #[error("{kind} {object}: missing {field}, which identifies it")]
    MissingIdentity {
        /// The kind (`Pod`, `Job`, …, `Session`).
        kind: &'static str,
        /// `namespace/name` as far as known.
        object: String,
        /// The missing field, e.g. `metadata.uid`.
        field: &'static str,
    },
    /// A Kubernetes UID is not a canonical lowercase UUID (Avro `uuid` needs one).
    #[error("{kind} {object}: {field} {value:?} is not a canonical UUID")]
    InvalidUid {
        /// The kind.
        kind: &'static str,
        /// `namespace/name`.
        object: String,
        /// The field, e.g. `metadata.uid`.
        field: &'static str,
        /// The value found.
        value: String,
    },
    /// A field the schema requires is absent (e.g. a CronJob without `spec.schedule`).
    #[error("{kind} {object}: missing required {field}")]
    MissingField {
        /// The kind.
        kind: &'static str,
        /// `namespace/name`.
        object: String,
        /// The field.
        field: &'static str,
    },
}

impl ObserveError {
    /// A bounded, stable label for counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingIdentity { .. } => "missing_identity",
            Self::InvalidUid { .. } => "invalid_uid",
            Self::MissingField { .. } => "missing_field",
        }
    }

    /// The kind of the object at fault (a bounded label).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingIdentity { kind, .. }
            | Self::InvalidUid { kind, .. }
            | Self::MissingField { kind, .. } => kind,
        }
    }
}
