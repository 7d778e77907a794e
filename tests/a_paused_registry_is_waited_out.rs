//! Issue 21: a retriable error is retried, never dead-lettered. The schema registry is
//! stopped (SIGSTOP) after `publish` and `process` registered their schemas and before
//! `process` has looked up a single input schema id; the trace is then published (the
//! publisher has its ids), so every first record of an input makes the processor ask the
//! stopped registry. After 15 s the registry resumes: nothing may be dead-lettered, the
//! waiting must show in the log, and every output must equal `kubefacts replay`.

mod support;

use std::{
    io::Write,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::codec::Codec;
use support::{
    KillOnDrop, Scratch, all_committed, default_stages, infra, outputs::compare_outputs,
    paused::PausedRegistry, process_command, read_records, replay_finished, simulate_small,
};

#[test]
fn a_paused_registry_delays_records_and_dead_letters_none() {
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    let scratch = Scratch::new("paused", "session_timeout_ms = 6000\n");
    let (dir, prefix, app, config) =
        (scratch.path(), scratch.prefix.clone(), scratch.app.clone(), scratch.config.clone());
    let config_arg = config.to_str().unwrap();
    let trace = dir.join("trace.jsonl");
    simulate_small("1", "7", &trace, &[]);
    let replay_dir = dir.join("replay");
    replay_finished(&trace, &replay_dir, config_arg);

    // The publisher connects (creates topics, registers its schemas) and waits for input.
    let registry = infra.registry.as_str();
    let mut publisher = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["publish", "--create-topics", "--partitions", "3", "--finish", "--input", "-"])
        .args(["--bootstrap", bootstrap, "--registry", registry, "--config", config_arg])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let subjects = || -> String {
        let url = format!("{registry}/subjects");
        let out = Command::new("curl").args(["-s", "--max-time", "5", &url]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !subjects().contains(&format!("{prefix}sessions.v1-value")) {
        assert!(Instant::now() < deadline, "the publisher never registered its schemas: {}", subjects());
        std::thread::sleep(Duration::from_millis(200));
    }
    // The processor starts on empty inputs: it registers its outputs, looks nothing up.
    let log_path = dir.join("process.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let _process = process_command("a", bootstrap)
        .args(["--config", config_arg, "--registry", registry])
        .stderr(log)
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(90);
    while log_text().matches("tasks assigned and restored").count() < 5 {
        assert!(Instant::now() < deadline, "the stages never started:\n{}", log_text());
        std::thread::sleep(Duration::from_millis(200));
    }

    let paused_registry = PausedRegistry::pause();
    let paused = Instant::now();
    let mut stdin = publisher.stdin.take().unwrap();
    stdin.write_all(&std::fs::read(&trace).unwrap()).unwrap();
    drop(stdin);
    let out = publisher.wait_with_output().unwrap();
    assert!(out.status.success(), "publish (its ids known) failed: {}", String::from_utf8_lossy(&out.stderr));
    while paused.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let waited = log_text().contains("the schema registry did not answer");
    paused_registry.resume();

    let stages = default_stages(&prefix, &app);
    let deadline = Instant::now() + Duration::from_secs(180);
    while let Err(behind) = all_committed(bootstrap, &stages) {
        assert!(
            Instant::now() < deadline,
            "not committed after the registry resumed: {behind}\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let dead = read_records(bootstrap, &format!("{prefix}dead-letter.v1"));
    assert!(dead.is_empty(), "{} records dead-lettered while the registry was paused", dead.len());
    assert!(waited, "the processor never waited for the registry (the test proved nothing):\n{}", log_text());
    assert!(log_text().contains("the schema registry answers again"), "{}", log_text());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let codec =
        Codec::new(Some(kubefacts::codec::RegistryClient::new(registry, Duration::from_secs(10)).unwrap()))
            .unwrap();
    let (failures, compared) = compare_outputs(&rt, &codec, bootstrap, &replay_dir, &prefix, |_, _| {});
    println!("compared with the replay: {}", compared.join("; "));
    assert!(failures.is_empty(), "Kafka != replay after a registry pause:\n{}", failures.join("\n"));
}
