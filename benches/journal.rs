//! `[runs]` over a large synthetic recorded cluster (the watch benchmark's): observations
//! per second through the pure processor in the in-memory driver, per core, and the state
//! it keeps per tracked Job (postcard bytes, what the changelog and a restore carry).
//!
//! Part 3 runs the same observations through `kubefacts process` (the default stages) on
//! the real broker. Run with `cargo bench --bench journal` (optionally `-- JOBS`, default
//! 20 000 Jobs ≈ 180 000 observations) after `scripts/infra/up.sh && source
//! .cache/run/env`; `-- --in-memory` runs parts 1 and 2 only (no broker needed, and says
//! so). Under `cargo test` it runs a small instance and checks the counts.

#[path = "common/synthetic.rs"]
mod synthetic;

use std::time::Instant;

use kubefacts::{
    cleanup::CleanupDecision,
    codec::{Codec, Framing, RecordWriter},
    journal::{JobRun, JobRunWindowPart, JobRunWindowPartKey, Journal, JournalConfig, Runs, RunsConfig},
    observe::{InputTopic, MinimizeConfig, Observer, memory::MemInputs, model::Source},
    runtime::driver::{self, MemTopic, OutputTopics},
};
use synthetic::synthetic_trace;

const PARTITIONS: i32 = 6;

fn writer(codec: &Codec, name: &str) -> RecordWriter {
    let known = codec.schemas().current(name).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let in_memory_only = std::env::args().any(|a| a == "--in-memory");
    let jobs: usize =
        std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if benching { 20_000 } else { 200 });
    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();

    // The watcher's output for the synthetic cluster, heartbeated as a watcher does; the
    // driver and the broker runs below both use it.
    let observed = observations_of(jobs);
    let mut inputs = MemInputs::new(&codec, &Default::default(), PARTITIONS).unwrap();
    for obs in &observed {
        inputs.push(obs).unwrap();
    }
    let (job_topic, pod_topic) = (inputs.topic(InputTopic::Jobs), inputs.topic(InputTopic::Pods));
    let observations = job_topic.len() + pod_topic.len();
    println!(
        "journal bench: {jobs} Jobs, {observations} Job and Pod observations (heartbeats and markers included) \
         on {PARTITIONS} partitions\n"
    );

    let outputs = || OutputTopics {
        writers: vec![
            writer(&codec, JobRun::FULL_NAME),
            writer(&codec, JobRun::FULL_NAME),
            writer(&codec, CleanupDecision::FULL_NAME),
        ],
        topics: vec![
            MemTopic::new("job-run-facts", PARTITIONS),
            MemTopic::new("journal-repartition", PARTITIONS),
            MemTopic::new("cleanup-decisions", PARTITIONS),
        ],
        key_writers: Vec::new(),
        forward: kubefacts::runtime::OutputPort::forwarding(&kubefacts::journal::Runs::OUTPUTS),
    };
    let journal_outputs = || OutputTopics {
        writers: vec![writer(&codec, JobRunWindowPart::FULL_NAME)],
        topics: vec![MemTopic::new("job-runs", PARTITIONS)],
        key_writers: vec![Some(writer(&codec, JobRunWindowPartKey::FULL_NAME))],
        forward: Vec::new(),
    };
    // Warm up once, then time the best of three (one core: the driver runs tasks in turn), in
    // CPU time of this thread: on a machine shared with other builds, wall time would
    // measure the neighbours too.
    let (mut best, mut best_journal, mut best_both) = (f64::MAX, f64::MAX, f64::MAX);
    let mut run = None;
    let mut journal = None;
    for _ in 0..if benching { 4 } else { 1 } {
        let started = cpu_secs();
        let r = rt
            .block_on(driver::run("runs", &codec, &[job_topic, pod_topic], outputs(), |_| {
                Runs::new(RunsConfig::default(), Journal::input_key(&JournalConfig::default()))
            }))
            .unwrap();
        let runs_secs = cpu_secs() - started;
        best = best.min(runs_secs);
        let j = rt
            .block_on(driver::run("journal", &codec, &[&r.outputs[1]], journal_outputs(), |_| {
                Journal::new(JournalConfig::default())
            }))
            .unwrap();
        let both_secs = cpu_secs() - started;
        best_both = best_both.min(both_secs);
        best_journal = best_journal.min(both_secs - runs_secs);
        run = Some(r);
        journal = Some(j);
    }
    let (run, journal) = (run.unwrap(), journal.unwrap());
    let runs = run.outputs[0].facts();
    assert_eq!(runs, jobs, "one run per finished Job");
    assert!(run.dead_letters.is_empty());
    println!(
        "1. [runs] in the in-memory driver, one core        {:>10.0} observations/s   ({runs} runs filed in {best:.3} s CPU)",
        observations as f64 / best
    );
    let emissions = journal.outputs[0].len();
    assert!(emissions > 0 && journal.dead_letters.is_empty());
    println!(
        "   [journal] alone, one core                      {:>10.0} runs/s           ({emissions} summaries and pages, {best_journal:.3} s CPU)",
        runs as f64 / best_journal
    );
    println!(
        "   [runs] + [journal], one core                   {:>10.0} observations/s   ({best_both:.3} s CPU)",
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

    if in_memory_only {
        println!("3. on the broker: not run (--in-memory)");
        return;
    }

    // 3. On the broker (the input ends with a heartbeat on every partition, so every record
    // is processed), the same observations published to the input topics, then
    // `kubefacts process` with the default stages ([runs] → [journal]), exactly once. The
    // rate is input observations over the time from the first to the last committed offset.
    let Ok(bootstrap) = std::env::var("KUBEFACTS_TEST_BOOTSTRAP") else {
        panic!(
            "KUBEFACTS_TEST_BOOTSTRAP is not set: part 3 runs on the real broker. Run \
             `scripts/infra/up.sh && source .cache/run/env` first (./scripts/test.sh does that)."
        )
    };
    // Side by side: the default pipeline ([runs] also reads every partition of the jobs
    // topic, for the cleanup's dependency holds) and the same without dependency holds.
    let limit = if benching { 300 } else { 120 };
    let variants = [
        ("default pipeline", "deps", ""),
        ("no dependency holds (no global jobs input)", "nodeps", NO_DEPENDENCY_HOLDS),
    ];
    let mut rates = Vec::new();
    for (what, tag, extra) in variants {
        let (rate, secs, share) = broker_rate(&bootstrap, &codec, &observed, tag, extra, limit);
        if share > 0.5 {
            println!(
                "3. [runs] on the broker, {what}: n/a — the first transaction took {:.0} % of the backlog",
                share * 100.0
            );
        } else {
            println!(
                "3. [runs] on the broker, exactly once, {what:<44} {rate:>8.0} observations/s   \
                 (the rest committed {secs:.1} s after the first commit)"
            );
            rates.push(rate);
        }
    }
    if let [with, without] = rates[..] {
        println!("   the global jobs input costs {:.0} % of the rate", 100.0 * (1.0 - with / without));
    }
}

