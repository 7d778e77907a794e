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

use std::{
    io::{BufRead, Write},
    sync::Arc,
};

use k8s_openapi::api::{
    batch::v1::{CronJob, Job},
    coordination::v1::Lease,
    core::v1::{Namespace, Pod},
};
use serde::{Deserialize, Deserializer};
use serde_json::{Value as Json, json, value::RawValue};

pub use error::TraceError;
pub use minimal::{KeptKeys, Object as MinimalObject};
pub use session::{SessionPod, SessionRecord, SessionState};

/// One line of a trace. Its objects are whole k8s-openapi objects ([`KubeObject`], what
/// `simulate` renders and writes) or, as read, the allowlisted ones ([`MinimalEntry`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry<O = KubeObject> {
    /// When the watcher (or host application) observed it, epoch milliseconds.
    pub observed_at_ms: i64,
    /// What was observed.
    pub event: TraceEvent<O>,
}

/// A trace entry as the reader and the watcher decode it: objects hold only the
/// allowlisted fields ([`minimal`]). What admission and minimization take.
pub type MinimalEntry = TraceEntry<MinimalObject>;

/// What a trace line carries.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceEvent<O = KubeObject> {
    /// A Kubernetes object was added or changed (ADDED and MODIFIED are one thing to us).
    Applied(O),
    /// A Kubernetes object was deleted; the object is its last state.
    Deleted(O),
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

impl From<&KubeObject> for MinimalObject {
    /// The allowlisted fields of a whole object, copied (see [`minimal`]).
    fn from(o: &KubeObject) -> Self {
        match o {
            KubeObject::Pod(o) => Self::Pod(Box::new(o.as_ref().into())),
            KubeObject::Job(o) => Self::Job(Box::new(o.as_ref().into())),
            KubeObject::CronJob(o) => Self::CronJob(Box::new(o.as_ref().into())),
            KubeObject::Lease(o) => Self::Lease(Box::new(o.as_ref().into())),
            KubeObject::Namespace(o) => Self::Namespace(Box::new(o.as_ref().into())),
        }
    }
}

impl From<TraceEntry> for MinimalEntry {
    /// A simulated or built entry as the reader would have decoded it.
    fn from(e: TraceEntry) -> Self {
        let event = match e.event {
            TraceEvent::Applied(o) => TraceEvent::Applied((&o).into()),
            TraceEvent::Deleted(o) => TraceEvent::Deleted((&o).into()),
            TraceEvent::Heartbeat => TraceEvent::Heartbeat,
            TraceEvent::SnapshotBegin { epoch, kinds } => TraceEvent::SnapshotBegin { epoch, kinds },
            TraceEvent::SnapshotEnd { epoch, kinds } => TraceEvent::SnapshotEnd { epoch, kinds },
            TraceEvent::Session(s) => TraceEvent::Session(s),
        };
        TraceEntry { observed_at_ms: e.observed_at_ms, event }
    }
}

/// Whether kubefacts reads objects of this `apiVersion` and `kind` ([`decode_as`]).
fn is_read(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("v1", "Pod" | "Namespace") | ("batch/v1", "Job" | "CronJob") | ("coordination.k8s.io/v1", "Lease")
    )
}

/// Decodes one Kubernetes object as the kind its `apiVersion` and `kind` name, keeping the
/// allowlisted fields only; `None` for a kind kubefacts does not read.
fn decode_as<'de, D: Deserializer<'de>>(
    api_version: &str,
    kind: &str,
    d: D,
) -> Option<Result<MinimalObject, D::Error>> {
    use minimal::{CronJob, Job, Lease, Namespace, Pod};
    Some(match (api_version, kind) {
        ("v1", "Pod") => Pod::deserialize(d).map(|o| MinimalObject::Pod(Box::new(o))),
        ("batch/v1", "Job") => Job::deserialize(d).map(|o| MinimalObject::Job(Box::new(o))),
        ("batch/v1", "CronJob") => CronJob::deserialize(d).map(|o| MinimalObject::CronJob(Box::new(o))),
        ("coordination.k8s.io/v1", "Lease") => {
            Lease::deserialize(d).map(|o| MinimalObject::Lease(Box::new(o)))
        }
        ("v1", "Namespace") => Namespace::deserialize(d).map(|o| MinimalObject::Namespace(Box::new(o))),
        _ => return None,
    })
}

/// A serde message without serde_json's position (relative to the value, not the input).
fn serde_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    text.rsplit_once(" at line ").map_or(text.clone(), |(what, _)| what.to_owned())
}

