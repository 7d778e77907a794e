//! A cluster trace read through an [`Observer`]: what `demo`, `replay` and `publish` share.

use std::{
    cell::Cell,
    collections::BTreeMap,
    fs::File,
    io::{BufReader, Read},
    path::Path,
    rc::Rc,
};

use anyhow::Context;

use super::progress::CountingRead;
use crate::{
    observe::{Observation, Observer},
    trace::{self, TraceEntry, TraceError, TraceReader},
};

/// A trace file being read (`-`: standard input), streamed: traces of large clusters are
/// gigabytes, so none is read into memory whole.
pub(super) struct TraceFile {
    /// The path as given.
    pub name: String,
    /// The file's size, when known (not for standard input).
    pub total_bytes: Option<u64>,
    /// Bytes read so far (for a progress bar).
    pub read_bytes: Rc<Cell<u64>>,
    /// The entries.
    pub entries: TraceReader<BufReader<CountingRead<Box<dyn Read>>>>,
}

impl std::fmt::Debug for TraceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceFile").field("name", &self.name).finish_non_exhaustive()
    }
}

impl TraceFile {
    /// Opens `path` (`-`: standard input).
    pub(super) fn open(path: &Path) -> anyhow::Result<Self> {
        let (input, total_bytes): (Box<dyn Read>, _) = if path.as_os_str() == "-" {
            (Box::new(std::io::stdin()), None)
        } else {
            let file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
            let size = file.metadata().ok().map(|m| m.len());
            (Box::new(file), size)
        };
        let (counted, read_bytes) = CountingRead::new(input);
        Ok(Self {
            name: path.display().to_string(),
            total_bytes,
            read_bytes,
            entries: trace::read(BufReader::with_capacity(1 << 20, counted)),
        })
    }
}

/// Iterates over the observations of a trace, one batch per trace entry read (admission
/// may release nothing, or earlier held entries with it). Entries that cannot be read or
/// observed are reported on stderr, prefixed with the verb, and counted by reason; reading
/// goes on.
pub(super) struct Observed<'a, I> {
    verb: &'static str,
    reader: I,
    observer: &'a mut Observer,
    /// Trace entries read.
    pub entries: u64,
    /// `observed_at` of the last entry read (0 before the first).
    pub last_observed_at_ms: i64,
    /// Rejected entries per `trace: <reason>` / `observe: <reason>`.
    pub rejected: BTreeMap<String, u64>,
}

impl<'a, I> Observed<'a, I>
where
    I: Iterator<Item = Result<TraceEntry, TraceError>>,
{
    pub(super) fn new(verb: &'static str, entries: I, observer: &'a mut Observer) -> Self {
        Self {
            verb,
            reader: entries,
            observer,
            entries: 0,
            last_observed_at_ms: 0,
            rejected: BTreeMap::new(),
        }
    }

    /// Rejected entries, all reasons.
    pub(super) fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

impl<I> Iterator for Observed<'_, I>
where
    I: Iterator<Item = Result<TraceEntry, TraceError>>,
{
    type Item = Vec<Observation>;

    fn next(&mut self) -> Option<Vec<Observation>> {
        let entry = loop {
            match self.reader.next()? {
                Ok(e) => break e,
                Err(e) => {
                    eprintln!("{}: {e}", self.verb);
                    *self.rejected.entry(format!("trace: {}", e.reason())).or_default() += 1;
                }
            }
        };
        self.entries += 1;
        self.last_observed_at_ms = entry.observed_at_ms;
        let mut batch = Vec::new();
        for released in self.observer.admit(entry) {
            match released {
                Ok(observations) => batch.extend(observations),
                Err(e) => {
                    eprintln!("{}: {e}", self.verb);
                    *self.rejected.entry(format!("observe: {}", e.reason())).or_default() += 1;
                }
            }
        }
        Some(batch)
    }
}
