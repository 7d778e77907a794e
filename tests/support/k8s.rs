//! The real Kubernetes control plane started by `scripts/k8s/up.sh` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok): how to reach it, `kubectl` against it,
//! and a pipeline (`kubefacts watch` + `kubefacts process`) running on it and the broker.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::{codec::Codec, fixtures, journal::JobRun};
use serde_json::Value;

use super::{Infra, KillOnDrop, infra, logs_in, read_topic, topic_exists, unique_name};

/// The running control plane.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Admin kubeconfig (O=system:masters).
    pub kubeconfig: PathBuf,
    /// The kubectl built with the control plane.
    pub kubectl: PathBuf,
    /// `scripts/k8s/ctl.sh`: stop and start single pieces.
    pub ctl: PathBuf,
    /// API server URL.
    pub server: String,
    /// The cluster CA certificate.
    pub ca: PathBuf,
}

/// The running control plane; panics with instructions when it is not there.
pub fn cluster() -> Cluster {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: the Kubernetes control plane is not running. Start it with \
                 scripts/k8s/up.sh and `source .cache/k8s/run/env` (scripts/test.sh does both)"
            )
        })
    };
    let c = Cluster {
        kubeconfig: var("KUBEFACTS_K8S_KUBECONFIG").into(),
        kubectl: var("KUBEFACTS_K8S_KUBECTL").into(),
        ctl: var("KUBEFACTS_K8S_CTL").into(),
        server: var("KUBEFACTS_K8S_SERVER"),
        ca: var("KUBEFACTS_K8S_CA").into(),
    };
    assert!(c.kubeconfig.is_file(), "KUBEFACTS_K8S_KUBECONFIG={} is not a file", c.kubeconfig.display());
    c
}

impl Cluster {
    /// Runs kubectl as the admin with `args` (and `stdin`); its stdout, or a panic with
    /// stderr.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.try_kubectl(args, stdin).unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    /// [`Cluster::kubectl`], the error as a value.
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        self.kubectl_as(&self.kubeconfig, args, stdin)
    }

    /// kubectl with another kubeconfig.
    pub fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, String> {
        use std::io::Write;
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl.display()));
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `kubectl apply -f -` of a YAML or JSON document.
    pub fn apply(&self, manifest: &str) {
        self.kubectl(&["apply", "-f", "-"], Some(manifest));
    }

    /// `kubectl get … -o json`, parsed.
    pub fn get(&self, args: &[&str]) -> Value {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.kubectl(&all, None)).unwrap()
    }

    /// A new namespace (unique name from `prefix`), with `annotations`.
    pub fn namespace(&self, prefix: &str, annotations: &[(&str, &str)]) -> String {
        let name = unique_name(prefix).to_lowercase().replace('_', "-");
        let annotations: serde_json::Map<String, Value> =
            annotations.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
        self.apply(&fixtures::namespace(&name).annotations(Value::Object(annotations)).value().to_string());
        name
    }

    /// `scripts/k8s/ctl.sh <verb> <piece>` (stop, start, restart a control-plane piece).
    pub fn ctl(&self, verb: &str, piece: &str) {
        let out = Command::new(&self.ctl).args([verb, piece]).output().unwrap();
        assert!(
            out.status.success(),
            "ctl.sh {verb} {piece} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The pod template annotation that tells kwok how a container ends (deploy/kwok/).
pub const EXIT_ANNOTATION: &str = "kubefacts.test/exit";

/// A CronJob `name` in `ns` firing every minute, whose pods end as `exit` says (`None`:
/// exit 0; `error`: exit 1; `oomkilled`: 137), with `annotations` on the CronJob,
/// `template_annotations` on its pod template, and no retries.
pub fn cronjob(
    ns: &str,
    name: &str,
    exit: Option<&str>,
    annotations: &[(&str, &str)],
    template_annotations: &[(&str, &str)],
) -> String {
    let map = |pairs: &[(&str, &str)]| -> serde_json::Map<String, Value> {
        pairs.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect()
    };
    let mut pod_annotations = map(template_annotations);
    if let Some(exit) = exit {
        pod_annotations.insert(EXIT_ANNOTATION.into(), exit.into());
    }
    fixtures::cronjob(ns, name, "*/1 * * * *", Value::Array(vec![]))
        .annotations(Value::Object(map(annotations)))
        .set("/spec/concurrencyPolicy", "Forbid".into())
        .set("/spec/successfulJobsHistoryLimit", 10.into())
        .set("/spec/failedJobsHistoryLimit", 10.into())
        .set("/spec/jobTemplate/spec", job_spec(pod_annotations))
        .value()
        .to_string()
}

/// A Job `name` in `ns` (no retries) whose pod runs `run_duration` (a Go duration; kwok's
/// default is about a second) and exits 0.
pub fn job(ns: &str, name: &str, run_duration: Option<&str>) -> String {
    let mut annotations = serde_json::Map::new();
    if let Some(d) = run_duration {
        annotations.insert("kubefacts.test/run-duration".into(), d.into());
    }
    fixtures::job(ns, name).spec(job_spec(annotations)).value().to_string()
}

/// A Job spec without retries: one container (kwok pulls no image) whose pod carries
/// `pod_annotations` (kwok's Stages read them).
fn job_spec(pod_annotations: serde_json::Map<String, Value>) -> Value {
    serde_json::json!({
        "backoffLimit": 0,
        "template": {
            "metadata": {"annotations": pod_annotations},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "kubefacts.test/none:0"}],
            },
        },
    })
}

