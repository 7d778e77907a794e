//! Observations: what the watcher publishes (DESIGN §3), shared by the watcher, `replay`
//! and the embedded `demo`.
//!
//! * [`model`] — the five observation records, mirroring `schemas/*-observation.avsc`.
//! * [`minimize`] — the allowlist from Kubernetes objects to those records.
//! * [`observe`] — one trace entry to the observations to publish, each with its topic and
//!   key (DESIGN §2):
//!
//! | entry | topic | key |
//! |---|---|---|
//! | Pod | pods | routing key ([`pod_routing_key`]) |
//! | Job | jobs | Job UID |
//! | CronJob | cronjobs | CronJob UID |
//! | Lease | leases | `namespace/name` |
//! | Namespace | — | none: namespaces feed admission only and are never published |
//! | SESSION | sessions | session id |
//! | HEARTBEAT | every input topic | none: written to every partition |
//! | SNAPSHOT_BEGIN/END | every watched topic (not sessions) | none: written to every partition |

pub mod admission;
pub mod annotations;
mod datum;
mod error;
pub mod kind;
pub mod memory;
pub mod minimize;
pub mod model;
pub mod shape;
#[cfg(test)]
mod tests;
pub mod topics;

use serde::Serialize;

pub use admission::{Admission, AdmissionConfig, AdmissionCounts};
pub use error::ObserveError;
pub use kind::Kind;
pub use minimize::{Cuts, MinimizeConfig};
pub use model::{
    CronJobObservation, JobObservation, LeaseObservation, ObservationEvent, Pod, PodObservation,
    SessionObservation, Source,
};

use crate::{
    codec::{CodecError, RecordWriter},
    observe::topics::TopicsConfig,
    trace::{KeptKeys, MinimalEntry, MinimalObject, TraceEvent},
};

/// The input topics observations are published to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InputTopic {
    /// `pods.v1`: [`PodObservation`].
    Pods,
    /// `jobs.v1`: [`JobObservation`].
    Jobs,
    /// `cronjobs.v1`: [`CronJobObservation`].
    CronJobs,
    /// `leases.v1`: [`LeaseObservation`].
    Leases,
    /// `sessions.v1`: [`SessionObservation`], written by the host application.
    Sessions,
}

impl InputTopic {
    /// Every input topic: HEARTBEATs go to all of them.
    pub const ALL: [InputTopic; 5] = [Self::Pods, Self::Jobs, Self::CronJobs, Self::Leases, Self::Sessions];

    /// The topics whose objects the watcher lists: snapshot markers go to these only.
    /// `sessions.v1` is never relisted (its producer keeps a constant epoch), so a
    /// snapshot marker there would wrongly declare every session deleted-while-unobserved.
    pub const WATCHED: [InputTopic; 4] = [Self::Pods, Self::Jobs, Self::CronJobs, Self::Leases];

    /// The full topic name from the configuration, e.g. `kubefacts.pods.v1`.
    pub fn topic_name(self, topics: &TopicsConfig) -> String {
        topics.full(match self {
            Self::Pods => &topics.pods,
            Self::Jobs => &topics.jobs,
            Self::CronJobs => &topics.cronjobs,
            Self::Leases => &topics.leases,
            Self::Sessions => &topics.sessions,
        })
    }

    /// Full name of the record this topic carries.
    pub fn full_name(self) -> &'static str {
        match self {
            Self::Pods => PodObservation::FULL_NAME,
            Self::Jobs => JobObservation::FULL_NAME,
            Self::CronJobs => CronJobObservation::FULL_NAME,
            Self::Leases => LeaseObservation::FULL_NAME,
            Self::Sessions => SessionObservation::FULL_NAME,
        }
    }

    /// The Kubernetes kind whose objects this topic carries (`None` for sessions).
    pub fn kind(self) -> Option<Kind> {
        match self {
            Self::Pods => Some(Kind::Pod),
            Self::Jobs => Some(Kind::Job),
            Self::CronJobs => Some(Kind::CronJob),
            Self::Leases => Some(Kind::Lease),
            Self::Sessions => None,
        }
    }

    /// A bounded label for metrics (`pods`, `jobs`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pods => "pods",
            Self::Jobs => "jobs",
            Self::CronJobs => "cronjobs",
            Self::Leases => "leases",
            Self::Sessions => "sessions",
        }
    }
}

/// One observation record of any input topic. Serializes (untagged) as the inner record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ObservationRecord {
    /// On `pods.v1`.
    Pod(PodObservation),
    /// On `jobs.v1`.
    Job(JobObservation),
    /// On `cronjobs.v1`.
    CronJob(CronJobObservation),
    /// On `leases.v1`.
    Lease(LeaseObservation),
    /// On `sessions.v1`.
    Session(SessionObservation),
}

