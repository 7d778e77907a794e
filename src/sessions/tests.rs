//! `[sessions]` and `[session-owners]` through the in-memory driver: the same decode,
//! dead-letter and processing path a task takes on Kafka.

use std::collections::BTreeMap;

use super::{
    config::SessionsConfig,
    model::{ContainerRequests, OwnerRetainedCompute, SessionProjection, SessionRetained},
    owners::SessionOwners,
    project::{DEFAULT_CONTAINER_ANNOTATION, Sessions},
    retention::{PHASES, RetentionState as R, SESSION_STATES},
};
use crate::{
    codec::{Codec, single_object_writer},
    observe::{
        ObservationEvent, PodObservation, SessionObservation,
        model::{
            ContainerObservation, ObjectMeta, OwnerReference, Pod, PodIdentity, PodPhase, Session,
            SessionState, Source,
        },
    },
    runtime::driver::{self, DriverRun, MemTopic, OutputTopics},
};

const PARTITIONS: i32 = 3;

const LABEL: &str = "kubefacts.io/session";
const T0: i64 = 1_790_000_000_000;
const GIB: i64 = 1 << 30;

fn source(epoch: i64) -> Source {
    Source { cluster: "c".into(), instance: "w".into(), epoch }
}

fn uid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

fn container(name: &str, cpu: Option<&str>, memory: Option<&str>) -> ContainerObservation {
    ContainerObservation {
        name: name.into(),
        requests_cpu: cpu.map(Into::into),
        requests_memory: memory.map(Into::into),
        restart_count: 0,
        state: None,
        last_state: None,
    }
}

/// A session Pod: main container `agent` (250m, 1Gi) named by the annotation, and a
/// sidecar whose requests must never be reported.
fn session_pod(id: &str, ns: &str, name: &str, uid: &str, phase: PodPhase, deleting: bool) -> Pod {
    Pod {
        meta: ObjectMeta {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            resource_version: None,
            creation_timestamp: Some(T0),
            deletion_timestamp: deleting.then_some(T0 + 5_000),
            labels: BTreeMap::from([(LABEL.into(), id.into())]),
            annotations: BTreeMap::from([(DEFAULT_CONTAINER_ANNOTATION.into(), "agent".into())]),
        },
        controller: None,
        phase,
        containers: vec![
            container("proxy", Some("2"), Some("64Mi")),
            container("agent", Some("250m"), Some("1Gi")),
        ],
        init_containers: vec![],
    }
}

fn session(id: &str, state: SessionState, pod_uid: Option<&str>, owner: &str, at: i64) -> Session {
    Session {
        session_id: id.into(),
        state,
        pod: PodIdentity {
            namespace: "agents".into(),
            name: format!("agent-{id}"),
            uid: pod_uid.map(Into::into),
        },
        owner: owner.into(),
        updated_at: at,
    }
}

/// Input records, in the order they are appended (each at its own time).
#[derive(Debug, Clone)]
enum In {
    Session(ObservationEvent, Session),
    Pod(ObservationEvent, i64, Pod),
    /// Bytes that do not decode, keyed by this session id, on the Pods topic.
    Garbage(String),
    /// A snapshot marker (SNAPSHOT_BEGIN or SNAPSHOT_END) of this epoch on every Pods
    /// partition.
    Marker(ObservationEvent, i64),
    /// A heartbeat on every Pods partition at this time.
    Heartbeat(i64),
}

struct Ran {
    run: DriverRun,
    /// Every projection, in emission order per partition.
    projections: Vec<SessionProjection>,
    /// Session ids whose latest record is a tombstone.
    tombstoned: Vec<String>,
    retained: Vec<(String, SessionRetained)>,
}

impl Ran {
    /// The latest projection of each session id.
    fn latest(&self) -> BTreeMap<String, SessionProjection> {
        let mut by_id = BTreeMap::new();
        for p in &self.projections {
            by_id.insert(p.session_id.clone(), p.clone());
        }
        for id in &self.tombstoned {
            by_id.remove(id);
        }
        by_id
    }
}

async fn run_sessions(inputs: Vec<In>) -> Ran {
    run_sessions_with(inputs, SessionsConfig::default()).await
}

