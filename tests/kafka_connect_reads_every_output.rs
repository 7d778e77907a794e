//! What a warehouse team runs reads every output topic: Kafka Connect standalone (4.4.0, from
//! Maven Central) with Apicurio's AvroConverter (the registry converter on Maven Central) and
//! `errors.tolerance=none`, and the Python `confluent-kafka` reader of docs/examples — both
//! with the exact settings docs/WAREHOUSE.md gives — on the real broker and registry.
//!
//! A simulated small fleet goes through `publish --finish` and `process` (every stage) with
//! the registry, so values and the Avro key of `job-runs.v2` are Confluent-framed. Then:
//! * Connect (tests/connect/run-connect.sh, a test sink that writes each converted record
//!   as JSON) converts every record of every output topic, keys included, tombstones as null
//!   values, forwarded heartbeats dropped by the `Filter` + `HasHeaderKey` transform — the same
//!   records, keys and values our decoder reads;
//! * `docs/examples/read_facts.py` prints the same records, keys and values.

mod support;

use std::{
    collections::BTreeMap,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubefacts::codec::{
    Codec, RegistryClient,
    json::{Timestamps, to_json},
};
use serde_json::Value;
use support::{
    KillOnDrop, Scratch, all_committed, default_stages, infra, kubefacts_ok, read_records, repo_path,
    simulate_small, unique_name,
};

const OUTPUTS: [&str; 6] = [
    "job-run-facts.v1",
    "job-runs.v2",
    "cleanup-decisions.v1",
    "coverage-alerts.v1",
    "session-projections.v1",
    "retained-compute-by-owner.v1",
];

/// (topic, partition, offset) → (key, value) as our decoder reads them (epoch milliseconds).
type Records = BTreeMap<(String, i32, i64), (Value, Value)>;

fn ours(codec: &Codec, bootstrap: &str, topic: &str) -> Records {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let decode = |b: &[u8]| to_json(&rt.block_on(codec.decode(b)).unwrap().value, Timestamps::EpochMillis);
    read_records(bootstrap, topic)
        .into_iter()
        .map(|r| {
            let key = match r.key.as_deref() {
                Some(k) if k.first() == Some(&0) => decode(k),
                Some(k) => Value::String(String::from_utf8_lossy(k).into_owned()),
                None => Value::Null,
            };
            let value = r.value.as_deref().map_or(Value::Null, decode);
            ((topic.to_owned(), r.partition, r.offset), (key, value))
        })
        .collect()
}

/// The records of JSON lines with topic, partition, offset, key and value.
fn from_lines(text: &str) -> Records {
    text.lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {}…", &l[..l.len().min(300)]));
            let at = (
                v["topic"].as_str().unwrap().to_owned(),
                v["partition"].as_i64().unwrap() as i32,
                v["offset"].as_i64().unwrap(),
            );
            (at, (v["key"].clone(), v["value"].clone()))
        })
        .collect()
}

/// One line per record that differs (at most 5), for the failure message.
fn differences(what: &str, want: &Records, got: &Records) -> Vec<String> {
    let mut out = Vec::new();
    for (at, w) in want {
        match got.get(at) {
            Some(g) if g == w => {}
            Some(g) => out.push(format!("{what} {at:?}:\n    ours: {w:?}\n    {what}: {g:?}")),
            None => out.push(format!("{what} {at:?}: missing")),
        }
    }
    out.extend(got.keys().filter(|at| !want.contains_key(*at)).map(|at| format!("{what} {at:?}: not ours")));
    out.truncate(5);
    out
}

