//! README's first command: `kubefacts demo` simulates a small fleet and runs the pipeline
//! with no broker and no cluster, writes readable outputs (JSON lines and Avro container
//! files another implementation decodes), and nothing the watcher must drop reaches them.

mod support;

use std::{fs, path::Path, process::Command};

/// Simulated hours in the tests' demo runs: the default day takes about a minute in a debug
/// build (seconds in release, README's command); a quarter of it covers every path.
const TEST_HOURS: &str = "6";

fn run_demo(dir: &Path, extra: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["demo", "--output"])
        .arg(dir)
        .args(extra)
        // Nothing to reach: make sure no broker or registry setting is picked up either.
        .env_remove("KUBEFACTS_BOOTSTRAP")
        .env_remove("KUBEFACTS_REGISTRY")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    (stdout, stderr)
}

/// Secrets the simulated and the bundled traces carry in env, args and container specs.
const SECRETS: [&str; 8] = [
    "hunter2",
    "s3cr3t",
    "do-not-ship",
    "demo-token-git",
    "password authentication",
    "etl-db-credentials",
    "s3-credentials",
    "db-password",
];

fn assert_no_secret_in(dir: &Path) -> usize {
    let mut outputs = 0;
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = fs::read(&path).unwrap();
        assert!(!bytes.is_empty(), "{} is empty", path.display());
        let text = String::from_utf8_lossy(&bytes);
        for secret in SECRETS {
            assert!(!text.contains(secret), "{} leaks {secret:?}", path.display());
        }
        outputs += 1;
    }
    outputs
}

/// Record counts of every `.avro` file in `dir`, read by fastavro.
fn fastavro_counts(dir: &Path) -> serde_json::Value {
    let infra = support::infra();
    let script = r#"
import fastavro, json, pathlib, sys
counts = {}
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.avro")):
    with open(p, "rb") as f:
        counts[p.stem] = sum(1 for _ in fastavro.reader(f))
print(json.dumps(counts))
"#;
    let out = Command::new(&infra.python).args(["-c", script]).arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn demo_simulates_a_fleet_summarises_it_and_writes_files_fastavro_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, stderr) = run_demo(dir.path(), &["--hours", TEST_HOURS]);
    assert!(stderr.is_empty(), "{stderr}");
    assert!(stdout.contains("simulated small fleet, 6 h, seed 1"), "{stdout}");
    assert!(stdout.contains("records encoded and decoded back identical"), "{stdout}");
    assert!(
        stdout.contains("no trace entry was rejected") && stdout.contains("no record was dead-lettered"),
        "{stdout}"
    );
    // The summary: runs per window, the failing CronJobs with exits, the decisions.
    for part in [
        "finished runs per journal window",
        "top failing CronJobs and Jobs",
        "×BackoffLimitExceeded",
        "×137/OOMKilled",
        "cleanup decisions",
        "excluded:",
        "lease coverage (coverage-alerts.v1",
        "session projections (session-projections.v1",
        "retained compute per owner (retained-compute-by-owner.v1)",
    ] {
        assert!(stdout.contains(part), "no {part:?} in the summary:\n{stdout}");
    }
    let windows = stdout.lines().filter(|l| l.starts_with("  2026-11-01T0")).count();
    assert_eq!(windows, 6, "one row per hour window:\n{stdout}");

    // A .jsonl and a .avro per input topic and per fact topic; the repartition topic is
    // internal and not written.
    let outputs = assert_no_secret_in(dir.path());
    assert_eq!(
        outputs, 22,
        "5 input topics + job-run-facts, job-runs, cleanup-decisions, coverage-alerts, \
         session-projections and retained-compute-by-owner, twice each"
    );
    assert!(!dir.path().join("kubefacts.internal.journal-repartition.v1.jsonl").exists());
    assert!(!dir.path().join("kubefacts.internal.session-owner-repartition.v1.jsonl").exists());
    // The simulator's sessions: one in six keeps its Pod running after it completed, and its
    // owner's total says so.
    let retained: Vec<&str> = stdout.lines().filter(|l| l.starts_with("  RETAINED sess-")).collect();
    assert!(!retained.is_empty(), "no retained session:\n{stdout}");
    assert!(
        retained.iter().all(|l| l.contains("Completed session") && l.contains("Running")),
        "{retained:?}"
    );
    assert!(stdout.contains("1 foreign Pod(s) carried a session's label"), "{stdout}");
    assert!(
        stdout.contains(&format!("{} owner(s) hold compute in stopped sessions", retained.len())),
        "{stdout}"
    );

    // Another Avro implementation reads every container file, record for record.
    let counts = fastavro_counts(dir.path());
    let jsonl_lines =
        |topic: &str| fs::read_to_string(dir.path().join(format!("{topic}.jsonl"))).unwrap().lines().count();
    let topics = counts.as_object().unwrap();
    assert_eq!(topics.len(), 11, "{counts}");
    for (topic, n) in topics {
        assert_eq!(n.as_u64().unwrap() as usize, jsonl_lines(topic), "{topic}: {counts}");
        assert!(n.as_u64().unwrap() > 0, "{topic} is empty");
    }
    // The guard above can fail: the simulated trace itself carries those secrets.
    let trace = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["simulate", "--profile", "small", "--hours", "1", "--seed", "1", "--output", "-"])
        .output()
        .unwrap();
    let trace = String::from_utf8_lossy(&trace.stdout);
    assert!(trace.contains("hunter2") && trace.contains("do-not-ship") && trace.contains("s3-credentials"));
}

