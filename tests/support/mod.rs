//! Shared test support: the real broker, registry and fastavro started by
//! `scripts/test.sh`, unique topics, and sample values for every schema.
//!
//! A test that needs infrastructure fails (never skips) when it is missing.
#![allow(dead_code)]

pub mod cluster;
pub mod docker;
pub mod fake_kube;
pub mod k8s;
pub mod outputs;
pub mod paused;
pub mod previous_release;
pub mod sample;

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{Consumer, StreamConsumer},
    producer::{FutureProducer, FutureRecord},
};

/// Where the test infrastructure runs.
#[derive(Debug, Clone)]
pub struct Infra {
    /// Kafka bootstrap servers.
    pub bootstrap: String,
    /// Confluent-compatible registry base URL.
    pub registry: String,
    /// Python with fastavro.
    pub python: PathBuf,
}

fn required(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: this test needs the real Kafka broker, schema registry and fastavro. \
             Run ./scripts/test.sh (it installs and starts them), or scripts/infra/up.sh && \
             source .cache/run/env before cargo test."
        )
    })
}

/// The running infrastructure; panics with instructions when it is not there.
pub fn infra() -> Infra {
    Infra {
        bootstrap: required("KUBEFACTS_TEST_BOOTSTRAP"),
        registry: required("KUBEFACTS_TEST_REGISTRY"),
        python: PathBuf::from(required("KUBEFACTS_TEST_PYTHON")),
    }
}

/// The Alertmanager `scripts/infra/up.sh` started, and the binary it runs (for tests that
/// start, stop and restart a private instance).
#[derive(Debug, Clone)]
pub struct Alertmanager {
    /// Base URL, `http://127.0.0.1:<port>`.
    pub url: String,
    /// The `alertmanager` executable.
    pub bin: PathBuf,
}

/// The running Alertmanager; panics with instructions when it is not there.
pub fn alertmanager() -> Alertmanager {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: this test needs the real Alertmanager (and Kafka). Run \
                 ./scripts/test.sh (it installs and starts them), or scripts/infra/up.sh && \
                 source .cache/run/env before cargo test."
            )
        })
    };
    let am = Alertmanager {
        url: var("KUBEFACTS_TEST_ALERTMANAGER"),
        bin: PathBuf::from(var("KUBEFACTS_TEST_ALERTMANAGER_BIN")),
    };
    assert!(am.bin.is_file(), "KUBEFACTS_TEST_ALERTMANAGER_BIN={} is not a file", am.bin.display());
    am
}

/// Prometheus and promtool from Debian's `prometheus`, which `scripts/infra/up.sh` installs
/// but does not start: each test starts a private instance with its own config.
#[derive(Debug, Clone)]
pub struct Prometheus {
    /// The `prometheus` executable.
    pub bin: PathBuf,
    /// The `promtool` executable (same package).
    pub promtool: PathBuf,
}

/// Where Prometheus and promtool are; panics with instructions when they are not there.
pub fn prometheus() -> Prometheus {
    let var = |name: &str| {
        let path = PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: this test needs the real Prometheus and promtool (Debian's \
                 prometheus package). Run ./scripts/test.sh (it installs them), or \
                 scripts/infra/up.sh && source .cache/run/env before cargo test."
            )
        }));
        assert!(path.is_file(), "{name}={} is not a file (run scripts/infra/up.sh again)", path.display());
        path
    };
    Prometheus { bin: var("KUBEFACTS_TEST_PROMETHEUS_BIN"), promtool: var("KUBEFACTS_TEST_PROMTOOL_BIN") }
}

