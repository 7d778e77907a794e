//! Exactly once through broker failures, on the three-broker SASL_SSL cluster
//! (`scripts/infra/cluster.sh`: replication factor 3, `min.insync.replicas=2` for every
//! topic, the offsets and the transaction log).
//!
//! A simulated small fleet is published with `--finish`; while two `kubefacts process`
//! instances (two stream threads each) work through it, the cluster loses, in turn:
//! 1. the broker leading the most input partitions (SIGKILL, then restarted);
//! 2. the broker coordinating instance a's first transactional id (SIGKILL, restarted);
//! 3. one broker frozen (SIGSTOP) for longer than the broker and consumer session
//!    timeouts, then resumed;
//! 4. all three, one by one, restarted cleanly (a rolling restart), each once every
//!    replica is back in sync.
//!
//! Then every output, read committed, must equal `kubefacts replay` of the same trace: the
//! run facts per Job UID, every window's revisions (the latest the replay's), every
//! coverage alert, session projection and retained-compute total, and the cleanup
//! decisions record for record per partition. Nothing lost, nothing duplicated.

#[cfg(not(feature = "failpoints"))]
compile_error!("build the tests with `--features failpoints` (./scripts/test.sh does)");

mod support;

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use kubefacts::codec::{
    Codec,
    json::{Timestamps, to_json},
};
use serde_json::Value;
use support::{
    Scratch, all_committed, cluster::cluster, default_stages, outputs::compare_outputs, read_records,
    simulate_small, wait_all_committed,
};

const PARTITIONS: &str = "3";
const HOURS: &str = "6";
const SEED: &str = "26";

/// The cleanup decisions per partition, in offset order: (key, value) as JSON.
type PerPartition = BTreeMap<i64, Vec<(Value, Value)>>;

fn replayed_per_partition(dir: &std::path::Path, topic: &str) -> PerPartition {
    let mut out = PerPartition::new();
    let text = std::fs::read_to_string(dir.join(format!("{topic}.jsonl"))).unwrap();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        out.entry(v["partition"].as_i64().unwrap()).or_default().push((v["key"].clone(), v["value"].clone()));
    }
    out
}

fn on_kafka_per_partition(
    rt: &tokio::runtime::Runtime,
    codec: &Codec,
    bootstrap: &str,
    topic: &str,
) -> PerPartition {
    let mut out = PerPartition::new();
    for r in read_records(bootstrap, topic) {
        let decode = |b: &[u8]| to_json(&rt.block_on(codec.decode(b)).unwrap().value, Timestamps::Rfc3339);
        let key =
            r.key.as_deref().map_or(Value::Null, |k| Value::String(String::from_utf8_lossy(k).into_owned()));
        let value = r.value.as_deref().map_or(Value::Null, decode);
        out.entry(i64::from(r.partition)).or_default().push((key, value));
    }
    out
}

#[test]
fn outputs_equal_the_replay_through_broker_kills_a_pause_and_a_rolling_restart() {
    let started = Instant::now();
    let cluster = cluster();
    let bootstrap = cluster.bootstrap.as_str();
    let scratch = Scratch::new(
        "brokers",
        "session_timeout_ms = 6000\nmax_batch_records = 50\nnum_stream_threads = 2\n",
    );
    let section = cluster.admin_section(scratch.path());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&scratch.config)
        .and_then(|mut f| std::io::Write::write_all(&mut f, section.as_bytes()))
        .unwrap();
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
    let stages = default_stages(&prefix, &app);
    let inputs: Vec<String> =
        ["pods.v1", "jobs.v1", "cronjobs.v1", "leases.v1", "sessions.v1"].map(topic).to_vec();
    let processes = support::Processes::new(dir.join("logs"), bootstrap, &config);
    let tails = || processes.tails();
    let mut b = processes.start("b", &[]);
    let mut a = processes.start("a", &[]);
    let busy = |what: &str| {
        let working = all_committed(bootstrap, &stages).is_err();
        println!(
            "{what} after {:?} (pipeline {})",
            started.elapsed(),
            if working { "still working" } else { "caught up" }
        );
        working
    };
    // Let both instances join and start committing.
    std::thread::sleep(Duration::from_secs(15));
    let mut while_working = 0;

    // 1. The leader of the most input partitions.
    let leaders = cluster.leaders(&inputs);
    let busiest = *leaders.iter().max_by_key(|(_, n)| **n).unwrap().0;
    cluster.kill(busiest);
    while_working += usize::from(busy(&format!(
        "SIGKILLed node {busiest}, leader of {} input partitions",
        leaders[&busiest]
    )));
    std::thread::sleep(Duration::from_secs(5));
    cluster.start(busiest);

    // 2. The transaction coordinator of a's first stream thread.
    let coordinator = cluster.transaction_coordinator(&format!("{app}-a-0"));
    cluster.kill(coordinator);
    while_working +=
        usize::from(busy(&format!("SIGKILLed node {coordinator}, transaction coordinator of {app}-a-0")));
    std::thread::sleep(Duration::from_secs(5));
    cluster.start(coordinator);

    // 3. A broker frozen past every session timeout (6 s here), then resumed.
    let frozen = (coordinator % 3) + 1;
    cluster.signal(frozen, "-STOP");
    while_working += usize::from(busy(&format!("SIGSTOPped node {frozen}")));
    std::thread::sleep(Duration::from_secs(15));
    cluster.signal(frozen, "-CONT");

    // 4. A rolling restart, each node once the replicas are back in sync.
    let mut internal = inputs.clone();
    internal.extend(["__consumer_offsets".to_owned(), "__transaction_state".to_owned()]);
    for node in 1..=3 {
        cluster.wait_in_sync(&internal, 120);
        cluster.terminate(node);
        cluster.start(node);
        while_working += usize::from(busy(&format!("restarted node {node}")));
    }

    wait_all_committed(bootstrap, &stages, &mut [("b", &mut b), ("a", &mut a)], 600, &tails);
    println!("every stage committed its input after {:?}", started.elapsed());

    let codec = Codec::new(None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (mut failures, compared) = compare_outputs(&rt, &codec, bootstrap, &replay_dir, &prefix, |_, _| {});
    let decisions = topic("cleanup-decisions.v1");
    let (want, got) = (
        replayed_per_partition(&replay_dir, &decisions),
        on_kafka_per_partition(&rt, &codec, bootstrap, &decisions),
    );
    let partitions: std::collections::BTreeSet<&i64> = want.keys().chain(got.keys()).collect();
    for p in partitions {
        let (w, g) = (want.get(p).cloned().unwrap_or_default(), got.get(p).cloned().unwrap_or_default());
        if w != g {
            let at = w.iter().zip(&g).position(|(x, y)| x != y).unwrap_or(w.len().min(g.len()));
            failures.push(format!(
                "cleanup decisions, partition {p}: {} on Kafka, {} replayed; first difference at #{}",
                g.len(),
                w.len(),
                at + 1
            ));
        }
    }
    let dead = read_records(bootstrap, &topic("dead-letter.v1"));
    if !dead.is_empty() {
        failures.push(format!("{} dead letters on Kafka", dead.len()));
    }
    let _ = (a.kill(), b.kill());
    println!("compared with the replay: {}", compared.join("; "));
    assert!(
        failures.is_empty(),
        "Kafka != replay after broker failures:\n{}\n{}",
        failures.join("\n"),
        tails()
    );
    assert!(
        while_working >= 3,
        "only {while_working} of 6 failures hit the pipeline while it worked: use a longer trace\n{}",
        tails()
    );
    println!("every output equal to the replay after {:?}", started.elapsed());
}
