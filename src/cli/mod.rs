//! The `kubefacts` command line: one module per verb, each a thin shell over the library.

mod acls;
mod alerts;
mod cleaner;
mod demo;
mod kafka;
mod observed;
mod process;
mod progress;
mod publish;
mod registry;
mod replay;
mod report;
mod schemas;
mod session_event;
mod simulate;
mod tail;
mod watch;

use clap::{Parser, Subcommand};
use kubefacts::config::kafka::Brokers;

pub use acls::AclsArgs;
pub use alerts::AlertsArgs;
pub use cleaner::CleanerArgs;
pub use demo::DemoArgs;
pub use process::ProcessArgs;
pub use publish::PublishArgs;
pub use replay::ReplayArgs;
pub use report::ReportArgs;
pub use schemas::SchemasArgs;
pub use session_event::SessionEventArgs;
pub use simulate::SimulateArgs;
pub use tail::TailArgs;
pub use watch::WatchArgs;

/// Where records live: the Kafka brokers and, optionally, the schema registry. Shared by
/// every verb that talks to Kafka.
#[derive(Debug, clap::Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KUBEFACTS_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Confluent-compatible schema registry URL (credentials in it are never shown);
    /// without it, records use (and only decode from) single-object encoding.
    #[arg(long, env = "KUBEFACTS_REGISTRY", hide_env_values = true)]
    pub registry: Option<String>,
    /// PEM file of the CA that signed an https registry's certificate (added to the
    /// system's trust store).
    #[arg(long, env = "KUBEFACTS_REGISTRY_CA_FILE")]
    pub registry_ca_file: Option<std::path::PathBuf>,
    /// Registry basic-auth user name (with --registry-password-file).
    #[arg(long, env = "KUBEFACTS_REGISTRY_USERNAME", requires = "registry_password_file")]
    pub registry_username: Option<String>,
    /// File holding the registry basic-auth password, as a mounted Secret.
    #[arg(long, env = "KUBEFACTS_REGISTRY_PASSWORD_FILE", requires = "registry_username")]
    pub registry_password_file: Option<std::path::PathBuf>,
    /// TLS and SASL to the brokers, over the pipeline file's `[kafka]` section.
    #[command(flatten)]
    pub security: kafka::KafkaSecurityArgs,
}

impl KafkaArgs {
    /// The brokers at `--bootstrap`, reached as the pipeline's `[kafka]` section says
    /// (secrets read now: a bad section fails at start, naming the key).
    /// Refused credentials fail here, at start, instead of librdkafka retrying them forever.
    pub fn brokers(&self, kafka: &kubefacts::config::kafka::KafkaConfig) -> anyhow::Result<Brokers> {
        let kafka = self.security.apply(kafka);
        let brokers = kafka.brokers(&self.bootstrap)?;
        tokio::task::block_in_place(|| brokers.check_authentication(std::time::Duration::from_secs(15)))?;
        Ok(brokers)
    }

    /// The codec: Confluent framing through the registry when one is given.
    pub fn codec(&self) -> anyhow::Result<kubefacts::codec::Codec> {
        use anyhow::Context;
        let Some(url) = self.registry.as_deref() else {
            return Ok(kubefacts::codec::Codec::new(None)?);
        };
        let mut access = kubefacts::codec::RegistryAccess::default();
        if let Some(path) = &self.registry_ca_file {
            let pem =
                std::fs::read(path).with_context(|| format!("--registry-ca-file {}", path.display()))?;
            access.ca_pem = Some(pem);
        }
        if let (Some(user), Some(path)) = (&self.registry_username, &self.registry_password_file) {
            // Read at start, like the Kafka password; trailing newlines of a mounted file dropped.
            let password = std::fs::read_to_string(path)
                .with_context(|| format!("--registry-password-file {}", path.display()))?;
            access.basic_auth = Some((user.clone(), password.trim_end_matches(['\n', '\r']).to_owned()));
        }
        let registry =
            kubefacts::codec::RegistryClient::with_access(url, std::time::Duration::from_secs(10), access)?;
        Ok(kubefacts::codec::Codec::new(Some(registry))?)
    }
}

/// Whether a verb that publishes observations creates the input topics it writes to.
#[derive(Debug, clap::Args)]
pub struct InputTopicArgs {
    /// Create missing input topics with `--partitions` partitions.
    #[arg(long)]
    pub create_topics: bool,
    /// Partitions of topics `--create-topics` creates.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
}

impl InputTopicArgs {
    /// Creates the input topics named by `topics` when `--create-topics` was given.
    pub async fn ensure(
        &self,
        brokers: &Brokers,
        topics: &kubefacts::config::TopicsConfig,
    ) -> anyhow::Result<()> {
        if !self.create_topics {
            return Ok(());
        }
        let admin = admin_client(brokers)?;
        let specs: Vec<kubefacts::runtime::topics::TopicSpec> = kubefacts::observe::InputTopic::ALL
            .iter()
            .map(|t| topics.spec(&t.topic_name(topics), self.partitions, false))
            .collect();
        kubefacts::runtime::topics::ensure_topics(&admin, &specs, true).await?;
        Ok(())
    }
}

/// The pipeline file at `path`, or the embedded pipelines/default.toml.
fn load_pipeline(path: Option<&std::path::Path>) -> anyhow::Result<kubefacts::config::PipelineConfig> {
    Ok(match path {
        Some(path) => kubefacts::config::PipelineConfig::load(path)?,
        None => kubefacts::config::PipelineConfig::embedded_default()?,
    })
}

