//! `[coverage]`: lease coverage and overdue CronJobs (DESIGN §5.3, docs/COVERAGE.md).
//!
//! Inputs: `job-run-facts.v1` (progress, keyed by owner UID) and `cronjobs.v1` (subjects,
//! keyed by CronJob UID), co-partitioned, plus `leases.v1` as a global table. Output:
//! `coverage-alerts.v1`, one record per state change of a subject, keyed by its UID.
//!
//! A subject is **overdue** once stream time passes `expected_by` — the first fire time of
//! its schedule after its last progress, plus slack. Overdue time accrues as a pending
//! span only while the manager's Lease covers it: the span starts at the end of the latest
//! gap in coverage (plus the time the controller needs to start the missed run), so an
//! outage earns no pending time. Everything is evaluated on stream time, so a replay of
//! the same log gives the same records.
//!
//! The folder has the shape of every processor folder: [`config`] (settings), [`model`]
//! (the alert records), [`state`] (what the stores keep), [`wiring`] (inputs, ports,
//! counted events), the processor here, and its parts: [`mod@judge`] (the verdict), [`lease`]
//! (coverage of the manager's Lease), [`schedule`] (cron evaluation).

pub mod config;
pub mod judge;
pub mod lease;
pub mod model;
pub mod schedule;
pub mod state;
pub mod wiring;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

pub use config::{CoverageConfig, CoverageRule, ProgressKind};
pub use judge::{Facts, Verdict, judge};
pub use lease::LeaseBook;
pub use model::{CoverageAlert, CoverageGap, CoverageState, CoverageSubject, ProgressSource};
use schedule::Schedule;
pub use state::{Subject, SubjectContexts, SubjectSpec};
pub use wiring::CoverageInput;
use wiring::{CoverageEvent, CoverageOut};

use crate::{
    facts::{JobRun, OwnerKind, RunResult},
    observe::{CronJobObservation, LeaseObservation, ObservationEvent},
    runtime::{
        OutputPort, Outputs, ProcessError, Processor, Reason, RecordMeta, StreamTime,
        epoch::EpochTable,
        store::{KvStore, StateStore},
    },
};

/// `CoverageSubject.kind` of a CronJob: the symbol `RunOwner.kind` (`OwnerKind`) uses, so a
/// warehouse joins alerts and runs on one spelling.
pub const SUBJECT_KIND: &str = "CRONJOB";

pub use crate::observe::annotations::EXPECTED_INTERVAL_ANNOTATION;

/// The `[coverage]` processor: one per task.
#[derive(Debug)]
pub struct Coverage {
    cfg: CoverageConfig,
    subjects: EpochTable<String, Subject>,
    leases: LeaseBook,
    /// The last evaluation tick (stream time / evaluate interval).
    ticks: KvStore<(), i64>,
    /// Subject UID → the contexts its alerts link to.
    contexts: KvStore<String, SubjectContexts>,
    /// Lease `namespace/name` → the context of its latest recorded snapshot.
    lease_contexts: KvStore<String, String>,
    // Derived from `subjects`, rebuilt after a restore (never changelogged).
    /// OK and RESOLVED subjects by when they become due.
    due: BTreeSet<(i64, String)>,
    /// Subjects evaluated at every tick (overdue, or with no verdict yet).
    active: BTreeSet<String>,
    indexed: bool,
    schedules: BTreeMap<(String, Option<String>), Option<Schedule>>,
}

impl Coverage {
    /// Output ports: `coverage-alerts.v1`.
    pub const OUTPUTS: [OutputPort; 1] = [OutputPort {
        topic: "coverage_alerts",
        record: CoverageAlert::FULL_NAME,
        // A log of state changes: compaction would keep only each subject's latest state.
        compacted: false,
        key_record: None,
        stream_time_every_ms: None,
    }];

    /// A processor with these settings.
    pub fn new(cfg: CoverageConfig) -> Self {
        Self {
            subjects: EpochTable::new("subjects"),
            leases: LeaseBook::new("lease-instances", "lease-observed", cfg.observation_gap_ms),
            ticks: KvStore::new("ticks"),
            contexts: KvStore::new("subject-contexts"),
            lease_contexts: KvStore::new("lease-contexts"),
            due: BTreeSet::new(),
            active: BTreeSet::new(),
            indexed: false,
            schedules: BTreeMap::new(),
            cfg,
        }
    }

