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
use kubefacts::{
    observe::{Observation, Observer},
    trace::{self, MinimalEntry, TraceEntry, TraceError, TraceReader},
};

/// A trace file being read (`-`: standard input), streamed: traces of large clusters are
/// gigabytes, so none is read into memory whole.
pub(super) struct TraceFile {
    /// The path as given.
    pub name: String,
    /// The file's size; `None` for a stream (standard input, a pipe, a device).
    pub total_bytes: Option<u64>,
    /// Bytes read so far (for a progress bar).
    pub read_bytes: Rc<Cell<u64>>,
    /// The entries.
    pub entries: TraceReader<BufReader<CountingRead<Box<dyn Read + Send>>>>,
}

impl std::fmt::Debug for TraceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceFile").field("name", &self.name).finish_non_exhaustive()
    }
}

impl TraceFile {
    /// Opens `path` (`-`: standard input).
    pub(super) fn open(path: &Path) -> anyhow::Result<Self> {
        TraceInput::open(path).map(Self::from)
    }
}

impl From<TraceInput> for TraceFile {
    fn from(input: TraceInput) -> Self {
        let TraceInput { name, total_bytes, input } = input;
        let (counted, read_bytes) = CountingRead::new(input);
        Self {
            name,
            total_bytes,
            read_bytes,
            entries: trace::read(BufReader::with_capacity(1 << 20, counted)),
        }
    }
}

/// A trace opened and not read yet: it may move to the thread that reads it (a
/// [`TraceFile`] stays on one).
pub(super) struct TraceInput {
    name: String,
    total_bytes: Option<u64>,
    input: Box<dyn Read + Send>,
}

impl TraceInput {
    /// Opens `path` (`-`: standard input).
    pub(super) fn open(path: &Path) -> anyhow::Result<Self> {
        let (input, total_bytes): (Box<dyn Read + Send>, _) = if path.as_os_str() == "-" {
            (Box::new(std::io::stdin()), None)
        } else {
            let file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
            // A pipe or a device (`/dev/stdin`, a FIFO) has no size: it is a stream.
            let size = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
            (Box::new(file), size)
        };
        Ok(Self { name: path.display().to_string(), total_bytes, input })
    }

    /// Whether it is a stream (standard input, a pipe, a device): its next line may be
    /// minutes away.
    pub(super) fn is_stream(&self) -> bool {
        self.total_bytes.is_none()
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
    /// The first line of the entry read last (a trace file's reader keeps it), to name the
    /// line of an entry that cannot be observed.
    entry_line: Option<Rc<Cell<usize>>>,
}

impl<'a, I> Observed<'a, I>
where
    I: Iterator<Item = Result<MinimalEntry, TraceError>>,
{
    pub(super) fn new(verb: &'static str, entries: I, observer: &'a mut Observer) -> Self {
        Self {
            verb,
            reader: entries,
            observer,
            entries: 0,
            last_observed_at_ms: 0,
            rejected: BTreeMap::new(),
            entry_line: None,
        }
    }

    /// Names the trace line of each entry that cannot be observed (`line` is the reader's
    /// [`TraceReader::entry_line`]).
    pub(super) fn with_lines(mut self, line: Rc<Cell<usize>>) -> Self {
        self.entry_line = Some(line);
        self
    }

    /// After the whole trace was read: an error (a non-zero exit) if any entry was
    /// rejected, saying that everything else was `done`, so no script takes a short read
    /// for a whole one.
    pub(super) fn all_used(&self, done: &str) -> anyhow::Result<()> {
        let rejected = self.rejected_total();
        if rejected == 0 {
            return Ok(());
        }
        let reasons: Vec<String> = self.rejected.iter().map(|(r, n)| format!("{n} {r}")).collect();
        anyhow::bail!(
            "{rejected} trace entr{} rejected ({}), each reported above with its line; the other {} entries were {done}",
            if rejected == 1 { "y was" } else { "ies were" },
            reasons.join(", "),
            self.entries
        )
    }

    /// Rejected entries, all reasons.
    pub(super) fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }

    /// After the trace: the heartbeats `--finish` adds (see [`finishing_heartbeats`]), and
    /// what observing them released (heartbeat records, and anything admission held).
    pub(super) fn finish(
        &mut self,
        config: &kubefacts::config::PipelineConfig,
    ) -> (Vec<TraceEntry>, Vec<Observation>) {
        let added = if self.entries == 0 {
            Vec::new()
        } else {
            finishing_heartbeats(self.last_observed_at_ms, config)
        };
        let mut batch = Vec::new();
        for entry in &added {
            for released in self.observer.admit(entry.clone()) {
                match released {
                    Ok(observations) => batch.extend(observations),
                    Err(e) => eprintln!("{}: {e}", self.verb),
                }
            }
        }
        (added, batch)
    }
}

impl<I> Iterator for Observed<'_, I>
where
    I: Iterator<Item = Result<MinimalEntry, TraceError>>,
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
                    match &self.entry_line {
                        Some(line) => eprintln!("{}: line {}: {e}", self.verb, line.get()),
                        None => eprintln!("{}: {e}", self.verb),
                    }
                    *self.rejected.entry(format!("observe: {}", e.reason())).or_default() += 1;
                }
            }
        }
        Some(batch)
    }
}

/// `--finish` of `publish` and `replay`: end a finite trace the way a quiet cluster does.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FinishArgs {
    /// After the trace's last entry, write a heartbeat every `[watch].heartbeat_interval_ms`
    /// of observation time (to every partition of every input topic, as the watcher of a
    /// quiet cluster does) until past the end of the last entry's journal window plus
    /// `[journal].grace_ms`: every stage then processes every record, and every window is
    /// final. Without it, what came after the trace's last heartbeat waits for more input.
    #[arg(long)]
    pub finish: bool,
}

/// The heartbeats `--finish` adds after a trace whose last entry was observed at `last_ms`
/// ([`kubefacts::config::PipelineConfig::finishing_heartbeats`]).
pub(super) fn finishing_heartbeats(
    last_ms: i64,
    config: &kubefacts::config::PipelineConfig,
) -> Vec<TraceEntry> {
    config.finishing_heartbeats(last_ms)
}

/// What `--finish` added, for the verb's summary line.
pub(super) fn finished_line(
    verb: &str,
    added: &[TraceEntry],
    config: &kubefacts::config::PipelineConfig,
) -> String {
    let (Some(first), Some(last)) = (added.first(), added.last()) else {
        return format!("{verb}: --finish added nothing (the trace is empty)");
    };
    let time = |ms: i64| kubefacts::codec::json::rfc3339_millis(ms).unwrap_or_else(|| ms.to_string());
    format!(
        "{verb}: finished the trace as a quiet cluster would: {} heartbeat(s) every {} ms from {} to {} \
         (past the last window's end + grace): every window is final",
        added.len(),
        config.watch.heartbeat_interval_ms,
        time(first.observed_at_ms),
        time(last.observed_at_ms)
    )
}

/// What minimization's bounds cut and what was skipped as too large, when anything was
/// (docs/security.md, "Bounds"): one line for `verb`'s summary.
pub(super) fn bounded_line(verb: &str, cuts: kubefacts::observe::Cuts, oversized: u64) -> Option<String> {
    (cuts.any() || oversized > 0).then(|| {
        format!(
            "{verb}: bounded: {} Job conditions and {} Pod containers cut, {} reasons shortened; \
             {oversized} observations over the producer's limit skipped",
            cuts.conditions, cuts.containers, cuts.reasons
        )
    })
}
