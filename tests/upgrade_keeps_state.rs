//! Upgrade with state: the previous release's binary (built from its commit,
//! `support::previous_release`) runs the default pipeline over a simulated small fleet and
//! is stopped (SIGTERM, as a rolling Deployment update stops it) a third of the way
//! through; this build's binary continues under the same instance id. It must restore every
//! stage's state from the changelogs the previous release wrote, and every output, read
//! committed, must equal `kubefacts replay` of the whole trace.
//!
//! On the single plaintext broker: the previous release predates the `[kafka]` section.

#[cfg(not(feature = "failpoints"))]
compile_error!("build the tests with `--features failpoints` (./scripts/test.sh does)");

mod support;

use std::time::{Duration, Instant};

use kubefacts::codec::Codec;
use support::{
    Processes, Scratch, committed_positions, default_stages, infra,
    outputs::compare_outputs,
    previous_release::{self, PREVIOUS_RELEASE},
    read_records, simulate_small, wait_all_committed,
};

/// (committed, end) summed over the `runs` stage's input partitions.
fn runs_progress(bootstrap: &str, stages: &[support::Stage]) -> (i64, i64) {
    let positions = committed_positions(bootstrap, &stages[..1]).unwrap_or_default();
    positions.iter().fold((0, 0), |(c, e), p| (c + p.committed, e + p.end))
}

/// The largest `N` of the `N restored` counts logged for the `runs` stage in `log`.
fn restored_by_runs(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("stage=runs") || l.contains("process: runs:"))
        .filter_map(|l| l.split(" restored").next()?.rsplit(' ').next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn a_pipeline_stopped_by_the_previous_release_is_continued_by_this_one_from_its_state() {
    let started = Instant::now();
    let old = previous_release::binary();
    println!("previous release {PREVIOUS_RELEASE} ready after {:?}", started.elapsed());
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    let scratch = Scratch::new("upgrade", "max_batch_records = 50\n");
    let (dir, prefix, app) = (scratch.path(), scratch.prefix.clone(), scratch.app.clone());
    let trace = dir.join("trace.jsonl");
    simulate_small("6", "26", &trace, &[]);
    let replay_dir = dir.join("replay");
    support::publish_and_replay(
        bootstrap,
        "3",
        trace.to_str().unwrap(),
        scratch.config_arg(),
        replay_dir.to_str().unwrap(),
    );

    let stages = default_stages(&prefix, &app);
    let processes = Processes::new(dir.join("logs"), bootstrap, &scratch.config);
    let tails = || processes.tails();

    // 1. The previous release, stopped a third of the way through the runs stage's input.
    let mut previous = processes.start_binary(&old, "a", &[]);
    let deadline = Instant::now() + Duration::from_secs(300);
    let (committed, end) = loop {
        assert!(previous.try_wait().unwrap().is_none(), "the previous release exited\n{}", tails());
        let (committed, end) = runs_progress(bootstrap, &stages);
        if end > 0 && committed * 3 >= end {
            break (committed, end);
        }
        assert!(
            Instant::now() < deadline,
            "the previous release committed {committed} of {end} in 300 s\n{}",
            tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let status = previous.terminate(60);
    assert!(status.success(), "the previous release exited with {status} after SIGTERM\n{}", tails());
    let (stopped_at, _) = runs_progress(bootstrap, &stages);
    println!(
        "stopped the previous release at {committed}..{stopped_at} of {end} runs inputs after {:?}",
        started.elapsed()
    );
    assert!(
        stopped_at < end,
        "the previous release finished the trace before it was stopped: use a longer trace"
    );
    let log = processes.logs.join("a.log");
    let before = std::fs::read_to_string(&log).unwrap_or_default().len();

    // 2. This build, same instance, from the state the previous release left.
    let mut current = processes.start("a", &[]);
    wait_all_committed(bootstrap, &stages, &mut [("a", &mut current)], 600, &tails);
    println!("this build committed every input after {:?}", started.elapsed());
    let status = current.terminate(60);
    assert!(status.success(), "this build exited with {status} after SIGTERM\n{}", tails());
    let after = std::fs::read_to_string(&log).unwrap();
    let restored = restored_by_runs(&after[before..]);
    assert!(restored > 0, "this build restored nothing of the runs stage's state\n{}", &after[before..]);

    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (mut failures, compared) = compare_outputs(&rt, &codec, bootstrap, &replay_dir, &prefix, |_, _| {});
    let dead = read_records(bootstrap, &format!("{prefix}dead-letter.v1"));
    if !dead.is_empty() {
        failures.push(format!("{} dead letters on Kafka", dead.len()));
    }
    println!("compared with the replay: {}", compared.join("; "));
    assert!(failures.is_empty(), "Kafka != replay across the upgrade:\n{}\n{}", failures.join("\n"), tails());
    println!(
        "restored {restored} runs records; every output equal to the replay after {:?}",
        started.elapsed()
    );
}
