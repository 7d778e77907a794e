//! Who wrote a record: [`Writer`], named in the [`WRITER_HEADER`] header.

use serde::{Deserialize, Serialize};

/// Header naming the task that wrote a record: `<task>/<tasks>`, e.g. `2/3` (task 2 of a
/// stage with 3 tasks). Records without it have one writer ([`Writer::SOLE`]).
pub const WRITER_HEADER: &str = "kubefacts-writer";

/// The writer of a record on a partition: a task of the upstream stage, and how many tasks
/// that stage has (so a reader knows how many writers to wait for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Writer {
    /// The writing task (its partition number).
    pub task: u32,
    /// Tasks of the writing stage.
    pub tasks: u32,
}

impl Writer {
    /// The only writer of a source topic's partition.
    pub const SOLE: Self = Self { task: 0, tasks: 1 };

    /// Task `task` of a stage with `tasks` tasks.
    pub fn new(task: i32, tasks: i32) -> Self {
        let tasks = tasks.max(1) as u32;
        Self { task: (task.max(0) as u32).min(tasks - 1), tasks }
    }

    /// The header value, `<task>/<tasks>`.
    pub fn header_value(self) -> String {
        format!("{}/{}", self.task, self.tasks)
    }

    /// Parses a header value; `None` unless it is `<task>/<tasks>` with `task < tasks`.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let (task, tasks) = std::str::from_utf8(value).ok()?.split_once('/')?;
        let (task, tasks): (u32, u32) = (task.parse().ok()?, tasks.parse().ok()?);
        (task < tasks).then_some(Self { task, tasks })
    }
}
