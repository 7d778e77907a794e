//! Least privilege on a three-broker SASL_SSL cluster (`scripts/infra/cluster.sh`,
//! `StandardAuthorizer`, nothing allowed without an ACL): every component connects as its
//! own SCRAM user holding exactly the ACLs `kubefacts acls` lists for it, does its work,
//! and with any one of those ACLs removed stops with an authorization error that names
//! the refused resource. A wrong password fails at start instead of retrying forever, and
//! no password reaches a log line.

mod support;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::{
    cleanup::{CleanupDecision, JobRef, RetentionSource},
    codec::{Codec, Framing, RecordWriter},
    runtime::probe::KeyedCount,
};
use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    message::{Header, OwnedHeaders},
    producer::{BaseRecord, Producer, ThreadedProducer},
};
use serde_json::Value;
use support::{alertmanager, fake_kube::FakeKube, repo_path, unique_name};

const PARTITIONS: i32 = 3;
/// How long a component gets to show it works, or to fail.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// A record the operator produces: key, value (none for a heartbeat), heartbeat header.
type Record = (Vec<u8>, Option<Vec<u8>>, bool);

/// The three-broker cluster and its admin tool.
struct Cluster {
    base: support::cluster::Cluster,
    env_file: PathBuf,
    bootstrap: String,
    ca: String,
    python: String,
    tool: String,
    users_dir: PathBuf,
}

fn cluster() -> Cluster {
    let base = support::cluster::cluster();
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (.cache/run/cluster/env)"))
    };
    Cluster {
        env_file: base.dir.join("env"),
        bootstrap: base.bootstrap.clone(),
        ca: base.ca.clone(),
        python: var("KUBEFACTS_CLUSTER_PYTHON"),
        tool: var("KUBEFACTS_CLUSTER_ADMIN_TOOL"),
        users_dir: PathBuf::from(var("KUBEFACTS_CLUSTER_USERS_DIR")),
        base,
    }
}

impl Cluster {
    /// Runs `kafka_admin.py args` (with `stdin`), failing the test unless it succeeds.
    fn admin_tool(&self, args: &[&str], stdin: Option<&str>) -> String {
        use std::io::Write;
        let mut child = Command::new(&self.python)
            .arg(&self.tool)
            .arg("--env")
            .arg(&self.env_file)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kafka_admin.py {args:?} failed: {text}");
        text
    }

    /// A client configuration of the cluster's super user (the operator setting it up).
    fn admin(&self) -> ClientConfig {
        self.base.admin()
    }

    /// The sum of the high watermarks of `topic` (0 when it cannot be read).
    fn end_offsets(&self, topic: &str) -> i64 {
        let consumer: BaseConsumer = self.admin().create().unwrap();
        (0..PARTITIONS)
            .filter_map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).ok())
            .map(|(_, high)| high)
            .sum()
    }

    /// Produces `records` (key, value, heartbeat) as the operator, spread over the partitions.
    fn produce(&self, topic: &str, records: &[Record], timestamp_ms: i64) {
        let producer: ThreadedProducer<_> = self.admin().set("enable.idempotence", "true").create().unwrap();
        for (i, (key, value, heartbeat)) in records.iter().enumerate() {
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .partition(i as i32 % PARTITIONS)
                .key(key.as_slice())
                .timestamp(timestamp_ms + i as i64);
            if let Some(v) = value {
                rec = rec.payload(v);
            }
            if *heartbeat {
                let header = Header { key: kubefacts::runtime::HEARTBEAT_HEADER, value: Some("1") };
                rec = rec.headers(OwnedHeaders::new().insert(header));
            }
            producer.send(rec).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    }
}

/// One component as the test runs it: its name in `kubefacts acls`, its user, and how a
/// run of it is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    Watcher,
    Process,
    Cleaner,
    Alerts,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Self::Watcher => "watcher",
            Self::Process => "process",
            Self::Cleaner => "cleaner",
            Self::Alerts => "alerts",
        }
    }
}

/// The test's pipeline, its users and its ACLs.
struct World {
    cluster: Cluster,
    dir: tempfile::TempDir,
    prefix: String,
    users: Vec<(Component, String)>,
    acls: Value,
    /// The Kubernetes API the cleaner asks (kept running for the test).
    _kube: FakeKube,
    round: i64,
}

/// How a run ended.
enum Ran {
    /// It did its work (and was stopped, if it runs until stopped).
    Worked,
    /// It exited with an error; what it printed.
    Failed(String),
    /// Neither within [`RUN_TIMEOUT`]; what it printed.
    Undecided(String),
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ran::Worked => f.write_str("worked"),
            Ran::Failed(log) => write!(f, "failed:\n{}", tail(log)),
            Ran::Undecided(log) => write!(f, "neither worked nor failed in {RUN_TIMEOUT:?}:\n{}", tail(log)),
        }
    }
}

