//! Freshness at live pace (DESIGN §8, issue 47): a simulated fleet fed at its own pace —
//! each observation published when the wall clock reaches its `observed_at`, the watcher's
//! heartbeats every 10 s as on a real cluster — through one `kubefacts process` with the
//! default pipeline and default settings, and, per output, how long after its evidence each
//! record became readable to a `read_committed` consumer. A firehose figure (the suite's
//! latency, where heartbeats arrive every few milliseconds) cannot see any wait for time.
//!
//! ```sh
//! scripts/infra/up.sh && source .cache/run/env
//! cargo bench --bench freshness                       # 3 minutes of the medium fleet
//! cargo bench --bench freshness -- --minutes 10       # longer
//! ```
//!
//! Printed per output, p50 / p99 / max:
//! * run facts: from the Job observed finished (its observation sent) to its fact readable
//!   (the 5 s settle included), and from the fact's record time to readable;
//! * journal pages: from a run's fact readable to the first page holding it readable;
//! * coverage alerts and session projections: from the record time (the stream time of the
//!   evidence that changed them — at live pace, when it was observed) to readable.
//!
//! The trace starts at the current minute, so record times are wall-clock times. Outputs
//! whose evidence is in the first 30 s (the relist at start, sent at once) are left out.
//! Under `cargo test --all-targets` (CI) it runs one minute and checks facts were measured.

#[path = "common/broker.rs"]
mod broker;
#[path = "common/fleet.rs"]
mod fleet;

