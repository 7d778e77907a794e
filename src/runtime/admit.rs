//! What the runtime checks of every input record before it enters a task's merge: the
//! envelope (timestamp, heartbeat header, key, value), the bytes (decoded once, here) and
//! the topic's contract (an event that makes sense for the topic, its object, its key).
//! Both drivers admit the same way, so a record is refused for the same reason on Kafka
//! and in memory, and a refused record enters the merge carrying no time
//! ([`super::Mark::Void`]): it cannot hold its lane back or move stream time.

use super::{HEARTBEAT_KEY, clock::Writer, processor::DecodeInput, processor::ProcessError};
use std::borrow::Cow;

use crate::{
    codec::{Codec, CodecError},
    observe::{
        CronJobObservation, JobObservation, LeaseObservation, ObservationEvent, PodObservation,
        SessionObservation, Source,
    },
};

/// How a stage admits its inputs, by input index (co-partitioned inputs, then globals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRules {
    /// Inputs whose records are judged by the heartbeats that follow them (source topics
    /// the watcher heartbeats; [`super::Gate::checking`]).
    pub checked: Vec<usize>,
    /// Inputs whose dead letters are written elsewhere: by an earlier stage reading the
    /// same topic, or by this stage's co-partitioned read of a topic it also reads whole.
    /// A record is dead-lettered once, by the stage that owns its input.
    pub dead_lettered_elsewhere: Vec<usize>,
    /// How far ahead of the heartbeat after it a record of a checked input may be, ms.
    pub max_ahead_ms: i64,
}

impl Default for InputRules {
    /// Nothing checked, every dead letter written here.
    fn default() -> Self {
        Self { checked: Vec::new(), dead_lettered_elsewhere: Vec::new(), max_ahead_ms: i64::MAX }
    }
}

impl InputRules {
    /// Whether task `task` of `tasks` writes the dead letter of a record of `input`,
    /// partition `partition`: never for an input dead-lettered elsewhere; for a global
    /// input (`global`), which every task reads, only the task `partition % tasks`.
    pub fn writes_dead_letter(
        &self,
        input: usize,
        global: bool,
        partition: i32,
        task: i32,
        tasks: i32,
    ) -> bool {
        if self.dead_lettered_elsewhere.contains(&input) {
            return false;
        }
        !global || partition.rem_euclid(tasks.max(1)) == task
    }
}

/// A record as the runtime reads it, before decoding.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    /// Input index (co-partitioned inputs, then globals).
    pub input: usize,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// Value bytes.
    pub value: Option<&'a [u8]>,
    /// Its timestamp, epoch ms; `None` when the record has none.
    pub timestamp_ms: Option<i64>,
    /// Whether it carries the heartbeat header.
    pub time_header: bool,
    /// Its writer header: absent (`Some(SOLE)` is assumed by the caller), valid, or present
    /// and not `<task>/<tasks>` (`None`).
    pub writer: Option<Writer>,
}

/// What admission says of a record.
#[derive(Debug)]
pub enum Admitted<I> {
    /// A record its processor may use.
    Use(I),
    /// Forwarded stream time (the heartbeat header, the heartbeat key, no value).
    Time,
    /// A record nothing can use: dead-letter it with this reason.
    Reject {
        /// Bounded reason code.
        reason: &'static str,
        /// What was wrong, for people.
        detail: String,
    },
    /// It cannot be judged now (the schema registry is unreachable): admit it again later,
    /// and nothing after it on its lane before it.
    Retry(CodecError),
}

impl<I> Admitted<I> {
    fn reject(reason: &'static str, detail: impl Into<String>) -> Self {
        Self::Reject { reason, detail: detail.into() }
    }
}

