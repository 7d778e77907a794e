//! The Helm chart `deploy/helm/kubefacts` (docs/DEPLOY.md), rendered by the real helm
//! (`$KUBEFACTS_HELM`, built by scripts/k8s/build.sh from helm.sh/helm/v4) for several value
//! sets. Each test names what it pins and spells it out: every RBAC rule, every container and
//! its arguments, every probe, the security context, the cleaner's and the forwarder's
//! absence by default, the cleaner's dry run, Secrets only by reference, the values schema,
//! and `deploy/kubernetes/rbac.yaml` being a fresh render of the chart's RBAC templates.
//! Nothing here is derived from the chart itself: deleting a rule, a container or a probe
//! from a template fails a test. Installing the chart into the test control plane is the
//! end-to-end test's job.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use serde_json::{Value, json};

const CHART: &str = "deploy/helm/kubefacts";
const RELEASE: &str = "kubefacts";
const NAMESPACE: &str = "kubefacts";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The helm binary; without `$KUBEFACTS_HELM` the test fails saying how to get one.
fn helm_bin() -> PathBuf {
    let path = std::env::var_os("KUBEFACTS_HELM").unwrap_or_else(|| {
        panic!(
            "KUBEFACTS_HELM is not set: it names the helm binary scripts/k8s/build.sh builds from \
             the Go module proxy. Run scripts/k8s/up.sh and `source .cache/k8s/run/env` (scripts/test.sh \
             does both), or run scripts/k8s/build.sh and export \
             KUBEFACTS_HELM=~/.cache/kubefacts/k8s/<k8s-version>/bin/helm"
        )
    });
    let path = PathBuf::from(path);
    assert!(path.is_file(), "KUBEFACTS_HELM={} is not a file", path.display());
    path
}

/// A throwaway HOME for helm's cache and config, shared by the tests of this binary.
fn helm_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().expect("temp dir")).path()
}

/// Runs helm with `args`: (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let home = helm_home();
    let out = Command::new(helm_bin())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("run helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A values file holding `yaml`, kept until the end of the test binary.
fn values_file(yaml: &str) -> String {
    let dir = helm_home().join("values");
    std::fs::create_dir_all(&dir).unwrap();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let path = dir.join(format!("{}.yaml", N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)));
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

/// `helm template` of the chart with `values` (YAML); stdout, or Err(stderr).
fn try_template(values: &str) -> Result<String, String> {
    let file = values_file(values);
    let (ok, out, err) = helm(&["template", RELEASE, CHART, "--namespace", NAMESPACE, "-f", &file]);
    if ok { Ok(out) } else { Err(err) }
}

/// The objects the chart renders with `values`.
fn render(values: &str) -> Vec<Value> {
    let text = try_template(values).unwrap_or_else(|e| panic!("helm template failed:\n{e}"));
    parse_docs(&text)
}

fn parse_docs(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Every option of the chart on: cleaner applying, alerts, SASL_SSL with mutual TLS, a
/// registry with its own CA and basic auth, namespaced watching, monitoring.
const ALL: &str = r#"
pipeline:
  cluster: prod-eu
  topicPrefix: facts.
  applicationId: kf
  createTopics: true
  partitions: 6
  extra: |
    [cleanup]
    job_retention_secs = 7200
kafka:
  bootstrap: kafka-0.kafka:9093
  securityProtocol: sasl_ssl
  tls: {caSecret: kafka-ca, caKey: ca.pem, clientSecret: kafka-client}
  sasl:
    mechanism: SCRAM-SHA-256
    watcher: {username: u-watcher, existingSecret: s-watcher, passwordKey: pw}
    process: {username: u-process, existingSecret: s-process, passwordKey: pw}
    cleaner: {username: u-cleaner, existingSecret: s-cleaner, passwordKey: pw}
    alerts: {username: u-alerts, existingSecret: s-alerts, passwordKey: pw}
  properties: {client.rack: eu-west-1a}
registry:
  url: https://registry.example:8081
  caSecret: registry-ca
  username: kubefacts
  existingSecret: registry-auth
watch:
  namespaces: [etl, batch]
  leases: [kube-system/kube-controller-manager, kube-system/kube-scheduler, ops/batch-manager]
process: {replicas: 3, numStreamThreads: 2}
cleaner: {enabled: true, apply: true, maxDeletesPerSec: 5}
alerts: {enabled: true, alertmanagerUrl: "http://alertmanager.monitoring:9093"}
monitoring:
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true, labels: {release: prom}}
"#;

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", kinds_and_names(objs)))
}

fn find_in<'a>(objs: &'a [Value], kind: &str, name: &str, namespace: &str) -> &'a Value {
    objs.iter()
        .find(|o| {
            o["kind"] == kind && o["metadata"]["name"] == name && o["metadata"]["namespace"] == namespace
        })
        .unwrap_or_else(|| panic!("no {kind} {namespace}/{name} among {:?}", kinds_and_names(objs)))
}

