//! Topic administration at start-up: make sure every topic the pipeline needs exists with
//! the right partition count and cleanup policy (creating it when allowed), and refuse to
//! run when co-partitioned topics disagree on their partition counts (DESIGN.md §2).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientContext,
    admin::{AdminClient, AdminOptions, ConfigResourceResult, NewTopic, ResourceSpecifier, TopicReplication},
    error::{KafkaError, RDKafkaErrorCode},
    metadata::Metadata,
};
use thiserror::Error;

use crate::brokers::describe_refused;

/// How long one admin request (metadata, create, describe) may take, and how long
/// [`ensure_topics`] waits for created topics to show up in metadata.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A denied `describe_configs` is asked once more after this long: a broker that restarted
/// moments ago can deny (or answer no entries) before it has loaded the ACLs, which failed a
/// rolling restart in CI. A second denial is final, so a principal without the ACL still
/// fails within seconds.
const DENIED_RETRY_AFTER: Duration = Duration::from_secs(3);

/// Why the topics are not usable as they are.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TopicsError {
    /// A request to the cluster failed (unreachable, timed out, refused).
    #[error("kafka {operation} request failed: {source}")]
    Kafka {
        /// Which request.
        operation: &'static str,
        /// The client's error.
        #[source]
        source: KafkaError,
    },
    /// The cluster refused to create a topic.
    #[error("cannot create topic {topic}: {code}")]
    Create {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
    /// The cluster refused to describe a topic's configuration.
    #[error(
        "cannot read the configuration of topic {topic}: {code} (describe_configs on the topic: docs/security.md)"
    )]
    DescribeConfigs {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
    /// A topic is not visible to this client because no ACL lets it describe the topic.
    #[error(
        "kafka refused describe on topic {topic} (topic authorization failed: no ACL on it for this \
         principal, or it does not exist); docs/security.md lists the ACLs of each component"
    )]
    Refused {
        /// The topic.
        topic: String,
    },
    /// Topics are missing and creating them is not allowed; the message has the commands.
    #[error(
        "{} topic(s) missing and topic creation is off; create them with:\n{}",
        commands.len(),
        commands.join("\n")
    )]
    Missing {
        /// One `kafka-topics.sh --create` line per missing topic.
        commands: Vec<String>,
    },
    /// A topic exists with another partition count than the pipeline needs.
    #[error(
        "topic {topic} has {actual} partitions, the pipeline expects {expected}: keyed data \
         would land on other partitions; recreate the topic or change the configured count"
    )]
    WrongPartitions {
        /// The topic.
        topic: String,
        /// The configured count.
        expected: i32,
        /// The count in the cluster.
        actual: i32,
    },
    /// A topic exists with another cleanup policy than the pipeline needs.
    #[error(
        "topic {topic} has cleanup.policy={actual}, the pipeline expects cleanup.policy={expected} \
         (kafka-configs.sh --alter --entity-type topics --entity-name {topic} \
         --add-config cleanup.policy={expected})"
    )]
    WrongCleanupPolicy {
        /// The topic.
        topic: String,
        /// `compact` or `delete`.
        expected: &'static str,
        /// The topic's `cleanup.policy`.
        actual: String,
    },
    /// A created topic did not show in metadata in time.
    #[error("topic {topic} was created but did not show in metadata within {waited:?}")]
    NotVisible {
        /// The topic.
        topic: String,
        /// How long we waited.
        waited: Duration,
    },
    /// A topic of a co-partitioned group does not exist.
    #[error("topic {topic} does not exist, so its co-partitioning cannot be checked")]
    NotFound {
        /// The topic.
        topic: String,
    },
    /// Co-partitioned topics have different partition counts.
    #[error(
        "co-partitioned topics must have equal partition counts, refusing to run: {}",
        counts.iter().map(|(t, n)| format!("{t} has {n}")).collect::<Vec<_>>().join(", ")
    )]
    NotCopartitioned {
        /// Each topic of the group with its partition count.
        counts: Vec<(String, i32)>,
    },
}

