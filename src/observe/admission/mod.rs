//! Admission: which observed objects may leave the cluster (DESIGN §3, "opt-out is honoured
//! at the source"). A pure state machine over trace entries, so the live watcher, `publish
//! --input TRACE`, `replay` and `demo` admit exactly the same objects.
//!
//! Four steps, each counted on its own, the first that excludes wins:
//!
//! 1. **namespace list** — the namespace is denied, or an allow list exists without it;
//! 2. **namespace annotation** — the Namespace carries the opt-out annotation;
//! 3. **CronJob annotation** — the Job's scheduling CronJob (or a CronJob itself) carries it;
//! 4. **own annotation** — the Job's own annotations or its pod template's, a Pod's own.
//!
//! A Pod owned by a Job is admitted only if that Job is (its exclusion step is the Job's).
//! An object whose namespace or owning Job has not been seen yet is **held back**, not
//! guessed about: watches of different kinds are not ordered against each other, and
//! publishing first would leak a Job whose opt-out arrives a moment later. Held entries are
//! released, in their order, as soon as what they wait for arrives; those still waiting
//! `hold_ms` of observation time later, or at the end of a relist, are excluded and counted
//! (`unresolved`). A Job's scheduling CronJob must be known too (it may opt the Job out).
//! Deleted Jobs and CronJobs are remembered for `remember_deleted_ms`, so a Pod changing
//! after its Job was deleted still follows the Job, and deleting an opted-out CronJob does
//! not re-admit its remaining Jobs. Leases are not admitted by annotation: they are chosen by name in the
//! watcher's configuration (the control-plane Leases coverage needs live in `kube-system`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use serde::{Deserialize, Serialize};

use crate::{
    observe::kind::Kind,
    trace::{MinimalEntry, MinimalObject, TraceEvent},
};

/// The default opt-out annotation key; its value must be `"true"` to opt out.
pub const DEFAULT_OPT_OUT_ANNOTATION: &str = "kubefacts.io/exclude";

/// Which objects are admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Only these namespaces are admitted (empty: every namespace not denied).
    pub allow_namespaces: Vec<String>,
    /// These namespaces are never admitted.
    pub deny_namespaces: Vec<String>,
    /// Annotation key whose value `"true"` opts an object out (on a Namespace, CronJob,
    /// Job, Job pod template or Pod).
    pub opt_out_annotation: String,
    /// How long an object waits for its namespace or owning Job to be observed, in
    /// milliseconds of observation time, before it is excluded as unresolved.
    pub hold_ms: i64,
    /// Most entries held back at once; beyond it the oldest is excluded as unresolved.
    pub max_held: usize,
    /// How long the verdict of a deleted Job or CronJob is remembered, in milliseconds of
    /// observation time: Pods go on changing after their Job is deleted (background
    /// deletion removes the Job first) and must still follow its verdict.
    pub remember_deleted_ms: i64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            allow_namespaces: Vec::new(),
            deny_namespaces: Vec::new(),
            opt_out_annotation: DEFAULT_OPT_OUT_ANNOTATION.to_owned(),
            hold_ms: 30_000,
            max_held: 10_000,
            remember_deleted_ms: 600_000,
        }
    }
}

/// The step that excluded an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Step 1: the namespace allow/deny list.
    NamespaceList,
    /// Step 2: the Namespace's opt-out annotation.
    NamespaceAnnotation,
    /// Step 3: the scheduling CronJob's opt-out annotation.
    CronJobAnnotation,
    /// Step 4: the object's own (or its pod template's) opt-out annotation.
    OwnAnnotation,
    /// Not a step: its namespace or owning Job was never observed in time.
    Unresolved,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 5] = [
        Self::NamespaceList,
        Self::NamespaceAnnotation,
        Self::CronJobAnnotation,
        Self::OwnAnnotation,
        Self::Unresolved,
    ];

    /// A bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NamespaceList => "namespace_list",
            Self::NamespaceAnnotation => "namespace_annotation",
            Self::CronJobAnnotation => "cronjob_annotation",
            Self::OwnAnnotation => "own_annotation",
            Self::Unresolved => "unresolved",
        }
    }
}

/// What admission decided about one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// May be published.
    Admitted,
    /// Must not be published.
    Excluded(Step),
}