fn kinds_and_names(objs: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = objs
        .iter()
        .map(|o| {
            format!("{} {}", o["kind"].as_str().unwrap_or("?"), o["metadata"]["name"].as_str().unwrap_or("?"))
        })
        .collect();
    v.sort();
    v
}

fn rules(role: &Value) -> &Vec<Value> {
    role["rules"].as_array().expect("rules")
}

/// The only container of a workload's Pod template.
fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    let cs = workload["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    assert_eq!(cs.len(), 1, "one container in {}", workload["metadata"]["name"]);
    assert_eq!(cs[0]["name"], name);
    &cs[0]
}

fn args(c: &Value) -> Vec<&str> {
    c["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("string arg")).collect()
}

fn env<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"].as_array().expect("env").iter().find(|e| e["name"] == name)
}

fn env_value<'a>(c: &'a Value, name: &str) -> &'a str {
    env(c, name).and_then(|e| e["value"].as_str()).unwrap_or_else(|| panic!("no env {name}: {}", c["env"]))
}

/// The pipeline file of the ConfigMap, parsed and validated by kubefacts itself.
fn pipeline(objs: &[Value]) -> (String, kubefacts::config::PipelineConfig) {
    let text = find(objs, "ConfigMap", "kubefacts-pipeline")["data"]["pipeline.toml"]
        .as_str()
        .expect("pipeline.toml")
        .to_owned();
    let cfg = kubefacts::config::PipelineConfig::parse(&text, "the chart's ConfigMap")
        .unwrap_or_else(|e| panic!("the rendered pipeline file is refused: {e}\n{text}"));
    (text, cfg)
}

// ------------------------------------------------------------------------------------------

#[test]
fn lint_strict_passes_with_defaults_and_with_everything_enabled() {
    let (ok, out, err) = helm(&["lint", "--strict", CHART]);
    assert!(ok, "helm lint --strict (defaults):\n{out}{err}");
    let all = values_file(ALL);
    let (ok, out, err) = helm(&["lint", "--strict", CHART, "-f", &all]);
    assert!(ok, "helm lint --strict (everything on):\n{out}{err}");
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn chart_app_version_and_default_image_tag_are_the_crate_version() {
    let chart: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo(&format!("{CHART}/Chart.yaml"))).unwrap())
            .unwrap();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["version"], "0.1.0");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let objs = render("");
    let c = container(find(&objs, "Deployment", "kubefacts-watcher"), "watcher");
    assert_eq!(c["image"], format!("kubefacts:{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    let objs = render("image: {repository: registry.example/kubefacts, tag: dev, pullPolicy: Always}");
    let c = container(find(&objs, "StatefulSet", "kubefacts-process"), "process");
    assert_eq!(c["image"], "registry.example/kubefacts:dev");
    assert_eq!(c["imagePullPolicy"], "Always");
}

#[test]
fn inputs_keep_two_weeks_by_default_and_forever_when_asked() {
    // A live deployment's disk is bounded (issue 47); the code's default stays forever, for
    // replays of recorded traces.
    let (_, cfg) = pipeline(&render(""));
    assert_eq!(cfg.topics.retention.inputs_ms, 14 * 24 * 3_600_000);
    assert_eq!(kubefacts::config::RetentionConfig::default().inputs_ms, -1);
    let (_, cfg) = pipeline(&render("pipeline:\n  inputRetentionMs: -1\n"));
    assert_eq!(cfg.topics.retention.inputs_ms, -1);
    assert!(try_template("pipeline:\n  inputRetentionMs: -2\n").is_err(), "the schema refuses -2");
}

#[test]
fn by_default_the_watcher_and_process_are_installed_and_no_cleaner_nor_alerts() {
    let objs = render("");
    assert_eq!(
        kinds_and_names(&objs),
        [
            "ClusterRole kubefacts-watcher",
            "ClusterRoleBinding kubefacts-watcher",
            "ConfigMap kubefacts-pipeline",
            "Deployment kubefacts-watcher",
            "PodDisruptionBudget kubefacts-process",
            "PodDisruptionBudget kubefacts-watcher",
            "Role kubefacts-watcher-leader-election",
            "RoleBinding kubefacts-watcher-leader-election",
            "Service kubefacts-process",
            "Service kubefacts-watcher",
            "ServiceAccount kubefacts-watcher",
            "StatefulSet kubefacts-process",
        ]
    );
    let text = try_template("").unwrap();
    assert!(!text.contains("cleaner"), "nothing of the cleaner is rendered by default");
    assert!(!text.contains("alertmanager"), "nothing of the alerts forwarder is rendered by default");
    assert!(!text.contains("\"delete\""), "no delete verb by default");
    // Nothing namespaced outside the release namespace.
    for o in &objs {
        let ns = &o["metadata"]["namespace"];
        assert!(ns.is_null() || ns == NAMESPACE, "{} {} in {ns}", o["kind"], o["metadata"]["name"]);
    }
}

#[test]
fn everything_enabled_renders_these_objects() {
    let objs = render(ALL);
    assert_eq!(
        kinds_and_names(&objs),
        [
            "ClusterRole kubefacts-cleaner",
            "ClusterRole kubefacts-watcher",
            "ClusterRoleBinding kubefacts-cleaner",
            "ClusterRoleBinding kubefacts-watcher",
            "ConfigMap kubefacts-pipeline",
            "Deployment kubefacts-alerts",
            "Deployment kubefacts-watcher",
            "PodDisruptionBudget kubefacts-process",
            "PodDisruptionBudget kubefacts-watcher",
            "PrometheusRule kubefacts",
            "Role kubefacts-watcher",
            "Role kubefacts-watcher",
            "Role kubefacts-watcher-leader-election",
            "RoleBinding kubefacts-watcher",
            "RoleBinding kubefacts-watcher",
            "RoleBinding kubefacts-watcher-leader-election",
            "Service kubefacts-alerts",
            "Service kubefacts-cleaner",
            "Service kubefacts-process",
            "Service kubefacts-watcher",
            "ServiceAccount kubefacts-cleaner",
            "ServiceAccount kubefacts-watcher",
            "ServiceMonitor kubefacts",
            "StatefulSet kubefacts-cleaner",
            "StatefulSet kubefacts-process",
        ]
    );
}

#[test]
fn watcher_cluster_role_is_list_watch_of_what_it_observes_and_the_named_leases() {
    let objs = render("");
    let role = find(&objs, "ClusterRole", "kubefacts-watcher");
    assert_eq!(
        rules(role),
        &vec![
            json!({"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "resourceNames": ["kube-controller-manager", "kube-scheduler"], "verbs": ["list", "watch"]}),
        ]
    );
    let binding = find(&objs, "ClusterRoleBinding", "kubefacts-watcher");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubefacts-watcher"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kubefacts-watcher", "namespace": NAMESPACE}])
    );
    let (_, cfg) = pipeline(&objs);
    assert_eq!(cfg.watch.leases, ["kube-system/kube-controller-manager", "kube-system/kube-scheduler"]);
}

