//! The topology as a library type: every stage a pipeline file can name, as one
//! [`Stage`] each — its name, its outputs, its stores and how it is built from the pipeline
//! file — listed once in [`STAGES`]. `kubefacts process` (Kafka), `replay` and `demo` (in
//! memory) iterate this list; adding a stage is its own folder and one line here.
//!
//! [`run_all_in_memory`] runs a pipeline's stages in memory (`replay`, `demo`, the
//! benchmarks): each stage is looked up in [`STAGES`], which builds its processor the same
//! way for Kafka (`process`), so the two runs of one stage cannot drift apart.

use std::{
    collections::BTreeMap,
    fs::File,
    future::Future,
    io::{BufWriter, Write},
    pin::Pin,
};

use thiserror::Error;

use crate::{
    codec::{Codec, CodecError, single_object_writer},
    config::{PipelineConfig, StageConfig},
    coverage::Coverage,
    journal::{Journal, Runs, RunsConfig},
    runtime::{
        OutputPort, Processor, deadletter,
        driver::{self, DriverError, DriverRun, LogRecord, MemTopic, OutputTopics, StageInputs},
        kafka::{KafkaStage, RuntimeConfig, RuntimeError, RuntimeStats, kafka_stage},
        probe::{Probe, ProbeRekey},
    },
    sessions::{SessionOwners, Sessions},
};

/// A stage the pipeline file names that is not one of [`STAGES`], or whose topics do not
/// fit it.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PipelineError {
    /// No stage has this processor name.
    #[error("unknown processor {name:?} (known: {known})")]
    Unknown {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// The stage's topics do not match the processor's inputs and outputs.
    #[error(
        "stage {stage}: processor {processor} needs its input topic(s) and {ports} output topic(s); got {inputs} input(s), {outputs} output(s)"
    )]
    Topics {
        /// The stage's name.
        stage: String,
        /// The processor's name.
        processor: &'static str,
        /// Output ports the processor has.
        ports: usize,
        /// Inputs given.
        inputs: usize,
        /// Outputs given.
        outputs: usize,
    },
}

/// Why a run of the stages in memory stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MemoryRunError {
    /// A stage the pipeline file names does not exist or does not fit its topics.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// A writer could not be built, or a dead letter not encoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A stage reads a topic nothing before it wrote.
    #[error("stage {stage} reads {topic}, which neither the input nor an earlier stage writes")]
    MissingInput {
        /// The stage's name.
        stage: String,
        /// The topic it reads.
        topic: String,
    },
    /// The driver could not run a stage.
    #[error("stage {stage}")]
    Driver {
        /// The stage's name.
        stage: String,
        /// What the driver said.
        #[source]
        source: DriverError,
    },
}

/// One stage: a processor, what it writes and keeps, and how to build it.
pub struct Stage {
    /// The processor's name in a pipeline file (`processor = "runs"`).
    pub name: &'static str,
    /// Its output ports, in order.
    pub outputs: &'static [OutputPort],
    /// Its state stores (one changelog topic each), in the order the processor lists them.
    pub stores: &'static [&'static str],
    build: &'static (dyn Build + Sync),
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("name", &self.name)
            .field("stores", &self.stores)
            .finish_non_exhaustive()
    }
}

/// Every stage, in the order a pipeline usually runs them.
pub static STAGES: [Stage; 7] = [
    // counts records per key (the runtime's exactly-once tests and benchmark)
    Stage {
        name: "probe",
        outputs: &Probe::OUTPUTS,
        stores: &["counts"],
        build: &Make(|_, task| Probe::for_task(task)),
    },
    // re-keys records into buckets through a repartition topic (two-stage tests)
    Stage {
        name: "probe-rekey",
        outputs: &ProbeRekey::OUTPUTS,
        stores: &[],
        build: &Make(|_, _| ProbeRekey::new()),
    },
    // [runs]: Jobs + Pods (co-partitioned by Job UID) -> one JobRun per finished Job
    Stage {
        name: "runs",
        outputs: &Runs::OUTPUTS,
        stores: &["jobs", "due", "ended", "dependents", "sweeps", "job-contexts"],
        build: &Make(|settings, _| Runs::new(runs_config(settings), Journal::input_key(&settings.journal))),
    },
    // [journal]: runs re-keyed by window -> windows of runs on job-runs.v2 (summaries and pages)
    Stage {
        name: "journal",
        outputs: &Journal::OUTPUTS,
        stores: &["windows-v2", "filed-runs", "pending-runs", "run-contexts"],
        build: &Make(|settings, _| Journal::new(settings.journal)),
    },
    // [coverage]: runs + CronJobs (co-partitioned by owner UID), Leases as a global table -> state changes on coverage-alerts.v1
    Stage {
        name: "coverage",
        outputs: &Coverage::OUTPUTS,
        stores: &[
            "subjects",
            "lease-instances",
            "lease-observed",
            "ticks",
            "subject-contexts",
            "lease-contexts",
        ],
        build: &Make(|settings, _| Coverage::new(settings.coverage.clone())),
    },
    // [sessions]: sessions + Pods (co-partitioned by session id) -> projections on session-projections.v1, and what each session holds re-keyed by owner
    Stage {
        name: "sessions",
        outputs: &Sessions::OUTPUTS,
        stores: &["sessions", "sweeps"],
        build: &Make(|settings, _| sessions(settings)),
    },
    // [session-owners]: what sessions hold, keyed by owner -> retained compute per owner
    Stage {
        name: "session-owners",
        outputs: &SessionOwners::OUTPUTS,
        stores: &["held", "totals"],
        build: &Make(|_, _| SessionOwners::new()),
    },
];

