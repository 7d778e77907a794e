//! Schema evolution: every schema must read data written by each of its frozen revisions
//! (BACKWARD_TRANSITIVE), and the current file must be frozen as its latest revision.
//!
//! A breaking change is a new major version: a `v2` namespace and a new topic, never a
//! new revision of a `v1` file.

use apache_avro::{
    Schema,
    schema_compatibility::{Compatibility, SchemaCompatibility},
};
use thiserror::Error;

use super::{KnownSchema, SchemaSet};

/// Why a schema's history is not BACKWARD_TRANSITIVE, or not frozen.
#[derive(Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum EvolutionError {
    /// The schema has no frozen revision at all.
    #[error("{stem}: no frozen revision; copy schemas/{stem}.avsc to schemas/revisions/{stem}/r1.avsc")]
    NotFrozen {
        /// File stem.
        stem: String,
    },
    /// The current file differs from its highest revision.
    #[error(
        "{stem}: schemas/{stem}.avsc differs from its latest frozen revision r{latest}; \
         freeze the change as schemas/revisions/{stem}/r{next}.avsc",
        next = latest + 1
    )]
    CurrentDiffersFromLatest {
        /// File stem.
        stem: String,
        /// Highest revision number.
        latest: u32,
    },
    /// A later revision renamed the record.
    #[error("{stem}: r{newer} renames {old_name} to {new_name}; a rename is a new major version")]
    Renamed {
        /// File stem.
        stem: String,
        /// The later revision.
        newer: u32,
        /// Name in the earlier revision.
        old_name: String,
        /// Name in the later one.
        new_name: String,
    },
    /// A later revision cannot read data written with an earlier one.
    #[error("{stem}: r{newer} cannot read data written with r{older}: {reason}")]
    Incompatible {
        /// File stem.
        stem: String,
        /// The earlier (writer) revision.
        older: u32,
        /// The later (reader) revision.
        newer: u32,
        /// What the compatibility checker found.
        reason: String,
    },
}

/// Checks that `reader` can read everything written with `writer`.
pub fn can_read(writer: &KnownSchema, reader: &KnownSchema) -> Result<(), String> {
    if writer.full_name != reader.full_name {
        return Err(format!("record renamed from {} to {}", writer.full_name, reader.full_name));
    }
    match SchemaCompatibility::can_read(&writer.schema, &reader.schema) {
        Ok(Compatibility::Full) => Ok(()),
        // apache-avro reports an incompatible record inside `["null", Record]` as a partially
        // compatible union (the null branch still resolves): find the field that breaks.
        Ok(Compatibility::Partial) => Err(explain(&writer.schema, &reader.schema, "").unwrap_or_else(|| {
            "only partially compatible: some enum symbols or union branches would not resolve".into()
        })),
        Err(e) => Err(e.to_string()),
    }
}

/// Walks records and unions side by side and names the first field that cannot be read.
fn explain(writer: &Schema, reader: &Schema, path: &str) -> Option<String> {
    match (writer, reader) {
        (Schema::Record(w), Schema::Record(r)) => r.fields.iter().find_map(|rf| {
            let here = format!("{path}.{}", rf.name);
            match w.fields.iter().find(|wf| wf.name == rf.name) {
                None if rf.default.is_none() => Some(format!("{here}: added without a default")),
                None => None,
                Some(wf) => explain(&wf.schema, &rf.schema, &here),
            }
        }),
        (Schema::Union(w), Schema::Union(r)) => w.variants().iter().find_map(|wv| {
            let same = |rv: &&Schema| match (wv, *rv) {
                (Schema::Record(a), Schema::Record(b)) => a.name == b.name,
                (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
            };
            match r.variants().iter().find(same) {
                Some(rv) => explain(wv, rv, path),
                None => Some(format!("{path}: union branch {wv:?} is gone")),
            }
        }),
        (Schema::Ref { name: a }, Schema::Ref { name: b }) if a == b => None,
        _ => match SchemaCompatibility::can_read(writer, reader) {
            Ok(Compatibility::Full) => None,
            Ok(Compatibility::Partial) => Some(format!("{path}: only partially compatible")),
            Err(e) => Some(format!("{path}: {e}")),
        },
    }
}

/// Checks one schema's revisions (oldest first) and its current text: each revision reads
/// all earlier ones, and the current text equals the latest revision.
pub fn check_history(
    stem: &str,
    current: &KnownSchema,
    revisions: &[impl AsRef<KnownSchema>],
) -> Vec<EvolutionError> {
    let mut errors = Vec::new();
    let Some(latest) = revisions.last().map(AsRef::as_ref) else {
        return vec![EvolutionError::NotFrozen { stem: stem.to_owned() }];
    };
    let rev = |s: &KnownSchema| s.revision.unwrap_or(0);
    if current.text != latest.text {
        errors.push(EvolutionError::CurrentDiffersFromLatest { stem: stem.to_owned(), latest: rev(latest) });
    }
    for (j, newer) in revisions.iter().map(AsRef::as_ref).enumerate() {
        for older in revisions[..j].iter().map(AsRef::as_ref) {
            if older.full_name != newer.full_name {
                errors.push(EvolutionError::Renamed {
                    stem: stem.to_owned(),
                    newer: rev(newer),
                    old_name: older.full_name.clone(),
                    new_name: newer.full_name.clone(),
                });
            } else if let Err(reason) = can_read(older, newer) {
                errors.push(EvolutionError::Incompatible {
                    stem: stem.to_owned(),
                    older: rev(older),
                    newer: rev(newer),
                    reason,
                });
            }
        }
    }
    errors
}

/// Checks every embedded schema's history.
pub fn check_all(set: &SchemaSet) -> Vec<EvolutionError> {
    set.all_current()
        .into_iter()
        .flat_map(|current| check_history(&current.stem, current, set.revisions(&current.stem)))
        .collect()
}
