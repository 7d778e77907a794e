//! `kubefacts demo`: the embedded default. Reads a cluster trace (a bundled one unless
//! `--trace` names another), turns it into observations exactly as the watcher does
//! (minimize → key), encodes each as Avro single-object records, decodes them back with
//! the generic decoder, checks they are identical, and writes what a consumer would see.
//! No broker, no cluster.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, bail};
use clap::Args;

use super::{observed::Observed, replay::write_jsonl, stages::run_all_in_memory};
use crate::{
    cleanup::CleanupDecision,
    codec::{
        Codec, RecordWriter,
        json::{Timestamps, rfc3339_millis, to_json},
    },
    config::PipelineConfig,
    journal::JobRun,
    observe::{AdmissionCounts, InputTopic, ObservationRecord, Observer, model::Source},
    runtime::driver::{MemInputs, MemTopic},
};

/// Partitions of the demo's in-memory topics (as `replay`'s default).
const DEMO_PARTITIONS: i32 = 3;

/// The trace `demo` runs on when none is given.
pub const BUNDLED_TRACE: &str = include_str!("../../tests/fixtures/traces/demo.jsonl");

/// Arguments of `kubefacts demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Folder for the outputs (created; existing files of the same names are replaced).
    #[arg(long, default_value = "demo-output")]
    pub output: PathBuf,
    /// A cluster trace to run instead of the bundled one (docs/TRACE_FORMAT.md).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Pipeline configuration (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Per-topic tallies for the summary.
#[derive(Debug, Default)]
struct TopicTally {
    records: u64,
    markers: u64,
    bytes: u64,
    keys: std::collections::BTreeSet<String>,
}

pub(super) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = match &args.config {
        Some(p) => PipelineConfig::load(p)?,
        None => PipelineConfig::embedded_default()?,
    };
    let (trace_name, trace_text) = match &args.trace {
        Some(p) => (
            p.display().to_string(),
            fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        ),
        None => ("bundled demo trace".to_owned(), BUNDLED_TRACE.to_owned()),
    };
    fs::create_dir_all(&args.output).with_context(|| format!("creating {}", args.output.display()))?;

    let codec = Codec::new(None)?;
    let mut writers = BTreeMap::new();
    let mut jsonl = BTreeMap::new();
    let mut containers = BTreeMap::new();
    for topic in InputTopic::ALL {
        let known = codec.schemas().current(topic.full_name())?;
        let name = topic.topic_name(&config.topics);
        writers.insert(
            topic,
            RecordWriter::new(known, crate::codec::Framing::SingleObject { fingerprint: known.fingerprint })?,
        );
        jsonl.insert(topic, BufWriter::new(create(&args.output, &format!("{name}.jsonl"))?));
        let file = create(&args.output, &format!("{name}.avro"))?;
        containers.insert(topic, apache_avro::Writer::new(&known.schema, BufWriter::new(file))?);
    }

    let source = Source { cluster: config.cluster.clone(), instance: "kubefacts-demo".into(), epoch: 1 };
    let mut observer =
        Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone());
    let mut tallies: BTreeMap<InputTopic, TopicTally> = BTreeMap::new();
    let mut round_trips = 0u64;
    // What the processors read: the same observations, partitioned as on Kafka.
    let mut inputs = MemInputs::new(&codec, &config.topics, DEMO_PARTITIONS)?;
    let mut observed = Observed::new("demo", crate::trace::read(trace_text.as_bytes()), &mut observer);
    for obs in (&mut observed).flatten() {
        let bytes = obs.record.encode(&writers[&obs.topic])?;
        // What any consumer does: decode by framing, then read the typed record.
        let decoded = codec.decode(&bytes).await?;
        let back = ObservationRecord::from_value(obs.topic, &decoded.value)?;
        if back != obs.record {
            bail!(
                "round trip changed a {} record:\n  wrote {:?}\n  read  {:?}",
                obs.topic.as_str(),
                obs.record,
                back
            );
        }
        round_trips += 1;
        inputs.push(&obs)?;
        let tally = tallies.entry(obs.topic).or_default();
        tally.records += 1;
        tally.bytes += bytes.len() as u64;
        match &obs.key {
            Some(k) => {
                tally.keys.insert(k.clone());
            }
            None => tally.markers += 1,
        }
        let line = serde_json::json!({
            "key": obs.key,
            "value": to_json(&decoded.value, Timestamps::Rfc3339),
        });
        let out = jsonl.get_mut(&obs.topic).expect("every topic has a file");
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
        containers.get_mut(&obs.topic).expect("every topic has a file").append_value_ref(&decoded.value)?;
    }
    let (entries, rejected) = (observed.entries, observed.rejected);
    observer.finish();

    // The pipeline's stages over them, in memory, as `replay` runs them.
    let mut logs: BTreeMap<String, MemTopic> =
        inputs.into_topics().into_iter().map(|t| (t.name.clone(), t)).collect();
    let input_names: std::collections::BTreeSet<String> = logs.keys().cloned().collect();
    let dead_letter = config.topics.full(&config.topics.dead_letter);
    run_all_in_memory(&codec, &config, &config.process.stages, &mut logs, &dead_letter, DEMO_PARTITIONS)
        .await?;
    let mut processed = Vec::new();
    for (name, log) in &logs {
        if !input_names.contains(name) && !log.is_empty() {
            write_jsonl(&codec, log, &args.output).await?;
            processed.push((name.clone(), log.len()));
        }
    }
    let facts = config.topics.full(&config.topics.job_run_facts);
    let mut runs: Vec<JobRun> = Vec::new();
    for rec in logs.get(&facts).into_iter().flat_map(|t| t.partitions.iter().flatten()) {
        if let Some(v) = &rec.value {
            runs.push(codec.decode_as(v).await?);
        }
    }
    runs.sort_by(|a, b| (a.finished_at, &a.run_name).cmp(&(b.finished_at, &b.run_name)));
    let decided = config.topics.full(&config.topics.cleanup_decisions);
    let mut decisions: Vec<CleanupDecision> = Vec::new();
    for rec in logs.get(&decided).into_iter().flat_map(|t| t.partitions.iter().flatten()) {
        if let Some(v) = &rec.value {
            decisions.push(codec.decode_as(v).await?);
        }
    }
    decisions.sort_by(|a, b| (a.decided_at, &a.job).cmp(&(b.decided_at, &b.job)));
    for (_, mut w) in jsonl {
        w.flush()?;
    }
    for (_, w) in containers {
        w.into_inner()?.flush()?;
    }

    print_summary(
        &trace_name,
        trace_text.len(),
        entries,
        &tallies,
        round_trips,
        &rejected,
        observer.admission(),
        &args.output,
        &config,
    );
    print_processors(&config, &processed, &runs, &decisions);
    println!("\nfinished in {:.2} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn create(dir: &Path, name: &str) -> anyhow::Result<File> {
    let path = dir.join(name);
    File::create(&path).with_context(|| format!("creating {}", path.display()))
}

