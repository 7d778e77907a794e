//! The I/O around [`Forwarder`]: Kafka in, Alertmanager out, the clock.
//!
//! Reads every partition of the coverage alerts topic from the beginning (read_committed,
//! no consumer group offsets: the compacted topic is the state) and follows it. Nothing is
//! posted until every partition reached its end once, so a restart sends each subject's
//! latest state rather than its history. Then every [`TICK`], whatever the forwarder owes is
//! posted; a failed post is retried with doubling backoff up to `max_backoff`, and since the
//! forwarder only forgets what Alertmanager accepted, everything owed is sent once it answers
//! again (an Alertmanager restart loses its alerts: the next re-send restores them).

use std::{
    collections::BTreeSet,
    future::Future,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::BorrowedMessage,
};

use super::{
    AlertsError,
    state::{Forwarder, ForwarderConfig, PostableAlert},
    truncate_body,
};
use crate::{
    brokers::{Reauthentication, Refused, Refusing},
    codec::Codec,
    coverage::CoverageAlert,
    health::{Condition, Heartbeat},
    runtime::kafka::QuietEof,
};
use rdkafka::types::RDKafkaErrorCode;

/// How often the forwarder is asked what it owes.
pub const TICK: Duration = Duration::from_millis(250);

/// First pause after a failed post; it doubles up to `max_backoff`.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// How often a missing topic is looked for again.
pub const MISSING_TOPIC_RETRY: Duration = Duration::from_secs(2);

/// Most alerts in one POST.
pub const MAX_ALERTS_PER_POST: usize = 1000;

/// Everything one `kubefacts alerts` needs.
#[derive(Debug, Clone)]
pub struct AlertsRun {
    /// The brokers, and how clients reach them (`[kafka]`).
    pub brokers: crate::brokers::Brokers,
    /// The coverage alerts topic (full name).
    pub topic: String,
    /// The group its consumer assigns in, never joined nor committed to:
    /// `<application_id>-alerts`, named so an ACL can allow it.
    pub group: String,
    /// Alertmanager base URL (`http://host:9093`).
    pub alertmanager: String,
    /// Labels and timing of the alerts.
    pub forwarder: ForwarderConfig,
    /// Longest pause between retries of a failed post.
    pub max_backoff: Duration,
    /// Timeout of one POST.
    pub request_timeout: Duration,
    /// Beaten once per turn of the forwarding loop (`/healthz`).
    pub heartbeat: Heartbeat,
    /// Met once the topic has been read to its end (`/readyz`).
    pub ready: std::sync::Arc<Condition>,
}

impl AlertsRun {
    /// `<alertmanager>/api/v2/alerts`.
    pub fn endpoint(&self) -> Result<reqwest::Url, AlertsError> {
        let invalid = |reason: String| AlertsError::InvalidUrl { url: redact(&self.alertmanager), reason };
        let base = reqwest::Url::parse(&self.alertmanager).map_err(|e| invalid(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid("not an http(s) URL".into()));
        }
        // Refused, not used: a URL with a password would show in every request error.
        if !base.username().is_empty() || base.password().is_some() {
            return Err(invalid("credentials in the URL are not supported (they would show in logs)".into()));
        }
        let path = format!("{}/api/v2/alerts", base.path().trim_end_matches('/'));
        let mut url = base;
        url.set_path(&path);
        Ok(url)
    }
}

/// `url` with anything between `://` and `@` replaced, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme + 3 => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// Epoch milliseconds now.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn kafka(context: &'static str) -> impl FnOnce(KafkaError) -> AlertsError {
    move |source| AlertsError::Kafka { context, source }
}

