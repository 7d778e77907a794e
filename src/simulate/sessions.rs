//! A host application's sessions: SESSION lines and the pods they run in.

use std::collections::VecDeque;

use super::{Ev, Exit, Item, PodKind, PodPhase, SessionState0, Sim, fleet::SESSION_NAMESPACE};
use crate::trace::{SessionPod, SessionRecord, SessionState, TraceEntry, TraceEvent};

impl Sim {
    pub(super) fn new_session_pod(
        &mut self,
        name: String,
        namespace: String,
        session: String,
        requests: (u32, u32),
        out: &mut VecDeque<TraceEntry>,
    ) -> u64 {
        let id = self.insert_pod(
            name,
            PodKind::Session { session, namespace, requests },
            false,
            None,
            Exit::Completed,
        );
        self.emit(out, Item::Pod(id), false);
        self.after(5, 80, Ev::PodScheduled(id));
        id
    }

    pub(super) fn session_line(
        &mut self,
        i: usize,
        state: SessionState,
        with_uid: bool,
        out: &mut VecDeque<TraceEntry>,
    ) {
        // A little before it is published, and after the previous change.
        let updated_ms = (self.now - self.rng.range(50, 400)).max(self.sessions[i].updated_ms + 1);
        self.sessions[i].updated_ms = updated_ms;
        let s = &self.sessions[i];
        let uid = if with_uid { s.pod.and_then(|p| self.pods.get(&p)).map(|p| p.uid.clone()) } else { None };
        let record = SessionRecord {
            session_id: s.id.clone(),
            state,
            pod: SessionPod { namespace: SESSION_NAMESPACE.to_owned(), name: s.pod_name.clone(), uid },
            owner: s.owner.clone(),
            updated_at_ms: Some(updated_ms),
        };
        self.stats.session_updates += 1;
        // The host application publishes to Kafka directly: the watcher's gaps do not hide it.
        out.push_back(TraceEntry { observed_at_ms: self.now, event: TraceEvent::Session(record) });
    }

    /// One step of a session's life; variants by index show every retention case.
    pub(super) fn session_step(&mut self, i: usize, step: u8, out: &mut VecDeque<TraceEntry>) {
        let variant = i % 6;
        match step {
            0 => {
                self.stats.sessions += 1;
                let id = format!("sess-{}", self.rng.hex(6));
                let owner = format!("tenant-{:04}", self.rng.below(200));
                let pod_name = format!("agent-{id}");
                self.sessions.push(SessionState0 {
                    id: id.clone(),
                    owner,
                    pod: None,
                    pod_name: pod_name.clone(),
                    updated_ms: i64::MIN,
                });
                debug_assert_eq!(self.sessions.len(), i + 1);
                let requests = (*self.rng.pick(&[250, 500, 1000, 0]), *self.rng.pick(&[512, 1024, 2048]));
                self.session_line(i, SessionState::Created, false, out);
                let p =
                    self.new_session_pod(pod_name, SESSION_NAMESPACE.to_owned(), id.clone(), requests, out);
                self.sessions[i].pod = Some(p);
                self.session_line(i, SessionState::Starting, false, out);
                self.after(5_000, 9_000, Ev::Session(i, 1));
                if i == 0 {
                    // A foreign pod carrying this session's label (a debug copy elsewhere).
                    self.new_session_pod(format!("debug-{id}"), "etl".into(), id, (100, 128), out);
                }
            }
            1 => {
                self.session_line(i, SessionState::Running, true, out);
                self.after(60_000, 600_000, Ev::Session(i, 2));
            }
            2 => {
                self.session_line(i, SessionState::WaitingForInput, true, out);
                if variant == 4 {
                    // Waits for input until the trace ends.
                    return;
                }
                self.after(30_000, 300_000, Ev::Session(i, 3));
            }
            3 => {
                self.session_line(i, SessionState::Idle, true, out);
                self.after(60_000, 900_000, Ev::Session(i, 4));
            }
            4 => {
                let state = match variant {
                    2 => SessionState::Failed,
                    3 => SessionState::Cancelled,
                    _ => SessionState::Completed,
                };
                self.session_line(i, state, true, out);
                let Some(p) = self.sessions[i].pod else { return };
                match variant {
                    // The pod ends by itself, and is deleted a while later.
                    0 | 2 => {
                        if let Some(pod) = self.pods.get_mut(&p) {
                            pod.planned_exit = if variant == 0 { Exit::Completed } else { Exit::Error };
                        }
                        self.after(1_000, 5_000, Ev::PodExit(p));
                        if variant == 0 {
                            self.after(600_000, 1_200_000, Ev::Session(i, 5));
                        }
                    }
                    // Retained compute: the pod keeps running after the session ended.
                    1 => {}
                    // Cancelled, or completed then released: the pod is deleted while running.
                    _ => self.after(2_000, 30_000, Ev::Session(i, 5)),
                }
            }
            _ => {
                let Some(p) = self.sessions[i].pod else { return };
                let now = self.now;
                let Some(pod) = self.pods.get_mut(&p) else { return };
                if pod.deletion_ms.is_some() {
                    return;
                }
                pod.deletion_ms = Some(now + 60_000);
                let running = pod.phase == PodPhase::Running || pod.phase == PodPhase::Pending;
                self.touch_pod(p, out);
                if running {
                    self.after(500, 5_000, Ev::PodExit(p));
                } else {
                    self.after(200, 1_000, Ev::PodGone(p));
                }
            }
        }
    }

    /// A labelled pod with no session record.
    pub(super) fn odd_pods(&mut self, _step: u8, out: &mut VecDeque<TraceEntry>) {
        let id = format!("sess-orphan-{}", self.rng.hex(4));
        self.new_session_pod(format!("agent-{id}"), SESSION_NAMESPACE.to_owned(), id, (250, 512), out);
    }
}
