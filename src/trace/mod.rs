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
pub mod minimal;
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

    fn from_json(line: usize, object: Json) -> Result<Self, TraceError> {
        let api_version = object.get("apiVersion").and_then(Json::as_str).unwrap_or("").to_owned();
        let kind = object.get("kind").and_then(Json::as_str).unwrap_or("").to_owned();
        let invalid = |e: serde_json::Error| TraceError::InvalidObject {
            line,
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
                return Err(TraceError::UnsupportedKind { line, api_version, kind });
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

/// The range of `observed_at` a trace may carry: the Unix epoch through the last
/// millisecond of year 9999 (what RFC 3339 can write). Anything outside is a typo or an
/// overflow, never an observation.
pub const OBSERVED_AT_RANGE_MS: std::ops::RangeInclusive<i64> = 0..=253_402_300_799_999;

/// Reads a trace, yielding one entry per event (a `…List` yields one per item).
///
/// Every line is read: a value that is not a valid entry, a line that is not UTF-8 or not
/// JSON yields an error naming its line, and reading goes on with the next value. Values
/// may span lines (pretty-printed, as `kubectl` prints them); a line that starts with `{`
/// or `[` in its first column starts a new value, so a broken value costs only its own
/// lines.
pub fn read<R: BufRead>(input: R) -> TraceReader<R> {
    TraceReader {
        input,
        line: 0,
        entry_line: std::rc::Rc::new(std::cell::Cell::new(0)),
        buf: Vec::new(),
        buf_start: 0,
        scan: Nesting::default(),
        raw: Vec::new(),
        pending: std::collections::VecDeque::new(),
        done: false,
    }
}

/// Iterator over a trace's entries; see [`read`].
pub struct TraceReader<R: BufRead> {
    input: R,
    /// Lines read so far.
    line: usize,
    /// The first line of the entry yielded last (shared: a caller reporting an error found
    /// later, when the entry is observed, can name the line).
    entry_line: std::rc::Rc<std::cell::Cell<usize>>,
    /// The lines of a value not complete yet.
    buf: Vec<u8>,
    /// The line `buf` starts at.
    buf_start: usize,
    /// How deep `buf` is nested: a value is complete when it is back at the top.
    scan: Nesting,
    /// The line being read.
    raw: Vec<u8>,
    /// Entries and errors parsed and not yielded yet, each with its value's first line.
    pending: std::collections::VecDeque<(usize, Result<TraceEntry, TraceError>)>,
    done: bool,
}

impl<R: BufRead> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader").field("line", &self.line).finish_non_exhaustive()
    }
}

impl<R: BufRead> TraceReader<R> {
    /// The first line of the entry yielded last, live: for an error found later, when the
    /// entry is observed.
    pub fn entry_line(&self) -> std::rc::Rc<std::cell::Cell<usize>> {
        self.entry_line.clone()
    }

    /// An unfinished value in the buffer is reported (it ended at line `through`).
    fn flush_unterminated(&mut self, through: usize) {
        if self.buf.iter().any(|b| !b.is_ascii_whitespace()) {
            let line = self.buf_start;
            self.pending.push_back((line, Err(TraceError::Unterminated { line, through })));
        }
        self.buf.clear();
        self.scan = Nesting::default();
    }

