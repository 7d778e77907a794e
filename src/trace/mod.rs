//! The cluster-trace format: what `demo`, `replay` and `simulate` read and write.
//!
//! A trace is a stream of JSON values (one per line by convention; pretty-printed values
//! concatenated, as `kubectl` prints them, are accepted too). Each value is one of:
//!
//! * a Kubernetes watch event — `{"type": "ADDED"|"MODIFIED"|"DELETED", "object": {…},
//!   "observed_at": …}` — exactly what `kubectl get … --watch --output-watch-events -o json`
//!   prints, with `observed_at` added;
//! * a bare Kubernetes object with `observed_at` added (what `kubectl get … --watch -o json`
//!   prints without `--output-watch-events`), read as an ADDED/MODIFIED event, or a
//!   `…List` whose items are read that way in order;
//! * a kubefacts line: `{"type": "HEARTBEAT", …}`, `{"type": "SNAPSHOT_BEGIN"|"SNAPSHOT_END",
//!   "epoch": N, …}` or `{"type": "SESSION", "session": {…}, …}`.
//!
//! `observed_at` is RFC 3339 (`"2026-11-29T10:00:00.250Z"`) or integer epoch milliseconds.
//! See `docs/TRACE_FORMAT.md`.

mod error;
mod session;

use std::io::{BufRead, Write};

use k8s_openapi::api::{
    batch::v1::{CronJob, Job},
    coordination::v1::Lease,
    core::v1::{Namespace, Pod},
};
use serde::Deserialize;
use serde_json::{Value as Json, json};

pub use error::TraceError;
pub use session::{SessionPod, SessionRecord, SessionState};

/// One line of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry {
    /// When the watcher (or host application) observed it, epoch milliseconds.
    pub observed_at_ms: i64,
    /// What was observed.
    pub event: TraceEvent,
}

/// What a trace line carries.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceEvent {
    /// A Kubernetes object was added or changed (ADDED and MODIFIED are one thing to us).
    Applied(KubeObject),
    /// A Kubernetes object was deleted; the object is its last state.
    Deleted(KubeObject),
    /// Stream time advanced with nothing else to say.
    Heartbeat,
    /// A relist began; objects of older epochs not re-listed before the end are gone.
    SnapshotBegin {
        /// The new snapshot epoch.
        epoch: i64,
        /// The kinds relisted (`Pod`, `Job`, …); `None`: every watched kind.
        kinds: Option<Vec<String>>,
    },
    /// A relist ended.
    SnapshotEnd {
        /// The snapshot epoch that ended.
        epoch: i64,
        /// The kinds relisted; `None`: every watched kind.
        kinds: Option<Vec<String>>,
    },
    /// A host application's session changed state.
    Session(SessionRecord),
}

/// The Kubernetes kinds kubefacts reads.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeObject {
    /// `v1/Pod`.
    Pod(Box<Pod>),
    /// `batch/v1/Job`.
    Job(Box<Job>),
    /// `batch/v1/CronJob`.
    CronJob(Box<CronJob>),
    /// `coordination.k8s.io/v1/Lease`.
    Lease(Box<Lease>),
    /// `v1/Namespace`.
    Namespace(Box<Namespace>),
}

impl KubeObject {
    /// Every kind kubefacts reads, as [`KubeObject::kind`] names them.
    pub const KINDS: [&'static str; 5] = ["Pod", "Job", "CronJob", "Lease", "Namespace"];

    /// The Kubernetes kind, e.g. `Job`.
    pub fn kind(&self) -> &'static str {
        match self {
            KubeObject::Pod(_) => "Pod",
            KubeObject::Job(_) => "Job",
            KubeObject::CronJob(_) => "CronJob",
            KubeObject::Lease(_) => "Lease",
            KubeObject::Namespace(_) => "Namespace",
        }
    }

