//! A stream thread: one consumer in the application's group subscribed to the inputs of
//! every stage, one reader of every stage's global inputs, one transactional producer, and
//! the tasks of every stage the group assigns it. Each iteration paces the partitions,
//! fills a batch (fairly; rebalances apply here), processes what every task's gate
//! releases in one transaction, and commits or aborts it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use crate::brokers::Reauthentication;
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
};

use super::{
    RuntimeError,
    assign::{RebalanceEvent, RebalanceLog, rewind},
    config::ThreadConfig,
    consuming,
    flow::{FillShares, Paused, Pressure},
    globals::GlobalReader,
    group_consumer_config, kafka,
    purge::Purger,
    stage::{KafkaStage, Offsets, Positions},
    stats::lag,
    transactions::{Recreations, TxSession, is_fatal},
};

/// Runs one stream thread until `stop` is set (then leaves the group, between
/// transactions) or an unrecoverable error. Blocking: call it on a dedicated thread (for
/// example with `tokio::task::spawn_blocking`).
///
/// Every instance of an application must host the same stages: the group's members
/// subscribe to the same topics, so the range assignor gives each the same partitions of
/// every co-partitioned topic, and a task `(stage, partition)` finds all its inputs'
/// partitions on one thread.
pub fn run_thread(
    cfg: &ThreadConfig,
    stages: Vec<KafkaStage<'_>>,
    stop: &AtomicBool,
) -> Result<(), RuntimeError> {
    let mut stages: Vec<_> = stages.into_iter().map(|s| s.0).collect();
    // The stages that read each topic. A topic read by two (the pods of `[runs]` and
    // `[sessions]`) is committed where the one further behind stands, so each of them
    // changelogs its own position to drop what it already processed after a restart.
    let mut readers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (s, stage) in stages.iter().enumerate() {
        for topic in stage.inputs() {
            readers.entry(topic.clone()).or_default().push(s);
        }
    }
    for stage in &mut stages {
        let shared = (stage.inputs().iter().enumerate())
            .filter(|(_, t)| readers.get(*t).is_some_and(|r| r.len() > 1))
            .map(|(i, _)| i)
            .collect();
        stage.track(shared);
    }

    let purged = stages.iter().flat_map(|s| s.purged().iter().cloned()).collect();
    let mut purger = Purger::new(&cfg.brokers, purged, cfg.purge_interval_ms);
    let global_topics: Vec<&[String]> = stages.iter().map(|s| s.globals()).collect();
    let mut globals = GlobalReader::new(cfg, &global_topics)?;
    let open =
        || TxSession::open(&cfg.brokers, &cfg.transactional_id, &cfg.group_id, cfg.transaction_timeout_ms);
    let mut session = open()?;
    let mut recreations = Recreations::default();
    let rebalances = RebalanceLog::default();
    let consumer: BaseConsumer<RebalanceLog> = group_consumer_config(&cfg.brokers, &cfg.group_id)
        // librdkafka pauses fetching up to 1 s once its queue is full; a loop that drains the
        // queue quickly would idle most of that pause.
        .set("fetch.queue.backoff.ms", "20")
        .set("session.timeout.ms", cfg.session_timeout_ms.to_string())
        .create_with_context(rebalances.clone())
        .map_err(kafka("creating the consumer"))?;
    let watermarks: BaseConsumer =
        cfg.brokers.client().create().map_err(kafka("creating a metadata client"))?;
    let subscribed: Vec<String> = readers.keys().cloned().collect();
    let topics: Vec<&str> = readers.keys().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(kafka("subscribing"))?;
    // Per topic, the stages reading it, looked up by the fetched record's topic.
    let readers: HashMap<&str, &[usize]> = readers.iter().map(|(t, r)| (t.as_str(), r.as_slice())).collect();
    tracing::info!(
        thread = cfg.thread, stages = ?stages.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>(),
        "stream thread running"
    );

    // Bounded buffers: partitions paused while their tasks hold enough of them.
    let mut paused = Paused::default();
    let mut lag_checked = Instant::now();
    let mut waiting_logged = Instant::now();
    let mut reauthentication = Reauthentication::default();
    let mut transactions = 0u64;
    while !stop.load(Ordering::Relaxed) {
        cfg.heartbeat.beat();
        if lag_checked.elapsed() >= Duration::from_secs(5) {
            lag_checked = Instant::now();
            if let Some(lag) = lag(&consumer, &watermarks) {
                for stage in &stages {
                    stage.set_lag(cfg.thread, &lag);
                }
            }
        }
        // 1. Pause what the tasks still hold enough of after the last transaction, resume
        // what they drained (or now wait for). Paced here, not between filling and
        // processing: a pause drops what librdkafka prefetched of the partition, and a batch
        // that is about to be processed is no reason to (the probe lost a fetch round trip,
        // ~20 ms, in every transaction that way).
        let mut pressure = Pressure::default();
        let mut global_wants = Vec::new();
        for stage in &mut stages {
            global_wants.extend(stage.pace(cfg.buffered_records_per_partition, &mut pressure));
        }
        if let Some(globals) = &mut globals {
            globals.pace(global_wants)?;
        }
        paused.set(&consumer, pressure.to_pause()).map_err(kafka("pausing partitions"))?;
        // 2. Fill a batch; no transaction is open, so rebalances happen only here.
        let started = Instant::now();
        let (mut taken, mut global_budget) = (0, cfg.max_batch_records);
        // A fair fill: a partition that gave this fill twice its even share is paused for
        // the rest of it. Otherwise one fetched chunk of one partition could fill whole
        // batches, its task run far ahead of the others, and a downstream merge buffer the
        // difference (the default pipeline's peak memory). Twice, because a pause drops
        // what librdkafka prefetched of the partition: an even backlog never pays for it.
        let assigned = consumer.assignment().map_or(1, |a| a.count());
        let mut shares = FillShares::new(cfg.buffered_records_per_partition, cfg.max_batch_records, assigned);
        'fill: while taken < cfg.max_batch_records
            && started.elapsed() < Duration::from_millis(cfg.commit_interval_ms)
        {
            let polled = consumer.poll(Duration::from_millis(20));
            if apply_rebalances(&rebalances, &consumer, &mut stages, &mut paused, cfg.thread)?
                && let Some(globals) = &mut globals
            {
                globals.reposition(stages.iter().flat_map(|s| s.global_from()))?;
            }
            match polled {
                Some(Ok(m)) => {
                    let mut own = 0;
                    for &s in readers.get(m.topic()).copied().unwrap_or_default() {
                        match stages[s].accept(&m, stop) {
                            Some(true) => own += 1,
                            Some(false) => {}
                            None => break 'fill,
                        }
                    }
                    if own > 0 {
                        taken += own;
                        if let Some(part) = shares.note(m.topic(), m.partition()) {
                            paused.add(&consumer, part).map_err(kafka("pausing partitions"))?;
                        }
                    }
                }
                Some(Err(e)) => match reauthentication.refusal_code(&e) {
                    Some(code) => {
                        return Err(cfg.brokers.refusal(code, consuming(&subscribed, &cfg.group_id)).into());
                    }
                    None => tracing::warn!(error = %e, "consumer error"),
                },
                None => {}
            }
            // Only the tasks' own records fill a batch: counting global ones starved them
            // (a batch of 30 took 1 own record and 29 global). Global records have a budget
            // of their own per fill, so one fill buffers at most `max_batch_records` of
            // each kind (unbounded, a fill took whatever the reader had fetched).
            if let Some(globals) = &mut globals {
                global_budget -= globals.take(global_budget, |s, m| stages[s].take_global(m, stop))?;
            }
        }
        // Nothing to release (empty, or every task waits for a lane to pass its head) and no
        // offset to move: no transaction.
        let positions = positions(&consumer);
        if !stages.iter().any(|s| s.has_work(&positions)) {
            purger.tick();
            if waiting_logged.elapsed() >= Duration::from_secs(5) {
                waiting_logged = Instant::now();
                stages.iter().for_each(|s| s.log_waiting());
            }
            continue;
        }

        // 3. One transaction for everything the thread's tasks can process now.
        let filled = started.elapsed();
        session.begin()?;
        let mut offsets = Offsets::new();
        let mut failed = None;
        for stage in &mut stages {
            if let Some(e) = stage.process(session.producer(), &positions, &mut offsets)? {
                failed = Some(e);
            }
        }
        let result = match failed {
            Some(e) => Err(e),
            None => {
                transactions += 1;
                tracing::debug!(
                    transaction = transactions,
                    fill_ms = filled.as_millis() as u64,
                    taken,
                    process_ms = (started.elapsed() - filled).as_millis() as u64,
                    "transaction processed"
                );
                offsets_list(&offsets)
                    .and_then(|tpl| session.commit(&consumer, &tpl, cfg.failpoint, transactions))
            }
        };
        match result {
            Ok(()) => {
                stages.iter_mut().for_each(|s| s.committed(&positions, cfg.thread));
                purger.committed(&offsets);
                purger.tick();
            }
            Err(e) => {
                if let Some(refused) = session.refused(&e, "committing a transaction") {
                    return Err(refused.into());
                }
                let failed = if is_fatal(&e) {
                    Some(e)
                } else {
                    tracing::warn!(error = %e, "aborting the transaction; tasks restart from their changelogs");
                    match session.try_abort() {
                        Ok(()) => None,
                        // An abort that fails leaves the producer in no known state (one
                        // conflicting with a commit still under way, say): recreate it.
                        Err(e) => match session.refused(&e, "aborting a transaction") {
                            Some(refused) => return Err(refused.into()),
                            None => Some(e),
                        },
                    }
                };
                if let Some(e) = failed {
                    // A broker failure can leave the producer unusable: a coordinator that
                    // moved aborts a transaction that outlived its timeout and bumps the
                    // producer's epoch, which then reads as fenced. A new producer with the
                    // same id fences the old one and aborts what it left open; the tasks
                    // restart from their changelogs, as after an abort. Another live
                    // incarnation with this id would fence it back: after a few recreations
                    // in a row, this one stops.
                    if !recreations.allow() {
                        return Err(session.judge(e, "commit").into());
                    }
                    tracing::warn!(error = %e, "the transactional producer failed; recreating it");
                    session = open()?;
                }
                stages.iter_mut().for_each(|s| s.aborted());
                paused.release(&consumer);
                let committed = rewind(&consumer, |context, source| RuntimeError::Kafka { context, source })?;
                for stage in &mut stages {
                    stage.recreate(cfg.thread, &committed)?;
                }
                if let Some(globals) = &mut globals {
                    globals.reposition(stages.iter().flat_map(|s| s.global_from()))?;
                }
            }
        }
    }

    // Leaving: the loop always ends between transactions; leave the group so partitions
    // move at once.
    consumer.unsubscribe();
    Ok(())
}

