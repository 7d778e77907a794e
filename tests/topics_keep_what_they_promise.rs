//! Every topic says what it is (docs/TOPICS.md) and keeps what it promises, on the real
//! broker: `process --create-topics` creates each topic of the default pipeline with the
//! cleanup policy and retention its role gives it (never the broker's default), an existing
//! topic that contradicts the table is reported at start and left alone, and `publish`
//! refuses input its topic would delete rather than losing it.

mod support;

use std::{
    io::Read,
    process::Command,
    time::{Duration, Instant},
};

use kubefacts::{
    config::{PipelineConfig, TOPIC_ROLES, TopicKind},
    runtime::topics::{TopicSpec, ensure_topics},
};
use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, ResourceSpecifier},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
};
use support::{KillOnDrop, infra, process_command, repo_path, unique_name};

type Admin = AdminClient<DefaultClientContext>;

fn admin(bootstrap: &str) -> Admin {
    ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin client")
}

/// `cleanup.policy` and `retention.ms` of a topic.
async fn policy_and_retention(admin: &Admin, topic: &str) -> (String, String) {
    let r = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .unwrap()
        .remove(0)
        .unwrap_or_else(|e| panic!("{topic}: {e:?}"));
    let get = |k: &str| r.get(k).and_then(|e| e.value.clone()).unwrap_or_default();
    (get("cleanup.policy"), get("retention.ms"))
}

