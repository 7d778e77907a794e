//! `kubefacts process`: run processors on Kafka with exactly-once semantics.
//!
//! The stages come from the `[process]` section of a pipeline file (`--config`), or, for
//! one ad-hoc stage, from flags. Each stage runs its own exactly-once loop on its own
//! thread — its own consumer group, transactional producer and changelogs — so a stage that
//! stalls or fails never holds another's commits; a stage that fails stops the process.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio::task::JoinSet;

use kubefacts::pipeline::Stage as StageDef;
use kubefacts::{
    codec::WriterSchema,
    config::{ProcessConfig, StageConfig},
    health::{DEFAULT_STALL_LIMIT, Heartbeat},
    metrics::Metrics,
    runtime::{
        kafka::{RuntimeConfig, RuntimeStats, check_purge_allowed, run_thread},
        topics::{TopicSpec, check_copartitioned, ensure_topics},
    },
};

/// Arguments of `kubefacts process`.
#[derive(Debug, Args)]
pub struct ProcessArgs {
    /// Pipeline file whose `[process]` section names the stages and settings (see
    /// pipelines/default.toml). Without it, one stage is described by the flags below.
    #[arg(long, conflicts_with_all = ["processor", "inputs", "globals", "outputs"])]
    pub config: Option<PathBuf>,
    /// Which processor to run (single-stage mode): probe, probe-rekey, runs, journal,
    /// coverage, sessions or session-owners.
    #[arg(long, value_parser = stage_named, required_unless_present = "config")]
    pub processor: Option<&'static StageDef>,
    /// Input topic(s), co-partitioned, in the processor's input order.
    #[arg(long = "input", required_unless_present = "config")]
    pub inputs: Vec<String>,
    /// Global input topic(s): every task reads all their partitions (e.g. leases).
    #[arg(long = "global")]
    pub globals: Vec<String>,
    /// Output topic(s), one per output of the processor.
    #[arg(long = "output", required_unless_present = "config")]
    pub outputs: Vec<String>,
    /// Dead-letter topic (default: the pipeline's, `kubefacts.dead-letter.v1`).
    #[arg(long)]
    pub dead_letter: Option<String>,
    /// Prefix of consumer groups, transactional ids and changelog topics; every instance
    /// of one pipeline shares it (overrides `process.application_id`).
    #[arg(long)]
    pub application_id: Option<String>,
    /// This instance's stable id (a restarted instance must reuse it to fence its
    /// previous incarnation). Default: the host name.
    #[arg(long, env = "KUBEFACTS_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Create missing topics (outputs, changelogs, dead letters; inputs too) instead of
    /// failing with the commands that would create them.
    #[arg(long)]
    pub create_topics: bool,
    /// Partitions of topics created by `--create-topics` (changelogs follow the inputs).
    #[arg(long)]
    pub partitions: Option<i32>,
    /// Stream threads of this instance (each one consumer, one transactional producer,
    /// tasks of every stage).
    #[arg(long)]
    pub num_stream_threads: Option<usize>,
    /// Most records per transaction.
    #[arg(long)]
    pub max_batch_records: Option<usize>,
    /// Records a task buffers of one input partition before the partition is paused.
    #[arg(long)]
    pub buffered_records_per_partition: Option<usize>,
    /// Longest time to fill one transaction, in milliseconds.
    #[arg(long)]
    pub commit_interval_ms: Option<u64>,
    /// Consumer group session timeout, in milliseconds.
    #[arg(long)]
    pub session_timeout_ms: Option<u64>,
    /// Broker-side transaction timeout, in milliseconds.
    #[arg(long)]
    pub transaction_timeout_ms: Option<u64>,
    /// Prometheus `/metrics` endpoint address (`host:port`).
    #[arg(long)]
    pub metrics_addr: Option<String>,
    /// Tests only (builds with the `failpoints` feature): stop this process (SIGSTOP)
    /// inside a transaction, `before-offsets:N` or `before-commit:N`, or after restoring N
    /// changelog records, `during-restore:N`.
    #[cfg(feature = "failpoints")]
    #[arg(long, hide = true)]
    pub failpoint: Option<kubefacts::runtime::kafka::Failpoint>,
}

