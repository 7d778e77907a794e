//! The chart installed for real (issue 27's "done when"): `helm install` of
//! `deploy/helm/kubefacts` into the test suite's Kubernetes control plane, every object
//! accepted by kube-apiserver; then the watcher, `process` and the cleaner run **from the
//! image** (the private dockerd, host network) as their Pods would: the chart's args, env,
//! rendered pipeline file, security context and ServiceAccount token. The watcher publishes
//! the cluster's Jobs to the test broker, facts appear, every `/readyz` turns ready, and the
//! cleaner (enabled with `apply`) deletes the decided Job and nothing else. `kubefacts
//! report` of the live fact topics equals the report of the in-memory replay of the same
//! observations. With the chart's `jobs` rule removed, a watcher publishes no Job.
//!
//! kwok runs the chart's Pods as fakes (no containers); the containers here are what runs.

mod support;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use kubefacts::{
    codec::Codec,
    config::PipelineConfig,
    journal::JobRun,
    runtime::{
        Writer,
        driver::{LogRecord, MemTopic},
    },
};
use serde_json::{Value, json};
use support::{
    docker::{Container, ContainerSpec, PodContext, container_of_template, docker},
    free_port, infra,
    k8s::{Cluster, cluster, job},
    repo_path, topic_exists, unique_name,
};

const CHART: &str = "deploy/helm/kubefacts";

/// `$KUBEFACTS_HELM`, which scripts/k8s/up.sh exports.
fn helm() -> PathBuf {
    let helm = std::env::var("KUBEFACTS_HELM").unwrap_or_else(|_| {
        panic!(
            "KUBEFACTS_HELM is not set: scripts/k8s/up.sh builds helm and exports it \
             (`source .cache/k8s/run/env`; scripts/test.sh does both)"
        )
    });
    PathBuf::from(helm)
}

