//! Issue 21: one bad record changes nothing but its own outcome.
//!
//! Bad records of every kind the runtime refuses — the bad-bytes corpus (arbitrary bytes,
//! corrupted valid records), a Job without a key or with another Job's key, a Pod event
//! without its Pod, garbage carrying the heartbeat header, a forwarded heartbeat with the
//! wrong key, a tombstone, a snapshot marker on the sessions topic, a valid Job and a valid
//! heartbeat stamped 50 minutes ahead, a 1 040 000-byte value, and (issue 46) valid Jobs
//! stamped in 1990 (with and without `observed_at` to match), heartbeats of another
//! instance and another cluster, a Pod keyed by a Job not its own, and valid Jobs whose
//! state no changelog record takes (at the producer's limit, and 2.5 MB compressed past the
//! topic's) — are produced to the
//! input topics ahead of a good trace, between its records and after it, stamped in the
//! past, the present and the future. Then `kubefacts process` runs every stage (one
//! instance SIGKILLed inside a transaction once). Every bad record must be in the
//! dead-letter topic exactly once, with its reason, the large one cut to fit; and every
//! output must equal `kubefacts replay` of the good trace alone, stage by stage.

#[cfg(not(feature = "failpoints"))]
compile_error!(
    "these tests stop instances at failpoints: build them with `--features failpoints` (./scripts/test.sh does)"
);

mod support;

