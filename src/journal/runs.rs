//! `[runs]`: Jobs and their Pods, co-partitioned by Job UID → one [`JobRun`] per finished
//! Job on `job-run-facts.v1`, keyed by the owner's UID (DESIGN §5.1).
//!
//! * A Job is **finished** when a `Complete` or `Failed` condition is True and no
//!   terminated Pod is still uncounted (`uncountedTerminatedPods` empty: the counters are
//!   final). `FailureTarget` and `SuccessCriteriaMet` alone are not finished; a running Job
//!   is not a run.
//! * A finished Job is **filed** once, `settle_ms` of stream time after it was first seen
//!   finished: Pods and Jobs are separate watches, so a Pod's last termination may be
//!   observed just after its Job's completion; waiting a moment of stream time (which
//!   heartbeats advance in a quiet cluster) lets the exit breakdown include it. A Job
//!   deleted before that is filed at its deletion.
//! * Filing is **idempotent by Job UID**: the filed flag is state, so a relist or replay
//!   re-observing the Job files nothing again.
//! * The **exit breakdown** counts distinct terminations — the current and the last
//!   terminated state of every container and init container, told apart by container id —
//!   by (container, exit code, reason); a Pod observed many times counts each termination
//!   once. Reasons are copied as observed, never inferred from the code.
//! * **Cleanup** (DESIGN §5.2): every `cleanup_period_secs` of stream time a sweep decides
//!   which finished Jobs may be removed ([`crate::cleanup::policy`]), earliest expiry first,
//!   at most `max_decisions_per_sweep`, and writes the decisions in the same transaction as
//!   the state change. A decided Job is evicted; a small tombstone remembers it until the
//!   Job is observed gone, so a relist or a late Pod cannot bring it back as a new run.
//! * **Dependencies**: a pending Job naming others in the dependency annotation keeps them.
//!   Dependents may sit in any partition, so the task also reads every partition of the
//!   jobs topic (a global input) and keeps just the pending dependents.

use super::config::RunsConfig;
use super::finish::owner_of;
pub use super::finish::{ExitKey, finish, finished, run_of};
use super::glance::{JobGlance, PodGlance, Termination};
use super::model::JobRun;
use super::state::{Dependent, Ended, Sweeps, TrackedJob};
use super::window::JournalInputKey;
use super::wiring::{RunsEvent, RunsInput, RunsOut};
use crate::{
    cleanup::{
        CleanupDecision, JobRef,
        policy::{self, Keep, PendingDependents, Verdict},
    },
    observe::{JobObservation, ObservationEvent, model::Job},
    runtime::{
        EpochTable, KvStore, OutputPort, Outputs, ProcessError, Processor, Reason, RecordMeta, StateStore,
        StreamTime,
    },
};
use std::collections::BTreeMap;

/// The `[runs]` processor of one task.
#[derive(Debug)]
pub struct Runs {
    cfg: RunsConfig,
    /// How `[journal]` wants `journal_repartition` keyed: applied here, where the runs are
    /// written, but defined by the journal (`[runs]` knows no windows).
    journal_key: JournalInputKey,
    jobs: EpochTable<String, TrackedJob>,
    /// (due stream time, Job UID) of finished Jobs waiting to be filed.
    due: KvStore<(StreamTime, String), ()>,
    /// Jobs decided or gone, by UID.
    ended: EpochTable<String, Ended>,
    /// Pending Jobs with dependencies, by UID.
    dependents: EpochTable<String, Dependent>,
    sweeps: KvStore<(), Sweeps>,
    /// Job UID → trace contexts of the records that shaped its run (the observation that
    /// first showed it finished, Pod observations with new terminations): the run fact and
    /// the cleanup decision, emitted later, link to them. Kept only for records that
    /// carried a context, at most [`MAX_CONTEXTS_PER_JOB`], dropped with the Job.
    contexts: KvStore<String, Vec<String>>,
}

/// The most trace contexts kept per Job (a Job with many Pods links to the first ones).
pub const MAX_CONTEXTS_PER_JOB: usize = 16;