fn run_helm(c: &Cluster, args: &[&str]) -> String {
    let out = Command::new(helm()).args(args).arg("--kubeconfig").arg(&c.kubeconfig).output().unwrap();
    assert!(
        out.status.success(),
        "helm {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One installed release and the containers running its workloads.
struct Deployed {
    cluster: Cluster,
    bootstrap: String,
    release: String,
    namespace: String,
    dir: tempfile::TempDir,
    image: String,
    /// The rendered pipeline file, from the chart's ConfigMap, and what it says.
    pipeline_text: String,
    pipeline: PipelineConfig,
    containers: Vec<(String, Container, u16)>,
}

impl Deployed {
    /// The workload `kind/name`'s Pod template, from the API.
    fn template(&self, kind: &str, name: &str) -> Value {
        self.cluster.get(&[kind, "-n", &self.namespace, name])["spec"]["template"].clone()
    }

    /// Runs a Pod of `kind/name` as a container named `pod`; its metrics endpoint gets a free
    /// port (host networking: the chart's one port would collide). Returns the port.
    fn start(&mut self, kind: &str, name: &str, pod: &str) -> u16 {
        let template = self.template(kind, name);
        let dir = self.dir.path().join(pod);
        let ctx = PodContext {
            cluster: &self.cluster,
            name: pod.into(),
            namespace: self.namespace.clone(),
            dir: &dir,
        };
        let mut spec = container_of_template(&template, &self.image, &ctx);
        let port = free_port();
        let chart_port = template["spec"]["containers"][0]["ports"][0]["containerPort"].as_i64().unwrap();
        let rewrite = |s: &mut String| {
            if s.ends_with(&format!(":{chart_port}")) {
                *s = format!("127.0.0.1:{port}");
            }
        };
        spec.args.iter_mut().for_each(rewrite);
        spec.env.iter_mut().for_each(|(_, v)| rewrite(v));
        spec.env.push(("RUST_LOG".into(), "kubefacts=info".into()));
        let container = docker().run(&spec);
        self.containers.push((pod.to_owned(), container, port));
        port
    }

    /// Stops the container of `pod` with SIGTERM (as a Pod is stopped) and removes it.
    fn stop(&mut self, pod: &str) {
        let i = self.containers.iter().position(|(p, _, _)| p == pod).unwrap();
        let (_, container, _) = self.containers.remove(i);
        docker().cli(&["stop", "--time", "30", &container.name]).unwrap();
    }

    fn logs(&self) -> String {
        self.containers.iter().map(|(_, c, _)| c.logs()).collect::<Vec<_>>().join("\n")
    }

    /// A topic's full name (the chart sets the prefix; names are the defaults).
    fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.pipeline.topics.prefix)
    }

    /// Every committed record of an output topic, decoded.
    async fn decoded<T: serde::de::DeserializeOwned>(&self, topic: &str) -> Vec<T> {
        let topic = self.topic(topic);
        if !topic_exists(&self.bootstrap, &topic) {
            return Vec::new();
        }
        let codec = Codec::new(None).unwrap();
        let mut out = Vec::new();
        for r in tokio::task::block_in_place(|| support::read_topic(&self.bootstrap, &topic)) {
            out.push(codec.decode_as(&r.value).await.unwrap());
        }
        out
    }

    /// Whether any record of input `topic` holds `text`.
    fn published(&self, topic: &str, text: &str) -> bool {
        let topic = self.topic(topic);
        topic_exists(&self.bootstrap, &topic)
            && tokio::task::block_in_place(|| support::read_topic(&self.bootstrap, &topic))
                .iter()
                .any(|r| r.value.windows(text.len()).any(|w| w == text.as_bytes()))
    }

    async fn wait_for<T>(&self, secs: u64, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(t) = f().await {
                return t;
            }
            assert!(Instant::now() < deadline, "waited {secs} s for {what}\n{}", self.logs());
            if let Some((pod, _, _)) = self.containers.iter().find(|(_, c, _)| !c.running()) {
                panic!("{pod} stopped while waiting for {what}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// `GET http://127.0.0.1:port/path`'s status, or 0 when nothing answers.
async fn status(port: u16, path: &str) -> u16 {
    let client = kubefacts::http::client_builder().timeout(Duration::from_secs(2)).build().unwrap();
    match client.get(format!("http://127.0.0.1:{port}{path}")).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_and_its_workloads_run_from_the_image() {
    let (c, infra, d) = (cluster(), infra(), docker());
    let t0 = Instant::now();
    let test_image = d.image_of_this_build();
    let image = test_image.name.clone();
    eprintln!("image {image} built in {:.1} s", t0.elapsed().as_secs_f64());
    let (repository, tag) = image.split_once(':').unwrap();

    let namespace = c.namespace("chart", &[]);
    let jobs_ns = c.namespace("chart-jobs", &[]);
    let unwatched = c.namespace("chart-other", &[]);
    // Helm's release names are DNS labels of at most 53 characters.
    let release = unique_name("kf").to_lowercase().replace('_', "-");
    let prefix = format!("{}.", unique_name("chart"));
    let dir = tempfile::tempdir().unwrap();
    let values = json!({
        "image": {"repository": repository, "tag": tag},
        "pipeline": {
            "topicPrefix": prefix,
            "applicationId": unique_name("chart-app"),
            "createTopics": true,
            "partitions": 3,
            // Decide finished Jobs 5 s after they end, swept every 5 s of stream time.
            "extra": "[cleanup]\njob_retention_secs = 5\ncleanup_period_secs = 5\n",
        },
        "kafka": {"bootstrap": infra.bootstrap},
        "watch": {"namespaces": [jobs_ns], "leases": ["kube-system/kube-controller-manager"]},
        "process": {"replicas": 1},
        "cleaner": {"enabled": true, "apply": true},
    });
    let values_file = dir.path().join("values.json");
    std::fs::write(&values_file, values.to_string()).unwrap();

    // 1. helm install: every object of the manifest is accepted and exists.
    run_helm(
        &c,
        &[
            "install",
            &release,
            &repo_path(CHART),
            "--namespace",
            &namespace,
            "--values",
            values_file.to_str().unwrap(),
        ],
    );
    let manifest = run_helm(&c, &["get", "manifest", &release, "--namespace", &namespace]);
    let mut objects = Vec::new();
    for doc in manifest.split("\n---").filter(|d| d.contains("kind:")) {
        let kind = field(doc, "kind");
        let name = field(doc, "name");
        // Namespaced objects name their namespace (Roles live in the watched namespaces).
        let object_ns = doc.contains("\n  namespace: ").then(|| field(doc, "namespace"));
        let mut args = vec!["get", kind.as_str(), name.as_str(), "-o", "name"];
        if let Some(ns) = &object_ns {
            args.extend(["-n", ns.as_str()]);
        }
        c.try_kubectl(&args, None).unwrap_or_else(|e| panic!("{kind}/{name} of the release is missing: {e}"));
        objects.push(format!("{kind}/{name}"));
    }
    for kind in [
        "Deployment",
        "StatefulSet",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "ConfigMap",
        "PodDisruptionBudget",
    ] {
        assert!(objects.iter().any(|o| o.starts_with(&format!("{kind}/"))), "no {kind} in {objects:?}");
    }
    let by_kind = |kind: &str, suffix: &str| {
        objects
            .iter()
            .filter_map(|o| o.strip_prefix(&format!("{kind}/")))
            .find(|n| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("no {kind} named *{suffix} in {objects:?}"))
            .to_owned()
    };
    // The watcher's replicas are interchangeable; process and the cleaner need stable
    // instance ids (their transactional ids), hence StatefulSets.
    let (watcher, process, cleaner) = (
        by_kind("Deployment", "-watcher"),
        by_kind("StatefulSet", "-process"),
        by_kind("StatefulSet", "-cleaner"),
    );
    let config_map = by_kind("ConfigMap", "");
    let pipeline_text = c.get(&["configmap", "-n", &namespace, &config_map])["data"]["pipeline.toml"]
        .as_str()
        .expect("pipeline.toml in the chart's ConfigMap")
        .to_owned();
    let pipeline = PipelineConfig::parse(&pipeline_text, "the chart's ConfigMap").unwrap();

    let mut world = Deployed {
        cluster: c.clone(),
        bootstrap: infra.bootstrap.clone(),
        release,
        namespace: namespace.clone(),
        dir,
        image: image.clone(),
        pipeline_text,
        pipeline,
        containers: Vec::new(),
    };

    // 2. Jobs: one that finishes (decided, then deleted), one that runs on (never decided),
    // one finished in a namespace the watcher does not watch (never seen).
    c.apply(&job(&jobs_ns, "finishes", None));
    c.apply(&job(&jobs_ns, "runs-on", Some("600s")));
    c.apply(&job(&unwatched, "unseen", None));
    let uid = |ns: &str, name: &str| {
        c.get(&["job", "-n", ns, name])["metadata"]["uid"].as_str().unwrap().to_owned()
    };
    let (finishes, runs_on, unseen) =
        (uid(&jobs_ns, "finishes"), uid(&jobs_ns, "runs-on"), uid(&unwatched, "unseen"));

    // 3. The workloads, from the image, as their Pods.
    let watcher_port = world.start("deployment", &watcher, &format!("{watcher}-7d9f-a"));
    let process_port = world.start("statefulset", &process, &format!("{process}-0"));
    let cleaner_port = world.start("statefulset", &cleaner, &format!("{cleaner}-0"));
    for (what, port) in [("watcher", watcher_port), ("process", process_port), ("cleaner", cleaner_port)] {
        world
            .wait_for(120, &format!("{what}'s /readyz to turn ready"), async || {
                (status(port, "/readyz").await == 200).then_some(())
            })
            .await;
        assert_eq!(status(port, "/healthz").await, 200, "{what} is alive");
    }

    // 4. Facts appear, the cleaner deletes the decided Job and nothing else.
    let runs: Vec<JobRun> = world
        .wait_for(180, "the finished Job's run fact", async || {
            let runs: Vec<JobRun> = world.decoded("job-run-facts.v1").await;
            runs.iter().any(|r| r.run_uid == finishes).then_some(runs)
        })
        .await;
    assert!(runs.iter().all(|r| r.run_uid != unseen && r.run_uid != runs_on), "{runs:#?}");
    world
        .wait_for(120, "the cleaner to delete the decided Job", async || {
            c.try_kubectl(&["get", "job", "-n", &jobs_ns, "finishes"], None).is_err().then_some(())
        })
        .await;
    assert_eq!(uid(&jobs_ns, "runs-on"), runs_on, "the running Job is left alone");
    assert_eq!(uid(&unwatched, "unseen"), unseen, "the unwatched Job is left alone");
    assert!(world.published("jobs.v1", "runs-on"), "the watcher published the running Job");
    assert!(
        !world.published("jobs.v1", "unseen"),
        "the watcher published a Job of a namespace it does not watch"
    );

    // 5. `kubefacts report` of the live topics (from the image) equals the report of the
    // in-memory replay of the observations the watcher published.
    world.stop(&format!("{watcher}-7d9f-a"));
    wait_settled(&world).await;
    let live = report_from_image(&world);
    let replay_dir = world.dir.path().join("replay");
    replay_inputs(&world, &replay_dir).await;
    let replayed = report_from_dir(&world, &replay_dir);
    // What was read differs for compacted topics (the broker compacts tables within
    // seconds); the logs' counts must not.
    let (mut live, mut replayed) = (live, replayed);
    for topic in ["job-run-facts.v1", "cleanup-decisions.v1", "coverage-alerts.v1"] {
        let count = |report: &Value| report["read"]["records"][world.topic(topic)].clone();
        assert_eq!(count(&live), count(&replayed), "{topic} records read, live and replayed");
    }
    live.as_object_mut().unwrap().remove("read");
    replayed.as_object_mut().unwrap().remove("read");
    assert_eq!(live, replayed, "the live report differs from the replay's");
    eprintln!(
        "report of the live topics = report of the replay: {} run(s) filed, {} decision(s), {} window(s)",
        live["runs"]["filed"],
        live["cleanup"]["decided"],
        live["runs"]["windows"].as_array().map_or(0, Vec::len)
    );
    let every_run = live["runs"]["every_run"].as_array().expect("the runs listed");
    assert!(every_run.iter().any(|r| r["run_name"] == "finishes" && r["result"] == "SUCCEEDED"), "{live:#}");
    let decisions = live["cleanup"]["decisions"].as_array().unwrap();
    assert!(decisions.iter().any(|d| d["uid"] == finishes.as_str()), "{live:#}");

    // 6. Without the chart's `jobs` rule, a watcher publishes no Job. Watching listed
    // namespaces, the chart grants Pods, Jobs and CronJobs by a Role in each of them.
    let role_name = by_kind("Role", "-watcher");
    let mut role = c.get(&["role", "-n", &jobs_ns, &role_name]);
    let rules = role["rules"].as_array_mut().unwrap();
    let batch = rules.iter_mut().find(|r| r["apiGroups"][0] == "batch").expect("a batch rule");
    batch["resources"] = json!(["cronjobs"]);
    c.kubectl(&["replace", "-f", "-"], Some(&role.to_string()));
    let leases_before = world.decoded_count("leases.v1");
    world.start("deployment", &watcher, &format!("{watcher}-7d9f-b"));
    c.apply(&job(&jobs_ns, "forbidden", None));
    world
        .wait_for(90, "the watcher saying Jobs are forbidden while it publishes Leases", async || {
            let said = world.containers.last().unwrap().1.logs().contains("forbidden");
            (said && world.decoded_count("leases.v1") > leases_before + 3).then_some(())
        })
        .await;
    assert!(!world.published("jobs.v1", "forbidden"), "a Job was published without the jobs rule");
    run_helm(&c, &["uninstall", &world.release, "--namespace", &namespace]);
}

/// `key: value` of the first line of `doc` with that key (the manifest's kind and
/// metadata.name come first in every object helm renders).
fn field(doc: &str, key: &str) -> String {
    let prefix = format!("{key}: ");
    doc.lines()
        .map(str::trim_start)
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in\n{doc}"))
        .trim()
        .trim_matches('"')
        .to_owned()
}

impl Deployed {
    fn decoded_count(&self, topic: &str) -> usize {
        let topic = self.topic(topic);
        if !topic_exists(&self.bootstrap, &topic) {
            return 0;
        }
        tokio::task::block_in_place(|| support::read_topic(&self.bootstrap, &topic)).len()
    }
}

/// Waits until the processors have committed all they can of the inputs: their committed
/// positions stay put for 6 s. (Not "every input record": with the watcher stopped, records
/// after its last heartbeat wait for time on the other partitions, in memory as on Kafka.)
async fn wait_settled(world: &Deployed) {
    let stages =
        support::default_stages(&world.pipeline.topics.prefix, &world.pipeline.process.application_id);
    let positions = || {
        let p =
            tokio::task::block_in_place(|| support::committed_positions(&world.bootstrap, &stages)).unwrap();
        p.iter().map(|p| (p.topic.clone(), p.partition, p.committed)).collect::<Vec<_>>()
    };
    let (deadline, mut last, mut same_since) =
        (Instant::now() + Duration::from_secs(120), positions(), Instant::now());
    while same_since.elapsed() < Duration::from_secs(6) {
        assert!(
            Instant::now() < deadline,
            "process's positions kept moving for 120 s: {last:?}\n{}",
            world.logs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = positions();
        if now != last {
            (last, same_since) = (now, Instant::now());
        }
    }
}

/// `kubefacts report --format json` of the live topics, run from the image with the
/// process Pod's pipeline file.
fn report_from_image(world: &Deployed) -> Value {
    let config_dir = world.dir.path().join("report-config");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = config_dir.join("pipeline.toml");
    std::fs::write(&config, &world.pipeline_text).unwrap();
    make_readable(&config_dir);
    let spec = ContainerSpec {
        name: unique_name("report").to_lowercase().replace('_', "-"),
        image: world.image.clone(),
        args: [
            "report",
            "--config",
            "/etc/kubefacts/pipeline.toml",
            "--bootstrap",
            &world.bootstrap,
            "--format",
            "json",
        ]
        .map(String::from)
        .to_vec(),
        mounts: vec![(config_dir, "/etc/kubefacts".into())],
        user: Some("65532:65532".into()),
        read_only: true,
        ..ContainerSpec::default()
    };
    let out = docker().run_to_end(&spec);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("report printed no JSON ({e}):\n{out}"))
}

/// `kubefacts report --from-dir` of a replay output folder.
fn report_from_dir(world: &Deployed, dir: &Path) -> Value {
    let config = world.dir.path().join("report-config/pipeline.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["report", "--format", "json", "--config"])
        .arg(&config)
        .arg("--from-dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "report --from-dir failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The in-memory replay of the input topics as the watcher published them (partition for
/// partition, heartbeats and their headers kept), written as `replay` writes its output.
///
/// Up to the watcher's last heartbeat: on Kafka, what came after it (Lease renewals, the
/// deleted Job) waits for a later time on every partition, which a stopped watcher never
/// writes; in memory the end of the input releases it (`Gate::close`).
async fn replay_inputs(world: &Deployed, out: &Path) {
    let config = &world.pipeline;
    let codec = Codec::new(None).unwrap();
    let partitions = config.process.partitions;
    let mut topics: BTreeMap<String, MemTopic> = BTreeMap::new();
    for input in kubefacts::observe::InputTopic::ALL {
        let name = input.topic_name(&config.topics);
        let log = tokio::task::block_in_place(|| input_log(&world.bootstrap, &name, partitions));
        topics.insert(name, log);
    }
    let last_beat = topics
        .values()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            p.iter()
                .filter(|r| r.beat)
                .map(|r| r.timestamp_ms)
                .max()
                .expect("a heartbeat on every input partition")
        })
        .min()
        .unwrap();
    for topic in topics.values_mut() {
        for p in &mut topic.partitions {
            p.retain(|r| r.timestamp_ms <= last_beat);
        }
    }
    let dead_letter = config.topics.full(&config.topics.dead_letter);
    kubefacts::pipeline::run_all_in_memory(
        &codec,
        config,
        &config.process.stages,
        &mut topics,
        &dead_letter,
        partitions,
    )
    .await
    .unwrap();
    std::fs::create_dir_all(out).unwrap();
    for log in topics.values() {
        kubefacts::pipeline::write_jsonl(&codec, log, out).await.unwrap();
    }
}

/// Every record of an input topic (an empty topic when the watcher created none), with
/// the heartbeat header read as the runtime reads it.
fn input_log(bootstrap: &str, topic: &str, partitions: i32) -> MemTopic {
    let mut log = MemTopic::new(topic, partitions);
    let client = support::client_config(bootstrap);
    let timeout = Duration::from_secs(60);
    let records = kubefacts::runtime::kafka::bystander::read_to_end(client, "chart-replay", topic, timeout)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_default();
    for r in records {
        let (heartbeat, beat) = (r.is_forwarded_heartbeat(), r.heartbeat_header && r.value.is_some());
        let timestamp_ms = r.timestamp_ms.expect("a record's timestamp");
        let record =
            LogRecord { key: r.key, value: r.value, heartbeat, beat, timestamp_ms, writer: Writer::SOLE };
        log.append(r.partition, record);
    }
    log
}

fn make_readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::set_permissions(entry.unwrap().path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}
