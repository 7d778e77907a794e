//! Kafka refusing a client: authentication failed, or an ACL is missing. Neither is
//! transient — librdkafka would retry forever, and a shell that logs and carries on never
//! tells the operator which ACL is missing — so every shell stops on one with a
//! [`Refused`] naming the principal and the refused resource.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rdkafka::{
    ClientContext, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::DeliveryResult,
    producer::ProducerContext,
    producer::{BaseProducer, Producer},
    types::RDKafkaErrorCode,
};
use thiserror::Error;

use super::Brokers;

/// Where to look for the ACLs a component needs, said after every refusal.
const ACL_HINT: &str =
    "docs/security.md lists the ACLs of each component; `kubefacts acls --config <pipeline>` prints them";

/// Kafka refused this client. Never retried.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Refused {
    /// The brokers did not accept the client's credentials (or its TLS handshake).
    #[error("kafka at {bootstrap} refused to authenticate {principal}: {reason}")]
    Authentication {
        /// Who the client tried to be.
        principal: String,
        /// The bootstrap servers.
        bootstrap: String,
        /// librdkafka's reason (it never holds the password).
        reason: String,
    },
    /// An ACL on a topic is missing.
    #[error(
        "kafka refused {principal} {operation} on topic {topic} (topic authorization failed); {ACL_HINT}"
    )]
    Topic {
        /// The principal.
        principal: String,
        /// The refused operation (`read`, `write`, `describe`).
        operation: &'static str,
        /// The topic.
        topic: String,
    },
    /// A refusal on a topic that could not be narrowed to one of the candidates.
    #[error(
        "kafka refused {principal} {operation} on one of the topics {topics:?} (topic authorization failed); {ACL_HINT}"
    )]
    SomeTopic {
        /// The principal.
        principal: String,
        /// The refused operation.
        operation: &'static str,
        /// The topics the client used.
        topics: Vec<String>,
    },
    /// The group ACL is missing.
    #[error(
        "kafka refused {principal} access to consumer group {group} (group authorization failed); {ACL_HINT}"
    )]
    Group {
        /// The principal.
        principal: String,
        /// The consumer group.
        group: String,
    },
    /// The transactional id ACL is missing.
    #[error(
        "kafka refused {principal} write on transactional id {transactional_id} (transactional id authorization failed); {ACL_HINT}"
    )]
    TransactionalId {
        /// The principal.
        principal: String,
        /// The transactional id.
        transactional_id: String,
    },
    /// A cluster ACL is missing (creating topics, idempotent writes on old brokers).
    #[error("kafka refused {principal} {doing} (cluster authorization failed); {ACL_HINT}")]
    Cluster {
        /// The principal.
        principal: String,
        /// What was being done.
        doing: &'static str,
    },
}

/// How long a running client retries failed authentication before it counts as a refusal.
pub const REAUTHENTICATION_GRACE: Duration = Duration::from_secs(30);

/// Authentication failures met by a client that has already authenticated (every
/// component checks its credentials at start, [`Brokers::check_authentication`]).
///
/// Failed authentication after that is mostly a broker restarting. A broker that is
/// shutting down drops the SASL exchange halfway, and a broker that has just started may
/// not have replayed the SCRAM credentials yet. Both read as `Local: Authentication
/// failure`; a rolling restart stopped a restore with one in CI. So a running client stops
/// only on a streak: failures that keep coming (each within the grace of the last) for
/// [`REAUTHENTICATION_GRACE`]. Revoked credentials fail every reconnect, at most 10 s
/// apart (librdkafka's `reconnect.backoff.max.ms`), so they still stop it, about 30 s
/// later. Authorization refusals stop it at once: a restart does not cause them.
#[derive(Debug, Default)]
pub struct Reauthentication {
    /// The first and the latest failure of the current streak.
    streak: Option<(Instant, Instant)>,
}

impl Reauthentication {
    /// The refusal code `e` is for a running client: an authorization refusal at once, an
    /// authentication one once its streak has lasted [`REAUTHENTICATION_GRACE`].
    pub fn refusal_code(&mut self, e: &KafkaError) -> Option<RDKafkaErrorCode> {
        self.judge(e, Instant::now())
    }

    fn judge(&mut self, e: &KafkaError, now: Instant) -> Option<RDKafkaErrorCode> {
        let code = refusal_code(e)?;
        if !is_authentication(code) {
            return Some(code);
        }
        let first = match self.streak {
            Some((first, last)) if now.saturating_duration_since(last) < REAUTHENTICATION_GRACE => first,
            _ => now,
        };
        self.streak = Some((first, now));
        let lasted = now.saturating_duration_since(first);
        if lasted >= REAUTHENTICATION_GRACE {
            return Some(code);
        }
        tracing::warn!(error = %e, ?lasted, "kafka failed to authenticate a running client; retrying (a broker restarting)");
        None
    }
}

/// Whether `code` is a failed login (SASL or TLS) rather than a missing ACL.
fn is_authentication(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(code, C::Authentication | C::SaslAuthenticationFailed | C::SSL)
}

