//! DESIGN §5.2: "The same input log always yields the same decisions at the same positions
//! (test it: replay twice, compare byte for byte)."
//!
//! A deterministic synthetic cluster (a few thousand Jobs and their Pods finishing over
//! hours of observation time, heartbeats, per-Job TTLs, dependency holds, bursts that hit
//! `max_decisions_per_sweep`, deletions before and after the decision) is published once.
//! Run 1: one `kubefacts process` instance reads it whole. Run 2: the same input with
//! another application id, small transactions, two instances, three SIGKILLs while an
//! instance holds an open transaction (stopped at a failpoint), and an instance leaving and
//! joining. Per partition, the decision records (key, value and timestamp bytes) must be
//! identical and in the same order; the run facts too (per partition and writing task).
//! Run 1 must also equal the in-memory driver (`kubefacts replay`) decision by decision, and
//! the decisions must be what the plan implies (holds, TTLs, caps, deletions).

#[cfg(not(feature = "failpoints"))]
compile_error!(
    "these tests stop instances at failpoints: build them with `--features failpoints` (./scripts/test.sh does)"
);

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::{
    cleanup::{CleanupDecision, JobRef, RetentionSource},
    codec::{Codec, json::rfc3339_millis},
    journal::JobRun,
    runtime::partitioner::partition_for_key,
};
use rdkafka::{
    ClientConfig, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
};
use serde_json::{Value, json};
use support::{KillOnDrop as Instance, Processes, infra, is_stopped, unique_name};

const PARTITIONS: i32 = 3;
/// 2026-11-29T10:00:00Z.
const T0: i64 = 1_795_946_400_000;
const MINUTE: i64 = 60_000;
const JOBS: usize = 2_400;
const NAMESPACES: usize = 6;
const CRONJOBS: usize = 12;
/// The watcher's heartbeat interval (every partition of every input topic).
const HEARTBEAT_MS: i64 = 10_000;
/// `[cleanup]` of both runs.
const RETENTION_SECS: i64 = 600;
const PERIOD_SECS: i64 = 60;
const CAP: usize = 25;
const DEPENDS_ON: &str = "kubefacts.io/depends-on";
/// Stream time (minutes after T0) of the bursts: 200 Jobs finishing within 30 s, ~67 per
/// partition, so their sweep is capped at `CAP` and the rest waits for the next ones.
const BURSTS: [i64; 4] = [60, 120, 165, 210];
const BURST_JOBS: usize = 200;

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

fn time(ms: i64) -> String {
    rfc3339_millis(ms).expect("a valid timestamp")
}

/// One Job of the synthetic cluster and what happens to it.
#[derive(Debug, Clone)]
struct PlannedJob {
    name: String,
    namespace: String,
    uid: String,
    cronjob: Option<usize>,
    created: i64,
    started: i64,
    /// `completionTime` / the Failed condition's time (whole seconds).
    finished: i64,
    failed: bool,
    ttl: Option<i32>,
    deleted: Option<i64>,
    /// Names (same namespace) this Job depends on while it is pending.
    depends_on: Vec<String>,
}

impl PlannedJob {
    fn retention_ms(&self) -> i64 {
        match self.ttl.map(i64::from) {
            Some(ttl) if ttl < RETENTION_SECS => ttl * 1000,
            _ => RETENTION_SECS * 1000,
        }
    }

    fn expiry(&self) -> i64 {
        self.finished + self.retention_ms()
    }

    fn object(&self, status: Value) -> Value {
        let mut metadata = json!({"name": self.name, "namespace": self.namespace, "uid": self.uid,
            "creationTimestamp": time(self.created), "labels": {"app": "synthetic"}});
        if let Some(c) = self.cronjob {
            metadata["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob",
                "name": format!("cron-{c}"), "uid": uid(2, c), "controller": true}]);
        }
        if !self.depends_on.is_empty() {
            metadata["annotations"] = json!({DEPENDS_ON: self.depends_on.join(", ")});
        }
        let mut spec = json!({"parallelism": 1, "completions": 1, "backoffLimit": 1,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example.com/batch:1.0"}]}}});
        if let Some(ttl) = self.ttl {
            spec["ttlSecondsAfterFinished"] = json!(ttl);
        }
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec, "status": status})
    }

    fn finished_status(&self) -> Value {
        let at = time(self.finished);
        if self.failed {
            json!({"startTime": time(self.started), "failed": 2, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": at},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": at}]})
        } else {
            json!({"startTime": time(self.started), "completionTime": at, "succeeded": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": at},
                {"type": "Complete", "status": "True", "lastTransitionTime": at}]})
        }
    }

    fn pod(&self, p: usize, index: usize, terminated: Option<(i64, i32, &str)>) -> Value {
        let container = format!("containerd://{:016x}{p:04x}", index);
        let status = match terminated {
            None => json!({"phase": "Pending"}),
            Some((at, code, reason)) => json!({"phase": if code == 0 { "Succeeded" } else { "Failed" },
                "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                    "containerID": container, "state": {"terminated": {"exitCode": code, "reason": reason,
                    "startedAt": time(self.started), "finishedAt": time(at), "containerID": container}}}]}),
        };
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{}-{p}", self.name), "namespace": self.namespace, "uid": uid(4, index * 2 + p),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": self.name, "uid": self.uid, "controller": true}]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.example.com/batch:1.0"}]},
            "status": status})
    }
}

