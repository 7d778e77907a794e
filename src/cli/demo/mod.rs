//! `kubefacts demo`: the embedded default. Simulates a small batch fleet for a day
//! (`simulate`'s `small` profile, fixed seed) — or reads a trace given with `--trace` —
//! turns it into observations exactly as the watcher does (minimize → admit → key), encodes
//! each as Avro single-object records, decodes them back with the generic decoder, checks
//! they are identical, runs every configured stage over them in memory, and writes what a
//! consumer would see: JSON lines and Avro object-container files per topic. No broker,
//! no cluster.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::{self, File},
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, bail};
use clap::Args;

mod report;

use super::report::{Filter, Summary};
use super::{
    observed::{Observed, TraceFile},
    progress::Progress,
    replay::write_jsonl,
    simulate::FleetArgs,
};
use kubefacts::{
    codec::{
        Codec, RecordWriter,
        json::{Timestamps, to_json},
    },
    config::PipelineConfig,
    observe::memory::MemInputs,
    observe::{InputTopic, ObservationRecord, Observer, model::Source},
    pipeline::run_all_in_memory,
    runtime::driver::MemTopic,
    simulate,
    trace::{MinimalEntry, TraceError},
};
use report::{print_processors, print_summary};

/// Partitions of the demo's in-memory topics (as `replay`'s default).
const DEMO_PARTITIONS: i32 = 3;

/// Arguments of `kubefacts demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Folder for the outputs (created; existing files of the same names are replaced).
    #[arg(long, default_value = "demo-output")]
    pub output: PathBuf,
    /// A cluster trace to run instead of a simulated one (docs/TRACE_FORMAT.md; `-` reads
    /// standard input).
    #[arg(long, conflicts_with_all = ["profile", "hours", "seed"])]
    pub trace: Option<PathBuf>,
    /// The simulated fleet, unless `--trace` is given.
    #[command(flatten)]
    pub fleet: FleetArgs,
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
    keys: BTreeSet<String>,
}

/// One line of an input topic's JSON lines file.
#[derive(serde::Serialize)]
struct InputLine<'a> {
    key: Option<&'a str>,
    value: &'a serde_json::Value,
}

/// Where the demo's trace entries come from.
type Entries = Box<dyn Iterator<Item = Result<MinimalEntry, TraceError>>>;

