//! Where the facts of a report come from: the fact topics on Kafka (read_committed, from the
//! beginning to each partition's last stable offset) or the `<topic>.jsonl` files `replay`
//! and `demo` write. Either way each record is decoded to its typed fact, or counted as bad
//! with its reason; the facts are then put in (partition, offset) order per topic, so both
//! sources hand the summary the same sequence.

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::{Context, bail};
use apache_avro::{Schema, schema::ResolvedSchema};
use rdkafka::{Message, Offset, error::KafkaError};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value as Json;

use super::summary::Facts;
use crate::cli::progress::Progress;
use kubefacts::{
    brokers::Brokers,
    cleanup::CleanupDecision,
    codec::Codec,
    config::TopicsConfig,
    coverage::CoverageAlert,
    journal::{JobRun, JobRunWindowPart},
    runtime::kafka::bystander,
    sessions::{OwnerRetainedCompute, SessionProjection},
};

/// Gives up when no record or partition end arrives for this long.
const STALLED_AFTER: Duration = Duration::from_secs(60);

/// The topics a report reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FactTopic {
    /// `job-run-facts.v1`.
    JobRunFacts,
    /// `job-runs.v2`.
    JobRuns,
    /// `cleanup-decisions.v1`.
    CleanupDecisions,
    /// `coverage-alerts.v1`.
    CoverageAlerts,
    /// `session-projections.v1`.
    SessionProjections,
    /// `retained-compute-by-owner.v1`.
    RetainedByOwner,
}

impl FactTopic {
    pub(crate) const ALL: [Self; 6] = [
        Self::JobRunFacts,
        Self::JobRuns,
        Self::CleanupDecisions,
        Self::CoverageAlerts,
        Self::SessionProjections,
        Self::RetainedByOwner,
    ];

    /// Its full name under the pipeline's `[topics]`.
    pub(crate) fn name(self, topics: &TopicsConfig) -> String {
        topics.full(match self {
            Self::JobRunFacts => &topics.job_run_facts,
            Self::JobRuns => &topics.job_runs,
            Self::CleanupDecisions => &topics.cleanup_decisions,
            Self::CoverageAlerts => &topics.coverage_alerts,
            Self::SessionProjections => &topics.session_projections,
            Self::RetainedByOwner => &topics.retained_by_owner,
        })
    }

    /// The Avro record of its values.
    fn record(self) -> &'static str {
        match self {
            Self::JobRunFacts => JobRun::FULL_NAME,
            Self::JobRuns => JobRunWindowPart::FULL_NAME,
            Self::CleanupDecisions => CleanupDecision::FULL_NAME,
            Self::CoverageAlerts => CoverageAlert::FULL_NAME,
            Self::SessionProjections => SessionProjection::FULL_NAME,
            Self::RetainedByOwner => OwnerRetainedCompute::FULL_NAME,
        }
    }
}

/// One decoded fact.
#[derive(Debug)]
enum Fact {
    Run(JobRun),
    Window(JobRunWindowPart),
    Decision(CleanupDecision),
    Alert(CoverageAlert),
    Projection(String, Option<SessionProjection>),
    Total(String, Option<OwnerRetainedCompute>),
}

/// What was read, per topic: the report's account of its input (on stderr, and in the JSON).
#[derive(Debug, Default, Serialize, PartialEq)]
pub(crate) struct ReadCounts {
    /// Records read (forwarded heartbeats left out), per topic.
    pub records: BTreeMap<String, u64>,
    /// Tombstones of log topics (no fact), per topic.
    pub tombstones: BTreeMap<String, u64>,
    /// Records that did not decode, per topic and reason.
    pub bad: BTreeMap<String, BTreeMap<String, u64>>,
    /// Topics that do not exist (on Kafka) or have no file (in a folder).
    pub missing: Vec<String>,
}

impl ReadCounts {
    /// Records that did not decode.
    pub(crate) fn bad_total(&self) -> u64 {
        self.bad.values().flat_map(BTreeMap::values).sum()
    }
}