async fn run_sessions_with(inputs: Vec<In>, cfg: SessionsConfig) -> Ran {
    let codec = Codec::new(None).unwrap();
    let sessions_w = single_object_writer(&codec, SessionObservation::FULL_NAME).unwrap();
    let pods_w = single_object_writer(&codec, PodObservation::FULL_NAME).unwrap();
    let mut sessions = MemTopic::new("sessions", PARTITIONS);
    let mut pods = MemTopic::new("pods", PARTITIONS);
    for (i, input) in inputs.into_iter().enumerate() {
        let at = T0 + i as i64 * 10;
        match input {
            In::Session(event, s) => {
                let key = s.session_id.clone();
                let obs = SessionObservation { source: source(0), observed_at: at, event, session: Some(s) };
                sessions.produce(Some(key.as_bytes()), Some(sessions_w.encode(&obs).unwrap()), at, false);
            }
            In::Pod(event, epoch, pod) => {
                let key = crate::observe::pod_routing_key(&pod, LABEL).to_owned();
                let obs = PodObservation { source: source(epoch), observed_at: at, event, pod: Some(pod) };
                pods.produce(Some(key.as_bytes()), Some(pods_w.encode(&obs).unwrap()), at, false);
            }
            In::Garbage(key) => {
                pods.produce(Some(key.as_bytes()), Some(b"\xc3\x01not avro".to_vec()), at, false)
            }
            In::Heartbeat(ms) => pods.forward_time(ms),
            In::Marker(event, epoch) => {
                let obs = PodObservation { source: source(epoch), observed_at: at, event, pod: None };
                pods.produce(None, Some(pods_w.encode(&obs).unwrap()), at, false);
            }
        }
    }
    let outputs = OutputTopics {
        writers: Sessions::OUTPUTS.iter().map(|p| single_object_writer(&codec, p.record).unwrap()).collect(),
        topics: vec![MemTopic::new("projections", PARTITIONS), MemTopic::new("by-owner", PARTITIONS)],
        key_writers: Vec::new(),
        forward: crate::runtime::OutputPort::forwarding(&Sessions::OUTPUTS),
    };
    let run =
        driver::run("sessions", &codec, &[&sessions, &pods], outputs, |_| Sessions::new(cfg.clone(), LABEL))
            .await
            .unwrap();
    let (mut projections, mut tombstoned, mut retained) = (Vec::new(), Vec::new(), Vec::new());
    for rec in run.outputs[0].partitions.iter().flatten() {
        let key = String::from_utf8(rec.key.clone().unwrap()).unwrap();
        match rec.value.as_deref() {
            Some(v) => {
                let p: SessionProjection = codec.decode_as(v).await.unwrap();
                assert_eq!(p.session_id, key, "keyed by session id");
                tombstoned.retain(|t| *t != key);
                projections.push(p);
            }
            None => tombstoned.push(key),
        }
    }
    for rec in run.outputs[1].partitions.iter().flatten().filter(|r| !r.heartbeat) {
        let key = String::from_utf8(rec.key.clone().unwrap()).unwrap();
        retained.push((key, codec.decode_as(rec.value.as_deref().unwrap()).await.unwrap()));
    }
    Ran { run, projections, tombstoned, retained }
}

/// What is observed of a session's Pod in one table row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observation {
    /// Its own Pod, latest observation in this phase, with or without a deletion timestamp.
    Present(PodPhase, bool),
    /// No Pod at all.
    Missing,
    /// Only a Pod with the session's label and another name (phase, deleting).
    ForeignName(PodPhase, bool),
    /// Only a Pod with the session's name but another UID than the session recorded.
    ForeignUid(PodPhase, bool),
    /// Its own Pod was observed, then an observation under the session id failed to decode.
    FailedDecode,
    /// Only an observation that failed to decode.
    FailedDecodeOnly,
    /// Its own Pod was observed Running, then deleted.
    Deleted,
    /// Its own Pod was observed Running, then not listed again by a relist.
    Unlisted,
}

fn observations() -> Vec<Observation> {
    use Observation::*;
    let mut all = vec![Missing, FailedDecode, FailedDecodeOnly, Deleted, Unlisted];
    for phase in PHASES {
        for deleting in [false, true] {
            all.extend([Present(phase, deleting), ForeignName(phase, deleting), ForeignUid(phase, deleting)]);
        }
    }
    all
}