/// The error codes of a refusal: nothing a retry changes.
pub fn refusal_code(e: &KafkaError) -> Option<RDKafkaErrorCode> {
    use RDKafkaErrorCode as C;
    e.rdkafka_error_code().filter(|c| {
        matches!(
            c,
            C::Authentication
                | C::SaslAuthenticationFailed
                | C::TopicAuthorizationFailed
                | C::GroupAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::TransactionalIdAuthorizationFailed
                | C::SSL
        )
    })
}

impl Brokers {
    /// What a refusal of `code` met while `doing` something with `topics` (as `operation`),
    /// in `group` or as `transactional_id`, names. A topic refusal is narrowed down by
    /// [`Brokers::refused_topic`].
    pub fn refusal(&self, code: RDKafkaErrorCode, what: Refusing<'_>) -> Refused {
        let principal = self.principal();
        match (code, what.group, what.transactional_id) {
            (RDKafkaErrorCode::GroupAuthorizationFailed, Some(group), _) => {
                Refused::Group { principal, group: group.to_owned() }
            }
            (RDKafkaErrorCode::TransactionalIdAuthorizationFailed, _, Some(id)) => {
                Refused::TransactionalId { principal, transactional_id: id.to_owned() }
            }
            (RDKafkaErrorCode::ClusterAuthorizationFailed, ..) => {
                Refused::Cluster { principal, doing: what.doing }
            }
            (RDKafkaErrorCode::TopicAuthorizationFailed, ..) => {
                let named = match what.topics {
                    [only] => Some(only.clone()),
                    _ => self.refused_topic(what.operation, what.topics, what.group),
                };
                match named {
                    Some(topic) => Refused::Topic { principal, operation: what.operation, topic },
                    None => Refused::SomeTopic {
                        principal,
                        operation: what.operation,
                        topics: what.topics.to_vec(),
                    },
                }
            }
            (other, ..) => Refused::Authentication {
                principal,
                bootstrap: self.bootstrap.clone(),
                reason: format!("{other} while {}", what.doing),
            },
        }
    }

    /// Which of `topics` this client may not use for `operation`: a topic it may not even
    /// describe (every ACL on a topic implies describe) or, for `read`, one it cannot fetch
    /// from (a consumer assigned the end of partition 0 in `group`, which it never joins,
    /// for up to 2 s each). Called only after a refusal, to name the topic librdkafka's
    /// error does not carry.
    pub fn refused_topic(&self, operation: &str, topics: &[String], group: Option<&str>) -> Option<String> {
        let probe: BaseConsumer<Watch> = self.client().create_with_context(Watch::default()).ok()?;
        let metadata = probe.fetch_metadata(None, Duration::from_secs(5)).ok()?;
        let describable: Vec<&str> = metadata.topics().iter().map(|t| t.name()).collect();
        if let Some(t) = topics.iter().find(|t| !describable.contains(&t.as_str())) {
            return Some(t.clone());
        }
        let group = group.filter(|_| operation == "read")?;
        topics
            .iter()
            .find(|topic| {
                let mut config = self.client();
                config.set("group.id", group).set("enable.auto.commit", "false");
                let Ok(fetcher) = config.create::<BaseConsumer>() else {
                    return false;
                };
                let mut tpl = TopicPartitionList::new();
                if tpl.add_partition_offset(topic, 0, Offset::End).is_err() || fetcher.assign(&tpl).is_err() {
                    return false;
                }
                let deadline = Instant::now() + Duration::from_secs(2);
                while Instant::now() < deadline {
                    if let Some(Err(e)) = fetcher.poll(Duration::from_millis(100))
                        && refusal_code(&e) == Some(RDKafkaErrorCode::TopicAuthorizationFailed)
                    {
                        return true;
                    }
                }
                false
            })
            .cloned()
    }

    /// Connects once and fails at start when the brokers refuse this client's credentials,
    /// instead of librdkafka retrying them forever. Cluster metadata only: no ACL needed.
    pub fn check_authentication(&self, timeout: Duration) -> Result<(), Refused> {
        let watch = Watch::default();
        // A producer: polling it serves the client's main queue, where librdkafka's log
        // lines and errors wait (a consumer outside a group never serves it).
        let Ok(probe) = self.client().create_with_context::<_, BaseProducer<Watch>>(watch.clone()) else {
            // A client that cannot be built fails with its own error where it is built.
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(reason) = watch.refusal() {
                return Err(Refused::Authentication {
                    principal: self.principal(),
                    bootstrap: self.bootstrap.clone(),
                    reason,
                });
            }
            if probe.client().fetch_metadata(None, Duration::from_millis(500)).is_ok() {
                return Ok(());
            }
            probe.poll(Duration::from_millis(100));
        }
        // Unreachable brokers are not a refusal: the clients wait for them as before.
        Ok(())
    }
}