/// Facts as they arrive, in any partition order.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    facts: Vec<(FactTopic, i64, i64, Fact)>,
    pub(crate) read: ReadCounts,
}

impl Collector {
    fn counted(&mut self, topic: &str) {
        *self.read.records.entry(topic.to_owned()).or_default() += 1;
    }

    fn bad(&mut self, topic: &str, reason: &str) {
        *self.read.bad.entry(topic.to_owned()).or_default().entry(reason.to_owned()).or_default() += 1;
    }

    fn push(&mut self, topic: FactTopic, name: &str, partition: i64, offset: i64, fact: Option<Fact>) {
        match fact {
            Some(fact) => self.facts.push((topic, partition, offset, fact)),
            None => *self.read.tombstones.entry(name.to_owned()).or_default() += 1,
        }
    }

    /// Decodes one record's bytes (either framing) and keeps its fact, or counts it as bad.
    pub(crate) async fn add_bytes(
        &mut self,
        codec: &Codec,
        topic: FactTopic,
        name: &str,
        (partition, offset): (i64, i64),
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) {
        self.counted(name);
        let key = key.map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default();
        let Some(bytes) = value else {
            let fact = tombstone(topic, key);
            return self.push(topic, name, partition, offset, fact);
        };
        let decoded = match topic {
            FactTopic::JobRunFacts => codec.decode_as(bytes).await.map(Fact::Run),
            FactTopic::JobRuns => codec.decode_as(bytes).await.map(Fact::Window),
            FactTopic::CleanupDecisions => codec.decode_as(bytes).await.map(Fact::Decision),
            FactTopic::CoverageAlerts => codec.decode_as(bytes).await.map(Fact::Alert),
            FactTopic::SessionProjections => {
                codec.decode_as::<SessionProjection>(bytes).await.map(|p| Fact::Projection(key, Some(p)))
            }
            FactTopic::RetainedByOwner => {
                codec.decode_as::<OwnerRetainedCompute>(bytes).await.map(|t| Fact::Total(key, Some(t)))
            }
        };
        match decoded {
            Ok(fact) => self.push(topic, name, partition, offset, Some(fact)),
            Err(e) => {
                tracing::debug!(topic = name, partition, offset, error = %e, "report: a record does not decode");
                self.bad(name, e.reason());
            }
        }
    }

    /// One line of a `<topic>.jsonl` file (`{"partition", "offset", "key", "value"}`, values
    /// as `replay` writes them: timestamps in RFC 3339, unions as their branch).
    fn add_line(&mut self, schemas: &Schemas, topic: FactTopic, name: &str, line: &str) {
        self.counted(name);
        let fact = (|| -> Result<(i64, i64, Option<Fact>), &'static str> {
            let line: Json = serde_json::from_str(line).map_err(|_| "json_syntax")?;
            let (Some(partition), Some(offset)) = (line["partition"].as_i64(), line["offset"].as_i64())
            else {
                return Err("no_position");
            };
            let key = line["key"].as_str().unwrap_or_default().to_owned();
            let value = &line["value"];
            if value.is_null() {
                return Ok((partition, offset, tombstone(topic, key)));
            }
            let wire = schemas.wire(topic, value)?;
            let fact = match topic {
                FactTopic::JobRunFacts => Fact::Run(typed(wire)?),
                FactTopic::JobRuns => Fact::Window(typed(wire)?),
                FactTopic::CleanupDecisions => Fact::Decision(typed(wire)?),
                FactTopic::CoverageAlerts => Fact::Alert(typed(wire)?),
                FactTopic::SessionProjections => Fact::Projection(key, Some(typed(wire)?)),
                FactTopic::RetainedByOwner => Fact::Total(key, Some(typed(wire)?)),
            };
            Ok((partition, offset, Some(fact)))
        })();
        match fact {
            Ok((partition, offset, fact)) => self.push(topic, name, partition, offset, fact),
            Err(reason) => self.bad(name, reason),
        }
    }

    /// The facts, each topic's in (partition, offset) order: what any reader of the same
    /// records sees, whatever order its partitions arrived in.
    pub(crate) fn into_facts(mut self) -> (Facts, ReadCounts) {
        self.facts.sort_by_key(|(topic, partition, offset, _)| (*topic, *partition, *offset));
        let mut facts = Facts::default();
        for (_, _, _, fact) in self.facts {
            match fact {
                Fact::Run(r) => facts.runs.push(r),
                Fact::Window(w) => facts.windows.push(w),
                Fact::Decision(d) => facts.decisions.push(d),
                Fact::Alert(a) => facts.alerts.push(a),
                Fact::Projection(k, p) => facts.projections.push((k, p)),
                Fact::Total(k, t) => facts.totals.push((k, t)),
            }
        }
        (facts, self.read)
    }
}