impl Stage {
    /// The stage whose processor is called `name`; the error lists the known ones.
    pub fn named(name: &str) -> Result<&'static Stage, PipelineError> {
        STAGES.iter().find(|s| s.name == name).ok_or_else(|| PipelineError::Unknown {
            name: name.to_owned(),
            known: STAGES.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
        })
    }

    /// Checks a stage's topics against the processor: inputs given, one output per port.
    pub fn check(&self, stage: &StageConfig) -> Result<(), PipelineError> {
        if stage.inputs.is_empty() || stage.outputs.len() != self.outputs.len() {
            return Err(PipelineError::Topics {
                stage: stage.name().to_owned(),
                processor: self.name,
                ports: self.outputs.len(),
                inputs: stage.inputs.len(),
                outputs: stage.outputs.len(),
            });
        }
        Ok(())
    }

    /// Sets the stage up for one stream thread ([`run_thread`](crate::runtime::kafka::run_thread)
    /// hosts it with the other stages).
    pub fn kafka_stage<'a>(
        &self,
        settings: &'a PipelineConfig,
        cfg: &'a RuntimeConfig,
        codec: &'a Codec,
        handle: &'a tokio::runtime::Handle,
        stats: &'a RuntimeStats,
    ) -> Result<KafkaStage<'a>, RuntimeError> {
        self.build.kafka(Shell { settings, codec, ports: self.outputs }, cfg, handle, stats)
    }

    /// Runs the stage over in-memory topics with the driver.
    pub fn run_memory<'a>(
        &self,
        settings: &'a PipelineConfig,
        stage: &'a str,
        codec: &'a Codec,
        reads: StageInputs<'a>,
        topics: OutputTopics,
    ) -> Pin<Box<dyn Future<Output = Result<DriverRun, DriverError>> + 'a>> {
        self.build.memory(Shell { settings, codec, ports: self.outputs }, stage, reads, topics)
    }
}

/// What every run of a stage is given.
struct Shell<'a> {
    settings: &'a PipelineConfig,
    codec: &'a Codec,
    ports: &'static [OutputPort],
}

/// How a stage's processor is built and run, once per processor type.
trait Build {
    fn kafka<'a>(
        &self,
        shell: Shell<'a>,
        cfg: &'a RuntimeConfig,
        handle: &'a tokio::runtime::Handle,
        stats: &'a RuntimeStats,
    ) -> Result<KafkaStage<'a>, RuntimeError>;

    fn memory<'a>(
        &self,
        shell: Shell<'a>,
        stage: &'a str,
        reads: StageInputs<'a>,
        topics: OutputTopics,
    ) -> Pin<Box<dyn Future<Output = Result<DriverRun, DriverError>> + 'a>>;

    /// The stores a processor built from `settings` opens (to check [`Stage::stores`]).
    #[cfg(test)]
    fn store_names(&self, settings: &PipelineConfig) -> Vec<String>;
}

/// A processor built per task from the pipeline file and the task's partition.
struct Make<P>(fn(&PipelineConfig, i32) -> P);

