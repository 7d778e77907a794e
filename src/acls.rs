//! The Kafka ACLs each component of a pipeline needs, and nothing more (docs/security.md).
//! Derived from the pipeline file the components run with, so a renamed topic or
//! application id changes the list with it; `kubefacts acls` prints it for people (text)
//! and for tools (JSON, the shape `scripts/infra/kafka_admin.py acls apply` reads).
//!
//! Every ACL is ALLOW for host `*`. Kafka lets READ and WRITE imply DESCRIBE, and since
//! Kafka 3.0 (KIP-679) WRITE on a topic implies the idempotent-write permission, so
//! neither is listed. Names are literal except where kubefacts itself makes them up per
//! instance (transactional ids carry the instance id): those are prefixed.

use serde::Serialize;

use crate::{
    config::PipelineConfig,
    observe::InputTopic,
    pipeline::Stage,
    runtime::{
        kafka::{RuntimeConfig, global_group},
        task::runtime_stores,
    },
};

/// A Kafka resource type an ACL is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// A transactional id.
    TransactionalId,
    /// The cluster (`kafka-cluster`).
    Cluster,
}

/// How an ACL's name matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Exactly this name.
    Literal,
    /// Every name starting with it.
    Prefixed,
}

/// A Kafka ACL operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Consume (topics), join and commit (groups).
    Read,
    /// Produce (topics), use (transactional ids).
    Write,
    /// Look up a group's coordinator: the groups a consumer only assigns in.
    Describe,
    /// Read a topic's configuration (the start-up check of cleanup policies).
    DescribeConfigs,
    /// Create topics (`--create-topics` only).
    Create,
    /// Delete records below an offset: `process` purges the repartition topics it committed
    /// past.
    Delete,
}

/// One ACL: ALLOW `operation` on a resource, for the component's principal, from any host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Acl {
    /// The resource type.
    pub resource_type: ResourceType,
    /// The resource's name (a prefix when `pattern` is prefixed).
    pub name: String,
    /// How `name` matches.
    pub pattern: Pattern,
    /// The operation allowed.
    pub operation: Operation,
    /// Why the component needs it (printed in the text form).
    #[serde(skip)]
    pub why: String,
}

/// The ACLs one component needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentAcls {
    /// The component: `watcher`, `process`, `cleaner`, `alerts` or `session-events`.
    pub component: &'static str,
    /// The principal it connects as (`User:<name>`).
    pub principal: String,
    /// Its ACLs, in a stable order.
    pub acls: Vec<Acl>,
}

/// What the list is for.
#[derive(Debug, Clone, Default)]
pub struct AclOptions {
    /// The components start with `--create-topics`: they also need CREATE on their topics.
    pub create_topics: bool,
    /// The principal of each component (`component=User:name`); unnamed components get
    /// `User:kubefacts-<component>`.
    pub principals: Vec<(String, String)>,
}

/// The components in the order they are listed.
pub const COMPONENTS: [&str; 5] = ["watcher", "process", "cleaner", "alerts", "session-events"];