#[test]
fn demo_of_the_bundled_trace_lists_its_runs_and_ships_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let trace = support::repo_path("tests/fixtures/traces/demo.jsonl");
    let (stdout, stderr) = run_demo(dir.path(), &["--trace", &trace]);
    assert!(stdout.contains("162 records encoded and decoded back identical"), "{stdout}");
    assert!(stdout.contains("no trace entry was rejected"), "{stdout}");
    assert!(stderr.is_empty(), "{stderr}");
    assert_no_secret_in(dir.path());
    // A short trace lists every run.
    assert!(stdout.contains("nightly-export-29932455      Failed (BackoffLimitExceeded)"), "{stdout}");
    assert!(stdout.contains("backfill-2026-11") && stdout.contains("retention 300 s (JobTtl)"), "{stdout}");
    let counts = fastavro_counts(dir.path());
    for topic in [
        "kubefacts.pods.v1",
        "kubefacts.jobs.v1",
        "kubefacts.job-run-facts.v1",
        "kubefacts.cleanup-decisions.v1",
    ] {
        assert!(counts[topic].as_u64().unwrap() > 0, "{topic}: {counts}");
    }
    // The guard above can fail: the trace itself carries those secrets.
    let text = fs::read_to_string(&trace).unwrap();
    assert!(text.contains("hunter2") && text.contains("do-not-ship"));
}

#[test]
fn demo_reports_a_broken_trace_instead_of_hiding_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.jsonl");
    fs::write(
        &trace,
        "{\"type\":\"HEARTBEAT\",\"observed_at\":1000}\n{\"type\":\"ADDED\",\"observed_at\":1001,\"object\":{\"apiVersion\":\"v1\",\"kind\":\"Secret\"}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["demo", "--output"])
        .arg(dir.path().join("out"))
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("demo: line 2: unsupported object v1/Secret"), "{stderr}");
    assert!(stdout.contains("trace: unsupported_kind: 1"), "{stdout}");
}

