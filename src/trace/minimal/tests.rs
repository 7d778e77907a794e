use std::sync::Arc;

use k8s_openapi::api::{batch::v1 as batch, core::v1 as core};
use serde_json::{Value, json};

use super::*;

fn keys() -> Arc<KeptKeys> {
    Arc::new(KeptKeys {
        labels: vec!["kubefacts.io/session".into()],
        annotations: vec!["kubefacts.io/exclude".into()],
    })
}

fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, serde_json::Error> {
    keeping(&keys(), || serde_json::from_str(&v.to_string()))
}

/// A Pod whose every non-allowlisted field holds valid JSON of a shape its Kubernetes type
/// cannot take (a number for a string, an object for a list, …): decoding it into those
/// types fails, so a decoder that materializes any of them fails here.
fn pod_with_poisoned_extras() -> Value {
    let poison = json!({"not": ["a", "string", 1, null]});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "p", "namespace": "etl", "uid": "00000000-0000-4000-8000-000000000001",
            "labels": {"kubefacts.io/session": "s-1", "app": poison},
            "annotations": {"kubefacts.io/exclude": "false", "kubectl.kubernetes.io/last-applied-configuration": poison},
            "managedFields": poison, "finalizers": 7, "generateName": [1],
            "ownerReferences": [{"apiVersion": poison, "kind": "Job", "name": "j",
                "uid": "00000000-0000-4000-8000-000000000002", "controller": true, "blockOwnerDeletion": "x"}],
        },
        "spec": {
            "containers": [{
                "name": "main", "image": poison, "command": 7, "args": [1, {"x": null}],
                "env": [{"name": 5, "value": poison, "valueFrom": "secretKeyRef"}],
                "envFrom": 3, "volumeMounts": "all",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": poison}, "limits": 9},
            }],
            "volumes": [{"name": 1, "secret": {"secretName": poison}}],
            "serviceAccountName": poison, "nodeName": 3,
        },
        "status": {
            "phase": "Failed", "message": poison, "reason": 4, "podIP": poison,
            "containerStatuses": [{
                "name": "main", "restartCount": 2, "image": poison, "imageID": 1, "ready": "yes",
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": poison,
                    "startedAt": "2026-11-29T10:01:00Z", "finishedAt": "2026-11-29T10:02:00Z",
                    "containerID": "containerd://abc"}},
                "lastState": {"waiting": poison},
            }],
        },
    })
}

/// The same Pod with only what the allowlist reads.
fn pod_allowlisted_only() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "p", "namespace": "etl", "uid": "00000000-0000-4000-8000-000000000001",
            "labels": {"kubefacts.io/session": "s-1"},
            "annotations": {"kubefacts.io/exclude": "false"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                "uid": "00000000-0000-4000-8000-000000000002", "controller": true}],
        },
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{
                "name": "main", "restartCount": 2,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "startedAt": "2026-11-29T10:01:00Z", "finishedAt": "2026-11-29T10:02:00Z",
                    "containerID": "containerd://abc"}},
                "lastState": {},
            }],
        },
    })
}

#[test]
fn fields_outside_the_allowlist_are_skipped_by_the_parser_never_decoded() {
    let poisoned = pod_with_poisoned_extras();
    // The input really is undecodable as a whole object: had any of those fields been
    // decoded into a value, decoding would have failed.
    let whole = serde_json::from_value::<core::Pod>(poisoned.clone()).unwrap_err().to_string();
    assert!(whole.contains("invalid type"), "{whole}");
    let pod: Pod = decode(&poisoned).unwrap_or_else(|e| panic!("the allowlist decodes it: {e}"));
    let clean: Pod = decode(&pod_allowlisted_only()).unwrap();
    assert_eq!(pod, clean, "nothing but the allowlisted fields was kept");
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["kubefacts.io/session"], "unlisted labels skipped");
    assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].api_version, "", "not read");
}

