use serde_json::{Value, json};

use super::*;
use crate::fixtures;

const T0: i64 = 1_795_946_400_000;
const OPT_OUT: &str = DEFAULT_OPT_OUT_ANNOTATION;

fn entry(at: i64, object: Value) -> MinimalEntry {
    let mut entries =
        crate::trace::parse_value(0, json!({"type": "ADDED", "observed_at": at, "object": object}));
    entries.remove(0).unwrap()
}

fn annotations(opt_out: bool) -> Value {
    if opt_out { json!({OPT_OUT: "true", "other": "x"}) } else { json!({"other": "x", OPT_OUT: "false"}) }
}

fn namespace(name: &str, opt_out: bool) -> Value {
    fixtures::namespace(name)
        .uid(&format!("00000000-0000-4000-8000-{:012}", name.len()))
        .annotations(annotations(opt_out))
        .value()
}

fn cronjob(uid: &str, ns: &str, opt_out: bool) -> Value {
    fixtures::cronjob(ns, "nightly", "0 * * * *", json!([]))
        .uid(uid)
        .annotations(annotations(opt_out))
        .value()
}

fn job(uid: &str, ns: &str, cronjob: Option<&str>, own: bool, template: bool) -> Value {
    fixtures::job(ns, &format!("job-{uid}"))
        .uid(uid)
        .owners(cronjob.map(|c| fixtures::controller("CronJob", "nightly", c)))
        .annotations(annotations(own))
        .spec(json!({"template": {"metadata": {"annotations": annotations(template)}, "spec": {"containers": []}}}))
        .value()
}

fn pod(uid: &str, ns: &str, job: Option<&str>, own: bool) -> Value {
    fixtures::pod(ns, &format!("pod-{uid}"))
        .uid(uid)
        .owners(job.map(|j| fixtures::controller("Job", "j", j)))
        .annotations(annotations(own))
        .spec(json!({"containers": []}))
        .value()
}

const CJ: &str = "11111111-1111-4111-8111-111111111111";
const JOB: &str = "22222222-2222-4222-8222-222222222222";
const POD: &str = "33333333-3333-4333-8333-333333333333";

/// Runs namespace, CronJob, Job and Pod through a gate; returns the kinds published.
fn run(
    cfg: AdmissionConfig,
    ns_opt: bool,
    cj_opt: bool,
    job_own: bool,
    job_template: bool,
    pod_own: bool,
) -> (Vec<&'static str>, AdmissionCounts) {
    let mut gate = Admission::new(cfg);
    let mut out = Vec::new();
    for (i, object) in [
        namespace("etl", ns_opt),
        cronjob(CJ, "etl", cj_opt),
        job(JOB, "etl", Some(CJ), job_own, job_template),
        pod(POD, "etl", Some(JOB), pod_own),
    ]
    .into_iter()
    .enumerate()
    {
        out.extend(gate.offer(entry(T0 + i as i64, object)));
    }
    let kinds = out
        .iter()
        .map(|e| match &e.event {
            TraceEvent::Applied(o) => o.kind(),
            _ => "marker",
        })
        .collect();
    (kinds, gate.counts().clone())
}

#[test]
fn with_no_opt_out_everything_but_the_namespace_is_published() {
    let (kinds, counts) = run(AdmissionConfig::default(), false, false, false, false, false);
    assert_eq!(kinds, ["CronJob", "Job", "Pod"]);
    assert_eq!(counts.excluded, BTreeMap::new());
}

#[test]
fn step_1_the_namespace_list_excludes_the_job_and_its_pods() {
    let deny = AdmissionConfig { deny_namespaces: vec!["etl".into()], ..Default::default() };
    let (kinds, counts) = run(deny, false, false, false, false, false);
    assert_eq!(kinds, Vec::<&str>::new());
    assert_eq!(counts.excluded_at(Step::NamespaceList), 3, "{counts:?}");
    let allow_other = AdmissionConfig { allow_namespaces: vec!["web".into()], ..Default::default() };
    assert!(run(allow_other, false, false, false, false, false).0.is_empty());
    let allow = AdmissionConfig { allow_namespaces: vec!["etl".into()], ..Default::default() };
    assert_eq!(run(allow, false, false, false, false, false).0.len(), 3);
}

#[test]
fn step_2_the_namespace_annotation_excludes_the_job_and_its_pods() {
    let (kinds, counts) = run(AdmissionConfig::default(), true, false, false, false, false);
    assert!(kinds.is_empty(), "{kinds:?}");
    assert_eq!(counts.excluded_at(Step::NamespaceAnnotation), 3, "{counts:?}");
}

#[test]
fn step_3_the_cronjob_annotation_excludes_its_jobs_and_their_pods() {
    let (kinds, counts) = run(AdmissionConfig::default(), false, true, false, false, false);
    assert!(kinds.is_empty(), "{kinds:?}");
    assert_eq!(counts.excluded_at(Step::CronJobAnnotation), 3, "{counts:?}");
}

