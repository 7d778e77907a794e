//! Issue 25: a window of more runs than fit one record goes through the broker as bounded,
//! append-only parts.
//!
//! 20 000 Jobs finish within one hour (10:00–11:00), then one more that finished at 10:30 is
//! first seen at 11:20, after the window went final. `publish --finish` puts the trace on
//! Kafka; `kubefacts process` (the default stages) runs it in two instances, one SIGKILLed
//! twice while it holds an open transaction; `max_record_bytes` is 16 KiB and a window is
//! emitted every 2 min of stream time, so the window's ~3 MB of runs take hundreds of pages
//! and each emission writes several. Read back with
//! read_committed:
//! * no record of `job-runs.v2` exceeds `max_record_bytes`;
//! * its records equal `replay`'s of the same trace (the in-memory driver), record for record;
//! * a reader rebuilds from the summary and pages exactly the runs filed (`job-run-facts.v1`),
//!   each run written in exactly one page;
//! * the late run re-opened the window with one page (holding only it) and one summary;
//! * `kubefacts tail` decodes every part, its Avro key included.

#[cfg(not(feature = "failpoints"))]
compile_error!(
    "these tests stop instances at failpoints: build them with `--features failpoints` (./scripts/test.sh does)"
);

mod support;

use std::{
    collections::BTreeMap,
    io::Write,
    time::{Duration, Instant},
};

use kubefacts::{
    codec::Codec,
    journal::{JobRun, JobRunWindowPart, WindowReader},
};
use serde_json::json;
use support::{
    Scratch, all_committed, default_stages, infra, is_stopped, kubefacts_ok,
    outputs::{on_kafka, replayed, table_differences},
    read_records,
};

const RUNS: i64 = 20_000;
const MAX_RECORD_BYTES: usize = 16 * 1024;
/// 2026-11-29T10:00:00Z.
const T10: i64 = 1_795_946_400_000;
const MIN: i64 = 60_000;

fn rfc(ms: i64) -> String {
    kubefacts::codec::json::rfc3339_millis(ms).unwrap()
}

/// A bare Job that started a minute before `finished` and ended then; every seventh failed.
fn finished_job(n: i64, finished: i64) -> serde_json::Value {
    let (status, conditions) = if n % 7 == 0 {
        let reason = if n % 2 == 0 { "BackoffLimitExceeded" } else { "DeadlineExceeded" };
        (
            json!({"failed": 3}),
            json!([{"type": "Failed", "status": "True", "reason": reason, "lastTransitionTime": rfc(finished)}]),
        )
    } else {
        (
            json!({"succeeded": 1, "completionTime": rfc(finished)}),
            json!([{"type": "Complete", "status": "True", "lastTransitionTime": rfc(finished)}]),
        )
    };
    let mut status = status;
    status["startTime"] = json!(rfc(finished - MIN));
    status["conditions"] = conditions;
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("run-{n}"),
            "namespace": "batch",
            "uid": format!("0b000000-0000-4000-8000-{n:012}"),
            "creationTimestamp": rfc(finished - MIN),
        },
        "spec": {"backoffLimit": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}},
        "status": status,
    })
}

/// The trace: the hour's runs (each observed a second after it finished), heartbeats every
/// 10 s, then the late run at 11:20 and heartbeats past its settle time.
fn write_trace(path: &std::path::Path) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut line = |v: serde_json::Value| writeln!(out, "{v}").unwrap();
    // Admission lets a Job through once its namespace is known.
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "batch", "uid": "0a000000-0000-4000-8000-000000000001"}});
    line(json!({"type": "ADDED", "observed_at": rfc(T10 - MIN), "object": namespace}));
    let step = 60 * MIN / RUNS;
    let mut next_beat = T10;
    for n in 0..RUNS {
        let finished = T10 + n * step;
        while next_beat <= finished + 1_000 {
            line(json!({"type": "HEARTBEAT", "observed_at": rfc(next_beat)}));
            next_beat += 10_000;
        }
        line(
            json!({"type": "ADDED", "observed_at": rfc(finished + 1_000), "object": finished_job(n, finished)}),
        );
    }
    // Past the window's end + grace (10 min): final.
    while next_beat <= T10 + 75 * MIN {
        line(json!({"type": "HEARTBEAT", "observed_at": rfc(next_beat)}));
        next_beat += 10_000;
    }
    line(
        json!({"type": "ADDED", "observed_at": rfc(T10 + 80 * MIN), "object": finished_job(RUNS, T10 + 30 * MIN)}),
    );
    for at in [T10 + 80 * MIN + 10_000, T10 + 81 * MIN] {
        line(json!({"type": "HEARTBEAT", "observed_at": rfc(at)}));
    }
}

