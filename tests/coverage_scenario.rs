//! `[coverage]` over a simulated fleet (the small profile, 12 h, seed 1), through the
//! product path: `kubefacts demo` simulates the trace, runs the default pipeline in memory
//! and writes `coverage-alerts.v1` as JSON lines. The simulator's scenario says what must
//! happen: `batch-ops/report-export` silently stops (a run hangs, Forbid skips the rest)
//! and must fire after `for`; `batch-ops/frequent-sync` is overdue only during the
//! controller-manager outage and must go MANAGER_STOPPED, never fire, and be OK again
//! after recovery.

use std::{path::Path, process::Command};

use kubefacts::simulate::{Plan, START_MS, profile};
use serde_json::Value;

const HOURS: u32 = 12;
const FOR_MS: i64 = 15 * 60_000;
const EVALUATE_MS: i64 = 10_000;

fn ms(v: &Value) -> i64 {
    let text = v.as_str().unwrap_or_else(|| panic!("a timestamp, not {v}"));
    let t: jiff::Timestamp = text.parse().unwrap();
    t.as_millisecond()
}

/// Every record of `coverage-alerts.v1` the demo wrote, in stream-time order.
fn alerts(dir: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["demo", "--profile", "small", "--seed", "1", "--hours", &HOURS.to_string(), "--output"])
        .arg(dir)
        .env_remove("KUBEFACTS_BOOTSTRAP")
        .env_remove("KUBEFACTS_REGISTRY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("FIRED  batch-ops/report-export"), "the summary names what fired:\n{stdout}");
    let text = std::fs::read_to_string(dir.join("kubefacts.coverage-alerts.v1.jsonl")).unwrap();
    let mut all: Vec<Value> =
        text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["value"].clone()).collect();
    all.sort_by_key(|a| ms(&a["stream_time"]));
    all
}

fn of<'a>(all: &'a [Value], name: &str) -> Vec<&'a Value> {
    all.iter().filter(|a| a["subject"]["namespace"] == "batch-ops" && a["subject"]["name"] == name).collect()
}

fn states(records: &[&Value]) -> Vec<String> {
    records.iter().map(|a| a["state"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_silent_stop_fires_and_an_outage_only_goes_manager_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let all = alerts(dir.path());
    let plan = Plan::new(&profile("small").unwrap(), HOURS, 1, START_MS);
    let scenario = plan.scenario();
    let stops_at = scenario.stops_at_ms.expect("12 h leave room for the silent stop");
    let (outage_from, outage_to) = scenario.outages[0];
    assert!(stops_at > outage_to, "the scenario puts the stop after the outage");

    // report-export: OK while it runs; after its hanging run it is overdue with the
    // manager alive, so PENDING, then FIRING after `for`, and nothing ends it.
    let stopped = of(&all, "report-export");
    let s = states(&stopped);
    let after: Vec<&&Value> = stopped.iter().filter(|a| ms(&a["stream_time"]) > stops_at).collect();
    assert!(after.iter().all(|a| a["state"] == "PENDING" || a["state"] == "FIRING"), "after the stop: {s:?}");
    let firing =
        stopped.iter().find(|a| a["state"] == "FIRING").unwrap_or_else(|| panic!("never fired: {s:?}"));
    let pending_since = ms(&firing["pending_since"]);
    let fired_at = ms(&firing["stream_time"]);
    assert!(pending_since >= stops_at, "pending only after the stop");
    assert_eq!(ms(&firing["expected_by"]), pending_since, "no gap since: pending from expected-by");
    assert!(
        (FOR_MS..FOR_MS + EVALUATE_MS).contains(&(fired_at - pending_since)),
        "fires `for` after pending began (within one evaluation): {}",
        fired_at - pending_since
    );
    assert_eq!(s.last().map(String::as_str), Some("FIRING"), "no progress after the stop: {s:?}");

    // frequent-sync: overdue only while the manager is down.
    let sync = of(&all, "frequent-sync");
    let s = states(&sync);
    assert!(!s.contains(&"FIRING".to_owned()) && !s.contains(&"PENDING".to_owned()), "{s:?}");
    let stop = sync.iter().find(|a| a["state"] == "MANAGER_STOPPED").unwrap_or_else(|| panic!("{s:?}"));
    let at = ms(&stop["stream_time"]);
    assert!(at > outage_from && at < outage_to, "during the outage {outage_from}..{outage_to}: {at}");
    let gap = &stop["coverage_gaps"][0];
    // The gap starts at the last renewal's expiry: within one lease (15 s) after the
    // manager stopped, and is still open at the record.
    let gap_from = ms(&gap["started_at"]);
    assert!(gap_from > outage_from && gap_from <= outage_from + 15_000, "{gap}");
    assert_eq!(ms(&gap["ended_at"]), at, "open at the record's time");
    let back = sync.iter().find(|a| ms(&a["stream_time"]) > outage_to).unwrap_or_else(|| panic!("{s:?}"));
    assert_eq!(back["state"], "OK", "after recovery it behaves: {s:?}");
    assert_eq!(s.last().map(String::as_str), Some("OK"));

    // Across the whole fleet, no pending span that fired contains any of the outage: the
    // manager's stop earns no pending time.
    for a in all.iter().filter(|a| a["state"] == "FIRING") {
        let (from, to) = (ms(&a["pending_since"]), ms(&a["stream_time"]));
        assert!(to <= outage_from || from >= outage_to, "{a}");
    }
}