/// Admissions and exclusions so far, per kind (`Pod`, `Job`, `CronJob`) and step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionCounts {
    /// Objects admitted, per kind.
    pub admitted: BTreeMap<&'static str, u64>,
    /// Objects excluded, per (kind, step).
    pub excluded: BTreeMap<(&'static str, Step), u64>,
    /// Entries held back right now.
    pub held: usize,
}

impl AdmissionCounts {
    /// These counts plus `other`'s (`held` is `other`'s: it is a gauge).
    pub fn plus(&self, other: &AdmissionCounts) -> AdmissionCounts {
        let mut sum = self.clone();
        for (k, n) in &other.admitted {
            *sum.admitted.entry(k).or_default() += n;
        }
        for (k, n) in &other.excluded {
            *sum.excluded.entry(*k).or_default() += n;
        }
        sum.held = other.held;
        sum
    }

    /// Exclusions at `step`, all kinds.
    pub fn excluded_at(&self, step: Step) -> u64 {
        self.excluded.iter().filter(|((_, s), _)| *s == step).map(|(_, n)| n).sum()
    }
}

/// What must be observed before an object can be judged (held entries are re-judged
/// whenever a Namespace, CronJob or Job verdict is recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unknown {
    Namespace,
    CronJob,
    Job,
}

/// A deleted object whose verdict is remembered for a while.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Forget {
    Job(String),
    CronJob(String),
}

/// The admission state machine: feed it every entry in observation order; it returns the
/// entries to publish.
#[derive(Debug, Clone)]
pub struct Admission {
    cfg: AdmissionConfig,
    /// Namespace name → opted out.
    namespaces: HashMap<String, bool>,
    /// CronJob UID → opted out.
    cronjobs: HashMap<String, bool>,
    /// Job UID → verdict (a Pod follows its Job).
    jobs: HashMap<String, Verdict>,
    /// Deleted Jobs and CronJobs, oldest first, forgotten `remember_deleted_ms` later.
    deleted: VecDeque<(i64, Forget)>,
    held: VecDeque<MinimalEntry>,
    counts: AdmissionCounts,
}

impl Admission {
    /// An empty gate.
    pub fn new(cfg: AdmissionConfig) -> Self {
        Self {
            cfg,
            namespaces: HashMap::new(),
            cronjobs: HashMap::new(),
            jobs: HashMap::new(),
            deleted: VecDeque::new(),
            held: VecDeque::new(),
            counts: AdmissionCounts::default(),
        }
    }

    /// The configuration it admits with.
    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    /// Admissions and exclusions so far.
    pub fn counts(&self) -> &AdmissionCounts {
        &self.counts
    }

    /// Takes one entry; returns the entries now ready to publish, in order: this one if it
    /// is admitted (or carries no object), and any held entries it released. Namespaces
    /// are consumed here and never returned (they are not published).
    pub fn offer(&mut self, entry: impl Into<MinimalEntry>) -> Vec<MinimalEntry> {
        let entry = entry.into();
        let now = entry.observed_at_ms;
        self.expire(now, false);
        self.forget(now);
        let mut out = Vec::new();
        match &entry.event {
            TraceEvent::Applied(MinimalObject::Namespace(ns))
            | TraceEvent::Deleted(MinimalObject::Namespace(ns)) => {
                let name = ns.metadata.name.clone().unwrap_or_default();
                if matches!(entry.event, TraceEvent::Deleted(_)) {
                    self.namespaces.remove(&name);
                } else {
                    self.namespaces.insert(name, self.opted_out(&ns.metadata));
                    out.extend(self.release());
                }
            }
            // The end of a relist: what of the relisted kinds still waits cannot be placed
            // before the marker any more (it would look deleted-while-unobserved), so it is
            // decided now. Other kinds keep waiting.
            TraceEvent::SnapshotEnd { kinds, .. } => {
                let kinds = kinds.clone();
                self.expire_kinds(kinds.as_deref());
                out.push(entry);
            }
            TraceEvent::Applied(_) | TraceEvent::Deleted(_) => {
                let released_job = self.judge(entry, &mut out);
                if released_job {
                    out.extend(self.release());
                }
            }
            TraceEvent::Heartbeat | TraceEvent::SnapshotBegin { .. } | TraceEvent::Session(_) => {
                out.push(entry)
            }
        }
        self.counts.held = self.held.len();
        out
    }