/// Decodes one Kubernetes object (a JSON object's text) into its allowlisted type.
fn decode_object(line: usize, raw: &str) -> Result<MinimalObject, TraceError> {
    let unsupported =
        |api_version: String, kind: String| TraceError::UnsupportedKind { line, api_version, kind };
    let invalid = |kind: &str, reason| TraceError::InvalidObject { line, kind: kind.to_owned(), reason };
    // `apiVersion` and `kind` come first in what the API server and kubectl write: one
    // pass then decodes the rest. Otherwise they are read first, then the object.
    let mut seen = KindSeen::default();
    let mut de = serde_json::Deserializer::from_str(raw);
    match serde::de::DeserializeSeed::deserialize(&mut seen, &mut de) {
        Ok(Some(object)) => Ok(object),
        Ok(None) if seen.ordered => Err(unsupported(seen.api_version, seen.kind)),
        Ok(None) => {
            let head: TypeHead =
                serde_json::from_str(raw).map_err(|e| invalid("object", serde_reason(&e)))?;
            let text = |v: &Option<Json>| v.as_ref().and_then(Json::as_str).unwrap_or("").to_owned();
            let (api_version, kind) = (text(&head.api_version), text(&head.kind));
            let mut de = serde_json::Deserializer::from_str(raw);
            match decode_as(&api_version, &kind, &mut de) {
                Some(r) => r.map_err(|e| invalid(&kind, serde_reason(&e))),
                None => Err(unsupported(api_version, kind)),
            }
        }
        Err(e) => Err(invalid(&seen.kind, serde_reason(&e))),
    }
}

/// An object's `apiVersion` and `kind`, everything else skipped.
#[derive(Deserialize)]
struct TypeHead {
    #[serde(rename = "apiVersion")]
    api_version: Option<Json>,
    kind: Option<Json>,
}

