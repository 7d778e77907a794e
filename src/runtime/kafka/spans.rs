//! Tracing: the `process` span of an input record and the `emit` span of an output that
//! summarises other inputs too (docs/TRACING.md).

use opentelemetry::{
    Context, KeyValue,
    global::{BoxedSpan, BoxedTracer},
    trace::{Link, SpanKind, TraceContextExt as _, Tracer as _},
};

use super::read::Pending;
use crate::telemetry;

/// The `process` span (kind consumer) of one input record: a child of the record's
/// `traceparent` context when it has one, with the messaging attributes of
/// docs/TRACING.md.
pub(super) fn process_span<I>(
    tracer: &BoxedTracer,
    topics: &[&str],
    group: Option<&str>,
    rec: &Pending<I>,
) -> BoxedSpan {
    let parent = match rec.traceparent.as_deref().and_then(|t| telemetry::parse_traceparent(t.as_bytes())) {
        Some(sc) => Context::new().with_remote_span_context(sc),
        None => Context::new(),
    };
    let mut attributes = vec![
        KeyValue::new("messaging.system", "kafka"),
        KeyValue::new("messaging.operation.type", "process"),
        KeyValue::new("messaging.operation.name", "process"),
        KeyValue::new("messaging.destination.name", topics[rec.input].to_owned()),
        KeyValue::new("messaging.destination.partition.id", rec.partition.to_string()),
        KeyValue::new("messaging.kafka.offset", rec.offset),
    ];
    if let Some(group) = group {
        attributes.push(KeyValue::new("messaging.consumer.group.name", group.to_owned()));
    }
    if rec.heartbeat {
        attributes.push(KeyValue::new("kubefacts.heartbeat", true));
    }
    tracer
        .span_builder("process")
        .with_kind(SpanKind::Consumer)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent)
}

/// The `emit` span (kind producer) of an output that summarises inputs besides the one
/// being processed (a window, a run filed after it settled): a child of the `process` span
/// in `cx`, linked to each of those inputs' contexts (docs/TRACING.md).
pub(super) fn emit_span(tracer: &BoxedTracer, cx: &Context, topic: &str, links: &[String]) -> BoxedSpan {
    let links: Vec<Link> = links
        .iter()
        .filter_map(|tp| telemetry::parse_traceparent(tp.as_bytes()))
        .map(Link::with_context)
        .collect();
    let attributes = vec![
        KeyValue::new("messaging.system", "kafka"),
        KeyValue::new("messaging.operation.type", "send"),
        KeyValue::new("messaging.operation.name", "emit"),
        KeyValue::new("messaging.destination.name", topic.to_owned()),
    ];
    tracer
        .span_builder("emit")
        .with_kind(SpanKind::Producer)
        .with_attributes(attributes)
        .with_links(links)
        .start_with_context(tracer, cx)
}
