//! The cleaner's I/O shell: decisions from Kafka, GET and DELETE through `Api<Job>`,
//! outcomes back to Kafka, exactly once per decision.
//!
//! The loop runs on its own thread ([`run_blocking`]), like the processor runtime, so
//! librdkafka's blocking transaction calls never stall the async runtime; the Kubernetes
//! calls and the codec's registry look-ups go back to the async runtime through its handle.
//!
//! One iteration: poll a batch of decisions (no transaction is open while polling, so a
//! rebalance never lands mid-transaction); apply them one at a time, in offset order, for at
//! most `commit_interval_ms` (outcomes are kept in memory); then one transaction: the
//! outcomes, any dead letters, and the offsets after the last applied decision; commit.
//! Decisions polled but not applied are re-read (the consumer seeks back). A failed commit
//! aborts and re-reads the whole batch: the DELETEs it sent stay done, and the re-read
//! decisions find their Jobs gone (404, or deletionTimestamp set) and record ALREADY_GONE,
//! never a second DELETE.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use rdkafka::{
    ClientConfig, ClientContext, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
    error::KafkaError,
    producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer},
};
use thiserror::Error;
use tokio::runtime::Handle;

use super::{
    AfterGet, ApiFailure, CleanerConfig, Found, RateLimiter, Request, RetryPolicy, Verdict, after_get,
    delete_params, deleted, failed, validate,
};
use crate::{
    cleanup::{
        model::CleanupDecision,
        outcome::{CleanupOutcome, CleanupOutcomeKind},
    },
    codec::{Codec, CodecError, RecordWriter},
    runtime::{
        HEARTBEAT_HEADER,
        deadletter::{self, DeadLetter, Source},
        kafka::{RuntimeStats, group_consumer_config, is_fatal, is_fenced, lag, transactional_producer},
        partitioner::partition_for_key,
    },
};

/// The name dead letters and the metrics' `stage` label carry.
pub const STAGE: &str = "cleaner";

/// Longest pause after a decision could not be decoded for a retriable reason (the registry
/// was unreachable) before the batch is read again.
const RETRY_DECODE_PAUSE: Duration = Duration::from_secs(2);

/// How one cleaner instance runs.
#[derive(Debug, Clone)]
pub struct CleanerRun {
    /// Kafka bootstrap servers.
    pub bootstrap: String,
    /// The pipeline's application id (`[process].application_id`).
    pub application_id: String,
    /// This instance's stable id, part of its transactional id.
    pub instance_id: String,
    /// Dry run: GET only, outcomes WOULD_DELETE etc., never a DELETE.
    pub dry_run: bool,
    /// The decisions topic (read_committed).
    pub decisions: String,
    /// The outcomes topic.
    pub outcomes: String,
    /// The dead-letter topic.
    pub dead_letter: String,
    /// Broker-side transaction timeout, in milliseconds.
    pub transaction_timeout_ms: u64,
    /// Consumer group session timeout, in milliseconds.
    pub session_timeout_ms: u64,
    /// `[cleaner]`.
    pub cleaner: CleanerConfig,
}

impl CleanerRun {
    /// `<application_id>-cleaner`, or `<application_id>-cleaner-dry-run` for a dry run, so
    /// a dry run never consumes decisions an applying cleaner still needs.
    pub fn group_id(&self) -> String {
        if self.dry_run {
            format!("{}-cleaner-dry-run", self.application_id)
        } else {
            format!("{}-cleaner", self.application_id)
        }
    }

    /// `<group_id>-<instance_id>`: `<application_id>-cleaner-<instance>` when applying. A
    /// restarted instance fences its previous incarnation; a dry run never fences an
    /// applying cleaner of the same instance id.
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.group_id(), self.instance_id)
    }

    /// The consumer's `max.poll.interval.ms`: longer than a batch can take (the commit
    /// interval, one more decision at its worst, the commit), with a minute to spare.
    fn max_poll_interval_ms(&self) -> u64 {
        (self.cleaner.commit_interval_ms
            + self.cleaner.worst_case_decision_ms()
            + self.transaction_timeout_ms
            + 60_000)
            .clamp(self.session_timeout_ms, 86_400_000)
    }
}

/// Why the cleaner stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CleanerError {
    /// A Kafka client could not be created or a call failed for good.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Another instance with the same transactional id took over: this one is a zombie.
    #[error("fenced: another cleaner with transactional id {transactional_id} is running; stopping")]
    Fenced {
        /// The transactional id.
        transactional_id: String,
    },
    /// A topic the cleaner writes to does not exist.
    #[error("topic {topic} does not exist (run `kubefacts cleaner --create-topics` once)")]
    MissingTopic {
        /// The topic.
        topic: String,
    },
    /// Writers could not be set up (schema registration) or an outcome could not be encoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

