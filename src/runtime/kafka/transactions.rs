//! Transactions: the transactional producer, how its errors are judged, the records it
//! sends and the commit of a transaction with the consumed offsets.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use rdkafka::{
    TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    error::KafkaError,
    message::{Header, OwnedHeaders},
    producer::{BaseRecord, Producer, ThreadedProducer},
    types::RDKafkaErrorCode,
};

use super::{
    RuntimeError,
    config::{Failpoint, FailpointAt, RuntimeConfig},
};
use crate::{
    brokers::{Brokers, Reauthentication, Refused, Refusing, Watch, refusal_code},
    runtime::{
        HEARTBEAT_HEADER, clock::WRITER_HEADER, partitioner::partition_for_key, processor::OutputRecord,
    },
    telemetry,
};

/// A transactional, idempotent producer (not initialised yet).
fn transactional_producer(
    brokers: &Brokers,
    transactional_id: &str,
    transaction_timeout_ms: u64,
    watch: Watch,
) -> Result<TxProducer, KafkaError> {
    brokers
        .client()
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", transaction_timeout_ms.to_string())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(watch)
}

/// The transactional producer: its context remembers refused deliveries, whose topic a
/// failed commit does not name.
pub(crate) type TxProducer = ThreadedProducer<Watch>;

/// Whether a transactional producer's error is fatal (it must be recreated).
pub(crate) fn is_fatal(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(t) => t.is_fatal(),
        // A call that never returned ([`within`]): the producer is wedged.
        KafkaError::Global(RDKafkaErrorCode::Fatal) => true,
        _ => false,
    }
}

/// How often a commit that failed retriably (timed out) is called again.
const COMMIT_RETRIES: u32 = 3;

/// How much longer than its own timeout a librdkafka call may take before [`within`] gives
/// up on it.
const WEDGED_AFTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `call` (a librdkafka call given `timeout`) on a thread of its own and waits for it
/// at most `timeout` + [`WEDGED_AFTER_TIMEOUT`]; past that, the producer counts as failed
/// fatally (`Local: Fatal error`) and the caller recreates it, leaving the call behind.
///
/// librdkafka 2.12's `send_offsets_to_transaction` waits for its coordinator request
/// without a deadline, and the request can wait forever for a group coordinator that a
/// broker restart took out of the metadata (confluentinc/librdkafka#5456, #5511): a
/// rolling restart left both instances of the broker-failure test blocked in it for
/// minutes. A new producer with the same transactional id fences the old one, so the
/// abandoned call can only fail; the old producer is freed when it does.
fn within<T: Send + 'static>(
    what: &'static str,
    timeout: Duration,
    call: impl FnOnce(Duration) -> Result<T, KafkaError> + Send + 'static,
) -> Result<T, KafkaError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(what.to_owned())
        .spawn(move || {
            let _ = tx.send(call(timeout));
        })
        .map_err(|_| KafkaError::Global(RDKafkaErrorCode::Fatal))?;
    let waited = timeout + WEDGED_AFTER_TIMEOUT;
    rx.recv_timeout(waited).unwrap_or_else(|_| {
        tracing::error!(
            call = what,
            ?waited,
            "librdkafka did not return: the producer is wedged; recreating it"
        );
        Err(KafkaError::Global(RDKafkaErrorCode::Fatal))
    })
}

/// How often a stream thread recreates its transactional producer after a fatal error:
/// at most [`Recreations::MAX`] in [`Recreations::WINDOW`]. More means it is not a broker
/// failure but another live instance with the same transactional id, fencing it back.
#[derive(Debug, Default)]
pub(crate) struct Recreations(std::collections::VecDeque<Instant>);

impl Recreations {
    /// Recreations allowed in one window.
    pub(crate) const MAX: usize = 3;
    /// The window.
    pub(crate) const WINDOW: Duration = Duration::from_secs(600);

    /// Whether one more recreation is allowed now (and counts it if so).
    pub(crate) fn allow(&mut self) -> bool {
        let now = Instant::now();
        while self.0.front().is_some_and(|t| now.duration_since(*t) > Self::WINDOW) {
            self.0.pop_front();
        }
        if self.0.len() >= Self::MAX {
            return false;
        }
        self.0.push_back(now);
        true
    }
}

/// Whether a transactional producer was fenced (another instance with its transactional id
/// started) or failed fatally: either way it is done.
pub(crate) fn is_fenced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::Fenced | rdkafka::types::RDKafkaErrorCode::ProducerFenced)
    ) || is_fatal(e)
}

/// Produces one output record of the task `writer` (its [`WRITER_HEADER`] value).
pub(super) fn produce_output(
    producer: &TxProducer,
    cfg: &RuntimeConfig,
    output_partitions: &[i32],
    out: OutputRecord,
    writer: &str,
    traceparent: Option<&str>,
) -> Result<(), KafkaError> {
    let topic = &cfg.outputs[out.port];
    let partition = out.partition.unwrap_or_else(|| partition_for_key(&out.key, output_partitions[out.port]));
    let (key, value) = (Some(&out.key[..]), out.value.as_deref());
    let headers = headers(out.heartbeat, Some(writer), traceparent);
    send(producer, topic, partition, key, value, out.timestamp_ms, headers)
}