impl Runs {
    /// `[runs]`'s outputs: the run facts (keyed by owner UID; `[coverage]` reads them), and
    /// the same runs keyed as `[journal]` asks ([`JournalInputKey`]) on an internal topic,
    /// both carrying stream time. Third: the cleanup decisions (keyed by Job UID).
    pub const OUTPUTS: [OutputPort; 3] = [
        OutputPort {
            topic: "job_run_facts",
            record: JobRun::FULL_NAME,
            compacted: false,
            key_record: None,
            // A public topic: `[coverage]` judges every 10 s, and every heartbeat here is one
            // more record a warehouse sink filters out.
            stream_time_every_ms: Some(10_000),
        },
        OutputPort {
            topic: "journal_repartition",
            record: JobRun::FULL_NAME,
            compacted: false,
            key_record: None,
            // Internal: windows emit at most every 10 s of stream time and close on time.
            stream_time_every_ms: Some(1_000),
        },
        OutputPort {
            topic: "cleanup_decisions",
            record: CleanupDecision::FULL_NAME,
            compacted: false,
            key_record: None,
            stream_time_every_ms: None,
        },
    ];

    /// A processor with empty state, writing `journal_repartition` keyed by `journal_key`
    /// (from [`super::Journal::input_key`]).
    pub fn new(cfg: RunsConfig, journal_key: JournalInputKey) -> Self {
        Self {
            cfg,
            journal_key,
            jobs: EpochTable::new("jobs"),
            due: KvStore::new("due"),
            ended: EpochTable::new("ended"),
            dependents: EpochTable::new("dependents"),
            sweeps: KvStore::new("sweeps"),
            contexts: KvStore::new("job-contexts"),
        }
    }

    /// Jobs tracked (finished or not, decided ones excluded).
    pub fn tracked_jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Jobs remembered as decided or gone.
    pub fn ended_jobs(&self) -> usize {
        self.ended.len()
    }

    fn on_job(
        &mut self,
        obs: JobObservation,
        context: Option<&String>,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match obs.event {
            ObservationEvent::SnapshotEnd => {
                self.forget_unlisted(obs.source.epoch, now, out)?;
                return Ok(());
            }
            ObservationEvent::Applied | ObservationEvent::Deleted => {}
            _ => return Ok(()),
        }
        let Some(job) = obs.job else {
            return Err(ProcessError::new(Reason::MissingObject, "a Job event without a Job"));
        };
        out.count(RunsEvent::JobObservations, 1);
        let uid = job.meta.uid.clone();
        if let Some(mut ended) = self.ended.get(&uid).copied() {
            // Decided (or gone): never tracked again. A relist keeps the tombstone while the
            // Job exists; its deletion starts the countdown to forgetting it.
            ended.epoch = obs.source.epoch;
            if obs.event == ObservationEvent::Deleted && ended.gone_at.is_none() {
                ended.gone_at = Some(now);
            }
            self.ended.put(uid, ended);
            return Ok(());
        }
        if obs.event == ObservationEvent::Deleted {
            // Gone: file what finished now, and keep only a tombstone for its Pods.
            let mut tracked = self.jobs.get(&uid).cloned().unwrap_or_default();
            Self::observe(&self.cfg, &mut self.due, &mut tracked, &uid, job, obs.source.epoch, now);
            self.keep_context(&uid, context);
            Self::file(self.journal_key, &uid, &mut tracked, &self.contexts, out)?;
            self.evict(&uid, &tracked, Ended { epoch: obs.source.epoch, gone_at: Some(now) });
            return Ok(());
        }
        // Updated in place: cloning the tracked Job out and back in showed in the profile.
        let tracked = self.jobs.entry_mut(uid.clone());
        if Self::observe(&self.cfg, &mut self.due, tracked, &uid, job, obs.source.epoch, now) {
            self.keep_context(&uid, context);
        }
        Ok(())
    }

    /// Keeps a record's trace context for `uid`'s later outputs (see `contexts`).
    fn keep_context(&mut self, uid: &str, context: Option<&String>) {
        let Some(context) = context else { return };
        let kept = self.contexts.get(uid).map_or(0, Vec::len);
        if kept < MAX_CONTEXTS_PER_JOB {
            self.contexts.entry_mut(uid.to_owned()).push(context.clone());
        }
    }

    /// Links the output emitted last to the contexts kept for `uid`.
    fn link(contexts: &KvStore<String, Vec<String>>, uid: &str, out: &mut Outputs) {
        if let Some(kept) = contexts.get(uid) {
            out.link_last(kept.iter().cloned());
        }
    }

