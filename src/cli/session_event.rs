//! `kubefacts session-event`: publish a host application's session observations to
//! `sessions.v1` (docs/SESSIONS_INPUT.md), keyed by session id and partitioned with the
//! Java-compatible murmur2 partitioner, exactly as a host application must publish them.
//!
//! One event from flags, or many from a JSON-lines file (`--from-file`). Every event is
//! validated before anything is produced: a bad flag or a bad line produces nothing.

use std::{io::BufRead, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;

use kubefacts::{
    observe::{
        InputTopic, Observation, ObservationRecord,
        minimize::session,
        model::{ObservationEvent, SessionObservation, SessionState, Source},
    },
    trace::{SessionPod, SessionRecord},
    watch::Publisher,
};

/// Arguments of `kubefacts session-event`.
#[derive(Debug, Args)]
pub struct SessionEventArgs {
    /// The host application's session id: the Kafka key, and the value of the session
    /// label on the session's Pod.
    #[arg(long, required_unless_present = "from_file")]
    pub session_id: Option<String>,
    /// The session's state: a `SessionState` symbol (CREATED, STARTING, RUNNING,
    /// WAITING_FOR_INPUT, IDLE, COMPLETED, FAILED, CANCELLED, UNKNOWN), case-insensitive.
    #[arg(long, required_unless_present = "from_file")]
    pub state: Option<String>,
    /// The session's owner: an opaque id (never a display name or e-mail address).
    #[arg(long, required_unless_present = "from_file")]
    pub owner: Option<String>,
    /// Namespace of the Pod expected to run the session.
    #[arg(long, required_unless_present = "from_file")]
    pub pod_namespace: Option<String>,
    /// Name of the Pod expected to run the session.
    #[arg(long, required_unless_present = "from_file")]
    pub pod_name: Option<String>,
    /// UID of that Pod, when known (canonical lowercase UUID).
    #[arg(long)]
    pub pod_uid: Option<String>,
    /// What the observation reports: `applied` (the session exists in this state) or
    /// `deleted` (the session is gone; the record carries its last state).
    #[arg(long, default_value = "applied")]
    pub event: String,
    /// When the host application observed it (RFC 3339, e.g. 2026-11-29T10:00:00Z).
    /// Default: now.
    #[arg(long)]
    pub observed_at: Option<String>,
    /// When the session changed to this state (RFC 3339): `[sessions]` ignores an update
    /// older than the one it holds. Default: `observed_at`.
    #[arg(long)]
    pub updated_at: Option<String>,
    /// Events to publish, one JSON object per line with the flags' names in snake_case
    /// (docs/SESSIONS_INPUT.md); `-` reads standard input. Instead of the event flags.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["session_id", "state", "owner", "pod_namespace", "pod_name", "pod_uid", "observed_at", "updated_at"]
    )]
    pub from_file: Option<PathBuf>,
    /// The producer id written into `source.instance` (a line of `--from-file` may
    /// override it).
    #[arg(long, default_value = "kubefacts-cli")]
    pub instance: String,
    /// `source.epoch`: constant for a host application, which never relists (a line of
    /// `--from-file` may override it).
    #[arg(long, default_value_t = 0)]
    pub epoch: i64,
    /// Pipeline configuration (default: the embedded pipelines/default.toml): the
    /// cluster name and the topic names.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Kafka and the schema registry.
    #[command(flatten)]
    pub kafka: super::KafkaArgs,
    /// Input topic creation.
    #[command(flatten)]
    pub topics: super::InputTopicArgs,
}

/// One event as given on the command line or on a line of `--from-file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventInput {
    session_id: String,
    state: String,
    owner: String,
    pod_namespace: String,
    pod_name: String,
    #[serde(default)]
    pod_uid: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    observed_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    instance: Option<String>,
    #[serde(default)]
    epoch: Option<i64>,
}

/// A field that failed validation: its snake_case name and why.
#[derive(Debug)]
struct FieldError {
    field: &'static str,
    message: String,
}

fn field_error(field: &'static str, message: impl Into<String>) -> FieldError {
    FieldError { field, message: message.into() }
}

