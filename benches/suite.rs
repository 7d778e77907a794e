//! The benchmark suite (DESIGN §8): every figure an evaluator asks for, side by side in one
//! run on the same broker, over a simulated fleet (`kubefacts simulate`, docs/SIMULATE.md):
//!
//! 1. Kafka's `ProducerPerformance` at the pipeline's average record size and partition
//!    count: the broker's ceiling on this machine;
//! 2. `kubefacts publish` of the profile's trace (observations/s) and its ratio to (1);
//! 3. `kubefacts process` (the default stages, exactly once) over that input, its ratio to
//!    (1), and p50/p99 observation-to-output latency at a fixed offered load;
//! 4. the default stages in the in-memory driver, one core (observations/s);
//! 5. peak memory of (3) and state bytes per tracked Job;
//! 6. restore of all state from the changelogs;
//!
//! then how the in-memory cost grows from the small to the large profile. The figures are
//! written as JSON (`.cache/bench/suite-<time>.json`, and `suite-latest.json`), and compared
//! with the previous run's when there is one.
//!
//! `scripts/bench.sh` starts the broker, runs `cargo bench --bench suite` and stops it
//! (`-- --profile medium` for a shorter run). Under `cargo test --all-targets` it runs the
//! small profile with short phases: a check of the machinery, not a measurement.

// The binary's allocator (src/main.rs): the in-memory phases measure what `demo` and
// `replay` get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/broker.rs"]
mod broker;
#[path = "common/fleet.rs"]
mod fleet;

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use broker::{Env, committed_reader, now_ms, percentile, producer_performance, repo_path, unique};
use fleet::{Observed, finishing_job, observe, observer};
use kubefacts::{
    codec::Codec,
    config::{PipelineConfig, StageConfig, TopicsConfig},
    journal::JobRun,
    observe::{InputTopic, Observation},
    pipeline::run_all_in_memory,
    runtime::driver::MemTopic,
    simulate,
};
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
};
use serde_json::{Value as Json, json};

/// Partitions of every topic (the pipeline's default).
const PARTITIONS: i32 = 3;
/// Hours of each profile in the scaling table: the same span for every fleet size (a day of
/// the large fleet takes 20–25 CPU minutes to simulate).
const SCALING_HOURS: u32 = 3;
/// The offered load of the latency measurement, observations/s.
const LATENCY_LOAD_PER_SEC: f64 = 10_000.0;

/// The default pipeline's `[runs]` stage (a macro, so the constants below can join it).
macro_rules! runs_stage {
    () => {
        r#"
[[process.stages]]
processor = "runs"
inputs = ["topics.jobs", "topics.pods"]
globals = ["topics.jobs"]
outputs = ["topics.job_run_facts", "topics.journal_repartition", "topics.cleanup_decisions"]
"#
    };
}

/// The default pipeline's `[runs]` stage without `[journal]` (its repartition output is
/// written and not read).
const RUNS_ALONE: &str = runs_stage!();

/// `[runs]` and `[journal]` of the default pipeline alone: the work the Kafka Streams anchor
/// does the same shape of.
const RUNS_AND_JOURNAL: &str = concat!(
    runs_stage!(),
    r#"[[process.stages]]
processor = "journal"
inputs = ["topics.journal_repartition"]
outputs = ["topics.job_runs"]
"#
);

/// The anchor's run facts, under the pipeline's prefix (benches/anchors/kafka-streams).
const STREAMS_FACTS: &str = "anchor.job-run-facts";
/// The anchor's JVM heap: fixed, so its peak memory is a figure of the work, not of the
/// machine's RAM (the JVM's default maximum is a quarter of it).
const STREAMS_HEAP: [&str; 2] = ["-Xms256m", "-Xmx1g"];

/// Targets from the issue, checked at the end.
const TARGET_EOS_SHARE: f64 = 0.5;
const TARGET_DRIVER_PER_CORE: f64 = 1_000_000.0;
const TARGET_STATE_BYTES_PER_JOB: f64 = 300.0;
const TARGET_P99_MS: f64 = 250.0;
const TARGET_JOURNAL_BYTES_PER_RUN: f64 = 600.0;
const TARGET_PUBLISH_SHARE: f64 = 0.5;

struct Args {
    benching: bool,
    profile: String,
    seed: u64,
    hours: Option<u32>,
    scaling: bool,
    latency_secs: f64,
    latency_only: bool,
    /// `kubefacts process` instances sharing the input in the exactly-once phase.
    instances: usize,
}

impl Args {
    fn parse() -> Self {
        let argv: Vec<String> = std::env::args().collect();
        let benching = argv.iter().any(|a| a == "--bench");
        let value = |flag: &str| argv.iter().position(|a| a == flag).and_then(|i| argv.get(i + 1)).cloned();
        Args {
            benching,
            profile: value("--profile").unwrap_or_else(|| if benching { "medium" } else { "small" }.into()),
            seed: value("--seed").map_or(1, |s| s.parse().expect("--seed takes an integer")),
            // Under `cargo test` (a debug build) two hours of the small fleet check every phase.
            hours: value("--hours")
                .map(|h| h.parse().expect("--hours takes an integer"))
                .or((!benching).then_some(2)),
            scaling: benching && !argv.iter().any(|a| a == "--no-scaling"),
            latency_secs: if benching { 30.0 } else { 3.0 },
            latency_only: argv.iter().any(|a| a == "--latency-only"),
            // The large fleet is what several instances are for: two share its input unless
            // told otherwise.
            instances: value("--instances")
                .map(|n| n.parse().expect("--instances takes an integer"))
                .unwrap_or(if value("--profile").as_deref() == Some("large") { 2 } else { 1 }),
        }
    }
}