    /// A Job observation's effect on its tracked state: the latest Job and epoch, and when
    /// it is first seen finished, its filing scheduled (then `true`).
    fn observe(
        cfg: &RunsConfig,
        due: &mut KvStore<(StreamTime, String), ()>,
        tracked: &mut TrackedJob,
        uid: &str,
        mut job: Job,
        epoch: i64,
        now: StreamTime,
    ) -> bool {
        tracked.epoch = epoch;
        let newly_finished = tracked.finished_seen_at.is_none() && finished(&job);
        if newly_finished {
            tracked.finished_seen_at = Some(now);
            if !tracked.filed {
                due.put((now + cfg.settle_ms, uid.to_owned()), ());
            }
        }
        super::tracked::bound_conditions(&mut job);
        if tracked.filed {
            super::tracked::trim_filed(&mut job, tracked.finished_seen_at);
        }
        tracked.job = Some(job);
        newly_finished
    }

    fn on_pod(&mut self, obs: PodGlance, context: Option<&String>, out: &mut Outputs) {
        let Some(pod) = obs.pod else { return };
        out.count(RunsEvent::PodObservations, 1);
        // Only a Job's Pods belong to a run; bare and session Pods are other processors'.
        let Some(job_uid) = pod.job_uid else { return };
        if self.ended.get(&job_uid).is_some() {
            return; // its run is written and the Job evicted (Pods deleted with it, say)
        }
        // Most observations of a Pod bring no new termination: only those change state.
        let tracked = self.jobs.get(&job_uid);
        if tracked.is_some_and(|t| t.filed) {
            return; // the fact is written; a late termination cannot change it
        }
        let fresh = pod.terminations.iter().any(|t| tracked.is_none_or(|tr| !tr.seen.contains(&t.id)));
        if !fresh {
            return;
        }
        let new = count_terminations(pod.terminations, self.jobs.entry_mut(job_uid.clone()));
        out.count(RunsEvent::TerminationsCounted, new);
        if new > 0 {
            self.keep_context(&job_uid, context);
        }
    }

    /// Files `uid`'s run if it finished and is not filed yet.
    /// `tracked` changes only when the run was written (callers may update it in place).
    fn file(
        journal_key: JournalInputKey,
        uid: &str,
        tracked: &mut TrackedJob,
        contexts: &KvStore<String, Vec<String>>,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        if tracked.filed {
            return Ok(());
        }
        let seen = tracked.finished_seen_at;
        let Some(run) = tracked.job.as_ref().and_then(|job| run_of(job, &tracked.exits, seen)) else {
            return Ok(());
        };
        out.count(RunsEvent::RunsFiled, 1);
        let encode_failed =
            |e| ProcessError { reason: Reason::EncodeFailed, detail: format!("run {uid}: {e}") };
        out.emit_direct(RunsOut::Facts, run.owner.uid.clone(), &run).map_err(encode_failed)?;
        Self::link(contexts, uid, out);
        out.emit_direct(RunsOut::JournalRepartition, journal_key.key(&run), &run).map_err(encode_failed)?;
        Self::link(contexts, uid, out);
        tracked.filed = true;
        // The breakdown now lives in the fact; later terminations are ignored.
        tracked.exits.clear();
        tracked.seen.clear();
        if let Some(job) = &mut tracked.job {
            super::tracked::trim_filed(job, seen);
        }
        Ok(())
    }

    /// Stops tracking `uid`: its state and filing schedule go, a tombstone stays.
    fn evict(&mut self, uid: &str, tracked: &TrackedJob, ended: Ended) {
        self.jobs.delete(&uid.to_owned());
        self.contexts.delete(&uid.to_owned());
        if let Some(at) = tracked.finished_seen_at {
            self.due.delete(&(at + self.cfg.settle_ms, uid.to_owned()));
        }
        self.ended.put(uid.to_owned(), ended);
    }

    /// After a relist of Jobs (SNAPSHOT_END of `epoch`): a Job not re-listed was deleted
    /// while unobserved. What finished is filed; nothing but a tombstone is kept.
    fn forget_unlisted(
        &mut self,
        epoch: i64,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        // Not re-listed: deleted while unobserved (or Pods of a Job that is gone).
        for uid in self.jobs.unlisted(epoch) {
            if let Some(mut tracked) = self.jobs.get(&uid).cloned() {
                Self::file(self.journal_key, &uid, &mut tracked, &self.contexts, out)?;
                self.evict(&uid, &tracked, Ended { epoch, gone_at: Some(now) });
            }
        }
        // A decided Job not re-listed is gone: its countdown to being forgotten starts.
        for uid in self.ended.unlisted_where(epoch, |_, e| e.gone_at.is_none()) {
            self.ended.put(uid, Ended { epoch, gone_at: Some(now) });
        }
        Ok(())
    }

