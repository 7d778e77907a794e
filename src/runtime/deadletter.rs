//! Dead letters: what a processor could not use, with where it came from and why, and the
//! original bytes whole (nothing a producer sent is lost).

use serde::{Deserialize, Serialize};

use crate::codec::{CodecError, Framing};

/// Full name of the dead-letter record (`schemas/dead-letter.avsc`).
pub const FULL_NAME: &str = "io.kubefacts.v1.DeadLetter";

/// Why a record was dead-lettered, where the codec did not refuse its bytes (that reason is
/// [`CodecError::reason`]). [`Reason::as_str`] is the bounded code in the dead-letter
/// record and the `reason` label of the metrics, so those strings never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The record has no timestamp, or one before the Unix epoch.
    TimestampOutOfRange,
    /// Stamped implausibly far ahead of the heartbeat after it.
    TimestampAhead,
    /// A `kubefacts-writer` header that is not `<task>/<tasks>`.
    BadWriterHeader,
    /// A null value without the heartbeat header.
    NullValue,
    /// A heartbeat or marker that breaks its contract (key, header, publisher).
    BadHeartbeat,
    /// An observation event this reader does not know.
    UnknownEvent,
    /// An event without its object.
    MissingObject,
    /// A record without the key its topic or processor needs.
    MissingKey,
    /// A record keyed otherwise than its topic keys it (on the wrong partition).
    WrongKey,
    /// A snapshot marker on a topic that is never relisted.
    UnexpectedMarker,
    /// A marker or heartbeat carrying an object.
    UnexpectedObject,
    /// A marker or heartbeat carrying a key.
    UnexpectedKey,
    /// A record that filed into a window past its retention.
    BeyondRetention,
    /// A Kubernetes quantity that does not parse.
    InvalidQuantity,
    /// An output of the record could not be encoded.
    EncodeFailed,
    /// A cleanup decision that breaks its contract.
    InvalidDecision,
    /// Stamped implausibly far before the heartbeat before it.
    TimestampBehind,
    /// An observation whose own time disagrees with its record timestamp.
    ObservedAtMismatch,
    /// A heartbeat or marker from a publisher its partition does not know.
    UnknownPublisher,
    /// An output or state change of the record larger than what Kafka takes.
    OutputTooLarge,
}

impl Reason {
    /// The bounded code, as written in dead-letter records and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TimestampOutOfRange => "timestamp_out_of_range",
            Self::TimestampAhead => "timestamp_ahead",
            Self::BadWriterHeader => "bad_writer_header",
            Self::NullValue => "null_value",
            Self::BadHeartbeat => "bad_heartbeat",
            Self::UnknownEvent => "unknown_event",
            Self::MissingObject => "missing_object",
            Self::MissingKey => "missing_key",
            Self::WrongKey => "wrong_key",
            Self::UnexpectedMarker => "unexpected_marker",
            Self::UnexpectedObject => "unexpected_object",
            Self::UnexpectedKey => "unexpected_key",
            Self::BeyondRetention => "beyond_retention",
            Self::InvalidQuantity => "invalid_quantity",
            Self::EncodeFailed => "encode_failed",
            Self::InvalidDecision => "invalid_decision",
            Self::TimestampBehind => "timestamp_behind",
            Self::ObservedAtMismatch => "observed_at_mismatch",
            Self::UnknownPublisher => "unknown_publisher",
            Self::OutputTooLarge => "output_too_large",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    /// Whether `source_value` is only a prefix (the whole did not fit; revision 3).
    pub source_value_truncated: bool,
    /// The original value's size in bytes (revision 3).
    pub source_value_size: Option<i64>,
    /// Lowercase hex SHA-256 of the whole original value (revision 3).
    pub source_value_sha256: Option<String>,
}

/// What a dead letter takes besides the value: its fields, the key and the framing, with
/// room to spare (the fields are bounded: names, a reason code, an error text).
const ENVELOPE_ALLOWANCE_BYTES: usize = 16 * 1024;

