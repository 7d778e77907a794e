//! The Prometheus `/metrics` endpoint of `kubefacts process` and `kubefacts watch`: the
//! [`RuntimeStats`] counters of every stage and the [`WatchStats`] of the watcher, read at
//! scrape time, in the OpenMetrics text format. `docs/METRICS.md` lists every metric; a
//! test fails when it and [`Metrics::encode`] disagree.
//!
//! ```no_run
//! # async fn run(stats: std::sync::Arc<kubefacts::runtime::kafka::RuntimeStats>) -> Result<(), kubefacts::metrics::MetricsError> {
//! use std::sync::Arc;
//! use kubefacts::metrics::{Metrics, MetricsServer};
//!
//! let mut metrics = Metrics::new();
//! metrics.add_stage("probe", stats);
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
    metrics::{MetricType, TypedMetric, counter::ConstCounter, gauge::ConstGauge},
    registry::{Registry, Unit},
};
use thiserror::Error;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};

use crate::{
    observe::admission::Step,
    runtime::kafka::{RuntimeStats, TaskGauges},
    trace::KubeObject,
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

/// The metrics of one process: every registered stage's [`RuntimeStats`], labelled
/// `stage`, and the watcher's [`WatchStats`] if one was added. Cheap to scrape
/// concurrently; share it as `Arc<Metrics>`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    stages: Arc<StageCollector>,
    watcher: Arc<WatchCollector>,
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
        Self { registry, stages, watcher }
    }

    /// Exports `stats` under `stage="<stage>"`. Values are read at each scrape, so the
    /// runtime keeps updating its atomics and nothing copies them. Adding a stage name
    /// again replaces the earlier stats (a restarted stage brings fresh ones), so a scrape
    /// never holds two series with the same labels.
    pub fn add_stage(&mut self, stage: &str, stats: Arc<RuntimeStats>) {
        let mut stages = self.stages.stages.write().unwrap_or_else(PoisonError::into_inner);
        match stages.iter_mut().find(|s| s.name == stage) {
            Some(existing) => existing.stats = stats,
            None => stages.push(Stage { name: stage.to_owned(), stats }),
        }
    }

    /// Exports the watcher's `stats` (the `kubefacts_watch_*` and `kubefacts_admission_*`
    /// families), read at each scrape. A process runs one watcher: a second call replaces
    /// the first's stats. Every kind and admission step has a series from the first
    /// scrape, at 0 until something is counted, so alerts need not handle absent series.
    pub fn add_watcher(&mut self, stats: Arc<WatchStats>) {
        *self.watcher.stats.write().unwrap_or_else(PoisonError::into_inner) = Some(stats);
    }

    /// Why the process is not ready, if it is not: a stage restoring its state or waiting
    /// for the schema registry.
    pub fn not_ready(&self) -> Option<String> {
        let stages = self.stages.stages.read().unwrap_or_else(PoisonError::into_inner);
        let why: Vec<String> = stages
            .iter()
            .filter_map(|s| {
                let st = &s.stats;
                if st.retrying.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    Some(format!("stage {} waits for the schema registry", s.name))
                } else if st.restoring_tasks.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    Some(format!("stage {} is restoring its state", s.name))
                } else {
                    None
                }
            })
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

#[derive(Debug)]
struct Stage {
    name: String,
    stats: Arc<RuntimeStats>,
}