    /// Decides one object entry: publish, hold or drop. True when a Job or CronJob verdict
    /// was recorded (held entries may now resolve).
    fn judge(&mut self, entry: MinimalEntry, out: &mut Vec<MinimalEntry>) -> bool {
        let deleted = matches!(entry.event, TraceEvent::Deleted(_));
        let (TraceEvent::Applied(object) | TraceEvent::Deleted(object)) = &entry.event else {
            return false;
        };
        let kind = object.kind();
        let decided = match self.decide(object) {
            Ok(v) => v,
            Err(_) => {
                self.hold(entry);
                return false;
            }
        };
        let at = entry.observed_at_ms;
        let mut recorded = false;
        match object {
            MinimalObject::Job(job) => {
                let uid = job.metadata.uid.clone().unwrap_or_default();
                self.jobs.insert(uid.clone(), decided);
                recorded = true;
                if deleted {
                    self.deleted.push_back((at, Forget::Job(uid)));
                }
            }
            MinimalObject::CronJob(cj) => {
                let uid = cj.metadata.uid.clone().unwrap_or_default();
                self.cronjobs.insert(uid.clone(), decided != Verdict::Admitted);
                recorded = true;
                if deleted {
                    self.deleted.push_back((at, Forget::CronJob(uid)));
                }
            }
            _ => {}
        }
        match decided {
            // Leases are chosen by name, not admitted: they are not counted.
            Verdict::Admitted if kind == Kind::Lease => out.push(entry),
            Verdict::Admitted => {
                *self.counts.admitted.entry(kind).or_default() += 1;
                out.push(entry);
            }
            Verdict::Excluded(step) => *self.counts.excluded.entry((kind, step)).or_default() += 1,
        }
        recorded
    }

    /// The verdict for an object, or what must be observed first.
    fn decide(&self, object: &MinimalObject) -> Result<Verdict, Unknown> {
        let meta = match object {
            MinimalObject::Lease(_) | MinimalObject::Namespace(_) => return Ok(Verdict::Admitted),
            MinimalObject::Pod(o) => &o.metadata,
            MinimalObject::Job(o) => &o.metadata,
            MinimalObject::CronJob(o) => &o.metadata,
        };
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        // 1. Namespace allow/deny list.
        let allowed =
            self.cfg.allow_namespaces.is_empty() || self.cfg.allow_namespaces.iter().any(|n| n == namespace);
        if !allowed || self.cfg.deny_namespaces.iter().any(|n| n == namespace) {
            return Ok(Verdict::Excluded(Step::NamespaceList));
        }
        // 2. The namespace's annotation.
        match self.namespaces.get(namespace) {
            None => return Err(Unknown::Namespace),
            Some(true) => return Ok(Verdict::Excluded(Step::NamespaceAnnotation)),
            Some(false) => {}
        }
        match object {
            MinimalObject::CronJob(cj) => {
                // 3. A CronJob's own annotation is step 3 for it and for its Jobs. So is one
                // on its Job template or that template's pod template: every run it makes
                // would be excluded (step 4), and a CronJob seen without its runs would look
                // overdue to `[coverage]`.
                let job_template = cj.spec.as_ref().map(|s| &s.job_template);
                let job_meta = job_template.and_then(|t| t.metadata.as_ref());
                let pod_meta =
                    job_template.and_then(|t| t.spec.as_ref()).and_then(|s| s.template.metadata.as_ref());
                if self.opted_out(meta)
                    || job_meta.is_some_and(|m| self.opted_out(m))
                    || pod_meta.is_some_and(|m| self.opted_out(m))
                {
                    return Ok(Verdict::Excluded(Step::CronJobAnnotation));
                }
            }
            MinimalObject::Job(job) => {
                // 3. The scheduling CronJob, which must be known: it may opt the Job out.
                if let Some(uid) = controller_uid(meta, Kind::CronJob) {
                    match self.cronjobs.get(uid) {
                        None => return Err(Unknown::CronJob),
                        Some(true) => return Ok(Verdict::Excluded(Step::CronJobAnnotation)),
                        Some(false) => {}
                    }
                }
                // 4. The Job's own annotations or its pod template's.
                let template = job.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
                if self.opted_out(meta) || template.is_some_and(|t| self.opted_out(t)) {
                    return Ok(Verdict::Excluded(Step::OwnAnnotation));
                }
            }
            MinimalObject::Pod(_) => {
                // A Pod of a Job follows the Job.
                if let Some(uid) = controller_uid(meta, Kind::Job) {
                    match self.jobs.get(uid) {
                        None => return Err(Unknown::Job),
                        Some(Verdict::Excluded(step)) => return Ok(Verdict::Excluded(*step)),
                        Some(Verdict::Admitted) => {}
                    }
                }
                // 4. Its own annotations.
                if self.opted_out(meta) {
                    return Ok(Verdict::Excluded(Step::OwnAnnotation));
                }
            }
            MinimalObject::Lease(_) | MinimalObject::Namespace(_) => {}
        }
        Ok(Verdict::Admitted)
    }