/// `--processor`: a stage of [`kubefacts::pipeline::STAGES`] by name.
fn stage_named(name: &str) -> Result<&'static StageDef, kubefacts::pipeline::PipelineError> {
    StageDef::named(name)
}

/// One stage, resolved: what runs, over which topics, with which settings.
struct Stage {
    processor: &'static StageDef,
    runtime: RuntimeConfig,
    stats: Arc<RuntimeStats>,
}

pub(super) async fn run(args: ProcessArgs) -> anyhow::Result<()> {
    let pipeline = super::load_pipeline(args.config.as_deref())?;
    let settings = settings(&pipeline.process, &args);
    let stages: Vec<StageConfig> = match (&args.config, args.processor) {
        (Some(path), _) if pipeline.process.stages.is_empty() => bail!(
            "{}: [process] has no stages (`stages = []`); pipelines/default.toml lists the product stages, pipelines/probe.toml the runtime's probes",
            path.display()
        ),
        (Some(_), _) => pipeline.process.stages.clone(),
        (None, Some(p)) => vec![StageConfig {
            name: None,
            processor: p.name.to_owned(),
            inputs: args.inputs.clone(),
            globals: args.globals.clone(),
            untimed: Vec::new(),
            outputs: args.outputs.clone(),
        }],
        (None, None) => bail!("give --config or --processor"),
    };
    let instance_id = super::instance_name(args.instance_id.as_deref());
    let brokers = args.kafka.brokers(&pipeline.kafka)?;
    let dead_letter =
        args.dead_letter.clone().unwrap_or_else(|| pipeline.topics.full(&pipeline.topics.dead_letter));

    // Every stage counts into the families of this one `Metrics`, served or not.
    let metrics = Metrics::new();
    let mut resolved = Vec::with_capacity(stages.len());
    for stage in &stages {
        let processor = StageDef::named(&stage.processor)?;
        processor.check(stage)?;
        let mut runtime =
            RuntimeConfig::new(&args.kafka.bootstrap, &settings.application_id, &instance_id, stage.name())
                .with_brokers(brokers.clone());
        runtime.inputs = stage.inputs.clone();
        runtime.globals = stage.globals.clone();
        runtime.untimed = stage.untimed.clone();
        runtime.outputs = stage.outputs.clone();
        // The application's own repartition topics: nothing reads below what the group
        // committed, so it is deleted (docs/RUNTIME.md, "Purging internal topics").
        runtime.purged = pipeline.purged_inputs(stage);
        runtime.purge_interval_ms = settings.purge_interval_ms;
        runtime.rules = pipeline.input_rules(stage);
        runtime.dead_letter = dead_letter.clone();
        runtime.max_batch_records = settings.max_batch_records;
        runtime.buffered_records_per_partition = settings.buffered_records_per_partition;
        runtime.commit_interval_ms = settings.commit_interval_ms;
        runtime.transaction_timeout_ms = settings.transaction_timeout_ms;
        runtime.session_timeout_ms = settings.session_timeout_ms;
        #[cfg(feature = "failpoints")]
        {
            runtime.failpoint = args.failpoint;
        }
        prepare_topics(&runtime, processor, &settings, &pipeline.topics)
            .await
            .with_context(|| format!("stage {}", stage.name()))?;
        let stats = metrics.stage(&runtime.processor);
        resolved.push(Stage { processor, runtime, stats });
    }

    let health = Arc::clone(metrics.health());
    // Not ready until the stream threads run: /readyz answered 200 in the moment between
    // serving it and the registry wait below (a late registry's test caught it).
    let started = health.condition("stream threads", "not started yet");
    let stop_metrics = super::serve_metrics(settings.metrics_addr.as_ref(), metrics).await?;

    // Every writer a stage builds is registered now, however long the registry takes to
    // answer; the stages then build theirs from the ids the codec keeps.
    let codec = Arc::new(args.kafka.codec()?);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let wanted = writer_schemas(&resolved);
    let stopping = super::registry::stop_signal(&mut sigterm);
    if super::registry::register_writers(&codec, &wanted, Some(&health), stopping).await?
        == super::registry::Registered::Stopped
    {
        let _ = stop_metrics.send(());
        return Ok(());
    }

    let stop = Arc::new(AtomicBool::new(false));
    // A turn's longest bounded wait is a commit: deliveries, offsets and up to four commit
    // calls, each up to the transaction timeout (docs/METRICS.md, "Health"). Watched from
    // here on: waiting for the registry above is no stalled loop.
    let stall_limit =
        DEFAULT_STALL_LIMIT.max(Duration::from_millis(settings.transaction_timeout_ms.saturating_mul(8)));
    let heartbeats: Vec<Heartbeat> = (0..settings.num_stream_threads)
        .map(|t| health.heartbeat(&format!("stream thread {t}"), stall_limit))
        .collect();
    let handle = tokio::runtime::Handle::current();
    // Every stream thread hosts tasks of every stage; the group decides which.
    let mut workers = JoinSet::new();
    for (thread, heartbeat) in heartbeats.iter().enumerate() {
        let (stop, codec, handle, pipeline) =
            (Arc::clone(&stop), Arc::clone(&codec), handle.clone(), pipeline.clone());
        let stages: Vec<(&'static StageDef, RuntimeConfig, Arc<RuntimeStats>)> = resolved
            .iter()
            .map(|s| {
                let runtime = RuntimeConfig { heartbeat: heartbeat.clone(), ..s.runtime.clone() };
                (s.processor, runtime, Arc::clone(&s.stats))
            })
            .collect();
        workers.spawn_blocking(move || {
            let hosted: Result<Vec<_>, _> = stages
                .iter()
                .map(|(def, cfg, stats)| {
                    def.kafka_stage(&pipeline, cfg, &codec, &handle, stats)
                        .map_err(|e| anyhow::Error::new(e).context(format!("stage {}", cfg.processor)))
                })
                .collect();
            let result = hosted.and_then(|hosted| {
                run_thread(&stages[0].1.thread(thread), hosted, &stop).map_err(anyhow::Error::new)
            });
            (thread, result)
        });
    }
    started.met();
    tracing::info!(
        stages = ?resolved.iter().map(|s| &s.runtime.processor).collect::<Vec<_>>(),
        threads = settings.num_stream_threads,
        "running"
    );

    let mut report = tokio::time::interval(Duration::from_secs(5));
    let mut failure: Option<anyhow::Error> = None;
    while !workers.is_empty() {
        tokio::select! {
            done = workers.join_next() => {
                let (thread, result) = done.expect("not empty").context("a stream thread panicked")?;
                if let Err(e) = result {
                    // One thread down stops the others: the process exits and is restarted whole.
                    stop.store(true, Ordering::Relaxed);
                    failure.get_or_insert(e.context(format!("stream thread {thread}")));
                }
            }
            _ = sigterm.recv() => stop.store(true, Ordering::Relaxed),
            _ = tokio::signal::ctrl_c() => stop.store(true, Ordering::Relaxed),
            _ = report.tick() => for s in &resolved {
                tracing::info!(stage = %s.runtime.processor, stats = %summary(&s.stats), "progress");
            },
        }
    }
    let _ = stop_metrics.send(());
    for s in &resolved {
        eprintln!("process: {}: {}", s.runtime.processor, summary(&s.stats));
    }
    failure.map_or(Ok(()), Err)
}

/// The `[process]` settings with the command line's overrides applied.
fn settings(file: &ProcessConfig, args: &ProcessArgs) -> ProcessConfig {
    let mut s = file.clone();
    if let Some(v) = &args.application_id {
        s.application_id = v.clone();
    }
    s.create_topics |= args.create_topics;
    s.partitions = args.partitions.unwrap_or(s.partitions);
    s.num_stream_threads = args.num_stream_threads.unwrap_or(s.num_stream_threads);
    s.max_batch_records = args.max_batch_records.unwrap_or(s.max_batch_records);
    s.buffered_records_per_partition =
        args.buffered_records_per_partition.unwrap_or(s.buffered_records_per_partition);
    s.commit_interval_ms = args.commit_interval_ms.unwrap_or(s.commit_interval_ms);
    s.session_timeout_ms = args.session_timeout_ms.unwrap_or(s.session_timeout_ms);
    s.transaction_timeout_ms = args.transaction_timeout_ms.unwrap_or(s.transaction_timeout_ms);
    if args.metrics_addr.is_some() {
        s.metrics_addr = args.metrics_addr.clone();
    }
    s
}

fn summary(s: &RuntimeStats) -> String {
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "{} in, {} out, {} dead-lettered, {} commits, {} aborts, {} restored in {} ms, lag {}",
        g(&s.records_in),
        g(&s.records_out),
        g(&s.dead_lettered),
        s.commits.get(),
        s.aborts.get(),
        s.restored.get(),
        (s.restore.get() * 1000.0).round(),
        g(&s.lag)
    )
}

