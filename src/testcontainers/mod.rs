//! A real kubefacts for the integration tests of services that consume its topics (cargo
//! feature `testcontainers`): Kafka (KRaft), optionally a schema registry, and `kubefacts
//! process` in Docker containers, started by [testcontainers](https://docs.rs/testcontainers),
//! fed a cluster scenario as the watcher would publish it, and read back as typed facts.
//!
//! ```toml
//! [dev-dependencies]
//! kubefacts = { version = "0.1", features = ["testcontainers"] }
//! ```
//!
//! Images default to what a user pulls and are overridable in code
//! ([`StackBuilder::kafka_image`], …) and by environment variables ([`images`]); Docker is
//! found the way testcontainers finds it (`DOCKER_HOST`). Every container uses the host
//! network and free loopback ports. docs/TESTING_DOWNSTREAM.md explains it.
#![doc = concat!("\nA consumer test (`examples/consumer_test.rs`, built with the crate's examples):\n\n```no_run\n", include_str!("../../examples/consumer_test.rs"), "\n```")]

mod facts;
pub mod images;
mod logs;
mod replay;
mod stack;

pub use facts::{Fact, Facts, RawRecord};
pub use images::Images;
pub use replay::Replayed;
pub use stack::{KubefactsStack, StackBuilder};

use std::path::PathBuf;

use thiserror::Error;

/// Why a stack did not start or an operation on it failed. Errors about a container carry
/// the tail of its log and where the whole log is.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StackError {
    /// A container did not start or did not become ready.
    #[error("{component} ({image}) did not start: {source}; its log ({}):\n{tail}", log.display())]
    Start {
        /// `kafka`, `registry`, `process`, or a one-shot command.
        component: String,
        /// The image.
        image: String,
        /// What testcontainers said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// The container's log file.
        log: PathBuf,
        /// Its last lines.
        tail: String,
    },
    /// A one-shot kubefacts command exited with a failure.
    #[error("kubefacts {component} exited with {code}:\n{tail}")]
    Exited {
        /// The command.
        component: String,
        /// Its exit code.
        code: i64,
        /// Its last lines of stderr.
        tail: String,
    },
    /// Something did not happen in time.
    #[error("timed out waiting for {what}\n{tail}")]
    Timeout {
        /// What.
        what: String,
        /// The log tail of the container concerned, when there is one.
        tail: String,
    },
    /// The Docker daemon.
    #[error("docker: {0}")]
    Docker(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The pipeline file.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Talking to the stack's Kafka.
    #[error("kafka: {0}")]
    Kafka(String),
    /// The registry client could not be built.
    #[error("registry: {0}")]
    Registry(String),
    /// A record did not decode.
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
    /// A file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// One record of a fact topic as JSON: the key and the value decoded the way `kubefacts
/// replay` writes them (timestamps as RFC 3339), so the two compare with `==`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FactRecord {
    /// The key: a string, or the decoded Avro key (a journal window's).
    pub key: serde_json::Value,
    /// The value.
    pub value: serde_json::Value,
}

/// A host application's session event ([`KubefactsStack::session_event`]; the fields of
/// `kubefacts session-event`, docs/SESSIONS_INPUT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEvent {
    /// The session's id (the record's key).
    pub session_id: String,
    /// Its state, e.g. `running`, `waiting_for_input`, `completed`.
    pub state: String,
    /// Who owns it.
    pub owner: String,
    /// The namespace of the Pod that serves it.
    pub pod_namespace: String,
    /// That Pod's name.
    pub pod_name: String,
    /// When it happened (RFC 3339); default: now. Time only moves forward: an event
    /// observed before what the stack has already been fed is late.
    pub observed_at: Option<String>,
}

impl SessionEvent {
    fn args(&self) -> Vec<String> {
        vec![
            "--session-id".to_owned(),
            self.session_id.clone(),
            "--state".to_owned(),
            self.state.clone(),
            "--owner".to_owned(),
            self.owner.clone(),
            "--pod-namespace".to_owned(),
            self.pod_namespace.clone(),
            "--pod-name".to_owned(),
            self.pod_name.clone(),
        ]
    }
}