    fn opted_out(&self, meta: &ObjectMeta) -> bool {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(&self.cfg.opt_out_annotation))
            .is_some_and(|v| v == "true")
    }

    fn hold(&mut self, entry: MinimalEntry) {
        self.held.push_back(entry);
        while self.held.len() > self.cfg.max_held {
            if let Some(old) = self.held.pop_front() {
                self.exclude_unresolved(&old);
            }
        }
    }

    /// Re-judges held entries, in order, until none resolves any more.
    fn release(&mut self) -> Vec<MinimalEntry> {
        let mut out = Vec::new();
        loop {
            let ready = self.held.iter().position(|e| match &e.event {
                TraceEvent::Applied(o) | TraceEvent::Deleted(o) => self.decide(o).is_ok(),
                _ => true,
            });
            let Some(i) = ready else { break };
            let entry = self.held.remove(i).expect("index from position");
            self.judge(entry, &mut out);
        }
        out
    }

    /// Excludes held entries older than `hold_ms` before `now` (all of them when `all`).
    fn expire(&mut self, now: i64, all: bool) {
        while let Some(entry) = self.held.front() {
            if !all && now - entry.observed_at_ms < self.cfg.hold_ms {
                break;
            }
            let entry = self.held.pop_front().expect("front exists");
            self.exclude_unresolved(&entry);
        }
    }

    /// Forgets deleted Jobs and CronJobs remembered longer than `remember_deleted_ms`.
    fn forget(&mut self, now: i64) {
        while let Some((at, _)) = self.deleted.front() {
            if now - at < self.cfg.remember_deleted_ms {
                break;
            }
            match self.deleted.pop_front() {
                Some((_, Forget::Job(uid))) => {
                    self.jobs.remove(&uid);
                }
                Some((_, Forget::CronJob(uid))) => {
                    self.cronjobs.remove(&uid);
                }
                None => {}
            }
        }
    }

    /// Excludes every held entry of `kinds` (`None`: all).
    fn expire_kinds(&mut self, kinds: Option<&[String]>) {
        let held = std::mem::take(&mut self.held);
        for entry in held {
            let matches = match (&entry.event, kinds) {
                (_, None) => true,
                (TraceEvent::Applied(o) | TraceEvent::Deleted(o), Some(kinds)) => {
                    kinds.iter().any(|k| k == o.kind())
                }
                _ => false,
            };
            if matches {
                self.exclude_unresolved(&entry);
            } else {
                self.held.push_back(entry);
            }
        }
    }

    fn exclude_unresolved(&mut self, entry: &MinimalEntry) {
        if let TraceEvent::Applied(o) | TraceEvent::Deleted(o) = &entry.event {
            *self.counts.excluded.entry((o.kind(), Step::Unresolved)).or_default() += 1;
        }
    }

    /// Decides everything still held (end of input): each is excluded as unresolved.
    pub fn finish(&mut self) {
        self.expire(i64::MAX, true);
        self.counts.held = 0;
    }
}

/// The UID of the object's controller of `kind`, if any.
fn controller_uid(meta: &ObjectMeta, kind: Kind) -> Option<&str> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.uid.as_str())
}

#[cfg(test)]
mod tests;