/// Every component's ACLs for `pipeline`.
pub fn acls(pipeline: &PipelineConfig, options: &AclOptions) -> Vec<ComponentAcls> {
    let principal = |component: &str| {
        options
            .principals
            .iter()
            .find(|(c, _)| c == component)
            .map_or_else(|| format!("User:kubefacts-{component}"), |(_, p)| p.clone())
    };
    let topics = &pipeline.topics;
    let app = &pipeline.process.application_id;
    let dead_letter = topics.full(&topics.dead_letter);
    let mut out = Vec::new();

    // The watcher: observations and heartbeats to every input topic (heartbeats go to all
    // of them, sessions.v1 included).
    let mut watcher = List::default();
    for t in InputTopic::ALL {
        watcher.topic(&t.topic_name(topics), Operation::Write, "publishes observations and heartbeats");
        if options.create_topics {
            watcher.topic(&t.topic_name(topics), Operation::Create, "--create-topics");
            watcher.topic(&t.topic_name(topics), Operation::DescribeConfigs, "--create-topics checks it");
        }
    }
    out.push(watcher.done("watcher", principal("watcher")));

    // `process`: one application, every stage of the file in one consumer group.
    let mut process = List::default();
    for stage in &pipeline.process.stages {
        let why = |what: &str| format!("[{}] {what}", stage.name());
        // Only for the names it derives (changelogs, the restore group).
        let cfg = RuntimeConfig::new("", app, "", stage.name());
        for t in stage.inputs.iter().chain(&stage.globals) {
            process.topic(t, Operation::Read, &why("reads it"));
            process.topic(t, Operation::DescribeConfigs, &why("checks it at start"));
        }
        for t in &pipeline.purged_inputs(stage) {
            process.topic(t, Operation::Delete, &why("deletes what the group committed past"));
        }
        for t in &stage.outputs {
            process.topic(t, Operation::Write, &why("writes it"));
            process.topic(t, Operation::DescribeConfigs, &why("checks it at start"));
        }
        process.add(
            ResourceType::Group,
            &cfg.restore_group(),
            Pattern::Literal,
            Operation::Describe,
            &why("restores in it (assigned, never joined)"),
        );
        if !stage.globals.is_empty() {
            process.add(
                ResourceType::Group,
                &global_group(app),
                Pattern::Literal,
                Operation::Describe,
                "reads global inputs in it (assigned, never joined)",
            );
        }
        let stores = Stage::named(&stage.processor).map(|s| s.stores.to_vec()).unwrap_or_default();
        for store in stores.into_iter().chain(runtime_stores(!stage.globals.is_empty())) {
            let changelog = cfg.changelog_topic(store);
            process.topic(&changelog, Operation::Read, &why("restores its state"));
            process.topic(&changelog, Operation::Write, &why("changelogs its state"));
            process.topic(&changelog, Operation::DescribeConfigs, &why("checks it at start"));
        }
        if options.create_topics {
            for t in stage.inputs.iter().chain(&stage.outputs) {
                process.topic(t, Operation::Create, "--create-topics");
            }
            process.add(
                ResourceType::Topic,
                &format!("{app}-{}-", stage.name()),
                Pattern::Prefixed,
                Operation::Create,
                "--create-topics: changelogs",
            );
        }
    }
    process.topic(&dead_letter, Operation::Write, "dead-letters what it cannot process");
    process.topic(&dead_letter, Operation::DescribeConfigs, "checks it at start");
    if options.create_topics {
        process.topic(&dead_letter, Operation::Create, "--create-topics");
    }
    process.add(ResourceType::Group, app, Pattern::Literal, Operation::Read, "its consumer group");
    process.add(
        ResourceType::TransactionalId,
        &format!("{app}-"),
        Pattern::Prefixed,
        Operation::Write,
        "one transactional id per stream thread: <application_id>-<instance>-<thread>",
    );
    out.push(process.done("process", principal("process")));

    // The cleaner: decisions in, outcomes and dead letters out, in its own group.
    let mut cleaner = List::default();
    let decisions = topics.full(&topics.cleanup_decisions);
    let outcomes = topics.full(&topics.cleanup_outcomes);
    cleaner.topic(&decisions, Operation::Read, "reads the cleanup decisions");
    cleaner.topic(&outcomes, Operation::Write, "writes the outcomes");
    cleaner.topic(&dead_letter, Operation::Write, "dead-letters undecodable decisions");
    // It checks only the topics it would create, so it reads no configuration otherwise.
    for t in [&decisions, &outcomes, &dead_letter] {
        if options.create_topics {
            cleaner.topic(t, Operation::Create, "--create-topics");
            cleaner.topic(t, Operation::DescribeConfigs, "--create-topics checks it");
        }
    }
    cleaner.add(
        ResourceType::Group,
        &format!("{app}-cleaner"),
        Pattern::Literal,
        Operation::Read,
        "its consumer group",
    );
    cleaner.add(
        ResourceType::Group,
        &format!("{app}-cleaner-dry-run"),
        Pattern::Literal,
        Operation::Read,
        "its consumer group in a dry run",
    );
    // One prefix for both: <app>-cleaner-<instance> and <app>-cleaner-dry-run-<instance>.
    cleaner.add(
        ResourceType::TransactionalId,
        &format!("{app}-cleaner-"),
        Pattern::Prefixed,
        Operation::Write,
        "its transactional id: <group>-<instance>",
    );
    out.push(cleaner.done("cleaner", principal("cleaner")));

    // The alerts forwarder: reads the alerts topic from the start, outside any group.
    let mut alerts = List::default();
    alerts.topic(&topics.full(&topics.coverage_alerts), Operation::Read, "reads the coverage alerts");
    alerts.add(
        ResourceType::Group,
        &format!("{app}-alerts"),
        Pattern::Literal,
        Operation::Describe,
        "reads in it (assigned, never joined, nothing committed)",
    );
    out.push(alerts.done("alerts", principal("alerts")));

    // A host application publishing sessions (`kubefacts session-event`).
    let mut sessions = List::default();
    sessions.topic(&InputTopic::Sessions.topic_name(topics), Operation::Write, "publishes session events");
    out.push(sessions.done("session-events", principal("session-events")));
    out
}

