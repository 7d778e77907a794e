//! What each observation costs the broker (DESIGN §8, issue 47): the records and bytes the
//! default pipeline has the broker write per input observation, by kind of topic — inputs
//! (the watcher's observations and heartbeats), changelogs, internal (repartition) topics,
//! outputs (public facts and the dead letters), progress (forwarded stream time, on
//! whatever topic it travels) and transaction markers — at each partition count asked for.
//!
//! ```sh
//! scripts/infra/up.sh && source .cache/run/env
//! cargo bench --bench broker_cost                                   # medium fleet, 1 h, at 3 and 32 partitions
//! cargo bench --bench broker_cost -- --hours 4 --partitions 3,8,32  # longer, more counts
//! ```
//!
//! Each partition count is its own application on fresh topics: the simulated trace is
//! published with `--finish`, one `kubefacts process` runs the default pipeline until every
//! stage has committed all its input (purging off, so every record written is still there
//! to count), and then every topic of the application is read back whole (read_committed):
//! records and payload bytes (key, value and headers) per kind. Transaction markers are the
//! log's offsets no committed record holds (commit markers, aborted records). Per-observation
//! figures hardly depend on the hours: the fleet is the same every hour.
//!
//! Under `cargo test --all-targets` (so in CI) it runs the small fleet for one hour at three
//! partitions and checks that every kind was counted: the machinery works, no figure is
//! asserted.

#[path = "common/broker.rs"]
mod broker;

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use broker::{Env, repo_path, run_ok, unique};
use kubefacts::config::{PipelineConfig, TopicKind};
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};
use serde_json::json;

/// The header of forwarded stream time (docs/TOPICS.md).
const HEARTBEAT_HEADER: &str = "kubefacts-heartbeat";

/// What is measured, from the command line.
struct Args {
    profile: String,
    hours: u32,
    seed: u64,
    partitions: Vec<i32>,
    benching: bool,
}

impl Args {
    fn parse() -> Self {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let benching = argv.iter().any(|a| a == "--bench");
        let value = |name: &str| argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).cloned();
        let profile = value("--profile").unwrap_or_else(|| if benching { "medium" } else { "small" }.into());
        let hours = value("--hours").map_or(1, |h| h.parse().expect("--hours N"));
        let seed = value("--seed").map_or(7, |s| s.parse().expect("--seed N"));
        let partitions = value("--partitions").map_or_else(
            || if benching { vec![3, 32] } else { vec![3] },
            |p| p.split(',').map(|n| n.parse().expect("--partitions N,M")).collect(),
        );
        Args { profile, hours, seed, partitions, benching }
    }
}

/// Records and payload bytes of one kind.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    records: u64,
    bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.records += 1;
        self.bytes += bytes as u64;
    }
}

/// The kinds, in the order printed.
const KINDS: [&str; 7] =
    ["inputs", "watcher heartbeats", "changelogs", "internal", "outputs", "progress", "markers"];

fn main() {
    let args = Args::parse();
    let env = Env::from_env("broker-cost", 3);
    let work = repo_path(".cache/bench");
    fs::create_dir_all(&work).unwrap();
    let trace = work.join(format!("broker-cost-{}-seed{}-{}h.jsonl", args.profile, args.seed, args.hours));
    run_ok(Command::new(&env.bin).args([
        "simulate",
        "--profile",
        &args.profile,
        "--hours",
        &args.hours.to_string(),
        "--seed",
        &args.seed.to_string(),
        "--output",
        trace.to_str().unwrap(),
    ]));
    println!(
        "What each observation costs the broker: the default pipeline, {} fleet, {} h, seed {}\n",
        args.profile, args.hours, args.seed
    );
    let mut figures = serde_json::Map::new();
    for &partitions in &args.partitions {
        let (observations, kinds) = measure(&env, &work, &trace, partitions);
        print_table(partitions, observations, &kinds);
        let total: u64 = kinds.values().map(|t| t.records).sum();
        let progress = kinds.get("progress").copied().unwrap_or_default();
        figures.insert(
            partitions.to_string(),
            json!({
                "observations": observations,
                "kinds": kinds.iter().map(|(k, t)| (k.to_string(), json!({"records": t.records, "bytes": t.bytes})))
                    .collect::<serde_json::Map<_, _>>(),
                "progress_share_of_records": progress.records as f64 / total.max(1) as f64,
            }),
        );
        if !args.benching {
            for kind in ["inputs", "changelogs", "internal", "outputs"] {
                assert!(
                    kinds.get(kind).is_some_and(|t| t.records > 0),
                    "nothing counted as {kind}: {kinds:?}"
                );
            }
            assert!(observations > 0, "no observation published");
        }
    }
    let _ = fs::remove_file(&trace);
    // The short variant's figures are no measurement: only a bench run writes them.
    let out = work.join(if args.benching { "broker-cost-latest.json" } else { "broker-cost-check.json" });
    fs::write(
        &out,
        serde_json::to_string_pretty(&json!({"profile": args.profile, "hours": args.hours,
        "seed": args.seed, "by_partitions": figures}))
        .unwrap(),
    )
    .unwrap();
    println!("figures: {}", out.display());
}

