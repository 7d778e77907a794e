//! One trace from a published observation through `kubefacts process` on the real broker:
//! the publisher's `publish` span, the runtime's `process` span of that record (its child,
//! through the record's `traceparent` header), and the `traceparent` header of the outputs
//! written while processing it pointing at that `process` span. Both verbs run as the built
//! `kubefacts` binary (the real publish and runtime paths), exporting their spans with
//! OTLP/HTTP JSON (the `OTEL_*` variables docs/TRACING.md names) to a collector in this
//! test, which turns them back into the SDK's span data, so the test sees every span's
//! parent and attributes directly.
//!
//! Session projections are emitted while their session/pod record is processed: publish →
//! process → header. Job-run facts are filed when stream time passes a run's due time (in
//! the demo a keyless snapshot marker advances it), journal windows and coverage alerts when
//! stream time closes or judges them: their header names an `emit` span, child of the
//! `process` span of the record that advanced time, linked to the records the output
//! summarises. The test follows those links back to the publish spans of the Job and
//! CronJob observations.

mod support;

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Bytes, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use opentelemetry::{
    InstrumentationScope, KeyValue, Value,
    trace::{Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState},
};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};
use support::{infra, repo_path, unique_name};

/// An OTLP/HTTP collector (JSON encoding): every span the binaries export, as span data.
#[derive(Debug, Clone, Default)]
struct Collector(Arc<Mutex<Vec<SpanData>>>);

impl Collector {
    /// Listens on a free local port; returns the collector and its base URL (what
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes).
    async fn start() -> (Self, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let collector = Self::default();
        let spans = collector.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let spans = spans.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let spans = spans.clone();
                    async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        spans.receive(&body);
                        // An empty ExportTraceServiceResponse: every span accepted.
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from_static(b"{}"))))
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        (collector, url)
    }

    /// Every span received so far (named as the SDK's in-memory exporter names it).
    fn get_finished_spans(&self) -> Result<Vec<SpanData>, std::convert::Infallible> {
        Ok(self.0.lock().unwrap().clone())
    }

    /// Stores the spans of one ExportTraceServiceRequest.
    fn receive(&self, body: &[u8]) {
        let request: serde_json::Value = serde_json::from_slice(body).expect("an OTLP JSON request");
        let mut spans = self.0.lock().unwrap();
        for resource in request["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                let name = scope["scope"]["name"].as_str().unwrap_or_default().to_owned();
                for span in scope["spans"].as_array().into_iter().flatten() {
                    spans.push(span_data(span, InstrumentationScope::builder(name.clone()).build()));
                }
            }
        }
    }
}

/// OTLP's span flags: the low byte is the W3C trace flags; these bits say whether the
/// parent (or a link's span) is remote.
const HAS_IS_REMOTE: u64 = 0x100;
const IS_REMOTE: u64 = 0x200;

/// One OTLP JSON span as the SDK's span data (ids in hex, times and ints as strings).
fn span_data(span: &serde_json::Value, instrumentation_scope: InstrumentationScope) -> SpanData {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let nanos = |v: &serde_json::Value| text(v).parse::<u64>().unwrap_or(0);
    let time = |v: &serde_json::Value| SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos(v));
    let context = |s: &serde_json::Value, remote: bool| {
        SpanContext::new(
            TraceId::from_hex(&text(&s["traceId"])).unwrap(),
            SpanId::from_hex(&text(&s["spanId"])).unwrap(),
            TraceFlags::new(s["flags"].as_u64().unwrap_or(0) as u8),
            remote,
            TraceState::default(),
        )
    };
    let remote = |s: &serde_json::Value| {
        let flags = s["flags"].as_u64().unwrap_or(0);
        flags & HAS_IS_REMOTE != 0 && flags & IS_REMOTE != 0
    };
    let parent = text(&span["parentSpanId"]);
    let mut links = SpanLinks::default();
    links.links = (span["links"].as_array().into_iter().flatten())
        .map(|l| Link::new(context(l, remote(l)), attributes(&l["attributes"]), 0))
        .collect();
    SpanData {
        span_context: context(span, false),
        parent_span_id: if parent.is_empty() { SpanId::INVALID } else { SpanId::from_hex(&parent).unwrap() },
        parent_span_is_remote: remote(span),
        span_kind: match span["kind"].as_u64() {
            Some(2) => SpanKind::Server,
            Some(3) => SpanKind::Client,
            Some(4) => SpanKind::Producer,
            Some(5) => SpanKind::Consumer,
            _ => SpanKind::Internal,
        },
        name: text(&span["name"]).into(),
        start_time: time(&span["startTimeUnixNano"]),
        end_time: time(&span["endTimeUnixNano"]),
        attributes: attributes(&span["attributes"]),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links,
        status: Status::Unset,
        instrumentation_scope,
    }
}

