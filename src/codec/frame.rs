//! The two wire framings of a Kafka record value, parsed and written without I/O.
//!
//! * Confluent: `0x00` + big-endian u32 schema id + datum — what Kafka Connect and every
//!   Confluent-compatible deserializer expect.
//! * Avro single-object encoding: `0xC3 0x01` + little-endian CRC-64-AVRO fingerprint of the
//!   writer schema's canonical form + datum — self-describing without a registry.

use super::CodecError;

/// Magic byte of the Confluent wire format.
pub const CONFLUENT_MAGIC: u8 = 0x00;
/// Marker of Avro single-object encoding.
pub const SINGLE_OBJECT_MARKER: [u8; 2] = [0xC3, 0x01];
/// Header length of the Confluent wire format.
pub const CONFLUENT_HEADER_LEN: usize = 5;
/// Header length of single-object encoding.
pub const SINGLE_OBJECT_HEADER_LEN: usize = 10;

/// How a record value names its writer schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// Confluent wire format: a schema id assigned by the registry.
    Confluent {
        /// Registry-assigned schema id.
        schema_id: u32,
    },
    /// Avro single-object encoding: the writer schema's CRC-64-AVRO fingerprint.
    SingleObject {
        /// Fingerprint as a little-endian u64 (the byte order on the wire).
        fingerprint: u64,
    },
}

impl Framing {
    /// Splits a record value into its framing and the Avro datum that follows.
    pub fn parse(bytes: &[u8]) -> Result<(Framing, &[u8]), CodecError> {
        match bytes {
            [] => Err(CodecError::Empty),
            [CONFLUENT_MAGIC, rest @ ..] => {
                let (id, datum) = split_header(rest, "Confluent", CONFLUENT_HEADER_LEN)?;
                Ok((Framing::Confluent { schema_id: u32::from_be_bytes(id) }, datum))
            }
            [0xC3, 0x01, rest @ ..] => {
                let (fp, datum) = split_header(rest, "single-object", SINGLE_OBJECT_HEADER_LEN)?;
                Ok((Framing::SingleObject { fingerprint: u64::from_le_bytes(fp) }, datum))
            }
            [0xC3] => Err(CodecError::TruncatedHeader {
                framing: "single-object",
                needed: SINGLE_OBJECT_HEADER_LEN,
                got: 1,
            }),
            [first, ..] => Err(CodecError::UnknownFraming { first: *first }),
        }
    }

    /// The header bytes that precede a datum written with this framing.
    pub fn header(&self) -> Vec<u8> {
        match *self {
            Framing::Confluent { schema_id } => {
                let mut h = Vec::with_capacity(CONFLUENT_HEADER_LEN);
                h.push(CONFLUENT_MAGIC);
                h.extend_from_slice(&schema_id.to_be_bytes());
                h
            }
            Framing::SingleObject { fingerprint } => {
                let mut h = Vec::with_capacity(SINGLE_OBJECT_HEADER_LEN);
                h.extend_from_slice(&SINGLE_OBJECT_MARKER);
                h.extend_from_slice(&fingerprint.to_le_bytes());
                h
            }
        }
    }

    /// A short name for logs and `tail` output.
    pub fn name(&self) -> &'static str {
        match self {
            Framing::Confluent { .. } => "confluent",
            Framing::SingleObject { .. } => "single-object",
        }
    }
}

/// Splits the fixed-size id that follows the magic bytes from the datum.
fn split_header<'a, const N: usize>(
    rest: &'a [u8],
    framing: &'static str,
    header_len: usize,
) -> Result<([u8; N], &'a [u8]), CodecError> {
    match rest.split_first_chunk::<N>() {
        Some((id, datum)) => Ok((*id, datum)),
        None => {
            Err(CodecError::TruncatedHeader { framing, needed: header_len, got: header_len - N + rest.len() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confluent_header_round_trips() {
        let f = Framing::Confluent { schema_id: 0x01020304 };
        let mut bytes = f.header();
        assert_eq!(bytes, [0, 1, 2, 3, 4]);
        bytes.push(42);
        assert_eq!(Framing::parse(&bytes).unwrap(), (f, &[42u8][..]));
    }

    #[test]
    fn single_object_header_is_little_endian() {
        let f = Framing::SingleObject { fingerprint: 0x0807060504030201 };
        let bytes = f.header();
        assert_eq!(bytes, [0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Framing::parse(&bytes).unwrap(), (f, &[][..]));
    }

    #[test]
    fn rejects_empty_unknown_and_truncated() {
        assert!(matches!(Framing::parse(&[]), Err(CodecError::Empty)));
        assert!(matches!(Framing::parse(b"{\"json\":1}"), Err(CodecError::UnknownFraming { first: b'{' })));
        assert!(matches!(
            Framing::parse(&[0xC3, 0x02, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(CodecError::UnknownFraming { first: 0xC3 })
        ));
        assert!(matches!(
            Framing::parse(&[0, 0, 1]),
            Err(CodecError::TruncatedHeader { framing: "Confluent", needed: 5, got: 3 })
        ));
        assert!(matches!(
            Framing::parse(&[0xC3]),
            Err(CodecError::TruncatedHeader { needed: 10, got: 1, .. })
        ));
        assert!(matches!(
            Framing::parse(&[0xC3, 0x01, 9]),
            Err(CodecError::TruncatedHeader { needed: 10, got: 3, .. })
        ));
    }
}