impl<P: Processor + 'static> Build for Make<P> {
    fn kafka<'a>(
        &self,
        shell: Shell<'a>,
        cfg: &'a RuntimeConfig,
        handle: &'a tokio::runtime::Handle,
        stats: &'a RuntimeStats,
    ) -> Result<KafkaStage<'a>, RuntimeError> {
        let (build, settings) = (self.0, shell.settings);
        kafka_stage(cfg, shell.codec, handle, shell.ports, move |task| build(settings, task), stats)
    }

    fn memory<'a>(
        &self,
        shell: Shell<'a>,
        stage: &'a str,
        reads: StageInputs<'a>,
        topics: OutputTopics,
    ) -> Pin<Box<dyn Future<Output = Result<DriverRun, DriverError>> + 'a>> {
        let build = self.0;
        Box::pin(driver::run_stage(stage, shell.codec, reads, topics, move |task| {
            build(shell.settings, task)
        }))
    }

    #[cfg(test)]
    fn store_names(&self, settings: &PipelineConfig) -> Vec<String> {
        (self.0)(settings, 0).stores().iter().map(|s| s.name().to_owned()).collect()
    }
}

/// Runs `stage_config` (of processor `stage`) over in-memory topics with the driver; its
/// outputs (named as the stage says) get `partitions` partitions each.
async fn run_stage_in_memory(
    stage: &Stage,
    settings: &PipelineConfig,
    stage_config: &StageConfig,
    codec: &Codec,
    inputs: &[&MemTopic],
    globals: &[&MemTopic],
    partitions: i32,
) -> Result<DriverRun, MemoryRunError> {
    let name = stage_config.name();
    let forward = OutputPort::forwarding(stage.outputs);
    let mut topics =
        OutputTopics { writers: Vec::new(), topics: Vec::new(), key_writers: Vec::new(), forward };
    for (port, topic) in stage.outputs.iter().zip(&stage_config.outputs) {
        topics.writers.push(single_object_writer(codec, port.record)?);
        topics.key_writers.push(port.key_record.map(|k| single_object_writer(codec, k)).transpose()?);
        topics.topics.push(MemTopic::new(topic.clone(), partitions));
    }
    let untimed: Vec<usize> = (stage_config.inputs.iter().enumerate())
        .filter(|(_, t)| stage_config.untimed.contains(t))
        .map(|(i, _)| i)
        .collect();
    let rules = settings.input_rules(stage_config);
    let reads = StageInputs { inputs, globals, untimed: &untimed, rules: &rules };
    let run = stage.run_memory(settings, name, codec, reads, topics).await;
    run.map_err(|source| MemoryRunError::Driver { stage: name.to_owned(), source })
}

/// What one stage did in memory: its input, its state (changelogs) and its time.
#[derive(Debug)]
pub struct StageReport {
    /// The stage's name.
    pub stage: String,
    /// Input records read (heartbeats and global inputs included).
    pub records_in: u64,
    /// One changelog per store (`<stage>-<store>-changelog`), a partition per task.
    pub changelogs: Vec<MemTopic>,
    /// Wall-clock seconds the stage took.
    pub secs: f64,
}

/// Runs `stages` in order over `topics` (by name) in memory, adding each stage's outputs
/// to `topics` and its dead letters to the `dead_letter` topic; returns what each did.
pub async fn run_all_in_memory(
    codec: &Codec,
    settings: &PipelineConfig,
    stages: &[StageConfig],
    topics: &mut BTreeMap<String, MemTopic>,
    dead_letter: &str,
    partitions: i32,
) -> Result<Vec<StageReport>, MemoryRunError> {
    let mut reports = Vec::new();
    let dl_writer = single_object_writer(codec, deadletter::FULL_NAME)?;
    for stage in stages {
        let processor = Stage::named(&stage.processor)?;
        processor.check(stage)?;
        let find = |name: &String| {
            topics.get(name).ok_or_else(|| MemoryRunError::MissingInput {
                stage: stage.name().to_owned(),
                topic: name.clone(),
            })
        };
        let inputs = stage.inputs.iter().map(find).collect::<Result<Vec<_>, _>>()?;
        let globals = stage.globals.iter().map(find).collect::<Result<Vec<_>, _>>()?;
        let started = std::time::Instant::now();
        let run =
            run_stage_in_memory(processor, settings, stage, codec, &inputs, &globals, partitions).await?;
        let secs = started.elapsed().as_secs_f64();
        let dl =
            topics.entry(dead_letter.to_owned()).or_insert_with(|| MemTopic::new(dead_letter, partitions));
        // As on Kafka: a dead letter goes to its source task's partition, keyed as it came.
        for letter in &run.dead_letters {
            let record = LogRecord {
                key: letter.source_key.clone(),
                value: Some(dl_writer.encode(letter)?),
                timestamp_ms: letter.source_timestamp.unwrap_or(0),
                heartbeat: false,
                beat: false,
                writer: crate::runtime::Writer::SOLE,
            };
            dl.append(letter.source_partition % dl.partition_count(), record);
        }
        for out in run.outputs {
            topics.insert(out.name.clone(), out);
        }
        reports.push(StageReport {
            stage: stage.name().to_owned(),
            records_in: run.records_in,
            changelogs: run.changelogs,
            secs,
        });
    }
    Ok(reports)
}

