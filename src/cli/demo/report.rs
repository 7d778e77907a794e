//! What `kubefacts demo` prints of its own: the trace and observations, and the stages'
//! figures. What the outputs say (runs and windows, cleanup decisions, coverage alerts,
//! sessions) is `kubefacts report`'s summary (`cli/report/`), printed after these.

use std::{collections::BTreeMap, path::Path};

use super::TopicTally;
use crate::cli::progress::thousands;
use kubefacts::{
    config::PipelineConfig,
    observe::{AdmissionCounts, InputTopic},
    pipeline::StageReport,
};

#[allow(clippy::too_many_arguments)]
pub(super) fn print_summary(
    trace_name: &str,
    entries: u64,
    stream_span_ms: i64,
    tallies: &BTreeMap<InputTopic, TopicTally>,
    round_trips: u64,
    rejected: &BTreeMap<String, u64>,
    admission: &AdmissionCounts,
    output: &Path,
    config: &PipelineConfig,
) {
    println!(
        "kubefacts demo — {trace_name}\n{} trace entries over {:.1} h of cluster time",
        thousands(entries),
        stream_span_ms as f64 / 3_600_000.0
    );
    println!("\nobservations, as the watcher would publish them (minimized, keyed, Avro single-object):");
    println!(
        "  {:<30} {:>9} {:>8} {:>8} {:>12} {:>6}",
        "topic", "records", "markers", "keys", "bytes", "avg B"
    );
    for (topic, t) in tallies {
        println!(
            "  {:<30} {:>9} {:>8} {:>8} {:>12} {:>6.0}",
            topic.topic_name(&config.topics),
            t.records,
            t.markers,
            t.keys.len(),
            t.bytes,
            t.bytes as f64 / t.records.max(1) as f64
        );
    }
    println!(
        "{round_trips} records encoded and decoded back identical (env, args, commands, volumes, images and messages never leave the watcher)"
    );
    let admitted: u64 = admission.admitted.values().sum();
    let excluded: Vec<String> = admission
        .excluded
        .iter()
        .map(|((kind, step), n)| format!("{n} {kind} at {}", step.as_str()))
        .collect();
    println!(
        "admission ({}: \"true\" opts out): {admitted} objects admitted, {}",
        config.admission.opt_out_annotation,
        if excluded.is_empty() {
            "none excluded".to_owned()
        } else {
            format!("excluded: {}", excluded.join(", "))
        }
    );
    if rejected.is_empty() {
        println!("no trace entry was rejected");
    } else {
        println!("rejected (each reported above):");
        for (reason, n) in rejected {
            println!("  {reason}: {n}");
        }
    }
    println!(
        "outputs in {}/: <topic>.jsonl (decoded, one record per line) and <topic>.avro (Avro object container files)",
        output.display()
    );
}

/// What each stage wrote.
pub(super) fn print_processors(
    reports: &[StageReport],
    processed: &[(String, usize, bool)],
    dead_letters: usize,
    rate: f64,
) {
    // Each stage with what it read (global inputs once per task) and its time.
    let stages: Vec<String> = reports
        .iter()
        .map(|r| format!("{} ({} in, {:.2} s)", r.stage, thousands(r.records_in), r.secs))
        .collect();
    println!(
        "\nprocessors, in memory as on Kafka (stages: {}; {} observations/s on one core):",
        stages.join(" → "),
        thousands(rate as u64)
    );
    let width = processed.iter().map(|(t, ..)| t.len()).max().unwrap_or(0);
    for (topic, n, internal) in processed {
        println!(
            "  {topic:<width$} {n:>8} records{}",
            if *internal { " (internal: not written out)" } else { "" }
        );
    }
    if dead_letters == 0 {
        println!("no record was dead-lettered");
    }
}