    /// Keeps the pending dependents current from a Job observation of partition
    /// `partition` (this task's own, or any through the global input).
    fn track_dependent(&mut self, seen: Sighting<'_>, partition: i32) {
        let annotation = &self.cfg.cleanup.dependency_annotation;
        if annotation.is_empty() {
            return;
        }
        match (seen.event, seen.job) {
            (ObservationEvent::SnapshotEnd, _) => {
                // That partition's relist is complete: who was not re-listed is gone.
                let epoch = seen.epoch;
                for uid in self.dependents.unlisted_where(epoch, |_, d| d.partition == partition) {
                    self.dependents.delete(&uid);
                }
            }
            (ObservationEvent::Applied, Some(job)) if !job.finished => {
                let needs = policy::dependencies_in(job.annotations, annotation);
                if needs.is_empty() {
                    self.dependents.delete(job.uid);
                } else {
                    let dependent = Dependent {
                        partition,
                        epoch: seen.epoch,
                        namespace: job.namespace.to_owned(),
                        needs,
                    };
                    if self.dependents.get(job.uid) != Some(&dependent) {
                        self.dependents.put(job.uid.to_owned(), dependent);
                    }
                }
            }
            // Finished or deleted: no longer pending.
            (ObservationEvent::Applied | ObservationEvent::Deleted, Some(job)) => {
                self.dependents.delete(job.uid);
            }
            _ => {}
        }
    }

    /// One cleanup sweep at stream time `now`: decides the expired finished Jobs, earliest
    /// expiry first, at most `max_decisions_per_sweep`; forgets tombstones of Jobs gone
    /// longer than `remember_gone_ms`.
    fn sweep(&mut self, now: StreamTime, out: &mut Outputs) {
        let mut sweeps = self.sweeps.get(&()).copied().unwrap_or_default();
        sweeps.count += 1;
        self.sweeps.put((), sweeps);
        out.count(RunsEvent::Sweeps, 1);

        let forget: Vec<String> = self
            .ended
            .iter()
            .filter(|(_, e)| e.gone_at.is_some_and(|at| at + self.cfg.remember_gone_ms <= now))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in forget {
            self.ended.delete(&uid);
        }

        let cfg = &self.cfg.cleanup;
        if !cfg.enabled() {
            return;
        }
        let mut pending = PendingDependents::default();
        for dependent in self.dependents.iter().map(|(_, d)| d) {
            pending.add(&dependent.namespace, &dependent.needs);
        }
        // Candidates by (expiry, UID): the oldest go first, ties in a fixed order.
        let mut due: Vec<(i64, String, policy::Retention, i64)> = Vec::new();
        let (mut suspended, mut deleting, mut held) = (0, 0, 0);
        for (uid, tracked) in self.jobs.iter() {
            let Some(job) = &tracked.job else { continue };
            let Some((_, finished_at, _)) = finish(job, tracked.finished_seen_at) else { continue };
            match policy::judge(cfg, job, finished_at, now, &pending) {
                Verdict::Decide(r) => due.push((finished_at + r.secs * 1000, uid.clone(), r, finished_at)),
                Verdict::NotYet => {}
                Verdict::Keep(Keep::Suspended) => suspended += 1,
                Verdict::Keep(Keep::BeingDeleted) => deleting += 1,
                Verdict::Keep(Keep::DependedOn) => held += 1,
            }
        }
        out.count(RunsEvent::KeptSuspended, suspended);
        out.count(RunsEvent::KeptBeingDeleted, deleting);
        out.count(RunsEvent::KeptDependedOn, held);
        due.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let cap = cfg.max_decisions_per_sweep as usize;
        out.count(RunsEvent::DecisionsDeferred, due.len().saturating_sub(cap) as u64);
        for (_, uid, retention, finished_at) in due.into_iter().take(cap) {
            let Some(mut tracked) = self.jobs.get(&uid).cloned() else { continue };
            // A Job expiring before it settled (a TTL of 0, say) is filed first: its run is
            // written before it may disappear.
            if Self::file(self.journal_key, &uid, &mut tracked, &self.contexts, out).is_err() {
                continue;
            }
            let Some(job) = &tracked.job else { continue };
            let decision = CleanupDecision {
                job: JobRef {
                    namespace: job.meta.namespace.clone(),
                    name: job.meta.name.clone(),
                    uid: uid.clone(),
                },
                owner: Some(owner_of(job)),
                result: finish(job, tracked.finished_seen_at).map(|(result, _, _)| result),
                finished_at,
                retention_secs: retention.secs,
                retention_source: retention.source,
                decided_at: now,
                sweep: sweeps.count,
            };
            if out.emit(RunsOut::CleanupDecisions, uid.clone(), &decision).is_err() {
                // Unencodable (cannot happen for a typed record): stays tracked — filed, if
                // it just was — and is decided later.
                self.jobs.put(uid, tracked);
                continue;
            }
            Self::link(&self.contexts, &uid, out);
            out.count(RunsEvent::Decisions, 1);
            self.evict(&uid, &tracked, Ended { epoch: tracked.epoch, gone_at: None });
        }
    }
}