/// Runs until `stop` completes (Ok) or Kafka fails for good (Err). Alertmanager errors are
/// logged and retried, never returned.
pub async fn run(run: &AlertsRun, codec: &Codec, stop: impl Future<Output = ()>) -> Result<(), AlertsError> {
    let endpoint = run.endpoint()?;
    let http = crate::http::client_builder()
        .timeout(run.request_timeout)
        .build()
        .map_err(|e| AlertsError::InvalidUrl { url: run.alertmanager.clone(), reason: e.to_string() })?;
    tokio::pin!(stop);
    // Started beside `kubefacts process`, the topic may not exist yet: wait for it.
    let mut waiting = false;
    let consumer = loop {
        match consumer(run) {
            Ok(c) => break c,
            Err(AlertsError::MissingTopic { .. }) => {
                run.heartbeat.beat();
                if !waiting {
                    run.ready.waiting(format!("{} does not exist yet ([coverage] creates it)", run.topic));
                    tracing::warn!(topic = %run.topic, "the topic does not exist yet ([coverage] creates it); waiting");
                    eprintln!("alerts: waiting for {} to exist (is [coverage] running?)", run.topic);
                    waiting = true;
                }
                tokio::select! {
                    () = &mut stop => return Ok(()),
                    () = tokio::time::sleep(MISSING_TOPIC_RETRY) => {}
                }
            }
            Err(e) => return Err(e),
        }
    };
    let mut at_end: BTreeSet<i32> = BTreeSet::new();
    let partitions = consumer.assignment().map_err(kafka("reading the assignment"))?.count();

    let mut forwarder = Forwarder::new(run.forwarder.clone());
    let mut retry = Retry { backoff: FIRST_BACKOFF, next_post: tokio::time::Instant::now() };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut records, mut undecodable) = (0u64, 0u64);
    let mut reauthentication = Reauthentication::default();
    run.ready.waiting(format!("reading {} up to its end", run.topic));
    loop {
        run.heartbeat.beat();
        tokio::select! {
            () = &mut stop => break,
            msg = consumer.recv() => match msg {
                Ok(m) => {
                    records += 1;
                    undecodable += u64::from(!take(&mut forwarder, codec, &m).await);
                }
                Err(KafkaError::PartitionEOF(p)) => {
                    if at_end.insert(p) && at_end.len() == partitions {
                        run.ready.met();
                        let (subjects, firing) = (forwarder.subjects(), forwarder.firing());
                        tracing::info!(records, undecodable, subjects, firing, "caught up");
                        eprintln!("alerts: read {records} records: {subjects} subjects, {firing} firing");
                    }
                }
                Err(e) => match reauthentication.refusal_code(&e) {
                    Some(code) => {
                        let topics = [run.topic.clone()];
                        let what = Refusing::reading("consuming", &topics, &run.group);
                        return Err(run.brokers.refusal(code, what).into());
                    }
                    None => tracing::warn!(error = %e, topic = %run.topic, "consuming"),
                },
            },
            _ = tick.tick() => {
                if at_end.len() == partitions && tokio::time::Instant::now() >= retry.next_post {
                    post_due(&mut forwarder, &http, &endpoint, &mut retry, run.max_backoff).await;
                }
            }
        }
    }
    eprintln!(
        "alerts: stopped after {records} record(s), {undecodable} undecodable; {} subject(s), {} firing",
        forwarder.subjects(),
        forwarder.firing()
    );
    Ok(())
}

/// Applies one record (or tombstone) to the forwarder; false if it did not decode.
async fn take(forwarder: &mut Forwarder, codec: &Codec, m: &BorrowedMessage<'_>) -> bool {
    let key = m.key().map(|k| String::from_utf8_lossy(k).into_owned());
    let Some(bytes) = m.payload() else {
        match key {
            Some(key) => forwarder.remove(&key, m.timestamp().to_millis().unwrap_or_else(now_ms)),
            None => tracing::warn!(partition = m.partition(), offset = m.offset(), "tombstone without a key"),
        }
        return true;
    };
    match codec.decode_as::<CoverageAlert>(bytes).await {
        Ok(alert) => {
            let key = key.unwrap_or_else(|| alert.subject.uid.clone());
            forwarder.apply(&key, alert);
            true
        }
        Err(e) => {
            let (partition, offset, reason) = (m.partition(), m.offset(), e.reason());
            tracing::warn!(partition, offset, reason, error = %e, "undecodable coverage alert; skipped");
            false
        }
    }
}

/// When the next post may go, and the pause after the next failure.
#[derive(Debug)]
struct Retry {
    backoff: Duration,
    next_post: tokio::time::Instant,
}

/// Posts what the forwarder owes now; on a retriable failure nothing is marked delivered and
/// the next attempt waits for the backoff.
async fn post_due(
    forwarder: &mut Forwarder,
    http: &reqwest::Client,
    endpoint: &reqwest::Url,
    retry: &mut Retry,
    max_backoff: Duration,
) {
    let now = now_ms();
    let outbox = forwarder.due(now);
    if outbox.is_empty() {
        return;
    }
    let alerts = outbox.alerts.len();
    match post_all(http, endpoint, &outbox.alerts).await {
        Ok(()) => {
            tracing::debug!(alerts, "posted");
            forwarder.delivered(&outbox, now);
            retry.backoff = FIRST_BACKOFF;
        }
        Err(e) if e.retriable() => {
            let retry_in_ms = retry.backoff.as_millis() as u64;
            let reason = e.reason();
            tracing::warn!(reason, error = %e, alerts, retry_in_ms, "Alertmanager did not take the alerts");
            retry.next_post = tokio::time::Instant::now() + retry.backoff;
            retry.backoff = (retry.backoff * 2).min(max_backoff);
        }
        Err(e) => {
            // Refused as they are: the same again would be refused again. Firing alerts come
            // back at their next re-send.
            let reason = e.reason();
            tracing::error!(reason, error = %e, alerts, "Alertmanager refused the alerts; dropped");
            forwarder.delivered(&outbox, now);
        }
    }
}