/// OTLP JSON attributes (`{"key", "value": {"stringValue" | "intValue" | …}}`).
fn attributes(list: &serde_json::Value) -> Vec<KeyValue> {
    let value = |v: &serde_json::Value| -> Value {
        if let Some(s) = v["stringValue"].as_str() {
            Value::from(s.to_owned())
        } else if let Some(b) = v["boolValue"].as_bool() {
            Value::Bool(b)
        } else if let Some(i) = v["intValue"].as_str().and_then(|i| i.parse().ok()).or(v["intValue"].as_i64())
        {
            Value::I64(i)
        } else if let Some(f) = v["doubleValue"].as_f64() {
            Value::F64(f)
        } else {
            Value::from(v.to_string())
        }
    };
    (list.as_array().into_iter().flatten())
        .map(|kv| KeyValue::new(kv["key"].as_str().unwrap_or_default().to_owned(), value(&kv["value"])))
        .collect()
}

/// The `kubefacts` binary with `args`, exporting its spans to `collector` (a URL).
fn kubefacts(collector: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefacts"));
    cmd.args(args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        // In process the spans went to a simple exporter, which drops none; the batch
        // exporter drops what overflows its queue (2048 by default).
        .env("OTEL_BSP_MAX_QUEUE_SIZE", "65536")
        .stdout(Stdio::null());
    cmd
}

/// (key, traceparent header) of every committed record of `topic` so far.
fn read_headers(bootstrap: &str, topic: &str) -> Vec<(Vec<u8>, Option<String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("isolation.level", "read_committed")
        .set("group.id", unique_name("trace-read"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) else { return Vec::new() };
    let partitions = md.topics().first().map_or(0, |t| t.partitions().len() as i32);
    if partitions == 0 {
        return Vec::new();
    }
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (mut out, mut eof) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while eof < partitions && Instant::now() < deadline {
        match consumer.poll(Duration::from_secs(1)) {
            Some(Ok(m)) => {
                let tp = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "traceparent")
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8(v.to_vec()).unwrap())
                });
                out.push((m.key().unwrap_or_default().to_vec(), tp));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// The key of the record at `offset` of `topic`/`partition`.
fn key_at(bootstrap: &str, topic: &str, partition: i32, offset: i64) -> Option<Vec<u8>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_name("trace-key"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).unwrap();
    consumer.assign(&tpl).unwrap();
    let m = consumer.poll(Duration::from_secs(30)).expect("the record").unwrap();
    assert_eq!(m.offset(), offset);
    m.key().map(<[u8]>::to_vec)
}

fn attr(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone())
}

fn string(span: &SpanData, key: &str) -> String {
    match attr(span, key) {
        Some(v) => v.as_str().into_owned(),
        None => panic!("span {} has no attribute {key}: {:?}", span.name, span.attributes),
    }
}

