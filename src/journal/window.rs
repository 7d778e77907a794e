//! `[journal]`: finished runs filed into tumbling windows by `finished_at` (DESIGN §5.1), on
//! `job-runs.v2` keyed by [`JobRunWindowPartKey`]: a compacted topic where each window is a
//! superseding summary (part 0) plus append-only pages of its runs (parts 1, 2, …).
//!
//! * Input: the runs `[runs]` writes onto the internal `journal_repartition` topic, keyed
//!   as the journal asks ([`JournalInputKey`]: by window start), with `[runs]`'s stream
//!   time forwarded to every partition, so windows close in a quiet cluster too.
//! * A window holds every run filed in it, **by run UID**: a run seen again (relist, replay)
//!   changes nothing; one that differs is written again, in a later page, and replaces its
//!   earlier version (a reader keeps the highest page's).
//! * A changed window is emitted at most once per `emit_interval_ms` of stream time, and
//!   once more, `is_final`, when stream time passes window end + `grace_ms`. An emission
//!   appends the runs filed since the last one as new pages — never more than
//!   `max_record_bytes` each, key included; a written page is never rewritten — and
//!   supersedes the summary. What an emission writes is proportional to its new runs,
//!   whatever the window's size.
//! * A run arriving after its window was final (a relist finding a three-hour-old run)
//!   re-opens it: one page and one summary of a new revision, still `is_final`, within
//!   `retention_ms` of the window's end. Beyond retention the run is refused with reason
//!   `beyond_retention` (the runtime dead-letters it) and the window's state is gone.
//! * State: per window its counts and page number; per run filed its digest, result and
//!   reason (not the run); the runs waiting for the next page.

use super::config::JournalConfig;
use super::datum::write_datums;
use super::model::{
    FailureReasonCount, JobRun, JobRunWindowPart, JobRunWindowPartKey, JobRunWindowSummary, RunResult,
};
use super::state::{FiledRun, WindowState};
use super::wiring::{JournalEvent, JournalOut};
use crate::codec::{canonical::crc64_avro, direct::Datum};
use crate::runtime::{
    KvStore, OutputPort, Outputs, ProcessError, Processor, Reason, RecordMeta, StateStore, StreamTime,
};

/// Bytes of a page record that are not its runs, bounded from above: the framing (10), the
/// key (≤ 35), the head and unions (≤ 50), the array's block count (≤ 10) and end; the rest
/// of the margin is for the record's headers (the writer, a trace context).
pub const PAGE_OVERHEAD_BYTES: usize = 1_024;

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
    /// (window start, run UID) → what is kept of a filed run.
    filed: KvStore<(i64, String), FiledRun>,
    /// (window start, run UID) → a run filed since its window's last page.
    pending: KvStore<(i64, String), JobRun>,
    /// (window start, run UID) → the trace context of the record that filed the run, until
    /// the window's next emission links to it (kept only for records that carried one).
    contexts: KvStore<(i64, String), String>,
}

impl Journal {
    /// `[journal]`'s output.
    pub const OUTPUTS: [OutputPort; 1] = [OutputPort {
        topic: "job_runs",
        record: JobRunWindowPart::FULL_NAME,
        compacted: true,
        key_record: Some(JobRunWindowPartKey::FULL_NAME),
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
            // Named anew with job-runs.v2: the v1 journal's stores ("windows", "runs") held
            // other values, and its changelogs are left unread (docs/JOURNAL.md, upgrading).
            windows: KvStore::new("windows-v2"),
            filed: KvStore::new("filed-runs"),
            pending: KvStore::new("pending-runs"),
            contexts: KvStore::new("run-contexts"),
        }
    }

    fn end(&self, start: i64) -> i64 {
        start + self.cfg.window_length_ms
    }

    /// The most bytes of run datums one page holds.
    fn page_budget(&self) -> usize {
        (self.cfg.max_record_bytes as usize).saturating_sub(PAGE_OVERHEAD_BYTES)
    }

