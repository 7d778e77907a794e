//! `kubefacts session-event` on the real broker: what a host application publishes to
//! `sessions.v1` (docs/SESSIONS_INPUT.md), read back from Kafka and decoded by fastavro.

mod support;

use std::{path::Path, process::Command};

use kubefacts::runtime::partitioner::partition_for_key;
use serde_json::{Value, json};
use support::{Infra, infra, read_topic, repo_path, unique_name};

const PARTITIONS: i32 = 3;
const CLUSTER: &str = "sev-test";
const STATES: [&str; 8] =
    ["created", "STARTING", "Running", "waiting_for_input", "IDLE", "completed", "FAILED", "cancelled"];

/// A pipeline file with topics no other test uses; returns it and the sessions topic name.
fn pipeline(dir: &Path) -> (std::path::PathBuf, String) {
    let prefix = format!("{}.", unique_name("sev"));
    let config = dir.join("pipeline.toml");
    std::fs::write(&config, format!("cluster = \"{CLUSTER}\"\n[topics]\nprefix = \"{prefix}\"\n")).unwrap();
    (config, format!("{prefix}sessions.v1"))
}

/// `kubefacts session-event` with the broker, the config and `args`; its output.
fn session_event(infra: &Infra, config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["session-event", "--create-topics", "--partitions", &PARTITIONS.to_string()])
        .args(["--bootstrap", &infra.bootstrap, "--config"])
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

/// The 20 events of the file: every state, with and without a Pod UID, both events.
fn file_events() -> Vec<Value> {
    (0..20)
        .map(|i| {
            let mut e = json!({
                "session_id": format!("session-{i:02}"),
                "state": STATES[i % STATES.len()],
                "owner": format!("owner-{}", i % 3),
                "pod_namespace": "agents",
                "pod_name": format!("runner-{i}"),
                "observed_at": format!("2026-11-29T10:00:{i:02}Z"),
            });
            if i % 2 == 0 {
                e["pod_uid"] = json!(format!("00000000-0000-4000-8000-0000000000{i:02}"));
            }
            if i % 5 == 4 {
                e["event"] = json!("deleted");
            }
            if i == 19 {
                e["instance"] = json!("host-app-7");
                e["epoch"] = json!(3);
            }
            e
        })
        .collect()
}

