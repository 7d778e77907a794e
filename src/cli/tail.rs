//! `kubefacts tail`: decode a topic's records to JSON lines on stdout.
//!
//! Each record becomes one line `{"topic", "partition", "offset", "timestamp", "key",
//! "framing", "schema", "value"}`; a record that does not decode becomes a line with
//! `"error"` and `"reason"` instead, and tailing goes on. Reads committed data only.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use rdkafka::{Message, Offset};
use serde_json::json;

use kubefacts::{
    codec::{
        Framing,
        json::{Timestamps, to_json},
    },
    runtime::kafka::bystander,
};

/// Arguments of `kubefacts tail`.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Topic to read.
    #[arg(long)]
    pub topic: String,
    /// Start at the earliest retained record instead of the end.
    #[arg(long)]
    pub from_beginning: bool,
    /// Stop once no record has arrived for `--idle-ms`.
    #[arg(long)]
    pub until_idle: bool,
    /// How long without records counts as idle, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub idle_ms: u64,
    /// Stop after this many records.
    #[arg(long)]
    pub max_records: Option<u64>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Pipeline configuration, for its `[kafka]` section (TLS, SASL); default: the embedded
    /// pipelines/default.toml (plaintext).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// How timestamps are printed.
    #[arg(long, value_enum, default_value_t = TimestampFormat::Rfc3339)]
    pub timestamps: TimestampFormat,
}

/// Timestamp rendering of `tail`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TimestampFormat {
    /// `2026-11-29T10:00:00.250Z`.
    Rfc3339,
    /// Epoch milliseconds.
    Millis,
}

pub(super) async fn run(args: TailArgs) -> anyhow::Result<()> {
    let codec = args.kafka.codec()?;
    let pipeline = super::load_pipeline(args.config.as_deref())?;
    let brokers = args.kafka.brokers(&pipeline.kafka)?;
    let consumer = bystander::committed_consumer(&brokers, "tail", false)?;
    let Some(partitions) =
        tokio::task::block_in_place(|| bystander::partitions_of(&consumer, &args.topic, &brokers))?
    else {
        bail!("topic {} does not exist on {}", args.topic, args.kafka.bootstrap);
    };
    let start = if args.from_beginning { Offset::Beginning } else { Offset::End };
    tokio::task::block_in_place(|| bystander::assign(&consumer, &[(args.topic.clone(), partitions)], start))?;

    let ts = match args.timestamps {
        TimestampFormat::Rfc3339 => Timestamps::Rfc3339,
        TimestampFormat::Millis => Timestamps::EpochMillis,
    };
    let idle = Duration::from_millis(args.idle_ms);
    let (mut seen, mut bad, mut heartbeats) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let stdout = std::io::stdout();
    loop {
        if args.max_records.is_some_and(|max| seen >= max) {
            break;
        }
        let msg = if args.until_idle {
            match tokio::time::timeout(idle, consumer.recv()).await {
                Ok(m) => m,
                Err(_) => break,
            }
        } else {
            consumer.recv().await
        };
        let msg = msg.context("consuming")?;
        seen += 1;
        if bystander::is_forwarded_heartbeat(&msg) {
            heartbeats += 1;
            continue;
        }
        // Avro keys (the journal's window key) decode like values; others are UTF-8.
        let key = match msg.key() {
            Some(k) if Framing::parse(k).is_ok() => match codec.decode(k).await {
                Ok(d) => to_json(&d.value, ts),
                Err(_) => json!(String::from_utf8_lossy(k)),
            },
            Some(k) => json!(String::from_utf8_lossy(k)),
            None => serde_json::Value::Null,
        };
        let mut line = json!({
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "timestamp": msg.timestamp().to_millis(),
            "key": key,
        });
        match msg.payload() {
            // A tombstone: the key is gone (a table) or ended (a subject forgotten).
            None => line["value"] = serde_json::Value::Null,
            Some(payload) => match codec.decode(payload).await {
                Ok(d) => {
                    line["framing"] = json!(d.framing.name());
                    line["schema"] = json!(d.schema_name);
                    line["value"] = to_json(&d.value, ts);
                }
                Err(e) => {
                    bad += 1;
                    line["error"] = json!(e.to_string());
                    line["reason"] = json!(e.reason());
                }
            },
        }
        let mut out = stdout.lock();
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    eprintln!(
        "tail: {seen} record(s) from {} in {:.1}s, {bad} undecodable, {heartbeats} forwarded heartbeat(s) left out",
        args.topic,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
