//! `[runs]` + `[journal]` in the in-memory driver, one core, over a simulated fleet: the
//! figure DESIGN §8 calls "the pure processor path", alone, repeated, and quick to profile
//! (`perf record -p <pid>` once it prints "driving").
//!
//! `cargo bench --bench driver -- --profile medium --hours 6 --repeat 3`

#[path = "common/fleet.rs"]
mod fleet;

use std::{collections::BTreeMap, time::Instant};

use kubefacts::{
    codec::Codec,
    config::PipelineConfig,
    pipeline::{StageReport, run_all_in_memory},
    runtime::driver::MemTopic,
    simulate,
};

const PARTITIONS: i32 = 3;

// The binary's allocator (src/main.rs), so the figure is the one `demo` and `replay` get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let value = |flag: &str| argv.iter().position(|a| a == flag).and_then(|i| argv.get(i + 1)).cloned();
    let benching = argv.iter().any(|a| a == "--bench");
    let profile = simulate::profile(&value("--profile").unwrap_or_else(|| "medium".into())).unwrap();
    // Under `cargo test` (a debug build): one hour of the small fleet, once.
    let hours: u32 = value("--hours").map_or(if benching { 6 } else { 1 }, |h| h.parse().unwrap());
    let hours = if benching { hours } else { 1 };
    let repeat: u32 = value("--repeat").map_or(if benching { 3 } else { 1 }, |r| r.parse().unwrap());
    let profile = if benching { profile } else { simulate::profile("small").unwrap() };

    let codec = Codec::new(None).unwrap();
    let config = PipelineConfig::embedded_default().unwrap();
    let stages: Vec<_> = config
        .process
        .stages
        .iter()
        .filter(|s| matches!(s.processor.as_str(), "runs" | "journal"))
        .cloned()
        .collect();
    let observed = fleet::observe(&codec, &config, PARTITIONS, simulate::simulate(&profile, hours, 1));
    let observations = observed.records;
    let topics: BTreeMap<String, MemTopic> =
        observed.inputs.into_topics().into_iter().map(|t| (t.name.clone(), t)).collect();
    let dead_letter = config.topics.full(&config.topics.dead_letter);
    println!("driving: {} {hours} h, {observations} observations, pid {}", profile.name, std::process::id());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for round in 1..=repeat {
        let mut logs = topics.clone();
        let started = Instant::now();
        let reports = rt
            .block_on(run_all_in_memory(&codec, &config, &stages, &mut logs, &dead_letter, PARTITIONS))
            .unwrap();
        let secs = started.elapsed().as_secs_f64();
        let per_stage: Vec<String> =
            reports.iter().map(|r| format!("{} {} in {:.2} s", r.stage, r.records_in, r.secs)).collect();
        let facts = logs.get(&config.topics.full(&config.topics.job_run_facts)).map_or(0, MemTopic::len);
        assert!(facts > 0, "no run was filed");
        println!(
            "round {round}: {:.0} observations/s ({}; {facts} runs filed)",
            observations as f64 / secs,
            per_stage.join(", ")
        );
        if round == 1 {
            state_table(&reports);
        }
    }
}

/// The latest changelog value of every key of every store (what a restore carries), per
/// store, and per Job `[runs]` still tracks: where the state bytes go.
fn state_table(stages: &[StageReport]) {
    let mut tracked_jobs = 0;
    let mut rows = Vec::new();
    for changelog in stages.iter().flat_map(|s| &s.changelogs) {
        let mut latest = BTreeMap::new();
        for r in changelog.partitions.iter().flatten() {
            match &r.value {
                Some(v) => latest.insert(r.key.clone(), v.len() + r.key.as_ref().map_or(0, Vec::len)),
                None => latest.remove(&r.key),
            };
        }
        if changelog.name == "runs-jobs-changelog" {
            tracked_jobs = latest.len();
        }
        rows.push((changelog.name.clone(), latest.len(), latest.values().sum::<usize>()));
    }
    println!("state (latest changelog value of every key):");
    for (name, keys, bytes) in &rows {
        println!(
            "  {name:<40} {keys:>9} keys {bytes:>11} B  {:>6.0} B per tracked Job",
            *bytes as f64 / tracked_jobs.max(1) as f64
        );
    }
    let runs: usize = rows.iter().filter(|r| r.0.starts_with("runs-")).map(|r| r.2).sum();
    println!(
        "  [runs], all stores: {:.0} B per tracked Job ({tracked_jobs} Jobs)",
        runs as f64 / tracked_jobs.max(1) as f64
    );
}
