//! Kubernetes objects of the simulated cluster, rendered from the simulator's compact state
//! in the shapes the API server returns (no managedFields, to keep lines lean).

use serde_json::{Map, Value as Json, json};

use super::{
    JobState, Owner, PodKind, PodPhase, PodState, Sim,
    fleet::{CronJobPlan, OPT_OUT_NAMESPACE},
};
use k8s_openapi::api::{
    batch::v1::{CronJob, Job},
    core::v1::{Pod, PodSpec},
};

use crate::{observe::admission::DEFAULT_OPT_OUT_ANNOTATION, trace::KubeObject};

/// RFC 3339 with whole seconds (`metav1.Time`).
pub fn time(ms: i64) -> String {
    let t = utc(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// RFC 3339 with microseconds (`metav1.MicroTime`).
pub fn micro_time(ms: i64) -> String {
    let t = utc(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}000Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        ms.rem_euclid(1000)
    )
}

/// Epoch ms as a UTC calendar time (whole seconds; the API server's times are within
/// jiff's range, which parsing the rendered objects checks anyway).
fn utc(ms: i64) -> jiff::civil::DateTime {
    let ts =
        jiff::Timestamp::from_second(ms.div_euclid(1000)).expect("a simulated time is within jiff's range");
    jiff::tz::Offset::UTC.to_datetime(ts)
}

fn parse<T: serde::de::DeserializeOwned>(v: Json) -> Box<T> {
    Box::new(serde_json::from_value(v).expect("the simulator renders valid Kubernetes objects"))
}

/// A Namespace.
pub fn namespace(name: &str, uid: &str, rv: u64, created_ms: i64) -> KubeObject {
    let mut meta = json!({
        "name": name, "uid": uid, "resourceVersion": rv.to_string(),
        "creationTimestamp": time(created_ms),
        "labels": {"kubernetes.io/metadata.name": name},
    });
    if name == OPT_OUT_NAMESPACE {
        meta["annotations"] = json!({DEFAULT_OPT_OUT_ANNOTATION: "true"});
    }
    KubeObject::Namespace(parse(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": meta,
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"},
    })))
}

/// A Lease.
pub fn lease(sim: &Sim, i: usize) -> KubeObject {
    let l = &sim.leases[i];
    KubeObject::Lease(parse(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": l.name, "namespace": "kube-system", "uid": l.uid,
            "resourceVersion": l.rv.to_string(), "creationTimestamp": time(sim.plan.start_ms - 90 * 86_400_000)},
        "spec": {"holderIdentity": l.holder, "leaseDurationSeconds": l.duration_secs,
            "acquireTime": micro_time(l.acquire_ms), "renewTime": micro_time(l.renew_ms),
            "leaseTransitions": l.transitions},
    })))
}

/// The pod spec of a CronJob's (or bare Job's) template, parsed once per simulation.
pub fn pod_spec(cj: &CronJobPlan) -> PodSpec {
    *parse(pod_spec_json(cj))
}

fn pod_spec_json(cj: &CronJobPlan) -> Json {
    let mut container = json!({
        "name": "main", "image": cj.image,
        "resources": {"requests": {"cpu": format!("{}m", cj.requests.0), "memory": format!("{}Mi", cj.requests.1)}},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    });
    if cj.verbose {
        container["command"] = json!(["/app/run"]);
        container["args"] = json!([format!("--job={}", cj.name), "--db-password=hunter2-sim"]);
        container["env"] = json!([
            {"name": "DATABASE_URL", "value": format!("postgres://{}:s3cr3t-{}@db.{}.svc:5432/main", cj.namespace, cj.index, cj.namespace)},
            {"name": "API_TOKEN", "value": "sim-token-do-not-ship"},
            {"name": "S3_SECRET_KEY", "valueFrom": {"secretKeyRef": {"name": "s3-credentials", "key": "secret"}}},
        ]);
    }
    json!({"containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"})
}