use std::{
    collections::BTreeMap,
    io::Write,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::{
    codec::{Codec, RecordWriter},
    observe::{
        InputTopic, Observation, ObservationEvent, ObservationRecord, Observer, SessionObservation, Source,
    },
    runtime::{HEARTBEAT_HEADER, deadletter::DeadLetter},
    simulate::{self, START_MS},
};
use rdkafka::{
    ClientConfig,
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};
use support::{
    Scratch, all_committed, default_stages, infra, is_stopped, kubefacts_ok, outputs::compare_outputs,
    read_records, simulate_small, wait_all_committed,
};

const PARTITIONS: i32 = 3;
const HOURS: u32 = 2;
const SEED: u64 = 21;
const MIN: i64 = 60_000;
/// 1990-01-01T00:00:00Z, epoch ms.
const IN_1990: i64 = 631_152_000_000;

/// One bad record to produce, and the reason its dead letter must carry (`None`: any
/// codec reason — the corpus).
#[derive(Debug, Clone)]
struct Bad {
    topic: InputTopic,
    partition: i32,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp_ms: i64,
    heartbeat_header: bool,
    reason: Option<&'static str>,
    what: String,
}

/// The instance `publish` names itself in the good trace's heartbeats and markers.
const PUBLISHER: &str = "test";

/// Valid observations of the good trace to break: a Job event, a Pod event, a heartbeat
/// (as bytes, and as records to stamp again).
struct Samples {
    job: (String, Vec<u8>),
    pod: Vec<u8>,
    records: [ObservationRecord; 3],
    cluster: String,
    writers: BTreeMap<InputTopic, RecordWriter>,
}

impl Samples {
    /// The sample Job (0), Pod (1) or heartbeat (2), observed at `at` by `instance` of
    /// `cluster` (default: the good trace's publisher), encoded.
    fn stamped(&self, which: usize, at: i64, cluster: Option<&str>, instance: Option<&str>) -> Vec<u8> {
        let mut r = self.records[which].clone();
        let source = match &mut r {
            ObservationRecord::Job(o) => {
                o.observed_at = at;
                &mut o.source
            }
            ObservationRecord::Pod(o) => {
                o.observed_at = at;
                &mut o.source
            }
            other => panic!("not a sample: {other:?}"),
        };
        source.cluster = cluster.unwrap_or(&self.cluster).to_owned();
        source.instance = instance.unwrap_or(PUBLISHER).to_owned();
        r.encode(&self.writers[&r.topic()]).unwrap()
    }
}

fn samples(
    codec: &Codec,
    rt: &tokio::runtime::Runtime,
    topic: &dyn Fn(InputTopic) -> String,
    cluster: &str,
) -> Samples {
    let profile = simulate::profile("small").unwrap();
    let source = Source { cluster: cluster.into(), instance: PUBLISHER.into(), epoch: 1 };
    let mut observer = Observer::new(source, Default::default());
    let mut writers = BTreeMap::new();
    for t in InputTopic::ALL {
        writers.insert(t, rt.block_on(codec.value_writer(&topic(t), t.full_name())).unwrap());
    }
    let (mut job, mut pod, mut beat) = (None, None, None);
    let mut records = Vec::new();
    for entry in simulate::simulate(&profile, 1, SEED) {
        for obs in observer.admit(entry).into_iter().flatten().flatten() {
            let Observation { topic: t, key, record } = &obs;
            let bytes = || record.encode(&writers[t]).unwrap();
            match (t, record.event(), key) {
                (InputTopic::Jobs, ObservationEvent::Applied, Some(k)) if job.is_none() => {
                    job = Some((k.clone(), bytes()));
                    records.push((0, record.clone()));
                }
                (InputTopic::Pods, ObservationEvent::Applied, Some(_)) if pod.is_none() => {
                    pod = Some(bytes());
                    records.push((1, record.clone()));
                }
                (InputTopic::Jobs, ObservationEvent::Heartbeat, None) if beat.is_none() => {
                    beat = Some(());
                    records.push((2, record.clone()));
                }
                _ => {}
            }
        }
        if job.is_some() && pod.is_some() && beat.is_some() {
            break;
        }
    }
    records.sort_by_key(|(i, _)| *i);
    let records: [ObservationRecord; 3] =
        records.into_iter().map(|(_, r)| r).collect::<Vec<_>>().try_into().unwrap();
    Samples { job: job.unwrap(), pod: pod.unwrap(), records, cluster: cluster.to_owned(), writers }
}

/// A deterministic stream of pseudo-random numbers (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Bytes of the bad-bytes corpus — arbitrary bytes and corrupted valid records — that the
/// decoder refuses (some corruptions still decode, and would be good records).
fn corpus(codec: &Codec, rt: &tokio::runtime::Runtime, s: &Samples, rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while out.len() < n {
        let bytes: Vec<u8> = match rng.next() % 3 {
            0 => (0..rng.next() % 64).map(|_| rng.next() as u8).collect(),
            1 => {
                let mut b = s.pod.clone();
                let cut = rng.next() as usize % b.len();
                b.truncate(cut);
                b
            }
            _ => {
                let mut b = s.job.1.clone();
                for _ in 0..3 {
                    let i = rng.next() as usize % b.len();
                    b[i] ^= (rng.next() as u8) | 1;
                }
                b.push(rng.next() as u8);
                b
            }
        };
        if rt.block_on(codec.decode(&bytes)).is_err() {
            out.push(bytes);
        }
    }
    out
}

/// Every bad kind of one batch, each at each of `times`.
fn batch(
    codec: &Codec,
    rt: &tokio::runtime::Runtime,
    s: &Samples,
    rng: &mut Rng,
    times: &[i64],
    with_ahead: bool,
) -> Vec<Bad> {
    let mut out = Vec::new();
    let bad =
        |topic, partition, key: Option<&[u8]>, value: Option<Vec<u8>>, ts, header, reason, what: &str| Bad {
            topic,
            partition,
            key: key.map(<[u8]>::to_vec),
            value,
            timestamp_ms: ts,
            heartbeat_header: header,
            reason,
            what: what.to_owned(),
        };
    let pod_without_pod = ObservationRecord::marker(
        InputTopic::Pods,
        Source { cluster: s.cluster.clone(), instance: PUBLISHER.into(), epoch: 1 },
        0,
        ObservationEvent::Applied,
    );
    let marker_on_sessions = ObservationRecord::Session(SessionObservation {
        source: Source { cluster: s.cluster.clone(), instance: "host".into(), epoch: 0 },
        observed_at: 0,
        event: ObservationEvent::SnapshotEnd,
        session: None,
    });
    for (i, &ts) in times.iter().enumerate() {
        let p = (i as i32) % PARTITIONS;
        for (j, topic) in InputTopic::ALL.into_iter().enumerate() {
            for bytes in corpus(codec, rt, s, rng, 2) {
                out.push(bad(
                    topic,
                    (p + j as i32) % PARTITIONS,
                    Some(b"corpus"),
                    Some(bytes),
                    ts,
                    false,
                    None,
                    "corpus bytes",
                ));
            }
            let garbage = corpus(codec, rt, s, rng, 1).remove(0);
            out.push(bad(topic, p, None, Some(garbage), ts, true, None, "garbage with the heartbeat header"));
            out.push(bad(
                topic,
                p,
                Some(b"wrong"),
                None,
                ts,
                true,
                Some("bad_heartbeat"),
                "forwarded heartbeat, wrong key",
            ));
        }
        let (uid, job) = &s.job;
        out.push(bad(
            InputTopic::Jobs,
            p,
            None,
            Some(job.clone()),
            ts,
            false,
            Some("missing_key"),
            "Job without a key",
        ));
        out.push(bad(
            InputTopic::Jobs,
            p,
            Some(b"not-its-uid"),
            Some(job.clone()),
            ts,
            false,
            Some("wrong_key"),
            "Job under another key",
        ));
        out.push(bad(
            InputTopic::Jobs,
            p,
            Some(uid.as_bytes()),
            None,
            ts,
            false,
            Some("null_value"),
            "a tombstone",
        ));
        let pod = pod_without_pod.encode(&s.writers[&InputTopic::Pods]).unwrap();
        out.push(bad(
            InputTopic::Pods,
            p,
            Some(b"some-pod"),
            Some(pod),
            ts,
            false,
            Some("missing_object"),
            "Pod APPLIED without a Pod",
        ));
        let marker = marker_on_sessions.encode(&s.writers[&InputTopic::Sessions]).unwrap();
        out.push(bad(
            InputTopic::Sessions,
            p,
            None,
            Some(marker),
            ts,
            false,
            Some("unexpected_marker"),
            "snapshot marker on sessions",
        ));
    }
    if with_ahead {
        // Valid records whose only fault is their time: 50 minutes past the trace's end.
        let ahead = START_MS + i64::from(HOURS) * 60 * MIN + 50 * MIN;
        let (uid, _) = &s.job;
        let p = kubefacts::runtime::partitioner::partition_for_key(uid.as_bytes(), PARTITIONS);
        out.push(bad(
            InputTopic::Jobs,
            p,
            Some(uid.as_bytes()),
            Some(s.stamped(0, ahead, None, None)),
            ahead,
            false,
            Some("timestamp_ahead"),
            "valid Job, 50 min ahead",
        ));
        let beat = s.stamped(2, ahead, None, None);
        out.push(bad(
            InputTopic::Jobs,
            (p + 1) % PARTITIONS,
            None,
            Some(beat),
            ahead,
            true,
            Some("timestamp_ahead"),
            "valid heartbeat, 50 min ahead",
        ));
        // And one whose only fault is its past: 1990 (judged by its lane's next heartbeat
        // when none came before it).
        out.push(bad(
            InputTopic::Jobs,
            p,
            Some(uid.as_bytes()),
            Some(s.stamped(0, IN_1990, None, None)),
            IN_1990,
            false,
            Some("timestamp_behind"),
            "valid Job observed and stamped 1990",
        ));
    }
    out
}

/// Valid records a lane judges by what it has seen of its publisher, so produced once the
/// good trace's first half is on every partition: the past (stamped in 1990, with and
/// without an `observed_at` to match), forged heartbeats (another instance of the
/// publisher's epoch, another cluster), and a Pod keyed by a Job that is not its own.
fn judged_by_the_lane(s: &Samples, present: i64) -> Vec<Bad> {
    let (uid, job) = &s.job;
    let p = kubefacts::runtime::partitioner::partition_for_key(uid.as_bytes(), PARTITIONS);
    let at = s.records[0].observed_at();
    let one = |topic, partition, key: Option<&[u8]>, value, ts, header, reason, what: &str| Bad {
        topic,
        partition,
        key: key.map(<[u8]>::to_vec),
        value: Some(value),
        timestamp_ms: ts,
        heartbeat_header: header,
        reason: Some(reason),
        what: what.to_owned(),
    };
    let foreign = "00000000-0000-4000-8000-00000000f0e1";
    vec![
        one(
            InputTopic::Jobs,
            p,
            Some(uid.as_bytes()),
            job.clone(),
            IN_1990,
            false,
            "observed_at_mismatch",
            &format!("valid Job stamped 1990, observed at {at}"),
        ),
        one(
            InputTopic::Jobs,
            p,
            Some(uid.as_bytes()),
            s.stamped(0, IN_1990, None, None),
            IN_1990,
            false,
            "timestamp_behind",
            "valid Job observed and stamped 1990",
        ),
        one(
            InputTopic::Jobs,
            (p + 1) % PARTITIONS,
            None,
            s.stamped(2, present, None, Some("forger")),
            present,
            true,
            "unknown_publisher",
            "a heartbeat of another instance",
        ),
        one(
            InputTopic::Jobs,
            (p + 2) % PARTITIONS,
            None,
            s.stamped(2, present, Some("another-cluster"), None),
            present,
            true,
            "unknown_publisher",
            "a heartbeat of another cluster",
        ),
        one(
            InputTopic::Pods,
            kubefacts::runtime::partitioner::partition_for_key(foreign.as_bytes(), PARTITIONS),
            Some(foreign.as_bytes()),
            s.pod.clone(),
            present,
            false,
            "wrong_key",
            "a Pod keyed by another Job's UID",
        ),
    ]
}

/// Valid Jobs whose state is more than a changelog record takes: a new Job (the sample's
/// spec under a UID of its own) with an annotation that makes the value as large as the
/// runtime's producer sends, and one of 2.5 MB that only the producer's compression gets
/// past the topic's limit. Written, either would abort every transaction after it: each
/// must be dead-lettered `output_too_large` with its effects rolled back.
fn too_large_to_write(s: &Samples, present: i64) -> Vec<Bad> {
    let uid = "00000000-0000-4000-8000-0000000b16e0";
    let p = kubefacts::runtime::partitioner::partition_for_key(uid.as_bytes(), PARTITIONS);
    let annotated = |bytes: usize| {
        let mut r = s.records[0].clone();
        let ObservationRecord::Job(o) = &mut r else { unreachable!("the sample Job") };
        o.observed_at = present;
        // Of an epoch no relist of the trace ends: were it applied, it would stay.
        o.source.epoch = 1 << 40;
        let job = o.job.as_mut().unwrap();
        job.meta.uid = uid.into();
        job.meta.name = "too-large".into();
        job.meta.annotations.insert("example.com/notes".into(), "n".repeat(bytes));
        r.encode(&s.writers[&InputTopic::Jobs]).unwrap()
    };
    let base = annotated(0).len();
    let at_the_limit = annotated(kubefacts::runtime::deadletter::DEFAULT_MAX_BYTES + 1_000 - base);
    let compressed = annotated(2_500_000);
    [
        (at_the_limit, "valid Job as large as the producer sends"),
        (compressed, "valid Job of 2.5 MB, compressed"),
    ]
    .into_iter()
    .map(|(value, what)| Bad {
        topic: InputTopic::Jobs,
        partition: p,
        key: Some(uid.as_bytes().to_vec()),
        value: Some(value),
        timestamp_ms: present,
        heartbeat_header: false,
        reason: Some("output_too_large"),
        what: what.to_owned(),
    })
    .collect()
}

/// Produces `bad`, returning each with its (topic, partition, offset). A value larger than
/// the topic takes goes through a compressing producer, as a client's would.
fn produce(
    rt: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &dyn Fn(InputTopic) -> String,
    bad: Vec<Bad>,
) -> Vec<((String, i32, i64), Bad)> {
    let producer = |compression: &str| -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("message.max.bytes", "3000000")
            .set("enable.idempotence", "true")
            .set("compression.type", compression)
            .create()
            .unwrap()
    };
    let (plain, compressing) = (producer("none"), producer("lz4"));
    let mut out = Vec::new();
    for b in bad {
        let name = topic(b.topic);
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&name).partition(b.partition).timestamp(b.timestamp_ms);
        if let Some(k) = &b.key {
            record = record.key(k);
        }
        if let Some(v) = &b.value {
            record = record.payload(v);
        }
        if b.heartbeat_header {
            record = record
                .headers(OwnedHeaders::new().insert(Header { key: HEARTBEAT_HEADER, value: Some("1") }));
        }
        let producer = match b.value.as_ref().is_some_and(|v| v.len() > 1_048_000) {
            true => &compressing,
            false => &plain,
        };
        let delivered =
            rt.block_on(producer.send(record, Duration::from_secs(30))).map_err(|(e, _)| e).unwrap();
        out.push(((name, delivered.partition, delivered.offset), b));
    }
    out
}

