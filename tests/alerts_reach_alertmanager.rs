//! `kubefacts alerts` against the real broker and a real Alertmanager (docs/ALERTS.md):
//! a FIRING coverage alert becomes an active alert with exactly the expected labels and
//! start, RESOLVED ends it, and a held alert comes back after Alertmanager restarts (by the
//! re-send alone: a restarted Alertmanager has no alerts).

mod support;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use kubefacts::{
    codec::{Codec, RegistryClient},
    coverage::{CoverageAlert, CoverageGap, CoverageState, CoverageSubject, ProgressSource},
};
use serde_json::Value;
use support::{Infra, KillOnDrop, alertmanager, infra, unique_name};

const NAMESPACE: &str = "batch";

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A coverage record of CronJob `batch/<name>` (UID `uid-<name>`).
fn record(name: &str, state: CoverageState, stream_time: i64, pending_since: Option<i64>) -> CoverageAlert {
    CoverageAlert {
        subject: CoverageSubject {
            kind: kubefacts::coverage::SUBJECT_KIND.into(),
            namespace: NAMESPACE.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        state,
        previous_state: None,
        stream_time,
        last_progress: Some(stream_time - 3_600_000),
        last_progress_source: Some(ProgressSource::Run),
        expected_by: Some(stream_time - 1_800_000),
        pending_since,
        manager_lease: "kube-system/kube-controller-manager".into(),
        manager_covered_until: Some(stream_time),
        coverage_gaps: vec![CoverageGap {
            started_at: stream_time - 900_000,
            ended_at: stream_time - 840_000,
        }],
    }
}

/// Produces `rec` keyed by its subject UID, Confluent framing through the registry.
async fn produce(infra: &Infra, codec: &Codec, topic: &str, rec: &CoverageAlert) {
    let writer = codec.value_writer(topic, CoverageAlert::FULL_NAME).await.expect("a writer");
    let bytes = writer.encode(rec).expect("encodes");
    infra.produce(topic, &[(Some(rec.subject.uid.as_str()), bytes)]).await;
}

fn codec(infra: &Infra) -> Codec {
    let registry = RegistryClient::new(&infra.registry, Duration::from_secs(10)).expect("registry client");
    Codec::new(Some(registry)).expect("codec")
}

/// `kubefacts alerts` as a child process, its stderr in `<dir>/alerts.log`.
fn spawn_alerts(infra: &Infra, topic: &str, alertmanager: &str, resend_secs: u64, dir: &Path) -> KillOnDrop {
    let log = std::fs::File::create(dir.join("alerts.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["alerts", "--alertmanager", alertmanager, "--topic", topic])
        .args(["--bootstrap", &infra.bootstrap, "--registry", &infra.registry])
        .args(["--resend-interval-secs", &resend_secs.to_string(), "--max-backoff-secs", "1"])
        .env("RUST_LOG", "kubefacts=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("kubefacts alerts starts");
    KillOnDrop(child)
}

/// Alertmanager's active (not silenced, not inhibited) alerts of CronJob `batch/<name>`;
/// `None` while it does not answer.
async fn active(url: &str, name: &str) -> Option<Vec<Value>> {
    let http = kubefacts::http::client_builder().timeout(Duration::from_secs(5)).build().unwrap();
    let resp = http
        .get(format!("{url}/api/v2/alerts?active=true&silenced=false&inhibited=false"))
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let all: Vec<Value> = resp.json().await.ok()?;
    Some(
        all.into_iter()
            .filter(|a| a["labels"]["cronjob"] == name && a["labels"]["namespace"] == NAMESPACE)
            .filter(|a| a["status"]["state"] == "active")
            .collect(),
    )
}

/// Polls `active` until `done` holds; panics after `timeout` with the child's log.
async fn wait_for(
    what: &str,
    url: &str,
    name: &str,
    timeout: Duration,
    dir: &Path,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(alerts) = active(url, name).await {
            if done(&alerts) {
                return alerts;
            }
            last = Some(alerts);
        }
        if start.elapsed() > timeout {
            panic!("{what}: not within {timeout:?}; last answer {last:?}\n{}", support::logs_in(dir));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ms_of(rfc3339: &Value) -> i64 {
    rfc3339.as_str().expect("a time").parse::<jiff::Timestamp>().expect("RFC 3339").as_millisecond()
}

#[tokio::test(flavor = "multi_thread")]
async fn firing_becomes_an_active_alert_and_resolved_ends_it() {
    let infra = infra();
    let am = alertmanager();
    let dir = tempfile::tempdir().unwrap();
    let codec = codec(&infra);
    // Started before [coverage] created its topic, the forwarder waits for it.
    let topic = unique_name("coverage-alerts");
    let mut child = spawn_alerts(&infra, &topic, &am.url, 60, dir.path());
    let log = dir.path().join("alerts.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("waiting for") {
        assert!(std::time::Instant::now() < deadline, "alerts did not wait for its topic");
        assert!(
            child.try_wait().unwrap().is_none(),
            "alerts exited: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Two partitions: the forwarder waits for the end of both, one of them empty.
    infra.create_topic(&topic, 2).await;
    let name = unique_name("nightly");
    let now = now_ms();
    let pending_since = now - 600_000;
    produce(&infra, &codec, &topic, &record(&name, CoverageState::Firing, now - 60_000, Some(pending_since)))
        .await;

    let alerts =
        wait_for("the FIRING alert active", &am.url, &name, Duration::from_secs(60), dir.path(), |a| {
            !a.is_empty()
        })
        .await;
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    let alert = &alerts[0];
    assert_eq!(
        alert["labels"],
        serde_json::json!({
            "alertname": "KubefactsCronJobOverdue",
            "namespace": NAMESPACE,
            "cronjob": name,
            "severity": "warning",
        }),
        "exactly these labels: {alert:#}"
    );
    assert_eq!(ms_of(&alert["startsAt"]), pending_since, "startsAt = pending_since: {alert:#}");
    assert!(ms_of(&alert["endsAt"]) > now_ms() + 60_000, "ends well after now: {alert:#}");
    let a = &alert["annotations"];
    assert_eq!(a["pending_since"].as_str().map(str::to_owned), Some(format!("{:.3}", ts(pending_since))));
    assert_eq!(a["manager_lease"], "kube-system/kube-controller-manager");
    assert_eq!(a["coverage_gaps"], "1");
    assert_eq!(a["state"], "FIRING");
    assert!(a["summary"].as_str().is_some_and(|s| s.contains(&name)), "{a:#}");

    produce(&infra, &codec, &topic, &record(&name, CoverageState::Resolved, now_ms(), None)).await;
    wait_for("the alert resolved", &am.url, &name, Duration::from_secs(30), dir.path(), |a| a.is_empty())
        .await;
    assert!(child.try_wait().unwrap().is_none(), "kubefacts alerts exited\n{}", support::logs_in(dir.path()));
}

fn ts(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap()
}

/// A private Alertmanager on `port` with a fresh storage dir under `dir`, ready.
async fn start_alertmanager(bin: &Path, port: u16, dir: &Path, generation: u32) -> KillOnDrop {
    let home = dir.join(format!("am-{generation}"));
    std::fs::create_dir_all(&home).unwrap();
    let config = home.join("alertmanager.yml");
    std::fs::write(
        &config,
        "global:\n  resolve_timeout: 5m\nroute:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n",
    )
    .unwrap();
    let log = std::fs::File::create(dir.join(format!("alertmanager-{generation}.log"))).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .arg(format!("--storage.path={}", home.join("data").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let mut am = KillOnDrop(child);
    let http = kubefacts::http::client_builder().build().unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = am.try_wait().unwrap() {
            panic!("alertmanager exited with {status} before it was ready\n{}", support::logs_in(dir));
        }
        let ready = http.get(format!("http://127.0.0.1:{port}/-/ready")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return am;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "alertmanager not ready in 30 s\n{}",
            support::logs_in(dir)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_alert_reappears_after_alertmanager_restarts() {
    let infra = infra();
    let bin = alertmanager().bin;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let mut am = start_alertmanager(&bin, port, dir.path(), 1).await;

    let codec = codec(&infra);
    let topic = infra.topic("coverage-alerts", 1).await;
    let name = unique_name("hourly");
    let pending_since = now_ms() - 300_000;
    produce(&infra, &codec, &topic, &record(&name, CoverageState::Firing, now_ms(), Some(pending_since)))
        .await;
    let mut child = spawn_alerts(&infra, &topic, &url, 2, dir.path());
    wait_for("the FIRING alert active", &url, &name, Duration::from_secs(60), dir.path(), |a| a.len() == 1)
        .await;

    // Restart: the old process is killed outright, a new one starts with empty storage on the
    // same port. Alertmanager keeps alerts in memory only, so only a re-send brings it back;
    // its endsAt window (4 × 2 s) is not what keeps it.
    am.kill().unwrap();
    am.wait().unwrap();
    drop(am);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _am = start_alertmanager(&bin, port, dir.path(), 2).await;
    let back =
        wait_for("the alert back after the restart", &url, &name, Duration::from_secs(20), dir.path(), |a| {
            a.len() == 1
        })
        .await;
    assert_eq!(ms_of(&back[0]["startsAt"]), pending_since, "{:#}", back[0]);
    assert_eq!(back[0]["labels"]["alertname"], "KubefactsCronJobOverdue");
    assert!(child.try_wait().unwrap().is_none(), "kubefacts alerts exited\n{}", support::logs_in(dir.path()));
}