#[allow(clippy::too_many_arguments)]
fn print_summary(
    trace_name: &str,
    trace_bytes: usize,
    entries: u64,
    tallies: &BTreeMap<InputTopic, TopicTally>,
    round_trips: u64,
    rejected: &BTreeMap<String, u64>,
    admission: &AdmissionCounts,
    output: &Path,
    config: &PipelineConfig,
) {
    println!(
        "kubefacts demo — {trace_name}: {entries} trace entries, {:.1} KiB of Kubernetes JSON",
        trace_bytes as f64 / 1024.0
    );
    println!("\nobservations, as the watcher would publish them (minimized, keyed, Avro single-object):");
    println!(
        "  {:<30} {:>8} {:>8} {:>6} {:>10} {:>9}",
        "topic", "records", "markers", "keys", "bytes", "avg B"
    );
    let total_bytes: u64 = tallies.values().map(|t| t.bytes).sum();
    for (topic, t) in tallies {
        println!(
            "  {:<30} {:>8} {:>8} {:>6} {:>10} {:>9.0}",
            topic.topic_name(&config.topics),
            t.records,
            t.markers,
            t.keys.len(),
            t.bytes,
            t.bytes as f64 / t.records.max(1) as f64
        );
    }
    println!(
        "\n{round_trips} records encoded and decoded back identical; {:.1} KiB on the wire vs {:.1} KiB of trace JSON ({:.0}% — env, args, commands, volumes, images and messages never leave the watcher)",
        total_bytes as f64 / 1024.0,
        trace_bytes as f64 / 1024.0,
        100.0 * total_bytes as f64 / trace_bytes.max(1) as f64
    );
    let admitted: u64 = admission.admitted.values().sum();
    let excluded: Vec<String> = admission
        .excluded
        .iter()
        .map(|((kind, step), n)| format!("{n} {kind} at {}", step.as_str()))
        .collect();
    println!(
        "admission ({}: \"true\" opts out): {admitted} objects admitted, {}",
        config.admission.opt_out_annotation,
        if excluded.is_empty() {
            "none excluded".to_owned()
        } else {
            format!("excluded: {}", excluded.join(", "))
        }
    );
    if rejected.is_empty() {
        println!("no trace entry was rejected");
    } else {
        println!("rejected (each reported above):");
        for (reason, n) in rejected {
            println!("  {reason}: {n}");
        }
    }
    println!(
        "\noutputs in {}/: <topic>.jsonl (decoded, one record per line) and <topic>.avro (Avro object container files)",
        output.display()
    );
}

/// The processors' part of the summary: what each stage wrote, and the runs filed.
fn print_processors(
    config: &PipelineConfig,
    processed: &[(String, usize)],
    runs: &[JobRun],
    decisions: &[CleanupDecision],
) {
    let stages: Vec<&str> = config.process.stages.iter().map(|s| s.name()).collect();
    println!("\nprocessors, in memory as on Kafka (stages: {}):", stages.join(" → "));
    for (topic, n) in processed {
        println!("  {topic:<40} {n:>6} records");
    }
    println!("\nfinished runs filed (job-run-facts):");
    for r in runs {
        let exits: Vec<String> = r
            .exits
            .iter()
            .map(|e| format!("{}×{}/{}", e.count, e.exit_code, e.reason.as_deref().unwrap_or("-")))
            .collect();
        println!(
            "  {:<28} {:?}{} — pods {} ok, {} failed; exits {}",
            r.run_name,
            r.result,
            r.failure_reason.as_deref().map(|f| format!(" ({f})")).unwrap_or_default(),
            r.succeeded_pods,
            r.failed_pods,
            if exits.is_empty() { "none".to_owned() } else { exits.join(", ") }
        );
    }
    println!(
        "\ncleanup decisions (retention {} s unless the Job's TTL is shorter; `kubefacts cleaner --apply` deletes):",
        config.cleanup.job_retention_secs
    );
    if decisions.is_empty() {
        println!("  none: no finished Job outlived its retention in this trace");
    }
    for d in decisions {
        println!(
            "  {:<28} finished {}, retention {} s ({:?}), decided at {} (sweep {})",
            d.job.name,
            rfc3339_millis(d.finished_at).unwrap_or_default(),
            d.retention_secs,
            d.retention_source,
            rfc3339_millis(d.decided_at).unwrap_or_default(),
            d.sweep
        );
    }
    println!("(lease coverage and session projections join this demo as they land)");
}