impl CleanerError {
    /// A bounded label of the error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kafka { .. } => "kafka",
            Self::Fenced { .. } => "fenced",
            Self::MissingTopic { .. } => "missing_topic",
            Self::Codec(e) => e.reason(),
        }
    }
}

fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> CleanerError {
    move |source| CleanerError::Kafka { context, source }
}

/// What applying one decision came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The verdict.
    pub verdict: Verdict,
    /// GET and DELETE requests sent, retries included.
    pub api_requests: u32,
}

/// Applies one (valid) decision: GET the Job's metadata, then, when it still has the
/// decided UID, is not being deleted and this is no dry run, DELETE it with the UID
/// precondition and background propagation. Retriable failures are retried per `cfg`;
/// every DELETE attempt first takes a slot from `limiter`.
pub async fn apply(
    client: &kube::Client,
    decision: &CleanupDecision,
    dry_run: bool,
    cfg: &CleanerConfig,
    limiter: &mut RateLimiter,
) -> Applied {
    let job = &decision.job;
    let api: Api<Job> = Api::namespaced(client.clone(), &job.namespace);
    let policy = cfg.retry_policy();
    let timeout = Duration::from_millis(cfg.request_timeout_ms);
    let mut api_requests = 0;
    let got = retrying(policy, timeout, &mut api_requests, None, || api.get_metadata(&job.name)).await.map(
        |meta| Found {
            uid: meta.metadata.uid.unwrap_or_default(),
            deleting: meta.metadata.deletion_timestamp.is_some(),
        },
    );
    let verdict = match after_get(&job.uid, got.as_ref().map_err(|(f, n)| (f, *n)), dry_run) {
        AfterGet::Done(verdict) => verdict,
        AfterGet::Delete => {
            let params = delete_params(&job.uid);
            match retrying(policy, timeout, &mut api_requests, Some(limiter), || {
                api.delete(&job.name, &params)
            })
            .await
            {
                Ok(_) => deleted(),
                Err((failure, attempts)) => failed(Request::Delete, &failure, attempts),
            }
        }
    };
    Applied { verdict, api_requests }
}

/// Sends a request until it succeeds, fails for good, or runs out of attempts; returns the
/// last failure and the attempts made. Counts every request sent in `requests`.
async fn retrying<T, F, Fut>(
    policy: RetryPolicy,
    timeout: Duration,
    requests: &mut u32,
    mut limiter: Option<&mut RateLimiter>,
    mut call: F,
) -> Result<T, (ApiFailure, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempts = 0;
    loop {
        if let Some(limiter) = limiter.as_deref_mut() {
            let wait = limiter.reserve(Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        attempts += 1;
        *requests += 1;
        let failure = match tokio::time::timeout(timeout, call()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => ApiFailure::from_kube(&e),
            Err(_) => ApiFailure::Timeout,
        };
        match policy.next_delay(attempts, &failure) {
            Some(pause) => {
                tracing::debug!(failure = %failure.describe(), attempts, ?pause, "retrying an API request");
                tokio::time::sleep(pause).await;
            }
            None => return Err((failure, attempts)),
        }
    }
}

/// Partitions of the decisions topic revoked by a rebalance, recorded by the consumer's
/// callback (which runs inside `poll`) and applied to the batch being filled.
#[derive(Default, Clone)]
struct Revocations(Arc<Mutex<Vec<i32>>>);

impl ClientContext for Revocations {}

impl ConsumerContext for Revocations {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let mut revoked = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            revoked.extend(tpl.elements().iter().map(|e| e.partition()));
        }
    }
}

impl Revocations {
    fn take(&self) -> Vec<i32> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// A decision record as polled.
struct Pending {
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    heartbeat: bool,
}

/// A record to write in the batch's transaction.
struct Output {
    topic_is_outcomes: bool,
    partition: i32,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    timestamp_ms: i64,
}

/// What one transaction carries.
#[derive(Default)]
struct Batch {
    outputs: Vec<Output>,
    /// Next offset per decisions partition (last applied + 1).
    offsets: BTreeMap<i32, i64>,
    /// Outcomes by label, and decisions / dead letters, counted once committed.
    events: BTreeMap<&'static str, u64>,
    decisions: u64,
    outcomes: u64,
    dead_letters: BTreeMap<&'static str, u64>,
}

/// What became of one polled record.
enum Handled {
    /// Answered (an outcome or a dead letter is in the batch) or skipped (a heartbeat).
    Done,
    /// Not decodable yet (the registry was unreachable): to be read again.
    NotYet(CodecError),
}

/// Everything a decision needs to be applied and answered.
struct Apply<'a> {
    run: &'a CleanerRun,
    codec: &'a Codec,
    client: &'a kube::Client,
    handle: &'a Handle,
    outcome_writer: RecordWriter,
    dead_letter_writer: RecordWriter,
    outcome_partitions: i32,
    dead_letter_partitions: i32,
    limiter: RateLimiter,
}

