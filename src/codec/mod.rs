//! Avro on Kafka: framing, the embedded schemas, the registry client and the schema
//! evolution check.
//!
//! Writers frame with Confluent's wire format when a registry is configured (what Kafka
//! Connect sinks expect) and with Avro single-object encoding otherwise. The decoder accepts
//! either, finds the writer schema (by registry id or by fingerprint among the current
//! schemas and every frozen revision), and resolves the datum to this build's current
//! schema of the same name, so records written by older revisions read as current ones.

mod aliases;
pub mod canonical;
pub mod direct;
mod error;
pub mod evolution;
mod frame;
pub mod json;
pub mod registry;
mod schemas;
mod waiting;

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, RwLock},
};

use apache_avro::{
    Schema, reader::datum::GenericDatumReader, types::Value, writer::datum::GenericDatumWriter,
};
use serde::{Serialize, de::DeserializeOwned};

use direct::{DirectRecord, Reader};
pub use error::CodecError;
pub use frame::{CONFLUENT_HEADER_LEN, Framing, SINGLE_OBJECT_HEADER_LEN};
pub use registry::{RegistryAccess, RegistryClient, RegistryError};
pub use schemas::{KnownSchema, SchemaSet};
pub use waiting::{Backoff, RegisterError, Waiting, WriterSchema};

/// Encodes and decodes kubefacts records; cheap to share (`Arc`) between tasks.
pub struct Codec {
    schemas: &'static SchemaSet,
    registry: Option<RegistryClient>,
    /// Writer schemas fetched from the registry, by id. Never held across an `.await`.
    by_id: RwLock<HashMap<u32, Arc<KnownSchema>>>,
    /// Subjects whose compatibility level this process has made sure of.
    subjects: RwLock<std::collections::HashSet<String>>,
    /// Ids the registry gave this process's writers, by subject and schema fingerprint: a
    /// writer asked for again (by each new task, or after [`Codec::register_writers`]) costs
    /// no registry call.
    registered: RwLock<HashMap<(String, u64), u32>>,
}

impl fmt::Debug for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec").field("registry", &self.registry).finish_non_exhaustive()
    }
}

/// A decoded record value.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// How the value was framed.
    pub framing: Framing,
    /// Full name of the writer schema.
    pub schema_name: String,
    /// The value, resolved to this build's current schema when it knows the name.
    pub value: Value,
}

impl Codec {
    /// A codec over the embedded schemas; with a registry it writes Confluent framing,
    /// without one single-object encoding.
    pub fn new(registry: Option<RegistryClient>) -> Result<Self, CodecError> {
        Ok(Self {
            schemas: SchemaSet::embedded()?,
            registry,
            by_id: RwLock::default(),
            subjects: RwLock::default(),
            registered: RwLock::default(),
        })
    }

