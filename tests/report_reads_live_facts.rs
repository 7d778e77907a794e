//! Issue 27: `kubefacts report` against the live fact topics prints what the in-memory
//! replay of the same observations gives.
//!
//! A simulated small fleet is published, `kubefacts process` runs every stage on it with the
//! schema registry (so the facts are Confluent-framed), and `report --format json` of the
//! topics (read_committed) must equal `report --from-dir` of `kubefacts replay`'s files
//! (single-object framing): the same windows, runs, failing CronJobs with their exits,
//! decisions, coverage states and sessions, and the same count of every topic's records.
//! `--namespace` and `--since` narrow both alike. Without the registry, the report counts
//! every Confluent-framed record as undecodable and says so (exit 1), never a silent empty
//! summary.

#[cfg(not(feature = "failpoints"))]
compile_error!("build the tests with `--features failpoints` (./scripts/test.sh does)");

mod support;

use std::time::Instant;

use serde_json::Value;
use support::{Scratch, default_stages, infra, kubefacts_ok, kubefacts_output, simulate_small};

const PARTITIONS: &str = "3";
const HOURS: &str = "4";
const SEED: &str = "27";

/// `report --format json` with `args`, parsed; what it printed on stderr.
fn report(args: &[&str]) -> (Value, String) {
    let out = kubefacts_ok(&[&["report", "--format", "json"], args].concat());
    let doc = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    (doc, out.stderr)
}

/// Where two reports differ, one line per differing section (with both sides, cut short).
/// Of what was read, the counts of the log topics: tables (job-runs, session projections,
/// retained compute) are compacted, and the test broker compacts within seconds — which
/// changes their record counts, never the summary.
fn differences(kafka: &Value, replay: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let cut = |v: &Value| v.to_string().chars().take(1500).collect::<String>();
    for key in ["filters", "runs", "cleanup", "coverage", "sessions"] {
        if kafka[key] != replay[key] {
            out.push(format!("{key}:\n  kafka:  {}\n  replay: {}", cut(&kafka[key]), cut(&replay[key])));
        }
    }
    fn logs(doc: &Value) -> (Vec<(&String, &Value)>, Value, Value, Value) {
        let records = doc["read"]["records"].as_object().unwrap();
        let logs: Vec<(&String, &Value)> = records
            .iter()
            .filter(|(t, _)| {
                ["job-run-facts.v1", "cleanup-decisions.v1", "coverage-alerts.v1"]
                    .iter()
                    .any(|l| t.ends_with(l))
            })
            .collect();
        (logs, doc["read"]["bad"].clone(), doc["read"]["tombstones"].clone(), doc["read"]["missing"].clone())
    }
    if logs(kafka) != logs(replay) {
        out.push(format!("read:\n  kafka:  {}\n  replay: {}", cut(&kafka["read"]), cut(&replay["read"])));
    }
    out
}

/// Writes a copy of the first record of `topic` in a transaction, then aborts it.
fn abort_a_copy(bootstrap: &str, topic: &str) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let first = support::read_records(bootstrap, topic).remove(0);
    let producer: BaseProducer = support::client_config(bootstrap)
        .set("transactional.id", support::unique_name("report-aborted"))
        .create()
        .unwrap();
    let timeout = std::time::Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    producer.begin_transaction().unwrap();
    let value = first.value.expect("a fact, not a tombstone");
    let mut record = BaseRecord::to(topic).payload(&value).partition(first.partition);
    if let Some(key) = &first.key {
        record = record.key(key);
    }
    producer.send(record).map_err(|(e, _)| e).unwrap();
    producer.flush(timeout).unwrap();
    producer.abort_transaction(timeout).unwrap();
}

