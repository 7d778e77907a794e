//! `kubefacts process`: run a processor on Kafka with exactly-once semantics.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use rdkafka::{
    ClientConfig,
    admin::AdminClient,
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
};

use crate::{
    codec::{Codec, RegistryClient},
    runtime::{
        Processor,
        kafka::{RuntimeConfig, RuntimeStats, run_blocking},
        probe::Probe,
        topics::{TopicSpec, check_copartitioned, ensure_topics},
    },
};

/// Arguments of `kubefacts process`.
#[derive(Debug, Args)]
pub struct ProcessArgs {
    /// Which processor to run.
    #[arg(long, value_enum)]
    pub processor: ProcessorName,
    /// Input topic(s), co-partitioned, in the processor's input order.
    #[arg(long = "input", required = true)]
    pub inputs: Vec<String>,
    /// Global input topic(s): every task reads all their partitions (e.g. leases).
    #[arg(long = "global")]
    pub globals: Vec<String>,
    /// Output topic(s), one per output of the processor.
    #[arg(long = "output", required = true)]
    pub outputs: Vec<String>,
    /// Dead-letter topic (default: `<application-id>.dead-letter.v1`).
    #[arg(long)]
    pub dead_letter: Option<String>,
    /// Consumer group and prefix of changelog topics; every instance of one pipeline
    /// shares it.
    #[arg(long, default_value = "kubefacts")]
    pub application_id: String,
    /// This instance's stable id (a restarted instance must reuse it to fence its
    /// previous incarnation). Default: the host name.
    #[arg(long, env = "KUBEFACTS_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KUBEFACTS_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Confluent-compatible schema registry; without it outputs use single-object encoding.
    #[arg(long, env = "KUBEFACTS_REGISTRY")]
    pub registry: Option<String>,
    /// Create missing topics (outputs, changelogs, dead letters; inputs too) with
    /// `--partitions` partitions; without it, missing topics are an error that lists the
    /// commands to create them.
    #[arg(long)]
    pub create_topics: bool,
    /// Partitions of topics created by `--create-topics` (changelogs follow the inputs).
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Most records per transaction.
    #[arg(long, default_value_t = 10_000)]
    pub max_batch_records: usize,
    /// Longest time to fill one transaction, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub commit_interval_ms: u64,
    /// Consumer group session timeout, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub session_timeout_ms: u64,
}

/// Processors `process` can run. The four product processors join as they land.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProcessorName {
    /// Counts records per key (the runtime's exactly-once tests and benchmark).
    Probe,
}

pub(super) async fn run(args: ProcessArgs) -> anyhow::Result<()> {
    let instance_id = match args.instance_id.clone() {
        Some(id) => id,
        None => std::env::var("HOSTNAME").unwrap_or_else(|_| format!("pid-{}", std::process::id())),
    };
    let mut cfg = RuntimeConfig::new(&args.bootstrap, &args.application_id, &instance_id, "probe");
    cfg.inputs = args.inputs.clone();
    cfg.globals = args.globals.clone();
    cfg.outputs = args.outputs.clone();
    if let Some(dl) = &args.dead_letter {
        cfg.dead_letter = dl.clone();
    }
    cfg.max_batch_records = args.max_batch_records;
    cfg.commit_interval_ms = args.commit_interval_ms;
    cfg.session_timeout_ms = args.session_timeout_ms;
    let ports = Probe::OUTPUTS;
    if cfg.outputs.len() != ports.len() {
        bail!("processor probe has {} output(s), {} --output given", ports.len(), cfg.outputs.len());
    }
    prepare_topics(&cfg, &args, &ports.iter().map(|p| p.compacted).collect::<Vec<_>>()).await?;

    let registry =
        args.registry.as_deref().map(|u| RegistryClient::new(u, Duration::from_secs(10))).transpose()?;
    let codec = Arc::new(Codec::new(registry)?);
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(RuntimeStats::default());
    let handle = tokio::runtime::Handle::current();
    let worker = {
        let (stop, stats, codec, cfg) =
            (Arc::clone(&stop), Arc::clone(&stats), Arc::clone(&codec), cfg.clone());
        tokio::task::spawn_blocking(move || {
            run_blocking(&cfg, &codec, &handle, &Probe::OUTPUTS, Probe::for_task, &stop, &stats)
        })
    };
    tokio::pin!(worker);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut report = tokio::time::interval(Duration::from_secs(5));
    let result = loop {
        tokio::select! {
            r = &mut worker => break r,
            _ = sigterm.recv() => stop.store(true, Ordering::Relaxed),
            _ = tokio::signal::ctrl_c() => stop.store(true, Ordering::Relaxed),
            _ = report.tick() => tracing::info!(?stats, "progress"),
        }
    };
    eprintln!("process: {}", summary(&stats));
    result.context("the runtime thread panicked")??;
    Ok(())
}

fn summary(s: &RuntimeStats) -> String {
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "{} in, {} out, {} dead-lettered, {} commits, {} aborts, {} restored in {} ms, lag {}",
        g(&s.records_in),
        g(&s.records_out),
        g(&s.dead_lettered),
        g(&s.commits),
        g(&s.aborts),
        g(&s.restored),
        g(&s.restore_ms),
        g(&s.lag)
    )
}

/// Creates or checks every topic the processor needs, and the co-partitioning of inputs.
async fn prepare_topics(cfg: &RuntimeConfig, args: &ProcessArgs, compacted: &[bool]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &cfg.bootstrap).create()?;
    let probe: BaseConsumer = ClientConfig::new().set("bootstrap.servers", &cfg.bootstrap).create()?;
    let fetch = || tokio::task::block_in_place(|| probe.fetch_metadata(None, Duration::from_secs(30)));
    // Global inputs may have any partition count: only a missing one is created (or reported).
    let existing: Vec<String> = fetch()?.topics().iter().map(|t| t.name().to_owned()).collect();
    let mut specs: Vec<TopicSpec> = cfg.inputs.iter().map(|t| TopicSpec::new(t, args.partitions)).collect();
    specs.extend(
        cfg.globals.iter().filter(|g| !existing.contains(g)).map(|t| TopicSpec::new(t, args.partitions)),
    );
    ensure_topics(&admin, &specs, args.create_topics).await?;
    let metadata = fetch()?;
    let inputs: Vec<&str> = cfg.inputs.iter().map(String::as_str).collect();
    check_copartitioned(&metadata, &[&inputs])?;
    let input_partitions = metadata
        .topics()
        .iter()
        .find(|t| t.name() == cfg.inputs[0])
        .map_or(args.partitions, |t| t.partitions().len() as i32);

    specs = cfg
        .outputs
        .iter()
        .zip(compacted)
        .map(|(t, c)| {
            if *c {
                TopicSpec::new(t, args.partitions).compacted()
            } else {
                TopicSpec::new(t, args.partitions)
            }
        })
        .collect();
    specs.push(TopicSpec::new(&cfg.dead_letter, args.partitions));
    let mut instance = Probe::new();
    let mut stores: Vec<String> = instance.stores().iter().map(|s| s.name().to_owned()).collect();
    if !cfg.globals.is_empty() {
        stores.push(crate::runtime::task::GLOBAL_POSITIONS_STORE.to_owned());
    }
    for store in stores {
        specs.push(TopicSpec::new(cfg.changelog_topic(&store), input_partitions).compacted());
    }
    ensure_topics(&admin, &specs, args.create_topics).await?;
    Ok(())
}