pub(super) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = match &args.config {
        Some(p) => PipelineConfig::load(p)?,
        None => PipelineConfig::embedded_default()?,
    };
    // A file is measured in bytes read, a simulation in stream time covered.
    let (trace_name, entries, mut progress, read_bytes, span_ms): (String, Entries, _, _, _) = match &args
        .trace
    {
        Some(path) => {
            let file = TraceFile::open(path)?;
            let progress = Progress::new("demo: observing", "observations", file.total_bytes, true);
            let entries = file.entries.keeping(config.minimize.kept_keys(&config.admission));
            (file.name.clone(), Box::new(entries), progress, Some(file.read_bytes), None)
        }
        None => {
            let (profile, hours) = args.fleet.resolve()?;
            let span_ms = i64::from(hours) * 3_600_000;
            let progress = Progress::new("demo: simulating", "observations", Some(span_ms as u64), false);
            let name = format!(
                "simulated {} fleet, {hours} h, seed {} (`kubefacts simulate --profile {} --hours {hours} --seed {}` writes this trace)",
                profile.name, args.fleet.seed, profile.name, args.fleet.seed
            );
            (
                name,
                Box::new(simulate::simulate(&profile, hours, args.fleet.seed).map(|e| Ok(e.into()))),
                progress,
                None,
                Some(span_ms),
            )
        }
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
            RecordWriter::new(
                known,
                kubefacts::codec::Framing::SingleObject { fingerprint: known.fingerprint },
            )?,
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
    let mut first_observed_at = None;
    // What the processors read: the same observations, partitioned as on Kafka.
    let mut inputs = MemInputs::new(&codec, &config.topics, DEMO_PARTITIONS)?;
    let mut observed = Observed::new("demo", entries, &mut observer);
    while let Some(batch) = observed.next() {
        let at = observed.last_observed_at_ms;
        let first = *first_observed_at.get_or_insert(at);
        for obs in batch {
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
            let line =
                InputLine { key: obs.key.as_deref(), value: &to_json(&decoded.value, Timestamps::Rfc3339) };
            let out = jsonl.get_mut(&obs.topic).expect("every topic has a file");
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
            containers
                .get_mut(&obs.topic)
                .expect("every topic has a file")
                .append_value_ref(&decoded.value)?;
        }
        let done = match &read_bytes {
            Some(read) => read.get(),
            None => (at - first).max(0) as u64,
        };
        progress.update(done, round_trips);
    }
    let (entries, rejected) = (observed.entries, observed.rejected);
    let stream_span_ms = span_ms.unwrap_or(observed.last_observed_at_ms - first_observed_at.unwrap_or(0));
    observer.finish();
    progress.finish();
    let observe_secs = started.elapsed().as_secs_f64();

    // The pipeline's stages over them, in memory, as `replay` runs them.
    let stages_started = Instant::now();
    let mut logs: BTreeMap<String, MemTopic> =
        inputs.into_topics().into_iter().map(|t| (t.name.clone(), t)).collect();
    let input_names: BTreeSet<String> = logs.keys().cloned().collect();
    let dead_letter = config.topics.full(&config.topics.dead_letter);
    let reports =
        run_all_in_memory(&codec, &config, &config.process.stages, &mut logs, &dead_letter, DEMO_PARTITIONS)
            .await?;
    let stage_secs = stages_started.elapsed().as_secs_f64();
    // Repartition topics are internal: counted, not written out. (Other topics a later
    // stage reads, such as job-run-facts for `[coverage]`, are product topics.)
    let repartitions = [
        config.topics.full(&config.topics.journal_repartition),
        config.topics.full(&config.topics.session_owner_repartition),
    ];
    let mut processed = Vec::new();
    for (name, log) in &logs {
        if input_names.contains(name) || log.is_empty() {
            continue;
        }
        let internal = repartitions.contains(name);
        if !internal {
            write_jsonl(&codec, log, &args.output).await?;
            write_container(&codec, log, &args.output).await?;
        }
        processed.push((name.clone(), log.facts(), internal));
    }
    // What happened, summarised as `kubefacts report` summarises the same topics on Kafka.
    let (facts, read) = super::report::from_memory(&codec, &config.topics, &logs).await.into_facts();
    if read.bad_total() > 0 {
        bail!("the demo's own facts did not decode: {:?}", read.bad);
    }
    let summary = Summary::build(facts, &Filter::default(), config.cleanup.job_retention_secs);
    for (_, mut w) in jsonl {
        w.flush()?;
    }
    for (_, w) in containers {
        w.into_inner()?.flush()?;
    }

    print_summary(
        &trace_name,
        entries,
        stream_span_ms,
        &tallies,
        round_trips,
        &rejected,
        observer.admission(),
        &args.output,
        &config,
    );
    let dead_letters = logs.get(&dead_letter).map_or(0, MemTopic::len);
    print_processors(&reports, &processed, dead_letters, round_trips as f64 / stage_secs.max(1e-9));
    super::report::text::print(&summary);
    println!(
        "\nfinished in {:.2} s ({observe_secs:.2} s observing, encoding and decoding; {stage_secs:.2} s in the processors)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes a processor's topic as an Avro object-container file (values only, in partition
/// and offset order), under the current schema of the records' writer.
async fn write_container(codec: &Codec, log: &MemTopic, dir: &Path) -> anyhow::Result<()> {
    let mut writer = None;
    for rec in log.partitions.iter().flatten() {
        let Some(bytes) = &rec.value else { continue };
        let decoded = codec.decode(bytes).await?;
        let w = match &mut writer {
            Some(w) => w,
            None => {
                let known = codec.schemas().current(&decoded.schema_name)?;
                let file = create(dir, &format!("{}.avro", log.name))?;
                writer.insert(apache_avro::Writer::new(&known.schema, BufWriter::new(file))?)
            }
        };
        w.append_value_ref(&decoded.value)?;
    }
    if let Some(w) = writer {
        w.into_inner()?.flush()?;
    }
    Ok(())
}

fn create(dir: &Path, name: &str) -> anyhow::Result<File> {
    let path = dir.join(name);
    File::create(&path).with_context(|| format!("creating {}", path.display()))
}