/// The writers the stages build (`kafka_stage`): each output's values, and keys where the
/// port has an Avro key, and the dead letters.
fn writer_schemas(stages: &[Stage]) -> Vec<WriterSchema> {
    let mut wanted = Vec::new();
    for stage in stages {
        let cfg = &stage.runtime;
        for (topic, port) in cfg.outputs.iter().zip(stage.processor.outputs) {
            wanted.push(WriterSchema::value(topic, port.record));
            wanted.extend(port.key_record.map(|key| WriterSchema::key(topic, key)));
        }
        wanted.push(WriterSchema::value(&cfg.dead_letter, kubefacts::runtime::deadletter::FULL_NAME));
    }
    wanted
}

/// Creates or checks every topic a stage needs, and the co-partitioning of its inputs.
async fn prepare_topics(
    cfg: &RuntimeConfig,
    processor: &StageDef,
    settings: &ProcessConfig,
    topics: &kubefacts::config::TopicsConfig,
) -> anyhow::Result<()> {
    let (create, partitions) = (settings.create_topics, settings.partitions);
    let admin = super::admin_client(&cfg.brokers)?;
    let probe: BaseConsumer = cfg.brokers.client().create()?;
    let fetch = || tokio::task::block_in_place(|| probe.fetch_metadata(None, Duration::from_secs(30)));
    // Global inputs may have any partition count: only a missing one is created (or reported).
    let existing: Vec<String> = fetch()?.topics().iter().map(|t| t.name().to_owned()).collect();
    let mut specs: Vec<TopicSpec> = cfg.inputs.iter().map(|t| topics.spec(t, partitions, false)).collect();
    specs.extend(
        cfg.globals.iter().filter(|g| !existing.contains(g)).map(|t| topics.spec(t, partitions, false)),
    );
    ensure_topics(&admin, &specs, create).await?;
    let metadata = fetch()?;
    let inputs: Vec<&str> = cfg.inputs.iter().map(String::as_str).collect();
    check_copartitioned(&metadata, &[&inputs])?;
    let input_partitions = metadata
        .topics()
        .iter()
        .find(|t| t.name() == cfg.inputs[0])
        .map_or(partitions, |t| t.partitions().len() as i32);

    specs = cfg
        .outputs
        .iter()
        .zip(processor.outputs)
        .map(|(t, port)| topics.spec(t, partitions, port.compacted))
        .collect();
    specs.push(topics.spec(&cfg.dead_letter, partitions, false));
    let mut stores: Vec<String> = processor.stores.iter().map(|s| (*s).to_owned()).collect();
    stores.extend(
        kubefacts::runtime::task::runtime_stores(!cfg.globals.is_empty()).into_iter().map(String::from),
    );
    for store in stores {
        specs.push(TopicSpec::new(cfg.changelog_topic(&store), input_partitions).compacted());
    }
    ensure_topics(&admin, &specs, create).await?;
    if settings.purge_interval_ms > 0 {
        check_purge_allowed(&admin, &cfg.purged, input_partitions).await?;
    }
    Ok(())
}
