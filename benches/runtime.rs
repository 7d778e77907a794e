//! Runtime throughput, side by side in one run on the same broker (DESIGN §8):
//!
//! 1. the broker's ceiling: Kafka's own `ProducerPerformance` at the probe's record size;
//! 2. the exactly-once runtime (`kubefacts process --processor probe`, the binary built with
//!    this bench) over a pre-produced backlog: the slope of committed input offsets between
//!    10 % and 90 % of the input, so start-up and restore are excluded; at the default
//!    settings, then at other `--max-batch-records` / `--commit-interval-ms`;
//! 3. the in-memory driver over the same records, one thread;
//! 4. restore of a changelog with one entry per input record (distinct keys);
//!
//! plus changelog bytes per key and the observation-to-output latency under a steady load.
//!
//! `KUBEFACTS_BENCH_TRACING=1 cargo bench --bench runtime [-- N]` runs only the exactly-once
//! runtime, alternately without and with span export (OTLP/HTTP to a sink in this process
//! that answers 200 and drops the spans), and prints both rates side by side
//! (docs/TRACING.md, "Overhead").
//!
//! `cargo bench --bench runtime [-- N]` (default N = 200 000 records;
//! `KUBEFACTS_BENCH_BIN=<path>` runs another build of `kubefacts`, e.g. to try a change;
//! `KUBEFACTS_BENCH_RUST_LOG` sets the instances' `RUST_LOG`). Under
//! `cargo test --all-targets` it runs a quick version (N = 2 000) that checks the machinery
//! and the counts. Both need the broker: `scripts/infra/up.sh && source .cache/run/env`.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use kubefacts::{
    codec::{Codec, Framing, RecordWriter},
    runtime::{
        driver::{self, MemTopic, OutputTopics},
        probe::{KeyedCount, Probe},
    },
};
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    producer::{BaseRecord, Producer, ThreadedProducer},
};

#[path = "common/broker.rs"]
mod broker;

use broker::{
    Env, PerfResult, committed_reader, now_ms, percentile, producer_performance, send_retrying, unique,
};

const PARTITIONS: i32 = 3;
const KEYS: usize = 1_000;
const BASE_TS: i64 = 1_795_946_400_000;

// ---------------------------------------------------------------------------------------
// Input