/// The pod template without its spec (set from the cache after parsing).
fn pod_template(cj: &CronJobPlan, labels: &Json) -> Json {
    let mut meta = json!({"labels": labels});
    if cj.template_opt_out {
        meta["annotations"] = json!({DEFAULT_OPT_OUT_ANNOTATION: "true"});
    }
    json!({"metadata": meta})
}

fn job_spec(cj: &CronJobPlan, labels: &Json) -> Json {
    let mut spec = json!({"backoffLimit": cj.backoff_limit, "template": pod_template(cj, labels)});
    if let Some(d) = cj.active_deadline_secs {
        spec["activeDeadlineSeconds"] = json!(d);
    }
    if let Some(t) = cj.ttl_secs {
        spec["ttlSecondsAfterFinished"] = json!(t);
    }
    spec
}

/// A CronJob in its current state.
pub fn cronjob(sim: &Sim, i: usize) -> KubeObject {
    let cj = &sim.plan.cronjobs[i];
    let st = &sim.crons[i];
    let labels = json!({"app.kubernetes.io/name": cj.name});
    let mut meta = json!({
        "name": cj.name, "namespace": cj.namespace, "uid": cj.uid, "resourceVersion": st.rv.to_string(),
        "generation": 1, "creationTimestamp": time(sim.plan.start_ms - cj.age_secs * 1000), "labels": labels,
    });
    if cj.opt_out {
        meta["annotations"] = json!({DEFAULT_OPT_OUT_ANNOTATION: "true"});
    }
    let mut spec = json!({
        "schedule": cj.schedule.text, "concurrencyPolicy": cj.concurrency.as_str(), "suspend": cj.suspend,
        "successfulJobsHistoryLimit": cj.successful_history, "failedJobsHistoryLimit": cj.failed_history,
        "jobTemplate": {"metadata": {"labels": labels}, "spec": job_spec(cj, &labels)},
    });
    if let Some(tz) = cj.schedule.time_zone {
        spec["timeZone"] = json!(tz);
    }
    if let Some(d) = cj.starting_deadline_secs {
        spec["startingDeadlineSeconds"] = json!(d);
    }
    let mut status = Map::new();
    if !st.active.is_empty() {
        let refs: Vec<Json> = st
            .active
            .iter()
            .filter_map(|id| sim.jobs.get(id))
            .map(|j| json!({"apiVersion": "batch/v1", "kind": "Job", "namespace": cj.namespace, "name": j.name, "uid": j.uid, "resourceVersion": j.rv.to_string()}))
            .collect();
        status.insert("active".into(), Json::Array(refs));
    }
    if let Some(t) = st.last_schedule_ms {
        status.insert("lastScheduleTime".into(), json!(time(t)));
    }
    if let Some(t) = st.last_successful_ms {
        status.insert("lastSuccessfulTime".into(), json!(time(t)));
    }
    let mut object: Box<CronJob> = parse(json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": spec, "status": status,
    }));
    if let Some(spec) = object.spec.as_mut().and_then(|s| s.job_template.spec.as_mut()) {
        spec.template.spec = Some(sim.pod_specs[i].clone());
    }
    KubeObject::CronJob(object)
}

fn job_labels(sim: &Sim, j: &JobState) -> Json {
    let behavior = sim.behavior(j.owner);
    json!({
        "batch.kubernetes.io/controller-uid": j.uid, "batch.kubernetes.io/job-name": j.name,
        "controller-uid": j.uid, "job-name": j.name, "app.kubernetes.io/name": behavior.name,
    })
}