fn main() {
    let args = Args::parse();
    let started = Instant::now();
    let env = Env::from_env("suite", PARTITIONS);
    let codec = Codec::new(None).unwrap();
    let config = PipelineConfig::embedded_default().unwrap();
    let work = repo_path(".cache/bench");
    fs::create_dir_all(&work).unwrap();
    let mut figures = serde_json::Map::new();
    println!(
        "kubefacts benchmark suite — profile {}, seed {}, {} cores, kubefacts {}\n",
        args.profile,
        args.seed,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        env!("CARGO_PKG_VERSION")
    );

    // 0. The trace: written to a file (what `publish` reads), timed.
    let profile = simulate::profile(&args.profile).unwrap();
    let hours = args.hours.unwrap_or(profile.default_hours);
    if args.latency_only {
        // The noisiest figure, alone and quick (~40 s per pipeline): `-- --latency-only`.
        for (name, target) in [
            ("the default pipeline", Target::Kubefacts("")),
            ("[runs] alone", Target::Kubefacts(RUNS_ALONE)),
            ("the Kafka Streams anchor", Target::Streams),
        ] {
            let l =
                measure_latency(&env, &codec, &config, &profile, hours, args.seed, args.latency_secs, target);
            println!("latency at {:.0} observations/s, {name}: {}", l.rate, l.summary());
        }
        return;
    }
    let trace_path = work.join(format!("{}-seed{}-{hours}h.jsonl", profile.name, args.seed));
    let sim = write_trace(&profile, hours, args.seed, &trace_path);
    println!(
        "0. simulate: {} entries, {:.0} MiB of trace in {:.1} s ({:.0} entries/s) → {}",
        sim.entries,
        sim.bytes as f64 / 1_048_576.0,
        sim.secs,
        sim.entries as f64 / sim.secs,
        trace_path.display()
    );
    figures.insert(
        "simulate".into(),
        json!({"profile": profile.name, "hours": hours, "seed": args.seed, "entries": sim.entries,
               "bytes": sim.bytes, "secs": sim.secs}),
    );

    // The observations, in memory, for the record size and the driver.
    let inputs = observe(&codec, &config, PARTITIONS, simulate::simulate(&profile, hours, args.seed));
    let observations = inputs.records;
    let record_size = (inputs.value_bytes as f64 / observations as f64).round() as usize;
    println!(
        "   {observations} observations (markers on every partition counted once per partition), \
         {record_size} B average value\n"
    );

    // 1. The broker's ceiling at that record size and partition count.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let perf_topic = env.create_topic(&rt, "bench-suite-perf", &[]);
    let perf_records = if args.benching { observations.clamp(1_000_000, 5_000_000) } else { 20_000 };
    let perf = producer_performance(&env, &perf_topic, perf_records, record_size, &[]);
    println!(
        "1. ProducerPerformance, {record_size} B records, {PARTITIONS} partitions  {:>10.0} records/s  ({perf_records} records; {})",
        perf.steady, perf.summary
    );
    figures.insert(
        "producer_performance".into(),
        json!({"record_size": record_size, "records": perf_records, "records_per_sec": perf.steady}),
    );

    // 2. `kubefacts publish` of the trace.
    let prefix = format!("{}.", unique("bench-suite"));
    let pipeline = work.join(format!("{}pipeline.toml", prefix));
    let app = prefix.trim_end_matches('.').to_owned();
    fs::write(&pipeline, pipeline_toml(&prefix, "", &app, "")).unwrap();
    let published = publish(&env, &trace_path, &pipeline);
    println!(
        "2. kubefacts publish of the trace                 {:>10.0} records/s  ({:.0}% of 1; {} records in {:.1} s, {:.0} trace entries/s)",
        published.records_per_sec,
        100.0 * published.records_per_sec / perf.steady,
        published.records,
        published.secs,
        published.entries_per_sec
    );
    figures.insert(
        "publish".into(),
        json!({"records": published.records, "secs": published.secs,
               "records_per_sec": published.records_per_sec, "entries_per_sec": published.entries_per_sec,
               "share_of_producer_performance": published.records_per_sec / perf.steady}),
    );

    // 3. `kubefacts process`, exactly once, over the published input.
    let topics = TopicsConfig { prefix: prefix.clone(), ..Default::default() };
    let runs_records =
        (inputs.inputs.topic(InputTopic::Jobs).len() + inputs.inputs.topic(InputTopic::Pods).len()) as i64;
    let limit_secs = if args.benching { 900 } else { 180 };
    // A backlog run of `inst`, and the runs it filed on `facts`.
    let backlog = |insts: Vec<Instance>, stages: &Stages, facts: &str| {
        let processed = process_backlog(insts, &env, stages, runs_records, limit_secs);
        (processed, committed_records(&env, facts))
    };
    let instances: Vec<Instance> =
        (0..args.instances).map(|i| Instance::start(&env, &pipeline, &format!("p{i}"))).collect();
    let (processed, filed) =
        backlog(instances, &Stages::kubefacts(&app, &topics), &topics.full(&topics.job_run_facts));
    println!(
        "3. kubefacts process (runs → journal), exactly once {:>8.0} observations/s  ({:.0}% of 1; all stages caught up {:.1} s after the first commit; {} instance(s))",
        processed.rate,
        100.0 * processed.rate / perf.steady,
        processed.secs,
        args.instances
    );
    // What that run left on Kafka: the journal's largest record against its limit, and the
    // state [runs] keeps per tracked Job as its changelogs hold it.
    let on_kafka = OnKafka::read(&env, &app, &topics.full(&topics.job_runs));
    println!(
        "   on Kafka: largest job-runs record {} B (max_record_bytes {} B); [runs] state {:.0} B per tracked Job ({} Jobs)",
        on_kafka.largest_journal_record,
        config.journal.max_record_bytes,
        on_kafka.runs_state_bytes as f64 / on_kafka.tracked_jobs.max(1) as f64,
        on_kafka.tracked_jobs
    );
    // 6. Restore: a new instance restores every store from its changelog before it reads.
    // Every stage logs its restore; waiting for two took the two smallest once the default
    // pipeline had five.
    let restore = restore_all(&env, &pipeline, config.process.stages.len());

    // 3b. `[runs]` + `[journal]` alone, and 3c. the Kafka Streams anchor doing the same shape
    // of work, over the same backlog: each its own application, from the first offset.
    let rj_app = format!("{app}-rj");
    let rj_pipeline = work.join(format!("{prefix}runs-journal.toml"));
    fs::write(&rj_pipeline, pipeline_toml(&prefix, "rj.", &rj_app, RUNS_AND_JOURNAL)).unwrap();
    let rj_topics = PipelineConfig::load(&rj_pipeline).unwrap().topics;
    let (runs_journal, rj_filed) = backlog(
        vec![Instance::start(&env, &rj_pipeline, "rj")],
        &Stages::kubefacts(&rj_app, &rj_topics),
        &rj_topics.full(&rj_topics.job_run_facts),
    );
    // The anchor keeps a window as one value (as `job-runs.v1` did): on the large fleet a
    // window outgrows the broker's record limit and the anchor stops. Its figures are then
    // NaN (null in the JSON), and the run goes on with kubefacts' own.
    let ks_app = format!("{app}-streams");
    let anchor = try_process_backlog(
        vec![Instance::start_streams(&env, &config, &prefix, &ks_app)],
        &env,
        &Stages::streams(&ks_app, &topics),
        runs_records,
        limit_secs,
    );
    let (streams, ks_filed, anchor_failed) = match anchor {
        Ok(p) => (p, committed_records(&env, &format!("{prefix}{STREAMS_FACTS}")), None),
        Err(why) => (Processed { rate: f64::NAN, secs: f64::NAN, peak_rss_bytes: 0 }, 0, Some(why)),
    };
    println!(
        "   … [runs] + [journal] alone, exactly once          {:>8.0} observations/s  ({:.0}% of 1; caught up {:.1} s after the first commit)",
        runs_journal.rate,
        100.0 * runs_journal.rate / perf.steady,
        runs_journal.secs
    );
    match &anchor_failed {
        None => println!(
            "   Kafka Streams anchor (exactly_once_v2)            {:>8.0} observations/s  ({:.0}% of 1; caught up {:.1} s after the first commit)",
            streams.rate,
            100.0 * streams.rate / perf.steady,
            streams.secs
        ),
        Some(why) => println!("   Kafka Streams anchor (exactly_once_v2)            FAILED: {why}"),
    }
    println!(
        "   runs filed: default pipeline {filed}, [runs] + [journal] {rj_filed}, Kafka Streams anchor {ks_filed}"
    );

    // The same load against each target, one after the other.
    let latency_of = |target| {
        measure_latency(&env, &codec, &config, &profile, hours, args.seed, args.latency_secs, target)
    };
    let latency = latency_of(Target::Kubefacts(""));
    println!(
        "   observation-to-output latency at {:.0} observations/s: {} \
         (from sending the Job observation that finished a run to its fact being readable, read_committed)",
        latency.rate,
        latency.summary()
    );
    // The same with `[runs]` alone: what the journal's work on the same cores costs.
    let alone = latency_of(Target::Kubefacts(RUNS_ALONE));
    println!("   … with [runs] alone (no [journal] in the process):          {}", alone.summary());
    // An anchor that could not hold this fleet's windows is not measured again.
    let ks_latency = match anchor_failed {
        None => latency_of(Target::Streams),
        Some(_) => Latency::none(),
    };
    println!("   … the Kafka Streams anchor:                                  {}", ks_latency.summary());
    let latency_json = |l: &Latency| json!({"offered_per_sec": l.rate, "samples": l.samples, "p50_ms": l.p50, "p99_ms": l.p99, "max_ms": l.max, "p99_second_half_ms": l.p99_late});
    figures.insert(
        "process".into(),
        json!({"observations_per_sec": processed.rate, "secs": processed.secs,
               "share_of_producer_performance": processed.rate / perf.steady,
               "share_of_kafka_streams": processed.rate / streams.rate,
               "peak_rss_bytes": processed.peak_rss_bytes, "runs_filed": filed, "instances": args.instances,
               "largest_journal_record": on_kafka.largest_journal_record,
               "state_bytes_per_tracked_job_on_kafka": on_kafka.runs_state_bytes as f64 / on_kafka.tracked_jobs.max(1) as f64,
               "latency": latency_json(&latency), "latency_runs_alone": latency_json(&alone)}),
    );
    figures.insert(
        "process_runs_journal".into(),
        json!({"observations_per_sec": runs_journal.rate, "secs": runs_journal.secs,
               "share_of_producer_performance": runs_journal.rate / perf.steady,
               "share_of_kafka_streams": runs_journal.rate / streams.rate,
               "peak_rss_bytes": runs_journal.peak_rss_bytes, "runs_filed": rj_filed}),
    );
    figures.insert(
        "kafka_streams".into(),
        json!({"observations_per_sec": streams.rate, "secs": streams.secs,
               "share_of_producer_performance": streams.rate / perf.steady,
               "peak_rss_bytes": streams.peak_rss_bytes, "runs_filed": ks_filed,
               "latency": latency_json(&ks_latency)}),
    );
    let side_by_side = SideBySide {
        perf: perf.steady,
        streams: (&streams, &ks_latency),
        runs_journal: &runs_journal,
        default: (&processed, &latency),
    };

    // 4. and 5. `[runs]` + `[journal]` (the stages the target names) in the in-memory
    // driver, one core, and their state; then every default stage, for comparison.
    let all_stages = in_memory(&codec, &config, &config.process.stages, &inputs);
    let driver = in_memory(&codec, &config, &runs_and_journal(&config), &inputs);
    println!(
        "4. in-memory driver (runs → journal), one core    {:>10.0} observations/s  ({observations} observations in {:.1} s)",
        driver.rate, driver.secs
    );
    println!(
        "   … every default stage ({}), one core          {:>10.0} observations/s",
        config.process.stages.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "),
        all_stages.rate
    );
    // What the journal writes per run filed: the run's own datum once in a page, plus its
    // share of the summaries (an emission appends, never rewrites).
    println!(
        "   the journal wrote {:.1} MiB of summaries and pages for {} runs: {:.0} B per run filed",
        driver.journal_bytes as f64 / 1_048_576.0,
        driver.runs_filed,
        driver.journal_bytes as f64 / driver.runs_filed.max(1) as f64
    );
    println!(
        "5. peak memory of kubefacts process              {:>10.0} MiB\n   state per tracked Job                          {:>10.0} B  \
         ([runs], all stores: {:.1} MiB for {} Jobs; the jobs store alone {:.0} B per Job)",
        processed.peak_rss_bytes as f64 / 1_048_576.0,
        driver.state_bytes as f64 / driver.tracked_jobs.max(1) as f64,
        driver.state_bytes as f64 / 1_048_576.0,
        driver.tracked_jobs,
        driver.jobs_store_bytes as f64 / driver.tracked_jobs.max(1) as f64
    );
    println!(
        "6. restore of all state from the changelogs       {:>10.0} records/s  ({} records in {:.1} s)",
        restore.records as f64 / restore.secs.max(1e-3),
        restore.records,
        restore.secs
    );
    side_by_side.print(observations);

    figures.insert(
        "driver".into(),
        json!({"observations_per_sec": driver.rate, "secs": driver.secs, "observations": observations,
               "all_stages_observations_per_sec": all_stages.rate,
               "runs_filed": driver.runs_filed, "journal_bytes": driver.journal_bytes,
               "journal_bytes_per_run": driver.journal_bytes as f64 / driver.runs_filed.max(1) as f64,
               "tracked_jobs": driver.tracked_jobs, "state_bytes": driver.state_bytes,
               "state_bytes_per_tracked_job": driver.state_bytes as f64 / driver.tracked_jobs.max(1) as f64}),
    );
    figures.insert(
        "restore".into(),
        json!({"records": restore.records, "secs": restore.secs,
               "records_per_sec": restore.records as f64 / restore.secs.max(1e-3)}),
    );

    // How the cost grows with the fleet.
    if args.scaling {
        let mut rows = Vec::new();
        for name in simulate::PROFILES {
            let p = simulate::profile(name).unwrap();
            let started = Instant::now();
            let inputs =
                observe(&codec, &config, PARTITIONS, simulate::simulate(&p, SCALING_HOURS, args.seed));
            let observe_secs = started.elapsed().as_secs_f64();
            let n = inputs.records;
            let d = in_memory(&codec, &config, &runs_and_journal(&config), &inputs);
            rows.push((name, n, observe_secs, d));
        }
        println!(
            "\nscaling ({SCALING_HOURS} h of each fleet, in memory, one core; linear cost = flat µs per run):"
        );
        // Per observation is skewed by the mix: heartbeats go to every partition of every
        // topic whatever the fleet's size, so most of a small fleet's observations are cheap
        // heartbeats. Per finished run is the measure of growth with the fleet.
        println!(
            "  {:<8} {:>12} {:>8} {:>16} {:>16} {:>16} {:>12} {:>14}",
            "profile",
            "observations",
            "runs",
            "observe ns/obs",
            "stages ns/obs",
            "stages µs/run",
            "state B/Job",
            "journal B/run"
        );
        let per_run = |d: &Driven| d.secs * 1e6 / d.runs_filed.max(1) as f64;
        let base = per_run(&rows[0].3);
        let mut scaling = Vec::new();
        for (name, n, observe_secs, d) in &rows {
            let ns = 1e9 / d.rate;
            println!(
                "  {name:<8} {n:>12} {:>8} {:>16.0} {ns:>16.0} {:>16.0} {:>12.0} {:>14.0}   ({:.2}× small's cost per run)",
                d.runs_filed,
                observe_secs * 1e9 / *n as f64,
                per_run(d),
                d.state_bytes as f64 / d.tracked_jobs.max(1) as f64,
                d.journal_bytes as f64 / d.runs_filed.max(1) as f64,
                per_run(d) / base
            );
            scaling.push(json!({"profile": name, "observations": n, "journal_bytes_per_run": d.journal_bytes as f64 / d.runs_filed.max(1) as f64, "observe_ns_per_obs": observe_secs * 1e9 / *n as f64,
                                "stages_ns_per_obs": ns, "stages_us_per_run": per_run(d), "runs": d.runs_filed, "state_bytes_per_tracked_job": d.state_bytes as f64 / d.tracked_jobs.max(1) as f64}));
        }
        figures.insert("scaling".into(), Json::Array(scaling));
    }

    // Targets.
    let state_per_job = driver.state_bytes as f64 / driver.tracked_jobs.max(1) as f64;
    let journal_per_run = driver.journal_bytes as f64 / driver.runs_filed.max(1) as f64;
    let state_on_kafka = on_kafka.runs_state_bytes as f64 / on_kafka.tracked_jobs.max(1) as f64;
    let checks = [
        (
            "exactly-once rate ≥ 50% of ProducerPerformance",
            processed.rate / perf.steady >= TARGET_EOS_SHARE,
            format!("{:.0}%", 100.0 * processed.rate / perf.steady),
        ),
        (
            "in-memory ≥ 1,000,000 observations/s per core",
            driver.rate >= TARGET_DRIVER_PER_CORE,
            format!("{:.0}/s", driver.rate),
        ),
        (
            "≤ 300 B of state per tracked Job",
            state_per_job <= TARGET_STATE_BYTES_PER_JOB,
            format!("{state_per_job:.0} B"),
        ),
        (
            "p99 ≤ 250 ms at 10,000 observations/s",
            latency.p99 <= TARGET_P99_MS,
            format!("{:.0} ms", latency.p99),
        ),
        (
            "journal ≤ 600 B written per run filed",
            journal_per_run <= TARGET_JOURNAL_BYTES_PER_RUN,
            format!("{journal_per_run:.0} B"),
        ),
        (
            "publish ≥ 50% of ProducerPerformance",
            published.records_per_sec / perf.steady >= TARGET_PUBLISH_SHARE,
            format!("{:.0}%", 100.0 * published.records_per_sec / perf.steady),
        ),
        (
            "≤ 300 B of [runs] state per tracked Job on Kafka",
            state_on_kafka <= TARGET_STATE_BYTES_PER_JOB,
            format!("{state_on_kafka:.0} B"),
        ),
        (
            "every job-runs record ≤ max_record_bytes",
            on_kafka.largest_journal_record as u64 <= config.journal.max_record_bytes,
            format!("{} B", on_kafka.largest_journal_record),
        ),
    ];
    println!("\ntargets:");
    for (what, met, figure) in &checks {
        println!("  {} {what}: {figure}", if *met { "met   " } else { "MISSED" });
    }
    figures.insert(
        "targets".into(),
        Json::Object(
            checks.iter().map(|(w, m, f)| (w.to_string(), json!({"met": m, "figure": f}))).collect(),
        ),
    );

    // The record, and what changed since the last one.
    figures.insert("bench_secs".into(), json!(started.elapsed().as_secs_f64()));
    figures.insert("finished_at_ms".into(), json!(now_ms()));
    let record = Json::Object(figures);
    if args.benching {
        // Figures of another fleet size beside the medium fleet's last run.
        let medium = work.join("suite-latest-medium.json");
        if profile.name != "medium"
            && let Ok(Ok(m)) = fs::read_to_string(&medium).map(|t| serde_json::from_str::<Json>(&t))
        {
            beside(&m, &record, profile.name);
        }
        fs::write(
            work.join(format!("suite-latest-{}.json", profile.name)),
            serde_json::to_string_pretty(&record).unwrap(),
        )
        .unwrap();
        let latest = work.join("suite-latest.json");
        if let Ok(Ok(previous)) = fs::read_to_string(&latest).map(|t| serde_json::from_str::<Json>(&t)) {
            compare(&previous, &record);
        }
        let path = work.join(format!("suite-{}.json", now_ms() / 1000));
        fs::write(&path, serde_json::to_string_pretty(&record).unwrap()).unwrap();
        fs::write(&latest, serde_json::to_string_pretty(&record).unwrap()).unwrap();
        println!("\nfigures written to {}", path.display());
    } else {
        // A check of the machinery: every phase produced something.
        assert!(processed.rate > 0.0 && driver.rate > 0.0 && latency.samples > 0 && restore.records > 0);
        // The anchor did its work: it filed runs and they reached a read_committed reader.
        assert!(
            streams.rate > 0.0 && ks_filed > 0 && ks_latency.samples > 0,
            "the Kafka Streams anchor produced no figures"
        );
        assert!(runs_journal.rate > 0.0 && rj_filed > 0, "[runs] + [journal] alone produced no figures");
    }
    let _ = fs::remove_file(&trace_path);
    println!("(suite took {:.0} s; process logs in {})", started.elapsed().as_secs_f64(), env.logs.display());
}

