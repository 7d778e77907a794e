//! Field renames across revisions: a reader field with `"aliases"` reads a writer field of
//! one of those names (the Avro specification's rule; Java's `Schema.applyAliases`).
//! apache-avro 0.22 honours aliases in its compatibility check but not when it resolves a
//! datum, so before resolving, the writer schema's fields are renamed to the reader's
//! names. Only names change: the writer's binary layout, and so how its bytes decode, stays.

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock, RwLock},
};

use apache_avro::Schema;
use serde_json::Value;

use super::{CodecError, KnownSchema};

/// `writer`'s schema with its record fields renamed to what `reader` calls them through
/// its aliases (the writer itself when nothing is renamed). Cached per pair of
/// fingerprints: old revisions are few, their records many.
pub fn writer_as_read_by(writer: &KnownSchema, reader: &KnownSchema) -> Result<Arc<Schema>, CodecError> {
    /// (writer, reader) fingerprints → the renamed writer.
    type Renamed = HashMap<(u64, u64), Arc<Schema>>;
    static CACHE: OnceLock<RwLock<Renamed>> = OnceLock::new();
    let cache = CACHE.get_or_init(RwLock::default);
    let key = (writer.fingerprint, reader.fingerprint);
    if let Some(s) = cache.read().expect("lock poisoned").get(&key) {
        return Ok(Arc::clone(s));
    }
    let schema = Arc::new(renamed(&writer.text, &reader.text).map_err(|reason| CodecError::Canonical {
        origin: format!("{} read as {}", writer.full_name, reader.full_name),
        reason,
    })?);
    cache.write().expect("lock poisoned").insert(key, Arc::clone(&schema));
    Ok(schema)
}

/// The writer text with its record fields renamed by the reader's aliases, parsed.
fn renamed(writer: &str, reader: &str) -> Result<Schema, String> {
    let reader: Value = serde_json::from_str(reader).map_err(|e| e.to_string())?;
    let mut writer: Value = serde_json::from_str(writer).map_err(|e| e.to_string())?;
    let mut renames = HashMap::new();
    collect(&reader, "", &mut renames);
    if !renames.is_empty() {
        rename(&mut writer, "", &renames);
    }
    Schema::parse(&writer).map_err(|e| e.to_string())
}

/// The full name of a named type declared as `object` inside `namespace`, and the
/// namespace its own fields inherit.
fn full_name(object: &serde_json::Map<String, Value>, namespace: &str) -> Option<(String, String)> {
    let name = object.get("name")?.as_str()?;
    if name.contains('.') {
        let ns = name.rsplit_once('.').map_or("", |(ns, _)| ns);
        return Some((name.to_owned(), ns.to_owned()));
    }
    let ns = object.get("namespace").and_then(Value::as_str).unwrap_or(namespace);
    let full = if ns.is_empty() { name.to_owned() } else { format!("{ns}.{name}") };
    Some((full, ns.to_owned()))
}

/// Record full name → (writer field name → reader field name), from the reader's aliases.
fn collect(schema: &Value, namespace: &str, out: &mut HashMap<String, HashMap<String, String>>) {
    match schema {
        Value::Array(branches) => branches.iter().for_each(|b| collect(b, namespace, out)),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("record" | "error") => {
                let Some((full, ns)) = full_name(o, namespace) else { return };
                for field in o.get("fields").and_then(Value::as_array).into_iter().flatten() {
                    let (Some(name), Some(aliases)) = (
                        field.get("name").and_then(Value::as_str),
                        field.get("aliases").and_then(Value::as_array),
                    ) else {
                        collect(&field["type"], &ns, out);
                        continue;
                    };
                    for alias in aliases.iter().filter_map(Value::as_str) {
                        out.entry(full.clone()).or_default().insert(alias.to_owned(), name.to_owned());
                    }
                    collect(&field["type"], &ns, out);
                }
            }
            Some("array") => collect(&o["items"], namespace, out),
            Some("map") => collect(&o["values"], namespace, out),
            _ => {}
        },
        _ => {}
    }
}

fn rename(schema: &mut Value, namespace: &str, renames: &HashMap<String, HashMap<String, String>>) {
    match schema {
        Value::Array(branches) => branches.iter_mut().for_each(|b| rename(b, namespace, renames)),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("record" | "error") => {
                let Some((full, ns)) = full_name(o, namespace) else { return };
                let here = renames.get(&full);
                let names: Vec<String> = (o.get("fields").and_then(Value::as_array).into_iter().flatten())
                    .filter_map(|f| f.get("name").and_then(Value::as_str).map(str::to_owned))
                    .collect();
                for field in o.get_mut("fields").and_then(Value::as_array_mut).into_iter().flatten() {
                    if let (Some(map), Some(name)) = (here, field.get("name").and_then(Value::as_str)) {
                        // A writer field that already has the reader's name keeps it.
                        if let Some(new) = map.get(name).filter(|new| !names.contains(new)) {
                            field["name"] = Value::String(new.clone());
                        }
                    }
                    rename(&mut field["type"], &ns, renames);
                }
            }
            Some("array") => rename(&mut o["items"], namespace, renames),
            Some("map") => rename(&mut o["values"], namespace, renames),
            _ => {}
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_field_reads_the_old_name_nested_and_top_level() {
        let writer = r#"{"type": "record", "name": "A", "namespace": "x", "fields": [
            {"name": "key", "type": "string"},
            {"name": "gaps", "type": {"type": "array", "items": {"type": "record", "name": "Gap",
                "fields": [{"name": "from", "type": "long"}, {"name": "to", "type": "long"}]}}}]}"#;
        let reader = r#"{"type": "record", "name": "A", "namespace": "x", "fields": [
            {"name": "counted_key", "aliases": ["key"], "type": "string"},
            {"name": "gaps", "type": {"type": "array", "items": {"type": "record", "name": "x.Gap",
                "fields": [{"name": "started_at", "aliases": ["from"], "type": "long"},
                           {"name": "ended_at", "aliases": ["to"], "type": "long"}]}}}]}"#;
        let Schema::Record(r) = renamed(writer, reader).unwrap() else { panic!("a record") };
        assert_eq!(r.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["counted_key", "gaps"]);
        let text = serde_json::to_string(&renamed(writer, reader).unwrap()).unwrap();
        assert!(
            text.contains("started_at") && text.contains("ended_at") && !text.contains("\"from\""),
            "{text}"
        );
        // Without aliases nothing changes.
        let same = renamed(writer, writer).unwrap();
        assert_eq!(same, Schema::parse_str(writer).unwrap());
    }
}
