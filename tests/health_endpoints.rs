//! `/healthz` and `/readyz` of the four long-running verbs (docs/METRICS.md, "Health"),
//! each run as a child process with `--metrics-addr` against the test broker (and the fake
//! API server for `watch` and `cleaner`): alive once running, ready only once what its
//! readiness waits for has happened, and saying what it waits for until then.

mod support;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use support::{KillOnDrop, fake_kube::FakeKube, free_port, infra, unique_name};

/// `GET http://<addr><path>`: status and body; `None` while nothing answers.
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let http = kubefacts::http::client_builder().timeout(Duration::from_secs(5)).build().unwrap();
    let response = http.get(format!("http://{addr}{path}")).send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Waits up to `secs` for `path` to answer `status` with a body containing `says`; fails
/// with the last answer and the log when the child exits or time runs out.
async fn wait_for(addr: &str, path: &str, status: u16, says: &str, child: &mut KillOnDrop, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        let exited = child.try_wait().unwrap();
        let logs = || std::fs::read_to_string(log).unwrap_or_default();
        assert!(exited.is_none(), "exited with {exited:?} waiting for {path}\n{}", logs());
        last = get(addr, path).await.or(last);
        if last.as_ref().is_some_and(|(s, body)| *s == status && body.contains(says)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered {status} {says:?}: last {last:?}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kubefacts <args> --metrics-addr 127.0.0.1:<free port>`, its stderr in `<dir>/<name>.log`.
fn spawn(dir: &Path, name: &str, args: &[&str]) -> (KillOnDrop, String, std::path::PathBuf) {
    let addr = format!("127.0.0.1:{}", free_port());
    let log = dir.join(format!("{name}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(args)
        .args(["--metrics-addr", &addr])
        .env("RUST_LOG", "kubefacts=info")
        .env_remove("KUBEFACTS_REGISTRY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    (child, addr, log)
}

#[tokio::test]
async fn process_is_alive_and_ready_once_its_tasks_are_restored() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let input = infra.topic("health-in", 3).await;
    let output = unique_name("health-out");
    let app = unique_name("health-app");
    let args = ["process", "--processor", "probe", "--input", &input, "--output", &output, "--create-topics"];
    let id = ["--application-id", &app, "--instance-id", "a", "--bootstrap", &infra.bootstrap];
    let (mut child, addr, log) = spawn(dir.path(), "process", &[&args[..], &id[..]].concat());
    wait_for(&addr, "/readyz", 200, "ready", &mut child, &log).await;
    wait_for(&addr, "/healthz", 200, "alive", &mut child, &log).await;
    wait_for(&addr, "/metrics", 200, "kubefacts_records_in", &mut child, &log).await;
}

#[tokio::test]
async fn alerts_is_ready_only_once_its_topic_exists_and_is_read_to_its_end() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique_name("health-alerts");
    let args = ["alerts", "--alertmanager", "http://127.0.0.1:9", "--topic", &topic];
    let (mut child, addr, log) =
        spawn(dir.path(), "alerts", &[&args[..], &["--bootstrap", &infra.bootstrap]].concat());
    wait_for(
        &addr,
        "/readyz",
        503,
        &format!("not ready: alerts: {topic} does not exist yet"),
        &mut child,
        &log,
    )
    .await;
    wait_for(&addr, "/healthz", 200, "alive", &mut child, &log).await;
    infra.create_topic(&topic, 2).await;
    wait_for(&addr, "/readyz", 200, "ready", &mut child, &log).await;
}

#[tokio::test]
async fn watch_is_ready_once_an_election_round_decided_leading_or_standing_by() {
    let infra = infra();
    let kube = FakeKube::start().await;
    let dir = tempfile::tempdir().unwrap();
    kube.write_kubeconfig(&dir.path().join("kubeconfig"));
    let prefix = format!("{}.", unique_name("health-watch"));
    let pipeline = dir.path().join("pipeline.toml");
    std::fs::write(
        &pipeline,
        format!(
            "[topics]\nprefix = \"{prefix}\"\n\n[watch.leader]\nlease_namespace = \"kubefacts\"\n\
             lease_duration_secs = 3\nrenew_deadline_secs = 2\nretry_period_secs = 1\n"
        ),
    )
    .unwrap();
    let (kubeconfig, config) = (dir.path().join("kubeconfig"), pipeline.to_str().unwrap().to_owned());
    let run = |name: &str| {
        let args = ["watch", "--create-topics", "--partitions", "3", "--instance-id", name];
        let rest = ["--bootstrap", &infra.bootstrap, "--kubeconfig", kubeconfig.to_str().unwrap()];
        spawn(dir.path(), name, &[&args[..], &rest[..], &["--config", &config]].concat())
    };
    // A leader and a standby: both ready, both alive (the standby publishes nothing).
    let (mut leader, leader_addr, leader_log) = run("w1");
    wait_for(&leader_addr, "/readyz", 200, "ready", &mut leader, &leader_log).await;
    let (mut standby, standby_addr, standby_log) = run("w2");
    wait_for(&standby_addr, "/readyz", 200, "ready", &mut standby, &standby_log).await;
    for (child, addr, log) in
        [(&mut leader, &leader_addr, &leader_log), (&mut standby, &standby_addr, &standby_log)]
    {
        wait_for(addr, "/healthz", 200, "alive", child, log).await;
    }
}

#[tokio::test]
async fn cleaner_is_ready_once_it_polls_its_group() {
    let infra = infra();
    let kube = FakeKube::start().await;
    let dir = tempfile::tempdir().unwrap();
    kube.write_kubeconfig(&dir.path().join("kubeconfig"));
    let prefix = format!("{}.", unique_name("health-cleaner"));
    let app = unique_name("health-cleaner-app");
    let pipeline = dir.path().join("pipeline.toml");
    std::fs::write(
        &pipeline,
        format!("[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\n"),
    )
    .unwrap();
    let args = ["cleaner", "--create-topics", "--instance-id", "c", "--bootstrap", &infra.bootstrap];
    let kubeconfig = dir.path().join("kubeconfig");
    let files = ["--kubeconfig", kubeconfig.to_str().unwrap(), "--config", pipeline.to_str().unwrap()];
    let (mut child, addr, log) = spawn(dir.path(), "cleaner", &[&args[..], &files[..]].concat());
    wait_for(&addr, "/readyz", 200, "ready", &mut child, &log).await;
    wait_for(&addr, "/healthz", 200, "alive", &mut child, &log).await;
}