/// Publishes `trace` on fresh topics of `partitions` partitions, runs the default pipeline
/// over it, and counts what the broker holds: (observations published, tally per kind).
fn measure(env: &Env, work: &Path, trace: &Path, partitions: i32) -> (u64, BTreeMap<&'static str, Tally>) {
    let prefix = format!("{}.", unique("bench-cost"));
    let app = prefix.trim_end_matches('.').to_owned();
    let pipeline = work.join(format!("{prefix}pipeline.toml"));
    fs::write(
        &pipeline,
        format!(
            "[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\ncreate_topics = true\n\
             partitions = {partitions}\n# Every record written stays to be counted.\npurge_interval_ms = 0\n"
        ),
    )
    .unwrap();
    let config = PipelineConfig::load(&pipeline).unwrap();
    let pipeline_arg = pipeline.to_str().unwrap();
    let started = Instant::now();
    run_ok(Command::new(&env.bin).args([
        "publish",
        "--create-topics",
        "--partitions",
        &partitions.to_string(),
        "--finish",
        "--bootstrap",
        &env.bootstrap,
        "--config",
        pipeline_arg,
        "--input",
        trace.to_str().unwrap(),
    ]));
    let log = env.logs.join(format!("process-{partitions}.log"));
    let mut process = Command::new(&env.bin)
        .args(["process", "--instance-id", "cost", "--bootstrap", &env.bootstrap, "--config", pipeline_arg])
        .env("RUST_LOG", "kubefacts=info")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Each topic once: two stages read the pods.
    let inputs: Vec<String> = (config.process.stages.iter().flat_map(|s| s.inputs.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    wait_caught_up(env, &app, &inputs, partitions, &mut process, &log);
    let _ = process.kill();
    let _ = process.wait();
    println!("{partitions} partitions: published and processed in {:.0} s", started.elapsed().as_secs_f64());

    let kind_of = |topic: &str| -> &'static str {
        if topic.ends_with("-changelog") {
            return "changelogs";
        }
        match config.topics.role_of(topic).map(|r| r.kind) {
            Some(TopicKind::Input) => "inputs",
            Some(TopicKind::Internal) => "internal",
            _ => "outputs",
        }
    };
    let probe: BaseConsumer = env.client().create().unwrap();
    let metadata = probe.fetch_metadata(None, Duration::from_secs(30)).unwrap();
    let mut kinds: BTreeMap<&'static str, Tally> = BTreeMap::new();
    let mut observations = 0;
    for t in metadata.topics() {
        let name = t.name();
        if !(name.starts_with(&prefix) || name.starts_with(&format!("{app}-"))) {
            continue;
        }
        let kind = kind_of(name);
        let (counted, offsets) = read_whole(env, name, t.partitions().len() as i32, |m| {
            let heartbeat = m.headers().is_some_and(|h| h.iter().any(|h| h.key == HEARTBEAT_HEADER));
            let header_bytes: usize = m
                .headers()
                .map_or(0, |h| h.iter().map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len)).sum());
            let bytes = m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len) + header_bytes;
            let kind = match (kind, heartbeat) {
                ("inputs", true) => "watcher heartbeats",
                (_, true) => "progress",
                (kind, false) => kind,
            };
            (kind, bytes)
        });
        for (kind, bytes) in counted {
            kinds.entry(kind).or_default().add(bytes);
            if kind == "inputs" || kind == "watcher heartbeats" {
                observations += 1;
            }
        }
        kinds.entry("markers").or_default().records += offsets.markers;
    }
    (observations, kinds)
}

/// What reading a topic whole found besides its records.
struct Offsets {
    /// Offsets of the log that hold no committed record: transaction markers, aborted records.
    markers: u64,
}

