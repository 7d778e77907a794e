//! The Prometheus `/metrics` endpoint of `kubefacts process` and `kubefacts watch`, in the
//! OpenMetrics text format. Counters are `prometheus-client` families that the runtime and
//! the watcher increment where they count ([`StageFamilies`], shared by every stage of the
//! process, and [`WatchStats`]); the collectors here only describe each family once, in a
//! fixed order, and add the gauges computed at scrape time. `docs/METRICS.md` lists every
//! metric; a test fails when it and [`Metrics::encode`] disagree.
//!
//! ```no_run
//! # async fn run() -> Result<(), kubefacts::metrics::MetricsError> {
//! use std::sync::Arc;
//! use kubefacts::metrics::{Metrics, MetricsServer};
//!
//! let metrics = Metrics::new();
//! let stats = metrics.stage("probe"); // hand to the runtime, which counts into it
//! let server = MetricsServer::bind("0.0.0.0:9464".parse().expect("an address")).await?;
//! tokio::spawn(server.serve(Arc::new(metrics), async { /* resolves at shutdown */ }));
//! # Ok(()) }
//! ```

use std::{
    collections::BTreeMap,
    convert::Infallible,
    fmt,
    future::Future,
    io,
    net::SocketAddr,
    sync::{
        Arc, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{ALLOW, CONTENT_TYPE, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{
        MetricType, TypedMetric,
        counter::{ConstCounter, Counter},
        gauge::ConstGauge,
    },
    registry::{Registry, Unit},
};
use thiserror::Error;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};

use crate::{
    health::{HEALTH_PATH, Health},
    observe::{Kind, admission::Step},
    runtime::kafka::{RuntimeStats, StageFamilies, TaskGauges},
    watch::WatchStats,
};

/// The `Content-Type` of a scrape: the OpenMetrics text format, which is what
/// `prometheus-client` writes (`# UNIT`, `# EOF`, counter families without `_total`).
/// Prometheus asks for it first by default.
pub const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics path.
pub const METRICS_PATH: &str = "/metrics";

/// The readiness path: 200 while every stage is restored and not waiting for the schema
/// registry, 503 (saying why) otherwise.
pub const READY_PATH: &str = "/readyz";

/// A client must send its request headers within this time (bounds idle sockets).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for in-flight scrapes before dropping their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Why the metrics endpoint could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The listen address could not be bound: in use, not local, or not permitted.
    #[error("cannot listen for metrics on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: io::Error,
    },
}