/// `kubefacts watch` and `kubefacts process` on the cluster and the broker, with their own
/// topics, consumer groups and logs.
pub struct Pipeline {
    pub infra: Infra,
    pub cluster: Cluster,
    pub dir: tempfile::TempDir,
    pub prefix: String,
    pub config: PathBuf,
    pub watcher: Option<KillOnDrop>,
    pub processor: Option<KillOnDrop>,
}

impl Pipeline {
    /// A pipeline watching `namespaces` (its leader Lease lives in the first), with `extra`
    /// TOML appended to the pipeline file.
    pub fn new(namespaces: &[&str], extra: &str) -> Pipeline {
        let (infra, cluster) = (infra(), cluster());
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}.", unique_name("k8s"));
        let app = unique_name("k8s-app");
        let config = dir.path().join("pipeline.toml");
        let list = namespaces.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ");
        std::fs::write(
            &config,
            format!(
                "[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\n\n\
                 [watch]\nnamespaces = [{list}]\nheartbeat_interval_ms = 1000\n\
                 leases = [\"kube-system/kube-controller-manager\"]\n\n\
                 [watch.leader]\nlease_namespace = \"{}\"\nlease_duration_secs = 4\nrenew_deadline_secs = 3\n\
                 retry_period_secs = 1\n\n{extra}\n",
                namespaces[0]
            ),
        )
        .unwrap();
        Pipeline { infra, cluster, dir, prefix, config, watcher: None, processor: None }
    }

    fn spawn(&self, name: &str, args: &[&str], kubeconfig: Option<&Path>) -> KillOnDrop {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefacts"));
        cmd.args(args).args(["--bootstrap", &self.infra.bootstrap]).arg("--config").arg(&self.config);
        if let Some(k) = kubeconfig {
            cmd.arg("--kubeconfig").arg(k);
        }
        cmd.env("RUST_LOG", "kubefacts=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(KillOnDrop)
            .unwrap_or_else(|e| panic!("cannot start kubefacts {name}: {e}"))
    }

    /// Starts `kubefacts watch` as the cluster admin (or with `kubeconfig`).
    pub fn start_watcher(&mut self, instance: &str, kubeconfig: Option<&Path>) {
        let kubeconfig = kubeconfig.unwrap_or(&self.cluster.kubeconfig).to_owned();
        let args = ["watch", "--create-topics", "--partitions", "3", "--instance-id", instance];
        self.watcher = Some(self.spawn(&format!("watch-{instance}"), &args, Some(&kubeconfig)));
    }

    /// Starts `kubefacts process` with the default pipeline's stages.
    pub fn start_processor(&mut self) {
        let args = ["process", "--create-topics", "--partitions", "3", "--instance-id", "a"];
        self.processor = Some(self.spawn("process", &args, None));
    }

    /// Starts `kubefacts cleaner` (dry unless `apply`) and returns it.
    pub fn start_cleaner(&self, apply: bool) -> KillOnDrop {
        let mut args = vec!["cleaner", "--create-topics", "--partitions", "3", "--instance-id", "c"];
        if apply {
            args.push("--apply");
        }
        self.spawn("cleaner", &args, Some(&self.cluster.kubeconfig))
    }

    /// Stops the watcher with SIGKILL (no goodbye, no Lease release).
    pub fn kill_watcher(&mut self) {
        if let Some(mut w) = self.watcher.take() {
            w.kill().unwrap();
            w.wait().unwrap();
        }
    }

    /// A topic's full name.
    pub fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Every committed value of a topic (empty when it does not exist yet), with its key.
    pub fn read(&self, name: &str) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
        let topic = self.topic(name);
        if !topic_exists(&self.infra.bootstrap, &topic) {
            return Vec::new();
        }
        read_topic(&self.infra.bootstrap, &topic).into_iter().map(|r| (r.key, r.value)).collect()
    }

    /// Every record of a topic written so far, decoded as `T`.
    pub async fn decoded<T: serde::de::DeserializeOwned>(&self, topic: &str) -> Vec<T> {
        let codec = Codec::new(None).unwrap();
        let mut out = Vec::new();
        for (_, v) in tokio::task::block_in_place(|| self.read(topic)) {
            out.push(codec.decode_as(&v).await.unwrap());
        }
        out
    }

    /// Every job-run fact written so far, decoded.
    pub async fn runs(&self) -> Vec<JobRun> {
        self.decoded("job-run-facts.v1").await
    }

    /// Every log line of the watcher and the processor.
    pub fn logs(&self) -> String {
        logs_in(self.dir.path())
    }
}