/// A consumer assigned every partition of the topic from the beginning; it reports each
/// partition's end (PartitionEOF) so the caller knows when the history is read.
fn consumer(run: &AlertsRun) -> Result<StreamConsumer<QuietEof>, AlertsError> {
    let consumer: StreamConsumer<QuietEof> = run
        .brokers
        .client()
        // Nothing is committed (the topic itself is the state): the group only because
        // librdkafka assigns in one, never joined (DESCRIBE on it: docs/security.md).
        .set("group.id", &run.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create_with_context(QuietEof)
        .map_err(kafka("creating the consumer"))?;
    let metadata = consumer
        .fetch_metadata(Some(&run.topic), Duration::from_secs(10))
        .map_err(kafka("reading the topic's metadata"))?;
    let missing = || AlertsError::MissingTopic {
        topic: run.topic.clone(),
        bootstrap: run.brokers.bootstrap().to_owned(),
    };
    let topic = metadata.topics().first().ok_or_else(missing)?;
    if topic.error().is_some_and(|e| RDKafkaErrorCode::from(e) == RDKafkaErrorCode::TopicAuthorizationFailed)
    {
        let principal = run.brokers.principal();
        return Err(Refused::Topic { principal, operation: "describe", topic: run.topic.clone() }.into());
    }
    if topic.error().is_some() || topic.partitions().is_empty() {
        return Err(missing());
    }
    let mut assignment = TopicPartitionList::new();
    for p in topic.partitions() {
        assignment
            .add_partition_offset(&run.topic, p.id(), Offset::Beginning)
            .map_err(kafka("assigning partitions"))?;
    }
    consumer.assign(&assignment).map_err(kafka("assigning partitions"))?;
    Ok(consumer)
}

/// Posts `alerts` in chunks of [`MAX_ALERTS_PER_POST`]; the first failure ends it (the
/// forwarder still owes everything, so the retry sends the chunks that went through again,
/// which Alertmanager merges as the same alerts).
async fn post_all(
    http: &reqwest::Client,
    endpoint: &reqwest::Url,
    alerts: &[PostableAlert],
) -> Result<(), AlertsError> {
    for chunk in alerts.chunks(MAX_ALERTS_PER_POST) {
        post(http, endpoint, chunk).await?;
    }
    Ok(())
}

async fn post(
    http: &reqwest::Client,
    endpoint: &reqwest::Url,
    alerts: &[PostableAlert],
) -> Result<(), AlertsError> {
    let unreachable = |source| AlertsError::Unreachable { url: endpoint.to_string(), source };
    let response = http.post(endpoint.clone()).json(alerts).send().await.map_err(unreachable)?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    Err(AlertsError::Status {
        url: endpoint.to_string(),
        status: status.as_u16(),
        body: truncate_body(&body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(url: &str) -> AlertsRun {
        AlertsRun {
            brokers: crate::brokers::Brokers::plaintext("b"),
            topic: "t".into(),
            group: "g".into(),
            alertmanager: url.into(),
            forwarder: ForwarderConfig {
                severity: "warning".into(),
                resend_interval_ms: 1,
                generator_url: None,
            },
            max_backoff: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            heartbeat: Heartbeat::detached(),
            ready: crate::health::Health::default().condition("alerts", "test"),
        }
    }

    #[test]
    fn endpoint_appends_the_api_path() {
        assert_eq!(
            run("http://127.0.0.1:9093").endpoint().unwrap().as_str(),
            "http://127.0.0.1:9093/api/v2/alerts"
        );
        assert_eq!(
            run("http://am:9093/prefix/").endpoint().unwrap().as_str(),
            "http://am:9093/prefix/api/v2/alerts"
        );
        assert!(matches!(run("am:9093").endpoint(), Err(AlertsError::InvalidUrl { .. })));
        assert!(matches!(run("not a url").endpoint(), Err(AlertsError::InvalidUrl { .. })));
        let e = run("http://admin:hunter2@am:9093").endpoint().unwrap_err().to_string();
        assert!(e.contains("credentials") && !e.contains("hunter2"), "{e}");
    }
}