#[test]
fn every_verb_documents_itself() {
    let verbs = [
        &["--help"][..],
        &["demo", "--help"],
        &["tail", "--help"],
        &["schemas", "--help"],
        &["process", "--help"],
        &["replay", "--help"],
    ];
    let more = [
        &["watch", "--help"][..],
        &["publish", "--help"],
        &["simulate", "--help"],
        &["cleaner", "--help"],
        &["report", "--help"],
    ];
    for verb in verbs.into_iter().chain(more) {
        // A registry URL's credentials from the environment never show in --help.
        let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(verb)
            .env("KUBEFACTS_REGISTRY", "https://user:s3cr3t-pw@registry.example:8081")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("Usage: kubefacts"), "{verb:?}: {text}");
        assert!(!text.contains("s3cr3t-pw"), "{verb:?} --help shows the registry password: {text}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts")).args(["tail", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--topic", "--from-beginning", "--until-idle", "--bootstrap", "--registry"] {
        assert!(text.contains(flag), "tail --help lacks {flag}: {text}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts")).args(["report", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--since", "--namespace", "--format", "--from-dir", "--bootstrap", "--registry", "--config"]
    {
        assert!(text.contains(flag), "report --help lacks {flag}: {text}");
    }
}

#[test]
fn replay_writes_every_input_topic_partitioned_like_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["replay", "--partitions", "4", "--input"])
        .arg(support::repo_path("tests/fixtures/traces/demo.jsonl"))
        .arg("--output")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let jobs = fs::read_to_string(dir.path().join("kubefacts.jobs.v1.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = jobs.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (mut keyed, mut markers_per_partition) = (0, [0; 4]);
    for l in &lines {
        let partition = l["partition"].as_i64().unwrap() as i32;
        match l["key"].as_str() {
            Some(key) => {
                keyed += 1;
                assert_eq!(partition, kubefacts::runtime::partitioner::partition_for_key(key.as_bytes(), 4));
                assert_eq!(l["value"]["job"]["meta"]["uid"], key, "jobs are keyed by their UID");
            }
            None => markers_per_partition[partition as usize] += 1,
        }
    }
    assert!(keyed > 10);
    assert!(
        markers_per_partition.iter().all(|n| *n == markers_per_partition[0] && *n > 0),
        "{markers_per_partition:?}"
    );
}

#[test]
fn replay_runs_the_configured_stages_and_dead_letters_what_they_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    // The probe counts KeyedCount records; Job observations are not, so every one of them
    // must come out as a dead letter with its reason and original bytes — none dropped.
    let config = dir.path().join("pipeline.toml");
    fs::write(
        &config,
        "[[process.stages]]\nprocessor = \"probe\"\ninputs = [\"kubefacts.jobs.v1\"]\noutputs = [\"kubefacts.job-counts.v1\"]\n",
    )
    .unwrap();
    let out = replay_demo(dir.path(), Some(&config));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |name: &str| -> Vec<serde_json::Value> {
        let text = fs::read_to_string(dir.path().join(name)).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let jobs = read("kubefacts.jobs.v1.jsonl");
    let letters = read("kubefacts.dead-letter.v1.jsonl");
    assert!(!jobs.is_empty());
    assert_eq!(letters.len(), jobs.len(), "one dead letter per job record");
    for l in &letters {
        assert_eq!(l["value"]["source_topic"], "kubefacts.jobs.v1");
        assert_eq!(l["value"]["reason"], "type_mismatch");
        assert_eq!(l["value"]["processor"], "probe");
    }
    assert!(read("kubefacts.job-counts.v1.jsonl").is_empty());

    // A stage that reads a topic nothing writes is refused, naming it.
    fs::write(
        &config,
        "[[process.stages]]\nprocessor = \"probe\"\ninputs = [\"nowhere\"]\noutputs = [\"x\"]\n",
    )
    .unwrap();
    let out = replay_demo(dir.path(), Some(&config));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("stage probe reads nowhere"), "{stderr}");
}

#[test]
fn process_refuses_a_pipeline_without_stages_and_unknown_processors() {
    let dir = tempfile::tempdir().unwrap();
    let run = |text: &str| {
        let config = dir.path().join("p.toml");
        fs::write(&config, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .arg("process")
            .arg("--config")
            .arg(&config)
            .output();
        let out = out.unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Both fail before any broker is contacted.
    assert!(run("[process]\nstages = []\n").contains("[process] has no stages"));
    let e = run("[[process.stages]]\nprocessor = \"journal-x\"\ninputs = [\"a\"]\noutputs = [\"b\"]\n");
    assert!(e.contains("unknown processor \"journal-x\"") && e.contains("probe-rekey"), "{e}");
}

#[test]
fn replay_applies_admission_and_nothing_of_an_opted_out_namespace_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let ns = |name: &str, opt_out: bool| {
        serde_json::json!({"type": "ADDED", "observed_at": 1_795_946_400_000i64, "object": {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": format!("00000000-0000-4000-8000-00000000000{}", name.len()),
                         "annotations": {"kubefacts.io/exclude": opt_out.to_string()}}}})
    };
    let job = |name: &str, ns: &str, uid: &str| {
        serde_json::json!({"type": "ADDED", "observed_at": 1_795_946_401_000i64, "object": {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}}})
    };
    let pod = |name: &str, ns: &str, uid: &str, job_uid: &str| {
        serde_json::json!({"type": "ADDED", "observed_at": 1_795_946_402_000i64, "object": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job_uid, "controller": true}]},
            "spec": {"containers": [{"name": "main", "image": "x"}]}}})
    };
    let hidden_job = "aaaaaaaa-0000-4000-8000-000000000001";
    let shown_job = "bbbbbbbb-0000-4000-8000-000000000002";
    let lines = [
        // The Pod arrives before its Job and namespace: it is held, then excluded with them.
        pod("topsecret-pod", "private", "aaaaaaaa-0000-4000-8000-000000000003", hidden_job),
        ns("private", true),
        ns("etl", false),
        job("topsecret-job", "private", hidden_job),
        job("visible-job", "etl", shown_job),
        pod("visible-pod", "etl", "bbbbbbbb-0000-4000-8000-000000000004", shown_job),
    ];
    let trace = dir.path().join("trace.jsonl");
    fs::write(&trace, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["replay", "--input"])
        .arg(&trace)
        .arg("--output")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("2 excluded by admission"), "{stdout}");
    let mut all = String::new();
    for f in fs::read_dir(&out_dir).unwrap() {
        all += &fs::read_to_string(f.unwrap().path()).unwrap();
    }
    for hidden in ["topsecret", hidden_job, "aaaaaaaa-0000-4000-8000-000000000003"] {
        assert!(!all.contains(hidden), "{hidden} left the cluster");
    }
    for shown in ["visible-job", "visible-pod", shown_job] {
        assert!(all.contains(shown), "{shown} was not published");
    }
}

