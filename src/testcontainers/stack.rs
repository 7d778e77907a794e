//! [`KubefactsStack`]: Kafka (KRaft, one node), optionally a schema registry, and
//! `kubefacts process` in containers on the host network, started and torn down by
//! testcontainers.

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use ::testcontainers::{
    ContainerAsync, ContainerRequest, GenericImage, ImageExt,
    core::{Mount, WaitFor},
    runners::AsyncRunner,
};

use super::{
    StackError,
    facts::{Decoding, Facts},
    images::{Images, split},
    logs::ContainerLog,
    replay::Replayed,
};
use crate::{
    codec::{Codec, RegistryClient},
    config::PipelineConfig,
    observe::InputTopic,
};

/// The container's user (the image's numeric non-root user).
const CONTAINER_USER: &str = "65532:65532";
/// Where containers find the pipeline file.
const PIPELINE_PATH: &str = "/etc/kubefacts/pipeline.toml";

/// What [`KubefactsStack::builder`] returns: choose images, the pipeline, partitions and
/// whether to run a registry, then [`StackBuilder::start`].
#[derive(Debug, Clone)]
pub struct StackBuilder {
    images: Images,
    pipeline_toml: Option<String>,
    partitions: i32,
    registry: bool,
    logs_dir: Option<PathBuf>,
    startup_timeout: Duration,
    progress: bool,
}

impl StackBuilder {
    /// All three images at once (default: [`Images::from_env`]).
    pub fn images(mut self, images: Images) -> Self {
        self.images = images;
        self
    }

    /// The Kafka image, `name:tag`.
    pub fn kafka_image(mut self, image: impl Into<String>) -> Self {
        self.images.kafka = image.into();
        self
    }

    /// The registry image, `name:tag`.
    pub fn registry_image(mut self, image: impl Into<String>) -> Self {
        self.images.registry = image.into();
        self
    }

    /// The kubefacts image, `name:tag`.
    pub fn kubefacts_image(mut self, image: impl Into<String>) -> Self {
        self.images.kubefacts = image.into();
        self
    }

    /// The pipeline file's text (default: the embedded `pipelines/default.toml` with inputs
    /// kept forever, for recorded traces: a finite retention deletes old records on arrival).
    pub fn pipeline_toml(mut self, toml: impl Into<String>) -> Self {
        self.pipeline_toml = Some(toml.into());
        self
    }

    /// The pipeline file at `path`, read now.
    pub fn pipeline_file(self, path: impl AsRef<Path>) -> Result<Self, StackError> {
        let path = path.as_ref();
        let toml = std::fs::read_to_string(path)
            .map_err(|source| StackError::Io { path: path.to_owned(), source })?;
        Ok(self.pipeline_toml(toml))
    }

    /// Partitions of every topic the stack creates (default 3).
    pub fn partitions(mut self, partitions: i32) -> Self {
        self.partitions = partitions.max(1);
        self
    }

    /// Run a schema registry: facts are then Confluent-framed (default: no registry,
    /// single-object encoding).
    pub fn with_registry(mut self, registry: bool) -> Self {
        self.registry = registry;
        self
    }