/// Applies the rebalances recorded since the last call to every stage; true if any
/// stage's tasks changed.
fn apply_rebalances(
    log: &RebalanceLog,
    consumer: &BaseConsumer<RebalanceLog>,
    stages: &mut [Box<dyn super::stage::StageRun + '_>],
    paused: &mut Paused,
    thread: usize,
) -> Result<bool, RuntimeError> {
    let mut any = false;
    for event in log.take() {
        // The assignment changed under them: nothing stays paused (the next iteration
        // pauses again what the new tasks hold enough of).
        paused.release(consumer);
        for stage in stages.iter_mut() {
            let changed = match &event {
                RebalanceEvent::Revoked(parts) => stage.revoke(parts),
                RebalanceEvent::Assigned(parts) => stage.assign(consumer, parts)?,
            };
            if changed {
                stage.reassigned(thread)?;
                any = true;
            }
        }
    }
    Ok(any)
}

/// The offsets a transaction commits, per (topic, partition): the next offset to read.
fn offsets_list(offsets: &Offsets) -> Result<TopicPartitionList, rdkafka::error::KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), &next) in offsets {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(next))?;
    }
    Ok(tpl)
}

/// The consumer's position (next offset to read) per topic and partition: local, no
/// request to the broker.
fn positions<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Positions {
    let mut all = Positions::new();
    let Ok(tpl) = consumer.position() else { return all };
    for e in tpl.elements() {
        if let Offset::Offset(o) = e.offset() {
            match all.get_mut(e.topic()) {
                Some(by_partition) => {
                    by_partition.insert(e.partition(), o);
                }
                None => {
                    all.insert(e.topic().to_owned(), HashMap::from([(e.partition(), o)]));
                }
            }
        }
    }
    all
}