    /// The subjects held (for tests and the demo).
    pub fn subjects(&self) -> impl Iterator<Item = (&String, &Subject)> {
        self.subjects.iter()
    }

    fn on_run(&mut self, run: JobRun, context: Option<&String>, now: StreamTime, out: &mut Outputs) {
        if run.owner.kind != OwnerKind::Cronjob {
            out.count(CoverageEvent::RunsNotCronjob, 1);
            return;
        }
        if self.cfg.progress == ProgressKind::Succeeded && run.result != RunResult::Succeeded {
            out.count(CoverageEvent::RunsNotProgress, 1);
            return;
        }
        out.count(CoverageEvent::Runs, 1);
        let uid = run.owner.uid.clone();
        if let Some(context) = context {
            self.contexts.entry_mut(uid.clone()).run = Some(context.clone());
        }
        let subject = self.subjects.entry_mut(uid.clone());
        if subject.last_run_ms.is_none_or(|t| t < run.finished_at) {
            subject.last_run_ms = Some(run.finished_at);
        }
        if let Some(started) = run.started_at {
            subject.recent_run_ms.push((run.finished_at - started).max(0));
            if subject.recent_run_ms.len() > 5 {
                subject.recent_run_ms.remove(0);
            }
        }
        self.evaluate(&uid, now, out);
    }

    fn on_cronjob(
        &mut self,
        obs: CronJobObservation,
        context: Option<&String>,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match obs.event {
            ObservationEvent::SnapshotEnd => {
                self.forget_unlisted(obs.source.epoch, out);
                return Ok(());
            }
            ObservationEvent::Applied | ObservationEvent::Deleted => {}
            ObservationEvent::Unknown => {
                return Err(ProcessError::new(
                    Reason::UnknownEvent,
                    "a CronJob event this reader does not know",
                ));
            }
            _ => return Ok(()),
        }
        let Some(cj) = obs.cronjob else {
            return Err(ProcessError::new(Reason::MissingObject, "a CronJob event without a CronJob"));
        };
        let uid = cj.meta.uid.clone();
        if obs.event == ObservationEvent::Deleted {
            self.forget(&uid, out);
            return Ok(());
        }
        let spec = SubjectSpec {
            namespace: cj.meta.namespace,
            name: cj.meta.name,
            schedule: cj.schedule,
            time_zone: cj.time_zone,
            suspend: cj.suspend,
            starting_deadline_seconds: cj.starting_deadline_seconds,
            created_ms: cj.meta.creation_timestamp,
            expected_interval: cj.meta.annotations.get(EXPECTED_INTERVAL_ANNOTATION).cloned(),
            last_successful_ms: cj.status.last_successful_time,
        };
        let subject = self.subjects.entry_mut(uid.clone());
        subject.epoch = obs.source.epoch;
        let was_suspended = subject.spec.as_ref().is_some_and(|s| s.suspend);
        if was_suspended && !spec.suspend {
            subject.resumed_at = Some(now);
        }
        subject.spec = Some(spec);
        if let Some(context) = context {
            self.contexts.entry_mut(uid.clone()).cronjob = Some(context.clone());
        }
        self.evaluate(&uid, now, out);
        Ok(())
    }

    fn on_lease(
        &mut self,
        obs: LeaseObservation,
        context: Option<&String>,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        self.leases.observed_at(obs.observed_at.min(now));
        match obs.event {
            ObservationEvent::Applied | ObservationEvent::Deleted => {}
            ObservationEvent::Unknown => {
                return Err(ProcessError::new(
                    Reason::UnknownEvent,
                    "a Lease event this reader does not know",
                ));
            }
            _ => return Ok(()),
        }
        let Some(lease) = obs.lease else {
            return Err(ProcessError::new(Reason::MissingObject, "a Lease event without a Lease"));
        };
        let key = format!("{}/{}", lease.meta.namespace, lease.meta.name);
        match self.leases.record(&key, &lease) {
            Ok(()) => {
                out.count(CoverageEvent::LeaseSnapshots, 1);
                if let Some(context) = context {
                    self.lease_contexts.put(key, context.clone());
                }
            }
            Err(lease::Ignored::Stale) => out.count(CoverageEvent::LeaseSnapshotsStale, 1),
            Err(lease::Ignored::NoTimes) => out.count(CoverageEvent::LeaseSnapshotsWithoutTimes, 1),
        }
        Ok(())
    }