    /// Parses what `buf` holds: complete values become entries; an incomplete tail stays.
    fn parse_buf(&mut self) {
        self.scan = Nesting::default();
        let mut values = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Json>();
        let mut consumed = 0;
        let mut parsed = Vec::new();
        let mut failed = None;
        loop {
            match values.next() {
                Some(Ok(v)) => {
                    consumed = values.byte_offset();
                    parsed.push(v);
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => {
                    consumed = self.buf.len();
                    break;
                }
            }
        }
        let start = self.buf_start;
        for v in parsed {
            self.pending.extend(parse_value(start, v).into_iter().map(|r| (start, r)));
        }
        match failed {
            Some(e) => {
                let line = start + e.line().saturating_sub(1);
                // serde_json counts lines from the value's start: say the input's line.
                let text = e.to_string();
                let what = text.rsplit_once(" at line ").map_or(text.as_str(), |(what, _)| what);
                let reason = format!("{what} at column {}", e.column());
                self.pending.push_back((line, Err(TraceError::Syntax { line, reason })));
                self.buf.clear();
            }
            None => {
                self.buf.drain(..consumed);
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    self.buf.clear();
                } else {
                    self.buf_start = self.line;
                }
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceEntry, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((line, entry)) = self.pending.pop_front() {
                self.entry_line.set(line);
                return Some(entry);
            }
            if self.done {
                return None;
            }
            self.raw.clear();
            match self.input.read_until(b'\n', &mut self.raw) {
                Ok(0) => {
                    self.done = true;
                    self.flush_unterminated(self.line);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    self.done = true;
                    let line = self.line + 1;
                    self.entry_line.set(line);
                    return Some(Err(TraceError::Io { line, reason: e.to_string() }));
                }
            }
            self.line += 1;
            let line = self.line;
            if let Err(e) = std::str::from_utf8(&self.raw) {
                self.flush_unterminated(line - 1);
                let column = e.valid_up_to() + 1;
                self.pending.push_back((line, Err(TraceError::NotUtf8 { line, column })));
                continue;
            }
            let first = self.raw.first().copied().unwrap_or(b' ');
            let blank = self.raw.iter().all(u8::is_ascii_whitespace);
            if blank && self.buf.is_empty() {
                continue;
            }
            // A value in the first column starts anew: what was open never closed.
            if matches!(first, b'{' | b'[') && !self.buf.is_empty() {
                self.flush_unterminated(line - 1);
            }
            if self.buf.is_empty() {
                self.buf_start = line;
            }
            self.buf.extend_from_slice(&self.raw);
            // Parse once the value is back at the top level: linear in a long pretty-printed
            // list, however many lines it takes.
            if self.scan.feed(&self.raw) {
                self.parse_buf();
            }
        }
    }
}

/// Brackets open outside strings, across the lines of one value.
#[derive(Debug, Default, Clone, Copy)]
struct Nesting {
    depth: i64,
    in_string: bool,
    escaped: bool,
}

impl Nesting {
    /// Scans one line; whether the value is back at the top level after it.
    fn feed(&mut self, line: &[u8]) -> bool {
        for &b in line {
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => self.depth -= 1,
                    _ => {}
                }
            }
        }
        self.depth <= 0 && !self.in_string
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Timestamp {
    Millis(i64),
    Text(String),
}

fn observed_at(line: usize, v: &Json) -> Result<i64, TraceError> {
    let raw = v.get("observed_at").ok_or(TraceError::MissingObservedAt { line })?;
    let ms = match Timestamp::deserialize(raw) {
        Ok(Timestamp::Millis(ms)) => ms,
        Ok(Timestamp::Text(s)) => s
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond())
            .map_err(|e| TraceError::InvalidObservedAt { line, reason: format!("{s:?}: {e}") })?,
        Err(_) => {
            return Err(TraceError::InvalidObservedAt {
                line,
                reason: format!("expected RFC 3339 text or integer epoch milliseconds, found {raw}"),
            });
        }
    };
    if !OBSERVED_AT_RANGE_MS.contains(&ms) {
        return Err(TraceError::InvalidObservedAt {
            line,
            reason: format!(
                "{ms} ms is outside 1970-01-01T00:00:00Z..=9999-12-31T23:59:59.999Z (epoch milliseconds)"
            ),
        });
    }
    Ok(ms)
}

/// What a JSON value is, for an error that says what was found instead.
fn json_kind(v: &Json) -> String {
    match v {
        Json::Null => "null".into(),
        Json::Bool(b) => format!("the boolean {b}"),
        Json::Number(n) => format!("the number {n}"),
        Json::String(s) => format!("the string {s:?}"),
        Json::Array(_) => "a list".into(),
        Json::Object(_) => "an object".into(),
    }
}

