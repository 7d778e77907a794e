//! Issue 46: a registry that is down when the verbs start is waited for, never a reason to
//! exit. The schema registry is stopped (SIGSTOP) before `publish`, `process` and the
//! cleaner start on a fresh prefix, so none has registered a schema: all must wait for 60 s
//! without exiting, `/readyz` must answer 503 naming the registry, and once the registry
//! resumes `process`'s `/readyz` turns 200, the trace is published, the cleaner registers
//! its schemas and every output equals `kubefacts replay` with nothing dead-lettered.

mod support;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::codec::Codec;
use support::{
    KillOnDrop, Scratch, all_committed, default_stages, free_port, infra, outputs::compare_outputs,
    paused::PausedRegistry, process_command, read_records, replay_finished, simulate_small,
};

/// `/readyz` of the process: its status (0 if nothing answered) and body.
fn readyz(port: u16) -> (u16, String) {
    let url = format!("http://127.0.0.1:{port}/readyz");
    let out =
        Command::new("curl").args(["-s", "--max-time", "2", "-w", "\n%{http_code}", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// A cluster nobody answers at: the cleaner builds its client from it and, with no
/// decision to apply, never calls it.
const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: none
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
contexts:
- name: none
  context:
    cluster: none
    user: none
current-context: none
users:
- name: none
  user:
    token: none
";

/// `command` started at info level, its log in `log`.
fn logged(command: &mut Command, log: &std::path::Path) -> KillOnDrop {
    let child = command
        .env("RUST_LOG", "kubefacts=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

fn still_running(child: &mut Child, what: &str, log: &str) {
    if let Some(status) = child.try_wait().unwrap() {
        panic!("{what} exited ({status}) while the registry was down:\n{log}");
    }
}

#[test]
fn publish_process_and_the_cleaner_wait_for_a_registry_that_is_down_when_they_start() {
    let infra = infra();
    let (bootstrap, registry) = (infra.bootstrap.as_str(), infra.registry.as_str());
    let scratch = Scratch::new("late-registry", "session_timeout_ms = 6000\n");
    let (dir, prefix, app, config) =
        (scratch.path(), scratch.prefix.clone(), scratch.app.clone(), scratch.config.clone());
    let config_arg = config.to_str().unwrap();
    let trace = dir.join("trace.jsonl");
    simulate_small("1", "7", &trace, &[]);
    let replay_dir = dir.join("replay");
    replay_finished(&trace, &replay_dir, config_arg);

    let paused_registry = PausedRegistry::pause();
    let stopped = Instant::now();

    let publish_log_path = dir.join("publish.log");
    let mut publisher = logged(
        Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(["publish", "--create-topics", "--partitions", "3", "--finish"])
            .args(["--input", trace.to_str().unwrap()])
            .args(["--bootstrap", bootstrap, "--registry", registry, "--config", config_arg]),
        &publish_log_path,
    );
    let publish_log = || std::fs::read_to_string(&publish_log_path).unwrap_or_default();

    let port = free_port();
    let log_path = dir.join("process.log");
    let mut process = process_command("a", bootstrap)
        .args(["--config", config_arg, "--registry", registry])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // The cleaner too (its Kubernetes API is never reached: nothing is decided yet).
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, KUBECONFIG).unwrap();
    let cleaner_port = free_port();
    let cleaner_log_path = dir.join("cleaner.log");
    let mut cleaner = logged(
        Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(["cleaner", "--create-topics", "--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--bootstrap", bootstrap, "--registry", registry, "--config", config_arg])
            .args(["--metrics-addr", &format!("127.0.0.1:{cleaner_port}")]),
        &cleaner_log_path,
    );
    let cleaner_log = || std::fs::read_to_string(&cleaner_log_path).unwrap_or_default();

    // Its first answer already says it is not ready: it once answered 200 in the moment
    // between serving /readyz and starting to wait for the registry.
    let first = loop {
        still_running(&mut process.0, "process", &log());
        match readyz(port) {
            (0, _) => std::thread::sleep(Duration::from_millis(5)),
            answer => break answer,
        }
    };
    assert_eq!(first.0, 503, "process's first /readyz answer: {}\n{}", first.1, log());
    // 60 s down: all wait, none exits, /readyz says what it waits for.
    let (mut not_ready, mut cleaner_not_ready) = (None, None);
    while stopped.elapsed() < Duration::from_secs(60) {
        still_running(&mut process.0, "process", &log());
        still_running(&mut publisher.0, "publish", &publish_log());
        still_running(&mut cleaner.0, "cleaner", &cleaner_log());
        let (status, body) = readyz(port);
        if status != 0 {
            assert_eq!(status, 503, "/readyz while the registry is down: {body}\n{}", log());
            // The latest answer: the first may come before the registry wait begins.
            not_ready = Some(body);
        }
        let (status, body) = readyz(cleaner_port);
        if status != 0 {
            assert_eq!(status, 503, "cleaner /readyz while the registry is down: {body}");
            cleaner_not_ready = Some(body);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let not_ready = not_ready.unwrap_or_else(|| panic!("/readyz never answered:\n{}", log()));
    assert!(not_ready.contains("schema registry"), "/readyz does not name the registry: {not_ready}");
    let cleaner_not_ready =
        cleaner_not_ready.unwrap_or_else(|| panic!("the cleaner's /readyz never answered"));
    assert!(cleaner_not_ready.contains("schema registry"), "cleaner /readyz: {cleaner_not_ready}");
    for (what, text) in [("process", log()), ("publish", publish_log()), ("cleaner", cleaner_log())] {
        assert!(
            text.contains("the schema registry did not answer"),
            "{what} never said it waits for the registry:\n{text}"
        );
    }
    paused_registry.resume();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = readyz(port);
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz not ready after the registry resumed: {body}\n{}", log());
        std::thread::sleep(Duration::from_millis(500));
    }
    let published = publisher.0.wait().unwrap();
    assert!(published.success(), "publish failed after the registry resumed:\n{}", publish_log());

    let stages = default_stages(&prefix, &app);
    let deadline = Instant::now() + Duration::from_secs(180);
    while let Err(behind) = all_committed(bootstrap, &stages) {
        assert!(Instant::now() < deadline, "not committed after the registry resumed: {behind}\n{}", log());
        std::thread::sleep(Duration::from_millis(500));
    }
    still_running(&mut process.0, "process", &log());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cleaner_log().contains("every writer schema is registered") {
        still_running(&mut cleaner.0, "cleaner", &cleaner_log());
        assert!(Instant::now() < deadline, "the cleaner never registered its schemas:\n{}", cleaner_log());
        std::thread::sleep(Duration::from_millis(500));
    }
    let dead = read_records(bootstrap, &format!("{prefix}dead-letter.v1"));
    assert!(dead.is_empty(), "{} records dead-lettered after a late registry", dead.len());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let codec =
        Codec::new(Some(kubefacts::codec::RegistryClient::new(registry, Duration::from_secs(10)).unwrap()))
            .unwrap();
    let (failures, compared) = compare_outputs(&rt, &codec, bootstrap, &replay_dir, &prefix, |_, _| {});
    println!("compared with the replay: {}", compared.join("; "));
    assert!(failures.is_empty(), "Kafka != replay after a late registry:\n{}", failures.join("\n"));
}