/// The synthetic cluster: its Jobs, the dependents (pending Jobs holding others), the
/// trace (JSON lines) and its last timestamp.
struct Cluster {
    jobs: Vec<PlannedJob>,
    dependents: Vec<PlannedJob>,
    trace: String,
    entries: usize,
    end: i64,
}

fn synthetic_cluster() -> Cluster {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut jobs = Vec::with_capacity(JOBS);
    for j in 0..JOBS {
        let finished = if j < BURSTS.len() * BURST_JOBS {
            T0 + BURSTS[j / BURST_JOBS] * MINUTE + rng.below(30) as i64 * 1000
        } else {
            T0 + 12 * MINUTE + rng.below(228 * 60) as i64 * 1000
        };
        let started = finished - (20 + rng.below(580) as i64) * 1000;
        let cronjob = (rng.below(100) < 40).then_some(j % CRONJOBS);
        let namespace = format!("ns-{}", cronjob.unwrap_or(j) % NAMESPACES);
        let ttl = match rng.below(100) {
            0..12 => Some([0, 30, 120, 300][rng.below(4) as usize]),
            12..17 => Some(7_200),
            _ => None,
        };
        let name = match cronjob {
            Some(c) => format!("cron-{c}-{j}"),
            None => format!("job-{j}"),
        };
        let mut job = PlannedJob {
            name,
            namespace,
            uid: uid(3, j),
            cronjob,
            created: started - 2_000,
            started,
            finished,
            failed: rng.below(100) < 10,
            ttl,
            deleted: None,
            depends_on: Vec::new(),
        };
        let retention = job.retention_ms();
        job.deleted = match rng.below(100) {
            // Deleted before it expires (by hand, say): never decided.
            0..8 if retention >= 60_000 => {
                Some(job.finished + retention / 5 + rng.below((retention / 2) as u64) as i64)
            }
            // Deleted a while after it expired (the cleaner acting on the decision).
            8..35 => Some(job.expiry() + 90_000 + rng.below(120_000) as i64),
            _ => None,
        };
        jobs.push(job);
    }
    // Five pending Jobs, created before what they depend on expires, each holding two or
    // three finished Jobs of its namespace until it finishes itself, much later.
    let mut dependents = Vec::new();
    for k in 0..5 {
        let namespace = format!("ns-{k}");
        let held: Vec<String> = jobs
            .iter()
            .filter(|j| {
                j.namespace == namespace
                    && j.deleted.is_none()
                    && j.ttl.is_none()
                    && (T0 + 20 * MINUTE..T0 + 40 * MINUTE).contains(&j.finished)
            })
            .take(2 + k % 2)
            .map(|j| j.name.clone())
            .collect();
        assert!(held.len() >= 2, "enough Jobs to hold in {namespace}");
        let created = T0 + (15 + k as i64) * MINUTE;
        dependents.push(PlannedJob {
            name: format!("pipeline-{k}"),
            namespace,
            uid: uid(5, k),
            cronjob: None,
            created,
            started: created + 2_000,
            finished: T0 + (100 + 12 * k as i64) * MINUTE,
            failed: false,
            ttl: None,
            deleted: None,
            depends_on: held,
        });
    }

    // Every event at its observation time; ties keep the order they were generated in.
    let mut events: Vec<(i64, Value)> = Vec::new();
    let entry = |ty: &str, at: i64, object: Value| json!({"type": ty, "observed_at": at, "object": object});
    events.push((T0 - 10_000, json!({"type": "SNAPSHOT_BEGIN", "observed_at": T0 - 10_000, "epoch": 1})));
    for n in 0..NAMESPACES {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}"), "uid": uid(1, n)}});
        events.push((T0 - 9_000, entry("ADDED", T0 - 9_000, ns)));
    }
    for c in 0..CRONJOBS {
        let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": format!("cron-{c}"), "namespace": format!("ns-{}", c % NAMESPACES), "uid": uid(2, c)},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}});
        events.push((T0 - 9_000, entry("ADDED", T0 - 9_000, cj)));
    }
    events.push((T0 - 8_000, json!({"type": "SNAPSHOT_END", "observed_at": T0 - 8_000, "epoch": 1})));
    for (index, job) in jobs.iter().chain(&dependents).enumerate() {
        events.push((job.created, entry("ADDED", job.created, job.object(json!({})))));
        let running = json!({"startTime": time(job.started), "active": 1});
        events.push((job.started, entry("MODIFIED", job.started, job.object(running))));
        let mut pods = vec![(job.started + 500, job.pod(0, index, None))];
        if job.failed {
            let mid = (job.started + job.finished) / 2;
            pods.push((mid, job.pod(0, index, Some((mid, 1, "Error")))));
            pods.push((mid + 500, job.pod(1, index, None)));
            pods.push((
                job.finished - 1_000,
                job.pod(1, index, Some((job.finished - 1_000, 137, "OOMKilled"))),
            ));
        } else {
            pods.push((
                job.finished - 1_000,
                job.pod(0, index, Some((job.finished - 1_000, 0, "Completed"))),
            ));
        }
        // Their last states, for their deletion after the Job's.
        let last_pods: Vec<Value> =
            pods.iter().filter(|(_, p)| p["status"]["phase"] != "Pending").map(|(_, p)| p.clone()).collect();
        for (at, pod) in pods {
            let ty = if pod["status"]["phase"] == "Pending" { "ADDED" } else { "MODIFIED" };
            events.push((at, entry(ty, at, pod)));
        }
        events.push((
            job.finished + 300,
            entry("MODIFIED", job.finished + 300, job.object(job.finished_status())),
        ));
        if let Some(at) = job.deleted {
            events.push((at, entry("DELETED", at, job.object(job.finished_status()))));
            for (i, pod) in last_pods.into_iter().enumerate() {
                let at = at + 500 + i as i64;
                events.push((at, entry("DELETED", at, pod)));
            }
        }
    }
    let last = events.iter().map(|(at, _)| *at).max().unwrap();
    // Stream time runs on for 30 min after the last event, the last heartbeat alone at the
    // end (every input partition then ends at the same time).
    let end = (last + 30 * MINUTE).div_euclid(HEARTBEAT_MS) * HEARTBEAT_MS;
    let mut at = T0;
    while at <= end {
        events.push((at, json!({"type": "HEARTBEAT", "observed_at": at})));
        at += HEARTBEAT_MS;
    }
    events.sort_by_key(|(at, _)| *at); // stable
    let mut trace = String::new();
    for (_, e) in &events {
        trace.push_str(&e.to_string());
        trace.push('\n');
    }
    Cluster { jobs, dependents, trace, entries: events.len(), end }
}

