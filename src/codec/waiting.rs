//! Registering the writer schemas a verb needs before it starts, waiting out a registry
//! that does not answer yet.
//!
//! A verb hands [`Codec::register_writers`] every subject it will write before it builds
//! its writers; the codec keeps the ids the registry gave, so the writers built afterwards
//! (a stage's, each new task's, a publisher's) cost no registry call. A registry that is
//! unreachable, times out or answers 5xx ([`CodecError::is_retriable`]) is waited out with
//! [`Backoff`], the schedule admission waits between schema lookups
//! (`src/runtime/kafka/read.rs`); a refusal (an incompatible schema, refused credentials,
//! an untrusted certificate) fails at once.

use std::time::Duration;

use thiserror::Error;

use super::{Codec, CodecError, RegistryClient};

/// The waits between attempts at a registry that did not answer: 100 ms, doubling, at
/// most 5 s.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    /// The first wait.
    pub const FIRST: Duration = Duration::from_millis(100);
    /// The longest wait.
    pub const MAX: Duration = Duration::from_secs(5);

    /// A schedule at its first wait.
    pub fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// The wait before the next attempt: twice the one before, at most [`Backoff::MAX`].
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (wait * 2).min(Self::MAX);
        wait
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

/// A writer a verb will ask the codec for: `full_name` records as the values (or keys) of
/// `topic`, under the topic's TopicNameStrategy subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriterSchema {
    /// The topic written.
    pub topic: String,
    /// Full name of the record written.
    pub full_name: &'static str,
    /// Whether the record is the topic's key (else its value).
    pub key: bool,
}

impl WriterSchema {
    /// `full_name` records as the values of `topic`.
    pub fn value(topic: impl Into<String>, full_name: &'static str) -> Self {
        Self { topic: topic.into(), full_name, key: false }
    }

    /// `full_name` records as the keys of `topic`.
    pub fn key(topic: impl Into<String>, full_name: &'static str) -> Self {
        Self { topic: topic.into(), full_name, key: true }
    }

    /// The registry subject (`<topic>-value` or `<topic>-key`).
    pub fn subject(&self) -> String {
        if self.key {
            RegistryClient::key_subject(&self.topic)
        } else {
            RegistryClient::value_subject(&self.topic)
        }
    }
}

/// An attempt the registry did not answer, told to the caller of
/// [`Codec::register_writers`] before it waits.
#[derive(Debug)]
pub struct Waiting<'a> {
    /// The registry, credentials removed.
    pub registry: &'a str,
    /// The subject being registered.
    pub subject: &'a str,
    /// Failed attempts at this subject so far (1 for the first).
    pub attempt: u32,
    /// How long until the next attempt.
    pub retry_in: Duration,
    /// What the registry (or the way to it) did.
    pub error: &'a CodecError,
}

/// A writer schema the registry refused (or that this build does not have).
#[derive(Debug, Error)]
#[error("registering {full_name} under subject {subject}")]
pub struct RegisterError {
    /// The subject.
    pub subject: String,
    /// Full name of the record.
    pub full_name: &'static str,
    /// Why it failed.
    #[source]
    pub source: CodecError,
}

