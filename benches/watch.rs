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

use kubefacts::{
    codec::{Codec, Framing, RecordWriter},
    config::TopicsConfig,
    observe::{Admission, AdmissionConfig, InputTopic, MinimizeConfig, Observer, model::Source},
    trace::{self, TraceEntry},
    watch::Publisher,
};
use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
};
use serde_json::{Value, json};

const NAMESPACES: usize = 10;
const CRONJOBS: usize = 500;
const PARTITIONS: i32 = 6;

fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012}")
}

fn entry(at: i64, ty: &str, object: Value) -> TraceEntry {
    trace::parse_value(0, json!({"type": ty, "observed_at": at, "object": object}))
        .remove(0)
        .expect("valid entry")
}

/// A cluster's watch events: namespaces, CronJobs, and per Job three Job updates and two
/// Pods with three updates each — the shapes (env, args, messages included) the API sends.
fn synthetic_trace(jobs: usize) -> Vec<TraceEntry> {
    let t0 = 1_795_946_400_000i64;
    let mut out = Vec::with_capacity(jobs * 9 + NAMESPACES + CRONJOBS);
    for n in 0..NAMESPACES {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}"), "uid": uid(1, n)}});
        out.push(entry(t0, "ADDED", ns));
    }
    for c in 0..CRONJOBS {
        let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": format!("cron-{c}"), "namespace": format!("ns-{}", c % NAMESPACES), "uid": uid(2, c)},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}});
        out.push(entry(t0, "ADDED", cj));
    }
    for j in 0..jobs {
        let (c, at) = (j % CRONJOBS, t0 + 1_000 + j as i64 * 10);
        let ns = format!("ns-{}", c % NAMESPACES);
        let container = json!({"name": "main", "image": "registry.example.com/etl:1.2.3",
            "command": ["/bin/sh", "-c", "run-etl --all"], "args": ["--token=abcdef0123456789"],
            "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "batch"}],
            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}});
        let job = |status: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": format!("cron-{c}-{j}"), "namespace": ns, "uid": uid(3, j),
                    "labels": {"app": "etl"}, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                    "name": format!("cron-{c}"), "uid": uid(2, c), "controller": true}]},
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
                "status": status})
        };
        out.push(entry(at, "ADDED", job(json!({}))));
        out.push(entry(at + 1, "MODIFIED", job(json!({"startTime": "2026-11-29T10:00:00Z", "active": 1}))));
        for p in 0..2 {
            let pod = |phase: &str, state: Value| {
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("cron-{c}-{j}-{p}"), "namespace": ns, "uid": uid(4, j * 2 + p),
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": format!("cron-{c}-{j}"),
                        "uid": uid(3, j), "controller": true}]},
                    "spec": {"restartPolicy": "Never", "containers": [container]},
                    "status": {"phase": phase, "message": "free text never shipped",
                        "containerStatuses": [{"name": "main", "ready": false, "restartCount": p, "image": "x",
                        "imageID": "", "state": state}]}})
            };
            out.push(entry(
                at + 2,
                "ADDED",
                pod("Pending", json!({"waiting": {"reason": "ContainerCreating"}})),
            ));
            out.push(entry(
                at + 3,
                "MODIFIED",
                pod("Running", json!({"running": {"startedAt": "2026-11-29T10:00:01Z"}})),
            ));
            let done = json!({"terminated": {"exitCode": p, "reason": if p == 0 { "Completed" } else { "Error" },
                "message": "stack trace never shipped", "startedAt": "2026-11-29T10:00:01Z", "finishedAt": "2026-11-29T10:00:59Z"}});
            out.push(entry(at + 4, "MODIFIED", pod(if p == 0 { "Succeeded" } else { "Failed" }, done)));
        }
        out.push(entry(
            at + 5,
            "MODIFIED",
            job(json!({"startTime": "2026-11-29T10:00:00Z",
            "completionTime": "2026-11-29T10:01:00Z", "succeeded": 1, "failed": 1,
            "conditions": [{"type": "Complete", "status": "True", "reason": "Completed",
                "lastTransitionTime": "2026-11-29T10:01:00Z", "message": "never shipped"}]})),
        ));
    }
    out
}

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
        let specs: Vec<NewTopic<'_>> =
            new.iter().map(|n| NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(1))).collect();
        for r in admin.create_topics(&specs, &AdminOptions::new()).await.unwrap() {
            r.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut publisher = Publisher::connect(&bootstrap, &codec, &topics).await.unwrap();
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
