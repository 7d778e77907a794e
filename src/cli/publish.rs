//! `kubefacts publish`: a cluster trace onto the input topics, through the same
//! minimization, admission and keying as the live watcher.

use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use clap::Args;

use super::{
    observed::{FinishArgs, Observed, TraceFile, TraceInput, finished_line},
    progress::Progress,
};
use kubefacts::{
    observe::{InputTopic, Observation, Observer, model::Source},
    watch::Publisher,
};

/// Arguments of `kubefacts publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The cluster trace (docs/TRACE_FORMAT.md); `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Pipeline configuration (default: the embedded pipelines/default.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Written into every record's `source.instance`. Default: the host name.
    #[arg(long, env = "KUBEFACTS_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Input topic creation.
    #[command(flatten)]
    pub topics: super::InputTopicArgs,
    /// Ending the trace.
    #[command(flatten)]
    pub finish: FinishArgs,
}

/// Observations per message from the reading thread to the publishing one (the channel's
/// cost is per message).
const CHUNK_OBSERVATIONS: usize = 1024;
/// Messages between the two threads: how far reading may run ahead of publishing.
const CHUNKS_AHEAD: usize = 16;

pub(super) async fn run(args: PublishArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = super::load_pipeline(args.config.as_deref())?;
    let input = TraceInput::open(&args.input)?;
    let stream = input.is_stream();
    let brokers = args.kafka.brokers(&config.kafka)?;
    let instance = args
        .instance_id
        .clone()
        .unwrap_or_else(|| std::env::var("HOSTNAME").unwrap_or_else(|_| "kubefacts-publish".into()));
    let source = Source { cluster: config.cluster.clone(), instance, epoch: 1 };
    // Reading and observing the trace is one core's work, encoding and sending another's:
    // each gets its own thread, in order through a bounded channel.
    let (tx, mut rx) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
    let reading = std::thread::Builder::new().name("publish-read".into()).spawn({
        let (config, finish) = (config.clone(), args.finish.finish);
        move || read_trace(input, source, &config, finish, &tx)
    })?;
    // A file's first observations (a trace is in time order) say how old it is: input
    // topics created for a trace older than their retention keep it. A stream (a live watch
    // piped in) is stamped now, and connects at once, before its first line arrives.
    let first = if stream || !args.topics.create_topics { None } else { rx.recv().await };
    let topics = topics_for(&config.topics, first.as_deref(), args.topics.create_topics);
    args.topics.ensure(&brokers, &topics).await?;
    let codec = args.kafka.codec()?;
    if super::registry::register_inputs(&codec, &config.topics, &InputTopic::ALL).await?
        == super::registry::Registered::Stopped
    {
        anyhow::bail!("stopped while waiting for the schema registry: nothing was published");
    }
    let mut publisher = Publisher::connect(&brokers, &codec, &config.topics).await?;
    let (oldest, mut ahead) = guards(&brokers, &config.topics).await?;
    let mut chunks = first.into_iter();
    while let Some(chunk) = match chunks.next() {
        Some(chunk) => Some(chunk),
        None => rx.recv().await,
    } {
        for obs in &chunk {
            oldest.check(obs)?;
            if ahead.admits(obs)? {
                publisher.publish(obs).await?;
            }
        }
    }
    let read = reading
        .join()
        .map_err(|_| anyhow::anyhow!("publish: the thread reading the trace panicked"))?
        .ok_or_else(|| anyhow::anyhow!("publish: the thread reading the trace stopped early"))?;
    publisher.flush().await?;
    let secs = started.elapsed().as_secs_f64();
    let counts = publisher.counts();
    println!(
        "publish: {} trace entries ({} rejected, {} excluded by admission) → {} records, {} value bytes, in {secs:.2} s ({:.0} entries/s, {:.0} records/s)",
        read.entries,
        read.rejected,
        read.excluded,
        counts.records,
        counts.value_bytes,
        read.entries as f64 / secs.max(1e-9),
        counts.records as f64 / secs.max(1e-9)
    );
    if let Some(line) = super::observed::bounded_line("publish", read.cuts, counts.oversized) {
        println!("{line}");
    }
    if let Some(line) = read.finished {
        println!("{line}");
    }
    if let Some(line) = ahead.held_line() {
        println!("{line}");
    }
    read.all_used
}