    /// Where containers' logs are written (default: a new folder under the system's
    /// temporary folder, removed when the stack drops unless a test is failing).
    pub fn logs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.logs_dir = Some(dir.into());
        self
    }

    /// How long each container may take to become ready (default 120 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Print progress lines to stderr while starting (default: on).
    pub fn progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    /// Starts Kafka, the registry when asked, creates the input topics, starts `kubefacts
    /// process` (which creates its outputs) and waits until its `/readyz` answers 200.
    pub async fn start(self) -> Result<KubefactsStack, StackError> {
        let started = Instant::now();
        let id = stack_id();
        let pipeline_toml = match &self.pipeline_toml {
            Some(t) => t.clone(),
            None => replay_default()?,
        };
        let config = PipelineConfig::parse(&pipeline_toml, "the stack's pipeline")?;
        let work = tempfile::Builder::new()
            .prefix(&format!("{id}-"))
            .tempdir()
            .map_err(|source| StackError::Io { path: std::env::temp_dir(), source })?;
        let logs_dir = match &self.logs_dir {
            Some(dir) => dir.clone(),
            None => std::env::temp_dir().join(format!("{id}-logs")),
        };
        std::fs::create_dir_all(&logs_dir)
            .map_err(|source| StackError::Io { path: logs_dir.clone(), source })?;
        let pipeline_path = work.path().join("pipeline.toml");
        write_readable(&pipeline_path, pipeline_toml.as_bytes())?;

        let mut stack = KubefactsStack {
            id,
            images: self.images.clone(),
            config,
            partitions: self.partitions,
            bootstrap: String::new(),
            registry_url: None,
            metrics_url: String::new(),
            pipeline_path,
            work,
            logs_dir,
            logs: Vec::new(),
            containers: Vec::new(),
            startup_timeout: self.startup_timeout,
            progress: self.progress,
            one_shots: AtomicU32::new(0),
            keep_logs: false,
        };

        match stack.start_containers(&self, started).await {
            Ok(()) => Ok(stack),
            Err(e) => {
                // The error names the failing container's log: keep it.
                stack.keep_logs = true;
                Err(e)
            }
        }
    }
}

/// Kafka, an optional schema registry and `kubefacts process`, running in containers.
/// Dropping it removes the containers; when a test is failing at that moment, the
/// containers' log files are kept and their paths printed.
///
/// See the [module documentation](super) for an example.
#[derive(Debug)]
pub struct KubefactsStack {
    id: String,
    images: Images,
    config: PipelineConfig,
    partitions: i32,
    bootstrap: String,
    registry_url: Option<String>,
    metrics_url: String,
    pipeline_path: PathBuf,
    work: tempfile::TempDir,
    logs_dir: PathBuf,
    logs: Vec<(String, ContainerLog)>,
    containers: Vec<ContainerAsync<GenericImage>>,
    startup_timeout: Duration,
    progress: bool,
    one_shots: AtomicU32,
    /// Keep the containers' logs when dropped: a start failed.
    keep_logs: bool,
}

impl KubefactsStack {
    /// A builder with the default images ([`Images::from_env`]), the embedded pipeline, 3
    /// partitions and no registry.
    pub fn builder() -> StackBuilder {
        StackBuilder {
            images: Images::from_env(),
            pipeline_toml: None,
            partitions: 3,
            registry: false,
            logs_dir: None,
            startup_timeout: Duration::from_secs(120),
            progress: true,
        }
    }

    /// Kafka's bootstrap servers (`127.0.0.1:<port>`), for the test's own clients.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The registry's Confluent-compatible base URL, when the stack runs one.
    pub fn registry_url(&self) -> Option<&str> {
        self.registry_url.as_deref()
    }

    /// `kubefacts process`'s metrics base URL (`/metrics`, `/healthz`, `/readyz`).
    pub fn metrics_url(&self) -> &str {
        &self.metrics_url
    }

    /// The pipeline the stack runs.
    pub fn pipeline(&self) -> &PipelineConfig {
        &self.config
    }

    /// The images it runs.
    pub fn images(&self) -> &Images {
        &self.images
    }

    /// A topic's full name: `name` (e.g. `"job-run-facts.v1"`) after the pipeline's prefix.
    pub fn topic(&self, name: &str) -> String {
        self.config.topics.full(name)
    }

    /// Publishes a cluster trace (docs/TRACE_FORMAT.md) as the watcher would, then ends it
    /// as a quiet cluster does (`kubefacts publish --finish`): every window closes.
    pub async fn publish_trace(&self, trace: impl AsRef<Path>) -> Result<(), StackError> {
        let trace = trace.as_ref();
        let copy = self.readable_copy(trace, "trace")?;
        self.publish(&copy, true).await
    }