/// Runs one cleaner until `stop` is set (it then commits what it applied and leaves the
/// group) or an unrecoverable error. Blocking: call it on a dedicated thread.
pub fn run_blocking(
    run: &CleanerRun,
    codec: &Codec,
    client: &kube::Client,
    handle: &Handle,
    stop: &AtomicBool,
    stats: &RuntimeStats,
) -> Result<(), CleanerError> {
    let cfg = &run.cleaner;
    let transactional_id = run.transactional_id();
    let metadata_client: BaseConsumer =
        client_config(run).create().map_err(kafka("creating a metadata client"))?;
    let partitions = |topic: &str| -> Result<i32, CleanerError> {
        let md = metadata_client
            .fetch_metadata(Some(topic), Duration::from_secs(30))
            .map_err(kafka("reading topic metadata"))?;
        let n =
            md.topics().first().filter(|t| t.error().is_none()).map_or(0, |t| t.partitions().len() as i32);
        if n == 0 {
            return Err(CleanerError::MissingTopic { topic: topic.to_owned() });
        }
        Ok(n)
    };
    partitions(&run.decisions)?;
    let mut apply = Apply {
        run,
        codec,
        client,
        handle,
        outcome_partitions: partitions(&run.outcomes)?,
        dead_letter_partitions: partitions(&run.dead_letter)?,
        outcome_writer: handle.block_on(codec.value_writer(&run.outcomes, CleanupOutcome::FULL_NAME))?,
        dead_letter_writer: handle.block_on(codec.value_writer(&run.dead_letter, deadletter::FULL_NAME))?,
        limiter: RateLimiter::per_second(cfg.max_deletes_per_sec),
    };

    let producer = transactional_producer(&run.bootstrap, &transactional_id, run.transaction_timeout_ms)
        .map_err(kafka("creating the transactional producer"))?;
    producer
        .init_transactions(Duration::from_secs(60))
        .map_err(|e| fenced_or(e, &transactional_id, "init_transactions"))?;

    let revocations = Revocations::default();
    let consumer: BaseConsumer<Revocations> = group_consumer_config(&run.bootstrap, &run.group_id())
        .set("session.timeout.ms", run.session_timeout_ms.to_string())
        .set("max.poll.interval.ms", run.max_poll_interval_ms().to_string())
        .create_with_context(revocations.clone())
        .map_err(kafka("creating the consumer"))?;
    consumer.subscribe(&[&run.decisions]).map_err(kafka("subscribing"))?;
    tracing::info!(
        group = %run.group_id(),
        transactional_id = %transactional_id,
        dry_run = run.dry_run,
        max_deletes_per_sec = cfg.max_deletes_per_sec,
        "cleaner running"
    );

    let commit_interval = Duration::from_millis(cfg.commit_interval_ms);
    stats.declare_topics([&run.decisions], [&run.outcomes]);
    let mut lag_checked: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        if lag_checked.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
            lag_checked = Some(Instant::now());
            if let Some(lag) = lag(&consumer) {
                stats.set_lag(lag);
            }
        }
        // 1. A batch, polled with no transaction open.
        let pending = poll_batch(&consumer, &revocations, cfg.max_decisions_per_transaction as usize);
        if pending.is_empty() {
            continue;
        }

        // 2. Apply decisions in order until the batch or the commit interval ends.
        let started = Instant::now();
        let mut batch = Batch::default();
        let mut whole = true;
        for rec in &pending {
            if stop.load(Ordering::Relaxed)
                || (started.elapsed() >= commit_interval && !batch.offsets.is_empty())
            {
                whole = false;
                break;
            }
            match apply.record(rec, &mut batch)? {
                Handled::Done => {
                    batch.offsets.insert(rec.partition, rec.offset + 1);
                }
                Handled::NotYet(e) => {
                    // The registry was unreachable: keep what was applied, read the rest again.
                    tracing::warn!(
                        error = %e,
                        partition = rec.partition,
                        offset = rec.offset,
                        "cannot decode a decision yet; will retry"
                    );
                    whole = false;
                    std::thread::sleep(RETRY_DECODE_PAUSE);
                    break;
                }
            }
        }

        // 3. One transaction: outcomes, dead letters, offsets.
        if !batch.offsets.is_empty() {
            match commit(&producer, &consumer, run, &batch) {
                Ok(()) => {
                    stats.commits.fetch_add(1, Ordering::Relaxed);
                    stats.count_in(&run.decisions, batch.decisions);
                    stats.count_out(&run.outcomes, batch.outcomes);
                    for (reason, n) in std::mem::take(&mut batch.dead_letters) {
                        stats.count_dead_letters(reason, n);
                    }
                    stats.add_events(std::mem::take(&mut batch.events));
                }
                Err(e) if is_fatal(&e) => return Err(fenced_or(e, &transactional_id, "commit")),
                Err(e) => {
                    tracing::warn!(error = %e, "aborting the transaction; its decisions will be read again");
                    producer
                        .abort_transaction(Duration::from_secs(60))
                        .map_err(|e| fenced_or(e, &transactional_id, "abort"))?;
                    stats.aborts.fetch_add(1, Ordering::Relaxed);
                    whole = false;
                }
            }
        }
        if !whole && !stop.load(Ordering::Relaxed) {
            rewind(&consumer)?;
        }
    }
    consumer.unsubscribe();
    Ok(())
}