/// The inputs of one row: the session (with the Pod's UID recorded) and what is observed.
fn row_inputs(id: &str, n: u64, state: SessionState, obs: Observation) -> Vec<In> {
    use Observation::*;
    let own_uid = uid(n);
    let name = format!("agent-{id}");
    let applied = ObservationEvent::Applied;
    let mut v = vec![In::Session(applied, session(id, state, Some(&own_uid), "owner-a", T0))];
    let own = |phase, deleting| session_pod(id, "agents", &name, &own_uid, phase, deleting);
    match obs {
        Present(phase, deleting) => {
            // Observed twice as it progresses; the latest counts.
            v.push(In::Pod(applied, 1, own(PodPhase::Pending, false)));
            v.push(In::Pod(applied, 1, own(phase, deleting)));
        }
        Missing => {}
        ForeignName(phase, deleting) => {
            v.push(In::Pod(
                applied,
                1,
                session_pod(id, "agents", &format!("debug-{id}"), &uid(n + 1), phase, deleting),
            ));
        }
        ForeignUid(phase, deleting) => {
            v.push(In::Pod(applied, 1, session_pod(id, "agents", &name, &uid(n + 1), phase, deleting)));
        }
        FailedDecode => {
            v.push(In::Pod(applied, 1, own(PodPhase::Running, false)));
            v.push(In::Garbage(id.into()));
        }
        FailedDecodeOnly => v.push(In::Garbage(id.into())),
        Deleted => {
            v.push(In::Pod(applied, 1, own(PodPhase::Running, false)));
            v.push(In::Pod(ObservationEvent::Deleted, 1, own(PodPhase::Running, true)));
        }
        Unlisted => v.push(In::Pod(applied, 1, own(PodPhase::Running, false))),
    }
    v
}

/// The expected retention of a row, written as a plain case list (not the table's order).
fn expected_retention(state: SessionState, obs: Observation) -> R {
    use Observation::*;
    use PodPhase::*;
    use SessionState as S;
    match (state, obs) {
        (S::Unknown, _) => R::Unknown,
        (S::Created | S::Starting | S::Running | S::WaitingForInput | S::Idle, _) => R::Active,
        (_, Deleted | Unlisted) => R::Released,
        (_, Missing | ForeignName(..) | ForeignUid(..) | FailedDecode | FailedDecodeOnly) => R::Unknown,
        (_, Present(Succeeded | Failed, _)) => R::Released,
        (_, Present(Pending | Running | Unknown, true)) => R::Releasing,
        (_, Present(Pending | Running | Unknown, false)) => R::Retained,
    }
}

/// The expected requests: only from the own Pod's main container, whenever one decoded.
fn expected_requests(obs: Observation) -> ContainerRequests {
    use Observation::*;
    match obs {
        Present(..) | FailedDecode | Deleted | Unlisted => {
            ContainerRequests { cpu_millicores: Some(250), memory_bytes: Some(GIB) }
        }
        Missing | ForeignName(..) | ForeignUid(..) | FailedDecodeOnly => ContainerRequests::default(),
    }
}

