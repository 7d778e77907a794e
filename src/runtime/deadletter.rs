//! Dead letters: what a processor could not use, with where it came from and why, and the
//! original bytes whole (nothing a producer sent is lost).

use serde::{Deserialize, Serialize};

use crate::codec::{CodecError, Framing};

/// Full name of the dead-letter record (`schemas/dead-letter.avsc`).
pub const FULL_NAME: &str = "io.kubefacts.v1.DeadLetter";

/// A record on the dead-letter topic; mirrors `schemas/dead-letter.avsc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Topic the record was read from.
    pub source_topic: String,
    /// Partition it was read from.
    pub source_partition: i32,
    /// Its offset.
    pub source_offset: i64,
    /// Its Kafka timestamp, epoch ms.
    pub source_timestamp: Option<i64>,
    /// Original key bytes.
    #[serde(with = "opt_bytes")]
    pub source_key: Option<Vec<u8>>,
    /// Original value bytes, unchanged.
    #[serde(with = "opt_bytes")]
    pub source_value: Option<Vec<u8>>,
    /// Confluent schema id from the value's header, if any.
    pub schema_id: Option<i64>,
    /// Bounded reason code.
    pub reason: String,
    /// The error text.
    pub detail: String,
    /// Which processor rejected it.
    pub processor: String,
    /// The task's stream time then.
    pub stream_time: Option<i64>,
}

impl DeadLetter {
    /// The schema id of a Confluent-framed value, for the record's evidence.
    pub fn schema_id_of(value: &[u8]) -> Option<i64> {
        match Framing::parse(value) {
            Ok((Framing::Confluent { schema_id }, _)) => Some(i64::from(schema_id)),
            _ => None,
        }
    }

    /// A dead letter for a value the codec refused.
    pub fn undecodable(source: Source<'_>, error: &CodecError) -> Self {
        Self::new(source, error.reason(), error.to_string())
    }

    /// A dead letter with an explicit reason.
    pub fn new(source: Source<'_>, reason: &str, detail: String) -> Self {
        Self {
            source_topic: source.topic.to_owned(),
            source_partition: source.partition,
            source_offset: source.offset,
            source_timestamp: source.timestamp_ms,
            source_key: source.key.map(<[u8]>::to_vec),
            schema_id: source.value.and_then(Self::schema_id_of),
            source_value: source.value.map(<[u8]>::to_vec),
            reason: reason.to_owned(),
            detail,
            processor: source.processor.to_owned(),
            stream_time: source.stream_time,
        }
    }
}

/// Where a rejected record came from.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Kafka timestamp.
    pub timestamp_ms: Option<i64>,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// Value bytes.
    pub value: Option<&'a [u8]>,
    /// Processor name.
    pub processor: &'a str,
    /// Stream time of the task.
    pub stream_time: Option<i64>,
}

/// Avro `bytes` through serde: apache-avro's schema-aware serializer wants byte slices,
/// not sequences of u8.
mod opt_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&Bytes(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<ByteBuf>::deserialize(d)?.map(|b| b.0))
    }

    struct Bytes<'a>(&'a [u8]);
    impl serde::Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    struct ByteBuf(Vec<u8>);
    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = ByteBuf;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v.to_vec()))
                }
                fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ByteBuf, A::Error> {
                    let mut out = Vec::new();
                    while let Some(b) = seq.next_element::<u8>()? {
                        out.push(b);
                    }
                    Ok(ByteBuf(out))
                }
            }
            d.deserialize_bytes(V)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Codec, RecordWriter};

    #[tokio::test]
    async fn dead_letters_keep_the_original_bytes_and_round_trip() {
        let codec = Codec::new(None).unwrap();
        let known = codec.schemas().current(FULL_NAME).unwrap();
        let writer =
            RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap();
        let mut bad = Framing::Confluent { schema_id: 77 }.header();
        bad.extend_from_slice(&[0xff, 0x00, 0xc3]);
        let err = codec.decode(&bad).await.unwrap_err();
        let source = Source {
            topic: "kubefacts.jobs.v1",
            partition: 2,
            offset: 41,
            timestamp_ms: Some(1_795_946_400_000),
            key: Some(b"job-uid"),
            value: Some(&bad),
            processor: "runs",
            stream_time: None,
        };
        let dl = DeadLetter::undecodable(source, &err);
        assert_eq!((dl.reason.as_str(), dl.schema_id), ("no_registry", Some(77)));
        let bytes = writer.encode(&dl).unwrap();
        let back: DeadLetter = codec.decode_as(&bytes).await.unwrap();
        assert_eq!(back, dl);
        assert_eq!(back.source_value.as_deref(), Some(&bad[..]), "the original bytes, whole");
    }
}