/// Admits one record of a stage whose inputs decode as `I`.
pub async fn admit<I: DecodeInput>(codec: &Codec, env: Envelope<'_>) -> Admitted<I> {
    match env.timestamp_ms {
        None => return Admitted::reject("timestamp_out_of_range", "the record has no timestamp"),
        Some(ts) if ts < 0 => {
            return Admitted::reject(
                "timestamp_out_of_range",
                format!("timestamp {ts} ms is before the Unix epoch"),
            );
        }
        Some(_) => {}
    }
    let Some(_) = env.writer else {
        return Admitted::reject("bad_writer_header", "a kubefacts-writer header that is not <task>/<tasks>");
    };
    let Some(value) = env.value else {
        if !env.time_header {
            return Admitted::reject("null_value", "a record with a null value and no heartbeat header");
        }
        if env.key != Some(HEARTBEAT_KEY) {
            return Admitted::reject(
                "bad_heartbeat",
                format!("a forwarded heartbeat must be keyed {:?}", String::from_utf8_lossy(HEARTBEAT_KEY)),
            );
        }
        return Admitted::Time;
    };
    let decoded = match I::decode(env.input, codec, value).await {
        Ok(d) => d,
        Err(e) if e.is_retriable() => return Admitted::Retry(e),
        Err(e) => return Admitted::reject(e.reason(), e.to_string()),
    };
    match decoded.check(env.key, env.time_header) {
        Ok(()) => Admitted::Use(decoded),
        Err(ProcessError { reason, detail }) => Admitted::Reject { reason, detail },
    }
}

/// What an observation of a source topic must be (DESIGN §3): an APPLIED or DELETED event
/// carries its object and the key its topic is keyed by; a marker or heartbeat carries
/// neither, and a heartbeat names its publisher; only a heartbeat carries the heartbeat
/// header.
#[derive(Debug, Clone)]
pub struct ObservationShape<'a> {
    /// The kind, for messages (`Job`, `Pod`, …, `Session`).
    pub kind: &'static str,
    /// The event.
    pub event: ObservationEvent,
    /// Who published it.
    pub source: &'a Source,
    /// Whether it has its object.
    pub has_object: bool,
    /// The key the object's topic keys it by, when the reader can compute it (`None`: only
    /// presence is checked).
    pub expected_key: Option<Cow<'a, str>>,
    /// Whether snapshot markers belong on this topic (not on `sessions.v1`).
    pub markers: bool,
}

impl ObservationShape<'_> {
    /// Checks the shape against the record's key and heartbeat header.
    pub fn check(&self, key: Option<&[u8]>, time_header: bool) -> Result<(), ProcessError> {
        let kind = self.kind;
        let err = |reason, detail: String| Err(ProcessError { reason, detail });
        match self.event {
            ObservationEvent::Unknown => {
                err("unknown_event", format!("a {kind} event this reader does not know"))
            }
            ObservationEvent::Applied | ObservationEvent::Deleted => {
                if time_header {
                    return err("bad_heartbeat", format!("a {kind} event carrying the heartbeat header"));
                }
                if !self.has_object {
                    return err("missing_object", format!("a {kind} event without its {kind}"));
                }
                let Some(key) = key.filter(|k| !k.is_empty()) else {
                    return err("missing_key", format!("a {kind} event without a key"));
                };
                match &self.expected_key {
                    Some(expected) if key != expected.as_bytes() => err(
                        "wrong_key",
                        format!(
                            "a {kind} keyed {:?}, but its topic keys it by {expected:?}: it is on the wrong partition",
                            String::from_utf8_lossy(key)
                        ),
                    ),
                    _ => Ok(()),
                }
            }
            ObservationEvent::SnapshotBegin | ObservationEvent::SnapshotEnd | ObservationEvent::Heartbeat => {
                let heartbeat = self.event == ObservationEvent::Heartbeat;
                if !heartbeat && !self.markers {
                    return err(
                        "unexpected_marker",
                        format!("a snapshot marker on the {kind} topic, which is never relisted"),
                    );
                }
                if self.has_object {
                    return err("unexpected_object", format!("a {kind} marker or heartbeat with an object"));
                }
                if key.is_some() {
                    return err(
                        "unexpected_key",
                        format!("a {kind} marker or heartbeat with a key (they go to every partition)"),
                    );
                }
                if heartbeat && (self.source.cluster.is_empty() || self.source.instance.is_empty()) {
                    return err(
                        "bad_heartbeat",
                        "a heartbeat that does not name its publisher (cluster, instance)".into(),
                    );
                }
                if !heartbeat && time_header {
                    return err("bad_heartbeat", "a snapshot marker carrying the heartbeat header".into());
                }
                Ok(())
            }
        }
    }
}

/// The shape of a `jobs.v1` record: keyed by the Job's UID.
pub fn job_shape(o: &JobObservation) -> ObservationShape<'_> {
    ObservationShape {
        kind: "Job",
        event: o.event,
        source: &o.source,
        has_object: o.job.is_some(),
        expected_key: o.job.as_ref().map(|j| Cow::Borrowed(j.meta.uid.as_str())),
        markers: true,
    }
}