#[test]
fn a_window_of_20_000_runs_goes_through_the_broker_in_bounded_append_only_parts() {
    let started = Instant::now();
    let infra = infra();
    let bootstrap = infra.bootstrap.as_str();
    let scratch = Scratch::new("pages", "session_timeout_ms = 6000\nmax_batch_records = 500\n");
    let (dir, prefix, app, config) =
        (scratch.path(), scratch.prefix.clone(), scratch.app.clone(), scratch.config.clone());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&config)
        .unwrap()
        .write_all(
            format!("\n[journal]\nmax_record_bytes = {MAX_RECORD_BYTES}\nemit_interval_ms = 120000\n")
                .as_bytes(),
        )
        .unwrap();
    let config_arg = config.to_str().unwrap();
    let trace = dir.join("trace.jsonl");
    write_trace(&trace);
    let trace_arg = trace.to_str().unwrap();
    let common = ["--partitions", "3", "--finish", "--input", trace_arg, "--config", config_arg];
    kubefacts_ok(&[&["publish", "--create-topics", "--bootstrap", bootstrap][..], &common].concat());
    let replay_dir = dir.join("replay");
    let replay = kubefacts_ok(&[&["replay", "--output", replay_dir.to_str().unwrap()][..], &common].concat());
    assert!(
        replay.all().contains("20455 trace entries (0 rejected, 0 excluded by admission)"),
        "{}",
        replay.all()
    );
    println!("published and replayed after {:?}", started.elapsed());

    // b runs throughout; a stops itself inside a transaction and is SIGKILLed there, twice;
    // then a runs to the end beside b.
    let stages = default_stages(&prefix, &app);
    let processes = support::Processes::new(dir.join("logs"), bootstrap, &config);
    let mut b = processes.start("b", &[]);
    for failpoint in ["before-commit:3", "before-commit:5"] {
        let mut a = processes.start("a", &["--failpoint", failpoint]);
        let deadline = Instant::now() + Duration::from_secs(120);
        while !is_stopped(a.id()) && all_committed(bootstrap, &stages).is_err() && Instant::now() < deadline {
            assert!(a.try_wait().unwrap().is_none(), "a exited before its failpoint\n{}", processes.tails());
            std::thread::sleep(Duration::from_millis(20));
        }
        a.kill().unwrap();
        a.wait().unwrap();
        println!("SIGKILLed a ({failpoint}) after {:?}", started.elapsed());
    }
    let mut a = processes.start("a", &[]);
    support::wait_all_committed(bootstrap, &stages, &mut [("b", &mut b), ("a", &mut a)], 300, &|| {
        processes.tails()
    });
    println!("every stage committed its input after {:?}", started.elapsed());

    let topic = format!("{prefix}job-runs.v2");
    let records = read_records(bootstrap, &topic);
    // Bounded: key and value within the limit, with room left for the headers.
    let largest = records
        .iter()
        .map(|r| r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len))
        .max();
    assert!(largest.is_some_and(|l| l <= MAX_RECORD_BYTES - 512), "largest record {largest:?} B");

    // The same records as the in-memory driver's, record for record per key.
    let (codec, rt) =
        (Codec::new(None).unwrap(), tokio::runtime::Builder::new_current_thread().build().unwrap());
    let (want, got) = (replayed(&replay_dir, &topic), on_kafka(&rt, &codec, bootstrap, &topic));
    let differences = table_differences("job-runs.v2", &want, &got);
    assert!(differences.is_empty(), "Kafka != replay:\n{}\n{}", differences.join("\n"), processes.tails());

    // A reader rebuilds exactly the runs filed, each written in exactly one page.
    let parts: Vec<JobRunWindowPart> = records
        .iter()
        .map(|r| rt.block_on(codec.decode_as(r.value.as_deref().expect("no tombstones"))).unwrap())
        .collect();
    let pages: Vec<&JobRunWindowPart> = parts.iter().filter(|p| p.part > 0).collect();
    let paged: usize = pages.iter().map(|p| p.page.as_ref().unwrap().runs.len()).sum();
    assert_eq!(paged as i64, RUNS + 1, "each run in exactly one page ({} pages)", pages.len());
    let mut per_revision: BTreeMap<i64, usize> = BTreeMap::new();
    pages.iter().for_each(|p| *per_revision.entry(p.revision).or_default() += 1);
    let most = per_revision.values().max().copied().unwrap_or(0);
    assert!(most > 1, "no emission was cut into several pages: the limit was never reached");
    let mut reader = WindowReader::new();
    parts.iter().cloned().for_each(|p| reader.add(p));
    let windows = reader.windows();
    let [Ok(window)] = windows.as_slice() else { panic!("one window, rebuilt: {windows:?}") };
    let facts: Vec<JobRun> = read_records(bootstrap, &format!("{prefix}job-run-facts.v1"))
        .iter()
        .map(|r| rt.block_on(codec.decode_as(r.value.as_deref().unwrap())).unwrap())
        .collect();
    let by_uid =
        |runs: &[JobRun]| runs.iter().map(|r| (r.run_uid.clone(), r.clone())).collect::<BTreeMap<_, _>>();
    assert_eq!(facts.len() as i64, RUNS + 1);
    assert!(by_uid(&window.runs) == by_uid(&facts), "the rebuilt window holds exactly the runs filed");
    let s = &window.summary;
    assert!(s.is_final);
    assert_eq!((s.runs, s.succeeded + s.failed), (RUNS + 1, RUNS + 1));
    assert_eq!(s.failed, facts.iter().filter(|r| r.failure_reason.is_some()).count() as i64);

    // The late run: the last revision wrote one page with only it, and the summary.
    let last: Vec<&JobRunWindowPart> = parts.iter().filter(|p| p.revision == window.revision).collect();
    assert_eq!(last.len(), 2, "the late revision: {last:?}");
    let late_page = last.iter().find(|p| p.part > 0).expect("a page");
    let late_uid = format!("0b000000-0000-4000-8000-{RUNS:012}");
    let uids: Vec<&str> = late_page.page.as_ref().unwrap().runs.iter().map(|r| r.run_uid.as_str()).collect();
    assert_eq!(uids, [late_uid.as_str()]);
    // `kubefacts tail` decodes both parts, keys included.
    let tail = kubefacts_ok(&[
        "tail",
        "--topic",
        &topic,
        "--from-beginning",
        "--until-idle",
        "--bootstrap",
        bootstrap,
    ]);
    let lines: Vec<serde_json::Value> =
        tail.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), records.len(), "{}", tail.stderr);
    for l in &lines {
        assert_eq!(l["schema"], "io.kubefacts.v2.JobRunWindowPart", "{l}");
        let part = l["key"]["part"].as_i64().expect("an Avro key with its part");
        assert_eq!(l["value"]["part"].as_i64(), Some(part));
        assert_eq!(l["value"]["summary"].is_object(), part == 0, "{l}");
        assert_eq!(l["value"]["page"].is_object(), part > 0, "{l}");
    }
    println!(
        "{} records ({} pages, up to {most} per emission, largest {} B) for {} runs; passed after {:?}",
        records.len(),
        pages.len(),
        largest.unwrap(),
        RUNS + 1,
        started.elapsed()
    );
}
