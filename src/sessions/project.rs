//! `[sessions]`: sessions joined with their own Pods (DESIGN §5.4, docs/SESSIONS.md).
//!
//! Inputs: `sessions.v1` (the host application's records) and `pods.v1`, co-partitioned by
//! session id (the watcher keys a Pod carrying the session label by its value). Outputs:
//! `session-projections.v1`, one record per change of a session's projection, and the
//! session's retained compute re-keyed by owner for `[session-owners]`.
//!
//! Everything a projection says is recomputed from what is kept per session id — the
//! latest session record and every labelled Pod seen under that id — so a Pod that arrives
//! before its session, or a session that learns its Pod's UID later, ends in the same
//! projection as any other order.

use super::{
    config::SessionsConfig,
    model::{ContainerRequests, PodIdentity, SessionProjection, SessionRetained},
    quantity,
    retention::{PodEvidence, RetentionState, retention},
    state::{SeenPod, Tracked},
    wiring::{SessionsEvent, SessionsIn, SessionsInput, SessionsOut},
};
use crate::{
    observe::{
        Kind, ObservationEvent, PodObservation, SessionObservation,
        model::{ContainerObservation, Pod, Session},
    },
    runtime::{
        OutputPort, Outputs, ProcessError, Processor, Reason, RecordMeta, StreamTime,
        epoch::EpochTable,
        store::{KvStore, StateStore},
    },
};

pub use crate::observe::annotations::DEFAULT_CONTAINER_ANNOTATION;

/// The `[sessions]` processor: one per task.
#[derive(Debug)]
pub struct Sessions {
    cfg: SessionsConfig,
    session_label: String,
    /// Per session id; the snapshot-epoch rule applies to the Pods inside.
    tracked: EpochTable<String, Tracked>,
    /// The last sweep (stream time / sweep interval).
    sweeps: KvStore<(), i64>,
}

impl Sessions {
    /// Output ports: `session-projections.v1`, then the owner repartition topic.
    pub const OUTPUTS: [OutputPort; 2] = [
        OutputPort {
            topic: "session_projections",
            record: SessionProjection::FULL_NAME,
            compacted: true,
            key_record: None,
            stream_time_every_ms: None,
        },
        OutputPort {
            topic: "session_owner_repartition",
            record: SessionRetained::FULL_NAME,
            compacted: false,
            key_record: None,
            stream_time_every_ms: Some(10_000),
        },
    ];

    /// A processor with these settings; Pods carrying `session_label` belong to the session
    /// it names (`[minimize].session_label`).
    pub fn new(cfg: SessionsConfig, session_label: impl Into<String>) -> Self {
        Self {
            cfg,
            session_label: session_label.into(),
            tracked: EpochTable::new("sessions"),
            sweeps: KvStore::new("sweeps"),
        }
    }

    /// What is kept per session id (for tests and the demo).
    pub fn tracked(&self) -> impl Iterator<Item = (&String, &Tracked)> {
        self.tracked.iter()
    }

    fn on_session(
        &mut self,
        obs: SessionObservation,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match obs.event {
            ObservationEvent::Applied | ObservationEvent::Deleted => {}
            ObservationEvent::Unknown => {
                return Err(ProcessError::new(
                    Reason::UnknownEvent,
                    "a session event this reader does not know",
                ));
            }
            // A host application writes no markers; heartbeats only move time.
            _ => return Ok(()),
        }
        let Some(session) = obs.session else {
            return Err(ProcessError::new(Reason::MissingObject, "a session event without a session"));
        };
        let id = session.session_id.clone();
        let tracked = self.tracked.entry_mut(id.clone());
        // Two writers of one session may race: the later change wins, not the later write.
        if tracked.session.as_ref().is_some_and(|s| s.updated_at > session.updated_at) {
            out.count(SessionsEvent::StaleUpdates, 1);
            return Ok(());
        }
        if obs.event == ObservationEvent::Deleted {
            tracked.session = None;
            out.count(SessionsEvent::Deleted, 1);
        } else {
            tracked.session = Some(session);
            out.count(SessionsEvent::Updates, 1);
        }
        self.project(&id, now, out);
        Ok(())
    }