impl ObservationRecord {
    /// A marker or heartbeat (no object) for `topic`.
    pub fn marker(topic: InputTopic, source: Source, observed_at: i64, event: ObservationEvent) -> Self {
        match topic {
            InputTopic::Pods => Self::Pod(PodObservation { source, observed_at, event, pod: None }),
            InputTopic::Jobs => Self::Job(JobObservation { source, observed_at, event, job: None }),
            InputTopic::CronJobs => {
                Self::CronJob(CronJobObservation { source, observed_at, event, cronjob: None })
            }
            InputTopic::Leases => Self::Lease(LeaseObservation { source, observed_at, event, lease: None }),
            InputTopic::Sessions => {
                Self::Session(SessionObservation { source, observed_at, event, session: None })
            }
        }
    }

    /// The topic this record belongs on.
    pub fn topic(&self) -> InputTopic {
        match self {
            Self::Pod(_) => InputTopic::Pods,
            Self::Job(_) => InputTopic::Jobs,
            Self::CronJob(_) => InputTopic::CronJobs,
            Self::Lease(_) => InputTopic::Leases,
            Self::Session(_) => InputTopic::Sessions,
        }
    }

    /// Full name of the record's Avro schema.
    pub fn full_name(&self) -> &'static str {
        self.topic().full_name()
    }

    /// Who published it.
    pub fn source(&self) -> &Source {
        match self {
            Self::Pod(r) => &r.source,
            Self::Job(r) => &r.source,
            Self::CronJob(r) => &r.source,
            Self::Lease(r) => &r.source,
            Self::Session(r) => &r.source,
        }
    }

    /// When it was observed, epoch ms.
    pub fn observed_at(&self) -> i64 {
        match self {
            Self::Pod(r) => r.observed_at,
            Self::Job(r) => r.observed_at,
            Self::CronJob(r) => r.observed_at,
            Self::Lease(r) => r.observed_at,
            Self::Session(r) => r.observed_at,
        }
    }

    /// What it reports.
    pub fn event(&self) -> ObservationEvent {
        match self {
            Self::Pod(r) => r.event,
            Self::Job(r) => r.event,
            Self::CronJob(r) => r.event,
            Self::Lease(r) => r.event,
            Self::Session(r) => r.event,
        }
    }

    /// Reads an Avro value of `topic`'s schema (as [`crate::codec::Codec::decode`] returns
    /// it, resolved to the current schema) into the matching record.
    pub fn from_value(
        topic: InputTopic,
        value: &apache_avro::types::Value,
    ) -> Result<Self, apache_avro::Error> {
        use apache_avro::from_value;
        Ok(match topic {
            InputTopic::Pods => Self::Pod(from_value(value)?),
            InputTopic::Jobs => Self::Job(from_value(value)?),
            InputTopic::CronJobs => Self::CronJob(from_value(value)?),
            InputTopic::Leases => Self::Lease(from_value(value)?),
            InputTopic::Sessions => Self::Session(from_value(value)?),
        })
    }

    /// Encodes with `writer`, which must write this record's schema ([`Self::full_name`]);
    /// a writer of another schema fails ([`CodecError::UnknownRecord`] for the records written
    /// directly, [`CodecError::Encode`] for the others).
    pub fn encode(&self, writer: &RecordWriter) -> Result<Vec<u8>, CodecError> {
        // Pods and Jobs are nearly every record: written field by field (`codec::direct`).
        match self {
            Self::Pod(r) => writer.encode_direct(r),
            Self::Job(r) => writer.encode_direct(r),
            Self::CronJob(r) => writer.encode(r),
            Self::Lease(r) => writer.encode(r),
            Self::Session(r) => writer.encode(r),
        }
    }
}

/// One record to publish, with its topic and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Where it goes.
    pub topic: InputTopic,
    /// The Kafka key (DESIGN §2); `None` for markers and heartbeats, which the publisher
    /// writes to every partition of the topic.
    pub key: Option<String>,
    /// The record.
    pub record: ObservationRecord,
}

/// A Pod's routing key: the controlling Job's UID when a Job controls it, else the session
/// label's value when present and non-empty, else the Pod's UID. Computed from the
/// minimized record only, so a reader can check it.
pub fn pod_routing_key<'a>(pod: &'a Pod, session_label: &str) -> &'a str {
    match &pod.controller {
        Some(owner) if owner.kind == Kind::Job => &owner.uid,
        _ => pod.meta.labels.get(session_label).filter(|v| !v.is_empty()).unwrap_or(&pod.meta.uid),
    }
}

