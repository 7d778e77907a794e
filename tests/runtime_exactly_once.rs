//! The Kafka runtime on the real broker: every input counted exactly once through crashes,
//! restores and rebalances; bad records dead-lettered with their offsets; the same outputs
//! as the in-memory driver.

#[cfg(not(feature = "failpoints"))]
compile_error!(
    "these tests stop instances at failpoints: build them with `--features failpoints` (./scripts/test.sh does)"
);

mod support;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use kubefacts::{
    codec::{Codec, Framing, RecordWriter},
    runtime::{
        deadletter::DeadLetter,
        driver::{self, MemTopic, OutputTopics},
        partitioner::partition_for_key,
        probe::{KeyedCount, Probe, ProbeRekey, Tally},
    },
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::{Header, Headers, OwnedHeaders},
    producer::{BaseRecord, Producer, ThreadedProducer},
};
use support::{
    Infra, KillOnDrop as Instance, append_log, free_port, infra, log_tails, process_command, unique_name,
};

const PARTITIONS: i32 = 3;

/// A key or value as read: `None` when absent.
type Bytes = Option<Vec<u8>>;

fn writer(codec: &Codec, name: &str) -> RecordWriter {
    let known = codec.schemas().current(name).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

/// The input log: `n` records over `keys` keys; every `corrupt_every`-th value is garbage.
fn input_log(codec: &Codec, n: usize, keys: usize, corrupt_every: usize) -> MemTopic {
    let w = writer(codec, KeyedCount::FULL_NAME);
    let mut log = MemTopic::new("in", PARTITIONS);
    for i in 0..n {
        let key = format!("key-{}", i % keys);
        let value = if corrupt_every > 0 && i % corrupt_every == corrupt_every - 1 {
            format!("not avro {i}").into_bytes()
        } else {
            w.encode(&KeyedCount { key: key.clone(), count: 0, input_partition: 0, input_offset: 0 }).unwrap()
        };
        log.produce(Some(key.as_bytes()), Some(value), 1_795_946_400_000 + i as i64, false);
    }
    log
}

/// Writes the log to `topic` partition by partition, in order (offsets equal the indexes).
/// The `traceparent` header produced with the record at `offset` of `partition`: one trace
/// per record, so a forwarded header names the record it came from.
fn traceparent_of(partition: i32, offset: usize) -> String {
    format!("00-{:032x}-{:016x}-01", ((partition as u128) << 64) | (offset as u128 + 1), offset + 1)
}

/// Ends a finite input the way the watcher's heartbeats do in a quiet cluster: a record
/// carrying only time (the `kubefacts-heartbeat` header, no value) on every partition of
/// `topic`, later than any record of the logs. A task releases a record once every one of
/// its lanes has passed its time, so without it the records after the last lane's last
/// record would wait for more input.
fn produce_end(infra: &Infra, topic: &str, partitions: i32) {
    let producer: ThreadedProducer<_> =
        ClientConfig::new().set("bootstrap.servers", &infra.bootstrap).create().unwrap();
    for p in 0..partitions {
        let header = Header { key: kubefacts::runtime::HEARTBEAT_HEADER, value: Some("1") };
        let rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
            .partition(p)
            .key(kubefacts::runtime::HEARTBEAT_KEY)
            .timestamp(1_795_946_400_000 + 10_000_000)
            .headers(OwnedHeaders::new().insert(header));
        producer.send(rec).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// Produces `log` to `topic`, each record with its [`traceparent_of`] header.
fn produce_log(infra: &Infra, topic: &str, log: &MemTopic) {
    let producer: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", &infra.bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .unwrap();
    for (p, records) in log.partitions.iter().enumerate() {
        for (offset, r) in records.iter().enumerate() {
            let traceparent = traceparent_of(p as i32, offset);
            let header = Header { key: "traceparent", value: Some(&traceparent) };
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .partition(p as i32)
                .timestamp(r.timestamp_ms)
                .headers(OwnedHeaders::new().insert(header));
            if let Some(k) = &r.key {
                rec = rec.key(k);
            }
            if let Some(v) = &r.value {
                rec = rec.payload(v);
            }
            let mut rec = rec;
            loop {
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        rec = back;
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// Every committed record of a topic: (partition, key, value), in partition order.
fn read_committed(infra: &Infra, topic: &str) -> Vec<(i32, Bytes, Bytes)> {
    read_committed_traced(infra, topic).into_iter().map(|(p, k, v, _)| (p, k, v)).collect()
}

/// [`read_committed`] with each record's `traceparent` header.
fn read_committed_traced(infra: &Infra, topic: &str) -> Vec<(i32, Bytes, Bytes, Option<String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &infra.bootstrap)
        .set("group.id", unique_name("verify"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let partitions = md.topics()[0].partitions().len() as i32;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (mut out, mut eof) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while eof < partitions {
        assert!(Instant::now() < deadline, "reading {topic} took over 60 s");
        match consumer.poll(Duration::from_secs(1)) {
            Some(Ok(m)) => {
                let traceparent = m.headers().and_then(|h| {
                    let h = h.iter().find(|h| h.key == "traceparent")?;
                    Some(String::from_utf8_lossy(h.value?).into_owned())
                });
                out.push((
                    m.partition(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    traceparent,
                ))
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}

struct Pipeline {
    app: String,
    input: String,
    global: Option<String>,
    output: String,
    dead_letter: String,
    logs: PathBuf,
}

impl Pipeline {
    async fn new(infra: &Infra, name: &str) -> Self {
        let p = Pipeline {
            app: unique_name(name),
            input: infra.topic(&format!("{name}-in"), PARTITIONS).await,
            global: None,
            output: infra.topic(&format!("{name}-out"), PARTITIONS).await,
            dead_letter: infra.topic(&format!("{name}-dlq"), PARTITIONS).await,
            logs: std::env::temp_dir().join(unique_name(name)),
        };
        std::fs::create_dir_all(&p.logs).unwrap();
        p
    }

    /// Starts `kubefacts process` running the probe as its own OS process (so it can be
    /// SIGKILLed).
    fn start(&self, infra: &Infra, instance: &str) -> Instance {
        self.start_with(infra, instance, &[])
    }

    /// [`Pipeline::start`] with extra arguments.
    fn start_with(&self, infra: &Infra, instance: &str, extra: &[&str]) -> Instance {
        let globals: Vec<&str> = self.global.iter().flat_map(|g| ["--global", g.as_str()]).collect();
        let mut args = vec!["--processor", "probe", "--input", &self.input, "--output", &self.output];
        args.extend(globals);
        args.extend(extra);
        self.spawn(infra, instance, &args)
    }

    /// Runs `kubefacts process` with `args` plus this pipeline's application, dead-letter
    /// topic and broker, logging to `<logs>/<instance>.log`.
    fn spawn(&self, infra: &Infra, instance: &str, args: &[&str]) -> Instance {
        process_command(instance, &infra.bootstrap)
            .args(["--partitions", "3"])
            .args(args)
            .args(["--dead-letter", &self.dead_letter])
            .args(["--application-id", &self.app])
            .args(["--session-timeout-ms", "6000"])
            // No span export: the runtime forwards input trace headers as they are.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stderr(append_log(&self.logs.join(format!("{instance}.log"))))
            .spawn()
            .map(Instance)
            .unwrap()
    }

    /// Waits until the output holds `n` committed records (or `secs` pass, or every
    /// instance in `running` has exited).
    fn wait_for_outputs(
        &self,
        infra: &Infra,
        n: usize,
        secs: u64,
        running: &mut [&mut Instance],
    ) -> Vec<KeyedCount> {
        let codec = Codec::new(None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if !running.is_empty() && running.iter_mut().all(|c| c.try_wait().unwrap().is_some()) {
                panic!("every instance exited:\n{}", self.logs());
            }
            let records = read_committed(infra, &self.output);
            if records.len() >= n || Instant::now() > deadline {
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                return records
                    .iter()
                    .map(|(_, _, v)| {
                        rt.block_on(codec.decode_as::<KeyedCount>(v.as_deref().unwrap())).unwrap()
                    })
                    .collect();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn logs(&self) -> String {
        log_tails(&self.logs, 15)
    }
}

/// Checks exactly-once: per key the counts are 1..=n with nothing lost or repeated, and
/// each output answers a distinct input offset.
fn assert_exactly_once(outputs: &[KeyedCount], log: &MemTopic, context: &str) {
    let total_expected: i64 = expected_counts(log).values().sum();
    assert_eq!(outputs.len() as i64, total_expected, "{context}: one output per good input");
    let unsent = assert_counted_from(0, outputs, log, context);
    assert!(unsent.is_empty(), "{context}: outputs for keys never sent: {unsent:?}");
}

/// Checks that per key of `log` the counts read `before + 1 ..= before + n`, each once;
/// returns the keys counted that `log` never sent.
fn assert_counted_from(before: i64, outputs: &[KeyedCount], log: &MemTopic, context: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for o in outputs {
        seen.entry(o.key.clone()).or_default().push(o.count);
    }
    for (key, n) in expected_counts(log) {
        let mut counts = seen.remove(&key).unwrap_or_default();
        counts.sort_unstable();
        let (first, last) = (before + 1, before + n);
        assert_eq!(
            counts,
            (first..=last).collect::<Vec<_>>(),
            "{context}: {key} must count {first}..={last} exactly once"
        );
    }
    seen.into_keys().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_are_dead_lettered_with_their_offsets_and_good_ones_counted_once() {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 3_000, 50, 41);
    let p = Pipeline::new(&infra, "dlq").await;
    produce_log(&infra, &p.input, &log);
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut child = p.start_with(&infra, "a", &["--metrics-addr", &metrics_addr]);
    let good = log
        .partitions
        .iter()
        .flatten()
        .filter(|r| !r.value.as_ref().unwrap().starts_with(b"not avro"))
        .count();
    let outputs = tokio::task::block_in_place(|| p.wait_for_outputs(&infra, good, 90, &mut [&mut child]));
    assert_exactly_once(&outputs, &log, &p.logs());

    let dead = tokio::task::block_in_place(|| read_committed_traced(&infra, &p.dead_letter));
    assert_eq!(dead.len(), log.len() - good, "{}", p.logs());
    for (_, key, value, traceparent) in dead {
        let dl: DeadLetter = codec.decode_as(&value.unwrap()).await.unwrap();
        let original = &log.partitions[dl.source_partition as usize][dl.source_offset as usize];
        assert_eq!((dl.reason.as_str(), dl.source_topic.as_str()), ("unknown_framing", p.input.as_str()));
        assert_eq!(dl.source_value, original.value, "the dead letter carries the original bytes");
        assert_eq!(key, original.key, "keyed like the original");
        // Nothing is exported here: the input's trace context is forwarded unchanged.
        let input_context = traceparent_of(dl.source_partition, dl.source_offset as usize);
        assert_eq!(traceparent, Some(input_context), "the dead letter continues its record's trace");
    }

    // The endpoint counts them by reason, and shows the one instance's tasks: the lag of
    // each input partition (after its first refresh, every 5 s), the delay of its stream
    // time and its store's entries.
    let scrape = || async {
        kubefacts::http::get(format!("http://{metrics_addr}/metrics")).await.ok()?.text().await.ok()
    };
    let value = |body: &str, prefix: &str| -> Option<f64> {
        body.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let lag = |partition: i32| {
        format!(
            "kubefacts_consumer_lag_records{{stage=\"probe\",topic=\"{}\",partition=\"{partition}\"}} ",
            p.input
        )
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let body = scrape().await.unwrap_or_default();
        if (0..3).all(|q| value(&body, &lag(q)) == Some(0.0)) || Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let dead_letters = "kubefacts_dead_letters_total{stage=\"probe\",reason=\"unknown_framing\"} ";
    assert_eq!(value(&body, dead_letters), Some((log.len() - good) as f64), "{body}");
    for q in 0..3 {
        assert_eq!(value(&body, &lag(q)), Some(0.0), "everything consumed: {body}");
    }
    let delay = value(&body, "kubefacts_stream_time_delay_seconds{stage=\"probe\"} ");
    assert!(delay.is_some(), "every task has a stream time: {body}");
    let entries = value(&body, "kubefacts_state_entries{stage=\"probe\",store=\"");
    assert!(entries.is_some_and(|n| n > 0.0), "the probe's store holds its counts: {body}");
    // Every metric docs/METRICS.md documents for a processor is served by this running one,
    // and the ones this run must have moved did.
    let docs = std::fs::read_to_string(support::repo_path("docs/METRICS.md")).unwrap();
    let section = docs.split("## Processor").nth(1).and_then(|s| s.split("\n## ").next()).unwrap();
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .filter(|name| name.starts_with("kubefacts_"))
        .collect();
    assert!(documented.len() >= 10, "{documented:?}");
    for name in &documented {
        // OpenMetrics names a counter's family without its `_total`.
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(body.contains(&format!("# TYPE {family} ")), "{name} is documented but not served:\n{body}");
    }
    let sum = |name: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    for moved in ["kubefacts_records_in_total", "kubefacts_records_out_total", "kubefacts_transactions_total"]
    {
        assert!(sum(moved) > 0.0, "{moved} did not move:\n{body}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_runtime_and_in_memory_driver_give_the_same_outputs() {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 2_000, 30, 97);
    let p = Pipeline::new(&infra, "determinism").await;
    produce_log(&infra, &p.input, &log);
    let mut child = p.start(&infra, "a");

    let outputs = OutputTopics {
        writers: vec![writer(&codec, KeyedCount::FULL_NAME)],
        topics: vec![MemTopic::new("out", PARTITIONS)],
        key_writers: Vec::new(),
        forward: Vec::new(),
    };
    let expected = driver::run("probe", &codec, &[&log], outputs, |_| Probe::new()).await.unwrap();
    let n = expected.outputs[0].len();
    tokio::task::block_in_place(|| p.wait_for_outputs(&infra, n, 90, &mut [&mut child]));
    let actual = tokio::task::block_in_place(|| read_committed(&infra, &p.output));
    child.kill().unwrap();
    child.wait().unwrap();

    // Per partition: the same records, byte for byte, in the same order (one task writes
    // each key, and the probe's key decides the partition).
    for partition in 0..PARTITIONS {
        let ours: Vec<_> = actual
            .iter()
            .filter(|(q, _, _)| *q == partition)
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .collect();
        let theirs: Vec<_> = expected.outputs[0].partitions[partition as usize]
            .iter()
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect();
        assert_eq!(ours.len(), theirs.len(), "partition {partition}\n{}", p.logs());
        let by_key = |v: &[(Bytes, Bytes)]| {
            let mut m: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
            for (k, val) in v {
                m.entry(k.clone().unwrap()).or_default().push(val.clone().unwrap());
            }
            m
        };
        assert_eq!(by_key(&ours), by_key(&theirs), "partition {partition}: per-key sequences differ");
    }
    assert_eq!(partition_for_key(b"key-1", PARTITIONS), partition_for_key(b"key-1", PARTITIONS));
}

/// Rebuilds the probe's counts from its changelog (latest committed value per key).
fn changelog_counts(infra: &Infra, p: &Pipeline) -> BTreeMap<String, i64> {
    changelog_tallies(infra, p).into_iter().map(|(k, (_, t))| (k, t.count)).collect()
}

/// The latest committed value per key of the probe's changelog: its format version and the
/// tally (format 1, the bare count, read as a tally with an unknown last offset).
fn changelog_tallies(infra: &Infra, p: &Pipeline) -> BTreeMap<String, (u8, Tally)> {
    let topic = format!("{}-probe-counts-changelog", p.app);
    let mut state = BTreeMap::new();
    for (_, key, value) in read_committed(infra, &topic) {
        let key: String = postcard::from_bytes(&key.unwrap()).unwrap();
        match value {
            Some(v) => {
                let tally = match v[0] {
                    1 => Tally { count: postcard::from_bytes(&v[1..]).unwrap(), last_offset: -1 },
                    Tally::VERSION => postcard::from_bytes(&v[1..]).unwrap(),
                    other => panic!("{topic}: a value of format {other}"),
                };
                state.insert(key, (v[0], tally))
            }
            None => state.remove(&key),
        };
    }
    state
}

/// An upgrade that changed a state struct. The previous release kept the probe's counts as
/// bare numbers (format 1); this one keeps a tally (format 2). Over the changelog the
/// previous release left, the upgraded instance continues every count and then writes the
/// new format. Without the store's upgrade path it cannot restore at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_of_the_previous_format_is_restored_after_an_upgrade() {
    const BEFORE: i64 = 100;
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 3_000, 50, 0);
    let p = Pipeline::new(&infra, "upgrade").await;
    // What the previous release committed: 100 counted for every key, on the changelog
    // partition of the key's task.
    let changelog = format!("{}-probe-counts-changelog", p.app);
    create_compacted(&infra, &changelog).await;
    let previous: Vec<(String, Vec<u8>, Vec<u8>)> = expected_counts(&log)
        .into_keys()
        .map(|k| {
            let mut value = vec![1u8];
            value.extend(postcard::to_allocvec(&BEFORE).unwrap());
            (k.clone(), postcard::to_allocvec(&k).unwrap(), value)
        })
        .collect();
    let producer: ThreadedProducer<_> =
        ClientConfig::new().set("bootstrap.servers", &infra.bootstrap).create().unwrap();
    for (k, key, value) in &previous {
        let partition = partition_for_key(k.as_bytes(), PARTITIONS);
        let rec: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(&changelog).partition(partition).key(key.as_slice()).payload(value.as_slice());
        producer.send(rec).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(60)).unwrap();

    produce_log(&infra, &p.input, &log);
    let mut a = p.start(&infra, "a");
    let outputs = tokio::task::block_in_place(|| p.wait_for_outputs(&infra, log.len(), 120, &mut [&mut a]));
    terminate(&mut a);
    // Counts continue from the previous release's.
    assert_counted_from(BEFORE, &outputs, &log, &p.logs());
    let expected = expected_counts(&log);
    // The upgraded instance rewrote every key it counted in the new format, with what only
    // that format holds: the offset of the key's last record.
    let mut last_offsets: BTreeMap<&str, i64> = BTreeMap::new();
    for o in &outputs {
        let last = last_offsets.entry(&o.key).or_insert(o.input_offset);
        *last = (*last).max(o.input_offset);
    }
    for (key, (version, tally)) in changelog_tallies(&infra, &p) {
        assert_eq!(version, Tally::VERSION, "{key}: rewritten in the new format");
        assert_eq!(
            tally,
            Tally { count: BEFORE + expected[&key], last_offset: last_offsets[key.as_str()] },
            "{key}"
        );
    }
}

/// Creates a compacted topic, as `--create-topics` creates changelogs.
async fn create_compacted(infra: &Infra, topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<_> =
        ClientConfig::new().set("bootstrap.servers", &infra.bootstrap).create().unwrap();
    let new = NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    for r in admin.create_topics(&[new], &AdminOptions::new()).await.unwrap() {
        r.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
    }
}

fn expected_counts(log: &MemTopic) -> BTreeMap<String, i64> {
    let mut expected = BTreeMap::new();
    for r in log.partitions.iter().flatten().filter(|r| !r.value.as_ref().unwrap().starts_with(b"not avro")) {
        *expected.entry(String::from_utf8(r.key.clone().unwrap()).unwrap()).or_default() += 1;
    }
    expected
}

/// A small deterministic generator, seeded from the clock and printed, so a failing run
/// can be repeated with `KUBEFACTS_TEST_SEED`.
struct Rng(u64);
impl Rng {
    fn from_env_or_clock() -> Self {
        let seed =
            std::env::var("KUBEFACTS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
            });
        println!("crash schedule seed: KUBEFACTS_TEST_SEED={seed}");
        Rng(seed | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_instances_lose_and_duplicate_nothing() {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 200_000, 1_000, 0);
    let p = Pipeline::new(&infra, "crash").await;
    produce_log(&infra, &p.input, &log);
    let mut rng = Rng::from_env_or_clock();
    let names = ["a", "b"];
    let mut instances: Vec<Instance> = names.iter().map(|n| p.start(&infra, n)).collect();

    let (mut kills, started) = (0, Instant::now());
    while kills < 3 || read_committed(&infra, &p.output).len() < 60_000 && kills < 6 {
        assert!(started.elapsed() < Duration::from_secs(300), "crash loop took over 5 min\n{}", p.logs());
        std::thread::sleep(Duration::from_millis(500 + rng.below(2_500)));
        let victim = rng.below(2) as usize;
        instances[victim].kill().unwrap(); // SIGKILL
        instances[victim].wait().unwrap();
        kills += 1;
        println!("killed {} after {:?}", names[victim], started.elapsed());
        std::thread::sleep(Duration::from_millis(rng.below(1_000)));
        instances[victim] = p.start(&infra, names[victim]);
    }
    let mut running: Vec<&mut Instance> = instances.iter_mut().collect();
    let outputs = tokio::task::block_in_place(|| p.wait_for_outputs(&infra, 200_000, 240, &mut running));
    assert_exactly_once(&outputs, &log, &format!("after {kills} SIGKILLs\n{}", p.logs()));
    assert_eq!(changelog_counts(&infra, &p), expected_counts(&log), "final state equals the expected state");
    for c in &mut instances {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

fn terminate(child: &mut Instance) {
    // SIGTERM: finish the transaction in flight and leave the group.
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "instance did not stop within 30 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Splits a log into `n` slices, each holding the next part of every partition.
fn slices(log: &MemTopic, n: usize) -> Vec<MemTopic> {
    (0..n)
        .map(|i| {
            let mut t = MemTopic::new("in", PARTITIONS);
            for (q, records) in log.partitions.iter().enumerate() {
                let len = records.len();
                t.partitions[q] = records[len * i / n..len * (i + 1) / n].to_vec();
            }
            t
        })
        .collect()
}

/// Splits a log into two halves, each partition's first records then the rest.
fn halves(log: &MemTopic) -> (MemTopic, MemTopic) {
    let (mut a, mut b) = (MemTopic::new("in", PARTITIONS), MemTopic::new("in", PARTITIONS));
    for (p, records) in log.partitions.iter().enumerate() {
        let mid = records.len() / 2;
        a.partitions[p] = records[..mid].to_vec();
        b.partitions[p] = records[mid..].to_vec();
    }
    (a, b)
}

/// A pipeline over `n` records of `keys` keys whose first half instance a counted before
/// it was stopped; returns it, the whole log and its second half (not produced yet).
async fn first_half_counted(
    infra: &Infra,
    name: &str,
    n: usize,
    keys: usize,
) -> (Pipeline, MemTopic, MemTopic) {
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, n, keys, 0);
    let (first, second) = halves(&log);
    let p = Pipeline::new(infra, name).await;
    produce_log(infra, &p.input, &first);
    let mut a = p.start(infra, "a");
    tokio::task::block_in_place(|| p.wait_for_outputs(infra, first.len(), 120, &mut [&mut a]));
    terminate(&mut a);
    (p, log, second)
}

/// Changelog records an instance's log says it restored, all restores.
fn restored_records(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("tasks assigned and restored"))
        .filter_map(|l| l.split("restored=").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_rebuilds_state_from_the_changelog_and_continues() {
    let infra = infra();
    let (p, log, second) = first_half_counted(&infra, "restore", 40_000, 500).await;

    // Nothing of instance a is left (its state lived in its memory); b starts from the
    // changelog alone, on a different host identity.
    produce_log(&infra, &p.input, &second);
    let mut b = p.start(&infra, "b");
    let outputs = tokio::task::block_in_place(|| p.wait_for_outputs(&infra, log.len(), 120, &mut [&mut b]));
    assert_exactly_once(&outputs, &log, &p.logs());
    assert_eq!(changelog_counts(&infra, &p), expected_counts(&log));
    terminate(&mut b);
    let b_log = std::fs::read_to_string(p.logs.join("b.log")).unwrap();
    // b's state came from the changelog: it restored one record per key a counted.
    let restored = restored_records(&b_log);
    assert!(
        restored >= 500,
        "b restored {restored} changelog records, expected at least one per key:\n{b_log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_joining_and_leaving_while_input_flows_change_nothing() {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 60_000, 700, 0);
    let p = Pipeline::new(&infra, "rebalance").await;
    // Input arrives in six slices while instances come and go.
    let slices = slices(&log, 6);
    let mut a = p.start(&infra, "a");
    produce_log(&infra, &p.input, &slices[0]);
    produce_log(&infra, &p.input, &slices[1]);
    let mut b = p.start(&infra, "b"); // joins: partitions move to it
    produce_log(&infra, &p.input, &slices[2]);
    std::thread::sleep(Duration::from_secs(2));
    produce_log(&infra, &p.input, &slices[3]);
    terminate(&mut a); // leaves: its partitions move back to b
    produce_log(&infra, &p.input, &slices[4]);
    let mut c = p.start(&infra, "c"); // joins again
    produce_log(&infra, &p.input, &slices[5]);
    let outputs =
        tokio::task::block_in_place(|| p.wait_for_outputs(&infra, log.len(), 180, &mut [&mut b, &mut c]));
    assert_exactly_once(&outputs, &log, &p.logs());
    assert_eq!(changelog_counts(&infra, &p), expected_counts(&log));
    terminate(&mut b);
    terminate(&mut c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_inputs_reach_every_task_exactly_once_through_crashes() {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 30_000, 300, 0);
    // A global input with 2 partitions (not co-partitioned): every task counts every record.
    let mut global = input_log(&codec, 3_000, 20, 0);
    global.partitions.truncate(2);
    let mut p = Pipeline::new(&infra, "global").await;
    let global_topic = infra.topic("global-leases", 2).await;
    p.global = Some(global_topic.clone());
    produce_log(&infra, &p.input, &log);
    produce_log(&infra, &global_topic, &global);
    produce_end(&infra, &p.input, PARTITIONS);
    produce_end(&infra, &global_topic, 2);
    let mut rng = Rng::from_env_or_clock();
    let mut instances = [p.start(&infra, "a"), p.start(&infra, "b")];
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(800 + rng.below(2_000)));
        let victim = rng.below(2) as usize;
        instances[victim].kill().unwrap();
        instances[victim].wait().unwrap();
        instances[victim] = p.start(&infra, ["a", "b"][victim]);
    }
    let global_records = global.len();
    let expected_outputs = log.len() + PARTITIONS as usize * global_records;
    let [x, y] = &mut instances;
    let outputs =
        tokio::task::block_in_place(|| p.wait_for_outputs(&infra, expected_outputs, 240, &mut [x, y]));
    let mut expected = expected_counts(&log);
    for (key, n) in expected_counts(&global) {
        for task in 0..PARTITIONS {
            expected.insert(format!("global/{task}/{key}"), n);
        }
    }
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for o in &outputs {
        seen.entry(o.key.clone()).or_default().push(o.count);
    }
    assert_eq!(outputs.len(), expected_outputs, "{}", p.logs());
    for (key, n) in &expected {
        let mut counts = seen.remove(key).unwrap_or_default();
        counts.sort_unstable();
        assert_eq!(counts, (1..=*n).collect::<Vec<_>>(), "{key}: exactly once per task\n{}", p.logs());
    }
    for c in &mut instances {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

/// Whether a process is stopped (SIGSTOP): state `T` in `/proc/<pid>/stat`.
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

/// Instance a, alone, stops itself (SIGSTOP, like a long GC pause or a frozen VM) inside
/// its third transaction, at `at`; b joins; a stays stopped well past its session timeout,
/// so the group gives a's partitions to b, then a resumes as a zombie. Whatever a's transaction in flight does
/// then — commit late (`before-commit`) or fail its offsets (`before-offsets`) — no output
/// may be lost or duplicated, and a must rejoin and keep running.
async fn a_paused_instance_loses_its_partitions_without_harm(at: &str) -> (Pipeline, String) {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 30_000, 300, 0);
    let p = Pipeline::new(&infra, &format!("lost-{at}")).await;
    produce_log(&infra, &p.input, &log);
    // Small transactions, so a reaches its third one while it owns partitions; a long
    // transaction timeout, so the broker does not abort a's transaction while it is paused.
    let small = ["--max-batch-records", "500", "--transaction-timeout-ms", "60000"];
    let failpoint = format!("{at}:3");
    let mut a = p.start_with(&infra, "a", &[&small[..], &["--failpoint", &failpoint]].concat());
    let pid = a.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !is_stopped(pid) {
        assert!(Instant::now() < deadline, "a never reached its failpoint\n{}", p.logs());
        assert!(a.try_wait().unwrap().is_none(), "a exited\n{}", p.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    // b joins while a is paused; a's session (6 s) expires and the group gives b every
    // partition, a's among them, while a still holds its transaction open.
    let mut b = p.start_with(&infra, "b", &small);
    if at == "before-offsets" {
        // a has sent no offsets yet, so nothing holds b back: resume a only once b owns
        // every partition, i.e. the group has provably moved past a's generation (a fixed
        // sleep let a resume before that on a loaded CI machine, and its offsets were then
        // legitimately accepted).
        let b_owns_all = || {
            std::fs::read_to_string(p.logs.join("b.log"))
                .unwrap_or_default()
                .contains("tasks assigned and restored partitions=[0, 1, 2]")
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while !b_owns_all() {
            assert!(Instant::now() < deadline, "b never took over a's partitions\n{}", p.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        // b waits for a's pending transaction (its offsets are in it), so b cannot own
        // the partitions before a resumes; a's session (6 s) has long expired by then.
        std::thread::sleep(Duration::from_secs(14));
    }
    assert!(Command::new("kill").args(["-CONT", &pid.to_string()]).status().unwrap().success());
    let outputs =
        tokio::task::block_in_place(|| p.wait_for_outputs(&infra, log.len(), 180, &mut [&mut a, &mut b]));
    assert_exactly_once(&outputs, &log, &format!("failpoint {failpoint}\n{}", p.logs()));
    assert_eq!(changelog_counts(&infra, &p), expected_counts(&log), "final state equals the expected state");
    assert!(a.try_wait().unwrap().is_none(), "the zombie must recover, not exit\n{}", p.logs());
    terminate(&mut a);
    terminate(&mut b);
    let b_log = std::fs::read_to_string(p.logs.join("b.log")).unwrap();
    (p, b_log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_that_commits_late_is_waited_for_not_raced() {
    let (p, b_log) = a_paused_instance_loses_its_partitions_without_harm("before-commit").await;
    // The guard is the exactly-once check above: without the wait for stable offsets it
    // fails with repeated counts. Whether b had to wait depends on timing (in one run on a
    // loaded machine b took over without waiting and the counts were still exact; not
    // understood yet, see docs/RUNTIME.md), so it is reported, not asserted.
    let waited = b_log.contains("waited for a pending transaction of the previous owner");
    println!("b waited for a's pending transaction: {waited}\n{}", p.logs.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_whose_offsets_are_fenced_aborts_and_rejoins() {
    let (p, _) = a_paused_instance_loses_its_partitions_without_harm("before-offsets").await;
    let a_log = std::fs::read_to_string(p.logs.join("a.log")).unwrap();
    assert!(a_log.contains("aborting the transaction"), "a's stale offsets were not refused\n{a_log}");
}

/// The log with every key replaced by its [`ProbeRekey`] bucket: what the second stage of a
/// re-key → count pipeline counts.
fn bucketed(log: &MemTopic) -> MemTopic {
    let mut out = MemTopic::new("bucketed", PARTITIONS);
    for (q, records) in log.partitions.iter().enumerate() {
        out.partitions[q] = records
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.key = r.key.as_deref().map(|k| ProbeRekey::bucket(k).into_bytes());
                r
            })
            .collect();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stages_from_a_pipeline_file_re_key_and_count_exactly_once_through_crashes() {
    let infra = infra();
    let codec = Codec::new(None).unwrap();
    let log = input_log(&codec, 40_000, 400, 0);
    let p = Pipeline::new(&infra, "stages").await;
    let repartition = format!("{}-rekey-repartition", p.app);
    let config = p.logs.join("pipeline.toml");
    std::fs::write(
        &config,
        format!(
            r#"[process]
session_timeout_ms = 6000

[[process.stages]]
name = "rekey"
processor = "probe-rekey"
inputs = ["{input}"]
outputs = ["{repartition}"]

[[process.stages]]
name = "count"
processor = "probe"
inputs = ["{repartition}"]
outputs = ["{output}"]
"#,
            input = p.input,
            output = p.output,
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let port = free_port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let mut rng = Rng::from_env_or_clock();
    let start = |name: &str, extra: &[&str]| {
        let mut args = vec!["--config", config];
        args.extend(extra);
        p.spawn(&infra, name, &args)
    };
    let assigned = |name: &str| {
        std::fs::read_to_string(p.logs.join(format!("{name}.log")))
            .unwrap_or_default()
            .matches("tasks assigned")
            .count()
    };
    // a starts alone and owns both stages' partitions before any input arrives, so it
    // processes part of it whatever b does.
    let a = start("a", &["--metrics-addr", &metrics_addr]);
    let wait_until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what} within 60 s\n{}", p.logs());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_until("a's two stages assigned", &|| assigned("a") >= 2);
    // Input arrives in four slices. For three of them b joins, takes its share, stops
    // itself with a transaction open (a failpoint: its outputs and offsets sent, the
    // commit not) and is SIGKILLed there: the restarted b aborts that transaction, which
    // the next stage and the final reader must never see.
    let slices = slices(&log, 4);
    let mut b: Option<Instance> = None;
    for slice in &slices[..3] {
        let before = assigned("b");
        let failpoint = format!("before-commit:{}", 2 + rng.below(3));
        // Small transactions, so b's share of a slice takes several.
        let child = b.insert(start("b", &["--failpoint", &failpoint, "--max-batch-records", "500"]));
        let pid = child.id();
        wait_until("b assigned", &|| assigned("b") > before || is_stopped(pid));
        produce_log(&infra, &p.input, slice);
        wait_until("b at its failpoint", &|| is_stopped(pid));
        child.kill().unwrap(); // SIGKILL, the transaction still open
        child.wait().unwrap();
    }
    produce_log(&infra, &p.input, &slices[3]);
    produce_end(&infra, &p.input, PARTITIONS);
    let mut instances = [a, start("b", &[])];
    let [x, y] = &mut instances;
    let outputs = tokio::task::block_in_place(|| p.wait_for_outputs(&infra, log.len(), 240, &mut [x, y]));
    assert_exactly_once(&outputs, &bucketed(&log), &format!("two stages, 3 SIGKILLs\n{}", p.logs()));
    let buckets: Vec<&str> = outputs.iter().map(|o| o.key.as_str()).collect();
    assert!(buckets.iter().all(|k| k.starts_with("bucket-")), "the count stage read re-keyed records");

    // Both stages report on the one endpoint, each under its own label. What each stage of
    // this instance moved depends on how the rebalances split the partitions with b (CI saw
    // a's count stage at 0 once, all of its work done by b): the two together moved records.
    let body =
        kubefacts::http::get(format!("http://{metrics_addr}/metrics")).await.unwrap().text().await.unwrap();
    let mut moved = 0.0;
    for (stage, input, output) in [("rekey", &p.input, &repartition), ("count", &repartition, &p.output)] {
        for (family, topic) in
            [("kubefacts_records_in_total", input), ("kubefacts_records_out_total", output)]
        {
            let series = format!("{family}{{stage=\"{stage}\",topic=\"{topic}\"}} ");
            let line = body
                .lines()
                .find(|l| l.starts_with(&series))
                .unwrap_or_else(|| panic!("no {series}for stage {stage}:\n{body}"));
            let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            moved += value;
        }
        // Lag is per assigned partition of the stage's input, never per stage alone.
        let lag = format!("kubefacts_consumer_lag_records{{stage=\"{stage}\",");
        for line in body.lines().filter(|l| l.starts_with(&lag)) {
            assert!(line.contains(&format!(",topic=\"{input}\",partition=\"")), "{line}");
        }
    }
    assert!(moved > 0.0, "neither stage of instance a moved a record:\n{body}");
    // The count stage's store was seen (its series stays, at 0 while a holds no task).
    assert!(body.contains("kubefacts_state_entries{stage=\"count\",store=\""), "{body}");
    for c in &mut instances {
        terminate(c);
    }
}

/// An instance SIGKILLed in the middle of a restore leaves nothing half-done: a restore
/// only reads, so the next owner restores the whole changelog again and continues every
/// count. Instance b stops itself (a failpoint) after 5 000 of the 20 000+ changelog
/// records instance a left, and is killed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_during_a_restore_leaves_the_next_one_whole() {
    const KEYS: usize = 20_000;
    let infra = infra();
    let (p, log, second) = first_half_counted(&infra, "killrestore", 50_000, KEYS).await;
    produce_log(&infra, &p.input, &second);
    let mut b = p.start_with(&infra, "b", &["--failpoint", "during-restore:5000"]);
    let pid = b.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !is_stopped(pid) {
        assert!(b.try_wait().unwrap().is_none(), "b exited before its failpoint\n{}", p.logs());
        assert!(Instant::now() < deadline, "b never reached its failpoint\n{}", p.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill().unwrap();
    b.wait().unwrap();
    let b_log = std::fs::read_to_string(p.logs.join("b.log")).unwrap();
    assert!(b_log.contains("DuringRestore"), "b stopped in its restore:\n{b_log}");
    assert!(!b_log.contains("tasks assigned and restored"), "b finished no restore:\n{b_log}");

    let mut c = p.start(&infra, "c");
    let outputs = tokio::task::block_in_place(|| p.wait_for_outputs(&infra, log.len(), 120, &mut [&mut c]));
    terminate(&mut c);
    assert_exactly_once(&outputs, &log, &p.logs());
    assert_eq!(changelog_counts(&infra, &p), expected_counts(&log));
    let c_log = std::fs::read_to_string(p.logs.join("c.log")).unwrap();
    let restored = restored_records(&c_log);
    assert!(restored >= KEYS as u64, "c restored {restored} records, at least one per key:\n{c_log}");
}