/// Whether `topic`, which a metadata answer left out or marked with an error, is refused
/// to this client rather than missing: an all-topics answer leaves out what the client
/// may not describe, and a named request for such a topic says authorization failed
/// (whether or not the topic exists, which the broker does not tell).
pub fn describe_refused<C: ClientContext>(client: &rdkafka::client::Client<C>, topic: &str) -> bool {
    client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()
        .and_then(|m| m.topics().first().and_then(|t| t.error()))
        .is_some_and(|e| RDKafkaErrorCode::from(e) == RDKafkaErrorCode::TopicAuthorizationFailed)
}

/// What was being done when Kafka refused: the names a refusal can be about.
#[derive(Debug, Clone, Copy)]
pub struct Refusing<'a> {
    /// The action, for messages ("consuming", "committing a transaction").
    pub doing: &'static str,
    /// The operation on `topics`: `read`, `write` or `describe`.
    pub operation: &'static str,
    /// The topics used that way.
    pub topics: &'a [String],
    /// The consumer group, if any.
    pub group: Option<&'a str>,
    /// The transactional id, if any.
    pub transactional_id: Option<&'a str>,
}

impl<'a> Refusing<'a> {
    /// A consumer `doing` something with `topics`, reading them in `group`.
    pub fn reading(doing: &'static str, topics: &'a [String], group: &'a str) -> Self {
        Self { doing, operation: "read", topics, group: Some(group), transactional_id: None }
    }
}

/// A client context that remembers the first refusal librdkafka reports as a global error
/// (authentication failures arrive only there) and the first refused delivery (the
/// delivery report names its topic, which a failed transaction commit does not).
#[derive(Debug, Clone, Default)]
pub struct Watch {
    refused: Arc<Mutex<Option<String>>>,
    refused_topic: Arc<Mutex<Option<String>>>,
}

impl Watch {
    /// The first refusal's reason, if any.
    pub fn refusal(&self) -> Option<String> {
        self.refused.lock().ok()?.clone()
    }

    /// The topic of the first delivery refused for authorization, if any.
    pub fn refused_delivery(&self) -> Option<String> {
        self.refused_topic.lock().ok()?.clone()
    }
}

impl ClientContext for Watch {
    /// librdkafka's log lines, as rust-rdkafka's default logs them; one is also read: a
    /// transaction refused a topic names it only in its `ADDPARTS` error line (the commit
    /// fails without the name, and the records never get a delivery report).
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        // A refused login is logged as the connection failing, and reaches the error
        // callback only when a consumer polls; the log line says why.
        if fac == "FAIL"
            && (message.contains("SASL authentication error") || message.contains("SSL handshake failed"))
            && let Ok(mut r) = self.refused.lock()
        {
            let reason = message.split_once("]: ").map_or(message, |(_, m)| m);
            r.get_or_insert_with(|| reason.to_owned());
        }
        if fac == "ADDPARTS"
            && message.contains("authorization failed")
            && let Some(topic) = message.split('"').nth(1)
            && let Ok(mut t) = self.refused_topic.lock()
        {
            t.get_or_insert_with(|| topic.to_owned());
        }
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}");
            }
            L::Warning => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Notice | L::Info => tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if refusal_code(&error).is_some() {
            if let Ok(mut r) = self.refused.lock() {
                r.get_or_insert_with(|| reason.to_owned());
            }
            tracing::error!(error = %error, reason, "kafka refused this client");
        } else {
            tracing::warn!(error = %error, reason, "kafka client error");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Watch {}

impl ProducerContext for Watch {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result
            && refusal_code(e) == Some(RDKafkaErrorCode::TopicAuthorizationFailed)
            && let Ok(mut t) = self.refused_topic.lock()
        {
            t.get_or_insert_with(|| m.topic().to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> KafkaError {
        KafkaError::MessageConsumption(RDKafkaErrorCode::Authentication)
    }

    #[test]
    fn an_authorization_refusal_counts_at_once() {
        let mut r = Reauthentication::default();
        let e = KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert_eq!(r.judge(&e, Instant::now()), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
    }

    #[test]
    fn a_failed_login_counts_only_once_its_streak_lasts_the_grace() {
        let mut r = Reauthentication::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // A broker restarting: two failures, then a long quiet.
        assert_eq!(r.judge(&auth(), t0), None);
        assert_eq!(r.judge(&auth(), t0 + s(2)), None);
        // The next failure, much later, starts a streak of its own.
        assert_eq!(r.judge(&auth(), t0 + s(40)), None);
        // Revoked credentials: a failure every reconnect, 10 s apart.
        assert_eq!(r.judge(&auth(), t0 + s(50)), None);
        assert_eq!(r.judge(&auth(), t0 + s(60)), None);
        assert_eq!(r.judge(&auth(), t0 + s(70)), Some(RDKafkaErrorCode::Authentication));
    }

    #[test]
    fn other_errors_are_no_refusal() {
        let mut r = Reauthentication::default();
        let e = KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(r.judge(&e, Instant::now()), None);
    }
}