/// An input partition's progress: (topic, partition, committed offset, end offset).
type Position = (String, i32, Option<i64>, i64);

/// One run of the `[runs]` stage over the shared input: its own application id, output
/// topics and logs.
struct Run {
    name: &'static str,
    app: String,
    /// Its instances: the pipeline file, the broker and where their logs go.
    processes: Processes,
    decisions: String,
    facts: String,
    dead_letter: String,
}

impl Run {
    fn new(name: &'static str, prefix: &str, dir: &Path, bootstrap: &str, process: &str) -> Self {
        let app = unique_name(&format!("cleanup-{name}"));
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                r#"[topics]
prefix = "{prefix}"
job_run_facts = "{name}.job-run-facts"
journal_repartition = "{name}.journal-repartition"
cleanup_decisions = "{name}.cleanup-decisions"
dead_letter = "{name}.dead-letter"

[process]
application_id = "{app}"
session_timeout_ms = 6000
{process}

[[process.stages]]
processor = "runs"
inputs = ["topics.jobs", "topics.pods"]
globals = ["topics.jobs"]
outputs = ["topics.job_run_facts", "topics.journal_repartition", "topics.cleanup_decisions"]

[cleanup]
job_retention_secs = {RETENTION_SECS}
cleanup_period_secs = {PERIOD_SECS}
max_decisions_per_sweep = {CAP}
"#
            ),
        )
        .unwrap();
        Run {
            name,
            app,
            processes: Processes::new(dir.join(name), bootstrap, &config),
            decisions: format!("{prefix}{name}.cleanup-decisions"),
            facts: format!("{prefix}{name}.job-run-facts"),
            dead_letter: format!("{prefix}{name}.dead-letter"),
        }
    }

    /// Starts an instance (its own OS process, so it can be SIGKILLed), single-object
    /// encoding (no registry: the bytes of both runs are comparable without schema ids).
    fn start(&self, instance: &str, extra: &[&str]) -> Instance {
        self.processes.start(instance, extra)
    }

    fn log_of(&self, instance: &str) -> String {
        std::fs::read_to_string(self.processes.logs.join(format!("{instance}.log"))).unwrap_or_default()
    }

    /// The last lines of every instance's log.
    fn logs(&self) -> String {
        self.processes.tails()
    }

    /// The stage group's committed offset and the end of every input partition; `None`
    /// while the broker does not answer.
    fn progress(&self, inputs: &[String]) -> Option<Vec<Position>> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.processes.bootstrap)
            .set("group.id", self.app.clone())
            .set("enable.auto.commit", "false")
            // read_uncommitted: librdkafka then fetches offsets without `require_stable`,
            // so the broker answers with the last committed offsets instead of failing
            // with UNSTABLE_OFFSET_COMMIT while any transaction holding offsets is open.
            // Under read_committed nearly every probe failed while b committed 30-record
            // transactions back to back: the share read 0 and then jumped, so a schedule
            // meant for 45 % of the input could start at 90 % and come too late. The
            // inputs are written before the run, so their ends are the same either way.
            .set("isolation.level", "read_uncommitted")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for topic in inputs {
            for p in 0..PARTITIONS {
                let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5)).ok()?;
                ends.insert((topic.clone(), p), high);
                tpl.add_partition(topic, p);
            }
        }
        let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).ok()?;
        let offsets: BTreeMap<(String, i32), Option<i64>> = committed
            .elements()
            .iter()
            .map(|e| ((e.topic().to_owned(), e.partition()), e.offset().to_raw().filter(|o| *o >= 0)))
            .collect();
        Some(
            ends.into_iter()
                .map(|((t, p), end)| (t.clone(), p, offsets.get(&(t, p)).copied().flatten(), end))
                .collect(),
        )
    }

    /// Whether the stage's group has committed every input record (outputs are committed
    /// in the same transactions, so they are complete then).
    fn committed_to_end(&self, inputs: &[String]) -> bool {
        self.progress(inputs)
            .is_some_and(|all| all.iter().all(|(_, _, committed, end)| *committed == Some(*end)))
    }

    /// The share of the input records the stage's group has committed.
    fn committed_share(&self, inputs: &[String]) -> f64 {
        let all = self.progress(inputs).unwrap_or_default();
        let done: i64 = all.iter().map(|(_, _, committed, _)| committed.unwrap_or(0)).sum();
        let total: i64 = all.iter().map(|(_, _, _, end)| end).sum();
        done as f64 / total.max(1) as f64
    }

    /// The committed share of the input partition that is furthest ahead: every other
    /// partition has at least `1 - this` of its records still to process.
    fn lead_share(&self, inputs: &[String]) -> f64 {
        let all = self.progress(inputs).unwrap_or_default();
        all.iter()
            .map(|(_, _, committed, end)| committed.unwrap_or(0) as f64 / (*end).max(1) as f64)
            .fold(0.0, f64::max)
    }

    /// Waits until every input record is committed and the decisions stay put for 2 s.
    fn wait_until_complete(&self, inputs: &[String], running: &mut [&mut Instance], secs: u64) -> Vec<Rec> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            assert!(
                running.iter_mut().any(|c| c.try_wait().unwrap().is_none()),
                "{}: every instance exited\n{}",
                self.name,
                self.logs()
            );
            if self.committed_to_end(inputs) {
                let first = read_all(&self.processes.bootstrap, &self.decisions);
                std::thread::sleep(Duration::from_secs(2));
                let second = read_all(&self.processes.bootstrap, &self.decisions);
                if first.len() == second.len() {
                    return second;
                }
            }
            if Instant::now() > deadline {
                let behind: Vec<String> = self
                    .progress(inputs)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, _, committed, end)| *committed != Some(*end))
                    .map(|(t, p, committed, end)| format!("{t}[{p}]: committed {committed:?} of {end}"))
                    .collect();
                panic!(
                    "{}: input not processed within {secs} s; group {} is behind on {behind:?}\n{}",
                    self.name,
                    self.app,
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to `child`.
fn signal(child: &Instance, signal: &str) {
    assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
}

/// SIGTERM, then wait: the instance finishes its transaction and leaves the group.
fn terminate(child: &mut Instance) {
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "instance did not stop within 30 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One committed record as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    partition: i32,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
}

/// Every committed record of `topic` but forwarded stream time, in partition then offset
/// order (offsets left out: they differ between runs).
fn read_all(bootstrap: &str, topic: &str) -> Vec<Rec> {
    support::read_records(bootstrap, topic)
        .into_iter()
        .map(|r| Rec { partition: r.partition, key: r.key, value: r.value, timestamp: r.timestamp_ms })
        .collect()
}

fn by_partition(records: &[Rec]) -> BTreeMap<i32, Vec<&Rec>> {
    let mut out: BTreeMap<i32, Vec<&Rec>> = (0..PARTITIONS).map(|p| (p, Vec::new())).collect();
    for r in records {
        out.entry(r.partition).or_default().push(r);
    }
    out
}

fn decode<T: serde::de::DeserializeOwned>(rt: &tokio::runtime::Runtime, codec: &Codec, r: &Rec) -> T {
    rt.block_on(codec.decode_as::<T>(r.value.as_deref().expect("a value"))).expect("decodes")
}

/// Fails with instructions when the broker named by the environment does not answer.
fn broker_reachable(bootstrap: &str) {
    let c: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("a metadata client");
    if let Err(e) = c.fetch_metadata(None, Duration::from_secs(10)) {
        panic!(
            "cannot reach the Kafka broker at {bootstrap} (KUBEFACTS_TEST_BOOTSTRAP): {e}. \
             Start it with scripts/infra/up.sh && source .cache/run/env (or run ./scripts/test.sh)."
        );
    }
}

/// A decision as one comparable line.
fn describe(d: &CleanupDecision, timestamp: Option<i64>) -> String {
    let source = match d.retention_source {
        RetentionSource::Default => "DEFAULT",
        RetentionSource::JobTtl => "JOB_TTL",
        RetentionSource::Unknown => "UNKNOWN",
    };
    format!(
        "{}/{} uid={} decided_at={} sweep={} finished_at={} retention={}s {source} ts={timestamp:?}",
        d.job.namespace, d.job.name, d.job.uid, d.decided_at, d.sweep, d.finished_at, d.retention_secs
    )
}

/// The decisions `kubefacts replay` (the in-memory driver) wrote, per partition, as
/// [`describe`] lines.
fn replayed_decisions(path: &Path) -> BTreeMap<i32, Vec<String>> {
    let ms = |v: &Value| v.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_millisecond();
    let mut out: BTreeMap<i32, Vec<String>> = (0..PARTITIONS).map(|p| (p, Vec::new())).collect();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let v = &r["value"];
        let source = match v["retention_source"].as_str().unwrap() {
            "DEFAULT" => RetentionSource::Default,
            "JOB_TTL" => RetentionSource::JobTtl,
            _ => RetentionSource::Unknown,
        };
        let d = CleanupDecision {
            job: JobRef {
                namespace: v["job"]["namespace"].as_str().unwrap().into(),
                name: v["job"]["name"].as_str().unwrap().into(),
                uid: v["job"]["uid"].as_str().unwrap().into(),
            },
            owner: None,
            result: None,
            finished_at: ms(&v["finished_at"]),
            retention_secs: v["retention_secs"].as_i64().unwrap(),
            retention_source: source,
            decided_at: ms(&v["decided_at"]),
            sweep: v["sweep"].as_i64().unwrap(),
        };
        let partition = r["partition"].as_i64().unwrap() as i32;
        out.entry(partition).or_default().push(describe(&d, Some(ms(&r["timestamp"]))));
    }
    out
}

