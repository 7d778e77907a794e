//! What an observation of each source topic must be (DESIGN §3): the topic's contract that
//! a stage checks after decoding ([`crate::runtime::DecodeInput::check`]), so a record that
//! breaks it is dead-lettered with its reason by the runtime, the same on Kafka and in
//! memory.

use std::borrow::Cow;

use super::{
    CronJobObservation, JobObservation, LeaseObservation, ObservationEvent, PodObservation,
    SessionObservation, Source,
};
use crate::runtime::{ProcessError, Publisher, Reason, Stamp};

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
    /// Other keys it may have where the reader cannot tell which is right (a Pod of no Job:
    /// its session label's value or its UID, the label depending on the publisher).
    pub also_keys: Vec<&'a str>,
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
                err(Reason::UnknownEvent, format!("a {kind} event this reader does not know"))
            }
            ObservationEvent::Applied | ObservationEvent::Deleted => {
                if time_header {
                    return err(
                        Reason::BadHeartbeat,
                        format!("a {kind} event carrying the heartbeat header"),
                    );
                }
                if !self.has_object {
                    return err(Reason::MissingObject, format!("a {kind} event without its {kind}"));
                }
                let Some(key) = key.filter(|k| !k.is_empty()) else {
                    return err(Reason::MissingKey, format!("a {kind} event without a key"));
                };
                match &self.expected_key {
                    Some(expected)
                        if key != expected.as_bytes()
                            && !self.also_keys.iter().any(|k| k.as_bytes() == key) =>
                    {
                        err(
                            Reason::WrongKey,
                            format!(
                                "a {kind} keyed {:?}, but its topic keys it by {expected:?}: it is on the wrong partition",
                                String::from_utf8_lossy(key)
                            ),
                        )
                    }
                    _ => Ok(()),
                }
            }
            ObservationEvent::SnapshotBegin | ObservationEvent::SnapshotEnd | ObservationEvent::Heartbeat => {
                let heartbeat = self.event == ObservationEvent::Heartbeat;
                if !heartbeat && !self.markers {
                    return err(
                        Reason::UnexpectedMarker,
                        format!("a snapshot marker on the {kind} topic, which is never relisted"),
                    );
                }
                if self.has_object {
                    return err(
                        Reason::UnexpectedObject,
                        format!("a {kind} marker or heartbeat with an object"),
                    );
                }
                if key.is_some() {
                    return err(
                        Reason::UnexpectedKey,
                        format!("a {kind} marker or heartbeat with a key (they go to every partition)"),
                    );
                }
                if heartbeat && (self.source.cluster.is_empty() || self.source.instance.is_empty()) {
                    return err(
                        Reason::BadHeartbeat,
                        "a heartbeat that does not name its publisher (cluster, instance)".into(),
                    );
                }
                if !heartbeat && time_header {
                    return err(
                        Reason::BadHeartbeat,
                        "a snapshot marker carrying the heartbeat header".into(),
                    );
                }
                Ok(())
            }
        }
    }
}

/// The shape of a `jobs.v1` record: keyed by the Job's UID.
pub fn job_shape(o: &JobObservation) -> ObservationShape<'_> {
    job_shape_of(o.event, &o.source, o.job.as_ref().map(|j| j.meta.uid.as_str()))
}

/// [`job_shape`] from an observation's parts: its event, source and Job UID (`None`: no
/// Job), for a reader that keeps only those.
pub fn job_shape_of<'a>(
    event: ObservationEvent,
    source: &'a Source,
    uid: Option<&'a str>,
) -> ObservationShape<'a> {
    ObservationShape {
        kind: "Job",
        event,
        source,
        has_object: uid.is_some(),
        expected_key: uid.map(Cow::Borrowed),
        markers: true,
        also_keys: Vec::new(),
    }
}

/// The shape of a `pods.v1` record: keyed by its routing key (`super::pod_routing_key`) —
/// its controlling Job's UID; else its session label's value, else its UID. Which label is
/// the session label is the publisher's setting, so a Pod of no Job may be keyed by its UID
/// or by the value of one of its (allowlisted) labels, and nothing else.
pub fn pod_shape(o: &PodObservation) -> ObservationShape<'_> {
    let Some(pod) = &o.pod else { return pod_shape_of(o.event, &o.source, None) };
    let job = pod.controller.as_ref().filter(|c| c.kind == super::Kind::Job);
    let mut shape = pod_shape_of(o.event, &o.source, Some(job.map_or(&pod.meta.uid, |c| &c.uid)));
    if job.is_none() {
        shape.also_keys = pod.meta.labels.values().map(String::as_str).filter(|v| !v.is_empty()).collect();
    }
    shape
}

/// [`pod_shape`] of a view of the observation: its event, its source and, when it has its
/// Pod, the key it must have (`None`: no Pod). A view that keeps only a Job-controlled
/// Pod's Job gives the Job's UID, and for any other Pod nothing to compare (`Some(None)`
/// is not possible here: such a view passes [`ObservationShape::expected_key`] `None`
/// through [`pod_shape_unchecked`]).
pub fn pod_shape_of<'a>(
    event: ObservationEvent,
    source: &'a Source,
    key: Option<&'a str>,
) -> ObservationShape<'a> {
    ObservationShape {
        kind: "Pod",
        event,
        source,
        has_object: key.is_some(),
        expected_key: key.map(Cow::Borrowed),
        also_keys: Vec::new(),
        markers: true,
    }
}

/// [`pod_shape_of`] of a view that has its Pod but cannot say its key (a Pod of no Job, as
/// `[runs]` glances at it): only the key's presence is checked.
pub fn pod_shape_unchecked(event: ObservationEvent, source: &Source) -> ObservationShape<'_> {
    ObservationShape { expected_key: None, has_object: true, ..pod_shape_of(event, source, None) }
}

/// What an observation says of its time and publisher ([`crate::runtime::Stamp`]): its
/// `observed_at`, and for a heartbeat or snapshot marker its source.
pub fn stamp(source: &Source, event: ObservationEvent, observed_at: i64) -> Stamp<'_> {
    let marker = matches!(
        event,
        ObservationEvent::Heartbeat | ObservationEvent::SnapshotBegin | ObservationEvent::SnapshotEnd
    );
    let publisher = marker.then_some(Publisher {
        cluster: &source.cluster,
        instance: &source.instance,
        epoch: source.epoch,
        begins: event == ObservationEvent::SnapshotBegin,
    });
    Stamp { observed_at_ms: observed_at, publisher }
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
        also_keys: Vec::new(),
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
        also_keys: Vec::new(),
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
        also_keys: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            also_keys: Vec::new(),
        }
    }

    #[test]
    fn each_break_of_the_topic_contract_has_its_reason() {
        let src = source();
        let reason = |s: ObservationShape<'_>, key: Option<&[u8]>, header: bool| {
            s.check(key, header).err().map(|e| e.reason.as_str())
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
