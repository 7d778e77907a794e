//! The `.avsc` files follow the conventions downstream tools rely on (DESIGN §6): docs on
//! everything, `["null", T]` optionals defaulting to null, enums with an UNKNOWN default,
//! millisecond timestamps, and shared named types defined identically in every file.

mod support;

use std::{collections::BTreeMap, fs};

use serde_json::Value as Json;

const NAMESPACE: &str = "io.kubefacts.v1";

fn schema_files() -> Vec<(String, Json)> {
    let mut files = Vec::new();
    let root = support::repo_path("schemas");
    let mut paths: Vec<_> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).collect();
    for dir in fs::read_dir(format!("{root}/revisions")).unwrap() {
        paths.extend(fs::read_dir(dir.unwrap().path()).unwrap().map(|e| e.unwrap().path()));
    }
    paths.sort();
    for p in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "avsc")) {
        let text = fs::read_to_string(&p).unwrap();
        let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        files.push((p.strip_prefix(&root).unwrap().display().to_string(), json));
    }
    assert!(files.len() >= 11, "found only {} schema files", files.len());
    files
}

/// Walks a schema, calling `visit(path, node)` on every JSON object that is a type or field.
fn walk(node: &Json, path: &str, ns: &str, visit: &mut dyn FnMut(&str, &str, &Json)) {
    match node {
        Json::Array(branches) => branches.iter().for_each(|b| walk(b, path, ns, visit)),
        Json::Object(o) => {
            let ns = o.get("namespace").and_then(Json::as_str).unwrap_or(ns);
            visit(path, ns, node);
            match o.get("type").and_then(Json::as_str) {
                Some("record") => {
                    let name = o["name"].as_str().unwrap();
                    for f in o["fields"].as_array().unwrap() {
                        visit(&format!("{path}.{name}"), ns, f);
                        walk(
                            &f["type"],
                            &format!("{path}.{name}.{}", f["name"].as_str().unwrap()),
                            ns,
                            visit,
                        );
                    }
                }
                Some("array") => walk(&o["items"], path, ns, visit),
                Some("map") => walk(&o["values"], path, ns, visit),
                _ => {}
            }
        }
        _ => {}
    }
}

fn problems_of(file: &str, schema: &Json) -> Vec<String> {
    let mut problems = Vec::new();
    walk(schema, file, NAMESPACE, &mut |path, ns, node| {
        let kind = node.get("type").and_then(Json::as_str).unwrap_or("");
        let named = matches!(kind, "record" | "enum" | "fixed");
        let is_field = node.get("name").is_some() && !named;
        if (is_field || named) && node.get("doc").and_then(Json::as_str).is_none_or(|d| d.trim().is_empty()) {
            problems.push(format!("{path}: {} has no doc", node["name"]));
        }
        if named && ns != NAMESPACE {
            problems.push(format!("{path}: {} is in namespace {ns}", node["name"]));
        }
        if kind == "enum" {
            let symbols = node["symbols"].as_array().unwrap();
            if symbols.first() != Some(&Json::from("UNKNOWN"))
                || node.get("default") != Some(&Json::from("UNKNOWN"))
            {
                problems.push(format!("{path}: enum {} needs UNKNOWN first and as default", node["name"]));
            }
        }
        if is_field
            && let Json::Array(branches) = &node["type"]
            && (branches.first() != Some(&Json::from("null")) || node.get("default") != Some(&Json::Null))
        {
            problems.push(format!("{path}.{}: unions are [\"null\", T] with default null", node["name"]));
        }
        if let Some(lt) = node.get("logicalType").and_then(Json::as_str)
            && !matches!(lt, "timestamp-millis" | "uuid")
        {
            problems.push(format!("{path}: logical type {lt} (only timestamp-millis and uuid)"));
        }
    });
    problems
}

#[test]
fn every_record_field_and_enum_is_documented_and_conventional() {
    let problems: Vec<_> = schema_files().iter().flat_map(|(f, s)| problems_of(f, s)).collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_convention_check_catches_a_missing_doc_and_a_bad_union() {
    let (file, mut schema) = schema_files().remove(0);
    schema["fields"][0].as_object_mut().unwrap().remove("doc");
    schema["fields"][1]["type"] = serde_json::json!(["long", "null"]);
    let problems = problems_of(&file, &schema);
    assert_eq!(problems.len(), 2, "{problems:#?}");
}

#[test]
fn shared_named_types_are_identical_in_every_file() {
    let mut seen: BTreeMap<String, (String, Json)> = BTreeMap::new();
    let mut problems = Vec::new();
    for (file, schema) in schema_files().iter().filter(|(f, _)| !f.starts_with("revisions")) {
        walk(schema, file, NAMESPACE, &mut |_, ns, node| {
            let kind = node.get("type").and_then(Json::as_str).unwrap_or("");
            if matches!(kind, "record" | "enum" | "fixed") {
                let full = format!("{ns}.{}", node["name"].as_str().unwrap());
                match seen.get(&full) {
                    Some((first, def)) if def != node => {
                        problems.push(format!("{full}: {file} differs from {first}"))
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(full, (file.clone(), node.clone()));
                    }
                }
            }
        });
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(seen.contains_key("io.kubefacts.v1.Source") && seen.contains_key("io.kubefacts.v1.ObjectMeta"));
}

#[test]
fn no_schema_carries_fields_the_watcher_must_never_ship() {
    const FORBIDDEN: [&str; 7] = ["env", "args", "command", "volumes", "secret", "message", "image"];
    for (file, schema) in schema_files() {
        walk(&schema, &file, NAMESPACE, &mut |path, _, node| {
            if let Some(name) = node.get("name").and_then(Json::as_str) {
                assert!(!FORBIDDEN.contains(&name), "{path}: field {name} must never leave the watcher");
            }
        });
    }
}