    /// `kubefacts publish` of the readable trace file `trace`, ended when `finish`.
    async fn publish(&self, trace: &Path, finish: bool) -> Result<(), StackError> {
        let mut args = vec!["publish", "--input", "/input/trace.jsonl", "--config", PIPELINE_PATH];
        if finish {
            args.push("--finish");
        }
        args.extend(["--bootstrap", &self.bootstrap]);
        if let Some(url) = &self.registry_url {
            args.extend(["--registry", url]);
        }
        let mounts = vec![self.pipeline_mount(), Mount::bind_mount(path_str(trace)?, "/input/trace.jsonl")];
        self.one_shot("publish", &args, mounts).await.map(drop)
    }

    /// Publishes a simulated fleet (`kubefacts simulate`: `profile` `small`, `medium` or
    /// `large`, `hours` of cluster time, `seed`; docs/SIMULATE.md), ended like
    /// [`KubefactsStack::publish_trace`]. Returns the trace's path, for
    /// [`KubefactsStack::replay_trace`].
    pub async fn publish_simulated(
        &self,
        profile: &str,
        hours: u32,
        seed: u64,
    ) -> Result<PathBuf, StackError> {
        let out = self.writable_dir("simulate")?;
        let (hours, seed) = (hours.to_string(), seed.to_string());
        let args = [
            "simulate",
            "--profile",
            profile,
            "--hours",
            &hours,
            "--seed",
            &seed,
            "--output",
            "/out/trace.jsonl",
        ];
        self.one_shot("simulate", &args, vec![Mount::bind_mount(path_str(&out)?, "/out")]).await?;
        let trace = out.join("trace.jsonl");
        self.publish_trace(&trace).await?;
        Ok(trace)
    }