/// A tombstone's fact: its key's removal from a table, nothing on a log.
fn tombstone(topic: FactTopic, key: String) -> Option<Fact> {
    match topic {
        FactTopic::SessionProjections => Some(Fact::Projection(key, None)),
        FactTopic::RetainedByOwner => Some(Fact::Total(key, None)),
        _ => None,
    }
}

fn typed<T: DeserializeOwned>(wire: Json) -> Result<T, &'static str> {
    serde_json::from_value(wire).map_err(|_| "not_the_schema")
}

/// The fact topics' current schemas, to read JSON lines back as the records they were.
struct Schemas(BTreeMap<FactTopic, &'static Schema>);

impl Schemas {
    fn new(codec: &Codec) -> anyhow::Result<Self> {
        let mut all = BTreeMap::new();
        for topic in FactTopic::ALL {
            all.insert(topic, &codec.schemas().current(topic.record())?.schema);
        }
        Ok(Self(all))
    }

    /// `value` (as `replay` writes it) with its timestamps back in epoch ms, as the typed
    /// records deserialize them.
    fn wire(&self, topic: FactTopic, value: &Json) -> Result<Json, &'static str> {
        let schema = self.0[&topic];
        let names = ResolvedSchema::new(schema).map_err(|_| "schema")?;
        to_wire(value, schema, names.get_names())
    }
}

/// Walks `json` along `schema`: timestamp strings become epoch ms; everything else stays.
fn to_wire(
    json: &Json,
    schema: &Schema,
    names: &apache_avro::schema::NamesRef<'_>,
) -> Result<Json, &'static str> {
    Ok(match (schema, json) {
        (Schema::TimestampMillis | Schema::LocalTimestampMillis, Json::String(s)) => {
            let t: jiff::Timestamp = s.parse().map_err(|_| "bad_timestamp")?;
            Json::from(t.as_millisecond())
        }
        (Schema::Record(r), Json::Object(obj)) => {
            let mut out = serde_json::Map::with_capacity(obj.len());
            for (k, v) in obj {
                let field = r.fields.iter().find(|f| &f.name == k).ok_or("unknown_field")?;
                out.insert(k.clone(), to_wire(v, &field.schema, names)?);
            }
            Json::Object(out)
        }
        (Schema::Union(u), v) if !v.is_null() => {
            // Our unions are `["null", T]`: the value is T's.
            let branch = u.variants().iter().find(|s| !matches!(s, Schema::Null)).ok_or("bad_union")?;
            to_wire(v, branch, names)?
        }
        (Schema::Array(a), Json::Array(items)) => {
            Json::Array(items.iter().map(|i| to_wire(i, &a.items, names)).collect::<Result<_, _>>()?)
        }
        (Schema::Map(m), Json::Object(obj)) => Json::Object(
            obj.iter()
                .map(|(k, v)| Ok::<_, &str>((k.clone(), to_wire(v, &m.types, names)?)))
                .collect::<Result<_, _>>()?,
        ),
        (Schema::Ref { name }, v) => to_wire(v, names.get(name).ok_or("unresolved_reference")?, names)?,
        (_, v) => v.clone(),
    })
}

