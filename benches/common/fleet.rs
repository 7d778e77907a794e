//! What the benchmarks over a simulated fleet share: a trace's observations as the watcher
//! would publish them (minimized, admitted, Avro), partitioned as on Kafka, in memory.

#![allow(dead_code)] // each bench uses its own subset

use kubefacts::{
    codec::Codec,
    config::PipelineConfig,
    observe::{
        InputTopic, JobObservation, Observation, ObservationEvent, ObservationRecord, Observer,
        memory::MemInputs, model::Source,
    },
    trace::TraceEntry,
};

/// Observations of a trace, partitioned as on Kafka.
pub struct Observed {
    pub inputs: MemInputs,
    /// Records on every input topic (markers and heartbeats once per partition).
    pub records: usize,
    /// Bytes of their values.
    pub value_bytes: usize,
}

/// The watcher's path for every entry: admission, minimization, Avro, partitioning.
pub fn observe(
    codec: &Codec,
    config: &PipelineConfig,
    partitions: i32,
    entries: impl Iterator<Item = TraceEntry>,
) -> Observed {
    let mut inputs = MemInputs::new(codec, &config.topics, partitions).unwrap();
    let mut observer = observer(config);
    let mut last_ms = None;
    let mut admit = |observer: &mut Observer, entry: TraceEntry| {
        for released in observer.admit(entry) {
            for obs in released.expect("the simulator writes only valid entries") {
                inputs.push(&obs).unwrap();
            }
        }
    };
    for entry in entries {
        last_ms = Some(entry.observed_at_ms);
        admit(&mut observer, entry);
    }
    // As `publish --finish` ends the trace on the broker: the same records in memory.
    for entry in last_ms.map(|at| config.finishing_heartbeats(at)).unwrap_or_default() {
        admit(&mut observer, entry);
    }
    observer.finish();
    let (mut records, mut value_bytes) = (0, 0);
    for topic in InputTopic::ALL {
        let log = inputs.topic(topic);
        records += log.len();
        value_bytes +=
            log.partitions.iter().flatten().map(|r| r.value.as_ref().map_or(0, Vec::len)).sum::<usize>();
    }
    Observed { inputs, records, value_bytes }
}

/// An observer configured as the pipeline's watcher.
pub fn observer(config: &PipelineConfig) -> Observer {
    let source = Source { cluster: config.cluster.clone(), instance: "bench".into(), epoch: 1 };
    Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone())
}

/// The UID of the Job this observation shows finished, if it does.
pub fn finishing_job(obs: &Observation) -> Option<String> {
    match &obs.record {
        ObservationRecord::Job(JobObservation {
            event: ObservationEvent::Applied, job: Some(job), ..
        }) if kubefacts::journal::runs::finished(job) => Some(job.meta.uid.clone()),
        _ => None,
    }
}
