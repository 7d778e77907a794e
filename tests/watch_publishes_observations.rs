//! `kubefacts watch` against a fake Kubernetes API (the real list/watch protocol, see
//! `support/fake_kube.rs`) and the real broker: relists bracketed by markers with new
//! epochs, admission per step, minimization, heartbeats and keys, and leader handover.

mod support;

use std::{
    collections::BTreeMap,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::{
    codec::Codec,
    fixtures,
    observe::{InputTopic, ObservationEvent, ObservationRecord},
    runtime::partitioner::partition_for_key,
};
use serde_json::{Value, json};
use support::{Infra, ReadRecord, expected_key, fake_kube::FakeKube, infra, read_topic, unique_name};

const PARTITIONS: i32 = 3;

/// A `kubefacts watch` process, killed when dropped.
struct Watcher(Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One test's world: a fake API server, a pipeline file with its own topics, logs.
struct World {
    kube: FakeKube,
    infra: Infra,
    dir: tempfile::TempDir,
    prefix: String,
}

impl World {
    async fn new(admission: &str) -> World {
        Self::with_watch(admission, "").await
    }

    /// A world whose `[watch]` section gets `watch` (TOML lines) too.
    async fn with_watch(admission: &str, watch: &str) -> World {
        let infra = infra();
        let kube = FakeKube::start().await;
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}.", unique_name("watch"));
        kube.write_kubeconfig(&dir.path().join("kubeconfig"));
        std::fs::write(
            dir.path().join("pipeline.toml"),
            format!(
                "[topics]\nprefix = \"{prefix}\"\n\n[admission]\n{admission}\n\n[watch]\n{watch}\nheartbeat_interval_ms = 300\n\
                 leases = [\"kube-system/kube-controller-manager\"]\n\n[watch.leader]\nlease_namespace = \"kubefacts\"\n\
                 lease_duration_secs = 3\nrenew_deadline_secs = 2\nretry_period_secs = 1\n"
            ),
        )
        .unwrap();
        World { kube, infra, dir, prefix }
    }

    fn start(&self, identity: &str) -> Watcher {
        self.start_with(identity, &[])
    }

    fn start_with(&self, identity: &str, extra: &[&str]) -> Watcher {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{identity}.log")))
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(["watch", "--create-topics", "--partitions", "3", "--instance-id", identity])
            .args(["--bootstrap", &self.infra.bootstrap])
            .arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--config")
            .arg(self.dir.path().join("pipeline.toml"))
            .args(extra)
            .env("RUST_LOG", "kubefacts=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(Watcher)
            .unwrap()
    }

    fn logs(&self) -> String {
        support::logs_in(self.dir.path())
    }

    fn topic(&self, topic: InputTopic) -> String {
        format!("{}{}", self.prefix, &topic.topic_name(&Default::default())["kubefacts.".len()..])
    }

    /// Every record of an input topic, decoded.
    async fn read(&self, topic: InputTopic) -> Vec<(ReadRecord, ObservationRecord)> {
        let name = self.topic(topic);
        let bootstrap = self.infra.bootstrap.clone();
        let records = tokio::task::spawn_blocking(move || {
            support::topic_exists(&bootstrap, &name).then(|| read_topic(&bootstrap, &name))
        })
        .await
        .unwrap()
        .unwrap_or_default();
        let codec = Codec::new(None).unwrap();
        let mut out = Vec::new();
        for r in records {
            let value = codec.decode(&r.value).await.unwrap().value;
            out.push((r, ObservationRecord::from_value(topic, &value).unwrap()));
        }
        out
    }

    /// Waits until `check` holds for an input topic's records (up to 60 s).
    async fn wait_for(
        &self,
        topic: InputTopic,
        what: &str,
        check: impl Fn(&[(ReadRecord, ObservationRecord)]) -> bool,
    ) -> Vec<(ReadRecord, ObservationRecord)> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let records = self.read(topic).await;
            if check(&records) {
                return records;
            }
            assert!(Instant::now() < deadline, "{what}: not within 60 s\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

// ---- real-shaped objects -------------------------------------------------------------

fn uid(n: u32) -> String {
    format!("5a1e0000-0000-4000-8000-{n:012}")
}

fn namespace(name: &str, annotations: Value) -> Value {
    fixtures::namespace(name).annotations(annotations).value()
}

fn cronjob(n: u32, ns: &str, annotations: Value) -> Value {
    let pods = json!({"restartPolicy": "Never", "containers": [fixtures::container("main", "busybox")]});
    fixtures::cronjob(ns, &format!("cron-{n}"), "*/5 * * * *", json!([]))
        .uid(&uid(n))
        .annotations(annotations)
        .set("/spec/jobTemplate/spec/template/spec", pods)
        .value()
}

/// A finished Job carrying secrets where minimization must never look.
fn job(n: u32, ns: &str, cronjob: Option<u32>, annotations: Value, template_annotations: Value) -> Value {
    fixtures::job(ns, &format!("job-{n}"))
        .uid(&uid(n))
        .owners(cronjob.map(|c| fixtures::controller("CronJob", &format!("cron-{c}"), &uid(c))))
        .annotations(annotations)
        .labels(json!({"team": "SECRET-LABEL-VALUE"}))
        .spec(json!({"parallelism": 1, "completions": 1, "backoffLimit": 2, "template": {
            "metadata": {"annotations": template_annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.example.com/SECRET-IMAGE",
                "command": ["/bin/sh", "-c", "SECRET-COMMAND"], "args": ["--token=SECRET-ARG"],
                "env": [{"name": "PASSWORD", "value": "SECRET-ENV-VALUE"}]}]}}}))
        .status(json!({"startTime": "2026-11-29T10:00:00Z", "completionTime": "2026-11-29T10:01:00Z", "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-29T10:01:00Z",
                            "reason": "Completed", "message": "SECRET-CONDITION-MESSAGE"}]}))
        .value()
}