/// The shape of a `pods.v1` record: keyed by its routing key, which depends on the
/// publisher's session label, so only its presence is checked.
pub fn pod_shape(o: &PodObservation) -> ObservationShape<'_> {
    ObservationShape {
        kind: "Pod",
        event: o.event,
        source: &o.source,
        has_object: o.pod.is_some(),
        expected_key: None,
        markers: true,
    }
}

/// The shape of a `cronjobs.v1` record: keyed by the CronJob's UID.
pub fn cronjob_shape(o: &CronJobObservation) -> ObservationShape<'_> {
    ObservationShape {
        kind: "CronJob",
        event: o.event,
        source: &o.source,
        has_object: o.cronjob.is_some(),
        expected_key: o.cronjob.as_ref().map(|c| Cow::Borrowed(c.meta.uid.as_str())),
        markers: true,
    }
}

/// The shape of a `leases.v1` record: keyed by `namespace/name`.
pub fn lease_shape(o: &LeaseObservation) -> ObservationShape<'_> {
    ObservationShape {
        kind: "Lease",
        event: o.event,
        source: &o.source,
        has_object: o.lease.is_some(),
        expected_key: o.lease.as_ref().map(|l| Cow::Owned(format!("{}/{}", l.meta.namespace, l.meta.name))),
        markers: true,
    }
}

/// The shape of a `sessions.v1` record: keyed by the session id; never relisted, so no
/// snapshot markers.
pub fn session_shape(o: &SessionObservation) -> ObservationShape<'_> {
    ObservationShape {
        kind: "Session",
        event: o.event,
        source: &o.source,
        has_object: o.session.is_some(),
        expected_key: o.session.as_ref().map(|s| Cow::Borrowed(s.session_id.as_str())),
        markers: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Source;

    fn source() -> Source {
        Source { cluster: "c".into(), instance: "w-0".into(), epoch: 1 }
    }

    fn shape(event: ObservationEvent, has_object: bool, source: &Source) -> ObservationShape<'_> {
        ObservationShape {
            kind: "Job",
            event,
            source,
            has_object,
            expected_key: Some(Cow::Borrowed("uid-1")),
            markers: true,
        }
    }

    #[test]
    fn each_break_of_the_topic_contract_has_its_reason() {
        let src = source();
        let reason = |s: ObservationShape<'_>, key: Option<&[u8]>, header: bool| {
            s.check(key, header).err().map(|e| e.reason)
        };
        use ObservationEvent::*;
        assert_eq!(reason(shape(Applied, true, &src), Some(b"uid-1"), false), None);
        assert_eq!(reason(shape(Applied, true, &src), None, false), Some("missing_key"));
        assert_eq!(reason(shape(Applied, true, &src), Some(b""), false), Some("missing_key"));
        assert_eq!(reason(shape(Applied, true, &src), Some(b"uid-2"), false), Some("wrong_key"));
        assert_eq!(reason(shape(Applied, false, &src), Some(b"uid-1"), false), Some("missing_object"));
        assert_eq!(reason(shape(Deleted, true, &src), Some(b"uid-1"), true), Some("bad_heartbeat"));
        assert_eq!(reason(shape(Unknown, true, &src), Some(b"uid-1"), false), Some("unknown_event"));
        assert_eq!(reason(shape(Heartbeat, false, &src), None, true), None);
        assert_eq!(
            reason(shape(Heartbeat, false, &src), None, false),
            None,
            "an unmarked heartbeat is still time"
        );
        assert_eq!(reason(shape(Heartbeat, false, &src), Some(b"k"), true), Some("unexpected_key"));
        assert_eq!(reason(shape(Heartbeat, true, &src), None, true), Some("unexpected_object"));
        let anonymous = Source { cluster: String::new(), instance: "w".into(), epoch: 1 };
        assert_eq!(reason(shape(Heartbeat, false, &anonymous), None, true), Some("bad_heartbeat"));
        assert_eq!(reason(shape(SnapshotEnd, false, &src), None, true), Some("bad_heartbeat"));
        let mut on_sessions = shape(SnapshotBegin, false, &src);
        on_sessions.markers = false;
        assert_eq!(reason(on_sessions, None, false), Some("unexpected_marker"));
    }
}