/// This replica's name: `given`, else the host name (the Pod name in a Deployment), else
/// `pid-<pid>`.
/// Serves `metrics` (`/metrics`, `/healthz`, `/readyz`) on `addr` if one is given, until
/// the returned sender is used or dropped; an address that cannot be bound fails now.
async fn serve_metrics(
    addr: Option<&String>,
    metrics: kubefacts::metrics::Metrics,
) -> anyhow::Result<tokio::sync::oneshot::Sender<()>> {
    use anyhow::Context;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(addr) = addr {
        let addr = addr.parse().with_context(|| format!("metrics address {addr:?}"))?;
        let server = kubefacts::metrics::MetricsServer::bind(addr).await?;
        tracing::info!(addr = %server.local_addr(), "serving /metrics, /healthz and /readyz");
        tokio::spawn(server.serve(std::sync::Arc::new(metrics), async {
            let _ = stopped.await;
        }));
    }
    Ok(stop)
}

fn instance_name(given: Option<&str>) -> String {
    given.map(str::to_owned).unwrap_or_else(|| {
        std::env::var("HOSTNAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()))
    })
}

/// How to reach the Kubernetes API: `kubeconfig` when given, else the in-cluster
/// configuration, else $KUBECONFIG or ~/.kube/config.
async fn kube_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Config> {
    use anyhow::Context;
    match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
        }
        None => kube::Config::infer().await.context("no Kubernetes configuration (in-cluster or kubeconfig)"),
    }
}

/// An admin client of `brokers`.
fn admin_client(
    brokers: &Brokers,
) -> anyhow::Result<rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>> {
    Ok(brokers.client().create()?)
}

/// The names of the topics on `brokers`.
fn existing_topics(brokers: &Brokers) -> anyhow::Result<Vec<String>> {
    use anyhow::Context;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let probe: BaseConsumer = brokers.client().create()?;
    let metadata =
        tokio::task::block_in_place(|| probe.fetch_metadata(None, std::time::Duration::from_secs(30)))
            .with_context(|| format!("reading topic metadata from {brokers}"))?;
    Ok(metadata.topics().iter().map(|t| t.name().to_owned()).collect())
}

/// Kubernetes observations to versioned, exactly-once Avro facts on Kafka.
#[derive(Debug, Parser)]
#[command(name = "kubefacts", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Log line format on stderr (levels from RUST_LOG, default warn).
    #[arg(long, global = true, value_enum, default_value_t = kubefacts::telemetry::LogFormat::Text)]
    pub log_format: kubefacts::telemetry::LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs. More arrive with their issues (watch, process, replay, simulate, cleaner, alerts).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the pipeline on a bundled cluster trace, in memory: no broker, no cluster.
    Demo(DemoArgs),
    /// Run the configured stages on Kafka, exactly once (consume, process, produce and commit
    /// in one transaction).
    Process(Box<ProcessArgs>),
    /// Watch the Kubernetes API (leader-elected) and publish minimized, admitted, keyed
    /// observations to the input topics.
    Watch(Box<WatchArgs>),
    /// Publish a cluster trace to the input topics, minimized, admitted and keyed exactly as
    /// the live watcher publishes.
    Publish(PublishArgs),
    /// Publish a host application's session observations to `sessions.v1`, keyed and
    /// partitioned as a host application must (docs/SESSIONS_INPUT.md).
    SessionEvent(Box<SessionEventArgs>),
    /// Run a cluster trace through the pipeline in memory and write every topic as JSON lines.
    Replay(ReplayArgs),
    /// Apply the cleanup decisions to the cluster (a dry run unless --apply): delete each
    /// decided Job with a UID precondition, rate-limited, and record every outcome exactly
    /// once.
    Cleaner(Box<CleanerArgs>),
    /// Forward the coverage alerts of `[coverage]` to Alertmanager: FIRING as an active
    /// alert re-sent every interval, what follows it as resolved (docs/ALERTS.md).
    Alerts(Box<AlertsArgs>),
    /// Summarise what happened from the fact topics (or `replay`'s files): runs per window,
    /// the CronJobs that fail most, cleanup decisions, coverage, retained compute
    /// (docs/REPORT.md).
    Report(Box<ReportArgs>),
    /// Decode a topic's Avro records (Confluent or single-object framing) to JSON lines.
    Tail(TailArgs),
    /// List the embedded schemas and check their evolution (BACKWARD_TRANSITIVE).
    Schemas(SchemasArgs),
    /// Write a deterministic cluster trace of a simulated batch fleet (docs/SIMULATE.md).
    Simulate(SimulateArgs),
    /// Print the Kafka ACLs each component of a pipeline needs (docs/security.md).
    Acls(AclsArgs),
}

impl Cli {
    /// Runs the chosen verb.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Tail(args) => tail::run(args).await,
            Command::Report(args) => report::run(*args).await,
            Command::Cleaner(args) => cleaner::run(*args).await,
            Command::Alerts(args) => alerts::run(*args).await,
            Command::Process(args) => process::run(*args).await,
            Command::Replay(args) => replay::run(args).await,
            Command::Publish(args) => publish::run(args).await,
            Command::SessionEvent(args) => session_event::run(*args).await,
            Command::Watch(args) => watch::run(*args).await,
            Command::Schemas(args) => schemas::run(args),
            Command::Simulate(args) => simulate::run(args),
            Command::Acls(args) => acls::run(args),
        }
    }
}