    /// After SNAPSHOT_END of `epoch`: a subject not re-listed was deleted while unobserved.
    fn forget_unlisted(&mut self, epoch: i64, out: &mut Outputs) {
        for uid in self.subjects.unlisted(epoch) {
            self.forget(&uid, out);
        }
    }

    /// The subject is gone: a tombstone ends its record on the compacted topic (and a
    /// firing alert with it).
    fn forget(&mut self, uid: &str, out: &mut Outputs) {
        let uid_key = uid.to_owned();
        self.contexts.delete(&uid_key);
        if let Some(subject) = self.subjects.delete(&uid_key) {
            self.unindex(uid, &subject);
            if subject.state.is_some() {
                out.tombstone(CoverageOut::Alerts, uid.as_bytes().to_vec());
                out.count(CoverageEvent::SubjectsForgotten, 1);
            }
        }
    }

    fn unindex(&mut self, uid: &str, subject: &Subject) {
        if let Some(at) = subject.due_at {
            self.due.remove(&(at, uid.to_owned()));
        }
        self.active.remove(uid);
    }

    /// Judges one subject at `now` and emits a record if its state changed.
    fn evaluate(&mut self, uid: &str, now: StreamTime, out: &mut Outputs) {
        let Some(mut subject) = self.subjects.get(&uid.to_owned()).cloned() else { return };
        self.unindex(uid, &subject);
        let Some(spec) = subject.spec.clone() else { return };
        let rule = self.cfg.rule(&spec.namespace).cloned();
        let (Some(rule), false) = (rule, spec.suspend) else {
            // Not judged (suspended, or no rule): any record it had ends.
            if subject.state.take().is_some() {
                out.tombstone(CoverageOut::Alerts, uid.as_bytes().to_vec());
                subject.fired_pending_since = None;
            }
            subject.due_at = None;
            self.subjects.put(uid.to_owned(), subject);
            return;
        };
        let schedule = self
            .schedules
            .entry((spec.schedule.clone(), spec.time_zone.clone()))
            .or_insert_with(|| Schedule::parse(&spec.schedule, spec.time_zone.as_deref()).ok())
            .clone();
        let interval_ms = spec.expected_interval.as_deref().and_then(|t| schedule::parse_duration_ms(t).ok());
        if spec.expected_interval.is_some() && interval_ms.is_none() {
            out.count(CoverageEvent::BadExpectedInterval, 1);
        }
        let facts = Facts {
            spec: &spec,
            last_run_ms: subject.last_run_ms,
            recent_run_ms: &subject.recent_run_ms,
            resumed_at: subject.resumed_at,
            schedule: schedule.as_ref(),
            interval_ms,
        };
        let verdict = judge(&facts, &rule, &self.leases, now);
        let state = match (subject.state, verdict.state) {
            (Some(CoverageState::Firing), CoverageState::Ok) => CoverageState::Resolved,
            (Some(CoverageState::Firing), _) => CoverageState::Firing,
            (Some(CoverageState::Resolved), CoverageState::Ok) => CoverageState::Resolved,
            (_, s) => s,
        };
        if state == CoverageState::Firing && subject.state != Some(CoverageState::Firing) {
            subject.fired_pending_since = verdict.pending_since;
        } else if state != CoverageState::Firing {
            subject.fired_pending_since = None;
        }
        if subject.state != Some(state) {
            let pending_since = match state {
                CoverageState::Firing => subject.fired_pending_since,
                CoverageState::Pending => verdict.pending_since,
                _ => None,
            };
            let mut gaps = verdict.gaps;
            if gaps.len() > self.cfg.max_gaps_listed {
                gaps.drain(..gaps.len() - self.cfg.max_gaps_listed);
            }
            let alert = CoverageAlert {
                subject: CoverageSubject {
                    kind: SUBJECT_KIND.into(),
                    namespace: spec.namespace.clone(),
                    name: spec.name.clone(),
                    uid: uid.to_owned(),
                },
                state,
                previous_state: subject.state,
                stream_time: now,
                last_progress: verdict.last_progress.map(|(t, _)| t),
                last_progress_source: verdict.last_progress.map(|(_, s)| s),
                expected_by: verdict.expected_by,
                pending_since,
                manager_lease: rule.manager_lease.clone(),
                manager_covered_until: self.leases.covered_until(&rule.manager_lease),
                coverage_gaps: gaps,
            };
            match out.emit(CoverageOut::Alerts, uid.as_bytes().to_vec(), &alert) {
                Ok(()) => {
                    let kept = self.contexts.get(uid);
                    let lease = self.lease_contexts.get(&rule.manager_lease);
                    let (cronjob, run) = kept.map_or((None, None), |c| (c.cronjob.as_ref(), c.run.as_ref()));
                    out.link_last([cronjob, run, lease].into_iter().flatten().cloned());
                    subject.state = Some(state);
                    out.count(CoverageEvent::Judged(state), 1);
                }
                // Not recorded as emitted, so the next evaluation tries again.
                Err(_) => out.count(CoverageEvent::EncodeFailed, 1),
            }
        }
        // Index: OK and RESOLVED wait for their due time; everything else is re-judged at
        // every tick.
        subject.due_at = None;
        match subject.state {
            Some(CoverageState::Ok | CoverageState::Resolved) => {
                if let Some(at) = verdict.recheck_at {
                    subject.due_at = Some(at);
                    self.due.insert((at, uid.to_owned()));
                }
            }
            _ => {
                self.active.insert(uid.to_owned());
            }
        }
        self.subjects.put(uid.to_owned(), subject);
    }

