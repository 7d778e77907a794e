//! Every schema's records go through the real broker in both framings, decode back to the
//! same values, and an independent implementation (fastavro) decodes the same bytes to the
//! same values.

mod support;

use std::time::Duration;

use apache_avro::types::Value;
use kubefacts::codec::{
    Codec, CodecError, Framing, RecordWriter, RegistryClient,
    json::{Timestamps, to_json},
};
use support::{infra, repo_path, sample::sample};

const SEEDS: [u64; 3] = [1, 2, 3]; // seed 3 takes every null branch and empty collection

fn registry_codec(url: &str) -> Codec {
    Codec::new(Some(RegistryClient::new(url, Duration::from_secs(10)).unwrap())).unwrap()
}

/// Produces sample records of every schema to one topic per schema, consumes them, and
/// checks both decoders. Returns the number of records checked.
async fn round_trip_all(codec: &Codec, framing: &str) -> usize {
    let infra = infra();
    let mut checked = 0;
    for known in codec.schemas().all_current() {
        let topic = infra.topic(&format!("rt-{framing}-{}", known.stem), 1).await;
        let writer = codec.value_writer(&topic, &known.full_name).await.unwrap();
        let values: Vec<Value> = SEEDS.iter().map(|s| sample(&known.schema, *s)).collect();
        let encoded: Vec<Vec<u8>> = values.iter().map(|v| writer.encode_value(v).unwrap()).collect();
        let keyed: Vec<_> = encoded.iter().map(|e| (Some("k"), e.clone())).collect();
        infra.produce(&topic, &keyed).await;
        let consumed = infra.consume(&topic, values.len()).await;
        assert_eq!(consumed, encoded, "{}: the broker must hand back the bytes written", known.stem);

        let schema_file = repo_path(&format!("schemas/{}.avsc", known.stem));
        let independent =
            infra.fastavro(framing, (framing == "single-object").then_some(schema_file.as_str()), &consumed);
        for ((bytes, original), theirs) in consumed.iter().zip(&values).zip(&independent) {
            let ours = codec.decode(bytes).await.unwrap();
            assert_eq!(ours.schema_name, known.full_name);
            assert_eq!(&ours.value, original, "{}: kubefacts decodes what it wrote", known.stem);
            assert_eq!(
                theirs["value"],
                to_json(original, Timestamps::EpochMillis),
                "{}: fastavro decodes the same bytes to the same values",
                known.stem
            );
            match ours.framing {
                Framing::Confluent { schema_id } => assert_eq!(theirs["schema_id"], schema_id),
                Framing::SingleObject { fingerprint } => {
                    assert_eq!(theirs["fingerprint"], hex(&fingerprint.to_le_bytes()))
                }
            }
            checked += 1;
        }
    }
    checked
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_framed_records_round_trip_through_the_registry() {
    let codec = registry_codec(&infra().registry);
    let n = round_trip_all(&codec, "confluent").await;
    assert_eq!(n, codec.schemas().all_current().len() * SEEDS.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_object_records_round_trip_without_a_registry() {
    let codec = Codec::new(None).unwrap();
    let n = round_trip_all(&codec, "single-object").await;
    assert_eq!(n, codec.schemas().all_current().len() * SEEDS.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_the_same_schema_twice_yields_the_same_id_and_a_fresh_codec_reads_it() {
    let infra = infra();
    let topic = support::unique_name("ids");
    let name = "io.kubefacts.v1.LeaseObservation";
    let first = registry_codec(&infra.registry).value_writer(&topic, name).await.unwrap();
    let second = registry_codec(&infra.registry).value_writer(&topic, name).await.unwrap();
    assert_eq!(first.framing(), second.framing());
    assert!(matches!(first.framing(), Framing::Confluent { .. }));

    // A codec that never wrote anything resolves the id through the registry.
    let value = sample(&first.schema().schema, 2);
    let bytes = first.encode_value(&value).unwrap();
    let decoded = registry_codec(&infra.registry).decode(&bytes).await.unwrap();
    assert_eq!(decoded.value, value);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_frames_with_unknown_ids_or_without_a_registry_are_clear_errors() {
    let infra = infra();
    let mut unknown = Framing::Confluent { schema_id: 987_654_321 }.header();
    unknown.push(0);
    let err = registry_codec(&infra.registry).decode(&unknown).await.unwrap_err();
    assert!(matches!(err, CodecError::UnknownSchemaId { id: 987_654_321 }), "{err}");

    let err = Codec::new(None).unwrap().decode(&unknown).await.unwrap_err();
    assert!(matches!(err, CodecError::NoRegistry { id: 987_654_321 }), "{err}");
    assert!(err.to_string().contains("no schema registry is configured"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_is_a_retriable_error_naming_the_registry() {
    // Port 9 on loopback: nothing listens there.
    let codec = registry_codec("http://127.0.0.1:9/apis/ccompat/v7");
    let err = codec.value_writer("t", "io.kubefacts.v1.JobRun").await.unwrap_err();
    assert!(err.is_retriable(), "{err}");
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
}

#[tokio::test]
async fn records_written_with_an_older_revision_read_as_the_current_schema() {
    let codec = Codec::new(None).unwrap();
    let r1 = &codec.schemas().revisions("job-observation")[0];
    assert_eq!(r1.revision, Some(1));
    let current = codec.schemas().current("io.kubefacts.v1.JobObservation").unwrap();
    assert_ne!(r1.fingerprint, current.fingerprint, "r2 changed the schema");

    let writer = RecordWriter::new(r1, Framing::SingleObject { fingerprint: r1.fingerprint }).unwrap();
    let old = sample(&r1.schema, 1);
    let decoded = codec.decode(&writer.encode_value(&old).unwrap()).await.unwrap();
    let json = to_json(&decoded.value, Timestamps::EpochMillis);
    // The field r2 added is there, at its default, and everything r1 wrote is kept.
    assert_eq!(json["job"]["spec"]["active_deadline_seconds"], serde_json::Value::Null);
    assert_eq!(json["job"]["meta"], to_json(&old, Timestamps::EpochMillis)["job"]["meta"]);
    assert!(json["job"]["spec"].as_object().unwrap().contains_key("active_deadline_seconds"));
}