const STATES: &str =
    "CREATED, STARTING, RUNNING, WAITING_FOR_INPUT, IDLE, COMPLETED, FAILED, CANCELLED, UNKNOWN";

/// A `SessionState` symbol, case-insensitive.
fn parse_state(s: &str) -> Result<SessionState, FieldError> {
    serde_json::from_value(serde_json::Value::String(s.trim().to_ascii_uppercase()))
        .map_err(|_| field_error("state", format!("unknown state {s:?}; expected one of {STATES}")))
}

/// `applied` or `deleted`, case-insensitive.
fn parse_event(s: &str) -> Result<ObservationEvent, FieldError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "applied" => Ok(ObservationEvent::Applied),
        "deleted" => Ok(ObservationEvent::Deleted),
        _ => Err(field_error("event", format!("unknown event {s:?}; expected applied or deleted"))),
    }
}

impl EventInput {
    /// The validated observation; `now_ms` is the default `observed_at`.
    fn observation(
        &self,
        cluster: &str,
        instance: &str,
        epoch: i64,
        now_ms: i64,
    ) -> Result<Observation, FieldError> {
        for (field, value) in [
            ("session_id", &self.session_id),
            ("owner", &self.owner),
            ("pod_namespace", &self.pod_namespace),
            ("pod_name", &self.pod_name),
        ] {
            if value.trim().is_empty() {
                return Err(field_error(field, "must not be empty"));
            }
        }
        let state = parse_state(&self.state)?;
        let event = parse_event(self.event.as_deref().unwrap_or("applied"))?;
        let time = |field: &'static str, t: &str| {
            t.trim().parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| {
                field_error(field, format!("{t:?} is not an RFC 3339 time (2026-11-29T10:00:00Z): {e}"))
            })
        };
        let observed_at = match &self.observed_at {
            None => now_ms,
            Some(t) => time("observed_at", t)?,
        };
        let updated_at_ms = self.updated_at.as_deref().map(|t| time("updated_at", t)).transpose()?;
        let instance = self.instance.as_deref().unwrap_or(instance);
        if instance.trim().is_empty() {
            return Err(field_error("instance", "must not be empty"));
        }
        let record = SessionRecord {
            session_id: self.session_id.clone(),
            state,
            pod: SessionPod {
                namespace: self.pod_namespace.clone(),
                name: self.pod_name.clone(),
                uid: self.pod_uid.clone(),
            },
            owner: self.owner.clone(),
            updated_at_ms,
        };
        // The id is checked above, so what the minimizer rejects is the Pod UID.
        let session = session(&record, observed_at).map_err(|e| field_error("pod_uid", e.to_string()))?;
        let source = Source {
            cluster: cluster.to_owned(),
            instance: instance.to_owned(),
            epoch: self.epoch.unwrap_or(epoch),
        };
        Ok(Observation {
            topic: InputTopic::Sessions,
            key: Some(session.session_id.clone()),
            record: ObservationRecord::Session(SessionObservation {
                source,
                observed_at,
                event,
                session: Some(session),
            }),
        })
    }
}

/// The events of a JSON-lines file (blank lines skipped), all validated: the first bad line
/// is the error, with its 1-based number.
fn read_file(
    path: &PathBuf,
    cluster: &str,
    args: &SessionEventArgs,
    now_ms: i64,
) -> anyhow::Result<Vec<Observation>> {
    let name = path.display().to_string();
    let reader: Box<dyn BufRead> = if name == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("--from-file {name}: cannot open"))?,
        ))
    };
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.with_context(|| format!("--from-file {name} line {n}: cannot read"))?;
        if line.trim().is_empty() {
            continue;
        }
        let input: EventInput = serde_json::from_str(&line)
            .with_context(|| format!("--from-file {name} line {n}: not a session event"))?;
        let obs = input
            .observation(cluster, &args.instance, args.epoch, now_ms)
            .map_err(|e| anyhow::anyhow!("--from-file {name} line {n}: {}: {}", e.field, e.message))?;
        out.push(obs);
    }
    if out.is_empty() {
        bail!("--from-file {name}: no events");
    }
    Ok(out)
}