#[tokio::test]
async fn every_session_state_pod_phase_deletion_and_observation() {
    let mut inputs = Vec::new();
    let mut rows = Vec::new();
    for (si, state) in SESSION_STATES.into_iter().enumerate() {
        for (oi, obs) in observations().into_iter().enumerate() {
            let id = format!("s-{si}-{oi}");
            let n = (si * 1000 + oi * 10) as u64;
            inputs.extend(row_inputs(&id, n, state, obs));
            rows.push((id, state, obs));
        }
    }
    // One relist at the end: every Pod is re-listed except the Unlisted rows' own Pods.
    let relisted: Vec<In> = inputs
        .iter()
        .filter_map(|i| match i {
            In::Pod(ObservationEvent::Applied, _, p) => Some((p.meta.uid.clone(), p.clone())),
            _ => None,
        })
        .collect::<BTreeMap<String, Pod>>()
        .into_values()
        .filter(|p| {
            let row = rows.iter().find(|(id, ..)| p.meta.labels[LABEL] == *id).unwrap();
            row.2 != Observation::Unlisted && row.2 != Observation::Deleted
        })
        .map(|p| In::Pod(ObservationEvent::Applied, 2, p))
        .collect();
    // The failed decodes come last: the relist would otherwise be a later, decoded
    // observation of the same Pod (and end the UNKNOWN, as it should).
    let (garbage, mut all): (Vec<In>, Vec<In>) =
        inputs.into_iter().partition(|i| matches!(i, In::Garbage(_)));
    all.push(In::Marker(ObservationEvent::SnapshotBegin, 2));
    all.extend(relisted);
    all.push(In::Marker(ObservationEvent::SnapshotEnd, 2));
    all.extend(garbage);
    let ran = run_sessions(all).await;
    let latest = ran.latest();
    let mut checked = 0;
    for (id, state, obs) in &rows {
        let p = latest.get(id).unwrap_or_else(|| panic!("{id}: no projection for {state:?} × {obs:?}"));
        let what = format!("{id}: {state:?} × {obs:?}");
        assert_eq!(p.session_state, *state, "{what}");
        assert_eq!(p.retention_state, expected_retention(*state, *obs), "{what}");
        assert_eq!(p.main_container_requests, expected_requests(*obs), "{what}");
        let foreign = matches!(obs, Observation::ForeignName(..) | Observation::ForeignUid(..));
        assert_eq!(p.foreign_pods_seen, i64::from(foreign), "{what}");
        assert_eq!(
            p.pod.is_some(),
            expected_requests(*obs).cpu_millicores.is_some(),
            "{what}: own Pod shown"
        );
        checked += 1;
    }
    assert_eq!(
        checked,
        9 * (5 + 5 * 2 * 3),
        "9 states × (missing, 2 failed decodes, deleted, unlisted, 5 phases × deletion × own/foreign name/foreign UID)"
    );
    // Every failed decode went to the dead letters with a reason, none was dropped.
    let garbage = rows
        .iter()
        .filter(|r| matches!(r.2, Observation::FailedDecode | Observation::FailedDecodeOnly))
        .count();
    assert_eq!(ran.run.dead_letters.len(), garbage, "{:?}", ran.run.dead_letters);
    assert!(ran.run.dead_letters.iter().all(|d| d.source_topic == "pods" && !d.reason.is_empty()));
}

#[tokio::test]
async fn a_later_decoded_observation_of_the_own_pod_ends_the_unknown() {
    let applied = ObservationEvent::Applied;
    let u = uid(1);
    let pod = |phase| session_pod("s", "agents", "agent-s", &u, phase, false);
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Completed, Some(&u), "o", T0)),
        In::Pod(applied, 1, pod(PodPhase::Running)),
        In::Garbage("s".into()),
        // A foreign Pod decoding says nothing about the own one.
        In::Pod(applied, 1, session_pod("s", "agents", "debug-s", &uid(2), PodPhase::Running, false)),
        In::Pod(applied, 1, pod(PodPhase::Running)),
    ])
    .await;
    let states: Vec<R> = ran.projections.iter().map(|p| p.retention_state).collect();
    assert_eq!(states, [R::Unknown, R::Retained, R::Unknown, R::Unknown, R::Retained]);
    let revisions: Vec<i64> = ran.projections.iter().map(|p| p.revision).collect();
    assert_eq!(revisions, [1, 2, 3, 4, 5], "one revision per change");
}

#[tokio::test]
async fn explicit_zero_is_kept_and_missing_requests_are_absent() {
    let applied = ObservationEvent::Applied;
    let mut pod = session_pod("s", "agents", "agent-s", &uid(1), PodPhase::Running, false);
    pod.containers[1] = container("agent", Some("0"), None);
    let mut other = session_pod("t", "agents", "agent-t", &uid(2), PodPhase::Running, false);
    other.containers[1] = container("agent", None, Some("0"));
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Completed, None, "o", T0)),
        In::Session(applied, session("t", SessionState::Completed, None, "o", T0)),
        In::Pod(applied, 1, pod),
        In::Pod(applied, 1, other),
    ])
    .await;
    let latest = ran.latest();
    // Decoded back from the Avro bytes: null and 0 stay apart.
    assert_eq!(
        latest["s"].main_container_requests,
        ContainerRequests { cpu_millicores: Some(0), memory_bytes: None }
    );
    assert_eq!(
        latest["t"].main_container_requests,
        ContainerRequests { cpu_millicores: None, memory_bytes: Some(0) }
    );
    assert_eq!(latest["s"].retention_state, R::Retained);
}

