//! Avro's Parsing Canonical Form and its CRC-64-AVRO fingerprint, written to the
//! specification rather than taken from apache-avro: apache-avro 0.22 keeps
//! `{"type":"long"}` for logical types where the specification (and Java, Python's
//! fastavro) write `"long"`, so its fingerprints of any schema with a timestamp differ from
//! every other implementation and single-object records would not be readable elsewhere.

use serde_json::Value as Json;

/// Why a schema text has no canonical form.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("cannot compute the parsing canonical form: {0}")]
pub struct CanonicalError(String);

const PRIMITIVES: [&str; 8] = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"];

/// The Parsing Canonical Form of a schema given as JSON text.
pub fn parsing_canonical_form(schema_json: &str) -> Result<String, CanonicalError> {
    let json: Json = serde_json::from_str(schema_json).map_err(|e| CanonicalError(e.to_string()))?;
    let mut out = String::new();
    write_schema(&json, "", &mut out)?;
    Ok(out)
}

/// CRC-64-AVRO (the Rabin fingerprint of the specification) of some bytes.
pub fn crc64_avro(bytes: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut fp = i as u64;
            for _ in 0..8 {
                fp = (fp >> 1) ^ (EMPTY & 0u64.wrapping_sub(fp & 1));
            }
            *slot = fp;
        }
        t
    });
    bytes.iter().fold(EMPTY, |fp, b| (fp >> 8) ^ table[((fp ^ u64::from(*b)) & 0xff) as usize])
}

fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() { name.to_owned() } else { format!("{namespace}.{name}") }
}

fn write_str(s: &str, out: &mut String) {
    // serde_json escapes only what JSON requires, leaving other characters as UTF-8 [STRINGS].
    out.push_str(&Json::from(s).to_string());
}

fn write_schema(node: &Json, namespace: &str, out: &mut String) -> Result<(), CanonicalError> {
    match node {
        Json::String(name) if PRIMITIVES.contains(&name.as_str()) => write_str(name, out),
        Json::String(name) => write_str(&full_name(name, namespace), out),
        Json::Array(branches) => {
            out.push('[');
            for (i, b) in branches.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_schema(b, namespace, out)?;
            }
            out.push(']');
        }
        Json::Object(o) => {
            let ty = o.get("type").ok_or_else(|| CanonicalError("object without \"type\"".into()))?;
            let kind = match ty {
                Json::String(k) => k.as_str(),
                // {"type": {...}} or {"type": [...]}: the inner schema is the schema.
                nested => return write_schema(nested, namespace, out),
            };
            match kind {
                "record" | "error" | "enum" | "fixed" => {
                    let name = o
                        .get("name")
                        .and_then(Json::as_str)
                        .ok_or_else(|| CanonicalError(format!("{kind} without a name")))?;
                    let ns = o.get("namespace").and_then(Json::as_str).unwrap_or(namespace);
                    let full = full_name(name, ns);
                    let inner_ns = full.rsplit_once('.').map_or("", |(n, _)| n);
                    out.push_str("{\"name\":");
                    write_str(&full, out);
                    out.push_str(",\"type\":");
                    write_str(if kind == "error" { "error" } else { kind }, out);
                    match kind {
                        "enum" => {
                            out.push_str(",\"symbols\":");
                            out.push_str(&o.get("symbols").cloned().unwrap_or(Json::Null).to_string());
                        }
                        "fixed" => {
                            let size = o
                                .get("size")
                                .and_then(Json::as_u64)
                                .ok_or_else(|| CanonicalError("fixed without size".into()))?;
                            out.push_str(&format!(",\"size\":{size}"));
                        }
                        _ => {
                            out.push_str(",\"fields\":[");
                            let fields = o
                                .get("fields")
                                .and_then(Json::as_array)
                                .ok_or_else(|| CanonicalError(format!("record {full} without fields")))?;
                            for (i, f) in fields.iter().enumerate() {
                                if i > 0 {
                                    out.push(',');
                                }
                                let fname = f.get("name").and_then(Json::as_str).ok_or_else(|| {
                                    CanonicalError(format!("field of {full} without a name"))
                                })?;
                                out.push_str("{\"name\":");
                                write_str(fname, out);
                                out.push_str(",\"type\":");
                                write_schema(f.get("type").unwrap_or(&Json::Null), inner_ns, out)?;
                                out.push('}');
                            }
                            out.push(']');
                        }
                    }
                    out.push('}');
                }
                "array" => {
                    out.push_str("{\"type\":\"array\",\"items\":");
                    write_schema(o.get("items").unwrap_or(&Json::Null), namespace, out)?;
                    out.push('}');
                }
                "map" => {
                    out.push_str("{\"type\":\"map\",\"values\":");
                    write_schema(o.get("values").unwrap_or(&Json::Null), namespace, out)?;
                    out.push('}');
                }
                // A primitive, possibly carrying a logicalType: [PRIMITIVES] + [STRIP].
                other => write_schema(&Json::from(other), namespace, out)?,
            }
        }
        other => return Err(CanonicalError(format!("unexpected schema node {other}"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_specification_vectors() {
        // From the Avro specification and its shared test data (schema-tests.txt).
        assert_eq!(crc64_avro(b"\"null\""), 0x63dd_24e7_cc25_8f8a);
        assert_eq!(parsing_canonical_form(r#"{"type":"int"}"#).unwrap(), r#""int""#);
        assert_eq!(
            parsing_canonical_form(r#"{"type":"long","logicalType":"timestamp-millis"}"#).unwrap(),
            r#""long""#
        );
        assert_eq!(
            parsing_canonical_form(
                r#"{"namespace":"x.y","type":"record","name":"R","doc":"d","fields":[
                    {"name":"a","type":"R","default":null,"doc":"self"},
                    {"name":"e","type":{"type":"enum","name":"E","namespace":"z","symbols":["A","B"]}},
                    {"name":"f","type":["null",{"type":"array","items":"z.E"}]},
                    {"name":"g","type":{"type":"fixed","name":"F","size":016}}]}"#
                    .replace("016", "16")
                    .as_str()
            )
            .unwrap(),
            r#"{"name":"x.y.R","type":"record","fields":[{"name":"a","type":"x.y.R"},{"name":"e","type":{"name":"z.E","type":"enum","symbols":["A","B"]}},{"name":"f","type":["null",{"type":"array","items":"z.E"}]},{"name":"g","type":{"name":"x.y.F","type":"fixed","size":16}}]}"#
        );
    }
}