fn pod(n: u32, ns: &str, job: Option<u32>, annotations: Value) -> Value {
    fixtures::pod(ns, &format!("pod-{n}"))
        .uid(&uid(n))
        .owners(job.map(|j| fixtures::controller("Job", &format!("job-{j}"), &uid(j))))
        .annotations(annotations)
        .spec(json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["SECRET-COMMAND"], "args": ["SECRET-ARG"], "env": [{"name": "K", "value": "SECRET-ENV-VALUE"}],
            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]}))
        .status(json!({"phase": "Succeeded", "message": "SECRET-POD-MESSAGE", "containerStatuses": [{
            "name": "main", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "", "containerID": "x",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": "SECRET-TERMINATION-MESSAGE",
                                     "startedAt": "2026-11-29T10:00:01Z", "finishedAt": "2026-11-29T10:00:59Z"}}}]}))
        .value()
}

fn none() -> Value {
    json!({})
}

fn opt_out() -> Value {
    json!({"kubefacts.io/exclude": "true"})
}

/// UIDs of the Jobs (or Pods) published on a topic, with APPLIED events.
fn uids(records: &[(ReadRecord, ObservationRecord)]) -> Vec<String> {
    records
        .iter()
        .filter_map(|(_, r)| match r {
            ObservationRecord::Job(o) => o.job.as_ref().map(|j| j.meta.uid.clone()),
            ObservationRecord::Pod(o) => o.pod.as_ref().map(|p| p.meta.uid.clone()),
            _ => None,
        })
        .collect()
}

fn markers(records: &[(ReadRecord, ObservationRecord)], event: ObservationEvent) -> Vec<(i32, i64)> {
    records
        .iter()
        .filter(|(_, r)| r.event() == event)
        .map(|(rec, r)| (rec.partition, r.source().epoch))
        .collect()
}

/// Scrapes `/metrics` and returns the value of the series whose line starts with `series`.
async fn metric(addr: &str, series: &str) -> f64 {
    let body = kubefacts::http::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    body.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in:\n{body}"))
}

