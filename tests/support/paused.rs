//! The test registry stopped with SIGSTOP: a registry that neither answers nor refuses,
//! as one behind a partition or in a long GC pause is.

use std::process::Command;

/// The registry scripts/infra/up.sh started, stopped until this is dropped (however the
/// test ends) or [`PausedRegistry::resume`]d.
#[derive(Debug)]
pub struct PausedRegistry(i32);

impl PausedRegistry {
    /// Stops the registry.
    pub fn pause() -> Self {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/run/registry.pid");
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e} (scripts/infra/up.sh writes it)"));
        let pid: i32 = text.trim().parse().unwrap();
        let ok = Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -STOP {pid} (the registry)");
        Self(pid)
    }

    /// Lets the registry run again.
    pub fn resume(self) {}
}

impl Drop for PausedRegistry {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0.to_string()]).status();
    }
}