#[test]
fn bad_records_change_nothing_but_their_own_outcome() {
    let started = Instant::now();
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    let scratch = Scratch::new("bad", "session_timeout_ms = 6000\nmax_batch_records = 100\n");
    let (dir, prefix, app, config) =
        (scratch.path(), scratch.prefix.clone(), scratch.app.clone(), scratch.config.clone());
    let config_arg = config.to_str().unwrap();
    let trace = dir.join("trace.jsonl");
    let (hours, seed) = (HOURS.to_string(), SEED.to_string());
    simulate_small(&hours, &seed, &trace, &[]);
    let replay_dir = dir.join("replay");
    let replay_out = replay_dir.to_str().unwrap();
    let parts = PARTITIONS.to_string();
    kubefacts_ok(&[
        "replay",
        "--partitions",
        &parts,
        "--finish",
        "--input",
        trace.to_str().unwrap(),
        "--output",
        replay_out,
        "--config",
        config_arg,
    ]);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let codec = Codec::new(None).unwrap();
    let pipeline = kubefacts::config::PipelineConfig::load(&config).unwrap();
    let topics = pipeline.topics;
    let topic = |t: InputTopic| t.topic_name(&topics);
    let s = samples(&codec, &rt, &topic, &pipeline.cluster);
    let mut rng = Rng(0x5eed_0021);
    let (past, present, future) = (START_MS - 24 * 60 * MIN, START_MS + 60 * MIN, START_MS + 170 * MIN);

    // The input topics, empty; then bad records ahead of everything.
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let publish = [
        "publish",
        "--create-topics",
        "--partitions",
        &parts,
        "--bootstrap",
        bootstrap,
        "--config",
        config_arg,
        "--instance-id",
        PUBLISHER,
    ];
    kubefacts_ok(&[&publish[..], &["--input", empty.to_str().unwrap()]].concat());
    let mut produced =
        produce(&rt, bootstrap, &topic, batch(&codec, &rt, &s, &mut rng, &[past, present, future], true));

    // The good trace through standard input, with more bad records produced halfway.
    let mut publisher = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(publish)
        .args(["--finish", "--input", "-"])
        .env_remove("KUBEFACTS_REGISTRY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut stdin = publisher.stdin.take().unwrap();
    for line in &lines[..lines.len() / 2] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let jobs = topic(InputTopic::Jobs);
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_records(bootstrap, &jobs).len() < produced.iter().filter(|(at, _)| at.0 == jobs).count() + 10 {
        assert!(Instant::now() < deadline, "publish wrote nothing of the first half");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut between = batch(&codec, &rt, &s, &mut rng, &[past, present, future], true);
    between.extend(judged_by_the_lane(&s, present));
    // Stamped with the good trace's time so far: nothing but their size is wrong.
    let so_far = (read_records(bootstrap, &jobs).iter())
        .filter_map(|r| r.timestamp_ms)
        .filter(|t| ![past, present, future, IN_1990].contains(t) && *t < future)
        .max()
        .unwrap();
    between.extend(too_large_to_write(&s, so_far));
    let huge: Vec<u8> = (0..1_040_000u32).map(|i| (i * 7 + 3) as u8).collect();
    between.push(Bad {
        topic: InputTopic::CronJobs,
        partition: 1,
        key: Some(b"huge".to_vec()),
        value: Some(huge.clone()),
        timestamp_ms: present,
        heartbeat_header: false,
        reason: None,
        what: "a 1 040 000-byte value".into(),
    });
    produced.extend(produce(&rt, bootstrap, &topic, between));
    for line in &lines[lines.len() / 2..] {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = publisher.wait_with_output().unwrap();
    assert!(out.status.success(), "publish failed: {}", String::from_utf8_lossy(&out.stdout));
    // And after the trace; then the watcher's heartbeat again at the time of the last one
    // (it moves no stream time, so the replay stays the good trace's), which judges them.
    let after = batch(&codec, &rt, &s, &mut rng, &[past, present, future], false);
    produced.extend(produce(&rt, bootstrap, &topic, after));
    let bad_times = [past, present, future];
    let last_beat = (read_records(bootstrap, &jobs).iter())
        .filter_map(|r| r.timestamp_ms)
        .filter(|t| !bad_times.contains(t))
        .max()
        .unwrap();
    let mut beats = Vec::new();
    for t in InputTopic::ALL {
        let source = Source { cluster: s.cluster.clone(), instance: PUBLISHER.into(), epoch: 1 };
        let beat = ObservationRecord::marker(t, source, last_beat, ObservationEvent::Heartbeat);
        let value = beat.encode(&s.writers[&t]).unwrap();
        for p in 0..PARTITIONS {
            beats.push(Bad {
                topic: t,
                partition: p,
                key: None,
                value: Some(value.clone()),
                timestamp_ms: last_beat,
                heartbeat_header: true,
                reason: None,
                what: "the last heartbeat again".into(),
            });
        }
    }
    produce(&rt, bootstrap, &topic, beats);
    println!("{} bad records produced after {:?}", produced.len(), started.elapsed());

    // Every stage, two instances; one SIGKILLed inside a transaction once.
    let stages = default_stages(&prefix, &app);
    let processes = support::Processes::new(dir.join("logs"), bootstrap, &config);
    let start = |instance: &str, extra: &[&str]| processes.start(instance, extra);
    let tails = || processes.tails();
    let mut b = start("b", &[]);
    let mut a = start("a", &["--failpoint", "before-commit:4"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !is_stopped(a.id()) && all_committed(bootstrap, &stages).is_err() {
        assert!(Instant::now() < deadline, "a never reached its failpoint\n{}", tails());
        std::thread::sleep(Duration::from_millis(20));
    }
    a.kill().unwrap();
    a.wait().unwrap();
    let mut a = start("a", &[]);
    wait_all_committed(bootstrap, &stages, &mut [("b", &mut b), ("a", &mut a)], 150, &tails);
    println!("every stage committed its input after {:?}", started.elapsed());

    // Each bad record once in the dead-letter topic, with its reason.
    let mut failures = Vec::new();
    let mut letters: BTreeMap<(String, i32, i64), Vec<DeadLetter>> = BTreeMap::new();
    for r in read_records(bootstrap, &format!("{prefix}dead-letter.v1")) {
        let dl: DeadLetter = rt.block_on(codec.decode_as(r.value.as_deref().unwrap())).unwrap();
        letters.entry((dl.source_topic.clone(), dl.source_partition, dl.source_offset)).or_default().push(dl);
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (at, bad) in &produced {
        match letters.remove(at).as_deref() {
            Some([dl]) => {
                *reasons.entry(dl.reason.clone()).or_default() += 1;
                if dl.reason == "output_too_large" {
                    println!("{}: {}", bad.what, dl.detail);
                }
                if bad.reason.is_some_and(|r| r != dl.reason) {
                    failures.push(format!(
                        "{} at {at:?}: reason {} (detail {}), expected {:?}",
                        bad.what, dl.reason, dl.detail, bad.reason
                    ));
                }
                if let Some(v) =
                    bad.value.as_ref().filter(|v| v.len() > 1_000_000 || dl.source_value_truncated)
                {
                    assert!(dl.source_value_truncated, "the large value's dead letter is cut to fit");
                    assert_eq!(dl.source_value_size, Some(v.len() as i64));
                    assert_eq!(
                        dl.source_value.as_deref(),
                        Some(&v[..dl.source_value.as_ref().unwrap().len()])
                    );
                } else if dl.source_value != bad.value {
                    failures.push(format!(
                        "{} at {at:?}: the dead letter does not hold the original bytes",
                        bad.what
                    ));
                }
            }
            Some(many) => failures.push(format!(
                "{} at {at:?}: dead-lettered {} times by {:?}",
                bad.what,
                many.len(),
                many.iter().map(|d| &d.processor).collect::<Vec<_>>()
            )),
            None => failures
                .push(format!("{} at {at:?} ({} ms): never dead-lettered", bad.what, bad.timestamp_ms)),
        }
    }
    for (at, dls) in &letters {
        failures
            .push(format!("a dead letter of a good record at {at:?}: {}: {}", dls[0].reason, dls[0].detail));
    }
    println!("dead letters by reason: {reasons:?}");

    // And every output is the good trace's alone.
    let (diffs, compared) = compare_outputs(&rt, &codec, bootstrap, &replay_dir, &prefix, |_, _| {});
    failures.extend(diffs);
    let _ = (a.kill(), b.kill());
    println!("compared with the replay of the good trace: {}", compared.join("; "));
    assert!(failures.is_empty(), "{} problems:\n{}\n{}", failures.len(), failures.join("\n"), tails());
    println!("every bad record once, every output the good trace's, after {:?}", started.elapsed());
}