impl TopicsError {
    /// A bounded label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kafka { .. } => "kafka",
            Self::Create { .. } => "create_failed",
            Self::DescribeConfigs { .. } => "describe_configs_failed",
            Self::Refused { .. } => "refused",
            Self::Missing { .. } => "missing",
            Self::WrongPartitions { .. } => "wrong_partitions",
            Self::WrongCleanupPolicy { .. } => "wrong_cleanup_policy",
            Self::NotVisible { .. } => "not_visible",
            Self::NotFound { .. } => "not_found",
            Self::NotCopartitioned { .. } => "not_copartitioned",
        }
    }

    /// Whether the same call may succeed later without an operator changing anything.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Kafka { .. } | Self::NotVisible { .. })
    }
}

/// A topic the pipeline needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Topic name.
    pub name: String,
    /// Partition count; co-partitioned topics need equal counts.
    pub partitions: i32,
    /// `cleanup.policy=compact` (changelogs, tables) rather than `delete`.
    pub compacted: bool,
    /// Further topic configs used at creation (e.g. `retention.ms`); an existing topic
    /// whose value differs is reported ([`TopicStatus::drift`]), not changed.
    /// `cleanup.policy` comes from `compacted` and overrides any entry here.
    pub config: BTreeMap<String, String>,
    /// The pipeline setting the configs come from (e.g. `topics.retention.facts_ms`), named
    /// in reports.
    pub setting: Option<&'static str>,
}

impl TopicSpec {
    /// A `delete`-policy topic without further config.
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        Self { name: name.into(), partitions, compacted: false, config: BTreeMap::new(), setting: None }
    }

    /// The same topic with `cleanup.policy=compact`.
    pub fn compacted(self) -> Self {
        Self { compacted: true, ..self }
    }

    /// The same topic with one more config entry.
    pub fn with_config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.insert(key.into(), value.into());
        self
    }

    /// The same topic, its configs set by this pipeline setting.
    pub fn with_setting(mut self, setting: Option<&'static str>) -> Self {
        self.setting = setting;
        self
    }

    fn cleanup_policy(&self) -> &'static str {
        if self.compacted { "compact" } else { "delete" }
    }

    /// Topic configs to create the topic with, `cleanup.policy` first.
    fn creation_config(&self) -> impl Iterator<Item = (&str, &str)> {
        let rest = self.config.iter().filter(|(k, _)| *k != "cleanup.policy");
        [("cleanup.policy", self.cleanup_policy())].into_iter().chain(rest.map(|(k, v)| (&**k, &**v)))
    }

    /// The `kafka-topics.sh` line an operator runs to create this topic.
    fn create_command(&self, bootstrap: &str, replication: i32) -> String {
        let mut line = format!(
            "kafka-topics.sh --bootstrap-server {} --create --topic {} --partitions {} \
             --replication-factor {replication}",
            shell_word(bootstrap),
            shell_word(&self.name),
            self.partitions
        );
        for (k, v) in self.creation_config() {
            line += &format!(" --config {}", shell_word(&format!("{k}={v}")));
        }
        line
    }
}

/// What [`ensure_topics`] did about a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicAction {
    /// It existed as specified (possibly just created by a concurrent instance).
    Existed,
    /// This call created it.
    Created,
}

/// One topic after [`ensure_topics`]: it exists with its partition count and cleanup
/// policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicStatus {
    /// Topic name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
    /// Whether it was there or created.
    pub action: TopicAction,
    /// Configs of an existing topic that differ from the pipeline's (e.g. a finite
    /// `retention.ms` where the pipeline keeps records forever), one sentence each: the
    /// topic is used as it is, and [`ensure_topics`] logs each as a warning.
    pub drift: Vec<String>,
}

