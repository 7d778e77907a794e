//! `scripts/test.sh`'s verdict cannot lie: it says "passed" only when every step ran and
//! passed; a signal (TERM, INT, HUP) or its time limit stops the running step and ends the run
//! non-zero, naming the step.
//!
//! The real script runs in a copy of the repository's layout whose steps are stubs (each
//! infrastructure script only writes the env file the next line sources) and whose `cargo`
//! is a stub on PATH that passes, fails or hangs as the case asks. What is under test is the
//! script's own control flow: its traps, its step runner and its summary.

use std::{
    fs,
    os::unix::{fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Each stub records its call, writes what the script sources after it, and hangs (writing
/// its pid to `hung.pid`) when `STUB_HANG` names it.
const STUB: &str = r#"#!/usr/bin/env bash
set -eu
me="${0#./}"
me="${me#"$STUB_ROOT"/}"
echo "$me $*" >>"$STUB_ROOT/calls.log"
case "$me" in
  scripts/infra/up.sh) mkdir -p .cache/run && : >.cache/run/env ;;
  scripts/infra/cluster.sh) mkdir -p .cache/run/cluster && : >.cache/run/cluster/env ;;
  scripts/k8s/up.sh) mkdir -p .cache/k8s/run && : >.cache/k8s/run/env ;;
  scripts/docker/up.sh) mkdir -p .cache/docker && : >.cache/docker/env ;;
  scripts/image/stand-ins.sh) mkdir -p .cache/image && : >.cache/image/env ;;
esac
if [[ "${STUB_HANG:-}" == "$me" ]]; then
  echo $$ >"$STUB_ROOT/hung.pid"
  sleep 600
fi
"#;

/// `cargo`: every subcommand passes, except `cargo test`, which does what `STUB_TESTS` says.
const CARGO: &str = r#"#!/usr/bin/env bash
echo "cargo $*" >>"$STUB_ROOT/calls.log"
[[ "$1" == test ]] || exit 0
case "${STUB_TESTS:-pass}" in
  pass) echo "test result: ok. 3 passed; 0 failed; 0 ignored"; echo "test result: ok. 4 passed; 0 failed; 0 ignored" ;;
  fail) echo "test result: ok. 3 passed; 0 failed; 0 ignored"; echo "test result: FAILED. 2 passed; 1 failed; 0 ignored"; exit 101 ;;
  hang) echo "test result: ok. 3 passed; 0 failed; 0 ignored"; echo $$ >"$STUB_ROOT/hung.pid"; sleep 600 ;;
esac
"#;

const STUBS: [&str; 10] = [
    "scripts/prerequisites.sh",
    "scripts/infra/up.sh",
    "scripts/infra/cluster.sh",
    "scripts/infra/down.sh",
    "scripts/k8s/up.sh",
    "scripts/k8s/down.sh",
    "scripts/docker/up.sh",
    "scripts/docker/down.sh",
    "scripts/image/stand-ins.sh",
    "scripts/image/stack-start.sh",
];