/// A component's ACLs being gathered: each once, sorted at the end.
#[derive(Default)]
struct List(Vec<Acl>);

impl List {
    fn topic(&mut self, name: &str, operation: Operation, why: &str) {
        self.add(ResourceType::Topic, name, Pattern::Literal, operation, why);
    }

    fn add(
        &mut self,
        resource_type: ResourceType,
        name: &str,
        pattern: Pattern,
        operation: Operation,
        why: &str,
    ) {
        let same = |a: &&mut Acl| {
            a.resource_type == resource_type
                && a.name == name
                && a.pattern == pattern
                && a.operation == operation
        };
        match self.0.iter_mut().find(|a| same(a)) {
            Some(a) if !a.why.contains(why) => {
                a.why.push_str("; ");
                a.why.push_str(why);
            }
            Some(_) => {}
            None => self.0.push(Acl {
                resource_type,
                name: name.to_owned(),
                pattern,
                operation,
                why: why.to_owned(),
            }),
        }
    }

    fn done(mut self, component: &'static str, principal: String) -> ComponentAcls {
        self.0.sort();
        ComponentAcls { component, principal, acls: self.0 }
    }
}

/// The list as text: per component, one `kafka-acls.sh` command per ACL (add
/// `--bootstrap-server` and an admin's `--command-config`) and why it is needed.
pub fn to_text(components: &[ComponentAcls]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for c in components {
        let _ = writeln!(s, "# {} ({}): {} ACLs", c.component, c.principal, c.acls.len());
        for a in &c.acls {
            let resource = match a.resource_type {
                ResourceType::Topic => "--topic",
                ResourceType::Group => "--group",
                ResourceType::TransactionalId => "--transactional-id",
                ResourceType::Cluster => "--cluster",
            };
            let pattern = match a.pattern {
                Pattern::Literal => "",
                Pattern::Prefixed => " --resource-pattern-type prefixed",
            };
            let operation = match a.operation {
                Operation::Read => "Read",
                Operation::Write => "Write",
                Operation::Describe => "Describe",
                Operation::DescribeConfigs => "DescribeConfigs",
                Operation::Create => "Create",
                Operation::Delete => "Delete",
            };
            let _ = writeln!(
                s,
                "kafka-acls.sh --add --allow-principal {} --operation {operation}{pattern} {resource} {}    # {}",
                c.principal, a.name, a.why
            );
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests;
