//! Every container's output, as it comes: appended to `<dir>/<container>.log` and kept in
//! memory for the tail a failure shows.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use ::testcontainers::core::logs::LogFrame;

/// One container's log: its file and what it printed so far.
#[derive(Debug, Clone)]
pub(crate) struct ContainerLog {
    path: PathBuf,
    text: Arc<Mutex<Vec<u8>>>,
}

impl ContainerLog {
    pub(crate) fn new(dir: &Path, name: &str) -> Self {
        Self { path: dir.join(format!("{name}.log")), text: Arc::default() }
    }

    /// The log consumer testcontainers calls with each frame.
    pub(crate) fn consumer(&self) -> impl Fn(&LogFrame) + Send + Sync + 'static {
        let (path, text) = (self.path.clone(), self.text.clone());
        move |frame: &LogFrame| {
            let bytes = match frame {
                LogFrame::StdOut(b) | LogFrame::StdErr(b) => b,
            };
            text.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(bytes);
            // A log that cannot be written is not worth failing a test over: the tail in
            // memory still reaches the error.
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
                let _ = f.write_all(bytes);
            }
        }
    }

    /// Its last `lines` lines.
    pub(crate) fn tail(&self, lines: usize) -> String {
        let text = self.text.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Everything it printed.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}
