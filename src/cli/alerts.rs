//! `kubefacts alerts`: forward the coverage alerts of `[coverage]` to Alertmanager
//! ([`kubefacts::alerts`], `docs/ALERTS.md`).

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use clap::Args;

use kubefacts::{
    alerts::{AlertsRun, ForwarderConfig, shell},
    health::DEFAULT_STALL_LIMIT,
    metrics::Metrics,
};

/// Arguments of `kubefacts alerts`.
#[derive(Debug, Args)]
pub struct AlertsArgs {
    /// Alertmanager base URL; alerts go to `<URL>/api/v2/alerts`.
    #[arg(long, env = "KUBEFACTS_ALERTMANAGER")]
    pub alertmanager: String,
    /// Pipeline file for the topic names (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Topic to read instead of `[topics].coverage_alerts` (full name).
    #[arg(long)]
    pub topic: Option<String>,
    /// Value of the `severity` label of every alert.
    #[arg(long, default_value = "warning")]
    pub severity: String,
    /// Seconds between two sends of a firing alert; its `endsAt` is 4 intervals ahead.
    #[arg(long, default_value_t = 60)]
    pub resend_interval_secs: u64,
    /// Longest pause between retries while Alertmanager fails, in seconds.
    #[arg(long, default_value_t = 30)]
    pub max_backoff_secs: u64,
    /// Timeout of one POST to Alertmanager, in seconds.
    #[arg(long, default_value_t = 10)]
    pub request_timeout_secs: u64,
    /// `generatorURL` of every alert (a dashboard, a runbook); none by default.
    #[arg(long)]
    pub generator_url: Option<String>,
    /// Address (`host:port`) of `/healthz`, `/readyz` and `/metrics` (docs/METRICS.md,
    /// "Health"); none by default.
    #[arg(long, env = "KUBEFACTS_METRICS_ADDR")]
    pub metrics_addr: Option<String>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
}

pub(super) async fn run(args: AlertsArgs) -> anyhow::Result<()> {
    let pipeline = super::load_pipeline(args.config.as_deref())?;
    if args.severity.is_empty() {
        bail!("--severity must not be empty");
    }
    if args.resend_interval_secs == 0 {
        bail!("--resend-interval-secs must be at least 1");
    }
    if args.max_backoff_secs == 0 || args.request_timeout_secs == 0 {
        bail!("--max-backoff-secs and --request-timeout-secs must be at least 1");
    }
    let topics = &pipeline.topics;
    let metrics = Metrics::new();
    let run = AlertsRun {
        brokers: args.kafka.brokers(&pipeline.kafka)?,
        topic: args.topic.clone().unwrap_or_else(|| topics.full(&topics.coverage_alerts)),
        group: format!("{}-alerts", pipeline.process.application_id),
        alertmanager: args.alertmanager.clone(),
        forwarder: ForwarderConfig {
            severity: args.severity.clone(),
            resend_interval_ms: i64::try_from(args.resend_interval_secs.saturating_mul(1000))
                .context("--resend-interval-secs is too large")?,
            generator_url: args.generator_url.clone(),
        },
        max_backoff: Duration::from_secs(args.max_backoff_secs),
        request_timeout: Duration::from_secs(args.request_timeout_secs),
        heartbeat: metrics.health().heartbeat("alerts", DEFAULT_STALL_LIMIT),
        ready: metrics.health().condition("alerts", "not reading the topic yet"),
    };
    let stop_metrics = super::serve_metrics(args.metrics_addr.as_ref(), metrics).await?;
    let endpoint = run.endpoint()?;
    let codec = args.kafka.codec()?;
    eprintln!(
        "alerts: {} → {endpoint}, re-sending firing alerts every {} s",
        run.topic, args.resend_interval_secs
    );
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stop = async move {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let result = shell::run(&run, &codec, stop).await.with_context(|| format!("alerts from {}", run.topic));
    let _ = stop_metrics.send(());
    result
}
