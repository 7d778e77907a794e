//! `[runs]`, `[journal]` and `[coverage]` end to end on the real broker: the demo trace published to the
//! input topics (`kubefacts publish`), `kubefacts process` with the default pipeline's
//! stages, and the runs and windows read back with read_committed (the windows decoded by
//! fastavro) equal the in-memory `replay` of the same trace.

mod support;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use kubefacts::{
    cleanup::CleanupDecision,
    codec::{Codec, json::rfc3339_millis},
    journal::JobRun,
};
use support::{KillOnDrop, infra, process_command, read_topic, repo_path, unique_name};

/// The runs in a JSON-lines file written by `replay`, as canonical JSON strings.
fn replayed_runs(dir: &std::path::Path, topic: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(format!("{topic}.jsonl"))).unwrap();
    let mut runs: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]["run_uid"].to_string())
        .collect();
    runs.sort();
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_kafka_equal_the_in_memory_replay() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}.", unique_name("runs"));
    let config = dir.path().join("pipeline.toml");
    // The default pipeline's stages ([runs]), on this test's own topics.
    // The bundled demo trace is hand-written: its heartbeats are hours apart, not a
    // watcher's 10 s, so its last one (12:00, 108 min after the one before) would wait on
    // Kafka for a later heartbeat to vouch for it (docs/RUNTIME.md, "Bad input").
    std::fs::write(
        &config,
        format!(
            "[topics]\nprefix = \"{prefix}\"\n\n[process]\napplication_id = \"{}\"\nmax_ahead_of_heartbeat_ms = 86400000\n",
            unique_name("runs-app")
        ),
    )
    .unwrap();
    // The demo trace, then a heartbeat two hours later (the watcher writes one every 10 s):
    // stream time passes the window's end + grace, so both runs of the pipeline must end
    // with the same final window whatever the interleaving of their stages.
    let trace = dir.path().join("trace.jsonl");
    let mut text = std::fs::read_to_string(repo_path("tests/fixtures/traces/demo.jsonl")).unwrap();
    text.push_str("{\"type\":\"HEARTBEAT\",\"observed_at\":\"2026-11-29T12:00:00.000Z\"}\n");
    std::fs::write(&trace, text).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["publish", "--create-topics", "--partitions", "3", "--bootstrap", &infra.bootstrap, "--input"])
        .arg(&trace)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let facts = format!("{prefix}job-run-facts.v1");
    let log = dir.path().join("process.log");
    let metrics_addr = format!("127.0.0.1:{}", support::free_port());
    let process = process_command("a", &infra.bootstrap)
        .args(["--metrics-addr", &metrics_addr])
        .arg("--config")
        .arg(&config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Stopped however the test ends: a failed assertion must not leave it running.
    let process = KillOnDrop(process);

    // In memory, the same trace and pipeline.
    let replay_dir = dir.path().join("replay");
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["replay", "--partitions", "3", "--input"])
        .arg(&trace)
        .arg("--output")
        .arg(&replay_dir)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected = replayed_runs(&replay_dir, &facts);
    assert_eq!(expected.len(), 4, "the demo has four finished runs");

    let codec = Codec::new(None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (bytes, runs) = loop {
        let records = support::read_topic_so_far(&infra.bootstrap, &facts).await;
        let mut runs = Vec::new();
        for r in &records {
            let run: JobRun = codec.decode_as(&r.value).await.unwrap();
            assert_eq!(r.key.as_deref(), Some(run.owner.uid.as_bytes()));
            runs.push(run);
        }
        if runs.len() >= expected.len() || Instant::now() > deadline {
            break (records, runs);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut got: Vec<String> = runs.iter().map(|r| format!("\"{}\"", r.run_uid)).collect();
    got.sort();
    assert_eq!(
        got,
        expected,
        "the same runs on Kafka as in memory\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    // The same contents (the replay writes decoded JSON; the journal's golden bytes come
    // with [journal]).
    let replay_text = std::fs::read_to_string(replay_dir.join(format!("{facts}.jsonl"))).unwrap();
    for run in &runs {
        let line = replay_text.lines().find(|l| l.contains(&run.run_uid)).unwrap();
        let theirs: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(theirs["value"]["exits"].as_array().unwrap().len(), run.exits.len(), "{}", run.run_name);
        assert_eq!(theirs["value"]["failed_pods"], run.failed_pods, "{}", run.run_name);
    }
    assert!(bytes.iter().all(|r| r.value.starts_with(&[0xC3, 0x01])), "single-object encoded (no registry)");

    // [runs]' global Jobs lanes (the dependency holds) were fed from the Jobs records the
    // process reads anyway: it owns every partition, so its own consumer hands them over,
    // decoded once, and the global reader does not decode them again.
    let body =
        kubefacts::http::get(format!("http://{metrics_addr}/metrics")).await.unwrap().text().await.unwrap();
    let global = |source: &str| -> f64 {
        let series = format!("kubefacts_global_records_total{{stage=\"runs\",source=\"{source}\"}} ");
        let line = body.lines().find_map(|l| l.strip_prefix(series.as_str()));
        line.unwrap_or_else(|| panic!("no {series} in\n{body}")).parse().unwrap()
    };
    let (group, reader) = (global("group"), global("reader"));
    assert!(
        group > 0.0 && group > reader,
        "global Jobs records: {group} from the group, {reader} decoded again"
    );

    // [runs]' cleanup decisions: the same records, in the same order per partition, as the
    // in-memory replay (the demo's backfill Job outlives its 300 s TTL; the heartbeat at
    // 12:00 takes the other three past the default hour).
    let decisions_topic = format!("{prefix}cleanup-decisions.v1");
    let replayed_decisions: Vec<(i64, serde_json::Value)> =
        std::fs::read_to_string(replay_dir.join(format!("{decisions_topic}.jsonl")))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["partition"].as_i64().unwrap(), v["value"].clone())
            })
            .collect();
    assert_eq!(replayed_decisions.len(), 4, "{replayed_decisions:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let on_kafka = loop {
        let bootstrap = infra.bootstrap.clone();
        let topic = decisions_topic.clone();
        let records = tokio::task::spawn_blocking(move || read_topic(&bootstrap, &topic)).await.unwrap();
        if records.len() >= replayed_decisions.len() || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut got = Vec::new();
    for r in &on_kafka {
        let d: CleanupDecision = codec.decode_as(&r.value).await.unwrap();
        assert_eq!(r.key.as_deref(), Some(d.job.uid.as_bytes()), "keyed by Job UID");
        got.push((
            i64::from(r.partition),
            serde_json::json!({"uid": d.job.uid, "decided_at": rfc3339_millis(d.decided_at), "sweep": d.sweep}),
        ));
    }
    let want: Vec<(i64, serde_json::Value)> = replayed_decisions
        .iter()
        .map(|(p, v)| {
            (*p, serde_json::json!({"uid": v["job"]["uid"], "decided_at": v["decided_at"], "sweep": v["sweep"]}))
        })
        .collect();
    assert_eq!(
        got,
        want,
        "the same decisions on Kafka as in memory\n{}",
        std::fs::read_to_string(&log).unwrap()
    );

    // [journal] on job-runs.v2, read committed and decoded by fastavro: per window, the
    // latest summary and the runs of its pages 1..=pages (a reader's rebuild) are the same
    // as the in-memory replay's. (Revision numbers and page cuts may differ: on Kafka the
    // two stages run side by side, so the journal can see several runs between two of its
    // emissions.)
    let journal_topic = format!("{prefix}job-runs.v2");
    let latest = |parts: Vec<(serde_json::Value, serde_json::Value)>| {
        let mut summaries: std::collections::BTreeMap<String, (i64, bool, i64)> = Default::default();
        let mut pages: std::collections::BTreeMap<(String, i64), Vec<String>> = Default::default();
        for (window, value) in parts {
            let revision = value["revision"].as_i64().unwrap();
            let part = value["part"].as_i64().unwrap();
            if let Some(summary) = value["summary"].as_object() {
                let (is_final, count) =
                    (summary["is_final"].as_bool().unwrap(), summary["pages"].as_i64().unwrap());
                let slot = summaries.entry(window.to_string()).or_insert((0, false, 0));
                if revision > slot.0 {
                    *slot = (revision, is_final, count);
                }
            } else {
                let runs = value["page"]["runs"].as_array().unwrap();
                let uids = runs.iter().map(|r| r["run_uid"].as_str().unwrap().to_owned()).collect();
                pages.insert((window.to_string(), part), uids);
            }
        }
        summaries
            .into_iter()
            .map(|(w, (_, is_final, count))| {
                let mut runs: Vec<String> = (1..=count)
                    .flat_map(|n| pages.get(&(w.clone(), n)).cloned().unwrap_or_default())
                    .collect();
                runs.sort();
                runs.dedup();
                (w, is_final, runs)
            })
            .collect::<Vec<_>>()
    };
    let replayed: Vec<(serde_json::Value, serde_json::Value)> =
        std::fs::read_to_string(replay_dir.join(format!("{journal_topic}.jsonl")))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let key = serde_json::json!({"window_start": v["value"]["window_start"], "window_length_ms": v["value"]["window_length_ms"]});
                (key, v["value"].clone())
            })
            .collect();
    let expected_windows = latest(replayed);
    assert_eq!(expected_windows.len(), 1, "the demo's runs all finished between 10:00 and 11:00");
    assert!(expected_windows[0].1 && expected_windows[0].2.len() == 4, "{expected_windows:?}");
    let window_schema = repo_path("schemas/job-run-window-part.avsc");
    let key_schema = repo_path("schemas/job-run-window-part-key.avsc");
    let deadline = Instant::now() + Duration::from_secs(90);
    let on_kafka = loop {
        let records = support::read_topic_so_far(&infra.bootstrap, &journal_topic).await;
        let values: Vec<Vec<u8>> = records.iter().map(|r| r.value.clone()).collect();
        let keys: Vec<Vec<u8>> = records.iter().map(|r| r.key.clone().unwrap()).collect();
        let decoded = infra.fastavro("single-object", Some(&window_schema), &values);
        let decoded_keys = infra.fastavro("single-object", Some(&key_schema), &keys);
        let windows: Vec<(serde_json::Value, serde_json::Value)> = decoded_keys
            .into_iter()
            .zip(decoded)
            .map(|(k, v)| {
                // fastavro gives timestamps as epoch ms; the replay as RFC 3339: compare as the replay writes.
                let start = kubefacts::codec::json::rfc3339_millis(k["value"]["window_start"].as_i64().unwrap()).unwrap();
                (serde_json::json!({"window_start": start, "window_length_ms": k["value"]["window_length_ms"]}), v["value"].clone())
            })
            .collect();
        let got = latest(windows);
        if got == expected_windows || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(
        on_kafka,
        expected_windows,
        "job-runs.v2 on Kafka = replay\n{}",
        std::fs::read_to_string(&log).unwrap()
    );

    // [coverage] on coverage-alerts.v1: each CronJob's latest state and evidence on Kafka
    // equal the replay's (the records in between may differ: on Kafka a quiet
    // job-run-facts partition lets a task go on without it after max_task_idle_ms).
    let alerts_topic = format!("{prefix}coverage-alerts.v1");
    let latest_alerts = |alerts: Vec<(String, serde_json::Value)>| {
        let mut by_subject = std::collections::BTreeMap::new();
        for (key, a) in alerts {
            let evidence = serde_json::json!({
                "state": a["state"], "expected_by": a["expected_by"], "last_progress": a["last_progress"],
                "manager_covered_until": a["manager_covered_until"],
            });
            by_subject.insert(key, evidence);
        }
        by_subject
    };
    let replayed: Vec<(String, serde_json::Value)> =
        std::fs::read_to_string(replay_dir.join(format!("{alerts_topic}.jsonl")))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["key"].as_str().unwrap().to_owned(), v["value"].clone())
            })
            .collect();
    let expected_alerts = latest_alerts(replayed);
    // Both CronJobs are overdue by 12:00, after the manager Lease's last recorded expiry.
    assert_eq!(expected_alerts.len(), 2, "{expected_alerts:?}");
    assert!(expected_alerts.values().all(|a| a["state"] != "OK"), "{expected_alerts:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let on_kafka = loop {
        let records = support::read_topic_so_far(&infra.bootstrap, &alerts_topic).await;
        let mut alerts = Vec::new();
        for r in &records {
            let a: kubefacts::coverage::CoverageAlert = codec.decode_as(&r.value).await.unwrap();
            // As the replay writes it: timestamps in RFC 3339.
            let time = |t: Option<i64>| t.and_then(rfc3339_millis);
            let json = serde_json::json!({
                "state": a.state.as_str(), "expected_by": time(a.expected_by),
                "last_progress": time(a.last_progress), "manager_covered_until": time(a.manager_covered_until),
            });
            alerts.push((String::from_utf8(r.key.clone().unwrap()).unwrap(), json));
        }
        let got = latest_alerts(alerts);
        if got == expected_alerts || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    drop(process);
    assert_eq!(
        on_kafka,
        expected_alerts,
        "coverage-alerts.v1 on Kafka = replay\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
}
