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

/// A renamed field (an alias in the new revision) reads the old field's data: revision 1
/// of coverage-alert wrote `coverage_gaps[].from`/`to`, revision 2 calls them
/// `started_at`/`ended_at`. The golden bytes of r1 decode, typed and generic, with the
/// values under the new names.
#[tokio::test]
async fn a_renamed_field_reads_what_the_old_revision_wrote() {
    let codec = kubefacts::codec::Codec::new(None).unwrap();
    let golden: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(support::repo_path("tests/golden/avro/coverage-alert.r1.json")).unwrap(),
    )
    .unwrap();
    let mut gaps = 0;
    for record in golden["records"].as_array().unwrap() {
        let text = record["single_object_hex"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect();
        let old = record["value"]["coverage_gaps"].as_array().unwrap();
        gaps += old.len();
        let alert: kubefacts::coverage::CoverageAlert = codec.decode_as(&bytes).await.unwrap();
        let read: Vec<(i64, i64)> = alert.coverage_gaps.iter().map(|g| (g.started_at, g.ended_at)).collect();
        let written: Vec<(i64, i64)> =
            old.iter().map(|g| (g["from"].as_i64().unwrap(), g["to"].as_i64().unwrap())).collect();
        assert_eq!(read, written);
        let generic = kubefacts::codec::json::to_json(
            &codec.decode(&bytes).await.unwrap().value,
            kubefacts::codec::json::Timestamps::EpochMillis,
        );
        for (new, old) in generic["coverage_gaps"].as_array().unwrap().iter().zip(old) {
            assert_eq!((&new["started_at"], &new["ended_at"]), (&old["from"], &old["to"]));
        }
    }
    assert!(gaps > 0, "the samples have gaps");
}

/// Registering a subject sets its compatibility to BACKWARD_TRANSITIVE, so the registry
/// enforces what we promise; a level an operator set is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_a_subject_sets_backward_transitive_and_keeps_an_operators_level() {
    let infra = support::infra();
    let registry = RegistryClient::new(&infra.registry, Duration::from_secs(10)).unwrap();
    let codec = kubefacts::codec::Codec::new(Some(registry.clone())).unwrap();
    let (fresh, kept) = (support::unique_name("compat-fresh"), support::unique_name("compat-kept"));
    registry.set_compatibility(&RegistryClient::value_subject(&kept), Compatibility::Full).await.unwrap();
    for topic in [&fresh, &kept] {
        codec.value_writer(topic, "io.kubefacts.v1.JobRun").await.unwrap();
        codec.key_writer(topic, "io.kubefacts.v2.JobRunWindowPartKey").await.unwrap();
    }
    let level = |topic: &str| {
        let registry = registry.clone();
        let subject = RegistryClient::value_subject(topic);
        async move { registry.compatibility(&subject).await.unwrap() }
    };
    assert_eq!(level(&fresh).await, Some(Compatibility::BackwardTransitive));
    assert_eq!(
        registry.compatibility(&RegistryClient::key_subject(&fresh)).await.unwrap(),
        Some(Compatibility::BackwardTransitive),
        "keys too"
    );
    assert_eq!(level(&kept).await, Some(Compatibility::Full), "an operator's level stays");
    // Enforced: the breaking schema is refused under the level we set.
    let breaking =
        fs::read_to_string(support::repo_path("tests/fixtures/evolution/job-observation-breaking.avsc"))
            .unwrap();
    let subject = RegistryClient::value_subject(&support::unique_name("compat-enforced"));
    let codec_subject_topic = subject.trim_end_matches("-value").to_owned();
    codec.value_writer(&codec_subject_topic, "io.kubefacts.v1.JobObservation").await.unwrap();
    let err = registry.register(&subject, &breaking).await.unwrap_err();
    assert!(matches!(err, RegistryError::Incompatible { .. }), "{err}");
}
