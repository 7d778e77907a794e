//! The catalogue of processors a pipeline file can name, and how one stage runs: on Kafka
//! (`process`) or in memory (`replay`). Both paths call the same processor constructors,
//! so the two runs of one stage cannot drift apart.

use std::{collections::BTreeMap, sync::atomic::AtomicBool};

use anyhow::{Context, bail};
use clap::ValueEnum;

use crate::{
    codec::{Codec, Framing, RecordWriter},
    config::PipelineConfig,
    config::StageConfig,
    coverage::{Coverage, CoverageConfig},
    journal::{Journal, JournalConfig, Runs, runs::RunsConfig},
    runtime::{
        OutputPort, Processor, deadletter,
        driver::{self, DriverRun, LogRecord, MemTopic, OutputTopics, StageInputs},
        kafka::{RuntimeConfig, RuntimeError, RuntimeStats, run_blocking},
        probe::{Probe, ProbeRekey},
    },
    sessions::{SessionOwners, Sessions},
};

/// Processors a stage can run. The four product processors join as they land.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProcessorName {
    /// Counts records per key (the runtime's exactly-once tests and benchmark).
    Probe,
    /// Re-keys records into buckets through a repartition topic (two-stage tests).
    ProbeRekey,
    /// `[runs]`: Jobs + Pods (co-partitioned by Job UID) → one JobRun per finished Job.
    Runs,
    /// `[journal]`: runs re-keyed by window → windows of runs on `job-runs.v1`.
    Journal,
    /// `[coverage]`: runs + CronJobs (co-partitioned by owner UID), Leases as a global
    /// table → state changes on `coverage-alerts.v1`.
    Coverage,
    /// `[sessions]`: sessions + Pods (co-partitioned by session id) → projections on
    /// `session-projections.v1`, and what each session holds re-keyed by owner.
    Sessions,
    /// `[session-owners]`: what sessions hold, keyed by owner → retained compute per owner.
    SessionOwners,
}