    fn from_json(position: usize, object: Json) -> Result<Self, TraceError> {
        let api_version = object.get("apiVersion").and_then(Json::as_str).unwrap_or("").to_owned();
        let kind = object.get("kind").and_then(Json::as_str).unwrap_or("").to_owned();
        let invalid = |e: serde_json::Error| TraceError::InvalidObject {
            position,
            kind: kind.clone(),
            reason: e.to_string(),
        };
        Ok(match (api_version.as_str(), kind.as_str()) {
            ("v1", "Pod") => KubeObject::Pod(Box::new(serde_json::from_value(object).map_err(invalid)?)),
            ("batch/v1", "Job") => {
                KubeObject::Job(Box::new(serde_json::from_value(object).map_err(invalid)?))
            }
            ("batch/v1", "CronJob") => {
                KubeObject::CronJob(Box::new(serde_json::from_value(object).map_err(invalid)?))
            }
            ("coordination.k8s.io/v1", "Lease") => {
                KubeObject::Lease(Box::new(serde_json::from_value(object).map_err(invalid)?))
            }
            ("v1", "Namespace") => {
                KubeObject::Namespace(Box::new(serde_json::from_value(object).map_err(invalid)?))
            }
            _ => {
                return Err(TraceError::UnsupportedKind { position, api_version, kind });
            }
        })
    }

    fn to_json(&self) -> Json {
        let v = match self {
            KubeObject::Pod(o) => serde_json::to_value(o),
            KubeObject::Job(o) => serde_json::to_value(o),
            KubeObject::CronJob(o) => serde_json::to_value(o),
            KubeObject::Lease(o) => serde_json::to_value(o),
            KubeObject::Namespace(o) => serde_json::to_value(o),
        };
        v.expect("Kubernetes objects serialize to JSON")
    }
}

/// Reads a trace, yielding one entry per event (a `…List` yields one per item).
///
/// A line that is valid JSON but not a valid entry yields an error and reading goes on;
/// a JSON syntax error ends the trace (the reader cannot find the next value).
pub fn read<R: BufRead>(input: R) -> TraceReader<R> {
    TraceReader {
        stream: serde_json::Deserializer::from_reader(input).into_iter::<Json>(),
        pending: std::collections::VecDeque::new(),
        position: 0,
        failed: false,
    }
}

/// Iterator over a trace's entries; see [`read`].
pub struct TraceReader<R: BufRead> {
    stream: serde_json::StreamDeserializer<'static, serde_json::de::IoRead<R>, Json>,
    pending: std::collections::VecDeque<Result<TraceEntry, TraceError>>,
    position: usize,
    failed: bool,
}

impl<R: BufRead> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader").field("position", &self.position).finish_non_exhaustive()
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceEntry, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(entry) = self.pending.pop_front() {
            return Some(entry);
        }
        if self.failed {
            return None;
        }
        let value = match self.stream.next()? {
            Ok(v) => v,
            Err(e) => {
                self.failed = true;
                return Some(Err(TraceError::Syntax {
                    position: self.position + 1,
                    line: e.line(),
                    reason: e.to_string(),
                }));
            }
        };
        self.position += 1;
        self.pending.extend(parse_value(self.position, value));
        self.pending.pop_front()
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Timestamp {
    Millis(i64),
    Text(String),
}

fn observed_at(position: usize, v: &Json) -> Result<i64, TraceError> {
    let raw = v.get("observed_at").ok_or(TraceError::MissingObservedAt { position })?;
    match Timestamp::deserialize(raw) {
        Ok(Timestamp::Millis(ms)) => Ok(ms),
        Ok(Timestamp::Text(s)) => s
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond())
            .map_err(|e| TraceError::InvalidObservedAt { position, reason: e.to_string() }),
        Err(_) => Err(TraceError::InvalidObservedAt {
            position,
            reason: format!("expected RFC 3339 text or epoch milliseconds, got {raw}"),
        }),
    }
}

