//! A cluster trace read through an [`Observer`]: what `demo`, `replay` and `publish` share.

use std::collections::BTreeMap;

use crate::{
    observe::{Observation, Observer},
    trace::{self, TraceReader},
};

/// Iterates over the observations of a trace, one batch per trace entry read (admission
/// may release nothing, or earlier held entries with it). Entries that cannot be read or
/// observed are reported on stderr, prefixed with the verb, and counted by reason; reading
/// goes on.
pub(super) struct Observed<'a> {
    verb: &'static str,
    reader: TraceReader<&'a [u8]>,
    observer: &'a mut Observer,
    /// Trace entries read.
    pub entries: u64,
    /// Rejected entries per `trace: <reason>` / `observe: <reason>`.
    pub rejected: BTreeMap<String, u64>,
}

impl<'a> Observed<'a> {
    pub(super) fn new(verb: &'static str, text: &'a str, observer: &'a mut Observer) -> Self {
        Self { verb, reader: trace::read(text.as_bytes()), observer, entries: 0, rejected: BTreeMap::new() }
    }

    /// Rejected entries, all reasons.
    pub(super) fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

impl Iterator for Observed<'_> {
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