/// The metrics of one process: every stage's [`RuntimeStats`] (from [`Metrics::stage`]),
/// labelled `stage`, and the watcher's [`WatchStats`] if one was added. Cheap to scrape
/// concurrently; share it as `Arc<Metrics>`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    stages: Arc<StageCollector>,
    watcher: Arc<WatchCollector>,
    health: Arc<Health>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// No stage yet: a scrape describes every stage family and has no samples. No watcher
    /// yet: the watcher families are absent altogether.
    pub fn new() -> Self {
        let stages = Arc::new(StageCollector::default());
        let watcher = Arc::new(WatchCollector::default());
        let mut registry = Registry::with_prefix("kubefacts");
        registry.register_collector(Box::new(Arc::clone(&stages)));
        registry.register_collector(Box::new(Arc::clone(&watcher)));
        Self { registry, stages, watcher, health: Arc::default() }
    }

    /// The process's heartbeats and readiness conditions (`/healthz`, `/readyz`).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// New stats for `stage`, exported under `stage="<stage>"`: its counters are series of
    /// this process's shared families, its gauges are read at each scrape. Asking for a
    /// stage name again replaces the earlier stats for the gauges and `/readyz`; the
    /// counters are the same series (labels are unique), so they keep counting from where
    /// they were and a scrape never holds two series with the same labels.
    pub fn stage(&self, stage: &str) -> Arc<RuntimeStats> {
        let stats = Arc::new(RuntimeStats::new(stage, &self.stages.families));
        let mut stages = self.stages.stages.write().unwrap_or_else(PoisonError::into_inner);
        match stages.iter_mut().find(|s| s.stage() == stage) {
            Some(existing) => *existing = Arc::clone(&stats),
            None => stages.push(Arc::clone(&stats)),
        }
        stats
    }

    /// Exports the watcher's `stats` (the `kubefacts_watch_*` and `kubefacts_admission_*`
    /// families), read at each scrape. A process runs one watcher: a second call replaces
    /// the first's stats. Every kind and admission step has a series from the first
    /// scrape, at 0 until something is counted, so alerts need not handle absent series.
    pub fn add_watcher(&mut self, stats: Arc<WatchStats>) {
        *self.watcher.stats.write().unwrap_or_else(PoisonError::into_inner) = Some(stats);
    }

    /// Why the process is not ready, if it is not: a condition of its shell not met (not
    /// connected yet, standing by unknown), a stage restoring its state or waiting for the
    /// schema registry.
    pub fn not_ready(&self) -> Option<String> {
        let stages = self.stages.stages.read().unwrap_or_else(PoisonError::into_inner);
        let why: Vec<String> = self
            .health
            .waiting()
            .into_iter()
            .chain(stages.iter().filter_map(|s| {
                if load(&s.retrying) > 0 {
                    Some(format!("stage {} waits for the schema registry", s.stage()))
                } else if load(&s.restoring_tasks) > 0 {
                    Some(format!("stage {} is restoring its state", s.stage()))
                } else {
                    None
                }
            }))
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The OpenMetrics text exposition, ending in `# EOF`.
    pub fn encode(&self) -> String {
        self.try_encode().unwrap_or_else(|fmt::Error| {
            // Writing to a String cannot fail; only a collector bug gets here.
            tracing::error!("metrics: encoding failed");
            String::new()
        })
    }

    fn try_encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// One collector for all stages, so that each metric family is described once (HELP,
/// TYPE) with a series per stage; a collector per stage would repeat the family, which
/// OpenMetrics parsers reject. The counters are [`StageFamilies`] that the stages count
/// into, encoded as they are; the gauges are read from each stage's stats. A collector
/// rather than `Registry::register`, which would put every registered family before all
/// collected ones and drop the HELP and TYPE of a family without series, changing the
/// exposition.
#[derive(Debug, Default)]
struct StageCollector {
    families: StageFamilies,
    /// Written only by `stage`; the lock is never held across an await.
    stages: RwLock<Vec<Arc<RuntimeStats>>>,
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Wall-clock now, epoch milliseconds.
fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

impl Collector for StageCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stages = self.stages.read().unwrap_or_else(PoisonError::into_inner);
        let f = &self.families;
        let records = Unit::Other("records".to_owned());
        let help = "Input records consumed and processed, heartbeats included, by input topic.";
        live(&mut e, "records_in", help, None, &f.records_in)?;
        let help = "Output records produced, forwarded heartbeats included, by output topic.";
        live(&mut e, "records_out", help, None, &f.records_out)?;
        let help = "Input records dead-lettered instead of processed, by bounded reason code.";
        live(&mut e, "dead_letters", help, None, &f.dead_letters)?;
        let help = "Changelog records applied while restoring state stores.";
        live(&mut e, "restored", help, Some(&records), &f.restored)?;
        let help = "Time spent restoring state stores from changelogs.";
        live(&mut e, "restore", help, Some(&Unit::Seconds), &f.restore)?;
        let help = "Tasks whose state stores are being restored now.";
        family_of(&mut e, &stages, "restoring_tasks", help, None, |s| {
            ConstGauge::new(load(&s.restoring_tasks))
        })?;
        let help = "Admissions retried because the schema registry did not answer (the record \
                    waits; it is never dead-lettered for it).";
        live(&mut e, "registry_retries", help, None, &f.registry_retries)?;
        let help = "1 while a record waits for the schema registry to answer (the stage is not \
                    ready: /readyz answers 503).";
        family_of(&mut e, &stages, "waiting_for_registry", help, None, |s| {
            ConstGauge::new(load(&s.retrying).min(1))
        })?;
        let help = "Input records assigned but not yet consumed, per assigned partition (refreshed \
                    every few seconds).";
        let mut family = e.encode_descriptor("consumer_lag", help, Some(&records), MetricType::Gauge)?;
        for s in stages.iter() {
            for ((topic, partition), lag) in s.lag_by_partition() {
                let partition = partition.to_string();
                let labels =
                    [("stage", s.stage()), ("topic", topic.as_str()), ("partition", partition.as_str())];
                ConstGauge::new(lag).encode(family.encode_family(&labels)?)?;
            }
        }
        let tasks: Vec<(&str, TaskGauges)> = stages.iter().map(|s| (s.stage(), s.task_gauges())).collect();
        let help = "Now minus the lowest stream time (record event time) among the stage's \
                    assigned tasks; absent while no task has a stream time.";
        let mut family =
            e.encode_descriptor("stream_time_delay", help, Some(&Unit::Seconds), MetricType::Gauge)?;
        let now = now_ms();
        for (stage, gauges) in &tasks {
            if let Some(lowest) = gauges.lowest_stream_time_ms {
                let delay = (now - lowest) as f64 / 1000.0;
                ConstGauge::new(delay).encode(family.encode_family(&[("stage", *stage)])?)?;
            }
        }
        let help = "Entries held in the state store, summed over the stage's assigned tasks \
                    (refreshed each transaction).";
        let mut family = e.encode_descriptor("state_entries", help, None, MetricType::Gauge)?;
        for (stage, gauges) in &tasks {
            for (store, n) in &gauges.state_entries {
                let labels = [("stage", *stage), ("store", store.as_str())];
                ConstGauge::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        let help = "Kafka transactions ended, by outcome.";
        live(&mut e, "transactions", help, None, &f.transactions)?;
        let help = "Global-table records handed to the stage's tasks, by source: group (the \
                    stream thread's own record of a partition it owns, decoded once) or reader \
                    (decoded by the global-table reader).";
        live(&mut e, "global_records", help, None, &f.global_records)?;
        let help = "Events the stage's processor counted in committed transactions (runs_filed, \
                    runs_late, windows_finalized, …), by bounded event name.";
        live(&mut e, "processor_events", help, None, &f.processor_events)
    }
}

/// Describes one gauge family once, then writes one series per stage.
fn family_of<M: EncodeMetric + TypedMetric>(
    e: &mut DescriptorEncoder,
    stages: &[Arc<RuntimeStats>],
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: impl Fn(&RuntimeStats) -> M,
) -> fmt::Result {
    let mut family = e.encode_descriptor(name, help, unit, M::TYPE)?;
    for s in stages {
        metric(s).encode(family.encode_family(&[("stage", s.stage())])?)?;
    }
    Ok(())
}

/// The kinds admission decides about (Namespaces and Leases are not admitted by annotation).
const ADMISSION_KINDS: [&str; 3] = [Kind::Pod.as_str(), Kind::Job.as_str(), Kind::CronJob.as_str()];

/// The watcher's families. Writes nothing until [`Metrics::add_watcher`], so a processor's
/// scrape holds only stage families.
#[derive(Debug, Default)]
struct WatchCollector {
    /// Written only by `add_watcher`; the lock is never held across an await.
    stats: RwLock<Option<Arc<WatchStats>>>,
}

impl Collector for WatchCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(stats) = self.stats.read().unwrap_or_else(PoisonError::into_inner).clone() else {
            return Ok(());
        };
        // Copy the snapshot out first: the watch loop never waits for a scrape's writing.
        let admission = stats.admission.lock().unwrap_or_else(PoisonError::into_inner).clone();

        let help = "Watch events received, by kind.";
        live(&mut e, "watch_events", help, None, &stats.events)?;
        let help = "Relists (snapshots) started, by kind; the first list of each term counts.";
        live(&mut e, "watch_relists", help, None, &stats.relists)?;
        let help = "Objects admitted for publishing since the process started, by kind.";
        per_kind(&mut e, "admission_admitted", help, &ADMISSION_KINDS, &admission.admitted)?;
        let help = "Objects excluded from publishing since the process started, by kind and \
                    the admission step that excluded them.";
        let mut family = e.encode_descriptor("admission_excluded", help, None, MetricType::Counter)?;
        for kind in kinds(&ADMISSION_KINDS, admission.excluded.keys().map(|(kind, _)| *kind)) {
            for step in Step::ALL {
                let n = admission.excluded.get(&(kind, step)).copied().unwrap_or(0);
                let labels = [("kind", kind), ("step", step.as_str())];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        let objects = Unit::Other("objects".to_owned());
        let help = "Objects held back now, waiting for their namespace or owning Job to be observed.";
        single(&mut e, "admission_held", help, Some(&objects), ConstGauge::new(admission.held))?;
        let help = "1 while this process holds the leader Lease and publishes, else 0.";
        single(&mut e, "watch_leader", help, None, ConstGauge::new(i64::from(stats.is_leader())))?;

        let records = Unit::Other("records".to_owned());
        let counters: [(&str, &str, Option<&Unit>, &Counter); 8] = [
            ("watch_terms", "Leadership terms begun.", None, &stats.terms),
            (
                "watch_published",
                "Kafka records published; a heartbeat or snapshot marker counts once per partition.",
                Some(&records),
                &stats.published_records,
            ),
            (
                "watch_heartbeats",
                "Heartbeats published (one per interval, whatever the partitions).",
                None,
                &stats.heartbeats,
            ),
            (
                "watch_acked",
                "Kafka delivery acknowledgements received for published records.",
                Some(&records),
                &stats.acked_records,
            ),
            (
                "watch_cut_conditions",
                "Job conditions minimization dropped: repeats of a type, types past the 16th.",
                None,
                &stats.cut_conditions,
            ),
            (
                "watch_cut_containers",
                "Pod containers minimization dropped: past the 256th of a list.",
                None,
                &stats.cut_containers,
            ),
            ("watch_cut_reasons", "Reasons minimization shortened to 256 bytes.", None, &stats.cut_reasons),
            (
                "watch_oversized",
                "Observations skipped because, bounded, they still exceeded the producer's limit.",
                None,
                &stats.oversized,
            ),
        ];
        for (name, help, unit, counter) in counters {
            live(&mut e, name, help, unit, counter)?;
        }
        let help = "Sum of publish-to-acknowledgement latencies; divided by \
                    kubefacts_watch_acked_records_total it is the mean publish latency.";
        live(&mut e, "watch_ack_latency", help, Some(&Unit::Seconds), &stats.ack_latency)
    }
}

/// Describes one family and writes the live metric (a `Counter`, or a `Family` with all
/// its series) that the counting code increments.
fn live<M: EncodeMetric + TypedMetric>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: &M,
) -> fmt::Result {
    metric.encode(e.encode_descriptor(name, help, unit, M::TYPE)?)
}

/// Describes one metric family with a single, unlabelled series.
fn single<M: EncodeMetric + TypedMetric>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: M,
) -> fmt::Result {
    metric.encode(e.encode_descriptor(name, help, unit, M::TYPE)?)
}

