//! `kubefacts cleaner` against a fake Kubernetes API (`support/fake_kube.rs`: GET and
//! DELETE of Jobs with UID preconditions, RBAC refusals, injected 5xx, every DELETE
//! recorded) and the real broker and registry: dry runs delete nothing, applying deletes
//! only the decided UID with background propagation, every outcome is one committed record,
//! a cleaner killed between a DELETE and its commit never deletes twice, and DELETEs are
//! rate-limited.

mod support;

use std::{
    collections::BTreeMap,
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use kubefacts::{
    cleanup::{
        CleanupDecision, JobRef, RetentionSource,
        outcome::{CleanupOutcome, CleanupOutcomeKind as K},
    },
    codec::{Codec, RegistryClient},
    runtime::{deadletter::DeadLetter, partitioner::partition_for_key},
};
use rdkafka::producer::FutureRecord;
use serde_json::json;
use support::{Infra, ReadRecord, fake_kube::FakeKube, infra, unique_name};

const PARTITIONS: i32 = 3;

/// A `kubefacts cleaner` process, killed when dropped.
struct Cleaner(Child);

impl Cleaner {
    /// SIGTERM, then waits: a graceful stop commits what was applied and exits 0.
    fn stop(mut self) {
        let status = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                assert!(status.success(), "the cleaner exited with {status} after SIGTERM");
                return;
            }
            assert!(Instant::now() < deadline, "the cleaner did not stop within 30 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no chance to commit anything.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Cleaner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A decision as produced: where it sits and what it says.
#[derive(Debug, Clone)]
struct Produced {
    partition: i32,
    offset: i64,
    decision: CleanupDecision,
}

/// One test's world: a fake API server, its own topics and application id, logs.
struct World {
    kube: FakeKube,
    infra: Infra,
    dir: tempfile::TempDir,
    prefix: String,
    codec: Codec,
    sweep: i64,
}

impl World {
    /// `cleaner` goes into the pipeline file's `[cleaner]` section.
    async fn new(cleaner: &str) -> World {
        let infra = infra();
        let kube = FakeKube::start().await;
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}.", unique_name("cleaner"));
        kube.write_kubeconfig(&dir.path().join("kubeconfig"));
        std::fs::write(
            dir.path().join("pipeline.toml"),
            format!(
                "[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{}\"\nsession_timeout_ms = 6000\n\
                 partitions = {PARTITIONS}\n\n[cleaner]\n{cleaner}\n",
                unique_name("cleaner-app")
            ),
        )
        .unwrap();
        let registry = RegistryClient::new(&infra.registry, Duration::from_secs(10)).unwrap();
        let codec = Codec::new(Some(registry)).unwrap();
        let world = World { kube, infra, dir, prefix, codec, sweep: 0 };
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &world.infra.bootstrap).create().unwrap();
        let topic = world.topic("cleanup-decisions.v1");
        // As the process creates it (kept forever), which the cleaner reads.
        let topics = kubefacts::config::TopicsConfig { prefix: world.prefix.clone(), ..Default::default() };
        let spec = topics.spec(&topic, PARTITIONS, false);
        kubefacts::runtime::topics::ensure_topics(&admin, &[spec], true)
            .await
            .unwrap_or_else(|e| panic!("creating {topic} on {}: {e}", world.infra.bootstrap));
        world
    }

    fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Creates (or replaces) a Job in the fake API; returns its UID.
    fn job(&self, namespace: &str, name: &str) -> String {
        self.job_with(namespace, name, json!({}))
    }

    fn job_with(&self, namespace: &str, name: &str, extra_meta: serde_json::Value) -> String {
        let mut meta = json!({"namespace": namespace, "name": name});
        meta.as_object_mut().unwrap().extend(extra_meta.as_object().unwrap().clone());
        let stored = self.kube.apply(json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]},
        }));
        stored["metadata"]["uid"].as_str().unwrap().to_string()
    }

    fn uid_of(&self, namespace: &str, name: &str) -> Option<String> {
        self.kube
            .get("Job", Some(namespace), name)
            .map(|j| j["metadata"]["uid"].as_str().unwrap().to_string())
    }

    /// Produces one decision per Job (key: UID, on its murmur2 partition, Confluent framing).
    async fn decide(&mut self, jobs: &[(&str, &str, &str)]) -> Vec<Produced> {
        let topic = self.topic("cleanup-decisions.v1");
        let writer = self.codec.value_writer(&topic, CleanupDecision::FULL_NAME).await.unwrap();
        let producer = self.infra.producer();
        let mut out = Vec::new();
        for (namespace, name, uid) in jobs {
            self.sweep += 1;
            let decision = CleanupDecision {
                job: JobRef {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    uid: uid.to_string(),
                },
                owner: None,
                result: None,
                finished_at: 1_795_946_400_000,
                retention_secs: 3600,
                retention_source: RetentionSource::Default,
                decided_at: 1_795_950_000_000 + self.sweep,
                sweep: self.sweep,
            };
            let value = writer.encode(&decision).unwrap();
            let partition = partition_for_key(uid.as_bytes(), PARTITIONS);
            let delivery = producer
                .send(
                    FutureRecord::to(&topic).key(*uid).payload(&value).partition(partition),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
            out.push(Produced { partition: delivery.partition, offset: delivery.offset, decision });
        }
        out
    }

    /// Produces a raw value (e.g. garbage) as a decision record; returns (partition, offset).
    async fn decide_raw(&self, key: &str, value: &[u8]) -> (i32, i64) {
        let topic = self.topic("cleanup-decisions.v1");
        let delivery = self
            .infra
            .producer()
            .send(FutureRecord::to(&topic).key(key).payload(value).partition(0), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        (delivery.partition, delivery.offset)
    }

    fn start(&self, instance: &str, args: &[&str]) -> Cleaner {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{instance}.log")))
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(["cleaner", "--create-topics", "--instance-id", instance])
            .args(["--bootstrap", &self.infra.bootstrap, "--registry", &self.infra.registry])
            .arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--config")
            .arg(self.dir.path().join("pipeline.toml"))
            .args(args)
            .env("RUST_LOG", "kubefacts=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(Cleaner)
            .unwrap()
    }

    fn logs(&self) -> String {
        support::logs_in(self.dir.path())
    }

    /// Every committed record of one of this world's topics (none if it does not exist).
    async fn records(&self, name: &str) -> Vec<ReadRecord> {
        support::read_topic_so_far(&self.infra.bootstrap, &self.topic(name)).await
    }

    /// Every committed outcome, decoded; checks each record's key is its Job's UID.
    async fn outcomes(&self) -> Vec<CleanupOutcome> {
        let mut out = Vec::new();
        for r in self.records("cleanup-outcomes.v1").await {
            assert_eq!(r.value[0], 0, "Confluent framing through the registry");
            let o: CleanupOutcome = self.codec.decode_as(&r.value).await.unwrap();
            assert_eq!(r.key.as_deref(), Some(o.job.uid.as_bytes()), "key = Job UID");
            assert_eq!(r.partition, partition_for_key(o.job.uid.as_bytes(), PARTITIONS), "murmur2 partition");
            out.push(o);
        }
        out
    }

    /// Waits (up to 90 s) until at least `n` outcomes are committed.
    async fn wait_outcomes(&self, n: usize) -> Vec<CleanupOutcome> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let outcomes = self.outcomes().await;
            if outcomes.len() >= n {
                return outcomes;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} outcomes after 90 s: {outcomes:#?}\n{}",
                outcomes.len(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Waits (up to 60 s) until at least `n` DELETE requests have reached the fake.
    async fn wait_deletes(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.kube.delete_requests().len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} DELETE requests after 60 s\n{}",
                self.kube.delete_requests().len(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The one outcome of each decision, by (partition, offset); fails on a missing or second one.
fn one_per_decision<'a>(
    outcomes: &'a [CleanupOutcome],
    decisions: &[Produced],
    logs: &str,
) -> BTreeMap<String, &'a CleanupOutcome> {
    let mut by_decision: BTreeMap<(i32, i64), Vec<&CleanupOutcome>> = BTreeMap::new();
    for o in outcomes {
        by_decision.entry((o.decision_partition, o.decision_offset)).or_default().push(o);
    }
    let mut by_name = BTreeMap::new();
    for d in decisions {
        let found = by_decision.remove(&(d.partition, d.offset)).unwrap_or_default();
        assert_eq!(
            found.len(),
            1,
            "decision {:?} has {} outcomes: {found:#?}\n{logs}",
            d.decision.job,
            found.len()
        );
        let o = found[0];
        assert_eq!(o.job, d.decision.job);
        assert_eq!(
            (o.sweep, o.decided_at),
            (d.decision.sweep, d.decision.decided_at),
            "copied from the decision"
        );
        by_name.insert(format!("{}/{}", o.job.namespace, o.job.name), o);
    }
    assert!(by_decision.is_empty(), "outcomes for no decision: {by_decision:#?}");
    by_name
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

const NO_UID: &str = "00000000-0000-4000-8000-00000000dead";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_reports_what_would_happen_deletes_nothing_and_leaves_the_decisions_to_the_applying_cleaner()
 {
    let mut w = World::new("").await;
    let existing = w.job("apps", "existing");
    let old = w.job("apps", "recreated");
    assert!(w.kube.delete("Job", Some("apps"), "recreated").is_some());
    let new = w.job("apps", "recreated");
    assert_ne!(old, new);
    let deleting = w.job_with("apps", "deleting", json!({"deletionTimestamp": "2026-11-29T10:00:00Z"}));
    let decisions = w
        .decide(&[
            ("apps", "existing", &existing),
            ("apps", "missing", NO_UID),
            ("apps", "recreated", &old),
            ("apps", "deleting", &deleting),
        ])
        .await;

    let before = now_ms();
    let dry = w.start("dry", &[]);
    let outcomes = w.wait_outcomes(4).await;
    dry.stop();
    let logs = w.logs();
    let got = one_per_decision(&outcomes, &decisions, &logs);
    let kinds: BTreeMap<&str, K> = got.iter().map(|(k, o)| (k.as_str(), o.outcome)).collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("apps/existing", K::WouldDelete),
            ("apps/missing", K::AlreadyGone),
            ("apps/recreated", K::PreconditionFailed),
            ("apps/deleting", K::AlreadyGone),
        ]),
        "{logs}"
    );
    for o in got.values() {
        assert!(o.dry_run, "{o:?}");
        assert_eq!((o.instance.as_str(), o.api_requests), ("dry", 1), "one GET each: {o:?}");
        assert!((before..=now_ms()).contains(&o.attempted_at), "attempted_at is the wall clock: {o:?}");
    }
    assert_eq!(got["apps/missing"].http_status, Some(404));
    assert!(got["apps/deleting"].detail.contains("being deleted"), "{}", got["apps/deleting"].detail);
    assert!(w.kube.delete_requests().is_empty(), "a dry run sent DELETEs: {:#?}", w.kube.delete_requests());
    assert_eq!(w.uid_of("apps", "existing"), Some(existing.clone()), "still there");
    assert!(logs.contains("dry run"), "the dry run says so:\n{logs}");

    // The applying cleaner is another consumer group: it still gets every decision.
    let applying = w.start("apply", &["--apply"]);
    let outcomes = w.wait_outcomes(8).await;
    applying.stop();
    let applied: Vec<CleanupOutcome> = outcomes.into_iter().filter(|o| !o.dry_run).collect();
    let got = one_per_decision(&applied, &decisions, &w.logs());
    assert_eq!(got["apps/existing"].outcome, K::Deleted);
    assert_eq!(got["apps/recreated"].outcome, K::PreconditionFailed);
    assert_eq!(w.uid_of("apps", "existing"), None);
    assert_eq!(w.uid_of("apps", "recreated"), Some(new), "the re-created Job is never deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_deletes_only_the_decided_uid_and_records_one_outcome_per_decision() {
    let mut w = World::new("max_attempts = 3\nretry_backoff_ms = 50\nmax_retry_backoff_ms = 100\n").await;
    let existing = w.job("apps", "existing");
    let old = w.job("apps", "recreated");
    assert!(w.kube.delete("Job", Some("apps"), "recreated").is_some());
    let recreated = w.job("apps", "recreated");
    let raced = w.job("apps", "raced");
    w.kube.recreate_after_get("apps", "raced");
    let deleting = w.job_with("apps", "deleting", json!({"deletionTimestamp": "2026-11-29T10:00:00Z"}));
    let locked = w.job("locked", "job");
    w.kube.forbid("locked", "delete");
    let sealed = w.job("sealed", "job");
    w.kube.forbid("sealed", "*");
    let broken = w.job("flaky", "broken");
    w.kube.fail_requests("flaky", "delete", 500, None);
    let wobbly = w.job("wobbly", "recovers");
    w.kube.fail_requests("wobbly", "delete", 503, Some(2));

    let mut decisions = w
        .decide(&[
            ("apps", "existing", &existing),
            ("apps", "missing", NO_UID),
            ("apps", "recreated", &old),
            ("apps", "raced", &raced),
            ("apps", "deleting", &deleting),
            ("locked", "job", &locked),
            ("sealed", "job", &sealed),
            ("flaky", "broken", &broken),
        ])
        .await;
    // What cannot be applied is dead-lettered, and the cleaner goes on.
    let garbage = w.decide_raw("garbage", b"\x00\x00\x00\x00\x07not avro").await;
    let invalid = w.decide(&[("apps", "Not/A/Name", NO_UID)]).await;
    decisions.extend(w.decide(&[("wobbly", "recovers", &wobbly)]).await);

    let cleaner = w.start("c1", &["--apply"]);
    let outcomes = w.wait_outcomes(decisions.len()).await;
    // The dead letters are committed with the outcomes around them; give them a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead_letters = loop {
        let dls = w.records("dead-letter.v1").await;
        if dls.len() >= 2 || Instant::now() > deadline {
            break dls;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    cleaner.stop();
    let logs = w.logs();
    let got = one_per_decision(&outcomes, &decisions, &logs);
    let kinds: BTreeMap<&str, K> = got.iter().map(|(k, o)| (k.as_str(), o.outcome)).collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("apps/existing", K::Deleted),
            ("apps/missing", K::AlreadyGone),
            ("apps/recreated", K::PreconditionFailed),
            ("apps/raced", K::PreconditionFailed),
            ("apps/deleting", K::AlreadyGone),
            ("locked/job", K::Forbidden),
            ("sealed/job", K::Forbidden),
            ("flaky/broken", K::Error),
            ("wobbly/recovers", K::Deleted),
        ]),
        "{logs}"
    );

    let deletes = w.kube.delete_requests();
    let of = |ns: &str, name: &str| -> Vec<_> {
        deletes.iter().filter(|d| d.namespace == ns && d.name == name).collect()
    };
    // (a) One DELETE, with the decided UID as precondition and background propagation.
    let d = of("apps", "existing");
    assert_eq!(d.len(), 1, "{deletes:#?}");
    assert_eq!(d[0].precondition_uid.as_deref(), Some(existing.as_str()), "{:?}", d[0].body);
    assert_eq!(d[0].propagation_policy.as_deref(), Some("Background"), "{:?}", d[0].body);
    assert_eq!(d[0].code, 200);
    assert_eq!(w.uid_of("apps", "existing"), None);
    // (b) Gone already: nothing to delete.
    assert!(of("apps", "missing").is_empty());
    assert_eq!(got["apps/missing"].http_status, Some(404));
    // (c) Re-created before the cleaner looked: no DELETE, and it is still there.
    assert!(of("apps", "recreated").is_empty(), "{deletes:#?}");
    assert_eq!(w.uid_of("apps", "recreated"), Some(recreated));
    // (c') Re-created between the GET and the DELETE: the UID precondition refuses (409).
    let d = of("apps", "raced");
    assert_eq!(d.iter().map(|d| d.code).collect::<Vec<_>>(), [409], "{deletes:#?}");
    assert_eq!(d[0].precondition_uid.as_deref(), Some(raced.as_str()));
    let now_there = w.uid_of("apps", "raced").expect("the re-created Job still exists");
    assert_ne!(now_there, raced);
    assert_eq!(got["apps/raced"].http_status, Some(409));
    // Being deleted: no second DELETE.
    assert!(of("apps", "deleting").is_empty());
    assert!(got["apps/deleting"].detail.contains("being deleted"), "{}", got["apps/deleting"].detail);
    // (d) Forbidden on the DELETE, and on the GET.
    assert_eq!(of("locked", "job").iter().map(|d| d.code).collect::<Vec<_>>(), [403]);
    assert_eq!(w.uid_of("locked", "job"), Some(locked));
    assert!(of("sealed", "job").is_empty(), "a GET refused: no DELETE tried");
    for key in ["locked/job", "sealed/job"] {
        assert_eq!(got[key].http_status, Some(403));
        // No free text from the cluster: the 403's message names a user, verb and resource.
        assert!(!got[key].detail.contains("system:serviceaccount"), "{}", got[key].detail);
        assert!(!got[key].detail.contains("cannot"), "{}", got[key].detail);
    }
    // (e) 5xx for ever: three attempts (max_attempts), then ERROR; the Job is still there.
    assert_eq!(of("flaky", "broken").iter().map(|d| d.code).collect::<Vec<_>>(), [500, 500, 500]);
    let o = got["flaky/broken"];
    assert_eq!((o.http_status, o.api_requests), (Some(500), 4), "a GET and three DELETEs: {o:?}");
    assert!(o.detail.contains("after 3 attempts"), "{}", o.detail);
    assert!(w.uid_of("flaky", "broken").is_some());
    // Two 503s, then deleted.
    assert_eq!(of("wobbly", "recovers").iter().map(|d| d.code).collect::<Vec<_>>(), [503, 503, 200]);
    assert_eq!(got["wobbly/recovers"].api_requests, 4);
    for o in got.values() {
        assert!(!o.dry_run && o.instance == "c1" && o.detail.len() <= 200, "{o:?}");
    }

    // Dead letters: the garbage and the invalid decision, with their positions and reasons.
    let mut dls = Vec::new();
    for r in &dead_letters {
        dls.push(w.codec.decode_as::<DeadLetter>(&r.value).await.unwrap());
    }
    dls.sort_by_key(|d| d.reason.clone());
    assert_eq!(dls.len(), 2, "{dls:#?}");
    assert_eq!((dls[0].reason.as_str(), dls[0].processor.as_str()), ("invalid_decision", "cleaner"));
    assert_eq!((dls[0].source_partition, dls[0].source_offset), (invalid[0].partition, invalid[0].offset));
    assert_eq!((dls[1].source_partition, dls[1].source_offset), garbage);
    assert_eq!(
        dls[1].source_value.as_deref(),
        Some(&b"\x00\x00\x00\x00\x07not avro"[..]),
        "the original bytes"
    );
    assert_ne!(dls[1].reason, "", "{:?}", dls[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleaner_killed_between_delete_and_commit_never_deletes_twice() {
    // One transaction for the whole batch: a kill anywhere in it loses every outcome of it.
    let mut w = World::new("max_deletes_per_sec = 50\ncommit_interval_ms = 60000\n").await;
    let mut jobs = Vec::new();
    for i in 0..12 {
        let name = format!("run-{i:02}");
        let uid = w.job("apps", &name);
        jobs.push((name, uid));
    }
    let refs: Vec<(&str, &str, &str)> = jobs.iter().map(|(n, u)| ("apps", n.as_str(), u.as_str())).collect();
    let decisions = w.decide(&refs).await;

    // Kill 1: the fifth DELETE is carried out but its answer withheld; SIGKILL there.
    w.kube.hold_delete_responses_after(4);
    let first = w.start("c1", &["--apply"]);
    w.wait_deletes(5).await;
    first.kill();
    let held = w.kube.delete_requests()[4].precondition_uid.clone().unwrap();
    let committed = w.outcomes().await;
    assert!(
        committed.iter().all(|o| o.job.uid != held),
        "no outcome for a DELETE whose answer never came: {committed:#?}"
    );
    // Kill 2, on the same instance id (it fences the dead one): three more DELETEs.
    w.kube.hold_delete_responses_after(7);
    let second = w.start("c1", &["--apply"]);
    w.wait_deletes(8).await;
    second.kill();
    w.kube.release_delete_responses();
    // The third run finishes.
    let third = w.start("c1", &["--apply"]);
    let outcomes = w.wait_outcomes(jobs.len()).await;
    third.stop();

    let logs = w.logs();
    let deletes = w.kube.delete_requests();
    let mut per_uid: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &deletes {
        *per_uid.entry(d.precondition_uid.as_deref().expect("a UID precondition")).or_default() += 1;
    }
    assert!(per_uid.values().all(|n| *n == 1), "a UID deleted twice: {per_uid:#?}\n{logs}");
    assert_eq!(per_uid.len(), jobs.len(), "every Job deleted once");
    let got = one_per_decision(&outcomes, &decisions, &logs);
    let gone = got.values().filter(|o| o.outcome == K::AlreadyGone).count();
    assert!(got.values().all(|o| matches!(o.outcome, K::Deleted | K::AlreadyGone)), "{got:#?}");
    // At least the two whose answers were lost with their cleaner were found gone.
    assert!(gone >= 2, "{got:#?}");
    assert!(jobs.iter().all(|(name, _)| w.uid_of("apps", name).is_none()));

    // A fourth start finds nothing left to do: the committed offsets hold.
    let fourth = w.start("c2", &["--apply"]);
    tokio::time::sleep(Duration::from_secs(8)).await;
    fourth.stop();
    assert_eq!(w.outcomes().await.len(), jobs.len(), "no outcome twice\n{}", w.logs());
    assert_eq!(w.kube.delete_requests().len(), deletes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_are_rate_limited() {
    // The flag overrides the file.
    let mut w = World::new("max_deletes_per_sec = 1000\n").await;
    let n = 11;
    let mut jobs = Vec::new();
    for i in 0..n {
        let name = format!("run-{i:02}");
        let uid = w.job("apps", &name);
        jobs.push((name, uid));
    }
    let refs: Vec<(&str, &str, &str)> = jobs.iter().map(|(n, u)| ("apps", n.as_str(), u.as_str())).collect();
    let decisions = w.decide(&refs).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let cleaner = w.start(
        "c1",
        &["--apply", "--max-deletes-per-sec", "5", "--metrics-addr", &format!("127.0.0.1:{port}")],
    );
    let outcomes = w.wait_outcomes(n).await;
    // The committed outcomes are counted on /metrics as the stage "cleaner"'s events.
    let want = format!("kubefacts_processor_events_total{{stage=\"cleaner\",event=\"deleted\"}} {n}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = kubefacts::http::get(&metrics).await.unwrap().text().await.unwrap();
        if body.lines().any(|l| l == want) {
            break;
        }
        assert!(Instant::now() < deadline, "no {want:?} in\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cleaner.stop();
    let got = one_per_decision(&outcomes, &decisions, &w.logs());
    assert!(got.values().all(|o| o.outcome == K::Deleted), "{got:#?}");

    let at: Vec<Instant> = w.kube.delete_requests().iter().map(|d| d.at).collect();
    assert_eq!(at.len(), n);
    let span = at[n - 1] - at[0];
    let least = Duration::from_secs_f64((n - 1) as f64 / 5.0);
    // Generous: the fake records arrival times, which network jitter can bring closer.
    assert!(
        span.as_secs_f64() / least.as_secs_f64() >= 0.8,
        "{n} DELETEs in {span:?}: at 5/s they need at least {least:?}"
    );
}
