//! Issue 20: Kafka equals memory for every stage of the default pipeline.
//!
//! A simulated small fleet (four hours from 2026-11-01 — records a month old, which a
//! broker-default retention would delete within seconds on the test broker) is published
//! with `--finish`, then `kubefacts process` runs all five stages in two instances of two
//! stream threads each (issue 24: each thread hosts tasks of every stage), one SIGKILLed
//! three times while it holds an open transaction. Every output is read back
//! (read_committed) and compared, key by key and record by record, with `kubefacts replay
//! --finish` of the same trace: every revision of every `job-runs` window's summary (so its
//! latest, the sequence of its `is_final` flags and counts) and every page of its runs, every coverage
//! alert, session projection, retained-compute total and cleanup decision, and the run facts.
//!
//! Before the watermark across tasks (docs/RUNTIME.md), `[journal]` took the highest
//! timestamp read as stream time: on Kafka the fastest `[runs]` task closed windows with a
//! third of their runs, and `[coverage]`, forced past a quiet run-facts partition, fired for
//! CronJobs that never missed a run. Both differ from the replay here.

#[cfg(not(feature = "failpoints"))]
compile_error!(
    "these tests stop instances at failpoints: build them with `--features failpoints` (./scripts/test.sh does)"
);

mod support;

use std::time::{Duration, Instant};

use kubefacts::codec::Codec;
use serde_json::Value;
use support::{
    Scratch, Stage, all_committed, default_stages, infra, is_stopped,
    outputs::{ByKey, compare_outputs},
    read_records, simulate_small, wait_all_committed,
};

const PARTITIONS: &str = "3";
const HOURS: &str = "4";
const SEED: &str = "20";

/// Per window: how many revisions were final, and how many of those added runs after the
/// first final one (runs filed late).
fn finality(windows: &ByKey) -> (usize, usize, usize) {
    let (mut finalized, mut revised_while_final) = (0, 0);
    // A window's summaries (part 0) are its revisions; pages have no summary.
    let summaries = || windows.values().filter(|r| r.iter().all(|w| w["summary"].is_object()));
    for revisions in summaries() {
        let mut final_runs: Option<i64> = None;
        for w in revisions.iter().map(|w| &w["summary"]) {
            let runs = w["runs"].as_i64().unwrap_or(0);
            if w["is_final"] == Value::Bool(true) {
                match final_runs {
                    None => finalized += 1,
                    Some(n) if runs > n => revised_while_final += 1,
                    Some(_) => {}
                }
                final_runs = Some(runs);
            }
        }
    }
    (summaries().count(), finalized, revised_while_final)
}

#[test]
fn every_stage_on_kafka_equals_the_replay_through_sigkills() {
    let started = Instant::now();
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    // The default pipeline (every stage) on this test's topics; small transactions, so an
    // instance commits many times and a failpoint lands mid-input; two stream threads per
    // instance, so four members share three partitions of every topic (one thread of the
    // four is idle, and the pods a thread reads feed both `[runs]` and `[sessions]`); a
    // buffer bound of 20 records per partition, so over the published backlog partitions are
    // paused and resumed all the time and the merge must still never wait on a paused one.
    let scratch = Scratch::new(
        "stages",
        "session_timeout_ms = 6000\nmax_batch_records = 100\nnum_stream_threads = 2\n\
         buffered_records_per_partition = 20\npurge_interval_ms = 500\n",
    );
    let (dir, prefix, app, config) =
        (scratch.path(), scratch.prefix.clone(), scratch.app.clone(), scratch.config.clone());
    let config_arg = config.to_str().unwrap();
    let trace = dir.join("trace.jsonl");
    let trace_arg = trace.to_str().unwrap();
    simulate_small(HOURS, SEED, &trace, &[]);
    let replay_dir = dir.join("replay");
    support::publish_and_replay(bootstrap, PARTITIONS, trace_arg, config_arg, replay_dir.to_str().unwrap());
    println!("published and replayed after {:?}", started.elapsed());

    let topic = |name: &str| format!("{prefix}{name}");
    let stages: Vec<Stage> = default_stages(&prefix, &app);

    let processes = support::Processes::new(dir.join("logs"), bootstrap, &config);
    let start = |instance: &str, extra: &[&str]| processes.start(instance, extra);
    let tails = || processes.tails();
    let seed = std::env::var("KUBEFACTS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("kill schedule seed: KUBEFACTS_TEST_SEED={seed}");
    let mut rng = seed | 1;
    let mut below = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };

    // b runs throughout; a joins, stops itself inside a transaction (outputs, changelog and
    // offsets sent, the commit not) and is SIGKILLed there, three times; then a for good.
    let mut b = start("b", &[]);
    let mut kills = 0;
    for _ in 0..3 {
        let failpoint = format!("before-commit:{}", 2 + below(6));
        let mut a = start("a", &["--failpoint", &failpoint]);
        let deadline = Instant::now() + Duration::from_secs(120);
        let pid = a.id();
        loop {
            if is_stopped(pid) {
                kills += 1;
                break;
            }
            assert!(a.try_wait().unwrap().is_none(), "a exited before its failpoint\n{}", tails());
            if all_committed(bootstrap, &stages).is_ok() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        a.kill().unwrap();
        a.wait().unwrap();
        println!("SIGKILLed a ({failpoint}) after {:?}", started.elapsed());
    }
    let mut a = start("a", &[]);
    wait_all_committed(bootstrap, &stages, &mut [("b", &mut b), ("a", &mut a)], 300, &tails);
    println!("every stage committed its input after {:?}", started.elapsed());
    // Retention would have deleted the month-old records by now, had a topic kept them for
    // the broker's default week (the test broker checks every second).
    std::thread::sleep(Duration::from_secs(3));

    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The alert history below is only worth comparing if compaction cannot thin it: the
    // state-change log is a log.
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let alerts = topic("coverage-alerts.v1");
    let described = rt
        .block_on(
            admin.describe_configs(&[rdkafka::admin::ResourceSpecifier::Topic(&alerts)], &Default::default()),
        )
        .unwrap()
        .remove(0)
        .unwrap();
    let policy = described.get("cleanup.policy").and_then(|e| e.value.clone());
    assert_eq!(policy.as_deref(), Some("delete"), "{alerts} is a log of state changes, never compacted");
    let (mut failures, compared) = compare_outputs(
        &rt,
        &codec,
        bootstrap,
        &replay_dir,
        &prefix,
        |name, want| {
            if name == "job-runs.v2" {
                let (windows, finalized, late) = finality(want);
                assert!(finalized >= 3, "{finalized} of {windows} windows went final in the replay");
                println!(
                    "job-runs: {windows} windows, {finalized} final, {late} revised while final (late in the input)"
                );
            }
        },
    );
    let dead = read_records(bootstrap, &topic("dead-letter.v1"));
    if !dead.is_empty() {
        failures.push(format!("{} dead letters on Kafka", dead.len()));
    }
    let _ = (a.kill(), b.kill());
    println!("compared with the replay: {}", compared.join("; "));
    assert!(failures.is_empty(), "Kafka != replay (seed {seed}):\n{}\n{}", failures.join("\n"), tails());
    assert_eq!(
        kills,
        3,
        "only {kills} of 3 SIGKILLs hit an open transaction: the test proved less\n{}",
        tails()
    );
    println!("every stage equal to the replay after {:?}", started.elapsed());
}
