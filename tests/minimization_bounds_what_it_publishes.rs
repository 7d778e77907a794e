//! Issue 46: minimization bounds size at the source (docs/security.md, "Bounds"). Two Jobs
//! are added to a simulated trace: one whose status carries 300 000 conditions (30 MB as an
//! observation before the bounds) and one whose allowlisted dependency annotation is 1.5 MB
//! (no API server admits it; a trace file can). `replay` and `publish` keep the first, with
//! one condition per type, and skip the second — counted, named by its key, never a
//! publisher retrying forever — and everything else as it was.

mod support;

use std::{fs, path::Path, process::Command};

use serde_json::{Value, json};
use support::{Scratch, infra, read_records, replay_finished, simulate_small};

const MANY_CONDITIONS_UID: &str = "0b0b0b0b-0000-4000-8000-000000300000";
const HUGE_ANNOTATION_UID: &str = "0b0b0b0b-0000-4000-8000-0000015e0000";
const CONDITIONS: usize = 300_000;

/// The simulated trace with the two Jobs added after the first finished Job (same time):
/// `(the trace, the trace without them)`.
fn traces(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let plain = dir.join("plain.jsonl");
    simulate_small("1", "7", &plain, &[]);
    let text = fs::read_to_string(&plain).unwrap();
    let mut out = String::with_capacity(text.len() + (40 << 20));
    let mut added = false;
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if added {
            continue;
        }
        let entry: Value = serde_json::from_str(line).unwrap();
        let object = &entry["object"];
        if object["kind"] != "Job" || object["status"]["conditions"].as_array().is_none_or(Vec::is_empty) {
            continue;
        }
        let mut many = entry.clone();
        rename(&mut many["object"], "many-conditions", MANY_CONDITIONS_UID);
        let conditions = many["object"]["status"]["conditions"].as_array_mut().unwrap();
        conditions.extend((0..CONDITIONS).map(|i| {
            json!({"type": "Suspended", "status": "False", "reason": "Resumed",
                   "lastTransitionTime": format!("2026-10-{:02}T00:00:00Z", 1 + i % 28)})
        }));
        let mut huge = entry.clone();
        rename(&mut huge["object"], "huge-annotation", HUGE_ANNOTATION_UID);
        huge["object"]["metadata"]["annotations"]["kubefacts.io/depends-on"] = json!("x".repeat(1_500_000));
        for added in [many, huge] {
            out.push_str(&added.to_string());
            out.push('\n');
        }
        added = true;
    }
    assert!(added, "the trace has no finished Job");
    let trace = dir.join("trace.jsonl");
    fs::write(&trace, out).unwrap();
    (trace, plain)
}

fn rename(job: &mut Value, name: &str, uid: &str) {
    job["metadata"]["name"] = json!(name);
    job["metadata"]["uid"] = json!(uid);
    job["metadata"].as_object_mut().unwrap().remove("ownerReferences");
}

fn replay(trace: &Path, output: &Path, config: &str) -> String {
    replay_finished(trace, output, config).stdout
}

/// The `jobs.v1` lines of a replay, by key.
fn jobs(dir: &Path, prefix: &str) -> Vec<(String, Value)> {
    let text = fs::read_to_string(dir.join(format!("{prefix}jobs.v1.jsonl"))).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["key"].as_str().unwrap_or("").to_owned(), v))
        .collect()
}

#[test]
fn replay_keeps_one_condition_per_type_and_skips_what_is_still_too_large() {
    let scratch = Scratch::new("bounds-replay", "");
    let (dir, config) = (scratch.path(), scratch.config.to_str().unwrap());
    let (trace, plain) = traces(dir);
    let said = replay(&trace, &dir.join("bounded"), config);
    assert!(
        said.contains(&format!("bounded: {} Job conditions and 0 Pod containers cut", CONDITIONS - 1))
            && said.contains("1 observations over the producer's limit skipped"),
        "{said}"
    );
    let jobs_seen = jobs(&dir.join("bounded"), &scratch.prefix);
    let many: Vec<&Value> =
        jobs_seen.iter().filter(|(k, _)| k == MANY_CONDITIONS_UID).map(|(_, v)| v).collect();
    assert!(!many.is_empty(), "the Job with 300 000 conditions was not published");
    for record in &many {
        let conditions = record["value"]["job"]["status"]["conditions"].as_array().unwrap();
        let types: Vec<&str> = conditions.iter().map(|c| c["type"].as_str().unwrap()).collect();
        let unique: std::collections::BTreeSet<&str> = types.iter().copied().collect();
        assert!(
            unique.contains("Suspended") && unique.len() == types.len() && types.len() <= 16,
            "{types:?}"
        );
        assert!(record.to_string().len() < 16 << 10, "{} bytes", record.to_string().len());
    }
    assert!(!jobs_seen.iter().any(|(k, _)| k == HUGE_ANNOTATION_UID), "the 1.5 MB observation was kept");

    // Nothing else changed: every other key's records are the plain trace's.
    replay(&plain, &dir.join("plain"), config);
    let others = |dir: &Path| -> Vec<Value> {
        jobs(dir, &scratch.prefix)
            .into_iter()
            .filter(|(k, _)| k != MANY_CONDITIONS_UID)
            .map(|(_, v)| json!([v["key"], v["value"]]))
            .collect()
    };
    let (bounded, expected) = (others(&dir.join("bounded")), others(&dir.join("plain")));
    assert_eq!(bounded.len(), expected.len());
    assert!(bounded == expected, "the other Jobs' observations differ");
}

#[test]
fn publish_skips_an_observation_over_the_producers_limit_and_goes_on() {
    let infra = infra();
    let scratch = Scratch::new("bounds-publish", "");
    let (dir, config) = (scratch.path(), scratch.config.to_str().unwrap());
    let (trace, _) = traces(dir);
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["publish", "--create-topics", "--partitions", "3", "--finish"])
        .args(["--input", trace.to_str().unwrap(), "--config", config])
        .args(["--bootstrap", &infra.bootstrap, "--registry", &infra.registry])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "publish failed:\n{stderr}\n{stdout}");
    assert!(stdout.contains("1 observations over the producer's limit skipped"), "{stdout}");
    assert!(
        stderr.contains("observation larger than the producer's limit")
            && stderr.contains(HUGE_ANNOTATION_UID),
        "the skipped observation is not named in the log:\n{stderr}"
    );
    let published = read_records(&infra.bootstrap, &format!("{}jobs.v1", scratch.prefix));
    let key_is = |uid: &str| published.iter().filter(|r| r.key.as_deref() == Some(uid.as_bytes())).count();
    assert!(key_is(MANY_CONDITIONS_UID) > 0, "the bounded Job was not published");
    assert_eq!(key_is(HUGE_ANNOTATION_UID), 0, "the oversized observation was published");
    let largest = published.iter().filter_map(|r| r.value.as_ref()).map(Vec::len).max().unwrap();
    assert!(largest < 16 << 10, "largest jobs.v1 record: {largest} bytes");
}
