//! `kubefacts publish` on the real broker: the watcher's publishing path (minimize, admit,
//! key, partition) over the demo trace, checked by reading every input topic back.

mod support;

use std::{collections::BTreeMap, process::Command, time::Duration};

use kubefacts::{
    codec::Codec,
    observe::{InputTopic, MinimizeConfig, ObservationEvent, ObservationRecord, Observer, model::Source},
    runtime::partitioner::partition_for_key,
};
use support::{expected_key, infra, read_topic, repo_path, unique_name};

const PARTITIONS: i32 = 3;

/// Strings the demo trace carries in env, args, commands, volumes, images and messages:
/// none may reach Kafka.
const SECRETS: [&str; 7] = [
    "hunter2",
    "s3cr3t",
    "demo-token-",
    "password authentication failed",
    "etl-db-credentials",
    "registry.example.com",
    "/var/run/secrets",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_records_follow_the_keys_partitions_and_privacy_rules() {
    let infra = infra();
    let trace = repo_path("tests/fixtures/traces/demo.jsonl");
    let trace_text = std::fs::read_to_string(&trace).unwrap();
    for secret in SECRETS {
        assert!(trace_text.contains(secret), "the trace must carry {secret} for this test to mean anything");
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pipeline.toml");
    let prefix = format!("{}.", unique_name("pub"));
    std::fs::write(&config, format!("[topics]\nprefix = \"{prefix}\"\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["publish", "--create-topics", "--partitions", "3", "--bootstrap", &infra.bootstrap])
        .args(["--registry", &infra.registry, "--instance-id", "watcher-a", "--input"])
        .arg(&trace)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));

    let registry = kubefacts::codec::RegistryClient::new(&infra.registry, Duration::from_secs(10)).unwrap();
    let codec = Codec::new(Some(registry)).unwrap();
    let mut heartbeats: BTreeMap<(InputTopic, i32), usize> = BTreeMap::new();
    let mut snapshots: BTreeMap<(InputTopic, i32), usize> = BTreeMap::new();
    let mut keyed = 0;
    for topic in InputTopic::ALL {
        let name = format!("{prefix}{}", &topic.topic_name(&Default::default())["kubefacts.".len()..]);
        let records = tokio::task::block_in_place(|| read_topic(&infra.bootstrap, &name));
        assert!(!records.is_empty(), "{name} is empty");
        for r in &records {
            // Privacy: no byte of any key or value carries a secret of the trace.
            for secret in SECRETS {
                let hay = [r.key.as_deref().unwrap_or_default(), &r.value[..]].concat();
                assert!(
                    !hay.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{secret} reached {name}"
                );
            }
            let decoded = codec.decode(&r.value).await.unwrap();
            let record = ObservationRecord::from_value(topic, &decoded.value).unwrap();
            assert_eq!(record.source().instance, "watcher-a");
            let Some(key) = &r.key else {
                match record.event() {
                    ObservationEvent::Heartbeat => *heartbeats.entry((topic, r.partition)).or_default() += 1,
                    ObservationEvent::SnapshotBegin | ObservationEvent::SnapshotEnd => {
                        *snapshots.entry((topic, r.partition)).or_default() += 1
                    }
                    other => panic!("a keyless {other:?} record on {name}"),
                }
                continue;
            };
            keyed += 1;
            // Keys (DESIGN §2) and Java's murmur2 partition of the key.
            let key = String::from_utf8(key.clone()).unwrap();
            assert_eq!(r.partition, partition_for_key(key.as_bytes(), PARTITIONS), "{name} {key}");
            let expected = expected_key(&record);
            assert_eq!(key, expected, "{name}: key of {record:?}");
        }
    }
    // Exactly what the in-process observer makes of the trace: nothing lost, nothing extra.
    let mut observer = Observer::new(
        Source { cluster: "default".into(), instance: "x".into(), epoch: 1 },
        MinimizeConfig::default(),
    );
    let mut expected_keyed = 0;
    for entry in kubefacts::trace::read(trace_text.as_bytes()) {
        for released in observer.admit(entry.unwrap()) {
            expected_keyed += released.unwrap().iter().filter(|o| o.key.is_some()).count();
        }
    }
    assert_eq!(keyed, expected_keyed);
    assert!(keyed > 50, "{keyed} keyed records");
    // Heartbeats reach every partition of every input topic, the same number each.
    for topic in InputTopic::ALL {
        let counts: Vec<usize> =
            (0..PARTITIONS).map(|p| heartbeats.get(&(topic, p)).copied().unwrap_or(0)).collect();
        assert!(
            counts.iter().all(|&n| n > 0 && n == counts[0]),
            "{topic:?} heartbeats per partition: {counts:?}"
        );
    }
    // Snapshot markers reach every partition of every watched topic, never sessions.
    for topic in InputTopic::WATCHED {
        let counts: Vec<usize> =
            (0..PARTITIONS).map(|p| snapshots.get(&(topic, p)).copied().unwrap_or(0)).collect();
        assert!(
            counts.iter().all(|&n| n >= 2 && n == counts[0]),
            "{topic:?} markers per partition: {counts:?}"
        );
    }
    assert!((0..PARTITIONS).all(|p| !snapshots.contains_key(&(InputTopic::Sessions, p))));
}
