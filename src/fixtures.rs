//! Kubernetes objects for tests: one builder for Jobs, Pods, CronJobs, Leases and
//! Namespaces, shared by the unit tests and (through the `fixtures` feature, which the
//! crate's dev-dependency on itself turns on) the integration tests.
//!
//! A builder holds the object as JSON, the form watch events and traces carry; `value()`
//! hands it over, `typed()` parses it into the `k8s-openapi` type. Tests set what their
//! case is about and nothing else: the builder adds only `apiVersion`, `kind` and the
//! `metadata` names it is given.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// A Kubernetes object under construction.
#[derive(Debug, Clone, PartialEq)]
pub struct Fixture(Value);

/// A Job `namespace/name`.
pub fn job(namespace: &str, name: &str) -> Fixture {
    Fixture::new("batch/v1", "Job", Some(namespace), name)
}

/// A Pod `namespace/name`.
pub fn pod(namespace: &str, name: &str) -> Fixture {
    Fixture::new("v1", "Pod", Some(namespace), name)
}

/// A CronJob `namespace/name` on `schedule`, whose Job template has Pods with these
/// containers (`[]` for none).
pub fn cronjob(namespace: &str, name: &str, schedule: &str, containers: Value) -> Fixture {
    Fixture::new("batch/v1", "CronJob", Some(namespace), name)
        .spec(json!({"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {"containers": containers}}}}}))
}

/// A Lease `namespace/name`.
pub fn lease(namespace: &str, name: &str) -> Fixture {
    Fixture::new("coordination.k8s.io/v1", "Lease", Some(namespace), name)
}

/// A Namespace `name`.
pub fn namespace(name: &str) -> Fixture {
    Fixture::new("v1", "Namespace", None, name)
}

/// A container `name` running `image`.
pub fn container(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image})
}

/// The controller owner reference to the `kind` (`Job`, `CronJob`, …) `name` with `uid`.
pub fn controller(kind: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version(kind), "kind": kind, "name": name, "uid": uid, "controller": true})
}

fn api_version(kind: &str) -> &'static str {
    match kind {
        "Job" | "CronJob" => "batch/v1",
        "Lease" => "coordination.k8s.io/v1",
        "ReplicaSet" | "Deployment" | "StatefulSet" | "DaemonSet" => "apps/v1",
        _ => "v1",
    }
}

impl Fixture {
    fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        let mut metadata = Map::new();
        metadata.insert("name".into(), name.into());
        if let Some(ns) = namespace {
            metadata.insert("namespace".into(), ns.into());
        }
        Fixture(json!({"apiVersion": api_version, "kind": kind, "metadata": metadata}))
    }

    /// Sets `metadata.uid`.
    pub fn uid(self, uid: &str) -> Self {
        self.meta("uid", uid.into())
    }

    /// Sets `metadata.<field>` (`labels`, `annotations`, `ownerReferences`, …) to `value`.
    pub fn meta(mut self, field: &str, value: Value) -> Self {
        self.0["metadata"][field] = value;
        self
    }

    /// Sets `metadata.annotations` (a JSON object).
    pub fn annotations(self, annotations: Value) -> Self {
        self.meta("annotations", annotations)
    }

    /// Sets `metadata.labels` (a JSON object).
    pub fn labels(self, labels: Value) -> Self {
        self.meta("labels", labels)
    }

    /// Sets `metadata.ownerReferences` to these references (see [`controller`]); `None`
    /// gives the empty list.
    pub fn owners(self, owners: impl IntoIterator<Item = Value>) -> Self {
        self.meta("ownerReferences", Value::Array(owners.into_iter().collect()))
    }

    /// Sets `spec`.
    pub fn spec(mut self, spec: Value) -> Self {
        self.0["spec"] = spec;
        self
    }

    /// Sets `status`.
    pub fn status(mut self, status: Value) -> Self {
        self.0["status"] = status;
        self
    }

    /// Sets the field at the JSON pointer `path` (`/spec/template/metadata`), creating the
    /// objects on the way.
    pub fn set(mut self, path: &str, value: Value) -> Self {
        let mut at = &mut self.0;
        for part in path.split('/').skip(1) {
            at = &mut at[part];
        }
        *at = value;
        self
    }

    /// The object as JSON (a watch event's `object`).
    pub fn value(self) -> Value {
        self.0
    }

    /// The object as its `k8s-openapi` type. Panics if it is not one: a fixture bug.
    pub fn typed<T: DeserializeOwned>(self) -> T {
        let kind = self.0["kind"].clone();
        serde_json::from_value(self.0).unwrap_or_else(|e| panic!("fixture {kind} does not parse: {e}"))
    }
}

impl From<Fixture> for Value {
    fn from(f: Fixture) -> Value {
        f.0
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{batch::v1 as batch, coordination::v1 as coordination, core::v1 as core};

    use super::*;

    #[test]
    fn builders_give_objects_that_parse_as_their_kind() {
        let cj: batch::CronJob = cronjob("etl", "nightly", "0 * * * *", json!([])).uid("u-1").typed();
        assert_eq!(cj.spec.unwrap().schedule, "0 * * * *");
        let job: batch::Job =
            job("etl", "j").uid("u-2").owners([controller("CronJob", "nightly", "u-1")]).typed();
        let owner = &job.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.api_version.as_str(), owner.controller), ("batch/v1", Some(true)));
        let pod: core::Pod = pod("etl", "p").set("/spec/containers", json!([container("main", "x")])).typed();
        assert_eq!(pod.spec.unwrap().containers[0].name, "main");
        let lease: coordination::Lease =
            lease("kube-system", "l").spec(json!({"holderIdentity": "a"})).typed();
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("a"));
        let ns: core::Namespace = namespace("etl").typed();
        assert_eq!((ns.metadata.name.as_deref(), ns.metadata.namespace), (Some("etl"), None));
    }

    #[test]
    fn set_creates_the_path() {
        let v = job("etl", "j").set("/spec/template/metadata/annotations", json!({"a": "b"})).value();
        assert_eq!(v["spec"]["template"]["metadata"]["annotations"]["a"], "b");
    }
}
