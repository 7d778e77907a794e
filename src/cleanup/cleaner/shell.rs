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
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio::runtime::Handle;

pub use super::kube_calls::{Applied, apply};
pub use super::run::{CleanerError, CleanerRun};
use super::{
    RateLimiter,
    kafka::{Revocations, client_config, commit, poll_batch},
    run::{Batch, Output, Pending, kafka},
    validate,
};
use crate::{
    brokers::Reauthentication,
    cleanup::{
        model::CleanupDecision,
        outcome::{CleanupOutcome, CleanupOutcomeKind},
    },
    codec::{Codec, CodecError, RecordWriter},
    runtime::{
        deadletter::{self, DeadLetter, Reason, Source},
        kafka::{RuntimeStats, TxSession, group_consumer_config, lag, rewind},
        partitioner::partition_for_key,
    },
};

/// The name dead letters and the metrics' `stage` label carry.
pub const STAGE: &str = "cleaner";

/// Longest pause after a decision could not be decoded for a retriable reason (the registry
/// was unreachable) before the batch is read again.
const RETRY_DECODE_PAUSE: Duration = Duration::from_secs(2);

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
        if n == 0 && crate::brokers::describe_refused(metadata_client.client(), topic) {
            let principal = run.brokers.principal();
            return Err(crate::brokers::Refused::Topic {
                principal,
                operation: "describe",
                topic: topic.to_owned(),
            }
            .into());
        }
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

    let session =
        TxSession::open(&run.brokers, &transactional_id, &run.group_id(), run.transaction_timeout_ms)?;

    let revocations = Revocations::default();
    let consumer: BaseConsumer<Revocations> = group_consumer_config(&run.brokers, &run.group_id())
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
    let mut reauthentication = Reauthentication::default();
    while !stop.load(Ordering::Relaxed) {
        run.heartbeat.beat();
        if lag_checked.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
            lag_checked = Some(Instant::now());
            if let Some(lag) = lag(&consumer, &metadata_client) {
                stats.set_lag(lag);
            }
        }
        // 1. A batch, polled with no transaction open.
        let pending = poll_batch(
            &consumer,
            &revocations,
            run,
            &mut reauthentication,
            cfg.max_decisions_per_transaction as usize,
        )?;
        run.ready.met();
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
            match commit(&session, &consumer, run, &batch) {
                Ok(()) => {
                    stats.commits.inc();
                    stats.count_in(&run.decisions, batch.decisions);
                    stats.count_out(&run.outcomes, batch.outcomes);
                    for (reason, n) in std::mem::take(&mut batch.dead_letters) {
                        stats.count_dead_letters(reason, n);
                    }
                    stats.add_events(std::mem::take(&mut batch.events));
                }
                Err(e @ (CleanerError::Fenced { .. } | CleanerError::Refused(_))) => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "aborting the transaction; its decisions will be read again");
                    session.abort()?;
                    stats.aborts.inc();
                    whole = false;
                }
            }
        }
        if !whole && !stop.load(Ordering::Relaxed) {
            rewind(&consumer, |context, source| CleanerError::Kafka { context, source })?;
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
            let reason = Reason::NullValue.as_str();
            return self.dead_letter(
                reason,
                DeadLetter::new(source, reason, "a decision with a null value".into()),
                batch,
            );
        };
        let decision: CleanupDecision = match self.handle.block_on(self.codec.decode_as(value)) {
            Ok(d) => d,
            Err(e) if e.is_retriable() => return Ok(Handled::NotYet(e)),
            Err(e) => return self.dead_letter(e.reason(), DeadLetter::undecodable(source, &e), batch),
        };
        if let Err(why) = validate(&decision) {
            let reason = Reason::InvalidDecision.as_str();
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