fn write_executable(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A repository layout with the real test.sh (and what it sources) and stub steps.
struct Layout {
    root: tempfile::TempDir,
}

impl Layout {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for real in ["scripts/test.sh", "scripts/toolchains.sh"] {
            let text = fs::read_to_string(Path::new(REPO).join(real)).unwrap();
            write_executable(&root.path().join(real), &text);
        }
        for stub in STUBS {
            write_executable(&root.path().join(stub), STUB);
        }
        write_executable(&root.path().join("bin/cargo"), CARGO);
        Layout { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    /// Starts test.sh with these variables, its stdout and stderr captured.
    fn start(&self, vars: &[(&str, &str)]) -> Child {
        let path = format!("{}:{}", self.path("bin").display(), std::env::var("PATH").unwrap());
        // As from a terminal: the signals this test sends handled by default. A run started
        // with one ignored (under `nohup`, as a CI runner may start it) passes that on, and
        // bash cannot trap a signal ignored at its start: test.sh then never saw the SIGHUP.
        let mut cmd = Command::new("perl");
        cmd.args(["-e", "$SIG{$_} = 'DEFAULT' for qw(HUP INT TERM); exec @ARGV or die \"exec: $!\"", "bash"])
            .arg(self.path("scripts/test.sh"))
            .env("PATH", path)
            .env("STUB_ROOT", self.root.path())
            .env("CARGO_TARGET_DIR", self.path("target"))
            .env_remove("KUBEFACTS_TEST_TIMEOUT_SECS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        // A group of its own, which `finish` can stop whole if the script does not end.
        cmd.process_group(0);
        cmd.spawn().expect("perl (Debian's perl-base) starting bash scripts/test.sh")
    }

    /// Waits for test.sh to end, at most `limit`, and reads what it printed. A script that
    /// does not end fails the test; either way, whatever it left behind (its group and the
    /// hung stub's) is then stopped, so the pipes close. Returns the output and the hung
    /// stub's pid if it was still running when test.sh ended.
    fn finish(&self, mut child: Child, limit: Duration) -> (Output, Option<u32>) {
        let start = Instant::now();
        let mut ended = true;
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > limit {
                ended = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let hung: Option<u32> =
            fs::read_to_string(self.path("hung.pid")).ok().map(|p| p.trim().parse().unwrap());
        let left_running = hung.filter(|&pid| alive(pid));
        let groups = [Some(child.id()), left_running.and_then(process_group)];
        for group in groups.into_iter().flatten() {
            let _ = Command::new("kill").args(["-s", "KILL", "--"]).arg(format!("-{group}")).status();
        }
        let out = child.wait_with_output().unwrap();
        assert!(ended, "test.sh did not end within {limit:?}; its output:\n{}", text(&out));
        (out, left_running)
    }

    /// The pid of the stub that hangs, once it does.
    fn hung_pid(&self, child: &mut Child) -> u32 {
        let start = Instant::now();
        loop {
            if let Ok(pid) = fs::read_to_string(self.path("hung.pid")) {
                return pid.trim().parse().unwrap();
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("test.sh ended ({status}) before the stub hung; calls: {}", self.calls());
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the stub never hung; calls: {}",
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn calls(&self) -> String {
        fs::read_to_string(self.path("calls.log")).unwrap_or_default()
    }
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The process group of `pid`, while it runs.
fn process_group(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name's closing parenthesis: state, parent, group.
    stat.rsplit_once(") ")?.1.split(' ').nth(2)?.parse().ok()
}

/// Whether `pid` still runs (a zombie waiting for a reaper has stopped).
fn alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name's closing parenthesis.
    !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z'))
}

fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().unwrap().success();
    assert!(ok, "kill -{name} {pid}");
}

#[test]
fn a_run_whose_every_step_passes_says_passed_with_the_totals() {
    let layout = Layout::new();
    let (out, _) = layout.finish(layout.start(&[]), Duration::from_secs(120));
    let text = text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("==> test.sh passed in "), "{text}");
    assert!(text.lines().any(|l| l == "tests: 7 passed, 0 failed"), "{text}");
    assert!(layout.calls().contains("scripts/image/stack-start.sh"), "the last step ran: {}", layout.calls());
}

#[test]
fn failing_tests_fail_the_run_with_final_totals() {
    let layout = Layout::new();
    let (out, _) = layout.finish(layout.start(&[("STUB_TESTS", "fail")]), Duration::from_secs(120));
    let text = text(&out);
    assert_eq!(out.status.code(), Some(101), "{text}");
    assert!(!text.contains("passed in"), "{text}");
    assert!(text.contains("==> test.sh FAILED (exit 101)"), "{text}");
    assert!(text.lines().any(|l| l == "tests: 5 passed, 1 failed"), "{text}");
    assert!(
        layout.calls().contains("scripts/infra/down.sh"),
        "the infrastructure is stopped: {}",
        layout.calls()
    );
}

/// A signal while `cargo test` runs: the run ends with 128 + the signal, names the step,
/// stops the step's processes and the infrastructure, and its totals say they are partial.
#[test]
fn a_signal_during_the_tests_ends_the_run_non_zero_naming_the_step() {
    for (name, code) in [("TERM", 143), ("INT", 130), ("HUP", 129)] {
        let layout = Layout::new();
        let mut child = layout.start(&[("STUB_TESTS", "hang")]);
        let hung = layout.hung_pid(&mut child);
        signal(child.id(), name);
        let (out, left_running) = layout.finish(child, Duration::from_secs(60));
        let text = text(&out);
        assert_eq!(out.status.code(), Some(code), "SIG{name}: {text}");
        assert!(
            text.contains(&format!(
                "==> test.sh INTERRUPTED by SIG{name} during step \"cargo test --all-targets --features failpoints\""
            )),
            "SIG{name}: {text}"
        );
        assert!(!text.contains("passed in"), "SIG{name}: {text}");
        assert!(
            text.lines().any(|l| l == "tests so far (cargo test did not finish): 3 passed, 0 failed"),
            "{text}"
        );
        assert!(!text.lines().any(|l| l.starts_with("tests: ")), "no final totals: {text}");
        assert_eq!(left_running, None, "SIG{name}: the hung cargo ({hung}) was left running");
        assert!(layout.calls().contains("scripts/infra/down.sh"), "SIG{name}: {}", layout.calls());
        assert!(
            !layout.calls().contains("stack-start"),
            "SIG{name}: no step after it ran: {}",
            layout.calls()
        );
    }
}

#[test]
fn the_time_limit_ends_a_hung_step_non_zero_naming_it() {
    let layout = Layout::new();
    let mut child = layout.start(&[("STUB_HANG", "scripts/k8s/up.sh"), ("KUBEFACTS_TEST_TIMEOUT_SECS", "3")]);
    let hung = layout.hung_pid(&mut child);
    let (out, left_running) = layout.finish(child, Duration::from_secs(60));
    let text = text(&out);
    assert_eq!(out.status.code(), Some(124), "{text}");
    assert!(
        text.contains(
            "==> test.sh INTERRUPTED by the time limit (KUBEFACTS_TEST_TIMEOUT_SECS=3) during step \"kubernetes up (scripts/k8s/up.sh)\""
        ),
        "{text}"
    );
    assert!(!text.contains("passed in"), "{text}");
    assert_eq!(left_running, None, "the hung step ({hung}) was left running");
    assert!(!layout.calls().contains("cargo test"), "no step after it ran: {}", layout.calls());
}