#[tokio::test]
async fn the_main_container_is_the_annotated_one_or_the_only_one() {
    let applied = ObservationEvent::Applied;
    let base =
        |id: &str, n| session_pod(id, "agents", &format!("agent-{id}"), &uid(n), PodPhase::Running, false);
    let mut sidecar = base("a", 1);
    sidecar.meta.annotations.insert(DEFAULT_CONTAINER_ANNOTATION.into(), "proxy".into());
    let mut absent = base("b", 2);
    absent.meta.annotations.insert(DEFAULT_CONTAINER_ANNOTATION.into(), "nope".into());
    let mut only = base("c", 3);
    only.meta.annotations.clear();
    only.containers.remove(0);
    let mut two = base("d", 4);
    two.meta.annotations.clear();
    let mut inputs = Vec::new();
    for (id, pod) in [("a", sidecar), ("b", absent), ("c", only), ("d", two)] {
        inputs.push(In::Session(applied, session(id, SessionState::Completed, None, "o", T0)));
        inputs.push(In::Pod(applied, 1, pod));
    }
    let latest = run_sessions(inputs).await.latest();
    let req = |id: &str| latest[id].main_container_requests;
    assert_eq!(req("a"), ContainerRequests { cpu_millicores: Some(2000), memory_bytes: Some(64 << 20) });
    assert_eq!(req("b"), ContainerRequests::default(), "the annotation names no container: not verified");
    assert_eq!(req("c"), ContainerRequests { cpu_millicores: Some(250), memory_bytes: Some(GIB) });
    assert_eq!(req("d"), ContainerRequests::default(), "two containers, no annotation: not verified");
}

#[tokio::test]
async fn a_bad_quantity_is_dead_lettered_and_the_rest_is_used() {
    let applied = ObservationEvent::Applied;
    let mut pod = session_pod("s", "agents", "agent-s", &uid(1), PodPhase::Running, false);
    pod.containers[1] = container("agent", Some("12 cores"), Some("1Gi"));
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Completed, None, "o", T0)),
        In::Pod(applied, 1, pod),
    ])
    .await;
    let p = &ran.latest()["s"];
    assert_eq!(p.retention_state, R::Retained);
    assert_eq!(
        p.main_container_requests,
        ContainerRequests { cpu_millicores: None, memory_bytes: Some(GIB) }
    );
    let [dl] = ran.run.dead_letters.as_slice() else { panic!("{:?}", ran.run.dead_letters) };
    assert_eq!(dl.reason, "invalid_quantity");
    assert!(dl.detail.contains("\"12 cores\"") && dl.detail.contains("agents/agent-s"), "{}", dl.detail);
}

#[tokio::test]
async fn a_labelled_pod_without_a_session_makes_no_row_until_its_session_arrives() {
    let applied = ObservationEvent::Applied;
    let pod = session_pod("s", "agents", "agent-s", &uid(1), PodPhase::Running, false);
    let mut job_pod = session_pod("j", "agents", "agent-j", &uid(9), PodPhase::Running, false);
    job_pod.controller = Some(OwnerReference { kind: "Job".into(), name: "x".into(), uid: uid(10) });
    let early =
        run_sessions(vec![In::Pod(applied, 1, pod.clone()), In::Pod(applied, 1, job_pod.clone())]).await;
    assert!(early.projections.is_empty() && early.retained.is_empty(), "{:?}", early.projections);
    let later = run_sessions(vec![
        In::Pod(applied, 1, pod),
        In::Pod(applied, 1, job_pod),
        In::Session(applied, session("s", SessionState::Completed, None, "o", T0)),
        In::Session(applied, session("j", SessionState::Completed, None, "o", T0)),
    ])
    .await;
    let latest = later.latest();
    assert_eq!(
        latest["s"].retention_state,
        R::Retained,
        "the Pod seen first counts once the session arrives"
    );
    assert_eq!(latest["j"].retention_state, R::Unknown, "a Job's Pod is a run, never a session's");
}

