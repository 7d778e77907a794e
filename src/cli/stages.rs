//! Running a pipeline's stages in memory (`replay`, `demo`): each stage of the file is
//! looked up in [`crate::pipeline::STAGES`], which builds its processor the same way for
//! Kafka (`process`), so the two runs of one stage cannot drift apart.

use std::collections::BTreeMap;

use anyhow::Context;

use crate::{
    codec::{Codec, Framing, RecordWriter},
    config::PipelineConfig,
    config::StageConfig,
    pipeline::Stage,
    runtime::{
        OutputPort, deadletter,
        driver::{DriverRun, LogRecord, MemTopic, OutputTopics, StageInputs},
    },
};

/// Runs `stage_config` (of processor `stage`) over in-memory topics with the driver; its
/// outputs (named as the stage says) get `partitions` partitions each.
pub async fn run_memory(
    stage: &Stage,
    settings: &PipelineConfig,
    stage_config: &StageConfig,
    codec: &Codec,
    inputs: &[&MemTopic],
    globals: &[&MemTopic],
    partitions: i32,
) -> anyhow::Result<DriverRun> {
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
    run.with_context(|| format!("stage {name}"))
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
        let processor = Stage::named(&stage.processor)?;
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
        let run = run_memory(processor, settings, stage, codec, &inputs, &globals, partitions).await?;
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