/// The headers of a produced record: the heartbeat marker, the writing task and the trace
/// context, each when given.
pub(super) fn headers(
    heartbeat: bool,
    writer: Option<&str>,
    traceparent: Option<&str>,
) -> Option<OwnedHeaders> {
    if !heartbeat && writer.is_none() && traceparent.is_none() {
        return None;
    }
    let mut headers = OwnedHeaders::new_with_capacity(3);
    if heartbeat {
        headers = headers.insert(Header { key: HEARTBEAT_HEADER, value: Some("1") });
    }
    if let Some(w) = writer {
        headers = headers.insert(Header { key: WRITER_HEADER, value: Some(w) });
    }
    if let Some(tp) = traceparent {
        headers = headers.insert(Header { key: telemetry::TRACEPARENT, value: Some(tp) });
    }
    Some(headers)
}

/// Queues one record, waiting while librdkafka's queue is full.
pub(crate) fn send(
    producer: &TxProducer,
    topic: &str,
    partition: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    timestamp_ms: i64,
    headers: Option<OwnedHeaders>,
) -> Result<(), KafkaError> {
    let mut record: BaseRecord<'_, [u8], [u8]> =
        BaseRecord::to(topic).partition(partition).timestamp(timestamp_ms);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    if let Some(h) = headers {
        record = record.headers(h);
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

/// A transactional producer and the transactions it runs: the one place a loop that
/// consumes, produces and commits its input offsets atomically (the stream tasks, the
/// cleaner) begins, commits and aborts. Exactly-once v2 (KIP-447): the offsets go with the
/// consuming member's group metadata, so a member that left the group cannot commit.
pub(crate) struct TxSession {
    producer: Arc<TxProducer>,
    watch: Watch,
    brokers: Brokers,
    transactional_id: String,
    /// The consumer group whose offsets the transactions commit.
    group: String,
    timeout: Duration,
    /// Failed logins while running (a broker restarting).
    reauthentication: std::sync::Mutex<Reauthentication>,
}

/// Why a transactional call failed, as a caller reports it.
#[derive(Debug)]
pub(crate) enum TxError {
    /// Another instance with this transactional id took over (or the producer failed
    /// fatally): this one must stop.
    Fenced {
        /// The transactional id.
        transactional_id: String,
        /// The producer's error.
        reason: String,
    },
    /// Kafka refused the producer (authentication, a missing ACL): never retried.
    Refused(Refused),
    /// Any other failure of the step named.
    Kafka {
        /// The step.
        context: &'static str,
        /// The client error.
        source: KafkaError,
    },
}

impl From<TxError> for RuntimeError {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Fenced { transactional_id, reason } => RuntimeError::Fenced { transactional_id, reason },
            TxError::Refused(r) => RuntimeError::Refused(r),
            TxError::Kafka { context, source } => RuntimeError::Kafka { context, source },
        }
    }
}

impl TxSession {
    /// Creates the producer and initialises its transactions, which fences every earlier
    /// producer with this transactional id (a restarted instance's zombie) and aborts what
    /// it left open.
    pub(crate) fn open(
        brokers: &Brokers,
        transactional_id: &str,
        group: &str,
        timeout_ms: u64,
    ) -> Result<Self, TxError> {
        let watch = Watch::default();
        let producer = transactional_producer(brokers, transactional_id, timeout_ms, watch.clone())
            .map_err(|source| TxError::Kafka { context: "creating the transactional producer", source })?;
        let session = Self {
            producer: Arc::new(producer),
            watch,
            brokers: brokers.clone(),
            transactional_id: transactional_id.to_owned(),
            group: group.to_owned(),
            timeout: Duration::from_millis(timeout_ms),
            reauthentication: Default::default(),
        };
        session
            .producer
            .init_transactions(Duration::from_secs(60))
            .map_err(|e| session.judge(e, "init_transactions"))?;
        Ok(session)
    }

    /// The producer, to queue a transaction's records with [`send`].
    pub(crate) fn producer(&self) -> &TxProducer {
        &self.producer
    }

    /// How a failed call of `context` is reported: fenced, or a Kafka error.
    pub(crate) fn judge(&self, e: KafkaError, context: &'static str) -> TxError {
        if let Some(refused) = self.refused(&e, context) {
            TxError::Refused(refused)
        } else if is_fenced(&e) {
            TxError::Fenced { transactional_id: self.transactional_id.clone(), reason: e.to_string() }
        } else {
            TxError::Kafka { context, source: e }
        }
    }

    /// Whether `e` (of the step `doing`) is Kafka refusing this producer, and what it
    /// refused: a refused delivery names its topic; otherwise the transactional id, the
    /// group or the cluster.
    pub(crate) fn refused(&self, e: &KafkaError, doing: &'static str) -> Option<Refused> {
        if let Some(topic) = self.watch.refused_delivery() {
            return Some(Refused::Topic { principal: self.brokers.principal(), operation: "write", topic });
        }
        let code = match self.reauthentication.lock() {
            Ok(mut r) => r.refusal_code(e)?,
            Err(_) => refusal_code(e)?,
        };
        let what = Refusing {
            doing,
            operation: "write",
            topics: &[],
            group: Some(&self.group),
            transactional_id: Some(&self.transactional_id),
        };
        Some(self.brokers.refusal(code, what))
    }

