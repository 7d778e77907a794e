//! Topics are created as specified or refused with a clear message, co-partitioning is
//! checked, and our partitioner puts keys where Kafka's Java producer and librdkafka's
//! `murmur2_random` put them — against the real broker.

mod support;

use std::{
    io::Write,
    process::{Command, Stdio},
    time::Duration,
};

use kubefacts::runtime::{
    partitioner::{LIBRDKAFKA_PARTITIONER, murmur2, partition_for_key},
    topics::{TopicAction, TopicSpec, TopicStatus, TopicsError, check_copartitioned, ensure_topics},
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, ResourceSpecifier},
    client::DefaultClientContext,
    consumer::{Consumer, StreamConsumer},
    metadata::Metadata,
    producer::{FutureProducer, FutureRecord},
};
use support::{KEEP_FOREVER, infra, unique_name};

/// A `delete`-policy topic that keeps its records forever, as every topic these tests create
/// says its retention (the test brokers refuse one that does not).
fn log_topic(name: impl Into<String>, partitions: i32) -> TopicSpec {
    TopicSpec::new(name, partitions).with_config(KEEP_FOREVER.0, KEEP_FOREVER.1)
}

type Admin = AdminClient<DefaultClientContext>;

fn admin() -> Admin {
    ClientConfig::new().set("bootstrap.servers", &infra().bootstrap).create().expect("admin client")
}

fn metadata(admin: &Admin) -> Metadata {
    admin.inner().fetch_metadata(None, Duration::from_secs(30)).expect("metadata")
}

fn partitions_of(admin: &Admin, topic: &str) -> Option<usize> {
    metadata(admin)
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len())
}

async fn topic_config(admin: &Admin, topic: &str, key: &str) -> Option<String> {
    let res = admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new()).await.unwrap();
    res.into_iter().next().unwrap().unwrap().get(key).and_then(|e| e.value.clone())
}

fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run ./scripts/test.sh, or scripts/infra/up.sh && source .cache/run/env")
    })
}

fn statuses(s: &[TopicStatus]) -> Vec<(&str, i32, TopicAction)> {
    s.iter().map(|s| (s.name.as_str(), s.partitions, s.action)).collect()
}

