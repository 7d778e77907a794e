//! `[journal]`: finished runs filed into tumbling windows by `finished_at` (DESIGN §5.1), on
//! `job-runs.v1` keyed by [`JobRunWindowKey`] — a compacted topic where each emission
//! supersedes the last for its window.
//!
//! * Input: the runs `[runs]` writes onto the internal `journal_repartition` topic, keyed
//!   as the journal asks ([`JournalInputKey`]: by window start), with `[runs]`'s stream
//!   time forwarded to every partition, so windows close in a quiet cluster too.
//! * A window holds every run filed in it, **by run UID**: a run seen again (relist, replay)
//!   changes nothing; one that differs replaces its earlier version.
//! * A changed window is emitted at most once per `emit_interval_ms` of stream time (a
//!   window is rewritten whole: emitting on every run would be quadratic), and once more,
//!   `is_final`, when stream time passes window end + `grace_ms`.
//! * A window of more than `eager_window_runs` runs is emitted again only once the runs
//!   filed since its last emission are `emit_growth_percent` of it, or `emit_max_delay_ms`
//!   has passed: each emission rewrites every run, so growth-gating bounds what a run costs
//!   in bytes written (about 1 + 100 / `emit_growth_percent` copies) whatever the fleet.
//! * A run arriving after its window was final (a relist finding a three-hour-old run)
//!   re-opens it: a new revision, still `is_final`, within `retention_ms` of the window's
//!   end. Beyond retention the run is refused with reason `beyond_retention` (the runtime
//!   dead-letters it) and the window's state is gone.
//! * Emissions copy bytes: each window's runs are also kept as Avro datums in emission
//!   order (derived from the `runs` store, rebuilt from it after a restore, never
//!   changelogged), so rewriting a window of n runs costs a copy of n datums, not n
//!   clones and encodings of whole runs.

use std::collections::BTreeMap;

use super::config::JournalConfig;
use super::model::{JobRun, JobRunWindow, JobRunWindowKey};
use super::state::WindowState;
use super::wiring::{JournalEvent, JournalOut};
use crate::codec::direct::{Datum, write_long};
use crate::runtime::{
    KvStore, OutputPort, Outputs, ProcessError, Processor, Reason, RecordMeta, StateStore, StreamTime,
};

/// How `[journal]` wants its input keyed: by the start of the window a run finished in, so
/// the runs of one window meet in one task. The writer upstream applies it, as the sink of
/// a Kafka Streams `groupBy` does; the rule, and the window length, stay the journal's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalInputKey {
    cfg: JournalConfig,
}

impl JournalInputKey {
    /// The `journal_repartition` key of `run`: its window start, in decimal.
    pub fn key(&self, run: &JobRun) -> String {
        self.cfg.window_start(run.finished_at).to_string()
    }
}

/// The `[journal]` processor of one task.
#[derive(Debug)]
pub struct Journal {
    cfg: JournalConfig,
    windows: KvStore<i64, WindowState>,
    /// (window start, run UID) → run.
    runs: KvStore<(i64, String), JobRun>,
    /// (window start, run UID) → the trace context of the record that filed the run, until
    /// the window's next emission links to it (kept only for records that carried one).
    contexts: KvStore<(i64, String), String>,
    /// Window start → its runs' datums by (finished_at, run UID), the order they are
    /// emitted in. A window is here from its first emission by this instance on (built from
    /// `runs` then), and kept in step with `runs` after that.
    datums: BTreeMap<i64, BTreeMap<(i64, String), Vec<u8>>>,
}

impl Journal {
    /// `[journal]`'s output.
    pub const OUTPUTS: [OutputPort; 1] = [OutputPort {
        topic: "job_runs",
        record: JobRunWindow::FULL_NAME,
        compacted: true,
        key_record: Some(JobRunWindowKey::FULL_NAME),
        stream_time_every_ms: None,
    }];

    /// How a journal configured by `cfg` wants `journal_repartition` keyed.
    pub fn input_key(cfg: &JournalConfig) -> JournalInputKey {
        JournalInputKey { cfg: *cfg }
    }

    /// A journal with empty state.
    pub fn new(cfg: JournalConfig) -> Self {
        Self {
            cfg,
            windows: KvStore::new("windows"),
            runs: KvStore::new("runs"),
            contexts: KvStore::new("run-contexts"),
            datums: BTreeMap::new(),
        }
    }

    fn end(&self, start: i64) -> i64 {
        start + self.cfg.window_length_ms
    }

