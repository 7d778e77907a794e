//! `kubefacts cleaner`: apply the cleanup decisions of `[runs]` to the cluster — a dry run
//! unless `--apply` — and record every outcome on `cleanup-outcomes.v1`, exactly once per
//! decision ([`kubefacts::cleanup::cleaner`], `docs/CLEANER.md`).

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use clap::Args;

use kubefacts::{
    cleanup::{
        cleaner::shell::{self, CleanerRun},
        outcome::CleanupOutcome,
    },
    codec::WriterSchema,
    health::DEFAULT_STALL_LIMIT,
    metrics::Metrics,
    runtime::{
        deadletter,
        kafka::RuntimeStats,
        topics::{TopicSpec, ensure_topics},
    },
};

/// Arguments of `kubefacts cleaner`.
#[derive(Debug, Args)]
pub struct CleanerArgs {
    /// Pipeline file: topics, `[process].application_id` (the consumer group is
    /// `<application_id>-cleaner`, or `-cleaner-dry-run`) and `[cleaner]` (default: the
    /// embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Delete Jobs. Without it, a dry run: GET only, outcomes WOULD_DELETE etc., in its own
    /// consumer group, never a DELETE.
    #[arg(long)]
    pub apply: bool,
    /// Most DELETE requests per second (overrides `cleaner.max_deletes_per_sec`).
    #[arg(long)]
    pub max_deletes_per_sec: Option<u32>,
    /// This instance's stable id, part of its transactional id (a restarted instance must
    /// reuse it to fence its previous incarnation). Default: the host name.
    #[arg(long, visible_alias = "instance", env = "KUBEFACTS_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Overrides `process.application_id`.
    #[arg(long)]
    pub application_id: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config, else the in-cluster
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Create missing topics (decisions, outcomes, dead letters) with `--partitions`
    /// partitions instead of failing with the commands that would create them.
    #[arg(long)]
    pub create_topics: bool,
    /// Partitions of topics `--create-topics` creates (default: `process.partitions`).
    #[arg(long)]
    pub partitions: Option<i32>,
    /// Prometheus `/metrics` endpoint address (`host:port`; overrides
    /// `process.metrics_addr`): the runtime's families with `stage="cleaner"`.
    #[arg(long)]
    pub metrics_addr: Option<String>,
}