/// Found by the control-plane test: a CronJob whose pod template opts out made Jobs and
/// Pods that were excluded while the CronJob itself was published, so `[coverage]` saw a
/// CronJob that never ran.
#[test]
fn step_3_an_opt_out_on_the_cronjobs_templates_excludes_it_too() {
    for template in ["/spec/jobTemplate/metadata", "/spec/jobTemplate/spec/template/metadata"] {
        let mut gate = Admission::new(AdmissionConfig::default());
        let mut cj = cronjob(CJ, "etl", false);
        let at = template.rsplit_once('/').unwrap().0;
        cj.pointer_mut(at).unwrap()["metadata"] = json!({"annotations": annotations(true)});
        let mut out = gate.offer(entry(T0, namespace("etl", false)));
        out.extend(gate.offer(entry(T0 + 1, cj)));
        out.extend(gate.offer(entry(T0 + 2, job(JOB, "etl", Some(CJ), false, false))));
        assert!(out.is_empty(), "{template}: {out:?}");
        assert_eq!(gate.counts().excluded_at(Step::CronJobAnnotation), 2, "{template}");
    }
}

#[test]
fn step_4_the_jobs_own_or_template_annotation_excludes_it_and_its_pods() {
    for (own, template) in [(true, false), (false, true)] {
        let (kinds, counts) = run(AdmissionConfig::default(), false, false, own, template, false);
        assert_eq!(kinds, ["CronJob"], "own {own} template {template}");
        assert_eq!(counts.excluded.get(&("Job", Step::OwnAnnotation)), Some(&1));
        assert_eq!(counts.excluded.get(&("Pod", Step::OwnAnnotation)), Some(&1));
    }
    // A Pod's own annotation excludes the Pod only.
    let (kinds, _) = run(AdmissionConfig::default(), false, false, false, false, true);
    assert_eq!(kinds, ["CronJob", "Job"]);
}

#[test]
fn the_opt_out_key_is_configurable() {
    let cfg = AdmissionConfig { opt_out_annotation: "other".into(), ..Default::default() };
    // "other" is "x", not "true": nothing is opted out, even with kubefacts.io/exclude set.
    assert_eq!(run(cfg, true, true, true, true, true).0.len(), 3);
}

#[test]
fn an_object_seen_before_its_namespace_or_job_is_held_then_released_in_order() {
    let mut gate = Admission::new(AdmissionConfig::default());
    assert!(gate.offer(entry(T0, pod(POD, "etl", Some(JOB), false))).is_empty());
    assert!(gate.offer(entry(T0 + 1, job(JOB, "etl", None, false, false))).is_empty());
    assert_eq!(gate.counts().held, 2);
    let out = gate.offer(entry(T0 + 2, namespace("etl", false)));
    let kinds: Vec<_> = out.iter().map(|e| e.observed_at_ms).collect();
    assert_eq!(kinds, [T0 + 1, T0], "the Job first (it released the Pod), each with its own time");
    assert_eq!(gate.counts().held, 0);
}

#[test]
fn a_held_pod_of_an_opted_out_job_is_never_published() {
    let mut gate = Admission::new(AdmissionConfig::default());
    gate.offer(entry(T0, namespace("etl", false)));
    assert!(gate.offer(entry(T0 + 1, pod(POD, "etl", Some(JOB), false))).is_empty());
    assert!(gate.offer(entry(T0 + 2, job(JOB, "etl", None, true, false))).is_empty());
    assert_eq!(gate.counts().excluded.get(&("Pod", Step::OwnAnnotation)), Some(&1));
}

#[test]
fn what_stays_unresolved_is_excluded_after_hold_ms_or_at_the_end_of_a_relist() {
    let mut gate = Admission::new(AdmissionConfig { hold_ms: 1_000, ..Default::default() });
    gate.offer(entry(T0, namespace("etl", false)));
    gate.offer(entry(T0, pod(POD, "etl", Some(JOB), false)));
    let heartbeat = |at| MinimalEntry { observed_at_ms: at, event: TraceEvent::Heartbeat };
    assert_eq!(gate.offer(heartbeat(T0 + 999)).len(), 1, "the heartbeat only");
    assert_eq!(gate.counts().held, 1);
    gate.offer(heartbeat(T0 + 1_000));
    assert_eq!(gate.counts().held, 0);
    assert_eq!(gate.counts().excluded_at(Step::Unresolved), 1);

    gate.offer(entry(T0 + 2_000, pod(POD, "etl", Some(JOB), false)));
    let end = TraceEvent::SnapshotEnd { epoch: 2, kinds: Some(vec!["Job".into()]) };
    assert_eq!(gate.offer(MinimalEntry { observed_at_ms: T0 + 2_001, event: end }).len(), 1);
    assert_eq!(gate.counts().held, 1, "a Job relist leaves a held Pod waiting");
    let end = TraceEvent::SnapshotEnd { epoch: 2, kinds: Some(vec!["Pod".into()]) };
    let out = gate.offer(MinimalEntry { observed_at_ms: T0 + 2_001, event: end });
    assert_eq!(out.len(), 1, "the marker, after the held Pod was decided");
    assert_eq!(gate.counts().excluded_at(Step::Unresolved), 2);
    // The Job arriving later no longer releases it.
    assert!(gate.offer(entry(T0 + 2_002, job(JOB, "etl", None, false, false))).len() == 1);
}