    fn emit(&mut self, start: i64, mut state: WindowState, now: StreamTime, out: &mut Outputs) {
        let is_final = now >= self.end(start) + self.cfg.grace_ms;
        out.count(JournalEvent::WindowsEmitted, 1);
        if is_final && !state.final_emitted {
            out.count(JournalEvent::WindowsFinalized, 1);
        }
        state.revision += 1;
        state.emitted_at = Some(now);
        state.dirty = false;
        let changed = std::mem::take(&mut state.changed);
        state.final_emitted = is_final;
        let runs = &self.runs;
        let datums = self.datums.entry(start).or_insert_with(|| {
            runs.range((start, String::new())..(start + 1, String::new()))
                .map(|(_, run)| ((run.finished_at, run.run_uid.clone()), datum(run)))
                .collect()
        });
        let key = JobRunWindowKey { window_start: start, window_length_ms: self.cfg.window_length_ms };
        let head = JobRunWindow {
            window_start: start,
            window_length_ms: self.cfg.window_length_ms,
            revision: state.revision,
            is_final,
            stream_time: now,
            runs: Vec::new(),
        };
        // The record `JobRunWindow` with every run, as apache-avro writes it: the fields
        // before `runs`, one block of all the runs' datums (none when empty), the 0 block.
        let write = |out: &mut Vec<u8>| {
            out.reserve(datums.values().map(Vec::len).sum::<usize>() + 48);
            head.write_head(out);
            if !datums.is_empty() {
                write_long(out, datums.len() as i64);
                datums.values().for_each(|d| out.extend_from_slice(d));
            }
            out.push(0);
        };
        if cfg!(debug_assertions) {
            same_as_apache_avro(&self.runs, head.clone(), &write);
        }
        // Typed records of embedded schemas always encode; were it ever to fail, the window
        // stays dirty and is emitted again at the next chance rather than lost.
        if out.emit_keyed_with(JournalOut::Windows, &key, JobRunWindow::FULL_NAME, write).is_err() {
            state.dirty = true;
            state.changed = changed;
            state.revision -= 1;
        } else {
            // This revision is the first to carry the runs filed since the last one: it
            // links to their records, which then need no context any more.
            let filed = self.take_contexts(start);
            out.link_last(filed.into_iter().map(|(_, tp)| tp));
        }
        self.windows.put(start, state);
    }

    /// Whether a changed, open window is due: the interval has passed, and the window is
    /// small, has grown enough, or has waited the longest delay.
    fn worth_emitting(&self, w: &WindowState, now: StreamTime) -> bool {
        let since = |ms: i64| w.emitted_at.is_none_or(|at| now - at >= ms);
        since(self.cfg.emit_interval_ms)
            && (w.runs <= self.cfg.eager_window_runs
                || w.changed.saturating_mul(100) >= w.runs.saturating_mul(self.cfg.emit_growth_percent)
                || since(self.cfg.emit_max_delay_ms))
    }

    /// Removes and returns the trace contexts kept for `start`'s runs.
    fn take_contexts(&mut self, start: i64) -> Vec<((i64, String), String)> {
        let range = (start, String::new())..(start + 1, String::new());
        let taken: Vec<((i64, String), String)> =
            self.contexts.range(range).map(|(k, tp)| (k.clone(), tp.clone())).collect();
        for (key, _) in &taken {
            self.contexts.delete(key);
        }
        taken
    }
}

/// Debug builds: the window written from kept datums is what apache-avro writes for the
/// window built from the `runs` store (sorted by `finished_at`, then `run_uid`).
fn same_as_apache_avro(
    runs: &KvStore<(i64, String), JobRun>,
    head: JobRunWindow,
    write: &dyn Fn(&mut Vec<u8>),
) {
    use crate::codec::{Framing, RecordWriter, SchemaSet};
    let start = head.window_start;
    let mut runs: Vec<JobRun> =
        runs.range((start, String::new())..(start + 1, String::new())).map(|(_, r)| r.clone()).collect();
    runs.sort_by(|a, b| (a.finished_at, &a.run_uid).cmp(&(b.finished_at, &b.run_uid)));
    let known = SchemaSet::embedded().and_then(|s| s.current(JobRunWindow::FULL_NAME)).expect("embedded");
    let writer =
        RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).expect("writer");
    let generic = writer.encode(&JobRunWindow { runs, ..head }).expect("a window encodes");
    assert_eq!(writer.encode_with(JobRunWindow::FULL_NAME, write).ok(), Some(generic), "window {start}");
}

/// A run's Avro datum, as it sits in a window's `runs`.
fn datum(run: &JobRun) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    run.write(&mut out);
    out
}