/// The largest observation published, key and value in bytes: the producer's
/// `message.max.bytes` less a record batch's overhead. What is still larger once bounded
/// (an allowlisted annotation of megabytes, which no API server admits) is skipped by the
/// publisher and by [`memory::MemInputs`] alike, counted and logged with its key.
pub const MAX_OBSERVATION_BYTES: usize = crate::runtime::deadletter::DEFAULT_MAX_BYTES;

/// Whether an encoded observation fits [`MAX_OBSERVATION_BYTES`]; if not, says so in the log,
/// naming its topic and key.
pub fn fits(topic: InputTopic, key: Option<&str>, value: &[u8]) -> bool {
    let bytes = key.map_or(0, str::len) + value.len();
    if bytes <= MAX_OBSERVATION_BYTES {
        return true;
    }
    tracing::warn!(
        topic = topic.as_str(),
        key = key.unwrap_or(""),
        bytes,
        limit = MAX_OBSERVATION_BYTES,
        "observation larger than the producer's limit, bounded as it is: skipped"
    );
    false
}

/// The observations one trace entry yields (see the module table). Pure: `source` is
/// used as given, except that snapshot markers carry their own epoch; callers advance
/// `source.epoch` at SNAPSHOT_BEGIN ([`Observer`] does).
pub fn observe(
    entry: MinimalEntry,
    source: &Source,
    cfg: &MinimizeConfig,
) -> Result<Vec<Observation>, ObserveError> {
    let at = entry.observed_at_ms;
    observe_at(entry, at, source, cfg)
}

/// [`observe`], stamping the observations `at` (the entry's time, or later: [`Observer`]).
/// The entry is taken by value: its strings move into the records, not copied.
pub fn observe_at(
    entry: MinimalEntry,
    at: i64,
    source: &Source,
    cfg: &MinimizeConfig,
) -> Result<Vec<Observation>, ObserveError> {
    observe_counting(entry, at, source, cfg, &mut Cuts::default())
}

/// [`observe_at`], adding what minimization's bounds cut to `cuts`.
fn observe_counting(
    entry: MinimalEntry,
    at: i64,
    source: &Source,
    cfg: &MinimizeConfig,
    cuts: &mut Cuts,
) -> Result<Vec<Observation>, ObserveError> {
    use ObservationEvent as E;
    let (object, event) = match entry.event {
        TraceEvent::Applied(object) => (object, E::Applied),
        TraceEvent::Deleted(object) => (object, E::Deleted),
        TraceEvent::Heartbeat => return Ok(markers(&InputTopic::ALL, source, at, E::Heartbeat)),
        TraceEvent::SnapshotBegin { epoch, kinds } => {
            let source = Source { epoch, ..source.clone() };
            return Ok(markers(&relisted(kinds.as_deref()), &source, at, E::SnapshotBegin));
        }
        TraceEvent::SnapshotEnd { epoch, kinds } => {
            let source = Source { epoch, ..source.clone() };
            return Ok(markers(&relisted(kinds.as_deref()), &source, at, E::SnapshotEnd));
        }
        TraceEvent::Session(record) => {
            let session = minimize::session(&record, at)?;
            let key = session.session_id.clone();
            let record = SessionObservation {
                source: source.clone(),
                observed_at: at,
                event: E::Applied,
                session: Some(session),
            };
            return Ok(vec![keyed(key, ObservationRecord::Session(record))]);
        }
    };
    let (source, observed_at) = (source.clone(), at);
    let observation = match object {
        MinimalObject::Pod(pod) => {
            let pod = minimize::pod_counting(*pod, cfg, cuts)?;
            let key = pod_routing_key(&pod, &cfg.session_label).to_owned();
            let pod = Some(pod);
            keyed(key, ObservationRecord::Pod(PodObservation { source, observed_at, event, pod }))
        }
        MinimalObject::Job(job) => {
            let job = minimize::job_counting(*job, cfg, cuts)?;
            let key = job.meta.uid.clone();
            let job = Some(job);
            keyed(key, ObservationRecord::Job(JobObservation { source, observed_at, event, job }))
        }
        MinimalObject::CronJob(cronjob) => {
            let cronjob = minimize::cronjob(*cronjob, cfg)?;
            let key = cronjob.meta.uid.clone();
            let cronjob = Some(cronjob);
            let record = CronJobObservation { source, observed_at, event, cronjob };
            keyed(key, ObservationRecord::CronJob(record))
        }
        MinimalObject::Lease(lease) => {
            let lease = minimize::lease(*lease, cfg)?;
            let key = format!("{}/{}", lease.meta.namespace, lease.meta.name);
            let lease = Some(lease);
            let record = LeaseObservation { source, observed_at, event, lease };
            keyed(key, ObservationRecord::Lease(record))
        }
        MinimalObject::Namespace(_) => return Ok(Vec::new()),
    };
    Ok(vec![observation])
}