impl World {
    async fn new() -> World {
        let cluster = cluster();
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}.", unique_name("acl"));
        let app = unique_name("acl-app");
        let kube = FakeKube::start().await;
        kube.write_kubeconfig(&dir.path().join("kubeconfig"));
        std::fs::write(
            dir.path().join("pipeline.toml"),
            format!(
                "[topics]\nprefix = \"{prefix}\"\n\n\
                 [kafka]\nsecurity_protocol = \"sasl_ssl\"\n[kafka.tls]\nca_file = \"{ca}\"\n\n\
                 [process]\napplication_id = \"{app}\"\nsession_timeout_ms = 6000\npartitions = {PARTITIONS}\n\n\
                 [[process.stages]]\nname = \"count\"\nprocessor = \"probe\"\n\
                 inputs = [\"{prefix}probe-in\"]\noutputs = [\"{prefix}probe-counts\"]\n",
                ca = cluster.ca
            ),
        )
        .unwrap();
        let tag = unique_name("u").replace('-', "");
        let users: Vec<(Component, String)> =
            [Component::Watcher, Component::Process, Component::Cleaner, Component::Alerts]
                .into_iter()
                .map(|c| (c, format!("kf-{}-{tag}", c.name())))
                .collect();
        let names: Vec<&str> = users.iter().map(|(_, u)| u.as_str()).collect();
        cluster.admin_tool(&[&["users"], &names[..]].concat(), None);

        let mut world = World { cluster, dir, prefix, users, acls: Value::Null, _kube: kube, round: 0 };
        let mut args = vec!["acls".to_owned(), "--format".into(), "json".into(), "--config".into()];
        args.push(world.pipeline().display().to_string());
        for (c, u) in &world.users {
            args.extend(["--principal".into(), format!("{}=User:{u}", c.name())]);
        }
        for c in &world.users {
            args.extend(["--component".into(), c.0.name().into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let printed = support::kubefacts_ok(&args);
        world.acls = serde_json::from_str(&printed.stdout).unwrap();
        world.create_topics().await;
        world.cluster.admin_tool(&["acls", "apply", "-"], Some(&world.acls.to_string()));
        world
    }

    fn pipeline(&self) -> PathBuf {
        self.dir.path().join("pipeline.toml")
    }

    fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn user(&self, c: Component) -> &str {
        &self.users.iter().find(|(x, _)| *x == c).unwrap().1
    }

    fn component_acls(&self, c: Component) -> Vec<Value> {
        let all = self.acls["components"].as_array().unwrap();
        let this = all.iter().find(|x| x["component"] == c.name()).unwrap();
        this["acls"].as_array().unwrap().clone()
    }

    /// Every topic an ACL names, created by the operator (replication factor 3, changelogs
    /// compacted), as a deployment would before starting the components.
    async fn create_topics(&self) {
        let mut names: Vec<String> = self.acls["components"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["acls"].as_array().unwrap().clone())
            .filter(|a| a["resource_type"] == "topic")
            .map(|a| a["name"].as_str().unwrap().to_owned())
            .collect();
        names.push(self.topic("coverage-alerts.v1"));
        names.sort();
        names.dedup();
        let new: Vec<NewTopic<'_>> = names
            .iter()
            .map(|n| {
                let t = NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(3));
                if n.ends_with("-changelog") {
                    t.set("cleanup.policy", "compact")
                } else {
                    t.set(support::KEEP_FOREVER.0, support::KEEP_FOREVER.1)
                }
            })
            .collect();
        let admin: AdminClient<DefaultClientContext> = self.cluster.admin().create().unwrap();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        for r in admin.create_topics(&new, &opts).await.unwrap() {
            if let Err((t, e)) = r
                && e != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists
            {
                panic!("creating {t}: {e}");
            }
        }
    }

    /// `kubefacts <args>` as component `c`'s user: bootstrap, credentials by flag (the
    /// pipeline file has TLS only), logs to a file per run.
    fn command(&self, c: Component, args: &[&str], password_file: &Path, log: &Path) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefacts"));
        cmd.args(args)
            .arg("--config")
            .arg(self.pipeline())
            .args(["--bootstrap", &self.cluster.bootstrap])
            .args(["--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", self.user(c)])
            .arg("--kafka-sasl-password-file")
            .arg(password_file)
            .env_remove("KUBEFACTS_REGISTRY")
            .env_remove("KUBEFACTS_BOOTSTRAP")
            .env("RUST_LOG", "kubefacts=debug,rdkafka=debug")
            .stdout(Stdio::null())
            .stderr(support::append_log(log));
        cmd
    }