    fn on_pod(
        &mut self,
        obs: PodObservation,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match obs.event {
            ObservationEvent::SnapshotEnd => {
                self.forget_unlisted(obs.source.epoch, now, out);
                return Ok(());
            }
            ObservationEvent::Applied | ObservationEvent::Deleted => {}
            ObservationEvent::Unknown => {
                return Err(ProcessError::new(Reason::UnknownEvent, "a Pod event this reader does not know"));
            }
            _ => return Ok(()),
        }
        let Some(pod) = obs.pod else {
            return Err(ProcessError::new(Reason::MissingObject, "a Pod event without a Pod"));
        };
        let Some(id) = self.session_of(&pod) else {
            out.count(SessionsEvent::PodsNotSession, 1);
            return Ok(());
        };
        let (requests, invalid) = main_container_requests(&pod, &self.cfg.main_container_annotation);
        if requests.is_none() {
            out.count(SessionsEvent::MainContainerUnverified, 1);
        }
        let tracked = self.tracked.entry_mut(id.clone());
        tracked.seq += 1;
        let seen = SeenPod {
            namespace: pod.meta.namespace.clone(),
            name: pod.meta.name.clone(),
            phase: pod.phase,
            deleting: pod.meta.deletion_timestamp.is_some(),
            requests: requests.unwrap_or_default(),
            epoch: obs.source.epoch,
            gone: obs.event == ObservationEvent::Deleted,
            seq: tracked.seq,
        };
        tracked.pods.insert(pod.meta.uid.clone(), seen);
        out.count(SessionsEvent::PodObservations, 1);
        self.project(&id, now, out);
        // The rest of the observation was used; the bad quantity goes to the dead letters.
        match invalid {
            Some(detail) => Err(ProcessError { reason: Reason::InvalidQuantity, detail }),
            None => Ok(()),
        }
    }

    /// The session a Pod belongs to: its label's value, unless a Job controls it (such a
    /// Pod is a run, keyed by its Job, and never a session's).
    fn session_of(&self, pod: &Pod) -> Option<String> {
        if pod.controller.as_ref().is_some_and(|c| c.kind == Kind::Job) {
            return None;
        }
        pod.meta.labels.get(&self.session_label).filter(|v| !v.is_empty()).cloned()
    }

    /// After SNAPSHOT_END of `epoch`: a Pod not re-listed was deleted while unobserved.
    fn forget_unlisted(&mut self, epoch: i64, now: StreamTime, out: &mut Outputs) {
        for (id, uids) in self.tracked.unlisted_within(epoch, |t| &t.pods, |_, p| !p.gone) {
            self.tracked.update(&id, |t| {
                for uid in &uids {
                    if let Some(p) = t.pods.get_mut(uid) {
                        p.gone = true;
                    }
                }
            });
            out.count(SessionsEvent::PodsUnlisted, uids.len() as u64);
            self.project(&id, now, out);
        }
    }