    /// Begins a transaction.
    pub(crate) fn begin(&self) -> Result<(), TxError> {
        self.producer.begin_transaction().map_err(|e| self.judge(e, "begin_transaction"))
    }

    /// Sends `offsets` with `consumer`'s group metadata and commits the open transaction.
    /// `failpoint` (tests only) pauses the process in the `transaction`-th one.
    pub(crate) fn commit<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        offsets: &TopicPartitionList,
        failpoint: Option<Failpoint>,
        transaction: u64,
    ) -> Result<(), KafkaError> {
        let group =
            consumer.group_metadata().ok_or(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::State))?;
        // Wait for the batch's deliveries first. Sent at once, AddOffsetsToTxn collides with
        // the transaction's AddPartitionsToTxn (CONCURRENT_TRANSACTIONS, retried after
        // retry.backoff.ms = 100 ms), and rust-rdkafka's commit_transaction flush polls in
        // 100 ms steps while anything is in flight: ~100 ms lost per transaction either way
        // (docs/RUNTIME.md, "Runtime benchmark"). Exactly-once is unchanged: the commit waits
        // for the same deliveries.
        let started = Instant::now();
        let deadline = started + self.timeout;
        while self.producer.in_flight_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        let delivered = started.elapsed();
        Failpoint::pause_if(failpoint, FailpointAt::BeforeOffsets, transaction);
        let (producer, offsets) = (Arc::clone(&self.producer), offsets.clone());
        within("send_offsets_to_transaction", self.timeout, move |timeout| {
            producer.send_offsets_to_transaction(&offsets, &group, timeout)
        })?;
        let offsets_sent = started.elapsed();
        Failpoint::pause_if(failpoint, FailpointAt::BeforeCommit, transaction);
        // librdkafka says a commit that timed out is to be called again, not aborted: the
        // commit is under way and an abort now conflicts with it (a slow coordinator under
        // broker failures). A few more calls, then the caller aborts or recreates.
        let mut again = 0;
        while let Err(e) = self.producer.commit_transaction(self.timeout) {
            match &e {
                KafkaError::Transaction(t) if t.is_retriable() && again < COMMIT_RETRIES => {
                    again += 1;
                    tracing::warn!(error = %e, again, "committing the transaction again");
                }
                _ => return Err(e),
            }
        }
        // Where a commit's time goes (the broker's share of a transaction's latency).
        tracing::debug!(
            transaction,
            deliveries_ms = delivered.as_millis() as u64,
            offsets_ms = (offsets_sent - delivered).as_millis() as u64,
            commit_ms = (started.elapsed() - offsets_sent).as_millis() as u64,
            "transaction committed"
        );
        Ok(())
    }

    /// Aborts the open transaction (after a failed send or commit that is not fatal).
    pub(crate) fn abort(&self) -> Result<(), TxError> {
        self.try_abort().map_err(|e| self.judge(e, "abort"))
    }

    /// [`TxSession::abort`], the producer's error as it is (for a caller that can recreate
    /// the producer).
    pub(crate) fn try_abort(&self) -> Result<(), KafkaError> {
        self.producer.abort_transaction(Duration::from_secs(60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_returns_in_time_gives_its_result() {
        let got = within("quick", Duration::from_millis(50), |timeout| Ok(timeout.as_millis()));
        assert_eq!(got.unwrap(), 50);
        let failed: Result<(), _> =
            within("failing", Duration::ZERO, |_| Err(KafkaError::Global(RDKafkaErrorCode::Fenced)));
        assert!(!is_fatal(&failed.unwrap_err()), "its own error, not a wedge");
    }

    #[test]
    fn a_call_that_never_returns_counts_as_a_fatal_producer_error() {
        let started = Instant::now();
        // WEDGED_AFTER_TIMEOUT (10 s) on top of the timeout: the call blocks far longer.
        let got: Result<(), _> = within("stuck", Duration::ZERO, |_| {
            std::thread::sleep(Duration::from_secs(60));
            Ok(())
        });
        let e = got.unwrap_err();
        assert!(is_fatal(&e), "{e}");
        let waited = started.elapsed();
        assert!(
            waited >= WEDGED_AFTER_TIMEOUT && waited < WEDGED_AFTER_TIMEOUT + Duration::from_secs(5),
            "{waited:?}"
        );
    }

    #[test]
    fn a_few_recreations_are_allowed_then_none_within_the_window() {
        let mut r = Recreations::default();
        assert!((0..Recreations::MAX).all(|_| r.allow()));
        assert!(!r.allow(), "a fourth recreation within the window");
        // Recreations older than the window no longer count.
        let old = Instant::now().checked_sub(Recreations::WINDOW + Duration::from_secs(1));
        if let Some(old) = old {
            r.0.iter_mut().for_each(|t| *t = old);
            assert!(r.allow());
        }
    }
}
