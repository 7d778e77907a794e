//! The example alert rules (`deploy/prometheus/kubefacts-alerts.yml`, docs/METRICS.md "Alert
//! rules") with the real promtool: they load (`promtool check rules`) and their unit tests
//! (`kubefacts-alerts.test.yml`: each alert fires on synthetic series, none on healthy ones)
//! pass (`promtool test rules`).

mod support;

use std::process::Command;

use support::{prometheus, repo_path};

const RULES: &str = "deploy/prometheus/kubefacts-alerts.yml";
const RULE_TESTS: &str = "deploy/prometheus/kubefacts-alerts.test.yml";

/// Runs promtool with `args`, panicking with its output unless it succeeds; returns stdout.
fn promtool(args: &[&str]) -> String {
    let tool = prometheus().promtool;
    let out = Command::new(&tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?} failed ({}):\n{text}", out.status);
    text
}

#[test]
fn the_alert_rules_load_in_promtool() {
    let text = promtool(&["check", "rules", &repo_path(RULES)]);
    assert!(text.contains("SUCCESS: 4 rules found"), "{text}");
    let rules = std::fs::read_to_string(repo_path(RULES)).unwrap();
    for alert in [
        "KubefactsConsumerLagHigh",
        "KubefactsDeadLetters",
        "KubefactsWatcherNotLeader",
        "KubefactsStreamTimeStalled",
    ] {
        assert!(rules.contains(&format!("- alert: {alert}\n")), "{alert} missing from {RULES}");
        let tests = std::fs::read_to_string(repo_path(RULE_TESTS)).unwrap();
        assert!(tests.contains(&format!("alertname: {alert}\n")), "{RULE_TESTS} does not test {alert}");
    }
}

#[test]
fn the_alert_rules_pass_their_promtool_unit_tests() {
    let text = promtool(&["test", "rules", &repo_path(RULE_TESTS)]);
    assert!(text.contains("SUCCESS"), "{text}");
}
