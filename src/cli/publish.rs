//! `kubefacts publish`: a cluster trace onto the input topics, through the same
//! minimization, admission and keying as the live watcher.

use std::{path::PathBuf, time::Instant};

use clap::Args;

use super::{
    observed::{Observed, TraceFile},
    progress::Progress,
};
use crate::{
    config::PipelineConfig,
    observe::{Observer, model::Source},
    watch::Publisher,
};

/// Arguments of `kubefacts publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The cluster trace (docs/TRACE_FORMAT.md); `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Pipeline configuration (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Written into every record's `source.instance`. Default: the host name.
    #[arg(long, env = "KUBEFACTS_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Input topic creation.
    #[command(flatten)]
    pub topics: super::InputTopicArgs,
}

pub(super) async fn run(args: PublishArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = match &args.config {
        Some(p) => PipelineConfig::load(p)?,
        None => PipelineConfig::embedded_default()?,
    };
    let trace = TraceFile::open(&args.input)?;
    args.topics.ensure(&args.kafka.bootstrap, &config.topics).await?;
    let codec = args.kafka.codec()?;
    let mut publisher = Publisher::connect(&args.kafka.bootstrap, &codec, &config.topics).await?;

    let instance = args
        .instance_id
        .clone()
        .unwrap_or_else(|| std::env::var("HOSTNAME").unwrap_or_else(|_| "kubefacts-publish".into()));
    let source = Source { cluster: config.cluster.clone(), instance, epoch: 1 };
    let mut observer =
        Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone());
    let mut progress = Progress::new("publish", "observations", trace.total_bytes, true);
    let (read_bytes, mut published) = (trace.read_bytes.clone(), 0u64);
    let mut observed = Observed::new("publish", trace.entries, &mut observer);
    for batch in &mut observed {
        for obs in &batch {
            publisher.publish(obs).await?;
        }
        published += batch.len() as u64;
        progress.update(read_bytes.get(), published);
    }
    let (entries, rejected) = (observed.entries, observed.rejected_total());
    observer.finish();
    publisher.flush().await?;
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    let excluded: u64 = observer.admission().excluded.values().sum();
    let counts = publisher.counts();
    println!(
        "publish: {entries} trace entries ({rejected} rejected, {excluded} excluded by admission) → {} records, {} value bytes, in {secs:.2} s ({:.0} entries/s, {:.0} records/s)",
        counts.records,
        counts.value_bytes,
        entries as f64 / secs.max(1e-9),
        counts.records as f64 / secs.max(1e-9)
    );
    Ok(())
}