/// A pipeline file: topics under `prefix`, every output renamed `<variant><name>` (a second
/// application over the same input topics writes its own), application `app`, creating its
/// topics, and `stages_toml` (empty: the default stages).
fn pipeline_toml(prefix: &str, variant: &str, app: &str, stages_toml: &str) -> String {
    let mut toml = format!("[topics]\nprefix = \"{prefix}\"\n");
    if !variant.is_empty() {
        for (key, name) in output_names(&TopicsConfig::default()) {
            toml.push_str(&format!("{key} = \"{variant}{name}\"\n"));
        }
    }
    // `KUBEFACTS_BENCH_THREADS=N`: every kubefacts side runs N stream threads (default: the
    // pipeline's default, 1).
    let threads = std::env::var("KUBEFACTS_BENCH_THREADS")
        .map(|n| {
            format!(
                "num_stream_threads = {}\n",
                n.parse::<usize>().expect("KUBEFACTS_BENCH_THREADS: a number")
            )
        })
        .unwrap_or_default();
    toml + &format!(
        "[process]\napplication_id = \"{app}\"\ncreate_topics = true\npartitions = {PARTITIONS}\n{threads}{stages_toml}"
    )
}

/// The topics a pipeline writes, by their `[topics]` key.
fn output_names(t: &TopicsConfig) -> [(&'static str, &str); 10] {
    [
        ("job_run_facts", &t.job_run_facts),
        ("job_runs", &t.job_runs),
        ("journal_repartition", &t.journal_repartition),
        ("cleanup_decisions", &t.cleanup_decisions),
        ("cleanup_outcomes", &t.cleanup_outcomes),
        ("coverage_alerts", &t.coverage_alerts),
        ("session_projections", &t.session_projections),
        ("session_owner_repartition", &t.session_owner_repartition),
        ("retained_by_owner", &t.retained_by_owner),
        ("dead_letter", &t.dead_letter),
    ]
}

// ---------------------------------------------------------------------------------------
// 0. The trace and its observations

struct Simulated {
    entries: u64,
    bytes: u64,
    secs: f64,
}

fn write_trace(profile: &simulate::Profile, hours: u32, seed: u64, path: &Path) -> Simulated {
    let started = Instant::now();
    let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(path).unwrap());
    let mut entries = 0u64;
    for entry in simulate::simulate(profile, hours, seed) {
        entry.write_line(&mut out).unwrap();
        entries += 1;
    }
    out.flush().unwrap();
    drop(out);
    Simulated { entries, bytes: fs::metadata(path).unwrap().len(), secs: started.elapsed().as_secs_f64() }
}