/// A private Prometheus started by [`Prometheus::start`]; killed when dropped.
pub struct RunningPrometheus {
    /// Base URL, `http://127.0.0.1:<port>`.
    pub url: String,
    /// The process.
    pub child: KillOnDrop,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port with `config` (the text of a prometheus.yml)
    /// written to `<dir>/prometheus.yml`, its TSDB in `<dir>/prometheus-data` and its log in
    /// `<dir>/prometheus.log`, and waits (up to 30 s) until it is ready.
    pub async fn start(&self, dir: &std::path::Path, config: &str) -> RunningPrometheus {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(&self.bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("prometheus-data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let mut child = KillOnDrop(child);
        let url = format!("http://127.0.0.1:{port}");
        let http = kubefacts::http::client_builder().timeout(Duration::from_secs(2)).build().unwrap();
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("prometheus exited with {status} before it was ready\n{}", logs_in(dir));
            }
            let ready = http.get(format!("{url}/-/ready")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return RunningPrometheus { url, child };
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus not ready in 30 s\n{}",
                logs_in(dir)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The topic config that keeps records whatever their timestamp: every topic a test creates
/// that deletes by time says its retention, because the fixtures carry fixed dates and the
/// test brokers keep Kafka's 7-day default (and refuse a topic that does not say one:
/// scripts/infra/RetentionMustBeExplicit.java, docs/TESTING.md "Fixed dates").
pub const KEEP_FOREVER: (&str, &str) = ("retention.ms", "-1");

/// A topic name no other test (or earlier run) uses.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos:x}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

impl Infra {
    /// Creates a fresh topic with `partitions` partitions and returns its name.
    pub async fn topic(&self, prefix: &str, partitions: i32) -> String {
        let name = unique_name(prefix);
        self.create_topic(&name, partitions).await;
        name
    }

    /// Creates topic `name` with `partitions` partitions, keeping its records forever
    /// ([`KEEP_FOREVER`]): the tests' fixtures carry fixed timestamps.
    pub async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &self.bootstrap).create().expect("admin client");
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let topic =
            NewTopic::new(name, partitions, TopicReplication::Fixed(1)).set(KEEP_FOREVER.0, KEEP_FOREVER.1);
        let res = admin
            .create_topics(&[topic], &opts)
            .await
            .unwrap_or_else(|e| panic!("cannot reach Kafka at {} to create {name}: {e}", self.bootstrap));
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
    }

    /// An idempotent producer.
    pub fn producer(&self) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("enable.idempotence", "true")
            .create()
            .expect("producer")
    }

    /// Produces `(key, value)` records to partition 0 of `topic`, in order.
    pub async fn produce(&self, topic: &str, records: &[(Option<&str>, Vec<u8>)]) {
        let producer = self.producer();
        for (key, value) in records {
            let mut rec = FutureRecord::to(topic).payload(value).partition(0);
            if let Some(k) = key {
                rec = rec.key(*k);
            }
            producer.send(rec, Duration::from_secs(30)).await.map_err(|(e, _)| e).expect("produce");
        }
    }

    /// Reads the first `n` committed record values of partition 0 of `topic`.
    pub async fn consume(&self, topic: &str, n: usize) -> Vec<Vec<u8>> {
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", unique_name("test-consumer"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
        consumer.assign(&tpl).unwrap();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let msg = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                .await
                .unwrap_or_else(|_| panic!("only {} of {n} records arrived on {topic} in 30 s", out.len()))
                .expect("consume");
            out.push(msg.payload().unwrap_or_default().to_vec());
        }
        out
    }

