//! A trace file with bad lines in the middle: `replay` and `publish` read every other line
//! (each bad one reported with its line and reason) and then exit non-zero saying so —
//! never exit 0 having skipped input, never stop at the first bad line.

mod support;

use std::path::Path;

use support::{infra, kubefacts_ok, kubefacts_output, simulate_small, unique_name};

/// The bad lines, each with what its report must say.
const BAD: [(&[u8], &str); 5] = [
    (b"{\"type\": \"HEARTBEAT\", \"observed_at\": oops}", "invalid JSON"),
    (b"{\"type\":\"HEARTBEAT\",\"observed_at\":\"\xff\xfe\"}", "not UTF-8 text"),
    (b"{\"type\":42,\"observed_at\":1793491200000}", "field type: expected a string, found the number 42"),
    (
        b"{\"type\":\"HEARTBEAT\",\"observed_at\":-99999999999999999}",
        "field observed_at: -99999999999999999 ms is outside",
    ),
    (b"{\"type\":\"ADDED\",\"observed_at\":1793491200000,\"object\":null}", "missing field object"),
];

/// A small simulated trace, and the same with the bad lines spread through its middle:
/// (good, bad, the 1-based line of each bad line in the bad file).
fn traces(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<usize>) {
    let good = dir.join("good.jsonl");
    simulate_small("1", "3", &good, &[]);
    let text = std::fs::read(&good).unwrap();
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    assert!(lines.len() > 100, "a trace to hide bad lines in: {} lines", lines.len());
    let step = lines.len() / (BAD.len() + 1);
    let mut bad = Vec::new();
    let mut at = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 && i % step == 0 && i / step <= BAD.len() {
            bad.extend_from_slice(BAD[i / step - 1].0);
            bad.push(b'\n');
            at.push(bad.iter().filter(|&&b| b == b'\n').count());
        }
        bad.extend_from_slice(line);
    }
    let bad_path = dir.join("bad.jsonl");
    std::fs::write(&bad_path, bad).unwrap();
    (good, bad_path, at)
}

/// Every bad line is reported with its number and reason, and the summary says the rest
/// was used.
fn assert_reported(verb: &str, out: &std::process::Output, at: &[usize], entries: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{verb} with bad lines must exit non-zero:\n{stderr}");
    for (line, (_, says)) in at.iter().zip(BAD) {
        let prefix = format!("{verb}: line {line}: ");
        let report = stderr.lines().find(|l| l.starts_with(&prefix));
        let report = report.unwrap_or_else(|| panic!("no report of line {line}:\n{stderr}"));
        assert!(report.contains(says), "line {line} reported as {report:?}, expected {says:?}");
    }
    assert!(stderr.contains("5 trace entries were rejected ("), "{stderr}");
    assert!(
        stderr.contains(&format!("each reported above with its line; the other {entries} entries were")),
        "{stderr}"
    );
}

fn summary_entries(stdout: &str, verb: &str) -> String {
    let line =
        stdout.lines().find(|l| l.starts_with(&format!("{verb}: "))).unwrap_or_else(|| panic!("{stdout}"));
    line.split_whitespace().nth(1).unwrap().to_owned()
}

#[test]
fn replay_reads_every_other_line_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (good, bad, at) = traces(dir.path());
    let (good_out, bad_out) = (dir.path().join("good-out"), dir.path().join("bad-out"));
    let ok =
        kubefacts_ok(&["replay", "--input", good.to_str().unwrap(), "--output", good_out.to_str().unwrap()]);
    let out = kubefacts_output(&[
        "replay",
        "--input",
        bad.to_str().unwrap(),
        "--output",
        bad_out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let entries = summary_entries(&stdout, "replay");
    assert_eq!(entries, summary_entries(&ok.stdout, "replay"), "every good entry read");
    assert_reported("replay", &out, &at, &entries);
    // The outputs are the good trace's, whole: nothing after a bad line was lost.
    let mut names: Vec<_> = std::fs::read_dir(&good_out).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        let (a, b) =
            (std::fs::read(good_out.join(&name)).unwrap(), std::fs::read(bad_out.join(&name)).unwrap());
        assert!(a == b, "{name:?} differs between the good trace and the one with bad lines");
    }
}

#[test]
fn publish_publishes_every_other_line_and_exits_non_zero() {
    let infra = infra();
    let dir = tempfile::tempdir().unwrap();
    let (good, bad, at) = traces(dir.path());
    let publish = |prefix: &str, input: &Path| {
        let config = dir.path().join(format!("{prefix}toml"));
        std::fs::write(&config, format!("[topics]\nprefix = \"{prefix}\"\n")).unwrap();
        kubefacts_output(&[
            "publish",
            "--create-topics",
            "--bootstrap",
            &infra.bootstrap,
            "--input",
            input.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
    };
    let ok = publish(&format!("{}.", unique_name("trace-good")), &good);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let out = publish(&format!("{}.", unique_name("trace-bad")), &bad);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let entries = summary_entries(&stdout, "publish");
    let ok_stdout = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(entries, summary_entries(&ok_stdout, "publish"), "every good entry read");
    assert_reported("publish", &out, &at, &entries);
    // As many records went to the broker as for the good trace alone.
    let records = |s: &str| s.split("→ ").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_owned);
    assert_eq!(records(&stdout), records(&ok_stdout), "{stdout}\n{ok_stdout}");
}
