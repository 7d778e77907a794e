//! Every output of the default pipeline on Kafka against `kubefacts replay` of the same
//! trace: logs record for record, tables (compacted) as the replay's records in order with
//! some left out.

use std::{collections::BTreeMap, path::Path};

use kubefacts::codec::{
    Codec,
    json::{Timestamps, to_json},
};
use serde_json::Value;

use super::read_records;

/// Records per key, in order: (key as JSON, value as JSON or null for a tombstone).
pub type ByKey = BTreeMap<String, Vec<Value>>;

/// The records of a `replay` output file, per key.
pub fn replayed(dir: &Path, topic: &str) -> ByKey {
    let mut out = ByKey::new();
    let text = std::fs::read_to_string(dir.join(format!("{topic}.jsonl"))).unwrap_or_default();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        out.entry(v["key"].to_string()).or_default().push(v["value"].clone());
    }
    out
}

/// The committed records of a topic on Kafka, per key, decoded as `replay` decodes them.
pub fn on_kafka(rt: &tokio::runtime::Runtime, codec: &Codec, bootstrap: &str, topic: &str) -> ByKey {
    let mut out = ByKey::new();
    for r in read_records(bootstrap, topic) {
        let decode =
            |bytes: &[u8]| to_json(&rt.block_on(codec.decode(bytes)).unwrap().value, Timestamps::Rfc3339);
        let key = match r.key.as_deref() {
            // Avro keys, single-object or Confluent framed (magic byte 0 and a schema id).
            Some(k) if k.starts_with(&[0xC3, 0x01]) || (k.len() > 5 && k[0] == 0) => decode(k),
            Some(k) => Value::String(String::from_utf8_lossy(k).into_owned()),
            None => Value::Null,
        };
        let value = r.value.as_deref().map_or(Value::Null, decode);
        out.entry(key.to_string()).or_default().push(value);
    }
    out
}

/// Where two per-key histories first differ, one paragraph per key (at most 8).
pub fn differences(what: &str, want: &ByKey, got: &ByKey) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (w, g) = (want.get(k).cloned().unwrap_or_default(), got.get(k).cloned().unwrap_or_default());
        if w != g {
            let at = w.iter().zip(&g).position(|(a, b)| a != b).unwrap_or(w.len().min(g.len()));
            out.push(format!(
                "{what} {k}: {} records on Kafka, {} in the replay; first difference at #{}:\n    replay: {}\n    kafka:  {}",
                g.len(),
                w.len(),
                at + 1,
                w.get(at).map_or("<none>".into(), Value::to_string),
                g.get(at).map_or("<none>".into(), Value::to_string),
            ));
        }
    }
    out.truncate(8);
    out
}

/// For tables (compacted: the broker may drop a key's earlier records at any time): per key,
/// Kafka's records must be the replay's in the same order with some left out, and the last
/// must be the replay's last. A record on Kafka the replay never wrote is a difference.
pub fn table_differences(what: &str, want: &ByKey, got: &ByKey) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (w, g) = (want.get(k).cloned().unwrap_or_default(), got.get(k).cloned().unwrap_or_default());
        let mut rest = w.iter();
        let unmatched = g.iter().position(|r| !rest.any(|x| x == r));
        if unmatched.is_some() || w.last() != g.last() {
            let at = unmatched.unwrap_or(g.len().saturating_sub(1));
            out.push(format!(
                "{what} {k}: {} records on Kafka, {} in the replay; Kafka's #{} is {}:\n    kafka:  {}\n    replay's last: {}",
                g.len(),
                w.len(),
                at + 1,
                if unmatched.is_some() { "not one of the replay's (in order)" } else { "not the replay's last" },
                g.get(at).map_or("<none>".into(), Value::to_string),
                w.last().map_or("<none>".into(), Value::to_string),
            ));
        }
    }
    out.truncate(8);
    out
}

/// The stage outputs compared, each a log (`false`) or a table (`true`).
pub const OUTPUTS: [(&str, bool); 5] = [
    ("job-runs.v2", true),
    ("coverage-alerts.v1", false),
    ("session-projections.v1", true),
    ("retained-compute-by-owner.v1", true),
    ("cleanup-decisions.v1", false),
];

/// Compares every output (and the run facts, per key as a set) under `prefix` on Kafka
/// with the replay's files in `replay_dir`: (differences, one line per output compared).
pub fn compare_outputs(
    rt: &tokio::runtime::Runtime,
    codec: &Codec,
    bootstrap: &str,
    replay_dir: &Path,
    prefix: &str,
    mut each: impl FnMut(&str, &ByKey),
) -> (Vec<String>, Vec<String>) {
    let topic = |name: &str| format!("{prefix}{name}");
    let (mut failures, mut compared) = (Vec::new(), Vec::new());
    for (name, table) in OUTPUTS {
        let (want, got) = (replayed(replay_dir, &topic(name)), on_kafka(rt, codec, bootstrap, &topic(name)));
        assert!(!want.is_empty(), "the replay wrote no {name}");
        let (records, kept) =
            (want.values().map(Vec::len).sum::<usize>(), got.values().map(Vec::len).sum::<usize>());
        compared.push(format!("{name}: {} keys, {records} records ({kept} on Kafka)", want.len()));
        failures.extend(if table {
            table_differences(name, &want, &got)
        } else {
            differences(name, &want, &got)
        });
        each(name, &want);
    }
    // Run facts: one key (a CronJob) is written by several [runs] tasks, in commit order, so
    // compare each key's facts as a set.
    let sorted = |mut m: ByKey| {
        m.values_mut().for_each(|v| v.sort_by_key(Value::to_string));
        m
    };
    let facts = topic("job-run-facts.v1");
    let (want, got) = (sorted(replayed(replay_dir, &facts)), sorted(on_kafka(rt, codec, bootstrap, &facts)));
    compared.push(format!("job-run-facts.v1: {} runs", want.values().map(Vec::len).sum::<usize>()));
    failures.extend(differences("job-run-facts.v1", &want, &got));
    (failures, compared)
}