use std::{
    collections::HashMap,
    fs,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use broker::{Env, committed_reader, now_ms, percentile, repo_path, unique};
use fleet::{finishing_job, observer};
use kubefacts::{
    codec::Codec,
    config::{PipelineConfig, kafka::Brokers},
    journal::{JobRun, JobRunWindowPart},
    simulate,
};
use rdkafka::Message;
use serde_json::json;

/// Evidence in the first seconds of the trace (the relist, sent at once) is left out.
const WARM_UP_MS: i64 = 30_000;

/// One record read: (record timestamp, readable at, value).
type Read = (i64, i64, Option<Vec<u8>>);

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let benching = argv.iter().any(|a| a == "--bench");
    let value = |name: &str| argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).cloned();
    let minutes: u64 =
        value("--minutes").map_or(if benching { 3 } else { 1 }, |m| m.parse().expect("--minutes N"));
    let seed: u64 = value("--seed").map_or(7, |s| s.parse().expect("--seed N"));
    let profile = simulate::profile(&value("--profile").unwrap_or_else(|| "medium".into())).unwrap();

    let env = Env::from_env("freshness", 3);
    let work = repo_path(".cache/bench");
    fs::create_dir_all(&work).unwrap();
    let prefix = format!("{}.", unique("bench-fresh"));
    let app = prefix.trim_end_matches('.').to_owned();
    let pipeline = work.join(format!("{prefix}pipeline.toml"));
    fs::write(
        &pipeline,
        format!(
            "[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\ncreate_topics = true\n"
        ),
    )
    .unwrap();
    let config = PipelineConfig::load(&pipeline).unwrap();
    let topics = config.topics.clone();

    // The pipeline first (it creates every topic), running before the trace begins.
    let log = env.logs.join("process.log");
    let mut process = Command::new(&env.bin)
        .args(["process", "--instance-id", "fresh", "--bootstrap", &env.bootstrap, "--config"])
        .arg(&pipeline)
        .env("RUST_LOG", "kubefacts=info")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    // Logged once every stage is set up (text or JSON log lines).
    let running = || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        text.contains(" running ") || text.contains("\"running\"")
    };
    while !running() {
        assert!(process.try_wait().unwrap().is_none(), "process exited; log {}", log.display());
        assert!(Instant::now() < deadline, "process not running in 120 s; log {}", log.display());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Readers of every output, on their own threads.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = |topic: String| -> JoinHandle<Vec<Read>> {
        let (consumer, stop) = (committed_reader(&env, &topic), stop.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) {
                    let ts = m.timestamp().to_millis().unwrap_or(0);
                    seen.push((ts, now_ms(), m.payload().map(<[u8]>::to_vec)));
                }
            }
            seen
        })
    };
    let facts = reader(topics.full(&topics.job_run_facts));
    let pages = reader(topics.full(&topics.job_runs));
    let alerts = reader(topics.full(&topics.coverage_alerts));
    let projections = reader(topics.full(&topics.session_projections));

    // The fleet at its own pace: the trace starts at the current minute.
    let start_ms = now_ms() / 60_000 * 60_000;
    let end_ms = start_ms + minutes as i64 * 60_000;
    let codec = Codec::new(None).unwrap();
    // The publisher blocks in place while connecting: a multi-threaded runtime.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut finished_sent: HashMap<String, i64> = HashMap::new();
    let mut observations = 0u64;
    rt.block_on(async {
        let brokers = Brokers::plaintext(&env.bootstrap);
        let mut publisher = kubefacts::watch::Publisher::connect(&brokers, &codec, &topics).await.unwrap();
        let mut observer = observer(&config);
        for entry in simulate::simulate_from(&profile, 1, seed, start_ms) {
            if entry.observed_at_ms >= end_ms {
                break;
            }
            let wait = entry.observed_at_ms - now_ms();
            if wait > 0 {
                publisher.reap().unwrap();
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
            for released in observer.admit(entry) {
                for obs in released.expect("the simulator writes only valid entries") {
                    publisher.publish(&obs).await.unwrap();
                    observations += 1;
                    if let Some(uid) = finishing_job(&obs) {
                        finished_sent.entry(uid).or_insert_with(now_ms);
                    }
                }
            }
        }
        publisher.flush().await.unwrap();
    });
    // What the last evidence released; later outputs wait for time that no longer comes.
    std::thread::sleep(Duration::from_secs(20));
    stop.store(true, Ordering::SeqCst);
    let _ = process.kill();
    let _ = process.wait();
    let (facts, pages, alerts, projections) =
        (facts.join().unwrap(), pages.join().unwrap(), alerts.join().unwrap(), projections.join().unwrap());

    let measured = |ts: i64| ts >= start_ms + WARM_UP_MS;
    let mut fact_readable: HashMap<String, i64> = HashMap::new();
    let (mut finished_to_fact, mut fact_lag) = (Vec::new(), Vec::new());
    for (ts, at, value) in &facts {
        let Some(v) = value else { continue };
        let run: JobRun = rt.block_on(codec.decode_as(v)).unwrap();
        if fact_readable.contains_key(&run.run_uid) {
            continue;
        }
        fact_readable.insert(run.run_uid.clone(), *at);
        if measured(*ts) {
            fact_lag.push((at - ts) as f64);
            if let Some(sent) = finished_sent.get(&run.run_uid) {
                finished_to_fact.push((at - sent) as f64);
            }
        }
    }
    let mut fact_to_page = Vec::new();
    let mut paged: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (ts, at, value) in &pages {
        let Some(v) = value else { continue };
        let part: JobRunWindowPart = rt.block_on(codec.decode_as(v)).unwrap();
        for run in part.page.map(|p| p.runs).unwrap_or_default() {
            if paged.insert(run.run_uid.clone())
                && measured(*ts)
                && let Some(fact) = fact_readable.get(&run.run_uid)
            {
                fact_to_page.push((at - fact) as f64);
            }
        }
    }
    let record_lag = |reads: &[Read]| -> Vec<f64> {
        reads
            .iter()
            .filter(|(ts, _, v)| v.is_some() && measured(*ts))
            .map(|(ts, at, _)| (at - ts) as f64)
            .collect()
    };
    let rows = [
        ("Job observed finished → its fact readable", finished_to_fact, "≤ settle (5 s) + 1 s"),
        ("fact record time → readable", fact_lag, ""),
        ("fact readable → its journal page readable", fact_to_page, "≤ 2 s"),
        ("coverage state change → readable", record_lag(&alerts), "≤ 2 s"),
        ("session projection → readable", record_lag(&projections), "≤ 1 s"),
    ];
    println!(
        "freshness at live pace: {} fleet, {minutes} min (wall clock = trace time), {observations} observations, \
         one instance, default settings\n  {:<44} {:>7} {:>9} {:>9} {:>9}   target",
        profile.name, "", "n", "p50 ms", "p99 ms", "max ms"
    );
    let mut figures = serde_json::Map::new();
    for (what, mut lags, target) in rows {
        lags.sort_by(f64::total_cmp);
        let (p50, p99, max) =
            (percentile(&lags, 0.5), percentile(&lags, 0.99), lags.last().copied().unwrap_or(f64::NAN));
        println!("  {what:<44} {:>7} {p50:>9.0} {p99:>9.0} {max:>9.0}   {target}", lags.len());
        figures.insert(what.into(), json!({"n": lags.len(), "p50_ms": p50, "p99_ms": p99, "max_ms": max}));
    }
    // The short variant's figures are no measurement: only a bench run writes them.
    let out = work.join(if benching { "freshness-latest.json" } else { "freshness-check.json" });
    fs::write(
        &out,
        serde_json::to_string_pretty(&json!({"profile": profile.name, "minutes": minutes, "seed": seed,
        "observations": observations, "figures": figures}))
        .unwrap(),
    )
    .unwrap();
    println!("figures: {out:?}; process log {}", log.display());
    let _ = fs::remove_file(&pipeline);
    if !benching {
        assert!(
            observations > 1_000,
            "{observations} observations published in a minute of the medium fleet"
        );
        assert!(!fact_readable.is_empty(), "no run fact was readable after a minute of the medium fleet");
    }
}