    /// The schemas this codec knows.
    pub fn schemas(&self) -> &'static SchemaSet {
        self.schemas
    }

    /// A writer of `full_name` records for the values of `topic`. With a registry this
    /// registers the schema under the topic's value subject (TopicNameStrategy) once per
    /// process: the id is kept, and later writers of the subject reuse it.
    pub async fn value_writer(&self, topic: &str, full_name: &str) -> Result<RecordWriter, CodecError> {
        self.writer(&RegistryClient::value_subject(topic), full_name).await
    }

    /// A writer of `full_name` records for the keys of `topic`.
    pub async fn key_writer(&self, topic: &str, full_name: &str) -> Result<RecordWriter, CodecError> {
        self.writer(&RegistryClient::key_subject(topic), full_name).await
    }

    async fn writer(&self, subject: &str, full_name: &str) -> Result<RecordWriter, CodecError> {
        let known = self.schemas.current(full_name)?;
        let framing = match &self.registry {
            Some(registry) => {
                let cached = (subject.to_owned(), known.fingerprint);
                if let Some(&schema_id) = self.registered.read().expect("lock poisoned").get(&cached) {
                    return RecordWriter::new(known, Framing::Confluent { schema_id });
                }
                // Our promise (BACKWARD_TRANSITIVE) is the registry's to enforce too: a subject
                // without a level of its own gets it before our first registration.
                if !self.subjects.read().expect("lock poisoned").contains(subject) {
                    registry
                        .ensure_compatibility(subject, registry::Compatibility::BackwardTransitive)
                        .await?;
                    self.subjects.write().expect("lock poisoned").insert(subject.to_owned());
                }
                let schema_id = registry.register(subject, &known.text).await?;
                self.registered.write().expect("lock poisoned").insert(cached, schema_id);
                Framing::Confluent { schema_id }
            }
            None => Framing::SingleObject { fingerprint: known.fingerprint },
        };
        RecordWriter::new(known, framing)
    }

    /// Decodes a record value of either framing to an Avro value.
    pub async fn decode(&self, bytes: &[u8]) -> Result<Decoded, CodecError> {
        let (framing, datum) = Framing::parse(bytes)?;
        let writer = self.writer_schema(framing).await?;
        let reader =
            self.schemas.current(&writer.full_name).ok().filter(|r| r.fingerprint != writer.fingerprint);
        // Preparing a reader costs about as much as a decode: an embedded schema read as it
        // was written has one prepared for the whole process.
        let prepared = reader.is_none().then(|| SchemaSet::embedded_reader(writer.fingerprint)).flatten();
        let value = match (prepared, reader) {
            (Some(prepared), _) => read_value_prepared(&writer.full_name, prepared, datum)?,
            (None, Some(reader)) => {
                let renamed = aliases::writer_as_read_by(&writer, reader)?;
                read_datum(&writer.full_name, &renamed, Some(&reader.schema), datum)?
            }
            (None, None) => read_datum(&writer.full_name, &writer.schema, None, datum)?,
        };
        Ok(Decoded { framing, schema_name: writer.full_name.clone(), value })
    }

    /// Decodes a record value into a Rust type shaped like the current schema.
    ///
    /// When the writer schema is the current one (the common case) this deserializes
    /// straight from the bytes (apache-avro's schema-aware serde, ~3× faster than going
    /// through a `Value`); a record from an older revision is resolved through a `Value`.
    pub async fn decode_as<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        let (framing, datum) = Framing::parse(bytes)?;
        let writer = self.writer_schema(framing).await?;
        let name = &writer.full_name;
        match self.schemas.current(name) {
            Ok(reader) if reader.fingerprint != writer.fingerprint => {
                let renamed = aliases::writer_as_read_by(&writer, reader)?;
                let value = read_datum(name, &renamed, Some(&reader.schema), datum)?;
                apache_avro::from_value::<T>(&value)
                    .map_err(|e| CodecError::Convert { schema: name.clone(), source: Box::new(e) })
            }
            _ => match SchemaSet::embedded_reader(writer.fingerprint) {
                Some(prepared) => read_typed(name, prepared, datum),
                None => {
                    let err = |e| CodecError::Datum { schema: name.clone(), source: Box::new(e) };
                    let prepared = GenericDatumReader::builder(&writer.schema).build().map_err(err)?;
                    read_typed(name, &prepared, datum)
                }
            },
        }
    }

    /// [`Codec::decode_as`] for a record with a direct form: read field by field when the
    /// writer schema is `T`'s current one (the hot path), through apache-avro otherwise —
    /// which also decides every datum the direct reader refuses, with its errors.
    pub async fn decode_direct<T: DirectRecord>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        let Some(value) = self.read_direct::<T>(bytes) else {
            return self.decode_as(bytes).await;
        };
        if cfg!(debug_assertions) {
            let generic = self.decode_as::<T>(bytes).await;
            assert_eq!(generic.ok().as_ref(), Some(&value), "direct and apache-avro decoding differ");
        }
        Ok(value)
    }

    /// A view `V` of a record `T` (the fields some reader needs, the rest skipped): read
    /// straight from the payload when the writer schema is `T`'s current one, else decoded
    /// whole through apache-avro and viewed with `of`. Debug builds check both ways agree.
    pub async fn decode_view<T: DirectRecord, V: PartialEq + std::fmt::Debug>(
        &self,
        bytes: &[u8],
        read: impl FnOnce(&mut Reader<'_>) -> Result<V, direct::Unreadable>,
        of: impl FnOnce(&T) -> V,
    ) -> Result<V, CodecError> {
        let Some(view) = self.read_direct_with(bytes, T::FULL_NAME, read) else {
            return Ok(of(&self.decode_as::<T>(bytes).await?));
        };
        if cfg!(debug_assertions) {
            let whole = self.decode_as::<T>(bytes).await;
            assert_eq!(
                whole.ok().as_ref().map(of).as_ref(),
                Some(&view),
                "direct view and apache-avro differ"
            );
        }
        Ok(view)
    }

    fn read_direct<T: DirectRecord>(&self, bytes: &[u8]) -> Option<T> {
        self.read_direct_with(bytes, T::FULL_NAME, T::read)
    }

    fn read_direct_with<V>(
        &self,
        bytes: &[u8],
        full_name: &str,
        read: impl FnOnce(&mut Reader<'_>) -> Result<V, direct::Unreadable>,
    ) -> Option<V> {
        let (framing, datum) = Framing::parse(bytes).ok()?;
        let fingerprint = match framing {
            Framing::SingleObject { fingerprint } => fingerprint,
            // An id is learnt (and cached) by its first record, through apache-avro.
            Framing::Confluent { schema_id } => {
                self.by_id.read().expect("lock poisoned").get(&schema_id)?.fingerprint
            }
        };
        let writer = self.schemas.by_fingerprint(fingerprint)?;
        if writer.revision.is_some() || writer.full_name != full_name {
            return None;
        }
        let mut reader = Reader::new(datum);
        let value = read(&mut reader).ok()?;
        reader.is_empty().then_some(value)
    }

    async fn writer_schema(&self, framing: Framing) -> Result<Arc<KnownSchema>, CodecError> {
        match framing {
            Framing::SingleObject { fingerprint } => self
                .schemas
                .by_fingerprint(fingerprint)
                .cloned()
                .ok_or(CodecError::UnknownFingerprint { fingerprint }),
            Framing::Confluent { schema_id: id } => {
                if let Some(known) = self.by_id.read().expect("lock poisoned").get(&id) {
                    return Ok(Arc::clone(known));
                }
                let registry = self.registry.as_ref().ok_or(CodecError::NoRegistry { id })?;
                let text = registry.schema_by_id(id).await?.ok_or(CodecError::UnknownSchemaId { id })?;
                let parsed = KnownSchema::parse("registry", None, &text, &format!("registry id {id}"))?;
                // Prefer the embedded copy: same schema, and it is already shared.
                let known = match self.schemas.by_fingerprint(parsed.fingerprint) {
                    Some(k) => Arc::clone(k),
                    None => Arc::new(parsed),
                };
                self.by_id.write().expect("lock poisoned").insert(id, Arc::clone(&known));
                Ok(known)
            }
        }
    }
}

/// Reads one datum, resolving to `reader` when given; refuses truncated datums and
/// trailing bytes.
pub fn read_datum(
    name: &str,
    writer: &Schema,
    reader: Option<&Schema>,
    datum: &[u8],
) -> Result<Value, CodecError> {
    let err = |e| CodecError::Datum { schema: name.to_owned(), source: Box::new(e) };
    let prepared = GenericDatumReader::builder(writer).maybe_reader_schema(reader).build().map_err(err)?;
    read_value_prepared(name, &prepared, datum)
}

/// [`read_datum`] with a reader prepared beforehand.
fn read_value_prepared(
    name: &str,
    prepared: &GenericDatumReader<'_>,
    datum: &[u8],
) -> Result<Value, CodecError> {
    let err = |e| CodecError::Datum { schema: name.to_owned(), source: Box::new(e) };
    let mut input = EofGuard { rest: datum, hit_eof: false };
    let value = prepared.read_value(&mut input);
    // Running out of input is the cause, whatever apache-avro made of it.
    if input.hit_eof {
        return Err(CodecError::TruncatedDatum { schema: name.to_owned(), len: datum.len() });
    }
    let value = value.map_err(err)?;
    if !input.rest.is_empty() {
        return Err(CodecError::TrailingBytes { schema: name.to_owned(), trailing: input.rest.len() });
    }
    Ok(value)
}

/// Deserializes one datum straight into `T` with a reader prepared without a reader schema
/// (read_deser panics on its unimplemented resolving path otherwise); refuses truncated
/// datums and trailing bytes.
fn read_typed<T: DeserializeOwned>(
    name: &str,
    prepared: &GenericDatumReader<'_>,
    datum: &[u8],
) -> Result<T, CodecError> {
    let mut input = EofGuard { rest: datum, hit_eof: false };
    let value = prepared.read_deser::<T>(&mut input);
    if input.hit_eof {
        return Err(CodecError::TruncatedDatum { schema: name.to_owned(), len: datum.len() });
    }
    let value = value.map_err(|e| CodecError::Convert { schema: name.to_owned(), source: Box::new(e) })?;
    if !input.rest.is_empty() {
        return Err(CodecError::TrailingBytes { schema: name.to_owned(), trailing: input.rest.len() });
    }
    Ok(value)
}

/// A byte source that remembers whether anyone read past its end.
///
/// apache-avro 0.22 decodes end-of-input where a union, boolean or string starts as
/// `null` instead of failing, so a datum cut just before a trailing optional field would
/// read as a valid record with that field missing. A complete datum never reads past its
/// end, so any such read means the datum was truncated.
struct EofGuard<'a> {
    rest: &'a [u8],
    hit_eof: bool,
}