fn writer(codec: &Codec) -> RecordWriter {
    let known = codec.schemas().current(KeyedCount::FULL_NAME).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

/// `n` probe input records over `keys` keys, as `tests/runtime_exactly_once.rs` makes them.
fn input_log(codec: &Codec, n: usize, keys: usize) -> MemTopic {
    let w = writer(codec);
    let mut log = MemTopic::new("in", PARTITIONS);
    for i in 0..n {
        let key = format!("key-{}", i % keys);
        let value = w
            .encode(&KeyedCount { key: key.clone(), count: 0, input_partition: 0, input_offset: 0 })
            .unwrap();
        log.produce(Some(key.as_bytes()), Some(value), BASE_TS + i as i64, false);
    }
    log
}

fn avg_value_bytes(log: &MemTopic) -> f64 {
    let total: usize = log.partitions.iter().flatten().map(|r| r.value.as_ref().map_or(0, Vec::len)).sum();
    total as f64 / log.len() as f64
}

fn avg_key_bytes(log: &MemTopic) -> f64 {
    let total: usize = log.partitions.iter().flatten().map(|r| r.key.as_ref().map_or(0, Vec::len)).sum();
    total as f64 / log.len() as f64
}

/// Writes the log partition by partition (offsets equal the indexes); returns records/s.
fn produce_log(env: &Env, topic: &str, log: &MemTopic) -> f64 {
    let producer: ThreadedProducer<_> =
        env.client().set("enable.idempotence", "true").set("linger.ms", "20").create().unwrap();
    let started = Instant::now();
    for (p, records) in log.partitions.iter().enumerate() {
        for r in records {
            let rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .partition(p as i32)
                .timestamp(r.timestamp_ms)
                .key(r.key.as_deref().unwrap())
                .payload(r.value.as_deref().unwrap());
            send_retrying(&producer, rec);
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
    log.len() as f64 / started.elapsed().as_secs_f64()
}

/// Every committed record of a topic: (partition, key, value, timestamp).
fn read_committed(env: &Env, topic: &str) -> Vec<(i32, Vec<u8>, Option<Vec<u8>>)> {
    let consumer: BaseConsumer = env
        .client()
        .set("group.id", unique("bench-verify"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (mut out, mut eof) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while eof < PARTITIONS {
        assert!(Instant::now() < deadline, "reading {topic} took over 120 s");
        match consumer.poll(Duration::from_secs(1)) {
            Some(Ok(m)) => out.push((
                m.partition(),
                m.key().unwrap_or_default().to_vec(),
                m.payload().map(<[u8]>::to_vec),
            )),
            Some(Err(KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// 2. The exactly-once runtime as an OS process

/// Whether instances started from now on export spans (to [`OTLP_SINK`]).
static EXPORT: AtomicBool = AtomicBool::new(false);
/// The OTLP/HTTP endpoint of [`otlp_sink`], once started.
static OTLP_SINK: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// An OTLP/HTTP receiver that reads each request, answers 200 and drops it; returns its
/// base URL. Counts the request bytes it took in `bytes`.
fn otlp_sink(bytes: Arc<AtomicU64>) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let bytes = Arc::clone(&bytes);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    bytes.fetch_add(length as u64, Ordering::Relaxed);
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// The runtime over the same backlog without and with span export, alternately, `rounds`
/// times each; prints the rates side by side.
fn tracing_overhead(env: &Env, rt: &tokio::runtime::Runtime, input: &str, n: usize, rounds: usize) {
    let received = Arc::new(AtomicU64::new(0));
    OTLP_SINK.get_or_init(|| otlp_sink(Arc::clone(&received)));
    println!(
        "tracing overhead: exactly-once runtime (probe), backlog of {n}, export off vs on (OTLP/HTTP, batch exporter, SDK defaults)"
    );
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        for export in [false, true] {
            EXPORT.store(export, Ordering::Relaxed);
            let before = received.load(Ordering::Relaxed);
            let r = measured_run(env, rt, input, n, KEYS, Settings::default());
            let sent = received.load(Ordering::Relaxed) - before;
            println!(
                "  round {round}, export {:<3}  {:>9.0} records/s  runtime cpu {:.2} cores  OTLP bytes received {sent}",
                if export { "on" } else { "off" },
                r.rate,
                r.cpu.runtime
            );
            if export { on.push(r.rate) } else { off.push(r.rate) }
        }
    }
    EXPORT.store(false, Ordering::Relaxed);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (off, on) = (median(&mut off), median(&mut on));
    println!(
        "  median: export off {off:.0} records/s · export on {on:.0} records/s · on/off {:.1} %",
        100.0 * on / off
    );
}

struct Instance {
    child: Child,
    log: PathBuf,
    started: Instant,
}

impl Instance {
    fn start(env: &Env, app: &str, instance: &str, input: &str, output: &str, settings: Settings) -> Self {
        let log = env.logs.join(format!("{app}-{instance}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(&env.bin)
            .args(["process", "--processor", "probe", "--create-topics", "--partitions", "3"])
            .args(["--input", input, "--output", output])
            .args(["--application-id", app, "--instance-id", instance, "--bootstrap", &env.bootstrap])
            .args(["--max-batch-records", &settings.max_batch_records.to_string()])
            .args(["--commit-interval-ms", &settings.commit_interval_ms.to_string()])
            // `KUBEFACTS_BENCH_RUST_LOG` (e.g. `kubefacts=info,kubefacts::runtime::kafka=debug`)
            // puts each transaction's phases in the instance logs.
            .env(
                "RUST_LOG",
                std::env::var("KUBEFACTS_BENCH_RUST_LOG").unwrap_or_else(|_| "kubefacts=info".into()),
            )
            .envs(
                OTLP_SINK
                    .get()
                    .filter(|_| EXPORT.load(Ordering::Relaxed))
                    .map(|url| ("OTEL_EXPORTER_OTLP_ENDPOINT", url)),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", env.bin));
        Instance { child, log, started: Instant::now() }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        format!("--- {}\n{}", self.log.display(), lines[lines.len().saturating_sub(20)..].join("\n"))
    }

    fn check_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("kubefacts process exited ({status}):\n{}", self.tail());
        }
    }

    /// Sum of `restored=` over the "tasks assigned and restored" lines, their `ms=`, and the
    /// time since start when the first such line was seen (`None` while there is none).
    fn restores(&self) -> Option<(u64, u64)> {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("tasks assigned and restored")).collect();
        if lines.is_empty() {
            return None;
        }
        let field = |l: &str, name: &str| -> u64 {
            l.split(&format!("{name}="))
                .nth(1)
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        Some((lines.iter().map(|l| field(l, "restored")).sum(), lines.iter().map(|l| field(l, "ms")).sum()))
    }

    /// SIGTERM (commit what is in flight, leave the group), then the exit summary line.
    fn terminate(mut self) -> String {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                self.child.kill().unwrap();
                panic!("instance did not stop within 30 s of SIGTERM:\n{}", self.tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.log_text().lines().find(|l| l.starts_with("process: ")).unwrap_or("").to_owned()
    }
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    max_batch_records: usize,
    commit_interval_ms: u64,
}

impl Default for Settings {
    /// What `kubefacts process` runs with when nothing is configured.
    fn default() -> Settings {
        let defaults = kubefacts::config::ProcessConfig::default();
        Settings {
            max_batch_records: defaults.max_batch_records,
            commit_interval_ms: defaults.commit_interval_ms,
        }
    }
}

impl std::fmt::Display for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--max-batch-records {:>6} --commit-interval-ms {:>4}",
            self.max_batch_records, self.commit_interval_ms
        )
    }
}

/// CPU ticks (1/100 s) per thread of a process, by thread id, with the thread's name.
fn thread_ticks(pid: u32) -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for e in dir.flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Some((name, ticks)) = stat_ticks(&e.path().join("stat")) {
            out.insert(tid, (name, ticks));
        }
    }
    out
}

/// (comm, utime + stime) from a `/proc/.../stat` file.
fn stat_ticks(path: &Path) -> Option<(String, u64)> {
    let s = std::fs::read_to_string(path).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let name = s[open + 1..close].to_owned();
    let fields: Vec<&str> = s[close + 2..].split_whitespace().collect();
    // After the name: state is field 3 of stat(5), so utime (14) and stime (15) are at 11, 12.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((name, ticks))
}

fn process_ticks(pid: u32) -> Option<u64> {
    stat_ticks(Path::new(&format!("/proc/{pid}/stat"))).map(|(_, t)| t)
}

/// CPU used during the measured window, in cores (1.0 = one core busy all the time).
#[derive(Default)]
struct CpuReport {
    runtime: f64,
    broker: Option<f64>,
    /// Busiest threads of the runtime process: (name, cores).
    threads: Vec<(String, f64)>,
}

struct CpuSample {
    at: Instant,
    threads: HashMap<u32, (String, u64)>,
    broker: Option<u64>,
}

impl CpuSample {
    fn take(pid: u32, broker_pid: Option<u32>) -> Self {
        CpuSample {
            at: Instant::now(),
            threads: thread_ticks(pid),
            broker: broker_pid.and_then(process_ticks),
        }
    }

    fn report(&self, later: &CpuSample) -> CpuReport {
        let secs = later.at.duration_since(self.at).as_secs_f64();
        if secs < 0.5 {
            return CpuReport::default(); // too short to say anything
        }
        let cores = |ticks: u64| ticks as f64 / 100.0 / secs;
        let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
        let mut total = 0;
        for (tid, (name, t)) in &later.threads {
            let before = self.threads.get(tid).map_or(0, |(_, b)| *b);
            let d = t.saturating_sub(before);
            total += d;
            *by_name.entry(name.clone()).or_default() += d;
        }
        let mut threads: Vec<(String, f64)> = by_name.into_iter().map(|(n, t)| (n, cores(t))).collect();
        threads.sort_by(|a, b| b.1.total_cmp(&a.1));
        threads.truncate(4);
        CpuReport {
            runtime: cores(total),
            broker: self.broker.zip(later.broker).map(|(a, b)| cores(b.saturating_sub(a))),
            threads,
        }
    }
}

struct RunResult {
    settings: Settings,
    keys: usize,
    rate: f64,
    /// From the start of the process to the first committed input.
    first_commit_s: f64,
    total_s: f64,
    commits: Option<u64>,
    cpu: CpuReport,
    app: String,
    output: String,
}

impl RunResult {
    fn records_per_commit(&self, n: usize) -> Option<f64> {
        self.commits.filter(|c| *c > 0).map(|c| n as f64 / c as f64)
    }
}

/// Sum of the group's committed offsets on `topic` (0 where none).
fn committed_total(poller: &BaseConsumer, topic: &str) -> i64 {
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    match poller.committed_offsets(tpl, Duration::from_secs(5)) {
        Ok(c) => c
            .elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            })
            .sum(),
        Err(_) => -1,
    }
}

/// Runs one instance over the `n`-record backlog in `input` until everything is committed;
/// the rate is the slope between 10 % and 90 % committed. The instance is left running.
fn run_backlog(
    env: &Env,
    rt: &tokio::runtime::Runtime,
    input: &str,
    n: usize,
    keys: usize,
    settings: Settings,
) -> (RunResult, Instance) {
    let app = unique("bench-app");
    let output = env.create_topic(rt, "bench-out", &[]);
    // Reads the group's committed offsets without joining it; read_uncommitted so the
    // offset fetch never waits for a transaction in flight.
    let poller: BaseConsumer = env
        .client()
        // The application's one group: `<application id>`.
        .set("group.id", &app)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let mut inst = Instance::start(env, &app, "a", input, &output, settings);
    let pid = inst.child.id();
    let (lo, hi) = (n as i64 / 10, n as i64 * 9 / 10);
    let (mut t_first, mut at_lo, mut at_hi): (Option<Instant>, Option<(Instant, i64, CpuSample)>, _) =
        (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        inst.check_running();
        assert!(Instant::now() < deadline, "not all input committed after 600 s:\n{}", inst.tail());
        let before = CpuSample::take(pid, env.broker_pid);
        let total = committed_total(&poller, input);
        let sample = CpuSample { at: Instant::now(), ..before };
        if total > 0 && t_first.is_none() {
            t_first = Some(sample.at);
        }
        if total >= lo && at_lo.is_none() {
            at_lo = Some((sample.at, total, sample));
        } else if total >= hi && at_hi.is_none() {
            at_hi = Some((sample.at, total, sample));
        }
        if total >= n as i64 {
            assert_eq!(total, n as i64, "committed more input than was produced");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let total_s = inst.started.elapsed().as_secs_f64();
    let (t_lo, c_lo, cpu_lo) = at_lo.unwrap();
    // A tiny run may jump from below 10 % to 100 % in one poll: use the end as the upper mark.
    let (t_hi, c_hi, cpu_hi) = at_hi.unwrap_or_else(|| {
        let s = CpuSample::take(pid, env.broker_pid);
        (s.at, n as i64, s)
    });
    let secs = t_hi.duration_since(t_lo).as_secs_f64();
    let rate = if c_hi > c_lo && secs > 0.0 { (c_hi - c_lo) as f64 / secs } else { f64::NAN };
    let result = RunResult {
        settings,
        keys,
        rate,
        first_commit_s: t_first.unwrap().duration_since(inst.started).as_secs_f64(),
        total_s,
        commits: None,
        cpu: cpu_lo.report(&cpu_hi),
        app,
        output,
    };
    (result, inst)
}

/// `commits` from the exit summary: "process: N in, N out, D dead-lettered, C commits, …".
fn parse_commits(summary: &str) -> Option<u64> {
    let before = summary.split(" commits").next()?;
    before.rsplit(", ").next()?.trim().parse().ok()
}

/// A full backlog run: measure, stop, check that every input gave exactly one output.
fn measured_run(
    env: &Env,
    rt: &tokio::runtime::Runtime,
    input: &str,
    n: usize,
    keys: usize,
    settings: Settings,
) -> RunResult {
    let (mut r, inst) = run_backlog(env, rt, input, n, keys, settings);
    let tail = inst.tail();
    let summary = inst.terminate();
    r.commits = parse_commits(&summary);
    assert!(
        summary.contains(&format!("{n} in, {n} out, 0 dead-lettered")),
        "unexpected summary {summary:?}\n{tail}"
    );
    let outputs = read_committed(env, &r.output).len();
    assert_eq!(outputs, n, "one committed output per input ({settings})");
    r
}

fn print_run(label: &str, r: &RunResult, n: usize, perf: Option<f64>) {
    if r.rate.is_nan() {
        println!("  {label:<34} n/a: committed in one step, too few records for a 10–90 % slope");
    } else {
        let ratio =
            perf.map_or(String::new(), |p| format!("  {:>5.1} % of ProducerPerformance", 100.0 * r.rate / p));
        println!("  {label:<34} {:>9.0} records/s{ratio}", r.rate);
    }
    let per_commit = r.records_per_commit(n).map_or("?".into(), |c| format!("{c:.0}"));
    println!(
        "  {:<34} {} · {} keys · first commit after {:.1} s · all {n} in {:.1} s · {} commits ({per_commit} input records each)",
        "",
        r.settings,
        r.keys,
        r.first_commit_s,
        r.total_s,
        r.commits.map_or("?".into(), |c| c.to_string())
    );
    let threads: Vec<String> = r.cpu.threads.iter().map(|(n, c)| format!("{n} {c:.2}")).collect();
    println!(
        "  {:<34} cpu (cores) during 10–90 %: runtime {:.2} [{}], broker {}",
        "",
        r.cpu.runtime,
        threads.join(", "),
        r.cpu.broker.map_or("?".into(), |b| format!("{b:.2}"))
    );
}

// ---------------------------------------------------------------------------------------
// A transactional producer alone: the per-transaction cost without consuming or processing

/// How the bare transactional loop runs: as the runtime does it, or with a change.
#[derive(Debug, Clone, Copy)]
struct TxnVariant {
    label: &'static str,
    /// librdkafka `retry.backoff.ms` (default 100): the wait before retrying a request the
    /// coordinator answered with CONCURRENT_TRANSACTIONS.
    retry_backoff_ms: Option<u32>,
    /// Wait until every record is delivered (`in_flight_count() == 0`) before
    /// `send_offsets_to_transaction`.
    wait_for_deliveries: bool,
}

const TXN_VARIANTS: [TxnVariant; 4] = [
    TxnVariant { label: "as the runtime does it", retry_backoff_ms: None, wait_for_deliveries: false },
    TxnVariant { label: "retry.backoff.ms=10", retry_backoff_ms: Some(10), wait_for_deliveries: false },
    TxnVariant { label: "wait for deliveries", retry_backoff_ms: None, wait_for_deliveries: true },
    TxnVariant {
        label: "retry.backoff.ms=10 + wait for deliveries",
        retry_backoff_ms: Some(10),
        wait_for_deliveries: true,
    },
];

struct TxnResult {
    rate: f64,
    /// Per transaction, p50 in ms: producing (queueing), waiting for deliveries,
    /// send_offsets_to_transaction, commit_transaction.
    produce_ms: f64,
    wait_ms: f64,
    offsets_ms: f64,
    commit_ms: f64,
}

/// Transactions of `batch` output-sized records plus `changes` changelog-sized records and
/// an offset commit, in the runtime's order (produce, send_offsets_to_transaction,
/// commit_transaction); returns output records/s and where the time went.
fn transactional_producer(
    env: &Env,
    rt: &tokio::runtime::Runtime,
    variant: TxnVariant,
    batch: usize,
    changes: usize,
    transactions: usize,
    value_size: usize,
) -> TxnResult {
    let out = env.create_topic(rt, "bench-txn-out", &[]);
    let log = env.create_topic(rt, "bench-txn-log", &[("cleanup.policy", "compact")]);
    let mut config = env.client();
    config
        .set("transactional.id", unique("bench-txn"))
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    if let Some(ms) = variant.retry_backoff_ms {
        config.set("retry.backoff.ms", ms.to_string());
    }
    let producer: ThreadedProducer<_> = config.create().unwrap();
    producer.init_transactions(Duration::from_secs(60)).unwrap();
    let group: BaseConsumer = env.client().set("group.id", unique("bench-txn-group")).create().unwrap();
    let metadata = group.group_metadata().expect("group metadata");
    let value = vec![7u8; value_size];
    let keys: Vec<String> = (0..KEYS).map(|k| format!("key-{k}")).collect();
    let mut phases: [Vec<f64>; 4] = Default::default();
    let started = Instant::now();
    for t in 0..transactions {
        let t0 = Instant::now();
        producer.begin_transaction().unwrap();
        for i in 0..batch {
            let key = keys[(t * batch + i) % KEYS].as_bytes();
            let p = (i % PARTITIONS as usize) as i32;
            send_retrying(&producer, BaseRecord::to(&out).partition(p).key(key).payload(&value[..]));
        }
        for i in 0..changes {
            let key = keys[i % KEYS].as_bytes();
            let p = (i % PARTITIONS as usize) as i32;
            send_retrying(&producer, BaseRecord::to(&log).partition(p).key(key).payload(&value[..2]));
        }
        let t1 = Instant::now();
        if variant.wait_for_deliveries {
            while producer.in_flight_count() > 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let t2 = Instant::now();
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&out, p, Offset::Offset((t * batch) as i64)).unwrap();
        }
        producer.send_offsets_to_transaction(&tpl, &metadata, Duration::from_secs(30)).unwrap();
        let t3 = Instant::now();
        producer.commit_transaction(Duration::from_secs(30)).unwrap();
        let t4 = Instant::now();
        for (i, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4)].into_iter().enumerate() {
            phases[i].push(b.duration_since(a).as_secs_f64() * 1e3);
        }
    }
    let rate = (batch * transactions) as f64 / started.elapsed().as_secs_f64();
    let [a, b, c, d] = phases.map(|mut v| {
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    });
    TxnResult { rate, produce_ms: a, wait_ms: b, offsets_ms: c, commit_ms: d }
}

// ---------------------------------------------------------------------------------------
// 3. The in-memory driver

fn driver_rate(codec: &Codec, rt: &tokio::runtime::Runtime, log: &MemTopic, rounds: usize) -> (f64, f64) {
    let mut rates = Vec::new();
    for _ in 0..rounds {
        let outputs = OutputTopics {
            writers: vec![writer(codec)],
            topics: vec![MemTopic::new("out", PARTITIONS)],
            key_writers: Vec::new(),
            forward: Vec::new(),
        };
        let started = Instant::now();
        let run = rt.block_on(driver::run("probe", codec, &[log], outputs, |_| Probe::new())).unwrap();
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(run.records_in as usize, log.len());
        assert_eq!(run.outputs[0].len(), log.len(), "one output per input");
        assert!(run.dead_letters.is_empty());
        rates.push(log.len() as f64 / secs);
    }
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() / 2], rates[rates.len() - 1])
}

// ---------------------------------------------------------------------------------------
// Changelog size

struct ChangelogSize {
    records: usize,
    keys: usize,
    bytes_per_key: f64,
    disk_bytes_per_record: Option<f64>,
}

fn changelog_size(env: &Env, app: &str) -> ChangelogSize {
    let topic = format!("{app}-probe-counts-changelog");
    let records = read_committed(env, &topic);
    let mut latest: HashMap<(i32, Vec<u8>), usize> = HashMap::new();
    for (p, k, v) in &records {
        latest.insert((*p, k.clone()), k.len() + v.as_ref().map_or(0, Vec::len));
    }
    let bytes: usize = latest.values().sum();
    // The broker's log files, when it is the one `scripts/infra/up.sh` runs from this checkout.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/run/kafka/data");
    let disk: u64 = (0..PARTITIONS)
        .filter_map(|p| std::fs::read_dir(data.join(format!("{topic}-{p}"))).ok())
        .flat_map(|d| d.flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .sum();
    ChangelogSize {
        records: records.len(),
        keys: latest.len(),
        bytes_per_key: bytes as f64 / latest.len().max(1) as f64,
        disk_bytes_per_record: (disk > 0).then(|| disk as f64 / records.len().max(1) as f64),
    }
}

// ---------------------------------------------------------------------------------------
// Observation-to-output latency under a steady load

struct Latency {
    rate: f64,
    samples: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

/// Produces `rate` records/s (timestamped now) for `secs` into a fresh pipeline and reads its
/// output with a read_committed consumer: latency = time read − output timestamp (the stream
/// time, i.e. the input record's timestamp). The first second is not counted.
fn latency_run(env: &Env, rt: &tokio::runtime::Runtime, rate: f64, secs: f64) -> Latency {
    let input = env.create_topic(rt, "bench-lat-in", &[]);
    let output = env.create_topic(rt, "bench-lat-out", &[]);
    let app = unique("bench-lat");
    let mut inst = Instance::start(env, &app, "a", &input, &output, Settings::default());
    let deadline = Instant::now() + Duration::from_secs(60);
    while inst.restores().is_none() {
        inst.check_running();
        assert!(Instant::now() < deadline, "no partitions assigned in 60 s:\n{}", inst.tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    let consumer = committed_reader(env, &output);

    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let producer_thread = {
        let (sent, done, input) = (Arc::clone(&sent), Arc::clone(&done), input.clone());
        let producer: ThreadedProducer<_> =
            env.client().set("enable.idempotence", "true").set("linger.ms", "5").create().unwrap();
        let codec = Codec::new(None).unwrap();
        std::thread::spawn(move || {
            let w = writer(&codec);
            let started = Instant::now();
            let mut i = 0u64;
            while started.elapsed().as_secs_f64() < secs {
                let due = (started.elapsed().as_secs_f64() * rate) as u64;
                while i < due {
                    let key = format!("key-{}", i as usize % KEYS);
                    let value = w
                        .encode(&KeyedCount {
                            key: key.clone(),
                            count: 0,
                            input_partition: 0,
                            input_offset: 0,
                        })
                        .unwrap();
                    let rec: BaseRecord<'_, [u8], [u8]> =
                        BaseRecord::to(&input).key(key.as_bytes()).payload(&value[..]).timestamp(now_ms());
                    send_retrying(&producer, rec);
                    i += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            producer.flush(Duration::from_secs(30)).unwrap();
            sent.store(i, Ordering::SeqCst);
            done.store(true, Ordering::SeqCst);
        })
    };
    let warm_up = now_ms() + 1_000;
    let mut latencies = Vec::new();
    let mut received = 0u64;
    let drain_deadline = Instant::now() + Duration::from_secs_f64(secs + 60.0);
    while !(done.load(Ordering::SeqCst) && received >= sent.load(Ordering::SeqCst)) {
        assert!(Instant::now() < drain_deadline, "outputs stopped arriving:\n{}", inst.tail());
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                received += 1;
                let ts = m.timestamp().to_millis().unwrap();
                if ts >= warm_up {
                    latencies.push((now_ms() - ts) as f64);
                }
            }
            Some(Err(e)) => panic!("reading {output}: {e}"),
            None => inst.check_running(),
        }
    }
    producer_thread.join().unwrap();
    assert_eq!(received, sent.load(Ordering::SeqCst), "one output per input");
    inst.terminate();
    latencies.sort_by(f64::total_cmp);
    Latency {
        rate,
        samples: latencies.len(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or(f64::NAN),
    }
}

// ---------------------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes --bench; under `cargo test --all-targets` this is a quick check.
    let benching = std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if benching {
        200_000
    } else {
        2_000
    });
    let env = Env::from_env("runtime", PARTITIONS);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let codec = Codec::new(None).unwrap();
    let bench_started = Instant::now();

    let log = input_log(&codec, n, KEYS);
    if std::env::var_os("KUBEFACTS_BENCH_TRACING").is_some() {
        let input = env.create_topic(&rt, "bench-in", &[]);
        produce_log(&env, &input, &log);
        tracing_overhead(&env, &rt, &input, n, if benching { 3 } else { 1 });
        return;
    }
    let value_bytes = avg_value_bytes(&log);
    let record_size = value_bytes.round() as usize;
    println!(
        "runtime bench: N = {n} probe input records, {KEYS} keys, {PARTITIONS} partitions, value {value_bytes:.1} B \
         (single-object KeyedCount), key {:.1} B; broker {}; {} cores; kubefacts: {}\n",
        avg_key_bytes(&log),
        env.bootstrap,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        env.bin
    );

    // 1. The broker's ceiling. On a just-started broker the first run is slow (JIT), so in
    // the full bench one run warms the broker up first.
    println!(
        "1. broker ceiling: ProducerPerformance, {n} × {record_size} B, acks=all, 3 partitions, fresh topic"
    );
    if benching {
        let topic = env.create_topic(&rt, "bench-perf-warmup", &[]);
        let warm = producer_performance(&env, &topic, n, record_size, &[]);
        println!("  warm-up run                        {:>9.0} records/s (not used)", warm.total);
    }
    // Short runs vary: the median of three, each on a fresh topic.
    let mut perfs: Vec<PerfResult> = (0..if benching { 3 } else { 1 })
        .map(|_| {
            let topic = env.create_topic(&rt, "bench-perf", &[]);
            let p = producer_performance(&env, &topic, n, record_size, &[]);
            println!(
                "  ProducerPerformance                {:>9.0} records/s after the first 10 % ({:.0} over the whole run)",
                p.steady, p.total
            );
            p
        })
        .collect();
    perfs.sort_by(|a, b| a.steady.total_cmp(&b.steady));
    let perf = perfs.swap_remove(perfs.len() / 2);
    println!("  median: {}", perf.summary);
    assert!(perf.steady > 0.0);
    // A longer run: the Java producer keeps speeding up (JIT, fuller batches), so N records
    // understate what the broker takes; five times N comes closer to its ceiling.
    let perf_long = benching.then(|| {
        let topic = env.create_topic(&rt, "bench-perf-long", &[]);
        let p = producer_performance(&env, &topic, 5 * n, record_size, &[]);
        println!(
            "  ProducerPerformance, {} records  {:>9.0} records/s after the first 10 % ({:.0} over the whole run)",
            5 * n,
            p.steady,
            p.total
        );
        p.steady
    });
    // The Java client with transactions too (a commit every 100 ms, no consumer offsets): what
    // transactions cost the broker, as opposed to a client.
    let perf_txn = benching.then(|| {
        let topic = env.create_topic(&rt, "bench-perf-txn", &[]);
        let id = unique("bench-perf-txn");
        let t = producer_performance(
            &env,
            &topic,
            n,
            record_size,
            &["--transactional-id", &id, "--transaction-duration-ms", "100"],
        );
        println!(
            "  ProducerPerformance, transactions of 100 ms {:>9.0} records/s after the first 10 % (for reference)",
            t.steady
        );
        t.steady
    });

    // 2. The exactly-once runtime over a backlog.
    let input = env.create_topic(&rt, "bench-in", &[]);
    let produced = produce_log(&env, &input, &log);
    println!("\n2. exactly-once runtime, one `kubefacts process --processor probe` instance, backlog of {n}");
    println!(
        "  (pre-producing the backlog with rdkafka, idempotent, linger 20 ms, one partition after the other: {produced:.0} records/s)"
    );
    let main_run = measured_run(&env, &rt, &input, n, KEYS, Settings::default());
    print_run("default settings", &main_run, n, Some(perf.steady));
    let mut sweep = Vec::new();
    if benching {
        for settings in [
            Settings { max_batch_records: 1_000, commit_interval_ms: 100 },
            Settings { max_batch_records: 2_000, commit_interval_ms: 100 },
            Settings { max_batch_records: 10_000, commit_interval_ms: 1_000 },
        ] {
            let r = measured_run(&env, &rt, &input, n, KEYS, settings);
            print_run("other settings", &r, n, Some(perf.steady));
            sweep.push(r);
        }
    }
    let cl = changelog_size(&env, &main_run.app);
    println!(
        "  changelog of the default run: {} records for {} keys ({:.2} per input record), {:.1} B key+value per key{}",
        cl.records,
        cl.keys,
        cl.records as f64 / n as f64,
        cl.bytes_per_key,
        cl.disk_bytes_per_record
            .map_or(String::new(), |d| format!(", {d:.1} B per record in the broker's log files"))
    );
    assert_eq!(cl.keys, KEYS.min(n));

    // The transactional producer alone: what a transaction costs without consuming and
    // processing, as the runtime runs it and with two changes to librdkafka's use.
    let out_size = {
        let w = writer(&codec);
        w.encode(&KeyedCount { key: "key-123".into(), count: 123, input_partition: 1, input_offset: 66_666 })
            .unwrap()
            .len()
    };
    println!(
        "\n  the transactional producer alone (no consuming, no processing), in the runtime's order: produce,"
    );
    println!(
        "  send_offsets_to_transaction, commit_transaction; {out_size} B outputs, changelog records in proportion:"
    );
    let batches: &[usize] = if benching { &[2_000, 10_000] } else { &[2_000] };
    let mut bare: Vec<(usize, &str, f64)> = Vec::new();
    for &batch in batches {
        let changes = (batch as f64 * cl.records as f64 / n as f64).round() as usize;
        let txns = if benching { (n / 2 / batch).max(5) } else { 2 };
        for variant in TXN_VARIANTS {
            let t = transactional_producer(&env, &rt, variant, batch, changes, txns, out_size);
            println!(
                "  {batch:>6} + {changes:>4} per txn, {:<42} {:>7.0} records/s; per txn p50 ms: produce {:.1}, wait {:.1}, send_offsets {:.1}, commit {:.1}",
                variant.label, t.rate, t.produce_ms, t.wait_ms, t.offsets_ms, t.commit_ms
            );
            bare.push((batch, variant.label, t.rate));
        }
    }

    // 3. The in-memory driver.
    let (median, best) = driver_rate(&codec, &rt, &log, if benching { 5 } else { 1 });
    println!("\n3. in-memory driver (driver::run, probe, same {n} records, 1 thread)");
    println!("  median {median:>9.0} records/s, best {best:.0} records/s");

    // 4. Restore: a changelog with one entry per input record.
    let distinct = input_log(&codec, n, n);
    let distinct_input = env.create_topic(&rt, "bench-distinct-in", &[]);
    produce_log(&env, &distinct_input, &distinct);
    println!("\n4. restore: changelog from a run over {n} records with {n} distinct keys");
    let (mut r, first) = run_backlog(&env, &rt, &distinct_input, n, n, Settings::default());
    r.commits = parse_commits(&first.terminate());
    print_run("the run that wrote it", &r, n, Some(perf.steady));
    let cl = changelog_size(&env, &r.app);
    assert_eq!((cl.records, cl.keys), (n, n), "one changelog record per distinct key");
    println!(
        "  changelog: {} records, {:.1} B key+value per key{}",
        cl.records,
        cl.bytes_per_key,
        cl.disk_bytes_per_record
            .map_or(String::new(), |d| format!(", {d:.1} B per record in the broker's log files"))
    );
    let mut restorer =
        Instance::start(&env, &r.app, "restorer", &distinct_input, &r.output, Settings::default());
    let deadline = Instant::now() + Duration::from_secs(120);
    let (restored, ms) = loop {
        restorer.check_running();
        assert!(Instant::now() < deadline, "no restore in 120 s:\n{}", restorer.tail());
        match restorer.restores() {
            Some(r) => break r,
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let to_ready = restorer.started.elapsed().as_secs_f64();
    restorer.terminate();
    // Every key's count, and each task's stream time (the runtime's own store, written once
    // per transaction: until the broker compacts it, a restore reads each of those records).
    assert!(
        restored as usize >= n + PARTITIONS as usize,
        "a fresh instance restores every changelog record: {restored} restored, {n} counts and {PARTITIONS} stream times at least"
    );
    println!(
        "  fresh instance: restored {restored} records in {ms} ms = {:.0} records/s ({:.1} s from process start to restored)",
        restored as f64 * 1e3 / ms.max(1) as f64,
        to_ready
    );

    // Latency at half the sustained rate.
    let lat_rate = if benching { (main_run.rate * 0.5).round() } else { 500.0 };
    let lat = latency_run(&env, &rt, lat_rate, if benching { 12.0 } else { 3.0 });
    println!(
        "\nobservation-to-output latency, {:.0} records/s for the default settings (input timestamp → read by a",
        lat.rate
    );
    println!(
        "read_committed consumer with fetch.wait.max.ms 10), {} samples after 1 s warm-up:",
        lat.samples
    );
    println!("  p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms", lat.p50, lat.p99, lat.max);
    assert!(lat.samples > 0);

    let rate = |r: f64| if r.is_nan() { "      n/a".to_owned() } else { format!("{r:>9.0}") };
    let pct =
        |r: f64| if r.is_nan() { String::new() } else { format!("  {:>5.1} %", 100.0 * r / perf.steady) };
    println!("\nsummary (one run, same broker; records/s, % of ProducerPerformance)");
    println!(
        "  {:<74} {}",
        "ProducerPerformance, acks=all, after the first 10 % (the ceiling)",
        rate(perf.steady)
    );
    if let Some(l) = perf_long {
        println!(
            "  {:<74} {}{}",
            format!("ProducerPerformance, {} records, after the first 10 %", 5 * n),
            rate(l),
            pct(l)
        );
    }
    if let Some(t) = perf_txn {
        println!("  {:<74} {}{}", "ProducerPerformance, transactions of 100 ms", rate(t), pct(t));
    }
    for r in std::iter::once(&main_run).chain(&sweep) {
        let label = format!("exactly-once runtime, {}", r.settings);
        let long = perf_long.map_or(String::new(), |l| {
            format!("  ({:.1} % of the {}-record run)", 100.0 * r.rate / l, 5 * n)
        });
        println!("  {label:<74} {}{}{long}", rate(r.rate), pct(r.rate));
    }
    for (batch, label, r) in &bare {
        println!("  {:<74} {}{}", format!("txn producer alone, {batch}/txn, {label}"), rate(*r), pct(*r));
    }
    println!("  {:<74} {}", "in-memory driver, 1 thread", rate(median));
    println!("  {:<74} {}", "restore from the changelog", rate(restored as f64 * 1e3 / ms.max(1) as f64));
    println!("  {:<74} {:>9.1} B", "state per key (changelog key + value)", cl.bytes_per_key);
    println!(
        "  {:<74} {:>9.0} ms (p50 {:.0} ms)",
        format!("observation-to-output latency p99 at {:.0} records/s", lat.rate),
        lat.p99,
        lat.p50
    );
    println!(
        "\n(bench took {:.0} s; instance logs in {})",
        bench_started.elapsed().as_secs_f64(),
        env.logs.display()
    );
}
