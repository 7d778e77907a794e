//! Issue 9 end to end on the real broker: the session records of a simulated trace published
//! by `kubefacts session-event --from-file` (as a host application would), the Pods, markers
//! and heartbeats of the same trace by `kubefacts publish`, `kubefacts process` running
//! `[sessions]` and `[session-owners]`, and `session-projections.v1` and
//! `retained-compute-by-owner.v1` read back with read_committed, decoded by fastavro and
//! compared with the in-memory `replay` of the same trace.
//!
//! It found two differences, both fixed: the simulator stamped STARTING's `updated_at`
//! before CREATED's (replay dropped it as stale, `session-event` then had no `updated_at`),
//! and `[session-owners]` stamped totals with its own stream time, which on Kafka depends on
//! how the `[sessions]` tasks interleave in the repartition topic.

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::{Duration, Instant},
};

use kubefacts::codec::json::rfc3339_millis;
use serde_json::{Value, json};
use support::{
    Infra, KillOnDrop, infra, kubefacts_ok, process_command, read_topic, repo_path, simulate_small,
    unique_name,
};

const PARTITIONS: &str = "3";
/// The simulated trace: the small profile's 12 sessions, every retention state it produces
/// (checked below on the replay).
const HOURS: &str = "4";
const SEED: &str = "1";

/// Splits a trace: what the sessions stage reads goes to `kept` (Namespaces too: admission
/// holds a Pod until its Namespace is seen), SESSION lines become `session-event --from-file`
/// lines in `sessions`, and what `[sessions]` never reads (Jobs, CronJobs, Leases, Job Pods) is
/// dropped to keep the run short. Returns how many session lines there were.
fn split_trace(trace: &Path, kept: &Path, sessions: &Path) -> usize {
    let (mut rest, mut events) = (String::new(), String::new());
    let mut n = 0;
    for line in std::fs::read_to_string(trace).unwrap().lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let kind = v["object"]["kind"].as_str().or(v["kind"].as_str());
        match (v["type"].as_str(), kind) {
            (Some("SESSION"), _) => {
                let s = &v["session"];
                let at = match &v["observed_at"] {
                    Value::Number(ms) => rfc3339_millis(ms.as_i64().unwrap()).unwrap(),
                    t => t.as_str().unwrap().to_owned(),
                };
                let mut e = json!({
                    "session_id": s["session_id"], "state": s["state"], "owner": s["owner"],
                    "pod_namespace": s["pod"]["namespace"], "pod_name": s["pod"]["name"],
                    "observed_at": at,
                });
                if let Some(uid) = s["pod"]["uid"].as_str() {
                    e["pod_uid"] = json!(uid);
                }
                // When the host application changed the state (a little before it published
                // it): [sessions] drops a change older than the one it holds.
                if let Some(ms) = s["updated_at_ms"].as_i64() {
                    e["updated_at"] = json!(rfc3339_millis(ms).unwrap());
                }
                events.push_str(&(e.to_string() + "\n"));
                n += 1;
            }
            (_, Some("Job" | "CronJob" | "Lease")) => {}
            (_, Some("Pod"))
                if v["object"]["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|r| r["kind"] == "Job")) => {}
            _ => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
    }
    std::fs::write(kept, rest).unwrap();
    std::fs::write(sessions, events).unwrap();
    n
}

/// Records of a topic, in partition then offset order, as (partition, key, value): the
/// value decoded by fastavro from the Confluent-framed bytes with the repository's schema
/// file, timestamps rendered as the replay writes them; `None` for a tombstone.
fn decoded(infra: &Infra, topic: &str, schema: &str) -> Vec<(i32, String, Option<Value>)> {
    let records = if support::topic_exists(&infra.bootstrap, topic) {
        read_topic(&infra.bootstrap, topic)
    } else {
        Vec::new()
    };
    let values: Vec<Vec<u8>> =
        records.iter().filter(|r| !r.value.is_empty()).map(|r| r.value.clone()).collect();
    assert!(values.iter().all(|v| v.first() == Some(&0)), "{topic}: Confluent framing (magic byte 0)");
    let mut fast = infra.fastavro("confluent", Some(&repo_path(schema)), &values).into_iter();
    records
        .iter()
        .map(|r| {
            let key = String::from_utf8(r.key.clone().expect("a key")).unwrap();
            let value = (!r.value.is_empty()).then(|| {
                let mut v = fast.next().unwrap()["value"].clone();
                let ms = v["stream_time"].as_i64().unwrap();
                v["stream_time"] = json!(rfc3339_millis(ms).unwrap());
                v
            });
            (r.partition, key, value)
        })
        .collect()
}

/// The records of a `replay` output file as (partition, key, value).
fn replayed(dir: &Path, topic: &str) -> Vec<(i32, String, Option<Value>)> {
    std::fs::read_to_string(dir.join(format!("{topic}.jsonl")))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let value = (!v["value"].is_null()).then(|| v["value"].clone());
            (v["partition"].as_i64().unwrap() as i32, v["key"].as_str().unwrap().to_owned(), value)
        })
        .collect()
}

