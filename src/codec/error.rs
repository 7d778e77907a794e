//! Errors of the codec: framing, schemas, the registry and Avro itself.

use thiserror::Error;

/// Why a record could not be framed, encoded or decoded.
///
/// Every variant is a property of the bytes or of the configuration, never a panic; the
/// runtime turns a decode error into a dead-letter record with [`CodecError::reason`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The record value has no bytes at all (a tombstone is not an Avro record).
    #[error("empty record: no bytes to decode (a tombstone is not an Avro record)")]
    Empty,
    /// The first byte(s) are neither Confluent framing (`0x00`) nor single-object (`C3 01`).
    #[error(
        "unknown framing: first byte 0x{first:02x} is neither Confluent (0x00) nor Avro single-object (0xC3 0x01)"
    )]
    UnknownFraming {
        /// The first byte seen.
        first: u8,
    },
    /// The header was cut short.
    #[error("truncated {framing} header: need {needed} bytes, got {got}")]
    TruncatedHeader {
        /// Which framing the first byte announced.
        framing: &'static str,
        /// Header length of that framing.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// A Confluent-framed record arrived but no registry is configured to resolve its id.
    #[error("record is Confluent-framed (schema id {id}) but no schema registry is configured")]
    NoRegistry {
        /// The schema id in the frame.
        id: u32,
    },
    /// The registry does not know the schema id.
    #[error("schema id {id} is unknown to the schema registry")]
    UnknownSchemaId {
        /// The schema id in the frame.
        id: u32,
    },
    /// No schema this build knows (current or frozen revision) has this fingerprint.
    #[error("unknown schema fingerprint {fingerprint:016x}: written with a schema this build does not know")]
    UnknownFingerprint {
        /// The CRC-64-AVRO fingerprint, as a little-endian u64.
        fingerprint: u64,
    },
    /// The record name asked for is not among the embedded schemas.
    #[error("no embedded schema named {name}")]
    UnknownRecord {
        /// The full name asked for.
        name: String,
    },
    /// A record came from an input the processor does not declare (its stage lists more
    /// input topics than the processor reads).
    #[error("input {input} is not one of the processor's inputs")]
    UnknownInput {
        /// The input's index (in the order the stage lists its topics).
        input: usize,
    },
    /// The Avro datum could not be decoded with its writer schema (truncated, corrupt, or
    /// not resolvable to the reader schema).
    #[error("invalid Avro datum for {schema}: {source}")]
    Datum {
        /// Full name of the writer schema.
        schema: String,
        /// What apache-avro reported.
        #[source]
        source: Box<apache_avro::Error>,
    },
    /// The datum ends before its schema says it does.
    #[error("truncated Avro datum for {schema}: {len} bytes end before the record does")]
    TruncatedDatum {
        /// Full name of the writer schema.
        schema: String,
        /// Bytes present.
        len: usize,
    },
    /// The datum decoded but bytes were left over: the record is not what its header says.
    #[error("{trailing} trailing bytes after the Avro datum for {schema}")]
    TrailingBytes {
        /// Full name of the writer schema.
        schema: String,
        /// Bytes left unread.
        trailing: usize,
    },
    /// A value could not be encoded with the schema (a bug in the caller: wrong shape).
    #[error("cannot encode value as {schema}: {source}")]
    Encode {
        /// Full name of the schema.
        schema: String,
        /// What apache-avro reported.
        #[source]
        source: Box<apache_avro::Error>,
    },
    /// A decoded value does not fit the Rust type asked for.
    #[error("decoded {schema} does not fit the requested type: {source}")]
    Convert {
        /// Full name of the writer schema.
        schema: String,
        /// What apache-avro reported.
        #[source]
        source: Box<apache_avro::Error>,
    },
    /// A schema text could not be parsed.
    #[error("invalid schema {origin}: {source}")]
    Schema {
        /// Where the schema came from (file name or registry id).
        origin: String,
        /// What apache-avro reported.
        #[source]
        source: Box<apache_avro::Error>,
    },
    /// A schema's parsing canonical form (for its fingerprint) could not be computed.
    #[error("schema {origin} has no parsing canonical form: {reason}")]
    Canonical {
        /// Where the schema came from.
        origin: String,
        /// Why.
        reason: String,
    },
    /// A schema compiled into this build does not parse (a build defect: `cargo test`
    /// catches it before release).
    #[error("embedded schemas are invalid: {reason}")]
    Embedded {
        /// The first parse error.
        reason: String,
    },
    /// A top-level schema is not a record (every kubefacts topic carries records).
    #[error("schema {origin} is not a record")]
    NotARecord {
        /// Where the schema came from.
        origin: String,
    },
    /// The schema registry failed.
    #[error(transparent)]
    Registry(#[from] crate::codec::registry::RegistryError),
}

impl CodecError {
    /// A bounded, stable label for metrics and dead-letter records.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::UnknownFraming { .. } => "unknown_framing",
            Self::TruncatedHeader { .. } => "truncated_header",
            Self::NoRegistry { .. } => "no_registry",
            Self::UnknownSchemaId { .. } => "unknown_schema_id",
            Self::UnknownFingerprint { .. } => "unknown_fingerprint",
            Self::UnknownRecord { .. } => "unknown_record",
            Self::UnknownInput { .. } => "unknown_input",
            Self::Datum { .. } => "invalid_datum",
            Self::TruncatedDatum { .. } => "truncated_datum",
            Self::TrailingBytes { .. } => "trailing_bytes",
            Self::Encode { .. } => "encode_failed",
            Self::Convert { .. } => "type_mismatch",
            Self::Schema { .. }
            | Self::NotARecord { .. }
            | Self::Embedded { .. }
            | Self::Canonical { .. } => "invalid_schema",
            Self::Registry(_) => "registry_unavailable",
        }
    }

    /// Whether retrying the same bytes later can succeed (the registry was unreachable),
    /// as opposed to the bytes being bad for good.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Registry(e) if e.is_retriable())
    }

    /// Whether the registry refused this process as configured (an untrusted certificate):
    /// [`crate::codec::registry::RegistryError::is_refusal`].
    pub fn is_registry_refusal(&self) -> bool {
        matches!(self, Self::Registry(e) if e.is_refusal())
    }
}