#[test]
fn replay_of_the_demo_files_its_four_finished_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = replay_demo(dir.path(), None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = fs::read_to_string(dir.path().join("kubefacts.job-run-facts.v1.jsonl")).unwrap();
    let mut runs: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let r = &v["value"];
            let exits: Vec<String> = r["exits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| format!("{}x{}/{}", e["count"], e["exit_code"], e["reason"].as_str().unwrap_or("-")))
                .collect();
            format!(
                "{} {} {} failed_pods={} exits={}",
                r["run_name"].as_str().unwrap(),
                r["result"].as_str().unwrap(),
                r["failure_reason"].as_str().unwrap_or("-"),
                r["failed_pods"],
                exits.join(",")
            )
        })
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            "backfill-2026-11 SUCCEEDED - failed_pods=0 exits=1x0/Completed,1x137/OOMKilled",
            "nightly-export-29932455 FAILED BackoffLimitExceeded failed_pods=3 exits=2x1/Error,1x137/OOMKilled",
            "report-sync-29932440 SUCCEEDED - failed_pods=0 exits=1x0/Completed",
            "report-sync-29932450 SUCCEEDED - failed_pods=0 exits=1x0/Completed",
        ]
    );
}

/// `kubefacts replay` of the bundled demo trace into `out`, with an optional pipeline file.
fn replay_demo(out: &std::path::Path, config: Option<&std::path::Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefacts"));
    cmd.args(["replay", "--input"])
        .arg(support::repo_path("tests/fixtures/traces/demo.jsonl"))
        .arg("--output")
        .arg(out);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.output().unwrap()
}

#[test]
fn replay_of_the_demo_decides_the_job_whose_ttl_ran_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = replay_demo(dir.path(), None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = fs::read_to_string(dir.path().join("kubefacts.cleanup-decisions.v1.jsonl")).unwrap();
    let decisions: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect();
    // backfill-2026-11 has ttlSecondsAfterFinished: 300 and the trace runs past it; the other
    // runs are younger than the default hour.
    assert_eq!(decisions.len(), 1, "{text}");
    let d = &decisions[0]["value"];
    assert_eq!(d["job"]["name"], "backfill-2026-11");
    assert_eq!(decisions[0]["key"], d["job"]["uid"], "keyed by Job UID");
    assert_eq!((d["retention_secs"].as_i64(), d["retention_source"].as_str()), (Some(300), Some("JOB_TTL")));
    let (finished, decided) = (d["finished_at"].as_str().unwrap(), d["decided_at"].as_str().unwrap());
    assert!(decided > finished, "{decided} after {finished}");
}
