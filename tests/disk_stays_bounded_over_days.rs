//! Issue 47: on a live-style deployment the broker's disk for internal topics is bounded by
//! the lag, not by the days the deployment has run.
//!
//! A day of the small fleet, stamped as a live cluster stamps it (ending just now, so the inputs'
//! two-week retention of the shipped pipeline file keeps it), runs through the default
//! pipeline. Once everything is committed, what the broker keeps on disk of each repartition
//! topic — its segment files in the broker's log directory, read directly — must be at most
//! two segments, whatever the day wrote: the purge moves the log start offset, and the
//! broker frees whole segments below it.
//!
//! The segments here are Kafka's smallest, 1 MiB, not the 10 minutes / 50 MiB `process`
//! creates internal topics with (a unit test holds those): a segment rolls by record time
//! only while the records are newer than its first batch, and in a transactional topic that
//! batch may be a commit marker stamped with the broker's clock, so a backlog of
//! yesterday's records — this test, or a deployment catching up — rolls by size alone, and
//! a day of the small fleet writes ~3 MiB per partition. Changelogs (compacted: the state
//! itself) are reported beside them.

mod support;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use kubefacts::{config::PipelineConfig, runtime::topics::ensure_topics};
use rdkafka::consumer::Consumer;
use support::{Processes, Scratch, client_config, default_stages, infra, kubefacts_ok, wait_all_committed};

const HOURS: i64 = 24;
/// `segment.bytes` of the repartition topics here: Kafka's smallest.
const SEGMENT_BYTES: u64 = 1_048_576;
const PARTITIONS: i32 = 3;

/// The broker's log directory (scripts/infra/up.sh exports it).
fn data_dir() -> PathBuf {
    let dir = std::env::var("KUBEFACTS_INFRA_KAFKA_DATA").unwrap_or_else(|_| {
        panic!(
            "KUBEFACTS_INFRA_KAFKA_DATA is not set: this test reads the broker's log directory; start the \
             broker with ./scripts/infra/up.sh and source .cache/run/env"
        )
    });
    let dir = PathBuf::from(dir);
    assert!(dir.is_dir(), "the broker's log directory {} does not exist", dir.display());
    dir
}

/// One partition of a topic on disk: its segments' base offsets (from the file names) and
/// the bytes of its `.log` files.
#[derive(Debug)]
struct OnDisk {
    bases: Vec<i64>,
    bytes: u64,
}

fn on_disk(data: &Path, topic: &str, partition: i32) -> OnDisk {
    let dir = data.join(format!("{topic}-{partition}"));
    let (mut bases, mut bytes) = (Vec::new(), 0);
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(base) = name.strip_suffix(".log") {
            bases.push(base.parse().unwrap());
            bytes += entry.metadata().unwrap().len();
        }
    }
    bases.sort_unstable();
    OnDisk { bases, bytes }
}

/// (start, end) offsets of each partition of `topic`.
fn bounds(bootstrap: &str, topic: &str) -> Vec<(i64, i64)> {
    let c: rdkafka::consumer::BaseConsumer = client_config(bootstrap).create().unwrap();
    (0..PARTITIONS).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(5)).unwrap()).collect()
}