impl std::io::Read for EofGuard<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() && !buf.is_empty() {
            self.hit_eof = true;
        }
        self.rest.read(buf)
    }
}

/// A writer of the current revision of `record`, framed as single-object encoding (no
/// registry in memory).
pub fn single_object_writer(codec: &Codec, record: &str) -> Result<RecordWriter, CodecError> {
    let known = codec.schemas().current(record)?;
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint })
}

/// Writes records of one schema with one framing; synchronous, for the hot path.
pub struct RecordWriter {
    known: Arc<KnownSchema>,
    framing: Framing,
    header: Vec<u8>,
    writer: GenericDatumWriter<'static>,
}

impl fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordWriter")
            .field("schema", &self.known.full_name)
            .field("framing", &self.framing)
            .finish()
    }
}

impl RecordWriter {
    /// A writer for an embedded schema with the given framing.
    pub fn new(known: &'static Arc<KnownSchema>, framing: Framing) -> Result<Self, CodecError> {
        let writer = GenericDatumWriter::builder(&known.schema)
            .build()
            .map_err(|e| CodecError::Encode { schema: known.full_name.clone(), source: Box::new(e) })?;
        Ok(Self { known: Arc::clone(known), framing, header: framing.header(), writer })
    }

    /// A second writer of the same schema and framing (each task owns its writers).
    pub fn try_clone(&self) -> Result<Self, CodecError> {
        let known = SchemaSet::embedded()?
            .by_fingerprint(self.known.fingerprint)
            .ok_or_else(|| CodecError::UnknownRecord { name: self.known.full_name.clone() })?;
        Self::new(known, self.framing)
    }