/// The topics `publish` creates (with `--create-topics`): those of the pipeline file, or,
/// when the trace begins before the inputs' retention (a recorded trace, a backfill),
/// inputs that keep records forever — a finite retention would delete them on arrival. An
/// input that exists already keeps its settings (and [`RetentionGuard`] judges them).
fn topics_for(
    topics: &kubefacts::config::TopicsConfig,
    first: Option<&[Observation]>,
    creating: bool,
) -> kubefacts::config::TopicsConfig {
    let mut topics = topics.clone();
    let keeps = topics.retention.inputs_ms;
    let begins = first.and_then(|obs| obs.iter().map(|o| o.record.observed_at()).min());
    let Some(begins) = begins.filter(|_| creating && keeps >= 0) else { return topics };
    if begins < jiff::Timestamp::now().as_millisecond() - keeps {
        let time = kubefacts::codec::json::rfc3339_millis(begins).unwrap_or_else(|| begins.to_string());
        println!(
            "publish: the trace begins at {time}, before the inputs' retention (topics.retention.inputs_ms={keeps}, \
             {:.1} days): input topics created now keep their records forever (retention.ms=-1)",
            keeps as f64 / 86_400_000.0
        );
        topics.retention.inputs_ms = -1;
    }
    topics
}

/// What the reading thread found in the trace.
struct TraceRead {
    entries: u64,
    rejected: u64,
    excluded: u64,
    /// What minimization's bounds cut.
    cuts: kubefacts::observe::Cuts,
    /// The `--finish` summary line.
    finished: Option<String>,
    /// An error naming every rejected entry, if any was.
    all_used: anyhow::Result<()>,
}

/// Reads and observes the trace on its own thread, sending the observations in order.
/// `None` when it stopped early because the receiver is gone: publishing failed, and that
/// error is the one reported.
fn read_trace(
    input: TraceInput,
    source: Source,
    config: &kubefacts::config::PipelineConfig,
    finish: bool,
    tx: &tokio::sync::mpsc::Sender<Vec<Observation>>,
) -> Option<TraceRead> {
    let trace = TraceFile::from(input);
    let mut observer =
        Observer::new(source, config.minimize.clone()).with_admission(config.admission.clone());
    let mut progress = Progress::new("publish", "observations", trace.total_bytes, true);
    let (read_bytes, mut observations) = (trace.read_bytes.clone(), 0u64);
    let lines = trace.entries.entry_line();
    let mut observed = Observed::new("publish", trace.entries.keeping(observer.kept_keys()), &mut observer)
        .with_lines(lines);
    // A file is sent in chunks; a stream (standard input: a live watch piped in) entry by
    // entry, as soon as it is observed: its next line may be minutes away, and nothing read
    // may wait for it (it waited for 1 024 observations, 114 s at live pace).
    let chunk_len = if trace.total_bytes.is_some() { CHUNK_OBSERVATIONS } else { 1 };
    let mut chunk = Vec::with_capacity(chunk_len);
    for batch in &mut observed {
        observations += batch.len() as u64;
        chunk.extend(batch);
        if chunk.len() >= chunk_len {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(chunk_len));
            tx.blocking_send(full).ok()?;
        }
        progress.update(read_bytes.get(), observations);
    }
    let finished = finish.then(|| {
        let (added, batch) = observed.finish(config);
        chunk.extend(batch);
        finished_line("publish", &added, config)
    });
    if !chunk.is_empty() {
        tx.blocking_send(chunk).ok()?;
    }
    let (entries, rejected) = (observed.entries, observed.rejected_total());
    let all_used = observed.all_used("published");
    observer.finish();
    progress.finish();
    let excluded = observer.admission().excluded.values().sum();
    Some(TraceRead { entries, rejected, excluded, cuts: observer.cuts(), finished, all_used })
}

/// The guards of what `publish` sends, from the input topics' settings on the broker.
async fn guards(
    brokers: &kubefacts::config::kafka::Brokers,
    topics: &kubefacts::config::TopicsConfig,
) -> anyhow::Result<(RetentionGuard, AheadGuard)> {
    let admin = super::admin_client(brokers)?;
    let names: Vec<(InputTopic, String)> =
        InputTopic::ALL.iter().map(|t| (*t, t.topic_name(topics))).collect();
    let refs: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
    let retention = kubefacts::runtime::topics::retention_ms(&admin, &refs).await?;
    let after = kubefacts::runtime::topics::timestamp_after_max_ms(&admin, &refs).await?;
    Ok((RetentionGuard::new(&names, &retention), AheadGuard::new(&names, &after)))
}

/// Refuses observations the broker would delete at once: older than their topic's
/// `retention.ms` (records are deleted by timestamp, and a recorded trace carries its own).
#[derive(Debug)]
struct RetentionGuard {
    /// Per input topic with a finite retention: (name, retention.ms, oldest timestamp kept).
    limits: Vec<(kubefacts::observe::InputTopic, String, i64, i64)>,
}