/// A Job in its current state.
pub fn job(sim: &Sim, j: &JobState) -> KubeObject {
    let behavior = sim.behavior(j.owner);
    let labels = job_labels(sim, j);
    let mut meta = json!({
        "name": j.name, "namespace": behavior.namespace, "uid": j.uid, "resourceVersion": j.rv.to_string(),
        "generation": 1, "creationTimestamp": time(j.created_ms), "labels": labels,
    });
    if let Owner::Cron(c) = j.owner {
        let cj = &sim.plan.cronjobs[c];
        meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": cj.name, "uid": cj.uid, "controller": true, "blockOwnerDeletion": true}]);
        if let Some(s) = j.scheduled_ms {
            meta["annotations"] = json!({"batch.kubernetes.io/cronjob-scheduled-timestamp": time(s)});
        }
    }
    if let Some(d) = j.deletion_ms {
        meta["deletionTimestamp"] = json!(time(d));
        meta["deletionGracePeriodSeconds"] = json!(0);
        meta["finalizers"] = json!(["foregroundDeletion"]);
    }
    let mut spec = job_spec(behavior, &labels);
    let spec_map = spec.as_object_mut().expect("object");
    spec_map.insert("parallelism".into(), json!(1));
    spec_map.insert("completions".into(), json!(1));
    spec_map.insert("completionMode".into(), json!("NonIndexed"));
    spec_map.insert("suspend".into(), json!(false));
    spec_map.insert("podReplacementPolicy".into(), json!("TerminatingOrFailed"));
    spec_map.insert("manualSelector".into(), json!(false));
    spec_map.insert("selector".into(), json!({"matchLabels": {"batch.kubernetes.io/controller-uid": j.uid}}));
    let mut status = Map::new();
    if let Some(s) = j.start_ms {
        status.insert("startTime".into(), json!(time(s)));
        if j.finished.is_none() {
            status.insert("active".into(), json!(j.active));
            status.insert("ready".into(), json!(j.ready));
            status.insert("terminating".into(), json!(j.terminating));
        }
        let mut uncounted = Map::new();
        if !j.uncounted_succeeded.is_empty() {
            uncounted.insert("succeeded".into(), json!(j.uncounted_succeeded));
        }
        if !j.uncounted_failed.is_empty() {
            uncounted.insert("failed".into(), json!(j.uncounted_failed));
        }
        status.insert("uncountedTerminatedPods".into(), Json::Object(uncounted));
    }
    if j.succeeded > 0 {
        status.insert("succeeded".into(), json!(j.succeeded));
    }
    if j.failed > 0 {
        status.insert("failed".into(), json!(j.failed));
    }
    let mut conditions = Vec::new();
    let condition = |ty: &str, reason: &str, at: i64| {
        let message = match reason {
            "CompletionsReached" => "Reached expected number of succeeded pods",
            "BackoffLimitExceeded" => "Job has reached the specified backoff limit",
            _ => "Job was active longer than specified deadline",
        };
        json!({"type": ty, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": time(at), "lastTransitionTime": time(at)})
    };
    if let Some((reason, at)) = j.target {
        let ty = if reason == "CompletionsReached" { "SuccessCriteriaMet" } else { "FailureTarget" };
        conditions.push(condition(ty, reason, at));
    }
    if let Some((success, reason, at)) = j.finished {
        conditions.push(condition(if success { "Complete" } else { "Failed" }, reason, at));
        if success {
            status.insert("completionTime".into(), json!(time(at)));
        }
    }
    if !conditions.is_empty() {
        status.insert("conditions".into(), Json::Array(conditions));
    }
    let mut object: Box<Job> = parse(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec, "status": status,
    }));
    if let Some(spec) = object.spec.as_mut() {
        spec.template.spec = Some(sim.pod_spec(j.owner).clone());
    }
    KubeObject::Job(object)
}