    /// Writes `start`'s pending runs as new pages, then its summary.
    fn emit(&mut self, start: i64, mut state: WindowState, now: StreamTime, out: &mut Outputs) {
        let is_final = now >= self.end(start) + self.cfg.grace_ms;
        out.count(JournalEvent::WindowsEmitted, 1);
        if is_final && !state.final_emitted {
            out.count(JournalEvent::WindowsFinalized, 1);
        }
        state.revision += 1;
        state.emitted_at = Some(now);
        state.final_emitted = is_final;
        let len = self.cfg.window_length_ms;
        let part = |part: i32| JobRunWindowPart {
            window_start: start,
            window_length_ms: len,
            part,
            revision: state.revision,
            stream_time: now,
            summary: None,
            page: None,
        };

        let mut pending: Vec<(i64, String, Vec<u8>)> = self
            .pending
            .range(window_range(start))
            .map(|((_, uid), run)| (run.finished_at, uid.clone(), datum(run)))
            .collect();
        pending.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let budget = self.page_budget();
        let mut written = 0;
        for page in pages(&pending, budget) {
            let head = part(state.pages + 1);
            let datums: Vec<Vec<u8>> = page.iter().map(|(_, _, d)| d.clone()).collect();
            let write = |out: &mut Vec<u8>| {
                out.reserve(datums.iter().map(Vec::len).sum::<usize>() + 64);
                head.write_page_head(out);
                write_datums(out, &datums);
            };
            if cfg!(debug_assertions) {
                same_as_apache_avro(&head, &self.pending, page, &write);
            }
            // Typed records of embedded schemas always encode; were it ever to fail, the
            // runs not written stay pending and go into the next emission's pages.
            if out
                .emit_keyed_with(JournalOut::Parts, &head.key(), JobRunWindowPart::FULL_NAME, write)
                .is_err()
            {
                break;
            }
            state.pages += 1;
            out.count(JournalEvent::PagesWritten, 1);
            for (_, uid, _) in page {
                self.pending.delete(&(start, uid.clone()));
            }
            written += page.len();
        }
        state.dirty = written < pending.len();

        let summary = JobRunWindowPart { summary: Some(summary_of(&state, is_final)), ..part(0) };
        if out.emit_keyed_direct(JournalOut::Parts, &summary.key(), &summary).is_err() {
            state.dirty = true;
        } else {
            // This revision is the first to carry the runs filed since the last one: it
            // links to their records, which then need no context any more.
            let filed = self.take_contexts(start);
            out.link_last(filed.into_iter().map(|(_, tp)| tp));
        }
        self.windows.put(start, state);
    }

    /// Removes and returns the trace contexts kept for `start`'s runs.
    fn take_contexts(&mut self, start: i64) -> Vec<((i64, String), String)> {
        let taken: Vec<((i64, String), String)> =
            self.contexts.range(window_range(start)).map(|(k, tp)| (k.clone(), tp.clone())).collect();
        for (key, _) in &taken {
            self.contexts.delete(key);
        }
        taken
    }

    /// Forgets every run of `start` kept in `store`.
    fn forget<V>(store: &mut KvStore<(i64, String), V>, start: i64)
    where
        V: Clone + serde::Serialize + serde::de::DeserializeOwned + Send,
    {
        let gone: Vec<(i64, String)> = store.range(window_range(start)).map(|(k, _)| k.clone()).collect();
        for key in gone {
            store.delete(&key);
        }
    }
}

/// The keys of `start`'s runs in a store keyed by (window start, run UID).
fn window_range(start: i64) -> std::ops::Range<(i64, String)> {
    (start, String::new())..(start + 1, String::new())
}

/// `runs` cut into pages of at most `budget` bytes of datums (a run larger than a page was
/// refused when filed, so every page holds at least one).
fn pages(runs: &[(i64, String, Vec<u8>)], budget: usize) -> Vec<&[(i64, String, Vec<u8>)]> {
    let mut pages = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (i, (_, _, d)) in runs.iter().enumerate() {
        if i > from && bytes + d.len() > budget {
            pages.push(&runs[from..i]);
            (from, bytes) = (i, 0);
        }
        bytes += d.len();
    }
    if from < runs.len() {
        pages.push(&runs[from..]);
    }
    pages
}