impl RetentionGuard {
    fn new(names: &[(InputTopic, String)], retention: &BTreeMap<String, i64>) -> Self {
        let now = jiff::Timestamp::now().as_millisecond();
        let limits = (names.iter())
            .filter_map(|(t, name)| {
                let ms = *retention.get(name)?;
                (ms >= 0).then(|| (*t, name.clone(), ms, now - ms))
            })
            .collect();
        Self { limits }
    }

    fn check(&self, obs: &kubefacts::observe::Observation) -> anyhow::Result<()> {
        let at = obs.record.observed_at();
        let Some((_, name, ms, oldest)) = self.limits.iter().find(|(t, ..)| *t == obs.topic) else {
            return Ok(());
        };
        if at >= *oldest {
            return Ok(());
        }
        let time = |ms: i64| kubefacts::codec::json::rfc3339_millis(ms).unwrap_or_else(|| ms.to_string());
        anyhow::bail!(
            "refusing to publish: an observation from {} is older than topic {name}'s retention \
             (retention.ms={ms}, {:.1} days; set by topics.retention.inputs_ms): the broker deletes records \
             by their timestamp, so it would be gone within minutes, and nothing from here on is published. \
             To keep a recorded trace, create the input topics with [topics.retention] inputs_ms = -1 (the \
             default), or alter them: kafka-configs.sh --alter --entity-type topics --entity-name {name} \
             --add-config retention.ms=-1",
            time(at),
            *ms as f64 / 86_400_000.0
        )
    }
}

/// Keeps heartbeats the broker would refuse out of a publish: a record stamped more than
/// `message.timestamp.after.max.ms` (Kafka 4: one hour) ahead of the broker's clock fails
/// its whole batch (`InvalidDifferentRecord`), and `--finish` stamps heartbeats up to the end
/// of the last window plus grace — 70 minutes past a trace that ends now. Such heartbeats are
/// not sent (and counted); any other observation that far ahead is refused, naming the
/// setting. A minute of margin leaves room for what `process` stamps with them.
#[derive(Debug)]
struct AheadGuard {
    /// Per input topic with a limit: (topic, name, message.timestamp.after.max.ms).
    limits: Vec<(kubefacts::observe::InputTopic, String, i64)>,
    /// Heartbeats not sent: how many, and the first one's time.
    held: u64,
    first_held_ms: Option<i64>,
}

/// What `process` may stamp after a heartbeat it is given, within the broker's limit.
const AHEAD_MARGIN_MS: i64 = 60_000;

impl AheadGuard {
    fn new(names: &[(InputTopic, String)], after: &BTreeMap<String, i64>) -> Self {
        let limits = (names.iter())
            .filter_map(|(t, name)| {
                let ms = *after.get(name)?;
                (ms < i64::MAX / 2).then(|| (*t, name.clone(), ms))
            })
            .collect();
        Self { limits, held: 0, first_held_ms: None }
    }

    /// Whether to send `obs`; `Err` for an observation (not a heartbeat) the broker would refuse.
    fn admits(&mut self, obs: &Observation) -> anyhow::Result<bool> {
        let Some((_, name, ms)) = self.limits.iter().find(|(t, ..)| *t == obs.topic) else { return Ok(true) };
        let at = obs.record.observed_at();
        let now = jiff::Timestamp::now().as_millisecond();
        if at <= now.saturating_add(*ms).saturating_sub(AHEAD_MARGIN_MS) {
            return Ok(true);
        }
        if obs.record.event() == kubefacts::observe::model::ObservationEvent::Heartbeat {
            self.held += 1;
            self.first_held_ms.get_or_insert(at);
            return Ok(false);
        }
        let time = |ms: i64| kubefacts::codec::json::rfc3339_millis(ms).unwrap_or_else(|| ms.to_string());
        anyhow::bail!(
            "refusing to publish: an observation stamped {} is more than {:.0} min ahead of this clock ({}), and \
             the broker refuses records further ahead than topic {name}'s message.timestamp.after.max.ms={ms}; \
             nothing from here on is published. Check the trace's clock, or raise the setting: \
             kafka-configs.sh --alter --entity-type topics --entity-name {name} --add-config \
             message.timestamp.after.max.ms=<ms>",
            time(at),
            (*ms - AHEAD_MARGIN_MS) as f64 / 60_000.0,
            time(now)
        )
    }

    /// The line that says what was held back, if anything was.
    fn held_line(&self) -> Option<String> {
        let first = self.first_held_ms?;
        let time = kubefacts::codec::json::rfc3339_millis(first).unwrap_or_else(|| first.to_string());
        Some(format!(
            "publish: {} heartbeats from {time} on were not sent: the broker takes no record stamped more than \
             message.timestamp.after.max.ms ahead of its clock (less a minute for what process stamps); windows \
             ending after them stay open until later heartbeats arrive (a watcher's)",
            self.held
        ))
    }
}