/// The last record per key (a key's records are in one partition, in order), after checking
/// that each key stays in one partition and that its revisions increase.
fn latest(topic: &str, records: &[(i32, String, Option<Value>)]) -> BTreeMap<String, Option<Value>> {
    let mut out: BTreeMap<String, (i32, Option<Value>)> = BTreeMap::new();
    for (p, key, value) in records {
        if let Some((before_p, Some(before))) = out.get(key) {
            assert_eq!(before_p, p, "{topic}: key {key} on two partitions");
            if let Some(v) = value {
                assert!(
                    v["revision"].as_i64() > before["revision"].as_i64(),
                    "{topic}: {key}'s revision went from {} to {}",
                    before["revision"],
                    v["revision"]
                );
            }
        }
        out.insert(key.clone(), (*p, value.clone()));
    }
    out.into_iter().map(|(k, (_, v))| (k, v)).collect()
}

/// Differences between two latest-per-key maps, one line per key, for failure messages.
fn diff(want: &BTreeMap<String, Option<Value>>, got: &BTreeMap<String, Option<Value>>) -> String {
    let keys: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let mut s = String::new();
    for k in keys {
        if want.get(k) != got.get(k) {
            s += &format!("  {k}:\n    replay: {:?}\n    kafka:  {:?}\n", want.get(k), got.get(k));
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_projections_on_kafka_equal_the_in_memory_replay() {
    let started = Instant::now();
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}.", unique_name("sess"));
    let config = dir.path().join("pipeline.toml");
    // Only the two session stages, on this test's own topics.
    std::fs::write(
        &config,
        format!(
            "[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{}\"\n\n\
             [[process.stages]]\nprocessor = \"sessions\"\ninputs = [\"topics.sessions\", \"topics.pods\"]\n\
             outputs = [\"topics.session_projections\", \"topics.session_owner_repartition\"]\n\n\
             [[process.stages]]\nprocessor = \"session-owners\"\ninputs = [\"topics.session_owner_repartition\"]\n\
             outputs = [\"topics.retained_by_owner\"]\n",
            unique_name("sess-app")
        ),
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();

    let full = dir.path().join("simulated.jsonl");
    // The trace ends within the last hour: with the default start (2026-11-01) the records
    // would be older than the broker's 7-day segment.ms and retention.ms, so every append
    // rolls a segment, the compacted outputs are compacted within a second (no history to
    // compare) and the inputs may be deleted by retention before they are processed.
    let hours: i64 = HOURS.parse().unwrap();
    let start = jiff::Timestamp::now().as_second() / 3600 * 3600 - hours * 3600;
    let start = jiff::Timestamp::from_second(start).unwrap().to_string();
    simulate_small(HOURS, SEED, &full, &["--start", &start]);
    let (kept, sessions_file, trace) =
        (dir.path().join("kept.jsonl"), dir.path().join("sessions.jsonl"), dir.path().join("trace.jsonl"));
    let session_lines = split_trace(&full, &kept, &sessions_file);
    assert!(session_lines > 0, "the simulated trace has SESSION lines");
    // What is published, as one trace (the simulator's order), for the replay.
    {
        let text = std::fs::read_to_string(&full).unwrap();
        let kept_text = std::fs::read_to_string(&kept).unwrap();
        let kept_lines: BTreeSet<&str> = kept_text.lines().collect();
        let union: String = text
            .lines()
            .filter(|l| l.contains("\"SESSION\"") || kept_lines.contains(l))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&trace, union).unwrap();
    }

    // Sessions as a host application publishes them, then the rest as the watcher would.
    let common = [
        "--create-topics",
        "--partitions",
        PARTITIONS,
        "--bootstrap",
        &infra.bootstrap,
        "--registry",
        &infra.registry,
        "--config",
        config_arg,
    ];
    let (sessions_arg, kept_arg) = (sessions_file.to_str().unwrap(), kept.to_str().unwrap());
    let sev =
        kubefacts_ok(&[&["session-event"][..], &common, &["--from-file", sessions_arg]].concat()).stdout;
    assert_eq!(sev.lines().filter(|l| l.starts_with("session-event: ")).count(), session_lines, "{sev}");
    kubefacts_ok(&[&["publish"][..], &common, &["--input", kept_arg]].concat());

    let log = dir.path().join("process.log");
    let process = process_command("a", &infra.bootstrap)
        .args(["--registry", &infra.registry, "--config", config_arg])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut process = KillOnDrop(process);

    // In memory, the same trace and pipeline.
    let replay_dir = dir.path().join("replay");
    kubefacts_ok(&[
        "replay",
        "--partitions",
        PARTITIONS,
        "--input",
        trace.to_str().unwrap(),
        "--output",
        replay_dir.to_str().unwrap(),
        "--config",
        config_arg,
    ]);
    let projections_topic = format!("{prefix}session-projections.v1");
    let owners_topic = format!("{prefix}retained-compute-by-owner.v1");
    let replayed_projections = replayed(&replay_dir, &projections_topic);
    let want = latest("replay projections", &replayed_projections);
    let want_owners = latest("replay owners", &replayed(&replay_dir, &owners_topic));

    // The replay covers what issue 9 is about.
    let states: BTreeMap<&str, usize> = want.values().flatten().fold(BTreeMap::new(), |mut m, v| {
        *m.entry(v["retention_state"].as_str().unwrap()).or_default() += 1;
        m
    });
    eprintln!("replay: {} sessions {states:?}, {} owners", want.len(), want_owners.len());
    // Final states: the simulator's cancelled sessions pass through RELEASING (their Pod is
    // deleted while running) and end RELEASED, so RELEASING is checked on the way.
    for state in ["RETAINED", "RELEASED", "ACTIVE"] {
        assert!(
            states.get(state).is_some_and(|n| *n >= 2),
            "fewer than two {state} sessions in the replay: {states:?}"
        );
    }
    assert!(
        replayed_projections.iter().flat_map(|(_, _, v)| v).any(|v| v["retention_state"] == "RELEASING"),
        "no RELEASING projection in the replay"
    );
    assert!(
        want.values().flatten().any(|v| v["foreign_pods_seen"].as_i64() > Some(0)),
        "no session with a foreign Pod in the replay"
    );
    let orphan = |m: &BTreeMap<String, Option<Value>>| {
        m.keys().filter(|k| k.starts_with("sess-orphan-")).cloned().collect::<Vec<_>>()
    };
    assert!(
        std::fs::read_to_string(&trace).unwrap().contains("sess-orphan-"),
        "the trace has the labelled Pod with no session"
    );
    assert_eq!(orphan(&want), Vec::<String>::new(), "no projection for the orphan Pod's label in the replay");
    assert!(
        want_owners.values().flatten().any(|v| v["retained_sessions"].as_i64() > Some(0)),
        "an owner holds retained compute in the replay"
    );

    // On Kafka: read until both topics equal the replay, or stop changing for 30 s after
    // every session has a projection (then the assertions below say what differs).
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut last, mut since) = (None, Instant::now());
    let (got, got_owners, projections) = loop {
        let infra2 = infra.clone();
        let (pt, ot) = (projections_topic.clone(), owners_topic.clone());
        let (projections, owners) = tokio::task::spawn_blocking(move || {
            (
                decoded(&infra2, &pt, "schemas/session-projection.avsc"),
                decoded(&infra2, &ot, "schemas/owner-retained-compute.avsc"),
            )
        })
        .await
        .unwrap();
        let got = latest("kafka projections", &projections);
        let got_owners = latest("kafka owners", &owners);
        if (got == want && got_owners == want_owners) || Instant::now() > deadline {
            break (got, got_owners, projections);
        }
        let now = Some((projections.len(), owners.len()));
        if now != last {
            (last, since) = (now, Instant::now());
        } else if got.len() >= want.len() && since.elapsed() > Duration::from_secs(30) {
            break (got, got_owners, projections);
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    };
    let _ = process.kill();
    let _ = process.wait();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!(
        "kafka: {} projection records ({} in the replay), {} sessions, {} owners, in {:.1} s",
        projections.len(),
        replayed_projections.len(),
        got.len(),
        got_owners.len(),
        started.elapsed().as_secs_f64()
    );

    // Every difference is listed before the test fails, so one run shows all of them.
    let mut failures = Vec::new();
    if !orphan(&got).is_empty() {
        failures.push(format!("projections for the orphan Pod's label on Kafka: {:?}", orphan(&got)));
    }
    if got.keys().ne(want.keys()) {
        failures.push(format!(
            "session ids differ:\n  replay: {:?}\n  kafka:  {:?}",
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>()
        ));
    }
    if got != want {
        failures.push(format!(
            "each session's latest projection (fastavro) = the replay's:\n{}",
            diff(&want, &got)
        ));
    }
    if got_owners != want_owners {
        failures.push(format!(
            "each owner's latest retained compute (fastavro) = the replay's:\n{}",
            diff(&want_owners, &got_owners)
        ));
    }
    // Stronger than the latest values: every session's whole history is the same (the
    // runtime merges a task's inputs by timestamp on Kafka as in memory, and heartbeats,
    // which land elsewhere in sessions.v1 here, move no projection).
    let history = |records: &[(i32, String, Option<Value>)]| {
        let mut h: BTreeMap<String, Vec<Option<Value>>> = BTreeMap::new();
        for (_, k, v) in records {
            h.entry(k.clone()).or_default().push(v.clone());
        }
        h
    };
    let (want_history, got_history) = (history(&replayed_projections), history(&projections));
    for (id, want) in &want_history {
        let got = got_history.get(id).cloned().unwrap_or_default();
        if &got != want {
            let at = want.iter().zip(&got).position(|(w, g)| w != g).unwrap_or(want.len().min(got.len()));
            failures.push(format!(
                "{id}: {} projections on Kafka, {} in the replay; first difference at #{}:\n    replay: {:?}\n    kafka:  {:?}",
                got.len(),
                want.len(),
                at + 1,
                want.get(at),
                got.get(at)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "Kafka != replay:\n{}\n--- process log\n{}",
        failures.join("\n"),
        log_text()
    );
}