pub(super) async fn run(args: CleanerArgs) -> anyhow::Result<()> {
    let mut pipeline = super::load_pipeline(args.config.as_deref())?;
    if let Some(n) = args.max_deletes_per_sec {
        pipeline.cleaner.max_deletes_per_sec = n;
    }
    if let Err((key, why)) = pipeline.cleaner.check() {
        anyhow::bail!("--max-deletes-per-sec (cleaner.{key}): {why}");
    }
    let topics = &pipeline.topics;
    let metrics = Metrics::new();
    let health = Arc::clone(metrics.health());
    let run = CleanerRun {
        brokers: args.kafka.brokers(&pipeline.kafka)?,
        application_id: args
            .application_id
            .clone()
            .unwrap_or_else(|| pipeline.process.application_id.clone()),
        instance_id: super::instance_name(args.instance_id.as_deref()),
        dry_run: !args.apply,
        decisions: topics.full(&topics.cleanup_decisions),
        outcomes: topics.full(&topics.cleanup_outcomes),
        dead_letter: topics.full(&topics.dead_letter),
        transaction_timeout_ms: pipeline.process.transaction_timeout_ms,
        session_timeout_ms: pipeline.process.session_timeout_ms,
        cleaner: pipeline.cleaner.clone(),
        heartbeat: metrics.health().heartbeat("cleaner", DEFAULT_STALL_LIMIT),
        ready: metrics.health().condition("cleaner", "not polling its consumer group yet"),
    };
    let partitions = args.partitions.unwrap_or(pipeline.process.partitions);
    prepare_topics(&run, &pipeline.topics, args.create_topics, partitions).await?;

    let client = cleaner_client(super::kube_config(args.kubeconfig.as_deref()).await?, &run)?;

    let stats = metrics.stage(shell::STAGE);
    let stop_metrics =
        super::serve_metrics(args.metrics_addr.as_ref().or(pipeline.process.metrics_addr.as_ref()), metrics)
            .await?;

    let codec = Arc::new(args.kafka.codec()?);
    // The writers' schemas first, however long the registry takes: `/readyz` says what is
    // awaited, and the loop's heartbeat is watched from its first turn on.
    run.heartbeat.retire();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let wanted = [
        WriterSchema::value(&run.outcomes, CleanupOutcome::FULL_NAME),
        WriterSchema::value(&run.dead_letter, deadletter::FULL_NAME),
    ];
    let stopping = super::registry::stop_signal(&mut sigterm);
    if super::registry::register_writers(&codec, &wanted, Some(&health), stopping).await?
        == super::registry::Registered::Stopped
    {
        let _ = stop_metrics.send(());
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handle = tokio::runtime::Handle::current();
    let mut worker = {
        let (run, codec, stop, stats) =
            (run.clone(), Arc::clone(&codec), Arc::clone(&stop), Arc::clone(&stats));
        tokio::task::spawn_blocking(move || {
            shell::run_blocking(&run, &codec, &client, &handle, &stop, &stats)
        })
    };
    eprintln!(
        "cleaner: {} {} → {} as group {}",
        if run.dry_run { "dry run (no --apply): nothing is deleted;" } else { "applying" },
        run.decisions,
        run.outcomes,
        run.group_id()
    );

    let mut report = tokio::time::interval(Duration::from_secs(5));
    let result = loop {
        tokio::select! {
            done = &mut worker => break done.context("the cleaner thread panicked")?,
            _ = sigterm.recv() => stop.store(true, Ordering::Relaxed),
            _ = tokio::signal::ctrl_c() => stop.store(true, Ordering::Relaxed),
            _ = report.tick() => tracing::info!(progress = %summary(&stats), "progress"),
        }
    };
    let _ = stop_metrics.send(());
    eprintln!("cleaner: {}", summary(&stats));
    Ok(result?)
}

/// Committed counts so far, in one line.
fn summary(stats: &RuntimeStats) -> String {
    let outcomes: Vec<String> =
        shell::outcome_counts(stats).iter().map(|(k, n)| format!("{} {n}", k.label())).collect();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "{} decisions, outcomes [{}], {} dead-lettered, {} commits, {} aborts, lag {}",
        g(&stats.records_in),
        outcomes.join(", "),
        g(&stats.dead_lettered),
        stats.commits.get(),
        stats.aborts.get(),
        g(&stats.lag)
    )
}

/// A client whose every request the cleaner bounds and retries itself: kube's own retries
/// (429/503/504) are off, so `[cleaner].max_attempts` is the whole story.
fn cleaner_client(mut config: kube::Config, run: &CleanerRun) -> anyhow::Result<kube::Client> {
    config.default_retry = false;
    config.read_timeout = Some(Duration::from_millis(run.cleaner.request_timeout_ms));
    Ok(kube::Client::try_from(config)?)
}

/// Checks (or, with `--create-topics`, creates) the decisions, outcomes and dead-letter
/// topics. Existing topics may have any partition count.
async fn prepare_topics(
    run: &CleanerRun,
    topics: &kubefacts::config::TopicsConfig,
    create: bool,
    partitions: i32,
) -> anyhow::Result<()> {
    let admin = super::admin_client(&run.brokers)?;
    let existing = super::existing_topics(&run.brokers)?;
    let specs: Vec<TopicSpec> = [&run.decisions, &run.outcomes, &run.dead_letter]
        .into_iter()
        .filter(|t| !existing.contains(t))
        .map(|t| topics.spec(t, partitions, false))
        .collect();
    ensure_topics(&admin, &specs, create).await?;
    Ok(())
}