impl Processor for Journal {
    type Input = JobRun;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![&mut self.windows, &mut self.runs, &mut self.contexts]
    }

    fn process(
        &mut self,
        run: JobRun,
        meta: &RecordMeta,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        let start = self.cfg.window_start(run.finished_at);
        if now > self.end(start) + self.cfg.retention_ms {
            return Err(ProcessError {
                reason: Reason::BeyondRetention,
                detail: format!(
                    "run {} finished at {} ms, its window ended more than {} ms before stream time {now}",
                    run.run_uid, run.finished_at, self.cfg.retention_ms
                ),
            });
        }
        let key = (start, run.run_uid.clone());
        let known = self.runs.get(&key);
        if known == Some(&run) {
            out.count(JournalEvent::RunsDuplicate, 1);
            return Ok(()); // seen before: nothing changes
        }
        let mut state = self.windows.get(&start).cloned().unwrap_or_default();
        out.count(JournalEvent::RunsFiled, 1);
        if state.final_emitted {
            out.count(JournalEvent::RunsLate, 1);
        }
        if known.is_none() {
            state.runs += 1;
        }
        if let Some(datums) = self.datums.get_mut(&start) {
            if let Some(old) = known {
                datums.remove(&(old.finished_at, old.run_uid.clone()));
            }
            datums.insert((run.finished_at, run.run_uid.clone()), datum(&run));
        }
        if let Some(tp) = &meta.traceparent {
            self.contexts.put(key.clone(), tp.clone());
        }
        self.runs.put(key, run);
        state.dirty = true;
        state.changed += 1;
        if now >= self.end(start) + self.cfg.grace_ms {
            // A late run re-opens a closed window now: stream time need not move again.
            self.emit(start, state, now, out);
        } else {
            self.windows.put(start, state);
        }
        Ok(())
    }

    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs) {
        let due: Vec<(i64, WindowState)> = self
            .windows
            .iter()
            .filter(|(start, w)| {
                let end = **start + self.cfg.window_length_ms;
                let finalizes = now >= end + self.cfg.grace_ms && !w.final_emitted && w.runs > 0;
                finalizes || (w.dirty && (now >= end + self.cfg.grace_ms || self.worth_emitting(w, now)))
            })
            .map(|(s, w)| (*s, w.clone()))
            .collect();
        for (start, state) in due {
            self.emit(start, state, now, out);
        }
        // Past retention nothing can re-open a window: forget it.
        let expired: Vec<i64> = self
            .windows
            .iter()
            .filter(|(start, _)| now > **start + self.cfg.window_length_ms + self.cfg.retention_ms)
            .map(|(s, _)| *s)
            .collect();
        for start in expired {
            self.windows.delete(&start);
            self.datums.remove(&start);
            self.take_contexts(start);
            let gone: Vec<(i64, String)> = self
                .runs
                .range((start, String::new())..(start + 1, String::new()))
                .map(|(k, _)| k.clone())
                .collect();
            for key in gone {
                self.runs.delete(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        codec::{Framing, RecordWriter, SchemaSet},
        journal::{OwnerKind, RunOwner, RunResult},
    };

    fn outputs() -> Outputs {
        let writer = |name| {
            let known = SchemaSet::embedded().unwrap().current(name).unwrap();
            RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
        };
        Outputs::new(vec![writer(JobRunWindow::FULL_NAME)], vec![1])
            .with_key_writers(vec![Some(writer(JobRunWindowKey::FULL_NAME))])
    }

    fn run(n: i64, finished_at: i64, failed_pods: i32) -> JobRun {
        JobRun {
            namespace: "etl".into(),
            owner: RunOwner { kind: OwnerKind::Job, name: format!("job-{n}"), uid: format!("uid-{n}") },
            run_name: format!("job-{n}"),
            run_uid: format!("uid-{n}"),
            started_at: Some(finished_at - 10),
            finished_at,
            result: RunResult::Succeeded,
            failure_reason: None,
            succeeded_pods: 1,
            failed_pods,
            parallelism: None,
            completions: Some(1),
            backoff_limit: None,
            exits: Vec::new(),
        }
    }

    /// A repartitioned record's metadata at `now`.
    fn meta(now: i64, traceparent: Option<&str>) -> RecordMeta {
        RecordMeta {
            input: 0,
            partition: 0,
            offset: 0,
            timestamp_ms: now,
            writer: crate::runtime::Writer::SOLE,
            key: None,
            traceparent: traceparent.map(str::to_owned),
        }
    }

    fn feed(j: &mut Journal, runs: Vec<(i64, JobRun)>, out: &mut Outputs) -> Vec<Option<Vec<u8>>> {
        for (now, r) in runs {
            out.set_now(now);
            j.process(r, &meta(0, None), now, out).unwrap();
            j.on_stream_time(now, out);
        }
        out.take().into_iter().map(|r| r.value).collect()
    }

    /// The datums a journal keeps are derived state: a journal restored from the changelog
    /// (which rebuilds them from its runs) emits the same bytes as the one that kept going,
    /// through a replaced run (same UID, other `finished_at`) and a duplicate.
    #[test]
    fn a_restored_journal_emits_the_windows_the_running_one_does() {
        let cfg = JournalConfig::default();
        let (mut a, mut out_a) = (Journal::new(cfg), outputs());
        feed(
            &mut a,
            vec![(1_000, run(1, 500, 0)), (20_000, run(2, 900, 0)), (40_000, run(3, 700, 1))],
            &mut out_a,
        );
        let mut b = Journal::new(cfg);
        for (store_a, store_b) in a.stores().into_iter().zip(b.stores()) {
            for (k, v) in store_a.take_changes() {
                store_b.restore(&k, v.as_deref()).unwrap();
            }
        }
        let later = vec![(60_000, run(2, 300, 2)), (80_000, run(4, 100, 0)), (100_000, run(4, 100, 0))];
        let (from_a, from_b) = (feed(&mut a, later.clone(), &mut out_a), feed(&mut b, later, &mut outputs()));
        assert_eq!(from_a.len(), 2, "one emission per changed interval");
        assert_eq!(from_a, from_b);
    }

    /// Past `eager_window_runs`, a changed window waits until the runs filed since its last
    /// emission are `emit_growth_percent` of it, or `emit_max_delay_ms` has passed; at or
    /// below it, every interval emits.
    #[test]
    fn a_large_window_is_rewritten_once_it_has_grown_enough() {
        let cfg = JournalConfig {
            eager_window_runs: 4,
            emit_growth_percent: 50,
            emit_max_delay_ms: 120_000,
            ..JournalConfig::default()
        };
        let (mut j, mut out) = (Journal::new(cfg), outputs());
        let mut step = |j: &mut Journal, now: i64, r: Option<JobRun>| -> usize {
            out.set_now(now);
            if let Some(r) = r {
                j.process(r, &meta(now, None), now, &mut out).unwrap();
            }
            j.on_stream_time(now, &mut out);
            out.take().len()
        };
        let emitted: Vec<usize> =
            (1..=9).map(|n| step(&mut j, n * 10_000, Some(run(n, 100 * n, 0)))).collect();
        // Runs 1–4: small, every interval. 5 of 5, 6 of 6, 7 of 7: 1, 2, 3 new < 50 %.
        // Run 8: 4 new of 8 = 50 %. Run 9: 1 of 9.
        assert_eq!(emitted, [1, 1, 1, 1, 0, 0, 0, 1, 0]);
        assert_eq!(step(&mut j, 80_000 + 119_999, None), 0, "not yet the longest delay");
        assert_eq!(step(&mut j, 80_000 + 120_000, None), 1, "the longest delay since run 8's emission");
        assert_eq!(step(&mut j, 400_000, None), 0, "nothing changed since");
    }

    /// A window revision links to the records that filed the runs it carries for the first
    /// time, each once: a later revision links only to what came since, and a run filed by a
    /// record without a context adds no link. Linked contexts leave the state.
    #[test]
    fn a_window_revision_links_to_the_records_that_filed_its_new_runs() {
        let mut j = Journal::new(JournalConfig::default());
        let mut out = outputs();
        let mut file = |j: &mut Journal, now: i64, r: JobRun, tp: Option<&str>| {
            out.set_now(now);
            j.process(r, &meta(now, tp), now, &mut out).unwrap();
            j.on_stream_time(now, &mut out);
            out.take().into_iter().map(|r| r.links).collect::<Vec<_>>()
        };
        assert_eq!(file(&mut j, 1_000, run(1, 500, 0), Some("tp-1")), [vec!["tp-1".to_owned()]]);
        assert_eq!(
            file(&mut j, 2_000, run(2, 600, 0), Some("tp-2")),
            Vec::<Vec<String>>::new(),
            "within the interval"
        );
        assert_eq!(file(&mut j, 3_000, run(3, 700, 0), None), Vec::<Vec<String>>::new());
        assert_eq!(j.contexts.len(), 1, "only run 2's context waits");
        assert_eq!(
            file(&mut j, 20_000, run(4, 800, 0), Some("tp-4")),
            [vec!["tp-2".to_owned(), "tp-4".to_owned()]]
        );
        assert_eq!(j.contexts.len(), 0, "linked contexts are dropped");
    }
}
