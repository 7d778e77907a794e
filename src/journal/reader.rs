//! How a consumer of `job-runs.v2` rebuilds a window: its latest summary, plus pages
//! 1..=`summary.pages`, each run by UID from the highest page that holds it. Pure: feed it
//! the parts read (any partition order; a part read twice changes nothing) and ask for the
//! windows. docs/JOURNAL.md gives the same recipe for a warehouse and for Python.

use std::collections::{BTreeMap, HashMap};

use thiserror::Error;

use super::model::{JobRun, JobRunPage, JobRunWindowPart, JobRunWindowSummary};

/// One window as its parts give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuiltWindow {
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window length, ms.
    pub window_length_ms: i64,
    /// The latest summary's revision.
    pub revision: i64,
    /// Stream time of the latest summary.
    pub stream_time: i64,
    /// The latest summary.
    pub summary: JobRunWindowSummary,
    /// Every run of the window, sorted by `finished_at`, then `run_uid`.
    pub runs: Vec<JobRun>,
}

/// Why a window cannot be rebuilt (yet) from the parts read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Incomplete {
    /// Pages were read, no summary.
    #[error("window {window_start}: no summary read")]
    NoSummary {
        /// Window start, epoch ms.
        window_start: i64,
    },
    /// The summary counts a page not read.
    #[error("window {window_start}: page {page} of {pages} not read")]
    MissingPage {
        /// Window start, epoch ms.
        window_start: i64,
        /// The page missing.
        page: i32,
        /// Pages the summary counts.
        pages: i32,
    },
    /// The pages hold another number of runs than the summary counts.
    #[error("window {window_start}: the pages hold {held} runs, the summary counts {counted}")]
    Miscounted {
        /// Window start, epoch ms.
        window_start: i64,
        /// Distinct runs in pages 1..=pages.
        held: usize,
        /// The summary's `runs`.
        counted: i64,
    },
    /// A record that is neither a summary nor a page (or carries the wrong one for its part).
    #[error("window {window_start} part {part}: {what}")]
    Malformed {
        /// Window start, epoch ms.
        window_start: i64,
        /// The part.
        part: i32,
        /// What is wrong.
        what: &'static str,
    },
}

/// The parts of `job-runs.v2` read so far.
#[derive(Debug, Default)]
pub struct WindowReader {
    /// (window start, length) → the summary of the highest revision read.
    summaries: BTreeMap<(i64, i64), (i64, i64, JobRunWindowSummary)>,
    /// (window start, length) → page → its runs.
    pages: BTreeMap<(i64, i64), HashMap<i32, JobRunPage>>,
    malformed: Vec<Incomplete>,
}

impl WindowReader {
    /// A reader that has read nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in one part.
    pub fn add(&mut self, part: JobRunWindowPart) {
        let window = (part.window_start, part.window_length_ms);
        let malformed =
            |what| Incomplete::Malformed { window_start: part.window_start, part: part.part, what };
        match (part.part, part.summary, part.page) {
            (0, Some(summary), None) => {
                let slot =
                    self.summaries.entry(window).or_insert((i64::MIN, 0, JobRunWindowSummary::default()));
                if part.revision >= slot.0 {
                    *slot = (part.revision, part.stream_time, summary);
                }
            }
            (n, None, Some(page)) if n > 0 => {
                self.pages.entry(window).or_default().insert(n, page);
            }
            (0, _, _) => self.malformed.push(malformed("part 0 carries no summary, or a page too")),
            _ => self.malformed.push(malformed("a page part carries no page, or a summary too")),
        }
    }

    /// Every window read, rebuilt, or why it cannot be.
    pub fn windows(&self) -> Vec<Result<RebuiltWindow, Incomplete>> {
        let mut out: Vec<Result<RebuiltWindow, Incomplete>> =
            self.malformed.iter().cloned().map(Err).collect();
        for window in self.pages.keys().filter(|w| !self.summaries.contains_key(w)) {
            out.push(Err(Incomplete::NoSummary { window_start: window.0 }));
        }
        for (&(window_start, window_length_ms), (revision, stream_time, summary)) in &self.summaries {
            out.push(self.rebuild(window_start, window_length_ms, *revision, *stream_time, summary));
        }
        out
    }

    fn rebuild(
        &self,
        window_start: i64,
        window_length_ms: i64,
        revision: i64,
        stream_time: i64,
        summary: &JobRunWindowSummary,
    ) -> Result<RebuiltWindow, Incomplete> {
        let empty = HashMap::new();
        let pages = self.pages.get(&(window_start, window_length_ms)).unwrap_or(&empty);
        let mut runs: HashMap<&str, &JobRun> = HashMap::new();
        for page in 1..=summary.pages {
            let Some(p) = pages.get(&page) else {
                return Err(Incomplete::MissingPage { window_start, page, pages: summary.pages });
            };
            // A later page holds a newer version of a run it repeats.
            runs.extend(p.runs.iter().map(|r| (r.run_uid.as_str(), r)));
        }
        if runs.len() as i64 != summary.runs {
            return Err(Incomplete::Miscounted { window_start, held: runs.len(), counted: summary.runs });
        }
        let mut runs: Vec<JobRun> = runs.into_values().cloned().collect();
        runs.sort_by(|a, b| (a.finished_at, &a.run_uid).cmp(&(b.finished_at, &b.run_uid)));
        Ok(RebuiltWindow {
            window_start,
            window_length_ms,
            revision,
            stream_time,
            summary: summary.clone(),
            runs,
        })
    }
}