/// The largest record the runtime's producer sends (librdkafka's `message.max.bytes`
/// default, 1 000 000), less a record batch's overhead: a dead letter never exceeds it.
pub const DEFAULT_MAX_BYTES: usize = 1_000_000 - 1_024;

/// The largest dead-letter value to write to a topic whose `max.message.bytes` is
/// `topic_limit` (when it could be read).
pub fn max_bytes(topic_limit: Option<usize>) -> usize {
    topic_limit.map_or(DEFAULT_MAX_BYTES, |t| t.saturating_sub(1_024).min(DEFAULT_MAX_BYTES))
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

    /// A dead letter for a record stamped too far ahead of the heartbeat after it (it
    /// carried no time).
    pub fn ahead(source: Source<'_>) -> Self {
        let detail = "stamped more than [process].max_ahead_of_heartbeat_ms ahead of the watcher heartbeat \
                      that follows it on its partition: its time is implausible, so it moved no stream time";
        Self::new(source, Reason::TimestampAhead.as_str(), detail.into())
    }

    /// A dead letter for a record stamped too far before the heartbeat before it (it
    /// carried no time).
    pub fn behind(source: Source<'_>) -> Self {
        let detail = "stamped more than [process].max_behind_heartbeat_ms before the watcher heartbeat \
                      before it on its partition: its time is implausible, so it moved no stream time";
        Self::new(source, Reason::TimestampBehind.as_str(), detail.into())
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
            source_value_truncated: false,
            source_value_size: source.value.map(|v| v.len() as i64),
            source_value_sha256: source.value.map(sha256_hex),
        }
    }

    /// This dead letter within `max_bytes` (the dead-letter topic's record limit): a value
    /// that would not fit keeps a prefix — its size and digest say what the whole was, and
    /// the source topic, partition and offset still hold it. A dead letter that cannot be
    /// written would stop its partition for good.
    pub fn fitting(&self, max_bytes: usize) -> std::borrow::Cow<'_, Self> {
        let key = self.source_key.as_ref().map_or(0, Vec::len);
        let detail = self.detail.len();
        let room = max_bytes.saturating_sub(ENVELOPE_ALLOWANCE_BYTES + key + detail);
        match &self.source_value {
            Some(v) if v.len() > room => {
                let mut cut = self.clone();
                cut.source_value = Some(v[..room].to_vec());
                cut.source_value_truncated = true;
                std::borrow::Cow::Owned(cut)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
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
        assert_eq!(back.fitting(DEFAULT_MAX_BYTES).as_ref(), &dl, "a small one fits as it is");
    }

    #[tokio::test]
    async fn a_value_too_large_keeps_a_prefix_its_size_and_digest() {
        let codec = Codec::new(None).unwrap();
        let known = codec.schemas().current(FULL_NAME).unwrap();
        let writer =
            RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap();
        let big = vec![7u8; 1_040_000];
        let source = Source {
            topic: "kubefacts.cronjobs.v1",
            partition: 0,
            offset: 9,
            timestamp_ms: Some(1),
            key: Some(b"k"),
            value: Some(&big),
            processor: "coverage",
            stream_time: None,
        };
        let dl = DeadLetter::new(source, "invalid_datum", "no".into());
        let max = 1_000_000;
        let fitted = dl.fitting(max);
        let bytes = writer.encode(fitted.as_ref()).unwrap();
        assert!(bytes.len() <= max, "{} bytes", bytes.len());
        let back: DeadLetter = codec.decode_as(&bytes).await.unwrap();
        assert!(back.source_value_truncated);
        assert_eq!(back.source_value_size, Some(1_040_000));
        assert_eq!(back.source_value.as_deref(), Some(&big[..back.source_value.as_ref().unwrap().len()]));
        assert_eq!(back.source_value_sha256.as_deref().map(str::len), Some(64));
        assert_eq!(back.source_value_sha256, dl.source_value_sha256, "the digest of the whole value");
    }
}