impl Processor for Runs {
    type Input = RunsInput;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![
            &mut self.jobs,
            &mut self.due,
            &mut self.ended,
            &mut self.dependents,
            &mut self.sweeps,
            &mut self.contexts,
        ]
    }

    fn process(
        &mut self,
        input: RunsInput,
        meta: &RecordMeta,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match input {
            RunsInput::Job(obs) => {
                self.track_dependent(Sighting::of_observation(&obs), meta.partition);
                self.on_job(*obs, meta.traceparent.as_ref(), now, out)
            }
            RunsInput::Pod(obs) => {
                self.on_pod(*obs, meta.traceparent.as_ref(), out);
                Ok(())
            }
            RunsInput::AnyJob(obs) => {
                self.track_dependent(Sighting::of_glance(&obs), meta.partition);
                Ok(())
            }
        }
    }

    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs) {
        let ready: Vec<(StreamTime, String)> =
            self.due.iter().take_while(|((at, _), _)| *at <= now).map(|(k, _)| k.clone()).collect();
        for key in ready {
            self.due.delete(&key);
            let uid = key.1;
            // Filed in place (no clone of the tracked Job); `file` changes it only once the
            // run is written, so a run that could not be encoded stays unfiled, in state.
            if let Some(tracked) = self.jobs.get_mut(&uid) {
                let _ = Self::file(self.journal_key, &uid, tracked, &self.contexts, out);
            }
        }
        // A sweep when stream time enters a new period (none before the first period ends:
        // a task's first record is not a boundary).
        let period = now.div_euclid(self.cfg.cleanup.period_ms());
        match self.sweeps.get(&()).copied() {
            None => self.sweeps.put((), Sweeps { period, count: 0 }),
            Some(s) if s.period < period => {
                self.sweeps.put((), Sweeps { period, ..s });
                self.sweep(now, out);
            }
            Some(_) => {}
        }
    }
}

/// Counts the Pod's terminations not counted yet; returns how many were new.
fn count_terminations(terminations: Vec<Termination>, tracked: &mut TrackedJob) -> u64 {
    let mut new = 0;
    for t in terminations {
        if tracked.seen.insert(t.id) {
            *tracked.exits.entry((t.container, t.exit_code, t.reason)).or_default() += 1;
            new += 1;
        }
    }
    new
}

/// What the dependency holds read of a Job observation, borrowed from whichever form the
/// input carries: the Job itself on its own partition, its view on the global input.
struct Sighting<'a> {
    event: ObservationEvent,
    epoch: i64,
    job: Option<SightedJob<'a>>,
}

struct SightedJob<'a> {
    uid: &'a str,
    namespace: &'a str,
    annotations: &'a BTreeMap<String, String>,
    finished: bool,
}

impl<'a> Sighting<'a> {
    fn of_observation(obs: &'a JobObservation) -> Self {
        let job = obs.job.as_ref().map(|job| SightedJob {
            uid: &job.meta.uid,
            namespace: &job.meta.namespace,
            annotations: &job.meta.annotations,
            finished: finished(job),
        });
        Self { event: obs.event, epoch: obs.source.epoch, job }
    }

    fn of_glance(glance: &'a JobGlance) -> Self {
        let job = glance.job.as_ref().map(|job| SightedJob {
            uid: &job.uid,
            namespace: &job.namespace,
            annotations: &job.annotations,
            finished: job.finished,
        });
        Self { event: glance.event, epoch: glance.source.epoch, job }
    }
}