/// Scrapes until `series` reaches at least `min` (counters are updated as the watch loop
/// goes, so a scrape right after a record is visible may precede its bookkeeping by a
/// moment); returns the last value seen.
async fn metric_reaches(addr: &str, series: &str, min: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = metric(addr, series).await;
        if v >= min || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

// ---- tests ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_observations_are_keyed_partitioned_minimized_and_heartbeated() {
    let w = World::new("").await;
    w.kube.apply(namespace("etl", none()));
    w.kube.apply(cronjob(1, "etl", none()));
    // Annotations not on the allowlist carry secrets too.
    let secret = || json!({"note": "SECRET-ANNOTATION-VALUE", "kubefacts.io/exclude": "false"});
    w.kube.apply(job(2, "etl", Some(1), secret(), secret()));
    w.kube.apply(pod(3, "etl", Some(2), secret()));
    w.kube.apply(pod(4, "etl", None, json!({})));
    w.kube.apply(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-controller-manager", "namespace": "kube-system"},
        "spec": {"holderIdentity": "cp-1_abc", "leaseDurationSeconds": 15, "renewTime": "2026-11-29T10:00:00.000000Z"}}));
    w.kube.apply(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "node-1", "namespace": "kube-system"}, "spec": {"holderIdentity": "node-1"}}));
    let addr = free_addr();
    let _a = w.start_with("a", &["--metrics-addr", &addr]);

    let pods = w.wait_for(InputTopic::Pods, "both pods", |r| uids(r).len() >= 2).await;
    let lease_key: &[u8] = b"kube-system/kube-controller-manager";
    w.wait_for(InputTopic::Leases, "the configured Lease", |r| {
        r.iter().any(|(rec, _)| rec.key.as_deref() == Some(lease_key))
    })
    .await;
    // Heartbeats on every partition of every input topic (sessions too).
    for topic in InputTopic::ALL {
        let records = w
            .wait_for(topic, "heartbeats on every partition", |r| {
                (0..PARTITIONS).all(|p| {
                    r.iter().any(|(rec, o)| rec.partition == p && o.event() == ObservationEvent::Heartbeat)
                })
            })
            .await;
        assert!(
            records
                .iter()
                .filter(|(_, o)| o.event() == ObservationEvent::Heartbeat)
                .all(|(rec, _)| rec.key.is_none())
        );
    }
    // Keys (DESIGN §2) on Java's murmur2 partition.
    let mut all: Vec<(InputTopic, ReadRecord, ObservationRecord)> = Vec::new();
    for topic in InputTopic::ALL {
        all.extend(w.read(topic).await.into_iter().map(|(r, o)| (topic, r, o)));
    }
    let mut keyed = BTreeMap::new();
    for (topic, r, o) in &all {
        let Some(key) = &r.key else { continue };
        let key = String::from_utf8(key.clone()).unwrap();
        assert_eq!(r.partition, partition_for_key(key.as_bytes(), PARTITIONS));
        assert!(!matches!(o, ObservationRecord::Session(_)), "the watcher never writes sessions");
        let expected = expected_key(o);
        assert_eq!(key, expected);
        keyed.insert((*topic, key), ());
    }
    assert!(keyed.contains_key(&(InputTopic::Pods, uid(2))), "the Job's Pod is keyed by the Job's UID");
    assert!(keyed.contains_key(&(InputTopic::Pods, uid(4))), "a bare Pod by its own UID");
    assert!(keyed.contains_key(&(InputTopic::Leases, "kube-system/kube-controller-manager".into())));
    assert!(!keyed.keys().any(|(_, k)| k.contains("node-1")), "unconfigured Leases are not watched");
    // Minimization: no byte of any published record carries what the allowlist excludes.
    for (topic, r, _) in &all {
        let bytes = [r.key.as_deref().unwrap_or_default(), &r.value[..]].concat();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("SECRET"), "{topic:?} carries a secret: {text}");
    }
    assert!(pods.iter().any(|(_, o)| matches!(o, ObservationRecord::Pod(p) if p.pod.is_some())));
    // The watcher's metrics move: leader, events and relists per kind, acknowledged records.
    assert_eq!(metric(&addr, "kubefacts_watch_leader ").await, 1.0);
    assert!(metric_reaches(&addr, "kubefacts_watch_events_total{kind=\"Pod\"}", 2.0).await >= 2.0);
    assert!(metric_reaches(&addr, "kubefacts_watch_relists_total{kind=\"Job\"}", 1.0).await >= 1.0);
    assert!(metric_reaches(&addr, "kubefacts_admission_admitted_total{kind=\"Job\"}", 1.0).await >= 1.0);
    assert!(metric_reaches(&addr, "kubefacts_watch_heartbeats_total ", 1.0).await >= 1.0);
    let acked = metric_reaches(&addr, "kubefacts_watch_acked_records_total ", 10.0).await;
    assert!(acked >= 10.0, "{acked} acknowledged");
    let latency = metric(&addr, "kubefacts_watch_ack_latency_seconds_total ").await / acked;
    assert!(latency > 0.0 && latency < 5.0, "mean acknowledgement latency {latency} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_relists_with_a_new_epoch_and_deletions_while_down_are_recognisable() {
    let w = World::new("").await;
    w.kube.apply(namespace("etl", none()));
    w.kube.apply(job(10, "etl", None, none(), none()));
    w.kube.apply(job(11, "etl", None, none(), none()));
    let a = w.start("a");
    let first = w
        .wait_for(InputTopic::Jobs, "the first snapshot", |r| {
            markers(r, ObservationEvent::SnapshotEnd).len() == PARTITIONS as usize
        })
        .await;
    let epoch1 = markers(&first, ObservationEvent::SnapshotEnd)[0].1;
    drop(a); // SIGKILL
    let _ = w.kube.delete("Job", Some("etl"), "job-11"); // while the watcher is down
    let _a = w.start("a");
    let second = w
        .wait_for(InputTopic::Jobs, "the second snapshot on every partition", |r| {
            markers(r, ObservationEvent::SnapshotEnd).iter().filter(|(_, e)| *e > epoch1).count()
                == PARTITIONS as usize
        })
        .await;
    let ends = markers(&second, ObservationEvent::SnapshotEnd);
    let epoch2 = ends.iter().map(|(_, e)| *e).max().unwrap();
    assert!(epoch2 > epoch1);
    // On each Job's partition, between the new epoch's markers: job-10 relisted, job-11 not —
    // which is how a processor tells that job-11 was deleted while unobserved.
    for (n, relisted) in [(10, true), (11, false)] {
        let p = partition_for_key(uid(n).as_bytes(), PARTITIONS);
        let on_p: Vec<_> = second.iter().filter(|(r, _)| r.partition == p).collect();
        let begin = on_p
            .iter()
            .position(|(_, o)| o.event() == ObservationEvent::SnapshotBegin && o.source().epoch == epoch2)
            .unwrap();
        let end = on_p
            .iter()
            .position(|(_, o)| o.event() == ObservationEvent::SnapshotEnd && o.source().epoch == epoch2)
            .unwrap();
        let between = &on_p[begin..end];
        let seen = between.iter().any(|(_, o)| matches!(o, ObservationRecord::Job(j) if j.job.as_ref().is_some_and(|j| j.meta.uid == uid(n))));
        assert_eq!(seen, relisted, "job-{n} relisted in epoch {epoch2}\n{}", w.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_gone_mid_watch_relists_that_kind_with_a_new_epoch() {
    let w = World::new("").await;
    w.kube.apply(namespace("etl", none()));
    w.kube.apply(job(20, "etl", None, none(), none()));
    let _a = w.start("a");
    let first = w
        .wait_for(InputTopic::Jobs, "the first snapshot", |r| {
            markers(r, ObservationEvent::SnapshotEnd).len() == PARTITIONS as usize
        })
        .await;
    let epoch1 = markers(&first, ObservationEvent::SnapshotEnd)[0].1;
    // Let every group open its watch, then expire them all (etcd compaction, as an apiserver does).
    let deadline = Instant::now() + Duration::from_secs(30);
    while w.kube.watches("jobs") == 0 || w.kube.watches("pods") == 0 {
        assert!(Instant::now() < deadline, "the watcher never watched\n{}", w.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.kube.expire_watches();
    let jobs = w
        .wait_for(InputTopic::Jobs, "a relist after 410", |r| {
            markers(r, ObservationEvent::SnapshotEnd).iter().filter(|(_, e)| *e > epoch1).count()
                == PARTITIONS as usize
        })
        .await;
    let relisted = jobs
        .iter()
        .filter(|(_, o)| {
            o.source().epoch > epoch1 && matches!(o, ObservationRecord::Job(j) if j.job.is_some())
        })
        .count();
    assert_eq!(relisted, 1, "job-20 relisted once under the new epoch");
    assert!(w.kube.lists("jobs") >= 2, "the watcher listed jobs again");
}

/// One admission step: `setup` builds the cluster so that step excludes Job 31 and its Pod
/// 32 while Job 33 and its Pod 34 pass; the step's counter must move.
async fn admission_step(admission: &str, step: &str, setup: impl Fn(&FakeKube)) {
    let w = World::new(admission).await;
    setup(&w.kube);
    let addr = free_addr();
    let _a = w.start_with("a", &["--metrics-addr", &addr]);
    let pods = w.wait_for(InputTopic::Pods, "the admitted pod", |r| uids(r).contains(&uid(34))).await;
    let jobs = w.wait_for(InputTopic::Jobs, "the admitted Job", |r| uids(r).contains(&uid(33))).await;
    assert!(uids(&jobs).contains(&uid(33)), "the admitted Job\n{}", w.logs());
    assert!(!uids(&jobs).contains(&uid(31)), "the Job excluded at {step} was published");
    assert!(!uids(&pods).contains(&uid(32)), "the Pod of the Job excluded at {step} was published");
    let series = format!("kubefacts_admission_excluded_total{{kind=\"Job\",step=\"{step}\"}}");
    assert_eq!(metric_reaches(&addr, &series, 1.0).await, 1.0, "{series}");
    let series = format!("kubefacts_admission_excluded_total{{kind=\"Pod\",step=\"{step}\"}}");
    assert_eq!(metric_reaches(&addr, &series, 1.0).await, 1.0, "{series}");
}

fn two_jobs(kube: &FakeKube, ns_excluded: &str, ns_admitted: &str, excluded_job: Value) {
    kube.apply(excluded_job);
    kube.apply(pod(32, ns_excluded, Some(31), none()));
    kube.apply(job(33, ns_admitted, None, none(), none()));
    kube.apply(pod(34, ns_admitted, Some(33), none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_step_1_namespace_deny_list_excludes_a_job_and_its_pods() {
    admission_step("deny_namespaces = [\"private\"]", "namespace_list", |k| {
        k.apply(namespace("private", none()));
        k.apply(namespace("etl", none()));
        two_jobs(k, "private", "etl", job(31, "private", None, none(), none()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_step_2_namespace_annotation_excludes_a_job_and_its_pods() {
    admission_step("", "namespace_annotation", |k| {
        k.apply(namespace("private", opt_out()));
        k.apply(namespace("etl", none()));
        two_jobs(k, "private", "etl", job(31, "private", None, none(), none()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_step_3_cronjob_annotation_excludes_its_job_and_pods() {
    admission_step("", "cronjob_annotation", |k| {
        k.apply(namespace("etl", none()));
        k.apply(cronjob(30, "etl", opt_out()));
        two_jobs(k, "etl", "etl", job(31, "etl", Some(30), none(), none()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_step_4_the_jobs_template_annotation_excludes_it_and_its_pods() {
    admission_step("", "own_annotation", |k| {
        k.apply(namespace("etl", none()));
        two_jobs(k, "etl", "etl", job(31, "etl", None, none(), opt_out()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_publishes_and_killing_it_hands_over() {
    let w = World::new("").await;
    w.kube.apply(namespace("etl", none()));
    w.kube.apply(job(40, "etl", None, none(), none()));
    let a = w.start("a");
    w.wait_for(InputTopic::Jobs, "a leads", |r| uids(r).contains(&uid(40))).await;
    let b = w.start("b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sources = |r: &[(ReadRecord, ObservationRecord)]| -> Vec<String> {
        let mut s: Vec<String> = r.iter().map(|(_, o)| o.source().instance.clone()).collect();
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(sources(&w.read(InputTopic::Jobs).await), ["a"], "the follower published\n{}", w.logs());
    drop(a); // SIGKILL: no release; b takes over once the Lease expires (3 s)
    let killed = Instant::now();
    w.kube.apply(job(41, "etl", None, none(), none()));
    let jobs = w.wait_for(InputTopic::Jobs, "b takes over", |r| {
        r.iter().any(|(_, o)| o.source().instance == "b" && matches!(o, ObservationRecord::Job(j) if j.job.as_ref().is_some_and(|j| j.meta.uid == uid(41))))
    }).await;
    let took = killed.elapsed();
    assert!(took >= Duration::from_secs(2), "b took over after {took:?}, before a's Lease could expire");
    // b's first records are a relist with an epoch above every epoch a used.
    let a_max =
        jobs.iter().filter(|(_, o)| o.source().instance == "a").map(|(_, o)| o.source().epoch).max().unwrap();
    let b_min =
        jobs.iter().filter(|(_, o)| o.source().instance == "b").map(|(_, o)| o.source().epoch).min().unwrap();
    assert!(b_min > a_max, "b's epoch {b_min} must exceed a's {a_max}");
    let lease = w.kube.get("Lease", Some("kubefacts"), "kubefacts-watcher").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_namespaces_limit_the_watch_and_relist_together() {
    let w = World::with_watch("", "namespaces = [\"etl\", \"web\"]").await;
    for ns in ["etl", "web", "other"] {
        w.kube.apply(namespace(ns, none()));
    }
    w.kube.apply(job(50, "etl", None, none(), none()));
    w.kube.apply(job(51, "web", None, none(), none()));
    w.kube.apply(job(52, "other", None, none(), none()));
    let _a = w.start("a");
    let jobs = w
        .wait_for(InputTopic::Jobs, "one relist of both namespaces", |r| {
            markers(r, ObservationEvent::SnapshotEnd).len() == PARTITIONS as usize
        })
        .await;
    // One Begin and one End per partition for the two streams together, both Jobs between.
    assert_eq!(markers(&jobs, ObservationEvent::SnapshotBegin).len(), PARTITIONS as usize);
    let mut seen = uids(&jobs);
    seen.sort();
    assert_eq!(seen, [uid(50), uid(51)], "only the configured namespaces\n{}", w.logs());
    for n in [50, 51] {
        let p = partition_for_key(uid(n).as_bytes(), PARTITIONS);
        let on_p: Vec<_> = jobs.iter().filter(|(r, _)| r.partition == p).map(|(_, o)| o.event()).collect();
        let job_at = on_p.iter().position(|e| *e == ObservationEvent::Applied).unwrap();
        let end_at = on_p.iter().position(|e| *e == ObservationEvent::SnapshotEnd).unwrap();
        assert!(job_at < end_at, "job-{n} listed before the group's end marker: {on_p:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_publishing_within_its_renew_deadline() {
    let w = World::new("").await;
    w.kube.apply(namespace("etl", none()));
    let _a = w.start("a");
    let heartbeat_times = |r: &[(ReadRecord, ObservationRecord)]| -> Vec<i64> {
        r.iter()
            .filter(|(rec, o)| rec.partition == 0 && o.event() == ObservationEvent::Heartbeat)
            .map(|(_, o)| o.observed_at())
            .collect()
    };
    w.wait_for(InputTopic::Jobs, "heartbeats", |r| heartbeat_times(r).len() >= 3).await;
    // The API goes away: the leader cannot renew. Its term (renew deadline 2 s) must end
    // before the Lease could expire for anyone else (3 s).
    let down_at = jiff::Timestamp::now().as_millisecond();
    w.kube.set_down(true);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let up_at = jiff::Timestamp::now().as_millisecond();
    w.kube.set_down(false);
    let after = w
        .wait_for(InputTopic::Jobs, "heartbeats again", |r| heartbeat_times(r).iter().any(|t| *t > up_at))
        .await;
    let during: Vec<i64> =
        heartbeat_times(&after).into_iter().filter(|t| *t > down_at && *t < up_at).collect();
    let last = during.iter().max().map_or(0, |t| t - down_at);
    assert!(last <= 2_500, "published {last} ms after the API went away (renew deadline 2 s)\n{}", w.logs());
    assert!(
        during.iter().all(|t| t - down_at <= 2_500),
        "heartbeats while unable to renew: {:?}",
        during.iter().map(|t| t - down_at).collect::<Vec<_>>()
    );
}