#[test]
fn internal_topics_keep_about_the_lag_on_disk_not_the_days() {
    let data = data_dir();
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    // The shipped file's input retention; a purge every second, so the test need not wait
    // for the default 30 s.
    let scratch =
        Scratch::new("days", "purge_interval_ms = 1000\n\n[topics.retention]\ninputs_ms = 1209600000\n");
    let (dir, prefix, config) = (scratch.path(), scratch.prefix.clone(), scratch.config_arg());
    let now_ms = jiff::Timestamp::now().as_millisecond();
    // Ending two hours ago: `--finish` stamps heartbeats up to the last window's end plus
    // grace (70 min past the trace), and the broker refuses records more than
    // `log.message.timestamp.after.max.ms` (1 h by default) ahead of its clock.
    let start_ms = (now_ms - (HOURS + 2) * 3_600_000) / 60_000 * 60_000;
    let start = jiff::Timestamp::from_millisecond(start_ms).unwrap().to_string();
    let trace = dir.join("trace.jsonl");
    let trace_arg = trace.to_str().unwrap();
    let hours = HOURS.to_string();
    let simulate = ["simulate", "--profile", "small", "--hours", &hours, "--seed", "47", "--start", &start];
    kubefacts_ok(&[&simulate[..], &["--output", trace_arg]].concat());
    let partitions = PARTITIONS.to_string();
    let published = kubefacts_ok(&[
        "publish",
        "--create-topics",
        "--partitions",
        &partitions,
        "--finish",
        "--bootstrap",
        bootstrap,
        "--input",
        trace_arg,
        "--config",
        config,
    ])
    .all();
    assert!(
        !published.contains("keep their records forever"),
        "a live-stamped trace is kept by the live retention: {published}"
    );

    // The repartition topics as `process` would create them, with 1 MiB segments.
    let pipeline = PipelineConfig::load(&scratch.config).unwrap();
    let topics = &pipeline.topics;
    let internal = [topics.full(&topics.journal_repartition), topics.full(&topics.session_owner_repartition)];
    let specs: Vec<_> = (internal.iter())
        .map(|t| topics.spec(t, PARTITIONS, false).with_config("segment.bytes", SEGMENT_BYTES.to_string()))
        .collect();
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        client_config(bootstrap).create().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(ensure_topics(&admin, &specs, true)).unwrap();

    let stages = default_stages(&prefix, &scratch.app);
    let processes = Processes::new(dir.join("logs"), bootstrap, &scratch.config);
    let mut a = processes.start("a", &[]);
    wait_all_committed(bootstrap, &stages, &mut [("a", &mut a)], 600, &|| processes.tails());

    // The last purge and the broker's retention check (every second on the test broker;
    // five minutes by default) follow within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (written, kept, bytes) = loop {
        let mut report = Vec::new();
        let (mut written, mut kept, mut bytes) = (0, 0, 0);
        let mut settled = true;
        for topic in &internal {
            for (p, (start, end)) in bounds(bootstrap, topic).into_iter().enumerate() {
                let disk = on_disk(&data, topic, p as i32);
                let first = disk.bases.first().copied().unwrap_or(end);
                // Records still on disk: from the first segment's base to the end.
                let on_disk = end - first;
                written += end;
                kept += on_disk;
                bytes += disk.bytes;
                // The active segment, and the one before it until the broker's next
                // retention check.
                settled &= disk.bases.len() <= 2 && disk.bytes <= 2 * SEGMENT_BYTES;
                report.push(format!(
                    "{topic}[{p}]: {end} written, start offset {start}, {} segment(s) on disk from {first}: \
                     {on_disk} records, {} bytes",
                    disk.bases.len(),
                    disk.bytes
                ));
            }
        }
        if settled {
            println!("{}", report.join("\n"));
            break (written, kept, bytes);
        }
        assert!(
            Instant::now() < deadline,
            "the repartition topics keep more than two segments on disk:\n{}\n{}",
            report.join("\n"),
            processes.tails()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    println!(
        "repartition topics: {written} records written over {HOURS} h of stream time, {kept} ({:.2} %) still on \
         disk, {bytes} bytes",
        kept as f64 * 100.0 / written.max(1) as f64
    );
    // It is the purge that freed them: a day wrote many segments' worth.
    let per_record = bytes as f64 / kept.max(1) as f64;
    let written_bytes = written as f64 * per_record;
    println!("about {:.1} MiB written to the repartition topics in all", written_bytes / 1_048_576.0);
    assert!(
        written_bytes >= 3.0 * bytes as f64,
        "the day wrote ~{written_bytes:.0} bytes to the repartition topics and {bytes} are on disk: the purge freed \
         too little for the test to show anything"
    );

    // Changelogs are the state: compacted, not purged. Reported, for the figures.
    let mut changelogs: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&scratch.app) && n.contains("-changelog-"))
        .filter_map(|n| Some(n.rsplit_once('-')?.0.to_owned()))
        .collect();
    changelogs.sort();
    changelogs.dedup();
    for topic in &changelogs {
        let (mut end, mut disk) = (0, 0);
        for (p, (_, e)) in bounds(bootstrap, topic).into_iter().enumerate() {
            end += e;
            disk += on_disk(&data, topic, p as i32).bytes;
        }
        println!("{topic}: {end} records written, {disk} bytes on disk");
    }
}