impl Codec {
    /// Registers every schema of `wanted` (once each) and keeps the ids, so that the
    /// [`Codec::value_writer`] and [`Codec::key_writer`] calls that follow are answered
    /// without the registry. A retriable failure is told to `waiting`, then the same subject
    /// is tried again after the next [`Backoff`] wait, for as long as it takes: a caller
    /// that must stop drops the future. Returns how many attempts failed; without a
    /// registry, nothing is asked and none did.
    pub async fn register_writers(
        &self,
        wanted: &[WriterSchema],
        mut waiting: impl FnMut(&Waiting<'_>),
    ) -> Result<u32, RegisterError> {
        let url = self.registry.as_ref().map(RegistryClient::url).unwrap_or_default();
        let mut failed = 0;
        for (i, schema) in wanted.iter().enumerate() {
            if wanted[..i].contains(schema) {
                continue;
            }
            let subject = schema.subject();
            let (mut backoff, mut attempt) = (Backoff::new(), 0);
            loop {
                let written = if schema.key {
                    self.key_writer(&schema.topic, schema.full_name).await
                } else {
                    self.value_writer(&schema.topic, schema.full_name).await
                };
                match written {
                    Ok(_) => break,
                    Err(error) if error.is_retriable() && !error.is_registry_refusal() => {
                        attempt += 1;
                        failed += 1;
                        let retry_in = backoff.next_wait();
                        waiting(&Waiting {
                            registry: &url,
                            subject: &subject,
                            attempt,
                            retry_in,
                            error: &error,
                        });
                        tokio::time::sleep(retry_in).await;
                    }
                    Err(source) => {
                        return Err(RegisterError { subject, full_name: schema.full_name, source });
                    }
                }
            }
        }
        Ok(failed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::codec::{Framing, RegistryError};

    const RECORD: &str = "io.kubefacts.v1.DeadLetter";

    #[test]
    fn the_waits_double_from_100_ms_to_5_s() {
        let mut backoff = Backoff::new();
        let waits: Vec<u128> = (0..9).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn subjects_follow_the_topic_name_strategy() {
        assert_eq!(WriterSchema::value("t", RECORD).subject(), "t-value");
        assert_eq!(WriterSchema::key("t", RECORD).subject(), "t-key");
    }

    /// A registry on loopback answering every request by its method: `(status, body)`.
    /// Returns its URL and how many requests it answered.
    async fn registry(answer: fn(&str) -> (u16, &'static str)) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://svc:s3cr3t@{}/", listener.local_addr().unwrap());
        let served = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&served);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then the body its content-length announces.
                let complete = |r: &[u8]| {
                    let text = String::from_utf8_lossy(r);
                    let Some(end) = text.find("\r\n\r\n") else { return false };
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned)
                        })
                        .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                    r.len() >= end + 4 + length
                };
                while !complete(&request) {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let method = String::from_utf8_lossy(&request).split(' ').next().unwrap_or("").to_owned();
                let (status, body) = answer(&method);
                count.fetch_add(1, Ordering::Relaxed);
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        (url, served)
    }

    fn codec(url: &str) -> Codec {
        Codec::new(Some(RegistryClient::new(url, Duration::from_secs(5)).unwrap())).unwrap()
    }

    #[tokio::test]
    async fn a_failing_registry_is_waited_for_with_the_backoff_naming_it_and_the_subject() {
        let (url, served) = registry(|_| (503, r#"{"error_code":50301}"#)).await;
        let codec = codec(&url);
        let mut seen = Vec::new();
        let wanted = [WriterSchema::value("t", RECORD)];
        let registering = codec.register_writers(&wanted, |w| {
            assert!(w.registry.contains("127.0.0.1") && !w.registry.contains("s3cr3t"), "{}", w.registry);
            assert_eq!(w.subject, "t-value");
            assert!(w.error.to_string().contains("503"), "{}", w.error);
            seen.push((w.attempt, w.retry_in.as_millis()));
        });
        // 100 + 200 + 400 + 800 + 1600 ms of waits, and the attempts, in 3.5 s.
        let waited = tokio::time::timeout(Duration::from_millis(3500), registering).await;
        assert!(waited.is_err(), "gave up on a registry answering 503: {waited:?}");
        let waits: Vec<_> = seen.iter().map(|(_, ms)| *ms).collect();
        assert_eq!(waits[..5], [100, 200, 400, 800, 1600]);
        assert_eq!(
            seen.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            (1..=seen.len() as u32).collect::<Vec<_>>()
        );
        assert_eq!(served.load(Ordering::Relaxed), seen.len(), "one request per attempt");
    }

    #[tokio::test]
    async fn a_refusal_fails_at_once() {
        let (url, served) = registry(|_| (401, r#"{"message":"unauthorized"}"#)).await;
        let codec = codec(&url);
        let mut waits = 0;
        let e =
            codec.register_writers(&[WriterSchema::value("t", RECORD)], |_| waits += 1).await.unwrap_err();
        assert_eq!((waits, served.load(Ordering::Relaxed)), (0, 1));
        assert_eq!(e.subject, "t-value");
        assert!(
            matches!(&e.source, CodecError::Registry(RegistryError::Status { status, .. }) if status.as_u16() == 401)
        );
    }

    #[tokio::test]
    async fn registered_ids_are_kept_and_each_subject_is_asked_once() {
        // GET config: no level of its own; PUT config: set; POST: registered as id 7.
        let (url, served) = registry(|method| match method {
            "GET" => (404, r#"{"error_code":40401}"#),
            "PUT" => (200, r#"{"compatibility":"BACKWARD_TRANSITIVE"}"#),
            _ => (200, r#"{"id":7}"#),
        })
        .await;
        let codec = codec(&url);
        let wanted = [WriterSchema::value("t", RECORD), WriterSchema::value("t", RECORD)];
        assert_eq!(codec.register_writers(&wanted, |w| panic!("waited: {w:?}")).await.unwrap(), 0);
        assert_eq!(served.load(Ordering::Relaxed), 3, "level, set level, register: once");
        let writer = codec.value_writer("t", RECORD).await.unwrap();
        assert_eq!(writer.framing(), Framing::Confluent { schema_id: 7 });
        assert_eq!(served.load(Ordering::Relaxed), 3, "a writer of a registered subject asks nothing");
    }

    #[tokio::test]
    async fn without_a_registry_nothing_is_asked() {
        let codec = Codec::new(None).unwrap();
        let wanted = [WriterSchema::value("t", RECORD)];
        assert_eq!(codec.register_writers(&wanted, |w| panic!("waited: {w:?}")).await.unwrap(), 0);
    }
}