#[test]
fn report_of_the_live_topics_equals_the_report_of_the_replay() {
    let started = Instant::now();
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    // Small transactions: the failpoint below lands in one with outputs of every stage.
    let scratch = Scratch::new("report", "session_timeout_ms = 6000\nmax_batch_records = 100\n");
    let (dir, config) = (scratch.path(), scratch.config_arg());
    let trace = dir.join("trace.jsonl");
    simulate_small(HOURS, SEED, &trace, &[]);
    let replay_dir = dir.join("replay");
    let replay_arg = replay_dir.to_str().unwrap();
    support::publish_and_replay(bootstrap, PARTITIONS, trace.to_str().unwrap(), config, replay_arg);

    // Every stage, one instance, through the registry: the facts are Confluent-framed. The
    // instance first stops inside a transaction (outputs sent, commit not) and is SIGKILLed
    // there; its successor aborts that transaction. Its records stay in the topics, aborted:
    // a report that read them (read_uncommitted) would count runs twice.
    let processes = support::Processes::new(dir.join("logs"), bootstrap, &scratch.config);
    let registry = ["--registry", infra.registry.as_str()];
    let mut a = processes.start("a", &[&registry[..], &["--failpoint", "before-commit:40"]].concat());
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    while !support::is_stopped(a.id()) {
        assert!(a.try_wait().unwrap().is_none(), "a exited before its failpoint\n{}", processes.tails());
        assert!(Instant::now() < deadline, "a never reached its failpoint\n{}", processes.tails());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    a.kill().unwrap();
    a.wait().unwrap();
    let mut a = processes.start("a", &registry);
    let stages = default_stages(&scratch.prefix, &scratch.app);
    support::wait_all_committed(bootstrap, &stages, &mut [("a", &mut a)], 300, &|| processes.tails());
    println!("processed after {:?}", started.elapsed());
    // And for certain: a copy of a run fact in a transaction that aborts.
    abort_a_copy(bootstrap, &format!("{}job-run-facts.v1", scratch.prefix));

    let kafka = ["--bootstrap", bootstrap, "--registry", &infra.registry, "--config", config];
    let offline = ["--from-dir", replay_arg, "--config", config];
    let timed = |args: &[&str]| {
        let t = Instant::now();
        let r = report(args);
        (r, t.elapsed())
    };
    let ((live, stderr), took) = timed(&kafka);
    println!("report of the topics in {took:?}: {}", stderr.trim());
    assert!(stderr.contains("0 did not decode"), "{stderr}");
    let ((replayed, _), took) = timed(&offline);
    println!("report of the replay in {took:?}");
    let diff = differences(&live, &replayed);
    assert!(diff.is_empty(), "report of Kafka != report of the replay:\n{}", diff.join("\n"));

    // Worth comparing: runs in windows, failures with exits, decisions, coverage, sessions.
    let runs = &live["runs"];
    let filed = runs["filed"].as_u64().unwrap();
    assert!(filed > 100, "{runs}");
    assert!(runs["windows"].as_array().unwrap().len() >= 4, "{runs}");
    let failing = runs["failing"].as_array().unwrap();
    assert!(!failing.is_empty() && runs["failed"].as_u64().unwrap() > 0, "{runs}");
    assert!(failing.iter().any(|f| !f["exits"].as_array().unwrap().is_empty()), "{runs}");
    assert!(live["cleanup"]["decided"].as_u64().unwrap() > 0, "{}", live["cleanup"]);
    assert!(live["coverage"]["state_changes"].as_u64().unwrap() > 0, "{}", live["coverage"]);
    assert!(live["sessions"]["sessions"].as_u64().unwrap() > 0, "{}", live["sessions"]);
    let topics = live["read"]["records"].as_object().unwrap();
    assert_eq!(topics.len(), 6, "every fact topic read: {topics:?}");

    // --namespace: only that namespace's runs, on both sides alike.
    let namespace = failing[0]["namespace"].as_str().unwrap();
    let (narrowed, _) = report(&[&kafka[..], &["--namespace", namespace]].concat());
    let (narrowed_replay, _) = report(&[&offline[..], &["--namespace", namespace]].concat());
    let diff = differences(&narrowed, &narrowed_replay);
    assert!(diff.is_empty(), "--namespace {namespace}:\n{}", diff.join("\n"));
    let n = narrowed["runs"]["filed"].as_u64().unwrap();
    assert!(0 < n && n < filed, "--namespace {namespace}: {n} of {filed} runs");
    assert!(narrowed["runs"]["failing"].as_array().unwrap().iter().all(|f| f["namespace"] == namespace));
    assert!(narrowed["cleanup"]["decisions"].as_array().unwrap().iter().all(|d| d["namespace"] == namespace));

    // --since: from the third window on.
    let since = runs["windows"][2]["window_start"].as_str().unwrap();
    let (later, _) = report(&[&kafka[..], &["--since", since]].concat());
    let (later_replay, _) = report(&[&offline[..], &["--since", since]].concat());
    let diff = differences(&later, &later_replay);
    assert!(diff.is_empty(), "--since {since}:\n{}", diff.join("\n"));
    let n = later["runs"]["filed"].as_u64().unwrap();
    assert!(0 < n && n < filed, "--since {since}: {n} of {filed} runs");
    assert_eq!(later["runs"]["windows"][0]["window_start"], since);

    // The text a person reads is the same summary.
    let text = kubefacts_ok(&[&["report"], &kafka[..]].concat()).stdout;
    let name =
        format!("{}/{}", failing[0]["namespace"].as_str().unwrap(), failing[0]["name"].as_str().unwrap());
    assert!(text.contains("top failing CronJobs") && text.contains(&name), "{text}");
    assert!(text.contains(&format!("{filed} runs filed (job-run-facts)")), "{text}");

    // Without the registry the Confluent-framed facts cannot be decoded: counted, said, exit 1.
    let out = kubefacts_output(&["report", "--format", "json", "--bootstrap", bootstrap, "--config", config]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("did not decode (left out)"), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("the summary is still printed");
    assert_eq!(doc["runs"]["filed"], 0);
    let facts_topic = format!("{}job-run-facts.v1", scratch.prefix);
    let bad: u64 =
        doc["read"]["bad"][&facts_topic].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(bad, filed, "every run fact counted as bad: {}", doc["read"]);
    let _ = a.kill();
    println!("done after {:?}", started.elapsed());
}