    /// Rebuilds the in-memory indexes from the subjects store (after a restore).
    fn index(&mut self) {
        self.indexed = true;
        self.due.clear();
        self.active.clear();
        for (uid, s) in self.subjects.iter() {
            match (s.state, s.due_at) {
                (Some(CoverageState::Ok | CoverageState::Resolved), Some(at)) => {
                    self.due.insert((at, uid.clone()));
                }
                (Some(CoverageState::Ok | CoverageState::Resolved), None) => {}
                _ => {
                    self.active.insert(uid.clone());
                }
            }
        }
    }
}

impl Processor for Coverage {
    type Input = CoverageInput;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![
            &mut self.subjects,
            &mut self.leases.instances,
            &mut self.leases.observed,
            &mut self.ticks,
            &mut self.contexts,
            &mut self.lease_contexts,
        ]
    }

    fn on_rollback(&mut self) {
        // `due` and `active` are derived from `subjects`: rebuilt before the next use.
        self.indexed = false;
    }

    fn process(
        &mut self,
        input: CoverageInput,
        meta: &RecordMeta,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        if !self.indexed {
            self.index();
        }
        match input {
            CoverageInput::Run(run) => {
                self.on_run(*run, meta.traceparent.as_ref(), now, out);
                Ok(())
            }
            CoverageInput::CronJob(obs) => self.on_cronjob(*obs, meta.traceparent.as_ref(), now, out),
            CoverageInput::Lease(obs) => self.on_lease(*obs, meta.traceparent.as_ref(), now, out),
        }
    }

    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs) {
        if !self.indexed {
            self.index();
        }
        let tick = now.div_euclid(self.cfg.evaluate_interval_ms.max(1));
        if self.ticks.get(&()).is_some_and(|t| *t >= tick) {
            return;
        }
        self.ticks.put((), tick);
        let due: Vec<String> =
            self.due.iter().take_while(|(at, _)| *at <= now).map(|(_, uid)| uid.clone()).collect();
        let mut judged: BTreeSet<String> = self.active.clone();
        judged.extend(due);
        for uid in judged {
            self.evaluate(&uid, now, out);
        }
        self.leases.prune(now.saturating_sub(self.cfg.retention_ms));
    }
}
