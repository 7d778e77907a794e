//! Logging and tracing setup shared by every verb: `tracing` events to stderr (text or
//! JSON, levels from `RUST_LOG`), and spans bridged to OpenTelemetry so that one trace can
//! later follow an observation through Kafka. Exporting spans (OTLP) is configured per
//! deployment; without an exporter spans cost an id and nothing leaves the process.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::{
    EnvFilter, Layer, layer::SubscriberExt, registry::LookupSpan, util::SubscriberInitExt,
};

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
    tracing_opentelemetry::layer().with_tracer(provider.tracer("kubefacts"))
}

/// Installs the global subscriber; keep the returned provider alive until exit.
pub fn init(format: LogFormat) -> SdkTracerProvider {
    let provider = SdkTracerProvider::builder().build();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Colour only on a terminal: logs captured to files stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    tracing_subscriber::registry().with(filter).with(fmt).with(otel_layer(&provider)).init();
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
}
