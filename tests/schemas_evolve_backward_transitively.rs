//! Each schema reads data written by every frozen revision (BACKWARD_TRANSITIVE), the
//! current file is frozen as its latest revision, and a breaking change is rejected — by
//! our checker and by the real registry alike.

mod support;

use std::{fs, time::Duration};

use kubefacts::codec::{
    KnownSchema, RegistryClient, RegistryError, SchemaSet,
    evolution::{EvolutionError, check_all, check_history},
    registry::Compatibility,
};

fn load(path: &str, stem: &str, revision: Option<u32>) -> KnownSchema {
    let text = fs::read_to_string(support::repo_path(path)).unwrap();
    KnownSchema::parse(stem, revision, &text, path).unwrap()
}

#[test]
fn every_embedded_schema_reads_all_of_its_frozen_revisions() {
    let set = SchemaSet::embedded().unwrap();
    assert_eq!(check_all(set), vec![], "run `kubefacts schemas --check` for details");
    for s in set.all_current() {
        assert!(!set.revisions(&s.stem).is_empty(), "{} has no frozen revision", s.stem);
    }
    // The check has a real history to run against: job-observation r1 → r2.
    let revs = set.revisions("job-observation");
    assert_eq!(revs.iter().map(|r| r.revision).collect::<Vec<_>>(), [Some(1), Some(2)]);
    assert_ne!(revs[0].fingerprint, revs[1].fingerprint);
}

#[test]
fn a_breaking_change_is_rejected_naming_the_field() {
    let set = SchemaSet::embedded().unwrap();
    let revs = set.revisions("job-observation");
    let mut breaking = load(
        "tests/fixtures/evolution/job-observation-breaking.avsc",
        "job-observation",
        Some(revs.len() as u32 + 1),
    );
    let history: Vec<&KnownSchema> = revs.iter().map(AsRef::as_ref).chain([&breaking]).collect();
    let errors = check_history("job-observation", &breaking, &history);
    // It breaks against every earlier revision, transitively.
    assert_eq!(errors.len(), revs.len(), "{errors:#?}");
    for (e, older) in errors.iter().zip(1..) {
        let EvolutionError::Incompatible { older: o, newer, reason, .. } = e else { panic!("{e:?}") };
        assert_eq!((*o, *newer), (older, 3));
        assert!(reason.contains("observed_generation"), "{reason}");
    }

    // Mutation check of the freezing rule: the same breaking text as "current" next to an
    // unchanged history is reported as unfrozen.
    breaking.revision = None;
    let errors = check_history("job-observation", &breaking, revs);
    assert!(
        errors.contains(&EvolutionError::CurrentDiffersFromLatest {
            stem: "job-observation".into(),
            latest: 2
        }),
        "{errors:#?}"
    );
}

#[test]
fn renaming_a_record_is_a_new_major_not_a_revision() {
    let r1 = load("schemas/revisions/lease-observation/r1.avsc", "lease-observation", Some(1));
    let renamed_text = r1.text.replacen("\"LeaseObservation\"", "\"LeaseSeen\"", 1);
    let renamed = KnownSchema::parse("lease-observation", Some(2), &renamed_text, "renamed").unwrap();
    let errors = check_history("lease-observation", &renamed, &[&r1, &renamed]);
    assert!(matches!(errors.as_slice(), [EvolutionError::Renamed { newer: 2, .. }]), "{errors:#?}");
}

/// The registry, an independent implementation, agrees: with BACKWARD_TRANSITIVE set it
/// accepts the revisions in order and refuses the breaking change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_enforces_the_same_rule() {
    let infra = support::infra();
    let registry = RegistryClient::new(&infra.registry, Duration::from_secs(10)).unwrap();
    let subject = RegistryClient::value_subject(&support::unique_name("evolution"));
    registry.set_compatibility(&subject, Compatibility::BackwardTransitive).await.unwrap();

    let set = SchemaSet::embedded().unwrap();
    let mut ids = Vec::new();
    for rev in set.revisions("job-observation") {
        ids.push(registry.register(&subject, &rev.text).await.unwrap());
    }
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "r2 is a new version");

    let breaking =
        fs::read_to_string(support::repo_path("tests/fixtures/evolution/job-observation-breaking.avsc"))
            .unwrap();
    assert!(!registry.is_compatible(&subject, &breaking).await.unwrap());
    let err = registry.register(&subject, &breaking).await.unwrap_err();
    assert!(matches!(err, RegistryError::Incompatible { .. }), "{err}");
    assert!(!err.is_retriable());
}
