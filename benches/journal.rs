//! `[runs]` over a large synthetic recorded cluster (the watch benchmark's): observations
//! per second through the pure processor in the in-memory driver, per core, and the state
//! it keeps per tracked Job (postcard bytes, what the changelog and a restore carry).
//!
//! Run with `cargo bench --bench journal` (optionally `-- JOBS`, default 20 000 Jobs ≈
//! 180 000 observations). Under `cargo test` it runs a small instance and checks the counts.
//! `[journal]`'s windows join this benchmark when they land.

#[path = "common/synthetic.rs"]
mod synthetic;

use std::time::Instant;

use kubefacts::{
    codec::{Codec, Framing, RecordWriter},
    journal::{JobRun, JobRunWindow, JobRunWindowKey, Journal, JournalConfig, Runs, runs::RunsConfig},
    observe::{InputTopic, MinimizeConfig, Observer, model::Source},
    runtime::driver::{self, MemInputs, MemTopic, OutputTopics},
};
use synthetic::synthetic_trace;

const PARTITIONS: i32 = 6;

fn writer(codec: &Codec, name: &str) -> RecordWriter {
    let known = codec.schemas().current(name).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let jobs: usize =
        std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if benching { 20_000 } else { 200 });
    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();

    // The watcher's output for the synthetic cluster, with a heartbeat at the end so every
    // run's settle time passes.
    let mut entries = synthetic_trace(jobs);
    let last = entries.last().map_or(0, |e| e.observed_at_ms);
    entries.push(kubefacts::trace::TraceEntry {
        observed_at_ms: last + 60_000,
        event: kubefacts::trace::TraceEvent::Heartbeat,
    });
    let source = Source { cluster: "bench".into(), instance: "bench".into(), epoch: 1 };
    let mut observer = Observer::new(source, MinimizeConfig::default());
    let mut inputs = MemInputs::new(&codec, &Default::default(), PARTITIONS).unwrap();
    for e in entries {
        for released in observer.admit(e) {
            for obs in released.unwrap() {
                inputs.push(&obs).unwrap();
            }
        }
    }
    let (job_topic, pod_topic) = (inputs.topic(InputTopic::Jobs), inputs.topic(InputTopic::Pods));
    let observations = job_topic.len() + pod_topic.len();
    println!(
        "journal bench: {jobs} Jobs, {observations} Job and Pod observations (heartbeats and markers included) \
         on {PARTITIONS} partitions\n"
    );

    let outputs = || OutputTopics {
        writers: vec![writer(&codec, JobRun::FULL_NAME), writer(&codec, JobRun::FULL_NAME)],
        topics: vec![
            MemTopic::new("job-run-facts", PARTITIONS),
            MemTopic::new("journal-repartition", PARTITIONS),
        ],
        key_writers: Vec::new(),
    };
    let journal_outputs = || OutputTopics {
        writers: vec![writer(&codec, JobRunWindow::FULL_NAME)],
        topics: vec![MemTopic::new("job-runs", PARTITIONS)],
        key_writers: vec![Some(writer(&codec, JobRunWindowKey::FULL_NAME))],
    };
    // Warm up once, then time the best of three (one core: the driver runs tasks in turn).
    let (mut best, mut best_both) = (f64::MAX, f64::MAX);
    let mut run = None;
    let mut journal = None;
    for _ in 0..if benching { 4 } else { 1 } {
        let started = Instant::now();
        let r = rt
            .block_on(driver::run("runs", &codec, &[job_topic, pod_topic], outputs(), |_| {
                Runs::new(RunsConfig::default())
            }))
            .unwrap();
        best = best.min(started.elapsed().as_secs_f64());
        let j = rt
            .block_on(driver::run("journal", &codec, &[&r.outputs[1]], journal_outputs(), |_| {
                Journal::new(JournalConfig::default())
            }))
            .unwrap();
        best_both = best_both.min(started.elapsed().as_secs_f64());
        run = Some(r);
        journal = Some(j);
    }
    let (run, journal) = (run.unwrap(), journal.unwrap());
    let runs = run.outputs[0].len();
    assert_eq!(runs, jobs, "one run per finished Job");
    assert!(run.dead_letters.is_empty());
    println!(
        "1. [runs] in the in-memory driver, one core        {:>10.0} observations/s   ({runs} runs filed in {best:.3} s)",
        observations as f64 / best
    );
    let emissions = journal.outputs[0].len();
    assert!(emissions > 0 && journal.dead_letters.is_empty());
    println!(
        "   [runs] + [journal], one core                   {:>10.0} observations/s   ({emissions} window emissions, {best_both:.3} s)",
        observations as f64 / best_both
    );

    // State per tracked Job: the latest changelog value per key, as the changelog and a
    // restore carry it (postcard).
    let jobs_changelog = run.changelogs.iter().find(|c| c.name.ends_with("-jobs-changelog")).unwrap();
    let mut latest = std::collections::BTreeMap::new();
    for r in jobs_changelog.partitions.iter().flatten() {
        latest
            .insert(r.key.clone(), r.value.as_ref().map_or(0, Vec::len) + r.key.as_ref().map_or(0, Vec::len));
    }
    let tracked = latest.len();
    let bytes: usize = latest.values().sum();
    assert_eq!(tracked, jobs, "every finished Job is tracked until it is deleted or cleaned up");
    println!(
        "2. [runs] state per tracked Job                  {:>10.0} B                ({tracked} Jobs, {:.1} MiB; key + postcard value)",
        bytes as f64 / tracked as f64,
        bytes as f64 / 1_048_576.0
    );
}