// ---------------------------------------------------------------------------------------
// 2. publish

struct Published {
    records: u64,
    secs: f64,
    records_per_sec: f64,
    entries_per_sec: f64,
}

fn publish(env: &Env, trace: &Path, pipeline: &Path) -> Published {
    let started = Instant::now();
    let out = Command::new(&env.bin)
        .args([
            "publish",
            "--bootstrap",
            &env.bootstrap,
            "--create-topics",
            "--partitions",
            &PARTITIONS.to_string(),
            // A finite input: end it as a quiet cluster would, so every record is processed.
            "--finish",
        ])
        .arg("--config")
        .arg(pipeline)
        .arg("--input")
        .arg(trace)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "publish failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // "publish: … → N records, … in S s (E entries/s, R records/s)"
    let line = stdout.lines().find(|l| l.starts_with("publish:")).unwrap_or_else(|| panic!("{stdout}"));
    let number_before = |marker: &str| -> f64 {
        let end = line.find(marker).unwrap_or_else(|| panic!("no {marker:?} in {line:?}"));
        line[..end].rsplit([' ', '(']).next().unwrap().parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))
    };
    let records = number_before(" records,") as u64;
    Published {
        records,
        secs: started.elapsed().as_secs_f64(),
        records_per_sec: number_before(" records/s"),
        entries_per_sec: number_before(" entries/s"),
    }
}

