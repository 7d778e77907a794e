//! `kubefacts watch`: the only component that reads the Kubernetes API for input. Elects a
//! leader on a Lease; the leader relists and watches Namespaces, CronJobs, Jobs, Pods and
//! the configured Leases, and publishes minimized, admitted, keyed observations.

use std::{path::PathBuf, sync::Arc};

use clap::Args;

use kubefacts::{
    metrics::Metrics,
    observe::{InputTopic, Observer, model::Source},
    watch::{Publisher, WatchStats, WatcherHealth, watcher},
};

/// Arguments of `kubefacts watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Pipeline configuration (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Kubeconfig file (default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// This replica's identity in leader election and in `source.instance`. Default: the
    /// host name (the Pod name in a Deployment).
    #[arg(long, env = "KUBEFACTS_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Input topic creation.
    #[command(flatten)]
    pub topics: super::InputTopicArgs,
    /// Prometheus `/metrics` endpoint address (`host:port`).
    #[arg(long)]
    pub metrics_addr: Option<String>,
}

pub(super) async fn run(args: WatchArgs) -> anyhow::Result<()> {
    let config = super::load_pipeline(args.config.as_deref())?;
    let identity = super::instance_name(args.instance_id.as_deref());
    let client = kube::Client::try_from(super::kube_config(args.kubeconfig.as_deref()).await?)?;

    let brokers = args.kafka.brokers(&config.kafka)?;
    args.topics.ensure(&brokers, &config.topics).await?;
    let codec = args.kafka.codec()?;
    let mut metrics = Metrics::new();
    let health = Arc::clone(metrics.health());
    let stats =
        Arc::new(WatchStats { health: WatcherHealth::new(metrics.health()), ..WatchStats::default() });

    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    metrics.add_watcher(Arc::clone(&stats));
    let stop_metrics = super::serve_metrics(args.metrics_addr.as_ref(), metrics).await?;
    let mut stopped = stop.clone();
    tokio::spawn(async move {
        let _ = stopped.wait_for(|s| *s).await;
        let _ = stop_metrics.send(());
    });
    tokio::spawn(async move {
        let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("stopping: releasing the lease");
        stop_tx.send_replace(true);
    });
    // The schemas first, however long the registry takes: `/readyz` says what is awaited,
    // and the election loop, not turning yet, is watched from its first round on.
    stats.health.election.retire();
    let wanted = super::registry::input_writers(&config.topics, &InputTopic::ALL);
    let mut stopping = stop.clone();
    let registered = super::registry::register_writers(&codec, &wanted, Some(&health), async move {
        let _ = stopping.wait_for(|s| *s).await;
    })
    .await?;
    if registered == super::registry::Registered::Stopped {
        return Ok(());
    }
    let mut publisher = Publisher::connect(&brokers, &codec, &config.topics).await?;
    // What the watcher publishes as: this cluster, this instance; the epoch is set by each
    // term's first relist.
    let source = Source { cluster: config.cluster.clone(), instance: identity.clone(), epoch: 0 };
    let observer = Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone());
    watcher::run(client, &observer, &config.watch, &identity, &mut publisher, Arc::clone(&stats), stop)
        .await?;
    publisher.flush().await?;
    eprintln!(
        "watch: {} records published, {} heartbeats, {} leadership terms",
        publisher.counts().records,
        stats.heartbeats.get(),
        stats.terms.get()
    );
    Ok(())
}