#[tokio::test]
async fn a_session_that_learns_its_pods_uid_reclassifies_the_pods_it_saw() {
    let applied = ObservationEvent::Applied;
    let (old, new) = (uid(1), uid(2));
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Running, None, "o", T0)),
        // The first Pod of that name went away; a second took the name.
        In::Pod(applied, 1, session_pod("s", "agents", "agent-s", &old, PodPhase::Running, false)),
        In::Pod(
            ObservationEvent::Deleted,
            1,
            session_pod("s", "agents", "agent-s", &old, PodPhase::Running, true),
        ),
        In::Pod(applied, 1, session_pod("s", "agents", "agent-s", &new, PodPhase::Running, false)),
        In::Session(applied, session("s", SessionState::Completed, Some(&old), "o", T0 + 1)),
    ])
    .await;
    let p = &ran.latest()["s"];
    assert_eq!(p.retention_state, R::Released, "its own Pod (the old UID) is gone");
    assert_eq!(p.foreign_pods_seen, 1, "the new one is foreign to a session that recorded the old UID");
    assert_eq!(p.pod.as_ref().and_then(|p| p.uid.as_deref()), Some(old.as_str()));
}

#[tokio::test]
async fn a_stale_session_update_is_ignored_and_a_deleted_session_is_tombstoned() {
    let applied = ObservationEvent::Applied;
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Completed, None, "o", T0 + 100)),
        In::Session(applied, session("s", SessionState::Running, None, "o", T0)),
        In::Pod(applied, 1, session_pod("s", "agents", "agent-s", &uid(1), PodPhase::Running, false)),
    ])
    .await;
    assert_eq!(ran.latest()["s"].session_state, SessionState::Completed, "the older change lost");
    assert_eq!(ran.run.counts.get("sessions_stale_updates"), Some(&1));
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Completed, None, "o", T0)),
        In::Pod(applied, 1, session_pod("s", "agents", "agent-s", &uid(1), PodPhase::Running, false)),
        In::Session(ObservationEvent::Deleted, session("s", SessionState::Completed, None, "o", T0 + 1)),
    ])
    .await;
    assert!(ran.latest().is_empty(), "tombstoned: {:?}", ran.projections);
    let last = &ran.retained.last().unwrap().1;
    assert!(!last.retained, "its owner stops counting it: {:?}", ran.retained);
}

#[tokio::test]
async fn a_pod_observed_again_unchanged_emits_nothing() {
    let applied = ObservationEvent::Applied;
    let pod = session_pod("s", "agents", "agent-s", &uid(1), PodPhase::Running, false);
    let ran = run_sessions(vec![
        In::Session(applied, session("s", SessionState::Completed, None, "o", T0)),
        In::Pod(applied, 1, pod.clone()),
        In::Pod(applied, 1, pod.clone()),
        In::Pod(applied, 1, pod),
    ])
    .await;
    assert_eq!(ran.projections.len(), 2, "UNKNOWN, then RETAINED: {:?}", ran.projections);
    assert_eq!(ran.retained.len(), 1, "{:?}", ran.retained);
}

/// Runs `[session-owners]` over records keyed by owner.
async fn run_owners(records: Vec<(&str, SessionRetained)>) -> (Vec<OwnerRetainedCompute>, DriverRun) {
    let codec = Codec::new(None).unwrap();
    let w = single_object_writer(&codec, SessionRetained::FULL_NAME).unwrap();
    let mut input = MemTopic::new("by-owner", PARTITIONS);
    for (i, (key, r)) in records.into_iter().enumerate() {
        input.produce(Some(key.as_bytes()), Some(w.encode(&r).unwrap()), T0 + i as i64, false);
    }
    let outputs = OutputTopics {
        writers: vec![single_object_writer(&codec, OwnerRetainedCompute::FULL_NAME).unwrap()],
        topics: vec![MemTopic::new("totals", PARTITIONS)],
        key_writers: Vec::new(),
        forward: Vec::new(),
    };
    let run =
        driver::run("session-owners", &codec, &[&input], outputs, |_| SessionOwners::new()).await.unwrap();
    let mut out = Vec::new();
    for rec in run.outputs[0].partitions.iter().flatten() {
        let t: OwnerRetainedCompute = codec.decode_as(rec.value.as_deref().unwrap()).await.unwrap();
        assert_eq!(rec.key.as_deref(), Some(t.owner.as_bytes()));
        out.push(t);
    }
    (out, run)
}