/// `[runs]`'s settings from the pipeline: it runs the `[cleanup]` sweep.
fn runs_config(settings: &PipelineConfig) -> RunsConfig {
    RunsConfig { cleanup: settings.cleanup.clone(), ..RunsConfig::default() }
}

/// `[sessions]` as the pipeline configures it (the session label is `[minimize]`'s).
fn sessions(settings: &PipelineConfig) -> Sessions {
    Sessions::new(settings.sessions.clone(), settings.minimize.session_label.clone())
}

/// Why a topic could not be written as JSON lines.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JsonlError {
    /// A record did not decode.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The file could not be written.
    #[error("writing {}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Writes a topic as `<dir>/<topic>.jsonl` (what `replay` and `demo` write, and
/// `report --from-dir` reads): JSON lines (`partition`, `offset`, `timestamp`, `key`, `value`),
/// partition by partition, decoding values with the generic decoder. Forwarded heartbeats
/// (stream time only, no value) are left out: they carry no fact.
pub async fn write_jsonl(codec: &Codec, log: &MemTopic, dir: &std::path::Path) -> Result<usize, JsonlError> {
    let path = dir.join(format!("{}.jsonl", log.name));
    let io = |source| JsonlError::Io { path: path.clone(), source };
    let mut out = BufWriter::new(File::create(&path).map_err(io)?);
    let mut n = 0;
    for (partition, records) in log.partitions.iter().enumerate() {
        for (offset, rec) in records.iter().enumerate().filter(|(_, r)| !r.heartbeat) {
            let value = match &rec.value {
                Some(bytes) => crate::codec::json::to_json(
                    &codec.decode(bytes).await?.value,
                    crate::codec::json::Timestamps::Rfc3339,
                ),
                None => serde_json::Value::Null,
            };
            // Avro keys (the journal's window key) decode like values; others are UTF-8.
            let key = match rec.key.as_deref() {
                Some(k) if k.starts_with(&[0xC3, 0x01]) => match codec.decode(k).await {
                    Ok(d) => crate::codec::json::to_json(&d.value, crate::codec::json::Timestamps::Rfc3339),
                    Err(_) => serde_json::Value::String(String::from_utf8_lossy(k).into_owned()),
                },
                Some(k) => serde_json::Value::String(String::from_utf8_lossy(k).into_owned()),
                None => serde_json::Value::Null,
            };
            let line = Line {
                partition,
                offset,
                timestamp: crate::codec::json::rfc3339_millis(rec.timestamp_ms),
                key: &key,
                value: &value,
            };
            serde_json::to_writer(&mut out, &line).map_err(|e| io(e.into()))?;
            out.write_all(b"\n").map_err(io)?;
            n += 1;
        }
    }
    out.flush().map_err(io)?;
    Ok(n)
}

/// One line of a topic's JSON lines file (serialized in place: `json!` would copy the
/// decoded value once more).
#[derive(serde::Serialize)]
struct Line<'a> {
    partition: usize,
    offset: usize,
    timestamp: Option<String>,
    key: &'a serde_json::Value,
    value: &'a serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stores each stage declares are the ones its processor opens, in its order: the
    /// changelog topics `process` creates come from the declaration.
    #[test]
    fn every_stage_declares_the_stores_its_processor_opens() {
        let settings = PipelineConfig::default();
        let wrong: Vec<String> = (STAGES.iter())
            .filter(|s| s.build.store_names(&settings) != s.stores)
            .map(|s| {
                format!("{}: declares {:?}, opens {:?}", s.name, s.stores, s.build.store_names(&settings))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn stage_names_are_unique_and_unknown_ones_are_listed() {
        let mut names: Vec<&str> = STAGES.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STAGES.len());
        let err = Stage::named("nope").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown processor \"nope\" (known: probe, probe-rekey, runs, journal, coverage, sessions, session-owners)"
        );
    }
}