/// Reads an object whose first two keys are `apiVersion` and `kind` in one pass:
/// `Some(object)` of a kind kubefacts reads, `None` when the kind is another (`ordered`)
/// or the two do not come first (the rest is skipped; the caller reads them first).
#[derive(Default)]
struct KindSeen {
    api_version: String,
    kind: String,
    ordered: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for &mut KindSeen {
    type Value = Option<MinimalObject>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for &mut KindSeen {
    type Value = Option<MinimalObject>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::IgnoredAny;
        let text = |v: Json| v.as_str().unwrap_or("").to_owned();
        let (mut api_version, mut kind) = (None, None);
        while api_version.is_none() || kind.is_none() {
            match map.next_key::<std::borrow::Cow<'de, str>>()?.as_deref() {
                Some("apiVersion") if api_version.is_none() => api_version = Some(text(map.next_value()?)),
                Some("kind") if kind.is_none() => kind = Some(text(map.next_value()?)),
                Some(_) => {
                    // Not in the usual order: skip the rest, the caller reads the two first.
                    map.next_value::<IgnoredAny>()?;
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    return Ok(None);
                }
                None => break,
            }
        }
        self.ordered = true;
        self.api_version = api_version.unwrap_or_default();
        self.kind = kind.unwrap_or_default();
        if !is_read(&self.api_version, &self.kind) {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(None);
        }
        let rest = serde::de::value::MapAccessDeserializer::new(map);
        decode_as(&self.api_version, &self.kind, rest).transpose()
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
        keys: None,
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
    pending: std::collections::VecDeque<(usize, Result<MinimalEntry, TraceError>)>,
    done: bool,
    /// The label and annotation keys kept (`None`: all).
    keys: Option<Arc<KeptKeys>>,
}

impl<R: BufRead> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader").field("line", &self.line).finish_non_exhaustive()
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Keeps only these label and annotation keys of the objects read (see
    /// [`minimal::keeping`]); without it every key is kept.
    pub fn keeping(mut self, keys: Arc<KeptKeys>) -> Self {
        self.keys = Some(keys);
        self
    }

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
        let (start, keys) = (self.buf_start, self.keys.clone());
        // Fast path: each value's few top-level fields are read as it is split off, its
        // object kept as raw text and decoded straight into its allowlisted type.
        let mut heads = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Head>();
        let (mut consumed, mut done) = (0, 0usize);
        let mut fast_ok = true;
        loop {
            match heads.next() {
                Some(Ok(head)) => {
                    let end = heads.byte_offset();
                    // Lines are checked UTF-8 as they are read.
                    let whole = std::str::from_utf8(&self.buf[consumed..end]).unwrap_or_default();
                    let entries = in_scope(&keys, || parse_head(start, head, whole));
                    self.pending.extend(entries.into_iter().map(|r| (start, r)));
                    (consumed, done) = (end, done + 1);
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(_)) => {
                    fast_ok = false;
                    break;
                }
                None => {
                    consumed = self.buf.len();
                    break;
                }
            }
        }
        let mut failed = None;
        if !fast_ok {
            // A value that is not an object, or broken: split the values off as raw text
            // (after those already read) for the error the slow path names.
            let mut values = serde_json::Deserializer::from_slice(&self.buf).into_iter::<&RawValue>();
            let mut skipped = 0;
            loop {
                match values.next() {
                    Some(Ok(_)) if skipped < done => skipped += 1,
                    Some(Ok(v)) => {
                        consumed = values.byte_offset();
                        let entries = in_scope(&keys, || parse_raw(start, v));
                        self.pending.extend(entries.into_iter().map(|r| (start, r)));
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
    type Item = Result<MinimalEntry, TraceError>;

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
            let text = match std::str::from_utf8(&self.raw) {
                Ok(text) => text,
                Err(e) => {
                    self.flush_unterminated(line - 1);
                    let column = e.valid_up_to() + 1;
                    self.pending.push_back((line, Err(TraceError::NotUtf8 { line, column })));
                    continue;
                }
            };
            let first = self.raw.first().copied().unwrap_or(b' ');
            // The usual trace holds one entry per line: read it where it lies, without
            // copying it or scanning its brackets. Anything else (a value over several
            // lines, a broken one) takes the general path below, which names its errors.
            if first == b'{'
                && self.buf.is_empty()
                && let Some(entries) = whole_line(text, line, &self.keys)
            {
                self.pending.extend(entries.into_iter().map(|r| (line, r)));
                continue;
            }
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

/// The entries of `text`, one line holding exactly one complete value; `None` when it
/// holds anything else.
fn whole_line(
    text: &str,
    line: usize,
    keys: &Option<Arc<KeptKeys>>,
) -> Option<Vec<Result<MinimalEntry, TraceError>>> {
    in_scope(keys, || {
        let mut de = serde_json::Deserializer::from_str(text);
        let head = Head::<Decoded>::deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(parse_head(line, head, text))
    })
}

/// `f` with `keys` kept by the objects it decodes (`None`: every key).
fn in_scope<T>(keys: &Option<Arc<KeptKeys>>, f: impl FnOnce() -> T) -> T {
    match keys {
        Some(keys) => minimal::keeping(keys, f),
        None => f(),
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

fn observed_at(line: usize, raw: Option<&Json>) -> Result<i64, TraceError> {
    let raw = raw.ok_or(TraceError::MissingObservedAt { line })?;
    // Matched, not an untagged enum: that one builds an error message per text timestamp.
    let ms = match raw {
        Json::String(s) => s
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond())
            .map_err(|e| TraceError::InvalidObservedAt { line, reason: format!("{s:?}: {e}") })?,
        other => other.as_i64().ok_or_else(|| TraceError::InvalidObservedAt {
            line,
            reason: format!("expected RFC 3339 text or integer epoch milliseconds, found {raw}"),
        })?,
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

/// Parses one JSON value of a trace into its entries (objects decoded as [`minimal`]
/// decodes them; unscoped, so every label and annotation is kept). The reader parses the
/// text directly ([`parse_raw`]); this serves callers holding a parsed value.
pub fn parse_value(line: usize, v: Json) -> Vec<Result<MinimalEntry, TraceError>> {
    let text = v.to_string();
    match serde_json::from_str::<&RawValue>(&text) {
        Ok(raw) => parse_raw(line, raw),
        Err(e) => vec![Err(TraceError::Syntax { line, reason: serde_reason(&e) })],
    }
}

/// The fields of a trace value the reader looks at. Objects stay raw text until their kind
/// is known, then decode straight into the allowlisted types.
#[derive(Deserialize)]
#[serde(bound(deserialize = "O: Deserialize<'de>"))]
struct Head<'a, O = &'a RawValue> {
    #[serde(rename = "type")]
    ty: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    observed_at: Option<Json>,
    epoch: Option<Json>,
    kinds: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    session: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    kind: Option<Json>,
    object: Option<O>,
    #[serde(borrow)]
    items: Option<&'a RawValue>,
}

/// A watch event's `object` as [`Head`] holds it: its text, decoded afterwards, or
/// decoded as it was read.
trait EventObject {
    /// The object, or why it is not one.
    fn decode(self, line: usize) -> Result<MinimalObject, TraceError>;
}

impl EventObject for &RawValue {
    fn decode(self, line: usize) -> Result<MinimalObject, TraceError> {
        if !self.get().starts_with('{') {
            return Err(not_object(line, "object", self));
        }
        decode_object(line, self.get())
    }
}

/// An object decoded in the same pass as the line around it. It is only ever read where
/// every failure falls back to the general path, which names the error: failing is all
/// this needs to do.
struct Decoded(MinimalObject);

impl<'de> Deserialize<'de> for Decoded {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde::de::DeserializeSeed::deserialize(&mut KindSeen::default(), d)? {
            Some(object) => Ok(Decoded(object)),
            None => Err(serde::de::Error::custom("not an object of a kind read, in the usual order")),
        }
    }
}

impl EventObject for Decoded {
    fn decode(self, _line: usize) -> Result<MinimalObject, TraceError> {
        Ok(self.0)
    }
}

/// A field that is there, `null` included (`Option` alone reads `null` as absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Json>, D::Error> {
    Json::deserialize(d).map(Some)
}

/// What a raw value is, for an error that says what was found instead.
fn raw_kind(raw: &RawValue) -> String {
    serde_json::from_str::<Json>(raw.get()).map_or_else(|_| "invalid JSON".into(), |v| json_kind(&v))
}

/// `field` of the value at `line` is `raw`, where an object belongs.
fn not_object(line: usize, field: &'static str, raw: &RawValue) -> TraceError {
    TraceError::InvalidField { line, field, reason: format!("expected an object, found {}", raw_kind(raw)) }
}

/// Parses one JSON value of a trace, as text, into its entries.
pub fn parse_raw(line: usize, raw: &RawValue) -> Vec<Result<MinimalEntry, TraceError>> {
    if !raw.get().starts_with('{') {
        return vec![Err(not_object(line, "(value)", raw))];
    }
    match serde_json::from_str(raw.get()) {
        Ok(head) => parse_head::<&RawValue>(line, head, raw.get()),
        Err(e) => vec![Err(TraceError::InvalidField { line, field: "(value)", reason: serde_reason(&e) })],
    }
}

/// The entries of one trace value whose top-level fields are `v` and whose whole text is
/// `whole` (a bare object is decoded from it).
fn parse_head<O: EventObject>(
    line: usize,
    v: Head<'_, O>,
    whole: &str,
) -> Vec<Result<MinimalEntry, TraceError>> {
    let observed_at_ms = match observed_at(line, v.observed_at.as_ref()) {
        Ok(t) => t,
        Err(e) => return vec![Err(e)],
    };
    let entry = |event| Ok(TraceEntry { observed_at_ms, event });
    let ty = match &v.ty {
        None => None,
        Some(Json::String(t)) => Some(t.as_str()),
        Some(other) => {
            let found = json_kind(other);
            return vec![Err(TraceError::InvalidField {
                line,
                field: "type",
                reason: format!("expected a string, found {found}"),
            })];
        }
    };
    match ty {
        Some(action @ ("ADDED" | "MODIFIED" | "DELETED")) => {
            let Some(object) = v.object else {
                return vec![Err(TraceError::MissingField { line, field: "object" })];
            };
            vec![object.decode(line).and_then(|o| {
                entry(if action == "DELETED" { TraceEvent::Deleted(o) } else { TraceEvent::Applied(o) })
            })]
        }
        Some("HEARTBEAT") => vec![entry(TraceEvent::Heartbeat)],
        Some(marker @ ("SNAPSHOT_BEGIN" | "SNAPSHOT_END")) => {
            let epoch = match &v.epoch {
                None => {
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
            let kinds = match &v.kinds {
                None => None,
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
            let Some(session) = v.session else {
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
        None if v.kind.as_ref().and_then(Json::as_str).is_some_and(|k| k.ends_with("List")) => {
            let items = match v.items.map(|i| serde_json::from_str::<Vec<&RawValue>>(i.get())) {
                Some(Ok(items)) => items,
                _ => {
                    return vec![Err(TraceError::MissingField { line, field: "items" })];
                }
            };
            items
                .into_iter()
                .map(|item| {
                    if !item.get().starts_with('{') {
                        return Err(not_object(line, "items[]", item));
                    }
                    decode_object(line, item.get()).and_then(|o| entry(TraceEvent::Applied(o)))
                })
                .collect()
        }
        // A bare object: its `observed_at` is one more field the object's type skips.
        None if v.kind.is_some() => {
            vec![decode_object(line, whole).and_then(|o| entry(TraceEvent::Applied(o)))]
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
