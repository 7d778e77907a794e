//! What the benchmarks that need the real broker share: the environment from
//! `scripts/infra/up.sh` (`source .cache/run/env`), unique names, a producer that waits out a
//! full queue, Kafka's own `ProducerPerformance` (the broker's ceiling) and percentiles.

#![allow(dead_code)] // each bench uses its own subset

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    error::KafkaError,
    producer::{BaseRecord, ThreadedProducer},
    types::RDKafkaErrorCode,
};

/// The broker and the Kafka tools from `scripts/infra/up.sh`.
pub struct Env {
    pub bootstrap: String,
    pub java: String,
    pub classpath: String,
    pub log4j: String,
    pub broker_pid: Option<u32>,
    /// `kubefacts` to run: this build's, or `KUBEFACTS_BENCH_BIN` (to measure another build).
    pub bin: String,
    pub logs: PathBuf,
    /// Partitions of the topics `create_topic` creates.
    pub partitions: i32,
}

pub fn required(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: the benchmark needs the real Kafka broker and its tools. \
             Run `scripts/infra/up.sh && source .cache/run/env` first (or ./scripts/test.sh, which \
             does that for cargo test)."
        )
    })
}

impl Env {
    /// The environment for the bench called `name` (its logs go to a fresh temporary folder),
    /// creating topics of `partitions` partitions.
    pub fn from_env(name: &str, partitions: i32) -> Self {
        let logs = std::env::temp_dir().join(unique(&format!("kubefacts-bench-{name}")));
        std::fs::create_dir_all(&logs).unwrap();
        Env {
            bootstrap: required("KUBEFACTS_TEST_BOOTSTRAP"),
            java: required("KUBEFACTS_TEST_JAVA"),
            classpath: required("KUBEFACTS_TEST_KAFKA_CLASSPATH"),
            log4j: required("KUBEFACTS_TEST_KAFKA_LOG4J"),
            broker_pid: std::env::var("KUBEFACTS_INFRA_KAFKA_PID").ok().and_then(|p| p.trim().parse().ok()),
            bin: std::env::var("KUBEFACTS_BENCH_BIN")
                .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kubefacts").to_owned()),
            logs,
            partitions,
        }
    }

    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c
    }

    /// A fresh topic with these configs; one that does not say its `retention.ms` keeps its
    /// records forever (the benches' traces carry fixed dates, and the test brokers refuse a
    /// topic on their 7-day default: docs/TESTING.md, "Fixed dates").
    pub fn create_topic(
        &self,
        rt: &tokio::runtime::Runtime,
        prefix: &str,
        configs: &[(&str, &str)],
    ) -> String {
        let name = unique(prefix);
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let mut topic = NewTopic::new(&name, self.partitions, TopicReplication::Fixed(1));
        if !configs.iter().any(|(k, _)| *k == "retention.ms") {
            topic = topic.set("retention.ms", "-1");
        }
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let res = rt
            .block_on(admin.create_topics(&[topic], &opts))
            .unwrap_or_else(|e| panic!("cannot reach Kafka at {} to create {name}: {e}", self.bootstrap));
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
        name
    }
}

/// A path in this repository.
pub fn repo_path(rel: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Runs `command` to its end; panics with its output unless it succeeded.
pub fn run_ok(command: &mut Command) {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos:x}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

pub fn send_retrying(
    producer: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    rec: BaseRecord<'_, [u8], [u8]>,
) {
    let mut rec = rec;
    loop {
        match producer.send(rec) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                rec = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => panic!("producing: {e}"),
        }
    }
}

pub struct PerfResult {
    /// Records/s over the whole run.
    pub total: f64,
    /// Records/s after the first 10 % (`--warmup-records`): the producer's start-up left out,
    /// as the runtime's 10–90 % slope leaves out its own.
    pub steady: f64,
    /// The steady-state summary line.
    pub summary: String,
}

pub fn producer_performance(
    env: &Env,
    topic: &str,
    n: usize,
    record_size: usize,
    extra: &[&str],
) -> PerfResult {
    let warmup = n / 10;
    let out = Command::new(&env.java)
        .arg("-cp")
        .arg(&env.classpath)
        .arg(format!("-Dlog4j2.configurationFile={}", env.log4j))
        .arg("org.apache.kafka.tools.ProducerPerformance")
        .args(["--topic", topic, "--num-records", &n.to_string(), "--record-size", &record_size.to_string()])
        .args(["--throughput", "-1", "--warmup-records", &warmup.to_string()])
        // One --command-property with several values: a second one replaces the first.
        .args(["--command-property", &format!("bootstrap.servers={}", env.bootstrap), "acks=all"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", env.java));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ProducerPerformance failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // "N records sent, R records/sec (M MB/sec), L ms avg latency, ..." is the total (earlier
    // lines of that form are 5-second windows); "N steady state records sent, R records/sec
    // ..." follows it.
    let find = |prefix: String| -> &str {
        stdout
            .lines()
            .rev()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in ProducerPerformance output:\n{stdout}"))
    };
    let rate = |line: &str| -> f64 {
        let end = line.find(" records/sec").unwrap_or_else(|| panic!("no records/sec in {line:?}"));
        line[..end].rsplit(',').next().unwrap().trim().parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))
    };
    let total = find(format!("{n} records sent,"));
    let steady = find(format!("{} steady state records sent,", n - warmup));
    PerfResult { total: rate(total), steady: rate(steady), summary: steady.trim().to_owned() }
}

pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// A `read_committed` consumer of every partition of `topic` from the beginning, polling
/// with a short fetch wait (for latency measurements).
pub fn committed_reader(env: &Env, topic: &str) -> rdkafka::consumer::BaseConsumer {
    use rdkafka::{Offset, TopicPartitionList, consumer::Consumer};
    let reader: rdkafka::consumer::BaseConsumer = env
        .client()
        .set("group.id", unique("bench-lat-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..env.partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    reader.assign(&tpl).unwrap();
    reader
}