    /// Recomputes a session's projection and emits what changed: the projection, and the
    /// session's retained compute for its owner's total.
    fn project(&mut self, id: &str, now: StreamTime, out: &mut Outputs) {
        let key = id.to_owned();
        let Some(mut tracked) = self.tracked.delete(&key) else { return };
        match &tracked.session {
            Some(session) => {
                let mut projection = projection_of(session, &tracked);
                if tracked.emitted.as_ref() != Some(&projection) {
                    projection.revision = tracked.revision + 1;
                    projection.stream_time = now;
                    match out.emit(SessionsOut::Projections, id.as_bytes().to_vec(), &projection) {
                        Ok(()) => {
                            tracked.revision = projection.revision;
                            projection.revision = 0;
                            projection.stream_time = 0;
                            out.count(SessionsEvent::Projected(projection.retention_state), 1);
                            let released = projection.retention_state == RetentionState::Released;
                            tracked.released_at = match (released, tracked.released_at) {
                                (true, Some(at)) => Some(at),
                                (true, None) => Some(now),
                                (false, _) => None,
                            };
                            tracked.emitted = Some(projection.clone());
                        }
                        // Not recorded as emitted: the next change tries again.
                        Err(_) => out.count(SessionsEvent::EncodeFailed, 1),
                    }
                }
                let retained = projection.retention_state == RetentionState::Retained;
                let requests = projection.main_container_requests;
                let now_holds = SessionRetained {
                    session_id: key.clone(),
                    owner: session.owner.clone(),
                    retained,
                    cpu_millicores: requests.cpu_millicores.filter(|_| retained),
                    memory_bytes: requests.memory_bytes.filter(|_| retained),
                    stream_time: 0,
                };
                self.contribute(&mut tracked, Some(now_holds), now, out);
            }
            None => {
                // No session record (never sent, or deleted): no row, and nothing held.
                if tracked.emitted.take().is_some() {
                    out.tombstone(SessionsOut::Projections, id.as_bytes().to_vec());
                }
                tracked.released_at = None;
                self.contribute(&mut tracked, None, now, out);
            }
        }
        // A session id with no session record keeps only Pods that are still there.
        if tracked.session.is_none() {
            tracked.pods.retain(|_, p| !p.gone);
            if tracked.pods.is_empty() && tracked.emitted.is_none() {
                return;
            }
        }
        self.tracked.put(key, tracked);
    }

    /// Tells the owner's total what the session holds now, when that changed: the current
    /// owner gets the new record, and a previous owner a record saying it left.
    fn contribute(
        &mut self,
        tracked: &mut Tracked,
        holds: Option<SessionRetained>,
        now: StreamTime,
        out: &mut Outputs,
    ) {
        let before = tracked.contributed.take();
        let held_before = before.as_ref().filter(|b| b.retained);
        let send = |owner: &str, record: &SessionRetained, out: &mut Outputs| {
            let record = SessionRetained { stream_time: now, ..record.clone() };
            if out.emit(SessionsOut::Retained, owner.as_bytes().to_vec(), &record).is_err() {
                out.count(SessionsEvent::EncodeFailed, 1);
            }
        };
        match &holds {
            Some(h) if before.as_ref() != Some(h) => {
                if h.retained || held_before.is_some_and(|b| b.owner == h.owner) {
                    send(&h.owner, h, out);
                }
                // The session moved: its former owner stops counting it.
                if let Some(b) = held_before.filter(|b| b.owner != h.owner) {
                    send(&b.owner, h, out);
                }
            }
            Some(_) => {}
            None => {
                if let Some(b) = held_before {
                    let released = SessionRetained {
                        retained: false,
                        cpu_millicores: None,
                        memory_bytes: None,
                        ..b.clone()
                    };
                    send(&b.owner, &released, out);
                }
            }
        }
        tracked.contributed = holds;
    }
}

/// The projection of a session from what is kept (stream time and revision left at 0).
pub fn projection_of(session: &Session, tracked: &Tracked) -> SessionProjection {
    let expected = &session.pod;
    let is_own = |uid: &str, p: &SeenPod| {
        p.namespace == expected.namespace
            && p.name == expected.name
            && expected.uid.as_deref().is_none_or(|u| u == uid)
    };
    // The own Pod: a present one before a gone one, then the latest observed (a Pod
    // re-created under the same name, when the session recorded no UID).
    let own = tracked.pods.iter().filter(|(uid, p)| is_own(uid, p)).max_by_key(|(_, p)| (!p.gone, p.seq));
    let foreign = tracked.pods.iter().filter(|(uid, p)| !is_own(uid, p)).count();
    let undecodable_after = |seq: u64| tracked.undecodable_seq.is_some_and(|u| u > seq);
    let evidence = match own {
        Some((_, p)) if undecodable_after(p.seq) => PodEvidence::Undecodable,
        Some((_, p)) if p.gone => PodEvidence::Gone,
        Some((_, p)) => PodEvidence::Present { phase: p.phase, deleting: p.deleting },
        None if tracked.undecodable_seq.is_some() => PodEvidence::Undecodable,
        None => PodEvidence::Missing,
    };
    SessionProjection {
        session_id: session.session_id.clone(),
        owner: session.owner.clone(),
        session_state: session.state,
        retention_state: retention(session.state, evidence),
        pod: own.map(|(uid, p)| PodIdentity {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: Some(uid.clone()),
        }),
        pod_phase: own.map(|(_, p)| p.phase),
        main_container_requests: own.map(|(_, p)| p.requests).unwrap_or_default(),
        foreign_pods_seen: foreign as i64,
        stream_time: 0,
        revision: 0,
    }
}