/// CPU time of this thread so far, in seconds (`/proc/thread-self/schedstat`).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
    stat.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()).expect("on-CPU ns") / 1e9
}

/// The default stages without the global jobs input (and so without dependency holds).
const NO_DEPENDENCY_HOLDS: &str = r#"
[cleanup]
dependency_annotation = ""
[[process.stages]]
processor = "runs"
inputs = ["topics.jobs", "topics.pods"]
outputs = ["topics.job_run_facts", "topics.journal_repartition", "topics.cleanup_decisions"]
[[process.stages]]
processor = "journal"
inputs = ["topics.journal_repartition"]
outputs = ["topics.job_runs"]
"#;

/// The observations of the synthetic cluster, in order, heartbeated as a watcher does (one
/// every `[watch].heartbeat_interval_ms`), ending a minute after the last event so every
/// run's settle time passes, then one interval later: on Kafka a source record is judged by
/// the heartbeat after it, so a trace ending in a single heartbeat would leave its end held.
fn observations_of(jobs: usize) -> Vec<kubefacts::observe::Observation> {
    use kubefacts::trace::{TraceEntry, TraceEvent};
    let config = kubefacts::config::PipelineConfig::default();
    let interval = i64::try_from(config.watch.heartbeat_interval_ms).unwrap();
    let mut entries = Vec::new();
    let mut next_beat = None;
    for entry in synthetic_trace(jobs) {
        let at = entry.observed_at_ms;
        let beat = next_beat.get_or_insert(at + interval);
        while *beat <= at {
            entries.push(TraceEntry { observed_at_ms: *beat, event: TraceEvent::Heartbeat });
            *beat += interval;
        }
        entries.push(entry);
    }
    let last = entries.last().map_or(0, |e| e.observed_at_ms);
    for at in [last + 60_000, last + 60_000 + interval] {
        entries.push(TraceEntry { observed_at_ms: at, event: TraceEvent::Heartbeat });
    }
    // Published as the pipeline's own cluster: `process` refuses heartbeats from any other
    // (`unknown_publisher`), and without them no record is released.
    let cluster = kubefacts::config::PipelineConfig::embedded_default().unwrap().cluster;
    let source = Source { cluster, instance: "bench".into(), epoch: 1 };
    let mut observer = Observer::new(source, MinimizeConfig::default());
    entries.into_iter().flat_map(|e| observer.admit(e)).flat_map(|r| r.unwrap()).collect()
}

