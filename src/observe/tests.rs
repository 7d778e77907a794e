use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::{batch::v1 as batch, coordination::v1 as coordination, core::v1 as core};
use k8s_openapi::apimachinery::pkg::{api::resource::Quantity, apis::meta::v1 as meta};
use serde_json::Value as Json;

use super::model::*;
use super::*;
use crate::codec::{Codec, Framing};
use crate::trace::{KubeObject, SessionPod, SessionRecord, TraceEntry};

// ---------------------------------------------------------------- fixture builders

const NS: &str = "etl";

fn uid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

fn time(s: &str) -> meta::Time {
    meta::Time(s.parse().expect("test timestamp"))
}

fn ms(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().expect("test timestamp").as_millisecond()
}

fn source() -> Source {
    Source { cluster: "prod-eu".into(), instance: "watcher-0".into(), epoch: 3 }
}

fn object_meta(name: &str, uid: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        namespace: Some(NS.into()),
        name: Some(name.into()),
        uid: Some(uid.into()),
        resource_version: Some("4711".into()),
        creation_timestamp: Some(time("2026-11-29T10:00:00Z")),
        ..Default::default()
    }
}

fn controlled_by(kind: &str, name: &str, uid: &str) -> meta::OwnerReference {
    meta::OwnerReference {
        api_version: "batch/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn container(name: &str, cpu: Option<&str>, memory: Option<&str>) -> core::Container {
    let requests: BTreeMap<_, _> = [("cpu", cpu), ("memory", memory)]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), Quantity(v?.to_owned()))))
        .collect();
    core::Container {
        name: name.into(),
        image: Some("registry.example/etl:1".into()),
        resources: Some(core::ResourceRequirements { requests: Some(requests), ..Default::default() }),
        ..Default::default()
    }
}