/// Records in a topic (high watermarks summed).
fn records_in(bootstrap: &str, topic: &str) -> i64 {
    let c: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let n = md.topics()[0].partitions().len() as i32;
    (0..n).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap().1).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_topics_follow_the_table_and_a_contradicting_one_is_reported() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}.", unique_name("roles"));
    let app = unique_name("roles-app");
    let config = dir.path().join("pipeline.toml");
    std::fs::write(
        &config,
        format!("[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{app}\"\n"),
    )
    .unwrap();
    let pipeline = PipelineConfig::load(&config).unwrap();
    let topics = &pipeline.topics;
    let admin = admin(&infra.bootstrap);

    // An operator created the run facts earlier with a week's retention.
    let facts = topics.full(&topics.job_run_facts);
    let week = TopicSpec::new(&facts, 3).with_config("retention.ms", "604800000");
    ensure_topics(&admin, &[week], true).await.unwrap();

    let log = dir.path().join("process.log");
    let process = process_command("a", &infra.bootstrap)
        .arg("--config")
        .arg(&config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut process = KillOnDrop(process);
    let deadline = Instant::now() + Duration::from_secs(90);
    let text = loop {
        let mut text = String::new();
        std::fs::File::open(&log).unwrap().read_to_string(&mut text).unwrap();
        if text.contains("running") {
            break text;
        }
        assert!(process.try_wait().unwrap().is_none(), "process exited:\n{text}");
        assert!(Instant::now() < deadline, "process did not start within 90 s:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = process.kill();

    // Reported at start, naming the setting, and left as it is.
    let report = format!(
        "topic {facts} has retention.ms=604800000, the pipeline says retention.ms=-1 (topics.retention.facts_ms)"
    );
    assert!(text.contains(&report), "no report of the contradicting topic in:\n{text}");
    assert_eq!(policy_and_retention(&admin, &facts).await, ("delete".into(), "604800000".into()));

    // Every other topic of the table as its role says.
    let mut checked = 0;
    for role in &TOPIC_ROLES {
        let name = topics.full(match role.key {
            "pods" => &topics.pods,
            "jobs" => &topics.jobs,
            "cronjobs" => &topics.cronjobs,
            "leases" => &topics.leases,
            "sessions" => &topics.sessions,
            "job_run_facts" => continue,
            "job_runs" => &topics.job_runs,
            "journal_repartition" => &topics.journal_repartition,
            "cleanup_decisions" => &topics.cleanup_decisions,
            // Written by `kubefacts cleaner`, which creates it.
            "cleanup_outcomes" => continue,
            "coverage_alerts" => &topics.coverage_alerts,
            "session_projections" => &topics.session_projections,
            "session_owner_repartition" => &topics.session_owner_repartition,
            "retained_by_owner" => &topics.retained_by_owner,
            "dead_letter" => &topics.dead_letter,
            other => panic!("a topic role this test does not know: {other}"),
        });
        let (policy, retention) = policy_and_retention(&admin, &name).await;
        if role.kind == TopicKind::Table {
            assert_eq!(policy, "compact", "{name}: a table is compacted");
        } else {
            assert_eq!((policy.as_str(), retention.as_str()), ("delete", "-1"), "{name} ({:?})", role.kind);
        }
        checked += 1;
    }
    assert_eq!(checked, TOPIC_ROLES.len() - 2);
    // The state-change log in particular: compaction would keep one state per CronJob.
    let alerts = topics.full(&topics.coverage_alerts);
    assert_eq!(policy_and_retention(&admin, &alerts).await.0, "delete");
    // Changelogs are compacted.
    let changelog = format!("{app}-coverage-subjects-changelog");
    assert_eq!(policy_and_retention(&admin, &changelog).await.0, "compact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_keeps_an_old_trace_in_topics_it_creates_and_refuses_topics_that_would_delete_it() {
    let infra = infra();
    let admin = admin(&infra.bootstrap);
    let dir = tempfile::tempdir().unwrap();
    // The demo trace was observed on 2026-11-29: older than a day.
    let demo = repo_path("tests/fixtures/traces/demo.jsonl");
    let files = |retention: &str| {
        let prefix = format!("{}.", unique_name("refuse"));
        let config = dir.path().join(format!("{prefix}toml"));
        std::fs::write(&config, format!("[topics]\nprefix = \"{prefix}\"\n{retention}")).unwrap();
        let pipeline = PipelineConfig::load(&config).unwrap();
        let topics = &pipeline.topics;
        let names = [&topics.pods, &topics.jobs, &topics.cronjobs, &topics.leases, &topics.sessions]
            .map(|t| topics.full(t));
        (config, pipeline, names)
    };
    let publish = |config: &std::path::Path, create: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefacts"));
        cmd.args(["publish", "--bootstrap", &infra.bootstrap, "--input", &demo]).arg("--config").arg(config);
        if create {
            cmd.arg("--create-topics");
        }
        cmd.output().unwrap()
    };
    let published = |names: &[String]| -> i64 { names.iter().map(|t| records_in(&infra.bootstrap, t)).sum() };
    const A_DAY: &str = "[topics.retention]\ninputs_ms = 86400000\n";

    // Input topics that exist and keep a day: refused before anything is written.
    let (config, pipeline, names) = files(A_DAY);
    let specs: Vec<TopicSpec> = names.iter().map(|n| pipeline.topics.spec(n, 1, false)).collect();
    ensure_topics(&admin, &specs, true).await.unwrap();
    assert_eq!(policy_and_retention(&admin, &names[0]).await.1, "86400000");
    let out = publish(&config, false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "publish must fail:\n{stderr}");
    assert!(stderr.contains("refusing to publish"), "{stderr}");
    assert!(
        stderr.contains("retention.ms=86400000") && stderr.contains("topics.retention.inputs_ms"),
        "{stderr}"
    );
    assert_eq!(published(&names), 0, "nothing was published, so nothing is silently deleted");

    // The same file, the topics created by publish: they keep the old trace, and it says so.
    let (config, _, names) = files(A_DAY);
    let out = publish(&config, true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("keep their records forever (retention.ms=-1)"), "{stdout}");
    for name in &names {
        assert_eq!(policy_and_retention(&admin, name).await.1, "-1", "{name}");
    }
    let whole = published(&names);
    assert!(whole > 0);

    // A file without a retention keeps inputs forever: the trace is published whole, silently.
    let (config, _, names) = files("");
    let out = publish(&config, true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("keep their records forever"));
    assert_eq!(published(&names), whole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_sends_nothing_the_broker_would_refuse_as_too_far_ahead_of_its_clock() {
    // Kafka 4 refuses a record stamped more than `message.timestamp.after.max.ms` (1 h)
    // ahead of the broker's clock, failing its whole batch with `InvalidDifferentRecord`.
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let trace = |name: &str, start_ms: i64| {
        let path = dir.path().join(name);
        let start = jiff::Timestamp::from_millisecond(start_ms / 60_000 * 60_000).unwrap().to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args([
                "simulate",
                "--profile",
                "small",
                "--hours",
                "1",
                "--seed",
                "9",
                "--start",
                &start,
                "--output",
            ])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        path
    };
    let publish = |trace: &std::path::Path| {
        let prefix = format!("{}.", unique_name("ahead"));
        let config = dir.path().join(format!("{prefix}toml"));
        std::fs::write(&config, format!("[topics]\nprefix = \"{prefix}\"\n")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args(["publish", "--create-topics", "--finish", "--bootstrap", &infra.bootstrap, "--input"])
            .arg(trace)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let pipeline = PipelineConfig::load(&config).unwrap();
        let topics = &pipeline.topics;
        let jobs = records_in(&infra.bootstrap, &topics.full(&topics.jobs));
        (out, jobs)
    };

    // An hour's trace ending 55 minutes from now (within the limit, less the margin): its
    // `--finish` heartbeats reach past its window's end plus grace, beyond the limit.
    let (out, jobs) = publish(&trace("now.jsonl", now_ms - 300_000));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("heartbeats from") && stdout.contains("were not sent"), "{stdout}");
    assert!(jobs > 0, "the trace itself was published");

    // A trace whose clock is two hours ahead: refused, naming the setting, nothing sent.
    let (out, jobs) = publish(&trace("ahead.jsonl", now_ms + 2 * 3_600_000));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "publish must fail:\n{stderr}");
    assert!(stderr.contains("message.timestamp.after.max.ms=3600000"), "{stderr}");
    assert_eq!(jobs, 0);
}