/// Polls `f` every second until it returns `Some` or `secs` pass; panics with `what` and
/// the pipeline's logs then.
pub async fn wait_for<T>(p: &Pipeline, secs: u64, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(Instant::now() < deadline, "waited {secs} s for {what}\n{}", p.logs());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The finished Jobs of `ns` as the Job controller recorded them: name → (uid, terminal
/// condition type, its reason, succeeded, failed).
pub fn finished_jobs(cluster: &Cluster, ns: &str) -> Vec<FinishedJob> {
    let jobs = cluster.get(&["jobs", "-n", ns]);
    let mut out = Vec::new();
    for job in jobs["items"].as_array().unwrap() {
        let conditions = job["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let terminal = conditions
            .iter()
            .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True");
        let Some(c) = terminal else { continue };
        out.push(FinishedJob {
            name: job["metadata"]["name"].as_str().unwrap().to_owned(),
            uid: job["metadata"]["uid"].as_str().unwrap().to_owned(),
            owner: job["metadata"]["ownerReferences"][0]["name"].as_str().map(str::to_owned),
            condition: c["type"].as_str().unwrap().to_owned(),
            reason: c["reason"].as_str().map(str::to_owned),
            succeeded: job["status"]["succeeded"].as_i64().unwrap_or(0) as i32,
            failed: job["status"]["failed"].as_i64().unwrap_or(0) as i32,
        });
    }
    out
}

/// A finished Job as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedJob {
    pub name: String,
    pub uid: String,
    /// The controlling CronJob's name.
    pub owner: Option<String>,
    /// `Complete` or `Failed`.
    pub condition: String,
    pub reason: Option<String>,
    pub succeeded: i32,
    pub failed: i32,
}