#[test]
fn kafka_connect_and_python_read_every_output_record_keys_included() {
    let started = Instant::now();
    let infra = infra();
    let connect_lib = std::env::var("KUBEFACTS_TEST_CONNECT_LIB").unwrap_or_else(|_| {
        panic!(
            "KUBEFACTS_TEST_CONNECT_LIB is not set: this test runs Kafka Connect from the jars \
             scripts/infra/up.sh resolves. Run ./scripts/test.sh, or scripts/infra/up.sh && source .cache/run/env."
        )
    });
    assert!(
        Path::new(&connect_lib).join("connect-runtime-4.4.0.jar").is_file(),
        "{connect_lib}: no Connect jars"
    );
    let bootstrap = infra.bootstrap.as_str();
    let scratch = Scratch::new("connect", "");
    let (dir, prefix, app, config) =
        (scratch.path(), scratch.prefix.clone(), scratch.app.clone(), scratch.config.clone());
    let (config, trace) = (config.to_str().unwrap().to_owned(), dir.join("trace.jsonl"));
    let trace = trace.to_str().unwrap();
    simulate_small("3", "4", Path::new(trace), &[]);
    // One CronJob deleted at the end: `[coverage]` forgets it, a tombstone on its state log.
    let text = std::fs::read_to_string(trace).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut deleted = lines.iter().rev().find(|l| l["object"]["kind"] == "CronJob").unwrap().clone();
    deleted["type"] = "DELETED".into();
    deleted["observed_at"] = lines.last().unwrap()["observed_at"].clone();
    std::fs::write(trace, format!("{text}{deleted}\n")).unwrap();
    let registry = ["--registry", infra.registry.as_str()];
    let common = ["--bootstrap", bootstrap, "--config", config.as_str()];
    kubefacts_ok(
        &[&["publish", "--create-topics", "--finish", "--input", trace][..], &common, &registry].concat(),
    );
    let log = std::fs::File::create(dir.join("process.log")).unwrap();
    let process = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args([&["process", "--create-topics", "--instance-id", "a"][..], &common, &registry].concat())
        .env("RUST_LOG", "kubefacts=info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    let stages = default_stages(&prefix, &app);
    let deadline = Instant::now() + Duration::from_secs(240);
    while let Err(behind) = all_committed(bootstrap, &stages) {
        assert!(Instant::now() < deadline, "process did not finish within 240 s: {behind}");
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(process);
    println!("processed after {:?}", started.elapsed());

    let codec =
        Codec::new(Some(RegistryClient::new(&infra.registry, Duration::from_secs(10)).unwrap())).unwrap();
    let topics: Vec<String> = OUTPUTS.iter().map(|t| format!("{prefix}{t}")).collect();
    let mut want = Records::new();
    for t in &topics {
        let records = ours(&codec, bootstrap, t);
        assert!(!records.is_empty(), "{t}: no output to read");
        want.extend(records);
    }
    let tombstones = want.values().filter(|(_, v)| v.is_null()).count();
    assert!(tombstones > 0, "the outputs hold tombstones (the deleted CronJob's)");

    // Kafka Connect, as docs/WAREHOUSE.md configures it.
    let work = dir.join("connect");
    let port = support::free_port();
    let connect = Command::new("bash")
        .arg(repo_path("tests/connect/run-connect.sh"))
        .env("KUBEFACTS_CONNECT_BOOTSTRAP", bootstrap)
        .env("KUBEFACTS_CONNECT_REGISTRY", &infra.registry)
        .env("KUBEFACTS_CONNECT_LIB", &connect_lib)
        .env("KUBEFACTS_CONNECT_WORK", &work)
        .env("KUBEFACTS_CONNECT_TOPICS", topics.join(","))
        .env("KUBEFACTS_CONNECT_NAME", unique_name("sink"))
        .env("KUBEFACTS_CONNECT_REST_PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("connect.stderr")).unwrap())
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    let mut connect = connect;
    // The complete lines of both sink files (the worker may be writing one).
    let read_sinks = || {
        let mut all = String::new();
        for f in ["sink-string-keys.jsonl", "sink-avro-keys.jsonl"] {
            let text = std::fs::read_to_string(work.join(f)).unwrap_or_default();
            all += &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        }
        all
    };
    let status = || rest::status(port);
    let deadline = Instant::now() + Duration::from_secs(120);
    let got = loop {
        let got = from_lines(&read_sinks());
        if got.len() >= want.len() {
            break got;
        }
        let failed = status();
        assert!(
            !failed.contains("FAILED") && connect.try_wait().unwrap().is_none(),
            "Kafka Connect failed: {failed}\n{}",
            std::fs::read_to_string(work.join("connect.log")).unwrap_or_default()
        );
        if Instant::now() > deadline {
            // Which topics fell short, what the worker said, and its log's end.
            let per_topic = |r: &Records| -> BTreeMap<String, usize> {
                r.keys().fold(BTreeMap::new(), |mut m, (t, _, _)| {
                    *m.entry(t.clone()).or_insert(0) += 1;
                    m
                })
            };
            let log = std::fs::read_to_string(work.join("connect.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "Connect delivered {} of {} records in 120 s\n  got per topic:  {:?}\n  want per topic: {:?}\n  \
                 status: {failed}\n--- connect.log (end)\n{}",
                got.len(),
                want.len(),
                per_topic(&got),
                per_topic(&want),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let status_text = status();
    assert!(!status_text.contains("FAILED"), "{status_text}");
    let _ = connect.kill();
    let mut failures = differences("connect", &want, &got);
    println!(
        "Kafka Connect converted {} records ({tombstones} tombstones) after {:?}",
        got.len(),
        started.elapsed()
    );

    // The Python reader a warehouse team copies.
    for t in &topics {
        let mut reader = Command::new(&infra.python);
        reader
            .arg(repo_path("docs/examples/read_facts.py"))
            .args(["--bootstrap", bootstrap, "--registry", &infra.registry, "--topic", t])
            .args(["--timestamps", "millis", "--until-idle"]);
        let out = output_within(reader, Duration::from_secs(120), &format!("read_facts.py {t}"));
        assert!(out.status.success(), "read_facts.py {t}: {}", String::from_utf8_lossy(&out.stderr));
        let mine: Records =
            want.iter().filter(|((topic, ..), _)| topic == t).map(|(k, v)| (k.clone(), v.clone())).collect();
        failures.extend(differences("python", &mine, &from_lines(&String::from_utf8_lossy(&out.stdout))));
        if t.ends_with("job-runs.v2") {
            failures.extend(python_rebuilds_the_windows(&infra.python, &codec, bootstrap, t, &out.stdout));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("Connect and Python read every output record after {:?}", started.elapsed());
}

/// docs/examples/rebuild_windows.py, fed what read_facts.py read of `topic`, rebuilds the
/// windows our own reader rebuilds from the same records: the same runs, revision and
/// finality per window (differences, if any).
fn python_rebuilds_the_windows(
    python: &Path,
    codec: &Codec,
    bootstrap: &str,
    topic: &str,
    read: &[u8],
) -> Vec<String> {
    use kubefacts::journal::{JobRunWindowPart, WindowReader};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut reader = WindowReader::new();
    for r in read_records(bootstrap, topic) {
        if let Some(v) = r.value.as_deref() {
            reader.add(rt.block_on(codec.decode_as::<JobRunWindowPart>(v)).unwrap());
        }
    }
    let ours: Vec<Value> = reader
        .windows()
        .into_iter()
        .map(|w| {
            let w = w.expect("every page of a committed revision is on Kafka");
            let uids: Vec<&str> = w.runs.iter().map(|r| r.run_uid.as_str()).collect();
            serde_json::json!([w.window_start, w.revision, w.summary.is_final, uids])
        })
        .collect();
    let mut rebuild = Command::new(python);
    rebuild.arg(repo_path("docs/examples/rebuild_windows.py")).stdin(Stdio::piped());
    let mut child = rebuild.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), read).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "rebuild_windows.py: {}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let w: Value = serde_json::from_str(l).unwrap();
            let uids: Vec<&str> =
                w["runs"].as_array().unwrap().iter().map(|r| r["run_uid"].as_str().unwrap()).collect();
            serde_json::json!([w["window_start"], w["revision"], w["is_final"], uids])
        })
        .collect();
    assert!(!ours.is_empty(), "{topic}: no window to rebuild");
    println!("rebuild_windows.py rebuilt {} windows as our reader does", theirs.len());
    if ours == theirs {
        Vec::new()
    } else {
        vec![format!("rebuild_windows.py:\n  ours:   {ours:?}\n  theirs: {theirs:?}")]
    }
}

/// `cmd`'s output, or a panic naming `what` if it has not exited within `limit` (a stalled
/// reader must fail the test, not hang it).
fn output_within(mut cmd: Command, limit: Duration, what: &str) -> std::process::Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pipe = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            r.read_to_end(&mut buf).map(|_| buf).unwrap_or_default()
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().unwrap()));
    let stderr = pipe(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
            panic!("{what} did not exit within {limit:?}; stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::process::Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

mod rest {
    /// The Connect worker's view of its connectors (`GET /connectors?expand=status`), or the
    /// error reaching it.
    pub fn status(port: u16) -> String {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return "not up yet".into() };
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        let req = "GET /connectors?expand=status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if s.write_all(req.as_bytes()).is_err() {
            return "not up yet".into();
        }
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    }
}