// ---------------------------------------------------------------------------------------
// 3. process, 5. peak memory, 6. restore

struct Instance {
    /// What runs: `kubefacts process` or the Kafka Streams anchor.
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Instance {
    fn start(env: &Env, pipeline: &Path, instance: &str) -> Self {
        let mut command = Command::new(&env.bin);
        command
            .args(["process", "--instance-id", instance, "--bootstrap", &env.bootstrap, "--config"])
            .arg(pipeline)
            .env(
                "RUST_LOG",
                std::env::var("KUBEFACTS_BENCH_LOG").unwrap_or_else(|_| "kubefacts=info".into()),
            );
        Self::spawn("kubefacts process", command, env.logs.join(format!("process-{instance}.log")))
    }

    /// The Kafka Streams anchor (benches/anchors/kafka-streams, built by scripts/infra/up.sh)
    /// as application `app` over the input topics under `prefix`, with kubefacts' commit
    /// interval and one stream thread per core.
    fn start_streams(env: &Env, config: &PipelineConfig, prefix: &str, app: &str) -> Self {
        let classpath = broker::required("KUBEFACTS_BENCH_STREAMS_CLASSPATH");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut command = Command::new(&env.java);
        command
            .args([STREAMS_HEAP[0], STREAMS_HEAP[1], "-cp", &classpath, "io.kubefacts.anchor.RunsJournal"])
            .args(["--bootstrap", &env.bootstrap, "--prefix", prefix, "--application-id", app])
            .arg("--schemas")
            .arg(repo_path("schemas"))
            .arg("--window-schemas")
            .arg(repo_path("benches/anchors/kafka-streams/schemas"))
            .args(["--commit-interval-ms", &config.process.commit_interval_ms.to_string()])
            .args(["--threads", &cores.to_string()])
            .args(["--window-ms", &config.journal.window_length_ms.to_string()]);
        Self::spawn("the Kafka Streams anchor", command, env.logs.join(format!("{app}.log")))
    }

    fn spawn(name: &'static str, mut command: Command, log: PathBuf) -> Self {
        let what = format!("{command:?}");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Instance { name, child, log }
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn check_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited ({status}); log {}:\n{}", self.name, self.log.display(), self.log_text());
        }
    }

    /// Why it exited, if it did: its status and the first exception or error line of its log.
    fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().unwrap()?;
        let text = self.log_text();
        let line = (text.lines().find(|l| l.contains("Exception:")))
            .or_else(|| text.lines().find(|l| l.contains("ERROR") || l.starts_with("error")))
            .unwrap_or("");
        Some(format!("{} exited ({status}): {} (log {})", self.name, line.trim(), self.log.display()))
    }

    /// Peak resident memory so far (`VmHWM`), bytes.
    fn peak_rss_bytes(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// The "tasks assigned and restored" lines: their count, the records restored and the
    /// time restoring (ms), both summed: a stream thread restores its stages' tasks one
    /// after another (until 2026-12-04 the suite took the longest line, from when each
    /// stage ran a thread of its own, which overstated the rate).
    fn restores(&self) -> (usize, u64, u64) {
        let text = self.log_text();
        let field = |l: &str, name: &str| -> u64 {
            l.split(&format!("{name}="))
                .nth(1)
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("tasks assigned and restored")).collect();
        let ms = lines.iter().map(|l| field(l, "ms")).sum();
        (lines.len(), lines.iter().map(|l| field(l, "restored")).sum(), ms)
    }

    fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Processed {
    rate: f64,
    secs: f64,
    peak_rss_bytes: u64,
}

/// Sum of committed offsets of `group` over `topics`.
fn committed(poller: &BaseConsumer, group_topics: &[(String, i32)]) -> i64 {
    let mut tpl = TopicPartitionList::new();
    for (t, partitions) in group_topics {
        for p in 0..*partitions {
            tpl.add_partition(t, p);
        }
    }
    poller.committed_offsets(tpl, Duration::from_secs(5)).map_or(0, |c| {
        c.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum()
    })
}

fn end_offsets(poller: &BaseConsumer, topics: &[(String, i32)]) -> i64 {
    topics
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| (t, p)))
        .map(|(t, p)| {
            // A failed look-up counted as 0 once ended the backlog phase before it began.
            let mut tries = 0;
            loop {
                match poller.fetch_watermarks(t, p, Duration::from_secs(10)) {
                    Ok((_, high)) => break high,
                    Err(e) if tries < 5 => {
                        tries += 1;
                        eprintln!("end offset of {t}/{p}: {e}; trying again");
                    }
                    Err(e) => panic!("end offset of {t}/{p}: {e}"),
                }
            }
        })
        .sum()
}

/// What a backlog run is measured by: the consumer group and input topics of its first
/// stage (from its first commit: the rate) and of the stage behind the repartition topic
/// (once that has committed its input too, the run has caught up).
struct Stages {
    first: (String, Vec<(String, i32)>),
    second: (String, Vec<(String, i32)>),
}

impl Stages {
    /// `[runs]` and `[journal]` of a kubefacts application: both commit in its one group.
    fn kubefacts(app: &str, topics: &TopicsConfig) -> Self {
        Stages {
            first: (app.to_owned(), input_topics(topics)),
            second: (app.to_owned(), vec![(topics.full(&topics.journal_repartition), PARTITIONS)]),
        }
    }

    /// The Kafka Streams anchor: one group, its repartition topic named by the DSL.
    fn streams(app: &str, topics: &TopicsConfig) -> Self {
        Stages {
            first: (app.to_owned(), input_topics(topics)),
            second: (app.to_owned(), vec![(format!("{app}-journal-repartition"), PARTITIONS)]),
        }
    }
}

/// The jobs and pods topics, what `[runs]` and the anchor's fold read.
fn input_topics(topics: &TopicsConfig) -> Vec<(String, i32)> {
    vec![(InputTopic::Jobs.topic_name(topics), PARTITIONS), (InputTopic::Pods.topic_name(topics), PARTITIONS)]
}

/// Runs `inst` over the published backlog until both stages have committed their whole
/// input; the rate is input observations over the time from the first commit of the first
/// stage to the last commit of the second (start-up and restore left out).
fn process_backlog(
    insts: Vec<Instance>,
    env: &Env,
    stages: &Stages,
    runs_records: i64,
    limit_secs: u64,
) -> Processed {
    try_process_backlog(insts, env, stages, runs_records, limit_secs).unwrap_or_else(|e| panic!("{e}"))
}

