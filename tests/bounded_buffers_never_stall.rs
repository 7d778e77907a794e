//! Bounded buffers must never stall the merge (docs/RUNTIME.md, "Bounded buffers").
//!
//! A checked input's records wait for the watcher heartbeat after them before the merge
//! sees them. Over a burst (a relist at start-up: 20 000 CronJobs' Jobs before the first
//! heartbeat on the large fleet) a partition's buffer filled with such held records, the
//! partition was paused as "full", and the heartbeat that would have released them was
//! never fetched: one `process` instance of `[runs]` + `[journal]` sat idle over the large
//! backlog forever. Here the same happens in miniature: the same two stages, two
//! partitions, a buffer bound of five records, and the small fleet's relist (129 entries
//! before the first heartbeat). The global Jobs lanes filled first (the global reader feeds
//! them), which paused the Jobs partitions of the thread's own consumer too. Every run must
//! still be filed, as in memory.

mod support;

use std::time::{Duration, Instant};

use kubefacts::{codec::Codec, journal::JobRun};
use support::{KillOnDrop, Scratch, infra, kubefacts_ok, process_command, simulate_small};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_held_for_a_heartbeat_keep_their_partition_fetching() {
    let infra = infra();
    // A buffer bound of five records and fills of twenty: the first fill already brings
    // more of the relist than the bound, all of it held for the heartbeats after it.
    let scratch = Scratch::new(
        "stall",
        concat!(
            "partitions = 2\nbuffered_records_per_partition = 5\nmax_batch_records = 20\n",
            // [runs] + [journal] alone, as the benchmark suite runs them: no other stage's
            // input keeps the thread busy while the Jobs are held.
            "[[process.stages]]\nprocessor = \"runs\"\ninputs = [\"topics.jobs\", \"topics.pods\"]\n",
            "globals = [\"topics.jobs\"]\n",
            "outputs = [\"topics.job_run_facts\", \"topics.journal_repartition\", \"topics.cleanup_decisions\"]\n",
            "[[process.stages]]\nprocessor = \"journal\"\ninputs = [\"topics.journal_repartition\"]\n",
            "outputs = [\"topics.job_runs\"]\n",
        ),
    );
    let trace = scratch.path().join("trace.jsonl");
    simulate_small("1", "1", &trace, &[]);
    let trace_arg = trace.to_str().unwrap();
    let config = scratch.config_arg();
    kubefacts_ok(&[
        "publish",
        "--create-topics",
        "--partitions",
        "2",
        "--bootstrap",
        &infra.bootstrap,
        "--input",
        trace_arg,
        "--config",
        config,
    ]);

    let replay = scratch.path().join("replay");
    kubefacts_ok(&[
        "replay",
        "--partitions",
        "2",
        "--input",
        trace_arg,
        "--output",
        replay.to_str().unwrap(),
        "--config",
        config,
    ]);
    let facts = format!("{}job-run-facts.v1", scratch.prefix);
    let replayed = std::fs::read_to_string(replay.join(format!("{facts}.jsonl"))).unwrap();
    let mut expected: Vec<String> = (replayed.lines())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]["run_uid"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    expected.sort();
    assert!(expected.len() > 50, "{} runs in an hour of the small fleet", expected.len());

    let log = scratch.path().join("process.log");
    let process = process_command("a", &infra.bootstrap)
        .env("RUST_LOG", "kubefacts=info,kubefacts::runtime::kafka=debug")
        .args(["--config", config])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _process = KillOnDrop(process);

    let codec = Codec::new(None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let records = support::read_topic_so_far(&infra.bootstrap, &facts).await;
        let mut runs = Vec::new();
        for r in &records {
            let run: JobRun = codec.decode_as(&r.value).await.unwrap();
            runs.push(run.run_uid);
        }
        if runs.len() >= expected.len() || Instant::now() > deadline {
            runs.sort();
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(got, expected, "every run filed, as in memory\n{log_text}");
    // The miniature did what the large fleet does: partitions were paused for being full.
    assert!(log_text.contains("paused: their tasks buffer enough of them"), "{log_text}");
}