/// The topics a relist of `kinds` covers (`None`: every watched topic). Namespaces have
/// no topic: their relist only refreshes admission.
fn relisted(kinds: Option<&[String]>) -> Vec<InputTopic> {
    let Some(kinds) = kinds else { return InputTopic::WATCHED.to_vec() };
    InputTopic::WATCHED
        .into_iter()
        .filter(|t| kinds.iter().any(|k| t.kind().is_some_and(|kind| *k == kind)))
        .collect()
}

fn keyed(key: String, record: ObservationRecord) -> Observation {
    Observation { topic: record.topic(), key: Some(key), record }
}

/// One marker per topic, keyless: the publisher writes each to every partition.
fn markers(topics: &[InputTopic], source: &Source, at: i64, event: ObservationEvent) -> Vec<Observation> {
    let marker = |&topic| Observation {
        topic,
        key: None,
        record: ObservationRecord::marker(topic, source.clone(), at, event),
    };
    topics.iter().map(marker).collect()
}

/// [`observe`] with the epoch tracked and admission applied: a SNAPSHOT_BEGIN raises
/// `source.epoch` (it never decreases), so every record after it carries the new epoch;
/// [`Observer::admit`] passes every entry through the [`Admission`] gate first. What the
/// watcher, `publish`, `replay` and `demo` step through their input with.
#[derive(Debug, Clone)]
pub struct Observer {
    source: Source,
    cfg: MinimizeConfig,
    admission: Admission,
    /// The time of the last heartbeat observed.
    last_heartbeat_ms: Option<i64>,
    /// What minimization's bounds have cut so far.
    cuts: Cuts,
}

impl Observer {
    /// An observer publishing as `source` (its epoch is the one before the first relist),
    /// admitting with the default [`AdmissionConfig`].
    pub fn new(source: Source, cfg: MinimizeConfig) -> Self {
        Self {
            source,
            cfg,
            admission: Admission::new(AdmissionConfig::default()),
            last_heartbeat_ms: None,
            cuts: Cuts::default(),
        }
    }

    /// The same, admitting with `admission`.
    pub fn with_admission(mut self, admission: AdmissionConfig) -> Self {
        self.admission = Admission::new(admission);
        self
    }

    /// Admission counters so far.
    pub fn admission(&self) -> &AdmissionCounts {
        self.admission.counts()
    }

    /// Passes `entry` through admission and observes what it releases — nothing, this
    /// entry, or earlier held ones with it — in order. Each result is one released entry;
    /// an error rejects that entry only.
    pub fn admit(&mut self, entry: impl Into<MinimalEntry>) -> Vec<Result<Vec<Observation>, ObserveError>> {
        self.admission.offer(entry).into_iter().map(|e| self.observe(e)).collect()
    }

    /// What minimization's bounds have cut so far (docs/security.md, "Bounds").
    pub fn cuts(&self) -> Cuts {
        self.cuts
    }

    /// End of input: what is still held is excluded as unresolved (and counted).
    pub fn finish(&mut self) {
        self.admission.finish();
    }

    /// The label and annotation keys decoding must keep for this observer: what it
    /// copies and what its admission reads ([`MinimizeConfig::kept_keys`]).
    pub fn kept_keys(&self) -> std::sync::Arc<KeptKeys> {
        self.cfg.kept_keys(self.admission.config())
    }

    /// The source records are published with now.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The observations of one entry, in trace order.
    ///
    /// A heartbeat at `T` promises downstream that nothing observed at or before `T`
    /// follows on its partitions (docs/RUNTIME.md, "Watermarks across tasks"), so an entry
    /// released after it with a time not past `T` — observed in the same millisecond, or
    /// held by admission meanwhile — is stamped `T + 1`; heartbeats never go back in time.
    pub fn observe(&mut self, entry: MinimalEntry) -> Result<Vec<Observation>, ObserveError> {
        if let TraceEvent::SnapshotBegin { epoch, .. } = entry.event {
            self.source.epoch = self.source.epoch.max(epoch);
        }
        let mut at = entry.observed_at_ms;
        if let Some(beat) = self.last_heartbeat_ms {
            match entry.event {
                TraceEvent::Heartbeat => at = at.max(beat),
                _ => at = at.max(beat.saturating_add(1)),
            }
        }
        if matches!(entry.event, TraceEvent::Heartbeat) {
            self.last_heartbeat_ms = Some(at);
        }
        observe_counting(entry, at, &self.source, &self.cfg, &mut self.cuts)
    }
}
