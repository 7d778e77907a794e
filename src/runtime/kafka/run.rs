//! The processing loop: fill a batch, apply rebalances, process what the tasks' gates
//! release in one transaction, commit or abort.

use std::{
    collections::{BTreeMap, HashMap},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use opentelemetry::{
    Context,
    trace::{Span as _, Status, TraceContextExt as _},
};
use rdkafka::{
    Message, Offset,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    error::KafkaError,
};
use tokio::runtime::Handle;

use super::{
    RuntimeError,
    assign::{Lanes, RebalanceLog, TaskFactory, TaskSlot, rewind, set_task_gauges},
    client_config,
    config::RuntimeConfig,
    globals::{reposition_globals, take_globals},
    group_consumer_config, kafka,
    read::{Read, admit_waiting},
    spans::{emit_span, process_span},
    stats::{RuntimeStats, lag},
    transactions::{TxSession, headers, is_fatal, offsets_list, produce_output, send},
};
use crate::{
    codec::{Codec, CodecError, RecordWriter},
    runtime::{
        admit::Admitted,
        clock::{Mark, Writer},
        deadletter,
        processor::{OutputPort, Processor},
        step::{Refused, Released, step},
    },
    telemetry,
};

/// Runs one instance until `stop` is set (then commits what it has and leaves the group)
/// or an unrecoverable error. Blocking: call it on a dedicated thread (for example with
/// `tokio::task::spawn_blocking`); `handle` serves the codec's registry look-ups.
pub fn run_blocking<P, F>(
    cfg: &RuntimeConfig,
    codec: &Codec,
    handle: &Handle,
    ports: &[OutputPort],
    make: F,
    stop: &AtomicBool,
    stats: &RuntimeStats,
) -> Result<(), RuntimeError>
where
    P: Processor,
    F: FnMut(i32) -> P,
{
    let transactional_id = cfg.transactional_id();
    let metadata_client: BaseConsumer =
        client_config(cfg).create().map_err(kafka("creating a metadata client"))?;
    let partition_count = |topic: &str| -> Result<i32, RuntimeError> {
        let md = metadata_client
            .fetch_metadata(Some(topic), Duration::from_secs(30))
            .map_err(kafka("reading topic metadata"))?;
        Ok(md.topics().first().map_or(0, |t| t.partitions().len() as i32))
    };
    let output_partitions: Vec<i32> =
        cfg.outputs.iter().map(|t| partition_count(t)).collect::<Result<_, _>>()?;
    let dead_letter_partitions = partition_count(&cfg.dead_letter)?.max(1);
    // Every dead letter fits the topic: one that could not be written would abort its
    // transaction again and again, and its partition would never move.
    let dead_letter_max_bytes = {
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            client_config(cfg).create().map_err(kafka("creating an admin client"))?;
        let limit = handle.block_on(crate::runtime::topics::max_message_bytes(&admin, &cfg.dead_letter));
        deadletter::max_bytes(limit.ok().flatten())
    };
    // The stage's tasks: one per partition of its co-partitioned inputs. Outputs name their
    // task and this count, so a downstream task knows whom to wait for.
    let task_count = match cfg.inputs.first() {
        Some(t) => partition_count(t)?.max(1),
        None => 1,
    };
    let timed = cfg.inputs.iter().map(|t| !cfg.untimed.contains(t)).collect();
    let checked = (0..cfg.inputs.len()).map(|i| cfg.rules.checked.contains(&i)).collect();
    let mut lanes = Lanes { inputs: cfg.inputs.len(), globals: Vec::new(), timed, checked };
    for (g, topic) in cfg.globals.iter().enumerate() {
        let n = partition_count(topic)?;
        let input = cfg.inputs.len() + g;
        lanes.globals.extend((0..n).map(|q| (input, q)));
        lanes.timed.extend((0..n).map(|_| true));
        lanes.checked.extend((0..n).map(|_| cfg.rules.checked.contains(&input)));
    }
    let forward = OutputPort::forwarding(ports);
    let writers = |codec: &Codec| -> Result<Vec<RecordWriter>, CodecError> {
        ports
            .iter()
            .zip(&cfg.outputs)
            .map(|(port, topic)| handle.block_on(codec.value_writer(topic, port.record)))
            .collect()
    };
    let dead_letter_writer = handle.block_on(codec.value_writer(&cfg.dead_letter, deadletter::FULL_NAME))?;
    // Key writers of ports keyed by Avro records, registered once; each task gets a copy.
    let key_writers: Vec<Option<RecordWriter>> = ports
        .iter()
        .zip(&cfg.outputs)
        .map(|(port, topic)| port.key_record.map(|k| handle.block_on(codec.key_writer(topic, k))).transpose())
        .collect::<Result<_, _>>()?;

    let session = TxSession::open(&cfg.bootstrap, &transactional_id, cfg.transaction_timeout_ms)?;
    let producer = session.producer();

    let rebalances = RebalanceLog::default();
    let consumer: BaseConsumer<RebalanceLog> = group_consumer_config(&cfg.bootstrap, &cfg.group_id())
        // librdkafka pauses fetching up to 1 s once its queue is full; a loop that drains the
        // queue quickly would idle most of that pause.
        .set("fetch.queue.backoff.ms", "20")
        .set("session.timeout.ms", cfg.session_timeout_ms.to_string())
        .create_with_context(rebalances.clone())
        .map_err(kafka("creating the consumer"))?;
    let inputs: Vec<&str> = cfg.inputs.iter().map(String::as_str).collect();
    consumer.subscribe(&inputs).map_err(kafka("subscribing"))?;
    // Every instance reads global inputs whole, outside the group; positions live in the
    // tasks' changelogged stores, not in committed offsets.
    let global_consumer: BaseConsumer = client_config(cfg)
        .set("group.id", format!("{}-global", cfg.group_id()))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka("creating the global consumer"))?;
    let all_topics: Vec<&str> = cfg.inputs.iter().chain(&cfg.globals).map(String::as_str).collect();

    let mut tasks: BTreeMap<i32, TaskSlot<P>> = BTreeMap::new();
    let mut factory = TaskFactory {
        cfg,
        codec,
        stats,
        make,
        writers,
        key_writers,
        output_partitions,
        forward,
        lanes,
        spare: None,
    };
    // A topic may be both a co-partitioned input and a global (the jobs topic of `[runs]`):
    // which it is depends on the consumer that read it.
    let input_index: HashMap<&str, usize> =
        cfg.inputs.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let global_index: HashMap<&str, usize> =
        cfg.globals.iter().enumerate().map(|(g, t)| (t.as_str(), cfg.inputs.len() + g)).collect();

    stats.declare_topics(&all_topics, &cfg.outputs);
    // Per-record `process` spans only when an exporter is installed (docs/TRACING.md).
    let tracer = telemetry::tracer();
    let group_id = cfg.group_id();

    let mut lag_checked = Instant::now();
    let mut waiting_logged = Instant::now();
    let mut transactions = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if lag_checked.elapsed() >= Duration::from_secs(5) {
            lag_checked = Instant::now();
            if let Some(lag) = lag(&consumer) {
                stats.set_lag(lag);
            }
        }
        // 1. Fill a batch; no transaction is open, so rebalances happen only here.
        let started = Instant::now();
        let mut taken = 0;
        while taken < cfg.max_batch_records
            && started.elapsed() < Duration::from_millis(cfg.commit_interval_ms)
        {
            let polled = consumer.poll(Duration::from_millis(20));
            if factory.apply_rebalances(&rebalances, &consumer, &mut tasks)? {
                reposition_globals(&global_consumer, &tasks, &factory.lanes, &all_topics)?;
                stats.retain_lag(|p| tasks.contains_key(&p));
                set_task_gauges(stats, &mut tasks);
            }
            match polled {
                Some(Ok(m)) => {
                    let Some(&input) = input_index.get(m.topic()) else { continue };
                    match tasks.get_mut(&m.partition()) {
                        Some(slot) => {
                            let read = Read::from_message(input, &m);
                            let Some(admitted) = admit_waiting(codec, handle, &read, stats, stop) else {
                                break;
                            };
                            let p = read.into_pending(admitted);
                            slot.read_next[input] = Some(p.offset + 1);
                            // A record processed before a restore is read again and dropped.
                            if slot.gate.push(input, p.writer, (p.timestamp_ms, p.offset), p.mark, p) {
                                taken += 1;
                            }
                        }
                        // Not processed and not committed: the partition's owner reads it.
                        None => tracing::warn!(
                            topic = m.topic(),
                            partition = m.partition(),
                            "record of an unassigned partition"
                        ),
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "consumer error"),
                None => {}
            }
            // Only the task's own records fill a batch: counting global ones starved them
            // (a batch of 30 took 1 own record and 29 global).
            if !factory.lanes.globals.is_empty() {
                let admission = (codec, handle, stats, stop);
                take_globals(
                    &global_consumer,
                    &mut tasks,
                    &factory.lanes,
                    &global_index,
                    cfg.max_batch_records,
                    admission,
                );
            }
        }
        // Nothing to release (empty, or every task waits for a lane to pass its head) and no
        // offset to move: no transaction.
        let positions = &positions(&consumer, &input_index);
        let at = |partition: i32| move |input: usize| positions.get(&(input, partition)).copied();
        if !tasks.iter().any(|(p, slot)| slot.has_work(at(*p))) {
            if waiting_logged.elapsed() >= Duration::from_secs(5) {
                waiting_logged = Instant::now();
                for (p, slot) in &tasks {
                    if let Some((head, holding)) = slot.gate.waiting(slot.task.stream_time()) {
                        tracing::debug!(
                            stage = %cfg.processor, partition = p, buffered = slot.gate.len(), ?head, ?holding,
                            "waiting for lanes to pass the next record's time (lane, writer, time shown)"
                        );
                    }
                }
            }
            continue;
        }

        // 2. One transaction for everything the tasks can process now.
        session.begin()?;
        let mut offsets: BTreeMap<(usize, i32), i64> = BTreeMap::new();
        let mut failed: Option<KafkaError> = None;
        let mut counted: BTreeMap<&'static str, u64> = BTreeMap::new();
        // Per-topic and per-reason counts, gathered here and added to the shared stats once
        // per transaction (a lock per record would tax the hot loop).
        let mut records_in = vec![0u64; all_topics.len()];
        let mut records_out = vec![0u64; cfg.outputs.len()];
        let mut dead_letters: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (&partition, slot) in tasks.iter_mut() {
            let writer = Writer::new(partition, task_count).header_value();
            while let Some(released) = slot.gate.pop(slot.task.stream_time()) {
                let verdict = released.verdict;
                let lane = released.lane;
                let mut rec = released.item;
                // Taken: the decoded record moves into the processor.
                let admitted = std::mem::replace(&mut rec.admitted, Admitted::Time);
                records_in[rec.input] += 1;
                // Global records are read outside the consumer group.
                let group = (rec.input < factory.lanes.inputs).then_some(group_id.as_str());
                let mut span = tracer.as_ref().map(|t| process_span(t, &all_topics, group, &rec));
                // What this record's outputs carry: the `process` span, or without an
                // exporter the upstream context unchanged (the trace still connects).
                let own = span.as_ref().and_then(|span| telemetry::traceparent(span.span_context()));
                let traceparent = own.as_deref().or(rec.traceparent.as_deref());
                let global = rec.input >= factory.lanes.inputs;
                let released = Released {
                    input: rec.input,
                    topic: all_topics[rec.input],
                    partition: rec.partition,
                    offset: rec.offset,
                    timestamp_ms: rec.timestamp_ms,
                    writer: rec.writer,
                    key: rec.key.as_deref(),
                    value: rec.value.as_deref(),
                    traceparent,
                    admitted,
                    verdict,
                    checked_beat: factory.lanes.checked[lane] && rec.mark == Mark::Through,
                    letters: cfg.rules.writes_dead_letter(
                        rec.input,
                        global,
                        rec.partition,
                        partition,
                        task_count,
                    ),
                };
                if let Some(Refused { reason, letter }) = step(&cfg.processor, &mut slot.task, released) {
                    if let Some(span) = &mut span {
                        span.set_status(Status::error(reason));
                    }
                    *dead_letters.entry(reason).or_default() += 1;
                    let value = dead_letter_writer.encode(&letter.fitting(dead_letter_max_bytes))?;
                    let p = partition % dead_letter_partitions;
                    if let Err(e) = send(
                        producer,
                        &cfg.dead_letter,
                        p,
                        rec.key.as_deref(),
                        Some(&value),
                        rec.timestamp_ms,
                        headers(false, None, traceparent),
                    ) {
                        failed = Some(e);
                    }
                }
                // The span becomes the parent of the `emit` spans of outputs that summarise
                // other inputs too; it ends when this context is dropped.
                let cx = span.map(|span| Context::new().with_span(span));
                for out in slot.task.take_outputs() {
                    records_out[out.port] += 1;
                    let emit = match (&tracer, &cx) {
                        (Some(tracer), Some(cx)) if !out.links.is_empty() => {
                            Some(emit_span(tracer, cx, &cfg.outputs[out.port], &out.links))
                        }
                        _ => None,
                    };
                    let linked = emit.as_ref().and_then(|s| telemetry::traceparent(s.span_context()));
                    let tp = if out.heartbeat { None } else { linked.as_deref().or(traceparent) };
                    let ports = &factory.output_partitions;
                    if let Err(e) = produce_output(producer, cfg, ports, out, &writer, tp) {
                        failed = Some(e);
                    }
                }
            }
            for (input, offset) in slot.commit_offsets(at(partition)).into_iter().enumerate() {
                if let Some(offset) = offset {
                    offsets.insert((input, partition), offset);
                }
            }
            for (event, n) in slot.task.take_counts() {
                *counted.entry(event).or_default() += n;
            }
            let stores = slot.task.store_names();
            for (store, (key, value)) in slot.task.take_changes() {
                let topic = cfg.changelog_topic(&stores[store]);
                let ts = slot.task.stream_time().unwrap_or(0);
                if let Err(e) = send(producer, &topic, partition, Some(&key), value.as_deref(), ts, None) {
                    failed = Some(e);
                }
            }
        }
        for (topic, n) in all_topics.iter().zip(records_in).filter(|(_, n)| *n > 0) {
            stats.count_in(topic, n);
        }
        for (topic, n) in cfg.outputs.iter().zip(records_out).filter(|(_, n)| *n > 0) {
            stats.count_out(topic, n);
        }
        let result = match failed {
            Some(e) => Err(e),
            None => {
                transactions += 1;
                offsets_list(&inputs, &offsets)
                    .and_then(|tpl| session.commit(&consumer, &tpl, cfg.failpoint, transactions))
            }
        };
        match result {
            Ok(()) => {
                stats.commits.inc();
                stats.add_events(counted);
                // Counted once committed: an aborted attempt wrote none.
                for (reason, n) in dead_letters {
                    stats.count_dead_letters(reason, n);
                }
                for (p, slot) in tasks.iter_mut() {
                    slot.committed = slot.commit_offsets(at(*p));
                }
            }
            Err(e) => {
                if is_fatal(&e) {
                    return Err(session.judge(e, "commit").into());
                }
                tracing::warn!(error = %e, "aborting the transaction; tasks restart from their changelogs");
                session.abort()?;
                stats.aborts.inc();
                // Drop every task and rewind: state and positions return to the last commit.
                let assigned: Vec<i32> = tasks.keys().copied().collect();
                for (_, slot) in std::mem::take(&mut tasks) {
                    factory.recycle(slot);
                }
                rewind(&consumer, |context, source| RuntimeError::Kafka { context, source })?;
                tasks.extend(factory.create(&assigned)?);
                reposition_globals(&global_consumer, &tasks, &factory.lanes, &all_topics)?;
            }
        }
        set_task_gauges(stats, &mut tasks);
    }

    // Leaving: commit what was processed (the loop always ends between transactions) and
    // leave the group so partitions move at once.
    consumer.unsubscribe();
    Ok(())
}

/// The consumer's position (next offset to read) per (input index, partition): local, no
/// request to the broker.
fn positions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    input_index: &HashMap<&str, usize>,
) -> HashMap<(usize, i32), i64> {
    let Ok(tpl) = consumer.position() else { return HashMap::new() };
    tpl.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((*input_index.get(e.topic())?, e.partition()), o)),
            _ => None,
        })
        .collect()
}