/// [`process_backlog`], or why an instance exited before the backlog was processed.
fn try_process_backlog(
    mut insts: Vec<Instance>,
    env: &Env,
    stages: &Stages,
    runs_records: i64,
    limit_secs: u64,
) -> Result<Processed, String> {
    let poller = |group: &str| -> BaseConsumer {
        env.client().set("group.id", group).set("enable.auto.commit", "false").create().unwrap()
    };
    let (first_group, first_inputs) = (poller(&stages.first.0), &stages.first.1);
    let (second_group, second_inputs) = (poller(&stages.second.0), &stages.second.1);
    // The end offsets must be what publish wrote (jobs and pods, as observed in memory): a
    // short answer once ended this phase before [runs] had read a third of its input.
    let asked = Instant::now();
    let runs_total = loop {
        let total = end_offsets(&first_group, first_inputs);
        if total == runs_records || asked.elapsed() > Duration::from_secs(30) {
            break total;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        runs_total, runs_records,
        "end offsets of the jobs and pods topics against the records published"
    );
    let deadline = Instant::now() + Duration::from_secs(limit_secs);
    let mut first: Option<Instant> = None;
    let mut peak = 0;
    loop {
        for inst in &mut insts {
            if let Some(why) = inst.exited() {
                return Err(why);
            }
            peak = peak.max(inst.peak_rss_bytes());
        }
        let c = committed(&first_group, first_inputs);
        if c > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if c >= runs_total {
            // The second stage is done when its input is all committed. Its input is written
            // in transactions: each partition's log ends with a commit marker, which is not a
            // record a consumer's committed offset need pass. (The anchor's repartition topic
            // may not exist before its first run is filed.)
            let second_total = end_offsets_if_any(&second_group, second_inputs);
            if second_total > 0
                && committed(&second_group, second_inputs) >= second_total - i64::from(PARTITIONS)
            {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} did not commit its input in {limit_secs} s ({c} of {runs_total}); log {}",
            insts[0].name,
            insts[0].log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = first.unwrap().elapsed().as_secs_f64().max(1e-3);
    for inst in insts {
        peak = peak.max(inst.peak_rss_bytes());
        inst.stop();
    }
    Ok(Processed { rate: runs_total as f64 / secs, secs, peak_rss_bytes: peak })
}

/// [`end_offsets`], 0 while a topic does not exist yet.
fn end_offsets_if_any(poller: &BaseConsumer, topics: &[(String, i32)]) -> i64 {
    let exists = |t: &str| {
        poller.fetch_metadata(Some(t), Duration::from_secs(5)).is_ok_and(|m| {
            m.topics()
                .first()
                .is_some_and(|t| t.error().is_none() && t.partitions().len() as i32 >= PARTITIONS)
        })
    };
    if topics.iter().all(|(t, _)| exists(t)) { end_offsets(poller, topics) } else { 0 }
}

/// The records with a value of `topic` a read_committed consumer reads (transaction markers,
/// aborted records and forwarded stream time not counted): how many runs a backlog run filed.
fn committed_records(env: &Env, topic: &str) -> u64 {
    let reader = committed_reader(env, topic);
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| reader.fetch_watermarks(topic, p, Duration::from_secs(10)).map_or(0, |w| w.1))
        .collect();
    let (mut n, mut idle) = (0u64, Instant::now());
    loop {
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                n += u64::from(m.payload().is_some());
                idle = Instant::now();
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {
                let pos = reader.position().unwrap();
                let done = (0..PARTITIONS).all(|p| {
                    ends[p as usize] == 0
                        || pos.find_partition(topic, p).is_some_and(|e| match e.offset() {
                            Offset::Offset(o) => o >= ends[p as usize],
                            _ => false,
                        })
                });
                if done || idle.elapsed() > Duration::from_secs(10) {
                    return n;
                }
            }
        }
    }
}

/// What [`OnKafka::read`] does with each record read: (key, value).
type EachRecord<'a> = dyn FnMut(&[u8], Option<&[u8]>) + 'a;

/// What an exactly-once run left on Kafka.
struct OnKafka {
    /// The largest record (key and value) of the journal's output.
    largest_journal_record: usize,
    /// Key and value bytes of the latest record per key of every `[runs]` changelog.
    runs_state_bytes: usize,
    /// Keys of the `[runs]` jobs changelog: the Jobs it tracks.
    tracked_jobs: usize,
}

impl OnKafka {
    fn read(env: &Env, app: &str, journal: &str) -> Self {
        let records = |topic: &str, mut each: Box<EachRecord<'_>>| {
            let reader = committed_reader(env, topic);
            let ends: Vec<i64> = (0..PARTITIONS)
                .map(|p| reader.fetch_watermarks(topic, p, Duration::from_secs(10)).map_or(0, |w| w.1))
                .collect();
            let idle = Duration::from_secs(5);
            let mut last = Instant::now();
            loop {
                match reader.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        each(m.key().unwrap_or_default(), m.payload());
                        last = Instant::now();
                    }
                    Some(Err(e)) => panic!("reading {topic}: {e}"),
                    None => {
                        let pos = reader.position().unwrap();
                        let done = (0..PARTITIONS).all(|p| {
                            pos.find_partition(topic, p).is_some_and(|e| match e.offset() {
                                Offset::Offset(o) => o >= ends[p as usize],
                                _ => ends[p as usize] == 0,
                            })
                        });
                        if done || last.elapsed() > idle {
                            return;
                        }
                    }
                }
            }
        };
        let mut largest_journal_record = 0;
        records(
            journal,
            Box::new(|k, v| {
                largest_journal_record = largest_journal_record.max(k.len() + v.map_or(0, <[u8]>::len))
            }),
        );
        let metadata = committed_reader(env, journal).fetch_metadata(None, Duration::from_secs(10)).unwrap();
        let prefix = format!("{app}-runs-");
        let (mut runs_state_bytes, mut tracked_jobs) = (0, 0);
        for t in metadata
            .topics()
            .iter()
            .map(|t| t.name())
            .filter(|t| t.starts_with(&prefix) && t.ends_with("-changelog"))
        {
            let mut latest: HashMap<Vec<u8>, usize> = HashMap::new();
            records(
                t,
                Box::new(|k, v| match v {
                    Some(v) => {
                        latest.insert(k.to_vec(), k.len() + v.len());
                    }
                    None => {
                        latest.remove(k);
                    }
                }),
            );
            runs_state_bytes += latest.values().sum::<usize>();
            if t.ends_with("-jobs-changelog") {
                tracked_jobs = latest.len();
            }
        }
        Self { largest_journal_record, runs_state_bytes, tracked_jobs }
    }
}

struct Restored {
    records: u64,
    secs: f64,
}