/// The summary a window's state gives.
fn summary_of(state: &WindowState, is_final: bool) -> JobRunWindowSummary {
    let failure_reasons: Vec<FailureReasonCount> = state
        .failure_reasons
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(reason, n)| FailureReasonCount { reason: reason.clone(), count: *n as i64 })
        .collect();
    JobRunWindowSummary {
        is_final,
        pages: state.pages,
        runs: state.runs as i64,
        succeeded: state.succeeded as i64,
        failed: failure_reasons.iter().map(|c| c.count).sum(),
        failure_reasons,
    }
}

/// Adds (`by` = 1) or takes out (`by` = −1) one run's result from a window's counts.
fn count(state: &mut WindowState, result: RunResult, reason: Option<&String>, by: i64) {
    let add = |n: &mut u64| *n = n.saturating_add_signed(by);
    match result {
        RunResult::Succeeded => add(&mut state.succeeded),
        RunResult::Failed => {
            let n = state.failure_reasons.entry(reason.cloned()).or_default();
            add(n);
            if *n == 0 {
                state.failure_reasons.remove(&reason.cloned());
            }
        }
        RunResult::Unknown => {}
    }
}

/// Debug builds: a page written from datums is what apache-avro writes for the same page.
fn same_as_apache_avro(
    head: &JobRunWindowPart,
    pending: &KvStore<(i64, String), JobRun>,
    page: &[(i64, String, Vec<u8>)],
    write: &dyn Fn(&mut Vec<u8>),
) {
    use crate::codec::{Framing, RecordWriter, SchemaSet};
    let runs: Vec<JobRun> = page
        .iter()
        .map(|(_, uid, _)| pending.get(&(head.window_start, uid.clone())).cloned().expect("pending"))
        .collect();
    let whole = JobRunWindowPart { page: Some(super::model::JobRunPage { runs }), ..head.clone() };
    let known = SchemaSet::embedded().and_then(|s| s.current(JobRunWindowPart::FULL_NAME)).expect("embedded");
    let writer =
        RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).expect("writer");
    let generic = writer.encode(&whole).expect("a page encodes");
    assert_eq!(
        writer.encode_with(JobRunWindowPart::FULL_NAME, write).ok(),
        Some(generic),
        "page {}",
        head.part
    );
}

/// A run's Avro datum, as it sits in a page's `runs`.
fn datum(run: &JobRun) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    run.write(&mut out);
    out
}