    /// Decodes record values with fastavro (an independent implementation). Each result
    /// is the JSON the script printed, or its error text.
    pub fn fastavro(
        &self,
        framing: &str,
        schema_file: Option<&str>,
        values: &[Vec<u8>],
    ) -> Vec<serde_json::Value> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/fastavro_decode.py");
        let mut cmd = Command::new(&self.python);
        cmd.arg(script).arg("--framing").arg(framing);
        match schema_file {
            Some(f) => cmd.arg("--schema").arg(f),
            None => cmd.arg("--registry").arg(&self.registry),
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run fastavro with {}: {e}", self.python.display()));
        {
            let mut stdin = child.stdin.take().unwrap();
            for v in values {
                let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                writeln!(stdin, "{hex}").unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "fastavro failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("fastavro printed {l:?}: {e}")))
            .collect()
    }
}

/// Path of a file in the repository.
pub fn repo_path(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// One record as read back by [`read_topic`].
#[derive(Debug, Clone)]
pub struct ReadRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes (empty when null).
    pub value: Vec<u8>,
}

/// A client of `bootstrap`: plaintext, or as the super user of the three-broker cluster
/// when `bootstrap` is that cluster's ([`cluster`]).
pub fn client_config(bootstrap: &str) -> ClientConfig {
    match cluster::running().filter(|c| c.bootstrap == bootstrap) {
        Some(c) => c.admin(),
        None => {
            let mut c = ClientConfig::new();
            c.set("bootstrap.servers", bootstrap);
            c
        }
    }
}

/// Every committed record of `topic` (all partitions, from the beginning to the last
/// stable offset; read_committed, so aborted transactions never show), in partition then
/// offset order — but forwarded stream time: records with the `kubefacts-heartbeat`
/// header (no value, no fact) are left out, as every consumer of our outputs leaves them.
pub fn read_topic(bootstrap: &str, topic: &str) -> Vec<ReadRecord> {
    let records = read_records(bootstrap, topic);
    records
        .into_iter()
        .map(|r| ReadRecord {
            partition: r.partition,
            offset: r.offset,
            key: r.key,
            value: r.value.unwrap_or_default(),
        })
        .collect()
}

/// One committed record with its value as it is (`None`: a tombstone).
pub use kubefacts::runtime::kafka::bystander::CommittedRecord as Committed;

/// Like [`read_topic`] (committed, heartbeats left out, partition then offset order), but
/// tombstones stay `None` and timestamps are kept. Panics when the topic does not exist.
pub fn read_records(bootstrap: &str, topic: &str) -> Vec<Committed> {
    let timeout = Duration::from_secs(120);
    kubefacts::runtime::kafka::bystander::read_to_end(
        client_config(bootstrap),
        "read-records",
        topic,
        timeout,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .unwrap_or_else(|| panic!("topic {topic} does not exist"))
    .into_iter()
    .filter(|r| !r.is_forwarded_heartbeat())
    .collect()
}

/// One stage's consumer group and its co-partitioned inputs.
pub struct Stage {
    /// The group.
    pub group: String,
    /// Its co-partitioned inputs (3 partitions each).
    pub inputs: Vec<String>,
}

/// Whether every stage's group has committed every record of its inputs.
pub fn all_committed(bootstrap: &str, stages: &[Stage]) -> Result<(), String> {
    let behind: Vec<String> = committed_positions(bootstrap, stages)?
        .into_iter()
        .filter(|p| p.committed != p.end)
        .map(|p| format!("{} {}[{}]: {} of {}", p.group, p.topic, p.partition, p.committed, p.end))
        .collect();
    if behind.is_empty() { Ok(()) } else { Err(behind.join(", ")) }
}

/// Where a stage's group stands on one input partition.
#[derive(Debug, Clone)]
pub struct Position {
    /// The group.
    pub group: String,
    /// The input topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset (0 when none).
    pub committed: i64,
    /// The high watermark.
    pub end: i64,
}

/// Every stage's committed offset and end, per input partition.
pub fn committed_positions(bootstrap: &str, stages: &[Stage]) -> Result<Vec<Position>, String> {
    let mut positions = Vec::new();
    for s in stages {
        let c: rdkafka::consumer::BaseConsumer = client_config(bootstrap)
            .set("group.id", &s.group)
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        let mut ends = std::collections::BTreeMap::new();
        for t in &s.inputs {
            for p in 0..3 {
                let end = c.fetch_watermarks(t, p, Duration::from_secs(5)).map_err(|e| e.to_string())?.1;
                ends.insert((t.clone(), p), end);
                tpl.add_partition(t, p);
            }
        }
        let committed = c.committed_offsets(tpl, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        for e in committed.elements() {
            positions.push(Position {
                group: s.group.clone(),
                topic: e.topic().to_owned(),
                partition: e.partition(),
                committed: if let Offset::Offset(o) = e.offset() { o } else { 0 },
                end: ends[&(e.topic().to_owned(), e.partition())],
            });
        }
    }
    Ok(positions)
}

/// Waits until every stage has committed its input ([`all_committed`]), failing the test
/// when one of the named instances in `running` exits or `secs` pass; `tails` is what the
/// failure then shows of their logs.
pub fn wait_all_committed(
    bootstrap: &str,
    stages: &[Stage],
    running: &mut [(&str, &mut KillOnDrop)],
    secs: u64,
    tails: &dyn Fn() -> String,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        for (name, instance) in running.iter_mut() {
            assert!(instance.try_wait().unwrap().is_none(), "{name} exited\n{}", tails());
        }
        match all_committed(bootstrap, stages) {
            Ok(()) => return,
            Err(behind) if std::time::Instant::now() > deadline => {
                panic!("not every stage committed its input within {secs} s: {behind}\n{}", tails())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The stages of the default pipeline on topics with `prefix`, application `app`.
pub fn default_stages(prefix: &str, app: &str) -> Vec<Stage> {
    let topic = |name: &str| format!("{prefix}{name}");
    [
        ("runs", vec![topic("jobs.v1"), topic("pods.v1")]),
        ("journal", vec![topic("internal.journal-repartition.v1")]),
        ("coverage", vec![topic("job-run-facts.v1"), topic("cronjobs.v1")]),
        ("sessions", vec![topic("sessions.v1"), topic("pods.v1")]),
        ("session-owners", vec![topic("internal.session-owner-repartition.v1")]),
    ]
    .into_iter()
    // One group for the application: every stage's inputs are committed in it.
    .map(|(_stage, inputs)| Stage { group: app.to_owned(), inputs })
    .collect()
}

/// Whether a process is stopped (SIGSTOP, at a failpoint): state `T` in `/proc/<pid>/stat`.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

/// A free loopback port (bound, then released for a child to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether a record is forwarded stream time: the `kubefacts-heartbeat` header and no value
/// (the watcher's heartbeat observations carry the header too, with their Avro value).
pub fn is_heartbeat(m: &impl Message) -> bool {
    use rdkafka::message::Headers;
    m.payload().is_none()
        && m.headers().is_some_and(|h| h.iter().any(|h| h.key == kubefacts::runtime::HEARTBEAT_HEADER))
}

/// The Kafka key DESIGN §2 gives an observation carrying an object: Job and CronJob UIDs,
/// a Pod's routing key (default session label), `namespace/name` of a Lease, the session
/// id. Derived from the record itself, so a test can check what the publisher chose.
pub fn expected_key(record: &kubefacts::observe::ObservationRecord) -> String {
    use kubefacts::observe::{ObservationRecord as R, pod_routing_key};
    match record {
        R::Job(o) => o.job.as_ref().expect("a Job").meta.uid.clone(),
        R::CronJob(o) => o.cronjob.as_ref().expect("a CronJob").meta.uid.clone(),
        R::Pod(o) => pod_routing_key(o.pod.as_ref().expect("a Pod"), "kubefacts.io/session").to_owned(),
        R::Lease(o) => {
            let l = o.lease.as_ref().expect("a Lease");
            format!("{}/{}", l.meta.namespace, l.meta.name)
        }
        R::Session(o) => o.session.as_ref().expect("a session").session_id.clone(),
    }
}

/// Every record of `topic` so far (none while it does not exist yet), read on a blocking
/// thread: what a test polls until a process has written what it expects.
pub async fn read_topic_so_far(bootstrap: &str, topic: &str) -> Vec<ReadRecord> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        topic_exists(&bootstrap, &topic).then(|| read_topic(&bootstrap, &topic))
    })
    .await
    .unwrap()
    .unwrap_or_default()
}

/// Whether `topic` exists (with partitions) on the broker.
pub fn topic_exists(bootstrap: &str, topic: &str) -> bool {
    let c: rdkafka::consumer::BaseConsumer = client_config(bootstrap).create().expect("a metadata client");
    c.fetch_metadata(None, Duration::from_secs(10))
        .map(|md| md.topics().iter().any(|t| t.name() == topic && !t.partitions().is_empty()))
        .unwrap_or(false)
}

/// Every `*.log` file in `dir`, each under a `--- path` line: what a failing test prints
/// about the processes it ran.
pub fn logs_in(dir: &std::path::Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            all += &format!("--- {}\n{}\n", p.display(), std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
    all
}

/// A child process (a `kubefacts` instance) killed and reaped when dropped, so a failing
/// test leaves nothing running.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl KillOnDrop {
    /// SIGTERM, then waits up to `secs` for the exit (failing the test after that).
    pub fn terminate(&mut self, secs: u64) -> std::process::ExitStatus {
        assert!(Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().unwrap().success());
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "still running {secs} s after SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kubefacts process` instances of one test, each logging to `<logs>/<instance>.log`.
#[derive(Debug, Clone)]
pub struct Processes {
    /// Where the logs go.
    pub logs: PathBuf,
    /// Kafka bootstrap servers.
    pub bootstrap: String,
    /// The pipeline file.
    pub config: PathBuf,
}

impl Processes {
    /// Instances of the pipeline in `config`, logging under `logs` (created).
    pub fn new(logs: PathBuf, bootstrap: &str, config: &std::path::Path) -> Self {
        std::fs::create_dir_all(&logs).unwrap();
        Self { logs, bootstrap: bootstrap.to_owned(), config: config.to_owned() }
    }

    /// Starts instance `instance` (no registry) with `extra` arguments.
    pub fn start(&self, instance: &str, extra: &[&str]) -> KillOnDrop {
        self.start_binary(Path::new(env!("CARGO_BIN_EXE_kubefacts")), instance, extra)
    }

    /// [`Processes::start`] with another `kubefacts` binary (an earlier release).
    pub fn start_binary(&self, binary: &Path, instance: &str, extra: &[&str]) -> KillOnDrop {
        process_command_of(binary, instance, &self.bootstrap)
            .arg("--config")
            .arg(&self.config)
            .args(extra)
            .env_remove("KUBEFACTS_REGISTRY")
            .stderr(append_log(&self.logs.join(format!("{instance}.log"))))
            .spawn()
            .map(KillOnDrop)
            .unwrap()
    }

    /// The last lines of every instance's log, for a failure message.
    pub fn tails(&self) -> String {
        log_tails(&self.logs, 12)
    }
}

/// The last `lines` lines of every file in `dir`, each under a `--- path` line: what a
/// failing test prints about the processes it ran.
pub fn log_tails(dir: &std::path::Path, lines: usize) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p: PathBuf = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(lines).collect();
        all += &format!("--- {}\n{}\n", p.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    all
}

/// `path` opened for appending (created if missing): an instance started again under the
/// same name keeps its earlier lines.
pub fn append_log(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap()
}

/// `kubefacts process --create-topics` as instance `instance` on `bootstrap`, logging at
/// info, stdout discarded; the caller adds the pipeline, stderr and the rest.
pub fn process_command(instance: &str, bootstrap: &str) -> Command {
    process_command_of(Path::new(env!("CARGO_BIN_EXE_kubefacts")), instance, bootstrap)
}

/// [`process_command`] with another `kubefacts` binary.
pub fn process_command_of(binary: &Path, instance: &str, bootstrap: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["process", "--create-topics", "--instance-id", instance, "--bootstrap", bootstrap])
        .env("RUST_LOG", "kubefacts=info")
        .stdout(Stdio::null());
    command
}

/// What a finished `kubefacts` command printed.
#[derive(Debug)]
pub struct Printed {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Printed {
    /// Standard output, then standard error.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `kubefacts args` to its end, success or not. The broker and registry are the ones
/// `args` name: none comes from the environment.
pub fn kubefacts_output(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(args)
        .env_remove("KUBEFACTS_REGISTRY")
        .env_remove("KUBEFACTS_BOOTSTRAP")
        .output()
        .unwrap()
}

/// [`kubefacts_output`], failing the test with what it printed unless it succeeded.
pub fn kubefacts_ok(args: &[&str]) -> Printed {
    let out = kubefacts_output(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubefacts {args:?} failed:\n{stderr}\n{stdout}");
    Printed { stdout: stdout.into_owned(), stderr: stderr.into_owned() }
}

/// Writes the small simulated fleet's trace of `hours` hours from `seed` to `output`
/// (`kubefacts simulate`, with `extra` arguments such as `--start`).
pub fn simulate_small(hours: &str, seed: &str, output: &std::path::Path, extra: &[&str]) {
    let output = output.to_str().unwrap();
    let args = ["simulate", "--profile", "small", "--hours", hours, "--seed", seed, "--output", output];
    kubefacts_ok(&[&args[..], extra].concat());
}

/// `kubefacts replay --partitions 3 --finish` of `trace` into `output` under `config`: what
/// a broker test compares Kafka's outputs with.
pub fn replay_finished(trace: &Path, output: &Path, config: &str) -> Printed {
    let (trace, output) = (trace.to_str().unwrap(), output.to_str().unwrap());
    kubefacts_ok(&[
        "replay",
        "--partitions",
        "3",
        "--finish",
        "--input",
        trace,
        "--output",
        output,
        "--config",
        config,
    ])
}

/// A test's own pipeline: a temporary directory, a topic prefix and an application id
/// nobody else uses, and `pipeline.toml` naming them, with `process` (TOML lines) added
/// to its `[process]` section.
#[derive(Debug)]
pub struct Scratch {
    /// Removed when the test ends.
    pub dir: tempfile::TempDir,
    /// Every topic's prefix (it ends in a dot).
    pub prefix: String,
    /// `[process] application_id`.
    pub app: String,
    /// The pipeline file.
    pub config: PathBuf,
}

impl Scratch {
    /// Names from `name` (`<name>-….` topics, application `<name>-app-…`).
    pub fn new(name: &str, process: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}.", unique_name(name));
        let app = unique_name(&format!("{name}-app"));
        let config = dir.path().join("pipeline.toml");
        std::fs::write(
            &config,
            format!("[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\n{process}"),
        )
        .unwrap();
        Self { dir, prefix, app, config }
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The pipeline file, as an argument.
    pub fn config_arg(&self) -> &str {
        self.config.to_str().unwrap()
    }
}

/// Publishes the trace at `trace` with `--finish` (creating the input topics with
/// `partitions` partitions) and replays it into `replay_dir`, both with the pipeline file
/// `config`: the input of a Kafka run and what it must equal. Returns what publish printed.
pub fn publish_and_replay(
    bootstrap: &str,
    partitions: &str,
    trace: &str,
    config: &str,
    replay_dir: &str,
) -> String {
    let published = kubefacts_ok(&[
        "publish",
        "--create-topics",
        "--partitions",
        partitions,
        "--finish",
        "--bootstrap",
        bootstrap,
        "--input",
        trace,
        "--config",
        config,
    ])
    .all();
    assert!(published.contains("publish: finished the trace as a quiet cluster would"), "{published}");
    kubefacts_ok(&[
        "replay",
        "--partitions",
        partitions,
        "--finish",
        "--input",
        trace,
        "--output",
        replay_dir,
        "--config",
        config,
    ]);
    published
}
