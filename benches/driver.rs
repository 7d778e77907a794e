//! `[runs]` + `[journal]` in the in-memory driver, one core, over a simulated fleet: the
//! figure DESIGN §8 calls "the pure processor path", alone, repeated, and quick to profile
//! (`perf record -p <pid>` once it prints "driving").
//!
//! `cargo bench --bench driver -- --profile medium --hours 6 --repeat 3`

use std::{collections::BTreeMap, time::Instant};

use kubefacts::{
    cli::run_all_in_memory,
    codec::Codec,
    config::PipelineConfig,
    observe::{InputTopic, Observer, model::Source},
    runtime::driver::{MemInputs, MemTopic},
    simulate,
};

const PARTITIONS: i32 = 3;

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
    let mut inputs = MemInputs::new(&codec, &config.topics, PARTITIONS).unwrap();
    let source = Source { cluster: config.cluster.clone(), instance: "bench".into(), epoch: 1 };
    let mut observer =
        Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone());
    for entry in simulate::simulate(&profile, hours, 1) {
        for released in observer.admit(entry) {
            for obs in released.expect("the simulator writes only valid entries") {
                inputs.push(&obs).unwrap();
            }
        }
    }
    observer.finish();
    let observations: usize = InputTopic::ALL.iter().map(|t| inputs.topic(*t).len()).sum();
    let topics: BTreeMap<String, MemTopic> =
        inputs.into_topics().into_iter().map(|t| (t.name.clone(), t)).collect();
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
        if round == 1 {
            let cl: BTreeMap<String, MemTopic> = reports
                .iter()
                .flat_map(|r| r.changelogs.iter().map(|t| (t.name.clone(), t.clone())))
                .collect();
            sizes(&cl);
        }
        println!(
            "round {round}: {:.0} observations/s ({}; {facts} runs filed)",
            observations as f64 / secs,
            per_stage.join(", ")
        );
    }
}

#[allow(dead_code)]
fn sizes(logs: &BTreeMap<String, MemTopic>) {
    use kubefacts::journal::runs::TrackedJob;
    for (name, t) in logs {
        let mut l = BTreeMap::new();
        for r in t.partitions.iter().flatten() {
            match &r.value {
                Some(v) => {
                    l.insert(r.key.clone(), v.len() + r.key.as_ref().map_or(0, Vec::len));
                }
                None => {
                    l.remove(&r.key);
                }
            }
        }
        println!("store {name}: {} keys, {} bytes", l.len(), l.values().sum::<usize>());
    }
    let mut latest = BTreeMap::new();
    for (name, t) in logs {
        if !name.ends_with("-jobs-changelog") {
            continue;
        }
        for r in t.partitions.iter().flatten() {
            match &r.value {
                Some(v) => {
                    latest.insert(r.key.clone(), v.clone());
                }
                None => {
                    latest.remove(&r.key);
                }
            }
        }
    }
    let (
        mut n,
        mut total,
        mut meta,
        mut labels,
        mut ann,
        mut owner,
        mut spec,
        mut status,
        mut conds,
        mut key,
    ) = (0usize, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    for (k, v) in &latest {
        let t: TrackedJob = postcard::from_bytes(v).unwrap();
        n += 1;
        total += v.len();
        key += k.as_ref().map_or(0, Vec::len);
        if let Some(j) = &t.job {
            meta += postcard::to_allocvec(&j.meta).unwrap().len();
            labels += postcard::to_allocvec(&j.meta.labels).unwrap().len();
            ann += postcard::to_allocvec(&j.meta.annotations).unwrap().len();
            owner += postcard::to_allocvec(&j.owner_cronjob).unwrap().len();
            spec += postcard::to_allocvec(&j.spec).unwrap().len();
            status += postcard::to_allocvec(&j.status).unwrap().len();
            conds += postcard::to_allocvec(&j.status.conditions).unwrap().len();
        }
        if n == 1 {
            println!("{t:?}");
        }
    }
    let d = |x: usize| x as f64 / n.max(1) as f64;
    println!(
        "jobs {n}: value {:.0} key {:.0} meta {:.0} (labels {:.0} ann {:.0}) owner {:.0} spec {:.0} status {:.0} (conds {:.0})",
        d(total),
        d(key),
        d(meta),
        d(labels),
        d(ann),
        d(owner),
        d(spec),
        d(status),
        d(conds)
    );
}