impl Processor for Journal {
    type Input = JobRun;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![&mut self.windows, &mut self.filed, &mut self.pending, &mut self.contexts]
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
        let bytes = datum(&run);
        if bytes.len() > self.page_budget() {
            return Err(ProcessError {
                reason: Reason::EncodeFailed,
                detail: format!(
                    "run {} encodes to {} B, more than a page of at most max_record_bytes = {} B holds",
                    run.run_uid,
                    bytes.len(),
                    self.cfg.max_record_bytes
                ),
            });
        }
        let key = (start, run.run_uid.clone());
        let digest = crc64_avro(&bytes);
        let known = self.filed.get(&key);
        if known.is_some_and(|k| k.digest == digest) {
            out.count(JournalEvent::RunsDuplicate, 1);
            return Ok(()); // seen before: nothing changes
        }
        let mut state = self.windows.get(&start).cloned().unwrap_or_default();
        out.count(JournalEvent::RunsFiled, 1);
        if state.final_emitted {
            out.count(JournalEvent::RunsLate, 1);
        }
        match known {
            None => state.runs += 1,
            Some(old) => {
                let old = old.clone();
                count(&mut state, old.result, old.failure_reason.as_ref(), -1);
            }
        }
        count(&mut state, run.result, run.failure_reason.as_ref(), 1);
        if let Some(tp) = &meta.traceparent {
            self.contexts.put(key.clone(), tp.clone());
        }
        self.filed.put(
            key.clone(),
            FiledRun { digest, result: run.result, failure_reason: run.failure_reason.clone() },
        );
        self.pending.put(key, run);
        state.dirty = true;
        if now >= self.end(start) + self.cfg.grace_ms {
            // A late run re-opens a closed window now: stream time need not move again.
            self.emit(start, state, now, out);
        } else {
            self.windows.put(start, state);
        }
        Ok(())
    }

    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs) {
        let interval = self.cfg.emit_interval_ms;
        let due: Vec<(i64, WindowState)> = self
            .windows
            .iter()
            .filter(|(start, w)| {
                let closed = now >= **start + self.cfg.window_length_ms + self.cfg.grace_ms;
                let finalizes = closed && !w.final_emitted && w.runs > 0;
                let waited = w.emitted_at.is_none_or(|at| now - at >= interval);
                finalizes || (w.dirty && (closed || waited))
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
            self.take_contexts(start);
            Self::forget(&mut self.filed, start);
            Self::forget(&mut self.pending, start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        codec::{Framing, RecordWriter, SchemaSet},
        journal::{OwnerKind, RunOwner, RunResult, WindowReader},
    };

    fn outputs() -> Outputs {
        let writer = |name| {
            let known = SchemaSet::embedded().unwrap().current(name).unwrap();
            RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
        };
        Outputs::new(vec![writer(JobRunWindowPart::FULL_NAME)], vec![1])
            .with_key_writers(vec![Some(writer(JobRunWindowPartKey::FULL_NAME))])
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
        assert_eq!(from_a.len(), 4, "a page and a summary per changed interval");
        assert_eq!(from_a, from_b);
    }

    /// Whether a single-object record is a window's summary.
    fn is_summary(value: &[u8]) -> bool {
        parts(&[Some(value.to_vec())])[0].part == 0
    }

    /// The parts in `values` (single-object records), decoded.
    fn parts(values: &[Option<Vec<u8>>]) -> Vec<JobRunWindowPart> {
        use crate::codec::direct::{Datum, Reader};
        values
            .iter()
            .map(|v| {
                let v = v.as_ref().expect("a value");
                JobRunWindowPart::read(&mut Reader::new(&v[10..])).expect("a part")
            })
            .collect()
    }

    /// A window of more runs than one page holds: every record (key and value) stays within
    /// `max_record_bytes`, each run is written once (pages are appended, never rewritten),
    /// and the reader rebuilds exactly the runs filed.
    #[test]
    fn a_large_window_is_cut_into_pages_no_larger_than_the_limit_and_each_run_written_once() {
        let cfg = JournalConfig { max_record_bytes: 4 * 1024, ..JournalConfig::default() };
        let (mut j, mut out) = (Journal::new(cfg), outputs());
        let mut filed = Vec::new();
        for n in 0..400 {
            let (now, r) = (n * 100, run(n, n * 7, (n % 3) as i32));
            out.set_now(now);
            j.process(r.clone(), &meta(now, None), now, &mut out).unwrap();
            j.on_stream_time(now, &mut out);
            filed.push(r);
        }
        let end = 3_600_000 + cfg.grace_ms;
        out.set_now(end);
        j.on_stream_time(end, &mut out);
        let records = out.take();
        for r in &records {
            let size = r.key.len() + r.value.as_ref().map_or(0, Vec::len);
            assert!(
                size as u64 <= cfg.max_record_bytes - 512,
                "a record of {size} B (headers need room too)"
            );
        }
        let parts = parts(&records.iter().map(|r| r.value.clone()).collect::<Vec<_>>());
        let pages: Vec<&JobRunWindowPart> = parts.iter().filter(|p| p.part > 0).collect();
        let written: usize = pages.iter().map(|p| p.page.as_ref().unwrap().runs.len()).sum();
        assert_eq!(written, 400, "each run in exactly one page");
        let most = pages.iter().map(|p| p.page.as_ref().unwrap().runs.len()).max().unwrap();
        assert!(most > 1 && pages.len() > 4, "the 4 KiB limit cut the runs into pages ({most} runs at most)");
        let parts_of: Vec<i32> = pages.iter().map(|p| p.part).collect();
        assert_eq!(
            parts_of,
            (1..=pages.len() as i32).collect::<Vec<_>>(),
            "pages numbered in order, once each"
        );

        let mut reader = WindowReader::new();
        parts.into_iter().for_each(|p| reader.add(p));
        let windows = reader.windows();
        let [Ok(window)] = windows.as_slice() else { panic!("{windows:?}") };
        filed.sort_by(|a, b| (a.finished_at, &a.run_uid).cmp(&(b.finished_at, &b.run_uid)));
        assert_eq!(window.runs, filed);
        assert!(window.summary.is_final);
        assert_eq!((window.summary.runs, window.summary.succeeded), (400, 400));
    }

    /// A run too large for any page is refused with a reason (dead-lettered), not dropped
    /// and not written as an oversized record.
    #[test]
    fn a_run_larger_than_a_page_is_refused_with_a_reason() {
        let cfg = JournalConfig { max_record_bytes: 4 * 1024, ..JournalConfig::default() };
        let (mut j, mut out) = (Journal::new(cfg), outputs());
        let mut big = run(1, 500, 0);
        big.run_name = "x".repeat(4 * 1024);
        let err = j.process(big, &meta(1_000, None), 1_000, &mut out).unwrap_err();
        assert_eq!(err.reason, Reason::EncodeFailed);
        assert!(err.detail.contains("max_record_bytes = 4096"), "{}", err.detail);
        j.on_stream_time(1_000, &mut out);
        assert!(out.take().is_empty());
    }

    /// A late run re-opens a final window with one page and one summary; a new version of a
    /// run already paged goes into a later page, the summary's counts follow it, and the
    /// reader keeps the newer version.
    #[test]
    fn a_late_run_writes_one_page_and_one_summary_and_a_new_version_wins() {
        let cfg = JournalConfig::default();
        let (mut j, mut out) = (Journal::new(cfg), outputs());
        let closed = 3_600_000 + cfg.grace_ms;
        let mut all = feed(&mut j, vec![(1_000, run(1, 500, 0)), (closed, run(2, 900, 0))], &mut out);
        let late = |r: JobRun, j: &mut Journal, out: &mut Outputs| {
            out.set_now(closed + 1);
            j.process(r, &meta(closed + 1, None), closed + 1, out).unwrap();
            out.take().into_iter().map(|r| r.value).collect::<Vec<_>>()
        };
        let mut failed = run(1, 500, 2);
        failed.result = RunResult::Failed;
        failed.failure_reason = Some("BackoffLimitExceeded".into());
        let wrote = late(failed.clone(), &mut j, &mut out);
        let kinds: Vec<i32> = parts(&wrote).iter().map(|p| p.part).collect();
        assert_eq!(kinds, [3, 0], "one page (the third), then the summary");
        assert_eq!(parts(&wrote)[0].page.as_ref().unwrap().runs, [failed.clone()], "the page holds only it");
        assert!(late(failed.clone(), &mut j, &mut out).is_empty(), "the same run again writes nothing");
        all.extend(wrote);

        let mut reader = WindowReader::new();
        parts(&all).into_iter().for_each(|p| reader.add(p));
        let windows = reader.windows();
        let [Ok(window)] = windows.as_slice() else { panic!("{windows:?}") };
        assert_eq!(window.runs, [failed, run(2, 900, 0)]);
        let s = &window.summary;
        assert_eq!((s.runs, s.succeeded, s.failed, s.pages, s.is_final), (2, 1, 1, 3, true));
        assert_eq!(s.failure_reasons[0].reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(window.revision, 3, "first emission, final, late");
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
            // The summary (emitted after the pages) carries the links.
            out.take()
                .into_iter()
                .filter(|r| !r.links.is_empty() || r.value.as_ref().is_some_and(|v| is_summary(v)))
                .map(|r| r.links)
                .collect::<Vec<_>>()
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