/// The requests of a Pod's verified main container — the one the main-container annotation
/// names, else the only container — or `None` without one; and a description of a request
/// that did not parse (that value is left out).
pub fn main_container_requests(pod: &Pod, annotation: &str) -> (Option<ContainerRequests>, Option<String>) {
    let main: Option<&ContainerObservation> = match pod.meta.annotations.get(annotation) {
        Some(name) => pod.containers.iter().find(|c| &c.name == name),
        None if pod.containers.len() == 1 => pod.containers.first(),
        None => None,
    };
    let Some(c) = main else { return (None, None) };
    let mut invalid = Vec::new();
    let mut parse =
        |what: &str, text: &Option<String>, f: fn(&str) -> Result<i64, quantity::QuantityError>| {
            let text = text.as_deref()?;
            f(text)
                .map_err(|e| {
                    invalid.push(format!(
                        "Pod {}/{} container {}: {what} request {text:?}: {e}",
                        pod.meta.namespace, pod.meta.name, c.name
                    ))
                })
                .ok()
        };
    let requests = ContainerRequests {
        cpu_millicores: parse("cpu", &c.requests_cpu, quantity::cpu_millicores),
        memory_bytes: parse("memory", &c.requests_memory, quantity::memory_bytes),
    };
    (Some(requests), (!invalid.is_empty()).then(|| invalid.join("; ")))
}

impl Processor for Sessions {
    type Input = SessionsInput;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![&mut self.tracked, &mut self.sweeps]
    }

    fn process(
        &mut self,
        input: SessionsInput,
        _meta: &RecordMeta,
        now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        match input {
            SessionsInput::Session(obs) => self.on_session(*obs, now, out),
            SessionsInput::Pod(obs) => self.on_pod(*obs, now, out),
        }
    }

    fn on_undecodable(&mut self, meta: &RecordMeta, now: StreamTime, out: &mut Outputs) {
        // A Pod observation under a known session id did not decode: what that session's
        // Pod is now is unknown until its next observation decodes.
        if SessionsIn::of(meta.input) != Some(SessionsIn::Pods) {
            return;
        }
        let Some(id) = meta.key.as_deref().and_then(|k| std::str::from_utf8(k).ok()).map(str::to_owned)
        else {
            return;
        };
        let Some(tracked) = self.tracked.get_mut(&id) else { return };
        tracked.seq += 1;
        tracked.undecodable_seq = Some(tracked.seq);
        out.count(SessionsEvent::PodUndecodable, 1);
        self.project(&id, now, out);
    }

    // The only timer is the sweep. `[session-owners]` needs no forwarded time: it reads one
    // input, so its tasks never wait on a quiet lane, and it stamps totals with the stream
    // time each change had here (`SessionRetained::stream_time`), not its own.
    fn on_stream_time(&mut self, now: StreamTime, out: &mut Outputs) {
        let keep_ms = self.cfg.forget_released_after_ms;
        if keep_ms <= 0 {
            return;
        }
        let sweep = now.div_euclid(self.cfg.sweep_interval_ms.max(1));
        match self.sweeps.get(&()).copied() {
            Some(last) if last >= sweep => return,
            // None before the first interval ends: a task's first record is no boundary.
            None => {
                self.sweeps.put((), sweep);
                return;
            }
            Some(_) => self.sweeps.put((), sweep),
        }
        let forget: Vec<String> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.released_at.is_some_and(|at| at <= now.saturating_sub(keep_ms)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in forget {
            // RELEASED holds nothing, so no owner total changes.
            self.tracked.delete(&id);
            out.tombstone(SessionsOut::Projections, id.into_bytes());
            out.count(SessionsEvent::Forgotten, 1);
        }
    }
}