    fn password_file(&self, c: Component) -> PathBuf {
        self.cluster.users_dir.join(format!("{}.password", self.user(c)))
    }

    /// Runs component `c` through its scenario as its user. `apply`: the cleaner applies
    /// (its other group) instead of a dry run.
    fn run(&mut self, c: Component, apply: bool) -> Ran {
        self.run_with(c, apply, &self.password_file(c))
    }

    fn run_with(&mut self, c: Component, apply: bool, password_file: &Path) -> Ran {
        self.round += 1;
        let log = self.dir.path().join(format!("{}-{}.log", c.name(), self.round));
        let watched: Vec<String> = match c {
            Component::Watcher => Vec::new(),
            Component::Process => {
                self.feed_probe();
                vec![self.topic("probe-counts"), self.topic("dead-letter.v1")]
            }
            Component::Cleaner => {
                self.feed_cleaner();
                vec![self.topic("cleanup-outcomes.v1"), self.topic("dead-letter.v1")]
            }
            Component::Alerts => Vec::new(),
        };
        let before: Vec<i64> = watched.iter().map(|t| self.cluster.end_offsets(t)).collect();
        let trace = repo_path("tests/fixtures/traces/demo.jsonl");
        let instance = format!("i{}", self.round);
        let mut cmd = match c {
            Component::Watcher => {
                let args = ["publish", "--input", trace.as_str(), "--instance-id", &instance];
                self.command(c, &args, password_file, &log)
            }
            Component::Process => {
                self.command(c, &["process", "--instance-id", &instance], password_file, &log)
            }
            Component::Cleaner => {
                let kubeconfig = self.dir.path().join("kubeconfig");
                let mut args =
                    vec!["cleaner", "--instance-id", &instance, "--kubeconfig", kubeconfig.to_str().unwrap()];
                if apply {
                    args.push("--apply");
                }
                let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                self.command(c, &args, password_file, &log)
            }
            Component::Alerts => {
                let url = alertmanager().url;
                self.command(c, &["alerts", "--alertmanager", &url], password_file, &log)
            }
        };
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + RUN_TIMEOUT;
        let printed = || std::fs::read_to_string(&log).unwrap_or_default();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return if status.success() && c == Component::Watcher {
                    Ran::Worked
                } else {
                    Ran::Failed(printed())
                };
            }
            let worked = match c {
                Component::Watcher => false,
                Component::Process | Component::Cleaner => {
                    watched.iter().zip(&before).all(|(t, b)| self.cluster.end_offsets(t) > *b)
                }
                Component::Alerts => printed().contains("alerts: read"),
            };
            if worked {
                stop(&mut child);
                return Ran::Worked;
            }
            if Instant::now() > deadline {
                stop(&mut child);
                return Ran::Undecided(printed());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// New probe input: three counted records and one that is not Avro (dead-lettered),
    /// then a heartbeat on every partition that releases them.
    fn feed_probe(&self) {
        let codec = Codec::new(None).unwrap();
        let known = codec.schemas().current(KeyedCount::FULL_NAME).unwrap();
        let w = RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap();
        let t = 1_795_946_400_000 + self.round * 1_000_000;
        let mut records: Vec<Record> = (0..3)
            .map(|i| {
                let key = format!("key-{i}");
                let v =
                    w.encode(&KeyedCount { key: key.clone(), count: 0, input_partition: 0, input_offset: 0 });
                (key.into_bytes(), Some(v.unwrap()), false)
            })
            .collect();
        records.push((b"bad".to_vec(), Some(b"not avro".to_vec()), false));
        self.cluster.produce(&self.topic("probe-in"), &records, t);
        let ends: Vec<_> =
            (0..PARTITIONS).map(|_| (kubefacts::runtime::HEARTBEAT_KEY.to_vec(), None, true)).collect();
        self.cluster.produce(&self.topic("probe-in"), &ends, t + 500_000);
    }

    /// New decisions: one for a Job the API does not have (an outcome) and one that is
    /// not a decision (dead-lettered).
    fn feed_cleaner(&self) {
        let codec = Codec::new(None).unwrap();
        let known = codec.schemas().current(CleanupDecision::FULL_NAME).unwrap();
        let w = RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap();
        let uid = unique_name("uid");
        let decision = CleanupDecision {
            job: JobRef { namespace: "ns".into(), name: format!("job-{}", self.round), uid: uid.clone() },
            owner: None,
            result: None,
            finished_at: 1_795_946_400_000,
            retention_secs: 3600,
            retention_source: RetentionSource::Default,
            decided_at: 1_795_950_000_000 + self.round,
            sweep: self.round,
        };
        let records = vec![
            (uid.into_bytes(), Some(w.encode(&decision).unwrap()), false),
            (b"bad".to_vec(), Some(b"x".to_vec()), false),
        ];
        self.cluster.produce(&self.topic("cleanup-decisions.v1"), &records, 1_795_950_000_000);
    }

    /// Removes ACL `index` of component `c`, or puts it back.
    fn acl(&self, verb: &str, c: Component, index: usize) {
        let index = index.to_string();
        self.cluster.admin_tool(
            &["acls", verb, "-", "--component", c.name(), "--only", &index],
            Some(&self.acls.to_string()),
        );
        // The tool sees the change on one broker; each broker applies it from the metadata
        // log on its own, moments apart (a run started at once met a broker that still
        // allowed the removed ACL).
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// SIGTERM, then SIGKILL after 20 s.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The name an error about `acl` must carry.
fn resource(acl: &Value) -> String {
    acl["name"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_component_needs_exactly_its_listed_acls() {
    let mut w = World::new().await;
    let components = [Component::Watcher, Component::Process, Component::Cleaner, Component::Alerts];

    // With its whole list, each component works as its own user.
    for c in components {
        match w.run(c, false) {
            Ran::Worked => {}
            other => panic!("{} did not work with every ACL of its list: {other:?}", c.name()),
        }
    }
    match w.run(Component::Cleaner, true) {
        Ran::Worked => {}
        other => panic!("the applying cleaner did not work with every ACL of its list: {other:?}"),
    }

    // Without any one of them, it stops, naming what was refused. The cleaner's ACLs of
    // its dry-run group are proved by a dry run, the others by an applying one.
    let mut proved = Vec::new();
    for c in components {
        for (i, acl) in w.component_acls(c).iter().enumerate() {
            let apply = c == Component::Cleaner && !resource(acl).contains("dry-run");
            w.acl("remove", c, i);
            let mut ran = w.run(c, apply);
            if matches!(ran, Ran::Worked) {
                // Once more after a while: a broker may still have applied the old ACLs
                // (each applies the metadata log on its own). Worked twice: not needed.
                std::thread::sleep(Duration::from_secs(5));
                ran = w.run(c, apply);
            }
            w.acl("apply", c, i);
            let what = format!("{} without {acl}", c.name());
            match ran {
                Ran::Failed(log) => {
                    let name = resource(acl);
                    assert!(
                        log.contains("authorization failed") && log.contains(&name),
                        "{what}: failed without naming {name} as refused:\n{}",
                        tail(&log)
                    );
                    proved.push(what);
                }
                Ran::Worked => panic!("{what}: still worked, so the ACL is not needed"),
                Ran::Undecided(log) => {
                    panic!("{what}: neither worked nor failed in {RUN_TIMEOUT:?}:\n{}", tail(&log))
                }
            }
        }
    }
    assert!(proved.len() >= 20, "too few ACLs proved: {proved:#?}");
    println!("{} ACLs proved needed, each refused by name when removed", proved.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_at_start_and_no_password_reaches_a_log() {
    let mut w = World::new().await;
    let wrong = w.dir.path().join("wrong.password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let started = Instant::now();
    match w.run_with(Component::Watcher, false, &wrong) {
        Ran::Failed(log) => {
            assert!(
                log.contains("refused to authenticate") && log.contains(w.user(Component::Watcher)),
                "{}",
                tail(&log)
            );
            assert!(!log.contains("not-the-password"), "the wrong password reached the log");
        }
        other => panic!("a wrong password did not fail: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?} to give up", started.elapsed());

    // A run at debug level (librdkafka's too) never prints the password it used.
    let password = std::fs::read_to_string(w.password_file(Component::Process)).unwrap();
    let password = password.trim_end();
    assert!(password.len() >= 16, "the cluster's user passwords are random");
    match w.run(Component::Process, false) {
        Ran::Worked => {}
        other => panic!("process did not work: {other:?}"),
    }
    let logs = support::logs_in(w.dir.path());
    assert!(logs.contains("sasl") || logs.contains("SASL"), "debug logs were not captured");
    assert!(!logs.contains(password), "a password reached the logs");
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> =
        log.lines().filter(|l| !l.contains("rdkafka::client") && !l.contains("retention")).collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