#[test]
fn watcher_leader_election_role_creates_and_holds_only_its_own_lease_in_the_release_namespace() {
    let objs = render("");
    let role = find_in(&objs, "Role", "kubefacts-watcher-leader-election", NAMESPACE);
    assert_eq!(
        rules(role),
        &vec![
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "resourceNames": ["kubefacts-watcher"], "verbs": ["get", "update", "list", "watch"]}),
        ]
    );
    let binding = find_in(&objs, "RoleBinding", "kubefacts-watcher-leader-election", NAMESPACE);
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubefacts-watcher-leader-election"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kubefacts-watcher", "namespace": NAMESPACE}])
    );
    // The Lease the Role names is the one the pipeline file elects on, in $POD_NAMESPACE.
    let (_, cfg) = pipeline(&objs);
    assert_eq!(cfg.watch.leader.lease_name, "kubefacts-watcher");
    assert_eq!(cfg.watch.leader.lease_namespace, None);
    // A renamed Lease moves both.
    let objs = render("watch: {leaseName: my-lease}");
    let role = find(&objs, "Role", "kubefacts-watcher-leader-election");
    assert_eq!(rules(role)[1]["resourceNames"], json!(["my-lease"]));
    assert_eq!(pipeline(&objs).1.watch.leader.lease_name, "my-lease");
}

#[test]
fn watched_namespaces_move_pods_jobs_cronjobs_into_a_role_per_namespace() {
    let objs = render(ALL);
    let role = find(&objs, "ClusterRole", "kubefacts-watcher");
    assert_eq!(
        rules(role),
        &vec![
            json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "resourceNames": ["kube-controller-manager", "kube-scheduler", "batch-manager"],
                   "verbs": ["list", "watch"]}),
        ]
    );
    for ns in ["etl", "batch"] {
        let role = find_in(&objs, "Role", "kubefacts-watcher", ns);
        assert_eq!(
            rules(role),
            &vec![
                json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}),
                json!({"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["list", "watch"]}),
            ]
        );
        let binding = find_in(&objs, "RoleBinding", "kubefacts-watcher", ns);
        assert_eq!(binding["roleRef"]["name"], "kubefacts-watcher");
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "kubefacts-watcher", "namespace": NAMESPACE}])
        );
    }
    let (_, cfg) = pipeline(&objs);
    assert_eq!(cfg.watch.namespaces, ["etl", "batch"]);
    assert_eq!(
        cfg.watch.leases,
        ["kube-system/kube-controller-manager", "kube-system/kube-scheduler", "ops/batch-manager"]
    );
}