/// The `kind` label values of a family: every expected kind (a series at 0 before the
/// first count), then any other kind counted. Kinds are `&'static str`, so bounded.
fn kinds(expected: &[&'static str], counted: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    let mut kinds = expected.to_vec();
    for kind in counted {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// Describes one counter family labelled `kind`, with a series per kind.
fn per_kind(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    expected: &[&'static str],
    counts: &BTreeMap<&'static str, u64>,
) -> fmt::Result {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for kind in kinds(expected, counts.keys().copied()) {
        let n = counts.get(kind).copied().unwrap_or(0);
        ConstCounter::new(n).encode(family.encode_family(&[("kind", kind)])?)?;
    }
    Ok(())
}

/// The HTTP listener of the metrics endpoint, bound but not yet serving.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    local_addr: SocketAddr,
}

impl MetricsServer {
    /// Binds `addr` now, so a taken port fails at start rather than at the first scrape.
    /// Async because tokio's listener sets `SO_REUSEADDR`: a restarted container rebinds
    /// its port even while the old connections sit in `TIME_WAIT`.
    pub async fn bind(addr: SocketAddr) -> Result<Self, MetricsError> {
        let bind_error = |source| MetricsError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        Ok(Self { listener, local_addr })
    }

    /// The bound address (the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves `GET /metrics` until `shutdown` resolves, then lets in-flight scrapes finish
    /// (at most a few seconds) and returns. Other paths get 404, other methods 405. A
    /// failed `accept` is logged and retried: the endpoint never stops the processor.
    pub async fn serve(self, metrics: Arc<Metrics>, shutdown: impl Future<Output = ()>) {
        let (stop, stopped) = watch::channel(());
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(connection(stream, Arc::clone(&metrics), stopped.clone()));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "metrics: accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                // Reap finished connections so the set does not grow.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(self.listener);
        stop.send_replace(());
        let drained = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
            tracing::warn!("metrics: dropping connections still open after the shutdown grace");
        }
        // Dropping the set aborts whatever is left.
    }
}

/// One HTTP/1 connection; closed gracefully (after the current response) on `stop`.
async fn connection(stream: TcpStream, metrics: Arc<Metrics>, mut stop: watch::Receiver<()>) {
    let service = service_fn(move |req: Request<Incoming>| {
        let response = respond(&metrics, req.method(), req.uri().path());
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    let mut conn = std::pin::pin!(builder.serve_connection(TokioIo::new(stream), service));
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "metrics: connection ended with an error");
    }
}

fn respond(metrics: &Metrics, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if path == HEALTH_PATH {
        return match metrics.health.stalled() {
            None => text(StatusCode::OK, "alive\n".to_owned()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {why}\n")),
        };
    }
    if path == READY_PATH {
        return match metrics.not_ready() {
            None => text(StatusCode::OK, "ready\n".to_owned()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
        };
    }
    if path != METRICS_PATH {
        return text(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics, liveness at /healthz, readiness at /readyz\n".to_owned(),
        );
    }
    if method != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET is allowed\n".to_owned());
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match metrics.try_encode() {
        Ok(body) => {
            let mut response = text(StatusCode::OK, body);
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_OPENMETRICS));
            response
        }
        Err(fmt::Error) => {
            tracing::error!("metrics: encoding failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed\n".to_owned())
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests;
