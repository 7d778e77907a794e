//! The schemas compiled into this build: every `schemas/*.avsc` and every frozen revision
//! under `schemas/revisions/<stem>/rN.avsc`.

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
};

use apache_avro::{Schema, reader::datum::GenericDatumReader};

use super::{
    CodecError,
    canonical::{crc64_avro, parsing_canonical_form},
};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_schemas.rs"));
}

/// One parsed schema with what the codec needs to frame and find it.
#[derive(Debug)]
pub struct KnownSchema {
    /// Full name of the top-level record, e.g. `io.kubefacts.v1.JobObservation`.
    pub full_name: String,
    /// File stem, e.g. `job-observation`.
    pub stem: String,
    /// `Some(n)` for frozen revision `rN`; `None` for the current file.
    pub revision: Option<u32>,
    /// The schema as written (with docs): what is registered with a registry.
    pub text: String,
    /// The parsed schema.
    pub schema: Schema,
    /// CRC-64-AVRO fingerprint of the parsing canonical form (see [`super::canonical`]).
    pub fingerprint: u64,
}

impl KnownSchema {
    /// Parses a schema text; `origin` names it in errors.
    pub fn parse(stem: &str, revision: Option<u32>, text: &str, origin: &str) -> Result<Self, CodecError> {
        let schema = Schema::parse_str(text)
            .map_err(|e| CodecError::Schema { origin: origin.to_owned(), source: Box::new(e) })?;
        let full_name = match &schema {
            Schema::Record(r) => r.name.fullname(None),
            _ => {
                return Err(CodecError::NotARecord { origin: origin.to_owned() });
            }
        };
        let canonical = parsing_canonical_form(text)
            .map_err(|e| CodecError::Canonical { origin: origin.to_owned(), reason: e.to_string() })?;
        Ok(Self {
            full_name,
            stem: stem.to_owned(),
            revision,
            text: text.to_owned(),
            fingerprint: crc64_avro(canonical.as_bytes()),
            schema,
        })
    }
}

/// Every schema this build knows, by full name (current) and by fingerprint (all).
#[derive(Debug)]
pub struct SchemaSet {
    current: HashMap<String, Arc<KnownSchema>>,
    by_fingerprint: HashMap<u64, Arc<KnownSchema>>,
    revisions: HashMap<String, Vec<Arc<KnownSchema>>>,
}

impl SchemaSet {
    /// The schemas compiled into this binary, parsed once per process.
    pub fn embedded() -> Result<&'static SchemaSet, CodecError> {
        static EMBEDDED: OnceLock<Result<SchemaSet, String>> = OnceLock::new();
        EMBEDDED
            .get_or_init(|| Self::parse_embedded().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|reason| CodecError::Embedded { reason: reason.clone() })
    }

    /// A prepared datum reader (no resolution) for an embedded schema, by fingerprint.
    /// Preparing one resolves the schema's names, which costs as much as decoding a
    /// record; embedded schemas live for the whole process, so each is prepared once.
    pub fn embedded_reader(fingerprint: u64) -> Option<&'static GenericDatumReader<'static>> {
        static READERS: OnceLock<HashMap<u64, GenericDatumReader<'static>>> = OnceLock::new();
        let readers = READERS.get_or_init(|| {
            let Ok(set) = Self::embedded() else {
                return HashMap::new();
            };
            set.by_fingerprint
                .iter()
                .filter_map(|(fp, k)| Some((*fp, GenericDatumReader::builder(&k.schema).build().ok()?)))
                .collect()
        });
        readers.get(&fingerprint)
    }

    fn parse_embedded() -> Result<Self, CodecError> {
        let current = embedded::CURRENT
            .iter()
            .map(|(stem, text)| KnownSchema::parse(stem, None, text, &format!("schemas/{stem}.avsc")));
        let revisions = embedded::REVISIONS.iter().map(|(stem, rev, text)| {
            KnownSchema::parse(stem, Some(*rev), text, &format!("schemas/revisions/{stem}/r{rev}.avsc"))
        });
        Self::from_schemas(current.chain(revisions).collect::<Result<Vec<_>, _>>()?)
    }

    /// Builds a set from parsed schemas (current ones have `revision: None`).
    pub fn from_schemas(schemas: Vec<KnownSchema>) -> Result<Self, CodecError> {
        let mut set =
            SchemaSet { current: HashMap::new(), by_fingerprint: HashMap::new(), revisions: HashMap::new() };
        for s in schemas {
            let s = Arc::new(s);
            // A current file equal to its latest revision shares the fingerprint: keep the
            // current one, whose name the reader side resolves to anyway.
            if s.revision.is_none() || !set.by_fingerprint.contains_key(&s.fingerprint) {
                set.by_fingerprint.insert(s.fingerprint, Arc::clone(&s));
            }
            match s.revision {
                None => {
                    set.current.insert(s.full_name.clone(), s);
                }
                Some(_) => set.revisions.entry(s.stem.clone()).or_default().push(s),
            }
        }
        for revs in set.revisions.values_mut() {
            revs.sort_by_key(|s| s.revision);
        }
        Ok(set)
    }

    /// The current schema of a record, by full name.
    pub fn current(&self, full_name: &str) -> Result<&Arc<KnownSchema>, CodecError> {
        self.current.get(full_name).ok_or_else(|| CodecError::UnknownRecord { name: full_name.to_owned() })
    }

    /// The schema (current or revision) with this fingerprint.
    pub fn by_fingerprint(&self, fingerprint: u64) -> Option<&Arc<KnownSchema>> {
        self.by_fingerprint.get(&fingerprint)
    }

    /// Current schemas, sorted by file stem.
    pub fn all_current(&self) -> Vec<&Arc<KnownSchema>> {
        let mut v: Vec<_> = self.current.values().collect();
        v.sort_by(|a, b| a.stem.cmp(&b.stem));
        v
    }

    /// Frozen revisions of a file stem, oldest first (empty if none).
    pub fn revisions(&self, stem: &str) -> &[Arc<KnownSchema>] {
        self.revisions.get(stem).map_or(&[], Vec::as_slice)
    }
}

impl AsRef<KnownSchema> for KnownSchema {
    fn as_ref(&self) -> &KnownSchema {
        self
    }
}
