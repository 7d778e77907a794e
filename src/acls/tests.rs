use super::*;

fn default_acls(options: &AclOptions) -> Vec<ComponentAcls> {
    acls(&PipelineConfig::embedded_default().expect("default pipeline"), options)
}

fn has(
    c: &ComponentAcls,
    resource_type: ResourceType,
    name: &str,
    pattern: Pattern,
    operation: Operation,
) -> bool {
    c.acls.iter().any(|a| {
        a.resource_type == resource_type && a.name == name && a.pattern == pattern && a.operation == operation
    })
}

fn component<'a>(all: &'a [ComponentAcls], name: &str) -> &'a ComponentAcls {
    all.iter().find(|c| c.component == name).expect(name)
}

#[test]
fn every_component_is_listed_once_with_a_default_principal() {
    let all = default_acls(&AclOptions::default());
    let names: Vec<&str> = all.iter().map(|c| c.component).collect();
    assert_eq!(names, COMPONENTS);
    assert_eq!(component(&all, "cleaner").principal, "User:kubefacts-cleaner");
    let named = default_acls(&AclOptions {
        principals: vec![("cleaner".into(), "User:janitor".into())],
        ..AclOptions::default()
    });
    assert_eq!(component(&named, "cleaner").principal, "User:janitor");
    assert_eq!(component(&named, "process").principal, "User:kubefacts-process");
}

#[test]
fn process_reads_its_inputs_writes_its_outputs_and_owns_its_changelogs() {
    let pipeline = PipelineConfig::embedded_default().expect("default pipeline");
    let all = acls(&pipeline, &AclOptions::default());
    let process = component(&all, "process");
    let app = &pipeline.process.application_id;
    for stage in &pipeline.process.stages {
        for t in stage.inputs.iter().chain(&stage.globals) {
            assert!(has(process, ResourceType::Topic, t, Pattern::Literal, Operation::Read), "read {t}");
        }
        for t in &stage.outputs {
            assert!(has(process, ResourceType::Topic, t, Pattern::Literal, Operation::Write), "write {t}");
        }
        let def = Stage::named(&stage.processor).expect("known stage");
        for store in def.stores {
            let changelog = format!("{app}-{}-{store}-changelog", stage.name());
            assert!(
                has(process, ResourceType::Topic, &changelog, Pattern::Literal, Operation::Read),
                "{changelog}"
            );
            assert!(
                has(process, ResourceType::Topic, &changelog, Pattern::Literal, Operation::Write),
                "{changelog}"
            );
        }
    }
    assert!(has(process, ResourceType::Group, app, Pattern::Literal, Operation::Read));
    assert!(has(
        process,
        ResourceType::TransactionalId,
        &format!("{app}-"),
        Pattern::Prefixed,
        Operation::Write
    ));
    // Least privilege: nothing on the cluster, no topic prefix, no CREATE unless asked.
    assert!(process.acls.iter().all(|a| a.resource_type != ResourceType::Cluster));
    assert!(
        process.acls.iter().all(|a| a.resource_type != ResourceType::Topic || a.pattern == Pattern::Literal)
    );
    assert!(all.iter().flat_map(|c| &c.acls).all(|a| a.operation != Operation::Create));
}

#[test]
fn process_deletes_records_of_its_repartition_topics_only() {
    let pipeline = PipelineConfig::embedded_default().expect("default pipeline");
    let all = acls(&pipeline, &AclOptions::default());
    let deleted: Vec<&str> = (all.iter().flat_map(|c| c.acls.iter().map(move |a| (c.component, a))))
        .filter(|(_, a)| a.operation == Operation::Delete)
        .map(|(component, a)| {
            assert_eq!(component, "process", "{a:?}");
            a.name.as_str()
        })
        .collect();
    let topics = &pipeline.topics;
    let mut expected =
        vec![topics.full(&topics.journal_repartition), topics.full(&topics.session_owner_repartition)];
    expected.sort();
    let mut got: Vec<String> = deleted.iter().map(|s| s.to_string()).collect();
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn create_topics_adds_create_and_nothing_else_changes() {
    let plain = default_acls(&AclOptions::default());
    let creating = default_acls(&AclOptions { create_topics: true, ..AclOptions::default() });
    for (p, c) in plain.iter().zip(&creating) {
        let extra: Vec<&Acl> = c.acls.iter().filter(|a| !p.acls.contains(a)).collect();
        assert!(
            extra
                .iter()
                .all(|a| a.operation == Operation::Create || a.operation == Operation::DescribeConfigs),
            "{}: {extra:?}",
            c.component
        );
        assert!(p.acls.iter().all(|a| c.acls.contains(a)), "{}", c.component);
    }
    assert!(component(&creating, "watcher").acls.iter().any(|a| a.operation == Operation::Create));
}

#[test]
fn no_acl_is_listed_twice_and_each_says_why() {
    for c in default_acls(&AclOptions { create_topics: true, ..AclOptions::default() }) {
        let mut keys: Vec<_> =
            c.acls.iter().map(|a| (a.resource_type, &a.name, a.pattern, a.operation)).collect();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "{}", c.component);
        assert!(c.acls.iter().all(|a| !a.why.is_empty()), "{}", c.component);
    }
}

#[test]
fn json_has_the_shape_the_admin_script_reads() {
    let all = default_acls(&AclOptions::default());
    let v = serde_json::to_value(serde_json::json!({ "components": all })).expect("json");
    let first = &v["components"][0];
    assert_eq!(first["component"], "watcher");
    assert_eq!(first["principal"], "User:kubefacts-watcher");
    let acl = &first["acls"][0];
    assert_eq!(acl["resource_type"], "topic");
    assert_eq!(acl["pattern"], "literal");
    assert_eq!(acl["operation"], "write");
    assert!(acl.get("why").is_none());
    let text = to_text(&all);
    assert!(
        text.contains(
            "kafka-acls.sh --add --allow-principal User:kubefacts-process --operation Read --group kubefacts"
        ),
        "{text}"
    );
    assert!(text.contains("--resource-pattern-type prefixed --transactional-id kubefacts-"), "{text}");
}