impl Apply<'_> {
    /// Decodes, applies and answers one record, adding its outcome or dead letter to the
    /// batch. `Err`: an outcome or dead letter could not be encoded (a bug: stop).
    fn record(&mut self, rec: &Pending, batch: &mut Batch) -> Result<Handled, CleanerError> {
        if rec.heartbeat {
            return Ok(Handled::Done);
        }
        let source = Source {
            topic: &self.run.decisions,
            partition: rec.partition,
            offset: rec.offset,
            timestamp_ms: rec.timestamp_ms,
            key: rec.key.as_deref(),
            value: rec.value.as_deref(),
            processor: STAGE,
            stream_time: None,
        };
        let Some(value) = rec.value.as_deref() else {
            return self.dead_letter(
                "null_value",
                DeadLetter::new(source, "null_value", "a decision with a null value".into()),
                batch,
            );
        };
        let decision: CleanupDecision = match self.handle.block_on(self.codec.decode_as(value)) {
            Ok(d) => d,
            Err(e) if e.is_retriable() => return Ok(Handled::NotYet(e)),
            Err(e) => return self.dead_letter(e.reason(), DeadLetter::undecodable(source, &e), batch),
        };
        if let Err(why) = validate(&decision) {
            let reason = "invalid_decision";
            return self.dead_letter(reason, DeadLetter::new(source, reason, why), batch);
        }
        let attempted_at = now_ms();
        let applied = self.handle.block_on(apply(
            self.client,
            &decision,
            self.run.dry_run,
            &self.run.cleaner,
            &mut self.limiter,
        ));
        let verdict = applied.verdict;
        let job = &decision.job;
        tracing::info!(
            namespace = %job.namespace,
            name = %job.name,
            uid = %job.uid,
            outcome = verdict.outcome.label(),
            detail = %verdict.detail,
            api_requests = applied.api_requests,
            dry_run = self.run.dry_run,
            "decision applied"
        );
        let outcome = CleanupOutcome {
            job: job.clone(),
            outcome: verdict.outcome,
            dry_run: self.run.dry_run,
            detail: verdict.detail,
            http_status: verdict.http_status.map(i32::from),
            api_requests: i32::try_from(applied.api_requests).unwrap_or(i32::MAX),
            sweep: decision.sweep,
            decided_at: decision.decided_at,
            decision_partition: rec.partition,
            decision_offset: rec.offset,
            attempted_at,
            instance: self.run.instance_id.clone(),
        };
        batch.outputs.push(Output {
            topic_is_outcomes: true,
            partition: partition_for_key(job.uid.as_bytes(), self.outcome_partitions),
            key: Some(job.uid.clone().into_bytes()),
            value: self.outcome_writer.encode(&outcome)?,
            timestamp_ms: attempted_at,
        });
        batch.decisions += 1;
        batch.outcomes += 1;
        *batch.events.entry(outcome.outcome.label()).or_default() += 1;
        Ok(Handled::Done)
    }

    /// Dead-letters a decision; `reason` is `dl.reason`, as the bounded code metrics count.
    fn dead_letter(
        &self,
        reason: &'static str,
        dl: DeadLetter,
        batch: &mut Batch,
    ) -> Result<Handled, CleanerError> {
        tracing::warn!(
            partition = dl.source_partition,
            offset = dl.source_offset,
            reason = %dl.reason,
            "dead-lettering a decision"
        );
        batch.outputs.push(Output {
            topic_is_outcomes: false,
            partition: dl.source_partition % self.dead_letter_partitions,
            key: dl.source_key.clone(),
            value: self.dead_letter_writer.encode(&dl)?,
            timestamp_ms: dl.source_timestamp.unwrap_or_else(now_ms),
        });
        batch.decisions += 1;
        *batch.dead_letters.entry(reason).or_default() += 1;
        Ok(Handled::Done)
    }
}

