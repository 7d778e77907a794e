//! Avro values as JSON, for `tail`, the demo and comparisons with other decoders.

use apache_avro::types::Value;
use serde_json::{Map, Number, Value as Json};

/// How timestamps appear in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamps {
    /// Integer milliseconds since the Unix epoch (what the wire holds).
    EpochMillis,
    /// RFC 3339 in UTC with milliseconds, for people.
    Rfc3339,
}

/// Converts an Avro value to JSON: unions become their branch's value, enums their
/// symbol, bytes and fixed a lower-case hex string, records objects in field order.
pub fn to_json(value: &Value, ts: Timestamps) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => Json::from(*i),
        Value::Long(l) | Value::TimeMicros(l) => Json::from(*l),
        Value::Float(f) => Number::from_f64(f64::from(*f)).map_or(Json::Null, Json::Number),
        Value::Double(d) => Number::from_f64(*d).map_or(Json::Null, Json::Number),
        Value::Bytes(b) | Value::Fixed(_, b) => Json::String(hex(b)),
        Value::String(s) | Value::Enum(_, s) => Json::String(s.clone()),
        Value::Uuid(u) => Json::String(u.to_string()),
        Value::Union(_, inner) => to_json(inner, ts),
        Value::Array(items) => Json::Array(items.iter().map(|v| to_json(v, ts)).collect()),
        Value::Map(m) => {
            let mut keys: Vec<_> = m.keys().collect();
            keys.sort();
            Json::Object(keys.into_iter().map(|k| (k.clone(), to_json(&m[k], ts))).collect())
        }
        Value::Record(fields) => {
            let mut obj = Map::with_capacity(fields.len());
            for (k, v) in fields {
                obj.insert(k.clone(), to_json(v, ts));
            }
            Json::Object(obj)
        }
        Value::TimestampMillis(ms) | Value::LocalTimestampMillis(ms) => match ts {
            Timestamps::EpochMillis => Json::from(*ms),
            Timestamps::Rfc3339 => rfc3339_millis(*ms).map_or(Json::from(*ms), Json::String),
        },
        Value::TimestampMicros(v)
        | Value::LocalTimestampMicros(v)
        | Value::TimestampNanos(v)
        | Value::LocalTimestampNanos(v) => Json::from(*v),
        other => Json::String(format!("{other:?}")),
    }
}

/// `2026-11-29T11:40:25.123Z`, or `None` outside jiff's range.
pub fn rfc3339_millis(ms: i64) -> Option<String> {
    let t = jiff::Timestamp::from_millisecond(ms).ok()?;
    Some(format!("{t:.3}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_both_ways() {
        let v = Value::TimestampMillis(1_764_416_425_123);
        assert_eq!(to_json(&v, Timestamps::EpochMillis), Json::from(1_764_416_425_123_i64));
        assert_eq!(to_json(&v, Timestamps::Rfc3339), Json::from("2025-11-29T11:40:25.123Z"));
    }

    #[test]
    fn unions_enums_and_records_flatten() {
        let v = Value::Record(vec![
            ("a".into(), Value::Union(1, Box::new(Value::Enum(2, "FAILED".into())))),
            ("b".into(), Value::Union(0, Box::new(Value::Null))),
            ("c".into(), Value::Bytes(vec![0xC3, 0x01])),
        ]);
        assert_eq!(
            to_json(&v, Timestamps::EpochMillis),
            serde_json::json!({"a": "FAILED", "b": null, "c": "c301"})
        );
    }
}