    /// One session event, as a host application writes it (`kubefacts session-event`;
    /// docs/SESSIONS_INPUT.md), then a [heartbeat](KubefactsStack::heartbeat) at its time,
    /// as the watcher of a live cluster writes one within 10 s: `[sessions]` processes a
    /// session once its Pods' topic has passed the session's time. Time only moves forward,
    /// so publish a trace observed before the event first.
    pub async fn session_event(&self, event: &super::SessionEvent) -> Result<(), StackError> {
        let at = match &event.observed_at {
            Some(at) => at.clone(),
            None => jiff::Timestamp::now().to_string(),
        };
        let mut args: Vec<String> =
            ["session-event", "--config", PIPELINE_PATH, "--bootstrap", &self.bootstrap]
                .map(str::to_owned)
                .to_vec();
        args.extend(event.args());
        args.extend(["--observed-at".to_owned(), at.clone()]);
        if let Some(url) = &self.registry_url {
            args.extend(["--registry".to_owned(), url.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.one_shot("session-event", &args, vec![self.pipeline_mount()]).await?;
        self.heartbeat(&at).await
    }

    /// Moves the cluster's time to `observed_at` (RFC 3339) on every partition of every
    /// input topic, as the watcher's heartbeat does: what the stages hold back until their
    /// inputs pass a record's time (a session event, the records after a trace published
    /// without its end) is then processed.
    pub async fn heartbeat(&self, observed_at: &str) -> Result<(), StackError> {
        let line = serde_json::json!({ "type": "HEARTBEAT", "observed_at": observed_at });
        let trace = self.work.path().join(format!("heartbeat-{}.jsonl", self.next_one_shot()));
        write_readable(&trace, format!("{line}\n").as_bytes())?;
        self.publish(&trace, false).await
    }

    /// What `kubefacts replay` makes of `trace` with the stack's pipeline and partitions
    /// (in memory, in a container of the kubefacts image): what a consumer of the stack's
    /// topics should see.
    pub async fn replay_trace(&self, trace: impl AsRef<Path>) -> Result<Replayed, StackError> {
        let trace = trace.as_ref();
        let copy = self.readable_copy(trace, "replay")?;
        let out = self.writable_dir("replay")?;
        let partitions = self.partitions.to_string();
        let args = [
            "replay",
            "--input",
            "/input/trace.jsonl",
            "--output",
            "/out",
            "--config",
            PIPELINE_PATH,
            "--partitions",
            &partitions,
            "--finish",
        ];
        let mounts = vec![
            self.pipeline_mount(),
            Mount::bind_mount(path_str(&copy)?, "/input/trace.jsonl"),
            Mount::bind_mount(path_str(&out)?, "/out"),
        ];
        self.one_shot("replay", &args, mounts).await?;
        Ok(Replayed::new(&out, &self.config))
    }

    /// A typed reader of a fact topic (`name` without the prefix, e.g.
    /// `"job-run-facts.v1"`): committed records only, either framing.
    pub fn facts<T: serde::de::DeserializeOwned>(&self, name: &str) -> Facts<T> {
        Facts::new(self.topic(name), self.bootstrap.clone(), self.codec(), Decoding::Typed)
    }

    /// A reader of a fact topic whose records come as JSON, keys and values decoded the way
    /// `kubefacts replay` writes them ([`Replayed::records`] compares with it).
    pub fn fact_records(&self, name: &str) -> Facts<super::FactRecord> {
        Facts::new(self.topic(name), self.bootstrap.clone(), self.codec(), Decoding::Json)
    }

    /// Starts the containers (Kafka, the registry when asked, `kubefacts process`) and
    /// creates the input topics.
    async fn start_containers(&mut self, builder: &StackBuilder, started: Instant) -> Result<(), StackError> {
        // Kafka: the official image's environment convention, one KRaft node.
        let t = Instant::now();
        let (port, controller) = (free_port()?, free_port()?);
        self.bootstrap = format!("127.0.0.1:{port}");
        let env = [
            ("KAFKA_NODE_ID", "1".to_owned()),
            ("KAFKA_PROCESS_ROLES", "broker,controller".to_owned()),
            ("KAFKA_LISTENERS", format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}")),
            ("KAFKA_ADVERTISED_LISTENERS", format!("PLAINTEXT://127.0.0.1:{port}")),
            ("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER".to_owned()),
            ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT".to_owned()),
            ("KAFKA_CONTROLLER_QUORUM_VOTERS", format!("1@127.0.0.1:{controller}")),
            ("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT".to_owned()),
            ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1".to_owned()),
            ("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1".to_owned()),
            ("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1".to_owned()),
            ("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR", "1".to_owned()),
            ("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR", "1".to_owned()),
            ("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0".to_owned()),
            // A topic is created with its partitions and policy, never by a first metadata
            // request with the broker's defaults (one partition).
            ("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false".to_owned()),
        ];
        let image = builder.images.kafka.clone();
        self.say(&format!("starting Kafka ({image}) on {}", self.bootstrap));
        self.run("kafka", &image, WaitFor::message_on_stdout("Kafka Server started"), &env, &[], Vec::new())
            .await?;
        self.say(&format!("Kafka ready in {:.1} s", t.elapsed().as_secs_f64()));

        // The registry, when asked: Apicurio's Confluent-compatible API.
        if builder.registry {
            let t = Instant::now();
            let (http, management) = (free_port()?, free_port()?);
            let env = [
                ("QUARKUS_HTTP_HOST", "127.0.0.1".to_owned()),
                ("QUARKUS_HTTP_PORT", http.to_string()),
                ("QUARKUS_MANAGEMENT_HOST", "127.0.0.1".to_owned()),
                ("QUARKUS_MANAGEMENT_PORT", management.to_string()),
            ];
            let image = builder.images.registry.clone();
            self.say(&format!("starting the registry ({image}) on 127.0.0.1:{http}"));
            self.run("registry", &image, WaitFor::Nothing, &env, &[], Vec::new()).await?;
            let url = format!("http://127.0.0.1:{http}/apis/ccompat/v7");
            self.wait_http("registry", &format!("{url}/subjects")).await?;
            self.registry_url = Some(url);
            self.say(&format!("registry ready in {:.1} s", t.elapsed().as_secs_f64()));
        }

        // The input topics, as the watcher would create them.
        let t = Instant::now();
        self.create_input_topics().await?;

        // `kubefacts process`: every stage of the pipeline, creating its outputs.
        let metrics = free_port()?;
        self.metrics_url = format!("http://127.0.0.1:{metrics}");
        let partitions = self.partitions.to_string();
        let mut args = vec![
            "process",
            "--config",
            PIPELINE_PATH,
            "--bootstrap",
            &self.bootstrap,
            "--instance-id",
            "stack",
            "--create-topics",
            "--partitions",
            &partitions,
        ];
        let metrics_addr = format!("127.0.0.1:{metrics}");
        args.extend(["--metrics-addr", &metrics_addr]);
        let registry = self.registry_url.clone();
        if let Some(url) = &registry {
            args.extend(["--registry", url]);
        }
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let image = builder.images.kubefacts.clone();
        self.say(&format!("starting kubefacts process ({image})"));
        let mounts = vec![self.pipeline_mount()];
        self.run(
            "process",
            &image,
            WaitFor::message_on_stderr("serving /metrics"),
            &[("RUST_LOG", "kubefacts=info".into())],
            &args,
            mounts,
        )
        .await?;
        self.wait_http("process", &format!("{}/readyz", self.metrics_url)).await?;
        self.say(&format!(
            "kubefacts process ready in {:.1} s; stack ready in {:.1} s",
            t.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// The last `lines` lines each container printed so far.
    pub fn log_tails(&self, lines: usize) -> String {
        self.logs
            .iter()
            .map(|(name, log)| format!("----- {name} ({}) -----\n{}", log.path().display(), log.tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Everything `kubefacts process` printed so far.
    pub fn process_log(&self) -> String {
        self.logs.iter().find(|(n, _)| n == "process").map(|(_, l)| l.text()).unwrap_or_default()
    }

    fn codec(&self) -> Result<Codec, String> {
        let registry = match &self.registry_url {
            Some(url) => Some(RegistryClient::new(url, Duration::from_secs(10)).map_err(|e| e.to_string())?),
            None => None,
        };
        Codec::new(registry).map_err(|e| e.to_string())
    }

    fn say(&self, line: &str) {
        if self.progress {
            eprintln!("kubefacts stack {}: {line}", self.id);
        }
    }

    fn next_one_shot(&self) -> u32 {
        self.one_shots.fetch_add(1, Ordering::Relaxed)
    }

    fn pipeline_mount(&self) -> Mount {
        Mount::bind_mount(self.pipeline_path.to_string_lossy(), PIPELINE_PATH)
    }

    /// A copy of `file` the containers' non-root user may read, in the stack's work folder.
    fn readable_copy(&self, file: &Path, what: &str) -> Result<PathBuf, StackError> {
        let copy = self.work.path().join(format!("{what}-{}.jsonl", self.next_one_shot()));
        std::fs::copy(file, &copy).map_err(|source| StackError::Io { path: file.to_owned(), source })?;
        make_readable(&copy)?;
        Ok(copy)
    }

    /// A folder the container's non-root user may write.
    fn writable_dir(&self, what: &str) -> Result<PathBuf, StackError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.work.path().join(format!("{what}-{}", self.next_one_shot()));
        std::fs::create_dir_all(&dir).map_err(|source| StackError::Io { path: dir.clone(), source })?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|source| StackError::Io { path: dir.clone(), source })?;
        Ok(dir)
    }

    /// Starts a long-running container named `<stack>-<role>` and keeps it.
    async fn run(
        &mut self,
        role: &str,
        image: &str,
        ready: WaitFor,
        env: &[(&str, String)],
        args: &[String],
        mounts: Vec<Mount>,
    ) -> Result<(), StackError> {
        let name = format!("{}-{role}", self.id);
        let log = ContainerLog::new(&self.logs_dir, role);
        self.logs.push((role.to_owned(), log.clone()));
        let mut request =
            container_request(&name, image, ready, &log, mounts).with_startup_timeout(self.startup_timeout);
        for (k, v) in env {
            request = request.with_env_var(*k, v.clone());
        }
        if !args.is_empty() {
            request = request.with_cmd(args.iter().cloned());
        }
        let container = start(request, role, image, &log).await?;
        self.containers.push(container);
        Ok(())
    }

    /// Runs kubefacts `args` in a container of the kubefacts image to its end; its output,
    /// or its exit code and log tail.
    async fn one_shot(&self, role: &str, args: &[&str], mounts: Vec<Mount>) -> Result<String, StackError> {
        let n = self.next_one_shot();
        let name = format!("{}-{role}-{n}", self.id);
        let log = ContainerLog::new(&self.logs_dir, &format!("{role}-{n}"));
        let image = &self.images.kubefacts;
        let request = container_request(&name, image, WaitFor::Nothing, &log, mounts)
            .with_user(CONTAINER_USER)
            .with_cmd(args.iter().map(|s| s.to_string()));
        let container = start(request, role, image, &log).await?;
        let deadline = Instant::now() + self.startup_timeout.max(Duration::from_secs(600));
        let code = loop {
            if let Some(code) = container.exit_code().await.map_err(|e| StackError::Docker(Box::new(e)))? {
                break code;
            }
            if Instant::now() > deadline {
                return Err(StackError::Timeout { what: format!("kubefacts {role}"), tail: log.tail(40) });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // The log consumer may still be draining the last frames.
        let stdout = container.stdout_to_vec().await.map_err(|e| StackError::Docker(Box::new(e)))?;
        if code != 0 {
            let stderr = container.stderr_to_vec().await.map_err(|e| StackError::Docker(Box::new(e)))?;
            let text = String::from_utf8_lossy(&stderr);
            let lines: Vec<&str> = text.lines().collect();
            return Err(StackError::Exited {
                component: role.to_owned(),
                code,
                tail: lines[lines.len().saturating_sub(40)..].join("\n"),
            });
        }
        Ok(String::from_utf8_lossy(&stdout).into_owned())
    }

    /// Polls `url` until it answers 200 or the startup timeout passes.
    async fn wait_http(&self, component: &str, url: &str) -> Result<(), StackError> {
        let client = crate::http::client_builder()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| StackError::Docker(Box::new(e)))?;
        let deadline = Instant::now() + self.startup_timeout;
        loop {
            if let Ok(r) = client.get(url).send().await
                && r.status().as_u16() == 200
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                let tail = self
                    .logs
                    .iter()
                    .find(|(n, _)| n == component)
                    .map(|(_, l)| l.tail(40))
                    .unwrap_or_default();
                return Err(StackError::Timeout { what: format!("{component}: {url} to answer 200"), tail });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn create_input_topics(&self) -> Result<(), StackError> {
        use rdkafka::{ClientConfig, admin::AdminClient, client::DefaultClientContext};
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| StackError::Kafka(e.to_string()))?;
        let specs: Vec<_> = InputTopic::ALL
            .iter()
            .map(|t| self.config.topics.spec(&t.topic_name(&self.config.topics), self.partitions, false))
            .collect();
        crate::runtime::topics::ensure_topics(&admin, &specs, true)
            .await
            .map_err(|e| StackError::Kafka(e.to_string()))?;
        Ok(())
    }
}

impl Drop for KubefactsStack {
    fn drop(&mut self) {
        if self.keep_logs {
            // The error that ended `start` says where they are.
            return;
        }
        if std::thread::panicking() {
            eprintln!(
                "kubefacts stack {}: a test failed; container logs kept in {}\n{}",
                self.id,
                self.logs_dir.display(),
                self.log_tails(20)
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.logs_dir);
        }
    }
}

/// A container named `name` of `image` on the host network, ready when `ready`, its output
/// into `log`, with `mounts`.
fn container_request(
    name: &str,
    image: &str,
    ready: WaitFor,
    log: &ContainerLog,
    mounts: Vec<Mount>,
) -> ContainerRequest<GenericImage> {
    let (repo, tag) = split(image);
    let mut request = GenericImage::new(repo, tag)
        .with_wait_for(ready)
        .with_network("host")
        .with_container_name(name)
        .with_log_consumer(log.consumer());
    for m in mounts {
        request = request.with_mount(m);
    }
    request
}

/// Starts `request`; a failure names the container's role, its image and its log's tail.
async fn start(
    request: ContainerRequest<GenericImage>,
    role: &str,
    image: &str,
    log: &ContainerLog,
) -> Result<ContainerAsync<GenericImage>, StackError> {
    request.start().await.map_err(|source| StackError::Start {
        component: role.to_owned(),
        image: image.to_owned(),
        source: Box::new(source),
        log: log.path().to_owned(),
        tail: log.tail(40),
    })
}

/// `kubefacts-stack-<pid>-<n>`: unique among the stacks of this process and the processes
/// of this machine.
fn stack_id() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("kubefacts-stack-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

fn free_port() -> Result<u16, StackError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|source| StackError::Io { path: PathBuf::from("127.0.0.1:0"), source })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| StackError::Io { path: PathBuf::from("127.0.0.1:0"), source })
}

/// Written readable by the containers' non-root user.
fn write_readable(path: &Path, bytes: &[u8]) -> Result<(), StackError> {
    std::fs::write(path, bytes).map_err(|source| StackError::Io { path: path.to_owned(), source })?;
    make_readable(path)
}

fn make_readable(path: &Path) -> Result<(), StackError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|source| StackError::Io { path: path.to_owned(), source })
}

fn path_str(path: &Path) -> Result<String, StackError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| StackError::Io { path: path.to_owned(), source: std::io::Error::other("not UTF-8") })
}

/// The embedded `pipelines/default.toml` with `[topics.retention] inputs_ms = -1`: a stack
/// replays recorded traces, whose timestamps the default two weeks would delete on arrival.
fn replay_default() -> Result<String, crate::config::ConfigError> {
    use crate::config::ConfigError;
    let origin = || "embedded default".to_owned();
    let mut doc: toml::Table = toml::from_str(crate::config::DEFAULT_PIPELINE_TOML)
        .map_err(|e| ConfigError::Parse { origin: origin(), source: Box::new(e) })?;
    let invalid =
        |reason: String| ConfigError::Invalid { origin: origin(), key: "topics.retention".into(), reason };
    let retention = (doc.get_mut("topics"))
        .and_then(|t| t.get_mut("retention"))
        .and_then(toml::Value::as_table_mut)
        .ok_or_else(|| invalid("missing".into()))?;
    retention.insert("inputs_ms".into(), toml::Value::Integer(-1));
    toml::to_string(&doc).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use crate::config::{DEFAULT_PIPELINE_TOML, PipelineConfig};

    #[test]
    fn the_stack_keeps_the_default_pipeline_but_keeps_inputs_forever() {
        let stack = PipelineConfig::parse(&super::replay_default().unwrap(), "stack").unwrap();
        let default = PipelineConfig::parse(DEFAULT_PIPELINE_TOML, "default").unwrap();
        assert_eq!(stack.topics.retention.inputs_ms, -1);
        assert_ne!(default.topics.retention.inputs_ms, -1);
        let mut same = stack.clone();
        same.topics.retention.inputs_ms = default.topics.retention.inputs_ms;
        assert_eq!(format!("{same:?}"), format!("{default:?}"), "nothing else differs");
    }
}