    /// The framing this writer puts in front of each datum.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The schema written.
    pub fn schema(&self) -> &KnownSchema {
        &self.known
    }

    /// Encodes a serde value shaped like the schema (schema-aware serializer, no
    /// intermediate `Value`).
    pub fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::with_capacity(self.header.len() + 128);
        out.extend_from_slice(&self.header);
        self.writer.write_ser(&mut out, value).map_err(|e| self.encode_error(e))?;
        Ok(out)
    }

    /// [`RecordWriter::encode`] of a record with a direct form (the same bytes, written field
    /// by field without walking the schema).
    pub fn encode_direct<T: DirectRecord>(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        let bytes = self.encode_with(T::FULL_NAME, |out| value.write(out))?;
        if cfg!(debug_assertions) {
            assert_eq!(bytes, self.encode(value)?, "direct and apache-avro encoding differ");
        }
        Ok(bytes)
    }

    /// The framing header, then a datum of the record `full_name` written by `write` (which
    /// must follow this writer's schema field by field, as [`direct`] does); refused when
    /// this writer writes another record.
    pub fn encode_with(
        &self,
        full_name: &str,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Vec<u8>, CodecError> {
        if self.known.full_name != full_name {
            return Err(CodecError::UnknownRecord {
                name: format!("{full_name} (this writer writes {})", self.known.full_name),
            });
        }
        let mut out = Vec::with_capacity(self.header.len() + 256);
        out.extend_from_slice(&self.header);
        write(&mut out);
        Ok(out)
    }

    /// Encodes an Avro value, validating it against the schema first.
    pub fn encode_value(&self, value: &Value) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::with_capacity(self.header.len() + 128);
        out.extend_from_slice(&self.header);
        self.writer.write_value_ref(&mut out, value).map_err(|e| self.encode_error(e))?;
        Ok(out)
    }

    fn encode_error(&self, e: apache_avro::Error) -> CodecError {
        CodecError::Encode { schema: self.known.full_name.clone(), source: Box::new(e) }
    }
}