/// What fastavro must decode an event to (the writer's default instance and epoch when
/// the event gives none).
fn expected_value(e: &Value) -> Value {
    let at = e["observed_at"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond();
    json!({
        "source": {
            "cluster": CLUSTER,
            "instance": e.get("instance").cloned().unwrap_or(json!("kubefacts-cli")),
            "epoch": e.get("epoch").cloned().unwrap_or(json!(0)),
        },
        "observed_at": at,
        "event": e.get("event").and_then(Value::as_str).unwrap_or("applied").to_uppercase(),
        "session": {
            "session_id": e["session_id"],
            "state": e["state"].as_str().unwrap().to_uppercase(),
            "pod": {"namespace": e["pod_namespace"], "name": e["pod_name"], "uid": e.get("pod_uid").cloned().unwrap_or(Value::Null)},
            "owner": e["owner"],
            "updated_at": at,
        },
    })
}

/// `session-event: <id> <STATE> → <topic> partition P offset O` lines as (id, P, O).
fn printed(stdout: &str) -> Vec<(String, i32, i64)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("session-event: "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = w.len();
            assert_eq!((w[n - 4], w[n - 2]), ("partition", "offset"), "{l}");
            (w[1].to_owned(), w[n - 3].parse().unwrap(), w[n - 1].parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_land_on_their_keys_murmur2_partition_and_decode_with_fastavro() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let (config, topic) = pipeline(dir.path());

    // 20 events from a file, single-object framing (no registry).
    let events = file_events();
    let file = dir.path().join("sessions.jsonl");
    let lines: Vec<String> = events.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let out = session_event(&infra, &config, &["--from-file", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let mut reported = printed(&stdout);
    assert_eq!(reported.len(), 20, "one line per event:\n{stdout}");

    // One from the flags, Confluent framing through the registry.
    let flag_event = json!({
        "session_id": "flag-session", "state": "WAITING_FOR_INPUT", "owner": "team-a",
        "pod_namespace": "notebooks", "pod_name": "nb-1", "pod_uid": "3f0c5d5e-8a43-4a0e-9c1b-5b6f2a1d7e90",
        "observed_at": "2026-11-29T11:00:00Z", "instance": "notebook-host", "epoch": 42,
    });
    let out = session_event(
        &infra,
        &config,
        &[
            "--registry",
            &infra.registry,
            "--session-id",
            "flag-session",
            "--state",
            "waiting_for_input",
            "--owner",
            "team-a",
            "--pod-namespace",
            "notebooks",
            "--pod-name",
            "nb-1",
            "--pod-uid",
            "3f0c5d5e-8a43-4a0e-9c1b-5b6f2a1d7e90",
            "--observed-at",
            "2026-11-29T11:00:00Z",
            "--instance",
            "notebook-host",
            "--epoch",
            "42",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("flag-session WAITING_FOR_INPUT → {topic} partition")), "{stdout}");
    reported.extend(printed(&stdout));

    let records = tokio::task::block_in_place(|| read_topic(&infra.bootstrap, &topic));
    assert_eq!(records.len(), 21, "every event exactly once");
    let all: Vec<&Value> = events.iter().chain([&flag_event]).collect();
    let schema = repo_path("schemas/session-observation.avsc");
    let mut partitions_used = std::collections::BTreeSet::new();
    for r in &records {
        let key = String::from_utf8(r.key.clone().expect("a key")).unwrap();
        assert_eq!(
            r.partition,
            partition_for_key(key.as_bytes(), PARTITIONS),
            "{key} is not on its murmur2 partition (the Java client's, and its Pods')"
        );
        partitions_used.insert(r.partition);
        assert!(
            reported.contains(&(key.clone(), r.partition, r.offset)),
            "{key} at {}/{} was not reported: {reported:?}",
            r.partition,
            r.offset
        );
        let event = all.iter().find(|e| e["session_id"] == key.as_str()).unwrap_or_else(|| panic!("{key}?"));
        let decoded = match r.value.first() {
            Some(0) => infra.fastavro("confluent", None, std::slice::from_ref(&r.value)),
            _ => infra.fastavro("single-object", Some(&schema), std::slice::from_ref(&r.value)),
        };
        assert_eq!(decoded[0]["value"], expected_value(event), "{key}: {}", decoded[0]);
    }
    assert_eq!(partitions_used.len(), PARTITIONS as usize, "the keys spread over every partition");
    assert_eq!(
        records.iter().filter(|r| r.value.first() == Some(&0)).count(),
        1,
        "one Confluent-framed record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_names_the_flag_or_line_and_produces_nothing() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let (config, topic) = pipeline(dir.path());
    let mut events = file_events();
    let file = dir.path().join("first.jsonl");
    std::fs::write(&file, events[..3].iter().map(|e| e.to_string() + "\n").collect::<String>()).unwrap();
    let out = session_event(&infra, &config, &["--from-file", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = tokio::task::block_in_place(|| read_topic(&infra.bootstrap, &topic)).len();
    assert_eq!(before, 3);

    // One bad line (the 7th) among good ones: nothing of the file is produced.
    events[6]["state"] = json!("SLEEPING");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, events.iter().map(|e| e.to_string() + "\n").collect::<String>()).unwrap();
    let mut cases: Vec<(Vec<String>, &str)> = vec![(
        vec!["--from-file".into(), bad.to_str().unwrap().into()],
        "line 7: state: unknown state \"SLEEPING\"",
    )];
    let flags = |over: &[(&str, &str)]| {
        let mut args: Vec<String> = Vec::new();
        for (flag, default) in [
            ("--session-id", "s-1"),
            ("--state", "running"),
            ("--owner", "o"),
            ("--pod-namespace", "n"),
            ("--pod-name", "p"),
            ("--observed-at", "2026-11-29T10:00:00Z"),
        ] {
            let value = over.iter().find(|(f, _)| *f == flag).map_or(default, |(_, v)| v);
            args.extend([flag.to_owned(), value.to_owned()]);
        }
        args
    };
    cases.push((flags(&[("--session-id", "")]), "--session-id: must not be empty"));
    cases.push((flags(&[("--state", "paused")]), "--state: unknown state \"paused\""));
    cases.push((
        flags(&[("--observed-at", "yesterday")]),
        "--observed-at: \"yesterday\" is not an RFC 3339 time",
    ));
    cases.push(([flags(&[]), vec!["--pod-uid".into(), "nope".into()]].concat(), "--pod-uid: "));
    for (args, message) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = session_event(&infra, &config, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: expected {message:?} in:\n{stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("session-event:"),
            "{args:?} reported a record"
        );
    }
    let after = tokio::task::block_in_place(|| read_topic(&infra.bootstrap, &topic)).len();
    assert_eq!(after, before, "bad input produced records");
}