/// A Pod in its current state.
pub fn pod(sim: &Sim, p: &PodState) -> KubeObject {
    let (namespace, labels, owner, template_spec, container_name, image) = match &p.kind {
        PodKind::Job(job_id) => {
            let j = &sim.jobs[job_id];
            let behavior = sim.behavior(j.owner);
            let labels = job_labels(sim, j);
            let owner = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": j.name, "uid": j.uid, "controller": true, "blockOwnerDeletion": true}]);
            (behavior.namespace.as_str(), labels, Some(owner), Json::Null, "main", behavior.image.clone())
        }
        PodKind::Session { session, namespace, requests } => {
            let labels = json!({"kubefacts.io/session": session, "app.kubernetes.io/name": "agent-runtime", "tenant": format!("tenant-{:04}", p.id % 97)});
            let spec = json!({
                "containers": [
                    {"name": "agent", "image": "registry.example.com/agents/runtime:3.2.0",
                     "env": [{"name": "MODEL_API_TOKEN", "value": format!("sim-token-{session}-do-not-ship")}],
                     "resources": {"requests": {"cpu": format!("{}m", requests.0), "memory": format!("{}Mi", requests.1)}}},
                    {"name": "log-shipper", "image": "registry.example.com/agents/log-shipper:0.9.1",
                     "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}},
                ],
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 60, "schedulerName": "default-scheduler",
            });
            (
                namespace.as_str(),
                labels,
                None,
                spec,
                "agent",
                "registry.example.com/agents/runtime:3.2.0".to_owned(),
            )
        }
    };
    let mut meta = json!({
        "name": p.name, "namespace": namespace, "uid": p.uid, "resourceVersion": p.rv.to_string(),
        "creationTimestamp": time(p.created_ms), "labels": labels,
    });
    if let Some(owner) = owner {
        meta["generateName"] = json!(format!("{}-", &p.name[..p.name.len() - 6]));
        meta["ownerReferences"] = owner;
    } else {
        meta["annotations"] = json!({"kubectl.kubernetes.io/default-container": container_name});
    }
    if p.finalizer {
        meta["finalizers"] = json!(["batch.kubernetes.io/job-tracking"]);
    }
    if let Some(d) = p.deletion_ms {
        meta["deletionTimestamp"] = json!(time(d));
        meta["deletionGracePeriodSeconds"] = json!(30);
    }
    let mut spec = template_spec;
    if let (Some(node), false) = (&p.node, spec.is_null()) {
        spec["nodeName"] = json!(node);
    }
    let phase = match p.phase {
        PodPhase::Pending => "Pending",
        PodPhase::Running => "Running",
        PodPhase::Succeeded => "Succeeded",
        PodPhase::Failed => "Failed",
    };
    let mut status = json!({"phase": phase, "qosClass": "Burstable"});
    if let Some(at) = p.scheduled_ms {
        let mut conditions =
            vec![json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": time(at)})];
        if let Some(run) = p.running_ms {
            let ready = p.phase == PodPhase::Running;
            let changed = p.exit.map_or(run, |e| e.2);
            conditions.push(json!({"type": "Initialized", "status": "True", "lastTransitionTime": time(at)}));
            let mut r = json!({"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": time(changed)});
            if !ready {
                r["reason"] = json!("PodCompleted");
            }
            conditions.push(r);
        }
        status["conditions"] = Json::Array(conditions);
        status["hostIP"] = json!(p.host_ip());
        status["startTime"] = json!(time(at));
    }
    if let Some(run) = p.running_ms {
        status["podIP"] = json!(p.pod_ip());
        let container_id =
            format!("containerd://{:016x}{:016x}", p.id.wrapping_mul(0x9E37_79B9_7F4A_7C15), p.id);
        let state = match p.exit {
            None => json!({"running": {"startedAt": time(run)}}),
            Some((code, reason, at)) => json!({"terminated": {"exitCode": code, "reason": reason,
                "startedAt": time(run), "finishedAt": time(at), "containerID": container_id}}),
        };
        status["containerStatuses"] = json!([{
            "name": container_name, "image": image, "imageID": format!("{image}@sha256:{:016x}", p.id),
            "ready": p.exit.is_none(), "restartCount": 0, "state": state, "lastState": {},
            "containerID": container_id, "started": p.exit.is_none(),
        }]);
    }
    let from_template = spec.is_null();
    let mut object: Box<Pod> = parse(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status,
    }));
    if from_template && let PodKind::Job(job_id) = &p.kind {
        let mut spec = sim.pod_spec(sim.jobs[job_id].owner).clone();
        spec.node_name = p.node.clone();
        object.spec = Some(spec);
    }
    KubeObject::Pod(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulate_times_render_like_the_api_server() {
        assert_eq!(time(1_793_491_200_000), "2026-11-01T00:00:00Z");
        assert_eq!(time(1_795_946_441_999), "2026-11-29T10:00:41Z");
        assert_eq!(micro_time(1_795_946_398_497), "2026-11-29T09:59:58.497000Z");
        assert_eq!(time(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