/// Polls up to `max` decisions: waits up to 100 ms for the first, then takes what is
/// already fetched. Rebalance callbacks run inside `poll`, before it returns a record of the
/// new assignment: after each poll, records of partitions revoked meanwhile are dropped
/// from the batch first (their next owner reads them from the committed offset), then the
/// polled record is added.
fn poll_batch(consumer: &BaseConsumer<Revocations>, revocations: &Revocations, max: usize) -> Vec<Pending> {
    let mut batch: Vec<Pending> = Vec::new();
    let mut wait = Duration::from_millis(100);
    while batch.len() < max {
        let polled = consumer.poll(wait);
        let revoked = revocations.take();
        if !revoked.is_empty() {
            batch.retain(|p| !revoked.contains(&p.partition));
        }
        match polled {
            Some(Ok(m)) => {
                let heartbeat = m
                    .headers()
                    .is_some_and(|h| rdkafka::message::Headers::iter(h).any(|h| h.key == HEARTBEAT_HEADER));
                batch.push(Pending {
                    partition: m.partition(),
                    offset: m.offset(),
                    timestamp_ms: m.timestamp().to_millis(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    heartbeat,
                });
                wait = Duration::ZERO;
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "consumer error");
                break;
            }
            None => break,
        }
    }
    batch
}

/// Writes the batch's records and offsets in one transaction and commits it.
fn commit(
    producer: &ThreadedProducer<DefaultProducerContext>,
    consumer: &BaseConsumer<Revocations>,
    run: &CleanerRun,
    batch: &Batch,
) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for out in &batch.outputs {
        let topic = if out.topic_is_outcomes { &run.outcomes } else { &run.dead_letter };
        send(producer, topic, out)?;
    }
    let mut tpl = TopicPartitionList::new();
    for (&partition, &next) in &batch.offsets {
        tpl.add_partition_offset(&run.decisions, partition, Offset::Offset(next))?;
    }
    let group =
        consumer.group_metadata().ok_or(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::State))?;
    let timeout = Duration::from_millis(run.transaction_timeout_ms);
    // As in the runtime: wait for the deliveries first, so AddOffsetsToTxn does not collide
    // with AddPartitionsToTxn and the commit's flush finds nothing in flight.
    let deadline = Instant::now() + timeout;
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    producer.send_offsets_to_transaction(&tpl, &group, timeout)?;
    producer.commit_transaction(timeout)
}

/// Queues one record, waiting while librdkafka's queue is full.
fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    out: &Output,
) -> Result<(), KafkaError> {
    let mut record: BaseRecord<'_, [u8], [u8]> =
        BaseRecord::to(topic).partition(out.partition).timestamp(out.timestamp_ms).payload(&out.value);
    if let Some(k) = &out.key {
        record = record.key(k);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Moves every assigned partition back to its committed offset: decisions polled but not
/// applied (or applied in an aborted transaction) are read again.
fn rewind(consumer: &BaseConsumer<Revocations>) -> Result<(), CleanerError> {
    let committed =
        consumer.committed(Duration::from_secs(30)).map_err(kafka("reading committed offsets"))?;
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        consumer
            .seek(e.topic(), e.partition(), offset, Duration::from_secs(30))
            .map_err(kafka("rewinding"))?;
    }
    Ok(())
}

fn client_config(run: &CleanerRun) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &run.bootstrap);
    c
}

fn fenced_or(e: KafkaError, transactional_id: &str, context: &'static str) -> CleanerError {
    if is_fenced(&e) {
        CleanerError::Fenced { transactional_id: transactional_id.to_owned() }
    } else {
        CleanerError::Kafka { context, source: e }
    }
}

/// Wall clock, epoch ms (the cleaner is an I/O shell: `attempted_at` is when it acted).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Counts of outcomes by kind, for a summary (from [`RuntimeStats::events`]).
pub fn outcome_counts(stats: &RuntimeStats) -> Vec<(CleanupOutcomeKind, u64)> {
    let events = stats.events();
    CleanupOutcomeKind::ALL.iter().filter_map(|k| events.get(k.label()).map(|n| (*k, *n))).collect()
}