#[test]
fn jobs_and_cronjobs_skip_their_pod_templates_and_messages() {
    let poison = json!({"not": "a list"});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "etl", "uid": "00000000-0000-4000-8000-000000000003"},
        "spec": {"backoffLimit": 2, "selector": poison, "podFailurePolicy": 1,
            "template": {"metadata": {"annotations": {"kubefacts.io/exclude": "true", "x": poison}},
                "spec": {"containers": [{"name": 1, "env": poison, "args": poison}]}}},
        "status": {"failed": 1, "uncountedTerminatedPods": {"failed": [1, {"x": 2}]},
            "conditions": [{"type": "Failed", "status": "True", "message": poison}]}});
    assert!(serde_json::from_value::<batch::Job>(job.clone()).is_err(), "undecodable as a whole Job");
    let j: Job = decode(&job).unwrap();
    let spec = j.spec.unwrap();
    let template = spec.template.metadata.unwrap().annotations.unwrap();
    assert_eq!(template.keys().collect::<Vec<_>>(), ["kubefacts.io/exclude"]);
    let status = j.status.unwrap();
    assert_eq!(status.uncounted_terminated_pods.unwrap().failed, Some(Count(2)), "counted, not read");

    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "c", "namespace": "etl", "uid": "00000000-0000-4000-8000-000000000004"},
        "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": poison}}}}},
        "status": {"active": [{"kind": 1}, 2]}});
    assert!(serde_json::from_value::<batch::CronJob>(cronjob.clone()).is_err());
    let c: CronJob = decode(&cronjob).unwrap();
    assert_eq!(c.status.unwrap().active, Some(Count(2)));
}

#[test]
fn read_fields_keep_their_kubernetes_types() {
    // What is read must be well-formed, as before: bad input there is an error.
    let mut bad = pod_allowlisted_only();
    bad["spec"]["containers"][0]["name"] = json!(5);
    assert!(decode::<Pod>(&bad).unwrap_err().to_string().contains("invalid type"));
    let mut bad = pod_allowlisted_only();
    bad["metadata"]["labels"]["kubefacts.io/session"] = json!({"a": 1});
    assert!(decode::<Pod>(&bad).is_err(), "a kept label's value must be a string");
    let mut bad = pod_allowlisted_only();
    bad["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = json!("yesterday");
    assert!(decode::<Pod>(&bad).is_err(), "timestamps parse as k8s-openapi parses them");
}

#[test]
fn only_a_scope_narrows_the_keys() {
    let v =
        json!({"metadata": {"labels": {"a": "1", "kubefacts.io/session": "s"}, "annotations": {"b": "2"}}});
    let unscoped: Namespace = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(unscoped.metadata.labels.unwrap().len(), 2, "outside a scope every key is kept");
    let scoped: Namespace = decode(&v).unwrap();
    assert_eq!(scoped.metadata.labels.unwrap().len(), 1);
    assert_eq!(scoped.metadata.annotations, Some(Default::default()), "present, none kept");
    // Scopes nest and end.
    let outer = Arc::new(KeptKeys { labels: vec!["a".into()], annotations: vec![] });
    let (inner, after) = keeping(&outer, || {
        let inner: Namespace = decode(&v).unwrap();
        let after: Namespace = serde_json::from_value(v.clone()).unwrap();
        (inner, after)
    });
    assert_eq!(inner.metadata.labels.unwrap().keys().collect::<Vec<_>>(), ["kubefacts.io/session"]);
    assert_eq!(after.metadata.labels.unwrap().keys().collect::<Vec<_>>(), ["a"]);
    let after: Namespace = serde_json::from_value(v).unwrap();
    assert_eq!(after.metadata.labels.unwrap().len(), 2);
}

#[test]
fn the_types_are_kube_resources() {
    use kube::Resource;
    assert_eq!(Job::url_path(&(), Some("etl")), "/apis/batch/v1/namespaces/etl/jobs");
    assert_eq!(Pod::url_path(&(), None), "/api/v1/pods");
    assert_eq!(CronJob::url_path(&(), None), "/apis/batch/v1/cronjobs");
    assert_eq!(Lease::url_path(&(), Some("k")), "/apis/coordination.k8s.io/v1/namespaces/k/leases");
    assert_eq!(Namespace::url_path(&(), None), "/api/v1/namespaces");
    // kube-rs follows a watch by the resource version it reads through `meta()`.
    let job: Job = decode(&json!({"metadata": {"resourceVersion": "42", "managedFields": []}})).unwrap();
    assert_eq!(job.meta().resource_version.as_deref(), Some("42"));
}

#[test]
fn whole_objects_convert_to_what_decoding_gives() {
    let pod: core::Pod = serde_json::from_value(pod_allowlisted_only()).unwrap();
    let decoded: Pod = serde_json::from_value(pod_allowlisted_only()).unwrap();
    assert_eq!(Pod::from(&pod), decoded);
}