/// One collector for all stages, so that each metric family is described once (HELP,
/// TYPE) with a series per stage; a collector per stage would repeat the family, which
/// OpenMetrics parsers reject.
#[derive(Debug, Default)]
struct StageCollector {
    /// Written only by `add_stage`; the lock is never held across an await.
    stages: RwLock<Vec<Stage>>,
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Wall-clock now, epoch milliseconds.
fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Describes one counter family labelled `stage` and `label`, with a series per stage and
/// key of the map `counts` reads.
fn labelled(
    e: &mut DescriptorEncoder,
    stages: &[Stage],
    name: &str,
    help: &str,
    label: &str,
    counts: impl Fn(&RuntimeStats) -> BTreeMap<String, u64>,
) -> fmt::Result {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for s in stages {
        for (value, n) in counts(&s.stats) {
            let labels = [("stage", s.name.as_str()), (label, value.as_str())];
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for StageCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stages = self.stages.read().unwrap_or_else(PoisonError::into_inner);
        let records = Unit::Other("records".to_owned());
        let help = "Input records consumed and processed, heartbeats included, by input topic.";
        let by_topic = |s: &RuntimeStats| s.records_in_by_topic();
        labelled(&mut e, &stages, "records_in", help, "topic", by_topic)?;
        let help = "Output records produced, forwarded heartbeats included, by output topic.";
        let by_topic = |s: &RuntimeStats| s.records_out_by_topic();
        labelled(&mut e, &stages, "records_out", help, "topic", by_topic)?;
        let help = "Input records dead-lettered instead of processed, by bounded reason code.";
        let mut family = e.encode_descriptor("dead_letters", help, None, MetricType::Counter)?;
        for s in stages.iter() {
            for (reason, n) in s.stats.dead_letters_by_reason() {
                let labels = [("stage", s.name.as_str()), ("reason", reason)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        let help = "Changelog records applied while restoring state stores.";
        family_of(&mut e, &stages, "restored", help, Some(&records), |s| {
            ConstCounter::new(load(&s.restored))
        })?;
        let help = "Time spent restoring state stores from changelogs.";
        family_of(&mut e, &stages, "restore", help, Some(&Unit::Seconds), |s| {
            ConstCounter::new(load(&s.restore_ms) as f64 / 1000.0)
        })?;
        let help = "Tasks whose state stores are being restored now.";
        family_of(&mut e, &stages, "restoring_tasks", help, None, |s| {
            ConstGauge::new(load(&s.restoring_tasks))
        })?;
        let help = "Admissions retried because the schema registry did not answer (the record \
                    waits; it is never dead-lettered for it).";
        family_of(&mut e, &stages, "registry_retries", help, None, |s| ConstCounter::new(load(&s.retries)))?;
        let help = "1 while a record waits for the schema registry to answer (the stage is not \
                    ready: /readyz answers 503).";
        family_of(&mut e, &stages, "waiting_for_registry", help, None, |s| {
            ConstGauge::new(load(&s.retrying).min(1))
        })?;
        let help = "Input records assigned but not yet consumed, per assigned partition (refreshed \
                    every few seconds).";
        let mut family = e.encode_descriptor("consumer_lag", help, Some(&records), MetricType::Gauge)?;
        for s in stages.iter() {
            for ((topic, partition), lag) in s.stats.lag_by_partition() {
                let partition = partition.to_string();
                let labels = [
                    ("stage", s.name.as_str()),
                    ("topic", topic.as_str()),
                    ("partition", partition.as_str()),
                ];
                ConstGauge::new(lag).encode(family.encode_family(&labels)?)?;
            }
        }
        let tasks: Vec<(&str, TaskGauges)> =
            stages.iter().map(|s| (s.name.as_str(), s.stats.task_gauges())).collect();
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
        let mut family = e.encode_descriptor("transactions", help, None, MetricType::Counter)?;
        for s in stages.iter() {
            for (outcome, value) in [("committed", &s.stats.commits), ("aborted", &s.stats.aborts)] {
                let labels = [("stage", s.name.as_str()), ("outcome", outcome)];
                ConstCounter::new(load(value)).encode(family.encode_family(&labels)?)?;
            }
        }
        let help = "Events the stage's processor counted in committed transactions (runs_filed, \
                    runs_late, windows_finalized, …), by bounded event name.";
        let mut family = e.encode_descriptor("processor_events", help, None, MetricType::Counter)?;
        for s in stages.iter() {
            for (event, n) in s.stats.events() {
                let labels = [("stage", s.name.as_str()), ("event", event)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Describes one metric family once, then writes one series per stage.
fn family_of<M: EncodeMetric + TypedMetric>(
    e: &mut DescriptorEncoder,
    stages: &[Stage],
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: impl Fn(&RuntimeStats) -> M,
) -> fmt::Result {
    let mut family = e.encode_descriptor(name, help, unit, M::TYPE)?;
    for s in stages {
        metric(&s.stats).encode(family.encode_family(&[("stage", s.name.as_str())])?)?;
    }
    Ok(())
}

/// The kinds admission decides about (Namespaces and Leases are not admitted by annotation).
const ADMISSION_KINDS: [&str; 3] = ["Pod", "Job", "CronJob"];

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
        // Copy the maps out first: the watch loop never waits for a scrape's writing.
        let events = stats.events.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let relists = stats.relists.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let admission = stats.admission.lock().unwrap_or_else(PoisonError::into_inner).clone();

        let help = "Watch events received, by kind.";
        per_kind(&mut e, "watch_events", help, &KubeObject::KINDS, &events)?;
        let help = "Relists (snapshots) started, by kind; the first list of each term counts.";
        per_kind(&mut e, "watch_relists", help, &KubeObject::KINDS, &relists)?;
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
        let counters: [(&str, &str, Option<&Unit>, &AtomicU64); 4] = [
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
        ];
        for (name, help, unit, value) in counters {
            single(&mut e, name, help, unit, ConstCounter::new(load(value)))?;
        }
        let help = "Sum of publish-to-acknowledgement latencies; divided by \
                    kubefacts_watch_acked_records_total it is the mean publish latency.";
        let latency = ConstCounter::new(load(&stats.ack_latency_us) as f64 / 1_000_000.0);
        single(&mut e, "watch_ack_latency", help, Some(&Unit::Seconds), latency)
    }
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
    if path == READY_PATH {
        return match metrics.not_ready() {
            None => text(StatusCode::OK, "ready\n".to_owned()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
        };
    }
    if path != METRICS_PATH {
        return text(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics, readiness at /readyz\n".to_owned(),
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
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// Stats of a stage whose processor has counted one kind of event (zero so far), with
    /// an input and an output topic, a dead-letter reason (zero so far), an assigned
    /// partition, a task with a stream time and a store, so every family has a series.
    fn stats() -> Arc<RuntimeStats> {
        let stats = RuntimeStats::default();
        stats.add_events(BTreeMap::from([("runs_filed", 0)]));
        stats.declare_topics(["kubefacts.jobs.v1"], ["kubefacts.runs.v1"]);
        stats.count_dead_letters("null_value", 0);
        stats.set_lag(vec![("kubefacts.jobs.v1".to_owned(), 0, Some(0))]);
        stats.set_task_gauges(Some(now_ms()), BTreeMap::from([("runs".to_owned(), 0)]));
        Arc::new(stats)
    }

    #[test]
    fn processor_events_follow_committed_counts_per_stage_and_event() {
        let mut metrics = Metrics::new();
        let runs = stats();
        metrics.add_stage("runs", Arc::clone(&runs));
        runs.add_events(BTreeMap::from([("runs_filed", 3), ("runs_late", 1)]));
        runs.add_events(BTreeMap::from([("runs_filed", 2)]));
        let out = metrics.encode();
        let filed = sample(&out, "kubefacts_processor_events_total", "stage=\"runs\",event=\"runs_filed\"");
        assert_eq!(filed.as_deref(), Some("5"), "{out}");
        let late = sample(&out, "kubefacts_processor_events_total", "stage=\"runs\",event=\"runs_late\"");
        assert_eq!(late.as_deref(), Some("1"), "{out}");
    }

    /// The value of the sample `name{labels}` (`name` alone when `labels` is empty), if present.
    fn sample(out: &str, name: &str, labels: &str) -> Option<String> {
        let prefix = if labels.is_empty() { format!("{name} ") } else { format!("{name}{{{labels}}} ") };
        out.lines().find_map(|l| l.strip_prefix(&prefix)).map(str::to_owned)
    }

    #[test]
    fn every_metric_follows_its_atomic_per_stage() {
        let (runs, probe) = (stats(), stats());
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", Arc::clone(&runs));
        metrics.add_stage("probe", Arc::clone(&probe));
        let fields: [(&str, &str, &AtomicU64); 5] = [
            ("kubefacts_transactions_total", ",outcome=\"committed\"", &runs.commits),
            ("kubefacts_transactions_total", ",outcome=\"aborted\"", &runs.aborts),
            ("kubefacts_restored_records_total", "", &runs.restored),
            ("kubefacts_restore_seconds_total", "", &runs.restore_ms),
            ("kubefacts_restoring_tasks", "", &runs.restoring_tasks),
        ];
        for (_, _, a) in &fields {
            a.store(3000, Ordering::Relaxed);
        }
        let before = metrics.encode();
        for (_, _, a) in &fields {
            a.fetch_add(1500, Ordering::Relaxed);
        }
        let after = metrics.encode();
        for (name, extra, _) in fields {
            let labels = format!("stage=\"runs\"{extra}");
            let (b, a) = (sample(&before, name, &labels), sample(&after, name, &labels));
            let expected = if name == "kubefacts_restore_seconds_total" {
                (Some("3.0".to_owned()), Some("4.5".to_owned()))
            } else {
                (Some("3000".to_owned()), Some("4500".to_owned()))
            };
            assert_eq!((b, a), expected, "{name}{{{labels}}} in\n{after}");
            // The other stage's series exists and did not move.
            let probe_labels = format!("stage=\"probe\"{extra}");
            assert!(sample(&after, name, &probe_labels).is_some_and(|v| v.starts_with('0')), "{name}");
        }
    }

    /// The value of `name{labels}` as a number, if present.
    fn value(out: &str, name: &str, labels: &str) -> Option<f64> {
        sample(out, name, labels).map(|v| v.parse().expect("a number"))
    }

    #[test]
    fn records_in_and_out_are_counted_per_topic() {
        let (runs, probe) = (stats(), stats());
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", Arc::clone(&runs));
        metrics.add_stage("probe", Arc::clone(&probe));
        let jobs = "stage=\"runs\",topic=\"kubefacts.jobs.v1\"";
        let pods = "stage=\"runs\",topic=\"kubefacts.pods.v1\"";
        let runs_out = "stage=\"runs\",topic=\"kubefacts.runs.v1\"";
        let out = metrics.encode();
        // Declared topics have a series at 0 before the first record.
        assert_eq!(value(&out, "kubefacts_records_in_total", jobs), Some(0.0), "{out}");
        assert_eq!(value(&out, "kubefacts_records_out_total", runs_out), Some(0.0), "{out}");
        assert_eq!(value(&out, "kubefacts_records_in_total", pods), None, "{out}");
        runs.count_in("kubefacts.jobs.v1", 3);
        runs.count_in("kubefacts.pods.v1", 2);
        runs.count_in("kubefacts.jobs.v1", 1);
        runs.count_out("kubefacts.runs.v1", 5);
        let out = metrics.encode();
        assert_eq!(value(&out, "kubefacts_records_in_total", jobs), Some(4.0), "{out}");
        assert_eq!(value(&out, "kubefacts_records_in_total", pods), Some(2.0), "{out}");
        assert_eq!(value(&out, "kubefacts_records_out_total", runs_out), Some(5.0), "{out}");
        assert_eq!((load(&runs.records_in), load(&runs.records_out)), (6, 5), "the totals follow");
        // The other stage did not move.
        let probe_jobs = "stage=\"probe\",topic=\"kubefacts.jobs.v1\"";
        assert_eq!(value(&out, "kubefacts_records_in_total", probe_jobs), Some(0.0), "{out}");
        assert_eq!(out.matches("kubefacts_records_in_total{").count(), 3, "{out}");
    }

    #[test]
    fn dead_letters_are_counted_per_reason() {
        let runs = stats();
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", Arc::clone(&runs));
        let null = "stage=\"runs\",reason=\"null_value\"";
        let unknown = "stage=\"runs\",reason=\"unknown_event\"";
        let out = metrics.encode();
        assert_eq!(value(&out, "kubefacts_dead_letters_total", null), Some(0.0), "{out}");
        assert_eq!(value(&out, "kubefacts_dead_letters_total", unknown), None, "{out}");
        runs.count_dead_letters("unknown_event", 2);
        runs.count_dead_letters("null_value", 1);
        runs.count_dead_letters("unknown_event", 1);
        let out = metrics.encode();
        assert_eq!(value(&out, "kubefacts_dead_letters_total", null), Some(1.0), "{out}");
        assert_eq!(value(&out, "kubefacts_dead_letters_total", unknown), Some(3.0), "{out}");
        assert_eq!(load(&runs.dead_lettered), 4, "the total follows");
    }

    #[test]
    fn lag_is_per_assigned_partition_and_a_revoked_one_disappears() {
        let runs = RuntimeStats::default();
        let jobs = |p: i32, lag: Option<u64>| ("kubefacts.jobs.v1".to_owned(), p, lag);
        let labels = |p: i32| format!("stage=\"runs\",topic=\"kubefacts.jobs.v1\",partition=\"{p}\"");
        let runs = Arc::new(runs);
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", Arc::clone(&runs));
        assert_eq!(metrics.encode().matches("kubefacts_consumer_lag_records{").count(), 0);
        runs.set_lag(vec![jobs(0, Some(5)), jobs(1, Some(7))]);
        let out = metrics.encode();
        assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(0)), Some(5.0), "{out}");
        assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(1)), Some(7.0), "{out}");
        assert_eq!(load(&runs.lag), 12, "the sum follows");
        // Partition 1 moved away, 2 arrived; 0's watermark could not be read: its last lag stays.
        runs.set_lag(vec![jobs(0, None), jobs(2, Some(1))]);
        let out = metrics.encode();
        assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(0)), Some(5.0), "{out}");
        assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(1)), None, "{out}");
        assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(2)), Some(1.0), "{out}");
        // A revocation removes the partition at once, before the next refresh.
        runs.retain_lag(|p| p != 0);
        let out = metrics.encode();
        assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(0)), None, "{out}");
        assert_eq!(out.matches("kubefacts_consumer_lag_records{").count(), 1, "{out}");
        assert_eq!(load(&runs.lag), 1);
    }

    #[test]
    fn stream_time_delay_is_now_minus_the_lowest_stream_time() {
        let runs = Arc::new(RuntimeStats::default());
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", Arc::clone(&runs));
        let delay = |metrics: &Metrics| {
            value(&metrics.encode(), "kubefacts_stream_time_delay_seconds", "stage=\"runs\"")
        };
        assert_eq!(delay(&metrics), None, "no task has a stream time");
        runs.set_task_gauges(Some(now_ms() - 90_000), BTreeMap::new());
        let d = delay(&metrics).expect("a delay");
        assert!((90.0..95.0).contains(&d), "{d}");
        runs.set_task_gauges(Some(now_ms() - 5_000), BTreeMap::new());
        let d = delay(&metrics).expect("a delay");
        assert!((5.0..10.0).contains(&d), "{d}");
        runs.set_task_gauges(None, BTreeMap::new());
        assert_eq!(delay(&metrics), None, "the tasks were revoked");
    }

    #[test]
    fn state_entries_follow_the_stores_and_a_store_no_task_holds_reads_zero() {
        let runs = Arc::new(RuntimeStats::default());
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", Arc::clone(&runs));
        let entries = |metrics: &Metrics, store: &str| {
            value(&metrics.encode(), "kubefacts_state_entries", &format!("stage=\"runs\",store=\"{store}\""))
        };
        runs.set_task_gauges(None, BTreeMap::from([("runs".to_owned(), 3), ("owners".to_owned(), 4)]));
        assert_eq!((entries(&metrics, "runs"), entries(&metrics, "owners")), (Some(3.0), Some(4.0)));
        runs.set_task_gauges(None, BTreeMap::from([("runs".to_owned(), 10)]));
        assert_eq!((entries(&metrics, "runs"), entries(&metrics, "owners")), (Some(10.0), Some(0.0)));
    }

    #[test]
    fn each_family_is_described_once_with_several_stages() {
        let mut metrics = Metrics::new();
        for stage in ["runs", "journal", "probe"] {
            metrics.add_stage(stage, stats());
        }
        metrics.add_stage("runs", stats()); // replaces, does not duplicate
        let out = metrics.encode();
        let types: Vec<&str> = out.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        assert_eq!(types.len(), 13, "{out}");
        assert_eq!(types.iter().collect::<BTreeSet<_>>().len(), types.len(), "{out}");
        assert!(out.lines().all(|l| l.starts_with('#') || !l.is_empty()));
        assert_eq!(out.matches("kubefacts_records_in_total{").count(), 3, "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
        assert!(Metrics::new().encode().lines().all(|l| l.starts_with('#')));
    }

    /// Metric name → (type, label names).
    type Table = BTreeMap<String, (String, BTreeSet<String>)>;

    /// The rows of every metrics table in docs/METRICS.md, by the `## ` heading above them.
    fn documented() -> BTreeMap<String, Table> {
        let cell = |c: &str| c.trim().trim_matches('`').to_owned();
        let mut tables: BTreeMap<String, Table> = BTreeMap::new();
        let mut heading = String::new();
        for line in include_str!("../docs/METRICS.md").lines() {
            if let Some(h) = line.strip_prefix("## ") {
                h.clone_into(&mut heading);
            } else if line.starts_with("| `kubefacts_") {
                let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
                let labels = cells[2].split(',').map(cell).filter(|c| !c.is_empty()).collect();
                let row = (cell(cells[1]), labels);
                let previous = tables.entry(heading.clone()).or_default().insert(cell(cells[0]), row);
                assert!(previous.is_none(), "{} documented twice", cells[0]);
            }
        }
        tables
    }

    /// The rows under the heading `## <heading>`.
    fn table(tables: &BTreeMap<String, Table>, heading: &str) -> Table {
        tables.get(heading).cloned().unwrap_or_else(|| panic!("no `## {heading}` table in docs/METRICS.md"))
    }

    /// Sample name → (type, label names), from the exposition.
    fn exposed(out: &str) -> Table {
        let types: BTreeMap<&str, &str> =
            out.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_once(' ')).collect();
        let mut exposed = BTreeMap::new();
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, _value)) = line.rsplit_once(' ') else { continue };
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            let labels = rest.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.to_owned());
            let family = name.strip_suffix("_total").filter(|f| types.contains_key(f)).unwrap_or(name);
            let kind = types.get(family).copied().unwrap_or("missing TYPE").to_owned();
            let entry = exposed.entry(name.to_owned()).or_insert((kind, BTreeSet::new()));
            entry.1.extend(labels);
        }
        exposed
    }

    #[test]
    fn docs_metrics_table_matches_the_endpoint() {
        const PROCESSOR: &str = "Processor (`kubefacts process --metrics-addr`)";
        const WATCHER: &str = "Watcher (`kubefacts watch --metrics-addr`)";
        let tables = documented();
        let unknown: Vec<&String> =
            tables.keys().filter(|h| ![PROCESSOR, WATCHER].contains(&h.as_str())).collect();
        assert!(unknown.is_empty(), "`kubefacts_` rows under unexpected headings: {unknown:?}");
        let (processor, watcher) = (table(&tables, PROCESSOR), table(&tables, WATCHER));
        assert!(!processor.is_empty() && !watcher.is_empty());

        let mut stage_only = Metrics::new();
        stage_only.add_stage("runs", stats());
        let out = stage_only.encode();
        assert_eq!(processor, exposed(&out), "processor table (left) vs encode() with a stage (right)");

        let mut watcher_only = Metrics::new();
        watcher_only.add_watcher(watch_stats());
        let out = watcher_only.encode();
        assert_eq!(watcher, exposed(&out), "watcher table (left) vs encode() with a watcher (right)");

        let mut both = Metrics::new();
        both.add_stage("runs", stats());
        both.add_watcher(watch_stats());
        let mut all = processor.clone();
        all.extend(watcher.clone());
        assert_eq!(all.len(), processor.len() + watcher.len(), "a metric is in both tables");
        assert_eq!(all, exposed(&both.encode()), "docs/METRICS.md (left) vs encode() with both (right)");
    }

    fn watch_stats() -> Arc<WatchStats> {
        Arc::new(WatchStats::default())
    }

    /// Sets every field of `w` to a value derived from `n`; [`expected_watch_samples`]
    /// gives the samples it should produce.
    fn set_watch_stats(w: &WatchStats, n: u64) {
        for kind in KubeObject::KINDS {
            w.events.lock().expect("lock").insert(kind, n);
            w.relists.lock().expect("lock").insert(kind, n + 1);
        }
        let mut admission = crate::observe::AdmissionCounts::default();
        for kind in ADMISSION_KINDS {
            admission.admitted.insert(kind, n + 2);
            for (i, step) in (0..).zip(Step::ALL) {
                admission.excluded.insert((kind, step), n + 3 + i);
            }
        }
        admission.held = usize::try_from(n).expect("small");
        w.set_admission(&admission);
        w.leader.store(n % 2 == 1, Ordering::Relaxed);
        for (i, a) in (0..).zip([&w.terms, &w.published_records, &w.heartbeats, &w.acked_records]) {
            a.store(n * 10 + i, Ordering::Relaxed);
        }
        w.ack_latency_us.store(n * 1_500_000, Ordering::Relaxed);
    }

    /// What `set_watch_stats(_, n)` should expose: (name, labels) → value.
    fn expected_watch_samples(n: u64) -> BTreeMap<(String, String), String> {
        let mut expected = BTreeMap::new();
        let mut put =
            |name: &str, labels: String, value: String| expected.insert((name.to_owned(), labels), value);
        for kind in KubeObject::KINDS {
            put("kubefacts_watch_events_total", format!("kind=\"{kind}\""), n.to_string());
            put("kubefacts_watch_relists_total", format!("kind=\"{kind}\""), (n + 1).to_string());
        }
        for kind in ADMISSION_KINDS {
            put("kubefacts_admission_admitted_total", format!("kind=\"{kind}\""), (n + 2).to_string());
            for (i, step) in (0..).zip(Step::ALL) {
                let labels = format!("kind=\"{kind}\",step=\"{}\"", step.as_str());
                put("kubefacts_admission_excluded_total", labels, (n + 3 + i).to_string());
            }
        }
        put("kubefacts_admission_held_objects", String::new(), n.to_string());
        put("kubefacts_watch_leader", String::new(), (n % 2).to_string());
        let counters = [
            "kubefacts_watch_terms_total",
            "kubefacts_watch_published_records_total",
            "kubefacts_watch_heartbeats_total",
            "kubefacts_watch_acked_records_total",
        ];
        for (i, name) in (0..).zip(counters) {
            put(name, String::new(), (n * 10 + i).to_string());
        }
        put("kubefacts_watch_ack_latency_seconds_total", String::new(), format!("{:.1}", n as f64 * 1.5));
        expected
    }

    /// Every watcher sample of an exposition: (name, labels) → value.
    fn watch_samples(out: &str) -> BTreeMap<(String, String), String> {
        out.lines()
            .filter(|l| l.starts_with("kubefacts_watch_") || l.starts_with("kubefacts_admission_"))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(series, value)| {
                let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
                ((name.to_owned(), labels.trim_end_matches('}').to_owned()), value.to_owned())
            })
            .collect()
    }

    #[test]
    fn every_watcher_metric_follows_its_stats() {
        let watcher = watch_stats();
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", stats());
        metrics.add_watcher(Arc::clone(&watcher));
        set_watch_stats(&watcher, 3);
        let before = watch_samples(&metrics.encode());
        set_watch_stats(&watcher, 6);
        let after = watch_samples(&metrics.encode());
        assert_eq!(before, expected_watch_samples(3));
        assert_eq!(after, expected_watch_samples(6));
        for (series, value) in &after {
            assert_ne!(before.get(series), Some(value), "{series:?} did not move");
        }
        // 6 acknowledgements in 9 s: the documented ratio is the mean latency.
        watcher.acked_records.store(6, Ordering::Relaxed);
        let out = metrics.encode();
        let mean = sample(&out, "kubefacts_watch_ack_latency_seconds_total", "")
            .map(|s| s.parse::<f64>())
            .expect("latency")
            .expect("a number")
            / 6.0;
        assert!((mean - 1.5).abs() < 1e-9, "{mean}");
    }

    #[test]
    fn watcher_series_exist_at_zero_before_any_event() {
        let mut metrics = Metrics::new();
        metrics.add_watcher(watch_stats());
        let out = metrics.encode();
        let zeros: BTreeMap<_, _> = expected_watch_samples(0)
            .into_iter()
            .map(|(series, v)| (series, if v == "0.0" { v } else { "0".to_owned() }))
            .collect();
        assert_eq!(watch_samples(&out), zeros, "{out}");
        let kinds = KubeObject::KINDS.len();
        let steps = Step::ALL.len();
        assert_eq!(zeros.len(), 2 * kinds + ADMISSION_KINDS.len() * (1 + steps) + 7);
    }

    #[test]
    fn a_kind_outside_the_known_ones_still_gets_its_series() {
        let watcher = watch_stats();
        watcher.event("Other");
        let mut metrics = Metrics::new();
        metrics.add_watcher(Arc::clone(&watcher));
        let out = metrics.encode();
        assert_eq!(
            sample(&out, "kubefacts_watch_events_total", "kind=\"Other\"").as_deref(),
            Some("1"),
            "{out}"
        );
        assert_eq!(
            sample(&out, "kubefacts_watch_events_total", "kind=\"Pod\"").as_deref(),
            Some("0"),
            "{out}"
        );
    }

    #[test]
    fn watcher_families_appear_only_with_a_watcher() {
        let is_watcher = |l: &&str| l.contains("kubefacts_watch_") || l.contains("kubefacts_admission_");
        let mut metrics = Metrics::new();
        metrics.add_stage("runs", stats());
        let out = metrics.encode();
        assert_eq!(out.lines().filter(is_watcher).count(), 0, "{out}");

        let (first, second) = (watch_stats(), watch_stats());
        first.terms.store(1, Ordering::Relaxed);
        second.terms.store(2, Ordering::Relaxed);
        metrics.add_watcher(first);
        metrics.add_watcher(second); // replaces, does not duplicate
        let out = metrics.encode();
        assert_eq!(sample(&out, "kubefacts_watch_terms_total", "").as_deref(), Some("2"), "{out}");
        assert_eq!(out.matches("kubefacts_watch_terms_total ").count(), 1, "{out}");
        let types: Vec<&str> = out.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        assert_eq!(types.len(), 13 + 11, "{out}");
        assert_eq!(types.iter().collect::<BTreeSet<_>>().len(), types.len(), "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
    }

    #[tokio::test]
    async fn serves_metrics_over_http_until_shutdown() {
        let mut metrics = Metrics::new();
        let runs = stats();
        runs.count_in("kubefacts.jobs.v1", 42);
        metrics.add_stage("runs", runs);
        let server = MetricsServer::bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
        let base = format!("http://{}", server.local_addr());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(Arc::new(metrics), async {
            let _ = rx.await;
        }));
        let client = reqwest::Client::new();

        let ok = client.get(format!("{base}/metrics")).send().await.expect("GET /metrics");
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()[CONTENT_TYPE], CONTENT_TYPE_OPENMETRICS);
        let body = ok.text().await.expect("body");
        let jobs = "kubefacts_records_in_total{stage=\"runs\",topic=\"kubefacts.jobs.v1\"} 42";
        assert!(body.contains(jobs), "{body}");
        assert!(body.contains("# TYPE kubefacts_consumer_lag_records gauge"), "{body}");

        let missing = client.get(format!("{base}/other")).send().await.expect("GET /other");
        assert_eq!(missing.status(), 404);
        let post = client.post(format!("{base}/metrics")).send().await.expect("POST /metrics");
        assert_eq!(post.status(), 405);
        assert_eq!(post.headers()[ALLOW], "GET");

        // The client keeps its connection alive: shutdown must close it, not wait for it.
        tx.send(()).expect("server running");
        tokio::time::timeout(Duration::from_secs(2), task).await.expect("serve returned").expect("no panic");
        assert!(client.get(format!("{base}/metrics")).send().await.is_err(), "still serving");
    }

    #[tokio::test]
    async fn bind_failure_names_the_address() {
        let taken = MetricsServer::bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
        let addr = taken.local_addr();
        let error = MetricsServer::bind(addr).await.expect_err("port is taken");
        assert!(matches!(error, MetricsError::Bind { .. }));
        assert!(error.to_string().contains(&addr.to_string()), "{error}");
    }
}