/// Starts a fresh instance of the same application: it restores every store of every task
/// from the changelogs before it reads input (the stages log one line per assignment).
fn restore_all(env: &Env, pipeline: &Path, stages: usize) -> Restored {
    let mut inst = Instance::start(env, pipeline, "restore");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        inst.check_running();
        let (lines, records, ms) = inst.restores();
        if lines >= stages {
            inst.stop();
            // The thread restores its stages one after another: the time is their sum.
            return Restored { records, secs: ms as f64 / 1000.0 };
        }
        assert!(Instant::now() < deadline, "no restore within 600 s; log {}", inst.log.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Latency {
    rate: f64,
    samples: usize,
    p50: f64,
    p99: f64,
    max: f64,
    /// p99 of the runs finished in the second half of the load only: a lag that builds
    /// shows here higher than `p99`, a cold start (the broker's JIT, the first fetches)
    /// lower.
    p99_late: f64,
    /// Cores used while the load ran: the measured process, the broker, this bench (the
    /// load generator and the reader). Says whether the process or the machine limits.
    cores: (f64, f64, f64),
}

impl Latency {
    /// Not measured.
    fn none() -> Self {
        let nan = f64::NAN;
        Self { rate: nan, samples: 0, p50: nan, p99: nan, max: nan, p99_late: nan, cores: (nan, nan, nan) }
    }

    /// The figures after the offered load: percentiles, then where the cores went.
    fn summary(&self) -> String {
        if self.samples == 0 && self.rate.is_nan() {
            return "not measured".into();
        }
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} runs); second half p99 {:.0} ms; \
             cores used: process {:.2}, broker {:.2}, load generator {:.2}",
            self.p50,
            self.p99,
            self.max,
            self.samples,
            self.p99_late,
            self.cores.0,
            self.cores.1,
            self.cores.2
        )
    }
}

/// CPU seconds a process has used (`/proc/<pid>/stat` utime + stime, USER_HZ = 100).
fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return f64::NAN };
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (ticks(11) + ticks(12)) / 100.0
}

/// The broker's pid, as `scripts/infra/up.sh` wrote it.
fn broker_pid() -> u32 {
    fs::read_to_string(".cache/run/kafka.pid").ok().and_then(|p| p.trim().parse().ok()).unwrap_or(0)
}