fn held(id: &str, owner: &str, retained: bool, cpu: Option<i64>, mem: Option<i64>) -> SessionRetained {
    SessionRetained {
        session_id: id.into(),
        owner: owner.into(),
        retained,
        cpu_millicores: cpu,
        memory_bytes: mem,
        stream_time: T0,
    }
}

#[tokio::test]
async fn owner_totals_follow_their_sessions() {
    let (totals, _) = run_owners(vec![
        ("a", held("s1", "a", true, Some(250), Some(GIB))),
        ("a", held("s2", "a", true, None, Some(GIB))),
        // Seen twice (a retried write): nothing changes.
        ("a", held("s2", "a", true, None, Some(GIB))),
        // s1 released.
        ("a", held("s1", "a", false, None, None)),
        // s2 moved to owner b: a stops counting it, b starts.
        ("b", held("s2", "b", true, None, Some(GIB))),
        ("a", held("s2", "b", true, None, Some(GIB))),
    ])
    .await;
    let summary: Vec<(String, i64, i64, i64, i64, i64)> = totals
        .iter()
        .map(|t| {
            (
                t.owner.clone(),
                t.revision,
                t.retained_sessions,
                t.cpu_millicores,
                t.memory_bytes,
                t.sessions_without_cpu_request,
            )
        })
        .collect();
    let mut by_owner: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for s in summary {
        by_owner.entry(s.0.clone()).or_default().push(s);
    }
    assert_eq!(
        by_owner["a"],
        [
            ("a".into(), 1, 1, 250, GIB, 0),
            ("a".into(), 2, 2, 250, 2 * GIB, 1),
            ("a".into(), 3, 1, 0, GIB, 1),
            ("a".into(), 4, 0, 0, 0, 0),
        ]
    );
    assert_eq!(by_owner["b"], [("b".into(), 1, 1, 0, GIB, 1)]);
    assert!(
        totals.iter().all(|t| t.stream_time == T0),
        "stamped with [sessions]' time, not ours: {totals:?}"
    );
}

/// Two sessions of one owner change in two `[sessions]` tasks, whose records reach the owner
/// in either order: the totals say the same in both, stamped with the later change.
#[tokio::test]
async fn owner_totals_do_not_depend_on_how_upstream_tasks_interleave() {
    let at = |mut r: SessionRetained, t: i64| {
        r.stream_time = t;
        r
    };
    let early = ("a", at(held("s1", "a", true, Some(250), Some(GIB)), T0));
    let late = ("a", at(held("s2", "a", true, None, Some(GIB)), T0 + 60_000));
    let (one, _) = run_owners(vec![early.clone(), late.clone()]).await;
    let (other, _) = run_owners(vec![late, early]).await;
    assert_eq!(one.last(), other.last());
    assert_eq!(one.last().map(|t| (t.revision, t.stream_time)), Some((2, T0 + 60_000)));
}

#[tokio::test]
async fn the_owner_stage_sums_what_the_sessions_stage_says_is_retained() {
    let applied = ObservationEvent::Applied;
    let ran = run_sessions(vec![
        In::Session(applied, session("s1", SessionState::Completed, None, "o", T0)),
        In::Session(applied, session("s2", SessionState::WaitingForInput, None, "o", T0)),
        In::Pod(applied, 1, session_pod("s1", "agents", "agent-s1", &uid(1), PodPhase::Running, false)),
        In::Pod(applied, 1, session_pod("s2", "agents", "agent-s2", &uid(2), PodPhase::Running, false)),
        // s1 moves to owner p while retained.
        In::Session(applied, session("s1", SessionState::Completed, None, "p", T0 + 1)),
    ])
    .await;
    let (totals, _) = run_owners(ran.retained.iter().map(|(k, r)| (k.as_str(), r.clone())).collect()).await;
    let mut last: BTreeMap<String, OwnerRetainedCompute> = BTreeMap::new();
    for t in totals {
        last.insert(t.owner.clone(), t);
    }
    assert_eq!((last["o"].retained_sessions, last["o"].cpu_millicores), (0, 0), "s1 left o; s2 is active");
    assert_eq!(
        (last["p"].retained_sessions, last["p"].cpu_millicores, last["p"].memory_bytes),
        (1, 250, GIB)
    );
}