/// Publishes `observations`, runs `kubefacts process` with the default stages on their own
/// topics, and returns (observations/s, seconds) between the first and the last commit of
/// the `[runs]` stage's input offsets, and the share of the input the first commit held.
fn broker_rate(
    bootstrap: &str,
    codec: &Codec,
    observations: &[kubefacts::observe::Observation],
    tag: &str,
    extra_toml: &str,
    limit_secs: u64,
) -> (f64, f64, f64) {
    use rdkafka::{
        ClientConfig, Offset, TopicPartitionList,
        consumer::{BaseConsumer, Consumer},
    };
    let id = format!("bench-journal-{}-{}-{tag}", std::process::id(), observations.len());
    let topics = kubefacts::config::TopicsConfig { prefix: format!("{id}."), ..Default::default() };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
        let specs: Vec<kubefacts::runtime::topics::TopicSpec> =
            InputTopic::ALL.iter().map(|t| topics.spec(&t.topic_name(&topics), PARTITIONS, false)).collect();
        kubefacts::runtime::topics::ensure_topics(&admin, &specs, true).await.unwrap();
        let mut publisher = kubefacts::watch::Publisher::connect(
            &kubefacts::config::kafka::Brokers::plaintext(bootstrap),
            codec,
            &topics,
        )
        .await
        .unwrap();
        for obs in observations {
            publisher.publish(obs).await.unwrap();
        }
        publisher.flush().await.unwrap();
    });
    let dir = std::env::temp_dir().join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("pipeline.toml");
    std::fs::write(
        &config,
        format!("[topics]\nprefix = \"{id}.\"\n[process]\napplication_id = \"{id}\"\ncreate_topics = true\npartitions = {PARTITIONS}\n{extra_toml}"),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["process", "--instance-id", "bench", "--bootstrap", bootstrap, "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("process.log")).unwrap())
        .spawn()
        .unwrap();
    let poller: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        // The application's one group (every stage commits in it).
        .set("group.id", &id)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let inputs = [InputTopic::Jobs.topic_name(&topics), InputTopic::Pods.topic_name(&topics)];
    let total: i64 = inputs
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| (t, p)))
        .map(|(t, p)| poller.fetch_watermarks(t, p, std::time::Duration::from_secs(10)).unwrap().1)
        .sum();
    let committed = || -> i64 {
        let mut tpl = TopicPartitionList::new();
        for t in &inputs {
            for p in 0..PARTITIONS {
                tpl.add_partition(t, p);
            }
        }
        poller.committed_offsets(tpl, std::time::Duration::from_secs(5)).map_or(0, |c| {
            c.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum()
        })
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(limit_secs);
    let mut first: Option<(Instant, i64)> = None;
    let last = loop {
        let c = committed();
        if c > 0 && first.is_none() {
            first = Some((Instant::now(), c));
        }
        if c >= total {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "process did not commit all {total} input records in {limit_secs} s; logs in {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let (t0, c0) = first.unwrap();
    let secs = (last - t0).as_secs_f64().max(1e-3);
    ((total - c0) as f64 / secs, secs, c0 as f64 / total as f64)
}