fn terminated(exit_code: i32, reason: &str, id: &str) -> core::ContainerState {
    core::ContainerState {
        terminated: Some(core::ContainerStateTerminated {
            exit_code,
            reason: Some(reason.into()),
            container_id: Some(format!("containerd://{id}")),
            started_at: Some(time("2026-11-29T10:01:00Z")),
            finished_at: Some(time("2026-11-29T10:02:00.500Z")),
            message: Some(format!("{reason} happened")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running() -> core::ContainerState {
    core::ContainerState {
        running: Some(core::ContainerStateRunning { started_at: Some(time("2026-11-29T10:03:00Z")) }),
        ..Default::default()
    }
}

fn status(
    name: &str,
    restarts: i32,
    state: core::ContainerState,
    last: Option<core::ContainerState>,
) -> core::ContainerStatus {
    core::ContainerStatus {
        name: name.into(),
        restart_count: restarts,
        state: Some(state),
        last_state: last,
        image: "registry.example/etl:1".into(),
        ..Default::default()
    }
}

/// A bare Pod with one container `main` (250m / 128Mi), Running.
fn pod(name: &str, uid: &str) -> core::Pod {
    core::Pod {
        metadata: object_meta(name, uid),
        spec: Some(core::PodSpec {
            containers: vec![container("main", Some("250m"), Some("128Mi"))],
            ..Default::default()
        }),
        status: Some(core::PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![status("main", 0, running(), None)]),
            ..Default::default()
        }),
    }
}

fn with_label(mut pod: core::Pod, key: &str, value: &str) -> core::Pod {
    pod.metadata.labels.get_or_insert_default().insert(key.into(), value.into());
    pod
}

fn owned(mut pod: core::Pod, owner: meta::OwnerReference) -> core::Pod {
    pod.metadata.owner_references.get_or_insert_default().push(owner);
    pod
}

/// A Job with no status at all.
fn job(name: &str, uid: &str) -> batch::Job {
    batch::Job {
        metadata: object_meta(name, uid),
        spec: Some(batch::JobSpec { backoff_limit: Some(2), ..Default::default() }),
        status: None,
    }
}

fn job_condition(type_: &str, status: &str, reason: &str, at: &str) -> batch::JobCondition {
    batch::JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some("Job has reached the specified backoff limit".into()),
        last_transition_time: Some(time(at)),
        last_probe_time: Some(time(at)),
    }
}

fn cronjob(name: &str, uid: &str) -> batch::CronJob {
    batch::CronJob {
        metadata: object_meta(name, uid),
        spec: Some(batch::CronJobSpec {
            schedule: "0 * * * *".into(),
            time_zone: Some("Europe/Berlin".into()),
            concurrency_policy: Some("Forbid".into()),
            ..Default::default()
        }),
        status: Some(batch::CronJobStatus {
            active: Some(vec![core::ObjectReference::default()]),
            last_schedule_time: Some(time("2026-11-29T10:00:00Z")),
            last_successful_time: Some(time("2026-11-29T09:00:42Z")),
        }),
    }
}

fn lease() -> coordination::Lease {
    coordination::Lease {
        metadata: meta::ObjectMeta {
            namespace: Some("kube-system".into()),
            ..object_meta("kube-controller-manager", &uid(9))
        },
        spec: Some(coordination::LeaseSpec {
            holder_identity: Some("cp-1_5d0c".into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(meta::MicroTime("2026-11-29T08:00:00.123456Z".parse().unwrap())),
            renew_time: Some(meta::MicroTime("2026-11-29T10:00:10.999999Z".parse().unwrap())),
            lease_transitions: Some(4),
            ..Default::default()
        }),
    }
}

fn session_record(id: &str) -> SessionRecord {
    SessionRecord {
        session_id: id.into(),
        state: crate::trace::SessionState::WaitingForInput,
        pod: SessionPod { namespace: "agents".into(), name: format!("{id}-pod"), uid: Some(uid(77)) },
        owner: "tenant-42".into(),
        updated_at_ms: None,
    }
}

fn entry(at: i64, event: TraceEvent) -> TraceEntry {
    TraceEntry { observed_at_ms: at, event }
}

fn applied(object: KubeObject) -> TraceEntry {
    entry(1_000, TraceEvent::Applied(object))
}

/// [`super::observe`] of a whole-object entry, decoded as the reader would.
fn observe(
    entry: &TraceEntry,
    source: &Source,
    cfg: &MinimizeConfig,
) -> Result<Vec<Observation>, ObserveError> {
    super::observe(entry.clone().into(), source, cfg)
}

/// Minimization both ways: from the allowlisted objects (what runs) and from the whole
/// k8s-openapi objects ([`minimize::openapi`], the path before decoding was allowlisted).
/// Every test below that minimizes checks the two agree, errors included.
mod both {
    use k8s_openapi::api::{batch::v1 as batch, coordination::v1 as coordination, core::v1 as core};

    use super::super::{MinimizeConfig, ObserveError, minimize, model};

    fn agree<T: PartialEq + std::fmt::Debug>(
        new: Result<T, ObserveError>,
        old: Result<T, ObserveError>,
    ) -> Result<T, ObserveError> {
        assert_eq!(new, old, "the allowlisted path and the k8s-openapi path differ");
        new
    }

    pub fn pod(p: &core::Pod, cfg: &MinimizeConfig) -> Result<model::Pod, ObserveError> {
        agree(minimize::pod(p.into(), cfg), minimize::openapi::pod(p, cfg))
    }

    pub fn job(j: &batch::Job, cfg: &MinimizeConfig) -> Result<model::Job, ObserveError> {
        agree(minimize::job(j.into(), cfg), minimize::openapi::job(j, cfg))
    }

    pub fn cronjob(c: &batch::CronJob, cfg: &MinimizeConfig) -> Result<model::CronJob, ObserveError> {
        agree(minimize::cronjob(c.into(), cfg), minimize::openapi::cronjob(c, cfg))
    }

    pub fn lease(l: &coordination::Lease, cfg: &MinimizeConfig) -> Result<model::Lease, ObserveError> {
        agree(minimize::lease(l.into(), cfg), minimize::openapi::lease(l, cfg))
    }
}

fn observe_one(entry: &TraceEntry) -> Observation {
    let mut out = observe(entry, &source(), &MinimizeConfig::default()).expect("observes");
    assert_eq!(out.len(), 1, "{out:?}");
    out.remove(0)
}

fn minimized_pod(p: core::Pod) -> Pod {
    both::pod(&p, &MinimizeConfig::default()).expect("minimizes")
}

// ---------------------------------------------------------------- the allowlist guard

/// Every value that must never leave the cluster contains this.
const SECRET: &str = "SENTINEL";

/// The sentinel-bearing strings found in a record's JSON: empty when nothing leaked.
fn leaks(record: &impl serde::Serialize) -> Vec<String> {
    let json = serde_json::to_string(record).expect("serializes");
    json.match_indices(SECRET)
        .map(|(i, _)| json[i.saturating_sub(40)..(i + 40).min(json.len())].to_owned())
        .collect()
}

/// A Pod carrying every kind of value the allowlist must drop.
fn leaky_pod() -> core::Pod {
    let secret_ref =
        |name: &str| core::SecretKeySelector { name: name.into(), key: "password".into(), optional: None };
    let mut main = container("main", Some("1"), Some("1Gi"));
    main.image = Some("registry.example/SENTINEL-image:1".into());
    main.command = Some(vec!["/bin/SENTINEL-command".into()]);
    main.args = Some(vec!["--token=SENTINEL-arg".into()]);
    main.env = Some(vec![
        core::EnvVar {
            name: "DB_URL".into(),
            value: Some("postgres://u:SENTINEL-env@db".into()),
            value_from: None,
        },
        core::EnvVar {
            name: "API_KEY".into(),
            value: None,
            value_from: Some(core::EnvVarSource {
                secret_key_ref: Some(secret_ref("SENTINEL-secret-ref")),
                ..Default::default()
            }),
        },
    ]);
    main.volume_mounts = Some(vec![core::VolumeMount {
        name: "creds".into(),
        mount_path: "/var/run/SENTINEL-mount".into(),
        ..Default::default()
    }]);
    let mut init = container("init-SENTINEL-none", None, None);
    init.name = "setup".into();
    init.command = Some(vec!["sh".into(), "-c".into(), "echo SENTINEL-init-command".into()]);
    let mut last = terminated(137, "OOMKilled", "aaa");
    last.terminated.as_mut().unwrap().message = Some("SENTINEL-last-state-message".into());
    let mut now = terminated(1, "Error", "bbb");
    now.terminated.as_mut().unwrap().message = Some("SENTINEL-state-message".into());
    let mut main_status = status("main", 1, now, Some(last));
    main_status.image = "registry.example/SENTINEL-status-image:1".into();
    main_status.image_id = "sha256:SENTINEL-image-id".into();
    let waiting = core::ContainerState {
        waiting: Some(core::ContainerStateWaiting {
            reason: Some("CrashLoopBackOff".into()),
            message: Some("SENTINEL-waiting-message".into()),
        }),
        ..Default::default()
    };
    let mut p = pod("leaky", &uid(1));
    p.metadata.labels = Some(BTreeMap::from([
        ("team".into(), "SENTINEL-label".into()),
        ("kubefacts.io/session".into(), "s-1".into()),
    ]));
    p.metadata.annotations = Some(BTreeMap::from([
        ("kubectl.kubernetes.io/last-applied-configuration".into(), "{\"SENTINEL-annotation\":1}".into()),
        ("kubefacts.io/exclude".into(), "false".into()),
    ]));
    p.metadata.finalizers = Some(vec!["SENTINEL-finalizer".into()]);
    let spec = p.spec.as_mut().unwrap();
    spec.containers = vec![main];
    spec.init_containers = Some(vec![init]);
    spec.service_account_name = Some("SENTINEL-service-account".into());
    spec.node_name = Some("SENTINEL-node".into());
    spec.volumes = Some(vec![core::Volume {
        name: "creds".into(),
        secret: Some(core::SecretVolumeSource {
            secret_name: Some("SENTINEL-secret-volume".into()),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    p.status = Some(core::PodStatus {
        phase: Some("Failed".into()),
        message: Some("SENTINEL-pod-message".into()),
        reason: Some("SENTINEL-pod-reason".into()),
        pod_ip: Some("SENTINEL-pod-ip".into()),
        conditions: Some(vec![core::PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            message: Some("SENTINEL-condition-message".into()),
            ..Default::default()
        }]),
        container_statuses: Some(vec![main_status]),
        init_container_statuses: Some(vec![status("setup", 3, waiting, None)]),
        ..Default::default()
    });
    p
}

#[test]
fn minimized_records_carry_nothing_outside_the_allowlist() {
    let cfg = MinimizeConfig { annotation_keys: vec!["kubefacts.io/exclude".into()], ..Default::default() };
    let input = leaky_pod();
    // The fixture really carries every kind of secret the guard looks for.
    assert!(leaks(&input).len() >= 20, "{:?}", leaks(&input));

    let pod = both::pod(&input, &cfg).unwrap();
    assert_eq!(leaks(&pod), Vec::<String>::new());
    // What is allowlisted does arrive.
    assert_eq!(pod.meta.labels, BTreeMap::from([("kubefacts.io/session".into(), "s-1".into())]));
    assert_eq!(pod.meta.annotations, BTreeMap::from([("kubefacts.io/exclude".into(), "false".into())]));
    assert_eq!(pod.containers[0].state.as_ref().unwrap().reason.as_deref(), Some("Error"));

    // A Job's pod template and condition messages, and a CronJob's job template, too.
    let mut j = job("nightly-1", &uid(2));
    j.spec.as_mut().unwrap().template.spec = input.spec.clone();
    j.status = Some(batch::JobStatus {
        conditions: Some(vec![batch::JobCondition {
            message: Some("SENTINEL-job-message".into()),
            ..job_condition("Failed", "True", "BackoffLimitExceeded", "2026-11-29T10:05:00Z")
        }]),
        ..Default::default()
    });
    assert!(!leaks(&j).is_empty());
    assert_eq!(leaks(&both::job(&j, &cfg).unwrap()), Vec::<String>::new());

    let mut c = cronjob("nightly", &uid(3));
    c.spec.as_mut().unwrap().job_template.spec = j.spec.clone();
    assert!(!leaks(&c).is_empty());
    assert_eq!(leaks(&both::cronjob(&c, &cfg).unwrap()), Vec::<String>::new());
}

#[test]
fn the_allowlist_guard_catches_a_copied_field() {
    let input = leaky_pod();
    let mut pod = both::pod(&input, &MinimizeConfig::default()).unwrap();
    // Simulate a minimizer that copied the image into a shipped field.
    pod.containers[0].requests_cpu = input.spec.as_ref().unwrap().containers[0].image.clone();
    assert_eq!(leaks(&pod).len(), 1, "the guard must see a leaked value");
    // And one that copied every label.
    let mut pod = both::pod(&input, &MinimizeConfig::default()).unwrap();
    pod.meta.labels = input.metadata.labels.clone().unwrap();
    assert_eq!(leaks(&pod).len(), 1);
}

// ---------------------------------------------------------------- mapping

#[test]
fn pod_routing_keys_follow_design_section_2() {
    let job_uid = uid(100);
    let pod_uid = uid(101);
    let cfg = MinimizeConfig::default();
    let key = |p: core::Pod| observe_one(&applied(KubeObject::Pod(Box::new(p)))).key.unwrap();

    let job_pod = owned(
        with_label(pod("nightly-1-x", &pod_uid), &cfg.session_label, "s-9"),
        controlled_by("Job", "nightly-1", &job_uid),
    );
    assert_eq!(key(job_pod), job_uid, "a Job-controlled pod routes by its Job, even with a session label");

    let session_pod = with_label(pod("agent-s-1", &pod_uid), &cfg.session_label, "s-1");
    assert_eq!(key(session_pod), "s-1");

    let mut rs = controlled_by("ReplicaSet", "web-5d9", &uid(102));
    rs.api_version = "apps/v1".into();
    let rs_session_pod = owned(with_label(pod("agent-s-2", &pod_uid), &cfg.session_label, "s-2"), rs);
    assert_eq!(key(rs_session_pod), "s-2", "only a Job controller takes precedence");

    assert_eq!(key(pod("bare", &pod_uid)), pod_uid);
    assert_eq!(key(with_label(pod("empty-label", &pod_uid), &cfg.session_label, "")), pod_uid);

    let mut not_controller = controlled_by("Job", "j", &job_uid);
    not_controller.controller = None;
    let p = minimized_pod(owned(pod("p", &pod_uid), not_controller));
    assert_eq!(p.controller, None, "only the controller: true reference is shipped");
    assert_eq!(pod_routing_key(&p, &cfg.session_label), pod_uid);
}

#[test]
fn a_pod_keyed_by_anything_but_its_routing_key_is_on_the_wrong_partition() {
    let (job_uid, pod_uid) = (uid(100), uid(101));
    let cfg = MinimizeConfig::default();
    let reason = |p: core::Pod, key: &str| {
        let ObservationRecord::Pod(o) = observe_one(&applied(KubeObject::Pod(Box::new(p)))).record else {
            panic!("not a Pod observation")
        };
        shape::pod_shape(&o).check(Some(key.as_bytes()), false).err().map(|e| e.reason.as_str())
    };
    let job_pod = || owned(pod("nightly-1-x", &pod_uid), controlled_by("Job", "nightly-1", &job_uid));
    assert_eq!(reason(job_pod(), &job_uid), None);
    assert_eq!(reason(job_pod(), &pod_uid), Some("wrong_key"), "a Job's Pod by its own UID");
    assert_eq!(reason(job_pod(), &uid(7)), Some("wrong_key"), "a Job's Pod by another Job's UID");
    let session_pod = || with_label(pod("agent-s-1", &pod_uid), &cfg.session_label, "s-1");
    assert_eq!(reason(session_pod(), "s-1"), None, "by its session");
    assert_eq!(reason(session_pod(), &pod_uid), None, "by its UID (another session label)");
    assert_eq!(reason(session_pod(), "s-2"), Some("wrong_key"), "by another session");
}

#[test]
fn the_session_label_is_copied_even_when_not_listed() {
    let cfg = MinimizeConfig {
        label_keys: vec!["app".into()],
        annotation_keys: vec![],
        session_label: "example.com/sid".into(),
    };
    let p = with_label(
        with_label(with_label(pod("p", &uid(1)), "example.com/sid", "s-7"), "app", "agent"),
        "tier",
        "x",
    );
    let obs = observe(&applied(KubeObject::Pod(Box::new(p))), &source(), &cfg).unwrap();
    assert_eq!(obs[0].key.as_deref(), Some("s-7"));
    let ObservationRecord::Pod(PodObservation { pod: Some(p), .. }) = &obs[0].record else { panic!() };
    assert_eq!(p.meta.labels.keys().collect::<Vec<_>>(), ["app", "example.com/sid"]);
}

#[test]
fn other_kinds_are_keyed_and_namespaces_are_not_published() {
    let job_uid = uid(200);
    let o = observe_one(&applied(KubeObject::Job(Box::new(job("j", &job_uid)))));
    assert_eq!((o.topic, o.key.as_deref()), (InputTopic::Jobs, Some(job_uid.as_str())));

    let cj_uid = uid(201);
    let o = observe_one(&entry(5, TraceEvent::Deleted(KubeObject::CronJob(Box::new(cronjob("c", &cj_uid))))));
    assert_eq!(
        (o.topic, o.key.as_deref(), o.record.event()),
        (InputTopic::CronJobs, Some(cj_uid.as_str()), ObservationEvent::Deleted)
    );

    let o = observe_one(&applied(KubeObject::Lease(Box::new(lease()))));
    assert_eq!(
        (o.topic, o.key.as_deref()),
        (InputTopic::Leases, Some("kube-system/kube-controller-manager"))
    );

    let o = observe_one(&entry(77, TraceEvent::Session(session_record("s-1"))));
    assert_eq!((o.topic, o.key.as_deref()), (InputTopic::Sessions, Some("s-1")));
    let ObservationRecord::Session(SessionObservation { session: Some(s), .. }) = &o.record else { panic!() };
    assert_eq!(
        (s.state, s.updated_at),
        (SessionState::WaitingForInput, 77),
        "updated_at defaults to observed_at"
    );

    let ns = core::Namespace {
        metadata: meta::ObjectMeta { name: Some("etl".into()), ..Default::default() },
        ..Default::default()
    };
    assert_eq!(
        observe(&applied(KubeObject::Namespace(Box::new(ns))), &source(), &MinimizeConfig::default()),
        Ok(vec![])
    );
}

#[test]
fn pod_phases_and_condition_statuses_map_to_the_schema_enums() {
    use minimize::{condition_status, pod_phase};
    let phases = [
        (Some("Pending"), PodPhase::Pending),
        (Some("Running"), PodPhase::Running),
        (Some("Succeeded"), PodPhase::Succeeded),
        (Some("Failed"), PodPhase::Failed),
        (Some("Unknown"), PodPhase::Unknown),
        (Some("running"), PodPhase::Unknown),
        (None, PodPhase::Unknown),
    ];
    for (input, want) in phases {
        assert_eq!(pod_phase(input), want, "{input:?}");
    }
    for (input, want) in [
        ("True", ConditionStatus::True),
        ("False", ConditionStatus::False),
        ("Unknown", ConditionStatus::Unknown),
        ("", ConditionStatus::Unknown),
    ] {
        assert_eq!(condition_status(input), want, "{input:?}");
    }
}

#[test]
fn job_counters_default_to_zero_and_uncounted_pods_are_counted() {
    let cfg = MinimizeConfig::default();
    let j = both::job(&job("j", &uid(1)), &cfg).unwrap();
    assert_eq!(
        (j.status.active, j.status.succeeded, j.status.failed, j.status.ready),
        (Some(0), Some(0), Some(0), None)
    );
    assert_eq!((j.status.uncounted_succeeded, j.status.uncounted_failed), (0, 0));
    assert!(j.status.conditions.is_empty());
    assert_eq!(j.owner_cronjob, None);
    assert_eq!(j.spec.backoff_limit, Some(2));

    let mut k = job("nightly-29012345", &uid(2));
    k.metadata.owner_references = Some(vec![controlled_by("CronJob", "nightly", &uid(3))]);
    k.status = Some(batch::JobStatus {
        failed: Some(2),
        ready: Some(0),
        start_time: Some(time("2026-11-29T10:00:01Z")),
        uncounted_terminated_pods: Some(batch::UncountedTerminatedPods {
            failed: Some(vec![uid(10)]),
            succeeded: Some(vec![uid(11), uid(12)]),
        }),
        conditions: Some(vec![
            job_condition("FailureTarget", "True", "BackoffLimitExceeded", "2026-11-29T10:04:00Z"),
            batch::JobCondition {
                reason: Some(String::new()),
                ..job_condition("Suspended", "False", "", "2026-11-29T10:00:00Z")
            },
        ]),
        ..Default::default()
    });
    let s = both::job(&k, &cfg).unwrap();
    assert_eq!(
        s.owner_cronjob,
        Some(OwnerReference { kind: "CronJob".into(), name: "nightly".into(), uid: uid(3) })
    );
    assert_eq!(
        (s.status.active, s.status.succeeded, s.status.failed, s.status.ready),
        (Some(0), Some(0), Some(2), Some(0))
    );
    assert_eq!((s.status.uncounted_succeeded, s.status.uncounted_failed), (2, 1));
    assert_eq!(s.status.start_time, Some(ms("2026-11-29T10:00:01Z")));
    assert_eq!(
        s.status.conditions,
        [
            JobCondition {
                type_: "FailureTarget".into(),
                status: ConditionStatus::True,
                reason: Some("BackoffLimitExceeded".into()),
                last_transition_time: Some(ms("2026-11-29T10:04:00Z"))
            },
            JobCondition {
                type_: "Suspended".into(),
                status: ConditionStatus::False,
                reason: None,
                last_transition_time: Some(ms("2026-11-29T10:00:00Z"))
            },
        ]
    );
    // Readers of records from other writers still read absent as 0.
    let absent = JobStatus::default();
    assert_eq!((absent.active_count(), absent.succeeded_count(), absent.failed_count()), (0, 0, 0));
}

#[test]
fn a_job_controlled_by_something_else_has_no_owner_cronjob() {
    let mut j = job("j", &uid(1));
    j.metadata.owner_references = Some(vec![controlled_by("Workflow", "wf", &uid(2))]);
    assert_eq!(both::job(&j, &MinimizeConfig::default()).unwrap().owner_cronjob, None);
}

#[test]
fn container_terminations_map_state_and_last_state() {
    let mut p = pod("p", &uid(1));
    let spec = p.spec.as_mut().unwrap();
    spec.containers.push(container("sidecar", Some("0"), None));
    spec.containers.push(container("no-status", None, None));
    spec.init_containers = Some(vec![container("setup", None, Some("64Mi"))]);
    let st = p.status.as_mut().unwrap();
    st.phase = Some("Failed".into());
    st.container_statuses = Some(vec![
        status("sidecar", 0, terminated(143, "Error", "s1"), None),
        status("main", 2, running(), Some(terminated(137, "OOMKilled", "m1"))),
    ]);
    st.init_container_statuses = Some(vec![status("setup", 0, terminated(0, "Completed", "i1"), None)]);

    let m = minimized_pod(p);
    assert_eq!(m.phase, PodPhase::Failed);
    let names: Vec<_> = m.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["main", "sidecar", "no-status"], "spec order, not status order");

    let main = &m.containers[0];
    assert_eq!(
        (main.requests_cpu.as_deref(), main.requests_memory.as_deref()),
        (Some("250m"), Some("128Mi"))
    );
    assert_eq!((main.restart_count, &main.state), (2, &None), "running now: no current termination");
    assert_eq!(
        main.last_state,
        Some(ContainerTermination {
            exit_code: 137,
            reason: Some("OOMKilled".into()),
            exit_signal: None,
            started_at: Some(ms("2026-11-29T10:01:00Z")),
            finished_at: Some(ms("2026-11-29T10:02:00.500Z")),
            container_id: Some("containerd://m1".into()),
        })
    );
    let sidecar = &m.containers[1];
    assert_eq!(
        (sidecar.requests_cpu.as_deref(), sidecar.requests_memory.as_deref()),
        (Some("0"), None),
        "explicit zero kept"
    );
    let st = sidecar.state.as_ref().unwrap();
    assert_eq!((st.exit_code, st.reason.as_deref()), (143, Some("Error")), "code and reason as observed");
    let none = &m.containers[2];
    assert_eq!(
        (none.restart_count, &none.state, &none.last_state, &none.requests_cpu),
        (0, &None, &None, &None)
    );
    assert_eq!(m.init_containers[0].state.as_ref().unwrap().reason.as_deref(), Some("Completed"));
    assert_eq!(m.init_containers[0].requests_memory.as_deref(), Some("64Mi"));
}

#[test]
fn cronjobs_and_leases_copy_their_fields() {
    let c = both::cronjob(&cronjob("c", &uid(1)), &MinimizeConfig::default()).unwrap();
    assert_eq!(
        (c.schedule.as_str(), c.time_zone.as_deref(), c.suspend),
        ("0 * * * *", Some("Europe/Berlin"), false)
    );
    assert_eq!(
        c.status,
        CronJobStatus {
            last_schedule_time: Some(ms("2026-11-29T10:00:00Z")),
            last_successful_time: Some(ms("2026-11-29T09:00:42Z")),
            active_count: 1
        }
    );

    let l = both::lease(&lease(), &MinimizeConfig::default()).unwrap();
    assert_eq!(l.acquire_time, Some(ms("2026-11-29T08:00:00.123Z")), "MicroTime truncates to ms");
    assert_eq!(l.renew_time, Some(ms("2026-11-29T10:00:10.999Z")));
    assert_eq!(
        (l.holder_identity.as_deref(), l.lease_duration_seconds, l.lease_transitions),
        (Some("cp-1_5d0c"), Some(15), Some(4))
    );
}

#[test]
fn markers_fan_out_with_no_key() {
    let o = observe(&entry(9_000, TraceEvent::Heartbeat), &source(), &MinimizeConfig::default()).unwrap();
    assert_eq!(
        o.iter().map(|o| o.topic).collect::<Vec<_>>(),
        InputTopic::ALL,
        "heartbeats reach every input topic"
    );
    for o in &o {
        assert_eq!(
            (o.key.as_ref(), o.record.event(), o.record.observed_at(), o.record.source()),
            (None, ObservationEvent::Heartbeat, 9_000, &source())
        );
        assert_eq!(o.record.topic(), o.topic);
        assert_eq!(
            o.record,
            ObservationRecord::marker(o.topic, source(), 9_000, ObservationEvent::Heartbeat)
        );
    }

    for (event, want) in [
        (TraceEvent::SnapshotBegin { epoch: 7, kinds: None }, ObservationEvent::SnapshotBegin),
        (TraceEvent::SnapshotEnd { epoch: 7, kinds: None }, ObservationEvent::SnapshotEnd),
    ] {
        let o = observe(&entry(9_500, event), &source(), &MinimizeConfig::default()).unwrap();
        assert_eq!(
            o.iter().map(|o| o.topic).collect::<Vec<_>>(),
            InputTopic::WATCHED,
            "sessions are never relisted"
        );
        for o in &o {
            assert_eq!((o.key.as_ref(), o.record.event(), o.record.source().epoch), (None, want, 7));
        }
    }
    // A relist of one kind marks its topic only; a Namespace relist marks none.
    let pods = TraceEvent::SnapshotBegin { epoch: 8, kinds: Some(vec!["Pod".into(), "Namespace".into()]) };
    let o = observe(&entry(9_600, pods), &source(), &MinimizeConfig::default()).unwrap();
    assert_eq!(o.iter().map(|o| o.topic).collect::<Vec<_>>(), [InputTopic::Pods]);
    let ns = TraceEvent::SnapshotEnd { epoch: 8, kinds: Some(vec!["Namespace".into()]) };
    assert!(observe(&entry(9_700, ns), &source(), &MinimizeConfig::default()).unwrap().is_empty());
}

#[test]
fn the_observer_carries_the_snapshot_epoch_forward() {
    let mut observer = Observer::new(Source { epoch: 0, ..source() }, MinimizeConfig::default());
    observer.observe(entry(1, TraceEvent::SnapshotBegin { epoch: 2, kinds: None }).into()).unwrap();
    let o = observer.observe(applied(KubeObject::Job(Box::new(job("j", &uid(1))))).into()).unwrap();
    assert_eq!(o[0].record.source().epoch, 2);
    let stale =
        observer.observe(entry(2, TraceEvent::SnapshotBegin { epoch: 1, kinds: None }).into()).unwrap();
    assert_eq!(
        (stale[0].record.source().epoch, observer.source().epoch),
        (1, 2),
        "the epoch never decreases"
    );
}

#[test]
fn objects_without_identity_are_errors_not_panics() {
    let cfg = MinimizeConfig::default();
    let mut no_uid = pod("p", &uid(1));
    no_uid.metadata.uid = None;
    let err = both::pod(&no_uid, &cfg).unwrap_err();
    assert_eq!((err.reason(), err.kind()), ("missing_identity", "Pod"));
    assert!(err.to_string().contains("metadata.uid"), "{err}");

    let mut no_ns = job("j", &uid(1));
    no_ns.metadata.namespace = Some(String::new());
    assert_eq!(both::job(&no_ns, &cfg).unwrap_err().reason(), "missing_identity");

    let mut no_name = lease();
    no_name.metadata.name = None;
    assert_eq!(both::lease(&no_name, &cfg).unwrap_err().reason(), "missing_identity");

    for bad in [
        "not-a-uid",
        "00000000-0000-4000-8000-00000000000G",
        "00000000-0000-4000-8000-0000000000AB",
        "000000000000400080000000000000ab",
    ] {
        let err = both::pod(&pod("p", bad), &cfg).unwrap_err();
        assert_eq!(err.reason(), "invalid_uid", "{bad}");
    }
    let bad_owner = owned(pod("p", &uid(1)), controlled_by("Job", "j", "JOB"));
    assert_eq!(both::pod(&bad_owner, &cfg).unwrap_err().reason(), "invalid_uid");

    let mut no_spec = cronjob("c", &uid(1));
    no_spec.spec = None;
    assert_eq!(both::cronjob(&no_spec, &cfg).unwrap_err().reason(), "missing_field");

    let err = observe(&entry(1, TraceEvent::Session(session_record(""))), &source(), &cfg).unwrap_err();
    assert_eq!((err.reason(), err.kind()), ("missing_identity", "Session"));
    let mut bad_session = session_record("s");
    bad_session.pod.uid = Some("x".into());
    assert_eq!(minimize::session(&bad_session, 1).unwrap_err().reason(), "invalid_uid");
}

#[test]
fn topic_names_come_from_the_configuration() {
    let topics = crate::config::TopicsConfig::default();
    let names: Vec<_> = InputTopic::ALL.iter().map(|t| t.topic_name(&topics)).collect();
    assert_eq!(
        names,
        [
            "kubefacts.pods.v1",
            "kubefacts.jobs.v1",
            "kubefacts.cronjobs.v1",
            "kubefacts.leases.v1",
            "kubefacts.sessions.v1"
        ]
    );
}

// ---------------------------------------------------------------- schemas and codec

/// One record of each kind with every optional field present, every list and map
/// non-empty: the drift check below then visits every field of every schema.
fn full_records() -> Vec<ObservationRecord> {
    let meta = |name: &str, n| ObjectMeta {
        namespace: NS.into(),
        name: name.into(),
        uid: uid(n),
        resource_version: Some("4711".into()),
        creation_timestamp: Some(1_795_946_400_000),
        deletion_timestamp: Some(1_795_946_500_000),
        labels: BTreeMap::from([("kubefacts.io/session".into(), "s-1".into())]),
        annotations: BTreeMap::from([("kubefacts.io/exclude".into(), "false".into())]),
    };
    let owner = |kind: &str| Some(OwnerReference { kind: kind.into(), name: "owner".into(), uid: uid(99) });
    let termination = |code| ContainerTermination {
        exit_code: code,
        reason: Some("OOMKilled".into()),
        exit_signal: Some(9),
        started_at: Some(1_795_946_401_000),
        finished_at: Some(1_795_946_402_000),
        container_id: Some(format!("containerd://{code}")),
    };
    let container = ContainerObservation {
        name: "main".into(),
        requests_cpu: Some("250m".into()),
        requests_memory: Some("128Mi".into()),
        restart_count: 2,
        state: Some(termination(137)),
        last_state: Some(termination(1)),
    };
    let (source, observed_at, event) = (source(), 1_795_946_403_000, ObservationEvent::Deleted);
    vec![
        ObservationRecord::Pod(PodObservation {
            source: source.clone(),
            observed_at,
            event,
            pod: Some(Pod {
                meta: meta("p", 1),
                controller: owner("Job"),
                phase: PodPhase::Succeeded,
                containers: vec![container.clone()],
                init_containers: vec![container],
            }),
        }),
        ObservationRecord::Job(JobObservation {
            source: source.clone(),
            observed_at,
            event,
            job: Some(Job {
                meta: meta("j", 2),
                owner_cronjob: owner("CronJob"),
                spec: JobSpec {
                    parallelism: Some(2),
                    completions: Some(4),
                    backoff_limit: Some(6),
                    ttl_seconds_after_finished: Some(600),
                    suspend: Some(false),
                    completion_mode: Some("Indexed".into()),
                    active_deadline_seconds: Some(3_600),
                },
                status: JobStatus {
                    start_time: Some(1),
                    completion_time: Some(2),
                    active: Some(0),
                    succeeded: Some(4),
                    failed: Some(1),
                    ready: Some(0),
                    uncounted_succeeded: 1,
                    uncounted_failed: 2,
                    conditions: vec![JobCondition {
                        type_: "Complete".into(),
                        status: ConditionStatus::True,
                        reason: Some("CompletionsReached".into()),
                        last_transition_time: Some(3),
                    }],
                },
            }),
        }),
        ObservationRecord::CronJob(CronJobObservation {
            source: source.clone(),
            observed_at,
            event,
            cronjob: Some(CronJob {
                meta: meta("c", 3),
                schedule: "*/10 * * * *".into(),
                time_zone: Some("Etc/UTC".into()),
                suspend: true,
                starting_deadline_seconds: Some(200),
                concurrency_policy: Some("Forbid".into()),
                status: CronJobStatus {
                    last_schedule_time: Some(4),
                    last_successful_time: Some(5),
                    active_count: 1,
                },
            }),
        }),
        ObservationRecord::Lease(LeaseObservation {
            source: source.clone(),
            observed_at,
            event,
            lease: Some(Lease {
                meta: meta("l", 4),
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                acquire_time: Some(6),
                renew_time: Some(7),
                lease_transitions: Some(3),
            }),
        }),
        ObservationRecord::Session(SessionObservation {
            source,
            observed_at,
            event,
            session: Some(Session {
                session_id: "s-1".into(),
                state: SessionState::Cancelled,
                pod: PodIdentity { namespace: "agents".into(), name: "s-1".into(), uid: Some(uid(5)) },
                owner: "tenant-42".into(),
                updated_at: 8,
            }),
        }),
    ]
}

/// Checks that `value` (a record's serde JSON) has exactly the shape of `schema` (its
/// `.avsc` JSON): record fields by name and order, unions, enums, arrays and maps.
fn check_shape(
    schema: &Json,
    value: &Json,
    named: &mut HashMap<String, Json>,
    enums: &mut HashMap<String, Vec<String>>,
    path: &str,
) {
    match schema {
        Json::String(name) if named.contains_key(name) => {
            let def = named[name].clone();
            check_shape(&def, value, named, enums, path);
        }
        Json::String(primitive) => {
            let ok = match primitive.as_str() {
                "string" => value.is_string(),
                "int" => value.as_i64().is_some_and(|v| i32::try_from(v).is_ok()),
                "long" => value.is_i64(),
                "boolean" => value.is_boolean(),
                other => panic!("{path}: unexpected primitive {other}"),
            };
            assert!(ok, "{path}: {value} is not a {primitive}");
        }
        Json::Array(branches) => {
            assert_eq!(branches.len(), 2, "{path}: only [null, T] unions");
            assert_eq!(branches[0], "null", "{path}");
            assert!(!value.is_null(), "{path}: give the sample a value so the branch is checked");
            check_shape(&branches[1], value, named, enums, path);
        }
        Json::Object(o) => {
            let full = |o: &serde_json::Map<String, Json>| {
                format!("{}.{}", o["namespace"].as_str().unwrap(), o["name"].as_str().unwrap())
            };
            match o["type"].as_str().unwrap() {
                "record" => {
                    named.insert(full(o), schema.clone());
                    let fields = o["fields"].as_array().unwrap();
                    let value = value.as_object().unwrap_or_else(|| panic!("{path}: not a record: {value}"));
                    let want: Vec<_> = fields.iter().map(|f| f["name"].as_str().unwrap()).collect();
                    let got: Vec<_> = value.keys().map(String::as_str).collect();
                    assert_eq!(got, want, "{path}: field names and order");
                    for f in fields {
                        let name = f["name"].as_str().unwrap();
                        check_shape(&f["type"], &value[name], named, enums, &format!("{path}.{name}"));
                    }
                }
                "enum" => {
                    named.insert(full(o), schema.clone());
                    let symbols: Vec<String> = serde_json::from_value(o["symbols"].clone()).unwrap();
                    assert!(symbols.iter().any(|s| value == s), "{path}: {value} not in {symbols:?}");
                    enums.insert(o["name"].as_str().unwrap().to_owned(), symbols);
                }
                "array" => {
                    let items = value.as_array().unwrap_or_else(|| panic!("{path}: not an array"));
                    assert!(!items.is_empty(), "{path}: give the sample an item");
                    items
                        .iter()
                        .for_each(|v| check_shape(&o["items"], v, named, enums, &format!("{path}[]")));
                }
                "map" => {
                    let entries = value.as_object().unwrap_or_else(|| panic!("{path}: not a map"));
                    assert!(!entries.is_empty(), "{path}: give the sample an entry");
                    entries
                        .values()
                        .for_each(|v| check_shape(&o["values"], v, named, enums, &format!("{path}{{}}")));
                }
                _ => check_shape(&o["type"], value, named, enums, path),
            }
        }
        other => panic!("{path}: unexpected schema {other}"),
    }
}

fn symbols<T: serde::Serialize>(variants: &[T]) -> Vec<String> {
    variants.iter().map(|v| serde_json::to_value(v).unwrap().as_str().unwrap().to_owned()).collect()
}

#[test]
fn the_rust_model_mirrors_the_avro_schemas() {
    let codec = Codec::new(None).unwrap();
    let mut enums = HashMap::new();
    for record in full_records() {
        let known = codec.schemas().current(record.full_name()).unwrap();
        let schema: Json = serde_json::from_str(&known.text).unwrap();
        let value = serde_json::to_value(&record).unwrap();
        check_shape(&schema, &value, &mut HashMap::new(), &mut enums, record.topic().as_str());
    }
    use ObservationEvent as E;
    use SessionState as S;
    let rust: HashMap<&str, Vec<String>> = HashMap::from([
        (
            "ObservationEvent",
            symbols(&[E::Unknown, E::Applied, E::Deleted, E::SnapshotBegin, E::SnapshotEnd, E::Heartbeat]),
        ),
        (
            "PodPhase",
            symbols(&[
                PodPhase::Unknown,
                PodPhase::Pending,
                PodPhase::Running,
                PodPhase::Succeeded,
                PodPhase::Failed,
            ]),
        ),
        (
            "ConditionStatus",
            symbols(&[ConditionStatus::Unknown, ConditionStatus::True, ConditionStatus::False]),
        ),
        (
            "SessionState",
            symbols(&[
                S::Unknown,
                S::Created,
                S::Starting,
                S::Running,
                S::WaitingForInput,
                S::Idle,
                S::Completed,
                S::Failed,
                S::Cancelled,
            ]),
        ),
    ]);
    assert_eq!(enums.len(), rust.len(), "{:?}", enums.keys());
    for (name, symbols) in &enums {
        assert_eq!(&rust[name.as_str()], symbols, "{name}: symbols and order");
    }
}

/// Encodes with the current schema (single-object framing) and decodes it back.
async fn round_trip(codec: &Codec, record: &ObservationRecord) -> ObservationRecord {
    let known = codec.schemas().current(record.full_name()).unwrap();
    let writer =
        crate::codec::RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint })
            .unwrap();
    let bytes = record.encode(&writer).unwrap_or_else(|e| panic!("{}: {e}", record.full_name()));
    let decoded = match record {
        ObservationRecord::Pod(_) => codec.decode_as(&bytes).await.map(ObservationRecord::Pod),
        ObservationRecord::Job(_) => codec.decode_as(&bytes).await.map(ObservationRecord::Job),
        ObservationRecord::CronJob(_) => codec.decode_as(&bytes).await.map(ObservationRecord::CronJob),
        ObservationRecord::Lease(_) => codec.decode_as(&bytes).await.map(ObservationRecord::Lease),
        ObservationRecord::Session(_) => codec.decode_as(&bytes).await.map(ObservationRecord::Session),
    };
    decoded.unwrap_or_else(|e| panic!("{}: {e}", record.full_name()))
}

#[tokio::test]
async fn every_record_kind_round_trips_through_the_codec() {
    let codec = Codec::new(None).unwrap();
    let cfg = MinimizeConfig { annotation_keys: vec!["kubefacts.io/exclude".into()], ..Default::default() };
    let mut records = full_records();
    let minimized = [
        applied(KubeObject::Pod(Box::new(leaky_pod()))),
        applied(KubeObject::Pod(Box::new(pod("bare", &uid(5))))),
        applied(KubeObject::Job(Box::new(job("j", &uid(6))))),
        applied(KubeObject::CronJob(Box::new(cronjob("c", &uid(7))))),
        applied(KubeObject::Lease(Box::new(lease()))),
        entry(3, TraceEvent::Session(session_record("s-3"))),
        entry(4, TraceEvent::Heartbeat),
    ];
    for e in &minimized {
        records.extend(observe(e, &source(), &cfg).unwrap().into_iter().map(|o| o.record));
    }
    assert_eq!(records.len(), 5 + 6 + 5);
    for record in &records {
        assert_eq!(&round_trip(&codec, record).await, record);
    }
}

#[test]
fn a_writer_of_another_schema_is_refused() {
    let codec = Codec::new(None).unwrap();
    let known = codec.schemas().current(JobObservation::FULL_NAME).unwrap();
    let writer =
        crate::codec::RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint })
            .unwrap();
    let pod = ObservationRecord::marker(InputTopic::Pods, source(), 1, ObservationEvent::Heartbeat);
    assert!(pod.encode(&writer).is_err());
}

// ---------------------------------------------------------------- the demo trace

const DEMO: &str = include_str!("../../tests/fixtures/traces/demo.jsonl");

/// Values in the demo trace that must never reach a record: a password in an env value,
/// a password in args, API tokens, a termination message, a secret's name, images and
/// mount paths.
const DEMO_SECRETS: [&str; 7] = [
    "hunter2",
    "s3cr3t",
    "demo-token-",
    "password authentication failed",
    "etl-db-credentials",
    "registry.example.com",
    "/var/run/secrets",
];

#[tokio::test]
async fn the_demo_trace_reads_observes_and_round_trips() {
    let entries: Vec<_> = crate::trace::read(DEMO.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("demo trace: {e}"));
    assert!((60..=150).contains(&entries.len()), "{} entries", entries.len());
    assert!(
        entries.windows(2).all(|w| w[0].observed_at_ms <= w[1].observed_at_ms),
        "observed_at never decreases"
    );

    let cfg = MinimizeConfig::default();
    let mut observer = Observer::new(Source { epoch: 0, ..source() }, cfg.clone());
    let codec = Codec::new(None).unwrap();
    let mut per_topic: BTreeMap<InputTopic, usize> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let observations = observer.observe(e.clone()).unwrap_or_else(|err| panic!("entry {}: {err}", i + 1));
        for o in observations {
            *per_topic.entry(o.topic).or_default() += 1;
            assert_eq!(leaks(&o.record), Vec::<String>::new());
            let json = serde_json::to_string(&o.record).unwrap();
            for secret in DEMO_SECRETS {
                assert!(!json.contains(secret), "entry {}: {secret} leaked", i + 1);
            }
            assert_eq!(round_trip(&codec, &o.record).await, o.record, "entry {}", i + 1);
        }
    }
    for secret in DEMO_SECRETS {
        assert!(DEMO.contains(secret), "the demo carries {secret} so it can show it is dropped");
    }
    assert_eq!(observer.source().epoch, 2, "the demo relists once, as epoch 2");
    assert!(InputTopic::ALL.iter().all(|t| per_topic.get(t).is_some_and(|&n| n > 0)), "{per_topic:?}");
}

// ---------------------------------------------------------------- allowlisted decoding

/// Every object of the demo trace and of an hour of the small simulated fleet, from its
/// JSON, both ways: decoded into whole k8s-openapi objects and minimized by
/// [`minimize::openapi`] (the path before decoding was allowlisted), and read by the trace
/// reader into the allowlisted types and minimized by [`minimize`] (the path now). The
/// observations must be identical, errors included.
#[test]
fn allowlisted_decoding_observes_exactly_what_whole_objects_did() {
    let cfg = MinimizeConfig::default();
    let keys = cfg.kept_keys(&AdmissionConfig::default());
    let mut lines: Vec<String> = DEMO.lines().map(str::to_owned).collect();
    let profile = crate::simulate::profile("small").unwrap();
    for e in crate::simulate::simulate(&profile, 1, 1) {
        let mut line = Vec::new();
        e.write_line(&mut line).unwrap();
        lines.push(String::from_utf8(line).unwrap());
    }
    let mut compared: BTreeMap<&str, usize> = BTreeMap::new();
    for line in &lines {
        let v: Json = serde_json::from_str(line).unwrap();
        let Some(object) = v.get("object").cloned() else { continue };
        let read = crate::trace::read(line.as_bytes()).keeping(keys.clone()).next().unwrap().unwrap();
        let (TraceEvent::Applied(new) | TraceEvent::Deleted(new)) = read.event else { panic!("{line}") };
        let kind = new.kind();
        match new {
            MinimalObject::Pod(new) => {
                let old: core::Pod = serde_json::from_value(object).unwrap();
                assert_eq!(minimize::pod(*new, &cfg), minimize::openapi::pod(&old, &cfg), "{line}");
            }
            MinimalObject::Job(new) => {
                let old: batch::Job = serde_json::from_value(object).unwrap();
                assert_eq!(minimize::job(*new, &cfg), minimize::openapi::job(&old, &cfg), "{line}");
            }
            MinimalObject::CronJob(new) => {
                let old: batch::CronJob = serde_json::from_value(object).unwrap();
                assert_eq!(minimize::cronjob(*new, &cfg), minimize::openapi::cronjob(&old, &cfg), "{line}");
            }
            MinimalObject::Lease(new) => {
                let old: coordination::Lease = serde_json::from_value(object).unwrap();
                assert_eq!(minimize::lease(*new, &cfg), minimize::openapi::lease(&old, &cfg), "{line}");
            }
            MinimalObject::Namespace(new) => {
                // Admission reads a Namespace's name and opt-out annotation only.
                let old: core::Namespace = serde_json::from_value(object).unwrap();
                assert_eq!(new.metadata.name, old.metadata.name);
                let opt_out = |a: &Option<BTreeMap<String, String>>| {
                    a.as_ref().and_then(|a| a.get(admission::DEFAULT_OPT_OUT_ANNOTATION)).cloned()
                };
                assert_eq!(opt_out(&new.metadata.annotations), opt_out(&old.metadata.annotations));
            }
        }
        *compared.entry(kind).or_default() += 1;
    }
    for kind in ["Pod", "Job", "CronJob", "Lease", "Namespace"] {
        assert!(compared.get(kind).is_some_and(|&n| n >= 5), "too few {kind}s compared: {compared:?}");
    }
}