#[test]
fn a_session_state_added_by_a_newer_writer_reads_as_unknown() {
    use apache_avro::{Schema, types::Value};
    // A newer host application's schema: one more state at the end of the enum.
    let current =
        crate::codec::SchemaSet::embedded().unwrap().current(SessionObservation::FULL_NAME).unwrap();
    let text = include_str!("../../schemas/session-observation.avsc");
    let newer_text = text.replacen("\"CANCELLED\"\n", "\"CANCELLED\",\n                  \"PAUSED\"\n", 1);
    assert_ne!(newer_text, text, "the enum's last symbol moved: update this test");
    let newer = Schema::parse_str(&newer_text).unwrap();
    let obs = SessionObservation {
        source: source(0),
        observed_at: T0,
        event: ObservationEvent::Applied,
        session: Some(session("s", SessionState::Cancelled, None, "o", T0)),
    };
    // The same record, with the state the reader does not know.
    fn paused(v: Value) -> Value {
        match v {
            Value::Enum(_, s) if s == "CANCELLED" => Value::Enum(9, "PAUSED".into()),
            Value::Record(fields) => Value::Record(fields.into_iter().map(|(k, v)| (k, paused(v))).collect()),
            Value::Union(i, v) => Value::Union(i, Box::new(paused(*v))),
            other => other,
        }
    }
    let value = paused(apache_avro::to_value(&obs).unwrap().resolve(&newer).unwrap());
    let mut datum = Vec::new();
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&newer).build().unwrap();
    writer.write_value_ref(&mut datum, &value).unwrap();
    let read = crate::codec::read_datum(SessionObservation::FULL_NAME, &newer, Some(&current.schema), &datum)
        .unwrap();
    let back: SessionObservation = apache_avro::from_value(&read).unwrap();
    let state = back.session.unwrap().state;
    assert_eq!(state, SessionState::Unknown, "the enum's default");
    assert_eq!(super::retention::retention(state, super::retention::PodEvidence::Gone), R::Unknown);
}

#[tokio::test]
async fn a_session_released_long_enough_is_forgotten_and_a_retained_one_is_kept() {
    let applied = ObservationEvent::Applied;
    let day = 24 * 3_600_000;
    let pod =
        |id: &str, n| session_pod(id, "agents", &format!("agent-{id}"), &uid(n), PodPhase::Running, false);
    let cfg = SessionsConfig { forget_released_after_ms: day, ..SessionsConfig::default() };
    let inputs = |until: i64| {
        vec![
            In::Session(applied, session("done", SessionState::Completed, None, "o", T0)),
            In::Session(applied, session("held", SessionState::Completed, None, "o", T0)),
            In::Pod(applied, 1, pod("done", 1)),
            In::Pod(ObservationEvent::Deleted, 1, pod("done", 1)),
            In::Pod(applied, 1, pod("held", 2)),
            In::Heartbeat(T0 + until),
        ]
    };
    let before = run_sessions_with(inputs(day - 10 * 60_000), cfg.clone()).await;
    assert_eq!(before.latest().len(), 2, "not yet: {:?}", before.tombstoned);
    let after = run_sessions_with(inputs(day + 10 * 60_000), cfg.clone()).await;
    let latest = after.latest();
    assert_eq!(latest.keys().collect::<Vec<_>>(), ["held"], "tombstoned: {:?}", after.tombstoned);
    assert_eq!(after.tombstoned, ["done"]);
    let state: usize = after
        .run
        .changelogs
        .iter()
        .filter(|c| c.name.ends_with("-sessions-changelog"))
        .map(|c| {
            // The latest changelog record per key: a tombstone means the key is gone.
            let mut keys = BTreeMap::new();
            for r in c.partitions.iter().flatten() {
                keys.insert(r.key.clone(), r.value.is_some());
            }
            keys.values().filter(|present| **present).count()
        })
        .sum();
    assert_eq!(state, 1, "only the retained session is kept");
    let never =
        run_sessions_with(inputs(30 * day), SessionsConfig { forget_released_after_ms: 0, ..cfg }).await;
    assert_eq!(never.latest().len(), 2, "0 keeps them");
}