impl ProcessorName {
    /// The processor called `name` in a pipeline file; the error lists the known ones.
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        Self::from_str(name, false).map_err(|_| {
            let known: Vec<String> = Self::value_variants().iter().map(|v| v.name()).collect();
            anyhow::anyhow!("unknown processor {name:?} (known: {})", known.join(", "))
        })
    }

    /// The name a pipeline file uses.
    pub fn name(self) -> String {
        self.to_possible_value().map(|p| p.get_name().to_owned()).unwrap_or_default()
    }

    /// The processor's output ports, in order.
    pub fn ports(self) -> &'static [OutputPort] {
        match self {
            Self::Probe => &Probe::OUTPUTS,
            Self::ProbeRekey => &ProbeRekey::OUTPUTS,
            Self::Runs => &Runs::OUTPUTS,
            Self::Journal => &Journal::OUTPUTS,
            Self::Coverage => &Coverage::OUTPUTS,
            Self::Sessions => &Sessions::OUTPUTS,
            Self::SessionOwners => &SessionOwners::OUTPUTS,
        }
    }

    /// Names of the processor's state stores (one changelog topic each).
    pub fn stores(self) -> Vec<String> {
        fn names(p: &mut impl Processor) -> Vec<String> {
            p.stores().iter().map(|s| s.name().to_owned()).collect()
        }
        match self {
            Self::Probe => names(&mut Probe::new()),
            Self::ProbeRekey => names(&mut ProbeRekey::new()),
            Self::Runs => names(&mut Runs::new(RunsConfig::default())),
            Self::Journal => names(&mut Journal::new(JournalConfig::default())),
            Self::Coverage => names(&mut Coverage::new(CoverageConfig::default())),
            Self::Sessions => names(&mut Sessions::new(Default::default(), "")),
            Self::SessionOwners => names(&mut SessionOwners::new()),
        }
    }

    /// Checks a stage's topics against the processor: inputs given, one output per port.
    pub fn check(self, stage: &StageConfig) -> anyhow::Result<()> {
        let ports = self.ports().len();
        if stage.inputs.is_empty() || stage.outputs.len() != ports {
            bail!(
                "stage {}: processor {} needs its input topic(s) and {ports} output topic(s); \
                 got {} input(s), {} output(s)",
                stage.name(),
                self.name(),
                stage.inputs.len(),
                stage.outputs.len()
            );
        }
        Ok(())
    }

    /// Runs the stage's exactly-once loop on Kafka until `stop` (blocking).
    pub fn run_kafka(
        self,
        settings: &PipelineConfig,
        cfg: &RuntimeConfig,
        codec: &Codec,
        handle: &tokio::runtime::Handle,
        stop: &AtomicBool,
        stats: &RuntimeStats,
    ) -> Result<(), RuntimeError> {
        let ports = self.ports();
        match self {
            Self::Probe => run_blocking(cfg, codec, handle, ports, Probe::for_task, stop, stats),
            Self::ProbeRekey => run_blocking(cfg, codec, handle, ports, |_| ProbeRekey::new(), stop, stats),
            Self::Runs => {
                let runs = runs_config(settings);
                run_blocking(cfg, codec, handle, ports, |_| Runs::new(runs.clone()), stop, stats)
            }
            Self::Journal => {
                let journal = settings.journal;
                run_blocking(cfg, codec, handle, ports, |_| Journal::new(journal), stop, stats)
            }
            Self::Coverage => {
                let coverage = &settings.coverage;
                run_blocking(cfg, codec, handle, ports, |_| Coverage::new(coverage.clone()), stop, stats)
            }
            Self::Sessions => {
                let make = |_| sessions(settings);
                run_blocking(cfg, codec, handle, ports, make, stop, stats)
            }
            Self::SessionOwners => {
                run_blocking(cfg, codec, handle, ports, |_| SessionOwners::new(), stop, stats)
            }
        }
    }

    /// Runs `stage` over in-memory topics with the driver; its outputs (named as the stage
    /// says) get `partitions` partitions each.
    pub async fn run_memory(
        self,
        settings: &PipelineConfig,
        stage_config: &StageConfig,
        codec: &Codec,
        inputs: &[&MemTopic],
        globals: &[&MemTopic],
        partitions: i32,
    ) -> anyhow::Result<DriverRun> {
        let stage = stage_config.name();
        let forward = OutputPort::forwarding(self.ports());
        let mut topics =
            OutputTopics { writers: Vec::new(), topics: Vec::new(), key_writers: Vec::new(), forward };
        for (port, name) in self.ports().iter().zip(&stage_config.outputs) {
            topics.writers.push(single_object_writer(codec, port.record)?);
            topics.key_writers.push(port.key_record.map(|k| single_object_writer(codec, k)).transpose()?);
            topics.topics.push(MemTopic::new(name.clone(), partitions));
        }
        let untimed: Vec<usize> = (stage_config.inputs.iter().enumerate())
            .filter(|(_, t)| stage_config.untimed.contains(t))
            .map(|(i, _)| i)
            .collect();
        let rules = settings.input_rules(stage_config);
        let reads = StageInputs { inputs, globals, untimed: &untimed, rules: &rules };
        let run = match self {
            Self::Probe => driver::run_stage(stage, codec, reads, topics, Probe::for_task).await,
            Self::ProbeRekey => driver::run_stage(stage, codec, reads, topics, |_| ProbeRekey::new()).await,
            Self::Runs => {
                let make = |_| Runs::new(runs_config(settings));
                driver::run_stage(stage, codec, reads, topics, make).await
            }
            Self::Journal => {
                let make = |_| Journal::new(settings.journal);
                driver::run_stage(stage, codec, reads, topics, make).await
            }
            Self::Coverage => {
                let make = |_| Coverage::new(settings.coverage.clone());
                driver::run_stage(stage, codec, reads, topics, make).await
            }
            Self::Sessions => {
                let make = |_| sessions(settings);
                driver::run_stage(stage, codec, reads, topics, make).await
            }
            Self::SessionOwners => {
                let make = |_| SessionOwners::new();
                driver::run_stage(stage, codec, reads, topics, make).await
            }
        };
        run.with_context(|| format!("stage {stage}"))
    }
}

/// `[runs]`'s settings from the pipeline: it re-keys runs by the journal's window length and
/// runs the `[cleanup]` sweep.
fn runs_config(settings: &PipelineConfig) -> RunsConfig {
    RunsConfig {
        window_length_ms: settings.journal.window_length_ms,
        cleanup: settings.cleanup.clone(),
        ..RunsConfig::default()
    }
}

/// `[sessions]` as the pipeline configures it (the session label is `[minimize]`'s).
fn sessions(settings: &PipelineConfig) -> Sessions {
    Sessions::new(settings.sessions.clone(), settings.minimize.session_label.clone())
}

/// A writer of the current revision of `record`, framed as single-object encoding (no
/// registry in memory).
pub fn single_object_writer(codec: &Codec, record: &str) -> anyhow::Result<RecordWriter> {
    let known = codec.schemas().current(record)?;
    Ok(RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint })?)
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
) -> anyhow::Result<Vec<StageReport>> {
    let mut reports = Vec::new();
    let dl_writer = single_object_writer(codec, deadletter::FULL_NAME)?;
    for stage in stages {
        let processor = ProcessorName::parse(&stage.processor)?;
        processor.check(stage)?;
        let find = |name: &String| {
            topics.get(name).with_context(|| {
                format!(
                    "stage {} reads {name}, which neither the input nor an earlier stage writes",
                    stage.name()
                )
            })
        };
        let inputs = stage.inputs.iter().map(find).collect::<anyhow::Result<Vec<_>>>()?;
        let globals = stage.globals.iter().map(find).collect::<anyhow::Result<Vec<_>>>()?;
        let started = std::time::Instant::now();
        let run = processor.run_memory(settings, stage, codec, &inputs, &globals, partitions).await?;
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
