//! Logging and tracing setup shared by every verb: `tracing` events to stderr (text or
//! JSON, levels from `RUST_LOG`), and spans bridged to OpenTelemetry so that one trace can
//! follow an observation through Kafka (docs/TRACING.md).
//!
//! Spans are exported with OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (protocol, headers, timeouts and the service
//! name come from the SDK's own `OTEL_*` variables). Without either, nothing is exported
//! and the per-record spans of the publisher and the runtime are not even created:
//! [`tracer`] is `None` and they only forward `traceparent` headers.

use std::sync::OnceLock;

use opentelemetry::{
    Context,
    global::BoxedTracer,
    propagation::{Extractor, TextMapPropagator},
    trace::{SpanContext, TraceContextExt, TracerProvider as _},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use thiserror::Error;
use tracing::Subscriber;
use tracing_subscriber::{
    EnvFilter, Layer, layer::SubscriberExt, registry::LookupSpan, util::SubscriberInitExt,
};

/// The instrumentation scope of every span kubefacts creates.
pub const SCOPE: &str = "kubefacts";

/// The W3C trace-context header carried by Kafka records (docs/TRACING.md).
pub const TRACEPARENT: &str = "traceparent";

static EXPORTING: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Why spans cannot be exported (then [`init`] warns and exports nothing).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter could not be built from the `OTEL_*` settings.
    #[error(transparent)]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Whether an OTLP endpoint is configured in the environment.
pub fn otlp_configured() -> bool {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Makes `provider` the one per-record spans go to (and the OpenTelemetry global): from
/// now on [`tracer`] returns its tracer. [`init`] calls it when OTLP is configured; tests
/// call it with an in-memory exporter. The first call wins.
pub fn install(provider: SdkTracerProvider) {
    if EXPORTING.set(provider.clone()).is_ok() {
        opentelemetry::global::set_tracer_provider(provider);
    }
}

/// The tracer for per-record spans, or `None` when no exporter is installed (then the
/// publisher and the runtime create no spans at all).
pub fn tracer() -> Option<BoxedTracer> {
    EXPORTING.get().map(|_| opentelemetry::global::tracer(SCOPE))
}

/// A provider exporting with OTLP/HTTP in batches (a background thread; protocol from
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, `http/protobuf` by default, or `http/json`).
fn otlp_provider() -> Result<SdkTracerProvider, TelemetryError> {
    crate::http::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("kubefacts");
    }
    Ok(SdkTracerProvider::builder().with_resource(resource.build()).with_batch_exporter(exporter).build())
}

/// The `traceparent` header value of `cx` (W3C trace context, version 00), written by
/// OpenTelemetry's [`TraceContextPropagator`]; `None` for an invalid context.
pub fn traceparent(cx: &SpanContext) -> Option<String> {
    let mut carrier = std::collections::HashMap::with_capacity(1);
    let cx = Context::new().with_remote_span_context(cx.clone());
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// The span context of a `traceparent` header value; `None` when absent or malformed.
pub fn parse_traceparent(value: &[u8]) -> Option<SpanContext> {
    struct One<'a>(&'a str);
    impl Extractor for One<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            (key == TRACEPARENT).then_some(self.0)
        }
        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT]
        }
    }
    let value = std::str::from_utf8(value).ok()?;
    let cx = TraceContextPropagator::new().extract(&One(value));
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// The OpenTelemetry layer for `provider`'s tracer, to stack on any subscriber.
pub fn otel_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer(SCOPE))
}

/// Installs the global subscriber (and the OTLP exporter when configured); keep the
/// returned provider until exit and shut it down then (that flushes the spans).
pub fn init(format: LogFormat) -> SdkTracerProvider {
    let (provider, export_error) = match otlp_configured().then(otlp_provider) {
        Some(Ok(p)) => {
            install(p.clone());
            (p, None)
        }
        Some(Err(e)) => (SdkTracerProvider::builder().build(), Some(e)),
        None => (SdkTracerProvider::builder().build(), None),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Colour only on a terminal: logs captured to files stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    tracing_subscriber::registry().with(filter).with(fmt).with(otel_layer(&provider)).init();
    if let Some(e) = export_error {
        tracing::warn!(error = %e, "OTLP span export is not set up; spans are not exported");
    }
    provider
}

#[cfg(test)]
mod tests {
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    use super::*;

    #[test]
    fn tracing_spans_become_opentelemetry_spans_with_parents() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry().with(otel_layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("publish", topic = "kubefacts.jobs.v1");
            let _g = outer.enter();
            tracing::info_span!("encode").in_scope(|| {});
        });
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let names: Vec<_> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["encode", "publish"]);
        assert_eq!(spans[0].parent_span_id, spans[1].span_context.span_id());
        assert_eq!(spans[0].span_context.trace_id(), spans[1].span_context.trace_id());
    }

    #[test]
    fn traceparent_round_trips_and_rejects_garbage() {
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let sc = parse_traceparent(header.as_bytes()).unwrap();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc).as_deref(), Some(header));
        assert!(parse_traceparent(b"00-nonsense").is_none());
        assert!(parse_traceparent(b"\xff").is_none());
    }
}