#[tokio::test]
async fn creates_topics_as_specified_and_a_rerun_changes_nothing() {
    let admin = admin();
    let (table, log) = (unique_name("table"), unique_name("log"));
    let specs = [
        TopicSpec::new(&table, 3).compacted().with_config("min.compaction.lag.ms", "1000"),
        TopicSpec::new(&log, 2).with_config("retention.ms", "3600000"),
    ];
    let created = ensure_topics(&admin, &specs, true).await.unwrap();
    assert_eq!(statuses(&created), [(&*table, 3, TopicAction::Created), (&*log, 2, TopicAction::Created)]);
    // Visible as soon as ensure_topics returns.
    assert_eq!(partitions_of(&admin, &table), Some(3));
    assert_eq!(partitions_of(&admin, &log), Some(2));
    assert_eq!(topic_config(&admin, &table, "cleanup.policy").await.as_deref(), Some("compact"));
    assert_eq!(topic_config(&admin, &table, "min.compaction.lag.ms").await.as_deref(), Some("1000"));
    assert_eq!(topic_config(&admin, &log, "cleanup.policy").await.as_deref(), Some("delete"));
    assert_eq!(topic_config(&admin, &log, "retention.ms").await.as_deref(), Some("3600000"));

    for create in [true, false] {
        let again = ensure_topics(&admin, &specs, create).await.unwrap();
        assert_eq!(statuses(&again), [(&*table, 3, TopicAction::Existed), (&*log, 2, TopicAction::Existed)]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_partition_count_or_cleanup_policy_is_refused() {
    let (infra, admin) = (infra(), admin());
    let plain = infra.topic("plain", 2).await;

    let err = ensure_topics(&admin, &[TopicSpec::new(&plain, 3)], true).await.unwrap_err();
    assert!(
        matches!(&err, TopicsError::WrongPartitions { topic, expected: 3, actual: 2 } if *topic == plain),
        "{err:?}"
    );
    assert!(err.to_string().starts_with(&format!("topic {plain} has 2 partitions, the pipeline expects 3")));
    assert_eq!(err.reason(), "wrong_partitions");

    let err = ensure_topics(&admin, &[TopicSpec::new(&plain, 2).compacted()], true).await.unwrap_err();
    assert!(
        matches!(&err, TopicsError::WrongCleanupPolicy { topic, expected: "compact", actual }
            if *topic == plain && actual == "delete"),
        "{err:?}"
    );
    assert!(err.to_string().contains("--entity-name"), "{err}");

    let table = unique_name("table");
    ensure_topics(&admin, &[TopicSpec::new(&table, 1).compacted()], true).await.unwrap();
    let err = ensure_topics(&admin, &[TopicSpec::new(&table, 1)], false).await.unwrap_err();
    assert!(
        matches!(&err, TopicsError::WrongCleanupPolicy { expected: "delete", actual, .. } if actual == "compact")
    );
    // The other checks are unaffected by the refusal: nothing was changed.
    assert_eq!(topic_config(&admin, &plain, "cleanup.policy").await.as_deref(), Some("delete"));
    assert_eq!(partitions_of(&admin, &plain), Some(2));
}

/// Without `create`, the error holds one command per missing topic; running exactly those
/// commands with Kafka's own `kafka-topics.sh` (TopicCommand) makes the same check pass.
#[tokio::test]
async fn missing_topics_without_create_name_the_commands_that_fix_it() {
    let admin = admin();
    let (changelog, input) = (unique_name("changelog"), unique_name("input"));
    let specs =
        [TopicSpec::new(&changelog, 4).compacted().with_config("segment.ms", "600000"), log_topic(&input, 4)];
    let err = ensure_topics(&admin, &specs, false).await.unwrap_err();
    let TopicsError::Missing { commands } = &err else { panic!("{err:?}") };
    let bootstrap = &infra().bootstrap;
    assert_eq!(
        commands,
        &[
            format!(
                "kafka-topics.sh --bootstrap-server {bootstrap} --create --topic {changelog} --partitions 4 \
                 --replication-factor 1 --config cleanup.policy=compact --config segment.ms=600000"
            ),
            format!(
                "kafka-topics.sh --bootstrap-server {bootstrap} --create --topic {input} --partitions 4 \
                 --replication-factor 1 --config cleanup.policy=delete --config retention.ms=-1"
            ),
        ]
    );
    assert!(err.to_string().starts_with("2 topic(s) missing and topic creation is off; create them with:\n"));
    assert_eq!(partitions_of(&admin, &changelog), None, "nothing may be created");

    let tool = "kafka-topics.sh() { \"$KUBEFACTS_TEST_JAVA\" -cp \"$KUBEFACTS_TEST_KAFKA_CLASSPATH\" \
                -Dlog4j2.configurationFile=\"$KUBEFACTS_TEST_KAFKA_LOG4J\" org.apache.kafka.tools.TopicCommand \"$@\"; }";
    for var in ["KUBEFACTS_TEST_JAVA", "KUBEFACTS_TEST_KAFKA_CLASSPATH", "KUBEFACTS_TEST_KAFKA_LOG4J"] {
        env(var);
    }
    for cmd in commands {
        let out = Command::new("bash").arg("-c").arg(format!("{tool}\n{cmd}")).output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let ok = ensure_topics(&admin, &specs, false).await.unwrap();
    assert_eq!(statuses(&ok), [(&*changelog, 4, TopicAction::Existed), (&*input, 4, TopicAction::Existed)]);
}

/// A topic named twice (a stage reading `jobs.v1` as an input and as a global input, on a
/// broker where it does not exist yet) is created once: Kafka refuses a CreateTopics
/// request naming a topic twice with InvalidRequest, which is how the control-plane test
/// found this (`kubefacts process --create-topics` started before the watcher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_named_twice_is_created_once() {
    let spec = log_topic(unique_name("twice"), 3);
    let statuses = ensure_topics(&admin(), &[spec.clone(), spec.clone()], true).await.unwrap();
    assert_eq!(statuses.len(), 2);
    assert!(statuses.iter().all(|s| s.name == spec.name && s.action == TopicAction::Created), "{statuses:?}");
    assert_eq!(partitions_of(&admin(), &spec.name), Some(3));
}

/// Instances starting together all succeed, each topic is created once, and one that wants
/// another partition count than the winner is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creators_agree_or_are_refused() {
    let specs =
        vec![TopicSpec::new(unique_name("race-a"), 3).compacted(), log_topic(unique_name("race-b"), 5)];
    let creators: Vec<_> = (0..4)
        .map(|_| {
            let specs = specs.clone();
            tokio::spawn(async move { ensure_topics(&admin(), &specs, true).await })
        })
        .collect();
    let mut created = vec![0; specs.len()];
    for c in creators {
        for (i, s) in c.await.unwrap().unwrap().into_iter().enumerate() {
            assert_eq!((s.name.as_str(), s.partitions), (specs[i].name.as_str(), specs[i].partitions));
            created[i] += (s.action == TopicAction::Created) as usize;
        }
    }
    assert_eq!(created, [1, 1], "each topic is created by exactly one creator");

    let name = unique_name("race-mismatch");
    let (a, b) = (log_topic(&name, 2), log_topic(&name, 6));
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { ensure_topics(&admin(), &[a], true).await }),
        tokio::spawn(async move { ensure_topics(&admin(), &[b], true).await }),
    );
    let results = [ra.unwrap(), rb.unwrap()];
    let winner = partitions_of(&admin(), &name).unwrap() as i32;
    for r in results {
        match r {
            Ok(s) => assert_eq!(s[0].partitions, winner),
            Err(TopicsError::WrongPartitions { expected, actual, .. }) => {
                assert_eq!((actual, expected), (winner, if winner == 2 { 6 } else { 2 }))
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[tokio::test]
async fn copartitioning_is_checked_and_mismatches_name_every_topic() {
    let (infra, admin) = (infra(), admin());
    let jobs = infra.topic("jobs", 3).await;
    let pods = infra.topic("pods", 3).await;
    let sessions = infra.topic("sessions", 4).await;
    let md = metadata(&admin);

    check_copartitioned(&md, &[&[&jobs, &pods], &[&sessions]]).unwrap();
    let err = check_copartitioned(&md, &[&[&jobs, &pods], &[&sessions, &pods]]).unwrap_err();
    assert!(
        matches!(&err, TopicsError::NotCopartitioned { counts }
            if *counts == [(sessions.clone(), 4), (pods.clone(), 3)]),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "co-partitioned topics must have equal partition counts, refusing to run: \
             {sessions} has 4, {pods} has 3"
        )
    );
    let missing = unique_name("missing");
    assert!(matches!(
        check_copartitioned(&md, &[&[&jobs, &missing]]),
        Err(TopicsError::NotFound { topic }) if topic == missing
    ));
}

/// 1000 random keys (lengths 0–40, every byte value) plus fixed edge cases.
fn keys() -> Vec<Vec<u8>> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut keys: Vec<Vec<u8>> = vec![
        vec![],
        "ключ-ü-日本-🎉".as_bytes().to_vec(),
        vec![0xff; 7],
        vec![0x80],
        b"0b5e6c7a-3f9e-4c1d-9b2a-6f0e8d7c5a41".to_vec(),
    ];
    keys.extend((0..1000).map(|_| {
        let len = (next() % 41) as usize;
        (0..len).map(|_| next() as u8).collect()
    }));
    keys
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Kafka's own `Utils.murmur2` and the producer's `BuiltInPartitioner.partitionForKey`
/// (kafka-clients 4.4.0), run by the JVM Kafka runs on, agree with ours on every key.
#[test]
fn partitions_match_the_java_producer() {
    let counts = [1, 2, 3, 7, 12, 100, 1024];
    let keys = keys();
    let source = support::repo_path("tests/java/JavaPartitions.java");
    let mut child = Command::new(env("KUBEFACTS_TEST_JAVA"))
        .arg("-cp")
        .arg(env("KUBEFACTS_TEST_KAFKA_CLASSPATH"))
        .arg(&source)
        .args(counts.map(|n| n.to_string()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run java");
    {
        let mut stdin = child.stdin.take().unwrap();
        for k in &keys {
            writeln!(stdin, "{}", hex(k)).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "java {source}: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Vec<i32>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').map(|n| n.parse().unwrap()).collect())
        .collect();
    assert_eq!(lines.len(), keys.len());
    for (key, java) in keys.iter().zip(&lines) {
        let ours: Vec<i32> =
            std::iter::once(murmur2(key)).chain(counts.iter().map(|&n| partition_for_key(key, n))).collect();
        assert_eq!(&ours, java, "key {}", hex(key));
    }
}

/// Records produced by librdkafka with `partitioner=murmur2_random` are stored by the broker
/// in the partition we compute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_murmur2_random_puts_records_where_we_compute() {
    const PARTITIONS: i32 = 7;
    let infra = infra();
    let topic = infra.topic("murmur2", PARTITIONS).await;
    let keys: Vec<Vec<u8>> = keys().into_iter().take(500).collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &infra.bootstrap)
        .set("partitioner", LIBRDKAFKA_PARTITIONER)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let deliveries: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| producer.send_result(FutureRecord::to(&topic).key(k).payload(&i.to_string())).unwrap())
        .collect();
    for (k, d) in keys.iter().zip(deliveries) {
        let delivery = d.await.unwrap().map_err(|(e, _)| e).expect("produce");
        assert_eq!(delivery.partition, partition_for_key(k, PARTITIONS), "key {}", hex(k));
    }

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &infra.bootstrap)
        .set("group.id", unique_name("murmur2-check"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(&topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut per_partition = [0; PARTITIONS as usize];
    for _ in 0..keys.len() {
        let msg =
            tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await.expect("records").unwrap();
        let i: usize = std::str::from_utf8(msg.payload().unwrap()).unwrap().parse().unwrap();
        assert_eq!(msg.key().unwrap_or_default(), keys[i]);
        assert_eq!(msg.partition(), partition_for_key(&keys[i], PARTITIONS), "key {}", hex(&keys[i]));
        per_partition[msg.partition() as usize] += 1;
    }
    assert!(per_partition.iter().all(|&n| n > 30), "keys spread over every partition: {per_partition:?}");
}
