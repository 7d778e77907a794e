//! The watcher's publishing path over a large synthetic recorded cluster: how many watch
//! events per second it minimizes, admits, encodes and publishes, and how much memory it
//! keeps per watched object.
//!
//! 1. In process (one core): admission → minimization → keying → Avro encoding, the work
//!    `kubefacts watch` does per event before Kafka.
//! 2. To the real broker: the same, published with the watcher's `Publisher` (idempotent,
//!    acks=all, murmur2 partitions, markers and heartbeats on every partition), until every
//!    record is acknowledged.
//! 3. Memory per watched object: the watcher keeps no copy of the objects it watches (no
//!    kube-rs reflector); its per-object state is admission's verdict per Job and CronJob
//!    and opt-out per Namespace. Measured as resident-memory growth over many objects.
//!
//! Run with `cargo bench --bench watch` (optionally `-- JOBS`, default 20 000 Jobs ≈ 200 000
//! events) after `scripts/infra/up.sh && source .cache/run/env`. Under `cargo test` it runs
//! a small instance and checks the counts.

use std::time::{Duration, Instant};

#[path = "common/synthetic.rs"]
mod synthetic;

use kubefacts::{
    codec::{Codec, Framing, RecordWriter},
    config::TopicsConfig,
    observe::{Admission, AdmissionConfig, InputTopic, MinimizeConfig, Observer, model::Source},
    watch::Publisher,
};
use rdkafka::{ClientConfig, admin::AdminClient, client::DefaultClientContext};
use serde_json::json;
use synthetic::{CRONJOBS, NAMESPACES, entry, synthetic_trace, uid};

const PARTITIONS: i32 = 6;

fn source() -> Source {
    Source { cluster: "bench".into(), instance: "bench".into(), epoch: 1 }
}

/// Resident memory of this process, in bytes (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let jobs: usize =
        std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if benching { 20_000 } else { 200 });
    let bootstrap = std::env::var("KUBEFACTS_TEST_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "KUBEFACTS_TEST_BOOTSTRAP is not set: the watch benchmark publishes to the real broker. \
             Run `scripts/infra/up.sh && source .cache/run/env` first (./scripts/test.sh does that)."
        )
    });
    let trace = synthetic_trace(jobs);
    let events = trace.len();
    let codec = Codec::new(None).unwrap();
    let topics = TopicsConfig {
        prefix: format!("bench-watch-{}-{}.", std::process::id(), jobs),
        ..Default::default()
    };
    println!(
        "watch bench: {jobs} Jobs, {events} watch events ({NAMESPACES} namespaces, {CRONJOBS} CronJobs, 2 Pods per Job, \
         3 updates each); {PARTITIONS} partitions; broker {bootstrap}\n"
    );

    // 1. In process, one core.
    let writers: Vec<(InputTopic, RecordWriter)> = InputTopic::ALL
        .iter()
        .map(|t| {
            let known = codec.schemas().current(t.full_name()).unwrap();
            (*t, RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap())
        })
        .collect();
    let started = Instant::now();
    let mut observer = Observer::new(source(), MinimizeConfig::default());
    let (mut records, mut bytes) = (0usize, 0usize);
    for e in trace.iter().cloned() {
        for released in observer.admit(e) {
            for obs in released.unwrap() {
                let w = &writers.iter().find(|(t, _)| *t == obs.topic).unwrap().1;
                bytes += obs.record.encode(w).unwrap().len();
                records += 1;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let excluded: u64 = observer.admission().excluded.values().sum();
    assert_eq!(excluded, 0, "nothing is opted out in the synthetic cluster");
    assert_eq!(records, events - NAMESPACES, "every event but the namespaces becomes one record");
    println!(
        "1. admit + minimize + key + encode, one core      {:>10.0} events/s   ({records} records, {:.0} B avg)",
        events as f64 / secs,
        bytes as f64 / records as f64
    );

    // 2. To the broker.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (published, secs, acked, latency_ms) = rt.block_on(async {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
        let new: Vec<String> = InputTopic::ALL.iter().map(|t| t.topic_name(&topics)).collect();
        let specs: Vec<kubefacts::runtime::topics::TopicSpec> =
            new.iter().map(|n| topics.spec(n, PARTITIONS, false)).collect();
        kubefacts::runtime::topics::ensure_topics(&admin, &specs, true).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut publisher =
            Publisher::connect(&kubefacts::config::kafka::Brokers::plaintext(&bootstrap), &codec, &topics)
                .await
                .unwrap();
        let mut observer = Observer::new(source(), MinimizeConfig::default());
        let started = Instant::now();
        for e in trace.iter().cloned() {
            for released in observer.admit(e) {
                for obs in released.unwrap() {
                    publisher.publish(&obs).await.unwrap();
                }
            }
        }
        publisher.flush().await.unwrap();
        let secs = started.elapsed().as_secs_f64();
        let c = publisher.counts().clone();
        (c.records, secs, c.acked, c.ack_latency_us as f64 / c.acked.max(1) as f64 / 1000.0)
    });
    assert_eq!(published as usize, records, "one Kafka record per keyed observation (no markers here)");
    assert_eq!(acked, published, "every record acknowledged");
    println!(
        "2. … and published to the broker (acks=all)        {:>10.0} events/s   ({published} records in {secs:.2} s; \
         mean time to acknowledgement {latency_ms:.0} ms while the backlog drains)",
        events as f64 / secs
    );

    // 3. Memory per watched object: admission's state for every Job (the watcher keeps
    // nothing else per object). Objects are generated one at a time and dropped after the
    // gate has seen them, so resident-memory growth is the gate's state.
    let tracked = (jobs * 10).max(20_000);
    let mut gate = Admission::new(AdmissionConfig::default());
    for e in synthetic_trace(0) {
        gate.offer(e);
    }
    let before = rss_bytes();
    let mut kept = 0usize;
    for j in 0..tracked {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("j-{j}"), "namespace": format!("ns-{}", j % NAMESPACES), "uid": uid(5, j)},
            "spec": {"template": {"spec": {"containers": []}}}});
        kept += gate.offer(entry(1_795_946_500_000, "ADDED", job)).len();
    }
    let after = rss_bytes();
    assert_eq!(kept, tracked, "every Job admitted");
    println!(
        "3. watcher state per watched Job                  {:>10.0} B        ({tracked} Jobs: resident memory +{:.1} MiB; \
         Pods and Leases add nothing, the watcher keeps no object copies)",
        after.saturating_sub(before) as f64 / tracked as f64,
        after.saturating_sub(before) as f64 / 1_048_576.0
    );
}