#[test]
fn cleanup_decisions_are_identical_through_sigkills_and_rebalances() {
    let started = Instant::now();
    let infra = infra();
    broker_reachable(&infra.bootstrap);
    let bootstrap = infra.bootstrap.as_str();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();

    // The input, published once (3 partitions) for both runs.
    let cluster = synthetic_cluster();
    let trace = dir.join("trace.jsonl");
    std::fs::write(&trace, &cluster.trace).unwrap();
    let prefix = format!("{}.", unique_name("cleanup-replay"));
    let publish_config = dir.join("publish.toml");
    std::fs::write(&publish_config, format!("[topics]\nprefix = \"{prefix}\"\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        // `--finish`: the trace ends as a quiet cluster would, so every record is processed.
        .args([
            "publish",
            "--create-topics",
            "--partitions",
            "3",
            "--instance-id",
            "kubefacts-replay",
            "--finish",
        ])
        .args(["--bootstrap", bootstrap, "--input"])
        .arg(&trace)
        .arg("--config")
        .arg(&publish_config)
        .env_remove("KUBEFACTS_REGISTRY")
        .output()
        .unwrap();
    assert!(out.status.success(), "publish failed: {}", String::from_utf8_lossy(&out.stderr));
    let count = |f: &dyn Fn(&PlannedJob) -> bool| cluster.jobs.iter().filter(|j| f(j)).count();
    println!(
        "trace: {} jobs ({} failed, {} of CronJobs, {} with a TTL under the retention, {} deleted before \
         they expire, {} deleted after) + {} dependents holding {}, {} entries, {:.1} h of stream time; {}",
        cluster.jobs.len(),
        count(&|j| j.failed),
        count(&|j| j.cronjob.is_some()),
        count(&|j| j.ttl.is_some_and(|t| i64::from(t) < RETENTION_SECS)),
        count(&|j| j.deleted.is_some_and(|at| at < j.expiry())),
        count(&|j| j.deleted.is_some_and(|at| at >= j.expiry())),
        cluster.dependents.len(),
        cluster.dependents.iter().map(|d| d.depends_on.len()).sum::<usize>(),
        cluster.entries,
        (cluster.end - T0) as f64 / 3_600_000.0,
        String::from_utf8_lossy(&out.stdout).trim()
    );
    for d in &cluster.dependents {
        println!(
            "  {}/{} (pending until {}) holds {:?}",
            d.namespace,
            d.name,
            time(d.finished),
            d.depends_on
        );
    }
    let inputs = vec![format!("{prefix}jobs.v1"), format!("{prefix}pods.v1")];
    println!("published after {:?}", started.elapsed());

    // Run 1: one instance, default transactions, reads it all. Meanwhile the in-memory
    // driver runs the same trace and pipeline (`kubefacts replay`): the reference order.
    let run1 = Run::new("run-1", &prefix, dir, bootstrap, "");
    let replay_dir = dir.join("replay");
    let replay = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["replay", "--partitions", "3", "--finish", "--input"])
        .arg(&trace)
        .arg("--output")
        .arg(&replay_dir)
        .arg("--config")
        .arg(&run1.processes.config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut solo = run1.start("solo", &[]);
    let decisions1 = run1.wait_until_complete(&inputs, &mut [&mut solo], 60);
    terminate(&mut solo);
    println!("run 1 done after {:?}: {} decisions", started.elapsed(), decisions1.len());
    let out = replay.wait_with_output().unwrap();
    assert!(out.status.success(), "replay failed: {}", String::from_utf8_lossy(&out.stderr));
    let replayed = replayed_decisions(&replay_dir.join(format!("{}.jsonl", run1.decisions)));
    println!("replayed in memory after {:?}", started.elapsed());

    // Run 2: small transactions, two instances, three SIGKILLs with a transaction open,
    // one instance leaving and joining. The failpoints' transaction numbers are seeded
    // (printed; KUBEFACTS_TEST_SEED repeats them).
    let seed = std::env::var("KUBEFACTS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("kill schedule seed: KUBEFACTS_TEST_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let run2 = Run::new("run-2", &prefix, dir, bootstrap, "max_batch_records = 30");
    let wait_until = |what: &str, secs: u64, done: &mut dyn FnMut() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done() {
            assert!(Instant::now() < deadline, "run-2: {what} within {secs} s\n{}", run2.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let assigned = |instance: &str| run2.log_of(instance).matches("tasks assigned").count();
    // SIGKILLs a once it stopped itself at its failpoint, with a transaction open (or, if
    // the whole input was processed first, where it is: the schedule then came too late,
    // which the end of the test reports).
    let kill_at_failpoint = |a: &mut Instance, failpoint: &str| {
        let (pid, mut checked, mut exhausted) = (a.id(), Instant::now(), false);
        wait_until(&format!("a at {failpoint}"), 60, &mut || {
            assert!(a.try_wait().unwrap().is_none(), "a exited before its failpoint\n{}", run2.logs());
            if checked.elapsed() > Duration::from_secs(1) {
                checked = Instant::now();
                exhausted = run2.committed_to_end(&inputs);
            }
            exhausted || is_stopped(pid)
        });
        let at_failpoint = is_stopped(pid);
        a.kill().unwrap(); // SIGKILL: its transaction stays open until a restarts
        a.wait().unwrap();
        if !at_failpoint {
            // Why the schedule came too late: this instance's whole log, and b's tail.
            let log = run2.log_of("a");
            let this = log.rfind("running stages").map_or(&log[..], |i| &log[i..]);
            println!("a never reached {failpoint}; its log:\n{this}\n--- b:\n{}", run2.log_of("b"));
        }
        println!(
            "run 2: SIGKILLed a {} after {:?}, {:.0} % of the input committed ({:.0} % of the partition furthest \
             ahead)",
            if at_failpoint { format!("at {failpoint}") } else { format!("before {failpoint}") },
            started.elapsed(),
            100.0 * run2.committed_share(&inputs),
            100.0 * run2.lead_share(&inputs)
        );
    };
    // Progress of the whole input (not of any one instance); with `lead`, of the partition
    // furthest ahead. a joins at a lead share, so that whichever partitions it is given
    // still hold most of their records. b works through partitions unevenly: at 45 % of
    // the whole input one partition was once done already, a was given just that one and
    // had nothing to commit (CI, 2026-12-02). At a lead of 40 % each partition still has
    // at least 60 % of its records ahead, and b is paused while a joins (below).
    let wait_for = |share: f64, lead: bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let progress = || if lead { run2.lead_share(&inputs) } else { run2.committed_share(&inputs) };
        while progress() < share {
            assert!(Instant::now() < deadline, "run-2: {share} of the input within 60 s\n{}", run2.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // a alone, stopped inside its transaction n1 near the start and SIGKILLed. b joins (it
    // takes every partition once the killed member's session expires). a joins mid-stream
    // (a rebalance, with b paused for a moment) and is SIGKILLed inside a transaction,
    // twice: it joins once the partition furthest ahead is 15 % and then 40 % through;
    // each time its partitions go back to b.
    let failpoint = format!("before-commit:{}", 3 + rng.below(8));
    let mut a = run2.start("a", &["--failpoint", &failpoint]);
    kill_at_failpoint(&mut a, &failpoint);
    let mut b = run2.start("b", &[]);
    for share in [0.15, 0.40] {
        wait_for(share, true);
        // Early in its life: the rest of the input goes fast once b owns it all.
        let failpoint = format!("before-commit:{}", 1 + rng.below(3));
        // b stands still (SIGSTOP, like a GC pause, inside its 6 s session) while a starts
        // and asks to join: b races through a partition in seconds, so that what a is
        // given is still as the share left it. Resumed, b rejoins and the group rebalances.
        signal(&b, "-STOP");
        a = run2.start("a", &["--failpoint", &failpoint]);
        std::thread::sleep(Duration::from_millis(2_500));
        signal(&b, "-CONT");
        kill_at_failpoint(&mut a, &failpoint);
    }
    wait_for(0.65, false);
    // a back for good: it joins while b runs (a rebalance); once it owns partitions, b
    // leaves (its partitions move to a) and joins again (they move back).
    let before = assigned("a");
    a = run2.start("a", &[]);
    wait_until("a assigned", 60, &mut || assigned("a") > before);
    let before = assigned("a");
    terminate(&mut b);
    println!(
        "run 2: b left after {:?}, {:.0} % of the input committed",
        started.elapsed(),
        100.0 * run2.committed_share(&inputs)
    );
    wait_until("a takes b's partitions", 60, &mut || assigned("a") > before);
    b = run2.start("b", &[]);
    println!("run 2: b joined again after {:?}", started.elapsed());
    let decisions2 = run2.wait_until_complete(&inputs, &mut [&mut a, &mut b], 120);
    terminate(&mut a);
    terminate(&mut b);
    println!("run 2 done after {:?}: {} decisions", started.elapsed(), decisions2.len());

    // Decoded, for the semantic checks and readable failures.
    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let show = |r: &Rec| describe(&decode(&rt, &codec, r), r.timestamp);

    // 1. Per partition, the same decisions in the same order: run 2 = run 1 byte for byte
    // (key, value, timestamp), and run 1 = the in-memory driver (decoded).
    let (p1, p2) = (by_partition(&decisions1), by_partition(&decisions2));
    let mut differences = Vec::new();
    for p in 0..PARTITIONS {
        let (one, two, memory) = (&p1[&p], &p2[&p], &replayed[&p]);
        if let Some(i) = (0..one.len().max(two.len())).find(|&i| one.get(i) != two.get(i)) {
            differences.push(format!(
                "partition {p}: run 2 differs from run 1 at position {i} (run 1: {} decisions, run 2: {})\n  \
                 run 1: {}\n  run 2: {}",
                one.len(),
                two.len(),
                one.get(i).map_or("<none>".into(), |r| show(r)),
                two.get(i).map_or("<none>".into(), |r| show(r)),
            ));
        }
        let kafka: Vec<String> = one.iter().map(|r| show(r)).collect();
        if let Some(i) = (0..kafka.len().max(memory.len())).find(|&i| kafka.get(i) != memory.get(i)) {
            differences.push(format!(
                "partition {p}: run 1 differs from the in-memory replay at position {i} (run 1: {} decisions, \
                 replay: {})\n  run 1:  {}\n  replay: {}",
                kafka.len(),
                memory.len(),
                kafka.get(i).map_or("<none>", String::as_str),
                memory.get(i).map_or("<none>", String::as_str),
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "the decisions are not the same in every run (kill schedule seed {seed}):\n{}\n{}",
        differences.join("\n"),
        run2.logs()
    );

    // 2. The decisions are real: many, over many sweeps, some capped, some from a Job's own
    // TTL, none twice, every key its Job's UID on the Job's partition.
    let decided: Vec<(i32, CleanupDecision)> =
        decisions1.iter().map(|r| (r.partition, decode::<CleanupDecision>(&rt, &codec, r))).collect();
    assert!(decided.len() > 1_500, "only {} decisions", decided.len());
    let mut uids = BTreeSet::new();
    for ((p, d), r) in decided.iter().zip(&decisions1) {
        assert!(uids.insert(d.job.uid.clone()), "{} decided twice", d.job.uid);
        assert_eq!(r.key.as_deref(), Some(d.job.uid.as_bytes()));
        assert_eq!(*p, partition_for_key(d.job.uid.as_bytes(), PARTITIONS), "on its Job's partition");
        assert_eq!(r.timestamp, Some(d.decided_at), "timestamped with the deciding stream time");
        assert!(d.decided_at >= d.finished_at + d.retention_secs * 1000, "{}", show(r));
    }
    let ttl = decided.iter().filter(|(_, d)| d.retention_source == RetentionSource::JobTtl).count();
    assert!(ttl > 50, "{ttl} decisions from ttlSecondsAfterFinished");
    let mut sweeps: BTreeMap<(i32, i64), Vec<&CleanupDecision>> = BTreeMap::new();
    for (p, d) in &decided {
        sweeps.entry((*p, d.sweep)).or_default().push(d);
    }
    assert!(sweeps.values().all(|s| s.len() <= CAP), "a sweep made more than {CAP} decisions");
    // Capped: a full sweep after which a Job already expired at that sweep was decided later.
    let capped = sweeps
        .iter()
        .filter(|((p, _), s)| {
            let at = s[0].decided_at;
            s.len() == CAP
                && decided.iter().any(|(q, d)| {
                    q == p && d.decided_at > at && d.finished_at + d.retention_secs * 1000 <= at
                })
        })
        .count();
    assert!(capped >= 8, "only {capped} sweeps were capped at {CAP}");
    // Within a sweep, oldest expiry first.
    for s in sweeps.values() {
        let order: Vec<(i64, &str)> =
            s.iter().map(|d| (d.finished_at + d.retention_secs * 1000, d.job.uid.as_str())).collect();
        assert!(order.is_sorted(), "a sweep's decisions are in (expiry, UID) order: {order:?}");
    }
    // Against the plan: a Job deleted before it expired is never decided; one that stays
    // and expired well before the end is; a held Job only once its dependent finished.
    let by_uid: BTreeMap<&str, &CleanupDecision> =
        decided.iter().map(|(_, d)| (d.job.uid.as_str(), d)).collect();
    let mut cross_partition_holds = 0;
    for job in cluster.jobs.iter().chain(&cluster.dependents) {
        match job.deleted {
            Some(at) if at < job.expiry() => {
                assert!(!by_uid.contains_key(job.uid.as_str()), "{} was deleted before it expired", job.name)
            }
            None if job.expiry() < cluster.end - 15 * MINUTE => {
                assert!(by_uid.contains_key(job.uid.as_str()), "{} expired and stayed: decided", job.name)
            }
            _ => {}
        }
    }
    for dependent in &cluster.dependents {
        for name in &dependent.depends_on {
            let held =
                cluster.jobs.iter().find(|j| &j.name == name && j.namespace == dependent.namespace).unwrap();
            let d = by_uid
                .get(held.uid.as_str())
                .unwrap_or_else(|| panic!("{name}, held by {}, was never decided", dependent.name));
            assert!(
                d.decided_at > dependent.finished && held.expiry() < dependent.finished - 30 * MINUTE,
                "{name} is held by {} until it finishes at {}: {d:?}",
                dependent.name,
                dependent.finished
            );
            let partition = |uid: &str| partition_for_key(uid.as_bytes(), PARTITIONS);
            cross_partition_holds += usize::from(partition(&held.uid) != partition(&dependent.uid));
        }
    }
    assert!(cross_partition_holds > 0, "some dependency crosses partitions (the global input)");

    // 3. The run facts: one per Job, the same bytes in the same order per output partition
    // and writing task (tasks interleave on an output partition in no defined order; a
    // run's task is its Job's partition).
    let (facts1, facts2) = (read_all(bootstrap, &run1.facts), read_all(bootstrap, &run2.facts));
    assert_eq!(facts1.len(), cluster.jobs.len() + cluster.dependents.len(), "one run per Job");
    let per_task = |facts: &[Rec]| {
        let mut out: BTreeMap<(i32, i32), Vec<Rec>> = BTreeMap::new();
        for r in facts {
            let run: JobRun = decode(&rt, &codec, r);
            let task = partition_for_key(run.run_uid.as_bytes(), PARTITIONS);
            out.entry((r.partition, task)).or_default().push(r.clone());
        }
        out
    };
    let (t1, t2) = (per_task(&facts1), per_task(&facts2));
    assert_eq!(t1.keys().collect::<Vec<_>>(), t2.keys().collect::<Vec<_>>());
    let show_run = |r: &Rec| {
        let run: JobRun = decode(&rt, &codec, r);
        format!("{run:?} ts={:?}", r.timestamp)
    };
    for (k, one) in &t1 {
        let two = &t2[k];
        if let Some(i) = (0..one.len().max(two.len())).find(|&i| one.get(i) != two.get(i)) {
            panic!(
                "run facts of (partition, task) {k:?} differ at position {i} (run 1: {}, run 2: {}; seed {seed})\n  \
                 run 1: {}\n  run 2: {}\n{}",
                one.len(),
                two.len(),
                one.get(i).map_or("<none>".into(), show_run),
                two.get(i).map_or("<none>".into(), show_run),
                run2.logs()
            );
        }
    }
    for run in [&run1, &run2] {
        assert!(read_all(bootstrap, &run.dead_letter).is_empty(), "{}: nothing dead-lettered", run.name);
    }

    // The schedule happened: three SIGKILLs of an instance holding an open transaction.
    let kills = run2.log_of("a").matches("failpoint: stopping this process").count();
    assert_eq!(
        kills,
        3,
        "only {kills} of the 3 SIGKILLs hit a stopped instance (the input was processed first): the test \
         proved less than it claims\n{}",
        run2.logs()
    );

    let jobs_ttl =
        cluster.jobs.iter().filter(|j| j.ttl.is_some_and(|t| i64::from(t) < RETENTION_SECS)).count();
    println!(
        "{} decisions ({ttl} JOB_TTL; {jobs_ttl} Jobs with a shorter TTL) in {} sweeps, {capped} capped at {CAP}; \
         {} run facts; identical in both runs; {:?} in all",
        decided.len(),
        sweeps.len(),
        facts1.len(),
        started.elapsed()
    );
}
