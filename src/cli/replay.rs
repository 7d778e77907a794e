//! `kubefacts replay`: a cluster trace through the pipeline in memory — observations
//! minimized, keyed, encoded and partitioned exactly as the watcher publishes them, then
//! the pipeline file's `[process]` stages over them with the in-memory driver — written as
//! JSON lines per topic (dead letters included).

use std::{collections::BTreeMap, fs, path::PathBuf, time::Instant};

use anyhow::Context;
use clap::Args;

use kubefacts::{
    codec::Codec,
    observe::memory::MemInputs,
    observe::{Observer, model::Source},
    pipeline::run_all_in_memory,
    runtime::driver::MemTopic,
};

use super::{
    observed::{FinishArgs, Observed, TraceFile, finished_line},
    progress::Progress,
};

/// Arguments of `kubefacts replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The cluster trace (docs/TRACE_FORMAT.md); `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Folder for `<topic>.jsonl` files (created).
    #[arg(long)]
    pub output: PathBuf,
    /// Pipeline configuration (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Partitions of every input topic (keys are placed with Java's murmur2, as on Kafka).
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Ending the trace (as `publish --finish` does).
    #[command(flatten)]
    pub finish: FinishArgs,
}

pub(super) async fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = super::load_pipeline(args.config.as_deref())?;
    let trace = TraceFile::open(&args.input)?;
    let codec = Codec::new(None)?;
    let mut inputs = MemInputs::new(&codec, &config.topics, args.partitions)?;

    let source = Source { cluster: config.cluster.clone(), instance: "kubefacts-replay".into(), epoch: 1 };
    let mut observer =
        Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone());
    let mut progress = Progress::new("replay: observing", "observations", trace.total_bytes, true);
    let (read_bytes, mut observations) = (trace.read_bytes.clone(), 0u64);
    let lines = trace.entries.entry_line();
    let mut observed =
        Observed::new("replay", trace.entries.keeping(observer.kept_keys()), &mut observer).with_lines(lines);
    for batch in &mut observed {
        for obs in &batch {
            inputs.push(obs)?;
        }
        observations += batch.len() as u64;
        progress.update(read_bytes.get(), observations);
    }
    if args.finish.finish {
        let (added, batch) = observed.finish(&config);
        for obs in &batch {
            inputs.push(obs)?;
        }
        observations += batch.len() as u64;
        eprintln!("{}", finished_line("replay", &added, &config));
    }
    let (entries, rejected) = (observed.entries, observed.rejected_total());
    let all_used = observed.all_used("replayed");
    observer.finish();
    progress.finish();
    let observe_secs = started.elapsed().as_secs_f64();
    let excluded: u64 = observer.admission().excluded.values().sum();
    let bounded = super::observed::bounded_line("replay", observer.cuts(), inputs.oversized());

    // Then the configured stages, in order, each over the topics before it.
    let mut logs: BTreeMap<String, MemTopic> =
        inputs.into_topics().into_iter().map(|log| (log.name.clone(), log)).collect();
    let dead_letter = config.topics.full(&config.topics.dead_letter);
    let stages_started = Instant::now();
    run_all_in_memory(&codec, &config, &config.process.stages, &mut logs, &dead_letter, args.partitions)
        .await?;
    let stage_secs = stages_started.elapsed().as_secs_f64();

    fs::create_dir_all(&args.output).with_context(|| format!("creating {}", args.output.display()))?;
    let mut written = 0usize;
    for log in logs.values() {
        written += write_jsonl(&codec, log, &args.output).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "replay: {entries} trace entries ({rejected} rejected, {excluded} excluded by admission) → {observations} observations in {observe_secs:.2} s; {} stage(s) in {stage_secs:.2} s ({:.0} observations/s); {written} records in {} topics under {}; {:.2} s in all ({:.0} entries/s)",
        config.process.stages.len(),
        observations as f64 / stage_secs.max(1e-9),
        logs.len(),
        args.output.display(),
        secs,
        entries as f64 / secs.max(1e-9)
    );
    if let Some(line) = bounded {
        println!("{line}");
    }
    all_used
}

/// `demo` writes its topics as `replay` does.
pub(super) use kubefacts::pipeline::write_jsonl;