/// Reads the fact topics named by `topics` from `dir`'s `<topic>.jsonl` files.
pub(crate) fn from_dir(codec: &Codec, topics: &TopicsConfig, dir: &Path) -> anyhow::Result<Collector> {
    let schemas = Schemas::new(codec)?;
    let mut collector = Collector::default();
    for topic in FactTopic::ALL {
        let name = topic.name(topics);
        let path = dir.join(format!("{name}.jsonl"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                collector.read.missing.push(name);
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            collector.add_line(&schemas, topic, &name, line);
        }
    }
    Ok(collector)
}

/// Reads the fact topics named by `topics` on `brokers`, from the beginning to each
/// partition's last stable offset, with a progress line. One consumer per topic: librdkafka
/// names only the partition of an end it reports.
pub(crate) async fn from_kafka(
    codec: &Codec,
    brokers: &Brokers,
    topics: &TopicsConfig,
) -> anyhow::Result<Collector> {
    let mut collector = Collector::default();
    let mut reading = Vec::new();
    for topic in FactTopic::ALL {
        let name = topic.name(topics);
        let consumer = bystander::committed_consumer(brokers, "report", true)?;
        match tokio::task::block_in_place(|| bystander::partitions_of(&consumer, &name, brokers))? {
            Some(partitions) => {
                let assigned = tokio::task::block_in_place(|| {
                    bystander::assign(&consumer, &[(name.clone(), partitions)], Offset::Beginning)
                })?;
                reading.push((topic, name, consumer, assigned));
            }
            None => collector.read.missing.push(name),
        }
    }
    if reading.is_empty() {
        bail!("none of the fact topics exists on {brokers}: {}", collector.read.missing.join(", "));
    }
    // Watermarks taken before the first record is read: the progress line's total.
    let total: i64 = reading.iter().flat_map(|(.., a)| a.iter().map(|a| a.high - a.low)).sum();
    let mut progress = Progress::new("report: reading", "records", Some(total.max(0) as u64), false);
    let mut seen = 0u64;
    for (topic, name, consumer, assigned) in &reading {
        let mut pending: std::collections::BTreeSet<i32> = assigned.iter().map(|a| a.partition).collect();
        while !pending.is_empty() {
            let Ok(msg) = tokio::time::timeout(STALLED_AFTER, consumer.recv()).await else {
                bail!(
                    "reading {name}: no record and no partition end for {} s; partitions {pending:?} not read to their end",
                    STALLED_AFTER.as_secs()
                );
            };
            let msg = match msg {
                Ok(m) => m,
                // At the last stable offset: everything committed so far is read.
                Err(KafkaError::PartitionEOF(p)) => {
                    pending.remove(&p);
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("reading {name}")),
            };
            seen += 1;
            progress.update(seen, seen);
            if bystander::is_forwarded_heartbeat(&msg) {
                continue;
            }
            let position = (i64::from(msg.partition()), msg.offset());
            collector.add_bytes(codec, *topic, name, position, msg.key(), msg.payload()).await;
        }
    }
    progress.finish();
    Ok(collector)
}

/// Reads the fact topics named by `topics` among `logs`, the in-memory topics of `demo`.
pub(crate) async fn from_memory(
    codec: &Codec,
    topics: &TopicsConfig,
    logs: &BTreeMap<String, kubefacts::runtime::driver::MemTopic>,
) -> Collector {
    let mut collector = Collector::default();
    for topic in FactTopic::ALL {
        let name = topic.name(topics);
        let Some(log) = logs.get(&name) else {
            collector.read.missing.push(name);
            continue;
        };
        for (partition, records) in log.partitions.iter().enumerate() {
            for (offset, rec) in records.iter().enumerate().filter(|(_, r)| !r.heartbeat) {
                let position = (partition as i64, offset as i64);
                let (key, value) = (rec.key.as_deref(), rec.value.as_deref());
                collector.add_bytes(codec, topic, &name, position, key, value).await;
            }
        }
    }
    collector
}