/// What a latency measurement runs: `kubefacts process` with these stages (empty: the
/// default pipeline), or the Kafka Streams anchor.
enum Target {
    Kubefacts(&'static str),
    Streams,
}

/// Publishes the trace's observations at a fixed rate into a fresh pipeline and measures,
/// per run, the time from sending the Job observation that finished it to its
/// `job-run-facts` record being readable with read_committed.
#[allow(clippy::too_many_arguments)] // each a different setting of one measurement
fn measure_latency(
    env: &Env,
    codec: &Codec,
    config: &PipelineConfig,
    profile: &simulate::Profile,
    hours: u32,
    seed: u64,
    secs: f64,
    target: Target,
) -> Latency {
    let prefix = format!("{}.", unique("bench-lat"));
    let app = prefix.trim_end_matches('.').to_owned();
    let topics = TopicsConfig { prefix: prefix.clone(), ..Default::default() };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            env.client().create().unwrap();
        let specs: Vec<kubefacts::runtime::topics::TopicSpec> =
            InputTopic::ALL.iter().map(|t| topics.spec(&t.topic_name(&topics), PARTITIONS, false)).collect();
        kubefacts::runtime::topics::ensure_topics(&admin, &specs, true).await.unwrap();
    });
    // The load, simulated and admitted before it is sent: simulating the fleet as it is
    // sent took 0.4-0.6 of this machine's 2 cores, which the broker and the measured
    // process then lacked. Observations past the time the load runs are not made.
    let load: Vec<(Observation, Option<String>)> = {
        let mut observer = observer(config);
        let wanted = (secs * LATENCY_LOAD_PER_SEC) as usize + 1;
        simulate::simulate(profile, hours, seed)
            .flat_map(|entry| observer.admit(entry))
            .flat_map(|released| released.unwrap())
            .take(wanted)
            .map(|obs| {
                let finishing = finishing_job(&obs);
                (obs, finishing)
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let (inst, facts) = match target {
        Target::Kubefacts(stages_toml) => {
            let pipeline = env.logs.join(format!("{app}.toml"));
            fs::write(&pipeline, pipeline_toml(&prefix, "", &app, stages_toml)).unwrap();
            let stages = if stages_toml.is_empty() {
                config.process.stages.len()
            } else {
                stages_toml.matches("[[process.stages]]").count()
            };
            let mut inst = Instance::start(env, &pipeline, &format!("lat-{}", stages));
            while inst.restores().0 < stages {
                inst.check_running();
                assert!(Instant::now() < deadline, "no assignment in 120 s; log {}", inst.log.display());
                std::thread::sleep(Duration::from_millis(50));
            }
            (inst, topics.full(&topics.job_run_facts))
        }
        Target::Streams => {
            let mut inst = Instance::start_streams(env, config, &prefix, &format!("{app}-streams"));
            // Logged by its state listener once every task is assigned and restored.
            while !inst.log_text().contains("-> RUNNING") {
                inst.check_running();
                assert!(
                    Instant::now() < deadline,
                    "the anchor was not RUNNING in 120 s; log {}",
                    inst.log.display()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            (inst, format!("{prefix}{STREAMS_FACTS}"))
        }
    };

    // The reader, on its own thread: run UID → when its fact became readable.
    let reader = committed_reader(env, &facts);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader_thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let codec = Codec::new(None).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut seen: HashMap<String, Instant> = HashMap::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(Ok(m)) = reader.poll(Duration::from_millis(50)) {
                    let at = Instant::now();
                    if let Some(v) = m.payload() {
                        let run: JobRun = rt.block_on(codec.decode_as(v)).unwrap();
                        seen.entry(run.run_uid).or_insert(at);
                    }
                }
            }
            seen
        })
    };

    // The writer: observations at the offered load, noting when each run's finishing Job
    // observation went out.
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let load_started = Instant::now();
    let pids = [inst.child.id(), broker_pid(), std::process::id()];
    let cpu_before = pids.map(cpu_secs);
    rt.block_on(async {
        let mut publisher = kubefacts::watch::Publisher::connect(
            &kubefacts::config::kafka::Brokers::plaintext(&env.bootstrap),
            codec,
            &topics,
        )
        .await
        .unwrap();
        let started = Instant::now();
        for (n, (obs, finishing)) in load.iter().enumerate() {
            let due = started + Duration::from_secs_f64(n as f64 / LATENCY_LOAD_PER_SEC);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                tokio::time::sleep(wait).await;
            }
            publisher.publish(obs).await.unwrap();
            if let Some(uid) = finishing {
                sent.entry(uid.clone()).or_insert_with(Instant::now);
            }
            if started.elapsed().as_secs_f64() >= secs {
                break;
            }
        }
        publisher.flush().await.unwrap();
    });
    let load_secs = load_started.elapsed().as_secs_f64();
    let cores = {
        let used = pids.map(cpu_secs);
        let core = |i: usize| (used[i] - cpu_before[i]) / load_secs;
        (core(0), core(1), core(2))
    };
    // Runs filed after the load stopped wait for stream time that no longer advances; give
    // the in-flight ones a moment, then stop.
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reader_thread.join().unwrap();
    inst.stop();
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(uid, at)| {
            seen.get(uid).map(|r| r.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let half = load_started + Duration::from_secs_f64(secs / 2.0);
    let mut late: Vec<f64> = sent
        .iter()
        .filter(|(_, at)| **at >= half)
        .filter_map(|(uid, at)| {
            seen.get(uid).map(|r| r.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    late.sort_by(f64::total_cmp);
    Latency {
        rate: LATENCY_LOAD_PER_SEC,
        samples: latencies.len(),
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or(f64::NAN),
        p99_late: percentile(&late, 0.99),
        cores,
    }
}

/// The exactly-once figures of one run side by side (DESIGN §8): each as a share of the
/// broker's ceiling and of the Kafka Streams anchor over the same backlog.
struct SideBySide<'a> {
    perf: f64,
    streams: (&'a Processed, &'a Latency),
    runs_journal: &'a Processed,
    default: (&'a Processed, &'a Latency),
}

impl SideBySide<'_> {
    fn print(&self, observations: usize) {
        let ks = self.streams.0.rate;
        println!(
            "\nside by side (one run, same broker, the same published backlog of {observations} observations):\n  \
             {:<46} {:>14} {:>8} {:>9} {:>9} {:>18}",
            "", "observations/s", "% of 1", "× Streams", "peak RSS", "latency p50 / p99"
        );
        let row = |what: &str, rate: f64, rss: Option<u64>, latency: Option<&Latency>| {
            println!(
                "  {what:<46} {rate:>14.0} {:>7.0}% {:>8.2}× {:>9} {:>18}",
                100.0 * rate / self.perf,
                rate / ks,
                rss.map_or(String::new(), |b| format!("{:.0} MiB", b as f64 / 1_048_576.0)),
                latency.map_or(String::new(), |l| format!("{:.0} / {:.0} ms", l.p50, l.p99))
            )
        };
        row("ProducerPerformance (the broker's ceiling)", self.perf, None, None);
        row(
            "Kafka Streams anchor, exactly_once_v2",
            ks,
            Some(self.streams.0.peak_rss_bytes),
            Some(self.streams.1),
        );
        row(
            "kubefacts process, [runs] + [journal]",
            self.runs_journal.rate,
            Some(self.runs_journal.peak_rss_bytes),
            None,
        );
        row(
            "kubefacts process, the default pipeline",
            self.default.0.rate,
            Some(self.default.0.peak_rss_bytes),
            Some(self.default.1),
        );
    }
}

// ---------------------------------------------------------------------------------------
// 4. and 5. In memory

struct Driven {
    rate: f64,
    secs: f64,
    tracked_jobs: usize,
    state_bytes: usize,
    jobs_store_bytes: usize,
    /// Runs filed, and the bytes the journal wrote for them (every window emission).
    runs_filed: usize,
    journal_bytes: usize,
}

/// The default stages over the observations in the driver (one thread), and the state
/// `[runs]` keeps at the end: the latest changelog value per key, as a restore carries it.
/// The default pipeline's `[runs]` and `[journal]` stages.
fn runs_and_journal(config: &PipelineConfig) -> Vec<StageConfig> {
    config
        .process
        .stages
        .iter()
        .filter(|s| matches!(s.processor.as_str(), "runs" | "journal"))
        .cloned()
        .collect()
}

fn in_memory(codec: &Codec, config: &PipelineConfig, stages: &[StageConfig], observed: &Observed) -> Driven {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut logs: BTreeMap<String, MemTopic> = InputTopic::ALL
        .iter()
        .map(|&t| observed.inputs.topic(t))
        .map(|t| (t.name.clone(), t.clone()))
        .collect();
    let dead_letter = config.topics.full(&config.topics.dead_letter);
    let started = Instant::now();
    let reports =
        rt.block_on(run_all_in_memory(codec, config, stages, &mut logs, &dead_letter, PARTITIONS)).unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(logs.get(&dead_letter).is_none_or(MemTopic::is_empty), "the simulator's input dead-lettered");
    let runs = reports.iter().find(|r| r.stage == "runs").expect("the default pipeline has [runs]");
    let (mut tracked_jobs, mut state_bytes, mut jobs_store_bytes) = (0, 0, 0);
    for changelog in &runs.changelogs {
        let mut latest = BTreeMap::new();
        for r in changelog.partitions.iter().flatten() {
            match &r.value {
                Some(v) => latest.insert(r.key.clone(), v.len() + r.key.as_ref().map_or(0, Vec::len)),
                None => latest.remove(&r.key),
            };
        }
        let bytes: usize = latest.values().sum();
        state_bytes += bytes;
        if changelog.name.ends_with("-jobs-changelog") {
            tracked_jobs = latest.len();
            jobs_store_bytes = bytes;
        }
    }
    // Records with a value: forwarded stream time (a heartbeat header, no value) is no run
    // and no window.
    let bytes = |topic: &str| -> (usize, usize) {
        logs.get(&config.topics.full(topic)).map_or((0, 0), |t| {
            let records = t.partitions.iter().flatten().filter_map(|r| r.value.as_ref());
            records.fold((0, 0), |(n, b), v| (n + 1, b + v.len()))
        })
    };
    let (runs_filed, _) = bytes(&config.topics.job_run_facts);
    let (_, journal_bytes) = bytes(&config.topics.job_runs);
    Driven {
        rate: observed.records as f64 / secs,
        secs,
        tracked_jobs,
        state_bytes,
        jobs_store_bytes,
        runs_filed,
        journal_bytes,
    }
}

// ---------------------------------------------------------------------------------------

/// Prints the headline figures of the previous run beside this one's.
/// The headline figures of `now` (fleet `name`) beside the medium fleet's last run.
fn beside(medium: &Json, now: &Json, name: &str) {
    let rows: [(&str, &[&str]); 10] = [
        ("observations", &["driver", "observations"]),
        ("publish, records/s", &["publish", "records_per_sec"]),
        ("publish ÷ ProducerPerformance", &["publish", "share_of_producer_performance"]),
        ("process, exactly once, observations/s", &["process", "observations_per_sec"]),
        ("process ÷ ProducerPerformance", &["process", "share_of_producer_performance"]),
        ("process peak RSS, MiB", &["process", "peak_rss_bytes"]),
        ("p99 latency, ms", &["process", "latency", "p99_ms"]),
        ("journal bytes per run filed", &["driver", "journal_bytes_per_run"]),
        ("state per tracked Job on Kafka, B", &["process", "state_bytes_per_tracked_job_on_kafka"]),
        ("restore, records/s", &["restore", "records_per_sec"]),
    ];
    let at = |j: &Json, path: &[&str]| path.iter().fold(j, |j, k| &j[*k]).as_f64();
    println!("\n{name} fleet beside the medium fleet's last run (.cache/bench/suite-latest-medium.json):");
    println!("  {:<40} {:>14} {:>14}", "", "medium", name);
    for (label, path) in rows {
        let scale = if label.contains("MiB") { 1.0 / 1_048_576.0 } else { 1.0 };
        let show = |v: Option<f64>| {
            v.map_or(
                "-".to_owned(),
                |v| if v < 10.0 { format!("{v:.2}") } else { format!("{:.0}", v * scale) },
            )
        };
        println!("  {label:<40} {:>14} {:>14}", show(at(medium, path)), show(at(now, path)));
    }
}

fn compare(previous: &Json, now: &Json) {
    let paths = [
        ("producer_performance", "records_per_sec"),
        ("publish", "records_per_sec"),
        ("process", "observations_per_sec"),
        ("driver", "observations_per_sec"),
        ("driver", "state_bytes_per_tracked_job"),
        ("restore", "records_per_sec"),
    ];
    println!("\nagainst the previous run (.cache/bench/suite-latest.json):");
    for (section, field) in paths {
        let (Some(a), Some(b)) = (previous[section][field].as_f64(), now[section][field].as_f64()) else {
            continue;
        };
        println!("  {section}.{field:<28} {a:>12.0} → {b:>12.0}  ({:+.0}%)", 100.0 * (b - a) / a.max(1e-9));
    }
    if let (Some(a), Some(b)) =
        (previous["process"]["latency"]["p99_ms"].as_f64(), now["process"]["latency"]["p99_ms"].as_f64())
    {
        println!("  process.latency.p99_ms{:<16} {a:>12.0} → {b:>12.0}", "");
    }
}