/// Parses one JSON value of a trace into its entries.
pub fn parse_value(position: usize, mut v: Json) -> Vec<Result<TraceEntry, TraceError>> {
    let observed_at_ms = match observed_at(position, &v) {
        Ok(t) => t,
        Err(e) => return vec![Err(e)],
    };
    let entry = |event| Ok(TraceEntry { observed_at_ms, event });
    let ty = v.get("type").and_then(Json::as_str).map(str::to_owned);
    match ty.as_deref() {
        Some(action @ ("ADDED" | "MODIFIED" | "DELETED")) => {
            let Some(object) = v.get_mut("object").map(Json::take) else {
                return vec![Err(TraceError::MissingField { position, field: "object" })];
            };
            vec![KubeObject::from_json(position, object).and_then(|o| {
                entry(if action == "DELETED" { TraceEvent::Deleted(o) } else { TraceEvent::Applied(o) })
            })]
        }
        Some("HEARTBEAT") => vec![entry(TraceEvent::Heartbeat)],
        Some(marker @ ("SNAPSHOT_BEGIN" | "SNAPSHOT_END")) => {
            let Some(epoch) = v.get("epoch").and_then(Json::as_i64) else {
                return vec![Err(TraceError::MissingField { position, field: "epoch" })];
            };
            let kinds = match v.get("kinds") {
                None | Some(Json::Null) => None,
                Some(Json::Array(list)) => {
                    let names: Option<Vec<String>> = list
                        .iter()
                        .map(|k| k.as_str().filter(|k| KubeObject::KINDS.contains(k)).map(str::to_owned))
                        .collect();
                    match names {
                        Some(n) => Some(n),
                        None => {
                            return vec![Err(TraceError::InvalidObject {
                                position,
                                kind: marker.into(),
                                reason: format!("kinds must name {}", KubeObject::KINDS.join(", ")),
                            })];
                        }
                    }
                }
                Some(_) => {
                    return vec![Err(TraceError::InvalidObject {
                        position,
                        kind: marker.into(),
                        reason: "kinds must be a list".into(),
                    })];
                }
            };
            vec![entry(if marker == "SNAPSHOT_BEGIN" {
                TraceEvent::SnapshotBegin { epoch, kinds }
            } else {
                TraceEvent::SnapshotEnd { epoch, kinds }
            })]
        }
        Some("SESSION") => {
            let Some(session) = v.get_mut("session").map(Json::take) else {
                return vec![Err(TraceError::MissingField { position, field: "session" })];
            };
            vec![
                serde_json::from_value::<SessionRecord>(session)
                    .map_err(|e| TraceError::InvalidObject {
                        position,
                        kind: "SESSION".into(),
                        reason: e.to_string(),
                    })
                    .and_then(|s| entry(TraceEvent::Session(s))),
            ]
        }
        Some(other) => vec![Err(TraceError::UnknownType { position, ty: other.to_owned() })],
        None if v.get("kind").and_then(Json::as_str).is_some_and(|k| k.ends_with("List")) => {
            let items = match v.get_mut("items").map(Json::take) {
                Some(Json::Array(items)) => items,
                _ => {
                    return vec![Err(TraceError::MissingField { position, field: "items" })];
                }
            };
            items
                .into_iter()
                .map(|item| KubeObject::from_json(position, item).and_then(|o| entry(TraceEvent::Applied(o))))
                .collect()
        }
        None if v.get("kind").is_some() => {
            if let Some(map) = v.as_object_mut() {
                map.remove("observed_at");
            }
            vec![KubeObject::from_json(position, v).and_then(|o| entry(TraceEvent::Applied(o)))]
        }
        None => vec![Err(TraceError::MissingField { position, field: "type" })],
    }
}

impl TraceEntry {
    /// This entry as one trace line's JSON (timestamps as RFC 3339 when representable).
    pub fn to_json(&self) -> Json {
        let at = crate::codec::json::rfc3339_millis(self.observed_at_ms)
            .map_or(json!(self.observed_at_ms), Json::String);
        match &self.event {
            TraceEvent::Applied(o) => {
                json!({"type": "MODIFIED", "observed_at": at, "object": o.to_json()})
            }
            TraceEvent::Deleted(o) => {
                json!({"type": "DELETED", "observed_at": at, "object": o.to_json()})
            }
            TraceEvent::Heartbeat => json!({"type": "HEARTBEAT", "observed_at": at}),
            TraceEvent::SnapshotBegin { epoch, kinds } | TraceEvent::SnapshotEnd { epoch, kinds } => {
                let ty = if matches!(self.event, TraceEvent::SnapshotBegin { .. }) {
                    "SNAPSHOT_BEGIN"
                } else {
                    "SNAPSHOT_END"
                };
                let mut line = json!({"type": ty, "observed_at": at, "epoch": epoch});
                if let Some(kinds) = kinds {
                    line["kinds"] = json!(kinds);
                }
                line
            }
            TraceEvent::Session(s) => json!({"type": "SESSION", "observed_at": at, "session": s}),
        }
    }

    /// Writes this entry as one line.
    pub fn write_line<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, &self.to_json())?;
        out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests;
