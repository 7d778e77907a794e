//! What `kubefacts replay` wrote: one `<topic>.jsonl` file per topic.

use std::path::{Path, PathBuf};

use super::{FactRecord, StackError};
use crate::config::PipelineConfig;

/// The output of [`super::KubefactsStack::replay_trace`]: every topic of the pipeline as
/// `kubefacts replay` computed it in memory.
#[derive(Debug, Clone)]
pub struct Replayed {
    dir: PathBuf,
    prefix: String,
}

impl Replayed {
    pub(crate) fn new(dir: &Path, config: &PipelineConfig) -> Self {
        Self { dir: dir.to_owned(), prefix: config.topics.prefix.clone() }
    }

    /// The folder of `<topic>.jsonl` files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The records of a topic (`name` without the prefix), partition by partition in
    /// offset order, as JSON (the same shape [`super::KubefactsStack::fact_records`]
    /// reads); an empty list when the replay wrote none.
    pub fn records(&self, name: &str) -> Result<Vec<FactRecord>, StackError> {
        let path = self.dir.join(format!("{}{name}.jsonl", self.prefix));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StackError::Io { path, source }),
        };
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| StackError::Io {
                path: path.clone(),
                source: std::io::Error::other(format!("line {}: {e}", i + 1)),
            })?;
            // Tombstones (a null value) are left out, as a fact reader leaves them out.
            if !v["value"].is_null() {
                out.push(FactRecord { key: v["key"].clone(), value: v["value"].clone() });
            }
        }
        Ok(out)
    }
}
