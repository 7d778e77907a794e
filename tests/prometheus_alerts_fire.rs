//! The example alert rules against a real Prometheus scraping a real `kubefacts process`
//! (docs/METRICS.md "Alert rules"): records the probe cannot decode are dead-lettered, and
//! KubefactsDeadLetters fires for its stage; with no watcher scraped, KubefactsWatcherNotLeader
//! is pending (its `absent()` branch).

mod support;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use support::{KillOnDrop, free_port, infra, logs_in, prometheus, read_topic, repo_path, unique_name};

const RULES: &str = "deploy/prometheus/kubefacts-alerts.yml";

/// GETs `url` and returns the JSON `data` of a Prometheus API answer; `None` while it does
/// not answer with success.
async fn api(http: &reqwest::Client, url: &str) -> Option<Value> {
    let resp = http.get(url).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body: Value = resp.json().await.ok()?;
    (body["status"] == "success").then(|| body["data"].clone())
}

/// Polls `probe` every 250 ms until it returns `Some`; panics after `timeout` with the last
/// answer and every log in `dir`.
async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    dir: &Path,
    process: &mut KillOnDrop,
    mut probe: impl AsyncFnMut(&mut Option<Value>) -> Option<T>,
) -> T {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(t) = probe(&mut last).await {
            return t;
        }
        if let Some(status) = process.try_wait().unwrap() {
            panic!("{what}: kubefacts process exited with {status}\n{}", logs_in(dir));
        }
        if start.elapsed() > timeout {
            panic!("{what}: not within {timeout:?}; last answer {last:#?}\n{}", logs_in(dir));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_fire_the_dead_letter_alert_in_a_real_prometheus() {
    let infra = infra();
    let prom = prometheus();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let input = infra.topic("prom-in", 1).await;
    let output = infra.topic("prom-out", 1).await;
    let dead_letter = infra.topic("prom-dlq", 1).await;
    let metrics_addr = format!("127.0.0.1:{}", free_port());

    let log = std::fs::File::create(dir.path().join("process.log")).unwrap();
    let mut process = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_kubefacts"))
            .args([
                "process",
                "--create-topics",
                "--partitions",
                "1",
                "--processor",
                "probe",
                "--input",
                &input,
                "--output",
                &output,
            ])
            .args(["--dead-letter", &dead_letter, "--application-id", &unique_name("prom-alerts")])
            .args(["--instance-id", "a", "--bootstrap", &infra.bootstrap, "--metrics-addr", &metrics_addr])
            .env("RUST_LOG", "kubefacts=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kubefacts process starts"),
    );

    // Prometheus scrapes the process every second and evaluates a copy of the deploy rules
    // every second.
    let rules = dir.path().join("kubefacts-alerts.yml");
    std::fs::copy(repo_path(RULES), &rules).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}\n\
         scrape_configs:\n  - job_name: kubefacts-process\n    static_configs:\n      - targets: ['{metrics_addr}']\n",
        rules = rules.display()
    );
    let prometheus = prom.start(dir.path(), &config).await;
    let http = kubefacts::http::client_builder().timeout(Duration::from_secs(5)).build().unwrap();

    // Prometheus scrapes the process before the bad records arrive. The per-reason dead-letter
    // series does not exist yet: it first appears already above 0, which the rule's second
    // line catches (increase() alone would miss it).
    let query = format!("{}/api/v1/query?query=kubefacts_records_in_total", prometheus.url);
    let stage = wait_for(
        "records_in_total scraped at 0",
        Duration::from_secs(60),
        dir.path(),
        &mut process,
        async |last| {
            let data = api(&http, &query).await?;
            *last = Some(data.clone());
            let series = data["result"].as_array()?.first()?.clone();
            assert_eq!(series["value"][1], "0", "input before any was produced: {series:#}");
            series["metric"]["stage"].as_str().map(str::to_owned)
        },
    )
    .await;

    // Not Avro in any framing: the probe cannot decode them, so the runtime dead-letters them.
    let bad: Vec<(Option<&str>, Vec<u8>)> =
        (0..3).map(|i| (Some("k"), format!("not avro {i}").into_bytes())).collect();
    let produced = Instant::now();
    infra.produce(&input, &bad).await;

    let alerts_url = format!("{}/api/v1/alerts", prometheus.url);
    let (alert, all) = wait_for(
        "KubefactsDeadLetters firing",
        Duration::from_secs(60),
        dir.path(),
        &mut process,
        async |last| {
            let data = api(&http, &alerts_url).await?;
            *last = Some(data.clone());
            let alerts = data["alerts"].as_array()?.clone();
            let firing = alerts
                .iter()
                .find(|a| a["labels"]["alertname"] == "KubefactsDeadLetters" && a["state"] == "firing")?
                .clone();
            Some((firing, alerts))
        },
    )
    .await;
    let fired_after = produced.elapsed();

    assert_eq!(
        alert["labels"],
        serde_json::json!({"alertname": "KubefactsDeadLetters", "stage": stage, "reason": "unknown_framing", "severity": "warning"}),
        "grouped by stage and reason, nothing else: {alert:#}"
    );
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&format!("stage {stage} ")), "{alert:#}");
    assert!(
        alert["annotations"]["description"].as_str().is_some_and(|d| d.contains("dead-letter topic")),
        "{alert:#}"
    );
    // No watcher is scraped here: the watcher rule's absent() branch makes it active (pending
    // for its first 2 minutes, firing after).
    let watcher = all
        .iter()
        .find(|a| a["labels"]["alertname"] == "KubefactsWatcherNotLeader")
        .unwrap_or_else(|| panic!("no KubefactsWatcherNotLeader with no watcher scraped: {all:#?}"));
    assert!(watcher["state"] == "pending" || watcher["state"] == "firing", "{watcher:#}");
    // The records did go to the dead-letter topic.
    let dead = tokio::task::block_in_place(|| read_topic(&infra.bootstrap, &dead_letter));
    assert_eq!(dead.len(), bad.len(), "{}", logs_in(dir.path()));
    assert!(process.try_wait().unwrap().is_none(), "kubefacts process exited\n{}", logs_in(dir.path()));
    eprintln!(
        "KubefactsDeadLetters firing {:.1} s after the bad records were produced ({:.1} s in all)",
        fired_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