/// Makes sure every spec's topic exists with its partition count and cleanup policy.
///
/// Missing topics are created when `create` is set (replication factor min(3, brokers)),
/// otherwise the error lists a `kafka-topics.sh --create` line for each. A topic that a
/// concurrent instance created meanwhile counts as existing once it passes the same checks.
/// Returns one status per spec, in order, once every created topic shows in metadata.
pub async fn ensure_topics<C: ClientContext>(
    admin: &AdminClient<C>,
    specs: &[TopicSpec],
    create: bool,
) -> Result<Vec<TopicStatus>, TopicsError> {
    let metadata = fetch_metadata(admin)?;
    let counts = partition_counts(&metadata);
    // Each name once (the first spec of it wins): a stage may name a topic twice, as an
    // input and as a global input, and Kafka refuses a CreateTopics request that names a
    // topic twice (InvalidRequest).
    let mut named = std::collections::BTreeSet::new();
    let unique = specs.iter().filter(|s| named.insert(s.name.as_str()));
    let (present, missing): (Vec<&TopicSpec>, Vec<&TopicSpec>) =
        unique.partition(|s| counts.contains_key(s.name.as_str()));
    let mut drift = verify(admin, &present, &counts).await?;
    let mut actions: BTreeMap<&str, TopicAction> =
        present.iter().map(|s| (s.name.as_str(), TopicAction::Existed)).collect();

    if let Some(s) = missing.iter().find(|s| describe_refused(admin.inner(), &s.name)) {
        return Err(TopicsError::Refused { topic: s.name.clone() });
    }
    if !missing.is_empty() {
        let replication = metadata.brokers().len().clamp(1, 3) as i32;
        if !create {
            let bootstrap =
                metadata.brokers().iter().map(|b| format!("{}:{}", b.host(), b.port())).collect::<Vec<_>>();
            let commands = missing.iter().map(|s| s.create_command(&bootstrap.join(","), replication));
            return Err(TopicsError::Missing { commands: commands.collect() });
        }
        let new_topics: Vec<NewTopic> = missing
            .iter()
            .map(|s| {
                s.creation_config().fold(
                    NewTopic::new(&s.name, s.partitions, TopicReplication::Fixed(replication)),
                    |t, (k, v)| t.set(k, v),
                )
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let results = admin
            .create_topics(&new_topics, &opts)
            .await
            .map_err(|source| TopicsError::Kafka { operation: "create topics", source })?;
        let mut raced = Vec::new();
        for (spec, result) in missing.iter().zip(results) {
            match result {
                Ok(_) => {
                    actions.insert(&spec.name, TopicAction::Created);
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => raced.push(*spec),
                Err((topic, code)) => return Err(TopicsError::Create { topic, code }),
            }
        }
        let metadata = wait_visible(admin, &missing).await?;
        drift.extend(verify(admin, &raced, &partition_counts(&metadata)).await?);
        actions.extend(raced.iter().map(|s| (s.name.as_str(), TopicAction::Existed)));
    }
    for (topic, lines) in &drift {
        for line in lines {
            tracing::warn!(topic = %topic, "{line}");
        }
    }
    Ok(specs
        .iter()
        .map(|s| TopicStatus {
            name: s.name.clone(),
            partitions: s.partitions,
            action: actions[s.name.as_str()],
            drift: drift.get(&s.name).cloned().unwrap_or_default(),
        })
        .collect())
}

/// Checks that each group of co-partitioned topics has one partition count, e.g.
/// `&[&["jobs.v1", "pods.v1"]]`. `metadata` is any client's view of all topics.
pub fn check_copartitioned(metadata: &Metadata, groups: &[&[&str]]) -> Result<(), TopicsError> {
    copartitioned(&partition_counts(metadata), groups)
}

fn copartitioned(counts: &BTreeMap<&str, i32>, groups: &[&[&str]]) -> Result<(), TopicsError> {
    for group in groups {
        let group_counts = group
            .iter()
            .map(|&t| {
                counts
                    .get(t)
                    .map(|&n| (t.to_owned(), n))
                    .ok_or_else(|| TopicsError::NotFound { topic: t.into() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if group_counts.windows(2).any(|w| w[0].1 != w[1].1) {
            return Err(TopicsError::NotCopartitioned { counts: group_counts });
        }
    }
    Ok(())
}

/// Partition counts and cleanup policies of topics that exist (errors), and their other
/// configs (drift: one sentence per config that differs, by topic).
async fn verify<C: ClientContext>(
    admin: &AdminClient<C>,
    specs: &[&TopicSpec],
    counts: &BTreeMap<&str, i32>,
) -> Result<BTreeMap<String, Vec<String>>, TopicsError> {
    for s in specs {
        let actual = counts[s.name.as_str()];
        if actual != s.partitions {
            return Err(TopicsError::WrongPartitions {
                topic: s.name.clone(),
                expected: s.partitions,
                actual,
            });
        }
    }
    let mut drift = BTreeMap::new();
    if specs.is_empty() {
        return Ok(drift);
    }
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let results = describe_topic_configs(admin, &names).await?;
    for (s, result) in specs.iter().zip(results) {
        let config = result.map_err(|code| TopicsError::DescribeConfigs { topic: s.name.clone(), code })?;
        // A principal without DESCRIBE_CONFIGS on the topic gets no error, only no entries.
        if config.entries.is_empty() {
            return Err(TopicsError::DescribeConfigs {
                topic: s.name.clone(),
                code: RDKafkaErrorCode::TopicAuthorizationFailed,
            });
        }
        let actual = config.get("cleanup.policy").and_then(|e| e.value.clone()).unwrap_or_default();
        if !same_policy(&actual, s.cleanup_policy()) {
            return Err(TopicsError::WrongCleanupPolicy {
                topic: s.name.clone(),
                expected: s.cleanup_policy(),
                actual,
            });
        }
        let lines = config_drift(s, |key| config.get(key).and_then(|e| e.value.clone()));
        if !lines.is_empty() {
            drift.insert(s.name.clone(), lines);
        }
    }
    Ok(drift)
}

/// One sentence per config of `spec` the existing topic has another value for.
fn config_drift(spec: &TopicSpec, actual: impl Fn(&str) -> Option<String>) -> Vec<String> {
    spec.config
        .iter()
        .filter(|(key, _)| *key != "cleanup.policy")
        .filter_map(|(key, want)| {
            let have = actual(key).unwrap_or_default();
            (have != *want).then(|| {
                let setting = spec.setting.filter(|_| key == "retention.ms");
                let from = setting.map(|s| format!(" ({s})")).unwrap_or_default();
                let meaning = match (key.as_str(), want.as_str()) {
                    ("retention.ms", "-1") => ": records older than that are deleted, though the pipeline keeps them forever",
                    ("retention.ms", _) => ": records are kept for another time than the pipeline says",
                    ("segment.ms" | "segment.bytes", _) => {
                        ": purged records free disk only once their segment rolls"
                    }
                    _ => "",
                };
                format!(
                    "topic {} has {key}={have}, the pipeline says {key}={want}{from}{meaning}; used as it is                      (kafka-configs.sh --alter --entity-type topics --entity-name {} --add-config {key}={want})",
                    spec.name, spec.name
                )
            })
        })
        .collect()
}

/// The `retention.ms` of each existing topic among `topics` (-1: forever; a compacted-only
/// topic keeps every key's latest record and also reads as -1).
pub async fn retention_ms<C: ClientContext>(
    admin: &AdminClient<C>,
    topics: &[&str],
) -> Result<BTreeMap<String, i64>, TopicsError> {
    per_topic(admin, topics, |value| {
        let deletes = value("cleanup.policy").unwrap_or_default().split(',').any(|p| p.trim() == "delete");
        if deletes { value("retention.ms").and_then(|v| v.parse().ok()).unwrap_or(-1) } else { -1 }
    })
    .await
}

/// The `message.timestamp.after.max.ms` of each topic among `topics`: how far ahead of its
/// clock the broker takes a record's timestamp (Kafka 4: one hour by default; `i64::MAX`
/// when the broker does not say).
pub async fn timestamp_after_max_ms<C: ClientContext>(
    admin: &AdminClient<C>,
    topics: &[&str],
) -> Result<BTreeMap<String, i64>, TopicsError> {
    per_topic(admin, topics, |value| {
        value("message.timestamp.after.max.ms").and_then(|v| v.parse().ok()).unwrap_or(i64::MAX)
    })
    .await
}

/// `read` of each topic's configuration (a config's value by key), by topic name.
async fn per_topic<C: ClientContext>(
    admin: &AdminClient<C>,
    topics: &[&str],
    read: impl Fn(&dyn Fn(&str) -> Option<String>) -> i64,
) -> Result<BTreeMap<String, i64>, TopicsError> {
    let results = describe_topic_configs(admin, topics).await?;
    let mut out = BTreeMap::new();
    for (topic, result) in topics.iter().zip(results) {
        let config =
            result.map_err(|code| TopicsError::DescribeConfigs { topic: (*topic).to_owned(), code })?;
        let value = |key: &str| config.get(key).and_then(|e| e.value.clone());
        out.insert((*topic).to_owned(), read(&value));
    }
    Ok(out)
}

/// A topic's `max.message.bytes` (the largest record batch the broker accepts on it).
pub async fn max_message_bytes<C: ClientContext>(
    admin: &AdminClient<C>,
    topic: &str,
) -> Result<Option<usize>, TopicsError> {
    let results = describe_topic_configs(admin, &[topic]).await?;
    let Some(result) = results.into_iter().next() else { return Ok(None) };
    let config = result.map_err(|code| TopicsError::DescribeConfigs { topic: topic.to_owned(), code })?;
    Ok(config.get("max.message.bytes").and_then(|e| e.value.as_deref()?.parse().ok()))
}

/// `describe_configs` of `topics`, the results in request order (librdkafka keeps it), asked
/// once more after [`DENIED_RETRY_AFTER`] when any topic was denied.
async fn describe_topic_configs<C: ClientContext>(
    admin: &AdminClient<C>,
    topics: &[&str],
) -> Result<Vec<ConfigResourceResult>, TopicsError> {
    let resources: Vec<_> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let mut asked_again = false;
    loop {
        let results = admin
            .describe_configs(&resources, &opts)
            .await
            .map_err(|source| TopicsError::Kafka { operation: "describe configs", source })?;
        if asked_again || !results.iter().any(denied) {
            return Ok(results);
        }
        asked_again = true;
        tokio::time::sleep(DENIED_RETRY_AFTER).await;
    }
}

/// A denial: the error, or (for a principal without DESCRIBE_CONFIGS) no entries.
fn denied(result: &ConfigResourceResult) -> bool {
    match result {
        Ok(config) => config.entries.is_empty(),
        Err(code) => *code == RDKafkaErrorCode::TopicAuthorizationFailed,
    }
}

/// Whether a `cleanup.policy` value (a list such as `compact,delete`) is exactly `expected`.
fn same_policy(actual: &str, expected: &str) -> bool {
    let mut parts: Vec<&str> = actual.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    parts.dedup();
    parts == [expected]
}

/// Polls metadata until every spec's topic shows in it.
async fn wait_visible<C: ClientContext>(
    admin: &AdminClient<C>,
    specs: &[&TopicSpec],
) -> Result<Metadata, TopicsError> {
    let deadline = Instant::now() + ADMIN_TIMEOUT;
    loop {
        let metadata = fetch_metadata(admin)?;
        let counts = partition_counts(&metadata);
        match specs.iter().find(|s| !counts.contains_key(s.name.as_str())) {
            None => return Ok(metadata),
            Some(s) if Instant::now() >= deadline => {
                return Err(TopicsError::NotVisible { topic: s.name.clone(), waited: ADMIN_TIMEOUT });
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Partition counts of the topics that exist.
fn partition_counts(metadata: &Metadata) -> BTreeMap<&str, i32> {
    metadata
        .topics()
        .iter()
        .filter(|t| {
            t.error().is_none_or(|e| RDKafkaErrorCode::from(e) != RDKafkaErrorCode::UnknownTopicOrPartition)
        })
        .map(|t| (t.name(), t.partitions().len() as i32))
        .collect()
}

/// Metadata of all topics. librdkafka's call blocks, so on a multi-threaded runtime the
/// worker hands its other tasks off first.
fn fetch_metadata<C: ClientContext>(admin: &AdminClient<C>) -> Result<Metadata, TopicsError> {
    let fetch = || admin.inner().fetch_metadata(None, ADMIN_TIMEOUT);
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let result = if multi_thread { tokio::task::block_in_place(fetch) } else { fetch() };
    result.map_err(|source| TopicsError::Kafka { operation: "metadata", source })
}

/// `word` as one POSIX shell word.
fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "._-,:=/+@%".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_is_an_authorization_error_or_no_entries() {
        use rdkafka::admin::{ConfigEntry, ConfigResource, ConfigSource, OwnedResourceSpecifier};
        let config = |entries: Vec<ConfigEntry>| -> ConfigResourceResult {
            Ok(ConfigResource { specifier: OwnedResourceSpecifier::Topic("t".into()), entries })
        };
        let entry = ConfigEntry {
            name: "cleanup.policy".into(),
            value: Some("delete".into()),
            source: ConfigSource::Default,
            is_read_only: false,
            is_default: true,
            is_sensitive: false,
        };
        assert!(denied(&config(Vec::new())));
        assert!(!denied(&config(vec![entry])));
        assert!(denied(&Err(RDKafkaErrorCode::TopicAuthorizationFailed)));
        assert!(!denied(&Err(RDKafkaErrorCode::UnknownTopicOrPartition)));
    }

    #[test]
    fn copartitioned_groups_pass_and_mismatches_name_every_count() {
        let counts = BTreeMap::from([("jobs", 6), ("pods", 6), ("sessions", 4)]);
        assert!(copartitioned(&counts, &[&["jobs", "pods"], &["sessions"]]).is_ok());
        let err = copartitioned(&counts, &[&["jobs", "pods"], &["sessions", "pods"]]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "co-partitioned topics must have equal partition counts, refusing to run: \
             sessions has 4, pods has 6"
        );
        assert_eq!(err.reason(), "not_copartitioned");
        assert!(matches!(
            copartitioned(&counts, &[&["jobs", "nope"]]),
            Err(TopicsError::NotFound { topic }) if topic == "nope"
        ));
    }

    #[test]
    fn cleanup_policy_must_match_exactly() {
        assert!(same_policy("compact", "compact"));
        assert!(same_policy("delete", "delete"));
        assert!(!same_policy("compact,delete", "compact"));
        assert!(!same_policy("delete", "compact"));
        assert!(!same_policy("", "delete"));
    }

    #[test]
    fn create_command_carries_everything_needed() {
        let spec = TopicSpec::new("kubefacts.runs-changelog", 6)
            .compacted()
            .with_config("cleanup.policy", "delete")
            .with_config("min.compaction.lag.ms", "0")
            .with_config("message.format", "it's odd");
        assert_eq!(
            spec.create_command("b1:9092,b2:9092", 3),
            "kafka-topics.sh --bootstrap-server b1:9092,b2:9092 --create --topic \
             kubefacts.runs-changelog --partitions 6 --replication-factor 3 \
             --config cleanup.policy=compact --config 'message.format=it'\\''s odd' \
             --config min.compaction.lag.ms=0"
        );
        assert!(TopicSpec::new("t", 1).create_command("b:1", 1).ends_with("--config cleanup.policy=delete"));
    }

    #[test]
    fn differing_configs_of_an_existing_topic_are_reported_naming_the_setting() {
        let spec = TopicSpec::new("kubefacts.job-run-facts.v1", 3)
            .with_config("retention.ms", "-1")
            .with_setting(Some("topics.retention.facts_ms"));
        let actual = |value: &'static str| move |key: &str| (key == "retention.ms").then(|| value.to_owned());
        assert!(config_drift(&spec, actual("-1")).is_empty(), "the same value: nothing to say");
        let drift = config_drift(&spec, actual("604800000"));
        assert_eq!(drift.len(), 1);
        assert!(
            drift[0].starts_with(
                "topic kubefacts.job-run-facts.v1 has retention.ms=604800000, the pipeline says retention.ms=-1 \
                 (topics.retention.facts_ms): records older than that are deleted"
            ),
            "{}",
            drift[0]
        );
        assert!(drift[0].ends_with("--add-config retention.ms=-1)"), "{}", drift[0]);
    }

    #[test]
    fn missing_lists_one_command_per_topic() {
        let err =
            TopicsError::Missing { commands: vec!["kafka-topics.sh a".into(), "kafka-topics.sh b".into()] };
        assert_eq!(
            err.to_string(),
            "2 topic(s) missing and topic creation is off; create them with:\nkafka-topics.sh a\nkafka-topics.sh b"
        );
        assert!(!err.is_retriable());
    }
}