/// Reads every partition of `topic` from its start to its end (read_committed), mapping each
/// record with `f`.
fn read_whole(
    env: &Env,
    topic: &str,
    partitions: i32,
    mut f: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> (&'static str, usize),
) -> (Vec<(&'static str, usize)>, Offsets) {
    let consumer: BaseConsumer = env
        .client()
        .set("group.id", unique("bench-cost-reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    let mut span = 0u64;
    let mut ends = BTreeMap::new();
    for p in 0..partitions {
        let (low, high) = watermarks(&consumer, topic, p);
        span += (high - low) as u64;
        if high > low {
            tpl.add_partition_offset(topic, p, Offset::Offset(low)).unwrap();
            ends.insert(p, high);
        }
    }
    let mut out = Vec::new();
    if ends.is_empty() {
        return (out, Offsets { markers: 0 });
    }
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    while !ends.is_empty() {
        assert!(Instant::now() < deadline, "reading {topic} took over 10 minutes");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.push(f(&m));
                // Positions are asked for now and then: each ask walks the assignment.
                if !out.len().is_multiple_of(10_000) {
                    continue;
                }
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
        // A partition is read once the consumer's position passed its end (markers included).
        if let Ok(positions) = consumer.position() {
            for e in positions.elements() {
                if let Offset::Offset(o) = e.offset()
                    && ends.get(&e.partition()).is_some_and(|end| o >= *end)
                {
                    ends.remove(&e.partition());
                }
            }
        }
    }
    let markers = span.saturating_sub(out.len() as u64);
    (out, Offsets { markers })
}

/// A partition's start and end offsets, asked again while its leader is still being elected.
fn watermarks(consumer: &BaseConsumer, topic: &str, partition: i32) -> (i64, i64) {
    let mut tries = 0;
    loop {
        match consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
            Ok(w) => return w,
            Err(e) if tries < 20 => {
                tries += 1;
                eprintln!("offsets of {topic}[{partition}]: {e}; asking again");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("offsets of {topic}[{partition}]: {e}"),
        }
    }
}

/// Waits until the group `app` has committed every partition of `inputs` to its end.
fn wait_caught_up(env: &Env, app: &str, inputs: &[String], partitions: i32, process: &mut Child, log: &Path) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3_600);
    loop {
        if let Some(status) = process.try_wait().unwrap() {
            panic!("process exited ({status}); its log: {}", log.display());
        }
        // A new client each time: one created before `process` created its topics keeps
        // them unknown until its next metadata refresh (minutes).
        let poller: BaseConsumer =
            env.client().set("group.id", app).set("enable.auto.commit", "false").create().unwrap();
        let mut tpl = TopicPartitionList::new();
        let (mut end, mut known) = (0, true);
        for t in inputs {
            for p in 0..partitions {
                tpl.add_partition(t, p);
                match poller.fetch_watermarks(t, p, Duration::from_secs(10)) {
                    Ok((_, high)) => end += high,
                    // Not created yet (`process` creates its topics at start).
                    Err(e) => {
                        if started.elapsed() > Duration::from_secs(30) {
                            eprintln!("end offset of {t}[{p}]: {e}");
                        }
                        known = false;
                    }
                }
            }
        }
        let committed: i64 = match poller.committed_offsets(tpl, Duration::from_secs(10)) {
            Ok(c) => {
                c.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum()
            }
            Err(e) => {
                eprintln!("committed offsets of {app}: {e}");
                0
            }
        };
        if started.elapsed() > Duration::from_secs(30) && started.elapsed().as_secs().is_multiple_of(30) {
            eprintln!("{app}: committed {committed} of {end}");
        }
        if known && committed >= end {
            return;
        }
        assert!(Instant::now() < deadline, "not caught up within an hour; log: {}", log.display());
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn print_table(partitions: i32, observations: u64, kinds: &BTreeMap<&'static str, Tally>) {
    let total = kinds
        .values()
        .fold(Tally::default(), |a, t| Tally { records: a.records + t.records, bytes: a.bytes + t.bytes });
    let obs = observations.max(1) as f64;
    println!(
        "{partitions} partitions: {observations} observations on the input topics (watcher heartbeats included)"
    );
    println!(
        "  {:<20} {:>12} {:>10} {:>14} {:>10} {:>8}",
        "kind", "records", "per obs", "bytes", "B per obs", "share"
    );
    for k in KINDS {
        let t = kinds.get(k).copied().unwrap_or_default();
        println!(
            "  {k:<20} {:>12} {:>10.3} {:>14} {:>10.1} {:>7.1}%",
            t.records,
            t.records as f64 / obs,
            t.bytes,
            t.bytes as f64 / obs,
            100.0 * t.records as f64 / total.records.max(1) as f64
        );
    }
    println!(
        "  {:<20} {:>12} {:>10.3} {:>14} {:>10.1}",
        "total",
        total.records,
        total.records as f64 / obs,
        total.bytes,
        total.bytes as f64 / obs
    );
    let share = 100.0 * kinds.get("progress").map_or(0, |t| t.records) as f64 / total.records.max(1) as f64;
    let target = if partitions <= 3 { 1.0 } else { 2.0 };
    println!(
        "  progress is {share:.1} % of the records written (target ≤ {target} %: {})\n",
        if share <= target { "met" } else { "MISSED" }
    );
}