fn deleted(at: i64, object: Value) -> MinimalEntry {
    let mut entries =
        crate::trace::parse_value(0, json!({"type": "DELETED", "observed_at": at, "object": object}));
    entries.remove(0).unwrap()
}

#[test]
fn deleting_an_opted_out_cronjob_does_not_readmit_its_jobs_or_pods() {
    let mut gate = Admission::new(AdmissionConfig::default());
    let mut out = Vec::new();
    out.extend(gate.offer(entry(T0, namespace("etl", false))));
    out.extend(gate.offer(entry(T0 + 1, cronjob(CJ, "etl", true))));
    out.extend(gate.offer(entry(T0 + 2, job(JOB, "etl", Some(CJ), false, false))));
    out.extend(gate.offer(entry(T0 + 3, pod(POD, "etl", Some(JOB), false))));
    out.extend(gate.offer(deleted(T0 + 4, cronjob(CJ, "etl", true))));
    out.extend(gate.offer(entry(T0 + 5, job(JOB, "etl", Some(CJ), false, false))));
    out.extend(gate.offer(deleted(T0 + 6, job(JOB, "etl", Some(CJ), false, false))));
    out.extend(gate.offer(entry(T0 + 7, pod(POD, "etl", Some(JOB), false))));
    out.extend(gate.offer(deleted(T0 + 8, pod(POD, "etl", Some(JOB), false))));
    assert!(out.is_empty(), "published: {:?}", out.iter().map(|e| e.observed_at_ms - T0).collect::<Vec<_>>());
    assert_eq!(gate.counts().excluded_at(Step::CronJobAnnotation), 8);
}

#[test]
fn a_job_whose_cronjob_is_unseen_is_held_until_it_is() {
    let mut gate = Admission::new(AdmissionConfig::default());
    gate.offer(entry(T0, namespace("etl", false)));
    assert!(gate.offer(entry(T0 + 1, job(JOB, "etl", Some(CJ), false, false))).is_empty());
    assert_eq!(gate.counts().held, 1);
    // The CronJob opts out: the held Job is excluded, never published.
    assert!(gate.offer(entry(T0 + 2, cronjob(CJ, "etl", true))).is_empty());
    assert_eq!(gate.counts().excluded.get(&("Job", Step::CronJobAnnotation)), Some(&1));
    assert_eq!(gate.counts().held, 0);
}

#[test]
fn pods_follow_their_job_after_it_is_deleted_for_a_while() {
    let cfg = AdmissionConfig { remember_deleted_ms: 60_000, hold_ms: 1_000, ..Default::default() };
    let mut gate = Admission::new(cfg);
    gate.offer(entry(T0, namespace("etl", false)));
    assert_eq!(gate.offer(entry(T0 + 1, job(JOB, "etl", None, false, false))).len(), 1);
    assert_eq!(gate.offer(deleted(T0 + 2, job(JOB, "etl", None, false, false))).len(), 1);
    // Background deletion: the Pod goes on changing after its Job is gone.
    assert_eq!(gate.offer(deleted(T0 + 30_000, pod(POD, "etl", Some(JOB), false))).len(), 1);
    // Long after, the Job is forgotten: a Pod naming it waits, then is unresolved.
    assert!(gate.offer(entry(T0 + 70_000, pod(POD, "etl", Some(JOB), false))).is_empty());
    gate.offer(MinimalEntry { observed_at_ms: T0 + 72_000, event: TraceEvent::Heartbeat });
    assert_eq!(gate.counts().excluded_at(Step::Unresolved), 1);
}

#[test]
fn leases_pass_and_namespaces_are_never_published() {
    let mut gate =
        Admission::new(AdmissionConfig { deny_namespaces: vec!["kube-system".into()], ..Default::default() });
    assert!(gate.offer(entry(T0, namespace("kube-system", true))).is_empty());
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "kube-controller-manager", "namespace": "kube-system",
                                    "uid": "44444444-4444-4444-8444-444444444444"}, "spec": {}});
    assert_eq!(gate.offer(entry(T0 + 1, lease)).len(), 1);
    assert!(gate.counts().admitted.is_empty(), "Leases are not admitted by annotation, so not counted");
}