#[test]
fn cleaner_role_is_get_and_delete_of_jobs_only_bound_to_its_own_service_account() {
    let objs = render("cleaner: {enabled: true}");
    let role = find(&objs, "ClusterRole", "kubefacts-cleaner");
    assert_eq!(
        rules(role),
        &vec![json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "delete"]})]
    );
    let binding = find(&objs, "ClusterRoleBinding", "kubefacts-cleaner");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubefacts-cleaner"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kubefacts-cleaner", "namespace": NAMESPACE}])
    );
    find_in(&objs, "ServiceAccount", "kubefacts-cleaner", NAMESPACE);
    let sts = find(&objs, "StatefulSet", "kubefacts-cleaner");
    assert_eq!(sts["spec"]["template"]["spec"]["serviceAccountName"], "kubefacts-cleaner");
    // delete appears nowhere else.
    for o in &objs {
        for r in o["rules"].as_array().into_iter().flatten() {
            if r["verbs"].as_array().unwrap().contains(&json!("delete")) {
                assert_eq!(o["metadata"]["name"], "kubefacts-cleaner", "{r}");
            }
        }
    }
}

#[test]
fn cleaner_runs_dry_unless_apply_is_set() {
    let objs = render("cleaner: {enabled: true}");
    let c = container(find(&objs, "StatefulSet", "kubefacts-cleaner"), "cleaner");
    assert_eq!(
        args(c),
        [
            "cleaner",
            "--config",
            "/etc/kubefacts/pipeline.toml",
            "--metrics-addr",
            "0.0.0.0:9464",
            "--log-format",
            "text"
        ]
    );
    let objs = render("cleaner: {enabled: true, apply: true}");
    let c = container(find(&objs, "StatefulSet", "kubefacts-cleaner"), "cleaner");
    assert_eq!(
        args(c),
        [
            "cleaner",
            "--apply",
            "--config",
            "/etc/kubefacts/pipeline.toml",
            "--metrics-addr",
            "0.0.0.0:9464",
            "--log-format",
            "text"
        ]
    );
    // apply without enabled installs nothing.
    let objs = render("cleaner: {apply: true}");
    assert!(!kinds_and_names(&objs).iter().any(|n| n.contains("cleaner")), "{:?}", kinds_and_names(&objs));
}