/// A span in one line: name and attributes.
fn describe(span: &SpanData) -> String {
    let attrs: Vec<String> = span.attributes.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
    format!("{} {}", span.name, attrs.join(" "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_observations_and_the_outputs_they_cause_are_one_trace() {
    let infra = infra();
    let (exporter, collector) = Collector::start().await;

    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}.", unique_name("trace"));
    let app = unique_name("trace-app");
    let config = dir.path().join("pipeline.toml");
    std::fs::write(
        &config,
        format!("[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let demo = repo_path("tests/fixtures/traces/demo.jsonl");
    let bootstrap = infra.bootstrap.as_str();

    let publish = ["publish", "--create-topics", "--partitions", "3", "--bootstrap", bootstrap];
    let publish: Vec<&str> = publish.iter().copied().chain(["--input", &demo, "--config", &config]).collect();
    // The binary flushes its spans to the collector before it exits.
    let mut publish = kubefacts(&collector, &publish);
    let out = tokio::task::spawn_blocking(move || publish.output()).await.unwrap().unwrap();
    assert!(out.status.success(), "publish: {}", String::from_utf8_lossy(&out.stderr));
    let published: Vec<SpanData> =
        exporter.get_finished_spans().unwrap().into_iter().filter(|s| s.name == "publish").collect();
    assert!(!published.is_empty(), "the publisher made no publish spans");
    for s in &published {
        assert_eq!(s.span_kind, SpanKind::Producer);
        assert_eq!(string(s, "messaging.system"), "kafka");
        assert_eq!(string(s, "messaging.operation.type"), "send");
        assert!(string(s, "messaging.destination.name").starts_with(&prefix));
        string(s, "messaging.destination.partition.id").parse::<i32>().unwrap();
    }

    let process = ["process", "--create-topics", "--instance-id", "a", "--bootstrap", bootstrap];
    let process: Vec<&str> = process.iter().copied().chain(["--config", &config]).collect();
    let log = dir.path().join("process.log");
    let mut running =
        kubefacts(&collector, &process).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();

    let facts = format!("{prefix}job-run-facts.v1");
    let projections = format!("{prefix}session-projections.v1");
    let windows = format!("{prefix}job-runs.v2");
    let alerts = format!("{prefix}coverage-alerts.v1");
    let deadline = Instant::now() + Duration::from_secs(90);
    let read = |topic: &str| {
        let (b, t) = (infra.bootstrap.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || read_headers(&b, &t))
    };
    loop {
        let (f, p) = (read(&facts).await.unwrap(), read(&projections).await.unwrap());
        let (w, a) = (read(&windows).await.unwrap(), read(&alerts).await.unwrap());
        let traced = |r: &Vec<(Vec<u8>, Option<String>)>| r.iter().filter(|(_, h)| h.is_some()).count();
        let all = traced(&f) >= 4 && traced(&p) > 0 && traced(&w) > 0 && traced(&a) > 0;
        if all || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Stop `process` (it handles SIGTERM: commits, leaves the group, returns), so every
    // stage has committed and every span has ended; on its way out the binary flushes its
    // spans to the collector.
    let pid = running.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let stopped = tokio::task::spawn_blocking(move || running.wait());
    let status = tokio::time::timeout(Duration::from_secs(60), stopped).await.unwrap().unwrap().unwrap();
    assert!(status.success(), "process: {status}\n{}", std::fs::read_to_string(&log).unwrap_or_default());

    let spans = exporter.get_finished_spans().unwrap();
    let by_id: HashMap<SpanId, &SpanData> = spans.iter().map(|s| (s.span_context.span_id(), s)).collect();
    // Every process span: the messaging attributes, and a parent that is one of ours (a
    // publish span, or the process span of the stage before) in the same trace, or none.
    for process in spans.iter().filter(|s| s.name == "process") {
        assert_eq!(process.span_kind, SpanKind::Consumer);
        assert_eq!(string(process, "messaging.system"), "kafka");
        assert_eq!(string(process, "messaging.operation.type"), "process");
        assert!(string(process, "messaging.destination.name").starts_with(&prefix), "{}", describe(process));
        string(process, "messaging.destination.partition.id").parse::<i32>().unwrap();
        assert!(matches!(attr(process, "messaging.kafka.offset"), Some(Value::I64(o)) if o >= 0));
        if process.parent_span_id != SpanId::INVALID {
            assert!(process.parent_span_is_remote, "the parent came through Kafka");
            let parent = by_id
                .get(&process.parent_span_id)
                .unwrap_or_else(|| panic!("the parent of {} is no span of ours", describe(process)));
            assert_eq!(parent.span_context.trace_id(), process.span_context.trace_id());
            // The parent wrote the record this span read.
            if parent.name == "publish" {
                let input = string(process, "messaging.destination.name");
                assert_eq!(string(parent, "messaging.destination.name"), input);
                let partition = string(process, "messaging.destination.partition.id");
                assert_eq!(string(parent, "messaging.destination.partition.id"), partition);
            }
        }
    }

    // Every emit span: a producer span on an output topic, child of a process span of the
    // same stage (in this process, not through Kafka), linked to spans of ours.
    for emit in spans.iter().filter(|s| s.name == "emit") {
        assert_eq!(emit.span_kind, SpanKind::Producer);
        assert_eq!(string(emit, "messaging.system"), "kafka");
        assert!(string(emit, "messaging.destination.name").starts_with(&prefix), "{}", describe(emit));
        let parent = by_id.get(&emit.parent_span_id).expect("an emit span has a parent");
        assert_eq!((parent.name.as_ref(), emit.parent_span_is_remote), ("process", false));
        assert!(!emit.links.links.is_empty(), "{}", describe(emit));
        for link in &emit.links.links {
            assert!(
                by_id.contains_key(&link.span_context.span_id()),
                "{} links to no span of ours",
                describe(emit)
            );
        }
    }

    // Every output record's header names one of the process (or emit) spans of the stage
    // that wrote it; follow each to the start of its trace.
    let mut chains: Vec<(String, Vec<String>)> = Vec::new();
    // The topics of the publish spans each record's spans reach through parents and links.
    let mut reached: Vec<(String, &SpanData, BTreeSet<String>)> = Vec::new();
    for topic in [&facts, &projections, &windows, &alerts] {
        let records = read(topic).await.unwrap();
        let traced: Vec<_> = records.iter().filter_map(|(k, h)| Some((k, h.as_deref()?))).collect();
        assert!(!traced.is_empty(), "no record of {topic} has a traceparent");
        for (key, header) in traced {
            let key = String::from_utf8_lossy(key);
            // 00-<trace id>-<span id>-<flags>
            let parts: Vec<&str> = header.split('-').collect();
            assert_eq!(parts.len(), 4, "{header}");
            assert_eq!((parts[0], parts[3]), ("00", "01"), "{header}");
            let span_id = SpanId::from_hex(parts[2]).unwrap();
            let mut span =
                *by_id.get(&span_id).unwrap_or_else(|| panic!("{topic} {key}: no span {span_id} of ours"));
            assert!(span.name == "process" || span.name == "emit", "{}", describe(span));
            assert_eq!(span.span_context.trace_id().to_string(), parts[1]);
            reached.push((topic.clone(), span, published_topics(span, &by_id)));
            let mut chain = vec![describe(span)];
            while let Some(parent) = by_id.get(&span.parent_span_id) {
                span = parent;
                chain.push(describe(span));
            }
            // A root that is not a publish span: the output was emitted while a keyless
            // record (a snapshot marker, a heartbeat: no publish span) or stream time a
            // stage forwarded (keyed `kubefacts.heartbeat`) advanced stream time.
            let forwarded = matches!(attr(span, "kubefacts.heartbeat"), Some(Value::Bool(true)));
            if span.name == "process" && !forwarded {
                let input = string(span, "messaging.destination.name");
                let partition = string(span, "messaging.destination.partition.id").parse().unwrap();
                let Some(Value::I64(offset)) = attr(span, "messaging.kafka.offset") else { unreachable!() };
                assert_eq!(key_at(bootstrap, &input, partition, offset), None, "{topic} {key}: {chain:?}");
            }
            chains.push((format!("{topic} {key}"), chain));
        }
    }
    for (record, chain) in &chains {
        eprintln!("{record}:\n  {}", chain.join("\n  ← "));
    }
    // A session projection is emitted while its session or pod record is processed: each
    // is in the trace its publish span started, one hop through Kafka.
    let projections_traced = chains.iter().filter(|(r, _)| r.starts_with(&projections)).collect::<Vec<_>>();
    for (record, chain) in &projections_traced {
        assert_eq!(chain.len(), 2, "{record}: {chain:?}");
        assert!(chain[1].starts_with("publish "), "{record}: {chain:?}");
    }
    // A run fact, a journal window and a coverage alert each reach the observation that
    // caused them through links: the Job that finished, the CronJob judged.
    let jobs = format!("{prefix}jobs.v1");
    let cronjobs = format!("{prefix}cronjobs.v1");
    for (topic, source) in [(&facts, &jobs), (&windows, &jobs), (&alerts, &cronjobs)] {
        let linked = reached
            .iter()
            .filter(|(t, span, topics)| t == topic && span.name == "emit" && topics.contains(source))
            .count();
        eprintln!("{topic}: {linked} records linked back to a publish span on {source}");
        assert!(linked > 0, "no record of {topic} reaches an observation published to {source}");
    }
}

/// The destination topics of the `publish` spans reachable from `span` through parents and
/// links.
fn published_topics(span: &SpanData, by_id: &HashMap<SpanId, &SpanData>) -> BTreeSet<String> {
    let (mut seen, mut todo, mut topics) = (HashSet::new(), vec![span], BTreeSet::new());
    while let Some(s) = todo.pop() {
        if !seen.insert(s.span_context.span_id()) {
            continue;
        }
        if s.name == "publish" {
            topics.insert(string(s, "messaging.destination.name"));
        }
        let next =
            std::iter::once(s.parent_span_id).chain(s.links.links.iter().map(|l| l.span_context.span_id()));
        todo.extend(next.filter_map(|id| by_id.get(&id).copied()));
    }
    topics
}
