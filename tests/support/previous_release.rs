//! The previous release's `kubefacts` binary, built from its commit by the test that needs
//! it (tests/upgrade_keeps_state.rs).
//!
//! The source comes from this clone's history (`git archive`); the build gets a target
//! directory of its own, so it never replaces the binary the other tests run. The binary
//! is kept under `<target>/previous-release/<commit>/`, so only the first run builds it
//! (2.6 min here, on two cores).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The last commit CI landed before this round's Kafka work (issue 26): the release a
/// running fleet upgrades from. Move it forward when a release lands.
pub const PREVIOUS_RELEASE: &str = "df88a1ae7ea99e8ebc4d80a37d57b33c627f7f5d";

/// The previous release's binary, built on first use.
pub fn binary() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from);
    let home = target.join("previous-release");
    let binary = home.join(PREVIOUS_RELEASE).join("kubefacts");
    if binary.exists() {
        return binary;
    }
    ensure_commit(repo);
    let source = home.join("source");
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).unwrap();
    let archive =
        run(Command::new("git").current_dir(repo).args(["archive", "--format=tar", PREVIOUS_RELEASE]));
    let mut tar = Command::new("tar").arg("-x").arg("-C").arg(&source).stdin(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive).unwrap();
    assert!(tar.wait().unwrap().success(), "could not unpack {PREVIOUS_RELEASE} into {}", source.display());

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = home.join("target");
    let started = std::time::Instant::now();
    println!("building the previous release {PREVIOUS_RELEASE} (once; kept in {})", home.display());
    run(Command::new(cargo)
        .current_dir(&source)
        .args(["build", "--locked", "--bin", "kubefacts", "--target-dir"])
        .arg(&built)
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("RUSTFLAGS"));
    println!("built the previous release in {:?}", started.elapsed());
    std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
    std::fs::copy(built.join("debug").join("kubefacts"), &binary).unwrap();
    // Only the binary is kept: its build directory takes 1.3 GB.
    let _ = std::fs::remove_dir_all(&source);
    let _ = std::fs::remove_dir_all(&built);
    binary
}

/// Makes sure the clone has the commit: a shallow clone fetches it from `origin`, and a
/// clone that cannot fails with what to do.
fn ensure_commit(repo: &Path) {
    let has = || {
        Command::new("git")
            .current_dir(repo)
            .args(["cat-file", "-e", &format!("{PREVIOUS_RELEASE}^{{commit}}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has() {
        return;
    }
    let _ =
        Command::new("git").current_dir(repo).args(["fetch", "--quiet", "origin", PREVIOUS_RELEASE]).status();
    assert!(
        has(),
        "the upgrade test needs the previous release's commit {PREVIOUS_RELEASE}, which this clone lacks \
         and could not fetch from origin: clone with full history (not --depth)"
    );
}

/// Runs `command`, failing the test with its output unless it succeeds; returns stdout.
fn run(command: &mut Command) -> Vec<u8> {
    let out = command.stderr(Stdio::piped()).output().unwrap();
    assert!(out.status.success(), "{command:?} failed:\n{}", tail(&String::from_utf8_lossy(&out.stderr), 40));
    out.stdout
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
