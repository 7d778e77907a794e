//! `kubefacts report`: what happened, from the fact topics — the runs per journal window,
//! the CronJobs that fail most with their exit breakdown, the cleanup decisions, the
//! coverage states and the compute stopped sessions retain (docs/REPORT.md).
//!
//! `summary.rs` computes it from decoded facts, `text.rs` prints it (the demo prints the
//! same), `source.rs` reads the facts from Kafka or from `replay`'s files.

mod source;
pub(crate) mod summary;
pub(crate) mod text;

use std::{collections::BTreeSet, path::PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde::Serialize;

pub(crate) use source::from_memory;
use source::{Collector, ReadCounts};
pub(crate) use summary::{Filter, Summary};

/// Arguments of `kubefacts report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Only facts at or after this time: RFC 3339 (`2026-11-01T06:00:00Z`) or a span back
    /// from now (`6h`, `2d`, `90m`). Each fact by its own time: a run's finish, a decision's
    /// sweep, an alert's or a projection's stream time.
    #[arg(long, value_parser = parse_since)]
    pub since: Option<jiff::Timestamp>,
    /// Only this namespace (repeatable). Windows count their runs in it; sessions are
    /// narrowed by their Pod's namespace; owners' retained-compute totals are not.
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// How to print the summary.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Read the `<topic>.jsonl` files `kubefacts replay --output` (or `demo`) wrote in this
    /// folder instead of Kafka.
    #[arg(long)]
    pub from_dir: Option<PathBuf>,
    /// Kafka and the schema registry (to decode Confluent-framed records).
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Pipeline configuration: its `[topics]` name the fact topics, `[kafka]` how to reach
    /// them (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Output of `report`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReportFormat {
    /// For people.
    Text,
    /// One JSON document on stdout, for scripts.
    Json,
}

/// The JSON document: the summary and what was read to make it.
#[derive(Debug, Serialize)]
struct Document<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    read: &'a ReadCounts,
}

/// `--since`: an RFC 3339 time, or a span back from now.
fn parse_since(s: &str) -> Result<jiff::Timestamp, String> {
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    let span: jiff::Span = s
        .parse()
        .map_err(|_| format!("{s:?} is neither an RFC 3339 time nor a span such as 6h, 2d or 90m"))?;
    // Days are calendar units: counted back on UTC's calendar.
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    Ok(now.checked_sub(span.abs()).map_err(|e| e.to_string())?.timestamp())
}

pub(super) async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let pipeline = super::load_pipeline(args.config.as_deref())?;
    let (collector, from): (Collector, String) = match &args.from_dir {
        Some(dir) => {
            if !dir.is_dir() {
                bail!("--from-dir {}: not a folder", dir.display());
            }
            let codec = kubefacts::codec::Codec::new(None)?;
            (source::from_dir(&codec, &pipeline.topics, dir)?, dir.display().to_string())
        }
        None => {
            let codec = args.kafka.codec()?;
            let brokers = args.kafka.brokers(&pipeline.kafka)?;
            let collector = source::from_kafka(&codec, &brokers, &pipeline.topics).await?;
            (collector, brokers.to_string())
        }
    };
    let (facts, read) = collector.into_facts();
    let filter = Filter {
        since_ms: args.since.map(|t| t.as_millisecond()),
        namespaces: args.namespaces.iter().cloned().collect::<BTreeSet<_>>(),
    };
    let summary = Summary::build(facts, &filter, pipeline.cleanup.job_retention_secs);
    let records: u64 = read.records.values().sum();
    let bad = read.bad_total();
    // The account of the input goes to stderr, so stdout stays one document with --format json.
    eprintln!(
        "report: {records} record(s) of {} fact topic(s) from {from} in {:.1} s; {bad} did not decode",
        read.records.len(),
        started.elapsed().as_secs_f64()
    );
    for (topic, reasons) in &read.bad {
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{n}×{r}")).collect();
        eprintln!("report: {topic}: records that did not decode (left out): {}", reasons.join(", "));
    }
    if !read.missing.is_empty() {
        eprintln!("report: not found, so not in the summary: {}", read.missing.join(", "));
    }
    match args.format {
        ReportFormat::Text => {
            println!("kubefacts report — {from}{}", shown(&summary.filters));
            text::print(&summary);
        }
        ReportFormat::Json => {
            let out = std::io::stdout();
            let mut out = out.lock();
            serde_json::to_writer_pretty(&mut out, &Document { summary: &summary, read: &read })
                .context("writing the report")?;
            std::io::Write::write_all(&mut out, b"\n")?;
        }
    }
    if bad > 0 {
        // The summary stands, but it is of fewer facts than there are: not a success.
        bail!("{bad} record(s) did not decode and are not in the summary (see above)");
    }
    Ok(())
}

/// The filters, for the title line.
fn shown(filters: &summary::FiltersShown) -> String {
    let mut out = String::new();
    if let Some(since) = &filters.since {
        out += &format!(", since {since}");
    }
    if !filters.namespaces.is_empty() {
        out += &format!(", namespaces {}", filters.namespaces.join(", "));
    }
    out
}

#[cfg(test)]
mod tests;