#[test]
fn every_workload_runs_its_verb_with_the_pipeline_file_and_the_metrics_port() {
    let objs = render(ALL);
    let common = [
        "--config",
        "/etc/kubefacts/pipeline.toml",
        "--metrics-addr",
        "0.0.0.0:9464",
        "--log-format",
        "text",
    ];
    let with =
        |head: &[&'static str]| -> Vec<&'static str> { head.iter().chain(common.iter()).copied().collect() };
    let watcher = find(&objs, "Deployment", "kubefacts-watcher");
    assert_eq!(args(container(watcher, "watcher")), with(&["watch", "--create-topics", "--partitions", "6"]));
    let process = find(&objs, "StatefulSet", "kubefacts-process");
    assert_eq!(args(container(process, "process")), with(&["process"]));
    let cleaner = find(&objs, "StatefulSet", "kubefacts-cleaner");
    assert_eq!(
        args(container(cleaner, "cleaner")),
        with(&["cleaner", "--apply", "--max-deletes-per-sec", "5", "--create-topics"])
    );
    let alerts = find(&objs, "Deployment", "kubefacts-alerts");
    assert_eq!(
        args(container(alerts, "alerts")),
        with(&["alerts", "--alertmanager", "http://alertmanager.monitoring:9093", "--severity", "warning"])
    );
    // Defaults: no topic creation.
    let objs = render("");
    let watcher = find(&objs, "Deployment", "kubefacts-watcher");
    assert_eq!(args(container(watcher, "watcher")), with(&["watch"]));
    assert_eq!(watcher["spec"]["replicas"], 2);
    let process = find(&objs, "StatefulSet", "kubefacts-process");
    assert_eq!(args(container(process, "process")), with(&["process"]));
    assert_eq!(process["spec"]["replicas"], 2);
    // Each mounts the pipeline ConfigMap where --config reads it, and serves on `metrics`.
    for (kind, name, c) in
        [("Deployment", "kubefacts-watcher", "watcher"), ("StatefulSet", "kubefacts-process", "process")]
    {
        let w = find(&objs, kind, name);
        let c = container(w, c);
        assert_eq!(c["ports"], json!([{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]));
        let mounts = c["volumeMounts"].as_array().unwrap();
        assert!(
            mounts.contains(&json!({"name": "pipeline", "mountPath": "/etc/kubefacts/pipeline.toml",
                                         "subPath": "pipeline.toml", "readOnly": true})),
            "{mounts:?}"
        );
        let vols = w["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
        assert!(
            vols.contains(&json!({"name": "pipeline", "configMap": {"name": "kubefacts-pipeline"}})),
            "{vols:?}"
        );
    }
}

#[test]
fn alerts_forwarder_is_off_by_default_and_needs_an_alertmanager_url() {
    let text = try_template("").unwrap();
    assert!(!text.contains("kubefacts-alerts"), "no alerts objects by default");
    let err = try_template("alerts: {enabled: true}").expect_err("refused without a URL");
    assert!(err.contains("alerts.alertmanagerUrl"), "{err}");
}

#[test]
fn every_workload_probes_healthz_for_liveness_and_readyz_for_readiness_on_the_metrics_port() {
    let objs = render(ALL);
    for (kind, name, c) in [
        ("Deployment", "kubefacts-watcher", "watcher"),
        ("StatefulSet", "kubefacts-process", "process"),
        ("StatefulSet", "kubefacts-cleaner", "cleaner"),
        ("Deployment", "kubefacts-alerts", "alerts"),
    ] {
        let c = container(find(&objs, kind, name), c);
        assert_eq!(
            c["livenessProbe"]["httpGet"],
            json!({"path": "/healthz", "port": "metrics"}),
            "{name} liveness"
        );
        assert_eq!(
            c["readinessProbe"]["httpGet"],
            json!({"path": "/readyz", "port": "metrics"}),
            "{name} readiness"
        );
        assert_eq!(
            c["startupProbe"]["httpGet"],
            json!({"path": "/healthz", "port": "metrics"}),
            "{name} startup"
        );
        assert_eq!(c["livenessProbe"]["periodSeconds"], 10, "{name}");
        assert_eq!(c["livenessProbe"]["failureThreshold"], 3, "{name}");
        assert_eq!(c["startupProbe"]["periodSeconds"], 5, "{name}");
        assert_eq!(c["startupProbe"]["failureThreshold"], 60, "{name}");
    }
}

#[test]
fn every_container_is_non_root_read_only_unprivileged_with_no_capabilities() {
    let objs = render(ALL);
    let mut seen = 0;
    for w in objs.iter().filter(|o| o["kind"] == "Deployment" || o["kind"] == "StatefulSet") {
        let pod = &w["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                   "seccompProfile": {"type": "RuntimeDefault"}}),
            "{}",
            w["metadata"]["name"]
        );
        for c in pod["containers"].as_array().unwrap() {
            assert_eq!(
                c["securityContext"],
                json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                       "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "privileged": false,
                       "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}),
                "{}",
                c["name"]
            );
            // The read-only root keeps a small writable /tmp.
            assert!(
                c["volumeMounts"].as_array().unwrap().contains(&json!({"name": "tmp", "mountPath": "/tmp"}))
            );
            assert!(c["resources"]["requests"]["memory"].is_string(), "{} requests", c["name"]);
            assert!(c["resources"]["limits"]["memory"].is_string(), "{} limits", c["name"]);
            seen += 1;
        }
    }
    assert_eq!(seen, 4, "watcher, process, cleaner, alerts");
}

#[test]
fn only_the_watcher_and_cleaner_get_a_kubernetes_token() {
    let objs = render(ALL);
    let pod = |kind, name| &find(&objs, kind, name)["spec"]["template"]["spec"];
    assert_eq!(pod("Deployment", "kubefacts-watcher")["serviceAccountName"], "kubefacts-watcher");
    assert_eq!(pod("Deployment", "kubefacts-watcher")["automountServiceAccountToken"], true);
    assert_eq!(pod("StatefulSet", "kubefacts-cleaner")["serviceAccountName"], "kubefacts-cleaner");
    assert_eq!(pod("StatefulSet", "kubefacts-process")["automountServiceAccountToken"], false);
    assert!(pod("StatefulSet", "kubefacts-process")["serviceAccountName"].is_null());
    assert_eq!(pod("Deployment", "kubefacts-alerts")["automountServiceAccountToken"], false);
}

#[test]
fn instance_ids_are_pod_names_and_the_lease_namespace_is_the_pod_namespace() {
    let objs = render("cleaner: {enabled: true}");
    for (kind, name, c) in [
        ("Deployment", "kubefacts-watcher", "watcher"),
        ("StatefulSet", "kubefacts-process", "process"),
        ("StatefulSet", "kubefacts-cleaner", "cleaner"),
    ] {
        let c = container(find(&objs, kind, name), c);
        assert_eq!(
            env(c, "KUBEFACTS_INSTANCE_ID").unwrap()["valueFrom"],
            json!({"fieldRef": {"fieldPath": "metadata.name"}}),
            "{name}"
        );
        assert_eq!(
            env(c, "POD_NAMESPACE").unwrap()["valueFrom"],
            json!({"fieldRef": {"fieldPath": "metadata.namespace"}}),
            "{name}"
        );
    }
    // Stable pod names: process and the cleaner are StatefulSets (their transactional ids
    // carry the instance id), started in parallel, governed by their metrics Service.
    for name in ["kubefacts-process", "kubefacts-cleaner"] {
        let sts = find(&objs, "StatefulSet", name);
        assert_eq!(sts["spec"]["serviceName"], name);
        assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
        let svc = find(&objs, "Service", name);
        assert_eq!(svc["spec"]["clusterIP"], "None");
    }
}

#[test]
fn the_rendered_pipeline_file_is_accepted_by_kubefacts_and_carries_the_values() {
    let (_, cfg) = pipeline(&render(""));
    let default = kubefacts::config::PipelineConfig::embedded_default().unwrap();
    assert_eq!(cfg.cluster, "default");
    // The same topics; only the inputs' retention is the chart's own (two weeks, issue 47).
    let mut topics = default.topics.clone();
    topics.retention.inputs_ms = 1_209_600_000;
    assert_eq!(cfg.topics, topics, "default topics");
    assert_eq!(cfg.process, default.process, "default [process]: the shipped stages and settings");
    assert_eq!(cfg.watch, default.watch, "default [watch]");

    let (text, cfg) = pipeline(&render(ALL));
    assert_eq!(cfg.cluster, "prod-eu");
    assert_eq!(cfg.topics.full(&cfg.topics.jobs), "facts.jobs.v1");
    assert_eq!(cfg.process.application_id, "kf");
    assert_eq!(cfg.process.num_stream_threads, 2);
    assert!(cfg.process.create_topics);
    assert_eq!(cfg.process.partitions, 6);
    assert_eq!(cfg.process.stages.len(), default.process.stages.len(), "every shipped stage");
    assert_eq!(cfg.cleanup.job_retention_secs, 7200, "pipeline.extra is appended");
    assert_eq!(cfg.kafka.properties.get("client.rack").map(String::as_str), Some("eu-west-1a"));
    assert!(!text.contains("password"), "no credential in the pipeline file:\n{text}");

    let whole = "cluster = \"whole\"\n[process]\nnum_stream_threads = 4\n";
    let (text, cfg) =
        pipeline(&render(&format!("pipeline: {{override: {}}}", serde_json::to_string(whole).unwrap())));
    assert_eq!(text.trim_end(), whole.trim_end());
    assert_eq!(cfg.cluster, "whole");
    assert_eq!(cfg.process.num_stream_threads, 4);
}

#[test]
fn credentials_are_mounted_secret_files_never_values() {
    let text = try_template(ALL).unwrap();
    let objs = parse_docs(&text);
    assert!(!objs.iter().any(|o| o["kind"] == "Secret"), "the chart creates no Secret");
    for (kind, name, c, user, secret) in [
        ("Deployment", "kubefacts-watcher", "watcher", "u-watcher", "s-watcher"),
        ("StatefulSet", "kubefacts-process", "process", "u-process", "s-process"),
        ("StatefulSet", "kubefacts-cleaner", "cleaner", "u-cleaner", "s-cleaner"),
        ("Deployment", "kubefacts-alerts", "alerts", "u-alerts", "s-alerts"),
    ] {
        let w = find(&objs, kind, name);
        let c = container(w, c);
        assert_eq!(env_value(c, "KUBEFACTS_BOOTSTRAP"), "kafka-0.kafka:9093");
        assert_eq!(env_value(c, "KUBEFACTS_KAFKA_SECURITY_PROTOCOL"), "sasl_ssl");
        assert_eq!(env_value(c, "KUBEFACTS_KAFKA_SASL_MECHANISM"), "SCRAM-SHA-256");
        assert_eq!(env_value(c, "KUBEFACTS_KAFKA_SASL_USERNAME"), user, "one principal per component");
        assert_eq!(env_value(c, "KUBEFACTS_KAFKA_SASL_PASSWORD_FILE"), "/etc/kubefacts/kafka-sasl/password");
        assert_eq!(env_value(c, "KUBEFACTS_KAFKA_CA_FILE"), "/etc/kubefacts/kafka-ca/ca.crt");
        assert_eq!(
            env_value(c, "KUBEFACTS_KAFKA_CERTIFICATE_FILE"),
            "/etc/kubefacts/kafka-client-tls/tls.crt"
        );
        assert_eq!(env_value(c, "KUBEFACTS_KAFKA_KEY_FILE"), "/etc/kubefacts/kafka-client-tls/tls.key");
        assert_eq!(env_value(c, "KUBEFACTS_REGISTRY"), "https://registry.example:8081");
        assert_eq!(env_value(c, "KUBEFACTS_REGISTRY_CA_FILE"), "/etc/kubefacts/registry-ca/ca.crt");
        assert_eq!(env_value(c, "KUBEFACTS_REGISTRY_USERNAME"), "kubefacts");
        assert_eq!(
            env_value(c, "KUBEFACTS_REGISTRY_PASSWORD_FILE"),
            "/etc/kubefacts/registry-password/password"
        );
        // No variable carries a secret value or a secretKeyRef: secrets are files only.
        for e in c["env"].as_array().unwrap() {
            assert!(e["valueFrom"]["secretKeyRef"].is_null(), "{e}");
        }
        let vols = w["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
        let vol =
            |n: &str| vols.iter().find(|v| v["name"] == n).unwrap_or_else(|| panic!("{name}: no volume {n}"));
        assert_eq!(vol("kafka-sasl")["secret"]["secretName"], secret);
        assert_eq!(vol("kafka-sasl")["secret"]["items"], json!([{"key": "pw", "path": "password"}]));
        assert_eq!(vol("kafka-ca")["secret"]["secretName"], "kafka-ca");
        assert_eq!(vol("kafka-ca")["secret"]["items"], json!([{"key": "ca.pem", "path": "ca.crt"}]));
        assert_eq!(vol("kafka-client-tls")["secret"]["secretName"], "kafka-client");
        assert_eq!(vol("registry-ca")["secret"]["secretName"], "registry-ca");
        assert_eq!(vol("registry-password")["secret"]["secretName"], "registry-auth");
        // Another component's Secret is not mounted here.
        for other in ["s-watcher", "s-process", "s-cleaner", "s-alerts"].iter().filter(|s| **s != secret) {
            assert!(!vols.iter().any(|v| v["secret"]["secretName"] == *other), "{name} mounts {other}");
        }
    }
    // With plaintext (the default) nothing of SASL or TLS is rendered.
    let objs = render("");
    let c = container(find(&objs, "Deployment", "kubefacts-watcher"), "watcher");
    assert_eq!(env_value(c, "KUBEFACTS_KAFKA_SECURITY_PROTOCOL"), "plaintext");
    for var in ["KUBEFACTS_KAFKA_SASL_USERNAME", "KUBEFACTS_KAFKA_SASL_PASSWORD_FILE", "KUBEFACTS_REGISTRY"] {
        assert!(env(c, var).is_none(), "{var} set by default");
    }
}

#[test]
fn sasl_without_a_password_secret_is_refused_naming_the_value() {
    let err = try_template("kafka: {securityProtocol: sasl_ssl}").expect_err("refused");
    assert!(err.contains("kafka.sasl.watcher.existingSecret"), "{err}");
    let err = try_template("registry: {url: 'https://r', username: me}").expect_err("refused");
    assert!(err.contains("registry.existingSecret"), "{err}");
}

#[test]
fn the_schema_rejects_wrong_types_unknown_keys_and_inline_passwords() {
    for (values, needle) in [
        ("watch: {replicas: two}", "replicas"),
        ("process: {numStreamThreads: 0}", "numStreamThreads"),
        ("kafka: {securityProtocol: tls}", "securityProtocol"),
        ("cleaner: {enabled: true, dryRun: false}", "dryRun"),
        ("unknownKey: 1", "unknownKey"),
        ("kafka: {sasl: {watcher: {password: hunter2}}}", "password"),
        ("registry: {password: hunter2}", "password"),
        ("watch: {leases: [kube-controller-manager]}", "leases"),
        ("image: {pullPolicy: Sometimes}", "pullPolicy"),
        ("logFormat: yaml", "logFormat"),
    ] {
        let err = try_template(values).expect_err(values);
        assert!(err.contains("values don't meet the specifications of the schema"), "{values}: {err}");
        assert!(err.contains(needle), "{values}: the error names {needle}: {err}");
        assert!(!err.contains("hunter2"), "the refusal echoes no value: {err}");
    }
    let all = values_file(ALL);
    let (ok, _, err) = helm(&["lint", "--strict", CHART, "-f", &all, "--set", "process.replicas=two"]);
    assert!(!ok, "lint accepts a string replica count: {err}");
}

#[test]
fn disruption_budgets_keep_a_watcher_and_all_but_one_processor() {
    let objs = render("");
    for name in ["kubefacts-watcher", "kubefacts-process"] {
        let pdb = find(&objs, "PodDisruptionBudget", name);
        assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{name}");
        let component = name.trim_start_matches("kubefacts-");
        let workload = objs
            .iter()
            .find(|o| {
                (o["kind"] == "Deployment" || o["kind"] == "StatefulSet") && o["metadata"]["name"] == name
            })
            .unwrap();
        assert_eq!(pdb["spec"]["selector"], workload["spec"]["selector"], "{name}");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"], component);
    }
    let objs = render("watch: {podDisruptionBudget: {enabled: false, maxUnavailable: 1}}");
    assert!(!kinds_and_names(&objs).contains(&"PodDisruptionBudget kubefacts-watcher".to_owned()));
}

#[test]
fn monitoring_scrapes_every_metrics_service_and_ships_the_alert_rules() {
    let objs = render(ALL);
    let sm = find(&objs, "ServiceMonitor", "kubefacts");
    assert_eq!(sm["spec"]["endpoints"], json!([{"port": "metrics", "path": "/metrics", "interval": "30s"}]));
    let selector = sm["spec"]["selector"]["matchLabels"].as_object().unwrap();
    for name in ["kubefacts-watcher", "kubefacts-process", "kubefacts-cleaner", "kubefacts-alerts"] {
        let svc = find(&objs, "Service", name);
        assert_eq!(svc["spec"]["ports"][0]["name"], "metrics", "{name}");
        assert_eq!(svc["spec"]["publishNotReadyAddresses"], true, "{name}");
        for (k, v) in selector {
            assert_eq!(&svc["metadata"]["labels"][k], v, "{name} is selected by the ServiceMonitor");
        }
    }
    let rule = find(&objs, "PrometheusRule", "kubefacts");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let rules_file: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo("deploy/prometheus/kubefacts-alerts.yml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rule["spec"]["groups"], rules_file["groups"],
        "the PrometheusRule holds deploy/prometheus's rules"
    );
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(
        alerts,
        [
            "KubefactsConsumerLagHigh",
            "KubefactsDeadLetters",
            "KubefactsWatcherNotLeader",
            "KubefactsStreamTimeStalled"
        ]
    );
    let text = try_template("").unwrap();
    assert!(!text.contains("monitoring.coreos.com"), "no Prometheus Operator objects by default");
}

#[test]
fn generated_files_equal_a_fresh_render_of_the_chart() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(repo("scripts/helm/render.sh"))
        .args(["--out", &out.path().display().to_string()])
        .env("KUBEFACTS_HELM", helm_bin())
        .status()
        .expect("run scripts/helm/render.sh");
    assert!(status.success(), "scripts/helm/render.sh failed");
    for file in ["deploy/kubernetes/rbac.yaml", "deploy/helm/kubefacts/files/kubefacts-alerts.yml"] {
        let fresh = std::fs::read_to_string(out.path().join(file)).unwrap();
        let committed = std::fs::read_to_string(repo(file)).unwrap();
        assert!(
            fresh == committed,
            "{file} is not what scripts/helm/render.sh writes from the chart: run it and commit the result"
        );
    }
    // And rbac.yaml holds what the chart grants (read back, not only compared).
    let objs = parse_docs(&std::fs::read_to_string(repo("deploy/kubernetes/rbac.yaml")).unwrap());
    assert_eq!(
        kinds_and_names(&objs),
        [
            "ClusterRole kubefacts-cleaner",
            "ClusterRole kubefacts-watcher",
            "ClusterRoleBinding kubefacts-cleaner",
            "ClusterRoleBinding kubefacts-watcher",
            "Namespace kubefacts",
            "Role kubefacts-watcher-leader-election",
            "RoleBinding kubefacts-watcher-leader-election",
            "ServiceAccount kubefacts-cleaner",
            "ServiceAccount kubefacts-watcher",
        ]
    );
    assert_eq!(rules(find(&objs, "ClusterRole", "kubefacts-cleaner")).len(), 1);
}

#[test]
fn notes_say_what_was_installed_how_to_check_readiness_and_how_to_enable_the_cleaner() {
    let notes = |values: &str| {
        let file = values_file(values);
        let (ok, out, err) =
            helm(&["install", "--dry-run=client", RELEASE, CHART, "--namespace", NAMESPACE, "-f", &file]);
        assert!(ok, "helm install --dry-run=client:\n{err}");
        out.split_once("NOTES:\n").expect("NOTES").1.to_owned()
    };
    let text = notes("");
    for line in [
        "Deployment kubefacts-watcher (2 replicas, leader-elected on Lease kubefacts-watcher)",
        "StatefulSet kubefacts-process (2 replicas x 1 stream threads, application kubefacts)",
        "cleaner   not installed",
        "rollout status deployment/kubefacts-watcher",
        "rollout status statefulset/kubefacts-process",
        "curl -s localhost:9464/readyz",
        "--reuse-values --set cleaner.enabled=true",
    ] {
        assert!(text.contains(line), "NOTES lack {line:?}:\n{text}");
    }
    let text = notes("cleaner: {enabled: true}");
    assert!(text.contains("StatefulSet kubefacts-cleaner: dry run"), "{text}");
    assert!(text.contains("--set cleaner.apply=true"), "{text}");
    let text = notes("cleaner: {enabled: true, apply: true}");
    assert!(text.contains("APPLYING (deletes decided Jobs)"), "{text}");
}