/// Parses one JSON value of a trace into its entries.
pub fn parse_value(line: usize, mut v: Json) -> Vec<Result<TraceEntry, TraceError>> {
    if !v.is_object() {
        let found = json_kind(&v);
        return vec![Err(TraceError::InvalidField {
            line,
            field: "(value)",
            reason: format!("expected an object, found {found}"),
        })];
    }
    let observed_at_ms = match observed_at(line, &v) {
        Ok(t) => t,
        Err(e) => return vec![Err(e)],
    };
    let entry = |event| Ok(TraceEntry { observed_at_ms, event });
    let ty = match v.get("type") {
        None | Some(Json::Null) => None,
        Some(Json::String(t)) => Some(t.clone()),
        Some(other) => {
            let found = json_kind(other);
            return vec![Err(TraceError::InvalidField {
                line,
                field: "type",
                reason: format!("expected a string, found {found}"),
            })];
        }
    };
    match ty.as_deref() {
        Some(action @ ("ADDED" | "MODIFIED" | "DELETED")) => {
            let object = match v.get_mut("object").map(Json::take) {
                None | Some(Json::Null) => {
                    return vec![Err(TraceError::MissingField { line, field: "object" })];
                }
                Some(o @ Json::Object(_)) => o,
                Some(other) => {
                    let found = json_kind(&other);
                    return vec![Err(TraceError::InvalidField {
                        line,
                        field: "object",
                        reason: format!("expected an object, found {found}"),
                    })];
                }
            };
            vec![KubeObject::from_json(line, object).and_then(|o| {
                entry(if action == "DELETED" { TraceEvent::Deleted(o) } else { TraceEvent::Applied(o) })
            })]
        }
        Some("HEARTBEAT") => vec![entry(TraceEvent::Heartbeat)],
        Some(marker @ ("SNAPSHOT_BEGIN" | "SNAPSHOT_END")) => {
            let epoch = match v.get("epoch") {
                None | Some(Json::Null) => {
                    return vec![Err(TraceError::MissingField { line, field: "epoch" })];
                }
                Some(e) => match e.as_i64() {
                    Some(epoch) => epoch,
                    None => {
                        let found = json_kind(e);
                        return vec![Err(TraceError::InvalidField {
                            line,
                            field: "epoch",
                            reason: format!("expected an integer, found {found}"),
                        })];
                    }
                },
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
                                line,
                                kind: marker.into(),
                                reason: format!("kinds must name {}", KubeObject::KINDS.join(", ")),
                            })];
                        }
                    }
                }
                Some(_) => {
                    return vec![Err(TraceError::InvalidObject {
                        line,
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
                return vec![Err(TraceError::MissingField { line, field: "session" })];
            };
            vec![
                serde_json::from_value::<SessionRecord>(session)
                    .map_err(|e| TraceError::InvalidObject {
                        line,
                        kind: "SESSION".into(),
                        reason: e.to_string(),
                    })
                    .and_then(|s| entry(TraceEvent::Session(s))),
            ]
        }
        Some(other) => vec![Err(TraceError::UnknownType { line, ty: other.to_owned() })],
        None if v.get("kind").and_then(Json::as_str).is_some_and(|k| k.ends_with("List")) => {
            let items = match v.get_mut("items").map(Json::take) {
                Some(Json::Array(items)) => items,
                _ => {
                    return vec![Err(TraceError::MissingField { line, field: "items" })];
                }
            };
            items
                .into_iter()
                .map(|item| KubeObject::from_json(line, item).and_then(|o| entry(TraceEvent::Applied(o))))
                .collect()
        }
        None if v.get("kind").is_some() => {
            if let Some(map) = v.as_object_mut() {
                map.remove("observed_at");
            }
            vec![KubeObject::from_json(line, v).and_then(|o| entry(TraceEvent::Applied(o)))]
        }
        None => vec![Err(TraceError::MissingField { line, field: "type" })],
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