/// The one event the flags describe.
fn from_flags(args: &SessionEventArgs, cluster: &str, now_ms: i64) -> anyhow::Result<Observation> {
    let required = |v: &Option<String>, flag: &str| {
        v.clone().ok_or_else(|| anyhow::anyhow!("--{flag} is required without --from-file"))
    };
    let input = EventInput {
        session_id: required(&args.session_id, "session-id")?,
        state: required(&args.state, "state")?,
        owner: required(&args.owner, "owner")?,
        pod_namespace: required(&args.pod_namespace, "pod-namespace")?,
        pod_name: required(&args.pod_name, "pod-name")?,
        pod_uid: args.pod_uid.clone(),
        event: Some(args.event.clone()),
        observed_at: args.observed_at.clone(),
        updated_at: args.updated_at.clone(),
        instance: None,
        epoch: None,
    };
    input
        .observation(cluster, &args.instance, args.epoch, now_ms)
        .map_err(|e| anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.message))
}

pub(super) async fn run(args: SessionEventArgs) -> anyhow::Result<()> {
    let config = super::load_pipeline(args.config.as_deref())?;
    let now_ms = jiff::Timestamp::now().as_millisecond();
    if args.from_file.is_some() && args.event != "applied" {
        bail!("--event applies to the event flags; give `event` on each line of --from-file");
    }
    // Validate everything before touching Kafka: a bad event produces nothing.
    let events = match &args.from_file {
        Some(path) => read_file(path, &config.cluster, &args, now_ms)?,
        None => vec![from_flags(&args, &config.cluster, now_ms)?],
    };

    let brokers = args.kafka.brokers(&config.kafka)?;
    args.topics.ensure(&brokers, &config.topics).await?;
    let codec = args.kafka.codec()?;
    if super::registry::register_inputs(&codec, &config.topics, &[InputTopic::Sessions]).await?
        == super::registry::Registered::Stopped
    {
        bail!("stopped while waiting for the schema registry: nothing was published");
    }
    let mut publisher = Publisher::connect_to(&brokers, &codec, &config.topics, &[InputTopic::Sessions])
        .await?
        .track_deliveries();
    for obs in &events {
        publisher.publish(obs).await?;
    }
    publisher.flush().await?;
    let deliveries = publisher.take_deliveries();
    let topic = InputTopic::Sessions.topic_name(&config.topics);
    for (obs, (partition, offset)) in events.iter().zip(&deliveries) {
        let ObservationRecord::Session(SessionObservation { session: Some(s), .. }) = &obs.record else {
            unreachable!("session-event builds session observations only")
        };
        let state = serde_json::to_value(s.state)?;
        let state = state.as_str().unwrap_or("UNKNOWN");
        println!("session-event: {} {state} → {topic} partition {partition} offset {offset}", s.session_id);
    }
    if deliveries.len() != events.len() {
        bail!("{} events sent but {} acknowledged", events.len(), deliveries.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(line: &str) -> Result<Observation, FieldError> {
        serde_json::from_str::<EventInput>(line).unwrap().observation("c", "i", 0, 42)
    }

    #[test]
    fn validation_names_the_field() {
        let ok = r#"{"session_id":"s","state":"waiting_for_input","owner":"o","pod_namespace":"n","pod_name":"p"}"#;
        let obs = input(ok).unwrap();
        let ObservationRecord::Session(r) = &obs.record else { panic!() };
        let s = r.session.as_ref().unwrap();
        assert_eq!(
            (s.state, r.observed_at, s.updated_at, r.event),
            (SessionState::WaitingForInput, 42, 42, ObservationEvent::Applied)
        );
        assert_eq!(obs.key.as_deref(), Some("s"));
        for (line, field) in [
            (ok.replace(r#""s""#, r#""""#), "session_id"),
            (ok.replace("waiting_for_input", "sleeping"), "state"),
            (ok.replace(r#""p"}"#, r#""p","observed_at":"yesterday"}"#), "observed_at"),
            (ok.replace(r#""p"}"#, r#""p","event":"snapshot_begin"}"#), "event"),
            (ok.replace(r#""p"}"#, r#""p","pod_uid":"not-a-uuid"}"#), "pod_uid"),
        ] {
            assert_eq!(input(&line).unwrap_err().field, field, "{line}");
        }
    }
}
